//! The device's program area: the prepared program and everything around its step —
//! optimizer values, seed and RNG state, prepare, step, reset-step, the step's
//! reductions, and cycle counts. [`crate::program`] places and runs the program; this
//! module decides when a request may.
//!
//! # Rules
//!
//! - Optimizer values from the host obey the program's own rule for them
//!   ([`Optimizer::check_values`]); refused values leave the old ones in place.
//! - A seed reseeds every lane's RNG with its replica's stream for it; an RNG state
//!   replaces one lane's generator's words as they are (a lane the device does not run is
//!   [`ErrorCode::NoSuchLane`]).
//! - A prepare checks the new program first (core's rules, the lanes, the frame): one
//!   refused there keeps the old program. Then the old one is freed and the new one
//!   placed; one that does not fit the memory is rolled back, and the device is left with
//!   no program ([`ErrorCode::NotPrepared`] until a prepare succeeds): the old one's room
//!   was needed to try.
//! - A step and a reset-step need a prepared program: without one they are refused as
//!   [`ErrorCode::NotPrepared`], and change nothing.
//! - A step runs leg by leg under the serve loop ([`stepping`](super::stepping)); one
//!   asked for here runs whole, so only on a replica that needs no peer.
//! - Cycle counts come only from an instrumented program. Every lane counts the work a
//!   device of its own would (its rows', and each update once), which is the same for
//!   every lane: the device keeps one count and answers it for any lane it runs.
//!
//! # Errors
//!
//! [`Malformed`](ErrorCode::Malformed) (a prepare's bytes are not exactly one program),
//! [`Program`](ErrorCode::Program) (the rule a program or optimizer value breaks),
//! [`NotPrepared`](ErrorCode::NotPrepared),
//! [`ReplicaOutOfRange`](ErrorCode::ReplicaOutOfRange),
//! [`ReductionTooLarge`](ErrorCode::ReductionTooLarge),
//! [`ReplyTooLarge`](ErrorCode::ReplyTooLarge), [`FifoShape`](ErrorCode::FifoShape),
//! [`OutOfMemory`](ErrorCode::OutOfMemory), [`TableFull`](ErrorCode::TableFull) (prepare);
//! [`FifoEmpty`](ErrorCode::FifoEmpty), [`FifoFull`](ErrorCode::FifoFull),
//! [`BadArguments`](ErrorCode::BadArguments) (a label outside the classes),
//! [`ReduceTimeout`](ErrorCode::ReduceTimeout), [`StepAbandoned`](ErrorCode::StepAbandoned),
//! [`UnexpectedReduced`](ErrorCode::UnexpectedReduced) (a combined result of the wrong
//! length) and [`Internal`](ErrorCode::Internal) (a step);
//! [`NotInstrumented`](ErrorCode::NotInstrumented);
//! [`NoSuchLane`](ErrorCode::NoSuchLane) (RNG state, cycle count);
//! [`LanesApart`](ErrorCode::LanesApart) (prepare).

use tessera_core::program::{Optimizer, Program, ProgramFault, ProgramPart, RuleKind};
use tessera_core::rng::Rng;
use tessera_core::wire::{ErrorCode, ProgramRequest, Response};

use super::Progress;
use super::{Answer, Device};
use crate::program as step;

/// Prepares the program `encoded` for `replicas`: decoded once, then moved into the
/// device, which keeps it ([`ErrorCode::Malformed`] for bytes that are not exactly one
/// program).
fn prepare(device: &mut Device<'_>, replicas: u32, encoded: &[u8]) -> Result<(), ErrorCode> {
    let program = Program::decode(encoded).map_err(|_| ErrorCode::Malformed)?;
    let prepared = step::prepare(
        &mut device.arena,
        &mut device.fifos,
        program,
        replicas,
        &device.limits,
        &mut device.prepared,
    )?;
    let o = &prepared.program.optimizer;
    device.optimizer = (o.learning_rate(), o.momentum());
    device.prepared = Some(prepared);
    Ok(())
}

/// Runs a program request.
// Out of line, as every area's handler: inlined into `Device::handle`, the five took some
// 580 bytes more of the Cortex-M4F firmware's flash (LLVM's choices inside one large function).
#[inline(never)]
pub(super) fn handle<'d>(device: &'d mut Device<'_>, request: &ProgramRequest<'_>) -> Answer<'d> {
    match *request {
        ProgramRequest::SetOptimizer {
            learning_rate,
            momentum,
        } => {
            Optimizer::check_values(learning_rate, momentum).map_err(|_| {
                ErrorCode::Program(ProgramFault {
                    part: ProgramPart::Program,
                    rule: RuleKind::Optimizer,
                })
            })?;
            device.optimizer = (learning_rate, momentum);
        }
        ProgramRequest::SetSeed { seed } => {
            device.seed = seed;
            device.reseed();
        }
        ProgramRequest::GetSeed => return Ok(Some(Response::Seed { seed: device.seed })),
        ProgramRequest::SetRngState { lane, state } => {
            *device.lane_rng(lane)? = Rng::from_state(state)
        }
        ProgramRequest::GetRngState { lane } => {
            let state = device.lane_rng(lane)?.state();
            return Ok(Some(Response::RngState { state }));
        }
        ProgramRequest::Prepare { replicas, program } => prepare(device, replicas, program)?,
        ProgramRequest::RunStep { fed, took } => {
            // No host answers exchanges here (see `Device::handle`).
            let outcome = match device.start_step(fed, took) {
                Progress::Finished(Response::Error { code, .. }) => Err(code),
                Progress::Finished(_) => Ok(()),
                Progress::Contribute { .. } => Err(ErrorCode::ReduceTimeout),
            };
            if outcome.is_err() {
                device.end_step(ErrorCode::ReduceTimeout);
            }
            outcome?;
        }
        ProgramRequest::ResetStep => {
            let prepared = device.prepared.as_ref().ok_or(ErrorCode::NotPrepared)?;
            step::reset(&mut device.arena, &mut device.fifos, prepared)?;
        }
        ProgramRequest::CycleCount { lane } => {
            device.lane_rng(lane)?;
            let instrumented = device.prepared.as_ref().map(|p| p.program.instrumented);
            if instrumented != Some(true) {
                return Err(ErrorCode::NotInstrumented);
            }
            let cycles = device.cycles.get();
            return Ok(Some(Response::Cycles { cycles }));
        }
    }
    Ok(None)
}
