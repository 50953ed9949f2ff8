//! What a channel sends: a request encoded (a frame, delimiter first, on a byte link; a bare
//! body on a link that carries whole messages), sent once the device's window of requests
//! has room, kept to be sent again where it may be lost (module doc of `channel`), with its
//! bulk bytes beside it on a queue or through the link's window.

use std::io::Write;

use tessera_core::wire::{
    encode_body, encode_frame, DataRequest, Envelope, KernelRequest, MemoryRequest, ProgramRequest,
    Request, RequestKind, StreamRequest, ToDevice,
};

use super::spares::Spares;
use super::{Channel, InFlight, TransportError};
use crate::transport::queue::{Bulk, Message};
use crate::transport::reader::MAX_FRAME;
use crate::transport::spawn::Outgoing;

impl Channel {
    /// Like [`Channel::submit`], with `bulk` beside the request (a
    /// [`DataRequest::WriteBulk`]) on a device thread's queue. Refused at once
    /// ([`TransportError::TooLarge`]) on a link without a queue.
    pub(super) fn submit_bulk(
        &mut self,
        request: &Request<'_>,
        bulk: Bulk,
    ) -> Result<u32, TransportError> {
        if !matches!(self.writer, Outgoing::Messages(_)) {
            return Err(self.too_large(request.kind(), bulk.as_ref().len()));
        }
        self.submit_with(request, Some(bulk), false)
    }

    /// Like [`Channel::submit`], with `data` put in the link's window for the device to take
    /// while it serves the request (a [`DataRequest::WriteBulk`]): once no earlier request uses
    /// the window. Refused at once ([`TransportError::TooLarge`]) when it does not fit.
    pub(super) fn submit_in_window(
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
        self.submit_with(request, None, false)
    }

    pub(super) fn too_large(&self, request: RequestKind, bytes: usize) -> TransportError {
        TransportError::TooLarge {
            replica: self.limits.replica,
            request,
            bytes,
            max: self.bulk_capacity(),
        }
    }

    /// Waits until no request that uses the shared window is in flight.
    pub(super) fn wait_for_window(&mut self) -> Result<(), TransportError> {
        while self.in_flight.iter().any(|f| uses_window(f.kind)) {
            self.pump(None, true)?;
        }
        Ok(())
    }

    /// Submits `request` with `bulk` beside it; with `hold`, its message may be held back
    /// (module doc of `channel`: held requests).
    pub(super) fn submit_with(
        &mut self,
        request: &Request<'_>,
        bulk: Option<Bulk>,
        hold: bool,
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
        if !keeps_layout(request) {
            self.located.clear();
        }
        let seq = self.next_seq;
        // Zero is never used: the device answers undecodable frames under it.
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        let kept = self.may_resend();
        let n = self.frame(seq, request)?.len();
        let frame = &self.out[..n];
        // A kept frame is copied each time it is sent (`transmit`); one sent whole goes in a
        // buffer with room for its reply.
        let frame = if kept {
            frame.to_vec()
        } else {
            self.spares.holding(frame)
        };
        if self.in_flight.is_empty() {
            // The oldest now: its silence is timed from the first look that finds none.
            self.quiet_since = None;
        }
        let replica = self.limits.replica;
        let held =
            hold && bulk.is_none() && !self.in_flight.iter().any(|f| f.kind.is_interruptible());
        let frame = if held {
            // One message travels ahead of another, no more: the earlier goes now (should
            // that fail, this request is not held: it was not submitted).
            self.send_held()?;
            let copy = kept.then(|| frame.clone());
            self.held = Some(frame);
            copy
        } else {
            let ahead = self.held.take();
            let sent = (&mut self.writer, &mut self.spares);
            if kept {
                transmit(sent, &frame, bulk.clone(), ahead, replica)?;
                Some(frame)
            } else {
                send_queued(sent, frame, bulk.clone(), ahead, replica)?;
                None
            }
        };
        self.traffic.requests += 1;
        self.in_flight.push_back(InFlight {
            seq,
            kind: request.kind(),
            frame,
            bulk,
            attempts: 1,
            silent_since: None,
        });
        Ok(seq)
    }

    /// Sends the held message, if there is one, alone (module doc: held requests).
    pub(super) fn send_held(&mut self) -> Result<(), TransportError> {
        match self.held.take() {
            Some(body) => send_queued(
                (&mut self.writer, &mut self.spares),
                body,
                None,
                None,
                self.limits.replica,
            ),
            None => Ok(()),
        }
    }

    /// True when a request submitted now may have to be sent again: on a byte link always,
    /// on a queue only while an interruptible request is in flight (module doc).
    fn may_resend(&self) -> bool {
        matches!(self.writer, Outgoing::Bytes(_))
            || self.in_flight.iter().any(|f| f.kind.is_interruptible())
    }

    /// Encodes `request` under `seq` into the output buffer: a frame, delimiter first, for
    /// a byte link; the bare body for a message link.
    pub(super) fn frame(
        &mut self,
        seq: u32,
        request: &Request<'_>,
    ) -> Result<&[u8], TransportError> {
        // A request's payload is borrowed: the clone copies no bulk bytes.
        let message = ToDevice::Request(Envelope {
            seq,
            body: request.clone(),
        });
        self.encode(&message, request.kind())
    }

    /// Encodes `message` into the output buffer as [`Channel::frame`] says; `kind` names
    /// the request it belongs to in a size error.
    pub(super) fn encode(
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
            // Links that carry whole messages: no framing.
            Outgoing::Messages(_) | Outgoing::Ring(_) => {
                let n = encode_body(message, &mut self.out).map_err(|_| too_large(MAX_FRAME))?;
                if n > self.limits.max_frame as usize {
                    return Err(too_large(n));
                }
                n
            }
        };
        Ok(&self.out[..n])
    }
}

/// True for the requests that never allocate, free or move device memory, so that where a
/// target lies stays as [`DataRequest::Locate`] said. Any other request makes the channel
/// locate targets again: a register set, freed or written by a call may move. Every
/// request is named, area by area: a new one does not compile until it is classified.
fn keeps_layout(request: &Request<'_>) -> bool {
    use DataRequest as D;
    use KernelRequest as K;
    use MemoryRequest as M;
    use ProgramRequest as P;
    match request {
        Request::Data(
            D::Write { .. }
            | D::Read { .. }
            | D::WriteBulk { .. }
            | D::ReadBulk { .. }
            | D::Locate { .. }
            | D::Wrote { .. }
            | D::Took { .. },
        ) => true,
        Request::Program(request) => match request {
            P::SetOptimizer { .. }
            | P::SetSeed { .. }
            | P::GetSeed
            | P::SetRngState { .. }
            | P::GetRngState { .. }
            | P::RunStep { .. }
            | P::CycleCount { .. }
            | P::ResetStep => true,
            P::Prepare { .. } => false,
        },
        Request::Kernels(request) => match request {
            K::GetRegister { .. } | K::DescribeRegister { .. } | K::HasFunction { .. } => true,
            K::SetRegister { .. }
            | K::FreeRegister { .. }
            | K::Invoke { .. }
            | K::AllocArray { .. } => false,
        },
        Request::Hello { .. }
        | Request::Memory(M::AllocSlot { .. } | M::RemoteLoad { .. } | M::RemoteStore { .. })
        | Request::Streams(StreamRequest::CreateFifo { .. }) => false,
    }
}

/// True for the requests whose bytes pass through a shared window.
fn uses_window(kind: RequestKind) -> bool {
    matches!(kind, RequestKind::WriteBulk | RequestKind::ReadBulk)
}

/// Sends one encoded message (a frame, or a bare body), with the held message `ahead` of
/// it (module doc of `channel`: held requests), and flushes them: on a byte link in one
/// write, on a device thread's queue as one message (in a spare buffer), on a ring back to
/// back. A link whose other end is gone is [`TransportError::Closed`], naming the replica.
pub(super) fn transmit(
    (writer, spares): (&mut Outgoing, &mut Spares),
    encoded: &[u8],
    bulk: Option<Bulk>,
    ahead: Option<Vec<u8>>,
    replica: u32,
) -> Result<(), TransportError> {
    let closed = TransportError::Closed { replica };
    match writer {
        Outgoing::Bytes(writer) => {
            let written = match ahead {
                Some(mut both) => {
                    both.extend_from_slice(encoded);
                    writer.write_all(&both)
                }
                None => writer.write_all(encoded),
            };
            match written.and_then(|()| writer.flush()) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(closed),
                Err(e) => Err(e.into()),
            }
        }
        Outgoing::Messages(mailbox) => mailbox
            .send(Message {
                body: spares.holding(encoded),
                bulk,
                ahead,
            })
            .map_err(|()| closed),
        // A full ring breaks the window's bound (`transport::ring`): reported, not waited.
        Outgoing::Ring(ring) => ahead
            .map_or(Ok(()), |ahead| ring.send(&ahead))
            .and_then(|()| ring.send(encoded))
            .map_err(|error| TransportError::Ring { replica, error }),
    }
}

/// Sends `frame` whole, with the held message `ahead` of it: into a device thread's queue
/// without a copy; onto any other link as [`transmit`] does.
fn send_queued(
    (writer, spares): (&mut Outgoing, &mut Spares),
    frame: Vec<u8>,
    bulk: Option<Bulk>,
    ahead: Option<Vec<u8>>,
    replica: u32,
) -> Result<(), TransportError> {
    match writer {
        Outgoing::Messages(mailbox) => mailbox
            .send(Message {
                body: frame,
                bulk,
                ahead,
            })
            .map_err(|()| TransportError::Closed { replica }),
        Outgoing::Bytes(_) | Outgoing::Ring(_) => {
            transmit((writer, spares), &frame, bulk, ahead, replica)
        }
    }
}
