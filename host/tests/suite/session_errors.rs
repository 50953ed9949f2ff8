//! Where a session's errors go (issue 18, item 4): a sync reports every failure it finds,
//! a failure goes to the thread whose command caused it, and a worker lost during a
//! collective fails that collective, naming the worker.

use crate::common;
use std::path::PathBuf;
use std::process;
use std::sync::mpsc;
use std::thread;

use tessera_core::dtype::DataType;
use tessera_host::runtime::Placement;
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::{CallArg, Command, HostArray, HostValue, Session, SessionError};

/// Device memory per host-placed worker.
const MEMORY: usize = 4 << 20;

fn process_placement() -> Placement {
    Placement::Process(PathBuf::from(env!("CARGO_BIN_EXE_tessera")))
}

fn open(placement: &Placement, memory: usize) -> Session {
    Session::new(placement, 4, 1, memory)
        .unwrap_or_else(|e| panic!("4 workers on {placement:?}: {e}"))
}

/// True if `command` is a call of `fail_on_replica`.
fn failing_call(command: &Command) -> bool {
    matches!(command, Command::Call(name) if name == "fail_on_replica")
}

fn every_failure(placement: Placement) {
    let session = open(&placement, MEMORY);
    let fail = session.get_function("fail_on_replica").unwrap();
    let _a = session.call(&fail, &[CallArg::Int(1)]).unwrap();
    let _b = session.call(&fail, &[CallArg::Int(3)]).unwrap();
    let _c = session.call(&fail, &[CallArg::Int(1)]).unwrap();
    let err = session.sync_all().unwrap_err();
    let failures: Vec<(usize, bool)> = err
        .worker_failures()
        .into_iter()
        .map(|(worker, command, _)| (worker, failing_call(command)))
        .collect();
    assert_eq!(
        failures,
        [(1, true), (1, true), (3, true)],
        "every failure, worker by worker: {err:?}"
    );
    assert!(matches!(err, SessionError::Failures(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("3 commands failed")
            && text.contains("worker 1")
            && text.contains("worker 3"),
        "{text}"
    );
    // All claimed: nothing is left for the next sync.
    session.sync_all().unwrap();
}

/// Bug: of several failures pending at a sync only the first was reported (worker 1's
/// first call); worker 1's second and worker 3's were claimed and lost.
#[test]
fn a_sync_reports_every_failure_thread() {
    every_failure(Placement::Thread);
}

/// Bug: as above, with workers in child processes.
#[test]
fn a_sync_reports_every_failure_process() {
    every_failure(process_placement());
}

/// Bug: in a session shared between threads, a failure went to whichever thread synced
/// first, not to the thread whose call failed (which then saw its sync succeed).
#[test]
fn a_failure_goes_to_the_thread_that_caused_it() {
    let session = open(&Placement::Thread, MEMORY);
    let (sent_tx, sent_rx) = mpsc::channel();
    let (synced_tx, synced_rx) = mpsc::channel::<()>();
    thread::scope(|scope| {
        let session = &session;
        let caller = scope.spawn(move || {
            let fail = session.get_function("fail_on_replica").unwrap();
            let failed = session.call(&fail, &[CallArg::Int(2)]).unwrap();
            sent_tx.send(()).unwrap();
            synced_rx.recv().unwrap();
            let err = session.sync_all().unwrap_err();
            drop(failed);
            err
        });
        sent_rx.recv().unwrap();
        // This thread sent nothing that failed: its syncs succeed, of every worker too.
        session.sync_worker(2).unwrap();
        session.sync_all().unwrap();
        let mine = session
            .call(
                &session.get_function("add_one").unwrap(),
                &[CallArg::Int(1)],
            )
            .unwrap();
        session.sync_all().unwrap();
        assert_eq!(session.debug_get(&mine, 2).unwrap(), HostValue::Int(2));
        synced_tx.send(()).unwrap();
        let err = caller.join().unwrap();
        match &err {
            SessionError::Worker {
                worker: 2, command, ..
            } if failing_call(command) => {}
            other => panic!("the caller hears of its failure on worker 2: {other:?}"),
        }
    });
    session.sync_all().unwrap();
}

/// Bug: a worker killed during an in-place allreduce let the allreduce return Ok (its
/// memory stays mapped, nothing was sent), and the next operation failed with a bare
/// "device 2 closed its link"; killed just before, the allreduce failed with that bare
/// error, naming neither the worker as such nor the allreduce.
#[test]
fn a_worker_lost_during_an_allreduce_fails_that_allreduce() {
    // 16 MiB per worker: the allreduce takes far longer than a SIGKILL to land. A memory
    // size of its own finds this test's processes among the suite's.
    const ELEMENTS: u32 = 4 << 20;
    const MEM: usize = (17 << 20) + 4096 * 41;
    let session = open(&process_placement(), MEM);
    let gradients = session.empty(DataType::F32, &[ELEMENTS]).unwrap();
    let ones = HostArray::from_f32(&[ELEMENTS], &vec![1.0; ELEMENTS as usize]).unwrap();
    for worker in 0..4 {
        session
            .debug_set(&gradients, worker, &HostValue::Array(ones.clone()))
            .unwrap();
    }
    session.sync_all().unwrap();
    let victim = match common::devices_with_memory(Some(2), MEM)[..] {
        [pid] => pid.to_string(),
        ref found => panic!("worker 2's process: {found:?}"),
    };

    let outcome = thread::scope(|scope| {
        let killer = scope.spawn(|| {
            process::Command::new("kill")
                .args(["-9", &victim])
                .status()
                .unwrap()
        });
        let outcome = session.allreduce(&gradients, &gradients, ReduceOp::Sum, Scope::Global);
        assert!(killer.join().unwrap().success());
        outcome
    });
    let err = outcome.expect_err("an allreduce that lost a worker fails");
    match &err {
        SessionError::Worker {
            worker: 2,
            command: Command::Collective("allreduce"),
            ..
        } => {}
        other => panic!("the error names worker 2 and the allreduce: {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("worker 2") && text.contains("allreduce"),
        "{text}"
    );
}

/// Bug: a read from a worker whose process is gone (a debug get, a copy from worker 0)
/// failed with a bare "device N closed its link", naming neither the worker as such nor
/// the operation; a debug set likewise.
#[test]
fn a_lost_worker_is_named_by_reads_and_debug_sets() {
    // A memory size of its own finds this test's processes among the suite's.
    const MEM: usize = (4 << 20) + 4096 * 43;
    let session = open(&process_placement(), MEM);
    let x = session
        .copy_to_worker0(&HostArray::from_f32(&[2], &[1.0, 2.0]).unwrap())
        .unwrap();
    session.sync_all().unwrap();
    for worker in [1, 0] {
        let victim = match common::devices_with_memory(Some(worker), MEM)[..] {
            [pid] => pid.to_string(),
            ref found => panic!("worker {worker}'s process: {found:?}"),
        };
        let killed = process::Command::new("kill").args(["-9", &victim]).status();
        assert!(killed.unwrap().success());
    }
    // Give the kills a moment to land: the links close with the processes.
    thread::sleep(std::time::Duration::from_millis(200));
    let named = |what: &str, result: Result<(), SessionError>, worker: usize, read: bool| {
        let err = result.expect_err(what);
        match &err {
            SessionError::Worker {
                worker: w, command, ..
            } if *w == worker
                && matches!(
                    (command, read),
                    (Command::Read(_), true) | (Command::Set(_), false)
                ) => {}
            other => panic!("{what}: expected worker {worker} named, got {other:?}"),
        }
        assert!(
            err.to_string().contains(&format!("worker {worker}")),
            "{err}"
        );
    };
    named("a debug get", session.debug_get(&x, 1).map(drop), 1, true);
    named(
        "a debug set",
        session.debug_set(&x, 1, &HostValue::Int(3)),
        1,
        false,
    );
    named(
        "a copy from worker 0",
        session.copy_from_worker0(&x).map(drop),
        0,
        true,
    );
}
