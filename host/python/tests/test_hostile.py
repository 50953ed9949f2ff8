"""Hostile input from Python: every one is an exception before anything reaches a device,
never a crash, and the session or runtime stays usable."""

import numpy as np
import pytest

import tessera
from test_runtime import main_job_program, start


@pytest.fixture
def sess():
    with tessera.Session("thread", workers=2, memory=1 << 20) as s:
        yield s


@pytest.mark.parametrize(
    "array",
    [
        np.zeros(3, np.complex64),
        np.array(["a", "b"]),
        np.array([object(), None]),
        np.zeros(3, dtype=">f4"),  # big-endian
        np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")]),
    ],
    ids=["complex", "strings", "objects", "big-endian", "structured"],
)
def test_arrays_of_foreign_dtypes_raise_type_error(sess, array):
    with pytest.raises(TypeError):
        sess.copy_to_worker0(array)


@pytest.mark.parametrize(
    "view",
    [
        lambda a: a[::2],  # a step
        lambda a: a.reshape(4, 4).T,  # a transpose
        lambda a: np.asfortranarray(a.reshape(4, 4)),  # Fortran order
    ],
    ids=["strided", "transposed", "fortran"],
)
def test_arrays_not_in_c_order_are_refused_not_copied(sess, view):
    array = view(np.arange(16, dtype=np.float32))
    with pytest.raises(ValueError):
        sess.copy_to_worker0(array)
    reg = sess.copy_to_worker0(np.zeros(array.size, np.float32))
    with pytest.raises(ValueError):
        sess.copy_from_worker0_into(reg, array)


def test_a_read_only_destination_is_refused(sess):
    reg = sess.copy_to_worker0(np.ones(4, np.float32))
    out = np.full(4, 7, np.float32)
    out.setflags(write=False)
    with pytest.raises(ValueError):
        sess.copy_from_worker0_into(reg, out)
    assert (out == 7).all()


def test_a_destination_of_the_wrong_type_or_size_names_both(sess):
    reg = sess.copy_to_worker0(np.ones(4, np.float32))
    # Each starts non-zero, so that a write before the refusal would show.
    for out in [np.full(4, 7, np.float64), np.full(5, 7, np.float32), np.ones(4, np.bool_), np.ones(5, np.bool_)]:
        before = out.copy()
        with pytest.raises(tessera.SessionError) as mismatch:
            sess.copy_from_worker0_into(reg, out)
        assert mismatch.value.kind == "HostMismatch"
        np.testing.assert_array_equal(out, before)
    np.testing.assert_array_equal(sess.copy_from_worker0(reg), np.ones(4))


def test_freed_and_foreign_registers_are_refused_before_anything_is_sent(sess):
    reg = sess.copy_to_worker0(np.ones(4, np.float32))
    with tessera.Session("thread", workers=2) as other:
        with pytest.raises(tessera.SessionError) as foreign:
            other.allreduce(reg, other.empty((4,)))
        assert foreign.value.kind == "ForeignRegister"
    reg.free()
    reg.free()  # twice: nothing more happens
    for use in [
        lambda: sess.copy_from_worker0(reg),
        lambda: sess.call("add_one", reg),
        lambda: sess.debug_get(reg, 0),
        lambda: reg.id,
    ]:
        with pytest.raises(tessera.SessionError, match="freed") as gone:
            use()
        assert gone.value.kind == "Freed" and gone.value.workers == []


def test_bad_arguments_raise_python_errors(sess):
    reg = sess.copy_to_worker0(np.ones(4, np.float32))
    with pytest.raises(TypeError):
        sess.call("add_one", {"a": 1})
    with pytest.raises(TypeError):
        sess.call(42)
    with pytest.raises(OverflowError):
        sess.debug_get(reg, -1)
    with pytest.raises(tessera.SessionError) as no_worker:
        sess.debug_get(reg, 9)
    assert no_worker.value.kind == "NoWorker"
    with pytest.raises(ValueError):
        sess.allreduce(reg, reg, "median")
    with pytest.raises(ValueError):
        sess.empty((1,) * 9)  # more dimensions than a register holds
    with pytest.raises(ValueError):
        sess.empty((1 << 33,))
    with pytest.raises(TypeError):
        sess.empty((2,), "complex128")
    with pytest.raises(ValueError):
        sess.set_deadline(float("nan"))
    with pytest.raises(ValueError):
        tessera.Session("gpu")
    with pytest.raises(tessera.SessionError) as groups:
        tessera.Session("thread", workers=3, groups=2)
    assert groups.value.kind == "Groups"
    # Still usable after all of it.
    sess.sync_all()
    np.testing.assert_array_equal(sess.copy_from_worker0(reg), np.ones(4))


def test_nan_and_mismatched_collectives_are_refused_or_carried_exactly(sess):
    src = sess.copy_to_worker0(np.array([np.nan, 1.0], np.float32))
    wrong = sess.empty((3,))
    with pytest.raises(tessera.SessionError):
        sess.allreduce(src, wrong)
    dst = sess.empty((2,))
    sess.allreduce(src, dst, "sum")
    got = sess.debug_get(dst, 1)
    assert np.isnan(got[0]) and got[1] == 1.0


def test_programs_and_runtimes_refuse_bad_input():
    p = tessera.Program()
    with pytest.raises(ValueError):
        p.add_variable("w", (2, 2), "everyone")
    with pytest.raises(ValueError):
        p.add_variable("w", (2, 2), sharding="diagonal")
    with pytest.raises(tessera.ProgramError):
        p.add_variable("x" * 100, (2,))
    with pytest.raises(ValueError):
        p.linear(3)  # no such variable
    with pytest.raises(tessera.ProgramError):
        tessera.Program(learning_rate=float("nan"))
    with pytest.raises(tessera.RuntimeError) as invalid:
        tessera.Runtime(p, 4, "thread")  # no layers, no loss
    assert invalid.value.kind == "Program"

    runtime = start("thread")
    inputs, labels = tessera.spirals()
    per_step = 256
    with pytest.raises(tessera.RuntimeError):
        runtime.run({"x": inputs[:per_step], "labels": labels[:per_step]})  # no such stream
    with pytest.raises(tessera.RuntimeError):
        runtime.run({"x": inputs[:per_step].astype(np.float64), "label": labels[:per_step]})
    with pytest.raises(ValueError):
        runtime.run({"x": np.asfortranarray(inputs[:per_step]), "label": labels[:per_step]})
    with pytest.raises(tessera.RuntimeError):
        runtime.weights_from_host({"w1": np.zeros((3, 3), np.float32)})
    with pytest.raises(tessera.RuntimeError):
        runtime.set_rng_state([1, 2, 3])
    with pytest.raises(tessera.CheckpointError):
        runtime.resume("/nonexistent/checkpoint")
    with pytest.raises(tessera.ExecutableError):
        tessera.Runtime.load_executable("/nonexistent/executable")
    # Labels out of range are data, not a crash: the device refuses the step.
    bad = labels[:per_step].copy()
    bad[0] = 1 << 20
    with pytest.raises(tessera.RuntimeError):
        runtime.run({"x": inputs[:per_step], "label": bad})


def test_a_register_freed_by_one_thread_while_another_calls_with_it(sess):
    # Every outcome is one of two: the call ran (the register was still held) or it was
    # refused as freed; never a crash, never another error.
    import threading

    for _ in range(200):
        reg = sess.copy_to_worker0(np.ones(4, np.float32))
        outcomes = []

        def use():
            try:
                sess.call("add_one", reg)
                outcomes.append("ran")
            except tessera.SessionError as e:
                outcomes.append(e.kind)

        user = threading.Thread(target=use)
        user.start()
        reg.free()
        user.join()
        assert outcomes in (["ran"], ["Freed"])
    sess.sync_all()


def test_absurd_device_memory_is_refused_not_allocated():
    for memory in [0, 1 << 40]:
        with pytest.raises(ValueError, match="memory"):
            tessera.Session("thread", workers=1, memory=memory)
        with pytest.raises(ValueError, match="memory"):
            tessera.Runtime(main_job_program(), 4, "thread", memory=memory)


def test_initial_weights_of_an_invalid_program_are_refused():
    p = tessera.Program()
    p.add_variable("w", (1 << 31, 1 << 31))
    with pytest.raises(tessera.ProgramError):
        tessera.initial_weights(p, 4, 0)


def test_impossible_counts_are_errors_never_aborts():
    """Caught aborts: a million workers asked the host for 424 GB (SIGABRT), and starting
    weights for 2**40 replicas had no bound; each is now an error naming the rule, raised
    before anything starts, and the process lives on."""
    with pytest.raises(tessera.SessionError) as workers:
        tessera.Session("thread", workers=10**6)
    assert workers.value.kind == "Workers"
    assert "1024" in str(workers.value)
    with pytest.raises(tessera.RuntimeError) as replicas:
        tessera.initial_weights(main_job_program(), 2**40, 1)
    assert replicas.value.kind == "Replicas"
    # A 64-replica runtime of the most memory a replica may have: each device runs only
    # as many lanes as its memory can say in 32 bits (it ran 32 lanes, 32 GiB, and aborted).
    assert tessera.initial_weights(main_job_program(), 4, 1)


def test_values_no_run_trains_from_are_refused_where_they_enter(tmp_path):
    """Caught: Python accepted NaN weights, optimizer state and checkpoint data (the
    run then failed with "the accelerator differs ... (device NaN, reference NaN)");
    each is refused naming the tensor and the first bad value's place."""
    runtime = start("thread")
    weights = runtime.weights_to_host()
    for value in [np.nan, np.inf, -3e38]:
        spoiled = {name: array.copy() for name, array in weights.items()}
        spoiled["w2"].reshape(-1)[5] = value
        with pytest.raises(tessera.RuntimeError) as refused:
            runtime.weights_from_host(spoiled)
        assert refused.value.kind == "BadValue"
        assert "w2" in str(refused.value) and "weights" in str(refused.value)
        with pytest.raises(tessera.RuntimeError) as refused:
            runtime.optimizer_state_from_host(spoiled)
        assert refused.value.kind == "BadValue"
    inputs, labels = tessera.spirals()
    bad = inputs[:256].copy()
    bad[3, 1] = np.nan
    with pytest.raises(tessera.RuntimeError) as refused:
        runtime.run({"x": bad, "label": labels[:256]})
    assert refused.value.kind == "BadValue" and "[3, 1]" in str(refused.value)
    inputs = inputs.copy()
    inputs[7, 0] = np.inf
    with pytest.raises(ValueError, match="row 7, column 0"):
        runtime.save_checkpoint(tmp_path / "c.ckpt", 0, 1, data=(inputs, labels))
    # Nothing was loaded: the weights are those the runtime held.
    for name, array in runtime.weights_to_host().items():
        np.testing.assert_array_equal(array, weights[name])


def test_a_function_of_another_session_is_refused_and_a_call_of_nothing_says_so(sess):
    """Caught: a function handle of another session was accepted (registers of another
    session were refused), and a call of a function that returns nothing (`scale` works in
    place) handed back a register that named nothing when read."""
    with tessera.Session("thread", workers=2) as other:
        theirs = other.get_function("add_one")
    with pytest.raises(tessera.SessionError) as foreign:
        sess.call(theirs, 1)
    assert foreign.value.kind == "ForeignFunction"
    x = sess.copy_to_worker0(np.array([1.5, 2.0], np.float32))
    nothing = sess.call(sess.get_function("scale"), x, 2.0)
    sess.sync_all()
    with pytest.raises(tessera.SessionError) as empty:
        sess.debug_get(nothing, 0)
    assert empty.value.kind == "NoValue" and "scale" in str(empty.value)
    np.testing.assert_array_equal(sess.copy_from_worker0(x), [3.0, 4.0])
