//! Host placements of a device: a byte link over any std reader and writer (a socket to the
//! host in the same process, or stdin/stdout in a child process), a message queue between
//! threads (no framing), a clock on `Instant`, and busy lines: one nobody watches, and one
//! the host reads to tell a device that is working from one that is gone.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use std::vec;
use std::vec::Vec;

use embedded_io::{ErrorType, Read, ReadReady, Write};

use crate::link::{Incoming, Messages};

/// How long a thread waiting for a message keeps looking (yielding its core between looks)
/// before it sleeps. Waking a sleeping thread costs tens of microseconds on a small virtual
/// machine, more than a whole request: while traffic flows, both ends stay awake; an idle
/// end sleeps after this long.
///
/// The yield is what makes the spin cheap: a waiting thread hands its core to one that has
/// work (spinning without yielding starved the device threads that work, and sleeping at
/// once ran the default job at a tenth of the speed; the train bench's figures are in the
/// README, "A program"). The cost that remains is the number of messages a step exchanges,
/// not how each is waited for.
pub const SPIN: Duration = Duration::from_micros(200);

/// The next item on `incoming` within `limit` (`None`: wait as long as it takes): looked for
/// without sleeping for up to `spin`, then waited for asleep.
pub fn receive_spinning<T>(
    incoming: &Receiver<T>,
    limit: Option<Duration>,
    spin: Duration,
) -> Result<T, RecvTimeoutError> {
    let spin = limit.map_or(spin, |limit| limit.min(spin));
    // The clock is read once the first look finds nothing.
    let mut begun = None;
    let start = loop {
        match incoming.try_recv() {
            Ok(item) => return Ok(item),
            Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
            Err(TryRecvError::Empty) => {}
        }
        let start = *begun.get_or_insert_with(Instant::now);
        if start.elapsed() >= spin {
            break start;
        }
        thread::yield_now();
    };
    match limit {
        None => incoming.recv().map_err(|_| RecvTimeoutError::Disconnected),
        Some(limit) => incoming.recv_timeout(limit.saturating_sub(start.elapsed())),
    }
}

/// A link whose reads come from a background thread, so that `read_ready` can answer
/// without blocking on any kind of reader.
pub struct StdLink<W> {
    incoming: Receiver<Vec<u8>>,
    pending: Vec<u8>,
    at: usize,
    writer: W,
}

impl<W: io::Write> StdLink<W> {
    /// Reads `reader` on a thread of its own; writes go straight to `writer`.
    pub fn new<R: io::Read + Send + 'static>(mut reader: R, writer: W) -> Self {
        let (tx, incoming) = mpsc::sync_channel(64);
        thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            // Ends at end of file, on a read error, or when the link is dropped.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                if tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Self::on_chunks(incoming, writer)
    }

    /// A link whose bytes arrive already in chunks on `incoming` (a queue another thread
    /// feeds): no reader thread of its own between them and the device.
    pub fn on_chunks(incoming: Receiver<Vec<u8>>, writer: W) -> Self {
        Self {
            incoming,
            pending: Vec::new(),
            at: 0,
            writer,
        }
    }
}

impl<W> core::fmt::Debug for StdLink<W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StdLink")
            .field("pending", &(self.pending.len() - self.at))
            .finish_non_exhaustive()
    }
}

impl<W> ErrorType for StdLink<W> {
    type Error = io::Error;
}

impl<W: io::Write> Read for StdLink<W> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, io::Error> {
        if self.at == self.pending.len() {
            match receive_spinning(&self.incoming, None, SPIN) {
                Ok(chunk) => {
                    self.pending = chunk;
                    self.at = 0;
                }
                Err(_) => return Ok(0), // the reader ended: end of file
            }
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl<W: io::Write> ReadReady for StdLink<W> {
    fn read_ready(&mut self) -> Result<bool, io::Error> {
        if self.at < self.pending.len() {
            return Ok(true);
        }
        match self.incoming.try_recv() {
            Ok(chunk) => {
                self.pending = chunk;
                self.at = 0;
                Ok(true)
            }
            Err(TryRecvError::Empty) => Ok(false),
            // End of file is "ready": the next read returns 0.
            Err(TryRecvError::Disconnected) => Ok(true),
        }
    }
}

impl<W: io::Write> Write for StdLink<W> {
    fn write(&mut self, buf: &[u8]) -> Result<usize, io::Error> {
        self.writer.write(buf)
    }

    fn flush(&mut self) -> Result<(), io::Error> {
        self.writer.flush()
    }
}

/// Real time from `Instant`; its waits sleep the thread.
#[derive(Debug)]
pub struct StdClock {
    start: Instant,
}

impl Default for StdClock {
    fn default() -> Self {
        Self::new()
    }
}

impl StdClock {
    /// A clock starting now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }
}

impl embedded_hal::delay::DelayNs for StdClock {
    fn delay_ns(&mut self, ns: u32) {
        thread::sleep(Duration::from_nanos(u64::from(ns)));
    }
}

impl crate::clock::Clock for StdClock {
    fn now_ms(&mut self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// A busy line connected to nothing.
#[derive(Debug)]
pub struct NoPin;

impl embedded_hal::digital::ErrorType for NoPin {
    type Error = core::convert::Infallible;
}

impl embedded_hal::digital::OutputPin for NoPin {
    fn set_low(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    fn set_high(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// A busy line the host watches: high while the device runs a request. A device that is
/// silent while its line is high is working (a long kernel), not dead. Clones share the
/// line: the device drives one, the host reads another.
#[derive(Debug, Clone, Default)]
pub struct BusyLine(Arc<AtomicBool>);

impl BusyLine {
    /// True while the device runs a request.
    pub fn is_high(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl embedded_hal::digital::ErrorType for BusyLine {
    type Error = core::convert::Infallible;
}

impl embedded_hal::digital::OutputPin for BusyLine {
    fn set_low(&mut self) -> Result<(), Self::Error> {
        self.0.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn set_high(&mut self) -> Result<(), Self::Error> {
        self.0.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// Bytes that travel beside a message between threads: one buffer, shared, never copied on
/// the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bulk(pub Arc<Vec<u8>>);

impl AsRef<[u8]> for Bulk {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// One message between threads: its body, and perhaps bulk bytes beside it.
#[derive(Debug, Clone)]
pub struct Message {
    /// The encoded envelope.
    pub body: Vec<u8>,
    /// Bytes beside it.
    pub bulk: Option<Bulk>,
}

/// The least room a message's buffer is given: a reply sent back in it (a step's
/// contribution, for the default job's model) fits without another allocation.
pub const REPLY_ROOM: usize = 1024;

/// A link between threads of one process that carries whole messages: memory does not
/// corrupt, so there is no framing, no CRC and no per-byte work, and bulk bytes travel
/// beside the messages.
///
/// A message's buffer, once its body is copied out, carries the next message sent back when
/// it has the room: the host's thread allocates a buffer and frees it again, and the
/// device's side neither allocates nor frees one per message (a buffer freed by a thread
/// other than the one that allocated it takes the allocator's slow path). The host gives
/// its messages room for a reply ([`REPLY_ROOM`]).
#[derive(Debug)]
pub struct Queue {
    incoming: Receiver<Message>,
    outgoing: Sender<Message>,
    bulk: Option<Bulk>,
    /// The last message's buffer, for the next message sent.
    spare: Option<Vec<u8>>,
}

impl Queue {
    /// Files `message`: its bulk bytes aside, its body into `into` (its buffer kept).
    fn take(&mut self, message: Message, into: &mut [u8]) -> Incoming {
        self.bulk = message.bulk;
        let filed = match into.get_mut(..message.body.len()) {
            Some(to) => {
                to.copy_from_slice(&message.body);
                Incoming::Message(message.body.len())
            }
            None => Incoming::Damaged,
        };
        self.spare = Some(message.body);
        filed
    }

    /// Messages arrive on `incoming` and leave on `outgoing`.
    pub fn new(incoming: Receiver<Message>, outgoing: Sender<Message>) -> Self {
        Self {
            incoming,
            outgoing,
            bulk: None,
            spare: None,
        }
    }
}

impl Messages for Queue {
    type Error = io::Error;

    fn receive(&mut self, into: &mut [u8], wait: bool) -> Result<Incoming, io::Error> {
        let message = if wait {
            match receive_spinning(&self.incoming, None, SPIN) {
                Ok(message) => message,
                Err(_) => return Ok(Incoming::Closed),
            }
        } else {
            match self.incoming.try_recv() {
                Ok(message) => message,
                Err(TryRecvError::Empty) => return Ok(Incoming::Idle),
                Err(TryRecvError::Disconnected) => return Ok(Incoming::Closed),
            }
        };
        Ok(self.take(message, into))
    }

    fn receive_within(&mut self, into: &mut [u8], us: u32) -> Result<Option<Incoming>, io::Error> {
        Ok(Some(
            match receive_spinning(
                &self.incoming,
                Some(Duration::from_micros(u64::from(us))),
                SPIN,
            ) {
                Ok(message) => self.take(message, into),
                Err(RecvTimeoutError::Timeout) => Incoming::Idle,
                Err(RecvTimeoutError::Disconnected) => Incoming::Closed,
            },
        ))
    }

    fn send(&mut self, body: &[u8]) -> Result<(), io::Error> {
        self.send_message(body, None)
    }

    fn bulk_capacity(&self) -> usize {
        usize::MAX
    }

    fn receive_bulk(&mut self, into: &mut [u8]) -> Result<bool, io::Error> {
        let Some(Bulk(bytes)) = self.bulk.take() else {
            return Ok(false);
        };
        match bytes.get(..into.len()) {
            Some(from) => {
                into.copy_from_slice(from);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn send_bulk(&mut self, body: &[u8], bulk: &[u8]) -> Result<bool, io::Error> {
        // The one copy of a bulk read: the device's memory into a buffer the host keeps.
        self.send_message(body, Some(Bulk(Arc::new(bulk.to_vec()))))?;
        Ok(true)
    }
}

impl Queue {
    fn send_message(&mut self, body: &[u8], bulk: Option<Bulk>) -> Result<(), io::Error> {
        let buffer = match self.spare.take() {
            // Never grown: a reallocation costs more than the allocation it saves.
            Some(mut spare) if spare.capacity() >= body.len() => {
                spare.clear();
                spare.extend_from_slice(body);
                spare
            }
            _ => body.to_vec(),
        };
        self.outgoing
            .send(Message { body: buffer, bulk })
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::vec::Vec;

    use super::{Message, Queue, REPLY_ROOM};
    use crate::link::{Incoming, Messages};

    /// Catches a queue that allocates a buffer for every message it sends (and frees every
    /// one it receives on the device's thread): a reply that fits goes back in the buffer
    /// its request came in, and one that does not still arrives whole, in a buffer of its
    /// own.
    #[test]
    fn a_reply_goes_back_in_its_request_buffer_when_it_fits() {
        let (to_device, incoming) = mpsc::channel();
        let (outgoing, from_device) = mpsc::channel();
        let mut queue = Queue::new(incoming, outgoing);
        let mut body = Vec::with_capacity(REPLY_ROOM);
        body.extend_from_slice(b"request");
        let sent = body.as_ptr();
        to_device.send(Message { body, bulk: None }).unwrap();
        let mut into = [0u8; 64];
        assert_eq!(
            queue.receive(&mut into, false).unwrap(),
            Incoming::Message(7)
        );
        assert_eq!(&into[..7], b"request");
        queue.send(&[9; 600]).unwrap();
        let reply = from_device.try_recv().unwrap();
        assert_eq!(reply.body, [9; 600]);
        assert_eq!(reply.body.as_ptr(), sent, "the request's buffer");
        // A request's buffer too small for the reply: the reply gets one of its own.
        let tiny = b"tiny".to_vec();
        let small = tiny.as_ptr();
        to_device
            .send(Message {
                body: tiny,
                bulk: None,
            })
            .unwrap();
        assert_eq!(
            queue.receive(&mut into, false).unwrap(),
            Incoming::Message(4)
        );
        queue.send(&[5; 600]).unwrap();
        let reply = from_device.try_recv().unwrap();
        assert_eq!(reply.body, [5; 600]);
        assert_ne!(reply.body.as_ptr(), small);
    }
}
