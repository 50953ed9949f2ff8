//! One mapping of a shared-memory file ([`SharedMemory`]): the `mmap` that makes it and the
//! `munmap` that ends it, the only two views of its bytes as Rust slices ([`whole`] and
//! [`as_mut_slice`]), the raw base a ring memory reaches its words by, and the hook that hands
//! a memory to one child process. This module's `unsafe` rests on the rules below and, for
//! other mappings of the same bytes, on the protocol of [`transport::shared`](super).
//!
//! # Within this process: Rust's rules, per mapping
//!
//! A [`SharedMemory`] owns its mapping as a `Box<[u8]>` owns its bytes, and hands out
//! views by the same rules: its fields are private to this module, and every other use of
//! its bytes goes through [`whole`] (through `&self`, read-only) or [`as_mut_slice`]
//! (through `&mut self`) — the copies and ranges of `views` are built on those two. A view
//! borrows the value, so it cannot outlive the mapping or overlap a writer. Threads that
//! write one mapping at once get disjoint `&mut [u8]` from
//! [`split_mut`](SharedMemory::split_mut), which refuses ranges that share a byte. So no
//! two accesses through one mapping race, whatever other modules do — the `Send` and
//! `Sync` below rest on that alone. ([`base`] hands out the mapping's address for a
//! [`RingMemory`](super::RingMemory), which is not `Sync` and reaches the bytes only as
//! atomics and copies, under its own SAFETY notes.)
//!
//! [`whole`]: SharedMemory::whole
//! [`as_mut_slice`]: SharedMemory::as_mut_slice
//! [`base`]: SharedMemory::base

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::ptr::NonNull;

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
// SAFETY: through `&self` the bytes are only read (`whole`, the one view through `&self`);
// every write takes `&mut self` (`as_mut_slice`; module doc), so shared references on
// several threads only ever read at once, as with `&[u8]`. `base`'s address is used only by
// a `RingMemory`, which is not `Sync`.
#[allow(unsafe_code)]
unsafe impl Sync for SharedMemory {}

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

    /// The whole memory as one mutable slice: the device's arena, or the host's view while
    /// the device is idle.
    ///
    /// The exclusive borrow keeps every other view through this mapping away while the
    /// slice lives. Another mapping of the same file is another matter, settled by the
    /// protocol of [`transport::shared`](super): the device borrows a slice of its mapping
    /// only for one access while it runs a request (its arena keeps this mapping, not a
    /// slice: see [`Memory`]), and the host its mapping only while none is in flight.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is valid for `self.len` bytes while `self` lives, which the
        // borrow guarantees; `&mut self` makes the slice the only view through this
        // mapping while it lives (every other view borrows `self` too). Accesses through
        // other mappings of the same file are kept apart by `transport::shared`'s protocol.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len)
        }
    }

    /// The whole memory, read-only.
    pub(crate) fn whole(&self) -> &[u8] {
        // SAFETY: the mapping is valid for `self.len` bytes while `self` lives, which the
        // returned borrow of `self` guarantees; while it lives nothing writes through this
        // mapping, since every write takes `&mut self` (module doc). Writes through another
        // mapping of the same file are kept apart by `transport::shared`'s protocol.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.len)
        }
    }

    /// The mapping's first byte, valid for [`len`](Self::len) bytes while `self` lives: for
    /// a [`RingMemory`](super::RingMemory), which reaches the bytes only as atomic words and
    /// copies, never through a view (module doc).
    pub(super) fn base(&self) -> NonNull<u8> {
        self.ptr
    }
}

/// A device's arena over this mapping borrows its bytes one access at a time, so no view of
/// them outlives the request that made it (`transport::shared`'s protocol).
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

#[cfg(test)]
mod tests {
    use super::*;

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
        // This test's path as the harness names it: the module path without the crate.
        let module = module_path!().split_once("::").map_or("", |(_, path)| path);
        let name = format!("{module}::a_memory_never_takes_a_standard_stream_number");
        let run = Command::new(std::env::current_exe().unwrap())
            .args([name.as_str(), "--exact", "--test-threads=1"])
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
}
