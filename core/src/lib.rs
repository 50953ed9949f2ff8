//! tessera-core: the layout math shared by the tessera host runtime and the accelerator
//! firmware.
//!
//! Everything here is `no_std`, allocation-free and `unsafe`-free. Memory comes from the
//! caller (slices, const-generic capacities); every fallible operation returns a small
//! `Copy` error enum that implements `Display` and `core::error::Error` (and
//! `defmt::Format` behind the `defmt` feature). Both come from `thiserror`, each message
//! beside its variant. An error that wraps another shows the inner message in its own and
//! reports no `source()`, so that a reporter walking the chain does not print it twice.
//!
//! # Panics
//!
//! No function in this crate panics, whatever its input: out-of-range indices, invalid
//! groupings, mismatched buffer sizes and arithmetic overflow are all reported as errors.
//! The property tests of each module check this.
//!
//! # Modules
//!
//! - [`grouping`]: replica groupings, comm groups, retrieval modes, variable settings and
//!   the host/replica shapes of grouped variables.
//! - [`shard`]: how a sharded variable is split over a shard domain of replicas.
//! - [`transfer`]: weights between a host buffer and the replicas' remote buffers.
//! - [`stream`]: step IO: anchors, data flow and size checks, the per-replica splitter.
//! - [`dtype`]: element types and the checked conversion of input buffers.
//! - [`finite`]: which `f32` values may enter training.
//! - [`program`]: what a device runs: named variables, streams, anchors, data flow, the
//!   optimizer and the layers, checked before anything is placed.
//! - [`rng`]: the replicas' random generator and the seed-derivation rule both sides use.
//! - [`wire`]: the host↔device protocol: messages, envelopes, framing.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod dtype;
pub mod finite;
pub mod grouping;
pub mod program;
pub mod rng;
pub mod shard;
pub mod stream;
pub mod transfer;
pub mod wire;

/// `to.copy_from_slice(from)` without its panic path: `false`, nothing copied, when the
/// lengths differ. Out of line, so that it is the only caller of `copy_from_slice` and the
/// compiler inlines that here, where the lengths are known equal: called from many places,
/// `copy_from_slice` stays out of line on some targets, and its length check with it, with
/// the check's formatted panic (flash a device would rather keep).
#[inline(never)]
pub fn copy_exact<T: Copy>(to: &mut [T], from: &[T]) -> bool {
    if to.len() != from.len() {
        return false;
    }
    // `get_mut(..n)` is `n` long: the copy's own length check folds away.
    match to.get_mut(..from.len()) {
        Some(to) => {
            to.copy_from_slice(from);
            true
        }
        None => false,
    }
}

/// `core::str::from_utf8(bytes).ok()`, by `Utf8Chunks`: the same check, a byte at a time,
/// without `from_utf8`'s word-at-a-time ASCII path, which costs a device flash on every
/// board while its strings (names) are a few bytes long. Valid exactly when the first
/// chunk (if any) has no invalid bytes: a chunk ends only at invalid bytes or the end.
pub fn utf8(bytes: &[u8]) -> Option<&str> {
    match bytes.utf8_chunks().next() {
        None => Some(""),
        Some(chunk) if chunk.invalid().is_empty() => Some(chunk.valid()),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// `utf8` accepts and returns exactly what `core::str::from_utf8` does: arbitrary
        /// bytes (mostly invalid) and valid strings with a byte changed.
        #[test]
        fn utf8_is_from_utf8(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            text in ".{0,24}",
            at in any::<usize>(),
            byte in any::<u8>(),
        ) {
            prop_assert_eq!(super::utf8(&bytes), core::str::from_utf8(&bytes).ok());
            let mut changed = text.clone().into_bytes();
            prop_assert_eq!(super::utf8(&changed), Some(text.as_str()));
            if !changed.is_empty() {
                let at = at % changed.len();
                changed[at] = byte;
            }
            prop_assert_eq!(super::utf8(&changed), core::str::from_utf8(&changed).ok());
        }
    }
}
