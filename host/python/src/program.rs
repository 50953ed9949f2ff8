//! `tessera.Program`: a core program built from Python, and the main job's data and
//! starting weights (so a Python program can train exactly what `tessera train` trains).
//!
//! # Contract
//!
//! - Each method adds what core's builder adds, with its capacities (a name too long, a
//!   rank too large, one variable too many: `ProgramError`); `check(replicas)` applies
//!   core's rules to the whole program, which `Runtime` also does before any device
//!   starts.
//! - Groupings are written as strings and tuples: `"all"`, `"none"`,
//!   `("consecutive", k)`, `("orthogonal", k)`, `("strided", stride, group_size)`;
//!   retrieval `"one_per_group"` or `"all_replicas"`; sharding `"none"`, `"balanced"`,
//!   `"padded_tail"` or `("explicit", per_replica, [(begin, end), ...])` (shards of
//!   `per_replica` elements, and where the tensor's elements lie in the gathered buffer); anchor return types `"all"`, `"final"`, `"sum"` or `("every", n)`.
//!   Anything else is a `ValueError` naming the choices.

use std::collections::HashMap;

use numpy::PyUntypedArray;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{AnchorTensor, Layer, Optimizer, Program, Sharding, MAX_INTERVALS};
use tessera_core::shard::Interval;
use tessera_core::stream::AnchorReturnType;
use tessera_host::array::HostArray;
use tessera_host::train::Dataset;

use crate::arrays::{self, to_numpy};
use crate::error::OrRaise;

/// A program under construction (see the module documentation).
#[pyclass(name = "Program", module = "tessera")]
#[derive(Clone)]
pub(crate) struct PyProgram {
    pub(crate) program: Program,
}

fn optimizer(learning_rate: f32, momentum: Option<f32>) -> PyResult<Optimizer> {
    Optimizer::check_values(learning_rate, momentum.unwrap_or(0.0)).or_raise()?;
    Ok(match momentum {
        None => Optimizer::Sgd { learning_rate },
        Some(momentum) => Optimizer::SgdMomentum {
            learning_rate,
            momentum,
        },
    })
}

fn grouping(spec: &Bound<'_, PyAny>) -> PyResult<GroupingSpec> {
    let choices = "a grouping is \"all\", \"none\", (\"consecutive\", k), (\"orthogonal\", k) \
                   or (\"strided\", stride, group_size)";
    if let Ok(name) = spec.extract::<String>() {
        return match name.as_str() {
            "all" => Ok(GroupingSpec::Comm(CommGroup::All)),
            "none" => Ok(GroupingSpec::Comm(CommGroup::None)),
            _ => Err(PyValueError::new_err(format!("{name:?}: {choices}"))),
        };
    }
    if let Ok((name, k)) = spec.extract::<(String, usize)>() {
        return match name.as_str() {
            "consecutive" => Ok(GroupingSpec::Comm(CommGroup::Consecutive(k))),
            "orthogonal" => Ok(GroupingSpec::Comm(CommGroup::Orthogonal(k))),
            _ => Err(PyValueError::new_err(format!("({name:?}, {k}): {choices}"))),
        };
    }
    if let Ok((name, stride, group_size)) = spec.extract::<(String, usize, usize)>() {
        if name == "strided" {
            return Ok(GroupingSpec::Strided { stride, group_size });
        }
    }
    Err(PyValueError::new_err(choices))
}

fn retrieval(name: &str) -> PyResult<RetrievalMode> {
    match name {
        "one_per_group" => Ok(RetrievalMode::OnePerGroup),
        "all_replicas" => Ok(RetrievalMode::AllReplicas),
        _ => Err(PyValueError::new_err(format!(
            "retrieval {name:?} is neither \"one_per_group\" nor \"all_replicas\""
        ))),
    }
}

fn sharding(spec: &Bound<'_, PyAny>) -> PyResult<Sharding> {
    let choices = "a sharding is \"none\", \"balanced\", \"padded_tail\" or (\"explicit\", \
                   per_replica, [(begin, end), ...])";
    if let Ok(name) = spec.extract::<String>() {
        return match name.as_str() {
            "none" => Ok(Sharding::None),
            "balanced" => Ok(Sharding::Balanced),
            "padded_tail" => Ok(Sharding::PaddedTail),
            _ => Err(PyValueError::new_err(format!("{name:?}: {choices}"))),
        };
    }
    let Ok((name, per_replica, spans)) = spec.extract::<(String, u32, Vec<(usize, usize)>)>()
    else {
        return Err(PyValueError::new_err(choices));
    };
    if name != "explicit" {
        return Err(PyValueError::new_err(format!("{name:?}: {choices}")));
    }
    let mut intervals = heapless::Vec::new();
    for (begin, end) in spans {
        intervals.push(Interval { begin, end }).map_err(|_| {
            PyValueError::new_err(format!(
                "an explicit sharding has at most {MAX_INTERVALS} intervals"
            ))
        })?;
    }
    Ok(Sharding::Explicit {
        per_replica,
        intervals,
    })
}

fn return_type(spec: &Bound<'_, PyAny>) -> PyResult<AnchorReturnType> {
    let choices = "an anchor's return type is \"all\", \"final\", \"sum\" or (\"every\", n)";
    if let Ok(name) = spec.extract::<String>() {
        return match name.as_str() {
            "all" => Ok(AnchorReturnType::All),
            "final" => Ok(AnchorReturnType::Final),
            "sum" => Ok(AnchorReturnType::Sum),
            _ => Err(PyValueError::new_err(format!("{name:?}: {choices}"))),
        };
    }
    match spec.extract::<(String, usize)>() {
        Ok((name, n)) if name == "every" => Ok(AnchorReturnType::EveryN(n)),
        _ => Err(PyValueError::new_err(choices)),
    }
}

fn shape(dims: Vec<usize>) -> PyResult<Vec<u32>> {
    arrays::shape(&dims)
}

fn index(value: u8, count: usize, what: &str) -> PyResult<u8> {
    if usize::from(value) < count {
        Ok(value)
    } else {
        Err(PyValueError::new_err(format!(
            "{what} {value} does not exist: the program has {count}"
        )))
    }
}

impl PyProgram {
    fn layer(&mut self, layer: Layer) -> PyResult<()> {
        self.program.add_layer(layer).or_raise()
    }
}

#[pymethods]
impl PyProgram {
    /// An empty program: `batches_per_step` batches of `accumulation` micro-batches of
    /// `micro_batch_size` samples per step, trained by SGD at `learning_rate` (with
    /// `momentum`, SGD with momentum).
    #[new]
    #[pyo3(signature = (batches_per_step = 1, accumulation = 1, learning_rate = 0.1, momentum = None, micro_batch_size = 1, instrumented = false))]
    fn new(
        batches_per_step: u32,
        accumulation: u32,
        learning_rate: f32,
        momentum: Option<f32>,
        micro_batch_size: u32,
        instrumented: bool,
    ) -> PyResult<Self> {
        let mut program = Program::new(
            batches_per_step,
            accumulation,
            optimizer(learning_rate, momentum)?,
        );
        program.micro_batch_size = micro_batch_size;
        program.instrumented = instrumented;
        Ok(Self { program })
    }

    /// Adds an f32 variable; returns its index.
    #[pyo3(signature = (name, shape, group = None, retrieval = "one_per_group", sharding = None))]
    fn add_variable(
        &mut self,
        name: &str,
        shape: Vec<usize>,
        group: Option<&Bound<'_, PyAny>>,
        retrieval: &str,
        sharding: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u8> {
        let grouping = match group {
            Some(spec) => grouping(spec)?,
            None => GroupingSpec::Comm(CommGroup::All),
        };
        let shape = self::shape(shape)?;
        self.program
            .add_variable(
                name,
                &shape,
                grouping,
                self::retrieval(retrieval)?,
                match sharding {
                    Some(spec) => self::sharding(spec)?,
                    None => Sharding::None,
                },
            )
            .or_raise()
    }

    /// Adds a stream of `dtype` samples shaped `sample` (with `broadcast`, one sample for
    /// every replica); with `input`, it feeds the first layer. Returns its index.
    #[pyo3(signature = (name, dtype, sample, broadcast = false, input = false))]
    fn add_stream(
        &mut self,
        name: &str,
        dtype: &str,
        sample: Vec<usize>,
        broadcast: bool,
        input: bool,
    ) -> PyResult<u8> {
        let dtype = arrays::from_name(dtype).ok_or_else(|| {
            PyTypeError::new_err(format!("tessera has no element type {dtype:?}"))
        })?;
        let sample = shape(sample)?;
        let index = self
            .program
            .add_stream(name, dtype, &sample, broadcast)
            .or_raise()?;
        if input {
            self.program.input = index;
        }
        Ok(index)
    }

    /// `y = W·x`, `W` the variable `weight` shaped `[outputs, inputs]`.
    fn linear(&mut self, weight: u8) -> PyResult<()> {
        let weight = index(weight, self.program.variables.len(), "variable")?;
        self.layer(Layer::Linear { weight })
    }

    /// `y = x + b`, `b` the variable `bias` shaped `[width]`.
    fn bias(&mut self, bias: u8) -> PyResult<()> {
        let bias = index(bias, self.program.variables.len(), "variable")?;
        self.layer(Layer::Bias { bias })
    }

    /// `y = max(x, 0)`.
    fn relu(&mut self) -> PyResult<()> {
        self.layer(Layer::Relu)
    }

    /// Each element zeroed with probability `rate`, the others scaled by `1/(1 - rate)`.
    fn dropout(&mut self, rate: f32) -> PyResult<()> {
        self.layer(Layer::Dropout { rate })
    }

    /// Loss `-log softmax(x)[label]`, labels from the int32 stream `labels`.
    fn softmax_cross_entropy(&mut self, labels: u8) -> PyResult<()> {
        let labels = index(labels, self.program.streams.len(), "stream")?;
        self.layer(Layer::SoftmaxCrossEntropy { labels })
    }

    /// Loss `sum((x - t)^2) / width`, `t` from the float32 stream `targets`.
    fn mean_squared_error(&mut self, targets: u8) -> PyResult<()> {
        let targets = index(targets, self.program.streams.len(), "stream")?;
        self.layer(Layer::MeanSquaredError { targets })
    }

    /// Returns `tensor` ("loss" or "output") to the host as `return_type` says.
    #[pyo3(signature = (tensor, return_type = None))]
    fn add_anchor(&mut self, tensor: &str, return_type: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let tensor = match tensor {
            "loss" => AnchorTensor::Loss,
            "output" => AnchorTensor::Output,
            other => {
                return Err(PyValueError::new_err(format!(
                    "anchor {other:?} is neither \"loss\" nor \"output\""
                )))
            }
        };
        let return_type = match return_type {
            Some(spec) => self::return_type(spec)?,
            None => AnchorReturnType::All,
        };
        self.program.add_anchor(tensor, return_type).or_raise()
    }

    /// Applies core's rules to the whole program on `replicas` replicas (ProgramError
    /// naming the rule).
    fn check(&self, replicas: usize) -> PyResult<()> {
        self.program.check(replicas).or_raise()
    }

    /// The variables' names, by index.
    #[getter]
    fn variables(&self) -> Vec<String> {
        self.program
            .variables
            .iter()
            .map(|v| v.name.to_string())
            .collect()
    }

    /// The streams' names, by index.
    #[getter]
    fn streams(&self) -> Vec<String> {
        self.program
            .streams
            .iter()
            .map(|s| s.name.to_string())
            .collect()
    }

    /// Batches per step.
    #[getter]
    fn batches_per_step(&self) -> u32 {
        self.program.batches_per_step
    }

    /// Micro-batches per batch.
    #[getter]
    fn accumulation(&self) -> u32 {
        self.program.accumulation
    }

    /// Samples per micro-batch.
    #[getter]
    fn micro_batch_size(&self) -> u32 {
        self.program.micro_batch_size
    }

    fn __repr__(&self) -> String {
        format!(
            "<tessera.Program variables={:?} streams={:?} layers={}>",
            self.variables(),
            self.streams(),
            self.program.layers.len()
        )
    }
}

/// `tessera train`'s synthetic data: `samples` points on `classes` interleaved spirals,
/// shuffled, from `seed`; returns `(inputs float32 [samples, 2], labels int32 [samples])`.
#[pyfunction]
#[pyo3(signature = (samples = 3000, classes = 3, seed = 42))]
pub(crate) fn spirals<'py>(
    py: Python<'py>,
    samples: usize,
    classes: usize,
    seed: u64,
) -> PyResult<(Bound<'py, PyUntypedArray>, Bound<'py, PyUntypedArray>)> {
    let data = Dataset::spirals(samples, classes, seed)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let (inputs, labels) = data
        .batch(0, samples)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((to_numpy(py, inputs)?, to_numpy(py, labels)?))
}

/// `tessera train`'s starting weights for `program` on `replicas` replicas, from `seed`:
/// Glorot-uniform matrices and zero biases in their host shapes, by variable name.
#[pyfunction]
pub(crate) fn initial_weights<'py>(
    py: Python<'py>,
    program: &PyProgram,
    replicas: usize,
    seed: u64,
) -> PyResult<HashMap<String, Bound<'py, PyUntypedArray>>> {
    // Checked first: the draws are sized by the program's shapes and groupings.
    program.program.check(replicas).or_raise()?;
    let weights =
        tessera_host::train::model::initial_weights(&program.program, replicas, seed).or_raise()?;
    named_to_numpy(py, weights)
}

/// Named host arrays as named NumPy arrays (over the same bytes).
pub(crate) fn named_to_numpy(
    py: Python<'_>,
    named: std::collections::BTreeMap<String, HostArray>,
) -> PyResult<HashMap<String, Bound<'_, PyUntypedArray>>> {
    named
        .into_iter()
        .map(|(name, array)| Ok((name, to_numpy(py, array)?)))
        .collect()
}
