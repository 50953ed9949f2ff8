//! The scenarios above, and the sharded loader's tests, with the session spread over MPI
//! ranks (feature `mpi`): these tests start the suite's own binary under `mpirun -np 2`
//! and `-np 4` for one test at a time; rank 0 runs the scenario as the controller, the other ranks serve their share of
//! the workers (`Session::new` never returns there). A scenario asserts exact values
//! computed on the host, so passing across ranks is giving one host's results bit for bit.
//!
//! Left out: scenarios that open several sessions (a job has one session across ranks:
//! worker_count), the ones that look at this host's device processes (process placement
//! of double_shutdown, killed_worker_is_reported), and QEMU. A scenario runs on the ranks
//! that divide its workers.
#![cfg(feature = "mpi")]

use std::path::PathBuf;

#[path = "../../mpirun/mod.rs"]
mod mpirun;

/// Each scenario test and its workers.
const SCENARIOS: &[(&str, usize)] = &[
    ("collectives::allreduce", 2),
    ("collectives::allreduce_in_worker_order", 4),
    ("collectives::allreduce_ranks_first", 4),
    ("collectives::group_allreduce", 4),
    ("collectives::allgather", 2),
    ("collectives::group_allgather", 4),
    ("collectives::broadcast", 2),
    ("collectives::group_broadcast", 4),
    ("collectives::scatter", 2),
    ("collectives::scatter_by_count", 2),
    ("collectives::group_scatter", 4),
    ("collectives::gather", 2),
    ("collectives::group_gather", 4),
    ("collectives::next_group", 4),
    ("collectives::point_to_point", 4),
    ("collectives::tensor_parallel_mlp", 2),
    ("control_plane::integer_round_trip", 4),
    ("control_plane::float_argument", 4),
    ("control_plane::tensor_through_worker0", 2),
    ("control_plane::string_argument", 4),
    ("control_plane::shape_argument", 4),
    ("control_plane::chained_calls", 4),
    ("control_plane::register_reuse", 4),
    ("control_plane::ordered_copies", 2),
    ("disco_failures::failing_worker", 4),
    ("disco_failures::unknown_function", 4),
    ("disco_failures::refused_collectives", 4),
    ("disco_failures::register_outlives_session", 2),
];

/// The sharded loader's tests (each rank reads its own workers' parts), and a silent
/// remote worker's, with their workers, by full name.
const LOADER: &[(&str, usize)] = &[
    ("session_loader::scenario_23_split_in_threads", 2),
    ("session_loader::scenario_23_split_in_child_processes", 2),
    ("session_loader::scenario_24_replicated_in_threads", 2),
    (
        "session_loader::scenario_24_replicated_in_child_processes",
        2,
    ),
    ("session_loader::scenario_25_presharded_in_threads", 2),
    (
        "session_loader::a_split_that_does_not_divide_names_the_tensor",
        2,
    ),
    (
        "session_loader::a_split_on_a_missing_dimension_or_tensor_is_refused",
        2,
    ),
    (
        "session_loader::a_truncated_corrupt_or_missing_file_is_an_error_not_a_panic",
        2,
    ),
    (
        "session_loader::an_unsupported_dtype_is_an_error_naming_it",
        2,
    ),
    (
        "session_loader::a_worker_that_runs_out_of_memory_names_the_tensor_and_frees_the_load",
        2,
    ),
    (
        "session_loader::in_group_splits_give_each_group_the_whole_tensor",
        4,
    ),
    (
        "session_loader::presharded_files_that_disagree_are_refused",
        2,
    ),
];

/// Scenarios also run with their workers in child processes on every rank.
const ON_PROCESSES: &[&str] = &[
    "collectives::allreduce_in_worker_order",
    "collectives::allreduce_ranks_first",
    "collectives::group_allreduce",
    "collectives::tensor_parallel_mlp",
    "control_plane::register_reuse",
    "disco_failures::failing_worker",
];

/// Runs scenario test `test` (its full name) under `mpirun -np ranks`; its output on
/// failure.
fn across(test: &str, ranks: usize, dir: &std::path::Path) -> Result<(), String> {
    across_with(test, ranks, dir, &[])
}

/// [`across`] with `extra` arguments for the test binary.
fn across_with(
    test: &str,
    ranks: usize,
    dir: &std::path::Path,
    extra: &[&str],
) -> Result<(), String> {
    let exe = std::env::current_exe().expect("the suite's binary");
    let mut args = vec!["--exact", test, "--test-threads=1"];
    args.extend_from_slice(extra);
    let mut command = mpirun::mpirun(ranks, &exe, &args, dir);
    // A scenario takes a second or two: a hung one fails in a minute, not in five.
    command.env("MPIEXEC_TIMEOUT", "60");
    let out = mpirun::run(command);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Only rank 0 finishes the test (the others end once served): one result line.
    if out.status.success() && stdout.matches("1 passed").count() == 1 {
        return Ok(());
    }
    Err(format!(
        "{test} on {ranks} ranks: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Catches a session whose remote workers do not behave as local ones: wrong values
/// through a rank's link, global ids renumbered, a group crossing ranks combined wrongly,
/// a rank that never ends (mpirun's timeout), a failure reported without its worker.
#[test]
fn scenarios_across_two_and_four_ranks() {
    let dir: PathBuf = std::env::temp_dir().join(format!("tessera-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let mut failures = Vec::new();
    for &(scenario, workers) in SCENARIOS {
        let mut placements = vec!["thread"];
        if ON_PROCESSES.contains(&scenario) {
            placements.push("process");
        }
        for placement in placements {
            let test = format!("session_scenarios::{scenario}_{placement}");
            for ranks in [2, 4].into_iter().filter(|r| workers % r == 0) {
                if let Err(e) = across(&test, ranks, &dir) {
                    failures.push(e);
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Catches a sharded load across ranks that reads the wrong bytes for a rank's workers
/// (another part, another row's run), reports a refusal differently from one host, or
/// leaves registers behind.
#[test]
fn the_sharded_loader_across_two_and_four_ranks() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("tessera-ranks-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let mut failures = Vec::new();
    for &(test, workers) in LOADER {
        for ranks in [2, 4].into_iter().filter(|r| workers % r == 0) {
            if let Err(e) = across(test, ranks, &dir) {
                failures.push(e);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The QEMU scenarios with one QEMU per rank (each rank relays its worker's UART bytes):
/// catches a relay that loses or reorders bytes, or that leaves QEMU running when the
/// link ends (the job would not end).
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn qemu_scenarios_across_two_ranks() {
    let _exclusive = crate::common::exclusive();
    let dir: PathBuf =
        std::env::temp_dir().join(format!("tessera-ranks-qemu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let mut failures = Vec::new();
    for test in [
        "session_scenarios::control_plane::integer_round_trip_qemu",
        "session_scenarios::control_plane::tensor_through_worker0_qemu",
    ] {
        if let Err(e) = across_with(test, 2, &dir, &["--include-ignored"]) {
            failures.push(e);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
