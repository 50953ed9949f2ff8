//! Running a job: data, program, runtime and reference side by side, step by step.

use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tessera_core::program::{AnchorTensor, Program};
use tessera_core::transfer::InstanceWindow;

use super::data::{Dataset, SPIRAL_FEATURES};
use super::model::{self, INPUT, LABELS};
use super::{DataSource, JobError, TrainError, TrainJob, TrainReport};
use crate::checkpoint::{Checkpoint, CheckpointError, DataRecord, MAX_STEP};
use crate::executable::Executable;
use crate::instance::{Instances, Single};
use crate::runtime::check::Tally;
use crate::runtime::reference::{Reference, Values};
use crate::runtime::{Anchors, Placement, Runtime, RuntimeError, StepIo, WeightsIo};
use crate::trace::{rank_file, traced, Trace};
use crate::train::DEVICE_MEMORY;

/// Steps between two checks of the weights against the reference on `placement` (each also
/// restarting the reference from the device's state); the last step is always checked.
///
/// Every step where the devices' state is cheap to read (threads, child processes): an `f32`
/// run and the `f64` reference drift apart (a ReLU's near-tie resolved the other way,
/// amplified by momentum), and over ten steps of a wider model (`--hidden 64`) the drift
/// reached 3e-3 in a clean run and failed its own check. Every ten steps on QEMU and serial
/// ports, whose state crosses a UART.
pub(super) fn check_interval(placement: &Placement) -> usize {
    match placement {
        Placement::Qemu(_) | Placement::Serial { .. } => 10,
        Placement::Thread | Placement::Process(_) => 1,
    }
}

/// A job's data before the seed is known: a file's, or the spirals still to draw.
enum Loaded {
    File(Dataset),
    Spirals(usize, usize),
}

/// Runs `job` in this process alone: see [`train_in`].
pub fn train(job: &TrainJob) -> Result<TrainReport, TrainError> {
    train_in(job, Arc::new(Single))
}

/// Runs `job` as one of `instances`: [`TrainJob::validate`], the data, the step size, the
/// program, the checkpoint to resume from and the executable to run are all checked before
/// any device starts.
///
/// Every instance reads the same data and drives its window of the replicas, feeding them
/// their share of each step; the report's losses, weights and work cover every replica (the
/// anchors' check covers this instance's). Only rank 0 shows progress and writes the
/// checkpoint and the executable; every rank takes part in capturing them.
pub fn train_in(job: &TrainJob, instances: Arc<dyn Instances>) -> Result<TrainReport, TrainError> {
    let leader = instances.rank() == 0;
    job.validate()?;
    // Only rank 0 writes: its directory must take a file before any step is spent.
    if leader {
        check_destinations(job)?;
    }
    // Started before the devices, so that the timeline covers their start; each rank of a
    // job across ranks writes a file of its own.
    let trace = (job.trace.as_ref())
        .map(|path| Trace::start(rank_file(path, instances.rank(), instances.size())))
        .transpose()
        .map_err(TrainError::Trace)?;
    let prepared = Prepared::read(job)?;
    let mut runtime = open_runtime(job, &prepared, &instances, leader)?;
    let reference = start_state(job, &prepared, &mut runtime)?;
    let mut training = Training {
        job,
        instances,
        leader,
        window: runtime.window(),
        runtime,
        reference,
        prepared,
        busy: Duration::ZERO,
        // Grown step by step: `steps` is bounded, but no allocation is sized from it up
        // front.
        step_losses: Vec::new(),
        anchor_check: Tally::new(),
        weight_check: Tally::new(),
        last_state: None,
    };
    training.run_steps()?;
    let mut report = training.report()?;
    report.trace = trace
        .map(Trace::finish)
        .transpose()
        .map_err(TrainError::Trace)?;
    Ok(report)
}

/// The files rank 0 writes (`--checkpoint`, `--save-executable`) can be created.
fn check_destinations(job: &TrainJob) -> Result<(), JobError> {
    let destinations = [
        ("--checkpoint", &job.checkpoint),
        ("--save-executable", &job.save_executable),
    ];
    for (argument, path) in destinations {
        if let Some(path) = path {
            crate::atomic::check_destination(path)
                .map_err(|error| JobError::Destination { argument, error })?;
        }
    }
    Ok(())
}

/// What a job reads and checks before any device starts.
struct Prepared {
    /// The saved executable to run (`--executable`).
    executable: Option<Executable>,
    /// The executable's program, or the one built from the job.
    program: Program,
    /// The checkpoint to resume from (`--resume`).
    resume: Option<Checkpoint>,
    /// The seed of the data and the generators: the resumed run's, or the job's.
    seed: u64,
    data: Dataset,
    /// The data's fingerprint, as checkpoints record it.
    record: DataRecord,
    /// The step the run starts from (0 unless resumed).
    first_step: usize,
}

impl Prepared {
    /// `job`'s data, program, executable and checkpoint, each held to the others.
    fn read(job: &TrainJob) -> Result<Self, JobError> {
        // The program needs only the data's widths, which the spirals have whatever their
        // seed: the checkpoint is read for the program, and its seed then draws the spirals.
        let source = match &job.data {
            DataSource::File(path) => Loaded::File(Dataset::load(path).map_err(JobError::Data)?),
            DataSource::Spirals { samples, classes } => Loaded::Spirals(*samples, *classes),
        };
        let (features, classes) = match &source {
            Loaded::File(d) => (d.features, d.classes),
            Loaded::Spirals(_, classes) => (SPIRAL_FEATURES, *classes),
        };
        job.check_step_bytes(features)?;
        let executable = match &job.executable {
            Some(path) => Some(Executable::load(path).map_err(JobError::Executable)?),
            None => None,
        };
        let program = job_program(job, executable.as_ref(), features, classes)?;
        let resume = match &job.resume {
            Some(path) => Some(
                Checkpoint::load_for(path, &program, job.replicas).map_err(JobError::Checkpoint)?,
            ),
            None => None,
        };
        // A resumed run continues the data and the generators of the run it resumes.
        let seed = resume.as_ref().map_or(job.seed, |c| c.seed);
        let data = match source {
            Loaded::File(d) => d,
            Loaded::Spirals(samples, classes) => {
                Dataset::spirals(samples, classes, seed).map_err(JobError::Data)?
            }
        };
        let record = data.record();
        let first_step = match &resume {
            Some(c) => resume_position(c, &record, job.steps)?,
            None => 0,
        };
        Ok(Self {
            executable,
            program,
            resume,
            seed,
            data,
            record,
            first_step,
        })
    }
}

/// The program the job runs: `executable`'s, once it is held to the data's widths and the
/// job's replicas, or the one built from the job, checked.
fn job_program(
    job: &TrainJob,
    executable: Option<&Executable>,
    features: usize,
    classes: usize,
) -> Result<Program, JobError> {
    match executable {
        Some(exe) => {
            check_executable(exe, job, features, classes)?;
            Ok(exe.program.clone())
        }
        None => {
            let p = model::program(job, features, classes).map_err(JobError::Capacity)?;
            p.check(job.replicas).map_err(JobError::Program)?;
            Ok(p)
        }
    }
}

/// The runtime of the prepared program (or executable) on `job`'s placement; rank 0
/// saves the executable when the job asks for it.
fn open_runtime(
    job: &TrainJob,
    prepared: &Prepared,
    instances: &Arc<dyn Instances>,
    leader: bool,
) -> Result<Runtime, TrainError> {
    let runtime = match &prepared.executable {
        Some(exe) => {
            Runtime::load_executable_in(exe, instances.clone(), &job.placement, DEVICE_MEMORY)?
        }
        None => Runtime::prepare_in(
            prepared.program.clone(),
            job.replicas,
            instances.clone(),
            &job.placement,
            DEVICE_MEMORY,
        )?,
    };
    if let (Some(path), true) = (&job.save_executable, leader) {
        runtime
            .executable()
            .save(path)
            .map_err(TrainError::Executable)?;
    }
    Ok(runtime)
}

/// The devices' starting state, and the reference started from the same: the resumed
/// checkpoint's, or the initial weights and generators of the seed.
fn start_state(
    job: &TrainJob,
    prepared: &Prepared,
    runtime: &mut Runtime,
) -> Result<Reference, TrainError> {
    let program = &prepared.program;
    match &prepared.resume {
        Some(c) => {
            c.restore(runtime).map_err(TrainError::Checkpoint)?;
            let mut reference = Reference::new(program, job.replicas, c.seed, &c.weights)?;
            reference.set_optimizer_state(&c.optimizer)?;
            reference.set_rng_state(&c.rng)?;
            Ok(reference)
        }
        None => {
            let seed = prepared.seed;
            let initial = model::initial_weights(program, job.replicas, seed)?;
            runtime.set_random_seed(seed)?;
            runtime.weights_from_host(&initial)?;
            Ok(Reference::new(program, job.replicas, seed, &initial)?)
        }
    }
}

/// A job under way: the runtime and the reference side by side, and what the steps have
/// gathered for the report.
struct Training<'j> {
    job: &'j TrainJob,
    instances: Arc<dyn Instances>,
    leader: bool,
    /// This instance's replicas.
    window: InstanceWindow,
    runtime: Runtime,
    reference: Reference,
    prepared: Prepared,
    /// Time spent in the devices' steps.
    busy: Duration,
    step_losses: Vec<f64>,
    anchor_check: Tally,
    weight_check: Tally,
    /// The state captured at the last check.
    last_state: Option<Checkpoint>,
}

impl Training<'_> {
    /// Every step of the job, its state checked (and saved) when due; rank 0 shows the
    /// progress.
    fn run_steps(&mut self) -> Result<(), TrainError> {
        let job = self.job;
        let bar = if job.progress && self.leader {
            ProgressBar::new(job.steps as u64)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{bar:30} step {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let check_every = check_interval(&job.placement);
        let first_step = self.prepared.first_step;
        // Checked by `resume_position`.
        let last = first_step + job.steps;
        for step in first_step..last {
            self.step(step, &bar)?;
            bar.inc(1);
            let done = step + 1;
            let checked = done == last || (done - first_step).is_multiple_of(check_every);
            let periodic = job.every > 0 && (done - first_step).is_multiple_of(job.every);
            let save = job.checkpoint.is_some() && (periodic || done == last);
            if checked || save {
                self.check_state(done, save)?;
            }
        }
        bar.finish_and_clear();
        Ok(())
    }

    /// Step `step` on the devices, fed this instance's share of its samples, and in the
    /// reference on all of them; the anchors are held to the reference's.
    fn step(&mut self, step: usize, bar: &ProgressBar) -> Result<(), TrainError> {
        let job = self.job;
        let micro_batches = job.batches_per_step * job.accumulation;
        let per_step = micro_batches * job.replicas * job.micro_batch_size;
        let data = &self.prepared.data;
        let shape_error = |e| JobError::Data(super::DataError::Shape(e));
        let position = data_position(step, per_step, data.len());
        let (inputs, labels) = data
            .share(
                position,
                micro_batches,
                job.replicas,
                self.window,
                job.micro_batch_size,
            )
            .map_err(shape_error)?;
        let io: StepIo = [(INPUT.to_string(), inputs), (LABELS.to_string(), labels)].into();
        let start = Instant::now();
        let anchors = self.runtime.run(&io)?;
        self.busy += start.elapsed();
        // The reference computes every replica, from the whole step's samples.
        let _reference = traced!("reference", step);
        let (inputs, labels) = data.batch(position, per_step).map_err(shape_error)?;
        let whole: StepIo = [(INPUT.to_string(), inputs), (LABELS.to_string(), labels)].into();
        let expected = self.reference.step(&whole)?;
        self.check_anchors(step, &anchors, &expected, bar)
    }

    /// Step `step`'s anchors, held to the reference's `expected`; the loss's mean over
    /// every replica is recorded and shown.
    fn check_anchors(
        &mut self,
        step: usize,
        anchors: &Anchors,
        expected: &Values,
        bar: &ProgressBar,
    ) -> Result<(), TrainError> {
        for (name, array) in anchors {
            let device = array.to_f32().unwrap_or_default();
            let want = expected.get(name).map(Vec::as_slice).unwrap_or_default();
            let items = array.shape().first().map_or(0, |&d| d as usize);
            let want = window_rows(want, items, self.job.replicas, self.window);
            self.anchor_check.record(step + 1, name, &device, &want);
            if name == AnchorTensor::Loss.name() {
                // The mean over every replica of every instance.
                let local = device.iter().map(|&l| f64::from(l)).sum::<f64>();
                let mut total = [local, device.len() as f64];
                self.instances
                    .allreduce_sum(&mut total)
                    .map_err(RuntimeError::from)?;
                let mean = total[0] / total[1].max(1.0);
                self.step_losses.push(mean);
                bar.set_message(format!("loss {mean:.5}"));
            }
        }
        Ok(())
    }

    /// The devices' whole state after `done` steps (every instance takes part), held to the
    /// reference's after the same steps; the reference goes on from it, and rank 0 saves it
    /// when `save`.
    fn check_state(&mut self, done: usize, save: bool) -> Result<(), TrainError> {
        let mut state = Checkpoint::capture(&mut self.runtime, done as u64, self.prepared.seed)
            .map_err(|e| match e {
                // The runtime's failures stay the runtime's (a lost device, say).
                CheckpointError::Runtime(e) => TrainError::Runtime(e),
                other => TrainError::Checkpoint(other),
            })?;
        state.data = Some(self.prepared.record);
        let want = self.reference.host_weights();
        for (name, array) in &state.weights {
            let device = array.to_f32().unwrap_or_default();
            let expected = want.get(name).map(Vec::as_slice).unwrap_or_default();
            self.weight_check.record(done, name, &device, expected);
        }
        // The reference goes on from the device's own state (see the module documentation).
        self.reference.set_weights(&state.weights)?;
        self.reference.set_optimizer_state(&state.optimizer)?;
        self.reference.set_rng_state(&state.rng)?;
        if let (Some(path), true) = (&self.job.checkpoint, save) {
            if self.leader {
                state.save(path).map_err(TrainError::Checkpoint)?;
            }
            // The others wait here, not in a device's reduction (whose deadline a slow
            // save could outlast).
            self.instances.barrier().map_err(RuntimeError::from)?;
        }
        self.last_state = Some(state);
        Ok(())
    }

    /// The report of the steps run.
    fn report(mut self) -> Result<TrainReport, TrainError> {
        let job = self.job;
        let per_step =
            job.batches_per_step * job.accumulation * job.replicas * job.micro_batch_size;
        // The last step is always checked: its state holds the final weights (host shapes,
        // whose first row is replica 0's, as the returned shapes').
        let weights = self.last_state.map(|s| s.weights).unwrap_or_default();
        let data = &self.prepared.data;
        Ok(TrainReport {
            step_losses: self.step_losses,
            weight_check: self.weight_check,
            anchor_check: self.anchor_check,
            accuracy: replica_zero_accuracy(&weights, data),
            samples: data.len(),
            cycles: self.runtime.cycle_counts()?,
            samples_per_second: (per_step * job.steps) as f64 / self.busy.as_secs_f64().max(1e-9),
            trace: None,
        })
    }
}

/// The executable's program reads this job's data on this job's replicas: its input and
/// class widths match the data, and it was prepared for as many replicas.
fn check_executable(
    exe: &Executable,
    job: &TrainJob,
    features: usize,
    classes: usize,
) -> Result<(), JobError> {
    let p = &exe.program;
    let program_features = p
        .streams
        .get(usize::from(p.input))
        .and_then(|s| tessera_core::program::elements(&s.sample))
        .unwrap_or(0);
    let checks = [
        ("replicas", exe.replicas as usize, job.replicas),
        ("input features", program_features, features),
        ("classes", p.output_width().unwrap_or(0), classes),
        (
            "batches per step",
            p.batches_per_step as usize,
            job.batches_per_step,
        ),
        (
            "micro-batches per batch",
            p.accumulation as usize,
            job.accumulation,
        ),
        (
            "samples per micro-batch",
            p.micro_batch_size as usize,
            job.micro_batch_size,
        ),
    ];
    for (what, program, data) in checks {
        if program != data {
            return Err(JobError::ExecutableData {
                what,
                program,
                data,
            });
        }
    }
    Ok(())
}

/// Where step `step`'s samples start in data of `samples` samples, `per_step` a step:
/// reduced modulo the data (positions wrap around it) in 128 bits, so that no step count
/// overflows.
fn data_position(step: usize, per_step: usize, samples: usize) -> usize {
    let position = (step as u128 * per_step as u128) % samples.max(1) as u128;
    // Below `samples`, a usize.
    usize::try_from(position).unwrap_or(0)
}

/// The step a resumed run starts from, once the checkpoint is held to the data it is given
/// (`record`) and the steps still to train fit.
fn resume_position(c: &Checkpoint, record: &DataRecord, steps: usize) -> Result<usize, JobError> {
    let Some(recorded) = c.data else {
        return Err(JobError::ResumeNoData);
    };
    if recorded != *record {
        return Err(JobError::ResumeData {
            checkpoint: recorded,
            data: *record,
        });
    }
    // Every checkpoint this run writes must load again: its last step is at most MAX_STEP
    // too (and then fits a usize on a 64-bit host; on a 32-bit one it may not).
    c.step
        .checked_add(steps as u64)
        .filter(|&last| last <= MAX_STEP)
        .and_then(|last| usize::try_from(last).ok())
        .map(|last| last - steps)
        .ok_or(JobError::ResumeSteps {
            step: c.step,
            steps,
        })
}

/// The rows of `values` (`[items, replicas, width]`, flat) of the replicas in `window`, as
/// `[items, local, width]`: what this instance's anchors hold.
fn window_rows(values: &[f64], items: usize, replicas: usize, window: InstanceWindow) -> Vec<f64> {
    let width = values.len() / (items * replicas).max(1);
    let mut out = Vec::with_capacity(items * window.local * width);
    for j in 0..items {
        for r in window.offset..window.offset + window.local {
            let row = (j * replicas + r) * width;
            out.extend_from_slice(&values[row..row + width]);
        }
    }
    out
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
