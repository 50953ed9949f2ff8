//! A program: everything a device needs to run training steps, in one value both sides
//! understand.
//!
//! A [`Program`] names its tensors and says how each one lives on the replicas:
//!
//! - **variables** ([`Variable`]): weights with a data type, a shape, a grouping (which
//!   replicas share one value), a retrieval mode (how many rows come back to the host) and an
//!   optional [`Sharding`] across the replicas of their group (replicated tensor sharding:
//!   each member of a group holds one shard; the shard domain is the group);
//! - **streams** ([`Stream`]): host-to-device inputs with a data type and a sample shape,
//!   either one micro-batch of samples per replica per micro-batch or one broadcast to
//!   every replica;
//! - **anchors** ([`Anchor`]): which model tensor comes back per micro-batch and by which
//!   [`AnchorReturnType`] rule;
//! - the **data flow** (batches per step, micro-batches accumulated per batch, samples per
//!   micro-batch: a micro-batch of `B` samples is one FIFO item of every stream, computed
//!   row by row in sample order, and its gradients are summed with every other sample's of
//!   the batch before the mean over the batch's `accumulation × B` samples — so `B = k`,
//!   accumulation `a` trains exactly as `B = 1`, accumulation `a·k` does), the
//!   **optimizer** (SGD, with optional momentum whose velocity is held on the device with the
//!   weight's own grouping and shards), and the **model**: a short list of [`Layer`]s applied
//!   to the input stream and ending in one loss.
//!
//! # Rules
//!
//! [`Program::check`] accepts a program for `N` replicas only when all of these hold, and
//! otherwise names the tensor and the rule it breaks ([`ProgramError`]):
//!
//! - there is at least one replica;
//! - names are non-empty and unique across variables and streams;
//! - variables are `f32` with 1 to [`MAX_VARIABLE_RANK`] non-zero dimensions; their
//!   grouping resolves on `N` replicas; a sharded variable's layout builds for its element
//!   count over a domain of its group size (explicit intervals included);
//! - streams have 1 to [`MAX_VARIABLE_RANK`] non-zero sample dimensions;
//! - layers run in order from the input stream (`f32`): `Linear` takes a variable shaped
//!   `[outputs, width]` and makes the width `outputs`; `Bias` takes a variable shaped
//!   `[width]`; `Relu` and `Dropout` (rate in `[0, 1)`) keep the width; the last layer, and
//!   only it, is a loss: `SoftmaxCrossEntropy` over an `i32` stream of one label per sample
//!   (width ≥ 2 classes; the model reads its input from an existing `f32` stream), or `MeanSquaredError` against an `f32` stream of `width` targets;
//!   no variable is used by two layers, and every layer's stream is not the input stream;
//! - the micro-batch holds 1 to [`MAX_MICRO_BATCH`] samples;
//! - the data flow is valid ([`DataFlow::new`]) and every anchor's return type fits it
//!   ([`DataFlow::check_anchor`]); no tensor is anchored twice;
//! - the learning rate is finite and non-negative, the momentum in `[0, 1)`.
//!
//! # Reductions
//!
//! A step talks to the replica's peers only through reductions the host answers, and both
//! sides must agree on their order. Each batch makes the same rounds, listed by
//! [`Program::reductions`]: first every sharded variable a layer trains whose group has several
//! members is *gathered* (each member contributes its shard's elements at their place in a zeroed
//! tensor; the sum is the whole tensor), in variable order; then the gradient of every
//! trained variable whose group has several members is *averaged*, in variable order. Round
//! `b·k + i` of a step (batch `b`, `k` rounds per batch) is entry `i` of that list, and it
//! combines the replicas of that variable's group. The rounds travel packed into
//! [`exchange`]s, as many rounds of one kind per message as a frame holds.
//!
//! # Panics
//!
//! Nothing here panics; sizes are computed with checked arithmetic.

mod build;
mod check;
mod checked;
mod encoding;
mod error;
pub mod exchange;
mod fault;
pub mod ids;
pub mod lanes;

pub use build::CapacityError;
pub use checked::Checked;
pub use error::{ProgramError, ProgramRule};
pub use exchange::{Exchange, Exchanges};
pub use fault::{ProgramFault, ProgramPart, RuleKind};
pub use lanes::{LaneError, MAX_LANES};

use heapless::Vec;
use serde::{Deserialize, Serialize};

use crate::dtype::DataType;
use crate::grouping::{GroupingError, GroupingSpec, RetrievalMode, VariableSettings};
use crate::shard::{Interval, ShardError, ShardLayout};
use crate::stream::{AnchorReturnType, DataFlow, DataFlowError};

/// Variables a program holds.
pub const MAX_VARIABLES: usize = 8;
/// Streams a program holds.
pub const MAX_STREAMS: usize = 4;
/// Anchors a program holds.
pub const MAX_ANCHORS: usize = 2;
/// Layers a model holds, the loss included.
pub const MAX_LAYERS: usize = 8;
/// Bytes of a name.
pub const MAX_NAME: usize = 16;
/// Dimensions of a variable or a stream sample.
pub const MAX_VARIABLE_RANK: usize = 4;
/// Intervals of an explicit shard layout.
pub const MAX_INTERVALS: usize = 8;
/// Samples of one micro-batch.
pub const MAX_MICRO_BATCH: u32 = 1024;

/// A tensor's name.
pub type Name = heapless::String<MAX_NAME>;
/// A tensor's dimensions.
pub type Dims = Vec<u32, MAX_VARIABLE_RANK>;

/// Everything a device runs. See the module documentation for the rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// The weights, by index (layers refer to them by position).
    pub variables: Vec<Variable, MAX_VARIABLES>,
    /// The host-to-device streams, by index.
    pub streams: Vec<Stream, MAX_STREAMS>,
    /// The model tensors returned to the host.
    pub anchors: Vec<Anchor, MAX_ANCHORS>,
    /// The model, applied in order to the input stream.
    pub layers: Vec<Layer, MAX_LAYERS>,
    /// The stream the model reads its input from.
    pub input: u8,
    /// Batches per step.
    pub batches_per_step: u32,
    /// Micro-batches whose gradients are accumulated before one update.
    pub accumulation: u32,
    /// Samples of every stream per micro-batch, `1..=MAX_MICRO_BATCH`: a stream's FIFO item
    /// holds this many samples, and the device computes them as one `[B, width]` matrix.
    pub micro_batch_size: u32,
    /// How gradients update the variables.
    pub optimizer: Optimizer,
    /// Whether the device counts its work (cycle counts are refused otherwise).
    pub instrumented: bool,
}

/// A named weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variable {
    /// Its name.
    pub name: Name,
    /// Element type (`f32`: the device computes in `f32`).
    pub dtype: DataType,
    /// Its shape on one replica, before sharding.
    pub shape: Dims,
    /// Which replicas share one value.
    pub grouping: GroupingSpec,
    /// How it comes back to the host.
    pub retrieval: RetrievalMode,
    /// How it is split across the replicas of its group.
    pub sharding: Sharding,
}

/// How a variable is split across the members of its group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Sharding {
    /// Every member holds the whole variable.
    None,
    /// [`ShardLayout::balanced`].
    Balanced,
    /// [`ShardLayout::padded_tail`].
    PaddedTail,
    /// [`ShardLayout::explicit`]: shards of `per_replica` elements and these intervals.
    Explicit {
        /// Elements of one shard, padding included.
        per_replica: u32,
        /// Where the tensor's elements lie in the gathered buffer, in tensor order.
        intervals: Vec<Interval, MAX_INTERVALS>,
    },
}

/// A named host-to-device stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    /// Its name.
    pub name: Name,
    /// Element type on the device.
    pub dtype: DataType,
    /// The shape of one sample.
    pub sample: Dims,
    /// One sample for every replica per micro-batch, instead of one per replica.
    pub broadcast: bool,
}

/// The model tensors an anchor can return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AnchorTensor {
    /// The loss of each sample (`f32`, one element).
    Loss,
    /// The input of the loss layer: the model's prediction (`f32`, the final width).
    Output,
}

impl AnchorTensor {
    /// The name users write.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Loss => "loss",
            Self::Output => "output",
        }
    }
}

/// A model tensor returned to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// Which tensor.
    pub tensor: AnchorTensor,
    /// Which micro-batches' values come back.
    pub return_type: AnchorReturnType,
}

/// How the gradient updates a variable.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Optimizer {
    /// `w ← w − lr·g`.
    Sgd {
        /// Learning rate.
        learning_rate: f32,
    },
    /// `v ← μ·v + g; w ← w − lr·v`, `v` held per variable with the variable's grouping and
    /// shards.
    SgdMomentum {
        /// Learning rate.
        learning_rate: f32,
        /// Momentum `μ`.
        momentum: f32,
    },
}

impl Optimizer {
    /// The rule for optimizer values, a program's own and those the host sets between
    /// steps alike: a finite learning rate of at least 0, a momentum in `[0, 1)` (a NaN
    /// fails both).
    pub fn check_values(learning_rate: f32, momentum: f32) -> Result<(), ProgramError> {
        let valid =
            learning_rate.is_finite() && learning_rate >= 0.0 && (0.0..1.0).contains(&momentum);
        valid.then_some(()).ok_or(ProgramError::Optimizer)
    }

    /// The learning rate.
    pub const fn learning_rate(&self) -> f32 {
        match *self {
            Self::Sgd { learning_rate } | Self::SgdMomentum { learning_rate, .. } => learning_rate,
        }
    }

    /// True when the optimizer keeps a velocity per variable (SGD with momentum, whatever
    /// the momentum's value: the host may change it between runs).
    pub const fn has_velocity(&self) -> bool {
        matches!(self, Self::SgdMomentum { .. })
    }

    /// The momentum (0 for plain SGD).
    pub const fn momentum(&self) -> f32 {
        match *self {
            Self::Sgd { .. } => 0.0,
            Self::SgdMomentum { momentum, .. } => momentum,
        }
    }
}

/// One step of the model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Layer {
    /// `y = W·x`, `W` the variable at this index, shaped `[outputs, inputs]`.
    Linear {
        /// Variable index.
        weight: u8,
    },
    /// `y = x + b`, `b` the variable at this index, shaped `[width]`.
    Bias {
        /// Variable index.
        bias: u8,
    },
    /// `y = max(x, 0)`.
    Relu,
    /// Each element zeroed with probability `rate`, the others scaled by `1/(1 − rate)`,
    /// drawn from the replica's generator in element order.
    Dropout {
        /// Probability of dropping an element.
        rate: f32,
    },
    /// Loss `−log softmax(x)[label]`, the label from the `i32` stream at this index.
    SoftmaxCrossEntropy {
        /// Stream index.
        labels: u8,
    },
    /// Loss `Σ(x − t)² / width`, `t` from the `f32` stream at this index.
    MeanSquaredError {
        /// Stream index.
        targets: u8,
    },
}

/// What a reduction round does (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Reduction {
    /// Sum of zero-padded shards: the whole variable on every member.
    Gather {
        /// Variable index.
        variable: u8,
    },
    /// Mean of the members' gradients of a variable.
    Gradient {
        /// Variable index.
        variable: u8,
    },
}

impl Reduction {
    /// The variable it combines.
    pub const fn variable(self) -> u8 {
        match self {
            Self::Gather { variable } | Self::Gradient { variable } => variable,
        }
    }
}

impl Program {
    /// The data flow.
    pub fn data_flow(&self) -> Result<DataFlow, DataFlowError> {
        DataFlow::new(self.batches_per_step as usize, self.accumulation as usize)
    }

    /// Variable `index`'s settings on `replicas` replicas.
    pub fn settings(
        &self,
        index: usize,
        replicas: usize,
    ) -> Result<VariableSettings, ProgramError> {
        let v = self.variable(index)?;
        VariableSettings::new(v.grouping, v.retrieval, replicas)
            .map_err(|e| ProgramError::variable(v, ProgramRule::Grouping(e)))
    }

    /// Elements of variable `index`, before sharding; a count that overflows is
    /// [`ProgramRule::Size`].
    pub fn variable_elements(&self, index: usize) -> Result<usize, ProgramError> {
        let v = self.variable(index)?;
        elements(&v.shape).ok_or(ProgramError::variable(v, ProgramRule::Size))
    }

    /// Variable `index`'s shard layout on `replicas` replicas (`None` when it is not
    /// sharded); the shard domain is its group size.
    pub fn shard_layout(
        &self,
        index: usize,
        replicas: usize,
    ) -> Result<Option<ShardLayout<'_>>, ProgramError> {
        let v = self.variable(index)?;
        let elements = self.variable_elements(index)?;
        let domain = self.settings(index, replicas)?.grouping().group_size();
        let layout = match &v.sharding {
            Sharding::None => return Ok(None),
            Sharding::Balanced => ShardLayout::balanced(elements, domain),
            Sharding::PaddedTail => ShardLayout::padded_tail(elements, domain),
            Sharding::Explicit {
                per_replica,
                intervals,
            } => ShardLayout::explicit(elements, domain, *per_replica as usize, intervals),
        };
        layout
            .map(Some)
            .map_err(|e| ProgramError::variable(v, ProgramRule::Shard(e)))
    }

    /// Elements of variable `index` one replica holds: its shard, padding included, or the
    /// whole variable.
    pub fn held_elements(&self, index: usize, replicas: usize) -> Result<usize, ProgramError> {
        match self.shard_layout(index, replicas)? {
            Some(layout) => Ok(layout.per_replica()),
            None => self.variable_elements(index),
        }
    }

    /// The reduction rounds of one batch, in order (see the module documentation).
    pub fn reductions(&self, replicas: usize) -> impl Iterator<Item = Reduction> + '_ {
        let shared = move |i: usize| {
            self.settings(i, replicas)
                .is_ok_and(|s| s.grouping().group_size() > 1)
        };
        let sharded = move |i: usize| {
            self.variables
                .get(i)
                .is_some_and(|v| v.sharding != Sharding::None)
        };
        let trained = move |i: usize| self.layer_of(i).is_some();
        let count = self.variables.len();
        let gathers = (0..count)
            .filter(move |&i| shared(i) && sharded(i) && trained(i))
            .map(|i| Reduction::Gather { variable: i as u8 });
        let gradients = (0..count)
            .filter(move |&i| shared(i) && trained(i))
            .map(|i| Reduction::Gradient { variable: i as u8 });
        gathers.chain(gradients)
    }

    /// The layer that uses variable `index`, if any.
    pub fn layer_of(&self, index: usize) -> Option<usize> {
        self.layers.iter().position(|l| match *l {
            Layer::Linear { weight: v } | Layer::Bias { bias: v } => usize::from(v) == index,
            _ => false,
        })
    }

    /// The variable called `name`.
    pub fn variable_index(&self, name: &str) -> Option<usize> {
        self.variables.iter().position(|v| v.name == name)
    }

    /// The stream called `name`.
    pub fn stream_index(&self, name: &str) -> Option<usize> {
        self.streams.iter().position(|s| s.name == name)
    }

    /// Elements of one anchored value of `tensor` (one micro-batch's): one loss per
    /// sample, or the model's output of every sample.
    pub fn anchor_width(&self, tensor: AnchorTensor) -> Option<usize> {
        let per_sample = match tensor {
            AnchorTensor::Loss => 1,
            AnchorTensor::Output => self.output_width()?,
        };
        per_sample.checked_mul(self.micro_batch_size as usize)
    }

    /// Elements of one FIFO item of stream `index`: a micro-batch of samples (or of
    /// broadcast values).
    pub fn item_elements(&self, index: usize) -> Option<usize> {
        let sample = elements(&self.streams.get(index)?.sample)?;
        sample.checked_mul(self.micro_batch_size as usize)
    }

    /// The width of the model's output: the loss layer's input.
    pub fn output_width(&self) -> Option<usize> {
        let mut width = elements(&self.streams.get(usize::from(self.input))?.sample)?;
        for layer in &self.layers {
            if let Layer::Linear { weight } = *layer {
                width = *self.variables.get(usize::from(weight))?.shape.first()? as usize;
            }
        }
        Some(width)
    }

    fn variable(&self, index: usize) -> Result<&Variable, ProgramError> {
        self.variables
            .get(index)
            .ok_or(ProgramError::NoSuchVariable { index })
    }
}

/// The element count of `dims` (1 for no dimension), `None` on overflow.
#[inline(never)]
pub fn elements(dims: &[u32]) -> Option<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d as usize))
}

impl From<GroupingError> for ProgramRule {
    fn from(e: GroupingError) -> Self {
        Self::Grouping(e)
    }
}

impl From<ShardError> for ProgramRule {
    fn from(e: ShardError) -> Self {
        Self::Shard(e)
    }
}

#[cfg(test)]
mod tests;
