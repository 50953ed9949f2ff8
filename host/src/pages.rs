//! Large host buffers backed by huge pages.
//!
//! A buffer of many megabytes that the host allocates and then fills — an array read back
//! from a device, weights gathered for the host, the result of a collective — is mapped by
//! the kernel page by page on first touch: one fault per 4 KiB, thousands per array, each
//! costing more than copying the page. Where transparent huge pages are enabled "on
//! advice" (`madvise`, the default of many distributions, and this project's CI machines),
//! the kernel backs a range with 2 MiB pages only when the program asks before touching it.
//! NumPy asks for its large arrays; a Rust `Vec` does not, which made a 64 MiB copy from
//! worker 0 into a new array 2.1–3.0× faster from Python than from Rust (measured by
//! `host/python/bench/roundtrip.py`; with NumPy's advice turned off, the two were level).
//!
//! # Rule
//!
//! [`zeroed`] returns a zeroed `Vec<u8>` like `vec![0; len]`, or [`OutOfMemory`] where the
//! host cannot allocate it (never an abort: sizes come from devices and users); when it is at least
//! [`HUGE`] long, the whole 2 MiB-aligned part of it is advised `MADV_HUGEPAGE`, best
//! effort: a large buffer is usually a fresh mapping not touched yet (the advice then
//! decides how it is faulted in), but the allocator may hand out reused, already-faulted
//! memory (then the advice changes nothing now). The advice changes how the kernel backs
//! the pages, never their contents: where it is ignored (huge pages off) or refused (a
//! kernel without them, another system), the buffer is the same, only faulted in small
//! pages.

/// The size of a huge page (x86-64 and AArch64 with 4 KiB base pages), and the smallest
/// buffer advised: below it no huge page fits inside.
pub const HUGE: usize = 2 << 20;

/// The host could not allocate a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the host cannot allocate {bytes} bytes")]
pub struct OutOfMemory {
    /// Bytes asked for.
    pub bytes: usize,
}

/// A zeroed buffer of `len` bytes, on huge pages where it is large enough (see the rule).
pub fn zeroed(len: usize) -> Result<Vec<u8>, OutOfMemory> {
    // Zeroed by the allocator (fresh pages come zeroed: no pass writing them), fallibly.
    let buffer: Vec<u8> =
        bytemuck::allocation::try_zeroed_vec(len).map_err(|()| OutOfMemory { bytes: len })?;
    if len >= HUGE {
        advise_huge(&buffer);
    }
    Ok(buffer)
}

/// Advises the 2 MiB-aligned interior of `buffer` as huge pages (best effort).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn advise_huge(buffer: &[u8]) {
    use rustix::mm::{madvise, Advice};
    use std::ffi::c_void;

    let start = buffer.as_ptr() as usize;
    let first = start.next_multiple_of(HUGE);
    let end = start + buffer.len();
    if first >= end {
        return;
    }
    let len = (end - first) / HUGE * HUGE;
    if len == 0 {
        return;
    }
    // SAFETY: `first..first + len` lies inside `buffer`'s allocation (it starts at or
    // after its start and ends at or before its end) and is page-aligned, as madvise
    // requires. MADV_HUGEPAGE is advice about how to back the range: it changes neither
    // the bytes nor the mapping's validity or ownership, and a refusal (EINVAL from a
    // kernel built without huge pages) leaves everything as it was, so its result is
    // ignored.
    let _ = unsafe { madvise(first as *mut c_void, len, Advice::LinuxHugepage) };
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_buffer: &[u8]) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zeroed_buffer_is_zero_and_as_long_as_asked_at_every_size() {
        for len in [0, 1, HUGE - 1, HUGE, HUGE + 1, 3 * HUGE + 4097] {
            let buffer = zeroed(len).unwrap();
            assert_eq!(buffer.len(), len);
            assert!(buffer.iter().all(|&b| b == 0), "{len} bytes");
        }
    }

    /// Caught: a buffer larger than any host holds aborted the process (`vec![0; len]`);
    /// it is an error naming the size.
    #[test]
    fn a_buffer_no_host_holds_is_an_error() {
        assert_eq!(
            zeroed(usize::MAX / 2),
            Err(OutOfMemory {
                bytes: usize::MAX / 2
            })
        );
    }
}
