//! A slow link to one device must not change what the replicas compute.
//!
//! Replica 1's host → device link delivers every write 150 ms late while the host retries
//! after 40 ms: the host re-sends each step several times, the device re-sends its
//! contribution for each retry, and the host answers every copy. Before reductions carried
//! their round, the device took the duplicate answers to round 0 for the answers to later
//! rounds, and the group's weights silently drifted from the reference.

use std::time::Duration;

use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::rng::Rng;
use tessera_host::runtime::reference::{max_relative_error, Reference};
use tessera_host::runtime::{ModelConfig, Runtime, RuntimeConfig, StepData};
use tessera_host::transport::{Channel, FaultConfig};

const R: usize = 4;
const SEED: u64 = 77;

const MODEL: ModelConfig = ModelConfig {
    inputs: 3,
    outputs: 2,
    batches_per_step: 4,
    accumulation: 1,
    learning_rate: 0.1,
    dropout: 0.0,
};

fn config() -> RuntimeConfig {
    RuntimeConfig {
        replicas: R,
        grouping: GroupingSpec::Comm(CommGroup::Consecutive(2)),
        retrieval: RetrievalMode::OnePerGroup,
        model: MODEL,
        device_memory: 1 << 16,
    }
}

fn value(salt: u64, i: usize) -> f32 {
    Rng::from_seed(salt.wrapping_mul(1_000_003).wrapping_add(i as u64)).next_f32() * 2.0 - 1.0
}

/// Trains two steps; returns every loss and the final weights.
fn train(runtime: &mut Runtime) -> (Vec<f32>, Vec<f32>) {
    let groups = runtime.settings().grouping().num_groups();
    let n = MODEL.inputs * MODEL.outputs;
    let initial: Vec<f32> = (0..groups * n).map(|i| value(1, i)).collect();
    runtime.set_random_seed(SEED).unwrap();
    runtime.weights_from_host(&initial).unwrap();
    let samples = MODEL.batches_per_step * MODEL.accumulation * R;
    let mut losses = Vec::new();
    for step in 0..2u64 {
        let inputs: Vec<f32> = (0..samples * MODEL.inputs)
            .map(|i| value(10 + step, i))
            .collect();
        let targets: Vec<f32> = (0..samples * MODEL.outputs)
            .map(|i| value(20 + step, i))
            .collect();
        let data = StepData {
            inputs: &inputs,
            targets: &targets,
        };
        losses.extend(runtime.run(data).unwrap());
    }
    (losses, runtime.weights_to_host().unwrap())
}

#[test]
fn a_slow_link_trains_exactly_like_a_fast_one() {
    let fast = Runtime::prepare(config(), &tessera_host::runtime::Placement::Thread).unwrap();
    let (fast_losses, fast_weights) = train(&mut { fast });

    let channels = (0..R as u32)
        .map(|replica| {
            let faults = (replica == 1).then_some(FaultConfig {
                latency: Duration::from_millis(150),
                ..FaultConfig::NONE
            });
            let mut channel = Channel::in_process(replica, 1 << 16, faults).unwrap();
            channel.set_deadline(Duration::from_millis(40));
            channel
        })
        .collect();
    let mut slow = Runtime::prepare_on(config(), channels).unwrap();
    let (losses, weights) = train(&mut slow);

    assert_eq!(losses, fast_losses, "every loss, bit for bit");
    assert_eq!(weights, fast_weights, "the final weights, bit for bit");

    // And both match the host's f64 computation of the same training.
    let grouping = *slow.settings().grouping();
    let n = MODEL.inputs * MODEL.outputs;
    let initial: Vec<f32> = (0..grouping.num_groups() * n)
        .map(|i| value(1, i))
        .collect();
    let mut reference = Reference::new(MODEL, grouping, SEED, &initial);
    let samples = MODEL.batches_per_step * MODEL.accumulation * R;
    for step in 0..2u64 {
        let inputs: Vec<f32> = (0..samples * MODEL.inputs)
            .map(|i| value(10 + step, i))
            .collect();
        let targets: Vec<f32> = (0..samples * MODEL.outputs)
            .map(|i| value(20 + step, i))
            .collect();
        reference.step(&StepData {
            inputs: &inputs,
            targets: &targets,
        });
    }
    let error = max_relative_error(&weights, &reference.weights()).unwrap();
    assert!(
        error < 1e-4,
        "weights differ from the reference by {error:e}"
    );
}
