//! `tessera.Session`: the SPMD session (TVM Disco's controller and workers) from Python.
//!
//! # Contract
//!
//! - Every method is the Rust [`Session`]'s of the same name, with its rules (one order,
//!   pipelined calls whose failures come back at the next sync, destination-passing
//!   collectives checked before the first byte moves); see `tessera_host::session`.
//! - **The GIL is released** while the workers work: every method that reaches a worker
//!   lets other Python threads run meanwhile. A NumPy array handed to a method is borrowed
//!   for the call (NumPy refuses to hand it to another writer meanwhile); a Python thread
//!   writing into it while a copy reads it races, as with any native library.
//! - **Registers are Python objects** ([`PyRegister`]): collected, or freed with `free()`,
//!   they free their id on every worker; a freed register or another session's is refused
//!   with an exception before anything is sent. After `shutdown()` every method raises
//!   `SessionError(kind="ShutDown")`; freeing then does nothing.
//! - A session is a context manager: leaving the `with` block shuts it down, and so does
//!   collecting it (the workers stop; child processes and QEMUs are reaped). A program
//!   that ends otherwise — a Ctrl-C's `KeyboardInterrupt`, an uncaught error, a kill —
//!   leaves no device behind either: each device process has a watcher that stops it
//!   once the Python process is gone.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use numpy::PyUntypedArray;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyList, PyString, PyTuple};
use tessera_host::array::{HostArray, HostValue};
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::loader::{ShardRule, ShardRules};
use tessera_host::session::{CallArg, Function, Register, Session};

use crate::arrays::{self, to_host, to_numpy, with_view, with_view_mut};
use crate::error::{OrRaise, SessionError};

/// A controller and its workers (see the module documentation).
#[pyclass(name = "Session", module = "tessera", frozen)]
pub(crate) struct PySession {
    session: Session,
}

/// A register on every worker of a session; freed on the workers when collected or freed.
#[pyclass(name = "Register", module = "tessera")]
pub(crate) struct PyRegister {
    register: Option<Register>,
}

impl PyRegister {
    /// The register, unless it was freed.
    fn get(&self) -> PyResult<&Register> {
        self.register.as_ref().ok_or_else(|| {
            SessionError::new_err("this register was freed: it names nothing on the workers")
        })
    }
}

#[pymethods]
impl PyRegister {
    /// The register's id on the workers (ids are reused once freed).
    #[getter]
    fn id(&self) -> PyResult<u16> {
        Ok(self.get()?.id())
    }

    /// Frees the register on every worker now; using it afterwards raises SessionError.
    fn free(&mut self, py: Python<'_>) {
        if let Some(register) = self.register.take() {
            py.detach(|| drop(register));
        }
    }

    /// True until the register is freed.
    #[getter]
    fn alive(&self) -> bool {
        self.register.is_some()
    }

    fn __repr__(&self) -> String {
        match &self.register {
            Some(r) => format!("<tessera.Register {} of session {}>", r.id(), r.session()),
            None => "<tessera.Register (freed)>".into(),
        }
    }
}

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
enum Arg<'r> {
    Int(i64),
    Float(f64),
    Str(String),
    Shape(Vec<u32>),
    Array(HostArray),
    Register(&'r Register),
}

impl Arg<'_> {
    fn as_call(&self) -> CallArg<'_> {
        match self {
            Self::Int(v) => CallArg::Int(*v),
            Self::Float(v) => CallArg::Float(*v),
            Self::Str(s) => CallArg::Str(s),
            Self::Shape(dims) => CallArg::Shape(dims),
            Self::Array(a) => CallArg::Array(a),
            Self::Register(r) => CallArg::Register(r),
        }
    }
}

/// A shape from a tuple or list of non-negative ints.
fn shape_arg(value: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let dims: Vec<usize> = value
        .extract()
        .map_err(|_| PyTypeError::new_err("a shape is a tuple of non-negative ints"))?;
    arrays::shape(&dims)
}

/// A register's value on the host as a Python object.
fn value_to_py<'py>(py: Python<'py>, value: &HostValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        HostValue::Int(v) => v.into_pyobject(py)?.into_any(),
        HostValue::Float(v) => v.into_pyobject(py)?.into_any(),
        HostValue::Str(s) => s.into_pyobject(py)?.into_any(),
        HostValue::Shape(dims) => PyTuple::new(py, dims)?.into_any(),
        HostValue::Array(a) => to_numpy(py, a)?.into_any(),
    })
}

fn scope(in_group: bool) -> Scope {
    if in_group {
        Scope::InGroup
    } else {
        Scope::Global
    }
}

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
    /// The Rust session (for the benchmark's baseline).
    pub(crate) fn inner(&self) -> &Session {
        &self.session
    }

    fn wrap(register: Register) -> PyRegister {
        PyRegister {
            register: Some(register),
        }
    }
}

#[pymethods]
impl PySession {
    /// Starts `workers` devices on `placement` ("thread", "process" or "qemu"), with
    /// `memory` bytes each where the host places them, in `groups` equal contiguous groups.
    #[new]
    #[pyo3(signature = (placement = "thread", workers = 4, groups = 1, memory = 16 << 20, *, exe = None, firmware = None))]
    fn new(
        py: Python<'_>,
        placement: &str,
        workers: usize,
        groups: usize,
        memory: usize,
        exe: Option<PathBuf>,
        firmware: Option<PathBuf>,
    ) -> PyResult<Self> {
        let placement = crate::placement::placement(py, placement, exe, firmware)?;
        let session = py
            .detach(|| Session::new(&placement, workers, groups, memory))
            .or_raise()?;
        Ok(Self { session })
    }

    /// This session's identity in this process (its registers carry it).
    #[getter]
    fn id(&self) -> u64 {
        self.session.id()
    }

    /// Number of workers.
    #[getter]
    fn num_workers(&self) -> usize {
        self.session.num_workers()
    }

    /// Number of groups.
    #[getter]
    fn num_groups(&self) -> usize {
        self.session.num_groups()
    }

    /// The function `name`, once every worker confirms it has it (else SessionError).
    fn get_function(&self, py: Python<'_>, name: &str) -> PyResult<PyFunction> {
        let function = py.detach(|| self.session.get_function(name)).or_raise()?;
        Ok(PyFunction { function })
    }

    /// Calls `function` (a Function, or a name) on every worker with `args` — ints, floats,
    /// strings, shapes (tuples of ints), NumPy arrays small enough for one frame, and
    /// registers (each worker's own value) — into a new register. Returns once sent:
    /// failures come back at the next sync.
    #[pyo3(signature = (function, *args))]
    fn call(
        &self,
        py: Python<'_>,
        function: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
    ) -> PyResult<PyRegister> {
        let named;
        let function_ref: PyRef<'_, PyFunction>;
        let function: &Function = if let Ok(f) = function.cast::<PyFunction>() {
            function_ref = f.borrow();
            &function_ref.function
        } else if let Ok(name) = function.extract::<String>() {
            named = py.detach(|| self.session.get_function(&name)).or_raise()?;
            &named
        } else {
            return Err(PyTypeError::new_err(
                "call takes a Function or a function's name",
            ));
        };
        let registers: Vec<PyRef<'_, PyRegister>> = args
            .iter()
            .filter_map(|a| a.cast::<PyRegister>().ok().map(|r| r.borrow()))
            .collect();
        let mut held = Vec::with_capacity(args.len());
        let mut next_register = registers.iter();
        for (i, arg) in args.iter().enumerate() {
            held.push(if arg.cast::<PyRegister>().is_ok() {
                match next_register.next() {
                    Some(r) => Arg::Register(r.get()?),
                    None => return Err(PyTypeError::new_err("a register changed during the call")),
                }
            } else if arg.is_instance_of::<pyo3::types::PyBool>() || arg.is_instance_of::<PyInt>() {
                Arg::Int(arg.extract()?)
            } else if arg.is_instance_of::<PyFloat>() {
                Arg::Float(arg.extract()?)
            } else if arg.is_instance_of::<PyString>() {
                Arg::Str(arg.extract()?)
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
        let call: Vec<CallArg<'_>> = held.iter().map(Arg::as_call).collect();
        let register = py
            .detach(|| self.session.call(function, &call))
            .or_raise()?;
        Ok(Self::wrap(register))
    }

    /// A new register holding a zeroed array of `shape` and `dtype` on every worker: the
    /// destination of a collective.
    #[pyo3(signature = (shape, dtype = "float32"))]
    fn empty(&self, py: Python<'_>, shape: &Bound<'_, PyAny>, dtype: &str) -> PyResult<PyRegister> {
        let shape = shape_arg(shape)?;
        let dtype = arrays::from_name(dtype).ok_or_else(|| {
            PyTypeError::new_err(format!("tessera has no element type {dtype:?}"))
        })?;
        let register = py.detach(|| self.session.empty(dtype, &shape)).or_raise()?;
        Ok(Self::wrap(register))
    }

    /// Copies `array` into a new register: worker 0 holds it, every other worker a zeroed
    /// array of its type and shape. The array is read in place.
    fn copy_to_worker0(
        &self,
        py: Python<'_>,
        array: &Bound<'_, PyUntypedArray>,
    ) -> PyResult<PyRegister> {
        let register = with_view(array, "array", |view| {
            py.detach(|| self.session.copy_to_worker0(view))
        })?
        .or_raise()?;
        Ok(Self::wrap(register))
    }

    /// Copies `array` into `dst` on worker 0: in place when `dst` already holds an array of
    /// its type and shape (nothing allocated). Failures come back at the next sync.
    fn copy_to_worker0_into(
        &self,
        py: Python<'_>,
        array: &Bound<'_, PyUntypedArray>,
        dst: PyRef<'_, PyRegister>,
    ) -> PyResult<()> {
        let dst = dst.get()?;
        with_view(array, "array", |view| {
            py.detach(|| self.session.copy_to_worker0_into(view, dst))
        })?
        .or_raise()
    }

    /// `register`'s array on worker 0, as a new NumPy array of its type and shape.
    fn copy_from_worker0<'py>(
        &self,
        py: Python<'py>,
        register: PyRef<'_, PyRegister>,
    ) -> PyResult<Bound<'py, PyUntypedArray>> {
        let register = register.get()?;
        let (dtype, shape) = py
            .detach(|| self.session.array_on_worker0(register))
            .or_raise()?;
        let out = arrays::zeros(py, dtype, &shape);
        with_view_mut(&out, "the new array", |into| {
            py.detach(|| self.session.copy_from_worker0_to(register, into))
        })?
        .or_raise()?;
        Ok(out)
    }

    /// Copies `register`'s array on worker 0 into `out` in place: `out` must have its
    /// element type and element count (it keeps its own shape), be C-contiguous and
    /// writable.
    fn copy_from_worker0_into(
        &self,
        py: Python<'_>,
        register: PyRef<'_, PyRegister>,
        out: &Bound<'_, PyUntypedArray>,
    ) -> PyResult<()> {
        let register = register.get()?;
        with_view_mut(out, "out", |into| {
            py.detach(|| self.session.copy_from_worker0_to(register, into))
        })?
        .or_raise()?;
        Ok(())
    }

    /// Copies `arrays[i]` to worker `i` (one per worker) into a new register.
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
        Ok(Self::wrap(register))
    }

    /// Waits for worker `worker`'s commands; their failures are the error.
    fn sync_worker(&self, py: Python<'_>, worker: usize) -> PyResult<()> {
        py.detach(|| self.session.sync_worker(worker)).or_raise()
    }

    /// Waits for every worker; every failure is reported, worker by worker.
    fn sync_all(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.session.sync_all()).or_raise()
    }

    /// `register`'s value on `worker`: an int, float, str, shape tuple or NumPy array.
    fn debug_get<'py>(
        &self,
        py: Python<'py>,
        register: PyRef<'_, PyRegister>,
        worker: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let register = register.get()?;
        let value = py
            .detach(|| self.session.debug_get(register, worker))
            .or_raise()?;
        value_to_py(py, &value)
    }

    /// Sets `register` on `worker` to `value` (an int, float, str, shape tuple or array).
    fn debug_set(
        &self,
        py: Python<'_>,
        register: PyRef<'_, PyRegister>,
        worker: usize,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let register = register.get()?;
        let value = if value.is_instance_of::<PyInt>() {
            HostValue::Int(value.extract()?)
        } else if value.is_instance_of::<PyFloat>() {
            HostValue::Float(value.extract()?)
        } else if value.is_instance_of::<PyString>() {
            HostValue::Str(value.extract()?)
        } else if value.is_instance_of::<PyTuple>() || value.is_instance_of::<PyList>() {
            HostValue::Shape(shape_arg(value)?)
        } else if let Ok(array) = value.cast::<PyUntypedArray>() {
            HostValue::Array(to_host(array, "value")?)
        } else {
            return Err(PyTypeError::new_err(
                "a register's value is an int, float, str, shape tuple or NumPy array",
            ));
        };
        py.detach(|| self.session.debug_set(register, worker, &value))
            .or_raise()
    }

    /// Element-wise `op` ("sum", "prod", "min", "max", "avg") of `src` over the workers
    /// (or within each group) into `dst` on each of them.
    #[pyo3(signature = (src, dst, op = "sum", in_group = false))]
    fn allreduce(
        &self,
        py: Python<'_>,
        src: PyRef<'_, PyRegister>,
        dst: PyRef<'_, PyRegister>,
        op: &str,
        in_group: bool,
    ) -> PyResult<()> {
        let (src, dst, op) = (src.get()?, dst.get()?, reduce_op(op)?);
        py.detach(|| self.session.allreduce(src, dst, op, scope(in_group)))
            .or_raise()
    }

    /// Every member's `src` concatenated in worker order, into `dst` on every member.
    #[pyo3(signature = (src, dst, in_group = false))]
    fn allgather(
        &self,
        py: Python<'_>,
        src: PyRef<'_, PyRegister>,
        dst: PyRef<'_, PyRegister>,
        in_group: bool,
    ) -> PyResult<()> {
        let (src, dst) = (src.get()?, dst.get()?);
        py.detach(|| self.session.allgather(src, dst, scope(in_group)))
            .or_raise()
    }

    /// The leader's `src` into `dst` on every member.
    #[pyo3(signature = (src, dst, in_group = false))]
    fn broadcast_from_worker0(
        &self,
        py: Python<'_>,
        src: PyRef<'_, PyRegister>,
        dst: PyRef<'_, PyRegister>,
        in_group: bool,
    ) -> PyResult<()> {
        let (src, dst) = (src.get()?, dst.get()?);
        py.detach(|| {
            self.session
                .broadcast_from_worker0(src, dst, scope(in_group))
        })
        .or_raise()
    }

    /// The leader's `src` cut into equal parts, part `i` into `dst` on member `i`.
    #[pyo3(signature = (src, dst, in_group = false))]
    fn scatter_from_worker0(
        &self,
        py: Python<'_>,
        src: PyRef<'_, PyRegister>,
        dst: PyRef<'_, PyRegister>,
        in_group: bool,
    ) -> PyResult<()> {
        let (src, dst) = (src.get()?, dst.get()?);
        py.detach(|| self.session.scatter_from_worker0(src, dst, scope(in_group)))
            .or_raise()
    }

    /// Every member's `src` concatenated in worker order, into `dst` on the leader.
    #[pyo3(signature = (src, dst, in_group = false))]
    fn gather_to_worker0(
        &self,
        py: Python<'_>,
        src: PyRef<'_, PyRegister>,
        dst: PyRef<'_, PyRegister>,
        in_group: bool,
    ) -> PyResult<()> {
        let (src, dst) = (src.get()?, dst.get()?);
        py.detach(|| self.session.gather_to_worker0(src, dst, scope(in_group)))
            .or_raise()
    }

    /// Worker `source`'s `src` into `dst` on worker `to`.
    #[pyo3(signature = (src, dst, *, source, to))]
    fn send_to_worker(
        &self,
        py: Python<'_>,
        src: PyRef<'_, PyRegister>,
        dst: PyRef<'_, PyRegister>,
        source: usize,
        to: usize,
    ) -> PyResult<()> {
        let (src, dst) = (src.get()?, dst.get()?);
        py.detach(|| self.session.send_to_worker(src, source, to, dst))
            .or_raise()
    }

    /// Each worker of group `group`'s `src` into `dst` on the worker of the same rank in
    /// the next group.
    fn send_to_next_group(
        &self,
        py: Python<'_>,
        src: PyRef<'_, PyRegister>,
        dst: PyRef<'_, PyRegister>,
        group: usize,
    ) -> PyResult<()> {
        let (src, dst) = (src.get()?, dst.get()?);
        py.detach(|| self.session.send_to_next_group(src, dst, group))
            .or_raise()
    }

    /// Loads every tensor of the safetensors file at `path`: tensors named in `split` are
    /// cut into equal parts along the given dimension (part `r` to the worker of rank `r`,
    /// over all workers or, with `in_group`, within each group); the others follow
    /// `default_split` (a dimension), or are replicated. Returns a register per tensor.
    #[pyo3(signature = (path, split = HashMap::new(), default_split = None, in_group = false))]
    fn load_safetensors(
        &self,
        py: Python<'_>,
        path: PathBuf,
        split: HashMap<String, usize>,
        default_split: Option<usize>,
        in_group: bool,
    ) -> PyResult<HashMap<String, PyRegister>> {
        let mut rules = ShardRules::new().with_scope(scope(in_group));
        if let Some(dim) = default_split {
            rules = rules.with_default(ShardRule::Split { dim });
        }
        for (name, dim) in split {
            rules = rules.split(name, dim);
        }
        let loaded = py
            .detach(|| self.session.load_safetensors(&path, &rules))
            .or_raise()?;
        Ok(loaded
            .into_iter()
            .map(|(k, r)| (k, Self::wrap(r)))
            .collect())
    }

    /// Loads presharded files, `paths[i]` holding worker `i`'s part of every tensor.
    fn load_presharded(
        &self,
        py: Python<'_>,
        paths: Vec<PathBuf>,
    ) -> PyResult<HashMap<String, PyRegister>> {
        let loaded = py
            .detach(|| self.session.load_presharded(&paths))
            .or_raise()?;
        Ok(loaded
            .into_iter()
            .map(|(k, r)| (k, Self::wrap(r)))
            .collect())
    }

    /// How long (seconds) a worker's oldest unanswered command may take before it is sent
    /// again.
    fn set_deadline(&self, seconds: f64) -> PyResult<()> {
        self.session.set_deadline(duration(seconds)?).or_raise()
    }

    /// How long (seconds) a busy worker may work on one command before it fails as busy.
    fn set_busy_deadline(&self, seconds: f64) -> PyResult<()> {
        self.session
            .set_busy_deadline(duration(seconds)?)
            .or_raise()
    }

    /// Stops every worker; calling it again does nothing.
    fn shutdown(&self, py: Python<'_>) {
        py.detach(|| self.session.shutdown());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.shutdown(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<tessera.Session {} workers={} groups={}>",
            self.session.id(),
            self.session.num_workers(),
            self.session.num_groups()
        )
    }
}

/// `seconds` as a duration: finite and positive, else ValueError.
pub(crate) fn duration(seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            PyValueError::new_err(format!("{seconds} seconds is not a positive, finite time"))
        })
}
