//! SIGINT and SIGTERM to `tessera train` stop and reap its device processes — a stopped
//! one included — before tessera exits; SIGKILL, which tessera cannot catch, leaves the
//! devices to their reapers. Before, a stopped device process (or a QEMU still serving its
//! socket) outlived tessera.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The children of process `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let out = Command::new("pgrep")
        .args(["-P", &pid.to_string()])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// True when one of the arguments process `pid` was started with is `arg`.
fn has_arg(pid: u32, arg: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmdline| cmdline.split(|&b| b == 0).any(|a| a == arg.as_bytes()))
        .unwrap_or(false)
}

/// True when process `pid` runs `tessera device` or `tessera devices`.
fn is_device(pid: u32) -> bool {
    has_arg(pid, "device") || has_arg(pid, "devices")
}

/// True when process `pid` is a reaper (`sh -c … tessera-reaper`).
fn is_reaper(pid: u32) -> bool {
    has_arg(pid, "tessera-reaper")
}

/// True while process `pid` runs (a zombie has ended: only its parent's reaping is left).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            // "pid (comm) S ...": the state follows the last ')'.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        })
        .unwrap_or(false)
}

/// Waits until `tessera train` with `args` has `count` children, each running its own
/// program; returns tessera and them. A child just forked still runs tessera's: stopping
/// that one instead of a device would stop tessera's start of it, not a device.
// The child is returned to the caller, which waits for it (and this waits on failure).
#[allow(clippy::zombie_processes)]
fn start_with_children(args: &[&str], count: usize) -> (std::process::Child, Vec<u32>) {
    let mut tessera = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("train")
        .args(args)
        .args(["--steps", "1000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        let found = children_of(tessera.id());
        if found.len() == count && !found.iter().any(|&pid| has_arg(pid, "train")) {
            return (tessera, found);
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = tessera.kill();
            let _ = tessera.wait();
            panic!("{count} child processes start (found {found:?})");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A controller killed outright (no chance to clean up): its devices must end by
/// themselves within a deadline (TVM Disco's workers outlive a dead controller). With
/// `stop_one`, a device process is stopped (SIGSTOP) first.
fn devices_end_when_the_controller_is_killed(args: &[&str], count: usize, stop_one: bool) {
    let (mut tessera, devices) = start_with_children(args, count);
    if stop_one {
        let device = devices.iter().copied().find(|&pid| is_device(pid));
        signal(device.expect("a device process"), "-STOP");
    }
    signal(tessera.id(), "-KILL");
    tessera.wait().unwrap();
    let start = Instant::now();
    while devices.iter().any(|&pid| alive(pid)) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "devices still running after their controller died: {:?}",
            devices
                .iter()
                .filter(|&&pid| alive(pid))
                .collect::<Vec<_>>()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// `tessera train`'s children on the process placement: its 4 replicas in
/// `min(4, max(cores − 1, 1))` device processes, each with its reaper.
fn process_children() -> usize {
    let cores = thread::available_parallelism().map_or(1, |c| c.get());
    2 * 4.min(cores.saturating_sub(1).max(1))
}

#[test]
fn device_processes_end_when_the_controller_is_killed() {
    devices_end_when_the_controller_is_killed(
        &["--placement", "process"],
        process_children(),
        false,
    );
}

/// A device process that is stopped (SIGSTOP, a debugger) never reads the end of its link:
/// before it had a reaper, it outlived a controller killed with SIGKILL forever.
#[test]
fn a_stopped_device_process_ends_when_the_controller_is_killed() {
    let args = ["--placement", "process"];
    devices_end_when_the_controller_is_killed(&args, process_children(), true);
}

#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn qemus_end_when_the_controller_is_killed() {
    let _exclusive = common::exclusive();
    let firmware = common::firmware();
    let args = [
        "--placement",
        "qemu",
        "--firmware",
        firmware.to_str().unwrap(),
    ];
    devices_end_when_the_controller_is_killed(&args, 12, false);
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([name, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {name} {pid}");
}

/// Starts `tessera train` with `args` until it has `count` children, stops the first child
/// (SIGSTOP), sends signal `name` to tessera and checks it exits with `expected_status`
/// having killed and reaped every child.
fn stops_its_children_on(args: &[&str], count: usize, name: &str, expected_status: i32) {
    let (mut tessera, devices) = start_with_children(args, count);
    let pid = tessera.id();
    let device = devices.iter().copied().find(|&pid| !is_reaper(pid));
    signal(device.expect("a device process"), "-STOP");
    signal(pid, name);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = tessera.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "tessera exits after {name}"
        );
        thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        status.code(),
        Some(expected_status),
        "exit status after {name}"
    );
    for device in devices {
        assert!(
            !Path::new(&format!("/proc/{device}")).exists(),
            "child process {device} was killed and reaped"
        );
    }
}

#[test]
fn sigterm_stops_and_reaps_every_device_process() {
    stops_its_children_on(
        &["--placement", "process"],
        process_children(),
        "-TERM",
        143,
    );
}

#[test]
fn sigint_stops_and_reaps_every_device_process() {
    stops_its_children_on(&["--placement", "process"], process_children(), "-INT", 130);
}

/// QEMU serves its socket forever: only tessera can stop it (and its defmt-print).
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn sigterm_stops_and_reaps_every_qemu() {
    let _exclusive = common::exclusive();
    let firmware = common::firmware();
    let args = [
        "--placement",
        "qemu",
        "--firmware",
        firmware.to_str().unwrap(),
    ];
    // Each replica: a QEMU, its defmt-print and their reaper.
    stops_its_children_on(&args, 12, "-TERM", 143);
}
