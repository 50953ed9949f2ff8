"""The package across the ranks of an MPI job: `mpirun -np 2 python across_ranks.py …`
(the script beside this file), each result checked against one host's.

These tests need the package built with MPI (`tessera.HAS_MPI`) and skip without it —
unless `TESSERA_PYTHON_MPI=required` (the test command sets it), where they fail. A
machine without `mpirun` fails them either way. Without MPI, the refusal under `mpirun` is
tested instead."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tessera
from conftest import alive

SCRIPT = Path(__file__).with_name("across_ranks.py")

# A hung job is ended by mpirun after this long, and the test fails (no test waits more).
LIMIT = 120


@pytest.fixture
def mpirun(tmp_path):
    """A function running `mpirun -np RANKS python across_ranks.py ARGS` (popen=True:
    started, not waited for)."""
    if not tessera.HAS_MPI:
        reason = "the package was built without MPI (the cargo feature `mpi`)"
        if os.environ.get("TESSERA_PYTHON_MPI") == "required":
            pytest.fail(reason)
        pytest.skip(reason)
    assert shutil.which("mpirun"), "mpirun runs the job: install OpenMPI (tests/ci.sh does)"
    env = dict(
        os.environ,
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        OMPI_MCA_btl="self,vader",
        OMPI_MCA_oob_tcp_if_include="lo",
        OMPI_MCA_btl_tcp_if_include="lo",
        MPIEXEC_TIMEOUT=str(LIMIT),
        # OpenMPI's session directory, one per job (a shared one fails now and then).
        TMPDIR=str(tmp_path),
    )

    def run(*args, ranks=2, popen=False):
        command = ["mpirun", "-np", str(ranks), sys.executable, str(SCRIPT), *map(str, args)]
        if popen:
            return subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=LIMIT + 30)

    return run


@pytest.mark.parametrize("placement", ["thread", "process"])
def test_a_session_spans_two_ranks_with_one_hosts_results(mpirun, placement):
    """Rank 0 drives 4 workers, 2 of them on rank 1: a copy and a call, an allreduce equal
    to NumPy's sum of the 4 workers' arrays, a gather in worker order; then MPI has ended on
    every rank. Catches remote workers left out of a collective (a sum of 2 arrays, not 4),
    a serving rank that runs the rest of the script (a second "session ok", or a failure of
    its own), and a serving rank that does not end with status 0."""
    done = mpirun("session", placement)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["session ok"], done.stdout + done.stderr


def test_a_runtime_on_two_ranks_trains_as_one_host(mpirun, tmp_path):
    """Every rank trains its window of 4 replicas; the weights on both ranks equal one
    host's bit for bit, and each rank's losses are one host's for its replicas. Catches
    reductions combined per rank instead of across the job, windows that feed a replica
    another's samples, and weights to host missing the other rank's shards."""
    alone, across = tmp_path / "alone", tmp_path / "across"
    alone.mkdir()
    across.mkdir()
    one_host = subprocess.run(
        [sys.executable, str(SCRIPT), "runtime", str(alone)], capture_output=True, text=True
    )
    assert one_host.returncode == 0, one_host.stderr
    done = mpirun("runtime", across)
    assert done.returncode == 0, done.stdout + done.stderr
    reference = np.load(alone / "rank0.npz")
    assert int(reference["instances"]) == 1
    for rank in range(2):
        got = np.load(across / f"rank{rank}.npz")
        assert int(got["instances"]) == 2
        start, stop = got["window"]
        assert (start, stop) == (2 * rank, 2 * rank + 2)
        np.testing.assert_array_equal(got["w"], reference["w"])
        np.testing.assert_array_equal(got["loss"], reference["loss"][:, :, start:stop])


def pids_written(out):
    """Every pid the ranks wrote (themselves and their device processes)."""
    return [int(p) for f in sorted(Path(out).glob("rank*.pids")) for p in f.read_text().split()]


def assert_nothing_left(out):
    """No rank and no device process of the job outlives it (their reapers)."""
    pids = pids_written(out)
    assert len(pids) >= 2, f"the ranks wrote their pids: {pids}"
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)], "processes outlived the job"


def ended(job):
    """`job`'s status, stdout and stderr; a job still running after LIMIT s is killed and
    fails the test (a hang, not a timing)."""
    try:
        out, err = job.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        job.kill()
        out, err = job.communicate()
        pytest.fail(f"the job still ran after {LIMIT} s: {out} {err}")
    return job.returncode, out, err


def test_a_killed_rank_ends_the_job(mpirun, tmp_path):
    """Rank 1 killed (SIGKILL) while rank 0's session runs: mpirun ends every rank and
    fails naming rank 1, and no rank or device process is left. Catches a controller
    waiting for ever on workers whose rank is gone."""
    job = mpirun("killed", "rank", tmp_path, popen=True)
    status, out, err = ended(job)
    assert status != 0, out + err
    assert out.splitlines()[:1] == ["running"], out + err
    assert "rank 1" in err, err
    assert_nothing_left(tmp_path)


def test_a_killed_device_of_a_serving_rank_raises_on_rank_0(mpirun, tmp_path):
    """One device process of rank 1 killed: rank 0's next sync raises tessera.SessionError
    naming the worker by its global id (rank 1 hosts workers 2 and 3), the script handles
    it (status 3), and nothing is left. Catches remote workers renumbered from 0 on their
    rank, and a failure on a serving rank that never reaches rank 0 as an exception."""
    job = mpirun("killed", "device", tmp_path, popen=True)
    status, out, err = ended(job)
    assert status == 3, out + err
    raised = [line for line in out.splitlines() if line.startswith("SessionError")]
    assert raised and raised[0].split(":")[0] in ("SessionError workers=[2]", "SessionError workers=[3]"), out
    assert_nothing_left(tmp_path)


def test_without_mpi_asking_for_ranks_names_the_install_option():
    """Built without MPI, a session or a runtime in a process mpirun started is refused
    with the pip option that installs MPI, instead of every rank running alone."""
    if tessera.HAS_MPI:
        pytest.skip("built with MPI: nothing is refused")
    script = """
import tessera
from across_ranks import program
for make in (lambda: tessera.Session(), lambda: tessera.Runtime(program(), replicas=4)):
    try:
        make()
    except tessera.TesseraError as e:
        print(type(e).__name__, e.kind, e)
"""
    env = dict(os.environ, OMPI_COMM_WORLD_SIZE="2")
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=SCRIPT.parent
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["SessionError", "Instances"], ["RuntimeError", "Instance"]]
    for line in lines:
        assert "$OMPI_COMM_WORLD_SIZE" in line, line
        assert '--config-settings=maturin.build-args="--features mpi"' in line, line
