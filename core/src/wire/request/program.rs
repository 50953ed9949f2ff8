//! The program area's requests: the prepared program and everything around its step —
//! optimizer values, seed and RNG state, prepare, step, reset-step, cycle counts. A step's
//! reductions are not requests: they travel as topic messages
//! ([`direction`](crate::wire::direction)) while its [`RunStep`](ProgramRequest::RunStep)
//! is unanswered.

use serde::{Deserialize, Serialize};

use super::RequestKind;

/// Host to device: the program and its step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ProgramRequest<'a> {
    /// Optimizer values from host, between steps.
    SetOptimizer {
        /// Learning rate.
        learning_rate: f32,
        /// Momentum (ignored by a program trained with plain SGD).
        momentum: f32,
    },
    /// Random seed from host; also reseeds the RNG with this replica's stream for it.
    SetSeed {
        /// The seed.
        seed: u64,
    },
    /// Random seed to host.
    GetSeed,
    /// RNG state from host, for one lane's replica.
    SetRngState {
        /// The lane.
        lane: u16,
        /// The generator's words.
        state: [u32; 4],
    },
    /// RNG state to host, of one lane's replica.
    GetRngState {
        /// The lane.
        lane: u16,
    },
    /// Places a program for a run on `replicas` replicas: its variables, their optimizer
    /// state and remote-buffer slots, a FIFO per stream and per anchor deep enough for one
    /// step (ids as [`program::ids`](crate::program::ids) assigns them), and the model's
    /// scratch memory. The device checks the program with core's own rules, and its arena,
    /// and places nothing when either refuses.
    ///
    /// The program travels encoded, as bytes inside the request, and the device decodes it
    /// when it prepares (bytes that are not exactly one
    /// [`Program`](crate::program::Program) are
    /// [`ErrorCode::Malformed`](crate::wire::ErrorCode::Malformed)): carried inline, a
    /// program's fixed capacities made every decoded request some two kilobytes, copied at
    /// every message a device reads, though only this one carries a program.
    Prepare {
        /// Replicas of the run (the program's groupings resolve on them).
        replicas: u32,
        /// The program, as [`Program::encode`](crate::program::Program::encode) writes it.
        #[serde(serialize_with = "crate::wire::bytes::serialize")]
        program: &'a [u8],
    },
    /// Runs one training step of the prepared program (`batches_per_step` batches).
    RunStep {
        /// The host wrote every stream FIFO's step in place, whole, into FIFOs the last step
        /// left empty (one step's items each, from the ring's start): the device counts each
        /// FIFO full, by the rules a [`Wrote`](super::DataRequest::Wrote) of its whole ring
        /// is checked by, before the step's first leg, and refuses the step if one does not
        /// hold. This spares a host that moves the step's inputs in place one `Wrote` and
        /// its reply per stream per replica. `false`: the FIFOs were filled by requests of
        /// their own.
        fed: bool,
        /// The host read every anchor FIFO's bytes in place, whole, as the last step left
        /// them (a step that ends [`Response::Done`](crate::wire::Response::Done) leaves
        /// each anchor FIFO holding exactly its ring, from the ring's start): the device
        /// drops each FIFO's items, by the rules a [`Took`](super::DataRequest::Took) of its
        /// whole ring is checked by, before it counts the inputs (`fed`) and runs the step's
        /// first leg, and refuses the step if one does not hold. This spares a host that
        /// reads the anchors in place one `Took` and its reply per anchor per replica per
        /// step. `false`: nothing was read in place unreported (the anchors left by
        /// requests of their own, or nothing to drop).
        took: bool,
    },
    /// Cycle count to host, of one lane's replica: the work it would have counted on a
    /// device of its own.
    CycleCount {
        /// The lane.
        lane: u16,
    },
    /// Puts the prepared program's step state back to where a step starts: every stream and
    /// anchor FIFO emptied (complete and partial items alike) and the step's scratch zeroed
    /// (the running sums of `Sum` anchors live there). Variables, their optimizer state,
    /// slots and the RNG are left as they are. The host sends it to every replica after a
    /// failed step, so that nothing the failure left behind is read by the next one.
    ResetStep,
}

impl ProgramRequest<'_> {
    /// The kind of this request, for error replies.
    pub fn kind(&self) -> RequestKind {
        match self {
            Self::SetOptimizer { .. } => RequestKind::SetOptimizer,
            Self::SetSeed { .. } => RequestKind::SetSeed,
            Self::GetSeed => RequestKind::GetSeed,
            Self::SetRngState { .. } => RequestKind::SetRngState,
            Self::GetRngState { .. } => RequestKind::GetRngState,
            Self::Prepare { .. } => RequestKind::Prepare,
            Self::RunStep { .. } => RequestKind::RunStep,
            Self::CycleCount { .. } => RequestKind::CycleCount,
            Self::ResetStep => RequestKind::ResetStep,
        }
    }
}
