//! Where a channel's bulk bytes pass ([`Window`]): the memory it shares with a child
//! process, or a file QEMU's firmware reads and writes by semihosting.
//!
//! # Rules
//!
//! - **One owner at a time**, as `transport::shared`'s protocol says for a window: the host
//!   writes it only before sending a bulk write and reads it only after the reply to a bulk
//!   read, and keeps at most one bulk request in flight per window.
//! - **Never past its length**: a write that does not fit, or a read of more than the
//!   window holds, is refused (`false`, `None`) — and so is any failure of the file.

use std::fs::File;

use super::SharedMemory;

/// Where a channel's bulk bytes pass: the memory it shares with a child process, or a file
/// QEMU's firmware reads and writes by semihosting. The same ownership protocol holds for
/// both (module rules).
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
