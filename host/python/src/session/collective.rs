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
//!   a reduction is one of "sum", "prod", "min", "max", "avg", and an order one of
//!   "workers" (every worker's source folded in worker order: one host's bits across MPI
//!   ranks) and "ranks_first" (each rank's workers folded first, one array per rank
//!   crossing; the same bits for the same ranks and workers per rank). Anything else is a
//!   `ValueError`. An allreduce without an order takes the session's (`reduce_order`,
//!   "workers" unless set).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tessera_host::session::collective::{ReduceOp, ReduceOrder, Scope};
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

/// An allreduce's order by its Python name.
pub(super) fn reduce_order(order: &str) -> PyResult<ReduceOrder> {
    match order {
        "workers" => Ok(ReduceOrder::Workers),
        "ranks_first" => Ok(ReduceOrder::RanksFirst),
        other => Err(PyValueError::new_err(format!(
            "reduce order {other:?} is neither \"workers\" nor \"ranks_first\""
        ))),
    }
}

/// An allreduce's order by its Python name (the inverse of [`reduce_order`]).
pub(super) fn order_name(order: ReduceOrder) -> &'static str {
    match order {
        ReduceOrder::Workers => "workers",
        ReduceOrder::RanksFirst => "ranks_first",
    }
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
    /// (or within each group) into `dst` on each of them, combined in `order` ("workers",
    /// "ranks_first"; the session's `reduce_order` when None).
    #[pyo3(signature = (src, dst, op = "sum", in_group = false, order = None))]
    fn allreduce(
        &self,
        py: Python<'_>,
        src: &PyRegister,
        dst: &PyRegister,
        op: &str,
        in_group: bool,
        order: Option<&str>,
    ) -> PyResult<()> {
        let op = reduce_op(op)?;
        let order = match order {
            Some(order) => reduce_order(order)?,
            None => py.detach(|| self.session.reduce_order()),
        };
        self.collective(py, src, dst, |s, src, dst| {
            s.allreduce_in_order(src, dst, op, scope(in_group), order)
        })
    }

    /// The order allreduces combine in when a call names none: "workers" (the default) or
    /// "ranks_first".
    #[getter]
    fn get_reduce_order(&self, py: Python<'_>) -> &'static str {
        order_name(py.detach(|| self.session.reduce_order()))
    }

    #[setter]
    fn set_reduce_order(&self, py: Python<'_>, order: &str) -> PyResult<()> {
        let order = reduce_order(order)?;
        py.detach(|| self.session.set_reduce_order(order));
        Ok(())
    }

    /// Workers each MPI rank hosts (all of them on one host): ranks first, an allreduce
    /// folds each run of this many consecutive workers before combining the runs.
    #[getter]
    fn workers_per_rank(&self, py: Python<'_>) -> usize {
        py.detach(|| self.session.workers_per_rank())
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
