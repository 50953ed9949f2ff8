//! The safe API on a [`SharedMemory`], which every other module uses: copies in and out,
//! ranges read or written in place, and disjoint mutable views for several threads. All of
//! it is built on the mapping's two views (`mapping`), so none of it needs `unsafe`.
//!
//! # Rules
//!
//! - **Checked, never clipped.** A copy or a range not all in the mapping (an offset that
//!   overflows included) is refused — `false` or `None` — and nothing is copied.
//! - **Writes take `&mut self`, reads `&self`**, as the mapping's views do: a view borrows
//!   the memory, so it cannot outlive it or overlap a writer.
//! - **Disjoint or refused.** [`SharedMemory::split_mut`] gives each range its own view;
//!   ranges that share a byte, or one not all in the memory, are a [`SplitError`] and
//!   nothing is split (an empty range shares no byte).

use std::ops::Range;

use super::SharedMemory;

/// Why [`SharedMemory::split_mut`] refused a set of ranges: nothing was split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SplitError {
    /// A range that is not all in the memory (or runs backwards).
    #[error("bytes {range:?} are not all in {len} bytes of memory")]
    Outside {
        /// The range.
        range: Range<usize>,
        /// The memory's size.
        len: usize,
    },
    /// Two ranges that share bytes.
    #[error("bytes {0:?} and {1:?} overlap")]
    Overlap(Range<usize>, Range<usize>),
}

impl SharedMemory {
    /// Copies `data` to the start of the window; `false` if it does not fit.
    pub(crate) fn write(&mut self, data: &[u8]) -> bool {
        self.write_at(0, data)
    }

    /// Copies `data` into the memory at `at`; `false` (nothing copied) if it does not fit.
    pub(crate) fn write_at(&mut self, at: usize, data: &[u8]) -> bool {
        match at.checked_add(data.len()) {
            Some(end) if end <= self.len() => {
                self.as_mut_slice()[at..end].copy_from_slice(data);
                true
            }
            _ => false,
        }
    }

    /// Bytes `[at, at + len)`, to be written in place; `None` if not all in the mapping.
    pub(crate) fn range_mut(&mut self, at: usize, len: usize) -> Option<&mut [u8]> {
        let end = at.checked_add(len)?;
        self.as_mut_slice().get_mut(at..end)
    }

    /// Bytes `[at, at + len)`, read in place; `None` if not all in the mapping.
    pub(crate) fn range(&self, at: usize, len: usize) -> Option<&[u8]> {
        let end = at.checked_add(len)?;
        self.whole().get(at..end)
    }

    /// Disjoint mutable views of `ranges` of the memory, in their order: what several
    /// threads write at once (each gets its own views). Refused, nothing split, if a range
    /// is not all in the memory or two ranges share a byte; an empty range shares none,
    /// and its view is empty.
    pub(crate) fn split_mut(
        &mut self,
        ranges: &[Range<usize>],
    ) -> Result<Vec<&mut [u8]>, SplitError> {
        let len = self.len();
        if let Some(range) = ranges.iter().find(|r| r.start > r.end || r.end > len) {
            return Err(SplitError::Outside {
                range: range.clone(),
                len,
            });
        }
        let mut order: Vec<usize> = (0..ranges.len())
            .filter(|&i| !ranges[i].is_empty())
            .collect();
        order.sort_unstable_by_key(|&i| ranges[i].start);
        // Sorted by start, ranges are disjoint when each ends before the next starts.
        if let Some(pair) = order
            .windows(2)
            .find(|pair| ranges[pair[0]].end > ranges[pair[1]].start)
        {
            return Err(SplitError::Overlap(
                ranges[pair[0]].clone(),
                ranges[pair[1]].clone(),
            ));
        }
        let mut views: Vec<&mut [u8]> = ranges.iter().map(|_| Default::default()).collect();
        let (mut rest, mut rest_at) = (self.as_mut_slice(), 0);
        for i in order {
            let range = &ranges[i];
            let (_, from) = std::mem::take(&mut rest).split_at_mut(range.start - rest_at);
            let (view, after) = from.split_at_mut(range.len());
            views[i] = view;
            (rest, rest_at) = (after, range.end);
        }
        Ok(views)
    }

    /// The first `len` bytes of the window, copied out; `None` if `len` exceeds it.
    pub(crate) fn read(&self, len: usize) -> Option<Vec<u8>> {
        Some(self.bytes(len)?.to_vec())
    }

    /// A view of the first `len` bytes; `None` if `len` exceeds the window.
    pub(crate) fn bytes(&self, len: usize) -> Option<&[u8]> {
        self.whole().get(..len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-place allreduce hands each thread its own views: a splitter that let two
    /// views share a byte would let two threads write it at once.
    #[test]
    fn split_views_are_disjoint_or_refused() {
        let mut memory = SharedMemory::create(4096).unwrap();
        for overlapping in [
            vec![0..10, 5..15],
            vec![100..200, 0..50, 150..151],
            vec![7..8, 7..8],
            vec![0..4096, 4095..4096],
        ] {
            let refused = memory.split_mut(&overlapping);
            assert!(
                matches!(refused, Err(SplitError::Overlap(..))),
                "{overlapping:?}: {refused:?}"
            );
        }
        assert_eq!(
            memory.split_mut(&[0..1, 4090..4097]),
            Err(SplitError::Outside {
                range: 4090..4097,
                len: 4096
            })
        );
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = memory.split_mut(&[0..1, 9..3]);
        assert!(matches!(backwards, Err(SplitError::Outside { .. })));
        // Disjoint, out of order, touching, and an empty range inside another's bytes.
        let ranges = [300..400, 0..10, 10..20, 5..5, 4000..4096];
        let mut views = memory.split_mut(&ranges).unwrap();
        for ((view, range), fill) in views.iter_mut().zip(&ranges).zip(1u8..) {
            assert_eq!(view.len(), range.len());
            view.fill(fill);
        }
        let mut back = vec![0u8; 4096];
        assert!(memory
            .range(0, back.len())
            .map(|b| back.copy_from_slice(b))
            .is_some());
        for (range, fill) in ranges.iter().zip(1u8..).filter(|(r, _)| !r.is_empty()) {
            assert!(back[range.clone()].iter().all(|&b| b == fill), "{range:?}");
        }
        assert!(
            back[20..300].iter().all(|&b| b == 0),
            "untouched between views"
        );
    }
}
