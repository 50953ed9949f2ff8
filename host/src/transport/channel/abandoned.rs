//! A channel during and after a training step: the step driver's own waiting (`poll`),
//! its combined results (`publish`) and retries (`resend`), and what a host that gave a
//! step up sends next.

use std::time::{Duration, Instant};

use tessera_core::wire::{Combined, Request, RequestKind, ToDevice};

use super::{transmit, Channel, Reply, TransportError};

impl Channel {
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
            // Submitted while a step was in flight: kept on every link.
            for f in &self.in_flight {
                if let Some(frame) = &f.frame {
                    let link = (&mut self.writer, &mut self.spares);
                    transmit(link, frame, f.bulk.clone(), self.limits.replica)?;
                    self.retries += 1;
                }
            }
            self.oldest_sent = Instant::now();
        }
        let reply = self.receive(seq);
        // The abandoned steps' replies and contributions are nobody's now.
        self.arrived.retain(|a| !steps.contains(&a.seq));
        reply
    }

    /// The next message under `seq` (a reply, or a reduction during a step) if one
    /// arrives within `wait`, without sending anything again: for a caller that manages
    /// its own retries (the runtime's step driver).
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

    /// Sends a reduction's combined result: a topic message, which gets no reply and is not
    /// tracked (the device asks again, by sending its contribution again, if it is lost).
    pub fn publish(&mut self, combined: &Combined<'_>) -> Result<(), TransportError> {
        let message = ToDevice::Combined(combined.clone());
        let n = self.encode(&message, RequestKind::RunStep)?.len();
        let link = (&mut self.writer, &mut self.spares);
        transmit(link, &self.out[..n], None, self.limits.replica)
    }

    /// Sends `request` under `seq` without tracking it: a retry the caller manages.
    pub fn resend(&mut self, seq: u32, request: &Request<'_>) -> Result<(), TransportError> {
        let n = self.frame(seq, request)?.len();
        let link = (&mut self.writer, &mut self.spares);
        transmit(link, &self.out[..n], None, self.limits.replica)
    }
}
