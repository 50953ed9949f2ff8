//! Memory shared with a device: its whole memory (the arena of a device in a thread or a
//! child process, which the host reads and writes in place), and the windows bulk bytes
//! pass through beside a framed link (a memfd a child process maps too, or a file QEMU's
//! firmware reaches by semihosting).
//!
//! This is the only module of tessera-host with `unsafe`: the `mmap`/`munmap` calls and
//! the copies to and from a mapping. Every other module sees a safe API: bounds-checked
//! copies in and out, a read-only view of a window's prefix, and the device's own mutable
//! view of its memory.
//!
//! # Protocol (what makes the shared bytes safe to touch)
//!
//! Shared memory belongs to one side at a time, and the link says which.
//!
//! - **A device's memory** is mapped twice: once by the device, as its arena, once by the
//!   host. The device touches it only while it runs a request. The host touches it only
//!   while every request it sent that device has been answered and through a borrow of the
//!   device's channel that stops it from sending another ([`Channel::device_memory`]
//!   (super::Channel::device_memory)), so the two never overlap; the request/reply
//!   exchange orders the accesses (a message between threads, or a pipe between processes).
//!   This is how a host treats an accelerator's memory it can map: DMA while the device is
//!   idle.
//! - **A window**: the host writes it only before sending a bulk write and reads it only
//!   after the device's reply to a bulk read has arrived; the device reads it only while it
//!   runs that bulk write and writes it only while it runs that bulk read, before it
//!   replies (a repeated request is answered from the reply cache and never touches the
//!   window). The host keeps at most one bulk request in flight per window.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// A mapping of a shared-memory file, read and written by copies.
#[derive(Debug)]
pub(crate) struct SharedMemory {
    ptr: NonNull<u8>,
    len: usize,
    /// The file mapped; kept open so the host can hand it to its child.
    file: File,
}

// SAFETY: the mapping is plain memory owned by this value until drop; the protocol in the
// module doc keeps accesses from the two processes apart, and within this process every
// access goes through `&self` methods that copy (no reference into the mapping outlives a
// call, except `bytes`, whose borrow of `self` keeps the mapping alive).
#[allow(unsafe_code)]
unsafe impl Send for SharedMemory {}
// SAFETY: as above. `&self` copies from several threads of one process at once are sound
// only on disjoint byte ranges: the in-place allreduce splits its ranges that way, and no
// other caller copies from two threads at once.
#[allow(unsafe_code)]
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// A new anonymous shared-memory file of `len` bytes (zeroed; pages are only backed
    /// once touched), mapped. With `inherit`, its descriptor is inherited by children
    /// spawned until [`SharedMemory::seal_from_children`] is called; without, by none.
    pub(crate) fn create(len: usize, inherit: bool) -> io::Result<Self> {
        let flags = if inherit { 0 } else { libc::MFD_CLOEXEC };
        // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new
        // descriptor or -1 and touches no memory of ours.
        #[allow(unsafe_code)]
        let fd = unsafe { libc::memfd_create(c"tessera-shared".as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
        #[allow(unsafe_code)]
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
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
        // SAFETY: a fresh shared mapping of `len` bytes of an open file we own, at an
        // address the kernel chooses; the result is checked before use.
        #[allow(unsafe_code)]
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
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

    /// Stops further children from inheriting the descriptor.
    pub(crate) fn seal_from_children(&self) -> io::Result<()> {
        // SAFETY: fcntl on a descriptor we own; F_SETFD only changes its flags.
        #[allow(unsafe_code)]
        let done = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        if done < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Copies `data` to the start of the window; `false` if it does not fit.
    pub(crate) fn write(&self, data: &[u8]) -> bool {
        if data.len() > self.len {
            return false;
        }
        // SAFETY: `data.len() <= self.len` bytes from a slice into the mapping, which is
        // valid for `self.len` bytes; they cannot overlap (the mapping is never a Rust
        // slice the caller holds mutably, and `bytes` views are not held across writes by
        // the protocol).
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr(), data.len());
        }
        true
    }

    /// Copies `data` into the memory at `at`; `false` (nothing copied) if it does not fit.
    pub(crate) fn write_at(&self, at: usize, data: &[u8]) -> bool {
        if at.checked_add(data.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: `at + data.len() <= self.len`, so the destination lies in the mapping;
        // `data` is a slice this process holds, never a view of this mapping while it is
        // written (the only views are `bytes`, whose borrow the protocol does not hold
        // across writes, and the device's `as_mut_slice`, on the device's own mapping).
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(at), data.len());
        }
        true
    }

    /// Like [`SharedMemory::write_at`], with stores that bypass the cache where the CPU has
    /// them (x86-64's non-temporal stores): for results written once and read by the
    /// device later, which would otherwise read every line before overwriting it.
    pub(crate) fn stream_at(&self, at: usize, data: &[u8]) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            if at.checked_add(data.len()).is_none_or(|end| end > self.len) {
                return false;
            }
            // SAFETY: as in `write_at`, the destination range lies in the mapping and
            // `data` does not overlap it; SSE2 is part of x86-64; the unaligned head and
            // tail go through plain copies, the aligned middle through 16-byte streaming
            // stores, fenced so that they are visible before the device runs again.
            #[allow(unsafe_code)]
            unsafe {
                use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
                let dst = self.ptr.as_ptr().add(at);
                let head = dst.align_offset(16).min(data.len());
                std::ptr::copy_nonoverlapping(data.as_ptr(), dst, head);
                let mut i = head;
                while i + 16 <= data.len() {
                    let v = _mm_loadu_si128(data.as_ptr().add(i).cast::<__m128i>());
                    _mm_stream_si128(dst.add(i).cast::<__m128i>(), v);
                    i += 16;
                }
                std::ptr::copy_nonoverlapping(data.as_ptr().add(i), dst.add(i), data.len() - i);
                _mm_sfence();
            }
            true
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.write_at(at, data)
        }
    }

    /// Copies the memory at `at` into `into`; `false` (nothing copied) if that range is
    /// not all in the mapping.
    pub(crate) fn read_at(&self, at: usize, into: &mut [u8]) -> bool {
        if at.checked_add(into.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: `at + into.len() <= self.len`, so the source lies in the mapping; `into`
        // is exclusively borrowed memory of this process, not part of this mapping.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(at), into.as_mut_ptr(), into.len());
        }
        true
    }

    /// The whole memory as one mutable slice: the device's arena. The exclusive borrow
    /// keeps every other view through this mapping away while it lives; the host, through
    /// its own mapping, keeps to the protocol in the module doc. (The device holds this
    /// slice for its whole life, so its soundness rests on that protocol: the host writes
    /// through its mapping only while the device runs no request, as hardware DMA into an
    /// idle accelerator's memory does.)
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is valid for `self.len` bytes while `self` lives, which the
        // borrow guarantees; `&mut self` makes it the only view through this mapping; the
        // other side's accesses never overlap the device's (module doc).
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
        if len > self.len {
            return None;
        }
        // SAFETY: the mapping is valid for `self.len >= len` bytes while `self` lives,
        // which the returned borrow guarantees; by the protocol the peer does not write
        // the window while this side reads it.
        #[allow(unsafe_code)]
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len) })
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no view of it outlives `self`.
        #[allow(unsafe_code)]
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
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
    pub(crate) fn write(&self, data: &[u8]) -> bool {
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
        let memory = SharedMemory::create(4096, false).unwrap();
        let other = memory.map_again().unwrap();
        for at in [0, 1, 7, 15, 16, 17, 100] {
            for len in [0, 1, 15, 16, 17, 31, 33, 200, 1000] {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + at + 1) as u8).collect();
                assert!(memory.write_at(0, &[0xEE; 1200]));
                assert!(memory.stream_at(at, &data));
                let mut back = vec![0u8; 1200];
                assert!(
                    other.read_at(0, &mut back),
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
        assert!(!memory.stream_at(4090, &[1; 7]), "past the end");
        assert!(!memory.write_at(usize::MAX, &[1]), "an overflowing offset");
        assert!(!memory.read_at(4096, &mut [0; 1]));
    }

    #[test]
    fn two_mappings_of_one_window_see_each_others_bytes() {
        let host = SharedMemory::create(4096, true).unwrap();
        let path = format!("/proc/self/fd/{}", host.fd());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let device = SharedMemory::open(file, 4096).unwrap();
        assert!(host.write(b"weights"));
        assert_eq!(device.bytes(7), Some(&b"weights"[..]));
        assert!(device.write(b"reply"));
        assert_eq!(host.read(5).unwrap(), b"reply");
        assert!(!host.write(&[0; 4097]), "larger than the window");
        assert_eq!(host.read(4097), None);
    }
}
