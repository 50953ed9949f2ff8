//! With the cargo feature `mpi`: MPI kept for the interpreter's life, a session across the
//! ranks, a runtime as one instance of the job, and the end at exit (the rules are the
//! `ranks` module's).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use pyo3::exceptions::PySystemExit;
use pyo3::prelude::*;
use tessera_host::instance::{launched_by_mpirun, Instances, Mpi, MpiGuard};
use tessera_host::placement::Placement;
use tessera_host::session::Session;

use super::Part;
use crate::error::OrRaise;

/// MPI in this process.
enum State {
    /// Not initialized (yet).
    Down,
    /// Initialized: its handle, the guard whose drop finalizes it, and the session across
    /// the ranks once one is starting (a dangling `Weak` while it starts; on rank 0 its
    /// controller afterwards).
    Up {
        mpi: Mpi,
        guard: MpiGuard,
        session: Option<Weak<Session>>,
    },
    /// Finalized, for the reason given (MPI cannot start again in a process).
    Ended(&'static str),
}

static STATE: Mutex<State> = Mutex::new(State::Down);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// MPI for `part`, initialized on first use. Refused once finalized, and while a session
/// across the ranks runs (its other ranks serve it: they take part in nothing else); a
/// session asking marks itself as starting.
fn up(part: Part) -> PyResult<Mpi> {
    let mut state = state();
    let starting = |asks: Part| (asks == Part::Session).then(Weak::new);
    match &mut *state {
        State::Down => {
            let (guard, mpi) = Mpi::initialize_for_threads().map_err(|e| part.refuse(e))?;
            *state = State::Up {
                mpi,
                guard,
                session: starting(part),
            };
            Ok(mpi)
        }
        State::Up {
            session: Some(_), ..
        } => Err(part.refuse_with(
            "a session across the ranks is running: its other ranks serve it until it ends \
             and take part in nothing else (one session across the ranks per job)"
                .into(),
        )),
        State::Up { mpi, session, .. } => {
            *session = starting(part);
            Ok(*mpi)
        }
        State::Ended(why) => Err(part.refuse_with(format!(
            "MPI was finalized {why}, and cannot start again in this process"
        ))),
    }
}

/// Finalizes MPI (under the MPI deadline) if it is up, for the reason given.
fn end(why: &'static str) {
    let mut state = state();
    if matches!(*state, State::Up { .. }) {
        if let State::Up { mpi, guard, .. } = std::mem::replace(&mut *state, State::Ended(why)) {
            mpi.finalize(guard);
        }
    }
}

/// A session across the ranks under `mpirun` (`None` otherwise: a session on this host).
/// On rank 0 its controller, kept for the end at exit; on any other rank its workers
/// served until rank 0's session ends, then MPI finalized and `SystemExit(0)` raised. A
/// session that fails to start ends MPI on this rank too: the serving ranks it reached
/// have ended, and the others failed the same way.
pub(crate) fn session(
    py: Python<'_>,
    placement: &Placement,
    workers: usize,
    groups: usize,
    memory: usize,
) -> PyResult<Option<Arc<Session>>> {
    if launched_by_mpirun().is_none() {
        return Ok(None);
    }
    let mpi = py.detach(|| up(Part::Session))?;
    let started = py.detach(|| Session::across_ranks(&mpi, placement, workers, groups, memory));
    match started {
        Ok(Some(session)) => {
            let session = Arc::new(session);
            if let State::Up {
                session: starting, ..
            } = &mut *state()
            {
                *starting = Some(Arc::downgrade(&session));
            }
            Ok(Some(session))
        }
        Ok(None) => {
            py.detach(|| end("when this rank had served the session across the ranks"));
            Err(PySystemExit::new_err(0))
        }
        Err(e) => {
            py.detach(|| end("when the session across the ranks failed to start"));
            Err(e).or_raise()
        }
    }
}

/// Under `mpirun`, this process as one instance of the job (`None` otherwise: one host).
pub(crate) fn instances(py: Python<'_>, part: Part) -> PyResult<Option<Arc<dyn Instances>>> {
    if launched_by_mpirun().is_none() {
        return Ok(None);
    }
    let mpi = py.detach(|| up(part))?;
    Ok(Some(Arc::new(mpi)))
}

/// Rank 0's session across the ranks has shut down: its serving ranks finalize MPI now,
/// and so does this one.
pub(crate) fn session_ended() {
    end("when the session across the ranks ended");
}

/// The end at exit (the `ranks` module's rules), registered with `atexit` at import: a
/// session across the ranks still open is shut down; then MPI is finalized, or the job
/// aborted when the script is ending on an uncaught exception.
#[pyfunction]
pub(crate) fn _at_exit(py: Python<'_>) -> PyResult<()> {
    let (mpi, session) = match &*state() {
        State::Up { mpi, session, .. } => (*mpi, session.as_ref().and_then(Weak::upgrade)),
        State::Down | State::Ended(_) => return Ok(()),
    };
    if let Some(session) = session {
        py.detach(|| {
            session.shutdown();
            session_ended();
        });
        return Ok(());
    }
    // Python sets these as it prints an uncaught exception, before the atexit handlers.
    let sys = py.import("sys")?;
    if sys.hasattr("last_exc")? || sys.hasattr("last_value")? {
        // Said before the job ends: MPI_Abort ends this process without Python's flush.
        for stream in ["stdout", "stderr"] {
            let _ = sys.getattr(stream)?.call_method0("flush");
        }
        mpi.abort(1);
    }
    py.detach(|| end("at the interpreter's exit"));
    Ok(())
}
