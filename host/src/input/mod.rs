//! Opening a file the user names (`tessera inspect`, `--data`, `--executable`, `--resume`)
//! without trusting it: only a regular file is read, and never past the size it has.
//!
//! # Rules
//!
//! - **Looked at before it is opened.** The path's metadata (symlinks followed: a link to a
//!   regular file is that file) must say "regular file". A directory, a FIFO, a socket or a
//!   device is refused by name before `open` is called: opening some devices has effects
//!   of its own, and reading `/dev/zero` would fill memory.
//! - **Opened without blocking.** The file is opened with `O_NONBLOCK`, and the opened
//!   descriptor's own metadata is checked again: a path swapped for a FIFO between the look
//!   and the open neither hangs the open nor gets read. (On a regular file `O_NONBLOCK`
//!   changes nothing.)
//! - **Bounded by the size found.** The size is the opened file's; nothing reads past it,
//!   and a caller's limit refuses a larger file before anything is allocated. A file that
//!   shrinks while it is read is an error naming both sizes, never a short read taken as
//!   the whole.
//!
//! - **Read by ranges.** A reader takes the bytes it needs where they lie
//!   ([`Input::read_exact_at`]), never more than the file has: a large file is never held
//!   whole to use a part of it.
//!
//! Every reader of a file the user names goes through here: the command line's `--data`,
//! `--executable` and `--resume`, `tessera inspect`, checkpoints, executables, the
//! firmware's ELF header and the session's safetensors loader (whose header, and the
//! checkpoint's, [`safetensors`] reads).
//!
//! Nothing here panics.

pub mod safetensors;

use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a file named for reading was refused.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be looked at, opened or read.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The path names something other than a regular file.
    #[error(
        "{} is {kind}, not a regular file (only regular files are read)",
        .path.display()
    )]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is instead ("a directory", "a FIFO", ...).
        kind: &'static str,
    },
    /// The file is larger than its reader accepts.
    #[error("{} is {size} bytes; a {what} is at most {limit} bytes", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
        /// The most its reader accepts.
        limit: u64,
        /// What the file was read as.
        what: &'static str,
    },
    /// A read that would go past the file's end: a size the file claims that it does not
    /// hold.
    #[error(
        "{}: {count} bytes at {at} lie past the end of the file ({size} bytes)",
        .path.display()
    )]
    PastEnd {
        /// The file.
        path: PathBuf,
        /// Where the read would start.
        at: u64,
        /// Bytes it would read.
        count: u64,
        /// The file's size.
        size: u64,
    },
    /// The file shrank while it was read (another process truncated it).
    #[error(
        "{} shrank while it was read: {size} bytes when opened, {read} there",
        .path.display()
    )]
    Shrunk {
        /// The file.
        path: PathBuf,
        /// Its size when opened.
        size: u64,
        /// Bytes there were.
        read: u64,
    },
}

/// What a file's metadata says it is, when it is not a regular file.
pub(crate) fn irregular_kind(meta: &Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_symlink() {
        Some("a symbolic link")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else {
        Some("not a file")
    }
}

/// A regular file opened for reading, and its size when opened.
#[derive(Debug)]
pub struct Input {
    file: File,
    path: PathBuf,
    len: u64,
}

impl Input {
    /// Opens `path` under the module's rules.
    pub fn open(path: &Path) -> Result<Self, InputError> {
        let io = |source| InputError::Io {
            path: path.to_owned(),
            source,
        };
        let refuse = |meta: &Metadata| match irregular_kind(meta) {
            Some(kind) => Err(InputError::NotRegular {
                path: path.to_owned(),
                kind,
            }),
            None => Ok(()),
        };
        refuse(&std::fs::metadata(path).map_err(io)?)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
            .map_err(io)?;
        // What was opened, not what the path named a moment ago.
        let meta = file.metadata().map_err(io)?;
        refuse(&meta)?;
        Ok(Self {
            file,
            path: path.to_owned(),
            len: meta.len(),
        })
    }

    /// The file's size when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the file was empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The path it was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Refuses the file when it is larger than `limit` bytes (`what` names what it is read
    /// as).
    pub fn at_most(self, limit: u64, what: &'static str) -> Result<Self, InputError> {
        if self.len > limit {
            return Err(InputError::TooLarge {
                path: self.path,
                size: self.len,
                limit,
                what,
            });
        }
        Ok(self)
    }

    /// Reads exactly `buf.len()` bytes at the current position; a file that ends first
    /// shrank since it was opened (callers never ask past [`len`](Self::len)).
    pub fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), InputError> {
        self.file
            .read_exact(buf)
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::UnexpectedEof => self.shrunk(),
                _ => InputError::Io {
                    path: self.path.clone(),
                    source,
                },
            })
    }

    /// Moves to byte `pos` (callers never move past [`len`](Self::len)).
    pub fn seek(&mut self, pos: u64) -> Result<(), InputError> {
        use std::io::Seek;
        self.file
            .seek(std::io::SeekFrom::Start(pos))
            .map(drop)
            .map_err(|source| InputError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// Reads exactly `buf.len()` bytes at byte `at`, leaving the position alone; a read past
    /// [`len`](Self::len) is refused before it is tried ([`InputError::PastEnd`]), and a
    /// file that ends first shrank since it was opened.
    pub fn read_exact_at(&self, buf: &mut [u8], at: u64) -> Result<(), InputError> {
        let count = buf.len() as u64;
        if at.checked_add(count).is_none_or(|end| end > self.len) {
            return Err(InputError::PastEnd {
                path: self.path.clone(),
                at,
                count,
                size: self.len,
            });
        }
        self.file
            .read_exact_at(buf, at)
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::UnexpectedEof => self.shrunk(),
                _ => InputError::Io {
                    path: self.path.clone(),
                    source,
                },
            })
    }

    /// Appends the next `count` bytes to `out`, reading into its spare capacity (no pass
    /// zeroing it first); `count` must have been checked against [`len`](Self::len).
    pub fn read_into(&mut self, count: u64, out: &mut Vec<u8>) -> Result<(), InputError> {
        let before = out.len();
        (&mut self.file)
            .take(count)
            .read_to_end(out)
            .map_err(|source| InputError::Io {
                path: self.path.clone(),
                source,
            })?;
        if (out.len() - before) as u64 != count {
            return Err(self.shrunk());
        }
        Ok(())
    }

    /// The whole file, read once its size is known (no growth past it).
    pub fn read_all(mut self) -> Result<Vec<u8>, InputError> {
        // The size is the file's own: what the allocation is capped by.
        let mut out = Vec::new();
        out.try_reserve_exact(usize::try_from(self.len).unwrap_or(usize::MAX))
            .map_err(|_| InputError::TooLarge {
                path: self.path.clone(),
                size: self.len,
                limit: isize::MAX as u64,
                what: "file held in memory",
            })?;
        let len = self.len;
        self.read_into(len, &mut out)?;
        Ok(out)
    }

    fn shrunk(&self) -> InputError {
        let read = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        InputError::Shrunk {
            path: self.path.clone(),
            size: self.len,
            read,
        }
    }
}
