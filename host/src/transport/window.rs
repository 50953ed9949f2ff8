//! The windows bulk bytes (whole arrays) pass through beside a framed link instead of
//! inside it: a shared-memory window between this process and a device in a child process
//! (a memfd both map), or a file QEMU's firmware reaches by semihosting.
//!
//! This is the only module of tessera-host with `unsafe`: the `mmap`/`munmap` calls and
//! the copies to and from the mapping. Every other module sees a safe API: bounds-checked
//! copies in and out, and a read-only view of a prefix.
//!
//! # Protocol (what makes the shared bytes safe to touch)
//!
//! The window belongs to one side at a time. The host writes it only before sending a
//! bulk write and reads it only after the device's reply to a bulk read has arrived; the
//! device reads it only while it runs that bulk write and writes it only while it runs that
//! bulk read, before it replies (a repeated request is answered from the reply cache and
//! never touches the window). The host keeps at most one bulk request in flight per
//! window, so the two sides never touch the window at the same time.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// A mapping of a shared-memory file, read and written by copies.
#[derive(Debug)]
pub struct SharedWindow {
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
unsafe impl Send for SharedWindow {}
// SAFETY: as above; concurrent `&self` copies from several threads of one process would be
// a protocol violation the callers (one channel, or one device) never commit.
#[allow(unsafe_code)]
unsafe impl Sync for SharedWindow {}

impl SharedWindow {
    /// A new anonymous shared-memory file of `len` bytes, mapped. Its descriptor is
    /// inherited by children spawned until [`SharedWindow::seal_from_children`] is called.
    pub fn create(len: usize) -> io::Result<Self> {
        // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new
        // descriptor or -1 and touches no memory of ours.
        #[allow(unsafe_code)]
        let fd = unsafe { libc::memfd_create(c"tessera-window".as_ptr(), 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
        #[allow(unsafe_code)]
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(len as u64)?;
        Self::map(file, len)
    }

    /// Maps `len` bytes of `file` (a window a host created, opened by its child).
    pub fn open(file: File, len: usize) -> io::Result<Self> {
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
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a window of no bytes (never: windows have at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The descriptor a child inherits, to name on its command line.
    pub fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    /// Stops further children from inheriting the descriptor.
    pub fn seal_from_children(&self) -> io::Result<()> {
        // SAFETY: fcntl on a descriptor we own; F_SETFD only changes its flags.
        #[allow(unsafe_code)]
        let done = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        if done < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Copies `data` to the start of the window; `false` if it does not fit.
    pub fn write(&self, data: &[u8]) -> bool {
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

    /// The first `len` bytes of the window, copied out; `None` if `len` exceeds it.
    pub fn read(&self, len: usize) -> Option<Vec<u8>> {
        Some(self.bytes(len)?.to_vec())
    }

    /// A view of the first `len` bytes; `None` if `len` exceeds the window.
    pub fn bytes(&self, len: usize) -> Option<&[u8]> {
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

impl Drop for SharedWindow {
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
    Shared(SharedWindow),
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
    pub fn len(&self) -> usize {
        match self {
            Self::Shared(shared) => shared.len(),
            Self::File { len, .. } => *len,
        }
    }

    /// Copies `data` to the start of the window; `false` if it does not fit or the file
    /// cannot be written.
    pub fn write(&self, data: &[u8]) -> bool {
        match self {
            Self::Shared(shared) => shared.write(data),
            Self::File { file, len } => {
                use std::os::unix::fs::FileExt;
                data.len() <= *len && file.write_all_at(data, 0).is_ok()
            }
        }
    }

    /// The first `len` bytes of the window; `None` if they are not all there.
    pub fn read(&self, len: usize) -> Option<Vec<u8>> {
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

    #[test]
    fn two_mappings_of_one_window_see_each_others_bytes() {
        let host = SharedWindow::create(4096).unwrap();
        let path = format!("/proc/self/fd/{}", host.fd());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let device = SharedWindow::open(file, 4096).unwrap();
        assert!(host.write(b"weights"));
        assert_eq!(device.bytes(7), Some(&b"weights"[..]));
        assert!(device.write(b"reply"));
        assert_eq!(host.read(5).unwrap(), b"reply");
        assert!(!host.write(&[0; 4097]), "larger than the window");
        assert_eq!(host.read(4097), None);
    }
}
