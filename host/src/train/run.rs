//! Running a job: data, program, runtime and reference side by side, step by step.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tessera_core::program::AnchorTensor;

use super::data::Dataset;
use super::model::{self, INPUT, LABELS};
use super::{DataSource, JobError, TrainError, TrainJob, TrainReport};
use crate::runtime::check::{max_relative_error, CheckError};
use crate::runtime::reference::Reference;
use crate::runtime::{Runtime, StepIo, WeightsIo};
use crate::train::DEVICE_MEMORY;

/// Runs `job`: [`TrainJob::validate`], the data, the step size and the program are all
/// checked before any device starts.
pub fn train(job: &TrainJob) -> Result<TrainReport, TrainError> {
    job.validate()?;
    let data = match &job.data {
        DataSource::Spirals { samples, classes } => Dataset::spirals(*samples, *classes, job.seed),
        DataSource::File(path) => Dataset::load(path).map_err(JobError::Data)?,
    };
    job.check_step_bytes(data.features)?;
    let program = model::program(job, data.features, data.classes).map_err(JobError::Capacity)?;
    program.check(job.replicas).map_err(JobError::Program)?;

    let mut runtime =
        Runtime::prepare(program.clone(), job.replicas, &job.placement, DEVICE_MEMORY)?;
    let initial = model::initial_weights(&program, job.replicas, job.seed)?;
    runtime.set_random_seed(job.seed)?;
    runtime.weights_from_host(&initial)?;
    let mut reference = Reference::new(&program, job.replicas, job.seed, &initial)?;

    let per_step = job.batches_per_step * job.accumulation * job.replicas;
    let bar = if job.progress {
        ProgressBar::new(job.steps as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} step {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut busy = Duration::ZERO;
    // Grown step by step: `steps` is bounded, but no allocation is sized from it up front.
    let mut step_losses = Vec::new();
    let mut anchor_error: Result<f64, CheckError> = Ok(0.0);
    for step in 0..job.steps {
        let (inputs, labels) = data
            .batch(step * per_step, per_step)
            .map_err(|e| JobError::Data(super::DataError::Shape(e)))?;
        let io: StepIo = [(INPUT.to_string(), inputs), (LABELS.to_string(), labels)].into();
        let start = Instant::now();
        let anchors = runtime.run(&io)?;
        busy += start.elapsed();
        let expected = reference.step(&io)?;
        for (name, array) in &anchors {
            let device = array.to_f32().unwrap_or_default();
            let want = expected.get(name).map(Vec::as_slice).unwrap_or_default();
            // The first failure to compare sticks: later steps cannot undo it.
            if let Ok(worst) = anchor_error {
                anchor_error = max_relative_error(&device, want).map(|e| worst.max(e));
            }
            if name == AnchorTensor::Loss.name() {
                let mean =
                    device.iter().map(|&l| f64::from(l)).sum::<f64>() / device.len().max(1) as f64;
                step_losses.push(mean);
                bar.set_message(format!("loss {mean:.5}"));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let weights = runtime.weights_to_host()?;
    let want = reference.weights();
    let mut weight_error: Result<f64, CheckError> = Ok(0.0);
    for (name, array) in &weights {
        let device = array.to_f32().unwrap_or_default();
        let expected = want.get(name).map(Vec::as_slice).unwrap_or_default();
        if let Ok(worst) = weight_error {
            weight_error = max_relative_error(&device, expected).map(|e| worst.max(e));
        }
    }
    Ok(TrainReport {
        step_losses,
        weight_error,
        anchor_error,
        accuracy: replica_zero_accuracy(&weights, &data),
        samples: data.len(),
        cycles: runtime.cycle_counts()?,
        samples_per_second: (per_step * job.steps) as f64 / busy.as_secs_f64().max(1e-9),
    })
}

/// Replica 0's model on every sample. Replica 0 is in group 0 of every grouping, and
/// weights come back with group 0 (or replica 0) first, so its values are the first row
/// of each returned weight.
fn replica_zero_accuracy(weights: &WeightsIo, data: &Dataset) -> f64 {
    let first_row = |name: &str, len: usize| -> Vec<f32> {
        weights
            .get(name)
            .and_then(|a| a.to_f32())
            .map(|v| v.into_iter().take(len).collect())
            .unwrap_or_default()
    };
    let h = weights
        .get("b1")
        .map(|a| *a.shape().last().unwrap_or(&0) as usize)
        .unwrap_or(0);
    let (f, c) = (data.features, data.classes);
    let (w1, b1, w2, b2) = (
        first_row("w1", h * f),
        first_row("b1", h),
        first_row("w2", c * h),
        first_row("b2", c),
    );
    model::accuracy([&w1, &b1, &w2, &b2], f, &data.inputs, &data.labels)
}
