//! What a message from the host does, given the step waiting between two legs, if one
//! is.
//!
//! # Rules
//!
//! - A frame that does not decode is answered `Malformed` (the waiting step waits on).
//! - A combination moves the waiting step on only if it names that step and the exchange
//!   it waits on; any other — late, repeated, or outside any step — is a topic message:
//!   counted in [`Server::stale_answers`](super::Server::stale_answers), no reply, the
//!   cache left alone.
//! - While a step waits, a retry of its `RunStep` sends its contribution again, and a
//!   request numbered before it (not a hello) is dropped: the step waits on. A later one,
//!   or a hello, means the host gave up on the step: it ends (`StepAbandoned`), and the
//!   request goes on.
//! - A request then runs in the host's numbering (the [`ReplyCache`]'s verdict): a retry
//!   of a kept one gets its kept reply, one after a gap is dropped (it comes again). A bulk
//!   request runs in the server (`bulk`), a `RunStep` starts a step, a hello restarts the
//!   numbering.

use core::ops::ControlFlow;

use tessera_core::wire::{Combined, Envelope, ErrorCode, ProgramRequest, Request, ToDevice};

use super::bulk::answered_bulk;
use super::reply::{finish, run_request, send_malformed};
use super::step::{step_progress, Leg, Waiting};
use super::{ServeError, State};
use crate::device::Device;
use crate::link::Messages;
use crate::reply_cache::{ReplyCache, Verdict};

/// Handles the message held in `state.request[..len]` while `waiting` (a step between two
/// legs, if one is): a combination for the step, a request to run (or answer again, or
/// drop); returns the step still waiting, if one is.
pub(super) fn answer<M, const FRAME: usize, const WINDOW: usize>(
    state: &mut State<'_, '_, FRAME, WINDOW>,
    len: usize,
    device: &mut Device<'_>,
    link: &mut M,
    waiting: Option<Waiting>,
) -> Result<Option<Waiting>, ServeError<M::Error>>
where
    M: Messages,
{
    let State {
        request,
        contribution,
        cache,
        stale_answers,
        dropped,
        ..
    } = state;
    // `len` is what the link wrote into `request`; were it longer, the message is malformed
    // (no slicing panic path).
    let envelope = match decode_message(request.get(..len).unwrap_or_default()) {
        Ok(ToDevice::Request(envelope)) => envelope,
        Ok(ToDevice::Combined(combined)) => {
            let kept = (&mut **cache, &mut **contribution);
            return combination(kept, combined, stale_answers, device, link, waiting);
        }
        Err(_) => return send_malformed(link).map(|()| waiting),
    };
    let seq = envelope.seq;
    let hello = matches!(envelope.body, Request::Hello { .. });
    if let Some(w) = waiting {
        let kept = (&mut **cache, &mut **contribution);
        if let ControlFlow::Break(w) = during_step(w, (seq, hello), kept, dropped, device, link)? {
            return Ok(Some(w));
        }
    }
    if answered_bulk(cache, &envelope, device, link)? {
        return Ok(None);
    }
    in_order(
        (cache, contribution),
        (envelope, hello),
        dropped,
        device,
        link,
    )
}

/// A combination, for the step waiting as `waiting`: its next leg runs if the combination
/// names that step and the exchange the step waits on; any other is counted stale and
/// left (the step, if any, still waits).
fn combination<M: Messages, const FRAME: usize, const WINDOW: usize>(
    kept: (&mut ReplyCache<'_, FRAME, WINDOW>, &mut [u8; FRAME]),
    Combined { step, round, data }: Combined<'_>,
    stale_answers: &mut u32,
    device: &mut Device<'_>,
    link: &mut M,
    waiting: Option<Waiting>,
) -> Result<Option<Waiting>, ServeError<M::Error>> {
    match waiting {
        Some(w) if step == w.seq && device.awaited_round() == Some(round) => {
            step_progress(kept, w.seq, device, Leg::Answer(data), link)
        }
        // Late, repeated, or outside any step: a topic message, so it gets no reply and
        // leaves the cache alone.
        _ => {
            *stale_answers = stale_answers.saturating_add(1);
            Ok(waiting)
        }
    }
}

/// Request `seq` (`hello`: it is a hello) while step `w` waits: done with, the step still
/// waiting (`Break`), or the step ended and the request to go on (`Continue`).
fn during_step<M: Messages, const FRAME: usize, const WINDOW: usize>(
    w: Waiting,
    (seq, hello): (u32, bool),
    (cache, contribution): (&mut ReplyCache<'_, FRAME, WINDOW>, &mut [u8; FRAME]),
    dropped: &mut u32,
    device: &mut Device<'_>,
    link: &mut M,
) -> Result<ControlFlow<Waiting>, ServeError<M::Error>> {
    if seq == w.seq {
        // The host retried the step: it missed the contribution.
        return w.resend(contribution, link).map(ControlFlow::Break);
    }
    if !hello && !is_later(seq, w.seq) {
        *dropped = dropped.saturating_add(1);
        return Ok(ControlFlow::Break(w));
    }
    // The host gave up on the step (another device failed it).
    let reply = device.end_step(ErrorCode::StepAbandoned);
    finish(cache, w.seq, reply, link)?;
    Ok(ControlFlow::Continue(()))
}

/// Request `envelope` (`hello`: it is a hello) in the host's numbering: dropped after a
/// gap, its kept reply sent again for a retry, else run and its reply kept and sent — or,
/// for a `RunStep`, its step started. Returns the step left waiting, if one is.
fn in_order<M: Messages, const FRAME: usize, const WINDOW: usize>(
    (cache, contribution): (&mut ReplyCache<'_, FRAME, WINDOW>, &mut [u8; FRAME]),
    (envelope, hello): (Envelope<Request<'_>>, bool),
    dropped: &mut u32,
    device: &mut Device<'_>,
    link: &mut M,
) -> Result<Option<Waiting>, ServeError<M::Error>> {
    let seq = envelope.seq;
    match cache.verdict(seq, hello) {
        Verdict::Drop => {
            *dropped = dropped.saturating_add(1);
            return Ok(None);
        }
        Verdict::Repeat => {}
        Verdict::Run => {
            if let Request::Program(ProgramRequest::RunStep { fed, took }) = envelope.body {
                let start = Leg::Start { fed, took };
                return step_progress((cache, contribution), seq, device, start, link);
            }
            if hello {
                cache.restart();
            }
            run_request(cache, envelope, device)?;
        }
    }
    let reply = cache.cached(seq).unwrap_or(&[]);
    link.send(reply).map_err(ServeError::Link).map(|()| None)
}

/// A message from the host, decoded out of line: inlined into the serve loop, the decoder
/// took some 800 bytes more of the Cortex-M3 firmware's flash (LLVM's size choices inside
/// one large function), which that build has no room for.
#[inline(never)]
fn decode_message(bytes: &[u8]) -> Result<ToDevice<'_>, tessera_core::wire::FrameError> {
    ToDevice::decode(bytes)
}

/// True when `seq` comes after `step` in the host's numbering (within half the number
/// space: the host never runs that far ahead).
fn is_later(seq: u32, step: u32) -> bool {
    (1..=u32::MAX / 2).contains(&seq.wrapping_sub(step))
}
