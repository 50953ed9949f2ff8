//! Unit tests of the program rules: one valid program, then one broken rule at a time with
//! the exact error `check` names, the reduction schedule, held elements, the output width
//! and the error texts. The property tests in `tests/suite/program_props/` cover arbitrary
//! programs.
//!
//! Every test starts from [`mlp`] and changes one thing, so that the error it expects can
//! only come from that change.

use std::string::ToString;
use std::vec::Vec;

use super::*;
use crate::grouping::{CommGroup, GroupingError, GroupingSpec, RetrievalMode};
use crate::shard::{Interval, LayoutKind, ShardError};
use crate::stream::{AnchorError, AnchorReturnType, DataFlowError};

const REPLICAS: usize = 4;

// Variable indices of `mlp`.
const W1: u8 = 0;
const B1: u8 = 1;
const W2: u8 = 2;
// Stream indices of `mlp`.
const X: u8 = 0;
const LABELS: u8 = 1;

fn name(text: &str) -> Name {
    Name::try_from(text).expect("a short name")
}

fn dims(d: &[u32]) -> Dims {
    Dims::from_slice(d).expect("rank <= 4")
}

fn variable(text: &str, shape: &[u32], grouping: CommGroup, sharding: Sharding) -> Variable {
    Variable {
        name: name(text),
        dtype: DataType::F32,
        shape: dims(shape),
        grouping: GroupingSpec::Comm(grouping),
        retrieval: RetrievalMode::OnePerGroup,
        sharding,
    }
}

fn stream(text: &str, dtype: DataType, sample: &[u32]) -> Stream {
    Stream {
        name: name(text),
        dtype,
        sample: dims(sample),
        broadcast: false,
    }
}

/// The valid program every test breaks in one place, for [`REPLICAS`] replicas:
///
/// - variables `w1 [16, 2]` (one group of all 4 replicas, balanced shards),
///   `b1 [16]` (every replica alone), `w2 [3, 16]` (orthogonal groups of 2, unsharded);
/// - streams `x: f32 [2]` (the input) and `labels: i32 [1]`;
/// - layers `Linear(w1), Bias(b1), Relu, Dropout(0.1), Linear(w2), SoftmaxCrossEntropy`;
/// - 4 batches per step of 2 micro-batches, the loss anchored every 2 batches, SGD with
///   momentum 0.9.
pub(super) fn mlp() -> Program {
    let mut p = Program {
        variables: heapless::Vec::new(),
        streams: heapless::Vec::new(),
        anchors: heapless::Vec::new(),
        layers: heapless::Vec::new(),
        input: X,
        batches_per_step: 4,
        accumulation: 2,
        micro_batch_size: 1,
        optimizer: Optimizer::SgdMomentum {
            learning_rate: 0.05,
            momentum: 0.9,
        },
        instrumented: false,
    };
    for v in [
        variable("w1", &[16, 2], CommGroup::All, Sharding::Balanced),
        variable("b1", &[16], CommGroup::None, Sharding::None),
        variable("w2", &[3, 16], CommGroup::Orthogonal(2), Sharding::None),
    ] {
        p.variables.push(v).expect("room");
    }
    for s in [
        stream("x", DataType::F32, &[2]),
        stream("labels", DataType::I32, &[1]),
    ] {
        p.streams.push(s).expect("room");
    }
    p.anchors
        .push(Anchor {
            tensor: AnchorTensor::Loss,
            return_type: AnchorReturnType::EveryN(2),
        })
        .expect("room");
    for layer in [
        Layer::Linear { weight: W1 },
        Layer::Bias { bias: B1 },
        Layer::Relu,
        Layer::Dropout { rate: 0.1 },
        Layer::Linear { weight: W2 },
        Layer::SoftmaxCrossEntropy { labels: LABELS },
    ] {
        p.layers.push(layer).expect("room");
    }
    p
}

/// `mlp` with variable `index` changed by `change`.
fn with_variable(index: u8, change: impl FnOnce(&mut Variable)) -> Program {
    let mut p = mlp();
    change(&mut p.variables[usize::from(index)]);
    p
}

/// `mlp` with stream `index` changed by `change`.
fn with_stream(index: u8, change: impl FnOnce(&mut Stream)) -> Program {
    let mut p = mlp();
    change(&mut p.streams[usize::from(index)]);
    p
}

/// `mlp` with layer `index` replaced.
fn with_layer(index: usize, layer: Layer) -> Program {
    let mut p = mlp();
    p.layers[index] = layer;
    p
}

fn variable_error(text: &str, rule: ProgramRule) -> ProgramError {
    ProgramError::Variable {
        name: name(text),
        rule,
    }
}

fn stream_error(text: &str, rule: ProgramRule) -> ProgramError {
    ProgramError::Stream {
        name: name(text),
        rule,
    }
}

fn layer_error(index: usize, rule: ProgramRule) -> ProgramError {
    ProgramError::Layer { index, rule }
}

fn reductions(p: &Program, replicas: usize) -> Vec<Reduction> {
    p.reductions(replicas).collect()
}

// ---------------------------------------------------------------------------------------
// The valid program.

/// The reference MLP passes. Catches a rule that refuses a valid program: a sharded
/// variable in a group of all replicas, an orthogonal grouping, a bias of the hidden width,
/// dropout, a cross-entropy over an `i32` labels stream, an EveryN anchor that divides the
/// batches, SGD with momentum.
#[test]
fn valid_mlp_passes() {
    assert_eq!(mlp().check(REPLICAS), Ok(()));
}

/// The same program passes on 2 and 8 replicas (every grouping divides them) and without
/// momentum. Catches a check tied to one replica count or to the optimizer's variant.
#[test]
fn valid_mlp_passes_on_other_replica_counts_and_plain_sgd() {
    for replicas in [2, 8] {
        assert_eq!(mlp().check(replicas), Ok(()), "{replicas} replicas");
    }
    let mut p = mlp();
    p.optimizer = Optimizer::Sgd { learning_rate: 0.0 };
    assert_eq!(p.check(REPLICAS), Ok(()));
}

/// A model ending in a mean-squared error against an `f32` stream of the output width
/// passes, with both tensors anchored. Catches an MSE checked against the input width or
/// against one element, and anchors of distinct tensors taken for duplicates.
#[test]
fn valid_mse_model_passes() {
    let mut p = mlp();
    p.streams
        .push(stream("t", DataType::F32, &[3]))
        .expect("room");
    *p.layers.last_mut().unwrap() = Layer::MeanSquaredError { targets: 2 };
    p.anchors
        .push(Anchor {
            tensor: AnchorTensor::Output,
            return_type: AnchorReturnType::Sum,
        })
        .expect("room");
    assert_eq!(p.check(REPLICAS), Ok(()));
}

/// The input stream need not be stream 0, and a sample may have several dimensions (its
/// element count is the width). Catches a check that assumes `input == 0` or reads only the
/// first dimension.
#[test]
fn input_anywhere_with_a_multi_dimensional_sample_passes() {
    let mut p = mlp();
    p.streams.swap(0, 1);
    p.input = 1;
    p.streams[1].sample = dims(&[1, 2]);
    *p.layers.last_mut().unwrap() = Layer::SoftmaxCrossEntropy { labels: 0 };
    assert_eq!(p.check(REPLICAS), Ok(()));
    assert_eq!(p.output_width(), Some(3));
}

// ---------------------------------------------------------------------------------------
// Names.

/// An empty variable name is refused by name. Catches names checked only for uniqueness.
#[test]
fn empty_variable_name() {
    let p = with_variable(B1, |v| v.name.clear());
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error("", ProgramRule::EmptyName))
    );
}

/// An empty stream name is refused. Catches names checked for variables only.
#[test]
fn empty_stream_name() {
    let p = with_stream(LABELS, |s| s.name.clear());
    assert_eq!(
        p.check(REPLICAS),
        Err(stream_error("", ProgramRule::EmptyName))
    );
}

/// A variable named like a stream is refused, naming the variable (variables are checked
/// first). Catches uniqueness checked within variables and within streams only.
#[test]
fn duplicate_name_across_a_variable_and_a_stream() {
    let p = with_variable(W2, |v| v.name = name("x"));
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error("x", ProgramRule::DuplicateName))
    );
}

/// Two variables of one name are refused. Catches a uniqueness check that only compares
/// against streams.
#[test]
fn duplicate_variable_names() {
    let p = with_variable(W2, |v| v.name = name("w1"));
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error("w1", ProgramRule::DuplicateName))
    );
}

/// Two streams of one name are refused. Catches a uniqueness check over variables only.
#[test]
fn duplicate_stream_names() {
    let p = with_stream(LABELS, |s| s.name = name("x"));
    assert_eq!(
        p.check(REPLICAS),
        Err(stream_error("x", ProgramRule::DuplicateName))
    );
}

// ---------------------------------------------------------------------------------------
// Variables.

/// A variable of another type than `f32` is refused with both types. Catches a missing
/// type rule (the device computes in `f32` only) or swapped expected/actual fields.
#[test]
fn non_f32_variable() {
    let p = with_variable(B1, |v| v.dtype = DataType::F16);
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error(
            "b1",
            ProgramRule::Type {
                expected: DataType::F32,
                actual: DataType::F16,
            }
        ))
    );
}

/// A zero dimension is refused. Catches a shape checked only for its rank (a zero-element
/// weight would make empty shards and empty reductions).
#[test]
fn zero_dimension() {
    let p = with_variable(W1, |v| v.shape = dims(&[16, 0]));
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error("w1", ProgramRule::Dimensions))
    );
}

/// A variable without dimensions (rank 0) is refused: variables have 1 to 4 dimensions
/// (rank 5 cannot be built, the capacity is 4). Catches a rank rule that lets scalars in
/// as one element.
#[test]
fn empty_variable_dims() {
    let p = with_variable(B1, |v| v.shape.clear());
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error("b1", ProgramRule::Dimensions))
    );
}

/// A shape whose element count overflows `usize` is refused as too large, not wrapped.
/// Catches an unchecked product of dimensions.
#[test]
fn overflowing_variable_size() {
    let p = with_variable(B1, |v| v.shape = dims(&[u32::MAX; 4]));
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error("b1", ProgramRule::Size))
    );
}

/// A comm group whose size does not divide the replicas is refused with the grouping
/// error. Catches groupings resolved lazily (only when the variable is placed).
#[test]
fn grouping_that_does_not_divide_the_replicas() {
    let p = with_variable(W2, |v| {
        v.grouping = GroupingSpec::Comm(CommGroup::Consecutive(3));
    });
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error(
            "w2",
            ProgramRule::Grouping(GroupingError::CommGroupSize {
                group_size: 3,
                replicas: 4,
            })
        ))
    );
}

/// A strided grouping whose block does not divide the replicas is refused. Catches the
/// strided form of the spec skipping validation.
#[test]
fn strided_grouping_that_does_not_divide_the_replicas() {
    let p = with_variable(B1, |v| {
        v.grouping = GroupingSpec::Strided {
            stride: 2,
            group_size: 3,
        };
    });
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error(
            "b1",
            ProgramRule::Grouping(GroupingError::NotDivisible {
                replicas: 4,
                stride: 2,
                group_size: 3,
            })
        ))
    );
}

/// The same valid program is refused on 3 replicas (orthogonal groups of 2) and on none.
/// Catches a check that ignores its `replicas` argument.
#[test]
fn replica_count_decides_the_groupings() {
    let p = mlp();
    assert_eq!(
        p.check(3),
        Err(variable_error(
            "w2",
            ProgramRule::Grouping(GroupingError::CommGroupSize {
                group_size: 2,
                replicas: 3,
            })
        ))
    );
    assert_eq!(p.check(0), Err(ProgramError::NoReplicas));
}

/// Explicit shard intervals covering 30 of `w1`'s 32 elements are refused with both
/// counts. Catches explicit layouts taken on trust from the host.
#[test]
fn explicit_intervals_that_do_not_add_up() {
    let intervals = [
        Interval { begin: 0, end: 8 },
        Interval { begin: 8, end: 30 },
    ];
    let p = with_variable(W1, |v| {
        v.sharding = Sharding::Explicit {
            per_replica: 8,
            intervals: heapless::Vec::from_slice(&intervals).unwrap(),
        };
    });
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error(
            "w1",
            ProgramRule::Shard(ShardError::CoverageMismatch {
                covered: 30,
                elements: 32,
            })
        ))
    );
}

/// Explicit intervals past the gathered buffer (`4 × 8 = 32` elements) are refused.
/// Catches the shard domain taken as 1 instead of the group size, or per-replica sizes
/// ignored.
#[test]
fn explicit_interval_out_of_the_gathered_buffer() {
    let intervals = [
        Interval { begin: 0, end: 16 },
        Interval { begin: 20, end: 36 },
    ];
    let p = with_variable(W1, |v| {
        v.sharding = Sharding::Explicit {
            per_replica: 8,
            intervals: heapless::Vec::from_slice(&intervals).unwrap(),
        };
    });
    assert_eq!(
        p.check(REPLICAS),
        Err(variable_error(
            "w1",
            ProgramRule::Shard(ShardError::IntervalOutOfBounds {
                index: 1,
                begin: 20,
                end: 36,
                gathered: 32,
            })
        ))
    );
}

/// Valid explicit intervals with padding pass, and a replica then holds `per_replica`
/// elements. Catches held elements computed from the element count for explicit layouts.
#[test]
fn explicit_intervals_with_padding_pass() {
    // 32 elements in shards of 9: [0, 8) of shard 0, [9, 17), [18, 26), [27, 35).
    let intervals: Vec<Interval> = (0..4)
        .map(|s| Interval {
            begin: 9 * s,
            end: 9 * s + 8,
        })
        .collect();
    let p = with_variable(W1, |v| {
        v.sharding = Sharding::Explicit {
            per_replica: 9,
            intervals: heapless::Vec::from_slice(&intervals).unwrap(),
        };
    });
    assert_eq!(p.check(REPLICAS), Ok(()));
    assert_eq!(p.held_elements(0, REPLICAS), Ok(9));
    let layout = p.shard_layout(0, REPLICAS).unwrap().unwrap();
    assert_eq!(layout.kind(), LayoutKind::Explicit);
    assert_eq!(layout.gathered_len(), 36);
}

// ---------------------------------------------------------------------------------------
// Streams.

/// A stream sample with a zero dimension, or none, is refused by stream name. Catches
/// sample shapes left unchecked (a zero-width input would make empty layers).
#[test]
fn stream_with_bad_dims() {
    let p = with_stream(X, |s| s.sample = dims(&[2, 0]));
    assert_eq!(
        p.check(REPLICAS),
        Err(stream_error("x", ProgramRule::Dimensions))
    );
    let p = with_stream(LABELS, |s| s.sample.clear());
    assert_eq!(
        p.check(REPLICAS),
        Err(stream_error("labels", ProgramRule::Dimensions))
    );
}

/// An input stream of `i32` is refused by the stream's name. Catches a model input of any
/// type (the layers compute in `f32`).
#[test]
fn input_stream_not_f32() {
    let p = with_stream(X, |s| s.dtype = DataType::I32);
    assert_eq!(
        p.check(REPLICAS),
        Err(stream_error(
            "x",
            ProgramRule::Type {
                expected: DataType::F32,
                actual: DataType::I32,
            }
        ))
    );
}

/// An input index past the streams is refused. Catches an unchecked index into the
/// streams.
#[test]
fn input_stream_missing() {
    let mut p = mlp();
    p.input = 2;
    assert_eq!(p.check(REPLICAS), Err(ProgramError::NoInput { index: 2 }));
}

// ---------------------------------------------------------------------------------------
// Layers.

/// A first weight shaped `[16, 3]` on a 2-wide input is refused with both widths.
/// Catches a Linear whose weight is read as `[inputs, outputs]`, or widths not chained.
#[test]
fn linear_width_mismatch() {
    let p = with_variable(W1, |v| v.shape = dims(&[16, 3]));
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(
            0,
            ProgramRule::Width {
                expected: 2,
                actual: 3,
            }
        ))
    );
}

/// A second weight whose inputs (15) miss the hidden width (16) is refused at layer 4.
/// Catches a width that does not follow the first Linear's outputs.
#[test]
fn second_linear_width_mismatch() {
    let p = with_variable(W2, |v| v.shape = dims(&[3, 15]));
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(
            4,
            ProgramRule::Width {
                expected: 16,
                actual: 15,
            }
        ))
    );
}

/// A bias of 15 elements after a 16-wide Linear is refused. Catches a Bias checked
/// against the input width instead of the current one.
#[test]
fn bias_width_mismatch() {
    let p = with_variable(B1, |v| v.shape = dims(&[15]));
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(
            1,
            ProgramRule::Width {
                expected: 16,
                actual: 15,
            }
        ))
    );
}

/// A Linear weight of rank 1 (32 elements, the right count) is refused with both ranks.
/// Catches a weight checked by element count only.
#[test]
fn linear_weight_of_rank_1() {
    let p = with_variable(W1, |v| v.shape = dims(&[32]));
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(
            0,
            ProgramRule::Rank {
                expected: 2,
                actual: 1,
            }
        ))
    );
}

/// A Linear weight of rank 3 is refused. Catches `matrix` reading the first two
/// dimensions of any shape.
#[test]
fn linear_weight_of_rank_3() {
    let p = with_variable(W1, |v| v.shape = dims(&[16, 2, 1]));
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(
            0,
            ProgramRule::Rank {
                expected: 2,
                actual: 3,
            }
        ))
    );
}

/// A bias of rank 2 (`[16, 1]`, the right count) is refused. Catches a bias checked by
/// element count only.
#[test]
fn bias_of_rank_2() {
    let p = with_variable(B1, |v| v.shape = dims(&[16, 1]));
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(
            1,
            ProgramRule::Rank {
                expected: 1,
                actual: 2,
            }
        ))
    );
}

/// A Linear naming variable 9 of 3 is refused with the index. Catches an unchecked
/// variable index.
#[test]
fn layer_names_a_missing_variable() {
    let p = with_layer(0, Layer::Linear { weight: 9 });
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(0, ProgramRule::Missing { index: 9 }))
    );
}

/// `w1` used by layers 0 and 4 is refused at the second use, before its width is looked
/// at. Catches weight tying slipping through (its gradient would be applied twice, and its
/// reduction listed once).
#[test]
fn variable_used_by_two_layers() {
    let p = with_layer(4, Layer::Linear { weight: W1 });
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(4, ProgramRule::UsedTwice))
    );
}

/// One variable as both a Linear weight and a Bias is refused. Catches a used-twice rule
/// that only compares layers of the same kind.
#[test]
fn variable_used_as_weight_and_bias() {
    let p = with_layer(1, Layer::Bias { bias: W1 });
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(1, ProgramRule::UsedTwice))
    );
}

/// Dropout rates of 1, NaN, below 0 and infinity are refused; 0 passes. Catches a range
/// check written as `rate <= 1.0`, or comparisons that let NaN through.
#[test]
fn dropout_rate_out_of_range() {
    for rate in [1.0, f32::NAN, -0.1, f32::INFINITY] {
        let p = with_layer(3, Layer::Dropout { rate });
        assert_eq!(
            p.check(REPLICAS),
            Err(layer_error(3, ProgramRule::Rate)),
            "rate {rate}"
        );
    }
    assert_eq!(
        with_layer(3, Layer::Dropout { rate: 0.0 }).check(REPLICAS),
        Ok(())
    );
}

/// A loss in the middle of the model is refused at its position. Catches a rule that only
/// checks the last layer is a loss.
#[test]
fn loss_not_last() {
    let p = with_layer(2, Layer::SoftmaxCrossEntropy { labels: LABELS });
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(2, ProgramRule::LossNotLast))
    );
}

/// A model without layers has no loss. Catches an empty model accepted (`last` underflow
/// or a vacuous loop).
#[test]
fn no_layers_no_loss() {
    let mut p = mlp();
    p.layers.clear();
    assert_eq!(p.check(REPLICAS), Err(ProgramError::NoLoss));
}

/// A model whose last layer is not a loss is refused. Catches a rule that only looks for
/// misplaced losses.
#[test]
fn model_without_a_loss() {
    let mut p = mlp();
    p.layers.pop();
    assert_eq!(p.check(REPLICAS), Err(ProgramError::NoLoss));
}

/// A cross-entropy over one class is refused. Catches the class count not checked (the
/// loss would be identically zero).
#[test]
fn cross_entropy_with_one_class() {
    let p = with_variable(W2, |v| v.shape = dims(&[1, 16]));
    assert_eq!(p.check(REPLICAS), Err(layer_error(5, ProgramRule::Classes)));
}

/// Labels read from the input stream are refused. Catches a loss stream not compared with
/// the input (here it would also fail the type rule, which must not come first).
#[test]
fn labels_from_the_input_stream() {
    let p = with_layer(5, Layer::SoftmaxCrossEntropy { labels: X });
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(5, ProgramRule::InputStream))
    );
}

/// Targets read from the input stream are refused too. Catches the input-stream rule
/// checked for labels only.
#[test]
fn targets_from_the_input_stream() {
    let p = with_layer(5, Layer::MeanSquaredError { targets: X });
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(5, ProgramRule::InputStream))
    );
}

/// An `f32` labels stream is refused with both types. Catches labels of any type.
#[test]
fn labels_stream_of_f32() {
    let p = with_stream(LABELS, |s| s.dtype = DataType::F32);
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(
            5,
            ProgramRule::Type {
                expected: DataType::I32,
                actual: DataType::F32,
            }
        ))
    );
}

/// A labels stream of two elements per sample is refused. Catches labels checked by type
/// only.
#[test]
fn labels_stream_of_two_elements() {
    let p = with_stream(LABELS, |s| s.sample = dims(&[2]));
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(5, ProgramRule::Labels { per_sample: 2 }))
    );
}

/// A labels index past the streams is refused. Catches an unchecked stream index.
#[test]
fn labels_stream_missing() {
    let p = with_layer(5, Layer::SoftmaxCrossEntropy { labels: 7 });
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(5, ProgramRule::Missing { index: 7 }))
    );
}

/// MSE targets of 2 elements against a 3-wide output are refused; `i32` targets are
/// refused by type. Catches targets checked against the input width, or of any type.
#[test]
fn mse_targets_width_and_type() {
    let mut p = mlp();
    p.streams
        .push(stream("t", DataType::F32, &[2]))
        .expect("room");
    *p.layers.last_mut().unwrap() = Layer::MeanSquaredError { targets: 2 };
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(
            5,
            ProgramRule::Width {
                expected: 3,
                actual: 2,
            }
        ))
    );
    p.streams[2].sample = dims(&[3]);
    p.streams[2].dtype = DataType::I32;
    assert_eq!(
        p.check(REPLICAS),
        Err(layer_error(
            5,
            ProgramRule::Type {
                expected: DataType::F32,
                actual: DataType::I32,
            }
        ))
    );
}

// ---------------------------------------------------------------------------------------
// Anchors and data flow.

/// An EveryN period of 3 with 4 batches per step is refused with both numbers. Catches
/// anchors not checked against the data flow.
#[test]
fn anchor_period_does_not_divide_batches() {
    let mut p = mlp();
    p.anchors[0].return_type = AnchorReturnType::EveryN(3);
    assert_eq!(
        p.check(REPLICAS),
        Err(ProgramError::Anchor {
            tensor: AnchorTensor::Loss,
            rule: ProgramRule::ReturnType(AnchorError::PeriodNotFactor {
                period: 3,
                batches: 4,
            }),
        })
    );
}

/// The same tensor anchored twice (even with different return types) is refused, naming
/// the tensor. Catches anchors compared as whole values instead of by tensor.
#[test]
fn same_tensor_anchored_twice() {
    let mut p = mlp();
    p.anchors
        .push(Anchor {
            tensor: AnchorTensor::Loss,
            return_type: AnchorReturnType::Final,
        })
        .expect("room");
    assert_eq!(
        p.check(REPLICAS),
        Err(ProgramError::Anchor {
            tensor: AnchorTensor::Loss,
            rule: ProgramRule::AnchoredTwice,
        })
    );
}

/// Zero batches per step, or zero micro-batches per batch, are refused. Catches the data
/// flow not validated.
#[test]
fn zero_batches_or_accumulation() {
    let mut p = mlp();
    p.batches_per_step = 0;
    assert_eq!(
        p.check(REPLICAS),
        Err(ProgramError::DataFlow(DataFlowError::ZeroBatches))
    );
    let mut p = mlp();
    p.accumulation = 0;
    assert_eq!(
        p.check(REPLICAS),
        Err(ProgramError::DataFlow(DataFlowError::ZeroAccumulation))
    );
}

// ---------------------------------------------------------------------------------------
// Optimizer.

/// Negative, NaN and infinite learning rates are refused, for both optimizers. Catches a
/// check written as `!(lr < 0.0)` (NaN passes) or one that only looks at one variant.
#[test]
fn bad_learning_rate() {
    for learning_rate in [-0.01, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for optimizer in [
            Optimizer::Sgd { learning_rate },
            Optimizer::SgdMomentum {
                learning_rate,
                momentum: 0.5,
            },
        ] {
            let mut p = mlp();
            p.optimizer = optimizer;
            assert_eq!(
                p.check(REPLICAS),
                Err(ProgramError::Optimizer),
                "{optimizer:?}"
            );
        }
    }
}

/// Momenta of 1, more, below 0 and NaN are refused; 0 passes. Catches a range written as
/// `..=1.0` (the velocity would never decay) or NaN let through.
#[test]
fn bad_momentum() {
    for momentum in [1.0, 1.5, -0.1, f32::NAN] {
        let mut p = mlp();
        p.optimizer = Optimizer::SgdMomentum {
            learning_rate: 0.1,
            momentum,
        };
        assert_eq!(
            p.check(REPLICAS),
            Err(ProgramError::Optimizer),
            "momentum {momentum}"
        );
    }
    let mut p = mlp();
    p.optimizer = Optimizer::SgdMomentum {
        learning_rate: 0.1,
        momentum: 0.0,
    };
    assert_eq!(p.check(REPLICAS), Ok(()));
}

// ---------------------------------------------------------------------------------------
// Reductions.

/// On 4 replicas the MLP gathers `w1` (sharded, group of 4), then averages the gradients of
/// `w1` (group of 4) and `w2` (groups of 2); `b1` (every replica alone) takes no round.
/// Catches gradients listed before gathers, a round for an unshared variable, or a gather
/// for an unsharded one.
#[test]
fn mlp_reductions() {
    assert_eq!(
        reductions(&mlp(), REPLICAS),
        [
            Reduction::Gather { variable: W1 },
            Reduction::Gradient { variable: W1 },
            Reduction::Gradient { variable: W2 },
        ]
    );
}

/// With `b1` shared by pairs of replicas its gradient round sits between `w1`'s and
/// `w2`'s, in variable order. Catches the bias left out of the schedule or rounds ordered
/// by layer kind.
#[test]
fn shared_bias_takes_a_gradient_round_in_variable_order() {
    let p = with_variable(B1, |v| {
        v.grouping = GroupingSpec::Comm(CommGroup::Consecutive(2));
    });
    assert_eq!(p.check(REPLICAS), Ok(()));
    assert_eq!(
        reductions(&p, REPLICAS),
        [
            Reduction::Gather { variable: W1 },
            Reduction::Gradient { variable: W1 },
            Reduction::Gradient { variable: B1 },
            Reduction::Gradient { variable: W2 },
        ]
    );
}

/// Variable order, not layer order, decides: with `w2` stored first (and the layers
/// renumbered) its rounds come first. Catches rounds listed in layer order.
#[test]
fn reductions_follow_variable_order() {
    let mut p = mlp();
    p.variables.swap(0, 2);
    p.variables[0].sharding = Sharding::PaddedTail;
    p.layers[0] = Layer::Linear { weight: 2 };
    p.layers[4] = Layer::Linear { weight: 0 };
    assert_eq!(p.check(REPLICAS), Ok(()));
    assert_eq!(
        reductions(&p, REPLICAS),
        [
            Reduction::Gather { variable: 0 },
            Reduction::Gather { variable: 2 },
            Reduction::Gradient { variable: 0 },
            Reduction::Gradient { variable: 2 },
        ]
    );
}

/// On one replica every group has one member: no rounds at all, sharded `w1` included.
/// Catches rounds decided by the grouping spec (`All`) rather than the resolved group size.
#[test]
fn one_replica_has_no_reductions() {
    assert_eq!(
        mlp().check(1),
        Err(variable_error(
            "w2",
            ProgramRule::Grouping(GroupingError::CommGroupSize {
                group_size: 2,
                replicas: 1,
            })
        ))
    );
    let p = with_variable(W2, |v| v.grouping = GroupingSpec::Comm(CommGroup::All));
    assert_eq!(p.check(1), Ok(()));
    assert!(reductions(&p, 1).is_empty());
}

/// A sharded variable whose group has one member (every replica alone) is neither gathered
/// nor averaged, and each replica holds all of it. Catches a gather decided by the
/// sharding alone.
#[test]
fn sharded_variable_alone_takes_no_round() {
    let p = with_variable(W1, |v| v.grouping = GroupingSpec::Comm(CommGroup::None));
    assert_eq!(p.check(REPLICAS), Ok(()));
    assert_eq!(
        reductions(&p, REPLICAS),
        [Reduction::Gradient { variable: W2 }]
    );
    assert_eq!(p.held_elements(0, REPLICAS), Ok(32));
}

/// A shared sharded variable that no layer uses (it passes `check`: nothing requires every
/// variable to be used) takes no round. Pins the code's reading of "trained"; the module
/// documentation's wording for gathers ("every sharded variable whose group has several
/// members") does not mention it.
#[test]
fn unused_variable_takes_no_round() {
    let mut p = mlp();
    p.variables
        .push(variable("spare", &[5], CommGroup::All, Sharding::Balanced))
        .expect("room");
    assert_eq!(p.check(REPLICAS), Ok(()));
    assert_eq!(p.layer_of(3), None);
    assert_eq!(reductions(&p, REPLICAS), reductions(&mlp(), REPLICAS));
}

// ---------------------------------------------------------------------------------------
// Held elements, shard layouts, output width, look-ups.

/// `w1` (32 elements, balanced over its group of 4) holds ⌈32/4⌉ = 8 per replica; `b1`
/// and `w2` are unsharded and held whole. Catches the shard domain taken as the replica
/// count or the group count, or shards reported for unsharded variables.
#[test]
fn held_elements_of_the_mlp() {
    let p = mlp();
    assert_eq!(p.held_elements(0, REPLICAS), Ok(8));
    assert_eq!(p.held_elements(1, REPLICAS), Ok(16));
    assert_eq!(p.held_elements(2, REPLICAS), Ok(48));
    assert_eq!(
        p.held_elements(3, REPLICAS),
        Err(ProgramError::NoSuchVariable { index: 3 })
    );
}

/// The shard domain is the group size, not the replica count: with a hidden width of 15,
/// `w2` `[3, 15]` sharded over its orthogonal groups of 2 on 4 replicas holds ⌈45/2⌉ = 23
/// elements; padded-tail `w1` `[15, 2]` over its group of 4 holds ⌈30/4⌉ = 8. Catches a
/// domain of `replicas` (`w2` would hold 12).
#[test]
fn shard_domain_is_the_group_size() {
    let mut p = mlp();
    p.variables[2].sharding = Sharding::Balanced;
    p.variables[0].sharding = Sharding::PaddedTail;
    p.variables[0].shape = dims(&[15, 2]);
    p.variables[1].shape = dims(&[15]);
    p.variables[2].shape = dims(&[3, 15]);
    assert_eq!(p.check(REPLICAS), Ok(()));
    let w2 = p.shard_layout(2, REPLICAS).unwrap().unwrap();
    assert_eq!((w2.domain(), w2.per_replica()), (2, 23));
    assert_eq!(p.held_elements(0, REPLICAS), Ok(8));
    let w1 = p.shard_layout(0, REPLICAS).unwrap().unwrap();
    assert_eq!(
        (w1.kind(), w1.domain(), w1.per_replica(), w1.elements()),
        (LayoutKind::PaddedTail, 4, 8, 30)
    );
}

/// `shard_layout` gives the balanced layout of `w1` over 4 replicas and `None` for
/// unsharded variables, and reports a bad index or grouping instead of panicking.
/// Catches `None` and "error" conflated.
#[test]
fn shard_layouts_of_the_mlp() {
    let p = mlp();
    let w1 = p.shard_layout(0, REPLICAS).unwrap().unwrap();
    assert_eq!(
        (w1.kind(), w1.domain(), w1.per_replica(), w1.elements()),
        (LayoutKind::Balanced, 4, 8, 32)
    );
    assert_eq!(p.shard_layout(1, REPLICAS), Ok(None));
    assert_eq!(
        p.shard_layout(8, REPLICAS),
        Err(ProgramError::NoSuchVariable { index: 8 })
    );
    assert_eq!(
        p.shard_layout(0, 0),
        Err(variable_error(
            "w1",
            ProgramRule::Grouping(GroupingError::ZeroReplicas)
        ))
    );
}

/// The MLP's output (the loss layer's input) is 3 wide: `w2`'s outputs. Catches the width
/// taken from the input stream, from a weight's inputs, or from the first Linear.
#[test]
fn output_width_of_the_mlp() {
    assert_eq!(mlp().output_width(), Some(3));
    let mut p = mlp();
    p.layers.clear();
    p.layers
        .push(Layer::MeanSquaredError { targets: 1 })
        .expect("room");
    assert_eq!(p.output_width(), Some(2), "no Linear: the input width");
}

/// Look-ups by name and by layer. Catches an off-by-one or a name compared by prefix.
#[test]
fn lookups() {
    let p = mlp();
    assert_eq!(p.variable_index("b1"), Some(1));
    assert_eq!(p.variable_index("w"), None);
    assert_eq!(p.variable_index("x"), None);
    assert_eq!(p.stream_index("labels"), Some(1));
    assert_eq!(p.stream_index("w1"), None);
    assert_eq!(
        (p.layer_of(0), p.layer_of(1), p.layer_of(2), p.layer_of(3)),
        (Some(0), Some(1), Some(4), None)
    );
}

// ---------------------------------------------------------------------------------------
// Error texts.

/// Error texts name the tensor and carry the sizes, so that a refused program can be fixed
/// from the message alone. Catches a `Display` that drops the name or the numbers.
#[test]
fn error_texts_name_the_tensor_and_the_sizes() {
    let intervals = [Interval { begin: 0, end: 30 }];
    let p = with_variable(W1, |v| {
        v.sharding = Sharding::Explicit {
            per_replica: 8,
            intervals: heapless::Vec::from_slice(&intervals).unwrap(),
        };
    });
    let text = p.check(REPLICAS).unwrap_err().to_string();
    assert!(text.contains("`w1`"), "{text}");
    assert!(text.contains("30") && text.contains("32"), "{text}");

    let p = with_variable(W2, |v| {
        v.grouping = GroupingSpec::Comm(CommGroup::Consecutive(3));
    });
    let text = p.check(REPLICAS).unwrap_err().to_string();
    assert!(text.contains("`w2`"), "{text}");
    assert!(text.contains('3') && text.contains('4'), "{text}");

    let p = with_stream(LABELS, |s| s.dtype = DataType::F32);
    let text = p.check(REPLICAS).unwrap_err().to_string();
    assert!(text.starts_with("layer 5"), "{text}");
    assert!(text.contains("int32") && text.contains("float32"), "{text}");

    let p = with_stream(X, |s| s.dtype = DataType::I32);
    let text = p.check(REPLICAS).unwrap_err().to_string();
    assert!(text.contains("`x`") && text.contains("int32"), "{text}");

    let p = with_variable(B1, |v| v.shape = dims(&[15]));
    let text = p.check(REPLICAS).unwrap_err().to_string();
    assert!(text.starts_with("layer 1"), "{text}");
    assert!(text.contains("16") && text.contains("15"), "{text}");

    let mut p = mlp();
    p.anchors[0].return_type = AnchorReturnType::EveryN(3);
    let text = p.check(REPLICAS).unwrap_err().to_string();
    assert!(
        text.contains("`loss`") && text.contains('3') && text.contains('4'),
        "{text}"
    );

    let text = ProgramError::NoSuchVariable { index: 7 }.to_string();
    assert!(text.contains('7'), "{text}");
}

/// Every rule has a non-empty text of its own. Catches two rules sharing a message (the
/// user could not tell them apart).
#[test]
fn rule_texts_are_distinct() {
    let rules = [
        ProgramRule::EmptyName,
        ProgramRule::DuplicateName,
        ProgramRule::Type {
            expected: DataType::F32,
            actual: DataType::I32,
        },
        ProgramRule::Dimensions,
        ProgramRule::Size,
        ProgramRule::Grouping(GroupingError::ZeroReplicas),
        ProgramRule::Shard(ShardError::ZeroDomain),
        ProgramRule::Missing { index: 1 },
        ProgramRule::Width {
            expected: 1,
            actual: 2,
        },
        ProgramRule::Rank {
            expected: 1,
            actual: 2,
        },
        ProgramRule::UsedTwice,
        ProgramRule::Rate,
        ProgramRule::LossNotLast,
        ProgramRule::Classes,
        ProgramRule::InputStream,
        ProgramRule::ReturnType(AnchorError::PeriodNotPositive),
        ProgramRule::AnchoredTwice,
    ];
    let texts: Vec<_> = rules.iter().map(ToString::to_string).collect();
    for (i, text) in texts.iter().enumerate() {
        assert!(!text.is_empty());
        assert!(!texts[..i].contains(text), "{text} twice");
    }
}

/// The one rule for an anchored value's width (it was derived separately on the host, in
/// the reference and on the device): a loss is one value, an output the model's width.
#[test]
fn anchor_width_is_one_loss_or_the_output_width() {
    let p = mlp();
    assert_eq!(p.anchor_width(AnchorTensor::Loss), Some(1));
    assert_eq!(p.anchor_width(AnchorTensor::Output), p.output_width());
}

/// The one rule for optimizer values (a program's, or the host's between runs).
#[test]
fn optimizer_values_are_finite_non_negative_with_momentum_below_one() {
    assert!(Optimizer::check_values(0.0, 0.0).is_ok());
    assert!(Optimizer::check_values(0.5, 0.99).is_ok());
    assert!(Optimizer::check_values(-0.1, 0.0).is_err());
    assert!(Optimizer::check_values(f32::NAN, 0.0).is_err());
    assert!(Optimizer::check_values(f32::INFINITY, 0.0).is_err());
    assert!(Optimizer::check_values(0.1, 1.0).is_err());
    assert!(Optimizer::check_values(0.1, -0.5).is_err());
    assert!(Optimizer::check_values(0.1, f32::NAN).is_err());
}

/// Catches a micro-batch of no samples (every FIFO item empty: a step that pops nothing)
/// or of more than the cap being accepted.
#[test]
fn a_micro_batch_holds_1_to_the_cap_samples() {
    for size in [0, MAX_MICRO_BATCH + 1] {
        let mut p = mlp();
        p.micro_batch_size = size;
        assert_eq!(p.check(REPLICAS), Err(ProgramError::MicroBatch { size }));
    }
    let mut p = mlp();
    p.micro_batch_size = MAX_MICRO_BATCH;
    assert_eq!(p.check(REPLICAS), Ok(()));
}

/// Catches anchors and stream items sized per sample when a micro-batch holds several.
#[test]
fn items_and_anchors_hold_a_whole_micro_batch() {
    let mut p = mlp();
    p.micro_batch_size = 5;
    assert_eq!(p.item_elements(usize::from(X)), Some(5 * 2));
    assert_eq!(p.anchor_width(AnchorTensor::Loss), Some(5));
    assert_eq!(p.anchor_width(AnchorTensor::Output), Some(5 * 3));
}

/// The checked program's facts are the ones the fallible lookups give, read without a
/// lookup; a program that fails its check makes no `Checked`. Catches facts computed apart
/// from the check (a stream's item, a variable's size, an anchor's width drifting).
#[test]
fn a_checked_program_carries_what_its_check_established() {
    let mut p = mlp();
    p.micro_batch_size = 8;
    let checked = p.clone().checked(REPLICAS).expect("a valid program");
    assert_eq!(checked.replicas(), REPLICAS);
    for (k, &item) in checked.items().iter().enumerate() {
        assert_eq!(Some(item), p.item_elements(k));
    }
    assert_eq!(checked.items(), [16, 8]);
    assert_eq!(checked.sizes(), [32, 16, 48]);
    assert_eq!(checked.output_width(), 3);
    for tensor in [AnchorTensor::Loss, AnchorTensor::Output] {
        assert_eq!(Some(checked.anchor_width(tensor)), p.anchor_width(tensor));
    }
    assert_eq!(checked.into_program(), p);
    let broken = with_layer(5, Layer::Relu);
    assert!(broken.clone().checked(REPLICAS).is_err());
    assert_eq!(
        broken.clone().checked(REPLICAS).err(),
        broken.check(REPLICAS).err()
    );
}
