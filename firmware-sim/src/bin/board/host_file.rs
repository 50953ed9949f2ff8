//! A file on the machine running QEMU, through semihosting: the window bulk bytes pass
//! through (one trap moves a whole array, where the UART moves one byte per poll).
//!
//! With `mmio`, one of the board's two modules with `unsafe`: each semihosting call is a
//! `bkpt 0xAB` with its arguments in a block the host reads.

use cortex_m_semihosting::nr;

/// An open file of the host.
pub struct HostFile {
    handle: usize,
    len: usize,
}

/// Issues semihosting call `number` with `args` (a parameter block of words).
fn call(number: usize, args: &[usize]) -> usize {
    // SAFETY: `args` is a live parameter block of the length the call reads; every pointer
    // in it points into a live buffer of the length given beside it (see the callers).
    #[allow(unsafe_code)]
    unsafe {
        cortex_m_semihosting::syscall1(number, args.as_ptr() as usize)
    }
}

impl HostFile {
    /// Opens `path` (NUL-terminated, relative to QEMU's working folder) for reading and
    /// writing, if it exists; its length is the window's size.
    pub fn open(path: &str) -> Option<Self> {
        let name = path.strip_suffix('\0')?;
        let handle = call(
            nr::OPEN,
            &[path.as_ptr() as usize, nr::open::RW_BINARY, name.len()],
        );
        if handle == usize::MAX {
            return None;
        }
        let len = call(nr::FLEN, &[handle]);
        (len != usize::MAX).then_some(Self { handle, len })
    }

    /// The file's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Reads the first `into.len()` bytes of the file into `into`; `false` on a short read.
    pub fn read_start(&mut self, into: &mut [u8]) -> bool {
        if into.len() > self.len || call(nr::SEEK, &[self.handle, 0]) != 0 {
            return false;
        }
        // SYS_READ answers with the number of bytes it did NOT read.
        call(
            nr::READ,
            &[self.handle, into.as_mut_ptr() as usize, into.len()],
        ) == 0
    }

    /// Writes `data` at the start of the file; `false` on a short write.
    pub fn write_start(&mut self, data: &[u8]) -> bool {
        if data.len() > self.len || call(nr::SEEK, &[self.handle, 0]) != 0 {
            return false;
        }
        // SYS_WRITE answers with the number of bytes it did NOT write.
        call(
            nr::WRITE,
            &[self.handle, data.as_ptr() as usize, data.len()],
        ) == 0
    }
}
