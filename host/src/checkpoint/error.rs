//! Why a checkpoint could not be saved, read or restored.

use std::fmt;
use std::path::PathBuf;

use tessera_core::dtype::DataType;

use crate::atomic::ReplaceError;
use crate::input::InputError;
use crate::runtime::RuntimeError;

/// A checkpoint failure; each names the file's part at fault.
#[derive(Debug)]
pub enum CheckpointError {
    /// The file to read is not a regular file, or could not be read.
    Input(InputError),
    /// The file could not be saved.
    Save(ReplaceError),
    /// The header claims more bytes for one of its parts than the file holds (or than a
    /// header may have): nothing of the claimed size was allocated.
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
    Dimension {
        /// The tensor.
        tensor: String,
        /// The dimension.
        dimension: u64,
    },
    /// A metadata value that no run writes (checksummed, so sealed on purpose or by a bug).
    Impossible {
        /// The metadata entry.
        entry: &'static str,
        /// Its value.
        value: String,
        /// The rule it breaks.
        rule: String,
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
    /// A tensor holding a value no run can train from: NaN, an infinity or a magnitude of
    /// 2^64 or more (core's `finite` rule). A run that wrote one had already failed.
    BadValue {
        /// The tensor, as the file names it.
        tensor: String,
        /// The first such value's index in the tensor's shape.
        index: Vec<usize>,
        /// The value.
        value: f32,
    },
    /// An RNG state of the wrong length.
    RngState {
        /// Words the run has.
        expected: usize,
        /// Words in the file.
        actual: usize,
    },
    /// The program's fingerprint cannot be computed: its wire encoding failed.
    Fingerprint(postcard::Error),
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

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Input(e) => e.fmt(f),
            Self::Save(e) => e.fmt(f),
            Self::BadValue {
                tensor,
                index,
                value,
            } => write!(
                f,
                "tensor `{tensor}` holds {value} at {index:?}: a run trains only from values \
                 finite and of magnitude below 2^64 (1.8e19); nothing was loaded"
            ),
            Self::Claim {
                path,
                field,
                claimed,
                actual,
            } => write!(
                f,
                "{}: the header claims {claimed} bytes for {field}; the file has {actual}",
                path.display()
            ),
            Self::Dimension { tensor, dimension } => write!(
                f,
                "tensor `{tensor}` has a dimension of {dimension}; a dimension is at most {}",
                u32::MAX
            ),
            Self::Impossible { entry, value, rule } => write!(
                f,
                "the checkpoint's metadata entry `{entry}` is {value}, which no run writes: \
                 {rule}"
            ),
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
            Self::Fingerprint(e) => write!(
                f,
                "the program's fingerprint cannot be computed: encoding the program failed: {e}"
            ),
            Self::Runtime(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Input(e) => Some(e),
            Self::Save(e) => Some(e),
            Self::Format(e) => Some(e),
            Self::Fingerprint(e) => Some(e),
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
