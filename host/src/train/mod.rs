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
mod error;
pub mod model;
mod run;

use std::fmt::Write as _;
use std::path::PathBuf;

use tessera_core::grouping::{CommGroup, RetrievalMode};
use tessera_core::program::{AnchorTensor, Sharding, MAX_MICRO_BATCH};
use tessera_core::stream::AnchorReturnType;

pub use data::{DataError, Dataset};
pub use error::{JobError, TrainError};
use run::check_interval;
pub use run::{train, train_in};

use crate::runtime::check::Tally;
use crate::runtime::{Placement, MAX_REPLICAS};

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
/// Most bytes of one step's user arrays: batches per step × accumulation × micro-batch size
/// × replicas × (features + 1) × 4.
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
    /// Samples per micro-batch, `1..=MAX_MICRO_BATCH`: each device computes them as one
    /// matrix.
    pub micro_batch_size: usize,
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
    /// Write a timeline of the run here ([`crate::trace`]).
    pub trace: Option<PathBuf>,
}

/// The job `tessera train` runs given no options (a test holds the command to it), on
/// device threads and without a progress bar: 4 replicas, `w1` sharded across all of them
/// and `w2` in pairs, 24 hidden units, 2 batches of 32 micro-batches of one sample per
/// step, 40 steps, the embedded 3000 spiral samples of 3 classes.
impl Default for TrainJob {
    fn default() -> Self {
        Self {
            replicas: 4,
            comm: CommGroup::All,
            output_comm: CommGroup::Consecutive(2),
            sharding: Sharding::Balanced,
            retrieval: RetrievalMode::OnePerGroup,
            hidden: 24,
            batches_per_step: 2,
            accumulation: 32,
            micro_batch_size: 1,
            steps: 40,
            learning_rate: 0.7,
            momentum: 0.9,
            dropout: 0.1,
            anchors: model::default_anchors(),
            data: DataSource::Spirals {
                samples: 3000,
                classes: 3,
            },
            seed: 42,
            placement: Placement::Thread,
            tolerance: 1e-3,
            progress: false,
            checkpoint: None,
            every: 0,
            resume: None,
            save_executable: None,
            executable: None,
            trace: None,
        }
    }
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
            (
                "--micro-batch-size",
                self.micro_batch_size,
                1,
                MAX_MICRO_BATCH as usize,
            ),
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
            self.micro_batch_size,
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
    /// The weights at every check against the reference's after the same steps (from the
    /// same state): the largest relative difference and where, or where and why they could
    /// not be compared (NaN, infinity, a different number of values).
    pub weight_check: Tally,
    /// Every anchored value against the host reference's, likewise.
    pub anchor_check: Tally,
    /// Replica 0's model, classifying every sample of the data after training.
    pub accuracy: f64,
    /// Samples in the data.
    pub samples: usize,
    /// Work each replica counted, in multiply-adds.
    pub cycles: Vec<u64>,
    /// Samples per second through the runtime's steps.
    pub samples_per_second: f64,
    /// The timeline written, when the job asked for one.
    pub trace: Option<crate::trace::TraceSummary>,
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
        let _ = writeln!(
            out,
            "reference (host, f64, from the device's state every {}): weights {}, anchors {} \
             (tolerance {:.0e})",
            match check_interval(&job.placement) {
                1 => "step".to_string(),
                n => format!("{n} steps"),
            },
            self.weight_check,
            self.anchor_check,
            job.tolerance
        );
        let _ = writeln!(out, "work per replica (multiply-adds): {:?}", self.cycles);
        let _ = writeln!(out, "throughput: {:.0} samples/s", self.samples_per_second);
        if let Some(trace) = &self.trace {
            let _ = writeln!(
                out,
                "trace: {} events in {} (open it in ui.perfetto.dev)",
                trace.events,
                trace.path.display()
            );
        }
        out
    }

    /// True when the device matched the reference within `tolerance`: never when a value
    /// was NaN or infinite, or the device returned the wrong number of values.
    pub fn passed(&self, tolerance: f64) -> bool {
        self.weight_check.within(tolerance) && self.anchor_check.within(tolerance)
    }
}

#[cfg(test)]
mod tests;
