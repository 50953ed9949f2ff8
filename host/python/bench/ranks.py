"""Python against Rust across the ranks of an MPI job, measured in one run on one session:
a sum allreduce of 16 MiB of float32 per worker, and a call + sync of every worker.

    mpirun -np 2 python host/python/bench/ranks.py

4 workers in threads, 2 per rank (the Rust bench `--bench ranks` runs the same shape).
Rank 0 prints each Python figure beside the Rust API's for the same operation on the same
session (timed in Rust by `tessera._native`), and the ratio of their speeds; the other
ranks serve their workers and print nothing.
"""

import platform
import time

import numpy as np

import tessera
from tessera import _native

WORKERS = 4
ELEMENTS = 4 << 20  # 16 MiB of float32
REPEATS = 7
CALLS = 200


def median(f, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return sorted(times)[repeats // 2]


def main():
    with tessera.Session("thread", workers=WORKERS, memory=3 * ELEMENTS * 4 + (8 << 20)) as sess:
        # Only rank 0 gets here.
        print(f"tessera {tessera.__version__}, Python {platform.python_version()}, "
              f"NumPy {np.__version__}, {platform.machine()}, {time.strftime('%Y-%m-%d')}")
        print(f"{'operation (4 workers, 2 per rank)':<44}{'Python':>12}{'Rust':>12}{'ratio':>8}")
        src, dst = sess.empty((ELEMENTS,)), sess.empty((ELEMENTS,))
        py = median(lambda: sess.allreduce(src, dst, "sum"), REPEATS)
        src.free()  # room for the baseline's two
        dst.free()
        rust = _native._baseline_allreduce(sess, ELEMENTS, REPEATS)
        print(f"{'allreduce of 16 MiB per worker':<44}{py * 1e3:>9.2f} ms{rust * 1e3:>9.2f} ms"
              f"{rust / py:>7.2f}x")
        add = sess.get_function("add")
        start = time.perf_counter()
        for _ in range(CALLS):
            sess.call(add, 1, 2)
            sess.sync_all()
        py = (time.perf_counter() - start) / CALLS
        rust = _native._baseline_call_sync(sess, CALLS)
        print(f"{'call + sync of every worker':<44}{py * 1e6:>9.1f} us{rust * 1e6:>9.1f} us"
              f"{rust / py:>7.2f}x")


if __name__ == "__main__":
    main()
