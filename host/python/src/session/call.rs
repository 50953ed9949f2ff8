//! `tessera.Function` and `Session.call`: looking a function up on the workers and
//! calling it.
//!
//! # Rules
//!
//! - A function is looked up once per name and session: `get_function` waits for every
//!   worker to confirm it has it; `call` with a name looks it up on the first call only
//!   (a device's function table never changes), then uses the cached handle.
//! - A call's arguments are converted before anything is sent (`value` for scalars and
//!   shapes; NumPy arrays are copied; registers are held for the call); an argument of
//!   another kind is a `TypeError`, a freed register a `SessionError`.
//! - A call returns once sent, with a new register: its failures come back at the next
//!   sync.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard, PoisonError};

use numpy::PyUntypedArray;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use tessera_host::array::HostArray;
use tessera_host::session::{CallArg, Function, Register};

use super::value::{scalar, shape_arg, Scalar};
use super::{PyRegister, PySession};
use crate::arrays::to_host;
use crate::error::OrRaise;

/// A function every worker has, by name.
#[pyclass(name = "Function", module = "tessera", frozen)]
pub(crate) struct PyFunction {
    function: Function,
}

#[pymethods]
impl PyFunction {
    /// The function's name.
    #[getter]
    fn name(&self) -> &str {
        self.function.name()
    }

    fn __repr__(&self) -> String {
        format!("<tessera.Function {:?}>", self.function.name())
    }
}

/// A call argument held for the call: Python's value in tessera's terms.
enum Arg {
    Int(i64),
    Float(f64),
    Str(String),
    Shape(Vec<u32>),
    Array(HostArray),
    Register(Arc<Register>),
}

impl Arg {
    /// The argument as the session takes it, borrowed from what is held.
    fn as_call(&self) -> CallArg<'_> {
        match self {
            Self::Int(v) => CallArg::Int(*v),
            Self::Float(v) => CallArg::Float(*v),
            Self::Str(s) => CallArg::Str(s),
            Self::Shape(dims) => CallArg::Shape(dims),
            Self::Array(a) => CallArg::Array(a),
            Self::Register(r) => CallArg::Register(r.as_ref()),
        }
    }
}

impl PySession {
    /// `function` as a Function: itself, or the function of that name (looked up once).
    fn function(&self, py: Python<'_>, function: &Bound<'_, PyAny>) -> PyResult<Function> {
        if let Ok(f) = function.cast::<PyFunction>() {
            return Ok(f.get().function.clone());
        }
        let Ok(name) = function.extract::<String>() else {
            return Err(PyTypeError::new_err(
                "call takes a Function or a function's name",
            ));
        };
        let known = self.cache().get(&name).cloned();
        if let Some(known) = known {
            return Ok(known);
        }
        let found = py.detach(|| self.session.get_function(&name)).or_raise()?;
        self.cache().insert(name, found.clone());
        Ok(found)
    }

    /// The functions looked up by name so far.
    fn cache(&self) -> MutexGuard<'_, HashMap<String, Function>> {
        self.functions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl PySession {
    /// The function `name`, once every worker confirms it has it (else SessionError).
    fn get_function(&self, py: Python<'_>, name: &str) -> PyResult<PyFunction> {
        self.wait(py, None)?;
        let function = py.detach(|| self.session.get_function(name)).or_raise()?;
        self.cache().insert(name.into(), function.clone());
        Ok(PyFunction { function })
    }

    /// Calls `function` (a Function, or a name: looked up on the first call only) on every
    /// worker with `args` — ints, floats, bools, strings (Python's or NumPy's scalars),
    /// shapes (tuples of ints), NumPy arrays small enough for one frame (copied), and
    /// registers (each worker's own value) — into a new register. Returns once sent:
    /// failures come back at the next sync.
    #[pyo3(signature = (function, *args))]
    fn call(
        &self,
        py: Python<'_>,
        function: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
    ) -> PyResult<PyRegister> {
        let function = self.function(py, function)?;
        let mut held = Vec::with_capacity(args.len());
        for (i, arg) in args.iter().enumerate() {
            held.push(if let Ok(register) = arg.cast::<PyRegister>() {
                Arg::Register(register.get().get()?)
            } else if let Some(value) = scalar(&arg)? {
                match value {
                    Scalar::Int(v) => Arg::Int(v),
                    Scalar::Float(v) => Arg::Float(v),
                    Scalar::Str(v) => Arg::Str(v),
                }
            } else if arg.is_instance_of::<PyTuple>() || arg.is_instance_of::<PyList>() {
                Arg::Shape(shape_arg(&arg)?)
            } else if let Ok(array) = arg.cast::<PyUntypedArray>() {
                Arg::Array(to_host(array, &format!("argument {i}"))?)
            } else {
                return Err(PyTypeError::new_err(format!(
                    "argument {i} ({}) is none of int, float, str, shape tuple, NumPy array, Register",
                    arg.get_type().name()?
                )));
            });
        }
        let register = py
            .detach(move || {
                let call: Vec<CallArg<'_>> = held.iter().map(Arg::as_call).collect();
                let result = self.session.call(&function, &call);
                drop(call);
                drop(held);
                result
            })
            .or_raise()?;
        Ok(PyRegister::new(register))
    }
}
