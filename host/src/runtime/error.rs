//! Why the device runtime refused or failed: one variant per kind, each naming the tensor
//! and the sizes involved.

use std::convert::Infallible;
use std::fmt;

use tessera_core::dtype::DataType;
use tessera_core::program::ProgramError;
use tessera_core::stream::{SetupError, SplitterError};
use tessera_core::transfer::LayoutError;
use tessera_core::wire::{Limits, ReduceOp};

use super::recovery::StepPhase;
use crate::instance::InstanceError;
use crate::transport::TransportError;

/// A runtime failure.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Talking to a device failed (unreachable at prepare, silent, or it answered with an
    /// error); the transport error names the replica.
    #[error("{0}")]
    Transport(#[from] TransportError),
    /// The program breaks one of core's rules.
    #[error("the program is invalid: {0}")]
    Program(#[from] ProgramError),
    /// More replicas than one runtime drives, or none.
    #[error("a runtime drives 1 to {max} replicas, not {replicas}")]
    Replicas {
        /// Replicas asked for.
        replicas: usize,
        /// The most one runtime drives.
        max: usize,
    },
    /// Replicas that do not split evenly over the instances.
    #[error("{replicas} replicas do not split evenly over {instances} instances")]
    Window {
        /// Replicas of the run.
        replicas: usize,
        /// Instances of the job.
        instances: usize,
    },
    /// Devices whose replicas (their lanes, in channel order) are not the run's replicas
    /// in order.
    #[error(
        "channels to devices of {run} replicas for {replicas}: the devices must run the \
         replicas in order, each starting where the one before ends"
    )]
    Channels {
        /// Replicas the channels' devices run.
        run: usize,
        /// Replicas of the run.
        replicas: usize,
    },
    /// A name that is no variable (weights) or no stream (step IO) of the program.
    #[error("`{name}` is no {expected} of the program")]
    UnknownTensor {
        /// The name.
        name: String,
        /// What it should have named: "variable" or "stream".
        expected: &'static str,
    },
    /// A stream the step IO does not provide.
    #[error("no data was provided for stream `{name}`")]
    MissingStream {
        /// The stream.
        name: String,
    },
    /// A step-IO array of the wrong element count.
    #[error(
        "stream `{name}` needs {expected} elements (sample {sample} × samples per replica per \
         step {per_replica} × replicas {replicas}), not {received}"
    )]
    Elements {
        /// The stream.
        name: String,
        /// Elements expected: `sample × per_replica × replicas`.
        expected: usize,
        /// Elements given.
        received: usize,
        /// Elements of one sample.
        sample: usize,
        /// Samples per replica per step (`bps·af`).
        per_replica: usize,
        /// Replicas fed (1 for a broadcast stream).
        replicas: usize,
    },
    /// A host array of the wrong shape.
    #[error("`{name}` must have shape {expected:?}, not {actual:?} ({rule})")]
    Shape {
        /// The tensor.
        name: String,
        /// The shape the rule asks for.
        expected: Vec<usize>,
        /// The shape given.
        actual: Vec<usize>,
        /// The rule.
        rule: &'static str,
    },
    /// A host array whose type does not convert to the tensor's.
    #[error("`{name}` holds {expected}: an array of {actual} does not convert to it")]
    Type {
        /// The tensor.
        name: String,
        /// The tensor's type.
        expected: DataType,
        /// The array's.
        actual: DataType,
    },
    /// An input value the conversion to the stream's type cannot hold (`int64 → int32`).
    #[error("`{name}`: element {index} ({value}) does not fit the stream's type")]
    OutOfRange {
        /// The stream.
        name: String,
        /// Element index.
        index: usize,
        /// The value.
        value: i64,
    },
    /// A label outside the classes of the cross-entropy that reads it.
    #[error("`{name}`: label {index} is {value}, outside the {classes} classes [0, {classes})")]
    Label {
        /// The labels stream.
        name: String,
        /// Element index.
        index: usize,
        /// The label.
        value: i64,
        /// Number of classes.
        classes: usize,
    },
    /// A buffer of the wrong size (a weight transfer's, an input array's, an anchor's).
    #[error("`{name}`: the {what} has {actual} bytes where {expected} are needed")]
    Bytes {
        /// The variable.
        name: String,
        /// Bytes the layout needs.
        expected: usize,
        /// Bytes there are.
        actual: usize,
        /// Which buffer.
        what: &'static str,
    },
    /// A variable's transfer layout does not build.
    #[error("variable `{name}`: {error}")]
    Layout {
        /// The variable.
        name: String,
        /// Why.
        #[source]
        error: LayoutError,
    },
    /// The step-IO splitter could not be set up (more streams or replicas than it holds).
    #[error("step IO: {0}")]
    SplitterSetup(#[from] SetupError),
    /// The step-IO splitter refused a call: the runtime asked out of order (a bug here).
    #[error("step IO: {0}")]
    Splitter(#[from] SplitterError<Infallible>),
    /// A device whose limits differ from those a saved executable was prepared for.
    #[error(
        "device {replica} has {} bytes of memory, {}-byte frames and a window of {}; the \
         executable was prepared for {}, {} and {}",
        .actual.memory,
        .actual.max_frame,
        .actual.window,
        .saved.memory,
        .saved.max_frame,
        .saved.window
    )]
    Limits {
        /// The device.
        replica: u32,
        /// The executable's.
        saved: Limits,
        /// The device's.
        actual: Limits,
    },
    /// Optimizer state for a program whose optimizer keeps none (plain SGD).
    #[error("the program's optimizer keeps no state (plain SGD has no velocity)")]
    NoOptimizerState,
    /// An RNG state of the wrong length.
    #[error("the RNG state must have exactly {expected} words, not {actual}")]
    RngState {
        /// Words expected: words per replica × replicas.
        expected: usize,
        /// Words given.
        actual: usize,
    },
    /// A training step failed; the runtime then reset every device's step state (the rule
    /// is stated in [`recovery`](super::recovery)).
    #[error(fmt = describe_step_failed)]
    StepFailed {
        /// What the step was doing.
        phase: StepPhase,
        /// Why it failed.
        #[source]
        cause: Box<RuntimeError>,
        /// True when the replicas may have applied different parts of the step: until
        /// every variable (and its optimizer state) is loaded again, the runtime refuses
        /// steps and weights to host ([`RuntimeError::Diverged`]).
        diverged: bool,
        /// Why the devices could not be reset, if they could not (the next step tries
        /// again before anything else).
        reset: Option<TransportError>,
        /// The device (its first replica) lost for good, if one was: the runtime cannot
        /// run again ([`RuntimeError::DeviceLost`]).
        lost: Option<u32>,
    },
    /// A device of this runtime was lost (its link gone for good: its process ended, its
    /// link closed): nothing more runs on this runtime.
    #[error("device {replica} was lost ({cause}): this runtime cannot run again; {PREPARE_AGAIN}")]
    DeviceLost {
        /// The device's first replica.
        replica: u32,
        /// How it was lost.
        cause: String,
    },
    /// A collective between instances failed.
    #[error("between instances: {0}")]
    Instance(#[from] InstanceError),
    /// The contributions of one reduction round ask for different operations.
    #[error(
        "device {replica} asked for another operation in reduction round {round} than the \
         round's first contribution"
    )]
    ReductionOps {
        /// The replica whose operation differs from the round's first contribution.
        replica: u32,
        /// The round.
        round: u32,
    },
    /// A contribution asking for an operation a step's reduction round does not do (a
    /// round sums or takes the mean).
    #[error(
        "device {replica} asked for {op:?} in reduction round {round}; a round sums or takes \
         the mean"
    )]
    ReductionOp {
        /// The replica that sent it.
        replica: u32,
        /// The round.
        round: u32,
        /// The operation asked for.
        op: ReduceOp,
    },
    /// A contribution that is not a whole number of `f32` elements.
    #[error(
        "device {replica} contributed {bytes} bytes to reduction round {round}: not a whole \
         number of f32 elements"
    )]
    ReductionElements {
        /// The replica that sent it.
        replica: u32,
        /// The round.
        round: u32,
        /// Its bytes.
        bytes: usize,
    },
    /// The contributions of one reduction round disagree in length.
    #[error(
        "device {replica} contributed {actual} bytes to reduction round {round}, the round's \
         first contribution {expected}: contributions must match"
    )]
    ReductionLength {
        /// The replica whose contribution disagrees with the round's first.
        replica: u32,
        /// The round.
        round: u32,
        /// Bytes the first contribution carried.
        expected: usize,
        /// Bytes this one carried.
        actual: usize,
    },
    /// A device contributed to a reduction round out of turn (see the step driver's rule:
    /// one round after another, each once the one before is answered, none past the
    /// step's last).
    #[error(
        "device {replica} contributed to reduction round {round} while the host expects at \
         most round {expected}: a device contributes to each round in order, once the round \
         before is answered"
    )]
    ReductionRound {
        /// The device's replica.
        replica: u32,
        /// The round it named.
        round: u32,
        /// The only new round it may contribute to: the cap on `round`.
        expected: u32,
    },
    /// A device that ended its step before it contributed to every reduction round of it.
    #[error(
        "device {replica} ended its step without contributing to reduction round {round} (the \
         step has {rounds}): its peers would wait for it forever"
    )]
    ReductionSkipped {
        /// The device's replica.
        replica: u32,
        /// The first round it did not contribute to.
        round: u32,
        /// The step's rounds.
        rounds: u32,
    },
    /// A contribution from a device the round does not count among its members.
    #[error(
        "a contribution from replica {replica}, which takes no part in reduction round {round}"
    )]
    NotInRound {
        /// The device's replica.
        replica: u32,
        /// The round.
        round: u32,
    },
    /// A device whose replica is in no group of its round's grouping.
    #[error("device {replica} is in no group of reduction round {round}'s grouping")]
    ReductionGroup {
        /// The device's replica.
        replica: u32,
        /// The round.
        round: u32,
    },
    /// Devices of different lane counts: they would cut a batch's rounds into different
    /// exchanges (each for its own share of a frame).
    #[error(
        "the device of replica {replica} runs {other} lanes, the first device {lanes}: a \
         runtime's devices run as many lanes each"
    )]
    MixedLanes {
        /// The first device's lanes.
        lanes: usize,
        /// The first replica of a device with other lanes.
        replica: u32,
        /// Its lanes.
        other: usize,
    },
    /// A device whose lanes lie in different groups of a round's grouping: one answer
    /// cannot serve them all (core's lane rule, checked before any device starts, keeps
    /// this from happening).
    #[error(
        "replicas {first} and {replica} run on one device but lie in different groups of \
         reduction round {round}: a device's lanes share every variable's group"
    )]
    LanesApart {
        /// The device's first replica.
        first: u32,
        /// Its replica in another group.
        replica: u32,
        /// The round.
        round: u32,
    },
    /// A value the host handed the program that training cannot take: NaN, an infinity or
    /// a magnitude of 2^64 or more (core's `finite` rule); nothing of the call moved.
    #[error(
        "`{name}` ({what}) holds {value} at {index:?}: every value training takes is finite and \
         of magnitude below 2^64 (1.8e19); nothing was loaded"
    )]
    BadValue {
        /// The tensor (variable or stream).
        name: String,
        /// What it was loaded as: "weights", "optimizer state", "step input".
        what: &'static str,
        /// The first such value's index in the array's shape.
        index: Vec<usize>,
        /// The value.
        value: f32,
    },
    /// The host could not allocate a buffer of `bytes` for `name`.
    #[error("`{name}`: the host cannot allocate {bytes} bytes for it")]
    HostMemory {
        /// The variable or tensor.
        name: String,
        /// Bytes asked for.
        bytes: usize,
    },
    /// A step or a read of weights refused because a failed step may have left the
    /// replicas of one group holding different values of `name`.
    #[error(
        "the {what} of `{name}` may differ between its replicas since a step failed: load it \
         again from the host (or resume a checkpoint) before running a step or reading weights"
    )]
    Diverged {
        /// The variable.
        name: String,
        /// What is still to be loaded: "weights" or "optimizer state".
        what: &'static str,
    },
}

/// What to do once a device is lost.
const PREPARE_AGAIN: &str = "prepare a new runtime (`Runtime::prepare`, or \
    `Runtime::load_executable`), then load its weights or resume a checkpoint";

/// [`RuntimeError::StepFailed`]'s message: the phase and the cause, then what became of
/// the devices (lost, reset or not) and whether the replicas may have diverged.
fn describe_step_failed(
    phase: &StepPhase,
    cause: &RuntimeError,
    diverged: &bool,
    reset: &Option<TransportError>,
    lost: &Option<u32>,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    write!(f, "the step failed while {phase}: {cause}")?;
    if let Some(replica) = lost {
        return write!(
            f,
            "; device {replica} was lost: this runtime cannot run again; {PREPARE_AGAIN}"
        );
    }
    match reset {
        None => f.write_str("; every device's step state was reset")?,
        Some(e) => write!(
            f,
            "; the devices' step state could not be reset ({e}): the next step tries again \
             first"
        )?,
    }
    if *diverged {
        f.write_str(
            "; the replicas may hold different weights now: load every variable (and the \
             optimizer state) again, or resume a checkpoint, before the next step",
        )?;
    }
    Ok(())
}
