//! Kernels on 2-D arrays: transpose and matrix product.
//!
//! Index arithmetic below stays under an array's element count, whose byte size was
//! checked against `usize` when the array was stored or sent, so it cannot overflow.

use tessera_core::dtype::DataType;
use tessera_core::wire::{Array, ErrorCode};

use super::element::{f32_at, le_f32};
use super::{Args, Output};
use crate::registers::copy_exact;

const BAD: ErrorCode = ErrorCode::BadArguments;

/// The two dimensions of a 2-D array.
fn rows_cols(a: &Array<'_>) -> Result<(u32, u32), ErrorCode> {
    match *a.shape.as_slice() {
        [rows, cols] => Ok((rows, cols)),
        _ => Err(BAD),
    }
}

fn index(n: u32) -> Result<usize, ErrorCode> {
    usize::try_from(n).map_err(|_| BAD)
}

/// `transpose(a)`: a 2-D array of any dtype `(r, c)` becomes `(c, r)` with element
/// `(j, i)` equal to `a`'s `(i, j)`.
pub(super) fn transpose(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    let a = args.array(0)?;
    let (rows, cols) = rows_cols(&a)?;
    Output::array(a.dtype, &[cols, rows], |args, out| {
        let a = args.array(0)?;
        let (rows, cols) = rows_cols(&a)?;
        let (rows, cols, size) = (index(rows)?, index(cols)?, a.dtype.size());
        for (n, o) in out.chunks_exact_mut(size).enumerate() {
            // Output element n is (j, i) of the (cols, rows) result.
            let (j, i) = (
                n.checked_div(rows).ok_or(BAD)?,
                n.checked_rem(rows).ok_or(BAD)?,
            );
            let at = (i * cols + j) * size;
            copy_exact(o, a.data.get(at..at + size).ok_or(BAD)?)?;
        }
        Ok(())
    })
}

/// `(m, k, n)` of an f32 product `(m, k) × (k, n)`.
fn product_dims(a: &Array<'_>, b: &Array<'_>) -> Result<(u32, u32, u32), ErrorCode> {
    if a.dtype != DataType::F32 || b.dtype != DataType::F32 {
        return Err(BAD);
    }
    let ((m, k), (k2, n)) = (rows_cols(a)?, rows_cols(b)?);
    if k != k2 {
        return Err(BAD);
    }
    Ok((m, k, n))
}

/// `matmul(a, b)`: the f32 product of `a` `(m, k)` and `b` `(k, n)`, an `(m, n)` f32 array,
/// each element summed in f32 in increasing `k`.
pub(super) fn matmul(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(2)?;
    let (m, _, n) = product_dims(&args.array(0)?, &args.array(1)?)?;
    Output::array(DataType::F32, &[m, n], |args, out| {
        let (a, b) = (args.array(0)?, args.array(1)?);
        let (_, k, n) = product_dims(&a, &b)?;
        let (k, n) = (index(k)?, index(n)?);
        for (at, o) in out.chunks_exact_mut(4).enumerate() {
            let (i, j) = (at.checked_div(n).ok_or(BAD)?, at.checked_rem(n).ok_or(BAD)?);
            let row = a.data.get(i * k * 4..(i + 1) * k * 4).ok_or(BAD)?;
            let mut acc = 0.0f32;
            for (p, x) in row.chunks_exact(4).enumerate() {
                acc += le_f32(x)? * f32_at(b.data, p * n + j)?;
            }
            copy_exact(o, &acc.to_le_bytes())?;
        }
        Ok(())
    })
}
