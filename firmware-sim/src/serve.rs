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
//! - **Reductions are topics, and carry their identity.** During a step the device sends a
//!   [`Contribution`] naming the step's sequence number and the round (not a reply: the
//!   step's reply comes when it ends), and applies only the [`Combined`] result naming that
//!   same step and round (not a request: it gets no reply). Any
//!   other answer (late, duplicate, or from an earlier step) is counted in
//!   [`Server::stale_answers`] and discarded, never applied. The device sends its
//!   contribution again when the host retries the step and when the host stays silent for
//!   [`REDUCE_DEADLINE_MS`] of real time, measured on a [`Clock`]. A request numbered after
//!   the step means the host gave up on it: the step fails (`StepAbandoned`) at once
//!   instead of holding the device for every deadline, and the request comes again.
//! - **No byte is set aside.** Bytes that arrive in the same read as a request stay with
//!   the link; the step's reductions read them before reading the link again, so an
//!   answer that follows its step at once is seen.
//! - **Replies fit a frame.** A reply body is at most [`Server::body_limit`] bytes, so its
//!   frame (CRC and COBS included) fits `FRAME`; a larger one becomes a `ReplyTooLarge`
//!   error reply.
//! - The busy line is high while a request runs.

use embedded_hal::digital::OutputPin;
use embedded_io::{Read, ReadReady, Write};
use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{
    encode_body, Combined, Contribution, Envelope, ErrorCode, FromDevice, ReduceOp, Request,
    RequestKind, Response, Target, ToDevice,
};

use crate::arena::Access;
use crate::clock::{elapsed_ms, Clock};
use crate::device::Device;
use crate::link::{Framed, Framing, Incoming, Messages};
use crate::program::Reducer;
use crate::reply_cache::{ReplyCache, Verdict};

/// How long the device waits for the host's [`Combined`] result, in real time, before it
/// sends its contribution again.
pub const REDUCE_DEADLINE_MS: u64 = 2_000;
/// Times the device sends a contribution before the step fails with
/// [`ErrorCode::ReduceTimeout`].
pub const REDUCE_ATTEMPTS: u32 = 5;
/// How long the device waits between two looks at an idle link during a reduction.
const POLL_US: u32 = 50;

/// What a device's link can carry, announced in its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkLimits {
    /// Largest frame, delimiter included.
    pub max_frame: usize,
    /// Requests the host may have outstanding (replies kept for retries).
    pub window: u16,
}

/// The serve loop's state and buffers (`FRAME` bytes each): a copy of the request being
/// run, a buffer for what arrives while a step waits for a reduction, the replies kept for
/// retries (`WINDOW` of them, in storage the caller provides), and the framing state of a
/// byte link.
pub struct Server<'b, const FRAME: usize, const WINDOW: usize> {
    request: [u8; FRAME],
    aside: [u8; FRAME],
    cache: ReplyCache<'b, FRAME, WINDOW>,
    framing: Framing<FRAME>,
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
        Self {
            request: [0; FRAME],
            aside: [0; FRAME],
            cache: ReplyCache::new(replies),
            framing: Framing::new(),
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
            aside,
            cache,
            framing,
            bad_frames,
            stale_answers,
            dropped,
        } = self;
        let state = State {
            request,
            aside,
            cache,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeError<E> {
    /// The link failed.
    Link(E),
    /// A reply did not fit a frame (a device built with too small a `FRAME`).
    ReplyTooLarge,
}

impl<E: core::fmt::Debug> core::fmt::Display for ServeError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Link(e) => write!(f, "the device's link failed: {e:?}"),
            Self::ReplyTooLarge => f.write_str("a reply does not fit the device's frame"),
        }
    }
}

impl<E: core::fmt::Debug> core::error::Error for ServeError<E> {}

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
    aside: &'s mut [u8; FRAME],
    cache: &'s mut ReplyCache<'b, FRAME, WINDOW>,
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
        let len = match link
            .receive(&mut state.request[..], true)
            .map_err(ServeError::Link)?
        {
            Incoming::Closed => return Ok(()),
            Incoming::Idle => continue,
            Incoming::Damaged => {
                *state.bad_frames = state.bad_frames.saturating_add(1);
                continue;
            }
            Incoming::Message(len) => len,
        };
        let _ = busy.set_high();
        let outcome = answer(state, len, device, link, clock);
        let _ = busy.set_low();
        outcome?;
    }
}

/// Runs (or answers again, or drops) the request held in `state.request[..len]`.
fn answer<M, C, const FRAME: usize, const WINDOW: usize>(
    state: &mut State<'_, '_, FRAME, WINDOW>,
    len: usize,
    device: &mut Device<'_>,
    link: &mut M,
    clock: &mut C,
) -> Result<(), ServeError<M::Error>>
where
    M: Messages,
    C: Clock,
{
    let State {
        request,
        aside,
        cache,
        stale_answers,
        dropped,
        ..
    } = state;
    let envelope = match decode_body::<ToDevice<'_>>(&request[..len]) {
        Ok(ToDevice::Request(envelope)) => envelope,
        // A combined result outside the step it answers (the reduction is over, or was
        // abandoned): a topic message, so it gets no reply and leaves the cache alone.
        Ok(ToDevice::Combined(_)) => {
            **stale_answers = stale_answers.saturating_add(1);
            return Ok(());
        }
        Err(_) => return send_malformed(link),
    };
    let seq = envelope.seq;
    let hello = matches!(envelope.body, Request::Hello { .. });
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
            );
        }
    }
    match cache.verdict(seq, hello) {
        Verdict::Drop => {
            **dropped = dropped.saturating_add(1);
            return Ok(());
        }
        Verdict::Repeat => {}
        Verdict::Run => {
            if hello {
                cache.restart();
            }
            let counters = (&mut **stale_answers, &mut **dropped);
            run_request(cache, &envelope, device, link, clock, aside, counters)?;
        }
    }
    let reply = cache.cached(seq).unwrap_or(&[]);
    link.send(reply).map_err(ServeError::Link)
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

/// Runs request `envelope` on `device` and keeps its reply for retries. A step's reductions
/// go over `link`: what arrives while they wait is read into `aside`, and counted in `stale`
/// or `dropped` when it is not their answer.
fn run_request<M, C, const FRAME: usize, const WINDOW: usize>(
    cache: &mut ReplyCache<'_, FRAME, WINDOW>,
    envelope: &Envelope<Request<'_>>,
    device: &mut Device<'_>,
    link: &mut M,
    clock: &mut C,
    aside: &mut [u8; FRAME],
    (stale, dropped): (&mut u32, &mut u32),
) -> Result<(), ServeError<M::Error>>
where
    M: Messages,
    C: Clock,
{
    let seq = envelope.seq;
    let limit = Server::<FRAME, WINDOW>::body_limit();
    // The reply's slot doubles as the step's buffer for its contributions.
    let slot = &mut cache.slot(seq)[..limit];
    let mut reducer = LinkReducer {
        seq,
        link,
        clock,
        contribution: &mut *slot,
        aside: &mut aside[..],
        stale,
        dropped,
    };
    let response = device.handle(&envelope.body, &mut reducer);
    let n = match encode_body(&reply(seq, response), slot) {
        Ok(n) => n,
        Err(_) => {
            let error = Response::Error {
                request: envelope.body.kind(),
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

/// Answers the step's reductions over the link.
struct LinkReducer<'l, M, C> {
    /// The step's sequence number: half of every reduction's identity.
    seq: u32,
    link: &'l mut M,
    clock: &'l mut C,
    /// Where the contribution's message is encoded.
    contribution: &'l mut [u8],
    /// Where messages that arrive during the reduction go.
    aside: &'l mut [u8],
    stale: &'l mut u32,
    dropped: &'l mut u32,
}

/// True when `seq` comes after `step` in the host's numbering (within half the number
/// space: the host never runs that far ahead).
fn is_later(seq: u32, step: u32) -> bool {
    (1..=u32::MAX / 2).contains(&seq.wrapping_sub(step))
}

/// What one message read during a reduction means for it.
enum Heard {
    /// The answer to this reduction, applied.
    Answer,
    /// The host retried the step: it missed our contribution.
    StepRetry,
    /// Anything else: a stale answer, damage, or a request that must wait.
    Nothing,
}

impl<M: Messages, C: Clock> LinkReducer<'_, M, C> {
    /// Decodes the message in `aside[..len]` and applies it when it is the answer to
    /// (`self.seq`, `round`).
    fn hear(&mut self, len: usize, round: u32, data: &mut [u8]) -> Result<Heard, ErrorCode> {
        let Some(body) = self.aside.get(..len) else {
            return Ok(Heard::Nothing);
        };
        match decode_body::<ToDevice<'_>>(body) {
            Ok(ToDevice::Combined(Combined {
                step,
                round: r,
                data: combined,
            })) if step == self.seq && r == round => {
                if combined.len() != data.len() {
                    return Err(ErrorCode::UnexpectedReduced);
                }
                data.copy_from_slice(combined);
                Ok(Heard::Answer)
            }
            Ok(ToDevice::Combined(_)) => {
                *self.stale = self.stale.saturating_add(1);
                Ok(Heard::Nothing)
            }
            Ok(ToDevice::Request(Envelope {
                seq,
                body: Request::RunStep,
            })) if seq == self.seq => Ok(Heard::StepRetry),
            // A later request: the host has given up on this step (another device failed
            // it) and will not answer its reductions. The request itself comes again.
            Ok(ToDevice::Request(Envelope { seq, .. })) if is_later(seq, self.seq) => {
                *self.dropped = self.dropped.saturating_add(1);
                Err(ErrorCode::StepAbandoned)
            }
            // A request sent while the step runs: it comes again (go-back-N).
            Ok(ToDevice::Request(_)) => {
                *self.dropped = self.dropped.saturating_add(1);
                Ok(Heard::Nothing)
            }
            Err(_) => Ok(Heard::Nothing),
        }
    }
}

impl<M: Messages, C: Clock> Reducer for LinkReducer<'_, M, C> {
    // Out of line: inlined into the serve loop, the firmware's .text grows by about 700 B.
    #[inline(never)]
    fn reduce(&mut self, round: u32, op: ReduceOp, data: &mut [u8]) -> Result<(), ErrorCode> {
        let ask = FromDevice::Contribution(Contribution {
            step: self.seq,
            round,
            op,
            data,
        });
        let n = encode_body(&ask, self.contribution).map_err(|_| ErrorCode::ReplyTooLarge)?;
        let link_failed = |_| ErrorCode::ReduceTimeout;
        for _ in 0..REDUCE_ATTEMPTS {
            self.link
                .send(&self.contribution[..n])
                .map_err(link_failed)?;
            let sent = self.clock.now_ms();
            while elapsed_ms(self.clock, sent) < REDUCE_DEADLINE_MS {
                // Woken by the answer where the link can wait; polled otherwise.
                let heard = match self
                    .link
                    .receive_within(self.aside, POLL_US)
                    .map_err(link_failed)?
                {
                    Some(heard) => heard,
                    None => match self.link.receive(self.aside, false).map_err(link_failed)? {
                        Incoming::Idle => {
                            self.clock.delay_us(POLL_US);
                            continue;
                        }
                        other => other,
                    },
                };
                let len = match heard {
                    // The host went away.
                    Incoming::Closed => return Err(ErrorCode::ReduceTimeout),
                    Incoming::Idle => continue,
                    Incoming::Damaged => continue,
                    Incoming::Message(len) => len,
                };
                match self.hear(len, round, data)? {
                    Heard::Answer => return Ok(()),
                    Heard::StepRetry => self
                        .link
                        .send(&self.contribution[..n])
                        .map_err(link_failed)?,
                    Heard::Nothing => {}
                }
            }
        }
        Err(ErrorCode::ReduceTimeout)
    }
}
