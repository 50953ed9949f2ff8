//! A step between two legs, as the serve loop keeps it: the contribution its last leg
//! ended with, sent to the host and sent again until the host's combination comes.
//!
//! # Rules
//!
//! - A leg ends at an exchange — its contribution, naming the step's sequence number and
//!   the exchange's round, is sent and kept (not a reply: the step's reply comes when it
//!   ends) — or at the step's end, whose reply is kept and sent as its `RunStep`'s.
//! - The contribution is sent again when the host stays silent for
//!   [`REDUCE_DEADLINE_MS`] of real time, timed from the first look that finds the link
//!   silent after a send; after [`REDUCE_ATTEMPTS`] sends the step fails
//!   ([`ErrorCode::ReduceTimeout`]).
//! - A contribution that does not fit a frame ends the step
//!   ([`ErrorCode::ReplyTooLarge`]: prepare checked that none would).

use tessera_core::wire::{Contribution, ErrorCode, FromDevice};

use super::reply::finish;
use super::{ServeError, Server};
use crate::clock::{elapsed_ms, Clock};
use crate::device::{Device, Progress};
use crate::link::Messages;
use crate::phase::phase;
use crate::reply_cache::ReplyCache;

/// How long the device waits for the host's [`Combined`](tessera_core::wire::Combined)
/// result, in real time, before it sends its contribution again.
pub const REDUCE_DEADLINE_MS: u64 = 2_000;
/// Times the device sends a contribution before the step fails with
/// [`ErrorCode::ReduceTimeout`].
pub const REDUCE_ATTEMPTS: u32 = 5;

/// A step between two legs: its `RunStep`'s sequence number, its contribution to the
/// awaited exchange (the first `len` bytes of the server's contribution buffer), how often
/// it was sent, and the time of the first look that found the link silent after the last
/// send (`None` until one does).
#[derive(Debug, Clone, Copy)]
pub(super) struct Waiting {
    pub(super) seq: u32,
    len: usize,
    silent_since_ms: Option<u64>,
    sends: u32,
}

impl Waiting {
    /// The contribution sent again.
    pub(super) fn resend<M: Messages, const FRAME: usize>(
        mut self,
        contribution: &[u8; FRAME],
        link: &mut M,
    ) -> Result<Self, ServeError<M::Error>> {
        link.send(contribution.get(..self.len).unwrap_or_default())
            .map_err(ServeError::Link)?;
        self.silent_since_ms = None;
        self.sends = self.sends.saturating_add(1);
        Ok(self)
    }

    /// The host has been silent for a poll: the silence is timed from this first look,
    /// and past the deadline the contribution is sent again, or after the last attempt the
    /// step fails.
    pub(super) fn on_silence<M: Messages, C: Clock, const FRAME: usize, const WINDOW: usize>(
        mut self,
        (cache, contribution): (&mut ReplyCache<'_, FRAME, WINDOW>, &[u8; FRAME]),
        device: &mut Device<'_>,
        link: &mut M,
        clock: &mut C,
    ) -> Result<Option<Self>, ServeError<M::Error>> {
        let Some(since) = self.silent_since_ms else {
            self.silent_since_ms = Some(clock.now_ms());
            return Ok(Some(self));
        };
        if elapsed_ms(clock, since) < REDUCE_DEADLINE_MS {
            return Ok(Some(self));
        }
        if self.sends < REDUCE_ATTEMPTS {
            return self.resend(contribution, link).map(Some);
        }
        let reply = device.end_step(ErrorCode::ReduceTimeout);
        finish(cache, self.seq, reply, link).map(|()| None)
    }
}

/// What runs a step's next leg: its `RunStep` (saying whether the host fed the step and
/// took the last step's anchors in place), or the host's answer to the exchange it waits
/// on.
pub(super) enum Leg<'a> {
    Start { fed: bool, took: bool },
    Answer(&'a [u8]),
}

/// Where a step's leg left it: its contribution sent (the step now waits), or its reply
/// kept and sent.
pub(super) fn step_progress<M: Messages, const FRAME: usize, const WINDOW: usize>(
    (cache, contribution): (&mut ReplyCache<'_, FRAME, WINDOW>, &mut [u8; FRAME]),
    seq: u32,
    device: &mut Device<'_>,
    leg: Leg<'_>,
    link: &mut M,
) -> Result<Option<Waiting>, ServeError<M::Error>> {
    let progress = match leg {
        Leg::Answer(data) => device.answer_step(data),
        Leg::Start { fed, took } => device.start_step(fed, took),
    };
    let encoded = match progress {
        Progress::Contribute { round, op, data } => {
            let _p = phase!("exchange");
            let ask = FromDevice::Contribution(Contribution {
                step: seq,
                round,
                op,
                data,
            });
            let limit = Server::<FRAME, WINDOW>::body_limit();
            ask.encode(&mut contribution[..limit]).ok()
        }
        Progress::Finished(reply) => return finish(cache, seq, reply, link).map(|()| None),
    };
    let Some(len) = encoded else {
        // Prepare checked that every exchange fits a frame.
        let reply = device.end_step(ErrorCode::ReplyTooLarge);
        return finish(cache, seq, reply, link).map(|()| None);
    };
    let waiting = Waiting {
        seq,
        len,
        silent_since_ms: None,
        sends: 0,
    };
    waiting.resend(contribution, link).map(Some)
}
