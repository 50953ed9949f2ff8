//! The `tessera` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::shard::LayoutKind;
use tessera_host::layout::{svg, table, Report, Request};

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
