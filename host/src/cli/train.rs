//! `tessera train`: its arguments, the job they make, and the report.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::runtime::check::CheckError;
use crate::runtime::Placement;
use crate::train::model::default_anchors;
use crate::train::{
    DataSource, TrainJob, TrainReport, MAX_ACCUMULATION, MAX_BATCHES_PER_STEP, MAX_CLASSES,
    MAX_HIDDEN, MAX_SAMPLES, MAX_STEPS, MAX_TRAIN_REPLICAS,
};
use clap::ValueEnum;
use tessera_core::grouping::{CommGroup, RetrievalMode};
use tessera_core::program::{AnchorTensor, Sharding, MAX_MICRO_BATCH};
use tessera_core::stream::AnchorReturnType;

use super::parse::{anchor, baud, count, dropout, learning_rate, momentum, tolerance};
use super::Retrieval;

#[derive(clap::Args)]
pub(crate) struct TrainArgs {
    /// Number of replicas (1–64).
    #[arg(
        long,
        default_value_t = 4,
        value_parser = count::<1, MAX_TRAIN_REPLICAS>,
        allow_negative_numbers = true
    )]
    replicas: usize,
    /// Comm group of the first layer, whose weight is sharded across it: all, none,
    /// consecutive:K or orthogonal:K, K dividing --replicas.
    #[arg(long, default_value = "all")]
    comm: CommGroup,
    /// Comm group of the second layer (unsharded).
    #[arg(long, default_value = "consecutive:2")]
    output_comm: CommGroup,
    /// How the first layer's weight is split across its group.
    #[arg(long, value_enum, default_value_t = Shard::Balanced)]
    shard: Shard,
    /// How weights come back to the host.
    #[arg(long, value_enum, default_value_t = Retrieval::OnePerGroup)]
    retrieval: Retrieval,
    /// Hidden units (1–256).
    #[arg(
        long,
        default_value_t = 24,
        value_parser = count::<1, MAX_HIDDEN>,
        allow_negative_numbers = true
    )]
    hidden: usize,
    /// Train on this safetensors file (`inputs`: float32, samples × features; `labels`:
    /// int32 or int64, one per sample) instead of the embedded spirals.
    #[arg(long, value_name = "FILE")]
    data: Option<PathBuf>,
    /// Samples of the embedded spirals (classes–1048576).
    #[arg(
        long,
        default_value_t = 3000,
        value_parser = count::<2, MAX_SAMPLES>,
        allow_negative_numbers = true
    )]
    samples: usize,
    /// Classes (spiral arms) of the embedded data (2–16).
    #[arg(
        long,
        default_value_t = 3,
        value_parser = count::<2, MAX_CLASSES>,
        allow_negative_numbers = true
    )]
    classes: usize,
    /// Batches per step (1–1024; batches per step × accumulation at most 65535, and one
    /// step's arrays, batches × accumulation × replicas × (features + 1) × 4 bytes, at
    /// most 64 MiB).
    #[arg(
        long,
        default_value_t = 2,
        value_parser = count::<1, MAX_BATCHES_PER_STEP>,
        allow_negative_numbers = true
    )]
    batches_per_step: usize,
    /// Micro-batches per batch, gradient accumulation (1–1024).
    #[arg(
        long,
        default_value_t = 32,
        value_parser = count::<1, MAX_ACCUMULATION>,
        allow_negative_numbers = true
    )]
    accumulation: usize,
    /// Samples per micro-batch (1–1024): each device computes them as one matrix. A
    /// micro-batch of B with accumulation A trains as B = 1 with accumulation A·B does.
    #[arg(
        long,
        default_value_t = 1,
        value_parser = count::<1, { MAX_MICRO_BATCH as usize }>,
        allow_negative_numbers = true
    )]
    micro_batch_size: usize,
    /// Training steps (1–1000000).
    #[arg(
        long,
        default_value_t = 40,
        value_parser = count::<1, MAX_STEPS>,
        allow_negative_numbers = true
    )]
    steps: usize,
    /// SGD learning rate (a finite number in (0, 10]).
    #[arg(
        long,
        default_value_t = 0.7,
        value_parser = learning_rate,
        allow_negative_numbers = true
    )]
    learning_rate: f32,
    /// Momentum (in [0, 1); 0 is plain SGD).
    #[arg(
        long,
        default_value_t = 0.9,
        value_parser = momentum,
        allow_negative_numbers = true
    )]
    momentum: f32,
    /// Dropout probability after the hidden layer (in [0, 1)).
    #[arg(
        long,
        default_value_t = 0.1,
        value_parser = dropout,
        allow_negative_numbers = true
    )]
    dropout: f32,
    /// Anchor a tensor (`loss` or `output`) with a return type: NAME=all, NAME=final,
    /// NAME=sum or NAME=everyn:P (P dividing --batches-per-step); repeat for both.
    /// Default: loss=all and output=all.
    #[arg(long, value_name = "NAME=TYPE", value_parser = anchor)]
    anchor: Vec<(AnchorTensor, AnchorReturnType)>,
    /// Seed of the data, the starting weights and the replicas' RNGs (refused with
    /// --resume: a resumed run keeps its checkpoint's seed).
    #[arg(long, default_value_t = 42, conflicts_with = "resume")]
    seed: u64,
    /// Where the devices run.
    #[arg(long, value_enum, default_value_t = Where::Thread)]
    placement: Where,
    /// Firmware ELF for `--placement qemu` (a hard-float build runs on QEMU mps2-an386,
    /// Cortex-M4F; a thumbv7m build on mps2-an385, Cortex-M3; a riscv32imac build on the
    /// RISC-V virt board).
    #[arg(
        long,
        value_name = "ELF",
        default_value = "target/thumbv7em-none-eabihf/firmware/tessera-firmware"
    )]
    firmware: PathBuf,
    /// Serial port of a board flashed with the firmware, for `--placement serial`: one per
    /// replica, in replica order (repeat: --port /dev/ttyACM0 --port /dev/ttyACM1 ...).
    #[arg(
        long = "port",
        value_name = "PATH",
        required_if_eq("placement", "serial")
    )]
    ports: Vec<PathBuf>,
    /// Baud rate of the serial ports (50–12000000).
    #[arg(
        long,
        default_value_t = crate::transport::DEFAULT_BAUD,
        value_parser = baud,
        allow_negative_numbers = true
    )]
    baud: u32,
    /// Largest relative difference from the host reference that passes (in [0, 1]).
    #[arg(
        long,
        default_value_t = 1e-3,
        value_parser = tolerance,
        allow_negative_numbers = true
    )]
    tolerance: f64,
    /// Save a checkpoint (weights, optimizer state, RNG state, step) to PATH at the end of
    /// the run, and every --every steps; the file is replaced atomically.
    #[arg(long, value_name = "PATH")]
    checkpoint: Option<PathBuf>,
    /// Steps between checkpoints (0–1000000; 0: only at the end).
    #[arg(
        long,
        default_value_t = 0,
        value_parser = count::<0, MAX_STEPS>,
        allow_negative_numbers = true
    )]
    every: usize,
    /// Resume from the checkpoint at PATH and train --steps more steps: bit for bit the run
    /// that wrote it would have continued, with its seed.
    #[arg(long, value_name = "PATH")]
    resume: Option<PathBuf>,
    /// Save the prepared program (and the device limits it was prepared for) to PATH.
    #[arg(long, value_name = "PATH")]
    save_executable: Option<PathBuf>,
    /// Run the saved executable at PATH instead of building the model from the options.
    #[arg(long, value_name = "PATH")]
    executable: Option<PathBuf>,
    /// Write a timeline of the run to FILE in the Chrome trace-event format (open it in
    /// ui.perfetto.dev or chrome://tracing): the host's steps, rounds, combines and waits,
    /// and on device threads each device's load, forward, backward, exchange, update and
    /// idle time. Across MPI ranks each rank writes a file of its own: run.json becomes
    /// run.rank0.json, run.rank1.json, …
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Shard {
    /// PopART's balanced layout.
    Balanced,
    /// Every shard full but the last (FSDP, DeepSpeed).
    PaddedTail,
    /// Not sharded: every member holds the whole weight.
    None,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Where {
    /// Threads of this process.
    Thread,
    /// Child processes.
    Process,
    /// QEMU processes running the firmware.
    Qemu,
    /// Boards flashed with the firmware, on serial ports (--port).
    Serial,
}

pub(crate) fn run(args: TrainArgs) -> ExitCode {
    if !args.ports.is_empty() && !matches!(args.placement, Where::Serial) {
        eprintln!("error: --port names a board's serial port, for --placement serial only");
        return ExitCode::from(2);
    }
    let job = match args.into_job() {
        Ok(job) => job,
        Err(e) => {
            eprintln!("error: cannot find the tessera binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The rules that span several arguments (groupings, step size): before anything
    // starts. The QEMU placement's firmware and tools are checked before anything is
    // printed or started (the runtime checks again for library users).
    // The serial placement's ports likewise.
    let checked = match &job.placement {
        Placement::Qemu(firmware) => crate::transport::check_firmware(firmware).map_err(Into::into),
        Placement::Serial { .. } => crate::placement::check(&job.placement, 0),
        Placement::Thread | Placement::Process(_) => Ok(()),
    };
    if let Err(e) = checked {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    if let Err(e) = job.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    // Under mpirun this process is one instance of the job (MPI must be built in); the
    // guard keeps MPI up until the job ends.
    let (instances, _mpi) = match crate::instance::from_environment() {
        Ok(found) => found,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rank = instances.rank();
    if rank == 0 {
        println!("{}", headline(&job, instances.size()));
    }
    match crate::train::train_in(&job, instances.clone()) {
        Ok(report) => verdict(&job, &report, rank),
        Err(e) => {
            match rank {
                0 => eprintln!("error: {e}"),
                _ => eprintln!("error: rank {rank}: {e}"),
            }
            // The other ranks may be waiting in a collective for this one: end the job.
            if instances.size() > 1 {
                instances.abort(2);
            }
            ExitCode::from(2)
        }
    }
}

impl TrainArgs {
    /// The job the arguments describe. Fails only when a child-process placement cannot
    /// find this binary, which its children run.
    fn into_job(self) -> std::io::Result<TrainJob> {
        let placement = match self.placement {
            Where::Thread => Placement::Thread,
            Where::Process => Placement::Process(std::env::current_exe()?),
            Where::Qemu => Placement::Qemu(self.firmware),
            Where::Serial => Placement::Serial {
                ports: self.ports,
                baud: self.baud,
            },
        };
        Ok(TrainJob {
            replicas: self.replicas,
            comm: self.comm,
            output_comm: self.output_comm,
            sharding: match self.shard {
                Shard::Balanced => Sharding::Balanced,
                Shard::PaddedTail => Sharding::PaddedTail,
                Shard::None => Sharding::None,
            },
            retrieval: match self.retrieval {
                Retrieval::OnePerGroup => RetrievalMode::OnePerGroup,
                Retrieval::AllReplicas => RetrievalMode::AllReplicas,
            },
            hidden: self.hidden,
            batches_per_step: self.batches_per_step,
            accumulation: self.accumulation,
            micro_batch_size: self.micro_batch_size,
            steps: self.steps,
            learning_rate: self.learning_rate,
            momentum: self.momentum,
            dropout: self.dropout,
            anchors: if self.anchor.is_empty() {
                default_anchors()
            } else {
                self.anchor
            },
            data: match self.data {
                Some(path) => DataSource::File(path),
                None => DataSource::Spirals {
                    samples: self.samples,
                    classes: self.classes,
                },
            },
            seed: self.seed,
            placement,
            tolerance: self.tolerance,
            progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            checkpoint: self.checkpoint,
            every: self.every,
            resume: self.resume,
            save_executable: self.save_executable,
            executable: self.executable,
            trace: self.trace,
        })
    }
}

/// The line that says what `job` trains, on how many `instances`.
fn headline(job: &TrainJob, instances: usize) -> String {
    let data = match &job.data {
        DataSource::Spirals { samples, classes } => {
            format!("{classes} spirals ({samples} samples)")
        }
        DataSource::File(path) => path.display().to_string(),
    };
    let shard = match &job.sharding {
        Sharding::None => "unsharded".to_string(),
        Sharding::Balanced => "sharded (balanced)".to_string(),
        Sharding::PaddedTail => "sharded (padded tail)".to_string(),
        Sharding::Explicit { .. } => "sharded (explicit)".to_string(),
    };
    let across = match instances {
        1 => String::new(),
        n => format!(" across {n} instances"),
    };
    let samples = match job.micro_batch_size {
        1 => String::new(),
        n => format!(" of {n} samples"),
    };
    format!(
        "training a {}-unit perceptron on {data} with {} replicas{across}: layer 1 in {} \
         ({shard}), layer 2 in {}; {} steps of {}×{} micro-batches{samples}",
        job.hidden,
        job.replicas,
        job.comm,
        job.output_comm,
        job.steps,
        job.batches_per_step,
        job.accumulation
    )
}

/// Rank 0 prints the report; the exit status says whether this rank's accelerator matched
/// the host reference, and if not, the check that failed is on stderr.
fn verdict(job: &TrainJob, report: &TrainReport, rank: usize) -> ExitCode {
    if rank == 0 {
        print!("{}", report.summary(job));
    }
    if report.passed(job.tolerance) {
        if rank == 0 {
            println!("ok: the accelerator matches the host reference");
        }
        return ExitCode::SUCCESS;
    }
    let on = if rank == 0 {
        String::new()
    } else {
        format!(" (rank {rank})")
    };
    // The check that failed, with the step and tensor of its largest error.
    let (what, check) = if report.anchor_check.within(job.tolerance) {
        ("weights", &report.weight_check)
    } else {
        ("anchors", &report.anchor_check)
    };
    if let Err(CheckError::Overflowed { .. }) = check.outcome {
        eprintln!("error: the training overflowed{on}: {what} {check}");
        return ExitCode::FAILURE;
    }
    eprintln!(
        "error: the accelerator differs from the host reference{on} beyond {:e}: \
         {what} {check}",
        job.tolerance
    );
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        train: TrainArgs,
    }

    /// Catches `TrainJob::default()` drifting from the command's defaults: benches and
    /// tests that say they run "the default job" build it from `TrainJob::default()`.
    #[test]
    fn the_command_without_options_runs_the_default_job() {
        let args = Command::parse_from(["train"]).train;
        let job = TrainJob {
            progress: false,
            ..args.into_job().unwrap()
        };
        assert_eq!(job, TrainJob::default());
    }
}
