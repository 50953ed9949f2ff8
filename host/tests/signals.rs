//! SIGINT and SIGTERM to `tessera train` stop and reap its device processes — a stopped
//! one included — before tessera exits. Before, a stopped device process (or a QEMU still
//! serving its socket) outlived tessera.

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

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([name, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {name} {pid}");
}

fn stops_its_devices_on(name: &str, expected_status: i32) {
    let mut tessera = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["train", "--placement", "process", "--steps", "1000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = tessera.id();
    let start = Instant::now();
    let devices = loop {
        let found = children_of(pid);
        if found.len() == 4 {
            break found;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "four device processes start (found {found:?})"
        );
        thread::sleep(Duration::from_millis(20));
    };
    signal(devices[0], "-STOP");
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
    assert_eq!(status.code(), Some(expected_status), "exit status after {name}");
    for device in devices {
        assert!(
            !Path::new(&format!("/proc/{device}")).exists(),
            "device process {device} was killed and reaped"
        );
    }
}

#[test]
fn sigterm_stops_and_reaps_every_device_process() {
    stops_its_devices_on("-TERM", 143);
}

#[test]
fn sigint_stops_and_reaps_every_device_process() {
    stops_its_devices_on("-INT", 130);
}
