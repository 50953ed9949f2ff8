//! Where a channel's messages come from: a queue (a device thread's, or a byte link's
//! decoded by a reader thread), a pooled device's queue read while the host serves the
//! pool's ready devices (see `spawn::pool`), a child process's stdout read in place, or
//! the chunks of a link between ranks (`transport::tunnel`), decoded in place as they come
//! off the post office's queue: a reader thread between them slept on that queue and was
//! woken for nearly every reply, a switch of threads added to every round trip across
//! ranks.
//!
//! A reader thread blocked on a child's pipe is woken by the kernel for every reply (tens
//! of microseconds on a small virtual machine) before the channel sees it: reading the pipe
//! in place, the channel's own thread looks for bytes as every wait does (yielding between
//! looks for up to the channel's spin) and then sleeps in `poll` until they come.
//! Damaged frames are dropped as the reader thread drops them (the request is retried).
//! A device of a process share speaks on a message ring in shared memory instead: looked
//! at by a load, slept on by a futex (`transport::ring`); a wait on a ring stops yielding
//! and sleeps while its core is contended (`transport::contention`).

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_core::wire::FrameDecoder;

use super::contention::{may_yield, yield_core};
use super::pipe_link::Pipe;
use super::queue::Message;
use super::reader::MAX_FRAME;
use super::ring::{Received, RingError, RingReceiver};
use super::spawn::Pool;
use super::spin::receive_spinning;

/// A channel's source of messages.
pub(super) enum Frames {
    /// Whole messages on a queue.
    Queue(Receiver<Message>),
    /// A pooled device's queue, the pool's ready devices served while waiting on it.
    Served(Receiver<Message>, Arc<Pool>),
    /// Frames read in place from a pipe.
    Pipe(Box<PipeFrames>),
    /// Messages on a ring from a device of a process share.
    Ring(Box<RingFrames>),
    /// Frames in the chunks a link between ranks delivers, decoded in place.
    #[cfg(feature = "mpi")]
    Chunks(Box<ChunkFrames>),
}

impl Frames {
    /// The next message before the time `until` gives (`None`: as long as it takes),
    /// looked for without sleeping for up to `spin` first (on a ring, while its core is not
    /// contended: `transport::contention`); `Disconnected` once the device's end is gone.
    /// `until` is asked at most once, and on a queue (a device thread's) only once a look
    /// finds nothing: a message already there is taken without reading the clock (most
    /// are: a step's replies arrive while the host serves the devices, a pipelined
    /// sender's while it sends).
    pub(super) fn receive(
        &mut self,
        until: impl FnOnce() -> Option<Instant>,
        spin: Duration,
    ) -> Result<Message, RecvTimeoutError> {
        let left =
            |until: Option<Instant>| until.map(|u| u.saturating_duration_since(Instant::now()));
        match self {
            Self::Queue(queue) => match queue.try_recv() {
                Ok(message) => Ok(message),
                Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => receive_spinning(queue, left(until()), spin),
            },
            Self::Served(queue, pool) => receive_serving(queue, pool, until, spin),
            Self::Pipe(pipe) => pipe.receive(left(until())),
            Self::Ring(ring) => ring.receive(left(until()), spin),
            #[cfg(feature = "mpi")]
            Self::Chunks(chunks) => chunks.receive(until(), spin),
        }
    }

    /// The rule a ring from the device broke, once one has: its channel reports that
    /// instead of a closed link (`None` for every other source, and for a ring that holds).
    pub(super) fn broken(&self) -> Option<RingError> {
        match self {
            Self::Ring(ring) => ring.broken,
            _ => None,
        }
    }

    /// Messages from device `replica` on `ring`; `process` is its process's stdout, which
    /// ends when the process does.
    pub(super) fn ring(
        ring: RingReceiver,
        process: OwnedFd,
        replica: u32,
    ) -> std::io::Result<Self> {
        Ok(Self::Ring(Box::new(RingFrames {
            ring,
            process: Pipe::new(process)?,
            scratch: vec![0; MAX_FRAME],
            replica,
            broken: None,
        })))
    }

    /// Frames from device `replica` in the chunks arriving on `chunks`, decoded in place.
    #[cfg(feature = "mpi")]
    pub(super) fn chunks(chunks: Receiver<Vec<u8>>, replica: u32) -> Self {
        Self::Chunks(Box::new(ChunkFrames {
            chunks,
            decoder: Box::new(FrameDecoder::new()),
            ready: VecDeque::new(),
            replica,
        }))
    }

    /// Frames from device `replica` on `pipe`, read in place.
    pub(super) fn pipe(pipe: OwnedFd, replica: u32) -> std::io::Result<Self> {
        Ok(Self::Pipe(Box::new(PipeFrames {
            pipe: Pipe::new(pipe)?,
            decoder: Box::new(FrameDecoder::new()),
            ready: VecDeque::new(),
            replica,
        })))
    }
}

/// The longest the host sleeps on one queue, past its spin, before serving the pool again:
/// a pooled device has mail only from the host itself, so a nap is never what a device
/// waits for (the pool's threads serve what is ready meanwhile); the bound only keeps a
/// wait that outlives the spin from leaving the pool to them long.
const NAP: Duration = Duration::from_millis(1);

/// The next message on `queue` before `until` (`None`: as long as it takes), serving the
/// `pool`'s ready devices, one at a time, between looks: the message may come from a
/// device this wait serves, or from one a pool thread serves meanwhile. Looks without
/// sleeping (yielding between looks when there is nothing to serve) for up to `spin`, then
/// naps on the queue at most [`NAP`] at a time.
fn receive_serving(
    queue: &Receiver<Message>,
    pool: &Pool,
    until: impl FnOnce() -> Option<Instant>,
    spin: Duration,
) -> Result<Message, RecvTimeoutError> {
    // The wait begins at its first look that finds nothing and serves nothing: its start
    // and `until` are read then.
    let mut until = Some(until);
    let mut begun = None;
    loop {
        match queue.try_recv() {
            Ok(message) => return Ok(message),
            Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
            Err(TryRecvError::Empty) => {}
        }
        if pool.serve_one() {
            // A device replied or moved on: look again at once.
            continue;
        }
        let (start, limit) = *begun.get_or_insert_with(|| {
            let start = Instant::now();
            let until = until.take().and_then(|until| until());
            (start, until.map(|u| u.saturating_duration_since(start)))
        });
        let AfterLook::Sleep(left) = after_look(start, limit, spin, Peer::Pool)? else {
            continue;
        };
        match queue.recv_timeout(left.map_or(NAP, |l| l.min(NAP))) {
            Ok(message) => return Ok(message),
            Err(RecvTimeoutError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// How long a channel sleeps on a ring before it looks whether the device's process is
/// still there (a killed process never closes its rings).
const PROCESS_CHECK: Duration = Duration::from_millis(10);

/// A ring from a device of a process share, its process's stdout, and a message's room.
pub(super) struct RingFrames {
    ring: RingReceiver,
    process: Pipe<OwnedFd>,
    scratch: Vec<u8>,
    replica: u32,
    /// The rule the ring broke, once it has: nothing more is read from it (what follows a
    /// broken counter or length cannot be trusted), and every receive says it is gone.
    broken: Option<RingError>,
}

impl RingFrames {
    /// The next message within `limit` (`None`: as long as it takes): looked for without
    /// sleeping for up to `spin` (a load a look) while the core is not contended
    /// (`transport::contention`), then asleep on the ring's bell, waking at least every
    /// [`PROCESS_CHECK`] to see whether the device's process has gone.
    fn receive(
        &mut self,
        limit: Option<Duration>,
        spin: Duration,
    ) -> Result<Message, RecvTimeoutError> {
        let start = Instant::now();
        if self.broken.is_some() {
            return Err(RecvTimeoutError::Disconnected);
        }
        loop {
            match self.ring.receive(&mut self.scratch) {
                Ok(Received::Message(n)) => return Ok(Message::alone(self.scratch[..n].to_vec())),
                Ok(Received::Closed) => return Err(RecvTimeoutError::Disconnected),
                Ok(Received::Empty) => {}
                // Dropped as a damaged frame is: the request is retried.
                Err(e @ RingError::TooLong { .. }) => {
                    tracing::debug!(replica = self.replica, error = %e, "dropped a message");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(replica = self.replica, error = %e, "the device's ring broke");
                    self.broken = Some(e);
                    return Err(RecvTimeoutError::Disconnected);
                }
            }
            let AfterLook::Sleep(left) = after_look(start, limit, spin, Peer::ProcessShare)? else {
                continue;
            };
            if self.process_gone() {
                return Err(RecvTimeoutError::Disconnected);
            }
            self.ring
                .sleep(Some(left.map_or(PROCESS_CHECK, |l| l.min(PROCESS_CHECK))));
        }
    }

    /// True once the device's process has gone (its stdout has ended); what it may have
    /// written there is dropped.
    fn process_gone(&mut self) -> bool {
        match self.process.fill() {
            Ok(true) => {
                let n = self.process.buffered().len();
                self.process.consume(n);
                self.process.ended()
            }
            Ok(false) => false,
            Err(_) => true,
        }
    }
}

/// What a wait does after a look that found nothing.
enum AfterLook {
    /// Look again: the core was yielded once (the spin lasts).
    Look,
    /// Sleep for at most this long (`None`: no limit), then look again.
    Sleep(Option<Duration>),
}

/// Whom a wait waits for, which decides how it gives up its core between looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    /// The devices of this process's pool: the core is yielded.
    Pool,
    /// A device of a process share: the core is yielded while it is free, and the wait
    /// sleeps while it is contended (`transport::contention`).
    ProcessShare,
}

/// The rule of every wait here, after a look that found nothing, in a wait begun at
/// `start` for at most `limit` (`None`: as long as it takes) on `peer`: a timeout once the
/// limit has passed; while `spin` lasts, yield the core and look again (on a process
/// share, only while the core is not contended); then sleep.
fn after_look(
    start: Instant,
    limit: Option<Duration>,
    spin: Duration,
    peer: Peer,
) -> Result<AfterLook, RecvTimeoutError> {
    let waited = start.elapsed();
    let left = limit.map(|l| l.saturating_sub(waited));
    if left == Some(Duration::ZERO) {
        return Err(RecvTimeoutError::Timeout);
    }
    if waited < spin {
        match peer {
            Peer::Pool => std::thread::yield_now(),
            Peer::ProcessShare if may_yield() => yield_core(),
            Peer::ProcessShare => return Ok(AfterLook::Sleep(left)),
        }
        return Ok(AfterLook::Look);
    }
    Ok(AfterLook::Sleep(left))
}

/// A pipe's bytes, the frame being decoded, and the messages decoded and not yet taken.
pub(super) struct PipeFrames {
    pipe: Pipe<OwnedFd>,
    decoder: Box<FrameDecoder<MAX_FRAME>>,
    ready: VecDeque<Message>,
    replica: u32,
}

impl PipeFrames {
    fn receive(&mut self, limit: Option<Duration>) -> Result<Message, RecvTimeoutError> {
        let start = Instant::now();
        loop {
            if let Some(message) = self.ready.pop_front() {
                return Ok(message);
            }
            if self.pipe.ended() {
                return Err(RecvTimeoutError::Disconnected);
            }
            let left = limit.map(|l| l.saturating_sub(start.elapsed()));
            match self.pipe.wait_readable(left) {
                Ok(true) => self.decode(),
                Ok(false) => return Err(RecvTimeoutError::Timeout),
                Err(e) => {
                    tracing::debug!(replica = self.replica, error = %e, "the device's pipe failed");
                    return Err(RecvTimeoutError::Disconnected);
                }
            }
        }
    }

    /// Decodes every byte read so far into `ready`.
    fn decode(&mut self) {
        let mut rest = self.pipe.buffered();
        let total = rest.len();
        while !rest.is_empty() {
            let (used, frame) = self.decoder.feed(rest);
            rest = &rest[used..];
            match frame {
                Some(Ok(body)) => self.ready.push_back(Message::alone(body.to_vec())),
                Some(Err(e)) => {
                    tracing::debug!(replica = self.replica, error = %e, "dropped a damaged frame")
                }
                None => {}
            }
        }
        self.pipe.consume(total);
    }
}

/// A link's chunks (as the other rank wrote them: a frame may span chunks, a chunk hold
/// several frames), the frames decoded so far and not yet taken.
#[cfg(feature = "mpi")]
pub(super) struct ChunkFrames {
    chunks: Receiver<Vec<u8>>,
    decoder: Box<FrameDecoder<MAX_FRAME>>,
    ready: VecDeque<Message>,
    replica: u32,
}

#[cfg(feature = "mpi")]
impl ChunkFrames {
    /// The next message before `until`: each chunk waited for as every wait on a queue is
    /// (`spin`, then asleep).
    fn receive(
        &mut self,
        until: Option<Instant>,
        spin: Duration,
    ) -> Result<Message, RecvTimeoutError> {
        loop {
            if let Some(message) = self.ready.pop_front() {
                return Ok(message);
            }
            let left = until.map(|u| u.saturating_duration_since(Instant::now()));
            let chunk = match self.chunks.try_recv() {
                Ok(chunk) => chunk,
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => receive_spinning(&self.chunks, left, spin)?,
            };
            let mut rest = &chunk[..];
            while !rest.is_empty() {
                let (used, frame) = self.decoder.feed(rest);
                rest = &rest[used..];
                match frame {
                    Some(Ok(body)) => self.ready.push_back(Message::alone(body.to_vec())),
                    Some(Err(e)) => {
                        tracing::debug!(replica = self.replica, error = %e, "dropped a damaged frame")
                    }
                    None => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    use tessera_core::wire::frame::frame_body;

    use super::*;

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; body.len() * 2 + 16];
        let n = frame_body(body, &mut out).unwrap();
        out.truncate(n);
        out
    }

    /// Catches a broken ring reported as a closed link (the device's "hang-up" then hid
    /// which rule broke), and a receiver that reads on past a broken counter: the rule is
    /// kept, and every later receive fails at once without touching the ring.
    #[test]
    fn a_broken_ring_says_which_rule_broke_and_stays_broken() {
        use crate::transport::ring::{self, RingReceiver, OWN_BELL};
        use crate::transport::shared::SharedMemory;
        let mut memory = SharedMemory::create(ring::share_bytes(1)).unwrap();
        let (_, from_device) = ring::share_rings(0);
        let bell = from_device + OWN_BELL;
        let receiver = RingReceiver::new(memory.map_again().unwrap(), from_device, bell);
        let (_process, host) = UnixStream::pair().unwrap();
        let mut frames = Frames::ring(receiver.unwrap(), OwnedFd::from(host), 3).unwrap();
        let limit = || Some(Instant::now() + Duration::from_millis(5));
        assert!(matches!(
            frames.receive(limit, Duration::ZERO),
            Err(RecvTimeoutError::Timeout)
        ));
        assert_eq!(frames.broken(), None, "an empty ring is not broken");
        ring::break_counters(&mut memory, from_device);
        for _ in 0..2 {
            assert!(matches!(
                frames.receive(limit, Duration::ZERO),
                Err(RecvTimeoutError::Disconnected)
            ));
            assert!(
                matches!(frames.broken(), Some(RingError::Counters { .. })),
                "{:?}",
                frames.broken()
            );
        }
    }

    /// Catches a pipe reader that loses a frame split across reads, keeps a damaged one,
    /// or waits forever once the device is gone.
    #[test]
    fn frames_come_whole_in_order_and_the_end_is_seen() {
        let (mut device, host) = UnixStream::pair().unwrap();
        let mut frames = Frames::pipe(OwnedFd::from(host), 7).unwrap();
        let limit = || Some(Instant::now() + Duration::from_millis(5));
        let spin = Duration::ZERO;
        assert!(matches!(
            frames.receive(limit, spin),
            Err(RecvTimeoutError::Timeout)
        ));
        let (one, two) = (framed(b"first"), framed(b"second"));
        device.write_all(&one[..3]).unwrap();
        assert!(frames.receive(limit, spin).is_err(), "a frame in part");
        let mut damaged = framed(b"damaged");
        damaged[2] ^= 0x55;
        device.write_all(&one[3..]).unwrap();
        device.write_all(&damaged).unwrap();
        device.write_all(&two).unwrap();
        let long = || Some(Instant::now() + Duration::from_secs(5));
        assert_eq!(frames.receive(long, spin).unwrap().body, b"first");
        assert_eq!(frames.receive(long, spin).unwrap().body, b"second");
        drop(device);
        assert!(matches!(
            frames.receive(long, spin),
            Err(RecvTimeoutError::Disconnected)
        ));
    }

    /// Catches a link between ranks decoded as if each chunk were one frame: a frame split
    /// over two chunks, and two frames (one damaged) in one chunk, come out whole and in
    /// order, and the end of the chunks is the end of the link.
    #[cfg(feature = "mpi")]
    #[test]
    fn chunks_from_another_rank_come_out_as_whole_frames() {
        let (chunks, incoming) = std::sync::mpsc::channel();
        let mut frames = Frames::chunks(incoming, 5);
        let limit = || Some(Instant::now() + Duration::from_millis(5));
        let spin = Duration::ZERO;
        let (one, two) = (framed(b"first"), framed(b"second"));
        chunks.send(one[..3].to_vec()).unwrap();
        assert!(matches!(
            frames.receive(limit, spin),
            Err(RecvTimeoutError::Timeout)
        ));
        let mut damaged = framed(b"damaged");
        damaged[2] ^= 0x55;
        let rest = [&one[3..], &damaged[..], &two[..]].concat();
        chunks.send(rest).unwrap();
        assert_eq!(frames.receive(limit, spin).unwrap().body, b"first");
        assert_eq!(frames.receive(limit, spin).unwrap().body, b"second");
        drop(chunks);
        assert!(matches!(
            frames.receive(limit, spin),
            Err(RecvTimeoutError::Disconnected)
        ));
    }
}
