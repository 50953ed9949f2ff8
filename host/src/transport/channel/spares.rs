//! Message buffers a channel to a device thread uses again.
//!
//! # Rule
//!
//! A device thread sends its reply back in the buffer its request came in (see
//! `queue::Queue`). Once the host has read that reply, the buffer carries the channel's
//! next message instead of going back to the allocator: in a training step the host sends
//! each device a message per reduction round in one burst (every replica's answer at once)
//! and reads as many back, and bursts of same-sized allocations and frees are the
//! allocator's slow path (glibc's per-thread cache holds seven buffers of a size; the
//! rest go through its shared bins). A channel keeps at most [`KEPT`] buffers, each with a
//! reply's room ([`REPLY_ROOM`]); any other buffer is freed as before. Only a reply its
//! reader hands back (`Channel::recycle`) or a message the channel drops is kept: a buffer
//! never carries two messages at once.

use crate::transport::queue::REPLY_ROOM;

/// Buffers a channel keeps: a device has one request in flight in a step at a time (its
/// step, then each round's answer), so a few cover a step and the requests around it.
pub(super) const KEPT: usize = 4;

/// A channel's spare message buffers (module doc).
#[derive(Debug, Default)]
pub(super) struct Spares {
    kept: Vec<Vec<u8>>,
}

impl Spares {
    /// A buffer holding `encoded`, with room for a reply: a kept one if there is one.
    pub(super) fn holding(&mut self, encoded: &[u8]) -> Vec<u8> {
        let mut body = match self.kept.pop() {
            Some(mut kept) => {
                kept.clear();
                kept
            }
            None => Vec::with_capacity(encoded.len().max(REPLY_ROOM)),
        };
        body.extend_from_slice(encoded);
        body
    }

    /// Keeps `buffer` for a later message if it has a reply's room and fewer than [`KEPT`]
    /// are kept; frees it otherwise.
    pub(super) fn give_back(&mut self, buffer: Vec<u8>) {
        if buffer.capacity() >= REPLY_ROOM && self.kept.len() < KEPT {
            self.kept.push(buffer);
        }
    }

    /// Buffers kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a spare that still holds its last message's bytes: a buffer used again must
    /// carry exactly the new message.
    #[test]
    fn a_kept_buffer_carries_only_the_new_message() {
        let mut spares = Spares::default();
        let first = spares.holding(&[1, 2, 3, 4, 5]);
        let at = first.as_ptr();
        spares.give_back(first);
        let second = spares.holding(&[9, 8]);
        assert_eq!(second, [9, 8]);
        assert_eq!(second.as_ptr(), at, "the kept buffer is the one used");
        assert!(second.capacity() >= REPLY_ROOM);
    }

    /// Catches a channel that hoards buffers: only [`KEPT`] stay, and a buffer without a
    /// reply's room (one a caller allocated) is not kept at all.
    #[test]
    fn at_most_kept_buffers_with_room_stay() {
        let mut spares = Spares::default();
        spares.give_back(Vec::with_capacity(16));
        assert_eq!(spares.len(), 0, "a small buffer is freed");
        for _ in 0..KEPT + 3 {
            spares.give_back(Vec::with_capacity(REPLY_ROOM));
        }
        assert_eq!(spares.len(), KEPT);
    }

    /// Catches a message larger than a reply's room being cut to fit a kept buffer.
    #[test]
    fn a_message_longer_than_the_room_is_whole() {
        let mut spares = Spares::default();
        spares.give_back(Vec::with_capacity(REPLY_ROOM));
        let long: Vec<u8> = (0..REPLY_ROOM * 2).map(|i| i as u8).collect();
        assert_eq!(spares.holding(&long), long);
    }
}
