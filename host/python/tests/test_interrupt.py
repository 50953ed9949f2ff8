"""Ctrl-C in a Python program stops its devices: no device process outlives it."""

import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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
