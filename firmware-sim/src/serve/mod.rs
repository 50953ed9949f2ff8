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
//!
//! # Parts
//!
//! - this module: the server, its buffers, and the loops that read the link;
//! - `answer`: what a message does — a combination for the waiting step, or a request run,
//!   answered again, or dropped;
//! - `bulk`: bulk requests, their bytes moved beside their messages;
//! - `step`: a step between two legs, its contribution sent and sent again;
//! - `reply`: replies kept for retries, and sent.
//!
//! [`Combined`]: tessera_core::wire::Combined
//! [`Contribution`]: tessera_core::wire::Contribution

mod answer;
mod bulk;
mod reply;
mod step;

use embedded_hal::digital::OutputPin;
use embedded_io::{Read, ReadReady, Write};

use crate::clock::Clock;
use crate::device::Device;
use crate::link::LinkLimits;
use crate::link::{Framed, Framing, Incoming, Messages};
use crate::reply_cache::ReplyCache;
use answer::answer;
use step::Waiting;
pub use step::{REDUCE_ATTEMPTS, REDUCE_DEADLINE_MS};

/// How long the device waits between two looks at an idle link during a step.
const POLL_US: u32 = 50;

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

/// [`answer`](fn@answer)s the message in `state.request[..len]` with the busy line high.
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
