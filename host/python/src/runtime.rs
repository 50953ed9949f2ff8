//! `tessera.Runtime`: the device runtime (PopART's `Devicex`) from Python — a program
//! prepared on its replicas, weights to and from the host by name, training steps from
//! named NumPy arrays, anchors back as NumPy arrays, optimizer values, seeds, RNG state,
//! checkpoints and executables.
//!
//! # Contract
//!
//! - Every method is the Rust [`Runtime`]'s, with its rules (sizes checked on every call,
//!   a failed step leaving a defined state: see `tessera_host::runtime::recovery`).
//! - **Named arrays are lent**, not copied: the runtime reads a step's streams, weights and
//!   optimizer state where NumPy keeps them (each sample copied once, into its device;
//!   converted first when its type differs from the stream's), with the GIL released — a
//!   Python thread writing into one of them meanwhile races, as with any native library;
//!   anchors and weights come back as NumPy arrays over the host's buffers. Arrays must be
//!   C-contiguous (see `arrays`).
//! - **The GIL is released** while the devices work. One runtime runs one call at a time:
//!   a second Python thread calling into it waits for the first.
//! - A checkpoint saved here is the file `tessera train --checkpoint` writes (with the
//!   training data's record when `data` is given, which `tessera train --resume` checks),
//!   and `resume` restores one `tessera train` wrote.
//! - **Across the ranks of an MPI job** (`mpirun -np N python script.py`, the package built
//!   with the cargo feature `mpi`): every rank runs the script and its runtime is one
//!   instance of the job, starting and driving its window of the replicas (instance `k`
//!   of `n`: replicas `k·R/n .. (k+1)·R/n`, `Runtime.window`). Every rank calls the same
//!   methods in the same order. A step's arrays and anchors are the window's (each rank
//!   feeds its own replicas, and gets their anchors back); weights to host, the RNG state
//!   and the cycle counts are the whole job's on every rank, and the reductions of a step
//!   span the ranks, so the weights are one host's bit for bit, as `tessera train` under
//!   `mpirun` does it (`tessera_host::instance`; MPI's life in Python: `ranks`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use numpy::{PyArrayMethods, PyUntypedArray};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tessera_core::dtype::DataType;
use tessera_core::program::Optimizer;
use tessera_host::array::ArrayView;
use tessera_host::checkpoint::{Checkpoint, CheckpointError};
use tessera_host::executable::Executable;
use tessera_host::runtime::Runtime;
use tessera_host::train::Dataset;
use tessera_host::transport::DEFAULT_BAUD;

use crate::arrays::{to_host, Borrowed, BorrowedMut};
use crate::error::{OrRaise, Raise};
use crate::placement::{device_memory, placement, Needs};
use crate::program::{named_to_numpy, PyProgram};
use crate::ranks::Part;

/// A program prepared on its replicas (see the module documentation).
#[pyclass(name = "Runtime", module = "tessera", frozen)]
pub(crate) struct PyRuntime {
    runtime: Mutex<Runtime>,
}

/// Named NumPy arrays lent to the runtime (see `arrays`): the borrows, held while the
/// runtime reads them.
fn lend<'py>(
    arrays: &HashMap<String, Bound<'py, PyUntypedArray>>,
    what: &str,
) -> PyResult<Vec<(String, Borrowed<'py>)>> {
    arrays
        .iter()
        .map(|(name, array)| {
            Ok((
                name.clone(),
                Borrowed::new(array, &format!("{what} {name:?}"))?,
            ))
        })
        .collect()
}

/// The views of `lent`, by name.
fn views<'a>(lent: &'a [(String, Borrowed<'_>)]) -> PyResult<BTreeMap<String, ArrayView<'a>>> {
    lent.iter()
        .map(|(name, borrowed)| Ok((name.clone(), borrowed.view()?)))
        .collect()
}

impl PyRuntime {
    /// Runs `f` on the runtime with the GIL released.
    fn with<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut Runtime) -> R + Send) -> R {
        py.detach(|| f(&mut self.runtime.lock().unwrap_or_else(PoisonError::into_inner)))
    }
}

#[pymethods]
impl PyRuntime {
    /// Checks `program` with core's rules, starts `replicas` devices on `placement`
    /// ("thread", "process", "qemu", "serial"; `memory` bytes each where the host places
    /// them; "serial": one of `ports` per replica, at `baud`) and prepares the program on
    /// every one.
    #[new]
    #[pyo3(signature = (program, replicas, placement = "thread", memory = 16 << 20, *, exe = None, firmware = None, ports = None, baud = DEFAULT_BAUD))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, one each
    fn new(
        py: Python<'_>,
        program: &PyProgram,
        replicas: usize,
        placement: &str,
        memory: usize,
        exe: Option<PathBuf>,
        firmware: Option<PathBuf>,
        ports: Option<Vec<PathBuf>>,
        baud: u32,
    ) -> PyResult<Self> {
        let needs = Needs {
            exe,
            firmware,
            ports,
            baud,
        };
        let placement = self::placement(py, placement, needs)?;
        let memory = device_memory(memory)?;
        let program = program.program.clone();
        let instances = crate::ranks::instances(py, Part::Runtime)?;
        let runtime = py
            .detach(|| match instances {
                Some(instances) => {
                    Runtime::prepare_in(program, replicas, instances, &placement, memory)
                }
                None => Runtime::prepare(program, replicas, &placement, memory),
            })
            .or_raise()?;
        Ok(Self {
            runtime: Mutex::new(runtime),
        })
    }

    /// Starts the devices a saved executable was prepared for and places its program as
    /// saved (not built again).
    #[staticmethod]
    #[pyo3(signature = (path, placement = "thread", memory = 16 << 20, *, exe = None, firmware = None, ports = None, baud = DEFAULT_BAUD))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, one each
    fn load_executable(
        py: Python<'_>,
        path: PathBuf,
        placement: &str,
        memory: usize,
        exe: Option<PathBuf>,
        firmware: Option<PathBuf>,
        ports: Option<Vec<PathBuf>>,
        baud: u32,
    ) -> PyResult<Self> {
        let needs = Needs {
            exe,
            firmware,
            ports,
            baud,
        };
        let placement = self::placement(py, placement, needs)?;
        let memory = device_memory(memory)?;
        let executable = py.detach(|| Executable::load(&path)).or_raise()?;
        let instances = crate::ranks::instances(py, Part::Runtime)?;
        let runtime = py
            .detach(|| match instances {
                Some(instances) => {
                    Runtime::load_executable_in(&executable, instances, &placement, memory)
                }
                None => Runtime::load_executable(&executable, &placement, memory),
            })
            .or_raise()?;
        Ok(Self {
            runtime: Mutex::new(runtime),
        })
    }

    /// Saves the prepared program and the device limits it was prepared for.
    fn save_executable(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.with(py, |r| r.executable().save(&path)).or_raise()
    }

    /// Number of replicas.
    #[getter]
    fn replicas(&self, py: Python<'_>) -> usize {
        self.with(py, |r| r.replicas())
    }

    /// The replicas this process starts and drives: all of them on one host, this
    /// instance's window of them under `mpirun`.
    #[getter]
    fn window<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let window = self.with(py, |r| r.window());
        let range = py.import("builtins")?.getattr("range")?;
        range.call1((window.offset, window.offset + window.local))
    }

    /// This process's instance of the job (its MPI rank; 0 on one host).
    #[getter]
    fn instance(&self, py: Python<'_>) -> usize {
        self.with(py, |r| r.instances().rank())
    }

    /// The job's instances (MPI ranks; 1 on one host).
    #[getter]
    fn instances(&self, py: Python<'_>) -> usize {
        self.with(py, |r| r.instances().size())
    }

    /// The program the replicas run (a copy).
    #[getter]
    fn program(&self, py: Python<'_>) -> PyProgram {
        PyProgram {
            program: self.with(py, |r| r.program().clone()),
        }
    }

    /// Reduction exchanges of one step.
    #[getter]
    fn rounds_per_step(&self, py: Python<'_>) -> u32 {
        self.with(py, |r| r.rounds_per_step())
    }

    /// The device (its first replica) lost for good in a failed step, or `None`: once one
    /// is, this runtime cannot run again (every call raises `DeviceLost`); make a new
    /// `Runtime`, then load its weights or resume a checkpoint.
    #[getter]
    fn lost(&self, py: Python<'_>) -> Option<u32> {
        self.with(py, |r| r.lost())
    }

    /// True after `weights_to_host`, until the next step (PopART's `weightsInSync`: the
    /// host's copy is the replicas' weights). A step that failed after some replicas
    /// applied updates is another matter: steps and weights to host then raise
    /// `RuntimeError(kind="Diverged")` until `weights_from_host` (or `resume`) loads every
    /// variable again.
    #[getter]
    fn weights_in_sync(&self, py: Python<'_>) -> bool {
        self.with(py, |r| r.weights_in_sync())
    }

    /// Loads every variable from `weights` (by name, in its host shape).
    fn weights_from_host(
        &self,
        py: Python<'_>,
        weights: HashMap<String, Bound<'_, PyUntypedArray>>,
    ) -> PyResult<()> {
        let lent = lend(&weights, "weight")?;
        let weights = views(&lent)?;
        self.with(py, |r| r.weights_from_host(&weights)).or_raise()
    }

    /// Starts a timeline of this process's work, written to `path` in the Chrome
    /// trace-event format (Perfetto, chrome://tracing) by `finish_trace` or when the runtime
    /// ends. One trace at a time per process; the file is created now. Across MPI ranks each
    /// rank writes its own (`run.json` becomes `run.rank1.json` on rank 1).
    fn start_trace(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.with(py, |r| r.start_trace(&path)).or_raise()
    }

    /// Writes the trace `start_trace` began: the number of events written, or `None` if
    /// no trace was running.
    fn finish_trace(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        let summary = self.with(py, |r| r.finish_trace()).or_raise()?;
        Ok(summary.map(|s| s.events))
    }

    /// Every variable, by name, in its returned shape.
    fn weights_to_host<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<HashMap<String, Bound<'py, PyUntypedArray>>> {
        let weights = self.with(py, |r| r.weights_to_host()).or_raise()?;
        named_to_numpy(py, weights)
    }

    /// Every variable named in `out` into its NumPy array, in place (PopART's
    /// `weightsToHost` into the user's buffers): each must be float32, C-contiguous,
    /// writable and of the variable's returned shape, all checked before the first byte
    /// moves; variables not named are not read. Nothing is allocated.
    fn weights_to_host_into(
        &self,
        py: Python<'_>,
        out: HashMap<String, Bound<'_, PyUntypedArray>>,
    ) -> PyResult<()> {
        let mut lent = out
            .iter()
            .map(|(name, array)| {
                let borrowed = BorrowedMut::new(array, &format!("weight {name:?}"))?;
                Ok((name.clone(), borrowed))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let mut into = BTreeMap::new();
        for (name, borrowed) in &mut lent {
            into.insert(name.clone(), borrowed.filled()?);
        }
        self.with(py, |r| r.weights_to_host_into(&mut into))
            .or_raise()
    }

    /// Loads the optimizer's state (velocities), by variable name.
    fn optimizer_state_from_host(
        &self,
        py: Python<'_>,
        state: HashMap<String, Bound<'_, PyUntypedArray>>,
    ) -> PyResult<()> {
        let lent = lend(&state, "optimizer state")?;
        let state = views(&lent)?;
        self.with(py, |r| r.optimizer_state_from_host(&state))
            .or_raise()
    }

    /// The optimizer's state (velocities), by variable name.
    fn optimizer_state_to_host<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<HashMap<String, Bound<'py, PyUntypedArray>>> {
        let state = self.with(py, |r| r.optimizer_state_to_host()).or_raise()?;
        named_to_numpy(py, state)
    }

    /// Runs one step on `inputs` (one array per stream, by name) and returns every anchor,
    /// by name.
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: HashMap<String, Bound<'_, PyUntypedArray>>,
    ) -> PyResult<HashMap<String, Bound<'py, PyUntypedArray>>> {
        let lent = lend(&inputs, "stream")?;
        let io = views(&lent)?;
        let anchors = self.with(py, |r| r.run(&io)).or_raise()?;
        named_to_numpy(py, anchors)
    }

    /// Sets the optimizer's values (its kind is the program's): SGD's learning rate, and
    /// the momentum of SGD with momentum.
    #[pyo3(signature = (learning_rate, momentum = None))]
    fn set_optimizer(
        &self,
        py: Python<'_>,
        learning_rate: f32,
        momentum: Option<f32>,
    ) -> PyResult<()> {
        let kind = self.with(py, |r| r.program().optimizer);
        let optimizer = match (kind, momentum) {
            (Optimizer::Sgd { .. }, None) => Optimizer::Sgd { learning_rate },
            (Optimizer::SgdMomentum { momentum: kept, .. }, m) => Optimizer::SgdMomentum {
                learning_rate,
                momentum: m.unwrap_or(kept),
            },
            (Optimizer::Sgd { .. }, Some(_)) => {
                return Err(PyValueError::new_err(
                    "the program trains by plain SGD: it has no momentum to set",
                ))
            }
        };
        self.with(py, |r| r.set_optimizer(optimizer)).or_raise()
    }

    /// Sends the random seed to every replica.
    fn set_random_seed(&self, py: Python<'_>, seed: u64) -> PyResult<()> {
        self.with(py, |r| r.set_random_seed(seed)).or_raise()
    }

    /// The random seed, as the first replica holds it.
    fn random_seed(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |r| r.random_seed()).or_raise()
    }

    /// Every replica's RNG state, concatenated in replica order (uint32).
    fn rng_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyUntypedArray>> {
        let words = self.with(py, |r| r.rng_state()).or_raise()?;
        Ok(numpy::PyArray1::from_vec(py, words).as_untyped().clone())
    }

    /// Sets every replica's RNG state from exactly 4 words per replica.
    fn set_rng_state(&self, py: Python<'_>, words: Vec<u32>) -> PyResult<()> {
        self.with(py, |r| r.set_rng_state(&words)).or_raise()
    }

    /// The work each replica counted, in multiply-adds (an instrumented program only).
    fn cycle_counts(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        self.with(py, |r| r.cycle_counts()).or_raise()
    }

    /// Saves the whole training state (weights, optimizer state, RNG state, `step`, `seed`)
    /// to `path` atomically; with `data=(inputs, labels)`, records them as
    /// `tessera train` does, so that `tessera train --resume` accepts the file.
    #[pyo3(signature = (path, step, seed, data = None))]
    fn save_checkpoint(
        &self,
        py: Python<'_>,
        path: PathBuf,
        step: u64,
        seed: u64,
        data: Option<(Bound<'_, PyUntypedArray>, Bound<'_, PyUntypedArray>)>,
    ) -> PyResult<()> {
        let record = data
            .map(|(inputs, labels)| record(&inputs, &labels))
            .transpose()?;
        // The runtime's failures are raised as the runtime's (a lost device, say).
        let captured = self
            .with(py, |r| Checkpoint::capture(r, step, seed))
            .map_err(|e| match e {
                CheckpointError::Runtime(e) => e.raise(),
                other => other.raise(),
            })?;
        let checkpoint = Checkpoint {
            data: record,
            ..captured
        };
        py.detach(|| checkpoint.save(&path)).or_raise()
    }

    /// Restores a checkpoint made for this program and replica count; returns its
    /// `(step, seed)`.
    fn resume(&self, py: Python<'_>, path: PathBuf) -> PyResult<(u64, u64)> {
        let (program, replicas) = self.with(py, |r| (r.program().clone(), r.replicas()));
        let checkpoint = py
            .detach(|| Checkpoint::load_for(&path, &program, replicas))
            .or_raise()?;
        self.with(py, |r| checkpoint.restore(r)).or_raise()?;
        Ok((checkpoint.step, checkpoint.seed))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        self.with(py, |r| {
            format!("<tessera.Runtime replicas={}>", r.replicas())
        })
    }
}

/// The data record `tessera train` keeps in a checkpoint, of `inputs [n, features]`
/// float32 and `labels [n]` int32 or int64.
fn record(
    inputs: &Bound<'_, PyUntypedArray>,
    labels: &Bound<'_, PyUntypedArray>,
) -> PyResult<tessera_host::checkpoint::DataRecord> {
    let bad = |what: &str| PyValueError::new_err(format!("data: {what}"));
    let (inputs, labels) = (to_host(inputs, "inputs")?, to_host(labels, "labels")?);
    let [n, features] = inputs.shape() else {
        return Err(bad("inputs are [samples, features]"));
    };
    let values = inputs.to_f32().ok_or_else(|| bad("inputs are float32"))?;
    // The same rule as `--data`: values a run trains from, labels that are classes.
    if let Some((at, value)) = tessera_core::finite::first_unfit(inputs.bytes()) {
        let features = (*features as usize).max(1);
        return Err(bad(&format!(
            "inputs hold {value} at row {}, column {}; every input must be finite and of \
             magnitude below 2^64 (1.8e19)",
            at / features,
            at % features
        )));
    }
    let label_values: Vec<i64> = match labels.dtype() {
        DataType::I32 => labels
            .to_i32()
            .unwrap_or_default()
            .into_iter()
            .map(i64::from)
            .collect(),
        DataType::I64 => labels.to_i64().unwrap_or_default(),
        _ => return Err(bad("labels are int32 or int64")),
    };
    if label_values.len() != *n as usize {
        return Err(bad("one label per sample"));
    }
    if let Some(at) = label_values.iter().position(|&l| l < 0) {
        return Err(bad(&format!(
            "label {} of sample {at} is negative: labels are classes, from 0",
            label_values[at]
        )));
    }
    let classes = label_values
        .iter()
        .copied()
        .max()
        .map_or(0, |m| m.max(0) as usize + 1);
    let dataset = Dataset {
        inputs: values,
        labels: label_values,
        features: *features as usize,
        classes,
        label_type: labels.dtype(),
    };
    Ok(dataset.record())
}
