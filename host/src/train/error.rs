//! Why a training job cannot run, or failed: one enum for what is found before any device
//! starts ([`JobError`]), one for a run ([`TrainError`]).

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
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A whole-number setting outside its range.
    #[error("{argument} ({value}) must be in {min}..={max}")]
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
    #[error("--learning-rate ({0}) must be a finite number in (0, {MAX_LEARNING_RATE}]")]
    LearningRate(f32),
    /// The momentum is not in `[0, 1)`.
    #[error("--momentum ({0}) must be a finite number in [0, 1)")]
    Momentum(f32),
    /// The dropout probability is not in `[0, 1)`.
    #[error("--dropout ({0}) must be a finite probability in [0, 1)")]
    Dropout(f32),
    /// The tolerance is not finite or not in `[0, MAX_TOLERANCE]`.
    #[error("--tolerance ({0}) must be a finite number in [0, {MAX_TOLERANCE}]")]
    Tolerance(f64),
    /// A comm group does not fit the replicas.
    #[error("{argument} {comm} does not fit --replicas {replicas}: {error}")]
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
    #[error(
        "--batches-per-step × --accumulation ({batches_per_step} × {accumulation}) must be at \
         most {MAX_MICRO_BATCHES_PER_REPLICA} (a device FIFO's depth)"
    )]
    MicroBatches {
        /// Batches per step.
        batches_per_step: usize,
        /// Micro-batches per batch.
        accumulation: usize,
    },
    /// One step's arrays are larger than [`MAX_STEP_BYTES`].
    #[error(
        "one step's arrays, --batches-per-step × --accumulation × --replicas × (features + 1) × \
         4 bytes, come to {bytes} bytes; the limit is {MAX_STEP_BYTES} bytes (64 MiB)"
    )]
    StepTooLarge {
        /// Bytes one step's inputs and labels need (saturated).
        bytes: u128,
    },
    /// The data file cannot be used.
    #[error("--data: {0}")]
    Data(#[source] DataError),
    /// The program outgrows a capacity (too many anchors).
    #[error("--anchor: {0}")]
    Capacity(#[source] CapacityError),
    /// The program the job makes breaks core's rules (an anchor period that does not
    /// divide the batches per step, a shard layout that does not build).
    #[error("the model does not fit the settings: {0}")]
    Program(#[source] ProgramError),
    /// The checkpoint to resume from cannot be used.
    #[error("--resume: {0}")]
    Checkpoint(#[source] CheckpointError),
    /// The executable to run cannot be used.
    #[error("--executable: {0}")]
    Executable(#[source] ExecutableError),
    /// A file to write (`--checkpoint`, `--save-executable`) could not be: its directory is
    /// missing or not writable, or the path is not a regular file.
    #[error("{argument}: {error}")]
    Destination {
        /// The argument naming it.
        argument: &'static str,
        /// Why.
        #[source]
        error: ReplaceError,
    },
    /// The checkpoint to resume from records no data (captured outside `tessera train`, or
    /// written before checkpoints recorded it): the data given cannot be checked.
    #[error(
        "--resume: the checkpoint records no data (it was captured outside `tessera train` or \
         by an older tessera), so the data cannot be checked against it"
    )]
    ResumeNoData,
    /// The data given is not the data the checkpoint was trained on.
    #[error(
        "--resume: the checkpoint was trained on {} samples (data fingerprint {:016x}); this \
         run's data has {} samples (fingerprint {:016x})",
        .checkpoint.samples,
        .checkpoint.fingerprint,
        .data.samples,
        .data.fingerprint
    )]
    ResumeData {
        /// What the checkpoint recorded.
        checkpoint: DataRecord,
        /// What the job's data is.
        data: DataRecord,
    },
    /// The checkpoint's step and the steps to train add up past
    /// [`MAX_STEP`](crate::checkpoint::MAX_STEP) (or past what this host counts).
    #[error(
        "--resume: the checkpoint's step {step} plus --steps {steps} passes the largest step \
         count, {} (or this host's)",
        crate::checkpoint::MAX_STEP
    )]
    ResumeSteps {
        /// The checkpoint's step.
        step: u64,
        /// Steps to train.
        steps: usize,
    },
    /// The executable's program does not fit the data.
    #[error("--executable: the program has {program} {what}, the job {data}")]
    ExecutableData {
        /// What differs.
        what: &'static str,
        /// The program's.
        program: usize,
        /// The data's (or the job's).
        data: usize,
    },
}

/// Why a job failed to run.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The job breaks a rule; no device was started.
    #[error("{0}")]
    Job(#[from] JobError),
    /// The runtime failed.
    #[error("{0}")]
    Runtime(#[from] RuntimeError),
    /// A checkpoint could not be saved or restored.
    #[error("checkpoint: {0}")]
    Checkpoint(#[source] CheckpointError),
    /// The executable could not be saved.
    #[error("--save-executable: {0}")]
    Executable(#[source] ExecutableError),
    /// The trace could not be started or written.
    #[error("--trace: {0}")]
    Trace(#[source] crate::trace::TraceError),
}
