//! `tessera.Session`: the SPMD session (TVM Disco's controller and workers) from Python.
//!
//! # Contract
//!
//! - Every method is the Rust [`Session`]'s of the same name, with its rules (one order,
//!   pipelined calls whose failures come back at the next sync, destination-passing
//!   collectives checked before the first byte moves); see `tessera_host::session`.
//! - **The GIL is released** while the workers work: every method that reaches a worker
//!   lets other Python threads run meanwhile (and never waits for the session's lock, or
//!   frees a register on the workers, while holding it).
//! - **Ctrl-C while waiting.** A method that waits for the workers (a sync, a read, a
//!   collective, a function's lookup) waits in slices of [`SLICE`], looking for signals
//!   between them: a Ctrl-C is raised as `KeyboardInterrupt` within a slice. Nothing is
//!   cancelled — the commands already sent keep running on the workers and stay pending in
//!   order, and the session stays usable: the next sync waits for them and reports their
//!   failures (`shutdown()` abandons them instead). A NumPy array handed to a method is borrowed
//!   for the call (NumPy refuses to hand it to another writer meanwhile); a Python thread
//!   writing into it while a copy reads it races, as with any native library.
//! - **Registers are Python objects** ([`PyRegister`]): collected, or freed with `free()`,
//!   they free their id on every worker; a freed register or another session's is refused
//!   with an exception before anything is sent. After `shutdown()` every method raises
//!   `SessionError(kind="ShutDown")`; freeing then does nothing.
//! - A session is a context manager: leaving the `with` block shuts it down, and so does
//!   collecting it (the workers stop; child processes and QEMUs are reaped). A program
//!   that ends otherwise — a Ctrl-C's `KeyboardInterrupt`, an uncaught error, a kill —
//!   leaves no device behind either: each device process has a watcher that stops it
//!   once the Python process is gone.
//!
//! - **Across the ranks of an MPI job** (`mpirun -np N python script.py`, the package built
//!   with the cargo feature `mpi`): the constructor makes rank 0 the controller of a
//!   session whose workers are spread over the ranks, every other rank serving its share
//!   until rank 0's session ends and then raising `SystemExit(0)`, so the rest of the
//!   script runs on rank 0 alone. Everything else is as on one host, with the Rust rules
//!   of `tessera_host::session::ranks`; the Python rules (one session per job, MPI's end)
//!   are the `ranks` module's.
//!
//! # Layout
//!
//! The session's Python methods are kept by area, a file each with its own
//! `#[pymethods]` block of [`PySession`] (PyO3's `multiple-pymethods` gathers them into
//! one class) and its rules in its module doc:
//!
//! - this module: the session itself — starting it, its counts, waiting for the workers
//!   (syncs, in slices), deadlines, shutting it down and the context manager;
//! - `register`: the class `tessera.Register`, the handle and how it is freed;
//! - `call`: the class `tessera.Function`, looking functions up and calling them;
//! - `value`: Python values as tessera's (scalars, shapes) and back, and a register's
//!   value on one worker (`debug_get`, `debug_set`);
//! - `copy`: arrays between NumPy and the workers (`empty`, the `copy_*` methods);
//! - `collective`: the collectives and the point-to-point sends;
//! - `load`: loading safetensors files into registers.

mod call;
mod collective;
mod copy;
mod load;
mod register;
mod value;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tessera_host::session::{Function, Register, Session};
use tessera_host::transport::DEFAULT_BAUD;

pub(crate) use call::PyFunction;
pub(crate) use register::PyRegister;

use crate::error::OrRaise;

/// How long a wait for the workers runs between looks for a signal (module doc).
const SLICE: Duration = Duration::from_millis(100);

/// A controller and its workers (see the module documentation).
#[pyclass(name = "Session", module = "tessera", frozen)]
pub(crate) struct PySession {
    /// Shared with the end at exit when it spans the ranks (`ranks`).
    session: Arc<Session>,
    /// Rank 0's session across the ranks of an MPI job: MPI ends with it.
    across: bool,
    /// Functions called by name, each looked up once (a lookup waits for every worker;
    /// a device's function table never changes).
    functions: Mutex<HashMap<String, Function>>,
}

/// Collecting a session shuts it down (its workers stop, child processes are reaped):
/// never with the GIL held.
impl Drop for PySession {
    fn drop(&mut self) {
        Python::attach(|py| py.detach(|| self.end()));
    }
}

impl PySession {
    /// Shuts the session down (idempotent); across the ranks, MPI ends with it.
    fn end(&self) {
        self.session.shutdown();
        if self.across {
            crate::ranks::session_ended();
        }
    }

    /// The Rust session (for the benchmark's baseline).
    pub(crate) fn inner(&self) -> &Session {
        &self.session
    }

    /// Waits for `worker`'s commands (every worker's: `None`) as `sync_worker` (`sync_all`)
    /// does, in slices of [`SLICE`] with the GIL released, looking for signals between
    /// them (module doc: Ctrl-C while waiting).
    fn wait(&self, py: Python<'_>, worker: Option<usize>) -> PyResult<()> {
        loop {
            let done = py
                .detach(|| match worker {
                    Some(worker) => self.session.sync_worker_for(worker, SLICE),
                    None => self.session.sync_all_for(SLICE),
                })
                .or_raise()?;
            if done {
                return Ok(());
            }
            py.check_signals()?;
        }
    }

    /// Runs `f` with the GIL released, `registers` held until it is done (and, if they
    /// are the last references, freed on the workers before the GIL is taken back).
    fn run<R: Send>(
        &self,
        py: Python<'_>,
        registers: Vec<Arc<Register>>,
        f: impl FnOnce(&Session, &[Arc<Register>]) -> R + Send,
    ) -> R {
        py.detach(move || {
            let result = f(&self.session, &registers);
            drop(registers);
            result
        })
    }
}

#[pymethods]
impl PySession {
    /// Starts `workers` devices on `placement` ("thread", "process", "qemu" or "serial"),
    /// with `memory` bytes each (4 KiB to 1 GiB) where the host places them ("serial": one
    /// of `ports` per worker, at `baud`), in `groups` equal contiguous groups. Under
    /// `mpirun` the session spans the ranks (`ranks`): rank 0 gets the controller, every
    /// other rank serves its share of the workers, then raises `SystemExit(0)`.
    #[new]
    #[pyo3(signature = (placement = "thread", workers = 4, groups = 1, memory = 16 << 20, *, exe = None, firmware = None, ports = None, baud = DEFAULT_BAUD))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, one each
    fn new(
        py: Python<'_>,
        placement: &str,
        workers: usize,
        groups: usize,
        memory: usize,
        exe: Option<PathBuf>,
        firmware: Option<PathBuf>,
        ports: Option<Vec<PathBuf>>,
        baud: u32,
    ) -> PyResult<Self> {
        let needs = crate::placement::Needs {
            exe,
            firmware,
            ports,
            baud,
        };
        let placement = crate::placement::placement(py, placement, needs)?;
        let memory = crate::placement::device_memory(memory)?;
        let (session, across) =
            match crate::ranks::session(py, &placement, workers, groups, memory)? {
                Some(session) => (session, true),
                None => {
                    let session = py
                        .detach(|| Session::new(&placement, workers, groups, memory))
                        .or_raise()?;
                    (Arc::new(session), false)
                }
            };
        Ok(Self {
            session,
            across,
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// This session's identity in this process (its registers carry it).
    #[getter]
    fn id(&self) -> u64 {
        self.session.id()
    }

    /// Number of workers (0 once shut down).
    #[getter]
    fn num_workers(&self, py: Python<'_>) -> usize {
        py.detach(|| self.session.num_workers())
    }

    /// Number of groups.
    #[getter]
    fn num_groups(&self, py: Python<'_>) -> usize {
        py.detach(|| self.session.num_groups())
    }

    /// Waits for worker `worker`'s commands; their failures are the error.
    fn sync_worker(&self, py: Python<'_>, worker: usize) -> PyResult<()> {
        self.wait(py, Some(worker))
    }

    /// Starts a timeline of this process's work, written to `path` in the Chrome
    /// trace-event format (Perfetto, chrome://tracing) by `finish_trace` or when this
    /// object ends. One trace at a time per process; the file is created now.
    fn start_trace(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.session.start_trace(&path)).or_raise()
    }

    /// Writes the trace `start_trace` began: the number of events written, or `None` if
    /// no trace was running.
    fn finish_trace(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        let summary = py.detach(|| self.session.finish_trace()).or_raise()?;
        Ok(summary.map(|s| s.events))
    }

    /// Waits for every worker; every failure is reported, worker by worker.
    fn sync_all(&self, py: Python<'_>) -> PyResult<()> {
        self.wait(py, None)
    }

    /// How long (seconds) a worker's oldest unanswered command may take before it is sent
    /// again.
    fn set_deadline(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let deadline = duration(seconds)?;
        py.detach(|| self.session.set_deadline(deadline)).or_raise()
    }

    /// How long (seconds) a busy worker may work on one command before it fails as busy.
    fn set_busy_deadline(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let deadline = duration(seconds)?;
        py.detach(|| self.session.set_busy_deadline(deadline))
            .or_raise()
    }

    /// Stops every worker; calling it again does nothing.
    fn shutdown(&self, py: Python<'_>) {
        py.detach(|| self.end());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.shutdown(py);
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<tessera.Session {} workers={} groups={}>",
            self.session.id(),
            self.num_workers(py),
            self.num_groups(py)
        )
    }
}

/// `seconds` as a duration: finite and positive, else ValueError.
fn duration(seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            PyValueError::new_err(format!("{seconds} seconds is not a positive, finite time"))
        })
}
