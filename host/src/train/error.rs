//! Why a training job cannot run, or failed: one enum for what is found before any device
//! starts ([`JobError`]), one for a run ([`TrainError`]).

use std::fmt;

use tessera_core::grouping::{CommGroup, GroupingError};
use tessera_core::program::{CapacityError, ProgramError};

use super::{
    DataError, MAX_LEARNING_RATE, MAX_MICRO_BATCHES_PER_REPLICA, MAX_STEP_BYTES, MAX_TOLERANCE,
};
use crate::atomic::ReplaceError;
use crate::checkpoint::{CheckpointError, DataRecord};
use crate::executable::ExecutableError;
use crate::runtime::RuntimeError;

/// Why a job cannot run; found before any device starts.
#[derive(Debug)]
pub enum JobError {
    /// A whole-number setting outside its range.
    Count {
        /// The command-line argument that sets it.
        argument: &'static str,
        /// The value given.
        value: usize,
        /// The smallest allowed value.
        min: usize,
        /// The largest allowed value.
        max: usize,
    },
    /// The learning rate is not finite, not positive or above [`MAX_LEARNING_RATE`].
    LearningRate(f32),
    /// The momentum is not in `[0, 1)`.
    Momentum(f32),
    /// The dropout probability is not in `[0, 1)`.
    Dropout(f32),
    /// The tolerance is not finite or not in `[0, MAX_TOLERANCE]`.
    Tolerance(f64),
    /// A comm group does not fit the replicas.
    Grouping {
        /// The argument that sets it.
        argument: &'static str,
        /// The comm group asked for.
        comm: CommGroup,
        /// Number of replicas.
        replicas: usize,
        /// The rule it breaks.
        error: GroupingError,
    },
    /// More micro-batches per replica per step than a device FIFO holds.
    MicroBatches {
        /// Batches per step.
        batches_per_step: usize,
        /// Micro-batches per batch.
        accumulation: usize,
    },
    /// One step's arrays are larger than [`MAX_STEP_BYTES`].
    StepTooLarge {
        /// Bytes one step's inputs and labels need (saturated).
        bytes: u128,
    },
    /// The data file cannot be used.
    Data(DataError),
    /// The program outgrows a capacity (too many anchors).
    Capacity(CapacityError),
    /// The program the job makes breaks core's rules (an anchor period that does not
    /// divide the batches per step, a shard layout that does not build).
    Program(ProgramError),
    /// The checkpoint to resume from cannot be used.
    Checkpoint(CheckpointError),
    /// The executable to run cannot be used.
    Executable(ExecutableError),
    /// A file to write (`--checkpoint`, `--save-executable`) could not be: its directory is
    /// missing or not writable, or the path is not a regular file.
    Destination {
        /// The argument naming it.
        argument: &'static str,
        /// Why.
        error: ReplaceError,
    },
    /// The checkpoint to resume from records no data (captured outside `tessera train`, or
    /// written before checkpoints recorded it): the data given cannot be checked.
    ResumeNoData,
    /// The data given is not the data the checkpoint was trained on.
    ResumeData {
        /// What the checkpoint recorded.
        checkpoint: DataRecord,
        /// What the job's data is.
        data: DataRecord,
    },
    /// The checkpoint's step and the steps to train add up past
    /// [`MAX_STEP`](crate::checkpoint::MAX_STEP) (or past what this host counts).
    ResumeSteps {
        /// The checkpoint's step.
        step: u64,
        /// Steps to train.
        steps: usize,
    },
    /// The executable's program does not fit the data.
    ExecutableData {
        /// What differs.
        what: &'static str,
        /// The program's.
        program: usize,
        /// The data's (or the job's).
        data: usize,
    },
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count {
                argument,
                value,
                min,
                max,
            } => write!(f, "{argument} ({value}) must be in {min}..={max}"),
            Self::LearningRate(value) => write!(
                f,
                "--learning-rate ({value}) must be a finite number in (0, {MAX_LEARNING_RATE}]"
            ),
            Self::Momentum(value) => {
                write!(f, "--momentum ({value}) must be a finite number in [0, 1)")
            }
            Self::Dropout(value) => write!(
                f,
                "--dropout ({value}) must be a finite probability in [0, 1)"
            ),
            Self::Tolerance(value) => write!(
                f,
                "--tolerance ({value}) must be a finite number in [0, {MAX_TOLERANCE}]"
            ),
            Self::Grouping {
                argument,
                comm,
                replicas,
                error,
            } => write!(
                f,
                "{argument} {comm} does not fit --replicas {replicas}: {error}"
            ),
            Self::MicroBatches {
                batches_per_step,
                accumulation,
            } => write!(
                f,
                "--batches-per-step × --accumulation ({batches_per_step} × {accumulation}) \
                 must be at most {MAX_MICRO_BATCHES_PER_REPLICA} (a device FIFO's depth)"
            ),
            Self::StepTooLarge { bytes } => write!(
                f,
                "one step's arrays, --batches-per-step × --accumulation × --replicas × \
                 (features + 1) × 4 bytes, come to {bytes} bytes; the limit is \
                 {MAX_STEP_BYTES} bytes (64 MiB)"
            ),
            Self::Data(e) => write!(f, "--data: {e}"),
            Self::Capacity(e) => write!(f, "--anchor: {e}"),
            Self::Program(e) => write!(f, "the model does not fit the settings: {e}"),
            Self::Checkpoint(e) => write!(f, "--resume: {e}"),
            Self::Executable(e) => write!(f, "--executable: {e}"),
            Self::Destination { argument, error } => write!(f, "{argument}: {error}"),
            Self::ResumeNoData => f.write_str(
                "--resume: the checkpoint records no data (it was captured outside `tessera \
                 train` or by an older tessera), so the data cannot be checked against it",
            ),
            Self::ResumeData { checkpoint, data } => write!(
                f,
                "--resume: the checkpoint was trained on {} samples (data fingerprint {:016x}); \
                 this run's data has {} samples (fingerprint {:016x})",
                checkpoint.samples, checkpoint.fingerprint, data.samples, data.fingerprint
            ),
            Self::ResumeSteps { step, steps } => write!(
                f,
                "--resume: the checkpoint's step {step} plus --steps {steps} passes the largest \
                 step count, {} (or this host's)",
                crate::checkpoint::MAX_STEP
            ),
            Self::ExecutableData {
                what,
                program,
                data,
            } => write!(
                f,
                "--executable: the program has {program} {what}, the job {data}"
            ),
        }
    }
}

impl std::error::Error for JobError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Data(e) => Some(e),
            Self::Capacity(e) => Some(e),
            Self::Program(e) => Some(e),
            Self::Checkpoint(e) => Some(e),
            Self::Executable(e) => Some(e),
            Self::Destination { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Why a job failed to run.
#[derive(Debug)]
pub enum TrainError {
    /// The job breaks a rule; no device was started.
    Job(JobError),
    /// The runtime failed.
    Runtime(RuntimeError),
    /// A checkpoint could not be saved or restored.
    Checkpoint(CheckpointError),
    /// The executable could not be saved.
    Executable(ExecutableError),
}

impl fmt::Display for TrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Job(e) => e.fmt(f),
            Self::Runtime(e) => e.fmt(f),
            Self::Checkpoint(e) => write!(f, "checkpoint: {e}"),
            Self::Executable(e) => write!(f, "--save-executable: {e}"),
        }
    }
}

impl std::error::Error for TrainError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Job(e) => Some(e),
            Self::Runtime(e) => Some(e),
            Self::Checkpoint(e) => Some(e),
            Self::Executable(e) => Some(e),
        }
    }
}

impl From<JobError> for TrainError {
    fn from(e: JobError) -> Self {
        Self::Job(e)
    }
}

impl From<RuntimeError> for TrainError {
    fn from(e: RuntimeError) -> Self {
        Self::Runtime(e)
    }
}
