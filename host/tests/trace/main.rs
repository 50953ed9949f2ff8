//! Traces (`tessera_host::trace`), in a test binary of their own: a trace records every
//! runtime, session and device thread of its process, so the other suites' devices, running
//! beside it in one process, would land in it. Tests here take [`ONE_AT_A_TIME`].

mod timeline;

use std::process::Command;
use std::sync::Mutex;

use tessera_host::runtime::Placement;
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::{CallArg, HostArray, Session};
use tessera_host::trace::{Trace, TraceError};
use timeline::Timeline;

/// One trace at a time per process.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tessera-trace-{}-{name}.json", std::process::id()))
}

/// Catches a timeline that misses the work it claims to show, or whose events overlap on a
/// track instead of nesting: `tessera train --trace` on device threads has every step and
/// its driver on the host's thread, and on every device each phase of every step inside
/// its requests, with idle time filling the gaps to the end.
#[test]
fn a_training_run_on_threads_is_traced_step_by_step_and_phase_by_phase() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = temp("train");
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["train", "--steps", "3", "--trace"])
        .arg(&path)
        .output()
        .expect("tessera runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("trace: "),
        "the report names the trace: {stdout}"
    );
    let timeline = Timeline::read(&path);
    std::fs::remove_file(&path).ok();
    timeline.assert_nested();
    let host = timeline.host_track_with("step");
    assert_eq!(timeline.count(host, "step"), 3, "one `step` per step");
    timeline.assert_each_inside(host, "drive", "step");
    timeline.assert_each_inside(host, "combine", "drive");
    let devices = timeline.device_tracks();
    // The default job: 4 replicas, 2 lanes to a device.
    assert_eq!(devices.len(), 2, "{devices:?}");
    for &device in &devices {
        for phase in ["load", "forward", "backward", "exchange", "update"] {
            assert!(timeline.count(device, phase) >= 3, "{phase} on {device:?}");
            timeline.assert_each_inside(device, phase, "serve");
        }
        timeline.assert_covered(device);
    }
}

/// Catches device tracks filled with the host's guesses on a placement whose devices run
/// elsewhere: with child processes the host's steps are traced and no device track is.
#[test]
fn a_training_run_in_child_processes_traces_the_host_only() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = temp("process");
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["train", "--steps", "2", "--placement", "process", "--trace"])
        .arg(&path)
        .output()
        .expect("tessera runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let timeline = Timeline::read(&path);
    std::fs::remove_file(&path).ok();
    timeline.assert_nested();
    let host = timeline.host_track_with("step");
    assert_eq!(timeline.count(host, "step"), 2);
    assert!(timeline.device_tracks().is_empty());
}

/// Catches a session whose commands or workers go untraced, a second trace that silently
/// mixes into the first, and a path that fails only at the end: a session's trace holds
/// each command on the controller's thread and each worker's requests on its track.
#[test]
fn a_sessions_trace_holds_its_commands_and_its_workers_requests() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let missing = std::path::Path::new("/nonexistent-tessera-dir/trace.json");
    let session = Session::new(&Placement::Thread, 4, 1, 1 << 20).unwrap();
    match session.start_trace(missing) {
        Err(TraceError::File { path, .. }) => assert_eq!(path, missing),
        other => panic!("an unwritable path is refused at start: {other:?}"),
    }
    let path = temp("session");
    session.start_trace(&path).unwrap();
    assert!(
        matches!(
            Trace::start(temp("second")),
            Err(TraceError::AlreadyTracing)
        ),
        "one trace at a time"
    );
    let add_one = session.get_function("add_one").unwrap();
    let x = session
        .copy_to_worker0(&HostArray::from_f32(&[4], &[1.0; 4]).unwrap())
        .unwrap();
    let y = session.call(&add_one, &[CallArg::Register(&x)]).unwrap();
    session.sync_all().unwrap();
    session
        .allreduce(&y, &y, ReduceOp::Sum, Scope::Global)
        .unwrap();
    let summary = session.finish_trace().unwrap().expect("a trace ran");
    assert_eq!(summary.path, path);
    assert!(session.finish_trace().unwrap().is_none(), "finished once");
    let timeline = Timeline::read(&path);
    std::fs::remove_file(&path).ok();
    assert_eq!(timeline.events(), summary.events);
    timeline.assert_nested();
    let controller = timeline.host_track_with("call");
    for command in [
        "get_function",
        "copy_to_worker0",
        "call",
        "sync",
        "allreduce",
    ] {
        assert!(timeline.count(controller, command) >= 1, "{command}");
    }
    assert_eq!(timeline.device_tracks().len(), 4, "one track per worker");
    for device in timeline.device_tracks() {
        assert!(timeline.count(device, "serve") >= 1, "{device:?}");
        timeline.assert_covered(device);
    }
    // A new trace may start once the last has finished.
    let again = temp("again");
    Trace::start(&again).unwrap().finish().unwrap();
    std::fs::remove_file(&again).ok();
}
