//! Host to device: the requests, each in the area of the device that serves it.
//!
//! A [`Request`] opens the session ([`Hello`](Request::Hello)), or asks one area of the
//! device for something. The areas are the ones the device is built of, and each serves
//! exactly the requests of its own enum:
//!
//! - [`Data`](Request::Data) ([`DataRequest`]): the bytes of every
//!   [`Target`](super::Target) — a register's array, a remote-buffer slot, a variable, a
//!   stream FIFO — carried in a frame, beside it, or moved in place by the host (see
//!   [`target`](super::target)).
//! - [`Memory`](Request::Memory) ([`MemoryRequest`]): remote-buffer slots, and copies
//!   between slots and on-device variables.
//! - [`Streams`](Request::Streams) ([`StreamRequest`]): creating the stream FIFOs.
//! - [`Program`](Request::Program) ([`ProgramRequest`]): the prepared program and
//!   everything around its step — optimizer values, seed and RNG state, prepare, step,
//!   reset-step, cycle counts.
//! - [`Kernels`](Request::Kernels) ([`KernelRequest`]): the register file and the named
//!   functions that run on it.
//!
//! The device answers every request with exactly one reply
//! ([`Response`](super::Response), under the request's sequence number: see
//! [`direction`](super::direction)); an error reply names the request by its
//! [`RequestKind`].
//!
//! On the wire a request is its area's position in [`Request`], then the request's position
//! in its area's enum, then its fields (a hello: its position, then its fields; postcard,
//! see the [`wire`](super) module's versions).

mod data;
mod kernels;
mod kind;
mod memory;
mod program;
mod streams;

use serde::{Deserialize, Serialize};

pub use data::DataRequest;
pub use kernels::KernelRequest;
pub use kind::RequestKind;
pub use memory::MemoryRequest;
pub use program::ProgramRequest;
pub use streams::StreamRequest;

/// Host to device: a hello, or a request for one of the device's areas.
// `Kernels` carries a call's arguments inline (a few hundred bytes): a request is built
// once on the stack and encoded at once, and no_std has no box to put them in.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request<'a> {
    /// Opens a session and tells the device which replicas it is (the controller assigns
    /// worker ids); the device answers with its limits. A device refuses more lanes than
    /// it can run ([`ErrorCode::Lanes`](super::ErrorCode::Lanes)).
    Hello {
        /// The host's [`PROTOCOL_VERSION`](super::PROTOCOL_VERSION).
        version: u16,
        /// The replica this device serves from now on (its first lane's).
        replica: u32,
        /// Replicas it serves, `replica` and the ones after it, one per lane
        /// ([`lanes`](crate::program::lanes)): 1 for a device of one replica.
        lanes: u16,
    },
    /// The data path: bytes of a target, however they move.
    #[serde(borrow)]
    Data(DataRequest<'a>),
    /// Remote-buffer slots and their copies to and from variables.
    Memory(MemoryRequest),
    /// The stream FIFOs.
    Streams(StreamRequest),
    /// The prepared program and its step.
    #[serde(borrow)]
    Program(ProgramRequest<'a>),
    /// The register file and the named functions.
    #[serde(borrow)]
    Kernels(KernelRequest<'a>),
}

impl Request<'_> {
    /// The kind of this request, for error replies.
    pub fn kind(&self) -> RequestKind {
        match self {
            Self::Hello { .. } => RequestKind::Hello,
            Self::Data(request) => request.kind(),
            Self::Memory(request) => request.kind(),
            Self::Streams(request) => request.kind(),
            Self::Program(request) => request.kind(),
            Self::Kernels(request) => request.kind(),
        }
    }
}

impl<'a> From<DataRequest<'a>> for Request<'a> {
    fn from(request: DataRequest<'a>) -> Self {
        Self::Data(request)
    }
}

impl From<MemoryRequest> for Request<'_> {
    fn from(request: MemoryRequest) -> Self {
        Self::Memory(request)
    }
}

impl From<StreamRequest> for Request<'_> {
    fn from(request: StreamRequest) -> Self {
        Self::Streams(request)
    }
}

impl<'a> From<ProgramRequest<'a>> for Request<'a> {
    fn from(request: ProgramRequest<'a>) -> Self {
        Self::Program(request)
    }
}

impl<'a> From<KernelRequest<'a>> for Request<'a> {
    fn from(request: KernelRequest<'a>) -> Self {
        Self::Kernels(request)
    }
}
