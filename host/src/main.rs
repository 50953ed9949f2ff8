//! The `tessera` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::shard::LayoutKind;
use tessera_host::layout::{svg, table, Report, Request};
use tessera_host::runtime::{ModelConfig, Placement};
use tessera_host::train::TrainJob;

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
    /// Train the linear model on the simulated accelerator and check it against the host.
    Train(TrainArgs),
    /// Show how a variable is grouped, sharded and placed on the replicas.
    Layout(LayoutArgs),
    /// Serve one simulated device on stdin/stdout (the child-process placement).
    #[command(hide = true)]
    Device {
        /// The replica this device is.
        #[arg(long)]
        replica: u32,
        /// Bytes of device memory.
        #[arg(long, default_value_t = 16 << 20)]
        memory: usize,
    },
}

#[derive(clap::Args)]
struct LayoutArgs {
    /// Number of replicas (global, across all instances).
    #[arg(long)]
    replicas: usize,
    /// Explicit grouping as STRIDE:SIZE.
    #[arg(long, value_parser = parse_stride_size, conflicts_with = "comm")]
    grouping: Option<(usize, usize)>,
    /// Comm group: all, none, consecutive:K or orthogonal:K [default: all].
    #[arg(long)]
    comm: Option<CommGroup>,
    /// How weights come back to the host.
    #[arg(long, value_enum, default_value_t = Retrieval::OnePerGroup)]
    retrieval: Retrieval,
    /// The variable's shape on one replica, as D0,D1,... [default: scalar].
    #[arg(long, value_delimiter = ',')]
    shape: Vec<usize>,
    /// Shard the variable over this many replicas of each group.
    #[arg(long)]
    shard_domain: Option<usize>,
    /// Shard layout rule [default: balanced].
    #[arg(long, value_enum, requires = "shard_domain")]
    layout: Option<Layout>,
    /// Number of instances (host processes) splitting the replicas evenly.
    #[arg(long, default_value_t = 1)]
    instances: usize,
    /// Which instance's replicas to place.
    #[arg(long, default_value_t = 0)]
    instance: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw the layout as an SVG picture into FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

#[derive(clap::Args)]
struct TrainArgs {
    /// Number of replicas.
    #[arg(long, default_value_t = 4)]
    replicas: usize,
    /// Comm group of the weight: all, none, consecutive:K or orthogonal:K.
    #[arg(long, default_value = "consecutive:2")]
    comm: CommGroup,
    /// Elements of one input sample.
    #[arg(long, default_value_t = 16)]
    inputs: usize,
    /// Elements of one output.
    #[arg(long, default_value_t = 4)]
    outputs: usize,
    /// Batches per step.
    #[arg(long, default_value_t = 4)]
    batches_per_step: usize,
    /// Micro-batches per batch (gradient accumulation).
    #[arg(long, default_value_t = 2)]
    accumulation: usize,
    /// Training steps.
    #[arg(long, default_value_t = 30)]
    steps: usize,
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.05)]
    learning_rate: f32,
    /// Input dropout probability.
    #[arg(long, default_value_t = 0.0)]
    dropout: f32,
    /// Seed of the data and of the replicas' RNGs.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Where the devices run.
    #[arg(long, value_enum, default_value_t = Where::Thread)]
    placement: Where,
    /// Firmware ELF for `--placement qemu`.
    #[arg(
        long,
        value_name = "ELF",
        default_value = "target/thumbv7m-none-eabi/release/tessera-firmware"
    )]
    firmware: PathBuf,
    /// Largest relative difference from the host reference that passes.
    #[arg(long, default_value_t = 1e-3)]
    tolerance: f64,
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

fn parse_stride_size(text: &str) -> Result<(usize, usize), String> {
    let rule = "expected STRIDE:SIZE, two whole numbers";
    let (stride, size) = text.split_once(':').ok_or(rule)?;
    Ok((
        stride.parse().map_err(|_| rule)?,
        size.parse().map_err(|_| rule)?,
    ))
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
    match cli.command {
        Command::Train(args) => train(args),
        Command::Layout(args) => layout(args),
        Command::Device { replica, memory } => {
            // Stdout carries frames only; a closed stdin (the host went away) ends it.
            match tessera_host::transport::run_device(
                replica,
                memory,
                std::io::stdin(),
                std::io::stdout(),
            ) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tessera device {replica}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
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
        grouping: GroupingSpec::Comm(args.comm),
        model: ModelConfig {
            inputs: args.inputs,
            outputs: args.outputs,
            batches_per_step: args.batches_per_step,
            accumulation: args.accumulation,
            learning_rate: args.learning_rate,
            dropout: args.dropout,
        },
        steps: args.steps,
        seed: args.seed,
        placement,
        tolerance: args.tolerance,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    println!(
        "training y = W·x ({}→{}) on {} replicas ({}), {} steps of {}×{} micro-batches",
        job.model.inputs,
        job.model.outputs,
        job.replicas,
        args.comm,
        job.steps,
        job.model.batches_per_step,
        job.model.accumulation
    );
    match tessera_host::train::train(&job) {
        Ok(report) => {
            print!("{}", report.summary(&job));
            if report.passed(job.tolerance) {
                println!("ok: the accelerator matches the host reference");
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "error: the accelerator differs from the host reference beyond {:e}",
                    job.tolerance
                );
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
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
