//! `tessera train`: trains the accelerator's linear model on a synthetic regression task
//! (targets from one hidden weight matrix per replica group, plus noise) and checks the
//! result against the same training computed on the host in f64.
//!
//! Every job is checked by [`TrainJob::validate`] before any device starts: each setting
//! against its documented range (the `MAX_*` constants here), the grouping against the
//! replicas, and one step's arrays against [`MAX_STEP_BYTES`].

use std::fmt::{self, Write as _};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use tessera_core::grouping::{GroupingError, GroupingSpec, RetrievalMode};
use tessera_core::rng::Rng;

use crate::runtime::reference::{max_relative_error, CheckError, Reference};
use crate::runtime::{
    ModelConfig, Placement, Runtime, RuntimeConfig, RuntimeError, StepData, MAX_REPLICAS,
};

/// Most replicas a job trains on: the runtime's [`MAX_REPLICAS`].
pub const MAX_TRAIN_REPLICAS: usize = MAX_REPLICAS;
/// Most elements of one input sample or one output; one sample (4 bytes an element) must
/// fit a device frame on every placement, the QEMU firmware's 2048-byte frame included.
pub const MAX_SAMPLE_ELEMENTS: usize = 256;
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
/// (inputs + outputs) × 4.
pub const MAX_STEP_BYTES: usize = 64 << 20;
/// Bytes of memory of each host-placed device.
pub const DEVICE_MEMORY: usize = 16 << 20;

/// Why a job cannot run; found before any device starts.
#[derive(Debug, Clone, PartialEq)]
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
    /// The dropout probability is not in `[0, 1)`.
    Dropout(f32),
    /// The tolerance is not finite or not in `[0, MAX_TOLERANCE]`.
    Tolerance(f64),
    /// The grouping does not fit the replicas.
    Grouping {
        /// The grouping asked for.
        spec: GroupingSpec,
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
        /// Bytes one step's inputs and targets need (saturated).
        bytes: u128,
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
            Self::Dropout(value) => write!(
                f,
                "--dropout ({value}) must be a finite probability in [0, 1)"
            ),
            Self::Tolerance(value) => write!(
                f,
                "--tolerance ({value}) must be a finite number in [0, {MAX_TOLERANCE}]"
            ),
            Self::Grouping {
                spec,
                replicas,
                error,
            } => {
                match spec {
                    GroupingSpec::Comm(comm) => write!(f, "--comm {comm}")?,
                    GroupingSpec::Strided { stride, group_size } => {
                        write!(f, "the grouping {stride}:{group_size}")?
                    }
                }
                write!(f, " does not fit --replicas {replicas}: {error}")
            }
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
                 (--inputs + --outputs) × 4 bytes, come to {bytes} bytes; the limit is \
                 {MAX_STEP_BYTES} bytes (64 MiB)"
            ),
        }
    }
}

impl std::error::Error for JobError {}

/// Why a job failed to run.
#[derive(Debug)]
pub enum TrainError {
    /// The job breaks a rule; no device was started.
    Job(JobError),
    /// The runtime failed.
    Runtime(RuntimeError),
}

impl fmt::Display for TrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Job(e) => e.fmt(f),
            Self::Runtime(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for TrainError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Job(e) => Some(e),
            Self::Runtime(e) => Some(e),
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
    /// Which replicas share a weight.
    pub grouping: GroupingSpec,
    /// The model and its schedule (ranges: see [`TrainJob::validate`]).
    pub model: ModelConfig,
    /// Training steps to run, `1..=MAX_STEPS`.
    pub steps: usize,
    /// Seed of the data and of the replicas' RNGs.
    pub seed: u64,
    /// Where the devices run.
    pub placement: Placement,
    /// Largest relative difference from the host reference that passes, in
    /// `[0, MAX_TOLERANCE]`.
    pub tolerance: f64,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

impl TrainJob {
    /// Checks every setting against its range, the grouping against the replicas and the
    /// size of one step's arrays; [`train`] runs this before starting any device.
    pub fn validate(&self) -> Result<(), JobError> {
        let m = &self.model;
        let counts = [
            ("--replicas", self.replicas, MAX_TRAIN_REPLICAS),
            ("--inputs", m.inputs, MAX_SAMPLE_ELEMENTS),
            ("--outputs", m.outputs, MAX_SAMPLE_ELEMENTS),
            (
                "--batches-per-step",
                m.batches_per_step,
                MAX_BATCHES_PER_STEP,
            ),
            ("--accumulation", m.accumulation, MAX_ACCUMULATION),
            ("--steps", self.steps, MAX_STEPS),
        ];
        for (argument, value, max) in counts {
            if !(1..=max).contains(&value) {
                return Err(JobError::Count {
                    argument,
                    value,
                    min: 1,
                    max,
                });
            }
        }
        let lr = m.learning_rate;
        if !(lr.is_finite() && lr > 0.0 && lr <= MAX_LEARNING_RATE) {
            return Err(JobError::LearningRate(lr));
        }
        if !(0.0..1.0).contains(&m.dropout) {
            return Err(JobError::Dropout(m.dropout));
        }
        if !(0.0..=MAX_TOLERANCE).contains(&self.tolerance) {
            return Err(JobError::Tolerance(self.tolerance));
        }
        self.grouping
            .resolve(self.replicas)
            .map_err(|error| JobError::Grouping {
                spec: self.grouping,
                replicas: self.replicas,
                error,
            })?;
        if m.batches_per_step * m.accumulation > MAX_MICRO_BATCHES_PER_REPLICA {
            return Err(JobError::MicroBatches {
                batches_per_step: m.batches_per_step,
                accumulation: m.accumulation,
            });
        }
        // Every factor is bounded above, so u128 cannot overflow.
        let bytes = [
            m.batches_per_step,
            m.accumulation,
            self.replicas,
            m.inputs + m.outputs,
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
    /// Mean loss of each step.
    pub step_losses: Vec<f64>,
    /// Largest relative difference of the final weights from the host reference, or why
    /// they cannot be compared (NaN, infinity, a different number of values).
    pub weight_error: Result<f64, CheckError>,
    /// Largest relative difference of any loss from the host reference, or the first
    /// step's reason they cannot be compared.
    pub loss_error: Result<f64, CheckError>,
    /// Cycles each replica counted.
    pub cycles: Vec<u64>,
    /// Samples per second over the whole run.
    pub samples_per_second: f64,
}

impl TrainReport {
    /// The summary printed at the end of a run.
    pub fn summary(&self, job: &TrainJob) -> String {
        let mut out = String::new();
        let first = self.step_losses.first().copied().unwrap_or(0.0);
        let last = self.step_losses.last().copied().unwrap_or(0.0);
        let _ = writeln!(
            out,
            "loss: {first:.5} at step 1, {last:.5} at step {}",
            self.step_losses.len()
        );
        let show = |check: &Result<f64, CheckError>| match check {
            Ok(error) => format!("within {error:.1e}"),
            Err(e) => format!("not comparable: {e}"),
        };
        let _ = writeln!(
            out,
            "reference (host, f64): weights {}, losses {} (tolerance {:.0e})",
            show(&self.weight_error),
            show(&self.loss_error),
            job.tolerance
        );
        let _ = writeln!(out, "cycles per replica: {:?}", self.cycles);
        let _ = writeln!(out, "throughput: {:.0} samples/s", self.samples_per_second);
        out
    }

    /// True when the device matched the reference within `tolerance`: never when a value
    /// was NaN or infinite, or the device returned the wrong number of values.
    pub fn passed(&self, tolerance: f64) -> bool {
        let within = |check: &Result<f64, CheckError>| matches!(check, Ok(error) if error.is_finite() && *error <= tolerance);
        !self.step_losses.is_empty() && within(&self.weight_error) && within(&self.loss_error)
    }
}

/// Runs `job`, after [`TrainJob::validate`]: an invalid job starts no device.
pub fn train(job: &TrainJob) -> Result<TrainReport, TrainError> {
    job.validate()?;
    let config = RuntimeConfig {
        replicas: job.replicas,
        grouping: job.grouping,
        retrieval: RetrievalMode::OnePerGroup,
        model: job.model,
        device_memory: DEVICE_MEMORY,
    };
    let mut runtime = Runtime::prepare(config, &job.placement)?;
    let grouping = *runtime.settings().grouping();
    let m = job.model;
    let per_group = m.inputs * m.outputs;
    let mut data_rng = Rng::from_seed(job.seed);
    let mut uniform = move || data_rng.next_f32() * 2.0 - 1.0;

    // The hidden weights the targets come from, and a start at zero.
    let hidden: Vec<f32> = (0..grouping.num_groups() * per_group)
        .map(|_| uniform())
        .collect();
    let initial = vec![0.0f32; hidden.len()];
    runtime.set_random_seed(job.seed)?;
    runtime.weights_from_host(&initial)?;
    let mut reference = Reference::new(m, grouping, job.seed, &initial);

    let samples = m.batches_per_step * m.accumulation * job.replicas;
    let bar = if job.progress {
        ProgressBar::new(job.steps as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} step {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    // Grown step by step: `steps` is bounded, but no allocation is sized from it up front.
    let mut step_losses = Vec::new();
    let mut loss_error: Result<f64, CheckError> = Ok(0.0);
    for _ in 0..job.steps {
        let inputs: Vec<f32> = (0..samples * m.inputs).map(|_| uniform()).collect();
        let mut targets = Vec::with_capacity(samples * m.outputs);
        for sample in 0..samples {
            let replica = sample % job.replicas;
            let w = &hidden[grouping.group_of(replica).unwrap_or(0) * per_group..][..per_group];
            let x = &inputs[sample * m.inputs..][..m.inputs];
            for o in 0..m.outputs {
                let y: f32 = (0..m.inputs).map(|i| w[o * m.inputs + i] * x[i]).sum();
                targets.push(y + 0.01 * uniform());
            }
        }
        let data = StepData {
            inputs: &inputs,
            targets: &targets,
        };
        let losses = runtime.run(data)?;
        let expected = reference.step(&data);
        // The first failure to compare sticks: later steps cannot undo it.
        if let Ok(worst) = loss_error {
            loss_error = max_relative_error(&losses, &expected).map(|e| worst.max(e));
        }
        let mean = losses.iter().map(|&l| f64::from(l)).sum::<f64>() / losses.len().max(1) as f64;
        step_losses.push(mean);
        bar.set_message(format!("loss {mean:.5}"));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let elapsed = start.elapsed().as_secs_f64();
    let weights = runtime.weights_to_host()?;
    Ok(TrainReport {
        step_losses,
        weight_error: max_relative_error(&weights, &reference.weights()),
        loss_error,
        cycles: runtime.cycle_counts()?,
        samples_per_second: (samples * job.steps) as f64 / elapsed.max(1e-9),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::grouping::CommGroup;

    fn job() -> TrainJob {
        TrainJob {
            replicas: 4,
            grouping: GroupingSpec::Comm(CommGroup::Consecutive(2)),
            model: ModelConfig {
                inputs: 16,
                outputs: 4,
                batches_per_step: 4,
                accumulation: 2,
                learning_rate: 0.05,
                dropout: 0.0,
            },
            steps: 30,
            seed: 42,
            placement: Placement::Thread,
            tolerance: 1e-3,
            progress: false,
        }
    }

    fn report(weight_error: Result<f64, CheckError>) -> TrainReport {
        TrainReport {
            step_losses: vec![1.0],
            weight_error,
            loss_error: Ok(0.0),
            cycles: vec![],
            samples_per_second: 0.0,
        }
    }

    #[test]
    fn the_default_job_is_valid() {
        assert_eq!(job().validate(), Ok(()));
    }

    #[test]
    fn out_of_range_settings_name_their_argument() {
        type Change = fn(&mut TrainJob);
        let cases: [(Change, &str); 14] = [
            (|j| j.replicas = 0, "--replicas"),
            (|j| j.replicas = 65, "--replicas"),
            (|j| j.model.inputs = 0, "--inputs"),
            (|j| j.model.outputs = 257, "--outputs"),
            (|j| j.model.batches_per_step = 0, "--batches-per-step"),
            (|j| j.model.accumulation = usize::MAX, "--accumulation"),
            (|j| j.steps = 0, "--steps"),
            (|j| j.steps = usize::MAX, "--steps"),
            (|j| j.model.learning_rate = f32::NAN, "--learning-rate"),
            (|j| j.model.learning_rate = 0.0, "--learning-rate"),
            (|j| j.model.learning_rate = f32::INFINITY, "--learning-rate"),
            (|j| j.model.dropout = 1.0, "--dropout"),
            (|j| j.model.dropout = f32::NAN, "--dropout"),
            (|j| j.tolerance = f64::NAN, "--tolerance"),
        ];
        for (change, argument) in cases {
            let mut j = job();
            change(&mut j);
            let text = j.validate().unwrap_err().to_string();
            assert!(text.starts_with(argument), "{argument}: {text}");
        }
    }

    #[test]
    fn groupings_that_do_not_fit_name_both_arguments() {
        let mut j = job();
        j.replicas = 3;
        let text = j.validate().unwrap_err().to_string();
        assert!(
            text.contains("--comm consecutive:2") && text.contains("--replicas 3"),
            "{text}"
        );
    }

    #[test]
    fn large_steps_are_refused_before_any_device_starts() {
        let mut j = job();
        (j.model.batches_per_step, j.model.accumulation) = (1024, 1024);
        assert!(matches!(j.validate(), Err(JobError::MicroBatches { .. })));
        let mut j = job();
        j.replicas = 64;
        j.grouping = GroupingSpec::Comm(CommGroup::None);
        (j.model.inputs, j.model.outputs) = (256, 256);
        (j.model.batches_per_step, j.model.accumulation) = (256, 4);
        let err = j.validate().unwrap_err();
        assert!(matches!(err, JobError::StepTooLarge { .. }), "{err}");
        // `train` refuses it as a job error, before preparing any device.
        j.placement = Placement::Qemu("/nonexistent/firmware".into());
        assert!(matches!(train(&j), Err(TrainError::Job(_))));
    }

    #[test]
    fn a_check_that_cannot_compare_never_passes() {
        assert!(report(Ok(1e-4)).passed(1e-3));
        assert!(!report(Ok(1e-2)).passed(1e-3));
        assert!(!report(Ok(f64::INFINITY)).passed(1e-3));
        let nan = CheckError::NotFinite {
            index: 0,
            device: f32::NAN,
            reference: 1.0,
        };
        assert!(!report(Err(nan)).passed(1.0));
        let mismatch = CheckError::LengthMismatch {
            device: 1,
            reference: 2,
        };
        assert!(!report(Err(mismatch)).passed(1.0));
        let mut no_steps = report(Ok(0.0));
        no_steps.step_losses.clear();
        assert!(!no_steps.passed(1.0));
    }
}
