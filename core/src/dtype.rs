//! Data types an accelerator streams, and the checked conversion of a host input buffer
//! into a replica's buffer.
//!
//! # Conversion rules
//!
//! Reading the user's buffer of type `from` into a replica buffer of type `to`
//! ([`convert_input`]):
//!
//! - the same type: the bytes are copied;
//! - `int64` into `int32`: every value is narrowed; a value outside `i32`'s range is an
//!   error naming the tensor, the element's index and the value (**tessera:** PopART
//!   truncates it instead);
//! - `uint8` into `float8_e4m3` or `float8_e5m2`: the bytes are copied (hosts carry 8-bit
//!   floats as `uint8`);
//! - any other pair: a type-discrepancy error naming the tensor and both types.
//!
//! The replica buffer's length fixes the element count; the user's buffer must hold exactly
//! that many elements of its own type, or it is a size error naming the tensor, both byte
//! sizes and the element count.
//!
//! Buffers are bytes in the machine's native byte order (little-endian on every tessera
//! target). They need no particular alignment: aligned buffers take a cast through
//! `bytemuck`, unaligned ones are read element by element.
//!
//! # Panics
//!
//! Nothing here panics; sizes are checked before any byte is written.

use core::fmt;

/// An element type. On the wire it travels as its position in this list: append only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DataType {
    /// IEEE 754 half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 double precision.
    F64,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// One byte, 0 or 1.
    Bool,
    /// 8-bit float, 4 exponent and 3 mantissa bits.
    F8E4M3,
    /// 8-bit float, 5 exponent and 2 mantissa bits.
    F8E5M2,
}

impl DataType {
    /// Every type, in declaration order.
    pub const ALL: [DataType; 15] = [
        Self::F16,
        Self::BF16,
        Self::F32,
        Self::F64,
        Self::I8,
        Self::I16,
        Self::I32,
        Self::I64,
        Self::U8,
        Self::U16,
        Self::U32,
        Self::U64,
        Self::Bool,
        Self::F8E4M3,
        Self::F8E5M2,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            Self::I8 | Self::U8 | Self::Bool | Self::F8E4M3 | Self::F8E5M2 => 1,
            Self::F16 | Self::BF16 | Self::I16 | Self::U16 => 2,
            Self::F32 | Self::I32 | Self::U32 => 4,
            Self::F64 | Self::I64 | Self::U64 => 8,
        }
    }

    /// The name used on the command line and in error messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::F16 => "float16",
            Self::BF16 => "bfloat16",
            Self::F32 => "float32",
            Self::F64 => "float64",
            Self::I8 => "int8",
            Self::I16 => "int16",
            Self::I32 => "int32",
            Self::I64 => "int64",
            Self::U8 => "uint8",
            Self::U16 => "uint16",
            Self::U32 => "uint32",
            Self::U64 => "uint64",
            Self::Bool => "bool",
            Self::F8E4M3 => "float8_e4m3",
            Self::F8E5M2 => "float8_e5m2",
        }
    }

    /// True for the two 8-bit float types, which hosts carry as `uint8`.
    pub const fn is_fp8(self) -> bool {
        matches!(self, Self::F8E4M3 | Self::F8E5M2)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl core::str::FromStr for DataType {
    type Err = UnknownDataType;

    fn from_str(text: &str) -> Result<Self, UnknownDataType> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == text)
            .ok_or(UnknownDataType)
    }
}

/// A name that is not one of [`DataType::name`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[error(
    "unknown data type; expected one of float16, bfloat16, float32, float64, \
     int8..int64, uint8..uint64, bool, float8_e4m3, float8_e5m2"
)]
pub struct UnknownDataType;

/// How an input of one type becomes a replica buffer of another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Conversion {
    /// Same bytes: the same type, or `uint8` read as an 8-bit float.
    Copy,
    /// `int64` narrowed to `int32`, every value checked.
    NarrowI64ToI32,
}

impl Conversion {
    /// The conversion from `from` (what the user provides) to `to` (what the replica
    /// expects), or `None` when there is none.
    pub const fn between(from: DataType, to: DataType) -> Option<Self> {
        match (from, to) {
            (DataType::I64, DataType::I32) => Some(Self::NarrowI64ToI32),
            (DataType::U8, to) if to.is_fp8() => Some(Self::Copy),
            (from, to) if from as u8 == to as u8 => Some(Self::Copy),
            _ => None,
        }
    }
}

/// Converts `src`, the user's buffer of `from` elements for tensor `tensor`, into `dst`, a
/// replica buffer of `to` elements.
///
/// `dst.len()` fixes the element count; `src` must hold exactly as many elements. On error
/// `dst` may hold a prefix of the converted data, never anything else.
///
/// **tessera:** `int64 → int32` fails on the first value outside `i32`'s range instead of
/// truncating it.
pub fn convert_input<'a>(
    tensor: &'a str,
    from: DataType,
    src: &[u8],
    to: DataType,
    dst: &mut [u8],
) -> Result<(), ConvertError<'a>> {
    let conversion = Conversion::between(from, to).ok_or(ConvertError::TypeDiscrepancy {
        tensor,
        provided: from,
        expected: to,
    })?;
    let elements = dst.len() / to.size();
    let expected = elements.checked_mul(from.size());
    if !dst.len().is_multiple_of(to.size()) || expected != Some(src.len()) {
        return Err(ConvertError::SizeMismatch {
            tensor,
            provided_bytes: src.len(),
            expected_bytes: expected.unwrap_or(usize::MAX),
            elements,
        });
    }
    match conversion {
        Conversion::Copy => dst.copy_from_slice(src),
        Conversion::NarrowI64ToI32 => narrow_i64_to_i32(tensor, src, dst)?,
    }
    Ok(())
}

fn narrow_i64_to_i32<'a>(
    tensor: &'a str,
    src: &[u8],
    dst: &mut [u8],
) -> Result<(), ConvertError<'a>> {
    let out_of_range = |index: usize, value: i64| ConvertError::OutOfRange {
        tensor,
        index,
        value,
    };
    // Fast path: both buffers aligned, so whole slices can be viewed as integers.
    if let (Ok(values), Ok(out)) = (
        bytemuck::try_cast_slice::<u8, i64>(src),
        bytemuck::try_cast_slice_mut::<u8, i32>(dst),
    ) {
        for (index, (&value, slot)) in values.iter().zip(out.iter_mut()).enumerate() {
            *slot = i32::try_from(value).map_err(|_| out_of_range(index, value))?;
        }
        return Ok(());
    }
    for (index, (from, to)) in src.chunks_exact(8).zip(dst.chunks_exact_mut(4)).enumerate() {
        let value: i64 = bytemuck::pod_read_unaligned(from);
        let narrow = i32::try_from(value).map_err(|_| out_of_range(index, value))?;
        to.copy_from_slice(bytemuck::bytes_of(&narrow));
    }
    Ok(())
}

/// Why an input buffer could not become a replica buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ConvertError<'a> {
    /// No conversion exists between the two types.
    #[error(
        "type discrepancy for tensor {tensor}: provided {provided}, expected {expected} \
         (only the same type, int64 to int32, or uint8 to float8 convert)"
    )]
    TypeDiscrepancy {
        /// The tensor being read.
        tensor: &'a str,
        /// The type the user provided.
        provided: DataType,
        /// The type the replica expects.
        expected: DataType,
    },
    /// An `int64` value that does not fit `int32`.
    #[error(
        "tensor {tensor}: int64 value {value} at index {index} does not fit int32; \
         refusing to truncate it"
    )]
    OutOfRange {
        /// The tensor being read.
        tensor: &'a str,
        /// Element index of the value in the buffer.
        index: usize,
        /// The value.
        value: i64,
    },
    /// Buffers whose sizes do not hold the same number of elements.
    #[error(
        "tensor {tensor}: provided {provided_bytes} bytes but {elements} elements \
         need {expected_bytes}"
    )]
    SizeMismatch {
        /// The tensor being read.
        tensor: &'a str,
        /// Bytes the user provided.
        provided_bytes: usize,
        /// Bytes that many elements of the provided type take.
        expected_bytes: usize,
        /// Elements the replica buffer holds.
        elements: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;
    use std::vec;
    use std::vec::Vec;

    fn i64_bytes(values: &[i64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    #[test]
    fn sizes_and_names_round_trip() {
        for t in DataType::ALL {
            assert_eq!(t.name().parse(), Ok(t));
            assert!(matches!(t.size(), 1 | 2 | 4 | 8));
        }
        assert_eq!("float".parse::<DataType>(), Err(UnknownDataType));
    }

    #[test]
    fn same_type_copies() {
        let mut dst = [0u8; 4];
        convert_input("x", DataType::F16, &[1, 2, 3, 4], DataType::F16, &mut dst).unwrap();
        assert_eq!(dst, [1, 2, 3, 4]);
    }

    #[test]
    fn uint8_reinterprets_as_fp8_only() {
        let mut dst = [0u8; 2];
        convert_input("x", DataType::U8, &[7, 9], DataType::F8E5M2, &mut dst).unwrap();
        assert_eq!(dst, [7, 9]);
        let err = convert_input("x", DataType::I8, &[7, 9], DataType::F8E4M3, &mut dst);
        assert!(matches!(err, Err(ConvertError::TypeDiscrepancy { .. })));
    }

    #[test]
    fn int64_narrows_and_checks_range_aligned_or_not() {
        let values = [0, -1, i64::from(i32::MAX), i64::from(i32::MIN)];
        let src = i64_bytes(&values);
        // Offset the source by one byte inside a larger buffer to force the unaligned path.
        let mut shifted = vec![0u8; src.len() + 1];
        shifted[1..].copy_from_slice(&src);
        for src in [&src[..], &shifted[1..]] {
            let mut dst = vec![0u8; 16];
            convert_input("ids", DataType::I64, src, DataType::I32, &mut dst).unwrap();
            let out: Vec<i32> = dst.chunks(4).map(bytemuck::pod_read_unaligned).collect();
            assert_eq!(out, [0, -1, i32::MAX, i32::MIN]);
        }
        let bad = i64_bytes(&[1, 2, 1 << 40]);
        let mut dst = [0u8; 12];
        let err = convert_input("ids", DataType::I64, &bad, DataType::I32, &mut dst).unwrap_err();
        assert_eq!(
            err,
            ConvertError::OutOfRange {
                tensor: "ids",
                index: 2,
                value: 1 << 40
            }
        );
        assert!(err.to_string().contains("ids") && err.to_string().contains("1099511627776"));
    }

    #[test]
    fn other_pairs_are_type_discrepancies() {
        let mut dst = [0u8; 4];
        let err = convert_input("w", DataType::F64, &[0; 8], DataType::F32, &mut dst).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("tensor w") && text.contains("float64") && text.contains("float32"));
    }

    #[test]
    fn sizes_must_agree() {
        let mut dst = [0u8; 8];
        let err = convert_input("x", DataType::I64, &[0; 8], DataType::I32, &mut dst).unwrap_err();
        assert_eq!(
            err,
            ConvertError::SizeMismatch {
                tensor: "x",
                provided_bytes: 8,
                expected_bytes: 16,
                elements: 2
            }
        );
        let mut odd = [0u8; 3];
        assert!(convert_input("x", DataType::F16, &[0; 2], DataType::F16, &mut odd).is_err());
    }
}
