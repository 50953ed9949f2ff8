//! Rust errors as Python exceptions.
//!
//! # Rules
//!
//! - Every failure of tessera itself is a [`TesseraError`]; its subclass names the part that
//!   failed ([`SessionError`], [`RuntimeError`] for the device runtime, [`CheckpointError`],
//!   [`ExecutableError`], [`ProgramError`] for core's program rules, [`TraceError`]). The message is the
//!   Rust error's own (it names the tensor, the sizes and the rule), and the attribute
//!   `kind` names the Rust variant (`"ForeignRegister"`, `"Worker"`, …), so a program can
//!   tell failures apart without parsing messages. [`kind`] maps every variant of every
//!   error raised to its string, explicitly and exhaustively.
//! - A `SessionError` carries `workers`: the worker of each failure, in the order the
//!   failures were reported (empty when no worker was involved). A failed load's kind and
//!   workers are those of the session error under it, if one is; a register freed from
//!   Python and used again is `kind == "Freed"`.
//! - What Python passed in wrong is a Python error, raised before anything reaches a
//!   device: a dtype tessera has no element type for is a `TypeError`; an array that is
//!   not C-contiguous, not aligned, not writable where it is written, or of the wrong
//!   shape is a `ValueError`.
//! - Nothing panics across the boundary: the bindings return errors, and PyO3 turns a
//!   panic that slipped through into `pyo3_runtime.PanicException` instead of unwinding
//!   into the interpreter.

mod kind;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::{create_exception, PyTypeInfo};

create_exception!(
    tessera,
    TesseraError,
    PyException,
    "A failure of tessera: the message is the Rust error's, `kind` names its variant."
);
create_exception!(
    tessera,
    SessionError,
    TesseraError,
    "A session command failed; `workers` lists the worker of each failure."
);
create_exception!(
    tessera,
    RuntimeError,
    TesseraError,
    "The device runtime refused or failed: preparing, weights, a step, seeds, RNG state."
);
create_exception!(
    tessera,
    CheckpointError,
    TesseraError,
    "A checkpoint could not be saved, read, or restored into this runtime."
);
create_exception!(
    tessera,
    ExecutableError,
    TesseraError,
    "A saved executable could not be written or read."
);
create_exception!(
    tessera,
    TraceError,
    TesseraError,
    "A trace could not start (one at a time per process) or its file be written."
);
create_exception!(
    tessera,
    ProgramError,
    TesseraError,
    "A program breaks one of core's rules (capacity, shapes, groupings, streams)."
);

/// Exception `E` with `message` and the attributes `kind` and, for session errors,
/// `workers`. (Setting an attribute on a fresh exception cannot fail but for memory.)
pub(crate) fn exception<E: PyTypeInfo>(
    message: String,
    kind: &str,
    workers: Option<Vec<usize>>,
) -> PyErr {
    let err = PyErr::new::<E, _>(message);
    Python::attach(|py| {
        let value = err.value(py);
        let _ = value.setattr("kind", kind);
        if let Some(workers) = workers {
            let _ = value.setattr("workers", workers);
        }
    });
    err
}

/// The workers of a session error's failures, in the order they were reported.
fn workers(error: &tessera_host::session::SessionError) -> Vec<usize> {
    error.worker_failures().iter().map(|f| f.0).collect()
}

/// A Rust error that becomes a Python exception.
pub(crate) trait Raise {
    /// The exception, with the error's message and kind.
    fn raise(self) -> PyErr;
}

impl Raise for tessera_host::session::SessionError {
    fn raise(self) -> PyErr {
        exception::<SessionError>(self.to_string(), kind::session(&self), Some(workers(&self)))
    }
}

/// A load's failure: its own message (naming the file and the tensor), and where a session
/// error lies under it, that error's kind and workers.
impl Raise for tessera_host::session::loader::LoadError {
    fn raise(self) -> PyErr {
        use tessera_host::session::loader::LoadError;
        let workers = match &self {
            LoadError::Session { source, .. } => workers(source),
            LoadError::Worker { source, .. } => workers(source),
            _ => Vec::new(),
        };
        exception::<SessionError>(self.to_string(), kind::load(&self), Some(workers))
    }
}

/// The exception for a register freed from Python and used again (kind `"Freed"`).
pub(crate) fn freed() -> PyErr {
    exception::<SessionError>(
        "this register was freed: it names nothing on the workers".into(),
        "Freed",
        Some(Vec::new()),
    )
}

/// Each Rust error raised as the Python exception of its part, its kind from [`kind`].
macro_rules! raise_as {
    ($($rust:ty => $python:ty, $kind:path);* $(;)?) => {$(
        impl Raise for $rust {
            fn raise(self) -> PyErr {
                exception::<$python>(self.to_string(), $kind(&self), None)
            }
        }
    )*};
}

raise_as! {
    tessera_host::runtime::RuntimeError => RuntimeError, kind::runtime;
    tessera_host::checkpoint::CheckpointError => CheckpointError, kind::checkpoint;
    tessera_host::executable::ExecutableError => ExecutableError, kind::executable;
    tessera_core::program::ProgramError => ProgramError, kind::program;
    tessera_host::trace::TraceError => TraceError, kind::trace;
    tessera_core::program::CapacityError => ProgramError, kind::capacity;
}

/// `Result::map_err(raise)` for every error above.
pub(crate) trait OrRaise<T> {
    /// The value, or the error raised as its exception.
    fn or_raise(self) -> PyResult<T>;
}

impl<T, E: Raise> OrRaise<T> for Result<T, E> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(Raise::raise)
    }
}
