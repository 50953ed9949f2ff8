//! The host↔device protocol: messages and their framing on a byte link.
//!
//! - [`message`]: what host and device say to each other. Every message travels in an
//!   [`Envelope`] with a sequence number, so that the host can retry a request and the
//!   device can recognise (and answer again) one it already ran. The session starts with
//!   [`Request::Hello`], which carries [`PROTOCOL_VERSION`]; the device answers with its
//!   [`Limits`].
//! - [`request`]: the requests, host to device, each in the enum of the device area that
//!   serves it (data, memory, streams, program, kernels).
//! - [`error`]: why a device refuses a request — the rule that failed.
//! - [`direction`]: what travels each way — requests and combined results to a device,
//!   replies and contributions from it (endpoints beside topics).
//! - [`target`]: what a byte-moving request addresses, and what an offset means there.
//! - [`endpoint`]: typed endpoints — each request type and the payload of its reply.
//! - [`frame`]: a frame is the postcard body, its CRC-32, COBS-encoded, then `0x00`.
//!   [`FrameDecoder`] reassembles frames in a fixed buffer and resynchronises on every
//!   delimiter, so a corrupted, truncated or oversized frame costs only itself.
//! - `decode` and `encode` (internal): what a device decodes ([`ToDevice::decode`],
//!   [`Program::decode`](crate::program::Program::decode)) and encodes
//!   ([`FromDevice::encode`]), by hand as postcard does it, without serde's code in the
//!   device's flash.
//!
//! Bytes (weights, registers, stream samples) travel in one of three ways, which the same
//! requests name by their [`Target`]: in frames, in chunks no larger than
//! [`Limits::max_chunk`] (which leaves room for the envelope); beside a message, in bulk;
//! or in place, moved by a host that maps the device's memory.
//!
//! # Versions
//!
//! Host and device must run exactly the same [`PROTOCOL_VERSION`]: there is no
//! negotiation and no "compatible" older version, because postcard writes a variant as its
//! position and a struct as its fields in order, so any change to a message changes its
//! bytes. A device refuses a hello of any other version with [`ErrorCode::Version`] (naming
//! its own); the host sends nothing else before its hello is accepted, and reports the
//! refusal as an error naming both versions. Every change to the bytes of a message bumps the version
//! (`core/tests/suite/wire_golden/` pins the bytes and the version together). Between bumps,
//! new variants go at the end of their enum, so that a bump is needed only when an old
//! one changes; at a bump the enums may be cleaned up and renumbered at once.
//!
//! # Panics
//!
//! Nothing here panics, whatever the bytes on the link.

pub(crate) mod bytes;
pub(crate) mod decode;
pub mod direction;
pub(crate) mod encode;
pub mod endpoint;
pub mod error;
pub mod frame;
pub mod message;
pub mod request;
pub mod target;

pub use direction::{Combined, Contribution, FromDevice, ToDevice};
pub use endpoint::{Command, Endpoint};
pub use frame::{
    decode_body, encode_body, encode_frame, frame_body, max_frame_len, FrameDecoder, FrameError,
    FRAME_OVERHEAD,
};
pub use message::{
    Arg, Array, Envelope, ErrorCode, Invariant, Limits, ReduceOp, Response, Value, ValueKind,
    MAX_CALL_ARGS, MAX_SHAPE_RANK, PROTOCOL_VERSION,
};
pub use request::{
    DataRequest, KernelRequest, MemoryRequest, ProgramRequest, Request, RequestKind, StreamRequest,
};
pub use target::Target;
