//! The device's link to its host, one message at a time.
//!
//! [`Messages`] is what the serve loop needs: the next message body (waiting for it or
//! not) and a way to send one. Two kinds of link provide it:
//!
//! - [`Framed`], over any byte link (`embedded-io`: a UART, a pipe, a socket): frames are
//!   CRC-32 + COBS + `0x00`, decoded in a fixed buffer that resynchronises at every
//!   delimiter, so damage costs only the damaged frame. Every frame it sends starts with a
//!   delimiter (ending whatever garbage the host's decoder holds) and is flushed at once (a
//!   buffered link must not hold a reply back until the next frame). Bytes read together
//!   with a message wait in its inbox for the next call: none is set aside.
//! - a message queue between threads of one process (the host's, which implements
//!   [`Messages`] from its side: tessera-host's `transport::queue`): memory does not
//!   corrupt, so bodies move as they are, without framing, and bulk bytes (a whole array)
//!   travel beside them as one buffer handed over: one copy between the host's array and
//!   the device's memory, whatever the size.
//!
//! A third kind wraps [`Framed`] and carries bulk bytes through a window both sides can
//! reach (shared memory for a child process, a host file for QEMU); a bulk write's bytes
//! are copied from it straight into the register they are for.

use embedded_io::{Read, ReadReady, Write};
use tessera_core::wire::{frame_body, FrameDecoder};

/// What a device's link can carry, announced in its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkLimits {
    /// Largest frame, delimiter included.
    pub max_frame: usize,
    /// Requests the host may have outstanding (replies kept for retries).
    pub window: u16,
}

/// What one look at the link found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    /// A message of this many bytes, copied into the caller's buffer.
    Message(usize),
    /// A damaged frame, or a message too long for the buffer: dropped.
    Damaged,
    /// Nothing yet (only when not waiting).
    Idle,
    /// The host has gone: end of link.
    Closed,
}

/// A link that carries whole messages, and perhaps bulk bytes beside them.
pub trait Messages {
    /// Why the link failed.
    type Error: core::fmt::Debug;
    /// The next message, copied into `into`; with `wait`, blocks until something arrives.
    fn receive(&mut self, into: &mut [u8], wait: bool) -> Result<Incoming, Self::Error>;
    /// Like `receive(into, false)`, but waiting up to `us` microseconds for a message to
    /// arrive, woken by its arrival. `None` when this link cannot wait that way (the
    /// caller then polls and sleeps between looks).
    fn receive_within(
        &mut self,
        into: &mut [u8],
        us: u32,
    ) -> Result<Option<Incoming>, Self::Error> {
        let _ = (into, us);
        Ok(None)
    }
    /// Sends one message (flushed).
    fn send(&mut self, body: &[u8]) -> Result<(), Self::Error>;
    /// The most bulk bytes this link carries beside one message (0: none).
    fn bulk_capacity(&self) -> usize {
        0
    }
    /// True when this link carries bulk bytes beside messages.
    fn carries_bulk(&self) -> bool {
        self.bulk_capacity() > 0
    }
    /// Copies the bulk bytes that came beside the last message received into `into`,
    /// which has the length the message named; `false` if none came, or too few.
    fn receive_bulk(&mut self, into: &mut [u8]) -> Result<bool, Self::Error> {
        let _ = into;
        Ok(false)
    }
    /// Sends `body` with `bulk` beside it; `false` (and nothing sent) when the link cannot
    /// carry these bytes.
    fn send_bulk(&mut self, body: &[u8], bulk: &[u8]) -> Result<bool, Self::Error> {
        let _ = (body, bulk);
        Ok(false)
    }
}

/// Bytes taken from the link per read.
const INBOX: usize = 4096;

/// The framing state of a byte link: the decoder, the bytes read but not yet decoded, and
/// the buffer frames are encoded into (`FRAME` bytes each).
pub struct Framing<const FRAME: usize> {
    decoder: FrameDecoder<FRAME>,
    inbox: [u8; INBOX],
    at: usize,
    len: usize,
    out: [u8; FRAME],
}

impl<const FRAME: usize> Default for Framing<FRAME> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const FRAME: usize> core::fmt::Debug for Framing<FRAME> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Framing")
            .field("held", &(self.len - self.at))
            .finish_non_exhaustive()
    }
}

impl<const FRAME: usize> Framing<FRAME> {
    /// Nothing held.
    pub const fn new() -> Self {
        Self {
            decoder: FrameDecoder::new(),
            inbox: [0; INBOX],
            at: 0,
            len: 0,
            out: [0; FRAME],
        }
    }
}

/// [`Messages`] over the byte link `L`, framed.
#[derive(Debug)]
pub struct Framed<'f, L, const FRAME: usize> {
    /// The byte link.
    pub link: &'f mut L,
    /// Its framing state.
    pub framing: &'f mut Framing<FRAME>,
}

impl<L: Read + ReadReady + Write, const FRAME: usize> Messages for Framed<'_, L, FRAME> {
    type Error = L::Error;

    fn receive(&mut self, into: &mut [u8], wait: bool) -> Result<Incoming, L::Error> {
        let f = &mut *self.framing;
        loop {
            if f.at >= f.len {
                if !wait && !self.link.read_ready()? {
                    return Ok(Incoming::Idle);
                }
                let n = self.link.read(&mut f.inbox)?;
                if n == 0 {
                    return Ok(Incoming::Closed);
                }
                f.at = 0;
                f.len = n.min(INBOX);
            }
            // `at < len <= INBOX` here; were it not, the bytes are dropped (no panic path).
            let Some(pending) = f.inbox.get(f.at..f.len) else {
                f.at = f.len;
                continue;
            };
            let (used, frame) = f.decoder.feed(pending);
            f.at += used;
            match frame {
                None => continue,
                Some(Err(_)) => return Ok(Incoming::Damaged),
                Some(Ok(body)) => {
                    let to = into.get_mut(..body.len());
                    return Ok(if to.is_some_and(|to| crate::copy_exact(to, body)) {
                        Incoming::Message(body.len())
                    } else {
                        Incoming::Damaged
                    });
                }
            }
        }
    }

    fn send(&mut self, body: &[u8]) -> Result<(), L::Error> {
        let out = &mut self.framing.out;
        // out[0] is the delimiter that ends whatever the host's decoder holds. A body too
        // long to frame cannot happen (the server caps replies at its frame); if it did,
        // only the delimiter would go out and the host would retry.
        let n = match out.split_first_mut() {
            Some((first, rest)) => {
                *first = 0;
                1 + frame_body(body, rest).unwrap_or(0)
            }
            None => 0,
        };
        self.link.write_all(out.get(..n).unwrap_or_default())?;
        self.link.flush()
    }
}
