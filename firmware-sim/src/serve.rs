//! The device's side of the link: read frames, run requests, write replies.
//!
//! # Contract
//!
//! - **Exactly once, many in flight.** Requests run strictly in the host's numbering; a
//!   retry of one of the last `WINDOW` is answered from the [`ReplyCache`] and never runs
//!   twice; a request after a gap is dropped and comes again (go-back-N: the rule is stated
//!   in [`reply_cache`](crate::reply_cache)). Only a request that ran fills the cache; a
//!   frame that does not decode as a request is answered `Malformed` from a buffer of its
//!   own.
//! - **Any link.** The loop speaks whole messages through [`Messages`]: [`serve`] frames
//!   them on a byte link ([`Framed`]: every frame delimited first and flushed),
//!   [`serve_messages`] takes any other [`Messages`] link: a queue between threads, or a
//!   framed link with a window for bulk bytes (a child process's shared memory, QEMU's
//!   host file).
//! - **Bulk requests run in the server.** A bulk write's bytes are received straight into
//!   their register, a bulk read's sent straight from it, and only for a request that runs:
//!   a repeat gets its kept reply alone and never touches the window.
//! - **Reductions are topics, and carry their identity.** A step runs in legs, each ending
//!   at an exchange ([`Device::start_step`]): the loop sends a [`Contribution`] naming the
//!   step's sequence number and the exchange's round (not a reply: the step's reply comes
//!   when it ends), goes back to reading its link, and hands the device only the
//!   [`Combined`] result naming that same step and round (not a request: it gets no
//!   reply). Any other answer (late, duplicate, or from an earlier step) is counted in
//!   [`Server::stale_answers`] and discarded, never applied. The loop sends the
//!   contribution again when the host retries the step and when the host stays silent for
//!   [`REDUCE_DEADLINE_MS`] of real time, measured on a [`Clock`] from the first look that
//!   finds the link silent after a send (no clock read per send: a step sends several). So
//!   the deadline is never earlier than a deadline after the send, and later by the time
//!   the loop spent on other messages (stale answers, dropped requests) before it first
//!   found the link silent; after
//!   [`REDUCE_ATTEMPTS`] sends the step fails (`ReduceTimeout`). A request numbered after
//!   the step means the host gave up on it: the step fails (`StepAbandoned`) at once, and
//!   that request runs. Requests numbered before it are dropped (they come again).
//! - **Nothing waits inside a request.** Between a step's legs the device holds only the
//!   step's cursor, and the loop sleeps on its link like any other wait.
//! - **Replies fit a frame.** A reply body is at most [`Server::body_limit`] bytes, so its
//!   frame (CRC and COBS included) fits `FRAME`; a larger one becomes a `ReplyTooLarge`
//!   error reply.
//! - The busy line is high while a request runs.

use embedded_hal::digital::OutputPin;
use embedded_io::{Read, ReadReady, Write};
use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{
    encode_body, Combined, Contribution, Envelope, ErrorCode, FromDevice, Request, RequestKind,
    Response, Target, ToDevice,
};

use crate::arena::Access;
use crate::clock::{elapsed_ms, Clock};
use crate::device::{Device, Progress};
use crate::link::{Framed, Framing, Incoming, Messages};
use crate::reply_cache::{ReplyCache, Verdict};

/// How long the device waits for the host's [`Combined`] result, in real time, before it
/// sends its contribution again.
pub const REDUCE_DEADLINE_MS: u64 = 2_000;
/// Times the device sends a contribution before the step fails with
/// [`ErrorCode::ReduceTimeout`].
pub const REDUCE_ATTEMPTS: u32 = 5;
/// How long the device waits between two looks at an idle link during a step.
const POLL_US: u32 = 50;

/// What a device's link can carry, announced in its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkLimits {
    /// Largest frame, delimiter included.
    pub max_frame: usize,
    /// Requests the host may have outstanding (replies kept for retries).
    pub window: u16,
}

/// The serve loop's state and buffers: a copy of the message being handled (`FRAME`
/// bytes), a waiting step's contribution (`FRAME` bytes), the replies kept for retries
/// (`WINDOW` of them, in storage the caller provides), and the framing state of a byte
/// link.
pub struct Server<'b, const FRAME: usize, const WINDOW: usize> {
    request: [u8; FRAME],
    /// A waiting step's contribution, kept to be sent again. Not a kept reply's slot: the
    /// slots are written in turn, and a contribution in each made every step write
    /// memory no step had touched for `WINDOW` requests (a host serving many devices
    /// found it out of its caches every time).
    contribution: [u8; FRAME],
    cache: ReplyCache<'b, FRAME, WINDOW>,
    framing: Framing<FRAME>,
    /// A step between two legs, waiting for its combination.
    waiting: Option<Waiting>,
    /// Frames dropped for a bad CRC, bad COBS or excess length.
    pub bad_frames: u32,
    /// Reduction answers discarded because they named another step or round.
    pub stale_answers: u32,
    /// Requests dropped because they came after a gap in the numbering (or while a step
    /// waited for a reduction); the host sends them again.
    pub dropped: u32,
}

impl<const FRAME: usize, const WINDOW: usize> core::fmt::Debug for Server<'_, FRAME, WINDOW> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("cache", &self.cache)
            .field("dropped", &self.dropped)
            .field("bad_frames", &self.bad_frames)
            .field("stale_answers", &self.stale_answers)
            .finish_non_exhaustive()
    }
}

impl<'b, const FRAME: usize, const WINDOW: usize> Server<'b, FRAME, WINDOW> {
    /// Empty buffers; replies are kept in `replies`.
    pub fn new(replies: &'b mut [[u8; FRAME]; WINDOW]) -> Self {
        Self::keeping(crate::lent::Lent::Borrowed(replies))
    }

    /// Empty buffers, owning the storage its replies are kept in (where [`Server::new`]
    /// lends it): a server a host can keep in a struct of its own.
    #[cfg(feature = "std")]
    pub fn owning(
        replies: std::boxed::Box<[[u8; FRAME]; WINDOW]>,
    ) -> Server<'static, FRAME, WINDOW> {
        Server::keeping(crate::lent::Lent::Owned(replies))
    }

    /// Empty buffers; replies kept in `replies`, lent or owned.
    fn keeping(replies: crate::lent::Lent<'b, [[u8; FRAME]; WINDOW]>) -> Self {
        Self {
            request: [0; FRAME],
            contribution: [0; FRAME],
            cache: ReplyCache::in_storage(replies),
            framing: Framing::new(),
            waiting: None,
            bad_frames: 0,
            stale_answers: 0,
            dropped: 0,
        }
    }

    /// What this server's link carries: frames of `FRAME` bytes, `WINDOW` requests in
    /// flight (saturated to 16 bits).
    pub const fn link(&self) -> LinkLimits {
        LinkLimits {
            max_frame: FRAME,
            window: if WINDOW > u16::MAX as usize {
                u16::MAX
            } else {
                WINDOW as u16
            },
        }
    }

    /// The loop's state, and the framing state of a byte link, borrowed apart.
    fn split(&mut self) -> (State<'_, 'b, FRAME, WINDOW>, &mut Framing<FRAME>) {
        let Server {
            request,
            contribution,
            cache,
            framing,
            waiting,
            bad_frames,
            stale_answers,
            dropped,
        } = self;
        let state = State {
            request,
            contribution,
            cache,
            waiting,
            bad_frames,
            stale_answers,
            dropped,
        };
        (state, framing)
    }

    /// The longest reply body: its frame (CRC, COBS's one byte in 254, the delimiters)
    /// still fits `FRAME`.
    pub const fn body_limit() -> usize {
        FRAME.saturating_sub(FRAME / 254 + 8)
    }
}

/// Why the serve loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ServeError<E> {
    /// The link failed.
    #[error("the device's link failed: {0:?}")]
    Link(E),
    /// A reply did not fit a frame (a device built with too small a `FRAME`).
    #[error("a reply does not fit the device's frame")]
    ReplyTooLarge,
}

/// Serves `device` on the byte link `link` until it reaches end of file (the host went
/// away), which returns `Ok`. Deadlines are measured on `clock`.
pub fn serve<L, C, P, const FRAME: usize, const WINDOW: usize>(
    server: &mut Server<'_, FRAME, WINDOW>,
    device: &mut Device<'_>,
    link: &mut L,
    clock: &mut C,
    busy: &mut P,
) -> Result<(), ServeError<L::Error>>
where
    L: Read + ReadReady + Write,
    C: Clock,
    P: OutputPin,
{
    let (mut state, framing) = server.split();
    let mut framed = Framed { link, framing };
    run(&mut state, device, &mut framed, clock, busy)
}

/// Serves `device` on a link that carries whole messages (no framing) until it closes.
pub fn serve_messages<M, C, P, const FRAME: usize, const WINDOW: usize>(
    server: &mut Server<'_, FRAME, WINDOW>,
    device: &mut Device<'_>,
    link: &mut M,
    clock: &mut C,
    busy: &mut P,
) -> Result<(), ServeError<M::Error>>
where
    M: Messages,
    C: Clock,
    P: OutputPin,
{
    let (mut state, _) = server.split();
    run(&mut state, device, link, clock, busy)
}

/// The server without its framing, borrowed for one loop.
struct State<'s, 'b, const FRAME: usize, const WINDOW: usize> {
    request: &'s mut [u8; FRAME],
    contribution: &'s mut [u8; FRAME],
    cache: &'s mut ReplyCache<'b, FRAME, WINDOW>,
    waiting: &'s mut Option<Waiting>,
    bad_frames: &'s mut u32,
    stale_answers: &'s mut u32,
    dropped: &'s mut u32,
}

fn run<M, C, P, const FRAME: usize, const WINDOW: usize>(
    state: &mut State<'_, '_, FRAME, WINDOW>,
    device: &mut Device<'_>,
    link: &mut M,
    clock: &mut C,
    busy: &mut P,
) -> Result<(), ServeError<M::Error>>
where
    M: Messages,
    C: Clock,
    P: OutputPin,
{
    loop {
        let heard = match state.waiting {
            None => link.receive(&mut state.request[..], true),
            Some(_) => listen(link, clock, &mut state.request[..]),
        };
        let len = match heard.map_err(ServeError::Link)? {
            Incoming::Closed => return Ok(()),
            Incoming::Idle => {
                if let Some(w) = state.waiting.take() {
                    *state.waiting =
                        w.on_silence((state.cache, state.contribution), device, link, clock)?;
                }
                continue;
            }
            Incoming::Damaged => {
                *state.bad_frames = state.bad_frames.saturating_add(1);
                continue;
            }
            Incoming::Message(len) => len,
        };
        handle_message(state, len, device, (link, busy))?;
    }
}

/// Serves the messages `link` holds now, and returns once it is idle (`Ok(true)`) or
/// closed (`Ok(false)`): for a host that runs many devices on few threads, and calls this
/// when a device's link has mail. A step between two legs stays in `server`, waiting for
/// its combination; only a message moves it on (between calls nobody watches the step's
/// deadline: the host's retries stand in for it).
pub fn serve_pending<M, P, const FRAME: usize, const WINDOW: usize>(
    server: &mut Server<'_, FRAME, WINDOW>,
    device: &mut Device<'_>,
    link: &mut M,
    busy: &mut P,
) -> Result<bool, ServeError<M::Error>>
where
    M: Messages,
    P: OutputPin,
{
    let (mut state, _) = server.split();
    loop {
        let len = match link
            .receive(&mut state.request[..], false)
            .map_err(ServeError::Link)?
        {
            Incoming::Closed => return Ok(false),
            Incoming::Idle => return Ok(true),
            Incoming::Damaged => {
                *state.bad_frames = state.bad_frames.saturating_add(1);
                continue;
            }
            Incoming::Message(len) => len,
        };
        handle_message(&mut state, len, device, (link, busy))?;
    }
}

/// [`answer`]s the message in `state.request[..len]` with the busy line high.
fn handle_message<M, P, const FRAME: usize, const WINDOW: usize>(
    state: &mut State<'_, '_, FRAME, WINDOW>,
    len: usize,
    device: &mut Device<'_>,
    (link, busy): (&mut M, &mut P),
) -> Result<(), ServeError<M::Error>>
where
    M: Messages,
    P: OutputPin,
{
    let _ = busy.set_high();
    let waiting = state.waiting.take();
    let outcome = answer(state, len, device, link, waiting);
    let _ = busy.set_low();
    *state.waiting = outcome?;
    Ok(())
}

/// The next message within a poll during a step: woken by its arrival where the link can
/// wait that way, else looked for once and slept on.
fn listen<M: Messages, C: Clock>(
    link: &mut M,
    clock: &mut C,
    into: &mut [u8],
) -> Result<Incoming, M::Error> {
    if let Some(heard) = link.receive_within(into, POLL_US)? {
        return Ok(heard);
    }
    let heard = link.receive(into, false)?;
    if heard == Incoming::Idle {
        clock.delay_us(POLL_US);
    }
    Ok(heard)
}

/// A step between two legs: its `RunStep`'s sequence number, its contribution to the
/// awaited exchange (the first `len` bytes of the server's contribution buffer), how often
/// it was sent, and the time of the first look that found the link silent after the last
/// send (`None` until one does).
#[derive(Debug, Clone, Copy)]
struct Waiting {
    seq: u32,
    len: usize,
    silent_since_ms: Option<u64>,
    sends: u32,
}

impl Waiting {
    /// The contribution sent again.
    fn resend<M: Messages, const FRAME: usize>(
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
    fn on_silence<M: Messages, C: Clock, const FRAME: usize, const WINDOW: usize>(
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
enum Leg<'a> {
    Start { fed: bool, took: bool },
    Answer(&'a [u8]),
}

/// Where a step's leg left it: its contribution sent (the step now waits), or its reply
/// kept and sent.
fn step_progress<M: Messages, const FRAME: usize, const WINDOW: usize>(
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
            let ask = FromDevice::Contribution(Contribution {
                step: seq,
                round,
                op,
                data,
            });
            let limit = Server::<FRAME, WINDOW>::body_limit();
            encode_body(&ask, &mut contribution[..limit]).ok()
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

/// Keeps `reply` as request `seq`'s and sends it.
fn finish<M: Messages, const FRAME: usize, const WINDOW: usize>(
    cache: &mut ReplyCache<'_, FRAME, WINDOW>,
    seq: u32,
    reply: Response<'_>,
    link: &mut M,
) -> Result<(), ServeError<M::Error>> {
    let limit = Server::<FRAME, WINDOW>::body_limit();
    let slot = &mut cache.slot(seq)[..limit];
    let n = encode_body(&self::reply(seq, reply), slot).map_err(|_| ServeError::ReplyTooLarge)?;
    cache.keep(seq, n);
    link.send(cache.cached(seq).unwrap_or(&[]))
        .map_err(ServeError::Link)
}

/// Handles the message held in `state.request[..len]` while `waiting` (a step between two
/// legs, if one is): a combination for the step, a request to run (or answer again, or
/// drop); returns the step still waiting, if one is.
fn answer<M, const FRAME: usize, const WINDOW: usize>(
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
    let envelope = match decode_message(&request[..len]) {
        Ok(ToDevice::Request(envelope)) => envelope,
        Ok(ToDevice::Combined(Combined { step, round, data })) => {
            return match waiting {
                Some(w) if step == w.seq && device.awaited_round() == Some(round) => step_progress(
                    (cache, contribution),
                    w.seq,
                    device,
                    Leg::Answer(data),
                    link,
                ),
                // Late, repeated, or outside any step: a topic message, so it gets no
                // reply and leaves the cache alone.
                _ => {
                    **stale_answers = stale_answers.saturating_add(1);
                    Ok(waiting)
                }
            };
        }
        Err(_) => return send_malformed(link).map(|()| waiting),
    };
    let seq = envelope.seq;
    let hello = matches!(envelope.body, Request::Hello { .. });
    if let Some(w) = waiting {
        if seq == w.seq {
            // The host retried the step: it missed the contribution.
            return w.resend(contribution, link).map(Some);
        }
        if !hello && !is_later(seq, w.seq) {
            **dropped = dropped.saturating_add(1);
            return Ok(Some(w));
        }
        // The host gave up on the step (another device failed it).
        let reply = device.end_step(ErrorCode::StepAbandoned);
        finish(cache, w.seq, reply, link)?;
    }
    // A bulk request's bytes come or go beside its message, straight between the link and
    // the register: the server runs it itself.
    if let Some((access, target, offset, len)) = bulk_request(&envelope.body) {
        let fits = usize::try_from(len).is_ok_and(|len| len <= link.bulk_capacity());
        if fits && cache.verdict(seq, false) == Verdict::Run {
            let kind = envelope.body.kind();
            return answer_bulk(
                cache,
                seq,
                (kind, access),
                (target, offset, len),
                device,
                link,
            )
            .map(|()| None);
        }
    }
    match cache.verdict(seq, hello) {
        Verdict::Drop => {
            **dropped = dropped.saturating_add(1);
            return Ok(None);
        }
        Verdict::Repeat => {}
        Verdict::Run => {
            if let Request::RunStep { fed, took } = envelope.body {
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
    decode_body(bytes)
}

/// The access, target, offset and length of a bulk request; `None` for any other request.
fn bulk_request(body: &Request<'_>) -> Option<(Access, Target, u32, u32)> {
    match *body {
        Request::WriteBulk {
            target,
            offset,
            len,
        } => Some((Access::Write, target, offset, len)),
        Request::ReadBulk {
            target,
            offset,
            len,
        } => Some((Access::Read, target, offset, len)),
        _ => None,
    }
}

/// Runs request `envelope` on `device` and keeps its reply for retries.
fn run_request<E, const FRAME: usize, const WINDOW: usize>(
    cache: &mut ReplyCache<'_, FRAME, WINDOW>,
    envelope: Envelope<Request<'_>>,
    device: &mut Device<'_>,
) -> Result<(), ServeError<E>> {
    let (seq, kind) = (envelope.seq, envelope.body.kind());
    let limit = Server::<FRAME, WINDOW>::body_limit();
    let slot = &mut cache.slot(seq)[..limit];
    let response = device.handle(envelope.body);
    let n = match encode_body(&reply(seq, response), slot) {
        Ok(n) => n,
        Err(_) => {
            let error = Response::Error {
                request: kind,
                code: ErrorCode::ReplyTooLarge,
            };
            encode_body(&reply(seq, error), slot).map_err(|_| ServeError::ReplyTooLarge)?
        }
    };
    cache.keep(seq, n);
    Ok(())
}

/// Runs a bulk request: a write's bytes are received straight into their target, a read's
/// sent beside the reply straight from it; the move is settled (a FIFO counts it) only once
/// the bytes moved. The reply is kept for retries; a retry gets it alone (on the links that
/// carry bulk nothing is lost, so the first reply has already arrived).
fn answer_bulk<M: Messages, const FRAME: usize, const WINDOW: usize>(
    cache: &mut ReplyCache<'_, FRAME, WINDOW>,
    seq: u32,
    (request, access): (RequestKind, Access),
    (target, offset, len): (Target, u32, u32),
    device: &mut Device<'_>,
    link: &mut M,
) -> Result<(), ServeError<M::Error>> {
    let limit = Server::<FRAME, WINDOW>::body_limit();
    let response = if access == Access::Write {
        match device.place(target, offset, len, access) {
            Ok(into) => match link.receive_bulk(into).map_err(ServeError::Link)? {
                true => {
                    device.settle(target, len as usize, access);
                    Response::Done
                }
                // No bytes, or too few, came with it.
                false => Response::Error {
                    request,
                    code: ErrorCode::BulkUnavailable,
                },
            },
            Err(code) => Response::Error { request, code },
        }
    } else {
        match device.place(target, offset, len, access) {
            Ok(bytes) => {
                let bytes = &*bytes;
                let slot = &mut cache.slot(seq)[..limit];
                let body = Response::Bulk { len };
                let n =
                    encode_body(&reply(seq, body), slot).map_err(|_| ServeError::ReplyTooLarge)?;
                cache.keep(seq, n);
                let reply = cache.cached(seq).unwrap_or(&[]);
                if link.send_bulk(reply, bytes).map_err(ServeError::Link)? {
                    device.settle(target, len as usize, access);
                    return Ok(());
                }
                // The link could not carry them: the kept reply becomes this error.
                Response::Error {
                    request,
                    code: ErrorCode::BulkUnavailable,
                }
            }
            Err(code) => Response::Error { request, code },
        }
    };
    let slot = &mut cache.slot(seq)[..limit];
    let n = encode_body(&reply(seq, response), slot).map_err(|_| ServeError::ReplyTooLarge)?;
    cache.keep(seq, n);
    link.send(cache.cached(seq).unwrap_or(&[]))
        .map_err(ServeError::Link)
}

/// The reply `body` to request `seq`, as it travels.
fn reply(seq: u32, body: Response<'_>) -> FromDevice<'_> {
    FromDevice::Reply(Envelope { seq, body })
}

/// Answers a frame that is not a request, from a buffer of its own (the reply cache keeps
/// the last real replies for retries).
fn send_malformed<M: Messages>(link: &mut M) -> Result<(), ServeError<M::Error>> {
    let malformed = reply(
        0,
        Response::Error {
            request: RequestKind::Malformed,
            code: ErrorCode::Malformed,
        },
    );
    let mut body = [0u8; 16];
    let n = encode_body(&malformed, &mut body).map_err(|_| ServeError::ReplyTooLarge)?;
    link.send(&body[..n]).map_err(ServeError::Link)
}

/// True when `seq` comes after `step` in the host's numbering (within half the number
/// space: the host never runs that far ahead).
fn is_later(seq: u32, step: u32) -> bool {
    (1..=u32::MAX / 2).contains(&seq.wrapping_sub(step))
}
