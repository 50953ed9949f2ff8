"""The session from Python: round trips, calls, registers, every collective, the loader."""

import gc
import sys
import threading
import time

import numpy as np
import pytest

import tessera
from conftest import NUMPY_DTYPES, write_safetensors


def values(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_goes_to_worker0_and_back_bit_for_bit(session, dtype):
    a = values(dtype, (3, 5), seed=1)
    reg = session.copy_to_worker0(a)
    back = session.copy_from_worker0(reg)
    assert back.dtype == a.dtype and back.shape == a.shape
    assert back.tobytes() == a.tobytes()
    # The destination-passing forms: in place, nothing allocated on either side.
    b = values(dtype, (3, 5), seed=2)
    session.copy_to_worker0_into(b, reg)
    out = np.zeros(15, dtype=dtype)  # the element count matters, not the shape
    session.copy_from_worker0_into(reg, out)
    assert out.tobytes() == b.tobytes()
    # Other workers hold a zeroed array of the same type and shape (Disco's rule).
    other = session.debug_get(reg, 3)
    assert other.dtype == a.dtype and not other.any()


def test_a_large_array_crosses_in_place(session):
    big = np.arange(4 << 18, dtype=np.float32)  # 4 MiB, several frames on a pipe
    reg = session.copy_to_worker0(big)
    out = np.empty_like(big)
    session.copy_from_worker0_into(reg, out)
    np.testing.assert_array_equal(out, big)


def test_calls_take_every_kind_of_argument(session):
    assert session.debug_get(session.call("add", 2, 40), 1) == 42
    assert session.debug_get(session.call("add", 0.5, 0.25), 2) == 0.75
    assert session.debug_get(session.call("str_suffix", "x"), 0) == "x_suffix"
    assert session.debug_get(session.call("shape_extend", (2, 3)), 3) == (2, 3, 4, 5)
    inline = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    relu = session.get_function("relu")
    np.testing.assert_array_equal(session.debug_get(session.call(relu, inline), 2), [1, 0, 3])
    ids = [session.debug_get(session.call("replica_id"), w) for w in range(4)]
    assert ids == [0, 1, 2, 3]
    x = session.copy_to_worker0(np.ones((2, 3), np.float32))
    y = session.call("matmul", x, session.call("transpose", x))
    session.sync_all()
    np.testing.assert_array_equal(session.copy_from_worker0(y), np.full((2, 2), 3.0))


def test_debug_set_and_get_every_value_kind(session):
    reg = session.call("replica_id")
    for value in [7, -1.5, "text", (4, 1, 2), np.arange(4, dtype=np.int64)]:
        session.debug_set(reg, 2, value)
        got = session.debug_get(reg, 2)
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got, value)
        else:
            assert got == value
    assert session.debug_get(reg, 1) == 1  # worker 1 kept its own value


def test_a_worker_failure_is_raised_at_sync_naming_the_worker(session):
    session.call("add_one", "not a number")  # pipelined: nothing raised yet
    with pytest.raises(tessera.SessionError) as failed:
        session.sync_all()
    assert failed.value.workers == [0, 1, 2, 3]
    assert failed.value.kind == "Failures"
    session.sync_all()  # the session stays usable


def test_registers_free_on_the_workers_when_collected(session):
    # Three times the capacity of a worker's table: only possible if each collected
    # register frees its id everywhere.
    for i in range(3 * tessera.MAX_REGISTERS):
        session.call("add", i, 1)
    session.sync_all()
    held = [session.call("add", i, 1) for i in range(tessera.MAX_REGISTERS)]
    with pytest.raises(tessera.SessionError) as full:
        session.call("add", 0, 0)
    assert full.value.kind == "RegistersExhausted"
    del held
    gc.collect()
    assert session.debug_get(session.call("add", 1, 1), 0) == 2


def test_collectives_global_and_in_groups(session):
    n, shape = session.num_workers, (2, 3)
    parts = [np.arange(6, dtype=np.float32).reshape(shape) * (w + 1) + w for w in range(n)]
    src = session.empty(shape)
    for w, part in enumerate(parts):
        session.debug_set(src, w, part)
    dst = session.empty(shape)
    folds = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max, "avg": np.mean}
    for op, fold in folds.items():
        session.allreduce(src, dst, op)
        expected = fold(np.stack(parts), axis=0)
        for w in range(n):
            np.testing.assert_allclose(session.debug_get(dst, w), expected, rtol=1e-6)
        session.allreduce(src, dst, op, in_group=True)
        for w in range(n):
            group = parts[:2] if w < 2 else parts[2:]
            np.testing.assert_allclose(
                session.debug_get(dst, w), fold(np.stack(group), axis=0), rtol=1e-6
            )

    gathered = session.empty((n * 6,))
    session.allgather(src, gathered)
    for w in range(n):
        np.testing.assert_array_equal(session.debug_get(gathered, w), np.concatenate([p.ravel() for p in parts]))
    half = session.empty((12,))
    session.allgather(src, half, in_group=True)
    np.testing.assert_array_equal(session.debug_get(half, 3), np.concatenate([parts[2].ravel(), parts[3].ravel()]))

    session.broadcast_from_worker0(src, dst)
    for w in range(n):
        np.testing.assert_array_equal(session.debug_get(dst, w), parts[0])
    session.broadcast_from_worker0(src, dst, in_group=True)
    np.testing.assert_array_equal(session.debug_get(dst, 3), parts[2])

    whole = np.arange(8, dtype=np.float32)
    src0 = session.copy_to_worker0(whole)
    piece = session.empty((2,))
    session.scatter_from_worker0(src0, piece)
    for w in range(n):
        np.testing.assert_array_equal(session.debug_get(piece, w), whole[2 * w : 2 * w + 2])

    at0 = session.empty((n * 6,))
    session.gather_to_worker0(src, at0)
    np.testing.assert_array_equal(session.copy_from_worker0(at0), np.concatenate([p.ravel() for p in parts]))

    session.send_to_worker(src, dst, source=3, to=1)
    np.testing.assert_array_equal(session.debug_get(dst, 1), parts[3])
    session.send_to_next_group(src, dst, 0)
    np.testing.assert_array_equal(session.debug_get(dst, 2), parts[0])
    np.testing.assert_array_equal(session.debug_get(dst, 3), parts[1])


def test_integer_allreduce(session):
    src = session.empty((3,), "int64")
    for w in range(4):
        session.debug_set(src, w, np.array([w, -w, 1 << 40], dtype=np.int64))
    dst = session.empty((3,), "int64")
    session.allreduce(src, dst, "sum")
    np.testing.assert_array_equal(session.debug_get(dst, 2), [6, -6, 4 << 40])


def test_reduce_orders_agree_on_one_host_and_bad_names_are_refused(session):
    """On one host every worker lives on one rank: ranks first is worker order, bit for
    bit. Catches an order name that does not reach the session, and a typo taken for a
    default."""
    assert session.reduce_order == "workers"
    assert session.workers_per_rank == session.num_workers
    values = [np.array([1e20, 1.0, -3.5], np.float32) * (w + 1) for w in range(4)]
    values[2][0] = -2e20
    src = session.copy_to_workers(values)
    out = session.empty((3,))
    reference = np.sum(np.array(values, np.float64), axis=0).astype(np.float32)
    for order in ["workers", "ranks_first"]:
        session.reduce_order = order
        assert session.reduce_order == order
        session.allreduce(src, out, "sum")
        np.testing.assert_array_equal(session.debug_get(out, 3), reference)
        session.allreduce(src, out, "sum", order=order)
        np.testing.assert_array_equal(session.debug_get(out, 0), reference)
    with pytest.raises(ValueError, match="ranks_first"):
        session.allreduce(src, out, "sum", order="rank_first")
    with pytest.raises(ValueError):
        session.reduce_order = "by_rank"
    assert session.reduce_order == "ranks_first"
    session.reduce_order = "workers"


def test_sharded_safetensors_load(session, tmp_path):
    q = np.arange(24, dtype=np.float32).reshape(4, 6)
    norm = np.linspace(0, 1, 5).astype(np.float32)
    path = write_safetensors(tmp_path / "model.safetensors", {"attn.q": q, "norm": norm})
    rows = session.load_safetensors(path, split={"attn.q": 0})
    assert sorted(rows) == ["attn.q", "norm"]
    for w in range(4):
        np.testing.assert_array_equal(session.debug_get(rows["attn.q"], w), q[w : w + 1])
        np.testing.assert_array_equal(session.debug_get(rows["norm"], w), norm)
    # Within each group of two, the columns cut in halves.
    halves = session.load_safetensors(path, split={"attn.q": 1}, in_group=True)
    for w in range(4):
        cut = 3 * (w % 2)
        np.testing.assert_array_equal(session.debug_get(halves["attn.q"], w), q[:, cut : cut + 3])
    # Six columns do not cut in four: refused, naming the rule, and nothing loaded.
    with pytest.raises(tessera.SessionError) as refused:
        session.load_safetensors(path, split={"attn.q": 1})
    assert "attn.q" in str(refused.value)


def test_copy_to_workers_gives_each_worker_its_array(session):
    arrays = [np.full(3, w, dtype=np.int32) for w in range(4)]
    reg = session.copy_to_workers(arrays)
    for w in range(4):
        np.testing.assert_array_equal(session.debug_get(reg, w), arrays[w])


def test_the_gil_is_released_while_workers_work(placement):
    # A thread that holds the GIL in native code lets no other run, and with a switch
    # interval of a second Python does not take it from the thread between its reading
    # of the counter and the copy: the counter moves during a copy only if the copy let
    # go of the GIL. (Each return waits for the counter to yield: at most a second.)
    with tessera.Session(placement, workers=1, memory=80 << 20) as sess:
        big = np.ones(16 << 20, dtype=np.float32)  # 64 MiB
        reg = sess.copy_to_worker0(big)
        out = np.empty_like(big)
        ticks = [0]
        stop = threading.Event()

        def count():
            while not stop.is_set():
                ticks[0] += 1

        old = sys.getswitchinterval()
        sys.setswitchinterval(1.0)
        counter = threading.Thread(target=count)
        try:
            counter.start()
            during = []
            for _ in range(3):
                before = ticks[0]
                sess.copy_from_worker0_into(reg, out)
                during.append(ticks[0] - before)
        finally:
            stop.set()
            sys.setswitchinterval(old)
            counter.join()
        assert max(during) > 0, "the other thread never ran during a copy"


def test_shutdown_is_idempotent_and_ends_every_method(session):
    reg = session.call("add", 1, 2)
    session.shutdown()
    session.shutdown()
    with pytest.raises(tessera.SessionError) as gone:
        session.sync_all()
    assert gone.value.kind == "ShutDown"
    reg.free()  # after shutdown, freeing does nothing
    assert not reg.alive


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2)], ids=["0-d", "empty", "zero-dim"])
def test_0d_and_empty_arrays_cross_as_such(session, shape):
    a = np.full(shape, 2.5, np.float64)
    reg = session.copy_to_worker0(a)
    back = session.copy_from_worker0(reg)
    assert back.shape == a.shape and back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)


def test_an_unaligned_array_crosses_by_its_bytes(session):
    storage = np.zeros(4 * 16 + 1, np.uint8)
    unaligned = storage[1:].view(np.float32)  # C-contiguous, writable, not aligned
    assert not unaligned.flags.aligned
    unaligned[:] = np.arange(16)
    reg = session.copy_to_worker0(unaligned)
    np.testing.assert_array_equal(session.copy_from_worker0(reg), np.arange(16))
    unaligned[:] = 0
    session.copy_from_worker0_into(reg, unaligned)
    np.testing.assert_array_equal(unaligned, np.arange(16))


def test_bfloat16_and_8_bit_floats_come_back_as_their_bits_without_ml_dtypes(session):
    try:
        import ml_dtypes  # noqa: F401

        pytest.skip("ml_dtypes is installed: these come back as its types")
    except ImportError:
        pass
    for dtype, bits in [("bfloat16", np.uint16), ("float8_e4m3fn", np.uint8), ("float8_e5m2", np.uint8)]:
        reg = session.empty((3,), dtype)
        back = session.copy_from_worker0(reg)
        assert back.dtype == bits and back.shape == (3,) and not back.any()
        out = np.full(3, 1, bits)
        session.copy_from_worker0_into(reg, out)  # raw bits of the same width: accepted
        assert not out.any()
        assert session.debug_get(reg, 1).dtype == bits
    with pytest.raises(tessera.SessionError):
        session.copy_from_worker0_into(session.empty((3,), "bfloat16"), np.zeros(6, np.uint8))


def test_numpy_scalars_are_arguments_like_pythons(session):
    assert session.debug_get(session.call("add", np.int64(2), np.int32(40)), 0) == 42
    assert session.debug_get(session.call("add", np.float32(0.5), 0.25), 0) == 0.75
    reg = session.call("add", np.bool_(True), 1)
    assert session.debug_get(reg, 3) == 2
    session.debug_set(reg, 3, np.uint8(9))
    assert session.debug_get(reg, 3) == 9


def test_presharded_files_and_a_default_split(session, tmp_path):
    paths = [
        write_safetensors(tmp_path / f"part{w}.safetensors", {"w": np.full((2, 2), w, np.float32)})
        for w in range(4)
    ]
    loaded = session.load_presharded(paths)
    for w in range(4):
        np.testing.assert_array_equal(session.debug_get(loaded["w"], w), np.full((2, 2), w))
    whole = np.arange(8, dtype=np.float32).reshape(4, 2)
    path = write_safetensors(tmp_path / "whole.safetensors", {"a": whole, "b": whole + 1})
    rows = session.load_safetensors(path, default_split=0)
    for w in range(4):
        np.testing.assert_array_equal(session.debug_get(rows["b"], w), whole[w : w + 1] + 1)


def test_sync_worker_and_deadlines(session):
    session.set_deadline(2.0)
    session.set_busy_deadline(30.0)
    reg = session.call("add_one", "not a number")
    with pytest.raises(tessera.SessionError) as failed:
        session.sync_worker(2)
    assert failed.value.workers == [2]  # only worker 2's failure is claimed there
    with pytest.raises(tessera.SessionError) as rest:
        session.sync_all()
    assert rest.value.workers == [0, 1, 3]
    del reg
    session.sync_all()
