//! The device's side of the link: read frames, run requests, write replies.
//!
//! A request whose sequence number equals the last one served is a host retry: the cached
//! reply is sent again and the request is not run twice. During a training step the device
//! sends [`Response::Reduce`] (with the step's sequence number) and waits for
//! [`Request::Reduced`], re-sending its contribution if the host stays silent past the
//! deadline. The busy line is high while a request runs.

use embedded_hal::delay::DelayNs;
use embedded_hal::digital::OutputPin;
use embedded_io::{Read, ReadReady, Write};
use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{
    encode_frame, Envelope, ErrorCode, FrameDecoder, ReduceOp, Request, RequestKind, Response,
};

use crate::device::Device;
use crate::step::Reducer;

/// How long the device waits for the host's [`Request::Reduced`] before sending its
/// contribution again, and how many times it tries.
pub const REDUCE_DEADLINE_MS: u32 = 2_000;
/// See [`REDUCE_DEADLINE_MS`].
pub const REDUCE_ATTEMPTS: u32 = 5;

/// The serve loop's buffers, `FRAME` bytes each: the frame decoder, a copy of the request
/// being run, the encoded reply (kept for retries) and an encoding scratch.
pub struct Server<const FRAME: usize> {
    decoder: FrameDecoder<FRAME>,
    request: [u8; FRAME],
    reply: [u8; FRAME],
    scratch: [u8; FRAME],
    reply_len: usize,
    last_seq: Option<u32>,
    /// Frames dropped for a bad CRC, bad COBS or excess length.
    pub bad_frames: u32,
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
            request: [0; FRAME],
            reply: [0; FRAME],
            scratch: [0; FRAME],
            reply_len: 0,
            last_seq: None,
            bad_frames: 0,
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

/// Serves `device` on `link` until the link reaches end of file (the host went away),
/// which returns `Ok`.
pub fn serve<L, D, P, const FRAME: usize>(
    server: &mut Server<FRAME>,
    device: &mut Device<'_>,
    link: &mut L,
    delay: &mut D,
    busy: &mut P,
) -> Result<(), ServeError<L::Error>>
where
    L: Read + ReadReady + Write,
    D: DelayNs,
    P: OutputPin,
{
    let mut chunk = [0u8; 256];
    loop {
        let n = link.read(&mut chunk).map_err(ServeError::Link)?;
        if n == 0 {
            return Ok(());
        }
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            let (used, frame) = server.decoder.feed(rest);
            rest = &rest[used..];
            match frame {
                None => {}
                Some(Err(_)) => server.bad_frames = server.bad_frames.saturating_add(1),
                Some(Ok(body)) => {
                    // Keep the request apart from the decoder, which the step may need.
                    let len = body.len();
                    server.request[..len].copy_from_slice(body);
                    let Server {
                        decoder,
                        request,
                        reply,
                        scratch,
                        reply_len,
                        last_seq,
                        ..
                    } = server;
                    let _ = busy.set_high();
                    let outcome = answer(
                        &request[..len],
                        device,
                        link,
                        delay,
                        decoder,
                        reply,
                        scratch,
                        reply_len,
                        last_seq,
                    );
                    let _ = busy.set_low();
                    outcome?;
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn answer<L, D, const FRAME: usize>(
    body: &[u8],
    device: &mut Device<'_>,
    link: &mut L,
    delay: &mut D,
    decoder: &mut FrameDecoder<FRAME>,
    reply: &mut [u8; FRAME],
    scratch: &mut [u8; FRAME],
    reply_len: &mut usize,
    last_seq: &mut Option<u32>,
) -> Result<(), ServeError<L::Error>>
where
    L: Read + ReadReady + Write,
    D: DelayNs,
{
    let Ok(envelope) = decode_body::<Envelope<Request<'_>>>(body) else {
        let malformed = Response::Error {
            request: RequestKind::Malformed,
            code: ErrorCode::Malformed,
        };
        *reply_len = encode_frame(
            &Envelope {
                seq: 0,
                body: malformed,
            },
            scratch,
            reply,
        )
        .map_err(|_| ServeError::ReplyTooLarge)?;
        return link
            .write_all(&reply[..*reply_len])
            .map_err(ServeError::Link);
    };
    if let Request::Reduced { .. } = envelope.body {
        // A late answer to a reduction already done (or abandoned): not a request, so it
        // gets no reply and leaves the reply cache alone.
        return Ok(());
    }
    if *last_seq != Some(envelope.seq) {
        *last_seq = None;
        let mut reducer = LinkReducer {
            seq: envelope.seq,
            link,
            delay,
            decoder,
            frame: reply,
            scratch,
        };
        let response = device.handle(&envelope.body, &mut reducer);
        let reply_envelope = Envelope {
            seq: envelope.seq,
            body: response,
        };
        *reply_len = match encode_frame(&reply_envelope, scratch, reply) {
            Ok(n) => n,
            Err(_) => {
                let error = Response::Error {
                    request: envelope.body.kind(),
                    code: ErrorCode::ReplyTooLarge,
                };
                encode_frame(
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
    link.write_all(&reply[..*reply_len])
        .map_err(ServeError::Link)?;
    link.flush().map_err(ServeError::Link)
}

/// Answers the step's reductions over the link.
struct LinkReducer<'l, L, D, const FRAME: usize> {
    seq: u32,
    link: &'l mut L,
    delay: &'l mut D,
    decoder: &'l mut FrameDecoder<FRAME>,
    frame: &'l mut [u8; FRAME],
    scratch: &'l mut [u8; FRAME],
}

impl<L: Read + ReadReady + Write, D: DelayNs, const FRAME: usize> Reducer
    for LinkReducer<'_, L, D, FRAME>
{
    fn reduce(&mut self, round: u32, op: ReduceOp, data: &mut [u8]) -> Result<(), ErrorCode> {
        let ask = Envelope {
            seq: self.seq,
            body: Response::Reduce { round, op, data },
        };
        let n =
            encode_frame(&ask, self.scratch, self.frame).map_err(|_| ErrorCode::ReplyTooLarge)?;
        for _ in 0..REDUCE_ATTEMPTS {
            self.link
                .write_all(&self.frame[..n])
                .map_err(|_| ErrorCode::ReduceTimeout)?;
            let _ = self.link.flush();
            let mut waited = 0;
            while waited < REDUCE_DEADLINE_MS {
                if !self
                    .link
                    .read_ready()
                    .map_err(|_| ErrorCode::ReduceTimeout)?
                {
                    self.delay.delay_ms(1);
                    waited += 1;
                    continue;
                }
                let mut byte = [0u8; 1];
                if self
                    .link
                    .read(&mut byte)
                    .map_err(|_| ErrorCode::ReduceTimeout)?
                    == 0
                {
                    return Err(ErrorCode::ReduceTimeout);
                }
                let Some(Ok(body)) = self.decoder.push(byte[0]) else {
                    continue;
                };
                match decode_body::<Envelope<Request<'_>>>(body) {
                    Ok(Envelope {
                        body: Request::Reduced { data: combined },
                        ..
                    }) if combined.len() == data.len() => {
                        data.copy_from_slice(combined);
                        return Ok(());
                    }
                    Ok(Envelope {
                        body: Request::Reduced { .. },
                        ..
                    }) => return Err(ErrorCode::UnexpectedReduced),
                    // A retry of the step itself: the host missed our contribution.
                    Ok(Envelope { seq, .. }) if seq == self.seq => {
                        self.link
                            .write_all(&self.frame[..n])
                            .map_err(|_| ErrorCode::ReduceTimeout)?;
                    }
                    _ => {}
                }
            }
        }
        Err(ErrorCode::ReduceTimeout)
    }
}
