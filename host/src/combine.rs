//! How an element-wise reduction combines arrays: one kernel for the session's allreduce
//! and the training step's reduction rounds, one block of elements at a time, so that
//! the same code serves arrays copied to the host and arrays read in place from device
//! memory. The operations are core's [`ReduceOp`], the one type a device's contributions
//! and the session's collectives share.
//!
//! # Rules
//!
//! - Floats (f32, f64) are read exactly into f64, folded in the order given (rank order
//!   in a session, replica order in a step: the same inputs give the same bits, however
//!   the members' messages raced), and rounded once to the type: an f32 sum of four
//!   members is the f64 sum rounded, not three f32 roundings.
//! - A fold starts from its first input, not from zero: a sum of −0.0s is −0.0, as it is
//!   in IEEE arithmetic (a sum started at +0.0 would turn it into +0.0). A fold that
//!   takes its inputs one at a time as they arrive (a step's round) starts from −0.0, the
//!   sum's identity ([`NOTHING`]): `NOTHING + x` is `x`, so it ends on the same bits, and a
//!   partial fold that has no input at all is `NOTHING`.
//! - Integers (i32, i64) are combined in i64 with checked arithmetic: an overflow, or a
//!   result that does not fit the type, is [`CombineError::Overflow`], never a wrap.
//! - `Avg` divides the sum by the number of members (integers truncate, as integer
//!   division does); a division, not a multiplication by 1/n, so the mean of equal
//!   values is exact. `Min` and `Max` of floats skip NaN, as `f64::min` does.
//! - Every input must be as long as the output: anything else is an error, never a
//!   panic or a short result.
//!
//! # Orders
//!
//! An allreduce combines its sources in one of two orders ([`ReduceOrder`]):
//!
//! - **Worker order** (the default): the fold above over every worker's source, in worker
//!   order — the same bits wherever the workers run, on one host or across MPI ranks.
//! - **Ranks first**: the workers are taken in runs, one per rank hosting them (consecutive
//!   workers); each run is folded by the rule above (a mean's as a sum) and rounded once to
//!   the type, then the runs' results are folded in rank order, a mean divided by the
//!   number of workers, and rounded once more. Across ranks, each rank then combines its
//!   own workers before any byte leaves it, and only one array per rank crosses between
//!   ranks; the result can differ from worker order's in the last bits, and is the same
//!   bits for the same ranks and workers per rank. With one run (every worker on one
//!   rank) it is worker order's result, and integers, exact in any order, are always
//!   folded in worker order ([`combine_ranks_first`]).

use tessera_core::dtype::DataType;
use tessera_core::wire::ReduceOp;

/// Elements combined per block: the accumulator (8 bytes an element) and one block of each
/// input stay in the cache while the inputs are folded into it.
pub const BLOCK: usize = 4096;

/// What an empty sum is: −0.0, the one value `x` with `NOTHING + x == x` bit for bit for
/// every `x` (`+0.0 + -0.0` is `+0.0`).
pub const NOTHING: f64 = -0.0;

/// Why inputs could not be combined; nothing was written.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error,
)]
pub enum CombineError {
    /// Input `input` (its place among the inputs) holds `actual` elements, the output
    /// `expected`.
    #[error("input {input} holds {actual} elements where {expected} are combined")]
    Length {
        /// The input's place among the inputs.
        input: usize,
        /// Elements of the output.
        expected: usize,
        /// Elements of the input.
        actual: usize,
    },
    /// An integer result that does not fit its type.
    #[error("an integer result does not fit its type")]
    Overflow,
    /// An element type that is not combined.
    #[error("{0:?} elements are not combined")]
    Dtype(DataType),
    /// Runs of inputs (one per rank) that do not add up to the inputs.
    #[error("{runs} ranks' runs of inputs do not add up to the {inputs} inputs")]
    Runs {
        /// Inputs given.
        inputs: usize,
        /// Runs given.
        runs: usize,
    },
}

/// True for the element types an allreduce combines.
pub fn supported(dtype: DataType) -> bool {
    matches!(
        dtype,
        DataType::F32 | DataType::F64 | DataType::I32 | DataType::I64
    )
}

/// In what order an allreduce combines its workers' sources (module doc, "Orders").
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum ReduceOrder {
    /// Every worker's source folded in worker order: one host's result bit for bit,
    /// whatever the ranks.
    #[default]
    Workers,
    /// Each rank's workers folded first (rounded to the type), then the ranks' results in
    /// rank order: deterministic for fixed ranks and workers per rank, and only one array
    /// per rank crosses between ranks.
    RanksFirst,
}

/// Combines `inputs` (the same elements of every member's array, in rank order) into
/// `out`, all little-endian elements of `dtype`.
pub fn combine(
    dtype: DataType,
    op: ReduceOp,
    inputs: &[&[u8]],
    out: &mut [u8],
) -> Result<(), CombineError> {
    combine_over(dtype, op, inputs, out, inputs.len())
}

/// Combines `inputs` ranks first (module doc, "Orders"): `runs[r]` consecutive inputs are
/// rank `r`'s (their sum must be the number of inputs). Allocates one array per run.
pub fn combine_ranks_first(
    dtype: DataType,
    op: ReduceOp,
    inputs: &[&[u8]],
    runs: &[usize],
    out: &mut [u8],
) -> Result<(), CombineError> {
    let floats = matches!(dtype, DataType::F32 | DataType::F64);
    if runs.len() <= 1 || !floats {
        return combine(dtype, op, inputs, out);
    }
    same_length(inputs, out.len(), dtype.size().max(1))?;
    if runs.iter().sum::<usize>() != inputs.len() {
        return Err(CombineError::Runs {
            inputs: inputs.len(),
            runs: runs.len(),
        });
    }
    let mut partials = Vec::with_capacity(runs.len());
    let mut rest = inputs;
    for &run in runs {
        let (mine, others) = rest.split_at(run);
        let mut partial = vec![0u8; out.len()];
        combine_over(dtype, partial_op(op), mine, &mut partial, 1)?;
        partials.push(partial);
        rest = others;
    }
    let partials: Vec<&[u8]> = partials.iter().map(Vec::as_slice).collect();
    combine_over(dtype, op, &partials, out, inputs.len())
}

/// What a rank's run of workers is folded with, ranks first: a mean's partial is a sum
/// (divided once, by every worker, when the runs are combined).
pub fn partial_op(op: ReduceOp) -> ReduceOp {
    match op {
        ReduceOp::Avg => ReduceOp::Sum,
        other => other,
    }
}

/// [`combine`], a mean dividing by `members` (at least 1) rather than the number of
/// inputs: the ranks' partial sums of a mean, combined, divide by every worker.
pub fn combine_over(
    dtype: DataType,
    op: ReduceOp,
    inputs: &[&[u8]],
    out: &mut [u8],
    members: usize,
) -> Result<(), CombineError> {
    let size = dtype.size().max(1);
    same_length(inputs, out.len(), size)?;
    let members = members.max(1);
    match dtype {
        DataType::F32 => floats::<4>(inputs, out, op, members, read_f32, write_f32),
        DataType::F64 => floats::<8>(
            inputs,
            out,
            op,
            members,
            f64::from_le_bytes,
            f64::to_le_bytes,
        ),
        DataType::I32 => ints::<4>(
            inputs,
            out,
            op,
            members,
            |b| i64::from(i32::from_le_bytes(b)),
            |v| i32::try_from(v).ok().map(i32::to_le_bytes),
        )?,
        DataType::I64 => ints::<8>(inputs, out, op, members, i64::from_le_bytes, |v| {
            Some(v.to_le_bytes())
        })?,
        other => return Err(CombineError::Dtype(other)),
    }
    Ok(())
}

/// Adds `input`, a little-endian f32 array as long as `acc`, into `acc`, element by element
/// in f64: the step's rounds fold each contribution as it arrives, into sums started at
/// [`NOTHING`], and add the partial sums across instances before [`round_f32`]. Given a
/// group's inputs in order, the sums hold the bits a fold of all of them at once gives
/// (`NOTHING + x` is `x`), so the step's result is the session's.
pub fn add_f32(acc: &mut [f64], input: &[u8]) -> Result<(), CombineError> {
    same_length(&[input], acc.len() * 4, 4)?;
    for (a, b) in acc.iter_mut().zip(input.chunks_exact(4)) {
        *a += read_f32(bytes(b));
    }
    Ok(())
}

/// Rounds `acc`, each sum divided by `divisor` (1 for a sum, the member count for a
/// mean), once into f32 `out`, which must hold `acc.len()` elements.
pub fn round_f32(acc: &[f64], divisor: f64, out: &mut [u8]) -> Result<(), CombineError> {
    if out.len() != acc.len() * 4 {
        return Err(CombineError::Length {
            input: 0,
            expected: acc.len(),
            actual: out.len() / 4,
        });
    }
    for (a, to) in acc.iter().zip(out.chunks_exact_mut(4)) {
        to.copy_from_slice(&write_f32(a / divisor));
    }
    Ok(())
}

/// Every input `len` bytes long, else which is not (counted in elements of `size` bytes).
fn same_length(inputs: &[&[u8]], len: usize, size: usize) -> Result<(), CombineError> {
    match inputs.iter().position(|input| input.len() != len) {
        Some(input) => Err(CombineError::Length {
            input,
            expected: len / size,
            actual: inputs[input].len() / size,
        }),
        None => Ok(()),
    }
}

fn read_f32(b: [u8; 4]) -> f64 {
    f64::from(f32::from_le_bytes(b))
}

fn write_f32(v: f64) -> [u8; 4] {
    (v as f32).to_le_bytes()
}

/// The `N` bytes of one element (a chunk of exactly `N`, so never the zero fallback).
fn bytes<const N: usize>(chunk: &[u8]) -> [u8; N] {
    <[u8; N]>::try_from(chunk).unwrap_or([0; N])
}

/// Floats: each operation its own instance of [`floats_with`], so that its loops vectorize.
fn floats<const N: usize>(
    inputs: &[&[u8]],
    out: &mut [u8],
    op: ReduceOp,
    members: usize,
    read: impl Fn([u8; N]) -> f64 + Copy,
    write: impl Fn(f64) -> [u8; N],
) {
    let avg = op == ReduceOp::Avg;
    match op {
        ReduceOp::Sum | ReduceOp::Avg => {
            floats_with(inputs, out, (avg, members), read, write, |a, v| a + v)
        }
        ReduceOp::Prod => floats_with(inputs, out, (false, members), read, write, |a, v| a * v),
        ReduceOp::Min => floats_with(inputs, out, (false, members), read, write, f64::min),
        ReduceOp::Max => floats_with(inputs, out, (false, members), read, write, f64::max),
    }
}

/// Floats folded with `step` into an f64 accumulator a block at a time, then divided by
/// the member count when `mean`, and rounded once into `out`.
fn floats_with<const N: usize>(
    inputs: &[&[u8]],
    out: &mut [u8],
    (mean, members): (bool, usize),
    read: impl Fn([u8; N]) -> f64 + Copy,
    write: impl Fn(f64) -> [u8; N],
    step: impl Fn(f64, f64) -> f64 + Copy,
) {
    if inputs.len() <= 4 {
        return in_one_pass(inputs, out, (mean, members), read, write, step);
    }
    let mut acc = [0f64; BLOCK];
    for (block, out) in out.chunks_mut(BLOCK * N).enumerate() {
        let acc = &mut acc[..out.len() / N];
        fold_block::<N>(acc, inputs, block * BLOCK * N, read, step);
        let out = out.as_chunks_mut::<N>().0.iter_mut();
        if mean {
            let members = members as f64;
            acc.iter()
                .zip(out)
                .for_each(|(a, to)| *to = write(a / members));
        } else {
            acc.iter().zip(out).for_each(|(a, to)| *to = write(*a));
        }
    }
}

/// Up to four inputs (the commonest folds: a host's workers, a rank's, a step's replicas)
/// folded element by element straight into `out`, in the order given, each element divided
/// by the member count when `mean` and rounded once: the accumulator's round trip cost as
/// much as the fold (two inputs took 1.9× a plain f32 sum; in one pass, the same time).
fn in_one_pass<const N: usize>(
    inputs: &[&[u8]],
    out: &mut [u8],
    (mean, members): (bool, usize),
    read: impl Fn([u8; N]) -> f64 + Copy,
    write: impl Fn(f64) -> [u8; N],
    step: impl Fn(f64, f64) -> f64 + Copy,
) {
    let mut views = [&[][..]; 4];
    for (view, input) in views.iter_mut().zip(inputs) {
        *view = input.as_chunks::<N>().0;
    }
    let [a, b, c, d] = views;
    let r = move |chunk: &[u8; N]| read(*chunk);
    let members = members as f64;
    let put = move |v: f64| if mean { write(v / members) } else { write(v) };
    let out = out.as_chunks_mut::<N>().0.iter_mut();
    match inputs.len() {
        4 => (out.zip(a).zip(b).zip(c).zip(d))
            .for_each(|((((to, a), b), c), d)| *to = put(step(step(step(r(a), r(b)), r(c)), r(d)))),
        3 => (out.zip(a).zip(b).zip(c))
            .for_each(|(((to, a), b), c)| *to = put(step(step(r(a), r(b)), r(c)))),
        2 => (out.zip(a).zip(b)).for_each(|((to, a), b)| *to = put(step(r(a), r(b)))),
        1 => out.zip(a).for_each(|(to, a)| *to = put(r(a))),
        _ => {}
    }
}

/// Folds the elements of `inputs` from byte `at` on, as many as `acc` holds, into `acc`
/// (replacing it), up to four inputs per pass over it, in the order given:
/// `((a0 · a1) · a2) · a3`, then `(… · a4) · a5`, and so on.
fn fold_block<const N: usize>(
    acc: &mut [f64],
    inputs: &[&[u8]],
    at: usize,
    read: impl Fn([u8; N]) -> f64 + Copy,
    step: impl Fn(f64, f64) -> f64 + Copy,
) {
    let len = acc.len() * N;
    for (pass, group) in inputs.chunks(4).enumerate() {
        let mut views = [&[][..]; 4];
        for (view, input) in views.iter_mut().zip(group) {
            *view = input.get(at..at + len).unwrap_or_default();
        }
        fold(acc, &views[..group.len()], pass == 0, read, step);
    }
}

/// Folds up to four inputs into `acc` element by element (replacing it when `first`).
fn fold<const N: usize>(
    acc: &mut [f64],
    group: &[&[u8]],
    first: bool,
    read: impl Fn([u8; N]) -> f64 + Copy,
    step: impl Fn(f64, f64) -> f64 + Copy,
) {
    // Whole elements (`as_chunks`: no per-element length check), and the first pass's loop
    // apart from the others' (no per-element branch): both kept the loops from
    // vectorizing, and the kernel ran at half the speed of a plain f32 sum.
    let r = move |chunk: &[u8; N]| read(*chunk);
    let mut views = [&[][..]; 4];
    for (view, input) in views.iter_mut().zip(group) {
        *view = input.as_chunks::<N>().0;
    }
    let [a, b, c, d] = views;
    let acc = acc.iter_mut();
    match (group.len(), first) {
        (4, true) => (acc.zip(a).zip(b).zip(c).zip(d))
            .for_each(|((((x, a), b), c), d)| *x = step(step(step(r(a), r(b)), r(c)), r(d))),
        (4, false) => (acc.zip(a).zip(b).zip(c).zip(d)).for_each(|((((x, a), b), c), d)| {
            *x = step(step(step(step(*x, r(a)), r(b)), r(c)), r(d))
        }),
        (3, true) => (acc.zip(a).zip(b).zip(c))
            .for_each(|(((x, a), b), c)| *x = step(step(r(a), r(b)), r(c))),
        (3, false) => (acc.zip(a).zip(b).zip(c))
            .for_each(|(((x, a), b), c)| *x = step(step(step(*x, r(a)), r(b)), r(c))),
        (2, true) => (acc.zip(a).zip(b)).for_each(|((x, a), b)| *x = step(r(a), r(b))),
        (2, false) => (acc.zip(a).zip(b)).for_each(|((x, a), b)| *x = step(step(*x, r(a)), r(b))),
        (1, true) => acc.zip(a).for_each(|(x, a)| *x = r(a)),
        (1, false) => acc.zip(a).for_each(|(x, a)| *x = step(*x, r(a))),
        _ => {}
    }
}

/// Integers: combined element by element in i64 with checked arithmetic.
fn ints<const N: usize>(
    inputs: &[&[u8]],
    out: &mut [u8],
    op: ReduceOp,
    members: usize,
    read: impl Fn([u8; N]) -> i64,
    write: impl Fn(i64) -> Option<[u8; N]>,
) -> Result<(), CombineError> {
    let overflow = || CombineError::Overflow;
    for (i, to) in out.chunks_exact_mut(N).enumerate() {
        let mut values = inputs
            .iter()
            .map(|input| read(bytes(input.get(i * N..(i + 1) * N).unwrap_or_default())));
        let mut acc = values.next().unwrap_or(0);
        for v in values {
            acc = match op {
                ReduceOp::Sum | ReduceOp::Avg => acc.checked_add(v),
                ReduceOp::Prod => acc.checked_mul(v),
                ReduceOp::Min => Some(acc.min(v)),
                ReduceOp::Max => Some(acc.max(v)),
            }
            .ok_or_else(overflow)?;
        }
        if op == ReduceOp::Avg {
            // Truncating, as integer division does; `members` is at least 1.
            acc /= members as i64;
        }
        to.copy_from_slice(&write(acc).ok_or_else(overflow)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
                    let got =
                        f64::from_le_bytes(out[usize::from(i) * 8..][..8].try_into().unwrap());
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
                    let column = |r: std::ops::Range<usize>| -> Vec<f64> {
                        r.map(|w| f64::from(values[w][e])).collect()
                    };
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
}
