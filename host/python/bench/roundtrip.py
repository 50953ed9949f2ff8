"""Python against Rust, measured in one run on one session: a 64 MiB NumPy array to
worker 0 and back, and a call + sync of every worker.

    python host/python/bench/roundtrip.py

Each Python figure is printed beside the Rust API's figure for the same operation on the
same session (timed in Rust by `tessera._native`), and the ratio of their speeds.
"""

import platform
import time

import numpy as np

import tessera
from tessera import _native

BYTES = 64 << 20
REPEATS = 10
CALLS = 2000


def best(f, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def round_trip(sess, in_place):
    a = np.arange(BYTES // 4, dtype=np.float32)
    out = np.empty_like(a)
    reg = sess.copy_to_worker0(a)

    def once():
        if in_place:
            sess.copy_to_worker0_into(a, reg)
            sess.copy_from_worker0_into(reg, out)
        else:
            sess.copy_from_worker0(sess.copy_to_worker0(a))

    seconds = best(once, REPEATS)
    if in_place:
        assert np.array_equal(out, a)
    return seconds


def call_sync(sess):
    add = sess.get_function("add")
    start = time.perf_counter()
    for _ in range(CALLS):
        sess.call(add, 1, 2)
        sess.sync_all()
    return (time.perf_counter() - start) / CALLS


def main():
    print(f"tessera {tessera.__version__}, Python {platform.python_version()}, "
          f"NumPy {np.__version__}, {platform.machine()}, {time.strftime('%Y-%m-%d')}")
    print(f"{'placement':<10}{'operation':<38}{'Python':>12}{'Rust':>12}{'ratio':>8}")
    for placement in ["thread", "process"]:
        with tessera.Session(placement, workers=4, memory=3 * BYTES) as sess:
            for in_place, name in [(True, "64 MiB to worker 0 and back, in place"),
                                   (False, "64 MiB to worker 0 and back, new")]:
                py = round_trip(sess, in_place)
                rust = _native._baseline_round_trip(sess, BYTES, REPEATS, in_place)
                mbps = lambda s: 2 * BYTES / s / 1e6
                print(f"{placement:<10}{name:<38}{mbps(py):>8.0f} MB/s{mbps(rust):>7.0f} MB/s"
                      f"{rust / py:>7.2f}x")
            py = call_sync(sess)
            rust = _native._baseline_call_sync(sess, CALLS)
            print(f"{placement:<10}{'call + sync of 4 workers':<38}{py * 1e6:>9.1f} us"
                  f"{rust * 1e6:>9.1f} us{rust / py:>7.2f}x")


if __name__ == "__main__":
    main()
