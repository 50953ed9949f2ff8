//! Scenarios 1–9: the control plane (values, registers, functions, syncs and copies to and
//! from worker 0).

use super::*;

// ---- 1–9: control plane -------------------------------------------------------------

fn integer_round_trip(placement: Placement) {
    let workers = workers_on(&placement);
    let session = open(&placement, workers, 1);
    let two = call(&session, "add_one", &[CallArg::Int(1)]);
    session.sync_all().unwrap();
    expect_value(&session, &two, 0..workers, &HostValue::Int(2));
}

scenario! {
    /// Scenario 1: `add_one(1)` on every worker: a debug read of the result gives 2 on each.
    integer_round_trip: integer_round_trip_thread, integer_round_trip_process,
        integer_round_trip_qemu, integer_round_trip_serial
}

fn float_argument(placement: Placement) {
    let session = open(&placement, 4, 1);
    let result = call(&session, "add_one", &[CallArg::Float(1.5)]);
    session.sync_all().unwrap();
    expect_value(&session, &result, 0..4, &HostValue::Float(2.5));
}

scenario! {
    /// Scenario 2: `add_one(1.5)` is exactly 2.5 on all 4 workers.
    float_argument: float_argument_thread, float_argument_process
}

fn tensor_through_worker0(placement: Placement) {
    let session = open(&placement, 2, 1);
    let x = f32s(&[2, 3], &arange(0.0, 6, 1.0));
    let on_w0 = session.copy_to_worker0(&x).unwrap();
    let y = call(&session, "add_one", &[CallArg::Register(&on_w0)]);
    session.sync_worker(0).unwrap();
    assert_eq!(
        session.copy_from_worker0(&y).unwrap(),
        f32s(&[2, 3], &arange(1.0, 6, 1.0))
    );
    // Worker 1 holds a zeroed x (a copy to worker 0 gives the others zeros of its type and
    // shape, as Disco does), so the call ran there too.
    session.sync_all().unwrap();
    expect_on(&session, &y, [1], &f32s(&[2, 3], &[1.0; 6]));
}

scenario! {
    /// Scenario 3: `arange(6)` as an f32 (2, 3) array copied to worker 0, `add_one` on it,
    /// worker 0 synced and the result copied back: `x + 1` (and worker 1, which got zeros,
    /// holds ones).
    tensor_through_worker0: tensor_through_worker0_thread, tensor_through_worker0_process,
        tensor_through_worker0_qemu, tensor_through_worker0_serial
}

fn string_argument(placement: Placement) {
    let session = open(&placement, 4, 1);
    let result = call(&session, "str_suffix", &[CallArg::Str("hello")]);
    session.sync_all().unwrap();
    let expected = HostValue::Str("hello_suffix".into());
    expect_value(&session, &result, 0..4, &expected);
}

scenario! {
    /// Scenario 4: `str_suffix("hello")` is `"hello_suffix"` on every worker.
    string_argument: string_argument_thread, string_argument_process
}

fn shape_argument(placement: Placement) {
    let session = open(&placement, 4, 1);
    let result = call(&session, "shape_extend", &[CallArg::Shape(&[1, 2, 3])]);
    session.sync_all().unwrap();
    // A shape, not an array or a list of ints.
    expect_value(
        &session,
        &result,
        0..4,
        &HostValue::Shape(vec![1, 2, 3, 4, 5]),
    );
}

scenario! {
    /// Scenario 5: `shape_extend([1, 2, 3])` is the shape `[1, 2, 3, 4, 5]`, still a shape.
    shape_argument: shape_argument_thread, shape_argument_process
}

fn chained_calls(placement: Placement) {
    let session = open(&placement, 4, 1);
    let values = arange(0.0, 128, 1.0);
    let x = f32s(&[8, 16], &values);
    let transposed: Vec<f32> = (0..16 * 8).map(|n| values[(n % 8) * 16 + n / 8]).collect();
    let once = call(&session, "transpose", &[CallArg::Array(&x)]);
    let twice = call(&session, "transpose", &[CallArg::Register(&once)]);
    session.sync_all().unwrap();
    expect_on(&session, &once, 0..4, &f32s(&[16, 8], &transposed));
    expect_on(&session, &twice, 0..4, &x);
}

scenario! {
    /// Scenario 6: One call's result register is the next call's argument: transpose
    /// (8, 16) → (16, 8) → (8, 16), both results fetched and checked on every worker.
    chained_calls: chained_calls_thread, chained_calls_process
}

fn worker_count(placement: Placement) {
    for workers in [1, 2, 4] {
        let session = open(&placement, workers, 1);
        assert_eq!(session.num_workers(), workers);
        let ids = call(&session, "replica_id", &[]);
        session.sync_all().unwrap();
        for worker in 0..workers {
            expect_value(&session, &ids, [worker], &HostValue::Int(worker as i64));
        }
        match session.debug_get(&ids, workers) {
            Err(SessionError::NoWorker { worker, workers: n }) => {
                assert_eq!((worker, n), (workers, workers))
            }
            other => panic!("worker {workers} of {workers} does not exist: {other:?}"),
        }
    }
}

scenario! {
    /// Scenario 7: Sessions of 1, 2 and 4 workers have exactly that many (each answers with its own
    /// replica id; the one past the end is an error).
    worker_count: worker_count_thread, worker_count_process
}

fn register_reuse(placement: Placement) {
    let session = open(&placement, 4, 1);
    let first = call(&session, "add_one", &[CallArg::Int(1)]);
    let second = call(&session, "add_one", &[CallArg::Int(2)]);
    let third = call(&session, "add_one", &[CallArg::Int(3)]);
    session.sync_all().unwrap();
    let (id1, id2, id3) = (first.id(), second.id(), third.id());
    assert!(id1 >= 1 && id1 < id2 && id2 < id3, "{id1} {id2} {id3}");
    drop(first);
    drop(third);

    // Last in, first out: the id freed last comes back first. A copy to worker 0 gives the
    // other workers zeros: none of them may show the value 4 the id held before.
    let x = f32s(&[3], &[7.0, 8.0, 9.0]);
    let copied = session.copy_to_worker0(&x).unwrap();
    assert_eq!(copied.id(), id3);
    expect_on(&session, &copied, [0], &x);
    expect_on(&session, &copied, 1..4, &zeros(&[3]));

    // Then the one freed before it; an array from `empty` is zeros, not the stale 2.
    let zeroed = empty(&session, &[2, 2]);
    assert_eq!(zeroed.id(), id1);
    expect_on(&session, &zeroed, 0..4, &zeros(&[2, 2]));

    // A call that fails on worker 2 into a reused id leaves nothing there, not 7, 8, 9.
    drop(copied);
    let failed = call(&session, "fail_on_replica", &[CallArg::Int(2)]);
    assert_eq!(failed.id(), id3);
    assert!(session.sync_all().is_err(), "worker 2's call failed");
    let stale = session.debug_get(&failed, 2);
    assert!(
        stale.is_err(),
        "worker 2 sees {stale:?} after a failed call"
    );
    assert_eq!(session.debug_get(&failed, 0).unwrap(), HostValue::Int(2));

    // Ids never handed out come after the freed ones.
    let fresh = call(&session, "add_one", &[CallArg::Int(0)]);
    assert_eq!(fresh.id(), id3 + 1);
    drop(second);
}

scenario! {
    /// Scenario 8: A freed register id is reused last in, first out, and its stale value is never
    /// observed (not on a worker a copy skipped, not in `empty`, not after a failed call).
    register_reuse: register_reuse_thread, register_reuse_process
}

fn ordered_copies(placement: Placement) {
    const COPIES: usize = 1000;
    // Registers alive at once: well under a worker's capacity.
    const BATCH: usize = 40;
    let session = open(&placement, 2, 1);
    // Distinct contents and lengths: a copy overtaking another shows up.
    let payload = |i: usize| {
        let values: Vec<i32> = (0..1 + i % 5).map(|j| (i * 10 + j) as i32).collect();
        HostArray::from_i32(&[values.len() as u32], &values).unwrap()
    };
    for start in (0..COPIES).step_by(BATCH) {
        let regs: Vec<Register> = (start..start + BATCH)
            .map(|i| session.copy_to_worker0(&payload(i)).unwrap())
            .collect();
        for (i, reg) in (start..).zip(&regs) {
            assert_eq!(
                session.copy_from_worker0(reg).unwrap(),
                payload(i),
                "copy {i}"
            );
        }
        // Dropping them frees the ids the next batch reuses.
    }
}

scenario! {
    /// Scenario 9: 1,000 back-to-back copies to worker 0 (pipelined, 40 at a time) and back, each
    /// with its own contents and length, arrive in order, freed ids reused in between.
    ordered_copies: ordered_copies_thread, ordered_copies_process
}
