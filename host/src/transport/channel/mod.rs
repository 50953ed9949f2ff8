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
//!   one that follows a gap. When the oldest unanswered request has waited a deadline,
//!   the channel sends every unanswered request again, in order, under the same numbers;
//!   the device answers the ones it already ran from its reply cache. After
//!   [`ATTEMPTS`] sends the device is declared dead: an error, never a hang.
//! - **Typed.** [`Channel::call`] takes an [`Endpoint`] and returns its reply's payload
//!   with its type; an error reply is [`TransportError::Device`], a reply of another type
//!   [`TransportError::UnexpectedReply`].
//! - Every frame goes out preceded by a `0x00` delimiter, so garbage the device's decoder
//!   holds ends there and costs only itself, and is flushed at once.

mod data_path;

pub use data_path::{Reading, Sent, Span, Traffic};

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::Write;
use std::ops::Range;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use tessera_core::wire::endpoint::Hello;
use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{
    encode_body, encode_frame, max_frame_len, Combined, Endpoint, Envelope, ErrorCode, FromDevice,
    Limits, Request, RequestKind, Response, Target, ToDevice, PROTOCOL_VERSION,
};

use tessera_firmware_sim::std_link::{receive_spinning, Bulk, Message, SPIN};

use super::fault::FaultConfig;
use super::reader::{read_frames, MAX_FRAME};
use super::reply::{Reply, Typed};
use super::shared::{SharedMemory, Window};
use super::spawn::{self, DeviceHandle, Incoming, Link, Liveness, Outgoing};
use super::TransportError;

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
    /// The whole frame, delimiter first, ready to be sent again.
    frame: Vec<u8>,
    /// Bulk bytes sent beside it.
    bulk: Option<Bulk>,
    /// Times sent.
    attempts: u32,
    /// When it was first sent.
    first_sent: Instant,
}

/// A link to one device. See the module documentation.
pub struct Channel {
    writer: Outgoing,
    frames: Receiver<Message>,
    next_seq: u32,
    deadline: Duration,
    busy_deadline: Duration,
    /// The device's limits from its hello; until then, small frames, one request at a
    /// time, and the replica the channel was opened for (the hello confirms it).
    limits: Limits,
    scratch: Vec<u8>,
    out: Vec<u8>,
    /// Unanswered requests, oldest first.
    in_flight: VecDeque<InFlight>,
    /// When the oldest unanswered request was last sent.
    oldest_sent: Instant,
    /// Replies not yet claimed, by sequence number; a step's reductions queue here too.
    arrived: HashMap<u32, VecDeque<Message>>,
    retries: u64,
    /// The window bulk bytes pass through (child processes, QEMU).
    window: Option<Window>,
    /// The host's mapping of the device's memory (device threads, child processes).
    memory: Option<SharedMemory>,
    /// Where targets lie in that memory, as the device located them; forgotten whenever a
    /// request that may move device memory is sent ([`keeps_layout`]).
    located: HashMap<Target, Range<usize>>,
    /// Bytes moved, by path.
    traffic: Traffic,
    /// How long a wait for the device looks without sleeping: [`SPIN`] for devices that
    /// answer within microseconds (threads, child processes); none for QEMU, whose replies
    /// take milliseconds and whose emulators need every core a spinning host would take.
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
    /// A device in a thread of this process, `memory` bytes of arena, optionally with
    /// faults injected in both directions.
    ///
    /// ```
    /// use tessera_core::wire::endpoint::{Command, GetSeed};
    /// use tessera_core::wire::Request;
    /// use tessera_host::transport::Channel;
    ///
    /// // Replica 2 in a thread, 64 KiB of arena, no faults; the hello is done when it returns.
    /// let mut channel = Channel::in_process(2, 64 << 10, None)?;
    /// assert_eq!((channel.replica(), channel.limits().memory), (2, 64 << 10));
    /// // Typed endpoints: a command is answered `Done`, `GetSeed` with the seed.
    /// channel.call(&Command::new(Request::SetSeed { seed: 7 }).ok_or("not a command")?)?;
    /// assert_eq!(channel.call(&GetSeed)?.get(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_process(
        replica: u32,
        memory: usize,
        faults: Option<FaultConfig>,
    ) -> Result<Self, TransportError> {
        Self::open(spawn::in_process(replica, memory, faults)?, replica)
    }

    /// A device in a child process (`tessera device`, `exe` being the `tessera` binary),
    /// speaking over its stdio.
    pub fn child_process(exe: &Path, replica: u32, memory: usize) -> Result<Self, TransportError> {
        Self::open(spawn::child_process(exe, replica, memory)?, replica)
    }

    /// The bare-metal firmware (`firmware`, an ELF for mps2-an385) under
    /// `qemu-system-arm`, its UART0 on a Unix socket. The firmware's defmt logs go through
    /// `defmt-print` to stderr. Dropping the channel kills QEMU. The firmware and the tools
    /// are checked before anything starts.
    pub fn qemu(firmware: &Path, replica: u32) -> Result<Self, TransportError> {
        spawn::check_firmware(firmware)?;
        Self::qemu_checked(firmware, replica)
    }

    /// Like [`Channel::qemu`], for a caller that has checked the firmware and the tools
    /// already (once for all its devices: `placement::open`).
    pub(crate) fn qemu_checked(firmware: &Path, replica: u32) -> Result<Self, TransportError> {
        Self::open(spawn::qemu(firmware, replica)?, replica)
    }

    fn open(link: Link, replica: u32) -> Result<Self, TransportError> {
        let Link {
            incoming,
            outgoing: writer,
            handle,
            window,
            memory,
        } = link;
        let frames = match incoming {
            // A byte link gets a thread that decodes its frames.
            Incoming::Bytes(reader) => {
                let (tx, frames) = mpsc::channel();
                thread::Builder::new()
                    .name(format!("tessera-link-{replica}"))
                    .spawn(move || read_frames(reader, tx, replica))?;
                frames
            }
            Incoming::Messages(frames) => frames,
        };
        let mut channel = Self {
            writer,
            frames,
            next_seq: 1,
            deadline: DEFAULT_DEADLINE,
            busy_deadline: BUSY_DEADLINE,
            limits: Limits {
                memory: 0,
                max_frame: 256,
                replica,
                window: 1,
            },
            scratch: vec![0; MAX_FRAME],
            out: vec![0; 1 + max_frame_len(MAX_FRAME)],
            in_flight: VecDeque::new(),
            oldest_sent: Instant::now(),
            arrived: HashMap::new(),
            retries: 0,
            window,
            memory,
            located: HashMap::new(),
            traffic: Traffic::default(),
            spin: match handle {
                DeviceHandle::Qemu { .. } => Duration::ZERO,
                _ => SPIN,
            },
            handle,
        };
        let hello = Hello {
            version: PROTOCOL_VERSION,
            replica,
        };
        let (version, limits) = match channel.call(&hello) {
            Ok(reply) => reply.get(),
            // A device process that ended before its hello says how it ended.
            Err(TransportError::Closed { .. }) => {
                return Err(match channel.handle.exit_status(EXIT_GRACE) {
                    Some(status) => TransportError::Exited {
                        replica,
                        program: channel.handle.program(),
                        status,
                    },
                    None => TransportError::Closed { replica },
                })
            }
            Err(TransportError::Device {
                code: ErrorCode::Version { device },
                ..
            }) => {
                return Err(TransportError::Version {
                    replica,
                    device,
                    host: PROTOCOL_VERSION,
                })
            }
            Err(e) => return Err(e),
        };
        if version != PROTOCOL_VERSION || limits.replica != replica {
            return Err(TransportError::UnexpectedReply {
                replica,
                request: RequestKind::Hello,
                reply: format!("version {version}, {limits:?}"),
            });
        }
        channel.limits = Limits {
            window: limits.window.max(1),
            ..limits
        };
        tracing::debug!(replica, ?limits, "device ready");
        Ok(channel)
    }

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

    /// The replica this channel reaches.
    pub fn replica(&self) -> u32 {
        self.limits.replica
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
        if E::reply(reply.response()).is_none() {
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

    /// Sends `request` and returns the device's reply (an error reply is an error).
    pub fn request(&mut self, request: &Request<'_>) -> Result<Reply, TransportError> {
        let seq = self.submit(request)?;
        self.receive(seq)
    }

    /// Sends `request` with the next sequence number without waiting for its reply, once
    /// the window has room; returns the number (claim the reply with
    /// [`Channel::receive`]).
    pub fn submit(&mut self, request: &Request<'_>) -> Result<u32, TransportError> {
        self.submit_with(request, None)
    }

    /// The most bulk bytes one request or reply carries beside it: any number on a device
    /// thread's queue, the window's size for a child process or QEMU, 0 on other links.
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

    /// Like [`Channel::submit`], with `bulk` beside the request (a
    /// [`Request::WriteBulk`]) on a device thread's queue. Refused at once
    /// ([`TransportError::TooLarge`]) on a link without a queue.
    fn submit_bulk(&mut self, request: &Request<'_>, bulk: Bulk) -> Result<u32, TransportError> {
        if !matches!(self.writer, Outgoing::Messages(_)) {
            return Err(self.too_large(request.kind(), bulk.as_ref().len()));
        }
        self.submit_with(request, Some(bulk))
    }

    /// Like [`Channel::submit`], with `data` put in the link's window for the device to take
    /// while it serves the request (a [`Request::WriteBulk`]): once no earlier request uses
    /// the window. Refused at once ([`TransportError::TooLarge`]) when it does not fit.
    fn submit_in_window(
        &mut self,
        request: &Request<'_>,
        data: &[u8],
    ) -> Result<u32, TransportError> {
        if data.len() > self.bulk_capacity() || self.window.is_none() {
            // Refused here: the device never sees it.
            return Err(self.too_large(request.kind(), data.len()));
        }
        self.wait_for_window()?;
        if let Some(window) = &mut self.window {
            if !window.write(data) {
                return Err(TransportError::Io(std::io::Error::other(
                    "the bulk window could not be written",
                )));
            }
        }
        self.submit_with(request, None)
    }

    fn too_large(&self, request: RequestKind, bytes: usize) -> TransportError {
        TransportError::TooLarge {
            replica: self.limits.replica,
            request,
            bytes,
            max: self.bulk_capacity(),
        }
    }

    /// Waits until no request that uses the shared window is in flight.
    fn wait_for_window(&mut self) -> Result<(), TransportError> {
        while self.in_flight.iter().any(|f| uses_window(f.kind)) {
            self.pump(None, true)?;
        }
        Ok(())
    }

    fn submit_with(
        &mut self,
        request: &Request<'_>,
        bulk: Option<Bulk>,
    ) -> Result<u32, TransportError> {
        if self.window.is_some() && request.kind() == RequestKind::ReadBulk {
            // Its reply's bytes come back through the window: nothing else may use it.
            self.wait_for_window()?;
        }
        // The device keeps replies for the last `window` numbers, not for the last `window`
        // unanswered requests: while the oldest unanswered one is `window` numbers back, a
        // newer request would push its reply out of the device's cache.
        let window = u32::from(self.limits.window.max(1));
        while self
            .in_flight
            .front()
            .is_some_and(|oldest| self.next_seq.wrapping_sub(oldest.seq) >= window)
        {
            self.pump(None, true)?;
        }
        if !keeps_layout(request.kind()) {
            self.located.clear();
        }
        let seq = self.next_seq;
        // Zero is never used: the device answers undecodable frames under it.
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        let frame = self.frame(seq, request)?.to_vec();
        if self.in_flight.is_empty() {
            self.oldest_sent = Instant::now();
        }
        transmit(&mut self.writer, &frame, bulk.clone(), self.limits.replica)?;
        self.in_flight.push_back(InFlight {
            seq,
            kind: request.kind(),
            frame,
            bulk,
            attempts: 1,
            first_sent: Instant::now(),
        });
        Ok(seq)
    }

    /// Waits for the reply to request `seq` (sent with [`Channel::submit`]), sending the
    /// unanswered requests again as deadlines pass. An error reply is an error.
    pub fn receive(&mut self, seq: u32) -> Result<Reply, TransportError> {
        loop {
            if let Some(message) = self.take(seq) {
                let reply = Reply {
                    seq,
                    body: message.body,
                    bulk: message.bulk,
                };
                if let Response::Error { request, code } = reply.response() {
                    tracing::debug!(replica = self.limits.replica, ?request, %code, "device error");
                    return Err(TransportError::Device {
                        replica: self.limits.replica,
                        request,
                        code,
                    });
                }
                return Ok(reply);
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

    /// Waits for every request in flight to be answered (their replies stay to be
    /// claimed).
    pub fn drain(&mut self) -> Result<(), TransportError> {
        while !self.in_flight.is_empty() {
            self.pump(None, true)?;
        }
        Ok(())
    }

    /// Sends `request` after a step this host gave up on (another device failed it) and
    /// waits for its reply. A device still inside that step takes any later request as the
    /// sign that the host gave up: it fails the step at once (`StepAbandoned`) and drops
    /// the request, which go-back-N would send again only after a deadline. So once no
    /// step is in flight any more, what is unanswered is sent again at once; a device that
    /// had already finished answers the repeat from its reply cache. Whatever the
    /// abandoned step left unclaimed (its reply, its contributions) is discarded.
    pub fn request_after_abandoned_step(
        &mut self,
        request: &Request<'_>,
    ) -> Result<Reply, TransportError> {
        let steps: Vec<u32> = self
            .in_flight
            .iter()
            .filter(|f| f.kind == RequestKind::RunStep)
            .map(|f| f.seq)
            .collect();
        let seq = self.submit(request)?;
        while self
            .in_flight
            .iter()
            .any(|f| f.kind == RequestKind::RunStep)
        {
            self.pump(None, true)?;
        }
        if !steps.is_empty() && self.in_flight.iter().any(|f| f.seq == seq) {
            for f in &self.in_flight {
                transmit(
                    &mut self.writer,
                    &f.frame,
                    f.bulk.clone(),
                    self.limits.replica,
                )?;
                self.retries += 1;
            }
            self.oldest_sent = Instant::now();
        }
        let reply = self.receive(seq);
        // The abandoned steps' replies and contributions are nobody's now.
        self.arrived.retain(|seq, _| !steps.contains(seq));
        reply
    }

    /// The next message under `seq` (a reply, or a reduction during a step) if one
    /// arrives within `wait`, without sending anything again: for a caller that manages
    /// its own retries (the runtime's step driver).
    pub fn poll(&mut self, seq: u32, wait: Duration) -> Result<Option<Reply>, TransportError> {
        let until = Instant::now() + wait;
        loop {
            if let Some(message) = self.take(seq) {
                return Ok(Some(Reply {
                    seq,
                    body: message.body,
                    bulk: message.bulk,
                }));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            self.pump(Some(until), false)?;
        }
    }

    /// Sends a reduction's combined result: a topic message, which gets no reply and is not
    /// tracked (the device asks again, by sending its contribution again, if it is lost).
    pub fn publish(&mut self, combined: &Combined<'_>) -> Result<(), TransportError> {
        let message = ToDevice::Combined(combined.clone());
        let n = self.encode(&message, RequestKind::RunStep)?.len();
        transmit(&mut self.writer, &self.out[..n], None, self.limits.replica)
    }

    /// Sends `request` under `seq` without tracking it: a retry the caller manages.
    pub fn resend(&mut self, seq: u32, request: &Request<'_>) -> Result<(), TransportError> {
        let n = self.frame(seq, request)?.len();
        transmit(&mut self.writer, &self.out[..n], None, self.limits.replica)
    }

    /// Encodes `request` under `seq` into the output buffer: a frame, delimiter first, for
    /// a byte link; the bare body for a message link.
    fn frame(&mut self, seq: u32, request: &Request<'_>) -> Result<&[u8], TransportError> {
        // A request's payload is borrowed: the clone copies no bulk bytes.
        let message = ToDevice::Request(Envelope {
            seq,
            body: request.clone(),
        });
        self.encode(&message, request.kind())
    }

    /// Encodes `message` into the output buffer as [`Channel::frame`] says; `kind` names
    /// the request it belongs to in a size error.
    fn encode(
        &mut self,
        message: &ToDevice<'_>,
        kind: RequestKind,
    ) -> Result<&[u8], TransportError> {
        let too_large = |bytes| TransportError::TooLarge {
            replica: self.limits.replica,
            request: kind,
            bytes,
            max: self.limits.max_frame as usize,
        };
        let n = match self.writer {
            Outgoing::Bytes(_) => {
                // out[0] is the delimiter that ends whatever the device's decoder holds.
                let Some((first, rest)) = self.out.split_first_mut() else {
                    return Err(too_large(0));
                };
                *first = 0;
                let n = encode_frame(message, &mut self.scratch, rest)
                    .map_err(|_| too_large(MAX_FRAME))?;
                // The device would drop a longer frame unread: refuse it here, at once.
                if n > self.limits.max_frame as usize {
                    return Err(too_large(n));
                }
                n + 1
            }
            Outgoing::Messages(_) => {
                let n = encode_body(message, &mut self.out).map_err(|_| too_large(MAX_FRAME))?;
                if n > self.limits.max_frame as usize {
                    return Err(too_large(n));
                }
                n
            }
        };
        Ok(&self.out[..n])
    }

    /// The oldest unclaimed message under `seq`.
    fn take(&mut self, seq: u32) -> Option<Message> {
        let queue = self.arrived.get_mut(&seq)?;
        let body = queue.pop_front();
        if queue.is_empty() {
            self.arrived.remove(&seq);
        }
        body
    }

    /// Takes in what the device sent, until one message arrives or `until` passes; with
    /// `retransmit`, sends every unanswered request again when the oldest has waited its
    /// deadline (and fails after [`ATTEMPTS`]).
    fn pump(&mut self, until: Option<Instant>, retransmit: bool) -> Result<(), TransportError> {
        let resend_at = self.oldest_sent + self.deadline;
        let wake = match until {
            Some(until) if !retransmit || until < resend_at => until,
            _ => resend_at,
        };
        match receive_spinning(
            &self.frames,
            Some(wake.saturating_duration_since(Instant::now())),
            self.spin,
        ) {
            Ok(message) => {
                self.accept(message);
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) if retransmit && Instant::now() >= resend_at => {
                self.go_back()
            }
            Err(RecvTimeoutError::Timeout) => Ok(()),
            Err(RecvTimeoutError::Disconnected) => Err(TransportError::Closed {
                replica: self.limits.replica,
            }),
        }
    }

    /// Files a message from the device: a reply to a request in flight completes it; a
    /// reduction (during a step) is queued under the step; anything else is stale.
    fn accept(&mut self, mut message: Message) {
        let (seq, completes, bulk) = match decode_body::<FromDevice<'_>>(&message.body) {
            Ok(FromDevice::Reply(Envelope { seq, body })) => {
                let bulk = match body {
                    Response::Bulk { len } => Some(len),
                    _ => None,
                };
                (seq, true, bulk)
            }
            // A contribution waits under its step, which it does not complete.
            Ok(FromDevice::Contribution(c)) => (c.step, false, None),
            Err(_) => return,
        };
        let Some(at) = self.in_flight.iter().position(|f| f.seq == seq) else {
            return; // an answer to a retry of something already answered
        };
        // A bulk read's bytes wait in the shared window: take them before it is reused.
        let from_window = match (bulk, &self.window) {
            (Some(len), Some(window)) => window.read(len as usize),
            _ => None,
        };
        if let Some(bytes) = from_window {
            message.bulk = Some(Bulk(std::sync::Arc::new(bytes)));
        }
        if completes {
            self.in_flight.remove(at);
            if at == 0 {
                self.oldest_sent = Instant::now();
            }
        }
        self.arrived.entry(seq).or_default().push_back(message);
    }

    /// Sends every unanswered request again, oldest first (go-back-N).
    fn go_back(&mut self) -> Result<(), TransportError> {
        let Some(oldest) = self.in_flight.front() else {
            return Ok(());
        };
        if oldest.attempts >= ATTEMPTS {
            match self.silence(oldest.kind, oldest.first_sent, oldest.attempts) {
                Silence::Report(error) => {
                    tracing::warn!(replica = self.limits.replica, request = ?oldest.kind, %error, "device did not answer");
                    return Err(error);
                }
                // Sending it again would only queue copies behind the work.
                Silence::Working => {
                    self.oldest_sent = Instant::now();
                    return Ok(());
                }
                Silence::Retry => {}
            }
        }
        tracing::debug!(
            replica = self.limits.replica,
            seq = oldest.seq,
            unanswered = self.in_flight.len(),
            "no reply in time: sending the unanswered requests again"
        );
        // Only the oldest timed out: the others are sent again because go-back-N must, and
        // that costs none of their attempts.
        if let Some(oldest) = self.in_flight.front_mut() {
            oldest.attempts += 1;
        }
        for request in &self.in_flight {
            transmit(
                &mut self.writer,
                &request.frame,
                request.bulk.clone(),
                self.limits.replica,
            )?;
            self.retries += 1;
        }
        self.oldest_sent = Instant::now();
        Ok(())
    }
}

/// True for the requests that never allocate, free or move device memory, so that where a
/// target lies stays as [`Request::Locate`] said. Any other request makes the channel
/// locate targets again: a register set, freed or written by a call may move.
fn keeps_layout(kind: RequestKind) -> bool {
    use RequestKind as K;
    matches!(
        kind,
        K::Write
            | K::Read
            | K::WriteBulk
            | K::ReadBulk
            | K::Locate
            | K::Wrote
            | K::Took
            | K::RunStep
            | K::ResetStep
            | K::DescribeRegister
            | K::GetRegister
            | K::GetSeed
            | K::SetSeed
            | K::GetRngState
            | K::SetRngState
            | K::SetOptimizer
            | K::CycleCount
            | K::HasFunction
    )
}

/// True for the requests whose bytes pass through a shared window.
fn uses_window(kind: RequestKind) -> bool {
    matches!(kind, RequestKind::WriteBulk | RequestKind::ReadBulk)
}

/// Sends one encoded message (a frame, or a bare body) and flushes it. A link whose other
/// end is gone is [`TransportError::Closed`], naming the replica.
fn transmit(
    writer: &mut Outgoing,
    encoded: &[u8],
    bulk: Option<Bulk>,
    replica: u32,
) -> Result<(), TransportError> {
    let closed = TransportError::Closed { replica };
    match writer {
        Outgoing::Bytes(writer) => match writer.write_all(encoded).and_then(|()| writer.flush()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(closed),
            Err(e) => Err(e.into()),
        },
        Outgoing::Messages(queue) => queue
            .send(Message {
                body: encoded.to_vec(),
                bulk,
            })
            .map_err(|_| closed),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;
    use std::sync::{Arc, Mutex};

    use tessera_core::wire::FrameDecoder;

    use super::*;

    /// A writer that keeps what it is given.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Without a leading delimiter, garbage the device's decoder held (the rest of a
    /// truncated frame) ran into the next frame and cost it too: a truncated request cost
    /// its retry as well.
    #[test]
    fn every_frame_starts_with_a_delimiter() {
        let capture = Capture::default();
        let (_, frames) = mpsc::channel();
        let (ours, _theirs) = UnixStream::pair().unwrap();
        let mut channel = Channel {
            writer: Outgoing::Bytes(Box::new(capture.clone())),
            frames,
            next_seq: 1,
            deadline: DEFAULT_DEADLINE,
            busy_deadline: BUSY_DEADLINE,
            limits: Limits {
                memory: 0,
                max_frame: 256,
                replica: 0,
                window: 4,
            },
            scratch: vec![0; 512],
            out: vec![0; 600],
            in_flight: VecDeque::new(),
            oldest_sent: Instant::now(),
            arrived: HashMap::new(),
            retries: 0,
            window: None,
            memory: None,
            located: HashMap::new(),
            traffic: Traffic::default(),
            spin: SPIN,
            handle: DeviceHandle::Thread(None, Some(ours), Default::default()),
        };
        channel.submit(&Request::GetSeed).unwrap();
        let sent = capture.0.lock().unwrap().clone();
        assert_eq!(sent.first(), Some(&0), "the frame opens with 0x00");

        // What a device decodes when half a damaged frame came before it.
        let mut held = vec![0x42u8; 9];
        held.extend_from_slice(&sent);
        let mut decoder = FrameDecoder::<256>::new();
        let outcomes: Vec<bool> = held
            .iter()
            .filter_map(|&b| decoder.push(b).map(|frame| frame.is_ok()))
            .collect();
        assert_eq!(
            outcomes,
            [false, true],
            "the garbage, then the intact request"
        );
    }
}
