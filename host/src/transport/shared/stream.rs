//! A copy by streaming stores ([`stream`]): for bytes written once and read later by the
//! device, which a plain copy would first read into the cache line by line.
//!
//! # Rules
//!
//! - **Only equal lengths**: `false`, nothing copied, when they differ.
//! - **Fenced before it returns**: the stores are ordered before whatever the caller does
//!   next (the request that tells the device), as plain stores would be.
//! - **The same bytes as a copy** on every CPU: x86-64 streams 16-byte aligned chunks (with
//!   a plain head and tail), every other CPU copies plainly.

/// Copies `data` into `dst` (of the same length), with stores that bypass the cache where
/// the CPU has them (x86-64's non-temporal stores): for results written once and read by
/// the device later, which would otherwise read every line before overwriting it. The
/// stores are fenced before it returns, so they are ordered before the next request.
/// `false`, nothing copied, if the lengths differ.
pub(crate) fn stream(dst: &mut [u8], data: &[u8]) -> bool {
    if dst.len() != data.len() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = dst.as_ptr().align_offset(16).min(data.len());
        dst[..head].copy_from_slice(&data[..head]);
        let mut i = head;
        while i + 16 <= data.len() {
            // SAFETY: `i + 16 <= data.len() == dst.len()`, so both 16-byte accesses lie in
            // their slices (`dst` exclusively borrowed, `data` borrowed, so they do not
            // overlap); `dst + i` is 16-byte aligned (`head` aligned it, and `i` moves by
            // 16), as the streaming store requires; SSE2 is part of x86-64.
            #[allow(unsafe_code)]
            unsafe {
                let v = _mm_loadu_si128(data.as_ptr().add(i).cast::<__m128i>());
                _mm_stream_si128(dst.as_mut_ptr().add(i).cast::<__m128i>(), v);
            }
            i += 16;
        }
        dst[i..].copy_from_slice(&data[i..]);
        // SAFETY: a store fence has no memory-safety preconditions; SSE2 is part of x86-64.
        #[allow(unsafe_code)]
        unsafe {
            _mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(data);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::shared::SharedMemory;

    /// Streaming stores go through 16-byte aligned chunks with a plain head and tail: an
    /// off-by-one there would drop or smear the bytes around each edge.
    #[test]
    fn streamed_writes_land_whole_at_any_offset_and_length() {
        let mut memory = SharedMemory::create(4096).unwrap();
        let other = memory.map_again().unwrap();
        for at in [0, 1, 7, 15, 16, 17, 100] {
            for len in [0, 1, 15, 16, 17, 31, 33, 200, 1000] {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + at + 1) as u8).collect();
                assert!(memory.write_at(0, &[0xEE; 1200]));
                assert!(stream(&mut memory.as_mut_slice()[at..at + len], &data));
                let mut back = vec![0u8; 1200];
                assert!(
                    other
                        .range(0, back.len())
                        .map(|b| back.copy_from_slice(b))
                        .is_some(),
                    "seen through the other mapping"
                );
                assert!(back[..at].iter().all(|&b| b == 0xEE), "before {at}+{len}");
                assert_eq!(&back[at..at + len], &data[..], "at {at}, {len} bytes");
                assert!(
                    back[at + len..].iter().all(|&b| b == 0xEE),
                    "after {at}+{len}"
                );
            }
        }
        assert!(
            !stream(&mut memory.as_mut_slice()[..6], &[1; 7]),
            "unequal lengths"
        );
        assert!(!memory.write_at(usize::MAX, &[1]), "an overflowing offset");
        assert!(memory.range(4096, 1).is_none());
    }
}
