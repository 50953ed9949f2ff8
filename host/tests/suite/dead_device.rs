//! A device that dies is reported as an error within the deadlines, never waited on.

use crate::common;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tessera_core::wire::{endpoint, DataRequest, MemoryRequest, Request, StreamRequest, Target};
use tessera_host::transport::{Channel, TransportError};

/// The device memory of the killed child: a size no other test of the suite gives its
/// devices, so that the kill finds this test's process among the suite's (every suite runs
/// in this one process, in parallel).
const KILLED_MEMORY: usize = (1 << 16) + 4096 * 47;

#[test]
fn a_killed_child_process_is_reported() {
    let exe = Path::new(env!("CARGO_BIN_EXE_tessera"));
    let mut channel = Channel::child_process(exe, 0, KILLED_MEMORY).unwrap();
    channel
        .call(
            &endpoint::Command::new(Request::Memory(MemoryRequest::AllocSlot {
                slot: 1,
                bytes: 8,
            }))
            .unwrap(),
        )
        .unwrap();
    let pids = common::devices_with_memory(Some(0), KILLED_MEMORY);
    assert_eq!(pids.len(), 1, "this test's one device process: {pids:?}");
    for pid in pids {
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
    }
    let start = Instant::now();
    let err = channel
        .call(&endpoint::Read {
            target: Target::Slot(1),
            offset: 0,
            len: 8,
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            TransportError::Closed { replica: 0 } | TransportError::Io(_)
        ),
        "a dead device is an error: {err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "reported promptly, not after a hang"
    );
}

#[test]
fn a_silent_device_times_out() {
    // A device thread whose replies are all lost: every attempt times out.
    let faults = tessera_host::transport::FaultConfig {
        seed: 1,
        flip_rate: 0.0,
        drop_rate: 0.0,
        truncate_rate: 1.0,
        ..tessera_host::transport::FaultConfig::NONE
    };
    let start = Instant::now();
    match Channel::in_process(3, 1 << 16, Some(faults)) {
        Err(TransportError::Timeout { attempts, .. }) => {
            assert!(attempts > 1, "retried before giving up")
        }
        Err(other) => panic!("expected a timeout, got {other}"),
        Ok(_) => panic!("a hello cannot get through a link that loses everything"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "gave up within the deadlines"
    );
}

#[test]
fn a_request_larger_than_the_device_frame_is_refused_at_once() {
    let mut channel = Channel::in_process(0, 1 << 20, None).unwrap();
    channel
        .call(
            &endpoint::Command::new(Request::Streams(StreamRequest::CreateFifo {
                fifo: 1,
                item_bytes: 100_000,
                depth: 1,
            }))
            .unwrap(),
        )
        .unwrap();
    let item = vec![1u8; 100_000];
    let start = Instant::now();
    let err = channel
        .call(
            &endpoint::Command::new(Request::Data(DataRequest::Write {
                target: Target::Fifo(1),
                offset: 0,
                data: &item,
            }))
            .unwrap(),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("exceeds device 0's maximum frame"),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_millis(400),
        "refused before any deadline ran"
    );
}
