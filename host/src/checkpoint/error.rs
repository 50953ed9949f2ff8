//! Why a checkpoint could not be saved, read or restored.

use std::fmt;
use std::path::PathBuf;

use tessera_core::dtype::DataType;

use crate::runtime::RuntimeError;

/// A checkpoint failure; each names the file's part at fault.
#[derive(Debug)]
pub enum CheckpointError {
    /// The file could not be read, written or renamed.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a safetensors file, or a truncated one.
    Format(safetensors::SafeTensorError),
    /// A safetensors file that is not a tessera checkpoint, or lacks a metadata entry.
    NotACheckpoint {
        /// The metadata entry missing or malformed.
        entry: &'static str,
    },
    /// A checkpoint of another format version.
    Version {
        /// The file's version.
        file: u32,
        /// The version this code reads.
        supported: u32,
    },
    /// The checksum does not match: the file was altered after it was written.
    Checksum {
        /// The checksum recorded in the file.
        recorded: u32,
        /// The checksum of what the file holds.
        computed: u32,
    },
    /// The checkpoint was made for another program (or another replica count).
    Program {
        /// The file's fingerprint.
        file: u64,
        /// The running program's.
        program: u64,
    },
    /// A tensor that belongs to no variable of the program (or optimizer state for a
    /// program whose optimizer keeps none).
    Unexpected {
        /// The tensor.
        tensor: String,
    },
    /// A variable's tensor is missing.
    Missing {
        /// The tensor.
        tensor: String,
    },
    /// A tensor whose shape or type does not match its variable.
    Shape {
        /// The tensor.
        tensor: String,
        /// The variable's host shape.
        expected: Vec<u32>,
        /// The tensor's shape.
        actual: Vec<u32>,
        /// The tensor's type (the variable's is f32).
        dtype: DataType,
    },
    /// An RNG state of the wrong length.
    RngState {
        /// Words the run has.
        expected: usize,
        /// Words in the file.
        actual: usize,
    },
    /// The runtime failed while the checkpoint was captured or restored.
    Runtime(RuntimeError),
}

impl CheckpointError {
    /// The same error about the optimizer state's tensor of the variable.
    pub(super) fn in_optimizer_state(self) -> Self {
        match self {
            Self::Missing { tensor } => Self::Missing {
                tensor: super::format::velocity_name(&tensor),
            },
            Self::Shape {
                tensor,
                expected,
                actual,
                dtype,
            } => Self::Shape {
                tensor: super::format::velocity_name(&tensor),
                expected,
                actual,
                dtype,
            },
            other => other,
        }
    }
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Self::Format(e) => write!(f, "not a whole safetensors file: {e}"),
            Self::NotACheckpoint { entry } => write!(
                f,
                "not a tessera checkpoint: its metadata entry `{entry}` is missing or malformed"
            ),
            Self::Version { file, supported } => write!(
                f,
                "checkpoint format version {file}; this tessera reads version {supported}"
            ),
            Self::Checksum { recorded, computed } => write!(
                f,
                "the checkpoint was altered: checksum {computed:08x}, recorded {recorded:08x}"
            ),
            Self::Program { file, program } => write!(
                f,
                "the checkpoint is of another program: fingerprint {file:016x}, this run's \
                 {program:016x} (the model, its settings and the replica count must match)"
            ),
            Self::Missing { tensor } => write!(f, "the checkpoint has no tensor `{tensor}`"),
            Self::Unexpected { tensor } => write!(
                f,
                "the checkpoint's tensor `{tensor}` belongs to no variable of this program"
            ),
            Self::Shape {
                tensor,
                expected,
                actual,
                dtype,
            } => write!(
                f,
                "tensor `{tensor}` is {dtype} {actual:?} in the checkpoint; the variable is \
                 float32 {expected:?}"
            ),
            Self::RngState { expected, actual } => write!(
                f,
                "the checkpoint has {actual} words of RNG state; the run has {expected}"
            ),
            Self::Runtime(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Format(e) => Some(e),
            Self::Runtime(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RuntimeError> for CheckpointError {
    fn from(e: RuntimeError) -> Self {
        Self::Runtime(e)
    }
}
