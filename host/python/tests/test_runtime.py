"""The device runtime from Python: the main job step for step, checkpoints shared with the
command line both ways, executables, weights, optimizer values, seeds and RNG state."""

import numpy as np
import pytest

import tessera
from conftest import loss_line, run_cli

REPLICAS = 4
SEED = 42
SAMPLES = 3000
PER_STEP = 2 * 32 * REPLICAS  # batches per step x accumulation x replicas, one sample each


def main_job_program(hidden=24):
    """The program `tessera train` builds given no options (or `--hidden`), from Python."""
    p = tessera.Program(
        batches_per_step=2, accumulation=32, learning_rate=0.7, momentum=0.9, instrumented=True
    )
    w1 = p.add_variable("w1", (hidden, 2), "all", "one_per_group", "balanced")
    b1 = p.add_variable("b1", (hidden,), "all")
    w2 = p.add_variable("w2", (3, hidden), ("consecutive", 2))
    b2 = p.add_variable("b2", (3,), ("consecutive", 2))
    p.add_stream("x", "float32", (2,), input=True)
    labels = p.add_stream("label", "int32", (1,))
    p.linear(w1)
    p.bias(b1)
    p.relu()
    p.dropout(0.1)
    p.linear(w2)
    p.bias(b2)
    p.softmax_cross_entropy(labels)
    p.add_anchor("loss", "all")
    p.add_anchor("output", "all")
    return p


def train(runtime, first, last, data):
    """Runs steps first..last (from 0) as `tessera train` feeds them; returns each step's
    mean loss over every replica."""
    inputs, labels = data
    losses = []
    for step in range(first, last):
        at = (step * PER_STEP + np.arange(PER_STEP)) % SAMPLES
        anchors = runtime.run({"x": inputs[at], "label": labels[at]})
        assert anchors["loss"].size == PER_STEP  # "all": every sample of every replica
        losses.append(float(anchors["loss"].astype(np.float64).mean()))
    return losses


def start(placement, program=None):
    program = program or main_job_program()
    runtime = tessera.Runtime(program, REPLICAS, placement)
    runtime.set_random_seed(SEED)
    runtime.weights_from_host(tessera.initial_weights(program, REPLICAS, SEED))
    return runtime


@pytest.fixture(scope="module")
def cli_run():
    """The main job on the command line: its loss line."""
    return loss_line(run_cli("train").stdout)


def test_a_python_training_run_prints_the_command_lines_losses(placement, cli_run):
    first, _, last, steps = cli_run
    runtime = start(placement)
    losses = train(runtime, 0, steps, tessera.spirals(SAMPLES, 3, SEED))
    assert f"{losses[0]:.5f}" == f"{first:.5f}"
    assert f"{losses[-1]:.5f}" == f"{last:.5f}"
    assert runtime.cycle_counts() == [runtime.cycle_counts()[0]] * REPLICAS


def test_a_python_checkpoint_resumes_on_the_command_line(tmp_path, cli_run):
    _, _, last, steps = cli_run
    data = tessera.spirals(SAMPLES, 3, SEED)
    runtime = start("thread")
    train(runtime, 0, steps // 2, data)
    path = tmp_path / "python.ckpt"
    runtime.save_checkpoint(path, steps // 2, SEED, data=data)
    resumed = loss_line(run_cli("train", "--resume", str(path), "--steps", str(steps - steps // 2)).stdout)
    assert resumed[3] == steps - steps // 2  # the line counts the steps this run trained
    assert f"{resumed[2]:.5f}" == f"{last:.5f}"


def test_a_command_line_checkpoint_resumes_in_python(tmp_path, cli_run):
    _, _, last, steps = cli_run
    path = tmp_path / "cli.ckpt"
    run_cli("train", "--steps", str(steps // 2), "--checkpoint", str(path))
    runtime = tessera.Runtime(main_job_program(), REPLICAS, "thread")
    step, seed = runtime.resume(path)
    assert (step, seed) == (steps // 2, SEED)
    losses = train(runtime, step, steps, tessera.spirals(SAMPLES, 3, SEED))
    assert f"{losses[-1]:.5f}" == f"{last:.5f}"


def test_a_checkpoint_of_another_program_is_refused(tmp_path):
    path = tmp_path / "main.ckpt"
    start("thread").save_checkpoint(path, 0, SEED)
    runtime = tessera.Runtime(main_job_program(hidden=16), REPLICAS, "thread")
    with pytest.raises(tessera.CheckpointError) as refused:
        runtime.resume(path)
    assert refused.value.kind == "Program"


def test_an_executable_saved_from_python_runs_the_same_steps(tmp_path, placement):
    data = tessera.spirals(SAMPLES, 3, SEED)
    original = start(placement)
    path = tmp_path / "main.tsx"
    original.save_executable(path)
    loaded = tessera.Runtime.load_executable(path, placement)
    assert loaded.replicas == REPLICAS
    loaded.set_random_seed(SEED)
    loaded.weights_from_host(tessera.initial_weights(main_job_program(), REPLICAS, SEED))
    assert train(loaded, 0, 3, data) == train(original, 0, 3, data)


def test_weights_optimizer_state_seed_and_rng_state_round_trip():
    runtime = start("thread")
    weights = runtime.weights_to_host()
    assert sorted(weights) == ["b1", "b2", "w1", "w2"]
    assert weights["w2"].shape == (2, 3, 24)  # one row per group of two
    changed = {name: (w + 0.5).astype(np.float32) for name, w in weights.items()}
    runtime.weights_from_host(changed)
    for name, w in runtime.weights_to_host().items():
        np.testing.assert_array_equal(w, changed[name])
    velocity = runtime.optimizer_state_to_host()
    assert sorted(velocity) == ["b1", "b2", "w1", "w2"] and not any(v.any() for v in velocity.values())
    runtime.set_random_seed(7)
    assert runtime.random_seed() == 7
    state = runtime.rng_state()
    assert state.dtype == np.uint32 and state.size == 4 * REPLICAS
    runtime.set_rng_state(list(range(1, 4 * REPLICAS + 1)))
    np.testing.assert_array_equal(runtime.rng_state(), np.arange(1, 4 * REPLICAS + 1))
    runtime.set_optimizer(0.1, momentum=0.5)
    with pytest.raises(tessera.RuntimeError):
        runtime.set_optimizer(-1.0)


def test_a_step_of_the_wrong_size_is_refused_naming_the_stream():
    runtime = start("thread")
    data = tessera.spirals(SAMPLES, 3, SEED)
    inputs, labels = data
    with pytest.raises(tessera.RuntimeError) as refused:
        runtime.run({"x": inputs[:10], "label": labels[:PER_STEP]})  # not a step's worth
    assert "stream `x` needs 512 elements" in str(refused.value) and "not 20" in str(refused.value)
    # Refused before anything moved: the next step is the first step of a fresh runtime.
    assert train(runtime, 0, 1, data) == train(start("thread"), 0, 1, data)


def test_a_learning_rate_of_zero_set_between_steps_leaves_the_weights():
    runtime = start("thread")
    data = tessera.spirals(SAMPLES, 3, SEED)
    runtime.set_optimizer(0.0, momentum=0.0)
    before = runtime.weights_to_host()
    train(runtime, 0, 2, data)
    for name, w in runtime.weights_to_host().items():
        np.testing.assert_array_equal(w, before[name])
    runtime.set_optimizer(0.7, momentum=0.9)
    train(runtime, 2, 3, data)
    assert not np.array_equal(runtime.weights_to_host()["w1"], before["w1"])


def test_every_grouping_retrieval_sharding_anchor_and_loss_from_python():
    # Plain SGD, mean squared error, all-replica rows, padded tails, a strided grouping and
    # the three other anchor return types: each reaches core and comes back as it says.
    p = tessera.Program(batches_per_step=2, accumulation=2, learning_rate=0.05)
    w = p.add_variable("w", (3, 5), ("strided", 1, 2), "all_replicas", "padded_tail")
    b = p.add_variable("b", (3,), ("orthogonal", 2), "one_per_group")
    p.add_stream("x", "float32", (5,), input=True)
    t = p.add_stream("t", "float32", (3,))
    p.linear(w)
    p.bias(b)
    p.mean_squared_error(t)
    p.add_anchor("loss", ("every", 2))
    p.add_anchor("output", "final")
    p.check(4)
    runtime = tessera.Runtime(p, 4, "thread")
    weights = runtime.weights_to_host()
    assert weights["w"].shape == (4, 3, 5)  # one row per replica
    assert weights["b"].shape == (2, 3)  # one row per group of two
    items = 2 * 2 * 4
    rng = np.random.default_rng(0)
    io = {"x": rng.standard_normal((items, 5)).astype(np.float32), "t": np.zeros((items, 3), np.float32)}
    anchors = runtime.run(io)
    assert anchors["loss"].size == 2 * 4  # every 2nd of 4 micro-batches, 4 replicas
    assert anchors["output"].size == 4 * 3  # the last micro-batch's outputs
    s = tessera.Program(batches_per_step=1, accumulation=2, learning_rate=0.05)
    v = s.add_variable("v", (1, 2))
    s.add_stream("x", "float32", (2,), input=True)
    y = s.add_stream("y", "float32", (1,))
    s.linear(v)
    s.mean_squared_error(y)
    s.add_anchor("loss", "sum")
    summed = tessera.Runtime(s, 2, "thread").run(
        {"x": np.ones((4, 2), np.float32), "y": np.zeros((4, 1), np.float32)}
    )
    assert summed["loss"].size == 2  # one sum per replica


def test_an_explicit_sharding_places_each_element_where_it_says():
    # Four elements over groups of two replicas, shards of 3: elements 0-1 in the first
    # shard's first two places, 2-3 in the second shard's first two (the rest padding).
    p = tessera.Program(batches_per_step=1, accumulation=1, learning_rate=0.0)
    w = p.add_variable("w", (1, 4), ("consecutive", 2), "one_per_group", ("explicit", 3, [(0, 2), (3, 5)]))
    p.add_stream("x", "float32", (4,), input=True)
    y = p.add_stream("y", "float32", (1,))
    p.linear(w)
    p.mean_squared_error(y)
    p.check(4)
    runtime = tessera.Runtime(p, 4, "thread")
    values = np.arange(8, dtype=np.float32).reshape(2, 1, 4)  # one row per group
    runtime.weights_from_host({"w": values})
    np.testing.assert_array_equal(runtime.weights_to_host()["w"], values)
    with pytest.raises(ValueError):
        p.add_variable("v", (4,), "all", "one_per_group", ("explicit", 3, [(0, 1)] * 9))
    with pytest.raises(tessera.RuntimeError):  # intervals that do not cover the tensor
        q = tessera.Program()
        q.add_variable("w", (1, 4), "all", "one_per_group", ("explicit", 1, [(0, 1)]))
        q.add_stream("x", "float32", (4,), input=True)
        t = q.add_stream("y", "float32", (1,))
        q.linear(0)
        q.mean_squared_error(t)
        tessera.Runtime(q, 4, "thread")


def test_weights_to_host_into_numpy_arrays_in_place():
    runtime = start("thread")
    expected = runtime.weights_to_host()
    out = {name: np.full_like(w, 7.0) for name, w in expected.items() if name != "b2"}
    ids = {name: id(a) for name, a in out.items()}
    runtime.weights_to_host_into(out)
    for name, array in out.items():
        assert id(array) == ids[name]  # the caller's own arrays, filled
        np.testing.assert_array_equal(array, expected[name])
    # Checked for all before the first byte moves: one wrong array, nothing written.
    sentinel = {"w1": np.full_like(expected["w1"], 7.0), "w2": np.zeros((3, 24), np.float32)}
    with pytest.raises(tessera.RuntimeError) as refused:
        runtime.weights_to_host_into(sentinel)
    assert refused.value.kind == "Shape" and "w2" in str(refused.value)
    assert (sentinel["w1"] == 7.0).all()
    with pytest.raises(tessera.RuntimeError) as typed:
        runtime.weights_to_host_into({"b1": np.zeros(24, np.float64)})
    assert typed.value.kind == "Type"
    readonly = np.zeros_like(expected["b1"])
    readonly.setflags(write=False)
    with pytest.raises(ValueError):
        runtime.weights_to_host_into({"b1": readonly})
