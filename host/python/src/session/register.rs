//! `tessera.Register`: a register on every worker of a session, as a Python object.
//!
//! # Rules
//!
//! - A register is freed on every worker when its Python object is collected or when
//!   `free()` is called, whichever comes first; freeing twice does nothing, and a freed
//!   register used again raises `SessionError(kind="Freed")` before anything is sent.
//! - The handle is shared by reference: a call holds one for its duration, so a `free()`
//!   from another thread while a call uses the register frees it once that call is done.
//! - Freeing waits for the session, so it never happens with the GIL held; the handle's
//!   lock is held only to take or drop the reference, never while anything waits.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pyo3::prelude::*;
use tessera_host::session::Register;

use crate::error::freed;

/// A register on every worker of a session; freed on the workers when collected or freed.
///
/// The handle is shared by reference: a call takes a reference for its duration (the lock
/// is held only to take it, never while anything waits), so a `free()` from another thread
/// while a call uses the register frees it on the workers once that call is done.
#[pyclass(name = "Register", module = "tessera", frozen)]
pub(crate) struct PyRegister {
    register: Mutex<Option<Arc<Register>>>,
}

impl PyRegister {
    /// A Python handle for `register`, just made by the session.
    pub(super) fn new(register: Register) -> Self {
        Self {
            register: Mutex::new(Some(Arc::new(register))),
        }
    }

    /// The register, unless it was freed.
    pub(super) fn get(&self) -> PyResult<Arc<Register>> {
        self.slot().clone().ok_or_else(freed)
    }

    /// The handle's slot: the register, or `None` once freed.
    fn slot(&self) -> MutexGuard<'_, Option<Arc<Register>>> {
        self.register.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Dropping the last reference frees the id on every worker, which waits for the session:
/// never with the GIL held, so other Python threads run meanwhile.
impl Drop for PyRegister {
    fn drop(&mut self) {
        let register = self.slot().take();
        if register.is_some() {
            Python::attach(|py| py.detach(|| drop(register)));
        }
    }
}

#[pymethods]
impl PyRegister {
    /// The register's id on the workers (ids are reused once freed).
    #[getter]
    fn id(&self) -> PyResult<u16> {
        Ok(self.get()?.id())
    }

    /// Frees the register on every worker now (once no call is using it); using it
    /// afterwards raises SessionError(kind="Freed"). Freeing twice does nothing.
    fn free(&self, py: Python<'_>) {
        let register = self.slot().take();
        py.detach(|| drop(register));
    }

    /// True until the register is freed.
    #[getter]
    fn alive(&self) -> bool {
        self.slot().is_some()
    }

    fn __repr__(&self) -> String {
        match &*self.slot() {
            Some(r) => format!("<tessera.Register {} of session {}>", r.id(), r.session()),
            None => "<tessera.Register (freed)>".into(),
        }
    }
}
