//! The `tessera` command's subcommands, one file each, and what they share.

pub(crate) mod inspect;
pub(crate) mod layout;
pub(crate) mod parse;
pub(crate) mod train;

use std::process::ExitCode;

use clap::ValueEnum;
use serde::Serialize;

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
