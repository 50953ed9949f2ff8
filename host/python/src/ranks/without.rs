//! Without the cargo feature `mpi`: always one host, and under `mpirun` a refusal that
//! names the install option (the rules are the `ranks` module's).

use std::sync::Arc;

use pyo3::prelude::*;
use tessera_host::instance::{launched_by_mpirun, Instances};
use tessera_host::placement::Placement;
use tessera_host::session::Session;

use super::Part;

/// The pip command that installs this package with MPI (from the repository's root).
const INSTALL_WITH_MPI: &str =
    "pip install ./host/python --config-settings=maturin.build-args=\"--features mpi\"";

/// Refused for `part` under `mpirun`; nothing to do otherwise.
fn one_host(part: Part) -> PyResult<()> {
    match launched_by_mpirun() {
        None => Ok(()),
        Some(variable) => Err(part.refuse_with(format!(
            "this process was started by mpirun (${variable} is set), but this tessera \
             package was built without MPI: install it with `{INSTALL_WITH_MPI}`"
        ))),
    }
}

/// Never a session across ranks: `None` (a session on this host), or the refusal under
/// `mpirun`.
pub(crate) fn session(
    _py: Python<'_>,
    _placement: &Placement,
    _workers: usize,
    _groups: usize,
    _memory: usize,
) -> PyResult<Option<Arc<Session>>> {
    one_host(Part::Session)?;
    Ok(None)
}

/// Never instances: `None` (one host), or the refusal under `mpirun`.
pub(crate) fn instances(_py: Python<'_>, part: Part) -> PyResult<Option<Arc<dyn Instances>>> {
    one_host(part)?;
    Ok(None)
}

/// Nothing to end: no session spans ranks here.
pub(crate) fn session_ended() {}
