//! A slow link to one device must not change what the replicas compute.
//!
//! Replica 1's host → device link delivers every write 150 ms late while the host retries
//! after 40 ms: the host re-sends each step several times, the device re-sends its
//! contribution for each retry, and the host answers every copy. Before reductions carried
//! their round, the device took the duplicate answers to round 0 for the answers to later
//! rounds, and the group's weights silently drifted from the reference. Each batch here
//! makes two exchanges ([`program`]): the sharded `w1` gathered in its pair, then the
//! gradients of `w1` and of `b1` averaged in it — and the two batches' gathers are of the
//! same length, so an answer taken for the wrong round is no size error but a silent
//! drift.

use crate::common;

use std::time::Duration;

use common::{initial_weights, step_io, Model, Placed};
use tessera_core::grouping::CommGroup;
use tessera_core::program::{Optimizer, Program, Sharding};
use tessera_host::runtime::reference::Reference;
use tessera_host::runtime::{Placement, Runtime, WeightsIo};
use tessera_host::session::HostArray;
use tessera_host::transport::{Channel, FaultConfig};

const R: usize = 4;
const SEED: u64 = 77;
const STEPS: u64 = 2;
const MEMORY: usize = 1 << 16;

/// A linear model of 3 inputs and 2 outputs trained on an MSE loss, two batches of one
/// micro-batch per step: `w1` sharded across the pairs {0, 1} and {2, 3}, `b1` in them
/// too. Per batch: gather `w1`, then average the gradients of `w1` and of `b1` (one
/// exchange).
fn program() -> Program {
    Model {
        first: Placed::comm(CommGroup::Consecutive(2)).sharded(Sharding::PaddedTail),
        batches_per_step: 2,
        accumulation: 1,
        optimizer: Optimizer::Sgd { learning_rate: 0.1 },
        ..Model::linear(3, 2)
    }
    .program()
}

/// Trains `STEPS` steps; returns every step's losses and the final weights.
fn train(runtime: &mut Runtime) -> (Vec<HostArray>, WeightsIo) {
    let program = runtime.program().clone();
    runtime.set_random_seed(SEED).unwrap();
    runtime
        .weights_from_host(&initial_weights(&program, R, 1))
        .unwrap();
    let losses = (0..STEPS)
        .map(|step| {
            let mut anchors = runtime.run(&step_io(&program, R, 10 + step)).unwrap();
            anchors.remove("loss").expect("the loss is anchored")
        })
        .collect();
    (losses, runtime.weights_to_host().unwrap())
}

#[test]
fn a_slow_link_trains_exactly_like_a_fast_one() {
    let fast = Runtime::prepare(program(), R, &Placement::Thread, MEMORY).unwrap();
    let (fast_losses, fast_weights) = train(&mut { fast });

    let channels = (0..R as u32)
        .map(|replica| {
            let faults = (replica == 1).then_some(FaultConfig {
                latency: Duration::from_millis(150),
                ..FaultConfig::NONE
            });
            let mut channel = Channel::in_process(replica, MEMORY, faults).unwrap();
            channel.set_deadline(Duration::from_millis(40));
            channel
        })
        .collect();
    let mut slow = Runtime::prepare_on(program(), channels).unwrap();
    let (losses, weights) = train(&mut slow);

    assert_eq!(losses, fast_losses, "every loss, bit for bit");
    assert_eq!(weights, fast_weights, "the final weights, bit for bit");

    // And both match the host's f64 computation of the same training.
    let program = program();
    let mut reference =
        Reference::new(&program, R, SEED, &initial_weights(&program, R, 1)).unwrap();
    for step in 0..STEPS {
        reference.step(&step_io(&program, R, 10 + step)).unwrap();
    }
    let want = reference.weights();
    for (name, array) in &weights {
        common::assert_close(&format!("weight {name}"), array, &want[name], 1e-4);
    }
}
