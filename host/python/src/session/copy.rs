//! Arrays between NumPy and the workers: `empty`, `copy_to_worker0`, `copy_from_worker0`
//! (each also `_into` an existing destination) and `copy_to_workers`.
//!
//! # Rules
//!
//! - A NumPy array is read or written in place (C-contiguous, aligned, writable where it
//!   is written; see `arrays`), borrowed for the call; only `copy_to_workers` copies, once
//!   per worker.
//! - A read from worker 0 waits for its commands first (in slices); a copy to the workers
//!   returns once sent, its failures coming back at the next sync.
//! - An `_into` destination must match: a register `copy_to_worker0_into` writes in place
//!   holds the array's type and shape, a NumPy `out` has the register's element type (or
//!   the raw bits of a float type NumPy has no name for) and element count.

use numpy::PyUntypedArray;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use tessera_core::dtype::DataType;

use super::value::shape_arg;
use super::{PyRegister, PySession};
use crate::arrays::{self, to_host, with_view, with_view_mut};
use crate::error::OrRaise;

#[pymethods]
impl PySession {
    /// A new register holding a zeroed array of `shape` and `dtype` on every worker: the
    /// destination of a collective.
    #[pyo3(signature = (shape, dtype = "float32"))]
    fn empty(&self, py: Python<'_>, shape: &Bound<'_, PyAny>, dtype: &str) -> PyResult<PyRegister> {
        let shape = shape_arg(shape)?;
        let dtype = arrays::from_name(dtype).ok_or_else(|| {
            PyTypeError::new_err(format!("tessera has no element type {dtype:?}"))
        })?;
        let register = py.detach(|| self.session.empty(dtype, &shape)).or_raise()?;
        Ok(PyRegister::new(register))
    }

    /// Copies `array` into a new register: worker 0 holds it, every other worker a zeroed
    /// array of its type and shape. The array is read in place; it must be C-contiguous.
    fn copy_to_worker0(
        &self,
        py: Python<'_>,
        array: &Bound<'_, PyUntypedArray>,
    ) -> PyResult<PyRegister> {
        let register = with_view(array, "array", |view| {
            py.detach(|| self.session.copy_to_worker0(view))
        })?
        .or_raise()?;
        Ok(PyRegister::new(register))
    }

    /// Copies `array` into `dst` on worker 0: in place when `dst` already holds an array of
    /// its type and shape (nothing allocated). Failures come back at the next sync.
    fn copy_to_worker0_into(
        &self,
        py: Python<'_>,
        array: &Bound<'_, PyUntypedArray>,
        dst: &PyRegister,
    ) -> PyResult<()> {
        let dst = dst.get()?;
        with_view(array, "array", |view| {
            self.run(py, vec![dst], |s, r| s.copy_to_worker0_into(view, &r[0]))
        })?
        .or_raise()
    }

    /// `register`'s array on worker 0, as a new NumPy array of its type and shape (worker
    /// 0 is asked for them first: one round trip more than the `_into` form).
    fn copy_from_worker0<'py>(
        &self,
        py: Python<'py>,
        register: &PyRegister,
    ) -> PyResult<Bound<'py, PyUntypedArray>> {
        let register = register.get()?;
        self.wait(py, Some(0))?;
        let (dtype, shape) = py
            .detach(|| self.session.array_on_worker0(&register))
            .or_raise()?;
        let out = arrays::zeros(py, dtype, &shape)?;
        with_view_mut(&out, "the new array", dtype, |into| {
            self.run(py, vec![register], |s, r| {
                s.copy_from_worker0_to(&r[0], into)
            })
        })?
        .or_raise()?;
        Ok(out)
    }

    /// Copies `register`'s array on worker 0 into `out` in place: `out` must have its
    /// element type (or, without ml_dtypes, the raw bits of bfloat16 and the 8-bit floats)
    /// and element count (it keeps its own shape), be C-contiguous and writable.
    fn copy_from_worker0_into(
        &self,
        py: Python<'_>,
        register: &PyRegister,
        out: &Bound<'_, PyUntypedArray>,
    ) -> PyResult<()> {
        let register = register.get()?;
        self.wait(py, Some(0))?;
        let mut dtype = arrays::data_type(out)?;
        if matches!(dtype, DataType::U8 | DataType::U16) {
            // Raw bits may stand for a float type NumPy has no name for: ask which.
            let (held, _) = py
                .detach(|| self.session.array_on_worker0(&register))
                .or_raise()?;
            if arrays::receives(dtype, held) {
                dtype = held;
            }
        }
        with_view_mut(out, "out", dtype, |into| {
            self.run(py, vec![register], |s, r| {
                s.copy_from_worker0_to(&r[0], into)
            })
        })?
        .or_raise()?;
        Ok(())
    }

    /// Copies `arrays[i]` to worker `i` (one per worker; each copied once) into a new
    /// register.
    fn copy_to_workers(
        &self,
        py: Python<'_>,
        arrays: Vec<Bound<'_, PyUntypedArray>>,
    ) -> PyResult<PyRegister> {
        let host = arrays
            .iter()
            .enumerate()
            .map(|(i, a)| to_host(a, &format!("arrays[{i}]")))
            .collect::<PyResult<Vec<_>>>()?;
        let register = py
            .detach(|| self.session.copy_to_workers(&host))
            .or_raise()?;
        Ok(PyRegister::new(register))
    }
}
