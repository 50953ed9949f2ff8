//! A channel while an interruptible request runs
//! ([`RequestKind::is_interruptible`](tessera_core::wire::RequestKind::is_interruptible)) and after the host gives one up: waiting for its
//! messages without re-sends (`poll`, for a caller that runs its own), answering its topic
//! messages (`publish`), sending it again (`resend`), and what the host sends next.

use std::time::{Duration, Instant};

use tessera_core::wire::{Combined, Request, ToDevice};

use super::send::transmit;
use super::{Channel, Reply, TransportError};

impl Channel {
    /// Sends `request` after an interruptible request this host gave up on (a step another
    /// device failed, say) and waits for its reply. A device still running the request
    /// takes any later one as the sign that the host gave up: it ends it at once
    /// (`StepAbandoned`) and drops the later request, which go-back-N would send again
    /// only after a deadline. So once no interruptible request is in flight any more, what
    /// is unanswered is sent again at once; a device that had already finished answers the
    /// repeat from its reply cache. Whatever the abandoned request left unclaimed (its
    /// reply, its topic messages) is discarded.
    pub fn request_after_abandoned(
        &mut self,
        request: &Request<'_>,
    ) -> Result<Reply, TransportError> {
        let abandoned: Vec<u32> = self
            .in_flight
            .iter()
            .filter(|f| f.kind.is_interruptible())
            .map(|f| f.seq)
            .collect();
        let seq = self.submit(request)?;
        while self.in_flight.iter().any(|f| f.kind.is_interruptible()) {
            self.pump(None, true)?;
        }
        if !abandoned.is_empty() && self.in_flight.iter().any(|f| f.seq == seq) {
            // Submitted while an interruptible request was in flight: kept on every link.
            for f in &self.in_flight {
                if let Some(frame) = &f.frame {
                    let link = (&mut self.writer, &mut self.spares);
                    transmit(link, frame, f.bulk.clone(), None, self.limits.replica)?;
                    self.retries += 1;
                }
            }
            self.quiet_since = None;
        }
        let reply = self.receive(seq);
        // The abandoned requests' replies and topic messages are nobody's now.
        self.arrived.retain(|a| !abandoned.contains(&a.seq));
        reply
    }

    /// The next message under `seq` (a reply, or a topic message of an interruptible
    /// request) if one arrives within `wait`, without sending anything again: for a caller
    /// that manages its own retries (the runtime's step driver).
    pub fn poll(&mut self, seq: u32, wait: Duration) -> Result<Option<Reply>, TransportError> {
        if let Some(arrival) = self.take(seq) {
            return Ok(Some(arrival.reply()));
        }
        // The clock is read once a poll has to wait (a step's polls mostly do not).
        let until = Instant::now() + wait;
        loop {
            self.pump(Some(until), false)?;
            if let Some(arrival) = self.take(seq) {
                return Ok(Some(arrival.reply()));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
        }
    }

    /// Sends a reduction's combined result: a topic message answering a contribution of
    /// the interruptible request `combined.step`, which gets no reply and is not tracked
    /// (the device asks again, by sending its contribution again, if it is lost).
    pub fn publish(&mut self, combined: &Combined<'_>) -> Result<(), TransportError> {
        let message = ToDevice::Combined(combined.clone());
        // A size refusal names the request the topic answers.
        let n = self.encode(&message, Combined::ANSWERS)?.len();
        let link = (&mut self.writer, &mut self.spares);
        transmit(link, &self.out[..n], None, None, self.limits.replica)
    }

    /// Sends `request` under `seq` without tracking it: a retry the caller manages.
    pub fn resend(&mut self, seq: u32, request: &Request<'_>) -> Result<(), TransportError> {
        let n = self.frame(seq, request)?.len();
        let link = (&mut self.writer, &mut self.spares);
        transmit(link, &self.out[..n], None, None, self.limits.replica)
    }
}
