//! The memory of a message ring ([`RingMemory`]): a mapping two processes use at once, by
//! the ring's protocol of atomics (`transport::ring`; `transport::shared`'s protocol).
//!
//! # Rules
//!
//! - **Words only as atomics.** A ring's counters and futex words are reached only as
//!   [`AtomicU64`] or [`AtomicU32`], 8- or 4-aligned and all in the mapping, never by a
//!   copy; the other side reaches them only as atomics too.
//! - **Bytes only by copies**, of exactly the range the counters give this side
//!   ([`RingMemory::copy_in`], [`RingMemory::copy_out`]), checked against the mapping; no
//!   view of the memory is ever made, since the other side changes the counters meanwhile.
//! - **One thread at a time** in this process: a `RingMemory` is not `Sync`, so its atomics
//!   and its copies never race here; the counters' stores and loads order each copy
//!   before the other process's.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicU64};

use super::SharedMemory;

/// A mapping two processes use at once by a protocol of atomics (a message ring,
/// `transport::ring`; module rules): reached only through atomic words and copies of ranges,
/// never through a view.
#[derive(Debug)]
pub(crate) struct RingMemory {
    mem: SharedMemory,
    /// Not `Sync`: one thread at a time reaches it in this process.
    _one_thread: PhantomData<Cell<()>>,
}

impl RingMemory {
    /// `mem`, from now on reached only as a ring's memory.
    pub(crate) fn new(mem: SharedMemory) -> Self {
        Self {
            mem,
            _one_thread: PhantomData,
        }
    }

    /// Its size.
    pub(crate) fn len(&self) -> usize {
        self.mem.len()
    }

    /// The 8 bytes at `at` as an atomic; `None` unless they are all in the mapping and
    /// 8-aligned. The other side reaches them only as an atomic too (the ring's rule).
    pub(crate) fn atomic_u64(&self, at: usize) -> Option<&AtomicU64> {
        let ptr = self.aligned(at, size_of::<u64>())?;
        // SAFETY: `aligned` checked that the 8 bytes lie in the mapping, which is valid
        // while the returned borrow of `self` lives, and are 8-aligned. Nothing reaches
        // them but as atomics: a `RingMemory` makes no views, its copies never name a
        // ring's words, and every other mapping of them (another thread's, the other
        // process's) keeps to the same ring rule.
        #[allow(unsafe_code)]
        Some(unsafe { AtomicU64::from_ptr(ptr.cast()) })
    }

    /// The 4 bytes at `at` as an atomic, as [`RingMemory::atomic_u64`] (a futex word).
    pub(crate) fn atomic_u32(&self, at: usize) -> Option<&AtomicU32> {
        let ptr = self.aligned(at, size_of::<u32>())?;
        // SAFETY: as in `atomic_u64`, for 4 bytes 4-aligned.
        #[allow(unsafe_code)]
        Some(unsafe { AtomicU32::from_ptr(ptr.cast()) })
    }

    /// A pointer to `size` bytes at `at`, when they are all in the mapping and aligned to
    /// `size`.
    fn aligned(&self, at: usize, size: usize) -> Option<*mut u8> {
        let end = at.checked_add(size)?;
        let ptr = self.mem.base().as_ptr().wrapping_add(at);
        (end <= self.mem.len() && ptr.addr().is_multiple_of(size)).then_some(ptr)
    }

    /// Copies `data` to `at`, making no view of anything else (the other side changes
    /// the counters meanwhile); `false`, nothing copied, if it does not fit.
    pub(crate) fn copy_in(&mut self, at: usize, data: &[u8]) -> bool {
        if at
            .checked_add(data.len())
            .is_none_or(|end| end > self.mem.len())
        {
            return false;
        }
        // SAFETY: `[at, at + data.len())` lies in the mapping (checked above), which
        // `&mut self` keeps from every other access in this process; `data` is a borrow
        // of other memory. The other process leaves this range alone by the ring's rule.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.mem.base().as_ptr().add(at),
                data.len(),
            );
        }
        true
    }

    /// Copies the bytes at `at` into `into`, as [`RingMemory::copy_in`] the other way;
    /// `false`, nothing copied, if they are not all in the mapping.
    pub(crate) fn copy_out(&self, at: usize, into: &mut [u8]) -> bool {
        if at
            .checked_add(into.len())
            .is_none_or(|end| end > self.mem.len())
        {
            return false;
        }
        // SAFETY: as in `copy_in`: the range lies in the mapping, `into` is exclusively
        // borrowed other memory, no other thread of this process reaches the mapping (not
        // `Sync`), and the other process leaves the range alone by the ring's rule.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.mem.base().as_ptr().add(at),
                into.as_mut_ptr(),
                into.len(),
            );
        }
        true
    }
}
