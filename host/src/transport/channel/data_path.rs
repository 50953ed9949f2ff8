//! The one way bytes move between the host and a device: spans of a [`Target`] (a
//! register, a slot, a FIFO) written or read at an offset, by whichever path the
//! channel's placement has. Callers never choose.
//!
//! # Paths
//!
//! The first the placement offers, for each span:
//!
//! 1. **In place** (device threads and child processes: the host maps the device's
//!    memory). The channel locates the target once ([`DataRequest::Locate`], remembered
//!    until a request that may move device memory is sent), waits until the device is
//!    idle, and moves the bytes itself — a writer fills device memory directly, a reader
//!    reads it there. A FIFO is then told ([`DataRequest::Wrote`] / [`DataRequest::Took`],
//!    one request per span, all sent before any reply is awaited) — or by a training
//!    step's own [`RunStep`](tessera_core::wire::ProgramRequest::RunStep): for its inputs
//!    all moved in place (`fed`, [`Channel::write_step_inputs`]) and for the last step's
//!    anchors all read in place (`took`, [`Channel::read_step_outputs`]); registers and
//!    slots need nothing.
//! 2. **Bulk**, beside one request ([`DataRequest::WriteBulk`] /
//!    [`DataRequest::ReadBulk`]): handed over on a device thread's queue, or through the
//!    link's window (QEMU's host file), when the span fits it. A serial port has no
//!    window: a board's bytes always go by chunks.
//! 3. **Chunks**: framed [`DataRequest::Write`] / [`DataRequest::Read`] requests of at most
//!    the device's chunk, all sent before any reply is awaited.
//!
//! A span the device refuses to locate (no such target, a register without an array) goes
//! by bulk or chunks, so that the refusal comes back as the reply to the move itself, the
//! same error on every placement. The device checks the same rules on every path (the
//! wire's [`target`](tessera_core::wire::target) module).
//!
//! # Counting
//!
//! [`Traffic`] counts the bytes each path moved and the bytes the host staged in a buffer
//! of its own on the way, so that a test can check how often a byte is copied.

use std::ops::Range;
use std::sync::Arc;

use tessera_core::wire::endpoint::Locate;
use tessera_core::wire::{DataRequest, Request, Target};

use super::{Channel, Ticket, TransportError};
use crate::transport::queue::Bulk;

/// `len` bytes of a target at byte `offset` (for a FIFO, a stream position).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// What the bytes belong to.
    pub target: Target,
    /// Where in it they start.
    pub offset: usize,
    /// How many.
    pub len: usize,
}

/// Bytes a channel moved, by path, and the requests it sent, since it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Moved by the host in the device's memory.
    pub in_place: u64,
    /// Moved beside a request or reply.
    pub bulk: u64,
    /// Moved inside frames.
    pub framed: u64,
    /// Copied into a host buffer of the channel's on the way (a writer's bytes before
    /// they were sent; a reader's bytes before they reached the reader).
    pub staged: u64,
    /// Requests sent (each once: a retry is not counted).
    pub requests: u64,
}

/// The traffic of several channels together.
impl std::iter::Sum for Traffic {
    fn sum<I: Iterator<Item = Self>>(all: I) -> Self {
        all.fold(Self::default(), |a, t| Self {
            in_place: a.in_place + t.in_place,
            bulk: a.bulk + t.bulk,
            framed: a.framed + t.framed,
            staged: a.staged + t.staged,
            requests: a.requests + t.requests,
        })
    }
}

/// Requests a move sent whose replies confirm it ([`Channel::confirm`]).
#[derive(Debug, Default)]
#[must_use = "a move is confirmed (and a refusal seen) only by Channel::confirm"]
pub struct Sent {
    pub(super) seqs: Vec<u32>,
}

impl Sent {
    /// The requests' sequence numbers, oldest first (for a caller that claims the replies
    /// itself).
    pub fn seqs(&self) -> &[u32] {
        &self.seqs
    }
}

/// How one span moves.
pub(super) enum Route {
    /// Through the host's mapping, at address `at` of the device's memory; `whole_ring`
    /// when the span covers its target's whole range from its start (as the device
    /// located it: for a FIFO, its whole ring).
    InPlace {
        at: usize,
        whole_ring: bool,
    },
    Bulk,
    Chunks,
}

impl Channel {
    /// Writes each of `spans`, its bytes put in place by `fill(i, bytes)` for span `i`
    /// (called once per span, on the destination itself where the bytes are moved in
    /// place, else on a staging buffer). Returns the requests to [`Channel::confirm`].
    pub fn write_spans(
        &mut self,
        spans: &[Span],
        fill: impl FnMut(usize, &mut [u8]),
    ) -> Result<Sent, TransportError> {
        self.fill_spans(spans, fill, false).map(|(sent, _)| sent)
    }

    /// Writes a training step's inputs as [`Channel::write_spans`] does — `spans` being
    /// every stream FIFO of the prepared program, each whole, from its start — except that
    /// when every span moved in place and filled its FIFO's whole ring from its start (as
    /// the device located it), no `Wrote` is sent: the step's
    /// [`RunStep`](tessera_core::wire::ProgramRequest::RunStep) then says so (`fed`, the
    /// bool returned), and the device counts the FIFOs full by the same rules. Saves a
    /// request and its reply per stream per replica; any span that could not move in place
    /// has every span reported as `write_spans` reports it.
    pub fn write_step_inputs(
        &mut self,
        spans: &[Span],
        fill: impl FnMut(usize, &mut [u8]),
    ) -> Result<(Sent, bool), TransportError> {
        self.fill_spans(spans, fill, true)
    }

    /// `write_spans`, leaving the reports to the step when `step` and every span went in
    /// place (then `true`).
    fn fill_spans(
        &mut self,
        spans: &[Span],
        mut fill: impl FnMut(usize, &mut [u8]),
        step: bool,
    ) -> Result<(Sent, bool), TransportError> {
        let mut sent = Sent::default();
        let mut reports = Vec::new();
        // Spans that fill their FIFO's whole ring from its start: what a `RunStep` that says
        // `fed` makes the device count, and nothing less.
        let mut whole = 0;
        for (i, span) in spans.iter().enumerate() {
            match self.route(span)? {
                Route::InPlace { at, whole_ring } => {
                    self.fill_in_place(span, at, |into| fill(i, into))?;
                    if span.target.is_stream() {
                        reports.push(*span);
                        whole += usize::from(whole_ring);
                    }
                }
                route => {
                    let mut staged = vec![0u8; span.len];
                    fill(i, &mut staged);
                    self.traffic.staged += span.len as u64;
                    let staged = Arc::new(staged);
                    let seqs = self.send(span, route, &staged[..], Some(staged.clone()))?;
                    sent.seqs.extend(seqs);
                }
            }
        }
        let fed = step && whole == spans.len();
        if !fed {
            self.report(&reports, &mut sent, Access::Write)?;
        }
        Ok((sent, fed))
    }

    /// Writes `data` into `target` at `offset`; `shared`, when the caller holds the same
    /// bytes in an [`Arc`], is handed to a device thread's queue without a copy. Returns
    /// the requests to [`Channel::confirm`].
    pub fn write(
        &mut self,
        target: Target,
        offset: usize,
        data: &[u8],
        shared: Option<&Arc<Vec<u8>>>,
    ) -> Result<Sent, TransportError> {
        let span = Span {
            target,
            offset,
            len: data.len(),
        };
        match self.route(&span)? {
            Route::InPlace { at, .. } => {
                self.fill_in_place(&span, at, |into| into.copy_from_slice(data))?;
                let mut sent = Sent::default();
                if span.target.is_stream() {
                    self.report(&[span], &mut sent, Access::Write)?;
                }
                Ok(sent)
            }
            route => Ok(Sent {
                seqs: self.send(&span, route, data, shared.cloned())?,
            }),
        }
    }

    /// Has `fill` write `span`'s bytes straight into the device's memory at `at`.
    fn fill_in_place(
        &mut self,
        span: &Span,
        at: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), TransportError> {
        let memory = self.memory.as_mut().and_then(|m| m.range_mut(at, span.len));
        let Some(into) = memory else {
            return Err(self.outside_memory(span, at));
        };
        fill(into);
        self.traffic.in_place += span.len as u64;
        Ok(())
    }

    /// Waits for every reply of a move; the first refusal is the error.
    pub fn confirm(&mut self, sent: Sent) -> Result<(), TransportError> {
        let mut first = Ok(());
        for seq in sent.seqs {
            let reply = self.receive(seq);
            if first.is_ok() {
                first = reply.map(drop);
            }
        }
        first
    }

    /// After bytes moved into `target` in place: asks whether the device is still there to
    /// use them. A device thread's end is seen by the host, so nothing is sent (`None`,
    /// or [`TransportError::Closed`] once it has ended); any other device is sent a
    /// [`Locate`] of `target`, whose ticket is returned, to be claimed once every member
    /// of a move has been asked.
    pub fn ask_present(
        &mut self,
        target: Target,
    ) -> Result<Option<Ticket<Locate>>, TransportError> {
        match self.handle.ended_as_seen_here() {
            Some(false) => Ok(None),
            Some(true) => Err(TransportError::Closed {
                replica: self.limits.replica,
            }),
            None => self.submit_typed(&Locate { target }).map(Some),
        }
    }

    /// Bytes this channel moved, by path.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// How `span` moves (see the module's paths). In place needs the device idle: every
    /// request in flight is answered first (its reply stays to be claimed).
    pub(super) fn route(&mut self, span: &Span) -> Result<Route, TransportError> {
        wire(span.offset, "offset")?;
        wire(span.len, "length")?;
        if let Some((at, whole_ring)) = self.in_memory(span)? {
            self.drain()?;
            return Ok(Route::InPlace { at, whole_ring });
        }
        if span.len <= self.bulk_capacity() && span.len > 0 {
            return Ok(Route::Bulk);
        }
        Ok(Route::Chunks)
    }

    /// Where `span` lies in the memory the host maps, when it can move there in place (the
    /// group's moves between devices ask too): its address, and whether it covers its
    /// target's whole range from its start. `None` when the host maps none of this
    /// device's memory, the device does not locate the target, or the span runs past it;
    /// a location outside the mapping is the device breaking its layout, an error. The
    /// device may still be busy: whoever moves the bytes waits for it
    /// ([`Channel::device_memory`]).
    pub(crate) fn in_memory(
        &mut self,
        span: &Span,
    ) -> Result<Option<(usize, bool)>, TransportError> {
        let Some(memory) = self.memory.as_ref().map(|m| m.len()) else {
            return Ok(None);
        };
        self.placed(span, memory)
    }

    /// Where the device places `span` in its memory, as it locates the target (remembered):
    /// for a device whose memory another host maps (a member on another rank). `None` when
    /// the device does not locate the target or the span runs past it; bytes outside the
    /// memory its hello announced are the device breaking its layout, an error.
    #[cfg(feature = "mpi")]
    pub(crate) fn located(&mut self, span: &Span) -> Result<Option<usize>, TransportError> {
        let memory = self.limits.memory as usize;
        Ok(self.placed(span, memory)?.map(|(at, _)| at))
    }

    /// `span`'s address in a memory of `memory` bytes, and whether it covers its target's
    /// whole range (see [`Channel::in_memory`]).
    fn placed(
        &mut self,
        span: &Span,
        memory: usize,
    ) -> Result<Option<(usize, bool)>, TransportError> {
        let Some(range) = self.locate(span.target)? else {
            return Ok(None);
        };
        if span
            .offset
            .checked_add(span.len)
            .is_none_or(|end| end > range.len())
        {
            return Ok(None);
        }
        let at = range.start + span.offset;
        if at.checked_add(span.len).is_none_or(|end| end > memory) {
            return Err(self.outside_memory(span, at));
        }
        Ok(Some((at, span.offset == 0 && span.len == range.len())))
    }

    /// Where `target` lies in the device's memory, remembered; `None` when the device
    /// refuses to say (the move then goes by request, and the device's refusal with it).
    fn locate(&mut self, target: Target) -> Result<Option<Range<usize>>, TransportError> {
        if let Some(range) = self.located.get(target) {
            return Ok(Some(range));
        }
        match self.call(&Locate { target }) {
            Ok(reply) => {
                let range = reply.get();
                self.located.insert(target, range.clone());
                Ok(Some(range))
            }
            Err(TransportError::Device { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sends the bytes of `span` by `route` (bulk or chunks); returns the requests sent.
    fn send(
        &mut self,
        span: &Span,
        route: Route,
        data: &[u8],
        shared: Option<Arc<Vec<u8>>>,
    ) -> Result<Vec<u32>, TransportError> {
        let (target, offset) = (span.target, wire(span.offset, "offset")?);
        if let Route::Bulk = route {
            let request = Request::Data(DataRequest::WriteBulk {
                target,
                offset,
                len: wire(data.len(), "length")?,
            });
            self.traffic.bulk += data.len() as u64;
            if self.window.is_some() {
                // The window is filled from the slice: no staging.
                return Ok(vec![self.submit_in_window(&request, data)?]);
            }
            let bulk = match shared {
                // A queue takes the caller's bytes as they are.
                Some(bytes) if bytes.len() == data.len() => Bulk(bytes),
                _ => {
                    self.traffic.staged += data.len() as u64;
                    Bulk(Arc::new(data.to_vec()))
                }
            };
            return Ok(vec![self.submit_bulk(&request, bulk)?]);
        }
        let chunk = self.limits.max_chunk().max(1);
        let mut seqs = Vec::with_capacity(data.len().div_ceil(chunk));
        for (i, piece) in data.chunks(chunk).enumerate() {
            let request = Request::Data(DataRequest::Write {
                target,
                offset: wire(span.offset + i * chunk, "offset")?,
                data: piece,
            });
            seqs.push(self.submit(&request)?);
        }
        self.traffic.framed += data.len() as u64;
        Ok(seqs)
    }

    /// Reports FIFO spans moved in place, one request each, none awaited.
    pub(super) fn report(
        &mut self,
        spans: &[Span],
        sent: &mut Sent,
        access: Access,
    ) -> Result<(), TransportError> {
        for span in spans {
            let (target, offset, len) = (
                span.target,
                wire(span.offset, "offset")?,
                wire(span.len, "length")?,
            );
            let request = match access {
                Access::Write => Request::Data(DataRequest::Wrote {
                    target,
                    offset,
                    len,
                }),
                Access::Read => Request::Data(DataRequest::Took {
                    target,
                    offset,
                    len,
                }),
            };
            sent.seqs.push(self.submit(&request)?);
        }
        Ok(())
    }

    pub(super) fn outside_memory(&self, span: &Span, at: usize) -> TransportError {
        TransportError::OutsideMemory {
            replica: self.limits.replica,
            target: span.target,
            at,
            len: span.len,
            memory: self.memory.as_ref().map_or(0, |m| m.len()),
        }
    }
}

/// Which way a FIFO's in-place move went.
#[derive(Clone, Copy)]
pub(super) enum Access {
    Write,
    Read,
}

/// `value` as the protocol's `u32`.
pub(super) fn wire(value: usize, what: &'static str) -> Result<u32, TransportError> {
    u32::try_from(value).map_err(|_| TransportError::Overflow { what, value })
}
