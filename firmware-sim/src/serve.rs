//! The device's side of the link: read frames, run requests, write replies.
//!
//! # Contract
//!
//! - **Exactly once.** A request whose sequence number equals the last one served is a host
//!   retry: the cached reply is sent again and the request does not run twice. Only a
//!   request that ran replaces the cache; a frame that does not decode as a request is
//!   answered `Malformed` from a buffer of its own, so a retry of the last request after
//!   such a frame still gets its cached reply.
//! - **Every frame starts with a delimiter and is flushed.** The leading `0x00` ends any
//!   garbage the host's decoder holds, so damage before a frame costs nothing but itself;
//!   the flush keeps a buffered link (a child's stdout) from holding a reply or a re-sent
//!   contribution back until the next frame, where it would arrive out of turn.
//! - **Reductions carry their identity.** During a step the device sends
//!   [`Response::Reduce`] under the step's sequence number with the round's number, and
//!   applies only the [`Request::Reduced`] carrying that same sequence number and round. Any
//!   other answer (late, duplicate, or from an earlier step) is counted in
//!   [`Server::stale_answers`] and discarded, never applied. The device sends its
//!   contribution again when the host retries the step and when the host stays silent for
//!   [`REDUCE_DEADLINE_MS`] of real time, measured on a [`Clock`].
//! - **No byte is set aside.** Bytes that arrive in the same read as a request wait in the
//!   server's inbox; the step's reductions read them before reading the link again, so an
//!   answer that follows its step at once is seen.
//! - The busy line is high while a request runs.

use embedded_hal::digital::OutputPin;
use embedded_io::{Read, ReadReady, Write};
use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{
    encode_frame, Envelope, ErrorCode, FrameDecoder, FrameError, ReduceOp, Request, RequestKind,
    Response,
};

use crate::clock::{elapsed_ms, Clock};
use crate::device::Device;
use crate::step::Reducer;

/// How long the device waits for the host's [`Request::Reduced`], in real time, before it
/// sends its contribution again.
pub const REDUCE_DEADLINE_MS: u64 = 2_000;
/// Times the device sends a contribution before the step fails with
/// [`ErrorCode::ReduceTimeout`].
pub const REDUCE_ATTEMPTS: u32 = 5;
/// How long the device waits between two looks at an idle link during a reduction.
const POLL_US: u32 = 50;
/// Bytes taken from the link per read.
const INBOX: usize = 256;

/// The serve loop's state and buffers (`FRAME` bytes each): the frame decoder, the bytes
/// read but not yet decoded, a copy of the request being run, the encoded reply (kept for
/// retries) and an encoding scratch.
pub struct Server<const FRAME: usize> {
    decoder: FrameDecoder<FRAME>,
    inbox: Inbox,
    request: [u8; FRAME],
    reply: [u8; FRAME],
    scratch: [u8; FRAME],
    reply_len: usize,
    last_seq: Option<u32>,
    /// Frames dropped for a bad CRC, bad COBS or excess length.
    pub bad_frames: u32,
    /// Reduction answers discarded because they named another step or round.
    pub stale_answers: u32,
}

impl<const FRAME: usize> core::fmt::Debug for Server<FRAME> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("last_seq", &self.last_seq)
            .field("bad_frames", &self.bad_frames)
            .field("stale_answers", &self.stale_answers)
            .finish_non_exhaustive()
    }
}

impl<const FRAME: usize> Default for Server<FRAME> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const FRAME: usize> Server<FRAME> {
    /// Empty buffers.
    pub const fn new() -> Self {
        Self {
            decoder: FrameDecoder::new(),
            inbox: Inbox::new(),
            request: [0; FRAME],
            reply: [0; FRAME],
            scratch: [0; FRAME],
            reply_len: 0,
            last_seq: None,
            bad_frames: 0,
            stale_answers: 0,
        }
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

/// Serves `device` on `link` until the link reaches end of file (the host went away),
/// which returns `Ok`. Deadlines are measured on `clock`.
pub fn serve<L, C, P, const FRAME: usize>(
    server: &mut Server<FRAME>,
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
    loop {
        if server.inbox.is_empty() && server.inbox.fill(link).map_err(ServeError::Link)? == 0 {
            return Ok(());
        }
        let len = match server.inbox.next_frame(&mut server.decoder) {
            None => continue,
            Some(Err(_)) => {
                server.bad_frames = server.bad_frames.saturating_add(1);
                continue;
            }
            // Keep the request apart from the decoder, which the step's reductions reuse.
            Some(Ok(body)) => {
                let len = body.len();
                server.request[..len].copy_from_slice(body);
                len
            }
        };
        let _ = busy.set_high();
        let outcome = answer(server, len, device, link, clock);
        let _ = busy.set_low();
        outcome?;
    }
}

/// Runs (or answers again) the request held in `server.request[..len]`.
fn answer<L, C, const FRAME: usize>(
    server: &mut Server<FRAME>,
    len: usize,
    device: &mut Device<'_>,
    link: &mut L,
    clock: &mut C,
) -> Result<(), ServeError<L::Error>>
where
    L: Read + ReadReady + Write,
    C: Clock,
{
    let Server {
        decoder,
        inbox,
        request,
        reply,
        scratch,
        reply_len,
        last_seq,
        stale_answers,
        ..
    } = server;
    let Ok(envelope) = decode_body::<Envelope<Request<'_>>>(&request[..len]) else {
        return send_malformed(link);
    };
    if let Request::Reduced { .. } = envelope.body {
        // An answer to a reduction that is over (or was abandoned): not a request, so it
        // gets no reply and leaves the reply cache alone.
        *stale_answers = stale_answers.saturating_add(1);
        return Ok(());
    }
    if *last_seq != Some(envelope.seq) {
        // The reply buffer is about to be reused (the step's contributions go through it).
        *last_seq = None;
        let mut reducer = LinkReducer {
            seq: envelope.seq,
            link,
            clock,
            decoder,
            inbox,
            frame: reply,
            scratch,
            stale: stale_answers,
        };
        let response = device.handle(&envelope.body, &mut reducer);
        let framed = encode_delimited(
            &Envelope {
                seq: envelope.seq,
                body: response,
            },
            scratch,
            reply,
        );
        *reply_len = match framed {
            Ok(n) => n,
            Err(_) => {
                let error = Response::Error {
                    request: envelope.body.kind(),
                    code: ErrorCode::ReplyTooLarge,
                };
                encode_delimited(
                    &Envelope {
                        seq: envelope.seq,
                        body: error,
                    },
                    scratch,
                    reply,
                )
                .map_err(|_| ServeError::ReplyTooLarge)?
            }
        };
        *last_seq = Some(envelope.seq);
    }
    send(link, &reply[..*reply_len]).map_err(ServeError::Link)
}

/// Answers a frame that is not a request, from buffers of its own (the reply cache keeps
/// the last real reply for retries).
fn send_malformed<L: Write>(link: &mut L) -> Result<(), ServeError<L::Error>> {
    let malformed = Envelope {
        seq: 0,
        body: Response::Error {
            request: RequestKind::Malformed,
            code: ErrorCode::Malformed,
        },
    };
    let (mut scratch, mut frame) = ([0u8; 16], [0u8; 24]);
    let n = encode_delimited(&malformed, &mut scratch, &mut frame)
        .map_err(|_| ServeError::ReplyTooLarge)?;
    send(link, &frame[..n]).map_err(ServeError::Link)
}

/// Encodes `message` as a frame preceded by a delimiter into `out`; returns the length.
fn encode_delimited(
    message: &Envelope<Response<'_>>,
    scratch: &mut [u8],
    out: &mut [u8],
) -> Result<usize, FrameError> {
    let (first, rest) = out.split_first_mut().ok_or(FrameError::TooLarge)?;
    *first = 0;
    Ok(1 + encode_frame(message, scratch, rest)?)
}

/// Writes one whole frame and flushes it.
fn send<L: Write>(link: &mut L, frame: &[u8]) -> Result<(), L::Error> {
    link.write_all(frame)?;
    link.flush()
}

/// Bytes read from the link and not yet fed to the decoder.
struct Inbox {
    buf: [u8; INBOX],
    at: usize,
    len: usize,
}

impl Inbox {
    const fn new() -> Self {
        Self {
            buf: [0; INBOX],
            at: 0,
            len: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.at >= self.len
    }

    /// Reads whatever the link has (blocking for at least one byte); 0 is end of file.
    fn fill<L: Read>(&mut self, link: &mut L) -> Result<usize, L::Error> {
        let n = link.read(&mut self.buf)?;
        self.at = 0;
        self.len = n.min(INBOX);
        Ok(self.len)
    }

    /// Feeds held bytes to `decoder` until a frame ends (its outcome) or the bytes run out
    /// or an empty frame ends (`None`; call again while bytes are held).
    fn next_frame<'d, const N: usize>(
        &mut self,
        decoder: &'d mut FrameDecoder<N>,
    ) -> Option<Result<&'d [u8], FrameError>> {
        let held = self.buf.get(self.at..self.len)?;
        let (used, frame) = decoder.feed(held);
        self.at += used;
        frame
    }
}

/// Answers the step's reductions over the link.
struct LinkReducer<'l, L, C, const FRAME: usize> {
    /// The step's sequence number: half of every reduction's identity.
    seq: u32,
    link: &'l mut L,
    clock: &'l mut C,
    decoder: &'l mut FrameDecoder<FRAME>,
    inbox: &'l mut Inbox,
    frame: &'l mut [u8; FRAME],
    scratch: &'l mut [u8; FRAME],
    stale: &'l mut u32,
}

/// What one frame read during a reduction means for it.
enum Heard {
    /// The answer to this reduction, applied.
    Answer,
    /// The host retried the step: it missed our contribution.
    StepRetry,
    /// Anything else: a stale answer, damage, or a request that must wait.
    Nothing,
}

impl<L: Read + ReadReady + Write, C: Clock, const FRAME: usize> LinkReducer<'_, L, C, FRAME> {
    /// Decodes the next held frame, if one ends in the bytes held, and applies it when it is
    /// the answer to (`self.seq`, `round`).
    fn hear(&mut self, round: u32, data: &mut [u8]) -> Result<Heard, ErrorCode> {
        let Some(Ok(body)) = self.inbox.next_frame(self.decoder) else {
            return Ok(Heard::Nothing);
        };
        match decode_body::<Envelope<Request<'_>>>(body) {
            Ok(Envelope {
                seq,
                body:
                    Request::Reduced {
                        round: r,
                        data: combined,
                    },
            }) if seq == self.seq && r == round => {
                if combined.len() != data.len() {
                    return Err(ErrorCode::UnexpectedReduced);
                }
                data.copy_from_slice(combined);
                Ok(Heard::Answer)
            }
            Ok(Envelope {
                body: Request::Reduced { .. },
                ..
            }) => {
                *self.stale = self.stale.saturating_add(1);
                Ok(Heard::Nothing)
            }
            Ok(Envelope {
                seq,
                body: Request::RunStep,
            }) if seq == self.seq => Ok(Heard::StepRetry),
            _ => Ok(Heard::Nothing),
        }
    }
}

impl<L: Read + ReadReady + Write, C: Clock, const FRAME: usize> Reducer
    for LinkReducer<'_, L, C, FRAME>
{
    fn reduce(&mut self, round: u32, op: ReduceOp, data: &mut [u8]) -> Result<(), ErrorCode> {
        let ask = Envelope {
            seq: self.seq,
            body: Response::Reduce { round, op, data },
        };
        let n = encode_delimited(&ask, self.scratch, self.frame)
            .map_err(|_| ErrorCode::ReplyTooLarge)?;
        let link_failed = |_| ErrorCode::ReduceTimeout;
        for _ in 0..REDUCE_ATTEMPTS {
            send(self.link, &self.frame[..n]).map_err(link_failed)?;
            let sent = self.clock.now_ms();
            while elapsed_ms(self.clock, sent) < REDUCE_DEADLINE_MS {
                if self.inbox.is_empty() {
                    if !self.link.read_ready().map_err(link_failed)? {
                        self.clock.delay_us(POLL_US);
                        continue;
                    }
                    if self.inbox.fill(self.link).map_err(link_failed)? == 0 {
                        // The host went away.
                        return Err(ErrorCode::ReduceTimeout);
                    }
                }
                match self.hear(round, data)? {
                    Heard::Answer => return Ok(()),
                    Heard::StepRetry => send(self.link, &self.frame[..n]).map_err(link_failed)?,
                    Heard::Nothing => {}
                }
            }
        }
        Err(ErrorCode::ReduceTimeout)
    }
}
