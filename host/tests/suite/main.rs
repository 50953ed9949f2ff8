//! The host's end-to-end suites, in one test binary: each module is one suite (what was
//! one file under `host/tests/`, one binary each), so `cargo test` links `tessera-host`
//! into a test once instead of once per suite.
//!
//! Tests of every module run in parallel in this one process. A test that looks for its
//! device processes among this process's children therefore finds them by something of
//! their own — a `--memory` size no other test uses (see [`common`]) — never by counting
//! every `tessera device` child. Temporary files and directories carry the suite's name as
//! well as the process id.
//!
//! QEMU tests take [`common::exclusive`]: one QEMU job at a time.
//!
//! Two suites are test targets of their own: the multi-instance suite (`mpi.rs`), built with
//! `--features mpi` only, and the fault-injection suite (`fault_injection.rs`), whose 15 ms
//! link deadlines ran out beside the other suites' device processes.

mod common;

mod bounds;
mod busy_device;
mod checkpoint;
mod cli_arguments;
mod custom_kernel;
mod dead_device;
mod delayed_link;
mod device_session;
mod file_trust;
mod layout_cli;
mod loss_line;
mod process_share;
mod runtime_parity;
mod serial_port;
mod session_errors;
mod session_in_place;
mod session_loader;
mod session_registers;
mod session_scenarios;
mod signals;
mod step_copies;
mod step_failure;
mod train_cli;
mod weights_into;
