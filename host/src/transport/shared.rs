//! Memory shared with a device: its whole memory (the arena of a device in a thread or a
//! child process, which the host reads and writes in place), and the windows bulk bytes
//! pass through beside a link's messages (a memfd a child process maps too, or a file
//! QEMU's firmware reaches by semihosting), and the memory of message rings.
//!
//! Besides `pages`' huge-page advice, this is the only module of tessera-host with
//! `unsafe`: the `mmap` and `munmap` calls (rustix's; the memfd and its descriptor's flags
//! need no `unsafe` through rustix), the hook that hands a memory to one child between its
//! fork and its exec, the views of a mapping as a Rust slice, the streaming stores, and a
//! ring memory's atomic words and copies. Every other module sees a safe API:
//! bounds-checked copies in and out, a read-only view of a window's prefix, and
//! mutable views of the memory.
//!
//! # Within this process: Rust's rules, per mapping
//!
//! A [`SharedMemory`] owns its mapping as a `Box<[u8]>` owns its bytes, and hands out
//! views by the same rules: every way to change the bytes takes `&mut self` ([`write`],
//! [`write_at`], [`as_mut_slice`], [`split_mut`]), every view through `&self`
//! only reads, and a view borrows the value, so it cannot outlive the mapping or overlap a
//! writer. Threads that write one mapping at once get disjoint `&mut [u8]` from
//! [`split_mut`], which refuses ranges that share a byte. So no two accesses through one
//! mapping race, whatever other modules do — the `Send` and `Sync` below rest on that alone.
//!
//! [`write`]: SharedMemory::write
//! [`write_at`]: SharedMemory::write_at
//! [`as_mut_slice`]: SharedMemory::as_mut_slice
//! [`split_mut`]: SharedMemory::split_mut
//!
//! # Between mappings: the protocol (what makes the shared bytes safe to touch)
//!
//! The same bytes can also be reached through a second mapping: [`SharedMemory::map_again`]
//! in this process, or the file opened by a child ([`SharedMemory::open`]). Rust's rules
//! cannot see that aliasing, so the two sides keep to a protocol: **shared memory belongs
//! to one side at a time, and the link says which**; the request/reply exchange orders the
//! accesses (a message between threads, or a pipe or a ring's atomics between processes,
//! each a happens-before edge).
//!
//! - **A device's memory** is mapped twice: once by the device, as its arena, once by the
//!   host. The device touches it only while it runs a request, before it replies. The host
//!   touches it only once every request it sent that device has been answered, and only
//!   while no other request can be sent: its mapping lives inside the device's channel and
//!   is reached only through [`Channel::device_memory`](super::Channel::device_memory),
//!   which drains the channel first and returns a view that borrows the channel mutably —
//!   so, by the borrow checker, no request goes out while the host's view exists. This is
//!   how a host treats an accelerator's memory it can map: DMA while the device is idle.
//!   (The device's side is upheld by the device loop, which touches its arena only to run
//!   a request; its arena holds the device's mapping and borrows a slice of it for one
//!   access at a time — see [`Memory`] — so no Rust reference to those bytes lives across
//!   the moments the host writes them.)
//! - **A window**: the host writes it only before sending a bulk write and reads it only
//!   after the device's reply to a bulk read has arrived; the device reads it only while it
//!   runs that bulk write and writes it only while it runs that bulk read, before it
//!   replies (a repeated request is answered from the reply cache and never touches the
//!   window). The host keeps at most one bulk request in flight per window.
//! - **A message ring** (`transport::ring`) is used by both sides at once, through a
//!   [`RingMemory`]: its counters are reached only as atomics, never by a copy, and its
//!   bytes only by copies of exactly the range its counters give one side; the counters'
//!   stores and loads order each copy before the other side's. A `RingMemory` makes no
//!   views and is not `Sync`: in this process one thread at a time reaches it, so its
//!   atomics and its copies never race here.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use rustix::fs::{memfd_create, MemfdFlags};
use rustix::io::{fcntl_dupfd_cloexec, fcntl_setfd, FdFlags};
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};

use tessera_firmware_sim::Memory;

/// A mapping of a shared-memory file, read and written by copies or through views that
/// borrow it (module doc).
#[derive(Debug)]
pub(crate) struct SharedMemory {
    ptr: NonNull<u8>,
    len: usize,
    /// The file mapped; kept open so the host can hand it to its child.
    file: File,
}

// SAFETY: the value owns its mapping until drop, as a `Box<[u8]>` owns its bytes (no
// other value of this process points into it except through a borrow of this one), so
// moving it to another thread moves that ownership whole.
#[allow(unsafe_code)]
unsafe impl Send for SharedMemory {}
// SAFETY: through `&self` the bytes are only read (`bytes`, `read`, `range`); every
// write takes `&mut self` (module doc), so shared references on several threads only ever
// read at once, as with `&[u8]`.
#[allow(unsafe_code)]
unsafe impl Sync for SharedMemory {}

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
    /// A new anonymous shared-memory file of `len` bytes (zeroed; pages are only backed
    /// once touched), mapped. Its descriptor is closed on exec: no child inherits it unless
    /// it is handed to that child's command ([`SharedMemory::hand_to`]).
    pub(crate) fn create(len: usize) -> io::Result<Self> {
        let mut fd = memfd_create(c"tessera-shared", MemfdFlags::CLOEXEC)?;
        if fd.as_raw_fd() <= 2 {
            // A host started with a standard stream closed got that number: a child's
            // stdio would replace it there (or, for stderr, write into the memory). Moved
            // above the three; the low number is closed as the first descriptor is replaced.
            fd = fcntl_dupfd_cloexec(&fd, 3)?;
        }
        let file = File::from(fd);
        file.set_len(len as u64)?;
        Self::map(file, len)
    }

    /// A second mapping of the same memory, at another address: the device's view of
    /// memory the host maps too (a device thread of this process).
    pub(crate) fn map_again(&self) -> io::Result<Self> {
        Self::map(self.file.try_clone()?, self.len)
    }

    /// Maps `len` bytes of `file` (memory a host created, opened by its child).
    pub(crate) fn open(file: File, len: usize) -> io::Result<Self> {
        if file.metadata()?.len() < len as u64 {
            return Err(io::Error::other(
                "the shared window is smaller than announced",
            ));
        }
        Self::map(file, len)
    }

    fn map(file: File, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::other("a shared window needs at least one byte"));
        }
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: a fresh shared mapping of `len` bytes of an open file we own, at an
        // address the kernel chooses (a null hint, so no existing mapping is replaced);
        // nothing of ours is touched, and the result is checked before use.
        #[allow(unsafe_code)]
        let ptr = unsafe { mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, &file, 0)? };
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::other("the kernel mapped the memory at address 0"))?;
        Ok(Self { ptr, len, file })
    }

    /// Its size.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The descriptor a child inherits, to name on its command line.
    pub(crate) fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    /// Has the child `command` starts inherit each of `memories`' descriptors (named on its
    /// command line by [`SharedMemory::fd`]), and no other child, whoever starts it: the
    /// descriptors stay closed on exec in this process, and the child clears that flag on
    /// its own copies between its fork and its exec. (Clearing it here until the child had
    /// started left a window in which a child started by another thread — the user's, an
    /// MPI library's — inherited a device's memory and kept it alive.) The hook names the
    /// descriptors by number: spawn the command while `memories` are alive. A command with
    /// a hook starts by `fork` rather than `posix_spawn`; devices start rarely enough.
    pub(crate) fn hand_to(command: &mut Command, memories: &[&SharedMemory]) {
        let fds: Vec<i32> = memories.iter().map(|m| m.fd()).collect();
        // SAFETY: the hook runs in the forked child before exec, where only
        // async-signal-safe calls are allowed: it calls fcntl (one system call each) on
        // descriptors the child inherited from this process — open there, so each borrow
        // of one lasts while it is open: each `SharedMemory` is borrowed while the command
        // is built, and the caller spawns it before dropping them —, reads a vector
        // allocated before the fork, and allocates nothing (an error is a raw OS error).
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                for &fd in &fds {
                    fcntl_setfd(BorrowedFd::borrow_raw(fd), FdFlags::empty())?;
                }
                Ok(())
            });
        }
    }

    /// Copies `data` to the start of the window; `false` if it does not fit.
    pub(crate) fn write(&mut self, data: &[u8]) -> bool {
        self.write_at(0, data)
    }

    /// Copies `data` into the memory at `at`; `false` (nothing copied) if it does not fit.
    pub(crate) fn write_at(&mut self, at: usize, data: &[u8]) -> bool {
        match at.checked_add(data.len()) {
            Some(end) if end <= self.len => {
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
        let len = self.len;
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

    /// The whole memory as one mutable slice: the device's arena, or the host's view while
    /// the device is idle.
    ///
    /// The exclusive borrow keeps every other view through this mapping away while the
    /// slice lives. Another mapping of the same file is another matter, settled by the
    /// protocol of the module doc: the device borrows a slice of its mapping only for one
    /// access while it runs a request (its arena keeps this mapping, not a slice: see
    /// [`Memory`]), and the host its mapping only while none is in flight.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is valid for `self.len` bytes while `self` lives, which the
        // borrow guarantees; `&mut self` makes the slice the only view through this
        // mapping while it lives (every other view borrows `self` too). Accesses through
        // other mappings of the same file are kept apart by the protocol of the module doc.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len)
        }
    }

    /// The first `len` bytes of the window, copied out; `None` if `len` exceeds it.
    pub(crate) fn read(&self, len: usize) -> Option<Vec<u8>> {
        Some(self.bytes(len)?.to_vec())
    }

    /// A view of the first `len` bytes; `None` if `len` exceeds the window.
    pub(crate) fn bytes(&self, len: usize) -> Option<&[u8]> {
        self.whole().get(..len)
    }

    /// The whole memory, read-only.
    pub(crate) fn whole(&self) -> &[u8] {
        // SAFETY: the mapping is valid for `self.len` bytes while `self` lives, which the
        // returned borrow of `self` guarantees; while it lives nothing writes through this
        // mapping, since every write takes `&mut self` (module doc). Writes through another
        // mapping of the same file are kept apart by the protocol of the module doc.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.len)
        }
    }
}

/// A mapping two processes use at once by a protocol of atomics (a message ring,
/// `transport::ring`; module doc): reached only through atomic words and copies of ranges,
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
        self.mem.len
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
        let ptr = self.mem.ptr.as_ptr().wrapping_add(at);
        (end <= self.mem.len && ptr.addr().is_multiple_of(size)).then_some(ptr)
    }

    /// Copies `data` to `at`, making no view of anything else (the other side changes
    /// the counters meanwhile); `false`, nothing copied, if it does not fit.
    pub(crate) fn copy_in(&mut self, at: usize, data: &[u8]) -> bool {
        if at
            .checked_add(data.len())
            .is_none_or(|end| end > self.mem.len)
        {
            return false;
        }
        // SAFETY: `[at, at + data.len())` lies in the mapping (checked above), which
        // `&mut self` keeps from every other access in this process; `data` is a borrow
        // of other memory. The other process leaves this range alone by the ring's rule.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.mem.ptr.as_ptr().add(at), data.len());
        }
        true
    }

    /// Copies the bytes at `at` into `into`, as [`RingMemory::copy_in`] the other way;
    /// `false`, nothing copied, if they are not all in the mapping.
    pub(crate) fn copy_out(&self, at: usize, into: &mut [u8]) -> bool {
        if at
            .checked_add(into.len())
            .is_none_or(|end| end > self.mem.len)
        {
            return false;
        }
        // SAFETY: as in `copy_in`: the range lies in the mapping, `into` is exclusively
        // borrowed other memory, no other thread of this process reaches the mapping (not
        // `Sync`), and the other process leaves the range alone by the ring's rule.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.mem.ptr.as_ptr().add(at),
                into.as_mut_ptr(),
                into.len(),
            );
        }
        true
    }
}

/// A device's arena over this mapping borrows its bytes one access at a time, so no view of
/// them outlives the request that made it (the protocol of the module doc).
impl Memory for SharedMemory {
    fn view(&self) -> &[u8] {
        self.whole()
    }
    fn lend(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no view of it outlives `self`.
        // It cannot fail for a whole mapping that exists; were it to, the mapping would
        // only stay mapped, so the result is ignored.
        #[allow(unsafe_code)]
        let _ = unsafe { munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

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

/// Where a channel's bulk bytes pass: the memory it shares with a child process, or a file
/// QEMU's firmware reads and writes by semihosting. The same ownership protocol holds for
/// both (see the module doc).
#[derive(Debug)]
pub enum Window {
    /// Shared memory.
    Shared(SharedMemory),
    /// A file of `len` bytes.
    File {
        /// The file.
        file: File,
        /// Its length.
        len: usize,
    },
}

impl Window {
    /// The most bytes it holds.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Shared(shared) => shared.len(),
            Self::File { len, .. } => *len,
        }
    }

    /// Copies `data` to the start of the window; `false` if it does not fit or the file
    /// cannot be written.
    pub(crate) fn write(&mut self, data: &[u8]) -> bool {
        match self {
            Self::Shared(shared) => shared.write(data),
            Self::File { file, len } => {
                use std::os::unix::fs::FileExt;
                data.len() <= *len && file.write_all_at(data, 0).is_ok()
            }
        }
    }

    /// The first `len` bytes of the window; `None` if they are not all there.
    pub(crate) fn read(&self, len: usize) -> Option<Vec<u8>> {
        match self {
            Self::Shared(shared) => shared.read(len),
            Self::File { file, len: size } => {
                use std::os::unix::fs::FileExt;
                let mut bytes = vec![0u8; len];
                (len <= *size && file.read_exact_at(&mut bytes, 0).is_ok()).then_some(bytes)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn two_mappings_of_one_window_see_each_others_bytes() {
        let mut host = SharedMemory::create(4096).unwrap();
        let path = format!("/proc/self/fd/{}", host.fd());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut device = SharedMemory::open(file, 4096).unwrap();
        assert!(host.write(b"weights"));
        assert_eq!(device.bytes(7), Some(&b"weights"[..]));
        assert!(device.write(b"reply"));
        assert_eq!(host.read(5).unwrap(), b"reply");
        assert!(!host.write(&[0; 4097]), "larger than the window");
        assert_eq!(host.read(4097), None);
    }

    /// A memory handed to one child reaches that child only: a child started without it
    /// (by another thread, say, while a device process starts) must not inherit it — it
    /// did while the descriptors were made inheritable for the length of a device's start.
    #[test]
    fn a_memory_reaches_only_the_child_it_is_handed_to() {
        let handed = SharedMemory::create(4096).unwrap();
        let kept = SharedMemory::create(4096).unwrap();
        let has = |fd: i32| format!("test -e /proc/self/fd/{fd}");
        let mut command = Command::new("sh");
        let script = format!("{} && ! {}", has(handed.fd()), has(kept.fd()));
        command.args(["-c", &script]);
        SharedMemory::hand_to(&mut command, &[&handed]);
        assert!(
            command.status().unwrap().success(),
            "the child sees only its memory"
        );
        let other = Command::new("sh")
            .args([
                "-c",
                &format!("! {} && ! {}", has(handed.fd()), has(kept.fd())),
            ])
            .status()
            .unwrap();
        assert!(other.success(), "a child it was not handed to sees neither");
    }

    /// Set in the copy of this test binary that runs
    /// `a_memory_never_takes_a_standard_stream_number` with its standard input closed.
    const STDIN_CLOSED: &str = "TESSERA_TEST_STDIN_CLOSED";

    /// A host started with a standard stream closed (the Python extension may be) got that
    /// number for a device's memory: a child's standard input would have replaced the memory
    /// there. The memory must land above 2, and the low number it first got be free again.
    /// Runs in a copy of this test binary, alone: closing a standard stream here would race
    /// the other tests' descriptors.
    #[test]
    fn a_memory_never_takes_a_standard_stream_number() {
        if std::env::var_os(STDIN_CLOSED).is_some() {
            let open = |fd: i32| std::fs::symlink_metadata(format!("/proc/self/fd/{fd}")).is_ok();
            assert!(open(0), "standard input open before");
            // SAFETY: closes this process's standard input, which nothing else here uses
            // or owns (this test runs alone in its process, and fd 0 is open, checked
            // above).
            #[allow(unsafe_code)]
            unsafe {
                rustix::io::close(0);
            }
            assert!(!open(0), "standard input closed");
            let memory = SharedMemory::create(4096).unwrap();
            assert!(
                memory.fd() > 2,
                "the memory took descriptor {}",
                memory.fd()
            );
            assert!(!open(0), "descriptor 0 is free again");
            return;
        }
        let name = "transport::shared::tests::a_memory_never_takes_a_standard_stream_number";
        let run = Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--test-threads=1"])
            .env(STDIN_CLOSED, "1")
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success() && report.contains("1 passed"),
            "{report}{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }

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
