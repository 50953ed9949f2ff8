//! What a channel takes in: messages pumped from the link until one arrives or a deadline
//! passes, each filed as a reply or a step's contribution, and go-back-N when the oldest
//! unanswered request waited its deadline.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::Instant;

use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{Envelope, FromDevice, Response};

use super::send::transmit;
use super::{Arrival, Channel, Outgoing, Share, Silence, TransportError, ATTEMPTS};
use crate::transport::queue::{Bulk, Message};

impl Channel {
    /// Takes in what the device sent, until one message arrives or `until` passes; with
    /// `retransmit`, sends every unanswered request again when the oldest has waited its
    /// deadline (and fails after [`ATTEMPTS`]).
    pub(super) fn pump(
        &mut self,
        until: Option<Instant>,
        retransmit: bool,
    ) -> Result<(), TransportError> {
        // Nothing is waited for while a message is held (module doc: held requests).
        self.send_held()?;
        let deadline = self.deadline;
        let quiet = &mut self.quiet_since;
        // Asked only once a look finds nothing: the silence is timed from then.
        let wake = || {
            let resend_at = *quiet.get_or_insert_with(Instant::now) + deadline;
            Some(match until {
                Some(until) if !retransmit || until < resend_at => until,
                _ => resend_at,
            })
        };
        match self.frames.receive(wake, self.spin) {
            Ok(message) => {
                self.accept(message);
                Ok(())
            }
            Err(RecvTimeoutError::Timeout)
                if retransmit
                    && self
                        .quiet_since
                        .is_some_and(|quiet| quiet.elapsed() >= deadline) =>
            {
                self.go_back()
            }
            Err(RecvTimeoutError::Timeout) => Ok(()),
            // A ring that broke its rules says which; any other source has just gone.
            Err(RecvTimeoutError::Disconnected) => Err(match self.frames.broken() {
                Some(error) => TransportError::Ring {
                    replica: self.limits.replica,
                    error,
                },
                None => TransportError::Closed {
                    replica: self.limits.replica,
                },
            }),
        }
    }

    /// Files a message from the device: a reply to a request in flight completes it; a
    /// reduction (during a step) is queued under the step; anything else is stale.
    pub(super) fn accept(&mut self, mut message: Message) {
        if let Some(first) = message.ahead.take() {
            // A reply the device held back to travel with this message came first.
            self.accept(Message::alone(first));
        }
        let mut done = false;
        let (seq, completes, bulk, share) = match decode_body::<FromDevice<'_>>(&message.body) {
            Ok(FromDevice::Reply(Envelope { seq, body })) => {
                done = body == Response::Done;
                let bulk = match body {
                    Response::Bulk { len } => Some(len),
                    _ => None,
                };
                (seq, true, bulk, None)
            }
            // A contribution waits under its step, which it does not complete. Its data
            // always lie in its body (postcard lends them out of it): a share is found.
            Ok(FromDevice::Contribution(c)) => match Share::of(&c, &message.body) {
                Some(share) => (c.step, false, None, Some(share)),
                None => return self.spares.give_back(message.body),
            },
            Err(_) => return self.spares.give_back(message.body),
        };
        let Some(at) = self.in_flight.iter().position(|f| f.seq == seq) else {
            // An answer to a retry of something already answered.
            return self.spares.give_back(message.body);
        };
        // A bulk read's bytes wait in the shared window: take them before it is reused.
        let from_window = match (bulk, &self.window) {
            (Some(len), Some(window)) => window.read(len as usize),
            _ => None,
        };
        if let Some(bytes) = from_window {
            message.bulk = Some(Bulk(Arc::new(bytes)));
        }
        if completes {
            self.in_flight.remove(at);
            if at == 0 {
                // Progress: the next oldest request's silence is timed afresh.
                self.quiet_since = None;
            }
        }
        self.arrived.push_back(Arrival {
            seq,
            message,
            share,
            done,
        });
    }

    /// Sends every unanswered request again, oldest first (go-back-N).
    pub(super) fn go_back(&mut self) -> Result<(), TransportError> {
        let quiet_since = self.quiet_since;
        let Some(oldest) = self.in_flight.front_mut() else {
            return Ok(());
        };
        // Silent since the look that first found it so (the timed-out wait that brought us
        // here set `quiet_since`), whatever came of the sends since.
        let since = *oldest
            .silent_since
            .get_or_insert_with(|| quiet_since.unwrap_or_else(Instant::now));
        let (kind, attempts, seq) = (oldest.kind, oldest.attempts, oldest.seq);
        if attempts >= ATTEMPTS {
            match self.silence(kind, since, attempts) {
                Silence::Report(error) => {
                    tracing::warn!(replica = self.limits.replica, request = ?kind, %error, "device did not answer");
                    return Err(error);
                }
                // Sending it again would only queue copies behind the work.
                Silence::Working => {
                    self.quiet_since = None;
                    return Ok(());
                }
                Silence::Retry => {}
            }
        }
        tracing::debug!(
            replica = self.limits.replica,
            seq,
            unanswered = self.in_flight.len(),
            "no reply in time: sending the unanswered requests again"
        );
        // Only the oldest timed out: the others are sent again because go-back-N must, and
        // that costs none of their attempts.
        if let Some(oldest) = self.in_flight.front_mut() {
            oldest.attempts += 1;
        }
        // A ring the device has not emptied still holds the earlier copies: more would only
        // queue behind them (and could fill it). The attempt counts all the same.
        if matches!(&self.writer, Outgoing::Ring(ring) if ring.holds_unread()) {
            self.quiet_since = None;
            return Ok(());
        }
        // Frames not kept went into a queue that loses nothing: nothing to send again.
        for request in &self.in_flight {
            if let Some(frame) = &request.frame {
                transmit(
                    (&mut self.writer, &mut self.spares),
                    frame,
                    request.bulk.clone(),
                    None,
                    self.limits.replica,
                )?;
                self.retries += 1;
            }
        }
        self.quiet_since = None;
        Ok(())
    }
}
