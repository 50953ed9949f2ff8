//! What a failed training step leaves: the rule of `tessera_host::runtime::recovery`,
//! checked with a device error injected at every reduction round of a step, on every
//! placement.
//!
//! Before the rule, the step driver returned on the first device error and nothing reset
//! the devices: with anchors, every later step failed "FIFO is full" (the failed step's
//! unread inputs and anchored values were still queued) with no way out but a new runtime;
//! without anchors, a failure at the last gradient round let later steps return `Ok` while
//! the replicas of one group held different weights (one had applied the round's update,
//! the other had not) — invisible with one-per-group retrieval and in checkpoints.
//!
//! Each case runs a step from known weights, runs it again with a failure injected, checks
//! the refusal, loads the weights and the optimizer state again, and runs the step once
//! more: it must equal the first run bit for bit (anchors, weights, velocity), which a
//! stale sample, anchored value, partial `Sum` anchor or velocity left by the failure
//! would change.

use crate::common;

use common::{initial_weights, step_io, Model, Placed};
use tessera_core::grouping::{CommGroup, RetrievalMode};
use tessera_core::program::{AnchorTensor, Optimizer, Program, Sharding};
use tessera_core::stream::AnchorReturnType;
use tessera_core::wire::ErrorCode;
use tessera_host::runtime::{Placement, Runtime, RuntimeError, StepFault, StepPhase, WeightsIo};
use tessera_host::session::HostArray;
use tessera_host::transport::TransportError;

const R: usize = 4;
const MEMORY: usize = 1 << 16;

/// A two-layer perceptron (3 → 4 → 2, MSE) with momentum, two batches of two
/// micro-batches per step: `w1` sharded across the pairs {0, 1} and {2, 3} and returned
/// for every replica, the second layer in one group of four. `anchors`: the loss of every
/// micro-batch and the output summed over the step (its running sum lives in the step's
/// scratch).
fn program(anchors: bool) -> Program {
    let mut model = Model {
        first: Placed::comm(CommGroup::Consecutive(2))
            .sharded(Sharding::PaddedTail)
            .returning(RetrievalMode::AllReplicas),
        second: Placed::comm(CommGroup::All),
        batches_per_step: 2,
        accumulation: 2,
        optimizer: Optimizer::SgdMomentum {
            learning_rate: 0.1,
            momentum: 0.5,
        },
        ..Model::mlp(3, 4, 2)
    };
    model.anchors = if anchors {
        vec![
            (AnchorTensor::Loss, AnchorReturnType::All),
            (AnchorTensor::Output, AnchorReturnType::Sum),
        ]
    } else {
        Vec::new()
    };
    model.program()
}

/// Every variable's velocity, zero, in its host shape.
fn zero_velocity(weights: &WeightsIo) -> WeightsIo {
    weights
        .iter()
        .map(|(name, w)| {
            let zeros = vec![0f32; w.elements()];
            (
                name.clone(),
                HostArray::from_f32(w.shape(), &zeros).unwrap(),
            )
        })
        .collect()
}

/// Loads `weights` and a zero velocity.
fn load(runtime: &mut Runtime, weights: &WeightsIo) {
    runtime.weights_from_host(weights).unwrap();
    runtime
        .optimizer_state_from_host(&zero_velocity(weights))
        .unwrap();
}

/// The bytes of every array of a step's result, by name.
fn bytes(arrays: &std::collections::BTreeMap<String, HostArray>) -> Vec<(String, Vec<u8>)> {
    arrays
        .iter()
        .map(|(name, a)| (name.clone(), a.bytes().to_vec()))
        .collect()
}

/// Fails a step at each of its rounds in turn (replica `round mod R` failing) and checks
/// the rule after each; `what` names the case in messages.
fn fail_and_recover(placement: &Placement, anchors: bool, what: &str) {
    let p = program(anchors);
    let mut failing = Runtime::prepare(p.clone(), R, placement, MEMORY).unwrap();
    // Per batch, a gather and a gradient exchange at least.
    let rounds = failing.rounds_per_step();
    assert!(rounds >= 2 * p.batches_per_step, "{what}: {rounds} rounds");
    let weights = initial_weights(&p, R, 3);
    for round in 0..rounds {
        let replica = round % R as u32;
        let case = format!("{what}: replica {replica} failing round {round}");
        let io = step_io(&p, R, 100 + u64::from(round));
        // The step as a runtime that never failed runs it (this one, before the failure:
        // a failure's leftovers would show up in the comparison below).
        load(&mut failing, &weights);
        let expected = (
            bytes(&failing.run(&io).unwrap()),
            bytes(&failing.weights_to_host().unwrap()),
            bytes(&failing.optimizer_state_to_host().unwrap()),
        );
        load(&mut failing, &weights);
        failing.inject_step_fault(StepFault { replica, round });
        match failing.run(&io) {
            Err(RuntimeError::StepFailed {
                phase: StepPhase::Running,
                cause,
                diverged: true,
                reset: None,
                lost: None,
            }) => match *cause {
                RuntimeError::Transport(TransportError::Device {
                    replica: r,
                    code: ErrorCode::UnexpectedReduced,
                    ..
                }) => {
                    // A device of several lanes fails for all of them: named by its first.
                    let devices = failing.devices();
                    let device = devices.iter().find(|d| d.contains(&replica)).unwrap();
                    assert_eq!(
                        r, device.start,
                        "{case}: the error names the failing device"
                    )
                }
                other => panic!("{case}: the step failed for another reason: {other}"),
            },
            other => panic!("{case}: expected a failed, diverged, reset step, got {other:?}"),
        }

        // Diverged: no step, no weights read, until everything is loaded again.
        let refused = |r: Result<_, RuntimeError>, what: &str| match r {
            Err(RuntimeError::Diverged { what: w, .. }) => assert_eq!(w, what, "{case}"),
            Err(e) => panic!("{case}: expected a refusal for the {what}, got {e}"),
            Ok(_) => panic!("{case}: a diverged runtime must refuse"),
        };
        refused(failing.run(&io).map(|_| ()), "weights");
        refused(failing.weights_to_host().map(|_| ()), "weights");
        refused(
            failing.optimizer_state_to_host().map(|_| ()),
            "optimizer state",
        );
        failing.weights_from_host(&weights).unwrap();
        // The weights alone are not enough: the velocities diverged too.
        refused(failing.run(&io).map(|_| ()), "optimizer state");
        failing
            .optimizer_state_from_host(&zero_velocity(&weights))
            .unwrap();

        // Now the next step is exactly the one that never failed.
        let anchors = failing
            .run(&io)
            .unwrap_or_else(|e| panic!("{case}: the step after recovery failed: {e}"));
        assert_eq!(bytes(&anchors), expected.0, "{case}: anchors");
        let weights_after = bytes(&failing.weights_to_host().unwrap());
        assert_eq!(weights_after, expected.1, "{case}: weights");
        let velocity = bytes(&failing.optimizer_state_to_host().unwrap());
        assert_eq!(velocity, expected.2, "{case}: optimizer state");
    }
}

/// Threads, with anchors: a failure at every round of the step (each batch's gather of
/// `w1`, then its gradient exchange), each followed by the refusal and an exact step.
#[test]
fn threads_recover_from_a_failure_at_every_round() {
    fail_and_recover(&Placement::Thread, true, "threads, anchors");
}

/// Threads, no anchors: the case where a failure at the last gradient round used to go
/// unnoticed (later steps returned `Ok` with the replicas apart).
#[test]
fn threads_without_anchors_refuse_steps_after_a_failure_at_every_round() {
    fail_and_recover(&Placement::Thread, false, "threads, no anchors");
}

/// Child processes: every round, over the framed link and the shared window.
#[test]
fn child_processes_recover_from_a_failure_at_every_round() {
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_tessera"));
    fail_and_recover(&Placement::Process(exe), true, "processes");
}

/// The firmware under QEMU: every round too, over the UART and the host file.
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn qemu_recovers_from_a_failure_at_every_round() {
    let _exclusive = common::exclusive();
    let placement = Placement::Qemu(common::firmware());
    fail_and_recover(&placement, true, "qemu");
}

/// A failed step with nothing injected afterwards leaves the runtime usable without a new
/// `prepare`: loading the weights settles everything, and a runtime that never failed is
/// not refused anything (the refusal is the failure's, not a state every runtime starts
/// in).
#[test]
fn a_runtime_that_never_failed_is_never_refused() {
    let p = program(true);
    let mut runtime = Runtime::prepare(p.clone(), R, &Placement::Thread, MEMORY).unwrap();
    runtime.weights_to_host().unwrap();
    runtime.optimizer_state_to_host().unwrap();
    runtime.run(&step_io(&p, R, 1)).unwrap();
    runtime.weights_to_host().unwrap();
}

/// Sets element `at` of `name` in `arrays` (f32) to `value`.
fn spoiled(arrays: &WeightsIo, name: &str, at: usize, value: f32) -> WeightsIo {
    let mut arrays = arrays.clone();
    let mut array = arrays[name].clone();
    array.bytes_mut()[at * 4..at * 4 + 4].copy_from_slice(&value.to_le_bytes());
    arrays.insert(name.to_string(), array);
    arrays
}

/// Caught: NaN weights, optimizer state or step inputs from the host were accepted and
/// trained, and the run failed later ("the accelerator differs … (device NaN, reference
/// NaN)"), far from its cause. Each is refused where it enters, naming the tensor, what it
/// was loaded as and the first bad value's index, with nothing loaded or run: the runtime
/// then gives the step it would have given.
#[test]
fn values_no_run_trains_from_are_refused_where_they_enter() {
    let p = program(true);
    let mut runtime = Runtime::prepare(p.clone(), R, &Placement::Thread, MEMORY).unwrap();
    let weights = initial_weights(&p, R, 3);
    let io = step_io(&p, R, 100);
    load(&mut runtime, &weights);
    let expected = bytes(&runtime.run(&io).unwrap());
    let refused = |e: RuntimeError, name: &str, what: &str, index: &[usize], value: f32| match e {
        RuntimeError::BadValue {
            name: n,
            what: w,
            index: i,
            value: v,
        } => {
            assert_eq!((n.as_str(), w, i.as_slice()), (name, what, index));
            assert_eq!(v.to_bits(), value.to_bits());
        }
        other => panic!("{name} ({what}) holding {value}: refused as {other:?}"),
    };
    // w2 is [2, 4]: element 5 is [1, 1].
    let shape = weights["w2"].shape().to_vec();
    assert_eq!(shape, [2, 4]);
    for value in [f32::NAN, f32::INFINITY, -3e38] {
        let e = runtime
            .weights_from_host(&spoiled(&weights, "w2", 5, value))
            .unwrap_err();
        refused(e, "w2", "weights", &[1, 1], value);
        let e = runtime
            .optimizer_state_from_host(&spoiled(&zero_velocity(&weights), "w2", 5, value))
            .unwrap_err();
        refused(e, "w2", "optimizer state", &[1, 1], value);
    }
    let stream = p.streams[0].name.to_string();
    let mut bad_io = io.clone();
    let mut inputs = bad_io[&stream].clone();
    inputs.bytes_mut()[4..8].copy_from_slice(&f32::NAN.to_le_bytes());
    // Samples of 3 features: element 1 is [0, 1].
    assert_eq!(inputs.shape()[1], 3);
    bad_io.insert(stream.clone(), inputs);
    let e = runtime.run(&bad_io).unwrap_err();
    refused(e, &stream, "step input", &[0, 1], f32::NAN);
    // Nothing was loaded or run: the step from the same weights gives the same results.
    load(&mut runtime, &weights);
    assert_eq!(bytes(&runtime.run(&io).unwrap()), expected);
}

/// Device memory per replica of the lost-device test's own (see `common`).
const LOST_MEMORY: usize = (1 << 16) + 4096 * 59;

/// Caught: after a device process was killed in a step, every later call said "load it
/// again from the host", and the reload failed with "device 0 closed its link" — nothing
/// said the runtime must be prepared again. Now the failed step says the device was lost,
/// every later call refuses with `DeviceLost` (before any advice to reload), the runtime
/// says it is lost, and a new runtime runs the step.
#[test]
fn a_device_lost_in_a_step_asks_for_a_new_runtime() {
    let p = program(true);
    let exe = Placement::Process(env!("CARGO_BIN_EXE_tessera").into());
    let mut runtime = Runtime::prepare(p.clone(), R, &exe, LOST_MEMORY).unwrap();
    let weights = initial_weights(&p, R, 3);
    let io = step_io(&p, R, 100);
    load(&mut runtime, &weights);
    let expected = bytes(&runtime.run(&io).unwrap());
    // Each device process holds its lanes' memory: one to four replicas' worth.
    let sizes: Vec<String> = (1..=R).map(|k| (k * LOST_MEMORY).to_string()).collect();
    let pattern = format!("tessera devices --memory ({}) ", sizes.join("|"));
    let devices = common::children_matching(&pattern);
    assert!(!devices.is_empty(), "the runtime's device processes");
    let victim = devices[0];
    let killed = std::process::Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    while std::fs::read_to_string(format!("/proc/{victim}/stat"))
        .is_ok_and(|stat| !stat.contains(") Z "))
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let failed = runtime.run(&io).unwrap_err();
    assert!(
        matches!(failed, RuntimeError::StepFailed { lost: Some(_), .. }),
        "the step names the lost device: {failed:?}"
    );
    let text = failed.to_string();
    assert!(
        text.contains("prepare a new runtime") && !text.contains("load every variable"),
        "{text}"
    );
    assert!(runtime.lost().is_some());
    let lost = |what: &str, result: Result<(), RuntimeError>| match result {
        Err(RuntimeError::DeviceLost { .. }) => {}
        other => panic!("{what} after a device was lost: {other:?}"),
    };
    lost("a step", runtime.run(&io).map(drop));
    lost("weights from the host", runtime.weights_from_host(&weights));
    lost(
        "optimizer state from the host",
        runtime.optimizer_state_from_host(&zero_velocity(&weights)),
    );
    lost("weights to the host", runtime.weights_to_host().map(drop));
    lost("the seed", runtime.set_random_seed(1));
    lost("the RNG state", runtime.rng_state().map(drop));
    // A new runtime runs the step the lost one ran.
    let mut fresh = Runtime::prepare(p, R, &exe, LOST_MEMORY).unwrap();
    load(&mut fresh, &weights);
    assert_eq!(bytes(&fresh.run(&io).unwrap()), expected);
}
