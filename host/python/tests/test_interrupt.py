"""Ctrl-C in a Python program stops its devices (no device process outlives it), and
reaches a program waiting on its workers within a slice of the wait."""

import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import alive, children_of
from test_runtime import main_job_program

PROGRAM = textwrap.dedent(
    """
    import signal, sys, time
    import numpy as np
    import tessera

    # Ctrl-C as a terminal starts Python with it (a launcher that ignores SIGINT, as a
    # shell does for a background job, would pass the ignoring on).
    signal.signal(signal.SIGINT, signal.default_int_handler)

    sess = tessera.Session("process", workers=3)
    x = sess.copy_to_worker0(np.ones(4, np.float32))
    print("ready", flush=True)
    while True:  # the program's own loop, Ctrl-C ends it
        sess.sync_all()
        time.sleep(0.01)
    """
)


def test_ctrl_c_stops_every_device_process():
    program = subprocess.Popen(
        [sys.executable, "-c", PROGRAM],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Waited for with a deadline: a child that never starts fails the test, not CI.
        ready, _, _ = select.select([program.stdout], [], [], 60)
        assert ready, "the program did not start its session within 60 s"
        assert program.stdout.readline().strip() == "ready", program.stderr.read()
        # Each device process, and beside each the watcher that kills it if this process
        # dies without a word: every one of them must be gone after Ctrl-C.
        devices = children_of(program.pid)
        serving = [pid for pid in devices if b"device" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(serving) == 3 and all(alive(pid) for pid in devices)
        program.send_signal(signal.SIGINT)
        program.wait(timeout=30)
        assert "KeyboardInterrupt" in program.stderr.read()
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in devices) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in devices), "a device process outlived Ctrl-C"
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()


def test_a_session_leaves_pythons_ctrl_c_handler_in_place():
    # Ctrl-C stays Python's KeyboardInterrupt: the package installs no signal handler
    # (the command line's would end the interpreter instead), not when it is imported,
    # not when devices start. Python's own handler is put in place first: under a launcher
    # that ignores SIGINT (a background job), the interpreter starts without it.
    import tessera

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with tessera.Session("process", workers=1):
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        runtime = tessera.Runtime(main_job_program(), 4, "process")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        del runtime
    finally:
        signal.signal(signal.SIGINT, before)


LONG_WAIT = textwrap.dedent(
    """
    import signal, sys, time
    import numpy as np
    import tessera

    signal.signal(signal.SIGINT, signal.default_int_handler)
    sess = tessera.Session(sys.argv[1], workers=1, memory=96 << 20)
    n = 1024
    a = sess.copy_to_worker0(np.ones((n, n), np.float32))
    matmul = sess.get_function("matmul")
    start = time.monotonic()
    sess.call(matmul, a, a)
    sess.sync_all()
    once = time.monotonic() - start
    # Queued kernels worth at least 5 s of the worker's time.
    for _ in range(max(1, int(5 / max(once, 1e-3)))):
        product = sess.call(matmul, a, a)
    print("ready", flush=True)
    try:
        sess.sync_all()
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    sess.sync_all()  # the kernels still ran, in order: the session is usable
    print(sess.copy_from_worker0(product)[0, 0], flush=True)
    """
)


@pytest.mark.parametrize("placement", ["thread", "process"])
def test_ctrl_c_reaches_a_long_wait_within_a_slice(placement):
    """Caught: Ctrl-C arrived only when the running command returned (46.5 s behind a long
    matmul). A wait now looks for signals every 0.1 s; the commands sent keep running and
    the next sync finds them done."""
    program = subprocess.Popen(
        [sys.executable, "-c", LONG_WAIT, placement],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([program.stdout], [], [], 120)
        assert ready, "the program did not start within 120 s"
        assert program.stdout.readline().strip() == "ready", program.stderr.read()
        time.sleep(0.3)
        sent = time.monotonic()
        program.send_signal(signal.SIGINT)
        ready, _, _ = select.select([program.stdout], [], [], 30)
        assert ready, "nothing printed within 30 s of Ctrl-C"
        line = program.stdout.readline().strip()
        took = time.monotonic() - sent
        assert line == "interrupted", (line, program.stderr.read())
        assert took < 1.0, f"KeyboardInterrupt arrived {took:.2f} s after Ctrl-C"
        out, err = program.communicate(timeout=120)
        assert out.strip() == "1024.0", (out, err)
        assert program.returncode == 0, err
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()
