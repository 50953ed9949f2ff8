//! Slice copies and string views without panic paths, for code that runs on a device.
//!
//! A bounds or length check that can fail links a formatted panic into the firmware (its
//! message, `usize`'s `Display` and the panic machinery), flash a device would rather keep
//! for kernels. These give the same results as the standard library's calls and answer a
//! mismatch as a value, which each caller turns into the error its own rules name.
//!
//! - [`copy_exact`] is `copy_from_slice`, or `false` (nothing copied) when the lengths differ.
//! - [`utf8`] is `core::str::from_utf8(..).ok()`.

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
