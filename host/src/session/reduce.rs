//! The element-wise combination an allreduce computes, one block of elements at a time, so
//! that the same code serves arrays copied to the host and arrays read in place from the
//! workers' memory.
//!
//! # Rules
//!
//! - Floats (f32, f64) are combined in f64, in rank order, and rounded once to the type:
//!   an f32 sum of four workers is the f64 sum rounded, not three f32 roundings.
//! - Integers (i32, i64) are combined in i64 with checked arithmetic: an overflow, or a
//!   result that does not fit the type, is [`SessionError::Overflow`], never a wrap.
//! - `Avg` divides the sum by the number of members (integers truncate, as integer
//!   division does). `Min` and `Max` of floats skip NaN, as `f64::min` does.
//! - Every input block must be as long as the output block: anything else is an error,
//!   never a panic or a short result.

use tessera_core::dtype::DataType;

use super::collective::ReduceOp;
use super::SessionError;

/// Elements combined per block: the accumulator (8 bytes an element) and one block of each
/// input stay in the cache while the inputs are folded into it.
pub const BLOCK: usize = 4096;

const OPERATION: &str = "allreduce";

/// True for the element types an allreduce combines.
pub fn supported(dtype: DataType) -> bool {
    matches!(
        dtype,
        DataType::F32 | DataType::F64 | DataType::I32 | DataType::I64
    )
}

/// Combines `inputs` (the same block of every member's array, in rank order) into `out`,
/// all little-endian elements of `dtype`. An input of another length is
/// [`SessionError::Elements`] naming its rank among the inputs as the worker (callers check
/// lengths first, naming the worker).
pub fn combine(
    dtype: DataType,
    op: ReduceOp,
    inputs: &[&[u8]],
    out: &mut [u8],
) -> Result<(), SessionError> {
    if let Some(short) = inputs.iter().position(|input| input.len() != out.len()) {
        let size = dtype.size().max(1);
        return Err(SessionError::Elements {
            operation: OPERATION,
            worker: short,
            expected: out.len() / size,
            actual: inputs[short].len() / size,
        });
    }
    let members = inputs.len().max(1);
    match dtype {
        DataType::F32 => floats::<4>(
            inputs,
            out,
            op,
            members,
            |b| f64::from(f32::from_le_bytes(b)),
            |v| (v as f32).to_le_bytes(),
        ),
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
        other => {
            return Err(SessionError::Dtype {
                operation: OPERATION,
                dtype: other,
            })
        }
    }
    Ok(())
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

/// Floats folded with `step` into an f64 accumulator a block at a time, up to four inputs
/// per pass over it (in rank order: `((a0 · a1) · a2) · a3`), then divided by the member
/// count when `mean`, and rounded once into `out`.
fn floats_with<const N: usize>(
    inputs: &[&[u8]],
    out: &mut [u8],
    (mean, members): (bool, usize),
    read: impl Fn([u8; N]) -> f64 + Copy,
    write: impl Fn(f64) -> [u8; N],
    step: impl Fn(f64, f64) -> f64 + Copy,
) {
    let mut acc = [0f64; BLOCK];
    for (block, out) in out.chunks_mut(BLOCK * N).enumerate() {
        let acc = &mut acc[..out.len() / N];
        let at = block * BLOCK * N;
        for (pass, group) in inputs.chunks(4).enumerate() {
            let mut views = [&[][..]; 4];
            for (view, input) in views.iter_mut().zip(group) {
                *view = input.get(at..at + out.len()).unwrap_or_default();
            }
            fold(acc, &views[..group.len()], pass == 0, read, step);
        }
        for (a, to) in acc.iter().zip(out.chunks_exact_mut(N)) {
            // A division, not a multiplication by 1/n: the mean of equal values is exact.
            let v = if mean { a / members as f64 } else { *a };
            to.copy_from_slice(&write(v));
        }
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
    let r = move |chunk: &[u8]| read(bytes(chunk));
    let head = move |x: f64, v: f64| if first { v } else { step(x, v) };
    let acc = acc.iter_mut();
    match group {
        [a, b, c, d] => acc
            .zip(a.chunks_exact(N))
            .zip(b.chunks_exact(N))
            .zip(c.chunks_exact(N))
            .zip(d.chunks_exact(N))
            .for_each(|((((x, a), b), c), d)| {
                *x = step(step(step(head(*x, r(a)), r(b)), r(c)), r(d));
            }),
        [a, b, c] => acc
            .zip(a.chunks_exact(N))
            .zip(b.chunks_exact(N))
            .zip(c.chunks_exact(N))
            .for_each(|(((x, a), b), c)| *x = step(step(head(*x, r(a)), r(b)), r(c))),
        [a, b] => acc
            .zip(a.chunks_exact(N))
            .zip(b.chunks_exact(N))
            .for_each(|((x, a), b)| *x = step(head(*x, r(a)), r(b))),
        [a] => acc
            .zip(a.chunks_exact(N))
            .for_each(|(x, a)| *x = head(*x, r(a))),
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
) -> Result<(), SessionError> {
    let overflow = || SessionError::Overflow {
        operation: OPERATION,
    };
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

    #[test]
    fn integer_overflow_is_an_error_not_a_wrap() {
        let max: Vec<u8> = i32::MAX.to_le_bytes().to_vec();
        let one: Vec<u8> = 1i32.to_le_bytes().to_vec();
        let mut out = vec![0u8; 4];
        let outcome = combine(DataType::I32, ReduceOp::Sum, &[&max, &one], &mut out);
        assert!(matches!(outcome, Err(SessionError::Overflow { .. })));
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
            Err(SessionError::Elements {
                worker: 1,
                expected: 2,
                actual: 1,
                ..
            })
        ));
        let outcome = combine(DataType::U8, ReduceOp::Sum, &[&[0u8; 8]], &mut out);
        assert!(matches!(outcome, Err(SessionError::Dtype { .. })));
    }
}
