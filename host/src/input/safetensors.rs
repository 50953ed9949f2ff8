//! The header of a safetensors file, read under the input rules: what a checkpoint and the
//! session's loader learn of a file before they read any tensor byte.
//!
//! # Rules
//!
//! - **Every claim against the file before it is allocated.** The header's length against
//!   the bytes after its 8-byte prefix (and safetensors' own limit, [`MAX_HEADER`]); each
//!   tensor's range against the data there is. A claim that does not fit is
//!   [`HeaderError::Claim`], naming the part, the size claimed and the size there is, and
//!   nothing of the claimed size is allocated.
//! - **The safetensors crate's checks of a whole file**, on the header alone: ranges that
//!   follow each other from 0, each as long as its type and shape make it, the last ending
//!   where the file does (bytes past the last tensor are [`HeaderError::Format`]).
//! - **Only the header is read.** The tensors stay in the file, at the offsets
//!   [`Header::start_of`] gives, for the reader to take by ranges.
//!
//! Nothing here panics.

use std::path::PathBuf;

use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::SafeTensorError;

use super::{Input, InputError};

/// The largest header read (safetensors' own limit).
pub const MAX_HEADER: u64 = 100_000_000;

/// Why a safetensors header was refused.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// The file was refused or could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A size the header claims is larger than what the file holds.
    #[error("{}: the header claims {claimed} bytes for {part}; the file has {actual}", path.display())]
    Claim {
        /// The file.
        path: PathBuf,
        /// The part (`the header`, `tensor `name``).
        part: String,
        /// Bytes claimed.
        claimed: u64,
        /// Bytes there are.
        actual: u64,
    },
    /// Not a well-formed safetensors header.
    #[error("{}: not a safetensors file: {source}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What the parser found.
        source: SafeTensorError,
    },
}

/// A checked safetensors header.
#[derive(Debug)]
pub struct Header {
    /// The tensors and the metadata, checked as the module says.
    pub metadata: Metadata,
    /// Where the tensor data start in the file.
    pub data_start: u64,
}

impl Header {
    /// Reads and checks the header of `input` (module rules), from the file's start.
    pub fn read(input: &Input) -> Result<Self, HeaderError> {
        let path = || input.path().to_path_buf();
        let format = |source| HeaderError::Format {
            path: path(),
            source,
        };
        let len = input.len();
        if len < 8 {
            return Err(format(SafeTensorError::HeaderTooSmall));
        }
        let mut prefix = [0u8; 8];
        input.read_exact_at(&mut prefix, 0)?;
        let n = u64::from_le_bytes(prefix);
        if n > len - 8 {
            return Err(HeaderError::Claim {
                path: path(),
                part: "the header".into(),
                claimed: n,
                actual: len - 8,
            });
        }
        if n > MAX_HEADER {
            return Err(format(SafeTensorError::HeaderTooLarge));
        }
        // At most the file's size and safetensors' limit (both checked above).
        let mut json = vec![0u8; n as usize];
        input.read_exact_at(&mut json, 8)?;
        // Deserializing checks that the ranges follow each other from 0 and fit their
        // shapes (the crate's own validation).
        let metadata: Metadata = serde_json::from_slice(&json)
            .map_err(|e| format(SafeTensorError::InvalidHeaderDeserialization(e)))?;
        let data_start = 8 + n;
        let available = len - data_start;
        for name in metadata.offset_keys() {
            let Some(info) = metadata.info(&name) else {
                continue;
            };
            let (start, end) = (info.data_offsets.0 as u64, info.data_offsets.1 as u64);
            if end > available {
                return Err(HeaderError::Claim {
                    path: path(),
                    part: format!("tensor `{name}`"),
                    claimed: end - start,
                    actual: available.saturating_sub(start),
                });
            }
        }
        if metadata.data_len() as u64 != available {
            // Bytes beyond the last tensor: not a whole safetensors file.
            return Err(format(SafeTensorError::MetadataIncompleteBuffer));
        }
        Ok(Self {
            metadata,
            data_start,
        })
    }

    /// Where `info`'s data start in the file.
    pub fn start_of(&self, info: &TensorInfo) -> u64 {
        self.data_start + info.data_offsets.0 as u64
    }

    /// Every tensor with its name, sorted by name.
    pub fn by_name(&self) -> Vec<(String, &TensorInfo)> {
        let mut tensors: Vec<_> = self.metadata.tensors().into_iter().collect();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        tensors
    }
}
