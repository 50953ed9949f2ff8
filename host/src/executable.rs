//! Saved executables (PopART's popef): a prepared program and what it was prepared for, in
//! one checked file that loads without preparing again.
//!
//! # File
//!
//! `MAGIC` (8 bytes) ‖ version (`u16`, little-endian) ‖ body length (`u32`) ‖ body ‖
//! CRC-32 (ISO-HDLC) of everything before it. The body is the postcard encoding of
//! [`Executable`]: the program — streams, anchors, data flow, variables with their
//! settings and shard layouts, explicit intervals included — the replica count, and the
//! limits (memory, largest frame, window) of the devices it was prepared on.
//!
//! # Contract
//!
//! - [`Executable::load`] refuses a file of another kind (magic), of another version, with
//!   a checksum that does not match (truncated or altered), or whose body does not decode.
//! - [`Runtime::load_executable`](crate::runtime::Runtime::load_executable) checks the
//!   saved program with core's rules (a file may hold a hand-built program: the error
//!   names the rule it breaks), starts the devices, refuses them when their limits differ
//!   from the saved ones, and places the saved program as it is: the job's model building
//!   is skipped.
//! - [`Executable::load`] reads only a regular file of at most [`MAX_BYTES`]
//!   ([`crate::input`]): the length field cannot make it allocate more.
//! - Saving is atomic, as for checkpoints, and replaces only a regular file
//!   ([`crate::atomic`]).

use std::path::Path;

use serde::{Deserialize, Serialize};
use tessera_core::program::Program;
use tessera_core::wire::Limits;

use crate::atomic::ReplaceError;
use crate::input::{Input, InputError};

/// The first bytes of every executable.
pub const MAGIC: [u8; 8] = *b"TSRAEXE\0";
/// The version this code writes and reads (2: programs carry their micro-batch size).
pub const VERSION: u16 = 2;

/// The largest executable read: a program's capacities are fixed, and its encoding is far
/// smaller than this.
pub const MAX_BYTES: u64 = 16 << 20;

const CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
/// Magic, version and length.
const HEADER: usize = 8 + 2 + 4;

/// A program prepared for its devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Executable {
    /// The program.
    pub program: Program,
    /// Replicas it was prepared for.
    pub replicas: u32,
    /// The limits of the devices it was prepared on (replica 0's; all replicas of a
    /// placement announce the same).
    pub limits: Limits,
}

/// Why an executable could not be saved or loaded.
#[derive(Debug, thiserror::Error)]
pub enum ExecutableError {
    /// The file to read is not a regular file, is too large, or could not be read.
    #[error("{0}")]
    Input(#[source] InputError),
    /// The file could not be saved.
    #[error("{0}")]
    Save(#[source] ReplaceError),
    /// The file does not start with [`MAGIC`].
    #[error("not a tessera executable (wrong magic bytes)")]
    NotAnExecutable,
    /// Another version of the format.
    #[error("executable format version {file}; this tessera reads version {supported}")]
    Version {
        /// The file's.
        file: u16,
        /// The one this code reads.
        supported: u16,
    },
    /// The checksum does not match: the file was truncated or altered.
    #[error(
        "the executable is truncated or altered: checksum {computed:08x}, recorded \
         {recorded:08x}"
    )]
    Checksum {
        /// Recorded in the file (0 when the file is too short to hold one).
        recorded: u32,
        /// Of what the file holds.
        computed: u32,
    },
    /// The body does not decode.
    #[error("the executable's program does not decode: {0}")]
    Body(#[source] postcard::Error),
}

impl Executable {
    /// The file's bytes.
    pub fn encode(&self) -> Result<Vec<u8>, ExecutableError> {
        let body = postcard::to_allocvec(self).map_err(ExecutableError::Body)?;
        let len = u32::try_from(body.len())
            .map_err(|_| ExecutableError::Body(postcard::Error::SerializeBufferFull))?;
        let mut out = Vec::with_capacity(HEADER + body.len() + 4);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&body);
        let crc = CRC32.checksum(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// An executable from the file's bytes (see the module's contract).
    pub fn decode(bytes: &[u8]) -> Result<Self, ExecutableError> {
        if bytes.get(..8) != Some(&MAGIC[..]) {
            return Err(ExecutableError::NotAnExecutable);
        }
        if bytes.len() < HEADER + 4 {
            // Too short to hold a version, a length and a checksum: truncated.
            return Err(ExecutableError::Checksum {
                recorded: 0,
                computed: CRC32.checksum(bytes),
            });
        }
        let version = bytes
            .get(8..10)
            .map_or(0, |v| u16::from_le_bytes([v[0], v[1]]));
        if version != VERSION {
            return Err(ExecutableError::Version {
                file: version,
                supported: VERSION,
            });
        }
        let (covered, recorded) = match bytes.len().checked_sub(4) {
            Some(end) if end >= HEADER => {
                let r = &bytes[end..];
                (&bytes[..end], u32::from_le_bytes([r[0], r[1], r[2], r[3]]))
            }
            _ => (bytes, 0),
        };
        let computed = CRC32.checksum(covered);
        let len = covered
            .get(10..14)
            .map(|l| u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize);
        if computed != recorded || len != Some(covered.len().saturating_sub(HEADER)) {
            return Err(ExecutableError::Checksum { recorded, computed });
        }
        postcard::from_bytes(&covered[HEADER..]).map_err(ExecutableError::Body)
    }

    /// Writes the executable to `path`, atomically.
    pub fn save(&self, path: &Path) -> Result<(), ExecutableError> {
        crate::atomic::write_atomically(path, &self.encode()?).map_err(ExecutableError::Save)
    }

    /// Reads the executable in `path` (see the module's contract).
    pub fn load(path: &Path) -> Result<Self, ExecutableError> {
        let bytes = Input::open(path)
            .and_then(|input| input.at_most(MAX_BYTES, "tessera executable"))
            .and_then(Input::read_all)
            .map_err(ExecutableError::Input)?;
        Self::decode(&bytes)
    }
}
