//! How often a step's bytes are copied on the host, counted by the runtime's traffic
//! (`Runtime::traffic`), on device threads, whose memory the host maps.
//!
//! Before the one data path, every input byte was copied about seven times on threads: into
//! a converted array, into a per-replica share, into a frame (and a second one kept for
//! retransmission), out of the queue into the device's FIFO… An input already of its
//! stream's type now goes straight from the user's array into the device's FIFO: one copy
//! on the host, the device's read of it for its compute the second. Anchors come back the
//! same way, read once in place.

use crate::common;

use common::{initial_weights, step_io, Model, Placed};
use tessera_core::grouping::CommGroup;
use tessera_core::program::{elements, AnchorTensor, Program};
use tessera_core::stream::AnchorReturnType;
use tessera_host::runtime::{Placement, Runtime, StepIo};

const R: usize = 4;
const MEMORY: usize = 1 << 16;

/// A 3 → 4 → 2 perceptron with a mean-squared error (every stream `f32`: no conversion),
/// two batches of two micro-batches per step, the loss of every micro-batch anchored and
/// the output summed over the step.
fn program() -> Program {
    let mut model = Model {
        first: Placed::comm(CommGroup::All),
        second: Placed::comm(CommGroup::All),
        batches_per_step: 2,
        accumulation: 2,
        ..Model::mlp(3, 4, 2)
    };
    model.anchors = vec![
        (AnchorTensor::Loss, AnchorReturnType::All),
        (AnchorTensor::Output, AnchorReturnType::Sum),
    ];
    model.program()
}

/// [`program`] on threads, its weights loaded and one step run on the step IO returned
/// (the first step also locates each FIFO once: the tests count the later ones).
fn after_one_step() -> (Program, Runtime, StepIo) {
    let p = program();
    let mut runtime = Runtime::prepare(p.clone(), R, &Placement::Thread, MEMORY).unwrap();
    runtime
        .weights_from_host(&initial_weights(&p, R, 1))
        .unwrap();
    let io = step_io(&p, R, 3);
    runtime.run(&io).unwrap();
    (p, runtime, io)
}

#[test]
fn a_step_input_byte_is_copied_once_on_the_host_on_threads() {
    let (p, mut runtime, io) = after_one_step();
    let before = runtime.traffic();
    runtime.run(&io).unwrap();
    let after = runtime.traffic();

    let micro_batches = (p.batches_per_step * p.accumulation) as usize;
    let inputs: usize = p
        .streams
        .iter()
        .map(|s| micro_batches * R * elements(&s.sample).unwrap() * s.dtype.size())
        .sum();
    let width = p.output_width().unwrap();
    // The loss of every micro-batch, and one summed output, per replica.
    let anchors = R * (micro_batches + width) * 4;
    let moved =
        |f: fn(&tessera_host::transport::Traffic) -> u64| f(&after.channels) - f(&before.channels);
    assert_eq!(after.converted - before.converted, 0, "no input converted");
    assert_eq!(moved(|t| t.staged), 0, "no byte staged in a host buffer");
    assert_eq!(moved(|t| t.framed), 0, "no byte framed");
    assert_eq!(moved(|t| t.bulk), 0, "no byte beside a message");
    assert_eq!(
        moved(|t| t.in_place),
        (inputs + anchors) as u64,
        "every input and anchored byte moved exactly once, in place"
    );
}

/// Catches a step whose in-place moves are reported by requests of their own — a `Wrote`
/// per stream or a `Took` per anchor, each with its reply, per replica — instead of by its
/// `RunStep`: from the second step on (the first locates each FIFO, and has no anchors
/// before it to report), a step on threads sends each device one request (a device runs
/// one replica, or several as its lanes).
#[test]
fn a_step_in_place_is_one_request_per_device() {
    let (_, mut runtime, io) = after_one_step();
    let devices = runtime.devices().len() as u64;
    for step in 2..=3 {
        let before = runtime.traffic().channels.requests;
        runtime.run(&io).unwrap();
        let sent = runtime.traffic().channels.requests - before;
        assert_eq!(sent, devices, "step {step}: requests sent");
    }
}
