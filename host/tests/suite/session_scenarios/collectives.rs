//! Scenarios 10–22: collectives across the workers, whole and in groups, and the models
//! built on them.

use super::*;

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
    allreduce: allreduce_thread, allreduce_process, serial allreduce_serial
}

/// Folds `values` (one array per worker) element by element in f64 with `op`, a mean's as
/// a sum divided by `members`, rounded once to f32: the kernel's rule.
fn fold_f32(op: ReduceOp, values: &[Vec<f32>], members: usize) -> Vec<f32> {
    (0..values[0].len())
        .map(|i| {
            let mut acc = f64::from(values[0][i]);
            for v in &values[1..] {
                let x = f64::from(v[i]);
                acc = match op {
                    ReduceOp::Sum | ReduceOp::Avg => acc + x,
                    ReduceOp::Prod => acc * x,
                    ReduceOp::Min => acc.min(x),
                    ReduceOp::Max => acc.max(x),
                };
            }
            if op == ReduceOp::Avg {
                acc /= members as f64;
            }
            acc as f32
        })
        .collect()
}

fn allreduce_in_worker_order(placement: Placement) {
    const N: usize = 64;
    let session = open(&placement, 4, 1);
    let mut state = 5;
    // Worker 0 holds huge values, worker 2 their negations, workers 1 and 3 small ones: the
    // f64 sum's rounding depends on the order of its terms, for every element — ((w0 + w1)
    // + w2) + w3 keeps w3 exactly, (w0 + w1) + (w2 + w3) rounds it.
    let huge: Vec<f32> = uniform(&mut state, N, 1.0)
        .iter()
        .map(|v| (1.5 + v) * 1e20)
        .collect();
    let small = |state: &mut u64| -> Vec<f32> {
        let raw = uniform(state, N, 1.0);
        raw.iter()
            .enumerate()
            .map(|(i, v)| v * 10f32.powi(3 + (i % 4) as i32))
            .collect()
    };
    let (w1, w3) = (small(&mut state), small(&mut state));
    let values = [huge.clone(), w1, negated(&huge), w3];
    let src = empty(&session, &[N as u32]);
    for (worker, v) in values.iter().enumerate() {
        set(&session, &src, worker, &f32s(&[N as u32], v));
    }
    let dst = empty(&session, &[N as u32]);
    for op in [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ] {
        session.allreduce(&src, &dst, op, Scope::Global).unwrap();
        // The kernel's rule: read into f64, folded in worker order, rounded once.
        let expected = fold_f32(op, &values, 4);
        expect_on(&session, &dst, 0..4, &f32s(&[N as u32], &expected));
    }
}

scenario! {
    /// An allreduce of f32 values whose sums depend on the order of their terms (±1e20
    /// beside 1e3–1e6) gives, bit for bit, the f64 fold in worker order rounded once, on
    /// every worker and for every op. Catches a combination in another order (partial sums
    /// per host, or per rank across MPI ranks).
    allreduce_in_worker_order: allreduce_in_worker_order_thread, allreduce_in_worker_order_process
}

fn allreduce_ranks_first(placement: Placement) {
    use tessera_host::session::collective::ReduceOrder;
    const N: usize = 64;
    let session = open(&placement, 4, 1);
    let per_rank = session.workers_per_rank();
    assert_eq!(4 % per_rank, 0, "{per_rank} workers per rank");
    let mut state = 11;
    // Order-sensitive values, as in the worker-order scenario: ±1e20 beside 1e3–1e6.
    let huge: Vec<f32> = (uniform(&mut state, N, 1.0).iter())
        .map(|v| (1.5 + v) * 1e20)
        .collect();
    let mut small = || -> Vec<f32> {
        let raw = uniform(&mut state, N, 1.0);
        (raw.iter().enumerate())
            .map(|(i, v)| v * 10f32.powi(3 + (i % 4) as i32))
            .collect()
    };
    let (w1, w3) = (small(), small());
    let values = [huge.clone(), w1, negated(&huge), w3];
    let src = empty(&session, &[N as u32]);
    for (worker, v) in values.iter().enumerate() {
        set(&session, &src, worker, &f32s(&[N as u32], v));
    }
    let dst = empty(&session, &[N as u32]);
    let ops = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];
    // Ranks first: each rank's run folded and rounded to f32, then the runs folded.
    let ranks_first = |op: ReduceOp| {
        let partial_op = if op == ReduceOp::Avg {
            ReduceOp::Sum
        } else {
            op
        };
        let partials: Vec<Vec<f32>> = (values.chunks(per_rank))
            .map(|run| fold_f32(partial_op, run, 1))
            .collect();
        match per_rank {
            4 => fold_f32(op, &values, 4),
            _ => fold_f32(op, &partials, 4),
        }
    };
    session.set_reduce_order(ReduceOrder::RanksFirst);
    for op in ops {
        session.allreduce(&src, &dst, op, Scope::Global).unwrap();
        expect_on(&session, &dst, 0..4, &f32s(&[N as u32], &ranks_first(op)));
        // A call that names worker order overrides the session's.
        let order = ReduceOrder::Workers;
        (session.allreduce_in_order(&src, &dst, op, Scope::Global, order)).unwrap();
        expect_on(
            &session,
            &dst,
            0..4,
            &f32s(&[N as u32], &fold_f32(op, &values, 4)),
        );
    }
    if per_rank == 2 {
        let sum = ranks_first(ReduceOp::Sum);
        assert_ne!(
            sum,
            fold_f32(ReduceOp::Sum, &values, 4),
            "the orders differ"
        );
    }
    // Integers: exact in either order. i32::MAX + 1 - 5 fits, though a rank's run alone
    // (i32::MAX + 1) would not.
    let ints = session.empty(DataType::I32, &[2]).unwrap();
    let out = session.empty(DataType::I32, &[2]).unwrap();
    for (worker, v) in [[i32::MAX, 1], [1, 2], [-5, 3], [0, 4]].iter().enumerate() {
        set(
            &session,
            &ints,
            worker,
            &HostArray::from_i32(&[2], v).unwrap(),
        );
    }
    session
        .allreduce(&ints, &out, ReduceOp::Sum, Scope::Global)
        .unwrap();
    let want = HostArray::from_i32(&[2], &[i32::MAX - 4, 10]).unwrap();
    expect_on(&session, &out, 0..4, &want);
    // An integer sum that overflows in one element only (one rank's slice across ranks) is
    // refused, and no worker's destination is written: not even the other slices.
    // (Element 1's sum changes too, to 11: a slice written by a rank whose own part
    // combined would show.)
    set(
        &session,
        &ints,
        1,
        &HostArray::from_i32(&[2], &[2, 2]).unwrap(),
    );
    set(
        &session,
        &ints,
        2,
        &HostArray::from_i32(&[2], &[0, 3]).unwrap(),
    );
    set(
        &session,
        &ints,
        3,
        &HostArray::from_i32(&[2], &[0, 5]).unwrap(),
    );
    for order in [ReduceOrder::RanksFirst, ReduceOrder::Workers] {
        let refused = session.allreduce_in_order(&ints, &out, ReduceOp::Sum, Scope::Global, order);
        // One host names the overflow itself; across ranks, the rank whose slice it was.
        let text = refused
            .expect_err("an overflowing sum is refused")
            .to_string();
        assert!(text.contains("does not fit its type"), "{order:?}: {text}");
        expect_on(&session, &out, 0..4, &want);
    }
}

scenario! {
    /// Ranks first (opt-in, per session or per call): every op gives, bit for bit, each
    /// rank's run of workers folded in f64 and rounded to f32, then the runs folded (a mean
    /// divided by every worker) — on one host, worker order's result. Catches a rank-first
    /// fold in another order or precision, a call's order ignored, and an integer
    /// allreduce across ranks that writes the slices of the ranks that did not overflow.
    allreduce_ranks_first: allreduce_ranks_first_thread, allreduce_ranks_first_process
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
}

scenario! {
    /// Scenario 19: Gather: halves (3, 3, 2) on w0 and w1 give w0 arange(36) as (3, 4, 3) (w1's
    /// destination untouched).
    gather: gather_thread, gather_process
}

fn group_gather(placement: Placement) {
    let values = arange(0.0, 36, 1.0);
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
    /// Scenario 19, in groups: in 2 groups of 2, each leader gets its own group's
    /// concatenation, the others nothing.
    group_gather: group_gather_thread, group_gather_process
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
