//! `tessera.Session`: the SPMD session (TVM Disco's controller and workers) from Python.
//!
//! # Contract
//!
//! - Every method is the Rust [`Session`]'s of the same name, with its rules (one order,
//!   pipelined calls whose failures come back at the next sync, destination-passing
//!   collectives checked before the first byte moves); see `tessera_host::session`.
//! - **The GIL is released** while the workers work: every method that reaches a worker
//!   lets other Python threads run meanwhile (and never waits for the session's lock, or
//!   frees a register on the workers, while holding it).
//! - **Ctrl-C while waiting.** A method that waits for the workers (a sync, a read, a
//!   collective, a function's lookup) waits in slices of [`SLICE`], looking for signals
//!   between them: a Ctrl-C is raised as `KeyboardInterrupt` within a slice. Nothing is
//!   cancelled — the commands already sent keep running on the workers and stay pending in
//!   order, and the session stays usable: the next sync waits for them and reports their
//!   failures (`shutdown()` abandons them instead). A NumPy array handed to a method is borrowed
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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use numpy::PyUntypedArray;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyList, PyString, PyTuple};
use tessera_core::dtype::DataType;
use tessera_host::array::{HostArray, HostValue};
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::loader::{ShardRule, ShardRules};
use tessera_host::session::{
    CallArg, Function, Register, Session, SessionError as RustSessionError,
};

use crate::arrays::{self, to_host, to_numpy, with_view, with_view_mut};
use crate::error::{freed, OrRaise};

/// How long a wait for the workers runs between looks for a signal (module doc).
const SLICE: Duration = Duration::from_millis(100);

/// A controller and its workers (see the module documentation).
#[pyclass(name = "Session", module = "tessera", frozen)]
pub(crate) struct PySession {
    session: Session,
    /// Functions called by name, each looked up once (a lookup waits for every worker;
    /// a device's function table never changes).
    functions: Mutex<HashMap<String, Function>>,
}

/// Collecting a session shuts it down (its workers stop, child processes are reaped):
/// never with the GIL held.
impl Drop for PySession {
    fn drop(&mut self) {
        let session = &self.session;
        Python::attach(|py| py.detach(|| session.shutdown()));
    }
}

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
    fn new(register: Register) -> Self {
        Self {
            register: Mutex::new(Some(Arc::new(register))),
        }
    }

    /// The register, unless it was freed.
    fn get(&self) -> PyResult<Arc<Register>> {
        self.slot().clone().ok_or_else(freed)
    }

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

/// A shape from a tuple or list of non-negative ints.
fn shape_arg(value: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
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
fn scalar(value: &Bound<'_, PyAny>) -> PyResult<Option<Scalar>> {
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

enum Scalar {
    Int(i64),
    Float(f64),
    Str(String),
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

    fn cache(&self) -> MutexGuard<'_, HashMap<String, Function>> {
        self.functions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for `worker`'s commands (every worker's: `None`) as `sync_worker` (`sync_all`)
    /// does, in slices of [`SLICE`] with the GIL released, looking for signals between
    /// them (module doc: Ctrl-C while waiting).
    fn wait(&self, py: Python<'_>, worker: Option<usize>) -> PyResult<()> {
        loop {
            let done = py
                .detach(|| match worker {
                    Some(worker) => self.session.sync_worker_for(worker, SLICE),
                    None => self.session.sync_all_for(SLICE),
                })
                .or_raise()?;
            if done {
                return Ok(());
            }
            py.check_signals()?;
        }
    }

    /// Runs `f` with the GIL released, `registers` held until it is done (and, if they
    /// are the last references, freed on the workers before the GIL is taken back).
    fn run<R: Send>(
        &self,
        py: Python<'_>,
        registers: Vec<Arc<Register>>,
        f: impl FnOnce(&Session, &[Arc<Register>]) -> R + Send,
    ) -> R {
        py.detach(move || {
            let result = f(&self.session, &registers);
            drop(registers);
            result
        })
    }

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
    /// Starts `workers` devices on `placement` ("thread", "process" or "qemu"), with
    /// `memory` bytes each (4 KiB to 1 GiB) where the host places them, in `groups` equal
    /// contiguous groups.
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
        let memory = crate::placement::device_memory(memory)?;
        let session = py
            .detach(|| Session::new(&placement, workers, groups, memory))
            .or_raise()?;
        Ok(Self {
            session,
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// This session's identity in this process (its registers carry it).
    #[getter]
    fn id(&self) -> u64 {
        self.session.id()
    }

    /// Number of workers (0 once shut down).
    #[getter]
    fn num_workers(&self, py: Python<'_>) -> usize {
        py.detach(|| self.session.num_workers())
    }

    /// Number of groups.
    #[getter]
    fn num_groups(&self, py: Python<'_>) -> usize {
        py.detach(|| self.session.num_groups())
    }

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

    /// Waits for worker `worker`'s commands; their failures are the error.
    fn sync_worker(&self, py: Python<'_>, worker: usize) -> PyResult<()> {
        self.wait(py, Some(worker))
    }

    /// Waits for every worker; every failure is reported, worker by worker.
    fn sync_all(&self, py: Python<'_>) -> PyResult<()> {
        self.wait(py, None)
    }

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
            .map(|(k, r)| (k, PyRegister::new(r)))
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
            .map(|(k, r)| (k, PyRegister::new(r)))
            .collect())
    }

    /// How long (seconds) a worker's oldest unanswered command may take before it is sent
    /// again.
    fn set_deadline(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let deadline = duration(seconds)?;
        py.detach(|| self.session.set_deadline(deadline)).or_raise()
    }

    /// How long (seconds) a busy worker may work on one command before it fails as busy.
    fn set_busy_deadline(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let deadline = duration(seconds)?;
        py.detach(|| self.session.set_busy_deadline(deadline))
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

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<tessera.Session {} workers={} groups={}>",
            self.session.id(),
            self.num_workers(py),
            self.num_groups(py)
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
