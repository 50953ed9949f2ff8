//! Programs on arbitrary input: `check` and every query never panic; `check` accepts
//! exactly the programs an independent reading of the module documentation's rules accepts
//! ([`follows_rules`]); programs built to follow the rules pass `check`, survive a postcard
//! round trip, and get the reduction schedule the module documentation describes; breaking
//! one rule of such a program is refused with that rule.
//!
//! Two generators feed them:
//!
//! - [`any_program`]: every field arbitrary (empty and duplicate names, zero and huge
//!   dimensions, any data type, comm groups and strides of any size, explicit intervals
//!   of any numbers, layer and stream indices past the end, NaN and infinite rates);
//! - [`valid_program`]: a model built to pass on its replica count (widths chained from the
//!   input, groupings that divide the replicas, explicit shards that cover the tensor,
//!   anchors that fit the data flow), with its variables stored in a shuffled order and
//!   sometimes an unused variable. [`near_valid_program`] changes one thing in such a
//!   program (a field replaced by an arbitrary one, or one small edit), so that the checks
//!   deep in the model are reached too.

use proptest::prelude::*;
use proptest::sample::{select, Index};
use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{
    elements, Anchor, AnchorTensor, Dims, Layer, Name, Optimizer, Program, ProgramError,
    ProgramRule, Reduction, Sharding, Stream, Variable, MAX_ANCHORS, MAX_INTERVALS, MAX_LAYERS,
    MAX_STREAMS, MAX_VARIABLES, MAX_VARIABLE_RANK,
};
use tessera_core::shard::{Interval, ShardLayout};
use tessera_core::stream::{AnchorReturnType, DataFlowError};

// ---------------------------------------------------------------------------------------
// Arbitrary programs.

/// Mostly small numbers, sometimes edge values, sometimes anything.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..=17,
        1 => Just(usize::MAX),
        1 => any::<usize>(),
    ]
}

fn small_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => 0u32..=8,
        1 => Just(u32::MAX),
        1 => any::<u32>(),
    ]
}

fn index() -> impl Strategy<Value = u8> {
    prop_oneof![4 => 0u8..=9, 1 => any::<u8>()]
}

/// Any `f32`, with the special values often.
fn float() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => -1.5f32..1.5,
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        1 => Just(1.0f32),
        1 => Just(f32::NAN),
        1 => Just(f32::INFINITY),
        1 => Just(f32::NEG_INFINITY),
        1 => any::<f32>(),
    ]
}

fn any_name() -> impl Strategy<Value = Name> {
    select(vec!["", "a", "b", "w", "x", "labels", "0123456789abcdef"])
        .prop_map(|s| Name::try_from(s).expect("short"))
}

fn any_dims() -> impl Strategy<Value = Dims> {
    prop::collection::vec(small_u32(), 0..=MAX_VARIABLE_RANK)
        .prop_map(|d| Dims::from_slice(&d).expect("rank <= 4"))
}

fn any_dtype() -> impl Strategy<Value = DataType> {
    prop_oneof![
        3 => Just(DataType::F32),
        1 => Just(DataType::I32),
        1 => select(DataType::ALL.to_vec()),
    ]
}

fn any_grouping() -> impl Strategy<Value = GroupingSpec> {
    prop_oneof![
        Just(GroupingSpec::Comm(CommGroup::All)),
        Just(GroupingSpec::Comm(CommGroup::None)),
        size().prop_map(|k| GroupingSpec::Comm(CommGroup::Consecutive(k))),
        size().prop_map(|k| GroupingSpec::Comm(CommGroup::Orthogonal(k))),
        (size(), size())
            .prop_map(|(stride, group_size)| GroupingSpec::Strided { stride, group_size }),
    ]
}

fn retrieval() -> impl Strategy<Value = RetrievalMode> {
    prop_oneof![
        Just(RetrievalMode::OnePerGroup),
        Just(RetrievalMode::AllReplicas)
    ]
}

fn any_sharding() -> impl Strategy<Value = Sharding> {
    let explicit = |per_replica, intervals: Vec<Interval>| Sharding::Explicit {
        per_replica,
        intervals: heapless::Vec::from_slice(&intervals).expect("<= 8 intervals"),
    };
    prop_oneof![
        Just(Sharding::None),
        Just(Sharding::Balanced),
        Just(Sharding::PaddedTail),
        // Any numbers at all.
        (
            small_u32(),
            prop::collection::vec((size(), size()), 0..=MAX_INTERVALS)
        )
            .prop_map(move |(per_replica, ends)| {
                let intervals = ends
                    .into_iter()
                    .map(|(begin, end)| Interval { begin, end })
                    .collect();
                explicit(per_replica, intervals)
            }),
        // Consecutive pieces from 0: valid whenever they add up and fit.
        (
            0u32..=20,
            prop::collection::vec(0usize..=8, 0..=MAX_INTERVALS)
        )
            .prop_map(move |(per_replica, lengths)| {
                let mut begin = 0;
                let intervals = lengths
                    .into_iter()
                    .map(|n| {
                        begin += n;
                        Interval {
                            begin: begin - n,
                            end: begin,
                        }
                    })
                    .collect();
                explicit(per_replica, intervals)
            }),
    ]
}

fn any_variable() -> impl Strategy<Value = Variable> {
    (
        any_name(),
        any_dtype(),
        any_dims(),
        any_grouping(),
        retrieval(),
        any_sharding(),
    )
        .prop_map(
            |(name, dtype, shape, grouping, retrieval, sharding)| Variable {
                name,
                dtype,
                shape,
                grouping,
                retrieval,
                sharding,
            },
        )
}

fn any_stream() -> impl Strategy<Value = Stream> {
    (any_name(), any_dtype(), any_dims(), any::<bool>()).prop_map(
        |(name, dtype, sample, broadcast)| Stream {
            name,
            dtype,
            sample,
            broadcast,
        },
    )
}

fn any_return_type() -> impl Strategy<Value = AnchorReturnType> {
    prop_oneof![
        Just(AnchorReturnType::All),
        Just(AnchorReturnType::Final),
        Just(AnchorReturnType::Sum),
        size().prop_map(AnchorReturnType::EveryN),
    ]
}

fn any_anchor() -> impl Strategy<Value = Anchor> {
    (
        prop_oneof![Just(AnchorTensor::Loss), Just(AnchorTensor::Output)],
        any_return_type(),
    )
        .prop_map(|(tensor, return_type)| Anchor {
            tensor,
            return_type,
        })
}

fn any_layer() -> impl Strategy<Value = Layer> {
    prop_oneof![
        index().prop_map(|weight| Layer::Linear { weight }),
        index().prop_map(|bias| Layer::Bias { bias }),
        Just(Layer::Relu),
        float().prop_map(|rate| Layer::Dropout { rate }),
        index().prop_map(|labels| Layer::SoftmaxCrossEntropy { labels }),
        index().prop_map(|targets| Layer::MeanSquaredError { targets }),
    ]
}

fn any_optimizer() -> impl Strategy<Value = Optimizer> {
    prop_oneof![
        float().prop_map(|learning_rate| Optimizer::Sgd { learning_rate }),
        (float(), float()).prop_map(|(learning_rate, momentum)| Optimizer::SgdMomentum {
            learning_rate,
            momentum
        }),
    ]
}

fn heapless_vec<T: Clone, const N: usize>(items: Vec<T>) -> heapless::Vec<T, N> {
    heapless::Vec::from_slice(&items).expect("within capacity")
}

/// Every field arbitrary.
pub(crate) fn any_program() -> impl Strategy<Value = Program> {
    (
        prop::collection::vec(any_variable(), 0..=MAX_VARIABLES),
        prop::collection::vec(any_stream(), 0..=MAX_STREAMS),
        prop::collection::vec(any_anchor(), 0..=MAX_ANCHORS),
        prop::collection::vec(any_layer(), 0..=MAX_LAYERS),
        index(),
        small_u32(),
        small_u32(),
        any_optimizer(),
        any::<bool>(),
    )
        .prop_map(
            |(
                variables,
                streams,
                anchors,
                layers,
                input,
                bps,
                accumulation,
                optimizer,
                instrumented,
            )| {
                Program {
                    variables: heapless_vec(variables),
                    streams: heapless_vec(streams),
                    anchors: heapless_vec(anchors),
                    layers: heapless_vec(layers),
                    input,
                    batches_per_step: bps,
                    accumulation,
                    // 0 and past the cap included: the rule is checked too.
                    micro_batch_size: bps % 1100,
                    optimizer,
                    instrumented,
                }
            },
        )
}

mod valid;
pub(crate) use valid::near_valid_program;
use valid::*;
mod rules;
use rules::*;
mod properties;
