//! Counts and sizes a user passes are bounded by a stated rule: an impossible request is an
//! error naming the rule, refused before anything starts, never an abort of the process.

use tessera_host::placement::{DEVICE_MEMORY, MAX_DEVICE_BYTES};
use tessera_host::runtime::{Placement, RuntimeError, MAX_REPLICAS};
use tessera_host::session::{Session, SessionError, MAX_WORKERS};
use tessera_host::train::{model, TrainJob};
use tessera_host::transport::TransportError;

/// Caught: `Session::new` with a million workers asked the host for 424 GB at once and
/// aborted (SIGABRT); a device memory of 2^40 bytes was taken as given.
#[test]
fn a_session_of_impossible_size_is_refused_before_anything_starts() {
    match Session::new(&Placement::Thread, 1_000_000, 1, 1 << 20) {
        Err(SessionError::Workers { workers, max }) => {
            assert_eq!((workers, max), (1_000_000, MAX_WORKERS))
        }
        other => panic!("a million workers must be refused: {other:?}"),
    }
    for memory in [0, 100, *DEVICE_MEMORY.end() + 1, 1 << 40] {
        match Session::new(&Placement::Thread, 2, 1, memory) {
            Err(SessionError::Transport(TransportError::DeviceMemory { bytes, .. })) => {
                assert_eq!(bytes, memory)
            }
            other => panic!("{memory} bytes of device memory must be refused: {other:?}"),
        }
    }
    // The bounds themselves start.
    let session = Session::new(&Placement::Thread, 2, 1, *DEVICE_MEMORY.start()).unwrap();
    assert_eq!(session.num_workers(), 2);
}

/// Caught: starting weights for 2^40 replicas had no bound (one allocation per group, of
/// 2^40 groups' weights).
#[test]
fn starting_weights_for_impossible_replicas_are_refused() {
    let job = TrainJob::default();
    let program = model::program(&job, 2, 3).unwrap();
    for replicas in [0, MAX_REPLICAS + 1, 1 << 40] {
        match model::initial_weights(&program, replicas, 1) {
            Err(RuntimeError::Replicas { replicas: r, max }) => {
                assert_eq!((r, max), (replicas, MAX_REPLICAS))
            }
            other => panic!("{replicas} replicas must be refused: {other:?}"),
        }
    }
    assert!(model::initial_weights(&program, MAX_REPLICAS, 1).is_ok());
}

/// Caught: a runtime's device of many lanes was given lanes × memory, past what 32 bits
/// say (64 replicas of 1 GiB on 2 cores: 32 GiB per device, allocated whole on threads).
/// The runtime now runs fewer lanes per device, each device within `MAX_DEVICE_BYTES`.
#[test]
fn a_runtime_never_gives_a_device_more_memory_than_it_can_say() {
    let job = TrainJob {
        replicas: 64,
        ..TrainJob::default()
    };
    let program = model::program(&job, 2, 3).unwrap();
    let memory = *DEVICE_MEMORY.end();
    let devices = tessera_host::placement::devices(&Placement::Thread, &program, 64, 0..64, memory);
    assert!(
        devices.iter().all(|d| d.len() * memory <= MAX_DEVICE_BYTES),
        "{devices:?}"
    );
}
