//! Why a checkpoint could not be saved, read or restored.

use std::path::PathBuf;

use tessera_core::dtype::DataType;

use crate::atomic::ReplaceError;
use crate::input::InputError;
use crate::runtime::RuntimeError;

/// A checkpoint failure; each names the file's part at fault.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file to read is not a regular file, or could not be read.
    #[error("{0}")]
    Input(#[source] InputError),
    /// The file could not be saved.
    #[error("{0}")]
    Save(#[source] ReplaceError),
    /// The header claims more bytes for one of its parts than the file holds (or than a
    /// header may have): nothing of the claimed size was allocated.
    #[error(
        "{}: the header claims {claimed} bytes for {field}; the file has {actual}",
        .path.display()
    )]
    Claim {
        /// The file.
        path: PathBuf,
        /// The part (`header length`, `tensor data`, a tensor's name).
        field: String,
        /// Bytes claimed.
        claimed: u64,
        /// Bytes there are (or allowed).
        actual: u64,
    },
    /// A tensor dimension too large for a tessera shape (32 bits).
    #[error(
        "tensor `{tensor}` has a dimension of {dimension}; a dimension is at most {}",
        u32::MAX
    )]
    Dimension {
        /// The tensor.
        tensor: String,
        /// The dimension.
        dimension: u64,
    },
    /// A metadata value that no run writes (checksummed, so sealed on purpose or by a bug).
    #[error("the checkpoint's metadata entry `{entry}` is {value}, which no run writes: {rule}")]
    Impossible {
        /// The metadata entry.
        entry: &'static str,
        /// Its value.
        value: String,
        /// The rule it breaks.
        rule: String,
    },
    /// Not a safetensors file, or a truncated one.
    #[error("not a whole safetensors file: {0}")]
    Format(#[source] safetensors::SafeTensorError),
    /// A safetensors file that is not a tessera checkpoint, or lacks a metadata entry.
    #[error("not a tessera checkpoint: its metadata entry `{entry}` is missing or malformed")]
    NotACheckpoint {
        /// The metadata entry missing or malformed.
        entry: &'static str,
    },
    /// A checkpoint of another format version.
    #[error("checkpoint format version {file}; this tessera reads version {supported}")]
    Version {
        /// The file's version.
        file: u32,
        /// The version this code reads.
        supported: u32,
    },
    /// The checksum does not match: the file was altered after it was written.
    #[error("the checkpoint was altered: checksum {computed:08x}, recorded {recorded:08x}")]
    Checksum {
        /// The checksum recorded in the file.
        recorded: u32,
        /// The checksum of what the file holds.
        computed: u32,
    },
    /// The checkpoint was made for another program (or another replica count).
    #[error(
        "the checkpoint is of another program: fingerprint {file:016x}, this run's \
         {program:016x} (the model, its settings and the replica count must match)"
    )]
    Program {
        /// The file's fingerprint.
        file: u64,
        /// The running program's.
        program: u64,
    },
    /// A tensor that belongs to no variable of the program (or optimizer state for a
    /// program whose optimizer keeps none).
    #[error("the checkpoint's tensor `{tensor}` belongs to no variable of this program")]
    Unexpected {
        /// The tensor.
        tensor: String,
    },
    /// A variable's tensor is missing.
    #[error("the checkpoint has no tensor `{tensor}`")]
    Missing {
        /// The tensor.
        tensor: String,
    },
    /// A tensor whose shape or type does not match its variable.
    #[error(
        "tensor `{tensor}` is {dtype} {actual:?} in the checkpoint; the variable is float32 \
         {expected:?}"
    )]
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
    /// A tensor holding a value no run can train from: NaN, an infinity or a magnitude of
    /// 2^64 or more (core's `finite` rule). A run that wrote one had already failed.
    #[error(
        "tensor `{tensor}` holds {value} at {index:?}: a run trains only from values finite and \
         of magnitude below 2^64 (1.8e19); nothing was loaded"
    )]
    BadValue {
        /// The tensor, as the file names it.
        tensor: String,
        /// The first such value's index in the tensor's shape.
        index: Vec<usize>,
        /// The value.
        value: f32,
    },
    /// An RNG state of the wrong length.
    #[error("the checkpoint has {actual} words of RNG state; the run has {expected}")]
    RngState {
        /// Words the run has.
        expected: usize,
        /// Words in the file.
        actual: usize,
    },
    /// The program's fingerprint cannot be computed: its wire encoding failed.
    #[error("the program's fingerprint cannot be computed: encoding the program failed: {0}")]
    Fingerprint(#[source] postcard::Error),
    /// The runtime failed while the checkpoint was captured or restored.
    #[error("{0}")]
    Runtime(#[from] RuntimeError),
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
            Self::BadValue {
                tensor,
                index,
                value,
            } => Self::BadValue {
                tensor: super::format::velocity_name(&tensor),
                index,
                value,
            },
            other => other,
        }
    }
}
