//! Message rings in shared memory: the link between the host and the devices of a process
//! share (`tessera devices`), one ring each way per device.
//!
//! On a pipe, every message costs a `write` and a `read` system call, besides the frame's
//! CRC and COBS; a look at an empty pipe costs a `read` too. On this project's 2-core VM
//! those calls were a fifth of a training step's samples on the child-process placement
//! (`perf`). A ring moves a message with two copies and two atomic stores, and a look is a
//! load: only a side about to sleep, and the side that wakes it, make a system call (a
//! futex). Memory does not corrupt, so messages move whole, without framing, as on a
//! device thread's queue.
//!
//! # Rules
//!
//! - One producer and one consumer per ring. A ring carries whole messages in order, each
//!   a 4-byte little-endian length and its body, wrapping at the end of the data.
//! - `head` (bytes ever written) is stored by the producer only, `tail` (bytes ever read)
//!   by the consumer only; each side stores its counter after its copy and loads the
//!   other's before its copy, so it copies only bytes the other has finished with.
//! - A message that does not fit the free space is refused ([`RingError::Full`]), never
//!   waited for: a device link's window keeps what is in flight under [`CAPACITY`] (and
//!   its channel sends nothing again while the ring holds unread bytes), so a full ring is
//!   a broken rule, reported.
//! - A consumer about to sleep raises its `asleep` word, reads its `bell`, and looks once
//!   more before it sleeps on the bell (a futex); a producer that has written and finds
//!   `asleep` raised adds one to the bell and wakes it. Every one of these accesses is
//!   sequentially consistent: either the consumer's last look sees the message, or the
//!   producer sees `asleep` — no wake-up is lost. Several rings may share one bell (the
//!   device process sleeps on its share's doorbell, woken by a message on any ring).
//! - The producer's end dropping marks the ring closed and rings the bell: the consumer
//!   reads what is left, then sees the end ([`Received::Closed`]). A producer that dies
//!   without dropping (killed) is seen by other means (the device process's stdout).

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use rustix::io::Errno;
use rustix::thread::futex;

use super::device::{HOST_FRAME, HOST_WINDOW};
use super::shared::{RingMemory, SharedMemory};

/// Bytes of a ring's header: its counters, its end, and its consumer's own bell.
const HEADER: usize = 64;
const HEAD: usize = 0;
const TAIL: usize = 8;
const CLOSED: usize = 16;
/// Where a ring's own bell is, from its start: for a consumer that waits on this ring
/// alone (the host).
pub(crate) const OWN_BELL: usize = 24;
/// A bell's `asleep` word follows its counter.
const ASLEEP: usize = 4;

/// Bytes of a ring's data: the requests a device link keeps in flight, each of the largest
/// frame, and two more (a step's contribution beside them, and room to spare).
const CAPACITY: usize = ((HOST_WINDOW + 2) * (4 + HOST_FRAME)).next_multiple_of(64);
/// Bytes of a ring, header and data.
const RING_BYTES: usize = HEADER + CAPACITY;

/// A process share's doorbell, at the start of its shared memory: the device process
/// sleeps on it, and the host rings it when it writes to any of the share's rings.
pub(crate) const DOORBELL: usize = 0;

/// Bytes of a process share's shared memory for `devices` devices: its doorbell, then
/// each device's two rings.
pub(crate) fn share_bytes(devices: usize) -> usize {
    HEADER + devices * 2 * RING_BYTES
}

/// Where device `index` of a process share has its rings: the one to it (its consumer
/// sleeps on the doorbell), the one from it (its consumer, the host, on the ring's own
/// bell).
pub(crate) fn share_rings(index: usize) -> (usize, usize) {
    let to_device = HEADER + index * 2 * RING_BYTES;
    (to_device, to_device + RING_BYTES)
}

/// Why a ring refused a message, or what it found broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The message (length word included) does not fit the free space.
    #[error("a message of {bytes} bytes does not fit the ring's {free} free bytes")]
    Full {
        /// Bytes the message takes.
        bytes: usize,
        /// Bytes free.
        free: usize,
    },
    /// The next message is longer than the buffer it is to be copied into: it was skipped.
    #[error("a message of {length} bytes is longer than the {room} bytes it is read into")]
    TooLong {
        /// The message's length.
        length: usize,
        /// The buffer's.
        room: usize,
    },
    /// The counters say more is unread than the ring holds, or less than nothing: the
    /// other side broke the rules (or the memory is not a ring).
    #[error("its counters say {written} bytes written and {read} read, past its capacity")]
    Counters {
        /// Bytes ever written.
        written: u64,
        /// Bytes ever read.
        read: u64,
    },
    /// The unread bytes are fewer than a length word.
    #[error("{available} bytes unread, fewer than a message's length word")]
    Truncated {
        /// Bytes unread.
        available: usize,
    },
    /// A length word names more bytes than were written.
    #[error("the ring names a message of {length} bytes where {available} bytes are written")]
    Corrupt {
        /// The length it names.
        length: usize,
        /// Bytes unread, its own 4 included.
        available: usize,
    },
    /// The ring does not lie in its memory (`RingSender::new` and `RingReceiver::new`
    /// refuse such a ring: this cannot come from one they made).
    #[error("the ring does not lie in its shared memory")]
    Misplaced,
}

impl From<RingError> for io::Error {
    fn from(e: RingError) -> Self {
        io::Error::other(e)
    }
}

/// What one look at a ring found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Received {
    /// A message of this many bytes, copied into the caller's buffer.
    Message(usize),
    /// Nothing yet.
    Empty,
    /// The producer's end has gone and every message was read.
    Closed,
}

/// A ring at `at` of a mapping, and where its consumer's bell is.
struct Ring {
    mem: RingMemory,
    at: usize,
    bell: usize,
}

/// A ring's atomic words, borrowed from its mapping for one operation.
struct Words<'m> {
    head: &'m AtomicU64,
    tail: &'m AtomicU64,
    closed: &'m AtomicU32,
    bell: Bell<'m>,
}

impl Words<'_> {
    /// Bytes written and not yet read, checked against the capacity.
    fn pending(&self) -> Result<usize, RingError> {
        let (head, tail) = (self.head.load(SeqCst), self.tail.load(SeqCst));
        match head.checked_sub(tail).and_then(|n| usize::try_from(n).ok()) {
            Some(n) if n <= CAPACITY => Ok(n),
            _ => Err(RingError::Counters {
                written: head,
                read: tail,
            }),
        }
    }
}

impl Ring {
    /// The ring at `at` of `mem`, whose consumer sleeps on the bell at `bell`; an error
    /// unless both lie in the mapping, aligned.
    fn new(mem: SharedMemory, at: usize, bell: usize) -> io::Result<Self> {
        let ring = Self {
            mem: RingMemory::new(mem),
            at,
            bell,
        };
        let fits = at
            .checked_add(RING_BYTES)
            .is_some_and(|end| end <= ring.mem.len())
            && at.is_multiple_of(64)
            && ring.words().is_ok();
        if !fits {
            return Err(io::Error::other(format!(
                "a ring at byte {at} (bell at {bell}) does not fit {} bytes of shared memory",
                ring.mem.len()
            )));
        }
        Ok(ring)
    }

    /// Its words; an error only if `Ring::new` would have refused the ring.
    fn words(&self) -> Result<Words<'_>, RingError> {
        let words = (|| {
            Some(Words {
                head: self.mem.atomic_u64(self.at + HEAD)?,
                tail: self.mem.atomic_u64(self.at + TAIL)?,
                closed: self.mem.atomic_u32(self.at + CLOSED)?,
                bell: Bell::at(&self.mem, self.bell)?,
            })
        })();
        words.ok_or(RingError::Misplaced)
    }

    /// Copies `data` into the ring's data at stream position `position`, wrapping.
    fn copy_in(&mut self, position: u64, data: &[u8]) -> Result<(), RingError> {
        let start = (position % CAPACITY as u64) as usize;
        let first = data.len().min(CAPACITY - start);
        let base = self.at + HEADER;
        let copied = self.mem.copy_in(base + start, &data[..first])
            && self.mem.copy_in(base, &data[first..]);
        copied.then_some(()).ok_or(RingError::Misplaced)
    }

    /// Copies the ring's data at stream position `position` into `into`, wrapping.
    fn copy_out(&self, position: u64, into: &mut [u8]) -> Result<(), RingError> {
        let start = (position % CAPACITY as u64) as usize;
        let first = into.len().min(CAPACITY - start);
        let base = self.at + HEADER;
        let (a, b) = into.split_at_mut(first);
        let copied = self.mem.copy_out(base + start, a) && self.mem.copy_out(base, b);
        copied.then_some(()).ok_or(RingError::Misplaced)
    }
}

/// A consumer's bell: a counter the producer bumps and an `asleep` word, both futex-sized.
pub(crate) struct Bell<'m> {
    rung: &'m AtomicU32,
    asleep: &'m AtomicU32,
}

impl<'m> Bell<'m> {
    /// The bell at `at` of `mem` (a share's doorbell); `None` unless it lies in `mem`,
    /// aligned.
    pub(crate) fn at(mem: &'m RingMemory, at: usize) -> Option<Self> {
        Some(Self {
            rung: mem.atomic_u32(at)?,
            asleep: mem.atomic_u32(at.checked_add(ASLEEP)?)?,
        })
    }

    /// Sleeps until the bell rings or `limit` passes, unless `ready` says there is
    /// something to read once the consumer has said it is asleep (module rules).
    pub(crate) fn sleep(&self, limit: Option<Duration>, ready: impl Fn() -> bool) {
        self.asleep.store(1, SeqCst);
        let rung = self.rung.load(SeqCst);
        if !ready() {
            let timeout = limit.and_then(|l| futex::Timespec::try_from(l).ok());
            // A changed bell (EAGAIN), a signal or the timeout all end the sleep alike:
            // the caller looks again. Anything else means no sleep is possible: said once
            // per sleep, and the caller looks again all the same.
            match futex::wait(self.rung, futex::Flags::empty(), rung, timeout.as_ref()) {
                Ok(()) | Err(Errno::AGAIN | Errno::INTR | Errno::TIMEDOUT) => {}
                Err(e) => tracing::warn!(error = %e, "cannot sleep on a ring's bell"),
            }
        }
        self.asleep.store(0, SeqCst);
    }

    /// Rings the bell if its consumer is asleep, or with `always` (module rules).
    fn ring(&self, always: bool) {
        if always || self.asleep.load(SeqCst) != 0 {
            self.rung.fetch_add(1, SeqCst);
            // Every sleeper on the bell: a share's doorbell has one, a ring's own bell one.
            let _ = futex::wake(self.rung, futex::Flags::empty(), u32::MAX);
        }
    }
}

/// The producer's end of a ring.
pub(crate) struct RingSender(Ring);

impl RingSender {
    /// The producer's end of the ring at `at` of `mem` (a mapping of its own), whose
    /// consumer sleeps on the bell at `bell`.
    pub(crate) fn new(mem: SharedMemory, at: usize, bell: usize) -> io::Result<Self> {
        Ring::new(mem, at, bell).map(Self)
    }

    /// Writes `body` as one message and rings the consumer's bell if it sleeps; refused,
    /// nothing written, when it does not fit.
    pub(crate) fn send(&mut self, body: &[u8]) -> Result<(), RingError> {
        let length = u32::try_from(body.len()).unwrap_or(u32::MAX);
        let bytes = body.len().saturating_add(4);
        let head = {
            let words = self.0.words()?;
            let free = CAPACITY - words.pending()?;
            if bytes > free {
                return Err(RingError::Full { bytes, free });
            }
            words.head.load(SeqCst)
        };
        self.0.copy_in(head, &length.to_le_bytes())?;
        self.0.copy_in(head + 4, body)?;
        let words = self.0.words()?;
        words.head.store(head + bytes as u64, SeqCst);
        words.bell.ring(false);
        Ok(())
    }

    /// True while the consumer has not read everything sent (or the ring is broken).
    pub(crate) fn holds_unread(&self) -> bool {
        self.0.words().map_or(true, |w| w.pending() != Ok(0))
    }
}

impl Drop for RingSender {
    fn drop(&mut self) {
        if let Ok(words) = self.0.words() {
            words.closed.store(1, SeqCst);
            // Rung whether or not it sleeps now: a consumer about to sleep must not miss it.
            words.bell.ring(true);
        }
    }
}

/// The consumer's end of a ring.
pub(crate) struct RingReceiver(Ring);

impl RingReceiver {
    /// The consumer's end of the ring at `at` of `mem` (a mapping of its own), sleeping
    /// on the bell at `bell`.
    pub(crate) fn new(mem: SharedMemory, at: usize, bell: usize) -> io::Result<Self> {
        Ring::new(mem, at, bell).map(Self)
    }

    /// True when a look would find a message or the end (or a broken ring, reported by
    /// the look): loads, no system call.
    pub(crate) fn has_mail(&self) -> bool {
        self.0.words().map_or(true, |w| {
            w.head.load(SeqCst) != w.tail.load(SeqCst) || w.closed.load(SeqCst) != 0
        })
    }

    /// The next message, copied into `into`. A message longer than `into` is skipped
    /// and reported ([`RingError::TooLong`]).
    pub(crate) fn receive(&mut self, into: &mut [u8]) -> Result<Received, RingError> {
        let (tail, available) = {
            let words = self.0.words()?;
            // `closed` before the counters: a message written before the end is still read.
            let closed = words.closed.load(SeqCst) != 0;
            let available = words.pending()?;
            if available == 0 {
                return Ok(if closed {
                    Received::Closed
                } else {
                    Received::Empty
                });
            }
            (words.tail.load(SeqCst), available)
        };
        if available < 4 {
            return Err(RingError::Truncated { available });
        }
        let mut word = [0u8; 4];
        self.0.copy_out(tail, &mut word)?;
        let length = u32::from_le_bytes(word) as usize;
        if length.saturating_add(4) > available {
            return Err(RingError::Corrupt { length, available });
        }
        let next = tail + 4 + length as u64;
        let copied = match into.get_mut(..length) {
            Some(to) => self
                .0
                .copy_out(tail + 4, to)
                .map(|()| Received::Message(length)),
            None => Err(RingError::TooLong {
                length,
                room: into.len(),
            }),
        };
        self.0.words()?.tail.store(next, SeqCst);
        copied
    }

    /// Sleeps on this ring's bell until a message or the end may have come, or `limit`
    /// passes.
    pub(crate) fn sleep(&self, limit: Option<Duration>) {
        if let Ok(words) = self.0.words() {
            words.bell.sleep(limit, || self.has_mail());
        }
    }
}

/// Breaks the ring at `at` of `mem` as a faulty or hostile producer would: its `head`
/// says more bytes are unread than the ring holds (for tests of what reads it).
#[cfg(test)]
pub(super) fn break_counters(mem: &mut SharedMemory, at: usize) {
    let impossible = (2 * CAPACITY as u64).to_le_bytes();
    assert!(
        mem.write_at(at + HEAD, &impossible),
        "the ring lies in its memory"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sender and a receiver on two mappings of one ring with its own bell.
    fn pair() -> (RingSender, RingReceiver) {
        let mem = SharedMemory::create(RING_BYTES).unwrap();
        let other = mem.map_again().unwrap();
        (
            RingSender::new(mem, 0, OWN_BELL).unwrap(),
            RingReceiver::new(other, 0, OWN_BELL).unwrap(),
        )
    }

    /// Catches a ring that loses, reorders or cuts messages where they wrap past the end
    /// of its data, that overwrites bytes not yet read, or that misses its end: messages of
    /// many sizes cross the end of the data several times, a full ring refuses and keeps
    /// what it holds, and the end comes after the last message.
    #[test]
    fn messages_come_whole_and_in_order_across_the_wrap_and_then_the_end() {
        let (mut tx, mut rx) = pair();
        let mut into = vec![0u8; HOST_FRAME];
        let mut written = 0;
        for round in 0..100u32 {
            let len = (round as usize * 7919) % HOST_FRAME;
            let body: Vec<u8> = (0..len).map(|i| (i as u32 ^ round) as u8).collect();
            tx.send(&body).unwrap();
            tx.send(&round.to_le_bytes()).unwrap();
            written += (4 + len) + (4 + 4);
            assert_eq!(rx.receive(&mut into).unwrap(), Received::Message(len));
            assert_eq!(&into[..len], &body[..], "round {round}");
            assert_eq!(rx.receive(&mut into).unwrap(), Received::Message(4));
            assert_eq!(into[..4], round.to_le_bytes());
        }
        assert!(
            written > 2 * CAPACITY,
            "the data wrapped twice: {written} bytes"
        );
        assert_eq!(rx.receive(&mut into).unwrap(), Received::Empty);
        // Fill it: the message that does not fit is refused, the others stay readable.
        let big = vec![0xA5u8; HOST_FRAME];
        let mut kept = 0;
        let refused = loop {
            match tx.send(&big) {
                Ok(()) => kept += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(refused, RingError::Full { .. }), "{refused}");
        assert!(kept >= HOST_WINDOW, "the window's requests fit: {kept}");
        for _ in 0..kept {
            assert_eq!(
                rx.receive(&mut into).unwrap(),
                Received::Message(HOST_FRAME)
            );
            assert!(into.iter().all(|&b| b == 0xA5));
        }
        assert!(!tx.holds_unread(), "all read");
        tx.send(b"last").unwrap();
        assert!(tx.holds_unread(), "one unread");
        drop(tx);
        assert!(rx.has_mail());
        assert_eq!(rx.receive(&mut into).unwrap(), Received::Message(4));
        assert_eq!(rx.receive(&mut into).unwrap(), Received::Closed);
    }

    /// Catches a message longer than the reader's buffer that is cut (data silently lost)
    /// or that blocks the ring: it is reported and skipped, and the next one reads whole.
    #[test]
    fn a_message_too_long_for_the_buffer_is_reported_and_skipped() {
        let (mut tx, mut rx) = pair();
        tx.send(&[1u8; 100]).unwrap();
        tx.send(&[2u8; 10]).unwrap();
        let mut small = [0u8; 16];
        assert_eq!(
            rx.receive(&mut small),
            Err(RingError::TooLong {
                length: 100,
                room: 16
            })
        );
        assert_eq!(rx.receive(&mut small).unwrap(), Received::Message(10));
        assert_eq!(small[..10], [2u8; 10]);
    }

    /// Catches a lost wake-up or a sleeper never woken: a consumer asleep on its bell
    /// wakes for a message sent from another thread (through another mapping), well
    /// before its limit; and one without mail does sleep (no busy return).
    #[test]
    fn a_sleeping_consumer_wakes_for_a_message() {
        for _ in 0..20 {
            let (mut tx, mut rx) = pair();
            let sender = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                tx.send(b"wake").unwrap();
                tx
            });
            let start = std::time::Instant::now();
            while !rx.has_mail() {
                rx.sleep(Some(Duration::from_secs(10)));
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "woken, not timed out"
            );
            let mut into = [0u8; 8];
            assert_eq!(rx.receive(&mut into).unwrap(), Received::Message(4));
            let _tx = sender.join().unwrap();
            let start = std::time::Instant::now();
            rx.sleep(Some(Duration::from_millis(50)));
            assert!(
                start.elapsed() >= Duration::from_millis(40),
                "no mail: it slept"
            );
        }
    }

    /// Catches a ring that reads a length word the other side has not finished writing:
    /// fewer than its 4 bytes written is corrupt.
    #[test]
    fn a_length_word_not_all_written_is_corrupt() {
        let (tx, mut rx) = pair();
        tx.0.words().unwrap().head.store(2, SeqCst);
        let mut into = [0u8; 8];
        assert_eq!(
            rx.receive(&mut into),
            Err(RingError::Truncated { available: 2 })
        );
    }

    /// Catches a ring that trusts a length word the other side wrote wrong (reading past
    /// what was written): it is reported as corrupt.
    #[test]
    fn a_length_past_what_was_written_is_corrupt() {
        let (mut tx, mut rx) = pair();
        tx.send(&[0u8; 8]).unwrap();
        // The producer's counter moved past a length word claiming more than it wrote.
        tx.0.copy_in(12, &1000u32.to_le_bytes()).unwrap();
        tx.0.words().unwrap().head.store(16, SeqCst);
        let mut into = [0u8; 64];
        assert_eq!(rx.receive(&mut into).unwrap(), Received::Message(8));
        assert!(matches!(
            rx.receive(&mut into),
            Err(RingError::Corrupt { length: 1000, .. })
        ));
    }
}
