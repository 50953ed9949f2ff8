//! A refused program's error in a few bytes, as a device reports it.
//!
//! A [`ProgramError`] names its tensor and carries the rule's sizes and causes: some fifty
//! bytes. A device answers with an error on every path of every request, and an error
//! that large, travelling through each of them, would cost the firmware more code than it
//! has room for. So a device reports a [`ProgramFault`] instead: which part of the program
//! (by index, which the host maps back to the name in the program it sent) and which rule
//! ([`RuleKind`]). The host, holding the program, can run [`Program::check`] itself for the
//! full error; the fault is enough to say which rule failed where.
//!
//! [`ProgramError::fault`] never panics: a name it cannot find (it always can, for an
//! error of `check` on the same program) becomes [`ProgramPart::Program`].

use core::fmt;

use serde::{Deserialize, Serialize};

use super::{AnchorTensor, Program, ProgramError, ProgramRule};

/// Which rule a program breaks, and where: a small [`ProgramError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[error("{part}: {rule}")]
pub struct ProgramFault {
    /// Where.
    pub part: ProgramPart,
    /// The rule.
    pub rule: RuleKind,
}

/// The part of a program a [`ProgramFault`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ProgramPart {
    /// The program as a whole (data flow, optimizer, replicas, …).
    Program,
    /// The variable at this index.
    Variable {
        /// Its index.
        index: u8,
    },
    /// The stream at this index.
    Stream {
        /// Its index.
        index: u8,
    },
    /// The layer at this index (saturated at `u8::MAX`).
    Layer {
        /// Its index.
        index: u8,
    },
    /// The anchor of this tensor.
    Anchor {
        /// The anchored tensor.
        tensor: AnchorTensor,
    },
}

/// A rule of [`Program::check`], without its details: one per [`ProgramRule`] and per
/// whole-program case of [`ProgramError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RuleKind {
    /// [`ProgramRule::EmptyName`]: a name is empty.
    EmptyName,
    /// [`ProgramRule::DuplicateName`]: two variables or streams share a name.
    DuplicateName,
    /// [`ProgramRule::Type`]: a tensor has the wrong element type.
    Type,
    /// [`ProgramRule::Dimensions`]: a shape has no dimension, too many, or a zero.
    Dimensions,
    /// [`ProgramRule::Size`]: an element count overflows.
    Size,
    /// [`ProgramRule::Grouping`]: a grouping does not resolve on the replicas.
    Grouping,
    /// [`ProgramRule::Shard`]: a shard layout does not build.
    Shard,
    /// [`ProgramRule::Missing`]: an index names no variable or stream.
    Missing,
    /// [`ProgramRule::Width`]: a tensor's width does not meet the layer's input.
    Width,
    /// [`ProgramRule::Rank`]: a weight that is not a matrix, or a bias that is not a vector.
    Rank,
    /// [`ProgramRule::UsedTwice`]: two layers use one variable.
    UsedTwice,
    /// [`ProgramRule::Rate`]: a dropout rate outside `[0, 1)`.
    Rate,
    /// [`ProgramRule::LossNotLast`]: a loss layer before the last position.
    LossNotLast,
    /// [`ProgramRule::Classes`]: a cross-entropy over fewer than two classes.
    Classes,
    /// [`ProgramRule::Labels`]: a labels stream without one label per sample.
    Labels,
    /// [`ProgramRule::InputStream`]: a layer reads the model's input as labels or targets.
    InputStream,
    /// [`ProgramRule::ReturnType`]: an anchor's return type does not fit the data flow.
    ReturnType,
    /// [`ProgramRule::AnchoredTwice`]: one tensor anchored twice.
    AnchoredTwice,
    /// [`ProgramError::DataFlow`]: the data flow is invalid.
    DataFlow,
    /// [`ProgramError::Optimizer`]: a learning rate or momentum out of range.
    Optimizer,
    /// [`ProgramError::NoSuchVariable`]: a variable index past the program's variables.
    NoSuchVariable,
    /// [`ProgramError::NoLoss`]: the model does not end in a loss layer.
    NoLoss,
    /// [`ProgramError::NoReplicas`]: no replicas to run on.
    NoReplicas,
    /// [`ProgramError::NoInput`]: the input stream index names no stream.
    NoInput,
    /// [`ProgramError::MicroBatch`]: a micro-batch of no samples or too many.
    MicroBatch,
}

impl ProgramRule {
    /// This rule without its details.
    pub fn kind(&self) -> RuleKind {
        match self {
            Self::EmptyName => RuleKind::EmptyName,
            Self::DuplicateName => RuleKind::DuplicateName,
            Self::Type { .. } => RuleKind::Type,
            Self::Dimensions => RuleKind::Dimensions,
            Self::Size => RuleKind::Size,
            Self::Grouping(_) => RuleKind::Grouping,
            Self::Shard(_) => RuleKind::Shard,
            Self::Missing { .. } => RuleKind::Missing,
            Self::Width { .. } => RuleKind::Width,
            Self::Rank { .. } => RuleKind::Rank,
            Self::UsedTwice => RuleKind::UsedTwice,
            Self::Rate => RuleKind::Rate,
            Self::LossNotLast => RuleKind::LossNotLast,
            Self::Classes => RuleKind::Classes,
            Self::Labels { .. } => RuleKind::Labels,
            Self::InputStream => RuleKind::InputStream,
            Self::ReturnType(_) => RuleKind::ReturnType,
            Self::AnchoredTwice => RuleKind::AnchoredTwice,
        }
    }
}

impl ProgramError {
    /// This error as a [`ProgramFault`], its tensor named by its index in `program` (the
    /// program it was found in).
    pub fn fault(&self, program: &Program) -> ProgramFault {
        let whole = |rule| ProgramFault {
            part: ProgramPart::Program,
            rule,
        };
        match self {
            Self::Variable { rule, .. } => {
                let names = program.variables.iter().map(|v| v.name.as_str());
                match index_of(names, self.name(), rule) {
                    Some(index) => ProgramFault {
                        part: ProgramPart::Variable { index },
                        rule: rule.kind(),
                    },
                    None => whole(rule.kind()),
                }
            }
            Self::Stream { rule, .. } => {
                let names = program.streams.iter().map(|s| s.name.as_str());
                match index_of(names, self.name(), rule) {
                    Some(index) => ProgramFault {
                        part: ProgramPart::Stream { index },
                        rule: rule.kind(),
                    },
                    None => whole(rule.kind()),
                }
            }
            Self::Layer { index, rule } => ProgramFault {
                part: ProgramPart::Layer {
                    index: u8::try_from(*index).unwrap_or(u8::MAX),
                },
                rule: rule.kind(),
            },
            Self::Anchor { tensor, rule } => ProgramFault {
                part: ProgramPart::Anchor { tensor: *tensor },
                rule: rule.kind(),
            },
            Self::DataFlow(_) => whole(RuleKind::DataFlow),
            Self::Optimizer => whole(RuleKind::Optimizer),
            Self::NoSuchVariable { .. } => whole(RuleKind::NoSuchVariable),
            Self::NoLoss => whole(RuleKind::NoLoss),
            Self::NoReplicas => whole(RuleKind::NoReplicas),
            Self::MicroBatch { .. } => whole(RuleKind::MicroBatch),
            Self::NoInput { .. } => whole(RuleKind::NoInput),
        }
    }

    /// The name this error is about ("" for none).
    fn name(&self) -> &str {
        match self {
            Self::Variable { name, .. } | Self::Stream { name, .. } => name.as_str(),
            _ => "",
        }
    }
}

/// The index of `name` among `names`: its last occurrence for a duplicate (reported where
/// it repeats), its only one otherwise.
fn index_of<'p>(
    names: impl DoubleEndedIterator<Item = &'p str> + ExactSizeIterator,
    name: &str,
    rule: &ProgramRule,
) -> Option<u8> {
    let mut names = names.enumerate();
    let found = match rule {
        ProgramRule::DuplicateName => names.rfind(|(_, n)| *n == name),
        _ => names.find(|(_, n)| *n == name),
    };
    found.and_then(|(i, _)| u8::try_from(i).ok())
}

impl fmt::Display for ProgramPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Program => f.write_str("the program"),
            Self::Variable { index } => write!(f, "variable {index}"),
            Self::Stream { index } => write!(f, "stream {index}"),
            Self::Layer { index } => write!(f, "layer {index}"),
            Self::Anchor { tensor } => write!(f, "anchor `{}`", tensor.name()),
        }
    }
}

impl fmt::Display for RuleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::EmptyName => "names must not be empty",
            Self::DuplicateName => "names must be unique across variables and streams",
            Self::Type => "wrong element type",
            Self::Dimensions => "a shape has 1 to 4 dimensions, none of them zero",
            Self::Size => "the element count overflows",
            Self::Grouping => "the grouping does not resolve on the replicas",
            Self::Shard => "the shard layout does not build",
            Self::Missing => "an index names nothing",
            Self::Width => "the tensor's width does not meet the layer's input",
            Self::Rank => "wrong rank for the layer",
            Self::UsedTwice => "a variable is used by one layer only",
            Self::Rate => "the dropout rate must lie in [0, 1)",
            Self::LossNotLast => "only the last layer may be a loss",
            Self::Classes => "a cross-entropy needs at least 2 classes",
            Self::Labels => "a labels stream holds one label per sample",
            Self::InputStream => "labels and targets must come from a stream other than the input",
            Self::ReturnType => "the return type does not fit the data flow",
            Self::AnchoredTwice => "a tensor is anchored once",
            Self::DataFlow => "the data flow is invalid",
            Self::Optimizer => "the learning rate must be finite and >= 0, the momentum in [0, 1)",
            Self::NoSuchVariable => "a variable index past the program's variables",
            Self::NoLoss => "the model must end in a loss layer",
            Self::NoReplicas => "a program runs on at least one replica",
            Self::MicroBatch => "a micro-batch holds 1 to 1024 samples",
            Self::NoInput => "the input stream index names no stream",
        })
    }
}
