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
fn any_program() -> impl Strategy<Value = Program> {
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
                    optimizer,
                    instrumented,
                }
            },
        )
}

// ---------------------------------------------------------------------------------------
// Valid programs.

/// Groupings that resolve on `n` replicas, in every form.
fn valid_grouping(n: usize) -> BoxedStrategy<GroupingSpec> {
    let divisors: Vec<usize> = (1..=n).filter(|&k| n.is_multiple_of(k)).collect();
    let blocks: Vec<(usize, usize)> = (1..=n)
        .flat_map(|s| (1..=n).map(move |k| (s, k)))
        .filter(|&(s, k)| n.is_multiple_of(s * k))
        .collect();
    prop_oneof![
        Just(GroupingSpec::Comm(CommGroup::All)),
        Just(GroupingSpec::Comm(CommGroup::None)),
        select(divisors.clone()).prop_map(|k| GroupingSpec::Comm(CommGroup::Consecutive(k))),
        select(divisors).prop_map(|k| GroupingSpec::Comm(CommGroup::Orthogonal(k))),
        select(blocks)
            .prop_map(|(stride, group_size)| GroupingSpec::Strided { stride, group_size }),
    ]
    .boxed()
}

/// How a generated variable is sharded; explicit layouts are laid out once the element
/// count and the group size are known.
#[derive(Debug, Clone)]
enum ShardPick {
    None,
    Balanced,
    PaddedTail,
    /// The tensor cut into `gaps.len()` nearly equal pieces (some possibly empty), placed
    /// in the gathered buffer with `gaps[i]` padding elements before the `i`-th placed
    /// one, in tensor order or reversed; `extra` more padding elements per shard.
    Explicit {
        gaps: Vec<usize>,
        extra: usize,
        reversed: bool,
    },
}

fn shard_pick() -> impl Strategy<Value = ShardPick> {
    prop_oneof![
        2 => Just(ShardPick::None),
        1 => Just(ShardPick::Balanced),
        1 => Just(ShardPick::PaddedTail),
        1 => (
            prop::collection::vec(0usize..=3, 1..=MAX_INTERVALS),
            0usize..=2,
            any::<bool>()
        )
            .prop_map(|(gaps, extra, reversed)| ShardPick::Explicit {
                gaps,
                extra,
                reversed
            }),
    ]
}

impl ShardPick {
    fn sharding(&self, elements: usize, domain: usize) -> Sharding {
        match self {
            Self::None => Sharding::None,
            Self::Balanced => Sharding::Balanced,
            Self::PaddedTail => Sharding::PaddedTail,
            Self::Explicit {
                gaps,
                extra,
                reversed,
            } => {
                let k = gaps.len();
                let lengths: Vec<usize> = (0..k)
                    .map(|i| elements * (i + 1) / k - elements * i / k)
                    .collect();
                let mut order: Vec<usize> = (0..k).collect();
                if *reversed {
                    order.reverse();
                }
                let mut intervals = vec![Interval { begin: 0, end: 0 }; k];
                let mut cursor = 0;
                for (gap, &piece) in gaps.iter().zip(&order) {
                    cursor += gap;
                    intervals[piece] = Interval {
                        begin: cursor,
                        end: cursor + lengths[piece],
                    };
                    cursor += lengths[piece];
                }
                Sharding::Explicit {
                    per_replica: u32::try_from(cursor.div_ceil(domain) + extra).unwrap(),
                    intervals: heapless_vec(intervals),
                }
            }
        }
    }
}

/// A generated variable's settings; its shape comes from the layer using it.
#[derive(Debug, Clone)]
struct VarPick {
    grouping: GroupingSpec,
    retrieval: RetrievalMode,
    sharding: ShardPick,
}

fn var_pick(n: usize) -> impl Strategy<Value = VarPick> {
    (valid_grouping(n), retrieval(), shard_pick()).prop_map(|(grouping, retrieval, sharding)| {
        VarPick {
            grouping,
            retrieval,
            sharding,
        }
    })
}

#[derive(Debug, Clone)]
enum Hidden {
    Linear { outputs: u32, var: VarPick },
    Bias { var: VarPick },
    Relu,
    Dropout { rate: f32 },
}

fn hidden(n: usize) -> impl Strategy<Value = Hidden> {
    prop_oneof![
        3 => (1u32..=6, var_pick(n)).prop_map(|(outputs, var)| Hidden::Linear { outputs, var }),
        2 => var_pick(n).prop_map(|var| Hidden::Bias { var }),
        1 => Just(Hidden::Relu),
        1 => (0.0f32..1.0).prop_map(|rate| Hidden::Dropout { rate }),
    ]
}

fn valid_optimizer() -> impl Strategy<Value = Optimizer> {
    prop_oneof![
        (0.0f32..2.0).prop_map(|learning_rate| Optimizer::Sgd { learning_rate }),
        (0.0f32..2.0, 0.0f32..1.0).prop_map(|(learning_rate, momentum)| {
            Optimizer::SgdMomentum {
                learning_rate,
                momentum,
            }
        }),
    ]
}

/// Everything a valid program is built from, for `replicas` replicas.
#[derive(Debug, Clone)]
struct Plan {
    replicas: usize,
    input_width: u32,
    /// The input sample as `[1, width]` instead of `[width]`.
    input_2d: bool,
    /// The input stream after the loss stream.
    input_second: bool,
    hidden: Vec<Hidden>,
    /// Cross-entropy when the output has 2 or more classes, mean-squared error otherwise.
    cross_entropy: bool,
    /// A variable no layer uses, and its shape.
    spare: Option<(VarPick, Vec<u32>)>,
    /// Sort keys giving the variables' storage order.
    order: Vec<u32>,
    anchors: Vec<(AnchorTensor, u8, Index)>,
    batches_per_step: u32,
    accumulation: u32,
    optimizer: Optimizer,
    instrumented: bool,
}

fn plan() -> impl Strategy<Value = Plan> {
    (1usize..=16)
        .prop_flat_map(|n| {
            (
                (
                    Just(n),
                    1u32..=6,
                    any::<bool>(),
                    any::<bool>(),
                    prop::collection::vec(hidden(n), 0..MAX_LAYERS),
                    any::<bool>(),
                    prop::option::of((
                        var_pick(n),
                        prop::collection::vec(1u32..=5, 1..=MAX_VARIABLE_RANK),
                    )),
                ),
                (
                    prop::collection::vec(any::<u32>(), MAX_VARIABLES),
                    select(vec![
                        vec![],
                        vec![AnchorTensor::Loss],
                        vec![AnchorTensor::Output],
                        vec![AnchorTensor::Loss, AnchorTensor::Output],
                        vec![AnchorTensor::Output, AnchorTensor::Loss],
                    ]),
                    prop::collection::vec((0u8..4, any::<Index>()), MAX_ANCHORS),
                    1u32..=6,
                    1u32..=4,
                    valid_optimizer(),
                    any::<bool>(),
                ),
            )
        })
        .prop_map(
            |(
                (replicas, input_width, input_2d, input_second, hidden, cross_entropy, spare),
                (order, tensors, kinds, batches_per_step, accumulation, optimizer, instrumented),
            )| Plan {
                replicas,
                input_width,
                input_2d,
                input_second,
                hidden,
                cross_entropy,
                spare,
                order,
                anchors: tensors
                    .into_iter()
                    .zip(kinds)
                    .map(|(tensor, (kind, at))| (tensor, kind, at))
                    .collect(),
                batches_per_step,
                accumulation,
                optimizer,
                instrumented,
            },
        )
}

/// A program built from a plan, its replica count and the width of its output.
#[derive(Debug, Clone)]
struct Valid {
    program: Program,
    replicas: usize,
    output_width: usize,
}

fn build(plan: &Plan) -> Valid {
    let n = plan.replicas;
    let name = |s: &str| Name::try_from(s).expect("short");
    let dims = |d: &[u32]| Dims::from_slice(d).expect("rank <= 4");
    let make = |i: usize, pick: &VarPick, shape: &[u32]| {
        let elements = elements(shape).unwrap();
        let domain = pick.grouping.resolve(n).unwrap().group_size();
        Variable {
            name: name(&format!("v{i}")),
            dtype: DataType::F32,
            shape: dims(shape),
            grouping: pick.grouping,
            retrieval: pick.retrieval,
            sharding: pick.sharding.sharding(elements, domain),
        }
    };

    // Variables in creation order, with the layers naming them by creation index.
    let mut variables = Vec::new();
    let mut layers = Vec::new();
    let mut width = plan.input_width;
    for h in &plan.hidden {
        match h {
            Hidden::Linear { outputs, var } => {
                variables.push(make(variables.len(), var, &[*outputs, width]));
                layers.push(Layer::Linear {
                    weight: (variables.len() - 1) as u8,
                });
                width = *outputs;
            }
            Hidden::Bias { var } => {
                variables.push(make(variables.len(), var, &[width]));
                layers.push(Layer::Bias {
                    bias: (variables.len() - 1) as u8,
                });
            }
            Hidden::Relu => layers.push(Layer::Relu),
            Hidden::Dropout { rate } => layers.push(Layer::Dropout { rate: *rate }),
        }
    }
    if let Some((pick, shape)) = &plan.spare {
        variables.push(make(variables.len(), pick, shape));
    }

    // Store the variables in the order of their keys, and renumber the layers.
    let mut stored: Vec<usize> = (0..variables.len()).collect();
    stored.sort_by_key(|&i| (plan.order[i], i));
    let mut position = vec![0u8; variables.len()];
    for (at, &i) in stored.iter().enumerate() {
        position[i] = at as u8;
    }
    for layer in &mut layers {
        match layer {
            Layer::Linear { weight: v } | Layer::Bias { bias: v } => {
                *v = position[usize::from(*v)];
            }
            _ => {}
        }
    }
    let variables: Vec<Variable> = stored.iter().map(|&i| variables[i].clone()).collect();

    // The input stream and the loss stream, in either order.
    let input_sample: &[u32] = if plan.input_2d {
        &[1, plan.input_width]
    } else {
        &[plan.input_width]
    };
    let input = Stream {
        name: name("x"),
        dtype: DataType::F32,
        sample: dims(input_sample),
        broadcast: false,
    };
    let cross_entropy = plan.cross_entropy && width >= 2;
    let loss_stream = if cross_entropy {
        Stream {
            name: name("labels"),
            dtype: DataType::I32,
            sample: dims(&[1]),
            broadcast: false,
        }
    } else {
        Stream {
            name: name("targets"),
            dtype: DataType::F32,
            sample: dims(&[width]),
            broadcast: true,
        }
    };
    let (streams, input_index, loss_index) = if plan.input_second {
        (vec![loss_stream, input], 1, 0)
    } else {
        (vec![input, loss_stream], 0, 1)
    };
    layers.push(if cross_entropy {
        Layer::SoftmaxCrossEntropy { labels: loss_index }
    } else {
        Layer::MeanSquaredError {
            targets: loss_index,
        }
    });

    // Anchors whose EveryN period divides the batches per step.
    let bps = plan.batches_per_step as usize;
    let divisors: Vec<usize> = (1..=bps).filter(|&p| bps.is_multiple_of(p)).collect();
    let anchors: Vec<Anchor> = plan
        .anchors
        .iter()
        .map(|&(tensor, kind, at)| Anchor {
            tensor,
            return_type: match kind {
                0 => AnchorReturnType::All,
                1 => AnchorReturnType::Final,
                2 => AnchorReturnType::Sum,
                _ => AnchorReturnType::EveryN(*at.get(&divisors)),
            },
        })
        .collect();

    Valid {
        program: Program {
            variables: heapless_vec(variables),
            streams: heapless_vec(streams),
            anchors: heapless_vec(anchors),
            layers: heapless_vec(layers),
            input: input_index,
            batches_per_step: plan.batches_per_step,
            accumulation: plan.accumulation,
            optimizer: plan.optimizer,
            instrumented: plan.instrumented,
        },
        replicas: n,
        output_width: width as usize,
    }
}

fn valid_program() -> impl Strategy<Value = Valid> {
    plan().prop_map(|plan| build(&plan))
}

/// A valid program with one thing changed: a field (or the replica count) replaced by an
/// arbitrary one, or a smaller edit that keeps the rest valid (one dimension, one data type,
/// one dropout rate, a stream's sample emptied, the loss reading the input, the loss
/// swapped for the other kind over a matching stream).
fn near_valid_program() -> impl Strategy<Value = (Program, usize)> {
    (
        valid_program(),
        any_program(),
        0usize..16,
        any::<Index>(),
        0usize..=16,
        (float(), any_dtype(), 1u32..=6),
    )
        .prop_map(
            |(valid, arbitrary, field, at, replicas, (rate, dtype, dim))| {
                let (mut p, mut n) = (valid.program, valid.replicas);
                let pick = |len: usize| at.index(len.max(1));
                match field {
                    0 if !p.variables.is_empty() && !arbitrary.variables.is_empty() => {
                        let i = pick(p.variables.len());
                        p.variables[i] =
                            arbitrary.variables[pick(arbitrary.variables.len())].clone();
                    }
                    1 if !arbitrary.streams.is_empty() => {
                        let i = pick(p.streams.len());
                        p.streams[i] = arbitrary.streams[pick(arbitrary.streams.len())].clone();
                    }
                    2 if !arbitrary.layers.is_empty() => {
                        let i = pick(p.layers.len());
                        p.layers[i] = arbitrary.layers[pick(arbitrary.layers.len())];
                    }
                    3 => p.anchors = arbitrary.anchors,
                    4 => p.input = arbitrary.input,
                    5 => p.batches_per_step = arbitrary.batches_per_step,
                    6 => p.accumulation = arbitrary.accumulation,
                    7 => p.optimizer = arbitrary.optimizer,
                    8 if !p.variables.is_empty() => {
                        let i = pick(p.variables.len());
                        p.variables[i].sharding = arbitrary
                            .variables
                            .first()
                            .map_or(Sharding::Balanced, |v| v.sharding.clone());
                    }
                    9 if !p.variables.is_empty() => {
                        let i = pick(p.variables.len());
                        let v = &mut p.variables[i];
                        let d = at.index(v.shape.len());
                        v.shape[d] = dim;
                    }
                    10 => {
                        let i = pick(p.streams.len());
                        p.streams[i].dtype = dtype;
                    }
                    11 => {
                        let i = pick(p.layers.len());
                        if let Layer::Dropout { .. } = p.layers[i] {
                            p.layers[i] = Layer::Dropout { rate };
                        } else {
                            p.layers.insert(i, Layer::Dropout { rate }).ok();
                        }
                    }
                    12 => {
                        // The other loss, over its stream rebuilt at the same index: may leave a
                        // cross-entropy over a single class.
                        let width = p.output_width().unwrap();
                        let last = p.layers.len() - 1;
                        let (layer, stream) = match p.layers[last] {
                            Layer::SoftmaxCrossEntropy { labels } => (
                                Layer::MeanSquaredError { targets: labels },
                                (labels, DataType::F32, width),
                            ),
                            Layer::MeanSquaredError { targets } => (
                                Layer::SoftmaxCrossEntropy { labels: targets },
                                (targets, DataType::I32, 1),
                            ),
                            _ => unreachable!("a valid program ends in a loss"),
                        };
                        p.layers[last] = layer;
                        let s = &mut p.streams[usize::from(stream.0)];
                        s.dtype = stream.1;
                        s.sample = Dims::from_slice(&[stream.2 as u32]).unwrap();
                    }
                    13 => {
                        let last = p.layers.len() - 1;
                        p.layers[last] = match p.layers[last] {
                            Layer::SoftmaxCrossEntropy { .. } => {
                                Layer::SoftmaxCrossEntropy { labels: p.input }
                            }
                            _ => Layer::MeanSquaredError { targets: p.input },
                        };
                    }
                    14 => {
                        let i = pick(p.streams.len());
                        p.streams[i].sample.clear();
                    }
                    _ => n = replicas,
                }
                (p, n)
            },
        )
}

// ---------------------------------------------------------------------------------------
// Queries.

/// Every query of a program, on every index in range and a few past it; panics are the
/// only failure. Returns the reductions for further checks.
fn query_everything(p: &Program, replicas: usize) -> Vec<Reduction> {
    let result = p.check(replicas);
    if let Err(e) = result {
        let _ = e.to_string();
    }
    // A reduction list is at most one gather and one gradient per variable; take more than
    // that to catch an iterator that never ends.
    let reductions: Vec<Reduction> = p.reductions(replicas).take(4 * MAX_VARIABLES).collect();
    assert!(reductions.len() <= 2 * p.variables.len());
    for i in 0..p.variables.len() + 2 {
        for n in [replicas, 0, 1, usize::MAX] {
            let _ = p.held_elements(i, n);
            if let Ok(Some(layout)) = p.shard_layout(i, n) {
                let _ = layout.gathered_len();
            }
            let _ = p.settings(i, n);
        }
        let _ = p.layer_of(i);
    }
    let _ = p.output_width();
    let _ = p.data_flow();
    for v in &p.variables {
        let _ = p.variable_index(&v.name);
    }
    for s in &p.streams {
        let _ = p.stream_index(&s.name);
    }
    reductions
}

/// A program that passed `check` answers every per-variable query.
fn assert_checked_queries(p: &Program, replicas: usize) {
    for i in 0..p.variables.len() {
        assert!(p.settings(i, replicas).is_ok(), "settings of {i}");
        assert!(p.shard_layout(i, replicas).is_ok(), "shard layout of {i}");
        assert!(p.held_elements(i, replicas).is_ok(), "held elements of {i}");
    }
    assert!(p.output_width().is_some());
}

/// The schedule rules of the module documentation, for a program that passed `check`.
fn assert_schedule(p: &Program, replicas: usize, reductions: &[Reduction]) {
    let group_size = |v: usize| {
        p.settings(v, replicas)
            .expect("a checked grouping")
            .grouping()
            .group_size()
    };
    // Every round names a variable a layer uses, whose group has several members.
    for r in reductions {
        let v = usize::from(r.variable());
        assert!(v < p.variables.len(), "{r:?} names no variable");
        assert!(p.layer_of(v).is_some(), "{r:?}: no layer uses it");
        assert!(group_size(v) > 1, "{r:?}: a group of one");
    }
    // Gathers come before gradients, each list in variable order.
    let gathers = reductions
        .iter()
        .take_while(|r| matches!(r, Reduction::Gather { .. }))
        .count();
    assert!(
        reductions[gathers..]
            .iter()
            .all(|r| matches!(r, Reduction::Gradient { .. })),
        "a gather after a gradient: {reductions:?}"
    );
    for list in [&reductions[..gathers], &reductions[gathers..]] {
        assert!(
            list.windows(2).all(|w| w[0].variable() < w[1].variable()),
            "not in variable order: {reductions:?}"
        );
    }
    // Each trained shared variable: exactly one gradient round, and one gather exactly when
    // it is sharded.
    for v in 0..p.variables.len() {
        let shared = p.layer_of(v).is_some() && group_size(v) > 1;
        let count = |round: Reduction| reductions.iter().filter(|&&r| r == round).count();
        let variable = v as u8;
        assert_eq!(
            count(Reduction::Gradient { variable }),
            usize::from(shared),
            "gradient rounds of {v}: {reductions:?}"
        );
        let sharded = p.variables[v].sharding != Sharding::None;
        assert_eq!(
            count(Reduction::Gather { variable }),
            usize::from(shared && sharded),
            "gather rounds of {v}: {reductions:?}"
        );
    }
}

/// The rules of the module documentation, written again from the documentation alone
/// (shard layouts are built with `tessera_core::shard`, whose own tests cover them): the
/// oracle `check` is compared with.
fn follows_rules(p: &Program, replicas: usize) -> bool {
    // At least one replica.
    if replicas == 0 {
        return false;
    }
    let dims_ok = |d: &[u32]| !d.is_empty() && !d.contains(&0) && elements(d).is_some();
    // Names: non-empty, unique across variables and streams.
    let mut names: Vec<&str> = p.variables.iter().map(|v| v.name.as_str()).collect();
    names.extend(p.streams.iter().map(|s| s.name.as_str()));
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    if names.len() != count || names.contains(&"") {
        return false;
    }
    // Variables: f32, valid dims, a grouping that resolves, a layout that builds over the
    // group.
    for v in &p.variables {
        if v.dtype != DataType::F32 || !dims_ok(&v.shape) {
            return false;
        }
        let Ok(grouping) = v.grouping.resolve(replicas) else {
            return false;
        };
        let (n, domain) = (elements(&v.shape).unwrap(), grouping.group_size());
        let layout = match &v.sharding {
            Sharding::None => Ok(()),
            Sharding::Balanced => ShardLayout::balanced(n, domain).map(drop),
            Sharding::PaddedTail => ShardLayout::padded_tail(n, domain).map(drop),
            Sharding::Explicit {
                per_replica,
                intervals,
            } => ShardLayout::explicit(n, domain, *per_replica as usize, intervals).map(drop),
        };
        if layout.is_err() {
            return false;
        }
    }
    if !p.streams.iter().all(|s| dims_ok(&s.sample)) {
        return false;
    }
    // The model: from an f32 input, widths chained, one loss at the end.
    let Some(input) = p.streams.get(usize::from(p.input)) else {
        return false;
    };
    if input.dtype != DataType::F32 || p.layers.is_empty() {
        return false;
    }
    let mut width = elements(&input.sample).unwrap();
    let mut uses = [0usize; 256];
    for (i, layer) in p.layers.iter().enumerate() {
        let last = i + 1 == p.layers.len();
        let loss_stream = |index: u8, dtype: DataType| {
            p.streams
                .get(usize::from(index))
                .filter(|s| index != p.input && s.dtype == dtype)
                .map(|s| elements(&s.sample).unwrap())
        };
        let ok = match *layer {
            Layer::Linear { weight } => {
                uses[usize::from(weight)] += 1;
                match p.variables.get(usize::from(weight)).map(|v| &v.shape[..]) {
                    Some(&[outputs, inputs]) if inputs as usize == width => {
                        width = outputs as usize;
                        !last
                    }
                    _ => false,
                }
            }
            Layer::Bias { bias } => {
                uses[usize::from(bias)] += 1;
                let shape = p.variables.get(usize::from(bias)).map(|v| &v.shape[..]);
                !last && matches!(shape, Some(&[w]) if w as usize == width)
            }
            Layer::Relu => !last,
            Layer::Dropout { rate } => !last && (0.0..1.0).contains(&rate),
            Layer::SoftmaxCrossEntropy { labels } => {
                last && width >= 2 && loss_stream(labels, DataType::I32) == Some(1)
            }
            Layer::MeanSquaredError { targets } => {
                last && loss_stream(targets, DataType::F32) == Some(width)
            }
        };
        if !ok {
            return false;
        }
    }
    if uses.iter().any(|&n| n > 1) {
        return false;
    }
    // Data flow and anchors.
    let (bps, af) = (p.batches_per_step as usize, p.accumulation as usize);
    if bps == 0 || af == 0 {
        return false;
    }
    for (i, a) in p.anchors.iter().enumerate() {
        if p.anchors[..i].iter().any(|b| b.tensor == a.tensor) {
            return false;
        }
        if let AnchorReturnType::EveryN(period) = a.return_type {
            if period == 0 || period > bps || !bps.is_multiple_of(period) {
                return false;
            }
        }
    }
    // Optimizer.
    let (lr, momentum) = match p.optimizer {
        Optimizer::Sgd { learning_rate } => (learning_rate, 0.0),
        Optimizer::SgdMomentum {
            learning_rate,
            momentum,
        } => (learning_rate, momentum),
    };
    lr.is_finite() && lr >= 0.0 && (0.0..1.0).contains(&momentum)
}

fn round_trip(p: &Program) -> Program {
    let mut buffer = [0u8; 4096];
    let bytes = postcard::to_slice(p, &mut buffer).expect("fits 4 KiB");
    postcard::from_bytes(bytes).expect("decodes")
}

// ---------------------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// `check`, `reductions`, `held_elements`, `shard_layout`, `settings` and
    /// `output_width` never panic on arbitrary programs and replica counts 0 to 16, and a
    /// program `check` accepts answers every per-variable query. Catches unchecked
    /// indices, unchecked products of dimensions, divisions by a zero group size, and a
    /// `check` that passes programs its queries then refuse.
    #[test]
    fn arbitrary_programs_never_panic(p in any_program(), replicas in 0usize..=16) {
        let reductions = query_everything(&p, replicas);
        if p.check(replicas).is_ok() {
            assert_checked_queries(&p, replicas);
            assert_schedule(&p, replicas, &reductions);
        }
    }

    /// The same on valid programs with one field replaced by an arbitrary one, which reach
    /// the checks of the later layers, the anchors and the optimizer. Programs that still
    /// pass obey the schedule rules.
    #[test]
    fn near_valid_programs_never_panic((p, replicas) in near_valid_program()) {
        let reductions = query_everything(&p, replicas);
        if p.check(replicas).is_ok() {
            assert_checked_queries(&p, replicas);
            assert_schedule(&p, replicas, &reductions);
            prop_assert_eq!(round_trip(&p), p);
        }
    }

    /// `check` accepts exactly the programs that follow the documented rules, on
    /// arbitrary and near-valid programs. Catches a rule `check` forgets (a dropout rate of
    /// 1, labels from the input, a missing width or type check) as well as one it adds.
    #[test]
    fn check_accepts_exactly_the_documented_rules(
        (p, replicas) in prop_oneof![
            (any_program(), 0usize..=16),
            near_valid_program(),
        ]
    ) {
        prop_assert_eq!(
            p.check(replicas).is_ok(),
            follows_rules(&p, replicas),
            "check: {:?}",
            p.check(replicas)
        );
    }

    /// Programs built to follow the rules pass `check` on their replica count, and their
    /// output width is the width the layers chain to. Catches a rule stricter than the
    /// documentation (a grouping form, an explicit layout, an input index, an anchor
    /// refused) and an `output_width` that disagrees with the width `check` follows.
    #[test]
    fn valid_programs_pass(v in valid_program()) {
        prop_assert_eq!(v.program.check(v.replicas), Ok(()));
        assert_checked_queries(&v.program, v.replicas);
        prop_assert_eq!(v.program.output_width(), Some(v.output_width));
    }

    /// A checked program survives postcard (`to_slice` into a stack buffer, `from_bytes`)
    /// as an equal value that still passes. Catches a field skipped by serde, a heapless
    /// capacity the decoder refuses, or an encoding that does not fit the device's buffers.
    #[test]
    fn checked_programs_round_trip_through_postcard(v in valid_program()) {
        prop_assume!(v.program.check(v.replicas).is_ok());
        let back = round_trip(&v.program);
        prop_assert_eq!(back.check(v.replicas), Ok(()));
        prop_assert_eq!(&back, &v.program);
    }

    /// The reductions of a checked program: every round names a variable a layer uses whose
    /// group has several members; gathers come before gradients, each in variable order;
    /// each trained shared variable has exactly one gradient round, and one gather exactly
    /// when it is sharded. Catches rounds for unused or unshared variables, a gather for an
    /// unsharded variable, and a schedule in layer order.
    #[test]
    fn reductions_of_checked_programs(v in valid_program()) {
        prop_assume!(v.program.check(v.replicas).is_ok());
        let reductions: Vec<Reduction> = v.program.reductions(v.replicas).collect();
        assert_schedule(&v.program, v.replicas, &reductions);
    }

    /// A valid program with one variable given a zero dimension, a non-`f32` type, or the
    /// name of a stream is refused naming that variable and that rule; one with zero batches
    /// per step, a momentum of 1, or a second anchor of an anchored tensor is refused with
    /// that rule. Catches rules that only hold for the hand-written programs of the unit
    /// tests, and a `check` that reports the wrong tensor.
    #[test]
    fn breaking_one_rule_names_it(
        v in valid_program(),
        break_rule in 0usize..6,
        at in any::<Index>(),
    ) {
        let (mut p, n) = (v.program, v.replicas);
        let i = at.index(p.variables.len().max(1));
        let expected = match break_rule {
            0..=2 if !p.variables.is_empty() => {
                let rule = match break_rule {
                    0 => {
                        let d = at.index(p.variables[i].shape.len());
                        p.variables[i].shape[d] = 0;
                        ProgramRule::Dimensions
                    }
                    1 => {
                        p.variables[i].dtype = DataType::BF16;
                        ProgramRule::Type { expected: DataType::F32, actual: DataType::BF16 }
                    }
                    _ => {
                        p.variables[i].name = p.streams[0].name.clone();
                        ProgramRule::DuplicateName
                    }
                };
                ProgramError::Variable { name: p.variables[i].name.clone(), rule }
            }
            3 => {
                p.batches_per_step = 0;
                ProgramError::DataFlow(DataFlowError::ZeroBatches)
            }
            4 => {
                p.optimizer = Optimizer::SgdMomentum { learning_rate: 0.1, momentum: 1.0 };
                ProgramError::Optimizer
            }
            _ => {
                let tensor = p.anchors.first().map_or(AnchorTensor::Loss, |a| a.tensor);
                p.anchors.truncate(1);
                let anchor = Anchor { tensor, return_type: AnchorReturnType::All };
                if p.anchors.is_empty() {
                    p.anchors.push(anchor).unwrap();
                }
                p.anchors.push(anchor).unwrap();
                ProgramError::Anchor { tensor, rule: ProgramRule::AnchoredTwice }
            }
        };
        prop_assert_eq!(p.check(n), Err(expected));
    }

    /// A valid program whose second variable-using layer is pointed at the first one's
    /// variable is refused at that layer as `UsedTwice`. Catches weight tying accepted in
    /// arbitrary models (the variable's gradient would be applied twice).
    #[test]
    fn a_variable_used_twice_is_refused(v in valid_program()) {
        let (mut p, n) = (v.program, v.replicas);
        let users: Vec<usize> = p
            .layers
            .iter()
            .enumerate()
            .filter(|(_, l)| matches!(l, Layer::Linear { .. } | Layer::Bias { .. }))
            .map(|(i, _)| i)
            .collect();
        prop_assume!(users.len() >= 2);
        let first = match p.layers[users[0]] {
            Layer::Linear { weight } => weight,
            Layer::Bias { bias } => bias,
            _ => unreachable!(),
        };
        p.layers[users[1]] = match p.layers[users[1]] {
            Layer::Linear { .. } => Layer::Linear { weight: first },
            _ => Layer::Bias { bias: first },
        };
        prop_assert_eq!(
            p.check(n),
            Err(ProgramError::Layer { index: users[1], rule: ProgramRule::UsedTwice })
        );
    }
}
