//! A file on the machine running QEMU, through semihosting: the window bulk bytes pass
//! through (one trap moves a whole array, where the UART moves one byte per poll).
//!
//! The same on every board: each semihosting call is the board's trap (`bkpt 0xAB` on the
//! Arm boards, the marked `ebreak` on RISC-V) with its arguments in a block the host reads,
//! and the operations and blocks are the Arm semihosting specification's on both. One of
//! the modules with `unsafe`: `call` is `unsafe` to use (the block's addresses must be live
//! buffers); each method builds its block from the slices and handle it holds, and its
//! SAFETY note argues from those alone.

use super::semihosting::{nr, syscall1, Number};

/// An open file of the host.
pub struct HostFile {
    handle: usize,
    len: usize,
}

/// Issues semihosting call `number` with `args` (a parameter block of words).
///
/// # Safety
///
/// `args` must be the parameter block `number` reads, and every address in it must be that
/// of a live buffer of the length given beside it, readable (and writable, for a buffer the
/// call fills) for the whole call. Each caller below passes such a block, built from the
/// slices and handle it was given.
#[allow(unsafe_code)]
unsafe fn call(number: Number, args: &[usize]) -> usize {
    // SAFETY: `args` is a live block of words for the length of the call; the addresses
    // in it are valid by this function's contract.
    unsafe { syscall1(number, args.as_ptr() as usize) }
}

impl HostFile {
    /// Opens `path` (NUL-terminated, relative to QEMU's working folder) for reading and
    /// writing, if it exists; its length is the window's size.
    pub fn open(path: &str) -> Option<Self> {
        let name = path.strip_suffix('\0')?;
        // SAFETY: SYS_OPEN reads a name (`name.len()` bytes at `path`, a live `&str`
        // followed by the NUL it was stripped of), a mode and the name's length.
        #[allow(unsafe_code)]
        let handle = unsafe {
            call(
                nr::OPEN,
                &[path.as_ptr() as usize, nr::open::RW_BINARY, name.len()],
            )
        };
        if handle == usize::MAX {
            return None;
        }
        // SAFETY: SYS_FLEN reads one word, a handle, and no memory of ours.
        #[allow(unsafe_code)]
        let len = unsafe { call(nr::FLEN, &[handle]) };
        (len != usize::MAX).then_some(Self { handle, len })
    }

    /// The file's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Moves the file's position to its start; `false` if the host refuses.
    fn rewind(&mut self) -> bool {
        // SAFETY: SYS_SEEK reads a handle and a position, and no memory of ours.
        #[allow(unsafe_code)]
        let done = unsafe { call(nr::SEEK, &[self.handle, 0]) };
        done == 0
    }

    /// Reads the first `into.len()` bytes of the file into `into`; `false` on a short read.
    pub fn read_start(&mut self, into: &mut [u8]) -> bool {
        if into.len() > self.len || !self.rewind() {
            return false;
        }
        // SAFETY: SYS_READ writes at most `into.len()` bytes at `into`, exclusively
        // borrowed for the call.
        #[allow(unsafe_code)]
        let left = unsafe {
            call(
                nr::READ,
                &[self.handle, into.as_mut_ptr() as usize, into.len()],
            )
        };
        // SYS_READ answers with the number of bytes it did NOT read.
        left == 0
    }

    /// Writes `data` at the start of the file; `false` on a short write.
    pub fn write_start(&mut self, data: &[u8]) -> bool {
        if data.len() > self.len || !self.rewind() {
            return false;
        }
        // SAFETY: SYS_WRITE reads `data.len()` bytes at `data`, borrowed for the call.
        #[allow(unsafe_code)]
        let left = unsafe {
            call(
                nr::WRITE,
                &[self.handle, data.as_ptr() as usize, data.len()],
            )
        };
        // SYS_WRITE answers with the number of bytes it did NOT write.
        left == 0
    }
}
