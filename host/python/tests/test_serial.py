"""The serial placement from Python: boards on serial ports, here pseudo-terminals whose
other end a `tessera device` process serves (a board as far as the port can tell). The
firmware under QEMU on a pty is test_qemu.py's."""

import os
import subprocess
from contextlib import ExitStack

import pytest

import tessera
from conftest import copies_calls_and_reduces, tessera_command


@pytest.fixture
def boards():
    """Makes boards: `boards(n)` is the ports of `n` ptys, replica i's served on the other
    end of port i; all stopped at the end of the test."""
    with ExitStack() as stack:

        def make(n):
            return [stack.enter_context(_board(replica)) for replica in range(n)]

        yield make


class _board:
    """A pty and the `tessera device` serving its master end; the slave's path."""

    def __init__(self, replica):
        self.replica = replica

    def __enter__(self):
        # The slave end stays open here: a pty whose slave was never opened, or was closed,
        # fails its master's reads, and the device would end before the session opens it.
        self.master, self.slave = os.openpty()
        self.device = subprocess.Popen(
            [tessera_command(), "device", "--replica", str(self.replica), "--memory", str(1 << 20)],
            stdin=self.master,
            stdout=self.master,
        )
        return os.ttyname(self.slave)

    def __exit__(self, *exc):
        self.device.kill()
        self.device.wait()
        os.close(self.slave)
        os.close(self.master)
        return False


def test_a_session_on_serial_ports_copies_calls_and_reduces(boards):
    with tessera.Session("serial", workers=2, ports=boards(2)) as sess:
        copies_calls_and_reduces(sess)


def test_the_serial_placement_needs_its_ports_and_nothing_else_takes_them():
    with pytest.raises(ValueError, match=r"ports=\[PATH, \.\.\.\]"):
        tessera.Session("serial", workers=1)
    with pytest.raises(ValueError, match='for placement "serial" only'):
        tessera.Session("thread", workers=1, ports=["/dev/ttyACM0"])
    with pytest.raises(ValueError, match="50 to 12000000 baud"):
        tessera.Session("serial", workers=1, ports=["/dev/ttyACM0"], baud=0)
    with pytest.raises(ValueError, match="none of"):
        tessera.Runtime(tessera.Program(), 1, "serial-port")


def test_a_port_that_is_missing_or_a_file_is_refused_by_name(tmp_path, boards):
    with pytest.raises(tessera.SessionError, match="/dev/tessera-no-such-port: no such device") as e:
        tessera.Session("serial", workers=1, ports=["/dev/tessera-no-such-port"])
    assert e.value.kind == "Transport"
    file = tmp_path / "not-a-port"
    file.write_bytes(b"hello")
    with pytest.raises(tessera.SessionError, match="it is a regular file, not a terminal"):
        tessera.Session("serial", workers=1, ports=[file])
    with pytest.raises(tessera.SessionError, match="one port per device: 2 devices, 1 ports"):
        tessera.Session("serial", workers=2, ports=boards(1))
