"""The session and the runtime from Python on the firmware under QEMU (the Cortex-M4F
board): the same results as on threads; and the session on the same firmware with UART0 on
a pty, through the serial placement, as boards on serial ports."""

import subprocess
import threading
from contextlib import ExitStack

import tessera
from conftest import copies_calls_and_reduces
from test_runtime import REPLICAS, SAMPLES, SEED, main_job_program, start, train


def test_a_session_on_qemu_copies_calls_and_reduces(firmware):
    with tessera.Session("qemu", workers=2, firmware=firmware) as sess:
        copies_calls_and_reduces(sess)
        assert [sess.debug_get(sess.call("replica_id"), w) for w in range(2)] == [0, 1]


def test_the_main_job_on_qemu_trains_as_on_threads(firmware):
    data = tessera.spirals(SAMPLES, 3, SEED)
    on_threads = train(start("thread"), 0, 2, data)
    program = main_job_program()
    runtime = tessera.Runtime(program, REPLICAS, "qemu", firmware=firmware)
    try:
        runtime.set_random_seed(SEED)
        runtime.weights_from_host(tessera.initial_weights(program, REPLICAS, SEED))
        on_qemu = train(runtime, 0, 2, data)
    finally:
        del runtime  # its QEMUs stop now, not when a failure's traceback lets go of them
    # f32 on both, the same operations in the same order: the same losses to 5 digits.
    assert [f"{l:.5f}" for l in on_qemu] == [f"{l:.5f}" for l in on_threads]


def _pty_board(stack, firmware, folder):
    """The firmware under QEMU in `folder` (empty: no bulk file), UART0 on a pty; its path.
    QEMU says which pty it made ("char device redirected to /dev/pts/N"), on stdout or
    stderr depending on its version: both are read."""
    folder.mkdir()
    qemu = subprocess.Popen(
        ["qemu-system-arm", "-machine", "mps2-an386", "-cpu", "cortex-m4",
         "-display", "none", "-monitor", "none",
         "-semihosting-config", "enable=on,target=native",
         "-serial", "pty", "-kernel", str(firmware)],
        cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    stack.callback(qemu.wait)
    stack.callback(qemu.kill)
    said = b"char device redirected to "
    for line in qemu.stdout:
        if said in line:
            port = line.split(said, 1)[1].split()[0].decode()
            break
    else:
        raise AssertionError(f"QEMU named no pty (status {qemu.wait()})")
    # The rest is the firmware's defmt logs: drained, so that QEMU never blocks on them.
    threading.Thread(target=qemu.stdout.read, daemon=True).start()
    return port


def test_a_session_on_serial_ports_under_qemu(firmware, tmp_path):
    with ExitStack() as stack:
        ports = [_pty_board(stack, firmware, tmp_path / f"board{i}") for i in range(2)]
        with tessera.Session("serial", workers=2, ports=ports) as sess:
            copies_calls_and_reduces(sess)
            assert [sess.debug_get(sess.call("replica_id"), w) for w in range(2)] == [0, 1]
