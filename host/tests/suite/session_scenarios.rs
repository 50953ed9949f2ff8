//! TVM Disco's session scenarios (`shared/conformance/disco_scenarios.md`) on tessera's
//! [`Session`]: each scenario is written once, as a function of the placement, and run on
//! the thread placement and the child-process placement; the ones the list marks (Q) also
//! run on 2 QEMU workers (ignored by default: `tests/ci.sh` runs them).
//!
//! Expected values are computed on the host, never read from a worker. Each test's doc
//! names what it checks; for 26–31, the Disco failure it guards against.
//!
//! Not here: 23–25 (sharded loading) are `tests/session_loader.rs`; 30 (the controller dies, its
//! child-process and QEMU workers exit) is `tests/signals.rs`. Scenario 27 (a worker killed
//! mid-session) runs on the child-process placement only: a thread worker cannot die
//! without its controller, which is scenario 30.

use crate::common;

use std::path::PathBuf;
use std::process;
use std::thread;
use std::time::{Duration, Instant};

use tessera_core::dtype::DataType;
use tessera_host::runtime::Placement;
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::{
    CallArg, Command, HostArray, HostValue, Register, Session, SessionError,
};

/// Device memory per host-placed worker.
const MEMORY: usize = 4 << 20;

/// How long a dead worker may take to be reported.
const PROMPT: Duration = Duration::from_secs(5);

fn process_placement() -> Placement {
    Placement::Process(PathBuf::from(env!("CARGO_BIN_EXE_tessera")))
}

/// 4 workers, or 2 under QEMU.
fn workers_on(placement: &Placement) -> usize {
    if matches!(placement, Placement::Qemu(_)) {
        2
    } else {
        4
    }
}

fn open_with(placement: &Placement, workers: usize, groups: usize, memory: usize) -> Session {
    Session::new(placement, workers, groups, memory).unwrap_or_else(|e| {
        panic!("a session of {workers} workers in {groups} groups on {placement:?}: {e}")
    })
}

fn open(placement: &Placement, workers: usize, groups: usize) -> Session {
    open_with(placement, workers, groups, MEMORY)
}

/// Instantiates scenario `$run` once per placement, the doc comment on every test.
macro_rules! scenario {
    ($(#[$doc:meta])* $run:ident: $thread:ident, $process:ident) => {
        $(#[$doc])*
        #[test]
        fn $thread() {
            $run(Placement::Thread);
        }

        $(#[$doc])*
        #[test]
        fn $process() {
            $run(process_placement());
        }
    };
    ($(#[$doc:meta])* $run:ident: $thread:ident, $process:ident, $qemu:ident) => {
        scenario!($(#[$doc])* $run: $thread, $process);

        $(#[$doc])*
        #[test]
        #[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
        fn $qemu() {
            $run(Placement::Qemu(common::firmware()));
        }
    };
}

// ---- arrays on the host -------------------------------------------------------------

/// `n` f32s from `start` in steps of `step` (numpy's `arange`).
fn arange(start: f32, n: usize, step: f32) -> Vec<f32> {
    (0..n).map(|i| start + step * i as f32).collect()
}

fn f32s(shape: &[u32], values: &[f32]) -> HostArray {
    HostArray::from_f32(shape, values).expect("the shape matches the values")
}

fn zeros(shape: &[u32]) -> HostArray {
    f32s(shape, &vec![0.0; shape.iter().product::<u32>() as usize])
}

fn negated(values: &[f32]) -> Vec<f32> {
    values.iter().map(|v| -v).collect()
}

// ---- registers on the workers -------------------------------------------------------

/// Register `reg`'s array on `worker`.
fn array(session: &Session, reg: &Register, worker: usize) -> HostArray {
    match session.debug_get(reg, worker) {
        Ok(HostValue::Array(a)) => a,
        other => panic!("register {} on worker {worker}: {other:?}", reg.id()),
    }
}

/// Sets register `reg` on `worker` to `value`.
fn set(session: &Session, reg: &Register, worker: usize, value: &HostArray) {
    session
        .debug_set(reg, worker, &HostValue::Array(value.clone()))
        .unwrap_or_else(|e| panic!("set register {} on worker {worker}: {e}", reg.id()));
}

/// A new zeroed f32 register on every worker.
fn empty(session: &Session, shape: &[u32]) -> Register {
    session
        .empty(DataType::F32, shape)
        .expect("an empty register")
}

/// Asserts that register `reg` holds `expected` on each of `workers`.
fn expect_value(
    session: &Session,
    reg: &Register,
    workers: impl IntoIterator<Item = usize>,
    expected: &HostValue,
) {
    for worker in workers {
        match session.debug_get(reg, worker) {
            Ok(value) => assert_eq!(&value, expected, "worker {worker}"),
            Err(e) => panic!("register {} on worker {worker}: {e}", reg.id()),
        }
    }
}

/// Asserts that register `reg` holds the array `expected` on each of `workers`.
fn expect_on(
    session: &Session,
    reg: &Register,
    workers: impl IntoIterator<Item = usize>,
    expected: &HostArray,
) {
    expect_value(session, reg, workers, &HostValue::Array(expected.clone()));
}

/// Calls the function `name` with `args`.
fn call(session: &Session, name: &str, args: &[CallArg<'_>]) -> Register {
    let function = session.get_function(name).expect("a built-in function");
    session.call(&function, args).expect("the call is sent")
}

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
        integer_round_trip_qemu
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
        tensor_through_worker0_qemu
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

// ---- 10–22: collectives -------------------------------------------------------------

fn reduce_f64(op: ReduceOp, a: f64, b: f64) -> f64 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Min => a.min(b),
        ReduceOp::Max => a.max(b),
        ReduceOp::Avg => (a + b) / 2.0,
    }
}

fn reduce_i32(op: ReduceOp, a: i32, b: i32) -> i32 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Min => a.min(b),
        ReduceOp::Max => a.max(b),
        // Truncating, as the session documents for integers.
        ReduceOp::Avg => (a + b) / 2,
    }
}

fn allreduce(placement: Placement) {
    let session = open(&placement, 2, 1);
    let a: Vec<i32> = (0..12).collect();
    let b: Vec<i32> = (0..12).map(|i| 1 - i).collect();
    let ops = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];
    let as_f32 = |v: &[i32]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    let src = empty(&session, &[3, 4]);
    set(&session, &src, 0, &f32s(&[3, 4], &as_f32(&a)));
    set(&session, &src, 1, &f32s(&[3, 4], &as_f32(&b)));
    let dst = empty(&session, &[3, 4]);
    for op in ops {
        session.allreduce(&src, &dst, op, Scope::Global).unwrap();
        let expected: Vec<f32> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| reduce_f64(op, f64::from(x), f64::from(y)) as f32)
            .collect();
        expect_on(&session, &dst, 0..2, &f32s(&[3, 4], &expected));
    }
    let src = session.empty(DataType::I32, &[3, 4]).unwrap();
    let dst = session.empty(DataType::I32, &[3, 4]).unwrap();
    let i32s = |v: &[i32]| HostArray::from_i32(&[3, 4], v).unwrap();
    set(&session, &src, 0, &i32s(&a));
    set(&session, &src, 1, &i32s(&b));
    for op in ops {
        session.allreduce(&src, &dst, op, Scope::Global).unwrap();
        let expected: Vec<i32> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| reduce_i32(op, x, y))
            .collect();
        expect_on(&session, &dst, 0..2, &i32s(&expected));
    }
}

scenario! {
    /// Scenario 10: Allreduce on 2 workers, w0 = arange(12), w1 = 1 - arange(12), both (3, 4), f32
    /// and i32: sum, prod, min, max and avg are the element-wise op on both workers.
    allreduce: allreduce_thread, allreduce_process
}

fn group_allreduce(placement: Placement) {
    let session = open(&placement, 4, 2);
    // A distinct array per worker; group 1's have another shape, so reading across groups
    // would not even fit.
    let part = |worker: usize| {
        let (shape, n): (&[u32], usize) = if worker < 2 {
            (&[3, 4], 12)
        } else {
            (&[5, 6], 30)
        };
        f32s(shape, &arange(100.0 * worker as f32, n, 1.0))
    };
    let src = empty(&session, &[3, 4]);
    let dst = empty(&session, &[3, 4]);
    for worker in 0..4 {
        set(&session, &src, worker, &part(worker));
    }
    for worker in 2..4 {
        set(&session, &dst, worker, &zeros(&[5, 6]));
    }
    session
        .allreduce(&src, &dst, ReduceOp::Sum, Scope::InGroup)
        .unwrap();
    let sum = |w: usize, shape: &[u32]| {
        let (x, y) = (part(w).to_f32().unwrap(), part(w + 1).to_f32().unwrap());
        f32s(
            shape,
            &x.iter().zip(&y).map(|(a, b)| a + b).collect::<Vec<_>>(),
        )
    };
    expect_on(&session, &dst, 0..2, &sum(0, &[3, 4]));
    expect_on(&session, &dst, 2..4, &sum(2, &[5, 6]));
}

scenario! {
    /// Scenario 11: Allreduce in 2 groups of 2: A (3, 4) on w0, w1 and B (5, 6) on w2, w3; each
    /// group sums its own array and reads nothing of the other's.
    group_allreduce: group_allreduce_thread, group_allreduce_process
}

fn allgather(placement: Placement) {
    let session = open(&placement, 2, 1);
    let all = arange(0.0, 36, 1.0);
    let src = empty(&session, &[3, 3, 2]);
    set(&session, &src, 0, &f32s(&[3, 3, 2], &all[..18]));
    set(&session, &src, 1, &f32s(&[3, 3, 2], &all[18..]));
    let dst = empty(&session, &[3, 4, 3]);
    session.allgather(&src, &dst, Scope::Global).unwrap();
    expect_on(&session, &dst, 0..2, &f32s(&[3, 4, 3], &all));
}

scenario! {
    /// Scenario 12: Allgather is the flat concatenation in rank order: halves of arange(36)
    /// as (3, 3, 2) on w0 and w1 become arange(36) as (3, 4, 3) on both.
    allgather: allgather_thread, allgather_process
}

fn group_allgather(placement: Placement) {
    let session = open(&placement, 4, 2);
    let (first, second) = (arange(0.0, 36, 1.0), arange(1000.0, 48, 1.0));
    let src = empty(&session, &[3, 3, 2]);
    set(&session, &src, 0, &f32s(&[3, 3, 2], &first[..18]));
    set(&session, &src, 1, &f32s(&[3, 3, 2], &first[18..]));
    set(&session, &src, 2, &f32s(&[2, 4, 3], &second[..24]));
    set(&session, &src, 3, &f32s(&[2, 4, 3], &second[24..]));
    let dst = empty(&session, &[3, 4, 3]);
    set(&session, &dst, 2, &zeros(&[2, 6, 4]));
    set(&session, &dst, 3, &zeros(&[2, 6, 4]));
    session.allgather(&src, &dst, Scope::InGroup).unwrap();
    expect_on(&session, &dst, 0..2, &f32s(&[3, 4, 3], &first));
    expect_on(&session, &dst, 2..4, &f32s(&[2, 6, 4], &second));
}

scenario! {
    /// Scenario 13: Allgather in 2 groups: group 0 gathers arange(36) halves into (3, 4, 3), group
    /// 1 gathers halves of another 48 values, (2, 4, 3) each, into (2, 6, 4).
    group_allgather: group_allgather_thread, group_allgather_process
}

fn broadcast(placement: Placement) {
    let session = open(&placement, 2, 1);
    let a = f32s(&[3, 4], &arange(0.5, 12, 2.0));
    let src = session.copy_to_worker0(&a).unwrap();
    let dst = empty(&session, &[3, 4]);
    session
        .broadcast_from_worker0(&src, &dst, Scope::Global)
        .unwrap();
    expect_on(&session, &dst, 0..2, &a);
}

scenario! {
    /// Scenario 14: Broadcast: a (3, 4) array held by w0 only ends up in both workers' destination.
    broadcast: broadcast_thread, broadcast_process
}

fn group_broadcast(placement: Placement) {
    let session = open(&placement, 4, 2);
    let values = arange(1.0, 12, 1.0);
    let (a, minus_a) = (f32s(&[3, 4], &values), f32s(&[3, 4], &negated(&values)));
    let src = empty(&session, &[3, 4]);
    set(&session, &src, 0, &a);
    set(&session, &src, 2, &minus_a);
    let dst = empty(&session, &[3, 4]);
    session
        .broadcast_from_worker0(&src, &dst, Scope::InGroup)
        .unwrap();
    expect_on(&session, &dst, 0..2, &a);
    expect_on(&session, &dst, 2..4, &minus_a);
}

scenario! {
    /// Scenario 15: Broadcast in 2 groups: leaders w0 = a and w2 = -a; then w1 == a and w3 == -a.
    group_broadcast: group_broadcast_thread, group_broadcast_process
}

fn scatter(placement: Placement) {
    let session = open(&placement, 2, 1);
    let values = arange(0.0, 36, 1.0);
    let src = session.copy_to_worker0(&f32s(&[2, 6, 3], &values)).unwrap();
    let dst = empty(&session, &[6, 3]);
    session
        .scatter_from_worker0(&src, &dst, Scope::Global)
        .unwrap();
    expect_on(&session, &dst, [0], &f32s(&[6, 3], &values[..18]));
    expect_on(&session, &dst, [1], &f32s(&[6, 3], &values[18..]));
}

scenario! {
    /// Scenario 16: Scatter: src (2, 6, 3) on w0; w0 gets src[0] and w1 gets src[1].
    scatter: scatter_thread, scatter_process
}

fn scatter_by_count(placement: Placement) {
    let session = open(&placement, 2, 1);
    let values = arange(0.0, 36, 1.0);
    let src = session.copy_to_worker0(&f32s(&[3, 4, 3], &values)).unwrap();
    let dst = empty(&session, &[3, 3, 2]);
    session
        .scatter_from_worker0(&src, &dst, Scope::Global)
        .unwrap();
    expect_on(&session, &dst, [0], &f32s(&[3, 3, 2], &values[..18]));
    expect_on(&session, &dst, [1], &f32s(&[3, 3, 2], &values[18..]));
}

scenario! {
    /// Scenario 17: Scatter splits by flat element count: arange(36) as (3, 4, 3) into (3, 3, 2)
    /// destinations (the shape need not split on an axis) gives w0 = flat[:18] and w1 = flat[18:].
    scatter_by_count: scatter_by_count_thread, scatter_by_count_process
}

fn group_scatter(placement: Placement) {
    let session = open(&placement, 4, 2);
    let values = arange(1.0, 36, 1.0);
    let minus = negated(&values);
    let src = empty(&session, &[2, 6, 3]);
    set(&session, &src, 0, &f32s(&[2, 6, 3], &values));
    set(&session, &src, 2, &f32s(&[2, 6, 3], &minus));
    let dst = empty(&session, &[6, 3]);
    session
        .scatter_from_worker0(&src, &dst, Scope::InGroup)
        .unwrap();
    expect_on(&session, &dst, [0], &f32s(&[6, 3], &values[..18]));
    expect_on(&session, &dst, [1], &f32s(&[6, 3], &values[18..]));
    expect_on(&session, &dst, [2], &f32s(&[6, 3], &minus[..18]));
    expect_on(&session, &dst, [3], &f32s(&[6, 3], &minus[18..]));
}

scenario! {
    /// Scenario 18: Scatter in 2 groups: leaders hold a and -a, (2, 6, 3) each;
    /// w0 = a[0], w1 = a[1], w2 = -a[0], w3 = -a[1].
    group_scatter: group_scatter_thread, group_scatter_process
}

fn gather(placement: Placement) {
    let values = arange(0.0, 36, 1.0);
    let session = open(&placement, 2, 1);
    let src = empty(&session, &[3, 3, 2]);
    set(&session, &src, 0, &f32s(&[3, 3, 2], &values[..18]));
    set(&session, &src, 1, &f32s(&[3, 3, 2], &values[18..]));
    let dst = empty(&session, &[3, 4, 3]);
    session
        .gather_to_worker0(&src, &dst, Scope::Global)
        .unwrap();
    expect_on(&session, &dst, [0], &f32s(&[3, 4, 3], &values));
    expect_on(&session, &dst, [1], &zeros(&[3, 4, 3]));
    drop(session);

    // In groups: each leader gets its own group's concatenation, the others nothing.
    let other = arange(100.0, 36, 1.0);
    let session = open(&placement, 4, 2);
    let src = empty(&session, &[3, 3, 2]);
    for (worker, half) in [&values[..18], &values[18..], &other[..18], &other[18..]]
        .into_iter()
        .enumerate()
    {
        set(&session, &src, worker, &f32s(&[3, 3, 2], half));
    }
    let dst = empty(&session, &[3, 4, 3]);
    session
        .gather_to_worker0(&src, &dst, Scope::InGroup)
        .unwrap();
    expect_on(&session, &dst, [0], &f32s(&[3, 4, 3], &values));
    expect_on(&session, &dst, [2], &f32s(&[3, 4, 3], &other));
    expect_on(&session, &dst, [1, 3], &zeros(&[3, 4, 3]));
}

scenario! {
    /// Scenario 19: Gather: halves (3, 3, 2) on w0 and w1 give w0 arange(36) as (3, 4, 3) (w1's
    /// destination untouched); in 2 groups each leader gets its group's concatenation.
    gather: gather_thread, gather_process
}

fn next_group(placement: Placement) {
    let session = open(&placement, 4, 2);
    let a1 = f32s(&[3, 4], &arange(1.0, 12, 1.0));
    let a2 = f32s(&[3, 4], &arange(-1.0, 12, -0.5));
    let src = empty(&session, &[3, 4]);
    set(&session, &src, 0, &a1);
    set(&session, &src, 1, &a2);
    let dst = empty(&session, &[3, 4]);
    session.send_to_next_group(&src, &dst, 0).unwrap();
    expect_on(&session, &dst, [2], &a1);
    expect_on(&session, &dst, [3], &a2);
    expect_on(&session, &dst, 0..2, &zeros(&[3, 4]));
}

scenario! {
    /// Scenario 20: Hand-off to the next group (4 workers, 2 groups): w0 = a1 and w1 = a2
    /// become w2 == a1 and w3 == a2, by rank.
    next_group: next_group_thread, next_group_process
}

fn point_to_point(placement: Placement) {
    let session = open(&placement, 4, 1);
    let x = f32s(&[3, 4], &arange(3.0, 12, 0.25));
    let src = empty(&session, &[3, 4]);
    set(&session, &src, 2, &x);
    let dst = empty(&session, &[3, 4]);
    session.send_to_worker(&src, 2, 0, &dst).unwrap();
    expect_on(&session, &dst, [0], &x);
    expect_on(&session, &dst, 1..4, &zeros(&[3, 4]));
}

scenario! {
    /// Scenario 21: Point to point: w2 holds X and sends it to w0; w0 == X, nobody else changed.
    point_to_point: point_to_point_thread, point_to_point_process
}

/// Deterministic values uniform in `[-scale, scale)`.
fn uniform(state: &mut u64, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let unit = (*state >> 40) as f32 / (1u64 << 24) as f32;
            (2.0 * unit - 1.0) * scale
        })
        .collect()
}

/// A device function's name and what it computes, in f64.
type Activation = (&'static str, fn(f64) -> f64);

/// GELU, the tanh approximation the device kernel documents, in f64.
fn gelu(x: f64) -> f64 {
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x * x * x);
    0.5 * x * (1.0 + u.tanh())
}

/// `a` (m, k) × `b` (k, n), in f64.
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                out[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    out
}

fn tensor_parallel_mlp(placement: Placement) {
    const D: usize = 128;
    const HALF: usize = D / 2;
    const BATCH: usize = 4;
    let (d, half, batch) = (D as u32, HALF as u32, BATCH as u32);
    let mut state = 22;
    let x = uniform(&mut state, BATCH * D, 1.0);
    let w1 = uniform(&mut state, D * D, 0.2);
    let w2 = uniform(&mut state, D * D, 0.2);
    let w1_transposed: Vec<f32> = (0..D * D).map(|n| w1[(n % D) * D + n / D]).collect();
    let wide = |v: &[f32]| v.iter().copied().map(f64::from).collect::<Vec<_>>();
    let hidden = matmul(&wide(&x), &wide(&w1), BATCH, D, D);

    let session = open(&placement, 2, 1);
    // x to every worker; W1 by columns (a flat scatter of W1ᵀ, transposed back on each
    // worker); W2 by rows (a flat scatter).
    let x_w0 = session.copy_to_worker0(&f32s(&[batch, d], &x)).unwrap();
    let xs = empty(&session, &[batch, d]);
    session
        .broadcast_from_worker0(&x_w0, &xs, Scope::Global)
        .unwrap();
    let w1t_w0 = session
        .copy_to_worker0(&f32s(&[d, d], &w1_transposed))
        .unwrap();
    let w1t_part = empty(&session, &[half, d]);
    session
        .scatter_from_worker0(&w1t_w0, &w1t_part, Scope::Global)
        .unwrap();
    let w1_part = call(&session, "transpose", &[CallArg::Register(&w1t_part)]);
    let w2_w0 = session.copy_to_worker0(&f32s(&[d, d], &w2)).unwrap();
    let w2_part = empty(&session, &[half, d]);
    session
        .scatter_from_worker0(&w2_w0, &w2_part, Scope::Global)
        .unwrap();
    for worker in 0..2 {
        let columns: Vec<f32> = (0..D * HALF)
            .map(|n| w1[(n / HALF) * D + worker * HALF + n % HALF])
            .collect();
        expect_on(&session, &w1_part, [worker], &f32s(&[d, half], &columns));
        let rows = &w2[worker * HALF * D..(worker + 1) * HALF * D];
        expect_on(&session, &w2_part, [worker], &f32s(&[half, d], rows));
    }
    let h = call(
        &session,
        "matmul",
        &[CallArg::Register(&xs), CallArg::Register(&w1_part)],
    );
    let activations: [Activation; 2] = [("relu", |v| v.max(0.0)), ("gelu", gelu)];
    for (name, activation) in activations {
        let a = call(&session, name, &[CallArg::Register(&h)]);
        let y = call(
            &session,
            "matmul",
            &[CallArg::Register(&a), CallArg::Register(&w2_part)],
        );
        let out = empty(&session, &[batch, d]);
        session
            .allreduce(&y, &out, ReduceOp::Sum, Scope::Global)
            .unwrap();
        let activated: Vec<f64> = hidden.iter().map(|&v| activation(v)).collect();
        let expected = matmul(&activated, &wide(&w2), BATCH, D, D);
        for worker in 0..2 {
            let got = array(&session, &out, worker);
            assert_eq!(got.shape(), [batch, d]);
            for (i, (g, e)) in got.to_f32().unwrap().iter().zip(&expected).enumerate() {
                assert!(
                    (f64::from(*g) - e).abs() <= 1e-4,
                    "{name}, worker {worker}, element {i}: {g} on the workers, {e} on the host"
                );
            }
        }
    }
}

scenario! {
    /// Scenario 22: Tensor-parallel MLP on 2 workers: x (4, 128) broadcast from w0,
    /// W1 (128, 128) split by columns and W2 by rows (each worker's shards checked), ReLU and
    /// GELU; the final allreduce(sum) equals the unsharded host computation within 1e-4 on
    /// both workers.
    tensor_parallel_mlp: tensor_parallel_mlp_thread, tensor_parallel_mlp_process
}

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

/// `pgrep -P <this process> -f <pattern>`: this process's children matching `pattern`.
fn children_matching(pattern: &str) -> Vec<u32> {
    let out = process::Command::new("pgrep")
        .args(["-P", &process::id().to_string(), "-f", pattern])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The device processes of this test process started with `memory` bytes (each test that
/// looks for its processes gives its session a memory size of its own: tests run in
/// parallel in this process).
fn devices_with_memory(memory: usize) -> Vec<u32> {
    children_matching(&format!(
        "tessera device --replica [0-9]+ --memory {memory} "
    ))
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
    assert_eq!(devices_with_memory(memory), Vec::<u32>::new());
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
    let pids = devices_with_memory(MEM);
    assert_eq!(pids.len(), 4, "the session's processes: {pids:?}");
    let add_one = session.get_function("add_one").unwrap();
    let two = session.call(&add_one, &[CallArg::Int(1)]).unwrap();
    let gradients = session.empty(DataType::F32, &[4096]).unwrap();
    session.sync_all().unwrap();

    let victim = children_matching(&format!("tessera device --replica 2 --memory {MEM} "));
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
    let pids = devices_with_memory(MEM);
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

    // A handle that outlives its session.
    let session = open(&placement, 2, 1);
    let orphan = call(&session, "add_one", &[CallArg::Int(1)]);
    drop(session);
    drop(orphan);
}

scenario! {
    /// Scenario 29: Shutdown twice, a register handle dropped after shutdown, and one dropped after
    /// its session: all no-ops (later commands are `ShutDown` errors; the workers are gone). Disco:
    /// a second shutdown, or a DRef freed after shutdown, sends to workers that are gone and
    /// crashes or hangs the controller at exit.
    double_shutdown: double_shutdown_thread, double_shutdown_process
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
        devices_with_memory(MEM),
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
