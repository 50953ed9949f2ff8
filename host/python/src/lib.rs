//! `tessera._native`: the extension module behind the `tessera` Python package.
//!
//! - `session`: `tessera.Session`, `Register`, `Function` — the SPMD session, a file per
//!   area (calls, copies, collectives, loads, …).
//! - `program`: `tessera.Program` — a core program built from Python.
//! - `runtime`: `tessera.Runtime` — the device runtime: weights, steps, anchors,
//!   optimizer values, seeds, RNG state, checkpoints and executables.
//! - `arrays`: NumPy arrays at the boundary (dtypes, bytes borrowed in place).
//! - `error`: Rust errors as Python exceptions, each with its `kind` (`error::kind`).
//! - `placement`: "thread", "process", "qemu", "serial".
//! - `ranks`: across the ranks of an MPI job (`mpirun -np N python script.py`): a session's
//!   controller on rank 0, a runtime as one instance of the job (cargo feature `mpi`).
//! - `baseline`: the Rust API timed in Rust, the Python benchmarks' baseline.
//! - `main`: the `tessera` command, for the script the package installs.
//!
//! # Panics
//!
//! None on purpose: every binding returns a Python exception. A panic that slipped
//! through reaches Python as `pyo3_runtime.PanicException`, never an abort.

// The crate has no public Rust API (its modules are private, and what `#[pymodule]`
// generates is `#[doc(hidden)]`): the lint holds the crate's own documentation and
// anything made public later; nothing needs an `allow`.
#![deny(missing_docs)]

mod arrays;
mod baseline;
mod error;
mod placement;
mod program;
mod ranks;
mod runtime;
mod session;

use pyo3::prelude::*;

/// Runs the `tessera` command on `sys.argv` and returns its exit status: the entry point
/// of the package's `tessera` script (the Rust binary runs the same code). Not for a
/// Python program's own use: `tessera train` then handles signals as the command does,
/// ending the process on Ctrl-C after stopping its devices.
#[pyfunction]
fn main(py: Python<'_>) -> PyResult<u8> {
    let argv: Vec<String> = py.import("sys")?.getattr("argv")?.extract()?;
    let code = py.detach(|| tessera_host::cli::main(argv));
    // ExitCode hides its number; the command returns 0, 1 or 2, and says which by Debug.
    Ok(exit_status(code))
}

/// The number inside an `ExitCode` (0 success, 1 failure, 2 bad usage).
fn exit_status(code: std::process::ExitCode) -> u8 {
    if code == std::process::ExitCode::SUCCESS {
        0
    } else if code == std::process::ExitCode::from(2) {
        2
    } else {
        1
    }
}

/// tessera: data movement for replicated accelerators.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // Retries, timeouts and device errors reach stderr as they do from the command, at the
    // level TESSERA_LOG names.
    tessera_host::cli::init_logging();
    m.add_class::<session::PySession>()?;
    m.add_class::<session::PyRegister>()?;
    m.add_class::<session::PyFunction>()?;
    m.add_class::<program::PyProgram>()?;
    m.add_class::<runtime::PyRuntime>()?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(baseline::_baseline_round_trip, m)?)?;
    m.add_function(wrap_pyfunction!(baseline::_baseline_call_sync, m)?)?;
    m.add_function(wrap_pyfunction!(baseline::_baseline_allreduce, m)?)?;
    m.add_function(wrap_pyfunction!(program::spirals, m)?)?;
    m.add_function(wrap_pyfunction!(program::initial_weights, m)?)?;
    m.add("TesseraError", py.get_type::<error::TesseraError>())?;
    m.add("SessionError", py.get_type::<error::SessionError>())?;
    m.add("RuntimeError", py.get_type::<error::RuntimeError>())?;
    m.add("CheckpointError", py.get_type::<error::CheckpointError>())?;
    m.add("ExecutableError", py.get_type::<error::ExecutableError>())?;
    m.add("TraceError", py.get_type::<error::TraceError>())?;
    m.add("ProgramError", py.get_type::<error::ProgramError>())?;
    m.add("MAX_REGISTERS", tessera_host::session::MAX_REGISTERS)?;
    m.add("HAS_MPI", ranks::HAS_MPI)?;
    // MPI, once a session or a runtime under mpirun started it, ends with the interpreter.
    #[cfg(feature = "mpi")]
    py.import("atexit")?
        .call_method1("register", (wrap_pyfunction!(ranks::_at_exit, m)?,))?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
