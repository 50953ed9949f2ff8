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
//! # Across cores
//!
//! Every element is combined from the same element of every input and nothing else, so an
//! array may be cut into ranges combined at once on several cores ([`parts`],
//! [`on_cores`]) without changing a bit: each core reads its range of every input once and
//! writes its range of the output once. The cuts fall every so many [`LINE`]s from the
//! array's start (whole elements of every type; on an aligned array, no cache line written
//! by two cores), and an array is cut only where each part holds about [`PART_MIN`] bytes
//! or more: a part's thread costs its start, which a smaller part does not win back. There
//! are as many parts as the host has cores, at most [`MOST_PARTS`].
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

use std::ops::Range;
use std::sync::OnceLock;

use tessera_core::dtype::DataType;
use tessera_core::wire::ReduceOp;

/// Elements combined per block: the accumulator (8 bytes an element) and one block of each
/// input stay in the cache while the inputs are folded into it.
pub const BLOCK: usize = 4096;

/// What an empty sum is: −0.0, the one value `x` with `NOTHING + x == x` bit for bit for
/// every `x` (`+0.0 + -0.0` is `+0.0`).
pub const NOTHING: f64 = -0.0;

/// Where an array may be cut between cores: a cache line, a whole number of elements of
/// every type combined.
pub const LINE: usize = 64;

/// The fewest bytes (of each input) a part of an array cut between cores holds: below
/// this, a second thread's start, and its core's turns shared with the device threads
/// still looking for their next request, cost more than the half of the work it takes
/// over (four f32 inputs on a two-core host: the README gives the runs).
pub const PART_MIN: usize = 2 << 20;

/// The most parts an array is cut into: the fold is bound by memory, which a few cores
/// already keep busy, and every part's thread costs its start.
pub const MOST_PARTS: usize = 8;

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

/// The cores this host runs threads on (asked once: the answer reads the cgroup's files,
/// tens of microseconds, more than a small allreduce).
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// The byte ranges an array of `len` bytes is cut into between cores (module doc, "Across
/// cores"): consecutive, together all of `0..len`, each but the last a whole number of
/// [`LINE`]s and each about [`PART_MIN`] or more; one range (the whole) below twice
/// [`PART_MIN`] or on one core.
pub fn parts(len: usize) -> impl Iterator<Item = Range<usize>> {
    parts_for(len, cores())
}

/// [`parts`] on a host of `cores` cores.
pub fn parts_for(len: usize, cores: usize) -> impl Iterator<Item = Range<usize>> {
    let count = (len / PART_MIN).clamp(1, cores.clamp(1, MOST_PARTS));
    // `count` parts of `PART_MIN` or more fit, so rounding up to a line leaves none empty.
    let size = len.div_ceil(count).next_multiple_of(LINE);
    (0..count).map(move |i| (i * size).min(len)..((i + 1) * size).min(len))
}

/// Runs `work` on every one of `parts`, each on a core of its own: the first on the
/// calling thread, the others on threads that last as long as the call. The first failure
/// (in the parts' order) is the answer, once every part has ended; a part's panic goes on
/// as a panic here.
pub fn on_cores<P: Send, E: Send>(
    parts: impl IntoIterator<Item = P>,
    work: impl Fn(P) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let mut parts = parts.into_iter().peekable();
    let Some(first) = parts.next() else {
        return Ok(());
    };
    if parts.peek().is_none() {
        // One part: no thread, no scope (a small array's whole cost is its calls).
        return work(first);
    }
    std::thread::scope(|scope| {
        let work = &work;
        let others: Vec<_> = parts.map(|part| scope.spawn(move || work(part))).collect();
        let mine = work(first);
        others.into_iter().fold(mine, |outcome, part| {
            let theirs = part
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            outcome.and(theirs)
        })
    })
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
/// by the member count when `mean` and rounded once: for so few inputs, the accumulator's
/// round trip through memory cost as much as the fold itself.
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
mod tests;
