//! A [`Program`] and its parts, decoded field by field in declaration order, each enum's
//! variants by position (the [module](super) rules).

use super::{Decode, Reader};
use crate::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use crate::program::{Anchor, AnchorTensor, Layer, Optimizer, Program, Sharding, Stream, Variable};
use crate::shard::Interval;
use crate::stream::AnchorReturnType;

impl Decode<'_> for Program {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Self {
            variables: r.read()?,
            streams: r.read()?,
            anchors: r.read()?,
            layers: r.read()?,
            input: r.read()?,
            batches_per_step: r.read()?,
            accumulation: r.read()?,
            micro_batch_size: r.read()?,
            optimizer: r.read()?,
            instrumented: r.read()?,
        })
    }
}

impl Decode<'_> for Variable {
    // Out of line: inlined into the program's decoder, it took some 110 bytes more of a
    // device's flash (LLVM's choices inside one large function).
    #[inline(never)]
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Self {
            name: r.read()?,
            dtype: r.read()?,
            shape: r.read()?,
            grouping: r.read()?,
            retrieval: r.read()?,
            sharding: r.read()?,
        })
    }
}

impl Decode<'_> for GroupingSpec {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(match r.variant(2)? {
            0 => Self::Comm(r.read()?),
            _ => Self::Strided {
                stride: r.read()?,
                group_size: r.read()?,
            },
        })
    }
}

impl Decode<'_> for CommGroup {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(match r.variant(4)? {
            0 => Self::All,
            1 => Self::Consecutive(r.read()?),
            2 => Self::Orthogonal(r.read()?),
            _ => Self::None,
        })
    }
}

impl Decode<'_> for RetrievalMode {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(match r.variant(2)? {
            0 => Self::OnePerGroup,
            _ => Self::AllReplicas,
        })
    }
}

impl Decode<'_> for Sharding {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(match r.variant(4)? {
            0 => Self::None,
            1 => Self::Balanced,
            2 => Self::PaddedTail,
            _ => Self::Explicit {
                per_replica: r.read()?,
                intervals: r.read()?,
            },
        })
    }
}

impl Decode<'_> for Interval {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Self {
            begin: r.read()?,
            end: r.read()?,
        })
    }
}

impl Decode<'_> for Stream {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Self {
            name: r.read()?,
            dtype: r.read()?,
            sample: r.read()?,
            broadcast: r.read()?,
        })
    }
}

impl Decode<'_> for Anchor {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Self {
            tensor: r.read()?,
            return_type: r.read()?,
        })
    }
}

impl Decode<'_> for AnchorTensor {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(match r.variant(2)? {
            0 => Self::Loss,
            _ => Self::Output,
        })
    }
}

impl Decode<'_> for AnchorReturnType {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(match r.variant(4)? {
            0 => Self::All,
            1 => Self::EveryN(r.read()?),
            2 => Self::Final,
            _ => Self::Sum,
        })
    }
}

impl Decode<'_> for Layer {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(match r.variant(6)? {
            0 => Self::Linear { weight: r.read()? },
            1 => Self::Bias { bias: r.read()? },
            2 => Self::Relu,
            3 => Self::Dropout { rate: r.read()? },
            4 => Self::SoftmaxCrossEntropy { labels: r.read()? },
            _ => Self::MeanSquaredError { targets: r.read()? },
        })
    }
}

impl Decode<'_> for Optimizer {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(match r.variant(2)? {
            0 => Self::Sgd {
                learning_rate: r.read()?,
            },
            _ => Self::SgdMomentum {
                learning_rate: r.read()?,
                momentum: r.read()?,
            },
        })
    }
}
