//! The same scripted session on every device placement — in threads, in child processes
//! and as firmware in four QEMU processes: a program prepared on 4 replicas (a two-layer
//! perceptron whose first layer is sharded across the groups of one comm group and whose
//! second layer lives in another, with dropout and momentum), the seed, weights from host
//! by name, steps fed from named arrays (int64 labels narrowed to the stream's int32) with
//! the gradients averaged in each group, the loss and output anchors and the weights back
//! — all checked against the f64 host reference; then the RNG state, and cycle counts,
//! which only an instrumented program gives.

use crate::common;

use std::path::PathBuf;

use common::{assert_close, initial_weights, shape_of, step_io, Loss, Model, Placed};
use tessera_core::grouping::{CommGroup, RetrievalMode};
use tessera_core::program::{AnchorTensor, Optimizer, Sharding};
use tessera_core::stream::AnchorReturnType;
use tessera_core::wire::ErrorCode;
use tessera_host::runtime::reference::Reference;
use tessera_host::runtime::{Placement, Runtime, RuntimeError, RNG_WORDS};
use tessera_host::session::HostArray;
use tessera_host::transport::TransportError;

const R: usize = 4;
const STEPS: usize = 2;
const SEED: u64 = 1234;
const TOLERANCE: f64 = 1e-4;
const MEMORY: usize = 1 << 20;
/// Micro-batches per replica per step.
const MICRO_BATCHES: usize = 4;

/// 3 inputs, 5 hidden units, 3 classes. `w1` (15 elements, so shards of 8 and 7 plus
/// padding) is sharded across the pairs {0, 2} and {1, 3} and comes back one row per
/// group; `w2` lives in the pairs {0, 1} and {2, 3} and comes back one row per replica.
fn model() -> Model {
    Model {
        first: Placed::comm(CommGroup::Orthogonal(2)).sharded(Sharding::Balanced),
        second: Placed::comm(CommGroup::Consecutive(2)).returning(RetrievalMode::AllReplicas),
        dropout: 0.25,
        loss: Loss::CrossEntropy,
        batches_per_step: 2,
        accumulation: 2,
        optimizer: Optimizer::SgdMomentum {
            learning_rate: 0.05,
            momentum: 0.5,
        },
        anchors: vec![
            (AnchorTensor::Loss, AnchorReturnType::All),
            (AnchorTensor::Output, AnchorReturnType::Sum),
        ],
        instrumented: true,
        ..Model::mlp(3, 5, 3)
    }
}

/// `array` (`[groups, …]`) with its first row in every row.
fn first_row_everywhere(array: &HostArray) -> HostArray {
    let values = array.to_f32().unwrap();
    let n = values.len() / array.shape()[0] as usize;
    let rows: Vec<f32> = values[..n].repeat(array.shape()[0] as usize);
    HostArray::from_f32(array.shape(), &rows).unwrap()
}

fn run_session(placement: Placement) {
    let program = model().program();
    let mut runtime = Runtime::prepare(program.clone(), R, &placement, MEMORY).unwrap();
    runtime.set_random_seed(SEED).unwrap();
    assert_eq!(runtime.random_seed().unwrap(), SEED);

    // Every group starts from the same values: the groups' weights part only because
    // each group averages its own members' gradients.
    let mut initial = initial_weights(&program, R, 7);
    for array in initial.values_mut() {
        *array = first_row_everywhere(array);
    }
    runtime.weights_from_host(&initial).unwrap();
    let mut reference = Reference::new(&program, R, SEED, &initial).unwrap();

    for step in 0..STEPS {
        let io = step_io(&program, R, 100 + step as u64);
        let anchors = runtime.run(&io).unwrap();
        assert!(
            !runtime.weights_in_sync(),
            "a training run leaves the host weights stale"
        );
        let expected = reference.step(&io).unwrap();
        let names: Vec<&String> = anchors.keys().collect();
        assert_eq!(
            names,
            ["loss", "output"],
            "step {step}: every anchor, by name"
        );
        // The loss of every micro-batch; the output summed over the step, 3 classes wide.
        assert_eq!(shape_of(&anchors["loss"]), [MICRO_BATCHES, R]);
        assert_eq!(shape_of(&anchors["output"]), [1, R, 3]);
        for (name, array) in &anchors {
            assert_close(
                &format!("step {step}: anchor {name}"),
                array,
                &expected[name],
                TOLERANCE,
            );
        }
    }

    let weights = runtime.weights_to_host().unwrap();
    assert!(runtime.weights_in_sync());
    let want = reference.weights();
    assert_eq!(
        weights.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (name, array) in &weights {
        assert_close(&format!("weight {name}"), array, &want[name], TOLERANCE);
    }
    // Returned shapes: one row per group, or per replica.
    assert_eq!(shape_of(&weights["w1"]), [2, 5, 3]);
    assert_eq!(shape_of(&weights["b1"]), [2, 5]);
    assert_eq!(shape_of(&weights["w2"]), [R, 3, 5]);
    assert_eq!(shape_of(&weights["b2"]), [R, 3]);
    let rows = |name: &str| -> Vec<Vec<f32>> {
        let values = weights[name].to_f32().unwrap();
        let n = values.len() / weights[name].shape()[0] as usize;
        values.chunks(n).map(<[f32]>::to_vec).collect()
    };
    let (w1, w2) = (rows("w1"), rows("w2"));
    assert_ne!(w1[0], w1[1], "the groups of w1 trained on different data");
    assert_ne!(rows("b1")[0], rows("b1")[1], "and so did those of b1");
    assert_eq!(w2[0], w2[1], "replicas 0 and 1 share one w2");
    assert_eq!(w2[2], w2[3], "replicas 2 and 3 share one w2");
    assert_ne!(w2[0], w2[2], "the groups of w2 trained on different data");

    assert!(
        runtime.cycle_counts().unwrap().iter().all(|&c| c > 0),
        "every replica counted its work"
    );
    let state = runtime.rng_state().unwrap();
    assert_eq!(state.len(), RNG_WORDS * R);
    assert_ne!(
        state[..RNG_WORDS],
        state[RNG_WORDS..2 * RNG_WORDS],
        "replicas draw their own streams"
    );
    let replaced: Vec<u32> = (1..=(RNG_WORDS * R) as u32).collect();
    runtime.set_rng_state(&replaced).unwrap();
    assert_eq!(runtime.rng_state().unwrap(), replaced);
    match runtime.set_rng_state(&replaced[1..]) {
        Err(RuntimeError::RngState { expected, actual }) => {
            assert_eq!((expected, actual), (16, 15))
        }
        other => panic!("a short RNG state must be refused, got {other:?}"),
    }
    drop(runtime);

    // Without instrumentation the devices refuse to count.
    let mut plain = model();
    plain.instrumented = false;
    let mut runtime = Runtime::prepare(plain.program(), R, &placement, MEMORY).unwrap();
    runtime.run(&step_io(&plain.program(), R, 100)).unwrap();
    match runtime.cycle_counts() {
        Err(RuntimeError::Transport(TransportError::Device {
            code: ErrorCode::NotInstrumented,
            ..
        })) => {}
        other => panic!("a program without instrumentation has no cycle counts, got {other:?}"),
    }
}

#[test]
fn session_in_threads() {
    run_session(Placement::Thread);
}

#[test]
fn session_in_child_processes() {
    run_session(Placement::Process(PathBuf::from(env!(
        "CARGO_BIN_EXE_tessera"
    ))));
}

#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn session_in_qemu() {
    let _exclusive = common::exclusive();
    run_session(Placement::Qemu(common::firmware()));
}
