//! `tessera train`: trains a two-layer perceptron classifier ([`model`]) on the simulated
//! accelerator, on an embedded synthetic dataset or the user's file ([`data`]), and checks
//! every step's anchors, and the weights every 10 steps and after the last, against the
//! same training computed on the host in `f64` ([`reference`](crate::runtime::reference)).
//! At each weight check the reference restarts from the device's own weights, optimizer
//! state and RNG state: an `f32` run and an `f64` run of the same training drift apart
//! after enough steps — a ReLU or a near-tie resolved the other way, amplified by momentum —
//! which says nothing about whether each step is computed right.
//!
//! Every job is checked by [`TrainJob::validate`] before any device starts: each setting
//! against its documented range (the `MAX_*` constants here), both groupings against the
//! replicas, one step's arrays against [`MAX_STEP_BYTES`], and the program the job makes
//! against core's rules.

pub mod data;
pub mod model;
mod run;

use std::fmt::{self, Write as _};
use std::path::PathBuf;

use tessera_core::grouping::{CommGroup, GroupingError, RetrievalMode};
use tessera_core::program::{AnchorTensor, CapacityError, ProgramError, Sharding};
use tessera_core::stream::AnchorReturnType;

pub use data::{DataError, Dataset};
pub use run::{train, train_in};

use crate::atomic::ReplaceError;
use crate::checkpoint::{CheckpointError, DataRecord};
use crate::executable::ExecutableError;
use crate::runtime::check::CheckError;
use crate::runtime::{Placement, RuntimeError, MAX_REPLICAS};

/// Most replicas a job trains on: the runtime's [`MAX_REPLICAS`].
pub const MAX_TRAIN_REPLICAS: usize = MAX_REPLICAS;
/// Most hidden units.
pub const MAX_HIDDEN: usize = 256;
/// Most classes of the synthetic data.
pub const MAX_CLASSES: usize = 16;
/// Most samples of the synthetic data.
pub const MAX_SAMPLES: usize = 1 << 20;
/// Most batches per step.
pub const MAX_BATCHES_PER_STEP: usize = 1024;
/// Most micro-batches per batch.
pub const MAX_ACCUMULATION: usize = 1024;
/// Most micro-batches one replica takes per step (batches per step × accumulation): the
/// depth of a device FIFO is 16 bits.
pub const MAX_MICRO_BATCHES_PER_REPLICA: usize = u16::MAX as usize;
/// Most training steps.
pub const MAX_STEPS: usize = 1_000_000;
/// Largest learning rate (the smallest is any positive number).
pub const MAX_LEARNING_RATE: f32 = 10.0;
/// Largest tolerance of the reference check: a relative error of 1 is no check at all.
pub const MAX_TOLERANCE: f64 = 1.0;
/// Most bytes of one step's user arrays: batches per step × accumulation × replicas ×
/// (features + 1) × 4.
pub const MAX_STEP_BYTES: usize = 64 << 20;
/// Bytes of memory of each host-placed device.
pub const DEVICE_MEMORY: usize = 16 << 20;

/// Where the samples come from.
#[derive(Debug, Clone, PartialEq)]
pub enum DataSource {
    /// Interleaved spirals, one arm per class.
    Spirals {
        /// Samples, `classes..=MAX_SAMPLES`.
        samples: usize,
        /// Classes, `2..=MAX_CLASSES`.
        classes: usize,
    },
    /// A safetensors file (see [`data`]).
    File(PathBuf),
}

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

/// A training job.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainJob {
    /// Number of replicas, `1..=MAX_TRAIN_REPLICAS`.
    pub replicas: usize,
    /// Comm group of the first layer (`w1`, sharded across it, and `b1`).
    pub comm: CommGroup,
    /// Comm group of the second layer (`w2`, `b2`).
    pub output_comm: CommGroup,
    /// How `w1` is split across its group.
    pub sharding: Sharding,
    /// How weights come back to the host.
    pub retrieval: RetrievalMode,
    /// Hidden units, `1..=MAX_HIDDEN`.
    pub hidden: usize,
    /// Batches per step, `1..=MAX_BATCHES_PER_STEP`.
    pub batches_per_step: usize,
    /// Micro-batches per batch, `1..=MAX_ACCUMULATION`.
    pub accumulation: usize,
    /// Training steps to run, `1..=MAX_STEPS`.
    pub steps: usize,
    /// SGD learning rate, in `(0, MAX_LEARNING_RATE]`.
    pub learning_rate: f32,
    /// Momentum, in `[0, 1)` (0: plain SGD).
    pub momentum: f32,
    /// Dropout probability after the hidden layer, in `[0, 1)`.
    pub dropout: f32,
    /// The anchored tensors and their return types.
    pub anchors: Vec<(AnchorTensor, AnchorReturnType)>,
    /// Where the samples come from.
    pub data: DataSource,
    /// Seed of the data, the starting weights and the replicas' RNGs.
    pub seed: u64,
    /// Where the devices run.
    pub placement: Placement,
    /// Largest relative difference from the host reference that passes, in
    /// `[0, MAX_TOLERANCE]`.
    pub tolerance: f64,
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// Where to save a checkpoint: at the end, and every [`every`](Self::every) steps.
    pub checkpoint: Option<PathBuf>,
    /// Steps between checkpoints, `0..=MAX_STEPS` (0: only at the end).
    pub every: usize,
    /// Resume from this checkpoint (its seed replaces [`seed`](Self::seed)).
    pub resume: Option<PathBuf>,
    /// Save the prepared program here.
    pub save_executable: Option<PathBuf>,
    /// Run this saved executable instead of building the model from the settings.
    pub executable: Option<PathBuf>,
}

impl TrainJob {
    /// Checks every setting against its range, the groupings against the replicas and the
    /// size of one step's arrays; [`train`] runs this (and checks the data and the
    /// program) before starting any device.
    pub fn validate(&self) -> Result<(), JobError> {
        let mut counts = vec![
            ("--replicas", self.replicas, 1, MAX_TRAIN_REPLICAS),
            ("--hidden", self.hidden, 1, MAX_HIDDEN),
            (
                "--batches-per-step",
                self.batches_per_step,
                1,
                MAX_BATCHES_PER_STEP,
            ),
            ("--accumulation", self.accumulation, 1, MAX_ACCUMULATION),
            ("--steps", self.steps, 1, MAX_STEPS),
            ("--every", self.every, 0, MAX_STEPS),
        ];
        if let DataSource::Spirals { samples, classes } = self.data {
            counts.push(("--classes", classes, 2, MAX_CLASSES));
            counts.push(("--samples", samples, classes.max(2), MAX_SAMPLES));
        }
        for (argument, value, min, max) in counts {
            if !(min..=max).contains(&value) {
                return Err(JobError::Count {
                    argument,
                    value,
                    min,
                    max,
                });
            }
        }
        let lr = self.learning_rate;
        if !(lr.is_finite() && lr > 0.0 && lr <= MAX_LEARNING_RATE) {
            return Err(JobError::LearningRate(lr));
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(JobError::Momentum(self.momentum));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(JobError::Dropout(self.dropout));
        }
        if !(0.0..=MAX_TOLERANCE).contains(&self.tolerance) {
            return Err(JobError::Tolerance(self.tolerance));
        }
        for (argument, comm) in [("--comm", self.comm), ("--output-comm", self.output_comm)] {
            comm.to_grouping(self.replicas)
                .map_err(|error| JobError::Grouping {
                    argument,
                    comm,
                    replicas: self.replicas,
                    error,
                })?;
        }
        if self.batches_per_step * self.accumulation > MAX_MICRO_BATCHES_PER_REPLICA {
            return Err(JobError::MicroBatches {
                batches_per_step: self.batches_per_step,
                accumulation: self.accumulation,
            });
        }
        Ok(())
    }

    /// Checks one step's arrays for `features` values per sample against
    /// [`MAX_STEP_BYTES`].
    fn check_step_bytes(&self, features: usize) -> Result<(), JobError> {
        // Every factor is bounded above (features by a file's size), so u128 cannot
        // overflow.
        let bytes = [
            self.batches_per_step,
            self.accumulation,
            self.replicas,
            features.saturating_add(1),
            4,
        ]
        .iter()
        .map(|&n| n as u128)
        .product::<u128>();
        if bytes > MAX_STEP_BYTES as u128 {
            return Err(JobError::StepTooLarge { bytes });
        }
        Ok(())
    }
}

/// What a finished job reports.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainReport {
    /// Mean anchored loss of each step (empty when the loss is not anchored).
    pub step_losses: Vec<f64>,
    /// Largest relative difference of the weights at any check from the reference's after
    /// the same steps (from the same state), or why
    /// they cannot be compared (NaN, infinity, a different number of values).
    pub weight_error: Result<f64, CheckError>,
    /// Largest relative difference of any anchored value from the host reference, or the
    /// first step's reason they cannot be compared.
    pub anchor_error: Result<f64, CheckError>,
    /// Replica 0's model, classifying every sample of the data after training.
    pub accuracy: f64,
    /// Samples in the data.
    pub samples: usize,
    /// Work each replica counted, in multiply-adds.
    pub cycles: Vec<u64>,
    /// Samples per second through the runtime's steps.
    pub samples_per_second: f64,
}

impl TrainReport {
    /// The summary printed at the end of a run.
    pub fn summary(&self, job: &TrainJob) -> String {
        let mut out = String::new();
        match (self.step_losses.first(), self.step_losses.last()) {
            (Some(first), Some(last)) => {
                let _ = writeln!(
                    out,
                    "loss: {first:.5} at step 1, {last:.5} at step {}",
                    self.step_losses.len()
                );
            }
            _ => {
                let _ = writeln!(out, "loss: not anchored");
            }
        }
        let _ = writeln!(
            out,
            "accuracy: {:.1}% (replica 0's model on the {} samples)",
            100.0 * self.accuracy,
            self.samples
        );
        let show = |check: &Result<f64, CheckError>| match check {
            Ok(error) => format!("within {error:.1e}"),
            Err(e) => format!("not comparable: {e}"),
        };
        let _ = writeln!(
            out,
            "reference (host, f64, from the device's state every 10 steps): weights {}, anchors {} \
             (tolerance {:.0e})",
            show(&self.weight_error),
            show(&self.anchor_error),
            job.tolerance
        );
        let _ = writeln!(out, "work per replica (multiply-adds): {:?}", self.cycles);
        let _ = writeln!(out, "throughput: {:.0} samples/s", self.samples_per_second);
        out
    }

    /// True when the device matched the reference within `tolerance`: never when a value
    /// was NaN or infinite, or the device returned the wrong number of values.
    pub fn passed(&self, tolerance: f64) -> bool {
        let within = |check: &Result<f64, CheckError>| matches!(check, Ok(error) if error.is_finite() && *error <= tolerance);
        within(&self.weight_error) && within(&self.anchor_error)
    }
}

#[cfg(test)]
mod tests;
