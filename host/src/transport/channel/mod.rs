//! The request protocol over one link: sequence numbers, a window of requests in flight,
//! deadlines and retransmission.
//!
//! # Contract
//!
//! - **Pipelined.** [`Channel::submit`] sends a request at once and returns its ticket
//!   (its sequence number); up to the device's window (announced in its hello) may be
//!   unanswered at a time, and `submit` waits for room beyond that. Replies are matched
//!   by sequence number and kept until [`Channel::receive`] claims them, in any order.
//! - **Exactly once, go-back-N.** The device runs requests strictly in order and drops
//!   one that follows a gap. When the oldest unanswered request has waited a deadline —
//!   timed from the first look that found nothing to take in since it became the oldest or
//!   was last sent, so that no clock is read per message — the channel sends every
//!   unanswered request again, in order, under the same numbers;
//!   the device answers the ones it already ran from its reply cache. After
//!   [`ATTEMPTS`] sends the device is declared dead: an error, never a hang.
//! - **Copies kept only where they can be needed.** A byte link can lose or damage a
//!   frame, so each unanswered frame is kept to be sent again. A queue to a device thread
//!   (or a ring in memory shared with a device process, `transport::ring`) loses nothing:
//!   its messages go into the queue (or are copied into the ring) and no copy is kept — except
//!   while an interruptible request is in flight
//!   ([`RequestKind::is_interruptible`]), because a device running one drops the next
//!   request it gets (it takes it as the host giving the first up), and that request must
//!   be sent again. On a queue, a deadline without a reply only counts an attempt: the device is
//!   working or gone, and the channel asks which.
//! - **Typed.** [`Channel::call`] takes an [`Endpoint`] and returns its reply's payload
//!   with its type; an error reply is [`TransportError::Device`], a reply of another type
//!   [`TransportError::UnexpectedReply`].
//! - **Held requests.** A request nobody waits on (freeing a register) may be submitted
//!   held ([`Channel::submit_held`]): its message waits to travel with the channel's next
//!   one — as one hand-over on a device thread's queue, in one write on a byte link, back
//!   to back on a ring — and goes alone before the channel next waits for anything, so it
//!   never delays a reply waited for, and it reaches the device before any later request.
//!   A pipelined caller who frees a result after every call sends one message per call,
//!   not two. One message is held at a time (holding another sends the first), none with
//!   bulk bytes, and none while an interruptible request is in flight (whose device drops
//!   the next request it gets, above).
//! - Every frame goes out preceded by a `0x00` delimiter, so garbage the device's decoder
//!   holds ends there and costs only itself, and is flushed at once.

mod data_path;
mod interruptible;
mod located;
mod open;
mod reading;
mod receive;
mod send;
mod spares;

pub use data_path::{Sent, Span, Traffic};
pub use reading::Reading;

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use tessera_core::wire::{Endpoint, Limits, Request, RequestKind, Response};

use super::frames::Frames;
use super::reply::{Reply, Share, Typed};
use super::shared::{SharedMemory, Window};
use super::spawn::{DeviceHandle, Liveness, Outgoing};
use super::TransportError;
use crate::transport::queue::{Bulk, Message};
use located::Located;
use spares::Spares;

/// How long the oldest unanswered request waits before everything unanswered is sent again.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(500);
/// Times a request is sent before the host asks what its silent device is doing.
pub const ATTEMPTS: u32 = 8;
/// How long an idle device must have been silent about a request, besides every attempt
/// having been sent, before it is reported unreachable.
pub const UNREACHABLE_AFTER: Duration = Duration::from_secs(2);
/// How long a device that is busy with one request (a device thread's busy line is high,
/// or a device process is on a core) may work on it before it is reported
/// ([`TransportError::Busy`]).
pub const BUSY_DEADLINE: Duration = Duration::from_secs(60);
/// How long a device process that closed its link may take to report its exit status.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// What to do about a device that did not answer through every attempt
/// ([`Channel::silence`]).
#[derive(Debug)]
pub(crate) enum Silence {
    /// It is working on the request: wait, without sending it again.
    Working,
    /// Too soon to tell: send it again.
    Retry,
    /// Report it.
    Report(TransportError),
}

/// A request in flight whose reply is `E`'s.
#[derive(Debug)]
pub struct Ticket<E> {
    seq: u32,
    kind: RequestKind,
    endpoint: std::marker::PhantomData<E>,
}

impl<E> Ticket<E> {
    /// The request's sequence number.
    pub fn seq(&self) -> u32 {
        self.seq
    }
}

/// A request sent and not yet answered.
#[derive(Debug)]
struct InFlight {
    seq: u32,
    kind: RequestKind,
    /// The whole frame, delimiter first, ready to be sent again; `None` where it cannot be
    /// needed again (module doc).
    frame: Option<Vec<u8>>,
    /// Bulk bytes sent beside it.
    bulk: Option<Bulk>,
    /// Times sent.
    attempts: u32,
    /// When the channel was first found silent while it was the oldest unanswered request
    /// (set at its first timeout): how long its device has kept it waiting.
    silent_since: Option<Instant>,
}

/// A link to one device. See the module documentation.
pub struct Channel {
    writer: Outgoing,
    frames: Frames,
    next_seq: u32,
    deadline: Duration,
    busy_deadline: Duration,
    /// The device's limits from its hello; until then, small frames, one request at a
    /// time, and the replica the channel was opened for (the hello confirms it).
    limits: Limits,
    scratch: Vec<u8>,
    out: Vec<u8>,
    /// Buffers of replies read, for the next messages to a device thread.
    spares: Spares,
    /// Unanswered requests, oldest first.
    in_flight: VecDeque<InFlight>,
    /// A request's message held back to travel with the next one (module doc: held
    /// requests); it is in flight already.
    held: Option<Vec<u8>>,
    /// When a look first found nothing to take in since the channel last made progress
    /// (its oldest request sent or answered, or everything sent again): the oldest request's
    /// deadline runs from there. `None` until such a look, so that no clock is read per
    /// message.
    quiet_since: Option<Instant>,
    /// Replies not yet claimed, with their sequence numbers, in the order they arrived; a
    /// step's reductions queue here too. Replies are claimed oldest first, so a search
    /// stops at the front: cheaper than a hash map's hashing and allocation per message.
    arrived: VecDeque<Arrival>,
    retries: u64,
    /// The window bulk bytes pass through (child processes, QEMU).
    window: Option<Window>,
    /// The host's mapping of the device's memory (device threads, child processes).
    memory: Option<SharedMemory>,
    /// Where targets lie in that memory, as the device located them; forgotten whenever a
    /// request that may move device memory is sent ([`keeps_layout`]).
    located: Located,
    /// Bytes moved, by path.
    traffic: Traffic,
    /// How long a wait for the device looks without sleeping: [`SPIN`] for devices that
    /// answer within microseconds (threads, child processes); none for QEMU and serial
    /// ports, whose replies take milliseconds (and whose emulators need every core a
    /// spinning host would take).
    spin: Duration,
    /// Held to be dropped with the channel, after the link's other ends: it stops the
    /// device.
    handle: DeviceHandle,
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("replica", &self.limits.replica)
            .field("device", &self.handle.program())
            .field("next_seq", &self.next_seq)
            .field("in_flight", &self.in_flight.len())
            .field("limits", &self.limits)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl Channel {
    /// The error for a reply of the wrong type.
    pub fn unexpected(&self, request: &Request<'_>, reply: &Response<'_>) -> TransportError {
        TransportError::UnexpectedReply {
            replica: self.limits.replica,
            request: request.kind(),
            reply: format!("{reply:?}"),
        }
    }

    /// The device's limits from its hello.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Requests sent again because their reply did not arrive in time.
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// The replica this channel reaches (its first lane's, when the device runs several:
    /// [`lanes`](tessera_core::program::lanes)).
    pub fn replica(&self) -> u32 {
        self.limits.replica
    }

    /// Replicas the device runs from [`replica`](Self::replica) on, one per lane.
    pub fn lanes(&self) -> usize {
        usize::from(self.limits.lanes).max(1)
    }

    /// What keeps the device running (a test looks at how devices share threads).
    #[cfg(test)]
    pub(in crate::transport) fn device_handle(&self) -> &DeviceHandle {
        &self.handle
    }

    /// How long the oldest unanswered request waits before it is sent again.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Changes how long the oldest unanswered request waits before it is sent again.
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    /// Changes how long a busy device may work on one request before it is reported.
    pub fn set_busy_deadline(&mut self, deadline: Duration) {
        self.busy_deadline = deadline;
    }

    /// What to do about a device silent about `request` since `since` through every
    /// attempt (`attempts` sends so far). A device busy with it is waited for, within the
    /// busy deadline. An idle (or unknowable) one is sent it again until it has been silent
    /// for [`UNREACHABLE_AFTER`] as well: on a loaded machine a device thread can go
    /// unscheduled for longer than a few short deadlines, which is no sign it is gone.
    /// Then an ended device is reported as such, a stopped one as stopped, a busy one past
    /// its deadline as busy, and only an idle (or unknowable) one as timed out.
    pub(crate) fn silence(&self, request: RequestKind, since: Instant, attempts: u32) -> Silence {
        let replica = self.limits.replica;
        Silence::Report(match self.handle.liveness() {
            Liveness::Busy if since.elapsed() < self.busy_deadline => return Silence::Working,
            Liveness::Idle | Liveness::Unknown if since.elapsed() < UNREACHABLE_AFTER => {
                return Silence::Retry
            }
            Liveness::Busy => TransportError::Busy {
                replica,
                request,
                waited: since.elapsed(),
            },
            Liveness::Stopped => TransportError::Stopped { replica, request },
            Liveness::Ended => match self.handle.exit_status(Duration::ZERO) {
                Some(status) => TransportError::Exited {
                    replica,
                    program: self.handle.program(),
                    status,
                },
                None => TransportError::Closed { replica },
            },
            Liveness::Idle | Liveness::Unknown => TransportError::Timeout {
                replica,
                request,
                attempts,
            },
        })
    }

    /// Requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Sends `endpoint`'s request and waits for its reply, typed.
    pub fn call<E: Endpoint>(&mut self, endpoint: &E) -> Result<Typed<E>, TransportError> {
        let ticket = self.submit_typed(endpoint)?;
        self.receive_typed(ticket)
    }

    /// Sends `endpoint`'s request without waiting (like [`Channel::submit`]); the ticket
    /// claims its typed reply.
    pub fn submit_typed<E: Endpoint>(&mut self, endpoint: &E) -> Result<Ticket<E>, TransportError> {
        let request = endpoint.request();
        Ok(Ticket {
            seq: self.submit(&request)?,
            kind: request.kind(),
            endpoint: std::marker::PhantomData,
        })
    }

    /// The reply to `ticket`'s request, typed: a reply of another type is
    /// [`TransportError::UnexpectedReply`].
    pub fn receive_typed<E: Endpoint>(
        &mut self,
        ticket: Ticket<E>,
    ) -> Result<Typed<E>, TransportError> {
        let reply = self.receive(ticket.seq)?;
        if reply.response().and_then(E::reply).is_none() {
            return Err(TransportError::UnexpectedReply {
                replica: self.limits.replica,
                request: ticket.kind,
                reply: format!("{:?}", reply.response()),
            });
        }
        Ok(Typed {
            reply,
            endpoint: std::marker::PhantomData,
        })
    }

    /// The error for a data reply of the wrong length.
    pub fn wrong_length(&self, request: RequestKind, got: usize, asked: usize) -> TransportError {
        TransportError::UnexpectedReply {
            replica: self.limits.replica,
            request,
            reply: format!("{got} bytes where {asked} were asked for"),
        }
    }

    /// Sends `request` and returns the device's reply (an error reply is an error): the
    /// untyped form of [`Channel::call`], for this crate's requests whose reply it reads
    /// itself.
    pub(crate) fn request(&mut self, request: &Request<'_>) -> Result<Reply, TransportError> {
        let seq = self.submit(request)?;
        self.receive(seq)
    }

    /// Sends `request` with the next sequence number without waiting for its reply, once
    /// the window has room; returns the number (claim the reply with
    /// [`Channel::receive`]).
    pub fn submit(&mut self, request: &Request<'_>) -> Result<u32, TransportError> {
        self.submit_with(request, None, false)
    }

    /// Like [`Channel::submit`], for a request whose reply nobody waits on: its message is
    /// held back to travel with the next one (module doc: held requests). A message held
    /// before it goes now.
    pub(crate) fn submit_held(&mut self, request: &Request<'_>) -> Result<u32, TransportError> {
        self.submit_with(request, None, true)
    }

    /// The most bulk bytes one request or reply carries beside it: any number on a device
    /// thread's queue, the window's size for a child process or QEMU, 0 on other links (a
    /// serial port's among them: a board has no window).
    pub fn bulk_capacity(&self) -> usize {
        match (&self.writer, &self.window) {
            (Outgoing::Messages(_), _) => usize::MAX,
            (_, Some(window)) => window.len(),
            _ => 0,
        }
    }

    /// The device's memory, which this host maps too (device threads and child processes;
    /// `None` on other placements), once every request sent has been answered. Read and
    /// write it at the offsets the device reports (a register's
    /// [`Description::at`](tessera_core::wire::endpoint::Description::at)); the borrow of
    /// the channel keeps any request from being sent while the view lives, so the device is
    /// idle and never touches its memory meanwhile (the protocol of `transport::shared`).
    pub(crate) fn device_memory(&mut self) -> Result<Option<&mut SharedMemory>, TransportError> {
        if self.memory.is_none() {
            return Ok(None);
        }
        self.drain()?;
        Ok(self.memory.as_mut())
    }

    /// True when the host maps this device's memory (device threads and child processes),
    /// so that the session reads and writes its registers in place.
    pub fn shares_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// True when this link carries bulk bytes beside messages.
    pub fn carries_bulk(&self) -> bool {
        self.bulk_capacity() > 0
    }

    /// This channel without its bulk window (a child process's, QEMU's file), once every
    /// request sent has been answered: from then on its bytes move as on a link that has no
    /// window (a board on a serial port) — in framed chunks, or in place where the host maps
    /// the device's memory. (A device thread's queue carries bulk bytes without a window.)
    /// The session bench compares QEMU's socket on both paths with a serial port this way.
    pub fn without_bulk(mut self) -> Result<Self, TransportError> {
        self.drain()?;
        self.window = None;
        Ok(self)
    }

    /// Waits for the reply to request `seq` (sent with [`Channel::submit`]), sending the
    /// unanswered requests again as deadlines pass. An error reply is an error.
    pub fn receive(&mut self, seq: u32) -> Result<Reply, TransportError> {
        loop {
            if let Some(message) = self.take(seq) {
                let reply = message.reply();
                match reply.response() {
                    Some(Response::Error { request, code }) => {
                        tracing::debug!(replica = self.limits.replica, ?request, %code, "device error");
                        return Err(TransportError::Device {
                            replica: self.limits.replica,
                            request,
                            code,
                        });
                    }
                    Some(_) => return Ok(reply),
                    // A contribution under a request's number is no reply to it.
                    None => {
                        return Err(TransportError::NotAReply {
                            replica: self.limits.replica,
                            seq,
                        })
                    }
                }
            }
            if !self.in_flight.iter().any(|f| f.seq == seq) {
                return Err(TransportError::NotInFlight {
                    replica: self.limits.replica,
                    seq,
                });
            }
            self.pump(None, true)?;
        }
    }

    /// Waits until the reply to request `seq` has arrived (it stays to be claimed by
    /// [`receive`](Self::receive)), or `until` passes: true once it has (or once `seq` is not
    /// in flight, which `receive` reports). Re-sends and deadlines run as in `receive`, so
    /// waiting in several slices costs a request nothing.
    pub fn arrived_by(&mut self, seq: u32, until: Instant) -> Result<bool, TransportError> {
        loop {
            let here = self.arrived.iter().any(|a| a.seq == seq);
            if here || !self.in_flight.iter().any(|f| f.seq == seq) {
                return Ok(true);
            }
            if Instant::now() >= until {
                return Ok(false);
            }
            self.pump(Some(until), true)?;
        }
    }

    /// Waits for every request in flight to be answered (their replies stay to be
    /// claimed).
    pub fn drain(&mut self) -> Result<(), TransportError> {
        while !self.in_flight.is_empty() {
            self.pump(None, true)?;
        }
        Ok(())
    }

    /// Claims the reply to `seq` if it is already in and a plain `Done` — nothing to read,
    /// nothing failed — its buffer kept for the next message (see `spares`); false when it
    /// is not in yet or says more (left for [`receive`](Self::receive)). Never waits: for a
    /// sender of many pipelined commands, whose replies would otherwise pile up until it
    /// syncs.
    pub(crate) fn settle_done(&mut self, seq: u32) -> bool {
        let Some(at) = self.arrived.iter().position(|a| a.seq == seq) else {
            return false;
        };
        if !self.arrived[at].done {
            return false;
        }
        if let Some(arrival) = self.arrived.remove(at) {
            self.spares.give_back(arrival.message.body);
        }
        true
    }

    /// Takes back the buffer of `reply`, read: the channel's next message to a device
    /// thread goes in it (see `spares`). For a reader of many replies, such as the step
    /// driver; a reply simply dropped is freed.
    pub(crate) fn recycle(&mut self, reply: Reply) {
        self.spares.give_back(reply.body);
    }

    /// The oldest unclaimed message under `seq`.
    fn take(&mut self, seq: u32) -> Option<Arrival> {
        let at = self.arrived.iter().position(|a| a.seq == seq)?;
        self.arrived.remove(at)
    }
}

/// A message taken in and not yet claimed: its sequence number (a contribution's is its
/// step's), the message, and the contribution it holds, decoded as it came in.
#[derive(Debug)]
pub(super) struct Arrival {
    seq: u32,
    message: Message,
    share: Option<Share>,
    /// A plain `Done`: nothing to read and nothing failed (`settle_done`).
    done: bool,
}

impl Arrival {
    /// The message, handed back as a [`Reply`].
    fn reply(self) -> Reply {
        Reply {
            seq: self.seq,
            body: self.message.body,
            bulk: self.message.bulk,
            share: self.share,
        }
    }
}

#[cfg(test)]
mod tests;
