"""tessera: data movement for replicated accelerators, from Python.

The SPMD session (TVM Disco's controller and workers) and the device runtime
(PopART's Devicex) over NumPy arrays, running on simulated accelerators in
threads, child processes or QEMU, or on boards flashed with the firmware on
serial ports::

    import numpy as np
    import tessera

    with tessera.Session("thread", workers=4) as sess:
        x = sess.copy_to_worker0(np.arange(6, dtype=np.float32).reshape(2, 3))
        y = sess.call("add_one", x)
        sess.sync_worker(0)
        print(sess.copy_from_worker0(y))

Every failure of tessera raises a subclass of :class:`TesseraError` carrying the
Rust error's message and ``kind``; wrong Python input raises ``TypeError`` or
``ValueError`` before anything reaches a device.
"""

from tessera._native import (
    HAS_MPI,
    MAX_REGISTERS,
    CheckpointError,
    ExecutableError,
    Function,
    Program,
    ProgramError,
    Register,
    Runtime,
    RuntimeError,
    Session,
    SessionError,
    TesseraError,
    TraceError,
    __version__,
    initial_weights,
    spirals,
)

# No signal handler is installed: Ctrl-C stays Python's KeyboardInterrupt. No device
# outlives the interpreter all the same: each device process and QEMU has a watcher
# that stops it once this process is gone, however it ends.

# `tessera.RuntimeError` stays out of `import *`, which would hide Python's own.
__all__ = [
    "HAS_MPI",
    "MAX_REGISTERS",
    "CheckpointError",
    "ExecutableError",
    "Function",
    "Program",
    "ProgramError",
    "Register",
    "Runtime",
    "Session",
    "SessionError",
    "TesseraError",
    "TraceError",
    "__version__",
    "initial_weights",
    "spirals",
]
