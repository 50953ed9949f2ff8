//! Array elements by dtype: reading, writing and mapping them, for the built-in kernels and
//! for yours.
//!
//! # Contract
//!
//! - **Integers** (every integer dtype and `bool`, whose range is 0..=1) read exactly as
//!   `i128`; a written value must fit the dtype, else [`ErrorCode::BadArguments`]: never a
//!   wrap or a truncation.
//! - **Floats** (`f32`, `f64`) read exactly as `f64`; writing an `f32` rounds to nearest,
//!   and a finite value that would become infinite is refused.
//! - `f16`, `bf16` and the 8-bit floats are not numeric here: every function refuses them.
//! - An element slice of the wrong length is refused; nothing here panics.
//!
//! Elements are little-endian and need no alignment.

use tessera_core::dtype::DataType;
use tessera_core::wire::ErrorCode;

use super::float_bits::{f32_to_f64, f64_to_f32};
use crate::registers::copy_exact;

const BAD: ErrorCode = ErrorCode::BadArguments;

/// The range of an integer dtype, `None` for the others.
pub fn int_range(dtype: DataType) -> Option<(i128, i128)> {
    use DataType::*;
    Some(match dtype {
        I8 => (i8::MIN.into(), i8::MAX.into()),
        I16 => (i16::MIN.into(), i16::MAX.into()),
        I32 => (i32::MIN.into(), i32::MAX.into()),
        I64 => (i64::MIN.into(), i64::MAX.into()),
        U8 => (0, u8::MAX.into()),
        U16 => (0, u16::MAX.into()),
        U32 => (0, u32::MAX.into()),
        U64 => (0, u64::MAX.into()),
        Bool => (0, 1),
        F16 | BF16 | F32 | F64 | F8E4M3 | F8E5M2 => return None,
    })
}

/// True for `f32` and `f64`.
pub fn is_float(dtype: DataType) -> bool {
    matches!(dtype, DataType::F32 | DataType::F64)
}

/// Refuses the dtypes that are not numeric here.
pub fn check_numeric(dtype: DataType) -> Result<(), ErrorCode> {
    if is_float(dtype) || int_range(dtype).is_some() {
        Ok(())
    } else {
        Err(BAD)
    }
}

/// One integer element (`bytes` is exactly one element).
#[inline(never)]
pub fn read_int(dtype: DataType, bytes: &[u8]) -> Result<i128, ErrorCode> {
    let (min, _) = int_range(dtype).ok_or(BAD)?;
    if bytes.len() != dtype.size() {
        return Err(BAD);
    }
    let negative = min < 0 && bytes.last().is_some_and(|b| b & 0x80 != 0);
    let mut wide = [if negative { 0xFF } else { 0 }; 16];
    copy_exact(wide.get_mut(..bytes.len()).ok_or(BAD)?, bytes)?;
    Ok(i128::from_le_bytes(wide))
}

/// Writes `value` as one integer element, refusing a value outside the dtype's range.
#[inline(never)]
pub fn write_int(dtype: DataType, value: i128, out: &mut [u8]) -> Result<(), ErrorCode> {
    let (min, max) = int_range(dtype).ok_or(BAD)?;
    if value < min || value > max {
        return Err(BAD);
    }
    let bytes = value.to_le_bytes();
    copy_exact(out, bytes.get(..dtype.size()).ok_or(BAD)?)
}

/// One float element.
#[inline(never)]
pub fn read_float(dtype: DataType, bytes: &[u8]) -> Result<f64, ErrorCode> {
    match dtype {
        DataType::F32 => le_f32(bytes).map(f32_to_f64),
        DataType::F64 => Ok(f64::from_le_bytes(bytes.try_into().map_err(|_| BAD)?)),
        _ => Err(BAD),
    }
}

/// Writes `value` as one float element.
#[inline(never)]
pub fn write_float(dtype: DataType, value: f64, out: &mut [u8]) -> Result<(), ErrorCode> {
    match dtype {
        DataType::F32 => {
            let narrow = f64_to_f32(value);
            if narrow.is_infinite() && value.is_finite() {
                return Err(BAD);
            }
            copy_exact(out, &narrow.to_le_bytes())
        }
        DataType::F64 => copy_exact(out, &value.to_le_bytes()),
        _ => Err(BAD),
    }
}

/// Writes `src`'s elements through `int_op` (integer dtypes; `None` is an overflow) or
/// `float_op` (float dtypes) into `out`, which is as long as `src`.
#[inline(never)]
pub fn map(
    dtype: DataType,
    src: &[u8],
    out: &mut [u8],
    int_op: fn(i128) -> Option<i128>,
    float_op: fn(f64) -> f64,
) -> Result<(), ErrorCode> {
    check_numeric(dtype)?;
    let size = dtype.size();
    if src.len() != out.len() || !src.len().is_multiple_of(size) {
        return Err(BAD);
    }
    let float = is_float(dtype);
    for (s, o) in src.chunks_exact(size).zip(out.chunks_exact_mut(size)) {
        if float {
            write_float(dtype, float_op(read_float(dtype, s)?), o)?;
        } else {
            write_int(dtype, int_op(read_int(dtype, s)?).ok_or(BAD)?, o)?;
        }
    }
    Ok(())
}

/// Writes `f` of every f32 of `src` into `out`, which is as long.
pub fn map_f32(src: &[u8], out: &mut [u8], f: impl Fn(f32) -> f32) -> Result<(), ErrorCode> {
    if src.len() != out.len() || !src.len().is_multiple_of(4) {
        return Err(BAD);
    }
    for (s, o) in src.chunks_exact(4).zip(out.chunks_exact_mut(4)) {
        copy_exact(o, &f(le_f32(s)?).to_le_bytes())?;
    }
    Ok(())
}

/// Replaces every f32 of `data` with `f` of it.
pub fn map_f32_in_place(data: &mut [u8], f: impl Fn(f32) -> f32) -> Result<(), ErrorCode> {
    if !data.len().is_multiple_of(4) {
        return Err(BAD);
    }
    for v in data.chunks_exact_mut(4) {
        let x = le_f32(v)?;
        copy_exact(v, &f(x).to_le_bytes())?;
    }
    Ok(())
}

/// f32 element `index` of `bytes`.
#[inline(never)]
pub fn f32_at(bytes: &[u8], index: usize) -> Result<f32, ErrorCode> {
    // Checked: an index whose byte offset overflows is certainly past the end.
    let start = index.checked_mul(4).ok_or(BAD)?;
    le_f32(
        bytes
            .get(start..start.checked_add(4).ok_or(BAD)?)
            .ok_or(BAD)?,
    )
}

/// Four bytes as an f32.
#[inline(never)]
pub fn le_f32(bytes: &[u8]) -> Result<f32, ErrorCode> {
    Ok(f32::from_le_bytes(bytes.try_into().map_err(|_| BAD)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sign extension: a reader that zero-extended would turn -1i8 into 255.
    #[test]
    fn integers_read_exactly() {
        assert_eq!(read_int(DataType::I8, &[0xFF]), Ok(-1));
        assert_eq!(read_int(DataType::U8, &[0xFF]), Ok(255));
        assert_eq!(
            read_int(DataType::I64, &i64::MIN.to_le_bytes()),
            Ok(i64::MIN.into())
        );
        assert_eq!(
            read_int(DataType::U64, &u64::MAX.to_le_bytes()),
            Ok(u64::MAX.into())
        );
        assert_eq!(read_int(DataType::I32, &[0; 3]), Err(BAD));
        assert_eq!(read_int(DataType::F32, &[0; 4]), Err(BAD));
    }

    /// Overflow must be refused, not wrapped (255u8 + 1 would otherwise be 0).
    #[test]
    fn writes_refuse_out_of_range() {
        let mut one = [0u8; 1];
        assert_eq!(write_int(DataType::U8, 256, &mut one), Err(BAD));
        assert_eq!(write_int(DataType::I8, -129, &mut one), Err(BAD));
        assert_eq!(write_int(DataType::Bool, 2, &mut one), Err(BAD));
        assert_eq!(write_int(DataType::I8, -128, &mut one), Ok(()));
        assert_eq!(one, [0x80]);
        let mut four = [0u8; 4];
        assert_eq!(write_float(DataType::F32, 1e300, &mut four), Err(BAD));
        assert_eq!(write_float(DataType::F32, f64::INFINITY, &mut four), Ok(()));
        let mut src = [0u8; 2];
        src.copy_from_slice(&u16::MAX.to_le_bytes());
        let mut out = [0u8; 2];
        assert_eq!(
            map(DataType::U16, &src, &mut out, |v| v.checked_add(1), |v| v),
            Err(BAD)
        );
    }

    /// The float path must not lose precision for f64 (an f32 round trip would).
    #[test]
    fn floats_round_trip() {
        let mut eight = [0u8; 8];
        write_float(DataType::F64, 0.1, &mut eight).unwrap();
        assert_eq!(read_float(DataType::F64, &eight), Ok(0.1));
        assert_eq!(f32_at(&1.5f32.to_le_bytes(), 0), Ok(1.5));
        assert_eq!(f32_at(&[0; 4], 1), Err(BAD));
        assert_eq!(f32_at(&[0; 4], usize::MAX), Err(BAD));
        assert_eq!(check_numeric(DataType::BF16), Err(BAD));
    }
}
