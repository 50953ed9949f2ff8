//! What a channel hands back: a reply (its frame body, decoded on demand, and any bulk
//! bytes that came beside it), and a reply known to be of an endpoint's type.
//!
//! A contribution to a step's reduction is decoded once, when the channel takes it in: its
//! heading and where its data lie in the body ([`Share`]) travel with it, so the step
//! driver, which reads a contribution twice (to judge it, then to fold it), decodes nothing
//! again, and a reply that is no contribution is known as one without a decode.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{Contribution, Endpoint, Envelope, FromDevice, ReduceOp, Response};

use super::queue::Bulk;

/// A reply: the frame body it came in, its decoded response, and any bulk bytes beside it.
#[derive(Clone)]
pub struct Reply {
    pub(super) seq: u32,
    pub(super) body: Vec<u8>,
    pub(super) bulk: Option<Bulk>,
    /// The contribution the body holds instead of a reply, if it does.
    pub(super) share: Option<Share>,
}

/// A contribution's heading, decoded when its message came in, and where its data lie in
/// the message's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Share {
    step: u32,
    round: u32,
    op: ReduceOp,
    data: Range<usize>,
}

impl Share {
    /// `c`'s heading, `c` decoded from `body` (its data borrow from it: postcard lends a
    /// byte string out of its input); `None` if they do not lie in `body` (a decoder that
    /// copied them).
    pub(super) fn of(c: &Contribution<'_>, body: &[u8]) -> Option<Self> {
        let data = if c.data.is_empty() {
            // No bytes to find: an empty slice may point anywhere.
            0..0
        } else {
            let start = (c.data.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
            let data = start..start.checked_add(c.data.len())?;
            // Inside the body: the range names the very bytes decoded.
            body.get(data.clone())?;
            data
        };
        Some(Self {
            step: c.step,
            round: c.round,
            op: c.op,
            data,
        })
    }
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
    /// The response, borrowing its payload from the frame; `None` when the message is no
    /// reply (a contribution to a reduction, which a step's driver reads with
    /// [`Reply::contribution`]). A message that decodes as neither was dropped when it came
    /// in, so nothing else is `None`.
    pub fn response(&self) -> Option<Response<'_>> {
        match decode_body::<FromDevice<'_>>(&self.body) {
            Ok(FromDevice::Reply(Envelope { body, .. })) => Some(body),
            _ => None,
        }
    }

    /// The contribution to a reduction this message is instead of a reply, during a step
    /// (see [`Channel::poll`](super::Channel::poll)): read from the heading kept when the
    /// message came in, not decoded again.
    pub fn contribution(&self) -> Option<Contribution<'_>> {
        let share = self.share.as_ref()?;
        Some(Contribution {
            step: share.step,
            round: share.round,
            op: share.op,
            data: self.body.get(share.data.clone())?,
        })
    }

    /// A message carrying `contribution`, as a device sends it: for the step driver's tests.
    #[cfg(test)]
    pub(crate) fn from_contribution(contribution: Contribution<'_>) -> Self {
        let message = FromDevice::Contribution(contribution);
        let body = postcard::to_allocvec(&message).expect("a contribution encodes");
        let share = match decode_body::<FromDevice<'_>>(&body) {
            Ok(FromDevice::Contribution(c)) => Share::of(&c, &body),
            _ => None,
        };
        Self {
            seq: 0,
            body,
            bulk: None,
            share,
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
        match self.reply.response().and_then(E::reply) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a contribution read back from the wrong bytes of its message: the heading
    /// and the data its [`Share`] names must be the ones the device sent, whatever the
    /// lengths of the varints before them.
    #[test]
    fn a_contribution_reads_back_as_it_was_sent() {
        for (step, round, len) in [(0, 0, 0), (1, 2, 3), (u32::MAX, 300, 1000)] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let sent = Contribution {
                step,
                round,
                op: ReduceOp::Avg,
                data: &data,
            };
            let reply = Reply::from_contribution(sent.clone());
            assert_eq!(reply.contribution(), Some(sent));
        }
    }

    /// Catches a share taken from bytes the body does not hold (a decoder that copied
    /// them would leave a range that names other bytes).
    #[test]
    fn a_share_of_bytes_outside_the_body_is_none() {
        let body = vec![0u8; 16];
        let elsewhere = [1u8; 4];
        let c = Contribution {
            step: 0,
            round: 0,
            op: ReduceOp::Sum,
            data: &elsewhere,
        };
        assert_eq!(Share::of(&c, &body), None);
        let empty = Contribution { data: &[], ..c };
        assert_eq!(Share::of(&empty, &body).map(|s| s.data), Some(0..0));
        let inside = Contribution {
            data: &body[4..8],
            ..c
        };
        assert_eq!(Share::of(&inside, &body).map(|s| s.data), Some(4..8));
    }

    /// A reply that is no contribution says so without a share.
    #[test]
    fn a_reply_is_no_contribution() {
        let body = postcard::to_allocvec(&FromDevice::Reply(Envelope {
            seq: 5,
            body: Response::Done,
        }))
        .unwrap();
        let reply = Reply {
            seq: 5,
            body,
            bulk: None,
            share: None,
        };
        assert_eq!(reply.contribution(), None);
        assert_eq!(reply.response(), Some(Response::Done));
        let contribution = Reply::from_contribution(Contribution {
            step: 0,
            round: 0,
            op: ReduceOp::Sum,
            data: &[],
        });
        assert_eq!(contribution.response(), None, "a contribution is no reply");
    }
}
