//! Postcard's bytes read by hand, for what a device decodes: a message from the host
//! ([`ToDevice::decode`](super::ToDevice::decode)) and a program
//! ([`Program::decode`](crate::program::Program::decode)).
//!
//! serde's derived decoders, through postcard, took some 11 KB of a 64 KB firmware: each
//! field of each variant is its own visitor, its own sequence access and its own nested
//! `Result`. Here a type's decoder reads its fields in declaration order with one
//! [`Reader`], whose few primitives are postcard's, so the bytes are the same and the code
//! is a fraction of it. The host encodes with serde as before (and decodes what devices
//! send with it).
//!
//! # Rules (postcard's, which these decoders follow exactly)
//!
//! - An unsigned integer wider than a byte is a varint: seven bits a byte, low bits first,
//!   the high bit set on every byte but the last; at most as many bytes as its width needs
//!   (3 for `u16`, 5 for `u32`, 10 for `u64`), the last holding no bits past the width.
//!   `usize` is as wide as the decoding machine's. A signed one is zigzagged first.
//! - A `u8` is its byte; a `bool` a byte of 0 or 1; `f32` and `f64` their little-endian
//!   bytes.
//! - Bytes and strings are a varint length, then the bytes (a string's valid UTF-8); a
//!   sequence is a varint length, then its items (more than a `heapless` container holds
//!   is refused); an array and a struct are their items in order, with no length.
//! - An enum is its variant's position as a `u32` varint, then the variant's fields.
//!
//! Every decoder answers `None` for bytes that break a rule or run out; the caller turns
//! that into [`FrameError::Malformed`](super::FrameError::Malformed). Whatever postcard
//! refuses, these refuse, and whatever it takes they take to the same value (core's
//! `wire_props` and `program_props` check it on arbitrary values and bytes).

mod program;
mod requests;

use crate::dtype::DataType;

/// The bytes still to decode.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

/// A value postcard's bytes can hold, decoded by [`Reader::read`].
pub(crate) trait Decode<'a>: Sized {
    /// The value at the start of `r`'s bytes, which it consumes; `None` if they break a
    /// rule of the module documentation.
    fn decode(r: &mut Reader<'a>) -> Option<Self>;
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`.
    pub(crate) const fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    /// What is left after the values read so far.
    pub(crate) const fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// The next value, of whichever type the caller wants (a field's).
    pub(crate) fn read<T: Decode<'a>>(&mut self) -> Option<T> {
        T::decode(self)
    }

    /// The next `n` bytes.
    #[inline(never)]
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.rest.split_at_checked(n)?;
        self.rest = rest;
        Some(taken)
    }

    /// The next `N` bytes, as an array.
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    /// A varint of an integer `bits` wide (module rules).
    fn varint(&mut self, bits: u32) -> Option<u64> {
        let last = bits.div_ceil(7) - 1;
        let mut value = 0u64;
        for i in 0..=last {
            let [byte] = self.array()?;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                // The last byte may hold only the bits the width has left.
                return (i < last || byte >> (bits - 7 * last) == 0).then_some(value);
            }
        }
        None
    }

    /// An enum's variant: its position, below `count`.
    pub(crate) fn variant(&mut self, count: u32) -> Option<u32> {
        self.read::<u32>().filter(|&v| v < count)
    }

    /// A sequence's length, at most `max`.
    fn length(&mut self, max: usize) -> Option<usize> {
        self.read::<usize>().filter(|&n| n <= max)
    }
}

impl Decode<'_> for u8 {
    #[inline(never)]
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        r.array().map(u8::from_le_bytes)
    }
}

impl Decode<'_> for bool {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        match r.read::<u8>()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

/// The unsigned integers, as varints of their width (the value fits: the last byte's rule).
macro_rules! varints {
    ($($t:ty),*) => {$(
        impl Decode<'_> for $t {
            fn decode(r: &mut Reader<'_>) -> Option<Self> {
                r.varint(<$t>::BITS).map(|v| v as $t)
            }
        }
    )*};
}
varints!(u16, u32, u64, usize);

impl Decode<'_> for i64 {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        let zigzag = r.read::<u64>()?;
        Some((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64))
    }
}

impl Decode<'_> for f32 {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        r.array().map(f32::from_le_bytes)
    }
}

impl Decode<'_> for f64 {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        r.array().map(f64::from_le_bytes)
    }
}

impl<'a> Decode<'a> for &'a [u8] {
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        let n = r.read::<usize>()?;
        r.take(n)
    }
}

impl<'a> Decode<'a> for &'a str {
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        crate::panic_free::utf8(r.read()?)
    }
}

impl<'a, T: Decode<'a>, const N: usize> Decode<'a> for [T; N] {
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        let mut items = heapless::Vec::<T, N>::new();
        for _ in 0..N {
            items.push(r.read()?).ok()?;
        }
        items.into_array().ok()
    }
}

impl<'a, T: Decode<'a>, const N: usize> Decode<'a> for heapless::Vec<T, N> {
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        let n = r.length(N)?;
        let mut items = Self::new();
        for _ in 0..n {
            items.push(r.read()?).ok()?;
        }
        Some(items)
    }
}

impl<const N: usize> Decode<'_> for heapless::String<N> {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        let mut s = Self::new();
        s.push_str(r.read()?).ok()?;
        Some(s)
    }
}

impl Decode<'_> for DataType {
    #[inline(never)]
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        let all = Self::ALL;
        all.get(r.variant(all.len() as u32)? as usize).copied()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde::Deserialize;
    use std::vec;

    use super::*;

    /// `bytes` decoded by hand and by postcard, as `T`: the same value or both refused.
    fn agree<'a, T>(bytes: &'a [u8]) -> Result<(), TestCaseError>
    where
        T: Decode<'a> + Deserialize<'a> + PartialEq + core::fmt::Debug,
    {
        let by_hand = Reader::new(bytes).read::<T>();
        let by_postcard = postcard::from_bytes::<T>(bytes).ok();
        prop_assert_eq!(by_hand, by_postcard, "{:02x?}", bytes);
        Ok(())
    }

    /// Bytes near a varint's edges: continuation bits, the last byte's limit, zeros.
    fn edgy_bytes(max: usize) -> impl Strategy<Value = vec::Vec<u8>> {
        let byte = prop_oneof![
            Just(0x00u8),
            Just(0x01),
            Just(0x02),
            Just(0x03),
            Just(0x04),
            Just(0x0f),
            Just(0x10),
            Just(0x1f),
            Just(0x7f),
            Just(0x80),
            Just(0x81),
            Just(0xff),
            any::<u8>(),
        ];
        prop::collection::vec(byte, 0..=max)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Catches a varint that takes a byte too many, lets a bit past the width through
        /// in its last byte, or reads zigzag the other way round; a `bool` other than 0 or
        /// 1; a float in the wrong byte order; a length past the bytes left.
        #[test]
        fn primitives_read_as_postcard_reads_them(bytes in edgy_bytes(12)) {
            agree::<u8>(&bytes)?;
            agree::<u16>(&bytes)?;
            agree::<u32>(&bytes)?;
            agree::<u64>(&bytes)?;
            agree::<usize>(&bytes)?;
            agree::<i64>(&bytes)?;
            agree::<bool>(&bytes)?;
            agree::<[u32; 4]>(&bytes)?;
            agree::<&[u8]>(&bytes)?;
            agree::<&str>(&bytes)?;
            agree::<heapless::Vec<u32, 2>>(&bytes)?;
            agree::<heapless::String<3>>(&bytes)?;
            agree::<DataType>(&bytes)?;
            // Floats by their bits (NaN is not equal to itself).
            let bits = |f: Option<f64>| f.map(f64::to_bits);
            prop_assert_eq!(
                bits(Reader::new(&bytes).read::<f64>()),
                bits(postcard::from_bytes::<f64>(&bytes).ok())
            );
            let bits = |f: Option<f32>| f.map(f32::to_bits);
            prop_assert_eq!(
                bits(Reader::new(&bytes).read::<f32>()),
                bits(postcard::from_bytes::<f32>(&bytes).ok())
            );
        }

        /// Every value of the integer types comes back from postcard's bytes for it.
        #[test]
        fn integers_round_trip(v in any::<u64>(), i in any::<i64>()) {
            let mut buffer = [0u8; 32];
            let bytes = postcard::to_slice(&(v, i, v as u32, v as u16), &mut buffer).unwrap();
            let mut r = Reader::new(bytes);
            prop_assert_eq!(r.read::<u64>(), Some(v));
            prop_assert_eq!(r.read::<i64>(), Some(i));
            prop_assert_eq!(r.read::<u32>(), Some(v as u32));
            prop_assert_eq!(r.read::<u16>(), Some(v as u16));
            prop_assert!(r.rest().is_empty());
        }
    }

    /// The widest values and the first ones past them, at every width.
    #[test]
    fn varints_stop_at_their_width() {
        let mut r = Reader::new(&[0xff, 0xff, 0x03]);
        assert_eq!(r.read::<u16>(), Some(u16::MAX));
        assert_eq!(Reader::new(&[0xff, 0xff, 0x04]).read::<u16>(), None);
        assert_eq!(Reader::new(&[0x80, 0x80, 0x80]).read::<u16>(), None);
        let u32_max = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(Reader::new(&u32_max).read::<u32>(), Some(u32::MAX));
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x10]).read::<u32>(),
            None
        );
        let mut u64_max = [0xffu8; 10];
        u64_max[9] = 0x01;
        assert_eq!(Reader::new(&u64_max).read::<u64>(), Some(u64::MAX));
        u64_max[9] = 0x02;
        assert_eq!(Reader::new(&u64_max).read::<u64>(), None);
        // A value written longer than it needs is still the value (postcard takes it).
        assert_eq!(Reader::new(&[0x81, 0x80, 0x00]).read::<u16>(), Some(1));
    }
}
