//! What a channel hands back: a reply (its frame body, decoded on demand, and any bulk
//! bytes that came beside it), and a reply known to be of an endpoint's type.

use std::fmt;
use std::marker::PhantomData;

use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{Contribution, Endpoint, Envelope, FromDevice, Response};
use tessera_firmware_sim::std_link::Bulk;

/// A reply: the frame body it came in, its decoded response, and any bulk bytes beside it.
#[derive(Clone)]
pub struct Reply {
    pub(super) seq: u32,
    pub(super) body: Vec<u8>,
    pub(super) bulk: Option<Bulk>,
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reply")
            .field("seq", &self.seq())
            .field("response", &self.response())
            .finish()
    }
}

impl Reply {
    /// The response, borrowing its payload from the frame.
    pub fn response(&self) -> Response<'_> {
        // Checked when the reply was accepted (see `Channel::pump`).
        match decode_body::<FromDevice<'_>>(&self.body) {
            Ok(FromDevice::Reply(Envelope { body, .. })) => body,
            _ => Response::Done,
        }
    }

    /// The contribution to a reduction this message is instead of a reply, during a step
    /// (see [`Channel::poll`](super::Channel::poll)).
    pub fn contribution(&self) -> Option<Contribution<'_>> {
        match decode_body::<FromDevice<'_>>(&self.body) {
            Ok(FromDevice::Contribution(c)) => Some(c),
            _ => None,
        }
    }

    /// A message carrying `contribution`, as a device sends it: for the step driver's tests.
    #[cfg(test)]
    pub(crate) fn from_contribution(contribution: Contribution<'_>) -> Self {
        let message = FromDevice::Contribution(contribution);
        let body = postcard::to_allocvec(&message).expect("a contribution encodes");
        Self {
            seq: 0,
            body,
            bulk: None,
        }
    }

    /// The sequence number.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// The bulk bytes that came beside the reply (a bulk read's data), if any.
    pub fn take_bulk(&mut self) -> Option<Bulk> {
        self.bulk.take()
    }
}

/// A reply known to be `E`'s: [`Typed::get`] gives its payload.
pub struct Typed<E> {
    pub(super) reply: Reply,
    pub(super) endpoint: PhantomData<E>,
}

impl<E: Endpoint> Typed<E> {
    /// The reply's payload, borrowing from the frame.
    pub fn get(&self) -> E::Reply<'_> {
        match E::reply(self.reply.response()) {
            Some(payload) => payload,
            // `Channel::call` checked the type before building this.
            None => unreachable!("a typed reply of the wrong type"),
        }
    }
}

impl<E> fmt::Debug for Typed<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.reply.fmt(f)
    }
}
