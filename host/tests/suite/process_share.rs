//! A training runtime's devices in child processes, a share of them per process (`tessera
//! devices`): each device keeps its own state, a device whose channel drops leaves its
//! siblings running, and a killed process is every one of its devices' failure.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tessera_core::wire::endpoint::{Command as DeviceCommand, GetSeed};
use tessera_core::wire::{ProgramRequest, Request};
use tessera_host::transport::{Channel, TransportError};

/// Device memory sizes no other test of the suite gives its devices, so that the process
/// count finds this test's processes among the suite's (every suite runs in this one
/// process, in parallel).
const SHARED_MEMORY: usize = (1 << 16) + 4096 * 51;
const KILLED_MEMORY: usize = (1 << 16) + 4096 * 55;
const STOPPED_MEMORY: usize = (1 << 16) + 4096 * 57;

/// This test process's process shares (`tessera devices`) started with `memory` bytes a
/// device.
fn process_shares(memory: usize) -> Vec<u32> {
    common::children_matching(&format!("tessera devices --memory {memory} "))
}

/// Sets device `c`'s seed to `seed` and reads it back.
fn seed_round_trip(c: &mut Channel, seed: u64) -> Result<u64, TransportError> {
    let set =
        DeviceCommand::new(Request::Program(ProgramRequest::SetSeed { seed })).expect("a command");
    c.call(&set)?;
    Ok(c.call(&GetSeed)?.get())
}

/// Catches a process per device (the host left a third of a core), a device answering
/// for a sibling or losing its state between its siblings' requests, and a process that
/// stops serving the others once one device's channel is gone: eight devices in
/// `min(8, max(cores − 1, 1))` processes (two or more devices a process on machines of up
/// to 5 cores, as CI's), every seed set, then read back, then read again after device 0's
/// channel dropped with requests in flight.
#[test]
fn a_process_serves_a_share_and_each_device_keeps_its_state() {
    let exe = Path::new(env!("CARGO_BIN_EXE_tessera"));
    let mut channels = Channel::device_processes(exe, &singles(0..8), SHARED_MEMORY).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let processes = process_shares(SHARED_MEMORY);
    assert_eq!(
        processes.len(),
        8.min(cores.saturating_sub(1).max(1)),
        "device processes: {processes:?}"
    );
    for (i, c) in channels.iter_mut().enumerate() {
        assert_eq!(c.replica(), i as u32, "channels in replica order");
        assert_eq!(seed_round_trip(c, 100 + i as u64).unwrap(), 100 + i as u64);
    }
    for (i, c) in channels.iter_mut().enumerate() {
        assert_eq!(
            c.call(&GetSeed).unwrap().get(),
            100 + i as u64,
            "device {i}"
        );
    }
    let mut gone = channels.remove(0);
    for _ in 0..8 {
        gone.submit(&Request::Program(ProgramRequest::GetSeed))
            .unwrap();
    }
    drop(gone);
    for c in &mut channels {
        assert_eq!(seed_round_trip(c, 9).unwrap(), 9, "replica {}", c.replica());
    }
}

/// Catches a stopped process share reported as anything but stopped (as timed out, as
/// closed) or waited on forever: a request to each of its devices, with short deadlines,
/// fails as stopped.
#[test]
fn a_stopped_process_share_is_reported_stopped() {
    let exe = Path::new(env!("CARGO_BIN_EXE_tessera"));
    let mut channels = Channel::device_processes(exe, &singles(0..2), STOPPED_MEMORY).unwrap();
    let processes = process_shares(STOPPED_MEMORY);
    assert_eq!(processes.len(), 1, "device processes: {processes:?}");
    let signal = |name: &str| {
        let status = Command::new("kill")
            .args([name, &processes[0].to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    };
    signal("-STOP");
    let results: Vec<_> = channels
        .iter_mut()
        .map(|c| {
            c.set_deadline(Duration::from_millis(20));
            c.call(&GetSeed)
        })
        .collect();
    signal("-CONT");
    for (i, result) in results.into_iter().enumerate() {
        match result {
            Err(TransportError::Stopped { .. }) => {}
            other => panic!("device {i}: expected stopped, got {other:?}"),
        }
    }
}

/// Catches a device of a killed process share that is waited on instead of reported:
/// every one of its devices fails promptly.
#[test]
fn a_killed_process_share_fails_each_of_its_devices() {
    let exe = Path::new(env!("CARGO_BIN_EXE_tessera"));
    let mut channels = Channel::device_processes(exe, &singles(0..2), KILLED_MEMORY).unwrap();
    for c in &mut channels {
        assert_eq!(seed_round_trip(c, 5).unwrap(), 5);
    }
    for pid in process_shares(KILLED_MEMORY) {
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
    }
    for c in &mut channels {
        let start = Instant::now();
        let err = c.call(&GetSeed).unwrap_err();
        assert!(
            matches!(err, TransportError::Closed { .. } | TransportError::Io(_)),
            "replica {}: a dead device is an error: {err}",
            c.replica()
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "reported promptly, not after a hang"
        );
    }
}

/// One device per replica of `replicas`, each running its replica alone.
fn singles(replicas: std::ops::Range<u32>) -> Vec<std::ops::Range<u32>> {
    replicas.map(|r| r..r + 1).collect()
}
