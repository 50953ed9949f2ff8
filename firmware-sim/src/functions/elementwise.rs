//! Element-wise kernels and reductions on arrays.

use tessera_core::dtype::DataType;
use tessera_core::wire::{ErrorCode, Value};

use super::element::{self, check_numeric, is_float, write_float, write_int};
use super::float_bits;
use super::{Args, Output};
use crate::registers::copy_exact;

const BAD: ErrorCode = ErrorCode::BadArguments;

/// `add_one(x)`: an integer + 1 (overflow is an error), a float + 1, or a numeric array
/// with 1 added to every element (an integer element at its dtype's maximum is an error).
pub(super) fn add_one(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    match args.get(0)? {
        Value::Int(v) => v.checked_add(1).map(Output::Int).ok_or(BAD),
        Value::Float(v) => Ok(Output::Float(float_bits::add_f64(*v, 1.0))),
        _ => {
            let a = args.array(0)?;
            check_numeric(a.dtype)?;
            Output::array(a.dtype, &a.shape, |args, out| {
                let a = args.array(0)?;
                // f32 elements are added in f64 and rounded once: the same as f32 addition.
                element::map(
                    a.dtype,
                    a.data,
                    out,
                    |v| v.checked_add(1),
                    |v| float_bits::add_f64(v, 1.0),
                )
            })
        }
    }
}

/// `relu(x)`: a numeric array with every negative element replaced by 0 (NaN stays NaN).
pub(super) fn relu(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    let a = args.array(0)?;
    check_numeric(a.dtype)?;
    Output::array(a.dtype, &a.shape, |args, out| {
        let a = args.array(0)?;
        element::map(
            a.dtype,
            a.data,
            out,
            |v| Some(v.max(0)),
            |v| if float_bits::is_negative(v) { 0.0 } else { v },
        )
    })
}

/// `gelu(x)`: GELU of every element of an f32 array, tanh approximation (see [`gelu_f32`]).
pub(super) fn gelu(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    let a = args.array(0)?;
    if a.dtype != DataType::F32 {
        return Err(BAD);
    }
    Output::array(a.dtype, &a.shape, |args, out| {
        element::map_f32(args.array(0)?.data, out, gelu_f32)
    })
}

/// GELU, tanh approximation: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, computed as
/// the equal `x / (1 + e^(−2u))` with `u = √(2/π)·(x + 0.044715·x³)`, which needs one
/// exponential and has no cancellation for negative `x`. Within 1e-6·max(1, |x|) of the
/// formula in f64.
fn gelu_f32(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let u = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    x / (1.0 + exp_f32(-2.0 * u))
}

/// `e^z` in f32 without `libm`, relative error below 1e-6. `z` is clamped to ±80, so that
/// `2^k` below is a normal float (GELU's result then differs from the unclamped one by less
/// than 1e-30); NaN stays NaN.
fn exp_f32(z: f32) -> f32 {
    // ln 2 split in two (Cephes): `k·LN2_HI` is exact for the k used here.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let z = z.clamp(-80.0, 80.0);
    // z = k·ln 2 + r with |r| ≤ ln 2 / 2; k is in [-116, 116] (NaN casts to 0).
    let k = (z * core::f32::consts::LOG2_E + if z < 0.0 { -0.5 } else { 0.5 }) as i32;
    let kf = k as f32;
    let r = z - kf * LN2_HI - kf * LN2_LO;
    // e^r by its Taylor series to r⁷: the remainder is below 6e-9 for |r| ≤ 0.35.
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r / 5040.0))))));
    // k + 127 is in [11, 243]: the exponent bits of a normal float.
    p * f32::from_bits(((k + 127) as u32) << 23)
}

/// `fill(a, v)`: a new array of `a`'s dtype and shape with every element `v` (an integer or
/// a float) converted to the dtype. A float goes into an integer dtype only if it is a
/// whole number in range, never truncated; an integer or float out of the dtype's range is
/// an error.
pub(super) fn fill(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(2)?;
    let a = args.array(0)?;
    check_numeric(a.dtype)?;
    // Check the conversion now, so that a bad value fails before anything is allocated.
    let mut one = [0u8; 8];
    encode(
        a.dtype,
        args.get(1)?,
        one.get_mut(..a.dtype.size()).ok_or(BAD)?,
    )?;
    Output::array(a.dtype, &a.shape, |args, out| {
        let dtype = args.array(0)?.dtype;
        let size = dtype.size();
        let mut one = [0u8; 8];
        let one = one.get_mut(..size).ok_or(BAD)?;
        encode(dtype, args.get(1)?, one)?;
        for element in out.chunks_exact_mut(size) {
            copy_exact(element, one)?;
        }
        Ok(())
    })
}

/// `value` as one element of `dtype`.
fn encode(dtype: DataType, value: &Value<'_>, out: &mut [u8]) -> Result<(), ErrorCode> {
    match *value {
        // `i64_to_f64` and `whole_i64` are `as` casts done with integer operations: the
        // casts and f64 comparisons are library calls on a board without an FPU.
        Value::Int(v) if is_float(dtype) => write_float(dtype, float_bits::i64_to_f64(v), out),
        Value::Int(v) => write_int(dtype, v.into(), out),
        Value::Float(v) if is_float(dtype) => write_float(dtype, v, out),
        // Only a whole number in i64's range: NaN, infinities and fractions are refused.
        Value::Float(v) => write_int(dtype, float_bits::whole_i64(v).ok_or(BAD)?.into(), out),
        _ => Err(BAD),
    }
}

/// `scale(t, f)`, **in place**: multiplies every element of the tensor or f32 array
/// register `t` by the float `f`, rounded to f32 first, the product taken in f32. Leaves
/// the result register alone.
pub(super) fn scale(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(2)?;
    args.float(1)?;
    if args.array(0)?.dtype != DataType::F32 {
        return Err(BAD);
    }
    Ok(Output::InPlace {
        arg: 0,
        fill: |args, data| {
            let factor = float_bits::f64_to_f32(args.float(1)?);
            element::map_f32_in_place(data, |v| v * factor)
        },
    })
}

/// `sum(t)`: the sum of a tensor's or a float array's elements, as a float.
pub(super) fn sum(args: &Args<'_>) -> Result<Output, ErrorCode> {
    args.expect(1)?;
    let a = args.array(0)?;
    if !is_float(a.dtype) {
        return Err(BAD);
    }
    let mut total = 0.0;
    for v in a.data.chunks_exact(a.dtype.size()) {
        total = float_bits::add_f64(total, element::read_float(a.dtype, v)?);
    }
    Ok(Output::Float(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exponential's range reduction: a wrong split of ln 2 or a wrong exponent shows
    /// up as a relative error far above 1e-6 somewhere in the range.
    #[test]
    fn exp_is_accurate() {
        for (z, e) in [
            (0.0f32, 1.0f64),
            (1.0, core::f64::consts::E),
            (-1.0, 1.0 / core::f64::consts::E),
            (10.0, 22_026.465_794_806_718),
            (-20.0, 2.061_153_622_438_558e-9),
            (80.0, 5.540_622_384_393_51e34),
        ] {
            let got = f64::from(exp_f32(z));
            assert!(((got - e) / e).abs() < 1e-6, "exp({z}) = {got}, not {e}");
        }
        assert!(exp_f32(f32::NAN).is_nan());
        assert!(exp_f32(1e30) > 1e34 && exp_f32(-1e30) < 1e-34);
    }

    /// GELU's shape: 0 at 0, x for large x, 0 for very negative x, NaN in → NaN out.
    #[test]
    fn gelu_limits() {
        assert_eq!(gelu_f32(0.0), 0.0);
        assert_eq!(gelu_f32(50.0), 50.0);
        assert!(gelu_f32(-50.0).abs() < 1e-30);
        assert!(gelu_f32(f32::NAN).is_nan());
        assert!((gelu_f32(1.0) - 0.841_192).abs() < 1e-5);
    }
}
