//! Why a program was refused: the tensor (or layer) and the rule it breaks.

use core::fmt;

use crate::dtype::DataType;
use crate::grouping::GroupingError;
use crate::shard::ShardError;
use crate::stream::{AnchorError, DataFlowError};

use super::{AnchorTensor, Name, Variable};

/// A program that breaks a rule of [`Program::check`](super::Program::check).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ProgramError {
    /// A variable breaks `rule`.
    #[error("variable `{name}`: {rule}")]
    Variable {
        /// Its name.
        name: Name,
        /// The rule.
        rule: ProgramRule,
    },
    /// A stream breaks `rule`.
    #[error("stream `{name}`: {rule}")]
    Stream {
        /// Its name.
        name: Name,
        /// The rule.
        rule: ProgramRule,
    },
    /// Layer `index` (0-based) breaks `rule`.
    #[error("layer {index}: {rule}")]
    Layer {
        /// Its position in the model.
        index: usize,
        /// The rule.
        rule: ProgramRule,
    },
    /// An anchor breaks `rule`.
    #[error("anchor `{}`: {rule}", .tensor.name())]
    Anchor {
        /// The anchored tensor.
        tensor: AnchorTensor,
        /// The rule.
        rule: ProgramRule,
    },
    /// The data flow is invalid.
    #[error("data flow: {0}")]
    DataFlow(DataFlowError),
    /// A learning rate that is negative or not finite, or a momentum outside `[0, 1)`.
    #[error("the learning rate must be finite and >= 0, the momentum in [0, 1)")]
    Optimizer,
    /// A variable index past the program's variables.
    #[error("no variable has index {index}")]
    NoSuchVariable {
        /// The index.
        index: usize,
    },
    /// The model does not end in a loss layer.
    #[error("the model must end in a loss layer (softmax cross-entropy or mean-squared error)")]
    NoLoss,
    /// No replicas to run on.
    #[error("a program runs on at least one replica")]
    NoReplicas,
    /// A micro-batch of no samples, or of more than [`MAX_MICRO_BATCH`](super::MAX_MICRO_BATCH).
    #[error(
        "a micro-batch of {size} samples: it holds 1 to {max} samples",
        max = super::MAX_MICRO_BATCH
    )]
    MicroBatch {
        /// The samples asked for.
        size: u32,
    },
    /// The input stream index names no stream.
    #[error("the input stream index {index} names no stream")]
    NoInput {
        /// The index.
        index: u8,
    },
}

/// The rule a tensor or layer breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ProgramRule {
    /// Names are non-empty.
    EmptyName,
    /// Names are unique across variables and streams.
    DuplicateName,
    /// The element type must be `expected`.
    Type {
        /// What the rule asks for.
        expected: DataType,
        /// What the program says.
        actual: DataType,
    },
    /// 1 to 4 dimensions, none of them zero.
    Dimensions,
    /// The element count overflows.
    Size,
    /// The grouping does not resolve on the replicas.
    Grouping(GroupingError),
    /// The shard layout does not build.
    Shard(ShardError),
    /// The index names no variable or stream.
    Missing {
        /// The index.
        index: u8,
    },
    /// A tensor of `expected` elements (in the dimension that meets the layer's input)
    /// was needed, not `actual`.
    Width {
        /// What the layer's input has.
        expected: usize,
        /// What the tensor has.
        actual: usize,
    },
    /// A linear layer's weight is a matrix `[outputs, inputs]`; a bias a vector.
    Rank {
        /// The rank the layer needs.
        expected: usize,
        /// The rank it has.
        actual: usize,
    },
    /// A variable is used by two layers.
    UsedTwice,
    /// A dropout rate outside `[0, 1)`.
    Rate,
    /// A loss layer before the last position.
    LossNotLast,
    /// A cross-entropy needs at least two classes.
    Classes,
    /// A labels stream holds one label per sample.
    Labels {
        /// Elements of its sample.
        per_sample: usize,
    },
    /// A layer reads the model's input stream as labels or targets.
    InputStream,
    /// The return type does not fit the data flow.
    ReturnType(AnchorError),
    /// The same tensor is anchored twice.
    AnchoredTwice,
}

impl ProgramError {
    #[inline(never)]
    pub(super) fn variable(v: &Variable, rule: ProgramRule) -> Self {
        Self::Variable {
            name: v.name.clone(),
            rule,
        }
    }
}

impl fmt::Display for ProgramRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyName => f.write_str("names must not be empty"),
            Self::DuplicateName => f.write_str("names must be unique across variables and streams"),
            Self::Type { expected, actual } => {
                write!(f, "the element type must be {expected}, not {actual}")
            }
            Self::Dimensions => f.write_str("a shape has 1 to 4 dimensions, none of them zero"),
            Self::Size => f.write_str("the element count overflows"),
            Self::Grouping(e) => write!(f, "grouping: {e}"),
            Self::Shard(e) => write!(f, "sharding across its group: {e}"),
            Self::Missing { index } => write!(f, "index {index} names nothing"),
            Self::Width { expected, actual } => write!(
                f,
                "the layer's input has {expected} elements, the tensor has {actual}"
            ),
            Self::Rank { expected, actual } => {
                write!(f, "the tensor must have rank {expected}, not {actual}")
            }
            Self::UsedTwice => f.write_str("a variable is used by one layer only"),
            Self::Rate => f.write_str("the dropout rate must lie in [0, 1)"),
            Self::LossNotLast => f.write_str("only the last layer may be a loss"),
            Self::Classes => f.write_str("a cross-entropy needs at least 2 classes"),
            Self::Labels { per_sample } => write!(
                f,
                "a labels stream holds one label per sample, not {per_sample}"
            ),
            Self::InputStream => {
                f.write_str("labels and targets must come from a stream other than the input")
            }
            Self::ReturnType(e) => e.fmt(f),
            Self::AnchoredTwice => f.write_str("a tensor is anchored once"),
        }
    }
}
