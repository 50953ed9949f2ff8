//! The `tessera` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{AnchorTensor, Sharding};
use tessera_core::shard::LayoutKind;
use tessera_core::stream::AnchorReturnType;
use tessera_host::layout::{svg, table, Report, Request, MAX_ELEMENTS, MAX_REPLICAS};
use tessera_host::runtime::Placement;
use tessera_host::train::model::default_anchors;
use tessera_host::train::{
    DataSource, TrainJob, MAX_ACCUMULATION, MAX_BATCHES_PER_STEP, MAX_CLASSES, MAX_HIDDEN,
    MAX_LEARNING_RATE, MAX_SAMPLES, MAX_STEPS, MAX_TOLERANCE, MAX_TRAIN_REPLICAS,
};

/// Bounds of the hidden `device` subcommand's `--memory`: 4 KiB to 1 GiB.
const MIN_DEVICE_MEMORY: usize = 4 << 10;
const MAX_DEVICE_MEMORY: usize = 1 << 30;

// Every numeric argument goes through a parser that enforces its documented range, so
// clap reports "invalid value 'X' for '--arg <ARG>': ..." (one line, exit status 2).
// The ranges in the doc lines below are these constants; `TrainJob::validate` and
// `Report::build` check the same bounds for library callers.

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "Data movement for replicated accelerators"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a perceptron classifier on the simulated accelerator and check it against the
    /// host.
    Train(TrainArgs),
    /// Show what a checkpoint or a saved executable holds.
    Inspect(InspectArgs),
    /// Show how a variable is grouped, sharded and placed on the replicas.
    Layout(LayoutArgs),
    /// Serve one simulated device on stdin/stdout (the child-process placement).
    #[command(hide = true)]
    Device {
        /// The replica this device is.
        #[arg(long)]
        replica: u32,
        /// Bytes of device memory (4096–1073741824).
        #[arg(
            long,
            default_value_t = 16 << 20,
            value_parser = count::<MIN_DEVICE_MEMORY, MAX_DEVICE_MEMORY>,
            allow_negative_numbers = true
        )]
        memory: usize,
        /// A shared-memory window inherited from the host, by descriptor number: bulk
        /// bytes pass through it.
        #[arg(long, requires = "window_bytes")]
        window_fd: Option<u32>,
        /// The window's size in bytes.
        #[arg(long, requires = "window_fd")]
        window_bytes: Option<usize>,
    },
}

#[derive(clap::Args)]
struct LayoutArgs {
    /// Number of replicas, global across all instances (1–4096).
    #[arg(long, value_parser = count::<1, MAX_REPLICAS>, allow_negative_numbers = true)]
    replicas: usize,
    /// Explicit grouping as STRIDE:SIZE (each 1–4096; STRIDE × SIZE must divide --replicas).
    #[arg(long, value_parser = parse_stride_size, conflicts_with = "comm")]
    grouping: Option<(usize, usize)>,
    /// Comm group: all, none, consecutive:K or orthogonal:K, K dividing --replicas [default: all].
    #[arg(long)]
    comm: Option<CommGroup>,
    /// How weights come back to the host.
    #[arg(long, value_enum, default_value_t = Retrieval::OnePerGroup)]
    retrieval: Retrieval,
    /// The variable's shape on one replica, as D0,D1,... (at most 8 dimensions, each
    /// 0–1073741824, at most 1073741824 elements in all) [default: scalar].
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = count::<0, MAX_ELEMENTS>,
        allow_negative_numbers = true
    )]
    shape: Vec<usize>,
    /// Shard the variable over this many replicas of each group (1–4096, dividing the group size).
    #[arg(long, value_parser = count::<1, MAX_REPLICAS>, allow_negative_numbers = true)]
    shard_domain: Option<usize>,
    /// Shard layout rule [default: balanced].
    #[arg(long, value_enum, requires = "shard_domain")]
    layout: Option<Layout>,
    /// Number of instances (host processes) splitting the replicas evenly (1–4096, dividing --replicas).
    #[arg(
        long,
        default_value_t = 1,
        value_parser = count::<1, MAX_REPLICAS>,
        allow_negative_numbers = true
    )]
    instances: usize,
    /// Which instance's replicas to place (0–4095, below --instances).
    #[arg(
        long,
        default_value_t = 0,
        value_parser = count::<0, { MAX_REPLICAS - 1 }>,
        allow_negative_numbers = true
    )]
    instance: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw the layout as an SVG picture into FILE (at most 256 replicas are drawn).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

#[derive(clap::Args)]
struct TrainArgs {
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
        default_value_t = 32,
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
        default_value_t = 4,
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
    /// Training steps (1–1000000).
    #[arg(
        long,
        default_value_t = 100,
        value_parser = count::<1, MAX_STEPS>,
        allow_negative_numbers = true
    )]
    steps: usize,
    /// SGD learning rate (a finite number in (0, 10]).
    #[arg(
        long,
        default_value_t = 0.2,
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
    /// Seed of the data, the starting weights and the replicas' RNGs.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Where the devices run.
    #[arg(long, value_enum, default_value_t = Where::Thread)]
    placement: Where,
    /// Firmware ELF for `--placement qemu`.
    #[arg(
        long,
        value_name = "ELF",
        default_value = "target/thumbv7m-none-eabi/firmware/tessera-firmware"
    )]
    firmware: PathBuf,
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
    /// that wrote it would have continued.
    #[arg(long, value_name = "PATH")]
    resume: Option<PathBuf>,
    /// Save the prepared program (and the device limits it was prepared for) to PATH.
    #[arg(long, value_name = "PATH")]
    save_executable: Option<PathBuf>,
    /// Run the saved executable at PATH instead of building the model from the options.
    #[arg(long, value_name = "PATH")]
    executable: Option<PathBuf>,
}

#[derive(clap::Args)]
struct InspectArgs {
    /// A checkpoint or a saved executable.
    path: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Shard {
    /// PopART's balanced layout.
    Balanced,
    /// Every shard full but the last (FSDP, DeepSpeed).
    PaddedTail,
    /// Not sharded: every member holds the whole weight.
    None,
}

#[derive(Clone, Copy, ValueEnum)]
enum Where {
    /// Threads of this process.
    Thread,
    /// Child processes.
    Process,
    /// QEMU processes running the firmware.
    Qemu,
}

#[derive(Clone, Copy, ValueEnum)]
enum Retrieval {
    OnePerGroup,
    AllReplicas,
}

#[derive(Clone, Copy, ValueEnum)]
enum Layout {
    Balanced,
    PaddedTail,
}

/// A whole number in `MIN..=MAX`.
fn count<const MIN: usize, const MAX: usize>(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (MIN..=MAX).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number in {MIN}..={MAX}")),
    }
}

/// A number that `ok` accepts; otherwise an error saying it must be `rule`.
fn number<T>(text: &str, ok: impl Fn(T) -> bool, rule: &str) -> Result<T, String>
where
    T: std::str::FromStr + Copy,
{
    match text.parse::<T>() {
        Ok(value) if ok(value) => Ok(value),
        _ => Err(format!("expected {rule}")),
    }
}

fn learning_rate(text: &str) -> Result<f32, String> {
    // "1e39" parses as an f32 infinity: refused like "inf".
    number(
        text,
        |v: f32| v.is_finite() && v > 0.0 && v <= MAX_LEARNING_RATE,
        &format!("a finite number in (0, {MAX_LEARNING_RATE}]"),
    )
}

fn momentum(text: &str) -> Result<f32, String> {
    number(text, |v: f32| (0.0..1.0).contains(&v), "a number in [0, 1)")
}

/// `loss=TYPE` or `output=TYPE`, TYPE an anchor return type.
fn anchor(text: &str) -> Result<(AnchorTensor, AnchorReturnType), String> {
    let rule = "expected NAME=TYPE: NAME loss or output, TYPE all, final, sum or everyn:P";
    let (name, kind) = text.split_once('=').ok_or(rule)?;
    let tensor = [AnchorTensor::Loss, AnchorTensor::Output]
        .into_iter()
        .find(|t| t.name() == name)
        .ok_or(rule)?;
    let kind = kind.parse().map_err(|e| format!("{rule} ({e})"))?;
    Ok((tensor, kind))
}

fn dropout(text: &str) -> Result<f32, String> {
    number(
        text,
        |v: f32| (0.0..1.0).contains(&v),
        "a probability in [0, 1)",
    )
}

fn tolerance(text: &str) -> Result<f64, String> {
    number(
        text,
        |v: f64| (0.0..=MAX_TOLERANCE).contains(&v),
        &format!("a finite number in [0, {MAX_TOLERANCE}]"),
    )
}

fn parse_stride_size(text: &str) -> Result<(usize, usize), String> {
    let rule = format!("expected STRIDE:SIZE, two whole numbers in 1..={MAX_REPLICAS}");
    let (stride, size) = text.split_once(':').ok_or(rule.clone())?;
    let part = |t: &str| count::<1, MAX_REPLICAS>(t).map_err(|_| rule.clone());
    Ok((part(stride)?, part(size)?))
}

/// Logs (retries, timeouts, device errors, processes started) go to stderr at the level
/// `TESSERA_LOG` names (error, warn, info, debug, trace; warn when unset or unreadable).
fn init_logging() {
    let level = std::env::var("TESSERA_LOG")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(tracing_subscriber::filter::LevelFilter::WARN);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .init();
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // One line naming the problem, as for every other invalid input: clap's first
            // paragraph, folded.
            let text = e.render().to_string();
            let first: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|line| !line.is_empty())
                .collect();
            eprintln!("{}", first.join(" "));
            return ExitCode::from(2);
        }
    };
    init_logging();
    match cli.command {
        Command::Train(args) => {
            // Ctrl-C or a kill must not leave device processes or QEMUs behind.
            if let Err(e) = tessera_host::transport::children::stop_on_signals() {
                eprintln!("error: cannot watch for signals: {e}");
                return ExitCode::FAILURE;
            }
            train(args)
        }
        Command::Inspect(args) => inspect(args),
        Command::Layout(args) => layout(args),
        Command::Device {
            replica,
            memory,
            window_fd,
            window_bytes,
        } => match device(replica, memory, window_fd.zip(window_bytes)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tessera device {replica}: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

/// One device on stdin/stdout (frames only; a closed stdin — the host went away — ends
/// it), with bulk bytes through the host's shared window when it names one.
fn device(replica: u32, memory: usize, window: Option<(u32, usize)>) -> std::io::Result<()> {
    use tessera_host::transport::{run_device, run_device_with_window, SharedWindow};
    // Stdout is line-buffered: on binary frames that is a write per 0x0A byte. The device
    // flushes after every frame, so a plain buffer loses nothing.
    let stdout = std::io::BufWriter::with_capacity(128 << 10, std::io::stdout().lock());
    let Some((fd, bytes)) = window else {
        return run_device(replica, memory, std::io::stdin(), stdout);
    };
    // The inherited descriptor, opened anew by its /proc name (no unsafe needed here).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{fd}"))?;
    let window = SharedWindow::open(file, bytes)?;
    run_device_with_window(replica, memory, std::io::stdin(), stdout, &window)
}

fn train(args: TrainArgs) -> ExitCode {
    let placement = match args.placement {
        Where::Thread => Placement::Thread,
        Where::Process => match std::env::current_exe() {
            Ok(exe) => Placement::Process(exe),
            Err(e) => {
                eprintln!("error: cannot find the tessera binary: {e}");
                return ExitCode::FAILURE;
            }
        },
        Where::Qemu => Placement::Qemu(args.firmware),
    };
    let job = TrainJob {
        replicas: args.replicas,
        comm: args.comm,
        output_comm: args.output_comm,
        sharding: match args.shard {
            Shard::Balanced => Sharding::Balanced,
            Shard::PaddedTail => Sharding::PaddedTail,
            Shard::None => Sharding::None,
        },
        retrieval: match args.retrieval {
            Retrieval::OnePerGroup => RetrievalMode::OnePerGroup,
            Retrieval::AllReplicas => RetrievalMode::AllReplicas,
        },
        hidden: args.hidden,
        batches_per_step: args.batches_per_step,
        accumulation: args.accumulation,
        steps: args.steps,
        learning_rate: args.learning_rate,
        momentum: args.momentum,
        dropout: args.dropout,
        anchors: if args.anchor.is_empty() {
            default_anchors()
        } else {
            args.anchor
        },
        data: match args.data {
            Some(path) => DataSource::File(path),
            None => DataSource::Spirals {
                samples: args.samples,
                classes: args.classes,
            },
        },
        seed: args.seed,
        placement,
        tolerance: args.tolerance,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        checkpoint: args.checkpoint,
        every: args.every,
        resume: args.resume,
        save_executable: args.save_executable,
        executable: args.executable,
    };
    // The rules that span several arguments (groupings, step size): before anything
    // starts. The QEMU placement's firmware and tools are checked before anything is
    // printed or started (the runtime checks again for library users).
    if let Placement::Qemu(firmware) = &job.placement {
        if let Err(e) = tessera_host::transport::check_firmware(firmware) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    if let Err(e) = job.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    // Under mpirun this process is one instance of the job (MPI must be built in); the
    // guard keeps MPI up until the job ends.
    let (instances, _mpi) = match tessera_host::instance::from_environment() {
        Ok(found) => found,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rank = instances.rank();
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
    if rank == 0 {
        let across = match instances.size() {
            1 => String::new(),
            n => format!(" across {n} instances"),
        };
        println!(
            "training a {}-unit perceptron on {data} with {} replicas{across}: layer 1 in {} \
             ({shard}), layer 2 in {}; {} steps of {}×{} micro-batches",
            job.hidden,
            job.replicas,
            job.comm,
            job.output_comm,
            job.steps,
            job.batches_per_step,
            job.accumulation
        );
    }
    match tessera_host::train::train_in(&job, instances) {
        Ok(report) => {
            if rank == 0 {
                print!("{}", report.summary(&job));
            }
            if report.passed(job.tolerance) {
                if rank == 0 {
                    println!("ok: the accelerator matches the host reference");
                }
                ExitCode::SUCCESS
            } else {
                let on = if rank == 0 {
                    String::new()
                } else {
                    format!(" (rank {rank})")
                };
                match (&report.anchor_error, &report.weight_error) {
                    (Err(e), _) => eprintln!(
                        "error: the accelerator differs from the host reference{on}: anchors: {e}"
                    ),
                    (_, Err(e)) => eprintln!(
                        "error: the accelerator differs from the host reference{on}: weights: {e}"
                    ),
                    _ => eprintln!(
                        "error: the accelerator differs from the host reference{on} beyond {:e}",
                        job.tolerance
                    ),
                }
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            match rank {
                0 => eprintln!("error: {e}"),
                _ => eprintln!("error: rank {rank}: {e}"),
            }
            ExitCode::from(2)
        }
    }
}

fn inspect(args: InspectArgs) -> ExitCode {
    let report = match tessera_host::inspect::inspect(&args.path) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {}: {e}", args.path.display());
            return ExitCode::from(2);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", tessera_host::inspect::render(&report));
    }
    ExitCode::SUCCESS
}

fn layout(args: LayoutArgs) -> ExitCode {
    let spec = match args.grouping {
        Some((stride, group_size)) => GroupingSpec::Strided { stride, group_size },
        None => GroupingSpec::Comm(args.comm.unwrap_or(CommGroup::All)),
    };
    let retrieval = match args.retrieval {
        Retrieval::OnePerGroup => RetrievalMode::OnePerGroup,
        Retrieval::AllReplicas => RetrievalMode::AllReplicas,
    };
    let kind = match args.layout {
        Some(Layout::PaddedTail) => LayoutKind::PaddedTail,
        _ => LayoutKind::Balanced,
    };
    let request = Request {
        replicas: args.replicas,
        spec,
        retrieval,
        shape: args.shape,
        shard: args.shard_domain.map(|domain| (domain, kind)),
        instances: args.instances,
        instance: args.instance,
    };
    let report = match Report::build(&request) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &args.svg {
        if let Err(e) = std::fs::write(path, svg::render(&report)) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", table::render(&report));
    }
    ExitCode::SUCCESS
}
