//! The job's model as a core [`Program`]: a two-layer perceptron classifier.
//!
//! `x → Linear(w1) → Bias(b1) → ReLU → Dropout → Linear(w2) → Bias(b2) → softmax
//! cross-entropy`. The first layer's weights `w1` and `b1` share the job's first comm
//! group, and `w1` is sharded across that group (replicated tensor sharding: each member
//! holds one shard; the layout is the job's). The second layer's `w2` and `b2` share
//! another comm group, unsharded. Streams: `x` (`f32`, one sample of `features`) and
//! `label` (`int32`, one class index). Anchors as the job asks (the loss and the output,
//! every micro-batch, unless told otherwise).

use tessera_core::dtype::DataType;
use tessera_core::grouping::GroupingSpec;
use tessera_core::program::{AnchorTensor, CapacityError, Layer, Optimizer, Program, Sharding};
use tessera_core::rng::Rng;
use tessera_core::stream::AnchorReturnType;

use super::TrainJob;
use crate::array::HostArray;
use crate::runtime::{RuntimeError, WeightsIo, MAX_REPLICAS};

/// The input stream's name.
pub const INPUT: &str = "x";
/// The labels stream's name.
pub const LABELS: &str = "label";

/// The job's program for `features` inputs and `classes` classes.
pub fn program(job: &TrainJob, features: usize, classes: usize) -> Result<Program, CapacityError> {
    let optimizer = if job.momentum > 0.0 {
        Optimizer::SgdMomentum {
            learning_rate: job.learning_rate,
            momentum: job.momentum,
        }
    } else {
        Optimizer::Sgd {
            learning_rate: job.learning_rate,
        }
    };
    let mut p = Program::new(
        job.batches_per_step as u32,
        job.accumulation as u32,
        optimizer,
    );
    p.instrumented = true;
    p.micro_batch_size = job.micro_batch_size as u32; // Checked: at most MAX_MICRO_BATCH.
    let (f, h, c) = (features as u32, job.hidden as u32, classes as u32);
    let first = GroupingSpec::Comm(job.comm);
    let second = GroupingSpec::Comm(job.output_comm);
    let retrieval = job.retrieval;
    let w1 = p.add_variable("w1", &[h, f], first, retrieval, job.sharding.clone())?;
    let b1 = p.add_variable("b1", &[h], first, retrieval, Sharding::None)?;
    let w2 = p.add_variable("w2", &[c, h], second, retrieval, Sharding::None)?;
    let b2 = p.add_variable("b2", &[c], second, retrieval, Sharding::None)?;
    p.input = p.add_stream(INPUT, DataType::F32, &[f], false)?;
    let labels = p.add_stream(LABELS, DataType::I32, &[1], false)?;
    for layer in [
        Layer::Linear { weight: w1 },
        Layer::Bias { bias: b1 },
        Layer::Relu,
        Layer::Dropout { rate: job.dropout },
        Layer::Linear { weight: w2 },
        Layer::Bias { bias: b2 },
        Layer::SoftmaxCrossEntropy { labels },
    ] {
        p.add_layer(layer)?;
    }
    for &(tensor, return_type) in &job.anchors {
        p.add_anchor(tensor, return_type)?;
    }
    Ok(p)
}

/// The anchors a job has unless told otherwise.
pub fn default_anchors() -> Vec<(AnchorTensor, AnchorReturnType)> {
    vec![
        (AnchorTensor::Loss, AnchorReturnType::All),
        (AnchorTensor::Output, AnchorReturnType::All),
    ]
}

/// Starting weights in their host shapes: Glorot-uniform matrices and zero biases, one
/// row per group (each group starts from its own draw), from `seed`, for a runtime of
/// `replicas` (1 to [`MAX_REPLICAS`], as a runtime drives; more is
/// [`RuntimeError::Replicas`]). Every buffer is allocated fallibly: weights larger than
/// the host can hold are [`RuntimeError::HostMemory`], never an abort.
pub fn initial_weights(
    program: &Program,
    replicas: usize,
    seed: u64,
) -> Result<WeightsIo, RuntimeError> {
    if !(1..=MAX_REPLICAS).contains(&replicas) {
        return Err(RuntimeError::Replicas {
            replicas,
            max: MAX_REPLICAS,
        });
    }
    let mut rng = Rng::from_seed(seed ^ 0x494e_4954);
    let mut weights = WeightsIo::new();
    for (i, v) in program.variables.iter().enumerate() {
        let groups = program.settings(i, replicas)?.group_count();
        let n: usize = v.shape.iter().map(|&d| d as usize).product();
        let too_large = |bytes| RuntimeError::HostMemory {
            name: v.name.to_string(),
            bytes,
        };
        // An overflow means more bytes than any host holds.
        let bytes = groups
            .checked_mul(n)
            .and_then(|count| count.checked_mul(4))
            .ok_or(too_large(usize::MAX))?;
        let mut values: Vec<u8> = Vec::new();
        values
            .try_reserve_exact(bytes)
            .map_err(|_| too_large(bytes))?;
        if v.shape.len() == 2 {
            let bound = (6.0 / (v.shape[0] as f32 + v.shape[1] as f32)).sqrt();
            for _ in 0..bytes / 4 {
                let value = bound * (2.0 * rng.next_f32() - 1.0);
                values.extend_from_slice(&value.to_le_bytes());
            }
        } else {
            values.resize(bytes, 0);
        }
        let mut shape: Vec<u32> = v.shape.to_vec();
        if groups > 1 {
            // At most MAX_REPLICAS groups.
            shape.insert(0, groups as u32);
        }
        let array =
            HostArray::new(DataType::F32, &shape, values).map_err(|_| RuntimeError::Bytes {
                name: v.name.to_string(),
                expected: shape.iter().map(|&d| d as usize).product::<usize>() * 4,
                actual: bytes,
                what: "host buffer",
            })?;
        weights.insert(v.name.to_string(), array);
    }
    Ok(weights)
}

/// The fraction of `inputs` (`[n, features]`) whose largest logit is their label, for the
/// model of weights `w1 [h, f]`, `b1 [h]`, `w2 [c, h]`, `b2 [c]` (no dropout: inference).
pub fn accuracy(weights: [&[f32]; 4], features: usize, inputs: &[f32], labels: &[i64]) -> f64 {
    let [w1, b1, w2, b2] = weights;
    let (h, c) = (b1.len(), b2.len());
    if features == 0 || w1.len() != h * features || w2.len() != c * h {
        return 0.0;
    }
    let mut correct = 0usize;
    for (x, &label) in inputs.chunks_exact(features).zip(labels) {
        let hidden: Vec<f64> = (0..h)
            .map(|j| {
                let z: f64 = (0..features)
                    .map(|i| f64::from(w1[j * features + i]) * f64::from(x[i]))
                    .sum::<f64>()
                    + f64::from(b1[j]);
                z.max(0.0)
            })
            .collect();
        let best = (0..c)
            .map(|k| {
                (0..h)
                    .map(|j| f64::from(w2[k * h + j]) * hidden[j])
                    .sum::<f64>()
                    + f64::from(b2[k])
            })
            .enumerate()
            .fold((0, f64::NEG_INFINITY), |best, (k, z)| {
                if z > best.1 {
                    (k, z)
                } else {
                    best
                }
            });
        if best.0 as i64 == label {
            correct += 1;
        }
    }
    correct as f64 / labels.len().max(1) as f64
}
