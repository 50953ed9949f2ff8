//! Scenarios 26–31: what Disco gets wrong — failing and killed workers, and what a session
//! leaves behind.

use super::*;

// ---- 26–31: what Disco gets wrong ---------------------------------------------------

fn failing_worker(placement: Placement) {
    let session = open(&placement, 4, 1);
    let fail = session.get_function("fail_on_replica").unwrap();
    // Sent: the failure comes with the next sync, not now.
    let result = session.call(&fail, &[CallArg::Int(1)]).unwrap();
    session.sync_worker(0).unwrap();
    let err = session.sync_all().unwrap_err();
    match &err {
        SessionError::Worker {
            worker: 1,
            command: Command::Call(name),
            ..
        } if name == "fail_on_replica" => {}
        other => panic!("the error names worker 1 and the call: {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("worker 1") && text.contains("fail_on_replica"),
        "{text}"
    );
    // Reported once; the other workers ran the call; the session goes on.
    session.sync_all().unwrap();
    expect_value(&session, &result, [0, 2, 3], &HostValue::Int(1));
    let next = call(&session, "add_one", &[CallArg::Int(41)]);
    session.sync_all().unwrap();
    expect_value(&session, &next, 0..4, &HostValue::Int(42));
}

scenario! {
    /// Scenario 26: A function that fails on one worker (w1 of 4): the next sync reports an error
    /// naming worker 1 and the call, once; the other workers' results stand and the session stays
    /// usable. Disco: an exception raised on a worker is fatal there, and the controller learns
    /// neither which worker nor which call failed (its next sync fails generically or waits
    /// forever).
    failing_worker: failing_worker_thread, failing_worker_process
}

/// True while process `pid` runs (a zombie has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            // "pid (comm) S ...": the state follows the last ')'.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        })
        .unwrap_or(false)
}

/// Waits up to `limit` for `done`; false if it never held.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Asserts that every device process started with `memory` is gone, reaped (no zombie
/// left as this process's child either).
fn assert_no_devices_left(memory: usize, pids: &[u32]) {
    let reaped = |pid: u32| {
        // Gone, or the id now belongs to a process that is not our child.
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
            let ppid = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .nth(1);
            ppid != Some(&process::id().to_string())
        })
    };
    assert!(
        wait_for(PROMPT, || pids.iter().all(|&p| reaped(p))),
        "device processes left behind: {:?}",
        pids.iter().filter(|&&p| !reaped(p)).collect::<Vec<_>>()
    );
    assert_eq!(common::devices_with_memory(None, memory), Vec::<u32>::new());
}

/// True if `err` names worker (replica) `worker`.
fn names_worker(err: &SessionError, worker: usize) -> bool {
    let text = err.to_string();
    text.contains(&format!("worker {worker}")) || text.contains(&format!("device {worker}"))
}

/// Scenario 27: A worker process killed (SIGKILL) mid-session: the next command and sync report an
/// error naming that worker within a few seconds, a second look at it is just as prompt, the living
/// workers still answer, and once the session is dropped none of its processes is left. Disco: the
/// controller waits on a dead worker's pipe with no deadline (a hang), and its other workers
/// outlive the session.
#[test]
fn killed_worker_is_reported_process() {
    const MEM: usize = MEMORY + 27 * 4096;
    let session = open_with(&process_placement(), 4, 1, MEM);
    let pids = common::devices_with_memory(None, MEM);
    assert_eq!(pids.len(), 4, "the session's processes: {pids:?}");
    let add_one = session.get_function("add_one").unwrap();
    let two = session.call(&add_one, &[CallArg::Int(1)]).unwrap();
    let gradients = session.empty(DataType::F32, &[4096]).unwrap();
    session.sync_all().unwrap();

    let victim = common::devices_with_memory(Some(2), MEM);
    let [victim] = victim[..] else {
        panic!("one process for worker 2: {victim:?}")
    };
    let killed = process::Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(wait_for(PROMPT, || !alive(victim)), "SIGKILL ends it");

    let start = Instant::now();
    let outcome = session
        .call(&add_one, &[CallArg::Register(&two)])
        .and_then(|three| session.sync_all().map(|()| three));
    let err = outcome.expect_err("a dead worker is an error");
    assert!(
        start.elapsed() < PROMPT,
        "reported after {:?}",
        start.elapsed()
    );
    assert!(names_worker(&err, 2), "the error names worker 2: {err}");

    let start = Instant::now();
    let again = session
        .debug_get(&two, 2)
        .expect_err("worker 2 is still dead");
    assert!(
        start.elapsed() < PROMPT,
        "reported after {:?}",
        start.elapsed()
    );
    assert!(names_worker(&again, 2), "the error names worker 2: {again}");

    // A collective that needs the dead worker fails just as promptly, naming it.
    let start = Instant::now();
    let collective = session
        .allreduce(&gradients, &gradients, ReduceOp::Sum, Scope::Global)
        .expect_err("an allreduce over a dead worker fails");
    assert!(
        start.elapsed() < PROMPT,
        "reported after {:?}",
        start.elapsed()
    );
    assert!(
        names_worker(&collective, 2),
        "the error names worker 2: {collective}"
    );
    expect_value(&session, &two, [0, 1, 3], &HostValue::Int(2));

    drop(two);
    drop(gradients);
    drop(session);
    assert_no_devices_left(MEM, &pids);
}

fn unknown_function(placement: Placement) {
    let session = open(&placement, 4, 1);
    let two = call(&session, "add_one", &[CallArg::Int(1)]);
    session.sync_all().unwrap();
    match session.get_function("no_such_function") {
        Err(SessionError::UnknownFunction { name, worker: 0 }) => {
            assert_eq!(name, "no_such_function")
        }
        other => panic!("an unknown function is a clean error: {other:?}"),
    }
    // Nothing ran: nothing to report, no register taken, every value as it was.
    session.sync_all().unwrap();
    expect_value(&session, &two, 0..4, &HostValue::Int(2));
    let three = call(&session, "add_one", &[CallArg::Register(&two)]);
    assert_eq!(three.id(), two.id() + 1);
    session.sync_all().unwrap();
    assert_eq!(session.debug_get(&three, 3).unwrap(), HostValue::Int(3));
}

scenario! {
    /// Scenario 28: Asking for a function that does not exist is a clean error naming it, before
    /// any worker runs anything (no register taken, nothing pending, the session goes on). Disco:
    /// the name is looked up inside each worker, where a missing one is a fatal error that takes
    /// the worker, and the session, down.
    unknown_function: unknown_function_thread, unknown_function_process
}

fn double_shutdown(placement: Placement) {
    const MEM: usize = MEMORY + 29 * 4096;
    let session = open_with(&placement, 4, 1, MEM);
    let pids = common::devices_with_memory(None, MEM);
    let add_one = session.get_function("add_one").unwrap();
    let two = session.call(&add_one, &[CallArg::Int(1)]).unwrap();
    session.sync_all().unwrap();
    session.shutdown();
    session.shutdown();
    assert!(matches!(
        session.call(&add_one, &[CallArg::Int(1)]),
        Err(SessionError::ShutDown)
    ));
    assert!(matches!(session.sync_all(), Err(SessionError::ShutDown)));
    drop(two);
    drop(session);
    if matches!(placement, Placement::Process(_)) {
        assert_eq!(pids.len(), 4, "the session's processes: {pids:?}");
        assert_no_devices_left(MEM, &pids);
    }
}

fn register_outlives_session(placement: Placement) {
    let session = open(&placement, 2, 1);
    let orphan = call(&session, "add_one", &[CallArg::Int(1)]);
    drop(session);
    drop(orphan);
}

scenario! {
    /// Scenario 29: Shutdown twice and a register handle dropped after shutdown: both
    /// no-ops (later commands are `ShutDown` errors; the workers are gone). Disco: a second
    /// shutdown, or a DRef freed after shutdown, sends to workers that are gone and crashes
    /// or hangs the controller at exit.
    double_shutdown: double_shutdown_thread, double_shutdown_process
}

scenario! {
    /// Scenario 29, the handle's side: a register handle dropped after its session was
    /// dropped is a no-op.
    register_outlives_session: register_outlives_session_thread, register_outlives_session_process
}

fn refused_collectives(placement: Placement) {
    const MEM: usize = MEMORY + 31 * 4096;
    match Session::new(&placement, 3, 2, MEM) {
        Err(SessionError::Groups {
            workers: 3,
            groups: 2,
        }) => {}
        other => panic!("2 groups of 3 workers are refused: {other:?}"),
    }
    assert!(matches!(
        Session::new(&placement, 4, 0, MEM),
        Err(SessionError::Groups { .. })
    ));
    assert_eq!(
        common::devices_with_memory(None, MEM),
        Vec::<u32>::new(),
        "nothing started"
    );

    let session = open(&placement, 4, 2);
    let kept = f32s(&[3, 4], &[7.0; 12]);
    let dst = empty(&session, &[3, 4]);
    for worker in 0..4 {
        set(&session, &dst, worker, &kept);
    }

    // 35 elements do not split in 2.
    let odd = empty(&session, &[5, 7]);
    set(&session, &odd, 0, &f32s(&[5, 7], &arange(0.0, 35, 1.0)));
    match session.scatter_from_worker0(&odd, &dst, Scope::InGroup) {
        Err(SessionError::Indivisible {
            elements: 35,
            parts: 2,
            ..
        }) => {}
        other => panic!("an uneven scatter is refused: {other:?}"),
    }
    expect_on(&session, &dst, 0..4, &kept);

    // The last group has no next group.
    let src = empty(&session, &[3, 4]);
    match session.send_to_next_group(&src, &dst, 1) {
        Err(SessionError::NoNextGroup {
            group: 1,
            groups: 2,
        }) => {}
        other => panic!("a send from the last group is refused: {other:?}"),
    }
    expect_on(&session, &dst, 0..4, &kept);
    assert!(matches!(
        session.send_to_worker(&src, 0, 4, &dst),
        Err(SessionError::NoWorker { worker: 4, .. })
    ));
    expect_on(&session, &dst, 0..4, &kept);

    // u8 is not reduced.
    let bytes_src = session.empty(DataType::U8, &[3, 4]).unwrap();
    let bytes_dst = session.empty(DataType::U8, &[3, 4]).unwrap();
    let kept_bytes = HostArray::from_u8(&[3, 4], &[9; 12]).unwrap();
    for worker in 0..4 {
        set(
            &session,
            &bytes_src,
            worker,
            &HostArray::from_u8(&[3, 4], &[1; 12]).unwrap(),
        );
        set(&session, &bytes_dst, worker, &kept_bytes);
    }
    match session.allreduce(&bytes_src, &bytes_dst, ReduceOp::Sum, Scope::Global) {
        Err(SessionError::Dtype {
            dtype: DataType::U8,
            ..
        }) => {}
        other => panic!("an allreduce of u8 is refused: {other:?}"),
    }
    expect_on(&session, &bytes_dst, 0..4, &kept_bytes);

    // A destination that fits on every worker but the last: refused before any worker's
    // result is written, so w0..w2 keep theirs.
    set(&session, &dst, 3, &f32s(&[2, 2], &[7.0; 4]));
    match session.allreduce(&src, &dst, ReduceOp::Sum, Scope::Global) {
        Err(SessionError::Elements { worker: 3, .. }) => {}
        other => panic!("a destination of the wrong size is refused: {other:?}"),
    }
    expect_on(&session, &dst, 0..3, &kept);

    // Still usable: nothing pending, and a call and a collective work.
    session.sync_all().unwrap();
    let two = call(&session, "add_one", &[CallArg::Int(1)]);
    session.sync_all().unwrap();
    expect_value(&session, &two, 0..4, &HostValue::Int(2));
    set(&session, &dst, 3, &kept);
    session
        .allreduce(&dst, &src, ReduceOp::Sum, Scope::InGroup)
        .unwrap();
    expect_on(&session, &src, 0..4, &f32s(&[3, 4], &[14.0; 12]));
}

scenario! {
    /// Scenario 31: Refused with a clear error, no worker left half-way (destinations keep their
    /// values) and the session usable afterwards: 2 groups of 3 workers (nothing starts), a scatter
    /// of 35 elements over 2, a send to the next group from the last group, a send to a worker that
    /// does not exist, an allreduce of u8, and a destination of the wrong size on the last worker
    /// only. Disco: these are checked (if at all) inside each worker, so one worker refusing leaves
    /// the others inside the collective, waiting forever.
    refused_collectives: refused_collectives_thread, refused_collectives_process
}
