//! `tessera inspect`: what a checkpoint or a saved executable holds.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(crate) struct InspectArgs {
    /// A checkpoint or a saved executable.
    path: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: InspectArgs) -> ExitCode {
    let report = match crate::inspect::inspect(&args.path) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {}: {e}", args.path.display());
            return ExitCode::from(2);
        }
    };
    super::print_report(&report, args.json, crate::inspect::render)
}
