"""One script for every rank of `mpirun -np N python across_ranks.py MODE ...`, run by
test_ranks.py (and by hand): the package's session and runtime across the ranks of an MPI
job, each result checked against what one host computes.

    session PLACEMENT        rank 0 runs a session of 4 workers spread over the ranks: a
                             copy to worker 0 and back, a call, an allreduce (checked
                             against NumPy's sum), one ranks first and one in worker
                             order (each against a NumPy reference of its order, bit
                             for bit) and a gather; prints "session ok".
                             Every other rank serves its workers and ends with status 0.
    runtime OUT              every rank trains the README's program on 4 replicas (its
                             window of them), 3 steps, and writes OUT/rank<k>.npz (the
                             weights and its replicas' losses); run alone, OUT/rank0.npz
                             is one host's, to compare with.
    killed rank|device OUT   rank 0 calls and syncs 4 workers in child processes until
                             something fails, and exits with status 3 on a SessionError
                             (printing it); rank 1 kills itself, or one of its device
                             processes, once they run. Every rank writes OUT/rank<k>.pids
                             (its pid, then its devices').
"""

import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

import tessera

WORKERS = 4
REPLICAS = 4
STEPS = 3


def session(placement):
    with tessera.Session(placement, workers=WORKERS, memory=1 << 20) as sess:
        # Only rank 0 gets here: the other ranks serve their workers inside the
        # constructor and leave the script with SystemExit(0) once this block ends.
        assert sess.num_workers == WORKERS
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        x = sess.copy_to_worker0(a)
        np.testing.assert_array_equal(sess.copy_from_worker0(x), a)
        y = sess.call("add_one", x)
        sess.sync_worker(0)
        np.testing.assert_array_equal(sess.copy_from_worker0(y), a + 1)

        # A different array on every worker (two of them on the other rank), summed.
        parts = [np.full((3, 4), w + 0.5, np.float32) * a for w in range(WORKERS)]
        src = sess.copy_to_workers(parts)
        total = sess.empty((3, 4))
        sess.allreduce(src, total, "sum")
        expected = np.sum(parts, axis=0, dtype=np.float32)
        for worker in range(WORKERS):
            np.testing.assert_array_equal(sess.debug_get(total, worker), expected)

        # Ranks first: each rank's workers folded (f64, rounded to f32), then the ranks'
        # arrays in rank order, bit for bit a NumPy reference of that order; worker
        # order again when the call names it. Values whose sums depend on the order.
        rng = np.random.default_rng(7)
        huge = ((1.5 + rng.random(64)) * 1e20).astype(np.float32)
        values = [huge, rng.random(64, dtype=np.float32) * 1e4, -huge,
                  rng.random(64, dtype=np.float32) * 1e6]
        sensitive = sess.copy_to_workers(values)
        out = sess.empty((64,))
        per_rank = sess.workers_per_rank
        runs = [np.sum(np.array(values[r:r + per_rank], np.float64), axis=0).astype(np.float32)
                for r in range(0, WORKERS, per_rank)]
        first = np.sum(np.array(runs, np.float64), axis=0).astype(np.float32)
        in_order = np.sum(np.array(values, np.float64), axis=0).astype(np.float32)
        sess.reduce_order = "ranks_first"
        assert sess.reduce_order == "ranks_first"
        sess.allreduce(sensitive, out, "sum")
        for worker in range(WORKERS):
            np.testing.assert_array_equal(sess.debug_get(out, worker), first)
        sess.allreduce(sensitive, out, "sum", order="workers")
        for worker in range(WORKERS):
            np.testing.assert_array_equal(sess.debug_get(out, worker), in_order)
        if per_rank > 1 and per_rank < WORKERS:
            assert not np.array_equal(first, in_order), "the orders differ here"

        gathered = sess.empty((WORKERS * 3, 4))
        sess.gather_to_worker0(src, gathered)
        np.testing.assert_array_equal(sess.copy_from_worker0(gathered), np.concatenate(parts))
        sess.sync_all()
    # MPI ended with the session, on every rank: nothing can span the ranks again.
    try:
        tessera.Runtime(program(), replicas=REPLICAS)
        raise AssertionError("a runtime across the ranks after the session started")
    except tessera.RuntimeError as e:
        assert "finalized when the session across the ranks ended" in str(e), e
    print("session ok", flush=True)


def program():
    p = tessera.Program(batches_per_step=4, accumulation=2, learning_rate=0.1)
    w = p.add_variable("w", (3, 2), "all", "one_per_group", "balanced")
    p.add_stream("x", "float32", (2,), input=True)
    labels = p.add_stream("label", "int32", (1,))
    p.linear(w)
    p.softmax_cross_entropy(labels)
    p.add_anchor("loss", "all")
    return p


def runtime(out):
    runtime = tessera.Runtime(program(), replicas=REPLICAS, placement="thread", memory=1 << 20)
    window = runtime.window
    runtime.weights_from_host({"w": np.array([[0.1, -0.2], [0.3, 0.4], [-0.5, 0.6]], np.float32)})
    rng = np.random.default_rng(7)
    losses = []
    for _ in range(STEPS):
        # The job's samples for every replica ([micro-batches, replicas, ...]); each
        # instance feeds its window's.
        x = rng.standard_normal((8, REPLICAS, 2)).astype(np.float32)
        label = rng.integers(0, 3, (8, REPLICAS)).astype(np.int32)
        feed = {
            "x": np.ascontiguousarray(x[:, window.start : window.stop]).reshape(-1, 2),
            "label": np.ascontiguousarray(label[:, window.start : window.stop]).ravel(),
        }
        losses.append(runtime.run(feed)["loss"].reshape(8, len(window)))
    np.savez(
        Path(out) / f"rank{runtime.instance}.npz",
        w=runtime.weights_to_host()["w"],
        loss=np.stack(losses),
        window=np.array([window.start, window.stop]),
        instances=np.array(runtime.instances),
    )


def devices_started(count):
    """This process's child processes, once there are `count` (its workers' devices)."""
    while True:
        kids = [
            int(kid)
            for task in Path("/proc/self/task").iterdir()
            for kid in (task / "children").read_text().split()
        ]
        if len(kids) >= count:
            return kids
        time.sleep(0.05)


def killed(what, out):
    """Rank 1 kills itself (`what` "rank") or one of its device processes ("device") once
    its devices run; every rank writes OUT/rank<k>.pids (itself and its devices) first."""
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])

    def watch():
        devices = devices_started(WORKERS // int(os.environ["OMPI_COMM_WORLD_SIZE"]))
        (Path(out) / f"rank{rank}.pids").write_text(" ".join(map(str, [os.getpid(), *devices])))
        if rank == 1:
            time.sleep(0.5)
            os.kill(os.getpid() if what == "rank" else devices[0], signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()
    try:
        with tessera.Session("process", workers=WORKERS, memory=1 << 20) as sess:
            rounds = 0
            while True:
                sess.call("add_one", sess.call("replica_id"))
                sess.sync_all()
                rounds += 1
                if rounds == 1:
                    print("running", flush=True)
    except tessera.SessionError as e:
        print(f"SessionError workers={e.workers}: {e}", flush=True)
        sys.exit(3)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"session": session, "runtime": runtime, "killed": killed}[mode](*args)
