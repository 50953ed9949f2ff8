//! The collectives (`allreduce`, `allgather`, `broadcast_from_worker0`,
//! `scatter_from_worker0`, `gather_to_worker0`) and the point-to-point sends
//! (`send_to_worker`, `send_to_next_group`).
//!
//! # Rules
//!
//! - Destination-passing: `dst` is a register already holding an array of the result's
//!   type and shape (`Session.empty` makes one); the Rust session checks every worker's
//!   arrays before the first byte moves.
//! - Each waits for every worker's earlier commands first (in slices, looking for
//!   signals), then runs with the GIL released, holding both registers for its duration.
//! - `in_group` runs each group on its own (`Scope::InGroup`), else over all the workers;
//!   a reduction is one of "sum", "prod", "min", "max", "avg" (anything else is a
//!   `ValueError`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::{Register, Session, SessionError as RustSessionError};

use super::{PyRegister, PySession};
use crate::error::OrRaise;

/// The scope of a collective or a split: each group on its own, or all the workers.
pub(super) fn scope(in_group: bool) -> Scope {
    if in_group {
        Scope::InGroup
    } else {
        Scope::Global
    }
}

/// A reduction by its Python name.
fn reduce_op(op: &str) -> PyResult<ReduceOp> {
    Ok(match op {
        "sum" => ReduceOp::Sum,
        "prod" => ReduceOp::Prod,
        "min" => ReduceOp::Min,
        "max" => ReduceOp::Max,
        "avg" => ReduceOp::Avg,
        other => {
            return Err(PyValueError::new_err(format!(
                "reduce op {other:?} is none of \"sum\", \"prod\", \"min\", \"max\", \"avg\""
            )))
        }
    })
}

impl PySession {
    /// One collective on `src` and `dst`.
    fn collective(
        &self,
        py: Python<'_>,
        src: &PyRegister,
        dst: &PyRegister,
        op: impl FnOnce(&Session, &Register, &Register) -> Result<(), RustSessionError> + Send,
    ) -> PyResult<()> {
        self.wait(py, None)?;
        self.run(py, vec![src.get()?, dst.get()?], |s, r| op(s, &r[0], &r[1]))
            .or_raise()
    }
}

#[pymethods]
impl PySession {
    /// Element-wise `op` ("sum", "prod", "min", "max", "avg") of `src` over the workers
    /// (or within each group) into `dst` on each of them.
    #[pyo3(signature = (src, dst, op = "sum", in_group = false))]
    fn allreduce(
        &self,
        py: Python<'_>,
        src: &PyRegister,
        dst: &PyRegister,
        op: &str,
        in_group: bool,
    ) -> PyResult<()> {
        let op = reduce_op(op)?;
        self.collective(py, src, dst, |s, src, dst| {
            s.allreduce(src, dst, op, scope(in_group))
        })
    }

    /// Every member's `src` concatenated in worker order, into `dst` on every member.
    #[pyo3(signature = (src, dst, in_group = false))]
    fn allgather(
        &self,
        py: Python<'_>,
        src: &PyRegister,
        dst: &PyRegister,
        in_group: bool,
    ) -> PyResult<()> {
        self.collective(py, src, dst, |s, src, dst| {
            s.allgather(src, dst, scope(in_group))
        })
    }

    /// The leader's `src` into `dst` on every member.
    #[pyo3(signature = (src, dst, in_group = false))]
    fn broadcast_from_worker0(
        &self,
        py: Python<'_>,
        src: &PyRegister,
        dst: &PyRegister,
        in_group: bool,
    ) -> PyResult<()> {
        self.collective(py, src, dst, |s, src, dst| {
            s.broadcast_from_worker0(src, dst, scope(in_group))
        })
    }

    /// The leader's `src` cut into equal parts, part `i` into `dst` on member `i`.
    #[pyo3(signature = (src, dst, in_group = false))]
    fn scatter_from_worker0(
        &self,
        py: Python<'_>,
        src: &PyRegister,
        dst: &PyRegister,
        in_group: bool,
    ) -> PyResult<()> {
        self.collective(py, src, dst, |s, src, dst| {
            s.scatter_from_worker0(src, dst, scope(in_group))
        })
    }

    /// Every member's `src` concatenated in worker order, into `dst` on the leader.
    #[pyo3(signature = (src, dst, in_group = false))]
    fn gather_to_worker0(
        &self,
        py: Python<'_>,
        src: &PyRegister,
        dst: &PyRegister,
        in_group: bool,
    ) -> PyResult<()> {
        self.collective(py, src, dst, |s, src, dst| {
            s.gather_to_worker0(src, dst, scope(in_group))
        })
    }

    /// Worker `source`'s `src` into `dst` on worker `to`.
    #[pyo3(signature = (src, dst, *, source, to))]
    fn send_to_worker(
        &self,
        py: Python<'_>,
        src: &PyRegister,
        dst: &PyRegister,
        source: usize,
        to: usize,
    ) -> PyResult<()> {
        self.collective(py, src, dst, |s, src, dst| {
            s.send_to_worker(src, source, to, dst)
        })
    }

    /// Each worker of group `group`'s `src` into `dst` on the worker of the same rank in
    /// the next group.
    fn send_to_next_group(
        &self,
        py: Python<'_>,
        src: &PyRegister,
        dst: &PyRegister,
        group: usize,
    ) -> PyResult<()> {
        self.collective(py, src, dst, |s, src, dst| {
            s.send_to_next_group(src, dst, group)
        })
    }
}
