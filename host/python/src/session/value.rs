//! Python values as tessera's and back: call arguments and register values (ints,
//! floats, strings, shapes), and a register's value on one worker (`debug_get`,
//! `debug_set`).
//!
//! # Rules
//!
//! - An int or bool (Python's or NumPy's) is an int, a float (likewise) a float, a `str`
//!   a string; a tuple or list of non-negative ints is a shape, and anything else where a
//!   shape is expected is a `TypeError`.
//! - A value read back is a new Python object: an int, float, str, shape tuple, or a new
//!   NumPy array of the register's type and shape.
//! - Reading waits for the worker first (in slices, as every wait; see the session's
//!   module doc); setting is sent in order with the session's other commands.

use numpy::PyUntypedArray;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyList, PyString, PyTuple};
use tessera_host::array::HostValue;

use super::{PyRegister, PySession};
use crate::arrays::{self, to_host, to_numpy};
use crate::error::OrRaise;

/// A shape from a tuple or list of non-negative ints.
pub(super) fn shape_arg(value: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let dims: Vec<usize> = value
        .extract()
        .map_err(|_| PyTypeError::new_err("a shape is a tuple of non-negative ints"))?;
    arrays::shape(&dims)
}

/// A register's value on the host as a Python object.
fn value_to_py(py: Python<'_>, value: HostValue) -> PyResult<Bound<'_, PyAny>> {
    Ok(match value {
        HostValue::Int(v) => v.into_pyobject(py)?.into_any(),
        HostValue::Float(v) => v.into_pyobject(py)?.into_any(),
        HostValue::Str(s) => s.into_pyobject(py)?.into_any(),
        HostValue::Shape(dims) => PyTuple::new(py, dims)?.into_any(),
        HostValue::Array(a) => to_numpy(py, a)?.into_any(),
    })
}

/// A Python value as a scalar call argument or register value, if it is one: an int or
/// bool (Python's or NumPy's), a float (likewise), or a string.
pub(super) fn scalar(value: &Bound<'_, PyAny>) -> PyResult<Option<Scalar>> {
    if value.is_instance_of::<PyInt>() {
        return Ok(Some(Scalar::Int(value.extract()?)));
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(Some(Scalar::Float(value.extract()?)));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(Some(Scalar::Str(value.extract()?)));
    }
    let numpy = value.py().import("numpy")?;
    if value.is_instance(&numpy.getattr("integer")?)?
        || value.is_instance(&numpy.getattr("bool_")?)?
    {
        return Ok(Some(Scalar::Int(value.call_method0("__int__")?.extract()?)));
    }
    if value.is_instance(&numpy.getattr("floating")?)? {
        return Ok(Some(Scalar::Float(
            value.call_method0("__float__")?.extract()?,
        )));
    }
    Ok(None)
}

/// A scalar Python value in tessera's terms (see [`scalar`]).
pub(super) enum Scalar {
    Int(i64),
    Float(f64),
    Str(String),
}

#[pymethods]
impl PySession {
    /// `register`'s value on `worker`: an int, float, str, shape tuple or NumPy array.
    fn debug_get<'py>(
        &self,
        py: Python<'py>,
        register: &PyRegister,
        worker: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let register = register.get()?;
        self.wait(py, Some(worker))?;
        let value = self
            .run(py, vec![register], |s, r| s.debug_get(&r[0], worker))
            .or_raise()?;
        value_to_py(py, value)
    }

    /// Sets `register` on `worker` to `value`: an int, float, bool, str (Python's or
    /// NumPy's scalars), a shape tuple, or a NumPy array (copied).
    fn debug_set(
        &self,
        py: Python<'_>,
        register: &PyRegister,
        worker: usize,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let register = register.get()?;
        let value = if let Some(value) = scalar(value)? {
            match value {
                Scalar::Int(v) => HostValue::Int(v),
                Scalar::Float(v) => HostValue::Float(v),
                Scalar::Str(v) => HostValue::Str(v),
            }
        } else if value.is_instance_of::<PyTuple>() || value.is_instance_of::<PyList>() {
            HostValue::Shape(shape_arg(value)?)
        } else if let Ok(array) = value.cast::<PyUntypedArray>() {
            HostValue::Array(to_host(array, "value")?)
        } else {
            return Err(PyTypeError::new_err(
                "a register's value is an int, float, str, shape tuple or NumPy array",
            ));
        };
        self.run(py, vec![register], |s, r| {
            s.debug_set(&r[0], worker, &value)
        })
        .or_raise()
    }
}
