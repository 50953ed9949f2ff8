//! The kernel's rules, each with the bug it catches.

use super::*;

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn combine_f32(op: ReduceOp, inputs: &[Vec<u8>]) -> Vec<f32> {
    let views: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let mut out = vec![0u8; inputs[0].len()];
    combine(DataType::F32, op, &views, &mut out).unwrap();
    out.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Rounding after every addition (f32 accumulation) loses the small terms here; the
/// rule is one rounding of the f64 sum.
#[test]
fn f32_sums_are_rounded_once() {
    let big = f32s(&[16_777_216.0]);
    let small = f32s(&[1.0]);
    let sum = combine_f32(ReduceOp::Sum, &[big, small.clone(), small]);
    assert_eq!(sum, [16_777_218.0]);
}

/// Blocks after the first read the right part of every input (an offset bug showed
/// the first block's values again past element 4096).
#[test]
fn every_block_reads_its_own_elements() {
    let n = BLOCK * 2 + 5;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
    let sum = combine_f32(ReduceOp::Sum, &[f32s(&a), f32s(&b)]);
    assert!(sum.iter().enumerate().all(|(i, &v)| v == 3.0 * i as f32));
    let mean = combine_f32(ReduceOp::Avg, &[f32s(&a), f32s(&b)]);
    assert!(mean.iter().enumerate().all(|(i, &v)| v == 1.5 * i as f32));
    let max = combine_f32(ReduceOp::Max, &[f32s(&a), f32s(&b)]);
    assert_eq!(max, b);
    let min = combine_f32(ReduceOp::Min, &[f32s(&a), f32s(&b)]);
    assert_eq!(min, a);
    let prod = combine_f32(ReduceOp::Prod, &[f32s(&a), f32s(&b)]);
    assert_eq!(prod[n - 1], 2.0 * ((n - 1) as f32).powi(2));
}

/// Inputs are folded four to a pass: every member count from one to nine gives the
/// plain rank-order fold (a pass that restarted the accumulator, or took its inputs out
/// of order, changes these f64 sums: the values cancel differently in another order).
#[test]
fn any_number_of_members_folds_in_rank_order() {
    let pattern = [1e16, 1.0, -1e16, 3.0, 0.5, -7.25, 1e15, 2.0, -1e15];
    for members in 1..=pattern.len() {
        let inputs: Vec<Vec<u8>> = (0..members)
            .map(|rank| {
                (0..10)
                    .flat_map(|i| (pattern[rank] * f64::from(i + 1)).to_le_bytes())
                    .collect()
            })
            .collect();
        let views: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
            let mut out = vec![0u8; 80];
            combine(DataType::F64, op, &views, &mut out).unwrap();
            for i in 0..10u8 {
                let values = (0..members).map(|rank| pattern[rank] * f64::from(i + 1));
                let want = values
                    .reduce(|a, v| match op {
                        ReduceOp::Sum | ReduceOp::Avg => a + v,
                        ReduceOp::Prod => a * v,
                        ReduceOp::Min => a.min(v),
                        ReduceOp::Max => a.max(v),
                    })
                    .unwrap();
                let got = f64::from_le_bytes(out[usize::from(i) * 8..][..8].try_into().unwrap());
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{members} members, {op:?}, element {i}"
                );
            }
        }
    }
}

/// Ranks first: each run folded and rounded to f32, then the runs folded, a mean
/// divided by every worker. Catches runs folded in f64 without the rounding, a mean
/// divided per run or by the number of ranks, and runs taken out of order.
#[test]
fn ranks_first_rounds_each_run_then_folds_the_runs() {
    // Element 0: the first rank's run sums to 2^24, the second's 1 + 2^-25 rounds to 1;
    // 2^24 + 1 is a tie that rounds to even, 2^24. Worker order keeps the 2^-25 to its
    // one rounding (f64 holds 2^24 + 1 + 2^-25), which breaks the tie upwards: 2^24 + 2.
    let runs_of = [
        f32s(&[16_777_216.0, 3.0]),
        f32s(&[0.0, 2.0]),
        f32s(&[0.0, 2.0]),
    ];
    let tiny = f32s(&[2f32.powi(-25), 0.5]);
    let one = f32s(&[1.0, -1.0]);
    let inputs: Vec<&[u8]> = vec![&runs_of[0], &runs_of[1], &runs_of[2], &one, &tiny];
    let read = |out: &[u8]| -> Vec<f32> {
        (out.chunks_exact(4))
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Prod] {
        let mut out = vec![0u8; 8];
        combine_ranks_first(DataType::F32, op, &inputs, &[3, 2], &mut out).unwrap();
        let values: Vec<Vec<f32>> = inputs.iter().map(|i| read(i)).collect();
        let fold = |vs: &[f64]| {
            vs.iter()
                .copied()
                .reduce(|a, v| match op {
                    ReduceOp::Sum | ReduceOp::Avg => a + v,
                    ReduceOp::Prod => a * v,
                    ReduceOp::Min => a.min(v),
                    ReduceOp::Max => a.max(v),
                })
                .unwrap()
        };
        let want: Vec<f32> = (0..2)
            .map(|e| {
                let column =
                    |r: Range<usize>| -> Vec<f64> { r.map(|w| f64::from(values[w][e])).collect() };
                let a = fold(&column(0..3)) as f32;
                let b = fold(&column(3..5)) as f32;
                let total = fold(&[f64::from(a), f64::from(b)]);
                let total = if op == ReduceOp::Avg {
                    total / 5.0
                } else {
                    total
                };
                total as f32
            })
            .collect();
        assert_eq!(read(&out), want, "{op:?}");
    }
    let mut out = vec![0u8; 8];
    combine_ranks_first(DataType::F32, ReduceOp::Sum, &inputs, &[3, 2], &mut out).unwrap();
    assert_eq!(read(&out)[0], 16_777_216.0);
    let mut worker_order = vec![0u8; 8];
    combine(DataType::F32, ReduceOp::Sum, &inputs, &mut worker_order).unwrap();
    assert_eq!(
        read(&worker_order)[0],
        16_777_218.0,
        "the orders differ here"
    );
}

/// One run is worker order (a mean divided once, not rounded twice); integers are
/// always folded in worker order; runs that do not add up are refused.
#[test]
fn ranks_first_with_one_run_or_integers_is_worker_order() {
    let a = f32s(&[1.0, 16_777_216.0]);
    let b = f32s(&[2.0, 1.0]);
    let c = f32s(&[4.0, 1.0]);
    let inputs: Vec<&[u8]> = vec![&a, &b, &c];
    let (mut one, mut plain) = (vec![0u8; 8], vec![0u8; 8]);
    combine_ranks_first(DataType::F32, ReduceOp::Avg, &inputs, &[3], &mut one).unwrap();
    combine(DataType::F32, ReduceOp::Avg, &inputs, &mut plain).unwrap();
    assert_eq!(one, plain);
    let ints: Vec<Vec<u8>> = [i32::MAX, 1, -5]
        .iter()
        .map(|v: &i32| v.to_le_bytes().to_vec())
        .collect();
    let views: Vec<&[u8]> = ints.iter().map(Vec::as_slice).collect();
    let mut out = vec![0u8; 4];
    // Ranks first would overflow i32 in the first run's partial; worker order, in i64,
    // does not.
    combine_ranks_first(DataType::I32, ReduceOp::Sum, &views, &[2, 1], &mut out).unwrap();
    assert_eq!(
        i32::from_le_bytes(out[..].try_into().unwrap()),
        i32::MAX - 4
    );
    let refused = combine_ranks_first(DataType::F32, ReduceOp::Sum, &inputs, &[1, 1], &mut one);
    assert!(matches!(
        refused,
        Err(CombineError::Runs { inputs: 3, runs: 2 })
    ));
}

#[test]
fn integer_overflow_is_an_error_not_a_wrap() {
    let max: Vec<u8> = i32::MAX.to_le_bytes().to_vec();
    let one: Vec<u8> = 1i32.to_le_bytes().to_vec();
    let mut out = vec![0u8; 4];
    let outcome = combine(DataType::I32, ReduceOp::Sum, &[&max, &one], &mut out);
    assert!(matches!(outcome, Err(CombineError::Overflow)));
    let minus: Vec<u8> = (-7i32).to_le_bytes().to_vec();
    combine(DataType::I32, ReduceOp::Avg, &[&minus, &one], &mut out).unwrap();
    assert_eq!(i32::from_le_bytes(out[..4].try_into().unwrap()), -3);
}

#[test]
fn inputs_of_another_length_are_refused() {
    let mut out = vec![0u8; 8];
    let outcome = combine(
        DataType::F32,
        ReduceOp::Sum,
        &[&[0u8; 8], &[0u8; 4]],
        &mut out,
    );
    assert!(matches!(
        outcome,
        Err(CombineError::Length {
            input: 1,
            expected: 2,
            actual: 1,
        })
    ));
    let outcome = combine(DataType::U8, ReduceOp::Sum, &[&[0u8; 8]], &mut out);
    assert!(matches!(outcome, Err(CombineError::Dtype(DataType::U8))));
}

/// Catches a fold that starts from +0.0: a sum (or mean) of −0.0s must stay −0.0, in
/// a session allreduce and in a step's round alike.
#[test]
fn a_sum_of_negative_zeros_is_negative_zero() {
    let zeros = [f32s(&[-0.0, -0.0]), f32s(&[-0.0, 0.0])];
    for op in [ReduceOp::Sum, ReduceOp::Avg] {
        let sum = combine_f32(op, &zeros);
        assert_eq!(sum[0].to_bits(), (-0.0f32).to_bits(), "{op:?}");
        assert_eq!(sum[1].to_bits(), 0.0f32.to_bits(), "{op:?}");
    }
    let mut acc = [NOTHING; 2];
    for zero in &zeros {
        add_f32(&mut acc, zero).unwrap();
    }
    assert_eq!(
        acc.map(f64::to_bits),
        [(-0.0f64).to_bits(), 0.0f64.to_bits()]
    );
}

/// Catches two kernels drifting apart: the step's sum then rounding is the session's
/// f32 sum and mean, bit for bit, across block boundaries and member counts.
#[test]
fn the_steps_sum_is_the_sessions() {
    let n = BLOCK + 7;
    for members in 1..=6usize {
        let inputs: Vec<Vec<u8>> = (0..members)
            .map(|m| {
                let values: Vec<f32> = (0..n)
                    .map(|i| ((i * 7919 + m * 104_729) % 1000) as f32 * 1e-3 - 0.4)
                    .collect();
                f32s(&values)
            })
            .collect();
        let views: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let mut acc = vec![NOTHING; n];
        for input in &views {
            add_f32(&mut acc, input).unwrap();
        }
        for (op, divisor) in [(ReduceOp::Sum, 1.0), (ReduceOp::Avg, members as f64)] {
            let mut step = vec![0u8; n * 4];
            round_f32(&acc, divisor, &mut step).unwrap();
            let mut session = vec![0u8; n * 4];
            combine(DataType::F32, op, &views, &mut session).unwrap();
            assert!(step == session, "{members} members, {op:?}");
        }
    }
}

/// Catches a fold on arrival that drifts from the session's fold of a whole group:
/// sums started at `NOTHING` with one input added at a time round to the session's
/// bits, signed zeros, infinities, NaN and cancellations included.
#[test]
fn folding_one_input_at_a_time_is_the_sessions_sum() {
    let specials = [
        -0.0f32,
        0.0,
        1e30,
        -1e30,
        1.0,
        f32::INFINITY,
        f32::MIN_POSITIVE,
    ];
    let n = specials.len();
    for members in 1..=5usize {
        let inputs: Vec<Vec<u8>> = (0..members)
            .map(|m| {
                let values: Vec<f32> = (0..3 * n)
                    .map(|i| match i / n {
                        0 => specials[(i + m) % n],
                        1 => specials[(i * 3 + m * 5) % n] * 0.5,
                        _ if m == members - 1 && i % 2 == 0 => f32::NAN,
                        _ => -specials[(i + 2 * m) % n],
                    })
                    .collect();
                f32s(&values)
            })
            .collect();
        let mut folded = vec![NOTHING; 3 * n];
        for input in &inputs {
            add_f32(&mut folded, input).unwrap();
        }
        let mut step = vec![0u8; 3 * n * 4];
        round_f32(&folded, 1.0, &mut step).unwrap();
        let views: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let mut session = vec![0u8; 3 * n * 4];
        combine(DataType::F32, ReduceOp::Sum, &views, &mut session).unwrap();
        assert!(step == session, "{members} members");
    }
}

#[test]
fn the_step_kernel_refuses_other_lengths() {
    let mut acc = [0f64; 2];
    assert_eq!(
        add_f32(&mut acc, &[0u8; 12]),
        Err(CombineError::Length {
            input: 0,
            expected: 2,
            actual: 3
        })
    );
    assert!(round_f32(&acc, 1.0, &mut [0u8; 4]).is_err());
}
