//! Across the ranks of an MPI job from Python: `mpirun -np N python script.py` runs one
//! script on every rank, and this module decides what a session or a runtime is there.
//!
//! # Rules
//!
//! - **When.** A process `mpirun` started (its environment says so) is one rank of a job:
//!   `tessera.Session` spans the ranks and `tessera.Runtime` is one instance of the job.
//!   Any other process is one host, as if MPI did not exist. A package built without the
//!   cargo feature `mpi` refuses to start either under `mpirun`, naming the install option
//!   that adds it — rather than letting every rank run a job of its own, silently.
//! - **One MPI for the interpreter.** The first session or runtime under `mpirun`
//!   initializes MPI (for calls from several threads: a session's post office works beside
//!   the controller) and it stays up for the interpreter's life, so runtimes may come and
//!   go. It is finalized at the interpreter's exit, or when a session across the ranks
//!   ends: its serving ranks end with it, so nothing can follow it on any rank, and asking
//!   for MPI afterwards is refused with that reason. A program that initialized MPI itself
//!   (mpi4py does, on import) is refused too: MPI is initialized once per process.
//! - **The serving ranks.** On every rank but 0, `tessera.Session(...)` serves its share
//!   of the workers until rank 0's session ends, finalizes MPI and raises
//!   `SystemExit(0)`: the rest of the script runs on rank 0 only, and Python's exit still
//!   runs its `atexit` handlers and flushes its output (ending the process from Rust
//!   would lose both).
//! - **The end.** At exit, a session across the ranks still open is shut down first (its
//!   serving ranks are waiting for it), then MPI is finalized — unless the script is ending
//!   on an uncaught exception with no session to end: then the job is aborted
//!   (`MPI_Abort`), since its other ranks may be waiting in a collective for this one and
//!   would otherwise wait for the MPI deadline. A rank that dies ends the job (`mpirun`
//!   ends every rank, naming the one that failed), as in Rust (`tessera_host::session::ranks`).

#[cfg(feature = "mpi")]
mod mpi;
#[cfg(not(feature = "mpi"))]
mod without;

#[cfg(feature = "mpi")]
pub(crate) use self::mpi::{_at_exit, instances, session, session_ended};
#[cfg(not(feature = "mpi"))]
pub(crate) use self::without::{instances, session, session_ended};

use pyo3::PyErr;
#[cfg(feature = "mpi")]
use tessera_host::instance::InstanceError;

#[cfg(feature = "mpi")]
use crate::error::Raise;
use crate::error::{RuntimeError, SessionError};

/// True when the package was built with the cargo feature `mpi` (`tessera.HAS_MPI`).
pub(crate) const HAS_MPI: bool = cfg!(feature = "mpi");

/// The class that asked for MPI: a refusal is its exception (`SessionError` or
/// `RuntimeError`), of the kind the Rust error it stands for has (the variant that wraps an
/// `InstanceError`: `"Instances"` for a session, `"Instance"` for a runtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// `tessera.Session`.
    Session,
    /// `tessera.Runtime`.
    Runtime,
}

impl Part {
    /// `error` as this part's exception (only MPI's set-up raises one).
    #[cfg(feature = "mpi")]
    fn refuse(self, error: InstanceError) -> PyErr {
        match self {
            Part::Session => tessera_host::session::SessionError::from(error).raise(),
            Part::Runtime => tessera_host::runtime::RuntimeError::from(error).raise(),
        }
    }

    /// A refusal the Rust side has no message for (said for Python: the install option, a
    /// finalized MPI), as this part's exception of the kind `refuse` gives.
    fn refuse_with(self, message: String) -> PyErr {
        match self {
            Part::Session => crate::error::exception::<SessionError>(
                format!("the session across MPI ranks: {message}"),
                "Instances",
                Some(Vec::new()),
            ),
            Part::Runtime => crate::error::exception::<RuntimeError>(
                format!("between instances: {message}"),
                "Instance",
                None,
            ),
        }
    }
}
