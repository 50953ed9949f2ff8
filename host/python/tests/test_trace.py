"""Traces from Python: `start_trace` and `finish_trace` on a runtime and on a session write
a timeline in the Chrome trace-event format, one trace at a time per process."""

import json

import numpy as np
import pytest

import tessera
from test_runtime import start, train


def events(path):
    with open(path) as f:
        trace = json.load(f)
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def names_on(evs, pid):
    return {e["name"] for e in evs if e["pid"] == pid}


def test_a_runtimes_trace_shows_its_steps_and_each_devices_phases(tmp_path):
    """Catches a runtime trace that misses the steps or the devices' phases from Python."""
    runtime = start("thread")
    inputs, labels = tessera.spirals(3000, 3, 42)
    path = tmp_path / "runtime.json"
    runtime.start_trace(path)
    train(runtime, 0, 2, (inputs, labels))
    written = runtime.finish_trace()
    assert runtime.finish_trace() is None, "finished once"
    evs = events(path)
    assert written == len(evs)
    assert sum(e["name"] == "step" for e in evs) == 2
    assert {"load", "forward", "backward", "exchange", "update", "idle"} <= names_on(evs, 2)


def test_a_sessions_trace_shows_its_commands_and_one_trace_runs_at_a_time(tmp_path):
    """Catches a second trace mixed into the first, and session commands left out."""
    with tessera.Session("thread", workers=4) as sess:
        path = tmp_path / "session.json"
        sess.start_trace(path)
        with pytest.raises(tessera.TraceError) as refused:
            sess.start_trace(tmp_path / "second.json")
        assert refused.value.kind == "AlreadyTracing"
        x = sess.copy_to_worker0(np.arange(4, dtype=np.float32))
        sess.call("add_one", x)
        sess.sync_all()
        assert sess.finish_trace() > 0
    evs = events(path)
    assert {"copy_to_worker0", "call", "sync"} <= names_on(evs, 1)
    assert "serve" in names_on(evs, 2)


def test_an_unwritable_trace_path_is_refused_at_start():
    """Catches a path that fails only when the run is over."""
    with tessera.Session("thread", workers=1) as sess:
        with pytest.raises(tessera.TraceError) as refused:
            sess.start_trace("/nonexistent-tessera-dir/trace.json")
        assert refused.value.kind == "File"
        assert "/nonexistent-tessera-dir/trace.json" in str(refused.value)
