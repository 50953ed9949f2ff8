//! The `tessera` command (its arguments and subcommands live in `tessera_host::cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    tessera_host::cli::main(std::env::args_os())
}
