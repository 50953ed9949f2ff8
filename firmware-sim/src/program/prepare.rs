//! Preparing a program: the checks it passes before anything is placed, then the program
//! placed before replaced by it.
//!
//! # Rules
//!
//! - The program is checked with core's own rules first (a broken one is refused with
//!   [`ErrorCode::Program`], naming the rule and the tensor); the device's lanes must be
//!   replicas of the run ([`ErrorCode::ReplicaOutOfRange`]) that share every variable's
//!   group ([`ErrorCode::LanesApart`]); every exchange of reductions the step will make
//!   must fit one frame, every lane's side by side ([`ErrorCode::ReductionTooLarge`]);
//!   and every anchored output of a step must leave in one reply
//!   ([`ErrorCode::ReplyTooLarge`]).
//! - A program these checks refuse leaves the program placed before in place, and
//!   nothing of itself.
//! - Once they pass, the program placed before is freed and the new one placed
//!   ([`place`](super::place)'s rules); one that does not fit is rolled back, and the
//!   device is left with no program (the old one's room was needed to try).

use tessera_core::program::lanes::lane_bytes;
use tessera_core::program::{AnchorTensor, LaneError, Program, MAX_VARIABLES};
use tessera_core::wire::{ErrorCode, Invariant, Limits};

use super::holdings::{holdings, lane_shards};
use super::place::{place_fresh, release};
use super::scratch::{Cut, Scratch};
use super::{one_to_max, Exchanges, Prepared, Rounds};
use crate::arena::{saturate, Arena};
use crate::broken;
use crate::fifo::Fifos;

/// Places `program` for the lanes `limits` names (replicas `limits.replica ..`, one per
/// lane) of `replicas` (see the module documentation). `previous`, the program placed
/// before, stays placed when the checks refuse the new one, and is freed (and taken) once
/// they pass.
// Out of line: inlined into the program area's handler, it took some 160 bytes more of the
// Cortex-M3 firmware's flash (and 32 fewer of the Cortex-M4F's).
#[inline(never)]
pub fn prepare(
    arena: &mut Arena<'_>,
    fifos: &mut Fifos,
    program: Program,
    replicas: u32,
    limits: &Limits,
    previous: &mut Option<Prepared>,
) -> Result<Prepared, ErrorCode> {
    let (replicas, replica) = (replicas as usize, limits.replica as usize);
    // The hello took at most MAX_LANES, and at least one.
    let lanes = one_to_max(usize::from(limits.lanes));
    check_replicas(&program, replicas, replica, lanes)?;
    let max = limits.max_chunk();
    let (rounds, exchanges) = cut_exchanges(&program, replicas, lanes, max)?;
    let cut = Cut {
        rounds: &rounds,
        exchanges: &exchanges,
        lanes,
    };
    let scratch = Scratch::new(&program, replicas, cut).ok_or(broken(Invariant::Placement))?;
    let held = holdings(&program, replicas, replica)?;
    let shards = lane_shards(&program, replicas, replica, lanes)?;
    check_output(&program, &scratch, max)?;
    if let Some(old) = previous.take() {
        release(arena, fifos, &old.program, old.lanes());
    }
    let (scratch, placed) = place_fresh(arena, fifos, &program, replicas, cut, scratch)?;
    Ok(Prepared {
        program,
        replicas,
        replica,
        lanes,
        scratch,
        rounds,
        exchanges,
        held,
        shards,
        placed,
    })
}

/// Core's rules for `program` on `replicas`, then the device's `lanes` lanes from
/// `replica` on: replicas of the run, sharing every variable's group.
fn check_replicas(
    program: &Program,
    replicas: usize,
    replica: usize,
    lanes: usize,
) -> Result<(), ErrorCode> {
    program
        .check(replicas)
        .map_err(|e| ErrorCode::Program(e.fault(program)))?;
    if replica.saturating_add(lanes) > replicas {
        return Err(ErrorCode::ReplicaOutOfRange {
            replica: saturate(replica.saturating_add(lanes) - 1),
            replicas: saturate(replicas),
        });
    }
    if lanes > 1 {
        if let Err(e) = program.check_lanes(replicas, replica, lanes) {
            let LaneError::Apart {
                variable, replica, ..
            } = e
            else {
                return Err(broken(Invariant::Placement));
            };
            return Err(ErrorCode::LanesApart {
                variable: variable as u8, // At most MAX_VARIABLES.
                replica: saturate(replica),
            });
        }
    }
    Ok(())
}

/// A batch's rounds, and the exchanges they travel in: every exchange of reductions in one
/// frame's `max` bytes, every lane's side by side.
fn cut_exchanges(
    program: &Program,
    replicas: usize,
    lanes: usize,
    max: usize,
) -> Result<(Rounds, Exchanges), ErrorCode> {
    let cut = program.exchanges(replicas, lane_bytes(max, lanes));
    let rounds = Rounds::from_slice(cut.rounds()).map_err(|_| broken(Invariant::Placement))?;
    let exchanges: Exchanges = cut.take(2 * MAX_VARIABLES).collect();
    if let Some(e) = exchanges
        .iter()
        .find(|e| e.bytes.saturating_mul(lanes) > max)
    {
        return Err(ErrorCode::ReductionTooLarge {
            bytes: saturate(e.bytes.saturating_mul(lanes)),
            max: saturate(max),
        });
    }
    Ok((rounds, exchanges))
}

/// Every anchored value leaves in one reply of `max` bytes.
fn check_output(program: &Program, scratch: &Scratch, max: usize) -> Result<(), ErrorCode> {
    let output = saturate(scratch.output_elements().saturating_mul(4));
    if program
        .anchors
        .iter()
        .any(|a| a.tensor == AnchorTensor::Output)
        && output > saturate(max)
    {
        return Err(ErrorCode::ReplyTooLarge);
    }
    Ok(())
}
