//! What travels each way, as postcard-rpc separates it: endpoints and topics.
//!
//! - Host → device ([`ToDevice`]): a [`Request`] in its [`Envelope`], which the device
//!   answers with exactly one reply; or a [`Combined`] result of a reduction, a topic
//!   message that gets no reply.
//! - Device → host ([`FromDevice`]): a reply ([`Response`] in its [`Envelope`], under the
//!   sequence number of the request it answers); or a [`Contribution`] to a reduction
//!   during a step, a topic message the host answers with a [`Combined`], not a reply.
//!
//! So no request goes without a reply and no reply is really a request. A reduction's
//! identity is the step's sequence number and the round: a device applies a [`Combined`]
//! only when both match the contribution it is waiting on, so a late or repeated one is
//! discarded, never taken for another round's.

use serde::{Deserialize, Serialize};

use super::message::{Envelope, ReduceOp, Response};
use super::request::Request;

/// A device's share of a reduction round during a step: combine `data` across the round's
/// group and send the result back as a [`Combined`] with the same step and round. A device
/// may send the same contribution again (its answer was late or lost); the host answers
/// every copy with the same combination.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contribution<'a> {
    /// The step's sequence number (its `RunStep` request's).
    pub step: u32,
    /// Which exchange of the step this is ([`exchange`](crate::program::exchange): a
    /// batch's rounds of one kind, as many as a frame carries), so that neither side takes
    /// a re-sent contribution or answer for another exchange's.
    pub round: u32,
    /// How to combine.
    pub op: ReduceOp,
    /// This replica's contribution (f32, little-endian): its rounds' buffers one after
    /// another.
    #[serde(serialize_with = "super::bytes::serialize")]
    pub data: &'a [u8],
}

/// The host's combination of one exchange, for one device: each round's combination
/// across that device's group for its variable, in the order of the contribution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Combined<'a> {
    /// The step's sequence number, as the contribution named it.
    pub step: u32,
    /// The round, as the contribution named it.
    pub round: u32,
    /// The combined buffer (f32, little-endian), as long as the contribution.
    #[serde(serialize_with = "super::bytes::serialize")]
    pub data: &'a [u8],
}

impl Combined<'_> {
    /// The request whose contributions a combined result answers (an interruptible one:
    /// [`RequestKind::is_interruptible`](super::RequestKind::is_interruptible)).
    pub const ANSWERS: super::RequestKind = super::RequestKind::RunStep;
}

/// Everything the host sends a device: a frame's body.
// As large as its largest request (an `Invoke`'s arguments): a frame is decoded into one
// value at a time, on the stack, and never stored; no_std cannot box it.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToDevice<'a> {
    /// A request: the device answers it with one reply.
    #[serde(borrow)]
    Request(Envelope<Request<'a>>),
    /// A reduction's combined result: no reply.
    #[serde(borrow)]
    Combined(Combined<'a>),
}

/// Everything a device sends the host: a frame's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromDevice<'a> {
    /// The reply to a request.
    #[serde(borrow)]
    Reply(Envelope<Response<'a>>),
    /// A contribution to a reduction during a step.
    #[serde(borrow)]
    Contribution(Contribution<'a>),
}
