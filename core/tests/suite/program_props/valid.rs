//! Valid programs: a model built to pass on its replica count ([`valid_program`]), and one
//! thing changed in such a program ([`near_valid_program`]).

use super::*;

// ---------------------------------------------------------------------------------------
// Valid programs.

/// Groupings that resolve on `n` replicas, in every form.
pub(super) fn valid_grouping(n: usize) -> BoxedStrategy<GroupingSpec> {
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
pub(super) enum ShardPick {
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

pub(super) fn shard_pick() -> impl Strategy<Value = ShardPick> {
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
pub(super) struct VarPick {
    grouping: GroupingSpec,
    retrieval: RetrievalMode,
    sharding: ShardPick,
}

pub(super) fn var_pick(n: usize) -> impl Strategy<Value = VarPick> {
    (valid_grouping(n), retrieval(), shard_pick()).prop_map(|(grouping, retrieval, sharding)| {
        VarPick {
            grouping,
            retrieval,
            sharding,
        }
    })
}

#[derive(Debug, Clone)]
pub(super) enum Hidden {
    Linear { outputs: u32, var: VarPick },
    Bias { var: VarPick },
    Relu,
    Dropout { rate: f32 },
}

pub(super) fn hidden(n: usize) -> impl Strategy<Value = Hidden> {
    prop_oneof![
        3 => (1u32..=6, var_pick(n)).prop_map(|(outputs, var)| Hidden::Linear { outputs, var }),
        2 => var_pick(n).prop_map(|var| Hidden::Bias { var }),
        1 => Just(Hidden::Relu),
        1 => (0.0f32..1.0).prop_map(|rate| Hidden::Dropout { rate }),
    ]
}

pub(super) fn valid_optimizer() -> impl Strategy<Value = Optimizer> {
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
pub(super) struct Plan {
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

pub(super) fn plan() -> impl Strategy<Value = Plan> {
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
pub(super) struct Valid {
    pub(super) program: Program,
    pub(super) replicas: usize,
    pub(super) output_width: usize,
}

pub(super) fn build(plan: &Plan) -> Valid {
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
            micro_batch_size: 1 + plan.batches_per_step % 3,
            optimizer: plan.optimizer,
            instrumented: plan.instrumented,
        },
        replicas: n,
        output_width: width as usize,
    }
}

pub(super) fn valid_program() -> impl Strategy<Value = Valid> {
    plan().prop_map(|plan| build(&plan))
}

/// A valid program with one thing changed: a field (or the replica count) replaced by an
/// arbitrary one, or a smaller edit that keeps the rest valid (one dimension, one data type,
/// one dropout rate, a stream's sample emptied, the loss reading the input, the loss
/// swapped for the other kind over a matching stream).
pub(crate) fn near_valid_program() -> impl Strategy<Value = (Program, usize)> {
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
