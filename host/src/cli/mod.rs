//! The `tessera` command: its arguments, and its subcommands, one file each.

pub(crate) mod inspect;
pub(crate) mod layout;
pub(crate) mod parse;
pub(crate) mod train;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;

use inspect::InspectArgs;
use layout::LayoutArgs;
use parse::count;
use train::TrainArgs;

use crate::transport::InheritedDevice;

/// Bounds of the hidden `device` subcommand's `--memory`: a device's memory per replica
/// (`placement::DEVICE_MEMORY`); `devices` takes a device's whole memory, all its lanes'
/// (`placement::MAX_DEVICE_BYTES`).
const MIN_DEVICE_MEMORY: usize = *crate::placement::DEVICE_MEMORY.start();
const MAX_DEVICE_MEMORY: usize = *crate::placement::DEVICE_MEMORY.end();
const MAX_DEVICE_BYTES: usize = crate::placement::MAX_DEVICE_BYTES;

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
    // Boxed: its options outweigh every other command's.
    Train(Box<TrainArgs>),
    /// Show what a checkpoint or a saved executable holds.
    Inspect(InspectArgs),
    /// Show how a variable is grouped, sharded and placed on the replicas.
    Layout(LayoutArgs),
    /// Serve one simulated device on stdin/stdout (the child-process placement of a
    /// session's worker).
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
        /// Shared memory inherited from the host, by descriptor number: the device's
        /// memory (`--memory` bytes), which the host reads and writes in place.
        #[arg(long, requires = "window_fd")]
        memory_fd: Option<u32>,
        /// A shared-memory window inherited from the host, by descriptor number: bulk
        /// bytes pass through it.
        #[arg(long, requires = "window_bytes")]
        window_fd: Option<u32>,
        /// The window's size in bytes.
        #[arg(long, requires = "window_fd")]
        window_bytes: Option<usize>,
    },
    /// Serve a share of a training runtime's simulated devices, each on descriptors
    /// inherited from the host (the child-process placement of a training runtime).
    #[command(hide = true)]
    Devices {
        /// Bytes of each device's memory, all its lanes' (4096–4294967295).
        #[arg(
            long,
            value_parser = count::<MIN_DEVICE_MEMORY, MAX_DEVICE_BYTES>,
            allow_negative_numbers = true
        )]
        memory: usize,
        /// Bytes of each device's bulk window.
        #[arg(long)]
        window_bytes: usize,
        /// The shared memory holding every device's message rings, by descriptor number.
        #[arg(long)]
        rings: u32,
        /// One device, by the descriptors it inherits: REPLICA:MEMORY:WINDOW (its replica,
        /// its memory and its window); its rings are the n-th of `--rings`.
        #[arg(long = "device", required = true)]
        devices: Vec<InheritedDevice>,
    },
}

/// Logs (retries, timeouts, device errors, processes started) go to stderr at the level
/// `TESSERA_LOG` names (error, warn, info, debug, trace; warn when unset or unreadable).
/// The command sets this up itself; a host program (the Python package) calls it once.
pub fn init_logging() {
    let level = std::env::var("TESSERA_LOG")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(tracing_subscriber::filter::LevelFilter::WARN);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        // A process that runs the command twice (a Python program) keeps its first logger.
        .try_init()
        .ok();
}

/// Runs the `tessera` command on `args` (the program's name first, as
/// [`std::env::args_os`] gives them) and returns its exit status: the `tessera` binary
/// and the Python package's `tessera` script both call it.
pub fn main<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // --help, --version: printed, and the caller (a Python program too) goes on.
        Err(e) if !e.use_stderr() => {
            return match e.print() {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            };
        }
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
            if let Err(e) = crate::transport::children::stop_on_signals() {
                eprintln!("error: cannot watch for signals: {e}");
                return ExitCode::FAILURE;
            }
            train::run(*args)
        }
        Command::Inspect(args) => inspect::run(args),
        Command::Layout(args) => layout::run(args),
        Command::Device {
            replica,
            memory,
            memory_fd,
            window_fd,
            window_bytes,
        } => match crate::transport::run_device_process(
            replica,
            memory,
            crate::transport::Inherited {
                memory: memory_fd,
                window: window_fd.zip(window_bytes),
            },
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tessera device {replica}: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Devices {
            memory,
            window_bytes,
            rings,
            devices,
        } => match crate::transport::run_process_share(memory, window_bytes, rings, &devices) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                let replicas: Vec<u32> = devices.iter().map(|d| d.replica).collect();
                eprintln!("tessera devices {replicas:?}: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Retrieval {
    OnePerGroup,
    AllReplicas,
}

/// Prints `report` as pretty JSON, or as the table `render` makes of it.
pub(crate) fn print_report<T: Serialize>(
    report: &T,
    json: bool,
    render: impl FnOnce(&T) -> String,
) -> ExitCode {
    if json {
        match serde_json::to_string_pretty(report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", render(report));
    }
    ExitCode::SUCCESS
}
