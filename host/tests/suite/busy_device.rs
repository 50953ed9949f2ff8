//! A device that is silent is reported as what it is doing: a long kernel is waited for
//! (busy, not dead) up to the busy deadline and then reported busy; a stopped device
//! process is reported stopped. Before, any request unanswered through eight deadlines
//! was "did not answer after 8 attempts", whether the device was computing, stopped or
//! gone.

use crate::common;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use tessera_host::runtime::Placement;
use tessera_host::session::{CallArg, HostArray, Session, SessionError};
use tessera_host::transport::TransportError;

/// One test at a time: the stopped-device test finds its device among this process's
/// children.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Rows and columns of the matrices multiplied: 16.7 M multiply-adds, far longer than
/// eight deadlines of 1 ms.
const N: u32 = 256;
const MEMORY: usize = 4 << 20;

fn placements() -> [Placement; 2] {
    [
        Placement::Thread,
        Placement::Process(PathBuf::from(env!("CARGO_BIN_EXE_tessera"))),
    ]
}

/// A session of one worker holding two `N × N` matrices; calls `matmul` on them.
fn long_kernel(session: &Session) -> Result<(), SessionError> {
    let ones = HostArray::from_f32(&[N, N], &vec![1.0; (N * N) as usize]).unwrap();
    let a = session.copy_to_worker0(&ones)?;
    let b = session.copy_to_worker0(&ones)?;
    session.sync_worker(0)?;
    let matmul = session.get_function("matmul")?;
    let product = session.call(&matmul, &[CallArg::Register(&a), CallArg::Register(&b)])?;
    session.sync_worker(0)?;
    let back = session.copy_from_worker0(&product)?;
    assert_eq!(back.to_f32().unwrap()[0], N as f32, "1·1 summed N times");
    Ok(())
}

/// The transport error of a failed session operation.
fn transport(e: &SessionError) -> &TransportError {
    match e.worker_failures().first() {
        Some((_, _, error)) => error,
        None => match e {
            SessionError::Transport(error) => error,
            other => panic!("expected a worker's transport error, got {other}"),
        },
    }
}

/// A kernel longer than every retry of a 1 ms deadline finishes and is answered: its
/// device's busy line (a thread's) or its process state (a child's) says it works.
#[test]
fn a_long_kernel_is_waited_for() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for placement in placements() {
        let session = Session::new(&placement, 1, 1, MEMORY).unwrap();
        session.set_deadline(Duration::from_millis(1)).unwrap();
        long_kernel(&session).unwrap_or_else(|e| panic!("{placement:?}: {e}"));
    }
}

/// Past the busy deadline, the kernel's command fails as busy, naming the worker's device
/// and the request — not as a dead device.
#[test]
fn a_kernel_past_the_busy_deadline_is_reported_busy() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for placement in placements() {
        let session = Session::new(&placement, 1, 1, MEMORY).unwrap();
        session.set_deadline(Duration::from_millis(1)).unwrap();
        session.set_busy_deadline(Duration::from_millis(5)).unwrap();
        let error = long_kernel(&session).expect_err("the kernel outlives the busy deadline");
        match transport(&error) {
            TransportError::Busy { replica: 0, .. } => {}
            other => panic!("{placement:?}: expected busy, got {other}"),
        }
        assert!(error.to_string().contains("busy, not dead"), "{error}");
    }
}

/// The device memory of the stopped-device test: a size no other test of the suite gives
/// its devices, so that it finds its process among the suite's (every suite runs in this
/// one process, in parallel).
const STOPPED_MEMORY: usize = MEMORY + 4096 * 53;

/// A stopped device process is reported stopped (within eight short deadlines), where it
/// used to be "did not answer after 8 attempts".
#[test]
fn a_stopped_device_process_is_reported_stopped() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let placement = placements()[1].clone();
    let session = Session::new(&placement, 1, 1, STOPPED_MEMORY).unwrap();
    session.set_deadline(Duration::from_millis(20)).unwrap();
    let devices = common::devices_with_memory(None, STOPPED_MEMORY);
    assert_eq!(devices.len(), 1, "one device process: {devices:?}");
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, &devices[0].to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    };
    signal("-STOP");
    let result = session.copy_to_worker0(&HostArray::from_f32(&[4], &[1.0; 4]).unwrap());
    let synced = result.and_then(|_| session.sync_worker(0));
    signal("-CONT");
    let error = synced.expect_err("a stopped device cannot answer");
    match transport(&error) {
        TransportError::Stopped { replica: 0, .. } => {}
        other => panic!("expected stopped, got {other}"),
    }
}

/// Past the busy deadline, a long kernel on each of two workers fails as busy on each,
/// naming it. Run across two MPI ranks too (`session_scenarios::across_ranks`), where
/// worker 1's channel asks rank 1 what its silent worker does: a remote worker reported as
/// timed out, or not reported, would be one that cannot tell a long kernel from a dead link.
#[test]
fn a_kernel_past_the_busy_deadline_is_reported_busy_on_every_worker() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let session = Session::new(&Placement::Thread, 2, 1, MEMORY).unwrap();
    let ones = HostArray::from_f32(&[N, N], &vec![1.0; (N * N) as usize]).unwrap();
    let a = session.copy_to_worker0(&ones).unwrap();
    let b = session
        .empty(tessera_core::dtype::DataType::F32, &[N, N])
        .unwrap();
    session.sync_all().unwrap();
    session.set_deadline(Duration::from_millis(1)).unwrap();
    session.set_busy_deadline(Duration::from_millis(5)).unwrap();
    let matmul = session.get_function("matmul").unwrap();
    let _product = session
        .call(&matmul, &[CallArg::Register(&a), CallArg::Register(&b)])
        .unwrap();
    let error = session
        .sync_all()
        .expect_err("both kernels outlive the busy deadline");
    let failures = error.worker_failures();
    for worker in 0..2 {
        match failures.iter().find(|(w, _, _)| *w == worker) {
            Some((_, _, TransportError::Busy { replica, .. })) => {
                assert_eq!(*replica, worker as u32)
            }
            other => panic!("worker {worker}: expected busy, got {other:?} in {error}"),
        }
    }
}

/// A wait in slices (what Python's Ctrl-C polling does): while a long kernel runs, a
/// slice returns "not yet" on time, losing nothing — the kernel's result is read after
/// — and a failure claimed in an early slice is reported once, by the next sync.
#[test]
fn a_wait_in_slices_returns_on_time_and_loses_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for placement in placements() {
        let session = Session::new(&placement, 1, 1, MEMORY).unwrap();
        let ones = HostArray::from_f32(&[N, N], &vec![1.0; (N * N) as usize]).unwrap();
        let a = session.copy_to_worker0(&ones).unwrap();
        session.sync_worker(0).unwrap();
        let matmul = session.get_function("matmul").unwrap();
        let missing = session.get_function("add_one").unwrap();
        // A failure first (add_one of a shape is refused), then kernels long enough to
        // outlast a slice.
        let _failed = session.call(&missing, &[CallArg::Shape(&[1])]).unwrap();
        let mut product = None;
        for _ in 0..8 {
            product = Some(
                session
                    .call(&matmul, &[CallArg::Register(&a), CallArg::Register(&a)])
                    .unwrap(),
            );
        }
        let start = std::time::Instant::now();
        let mut slices = 0;
        let outcome = loop {
            match session.sync_worker_for(0, Duration::from_millis(5)) {
                Ok(false) => slices += 1,
                other => break other,
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{placement:?}: the kernels never finished"
            );
        };
        assert!(
            slices > 0,
            "{placement:?}: the kernels outlast a slice of 5 ms"
        );
        // The failure claimed in the first slice is the error, reported once.
        match outcome {
            Err(e) => assert_eq!(e.worker_failures().len(), 1, "{placement:?}: {e}"),
            Ok(done) => panic!("{placement:?}: the failed call went unreported ({done})"),
        }
        session.sync_worker(0).unwrap();
        let back = session.copy_from_worker0(&product.unwrap()).unwrap();
        assert_eq!(back.to_f32().unwrap()[0], N as f32, "{placement:?}");
    }
}
