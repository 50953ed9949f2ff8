//! Why a load failed: one case per rule, naming the file, the tensor, the shapes and the
//! rule.

use std::path::PathBuf;

use safetensors::{Dtype, SafeTensorError};
use tessera_core::dtype::DataType;

use super::ShardRule;
use crate::array::ArrayError;
use crate::input::InputError;
use crate::session::SessionError;

/// Why a load failed. See the module documentation.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("cannot read {}: {source}", .file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file was refused (not a regular file) or could not be read.
    #[error("cannot load {0}")]
    Input(#[from] InputError),
    /// The header claims more bytes than the file holds.
    #[error(
        "{}: the header claims {claimed} bytes for {part}; the file has {actual}",
        .file.display()
    )]
    Claim {
        /// The file.
        file: PathBuf,
        /// The part (`the header`, a tensor).
        part: String,
        /// Bytes claimed.
        claimed: u64,
        /// Bytes there are.
        actual: u64,
    },
    /// The tensors could not be read from the file into the workers' registers (the
    /// load's registers were freed).
    #[error("{}: reading the tensors into the workers: {source}", .file.display())]
    Fill {
        /// The file.
        file: PathBuf,
        /// Why: the file refused a read, a worker failed, a rank failed its part (boxed: the
        /// rare path).
        source: Box<crate::transport::group::GroupError>,
    },
    /// Not a well-formed safetensors file: truncated, a corrupt header, offsets that do not
    /// cover the data.
    #[error("{} is not a valid safetensors file: {source}", .file.display())]
    Format {
        /// The file.
        file: PathBuf,
        /// What the parser found.
        source: SafeTensorError,
    },
    /// An element type tessera has no [`DataType`] for.
    #[error(
        "{}: tensor {tensor:?} is {dtype}, which tessera has no element type for",
        .file.display()
    )]
    Dtype {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its type in the file.
        dtype: Dtype,
    },
    /// A rule names a tensor the file does not hold.
    #[error(
        "{}: a rule ({rule}) names tensor {tensor:?}, which the file does not hold",
        .file.display()
    )]
    UnknownTensor {
        /// The file.
        file: PathBuf,
        /// The name the rule gives.
        tensor: String,
        /// The rule.
        rule: ShardRule,
    },
    /// A split on a dimension the tensor does not have.
    #[error(
        "{}: tensor {tensor:?} of shape {shape:?} cannot be {rule}: it has {} dimensions",
        .file.display(),
        .shape.len()
    )]
    NoDim {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The rule.
        rule: ShardRule,
    },
    /// A split whose dimension is not a multiple of the workers it spans.
    #[error(
        "{}: tensor {tensor:?} of shape {shape:?} cannot be {rule} across {workers} workers: the \
         dimension does not divide into {workers} equal parts",
        .file.display()
    )]
    Indivisible {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The rule.
        rule: ShardRule,
        /// The workers the split spans (all of them, or a group's).
        workers: usize,
    },
    /// A shape a register cannot hold (too many dimensions, one over `u32::MAX`, a byte
    /// size that overflows) or bytes that do not match it.
    #[error(
        "{}: tensor {tensor:?} of shape {shape:?} does not fit a register: {source}",
        .file.display()
    )]
    Shape {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its shape.
        shape: Vec<usize>,
        /// Why.
        source: ArrayError,
    },
    /// [`load_presharded`](crate::session::Session::load_presharded) takes exactly one
    /// file per worker.
    #[error("presharded loading takes one file per worker: {files} files for {workers} workers")]
    FileCount {
        /// Files given.
        files: usize,
        /// Workers in the session.
        workers: usize,
    },
    /// Presharded files that do not hold the same tensor names.
    #[error(
        "{} (worker {worker}) has no tensor {tensor:?}, which {} holds: presharded files must \
         hold the same tensors",
        .file.display(),
        .other.display()
    )]
    ShardMissing {
        /// The file without the tensor.
        file: PathBuf,
        /// Its worker.
        worker: usize,
        /// The tensor.
        tensor: String,
        /// The other file, which holds it.
        other: PathBuf,
    },
    /// A presharded tensor whose type or shape differs from worker 0's.
    #[error(
        "{} (worker {worker}): tensor {tensor:?} is {} of shape {:?}, worker 0's is {} of shape \
         {:?}: presharded parts must be equal",
        .file.display(),
        .found.0,
        .found.1,
        .expected.0,
        .expected.1
    )]
    ShardMismatch {
        /// The file.
        file: PathBuf,
        /// Its worker.
        worker: usize,
        /// The tensor.
        tensor: String,
        /// Its type and shape in this file.
        found: (DataType, Vec<usize>),
        /// Its type and shape in worker 0's file.
        expected: (DataType, Vec<usize>),
    },
    /// Writing a tensor failed on a worker; the load's registers were freed.
    #[error("{}: loading tensor {tensor:?} failed: {source}", .file.display())]
    Worker {
        /// The file the tensor came from.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// The failure, naming the worker and the command (boxed: a session error is large
        /// and this is the rare path).
        source: Box<SessionError>,
    },
    /// The session could not take the load (shut down, every register id in use, a broken
    /// link, or an earlier command that failed and is reported here first).
    #[error("cannot load {}: {source}", .file.display())]
    Session {
        /// The file being loaded.
        file: PathBuf,
        /// Why.
        source: SessionError,
    },
}
