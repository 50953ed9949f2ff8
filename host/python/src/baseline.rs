//! The Rust side of the Python benchmarks (`bench/roundtrip.py`, and `bench/ranks.py`
//! across MPI ranks): the same operations through the Rust API, on the same session, timed
//! in Rust — the baseline each Python figure is printed beside, measured in the same run.

use std::time::Instant;

use pyo3::prelude::*;
use tessera_core::dtype::DataType;
use tessera_host::array::{ArrayView, HostArray};
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::CallArg;

use crate::error::OrRaise;
use crate::session::PySession;

/// Seconds per round trip of `bytes` bytes of float32 to worker 0 and back through the Rust
/// API, in place (`copy_to_worker0_into`, then `copy_from_worker0_into`) or allocating
/// (`copy_to_worker0`, then `copy_from_worker0`), best of `repeats`.
#[pyfunction]
pub(crate) fn _baseline_round_trip(
    py: Python<'_>,
    session: &PySession,
    bytes: usize,
    repeats: usize,
    in_place: bool,
) -> PyResult<f64> {
    let session = session.inner();
    py.detach(|| {
        let elements = bytes / 4;
        let data: Vec<f32> = (0..elements).map(|i| i as f32).collect();
        let array = HostArray::from_f32(&[elements as u32], &data)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        let mut out = array.clone();
        out.bytes_mut(); // its own bytes, not the source's
                         // Borrowed, as Python's arrays are: the same data path, not a shared buffer.
        let view = ArrayView::new(array.dtype(), array.shape(), array.bytes())
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        let register = session.copy_to_worker0(view).or_raise()?;
        let mut best = f64::INFINITY;
        for _ in 0..repeats {
            let start = Instant::now();
            if in_place {
                session.copy_to_worker0_into(view, &register).or_raise()?;
                session
                    .copy_from_worker0_into(&register, &mut out)
                    .or_raise()?;
            } else {
                let fresh = session.copy_to_worker0(view).or_raise()?;
                out = session.copy_from_worker0(&fresh).or_raise()?;
            }
            best = best.min(start.elapsed().as_secs_f64());
        }
        if out.bytes() != array.bytes() {
            return Err(pyo3::exceptions::PyAssertionError::new_err(
                "the round trip changed the bytes",
            ));
        }
        Ok(best)
    })
}

/// Seconds per `call("add", 1, 2)` on every worker followed by `sync_all`, the result
/// register dropped each time, through the Rust API: the mean of `repeats`.
#[pyfunction]
pub(crate) fn _baseline_call_sync(
    py: Python<'_>,
    session: &PySession,
    repeats: usize,
) -> PyResult<f64> {
    let session = session.inner();
    py.detach(|| {
        let add = session.get_function("add").or_raise()?;
        let start = Instant::now();
        for _ in 0..repeats {
            let result = session
                .call(&add, &[CallArg::Int(1), CallArg::Int(2)])
                .or_raise()?;
            session.sync_all().or_raise()?;
            drop(result);
        }
        Ok(start.elapsed().as_secs_f64() / repeats.max(1) as f64)
    })
}

/// Seconds per sum allreduce of `elements` float32 per worker over every worker, between
/// two registers made for it, through the Rust API: the median of `repeats`.
#[pyfunction]
pub(crate) fn _baseline_allreduce(
    py: Python<'_>,
    session: &PySession,
    elements: u32,
    repeats: usize,
) -> PyResult<f64> {
    let session = session.inner();
    py.detach(|| {
        let src = session.empty(DataType::F32, &[elements]).or_raise()?;
        let dst = session.empty(DataType::F32, &[elements]).or_raise()?;
        let mut times = Vec::with_capacity(repeats);
        for _ in 0..repeats.max(1) {
            let start = Instant::now();
            session
                .allreduce(&src, &dst, ReduceOp::Sum, Scope::Global)
                .or_raise()?;
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    })
}
