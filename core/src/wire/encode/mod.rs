//! Postcard's bytes written by hand, for what a device sends: its replies and its
//! contributions ([`FromDevice::encode`](super::FromDevice::encode)).
//!
//! The counterpart of [`decode`](super::decode), for the same reason: postcard's serializer
//! behind serde's derived code took some 2 KB of a device's flash for a handful of types.
//! Here a type's encoder writes its fields in declaration order with one [`Writer`], by
//! the rules [`decode`](super::decode) states (postcard's), so the bytes are the ones
//! postcard writes: core's `device_encoders` property tests and golden tests compare them.
//!
//! Every encoder answers `None` when the buffer is full; the caller turns that into
//! [`FrameError::TooLarge`](super::FrameError::TooLarge).

mod replies;

/// Where the bytes go, and how many are written.
#[derive(Debug)]
pub(crate) struct Writer<'o> {
    out: &'o mut [u8],
    len: usize,
}

/// A value postcard's bytes can hold, written by [`Writer::put`].
pub(crate) trait Encode {
    /// Writes the value's bytes; `None` if they do not fit.
    fn encode(&self, w: &mut Writer<'_>) -> Option<()>;
}

impl<'o> Writer<'o> {
    /// A writer filling `out` from its start.
    pub(crate) fn new(out: &'o mut [u8]) -> Self {
        Self { out, len: 0 }
    }

    /// Bytes written so far.
    pub(crate) const fn len(&self) -> usize {
        self.len
    }

    /// Writes `value`.
    pub(crate) fn put<T: Encode + ?Sized>(&mut self, value: &T) -> Option<()> {
        value.encode(self)
    }

    /// Writes an enum's variant: its position.
    #[inline(never)]
    pub(crate) fn variant(&mut self, position: u32) -> Option<()> {
        self.put(&position)
    }

    /// Writes `values`, each a varint: one call where a run of them (a variant's position
    /// and its integer fields, a `u8` below 128, a `bool`, an `Option`'s tag — each the
    /// same byte as its varint) would take one each. Out of line: the point is to have one
    /// copy of the loop, not one per run.
    #[inline(never)]
    pub(crate) fn varints(&mut self, values: &[u32]) -> Option<()> {
        values
            .iter()
            .try_for_each(|&value| self.varint(u64::from(value)))
    }

    /// Writes `bytes` as they are.
    fn raw(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.len.checked_add(bytes.len())?;
        crate::panic_free::copy_exact(self.out.get_mut(self.len..end)?, bytes).then_some(())?;
        self.len = end;
        Some(())
    }

    /// Writes `value` as a varint: seven bits a byte, low bits first.
    fn varint(&mut self, mut value: u64) -> Option<()> {
        loop {
            let low = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                return self.raw(&[low]);
            }
            self.raw(&[low | 0x80])?;
        }
    }
}

impl Encode for u8 {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.raw(&[*self])
    }
}

impl Encode for bool {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.put(&u8::from(*self))
    }
}

/// The unsigned integers, as varints.
macro_rules! varints {
    ($($t:ty),*) => {$(
        impl Encode for $t {
            fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
                w.varint(u64::from(*self))
            }
        }
    )*};
}
varints!(u16, u32, u64);

impl Encode for usize {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        // Lengths: a `usize` is at most 64 bits wide on every target, so nothing is lost.
        w.varint(*self as u64)
    }
}

impl Encode for i64 {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.varint(((*self << 1) ^ (*self >> 63)) as u64)
    }
}

impl Encode for f32 {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.raw(&self.to_le_bytes())
    }
}

impl Encode for f64 {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.raw(&self.to_le_bytes())
    }
}

impl Encode for [u8] {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.put(&self.len())?;
        w.raw(self)
    }
}

impl Encode for str {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.put(self.as_bytes())
    }
}

impl<T: Encode, const N: usize> Encode for [T; N] {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        self.iter().try_for_each(|item| w.put(item))
    }
}

impl<T: Encode, const N: usize> Encode for heapless::Vec<T, N> {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.put(&self.len())?;
        self.iter().try_for_each(|item| w.put(item))
    }
}

impl<T: Encode> Encode for Option<T> {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        match self {
            None => w.put(&0u8),
            Some(value) => {
                w.put(&1u8)?;
                w.put(value)
            }
        }
    }
}
