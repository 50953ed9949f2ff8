"""Shared pieces of the tessera Python suite: placements, the CLI, safetensors files."""

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera

# The session and the runtime run on both host placements in every test that takes
# `placement`; QEMU's tests (test_qemu.py) take the `firmware` fixture instead.
PLACEMENTS = ["thread", "process"]

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(params=PLACEMENTS)
def placement(request):
    return request.param


@pytest.fixture
def session(placement):
    with tessera.Session(placement, workers=4, groups=2, memory=8 << 20) as sess:
        yield sess


def tessera_command():
    """The `tessera` command this package installed (beside the interpreter)."""
    beside = Path(sys.executable).parent / "tessera"
    found = str(beside) if beside.is_file() else shutil.which("tessera")
    assert found, "the package's tessera command is not installed"
    return found


def run_cli(*args, check=True):
    """Runs `tessera ARGS`; returns its stdout (its stderr too when it fails)."""
    done = subprocess.run(
        [tessera_command(), *args], capture_output=True, text=True, timeout=600
    )
    if check:
        assert done.returncode == 0, f"tessera {' '.join(args)}: {done.stderr}"
    return done


def loss_line(stdout):
    """The two losses of `tessera train`'s line "loss: A at step 1, B at step N"."""
    line = next(l for l in stdout.splitlines() if l.startswith("loss: "))
    parts = line.replace(",", "").split()
    return float(parts[1]), int(parts[4]), float(parts[5]), int(parts[8])


NUMPY_DTYPES = [
    np.float16,
    np.float32,
    np.float64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
]

_SAFETENSORS_DTYPES = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float64): "F64",
    np.dtype(np.int32): "I32",
    np.dtype(np.int64): "I64",
}


def write_safetensors(path, tensors):
    """Writes `tensors` (name -> C-contiguous array) as a safetensors file."""
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    return path


def children_of(pid):
    """The pids of `pid`'s living children (from /proc)."""
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        kids.extend(int(k) for k in text)
    return kids


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead but not reaped: its state says so.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.fixture
def firmware():
    """The QEMU firmware (`TESSERA_FIRMWARE`). Missing, the QEMU tests skip — unless
    `TESSERA_PYTHON_QEMU=required` (the test command sets it), where they fail."""
    path = os.environ.get("TESSERA_FIRMWARE")
    if path and Path(path).is_file():
        return path
    reason = f"TESSERA_FIRMWARE ({path!r}) names no firmware"
    if os.environ.get("TESSERA_PYTHON_QEMU") == "required":
        pytest.fail(reason)
    pytest.skip(reason)


def copies_calls_and_reduces(sess):
    """A two-worker session's round on any placement: a copy to worker 0 and back, a call,
    a broadcast and a sum allreduce, each checked against numpy."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    reg = sess.copy_to_worker0(a)
    np.testing.assert_array_equal(sess.copy_from_worker0(reg), a)
    one = sess.call("add_one", reg)
    total = sess.empty((3, 4))
    sess.broadcast_from_worker0(one, total)
    sess.allreduce(total, total, "sum")
    np.testing.assert_array_equal(sess.debug_get(total, 1), 2 * (a + 1))
