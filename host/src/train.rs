//! `tessera train`: trains the accelerator's linear model on a synthetic regression task
//! (targets from one hidden weight matrix per replica group, plus noise) and checks the
//! result against the same training computed on the host in f64.

use std::fmt::Write as _;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use tessera_core::grouping::{GroupingSpec, RetrievalMode};
use tessera_firmware_sim::rng::Rng;

use crate::runtime::reference::{max_relative_error, Reference};
use crate::runtime::{ModelConfig, Placement, Runtime, RuntimeConfig, RuntimeError, StepData};

/// A training job.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainJob {
    /// Replicas, their grouping, and how weights come back.
    pub replicas: usize,
    /// Which replicas share a weight.
    pub grouping: GroupingSpec,
    /// The model and its schedule.
    pub model: ModelConfig,
    /// Training steps to run.
    pub steps: usize,
    /// Seed of the data and of the replicas' RNGs.
    pub seed: u64,
    /// Where the devices run.
    pub placement: Placement,
    /// Largest relative difference from the host reference that passes.
    pub tolerance: f64,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

/// What a finished job reports.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainReport {
    /// Mean loss of each step.
    pub step_losses: Vec<f64>,
    /// Largest relative difference of the final weights from the host reference.
    pub weight_error: f64,
    /// Largest relative difference of any loss from the host reference.
    pub loss_error: f64,
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
        let _ = writeln!(
            out,
            "reference (host, f64): weights within {:.1e}, losses within {:.1e} (tolerance {:.0e})",
            self.weight_error, self.loss_error, job.tolerance
        );
        let _ = writeln!(out, "cycles per replica: {:?}", self.cycles);
        let _ = writeln!(out, "throughput: {:.0} samples/s", self.samples_per_second);
        out
    }

    /// True when the device matched the reference within `tolerance`.
    pub fn passed(&self, tolerance: f64) -> bool {
        self.weight_error <= tolerance && self.loss_error <= tolerance
    }
}

/// Runs `job`.
pub fn train(job: &TrainJob) -> Result<TrainReport, RuntimeError> {
    let config = RuntimeConfig {
        replicas: job.replicas,
        grouping: job.grouping,
        retrieval: RetrievalMode::OnePerGroup,
        model: job.model,
        device_memory: 16 << 20,
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
    let (mut step_losses, mut loss_error) = (Vec::with_capacity(job.steps), 0.0f64);
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
        loss_error = loss_error.max(max_relative_error(&losses, &reference.step(&data)));
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
