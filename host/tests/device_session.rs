//! The same scripted session on every device placement — in threads, in child processes
//! and as firmware in four QEMU processes: hello, weights to remote slots (4 replicas,
//! 2 groups), stream data through the splitter, training steps with the gradient averaged
//! in each group, anchors and weights back — checked against the f64 host reference.

mod common;

use std::path::PathBuf;

use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::rng::Rng;
use tessera_host::runtime::reference::{max_relative_error, Reference};
use tessera_host::runtime::{
    ModelConfig, Placement, Runtime, RuntimeConfig, RuntimeError, StepData, RNG_WORDS,
};

const R: usize = 4;
const STEPS: usize = 2;
const SEED: u64 = 1234;
const TOLERANCE: f64 = 1e-4;

const MODEL: ModelConfig = ModelConfig {
    inputs: 3,
    outputs: 2,
    batches_per_step: 2,
    accumulation: 2,
    learning_rate: 0.05,
    dropout: 0.25,
};

/// Deterministic data: value `i` of a named array.
fn value(salt: u64, i: usize) -> f32 {
    Rng::from_seed(salt.wrapping_mul(1_000_003).wrapping_add(i as u64)).next_f32() * 2.0 - 1.0
}

fn run_session(placement: Placement) {
    let config = RuntimeConfig {
        replicas: R,
        grouping: GroupingSpec::Comm(CommGroup::Consecutive(2)),
        retrieval: RetrievalMode::OnePerGroup,
        model: MODEL,
        device_memory: 1 << 20,
    };
    let mut runtime = Runtime::prepare(config, &placement).unwrap();
    let grouping = *runtime.settings().grouping();
    runtime.set_random_seed(SEED).unwrap();
    assert_eq!(runtime.random_seed().unwrap(), SEED);

    let n = MODEL.inputs * MODEL.outputs;
    let initial: Vec<f32> = (0..grouping.num_groups() * n)
        .map(|i| value(7, i))
        .collect();
    runtime.weights_from_host(&initial).unwrap();
    let mut reference = Reference::new(MODEL, grouping, SEED, &initial);

    let samples = MODEL.batches_per_step * MODEL.accumulation * R;
    for step in 0..STEPS {
        let inputs: Vec<f32> = (0..samples * MODEL.inputs)
            .map(|i| value(100 + step as u64, i))
            .collect();
        let targets: Vec<f32> = (0..samples * MODEL.outputs)
            .map(|i| value(200 + step as u64, i))
            .collect();
        let data = StepData {
            inputs: &inputs,
            targets: &targets,
        };
        let losses = runtime.run(data).unwrap();
        assert!(
            !runtime.weights_in_sync(),
            "a training run leaves the host weights stale"
        );
        let expected = reference.step(&data);
        assert_eq!(
            losses.len(),
            expected.len(),
            "one loss per micro-batch per replica"
        );
        let error = max_relative_error(&losses, &expected).unwrap();
        assert!(
            error < TOLERANCE,
            "step {step}: losses differ from the reference by {error:e}"
        );
    }

    let weights = runtime.weights_to_host().unwrap();
    assert!(runtime.weights_in_sync());
    let error = max_relative_error(&weights, &reference.weights()).unwrap();
    assert!(
        error < TOLERANCE,
        "weights differ from the reference by {error:e}"
    );
    assert_ne!(
        weights[..n],
        weights[n..],
        "the groups trained on different data"
    );

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
    run_session(Placement::Qemu(common::firmware()));
}
