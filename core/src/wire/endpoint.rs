//! Typed endpoints: each request type names the reply it gets, as postcard-rpc's endpoints
//! do, so a caller receives the reply's payload with its type or learns that the device
//! answered with something else — never a hand-written match per call site.
//!
//! The requests whose reply carries data have an endpoint type of their own ([`Hello`],
//! [`GetSeed`], [`Read`], [`GetRegister`], …). Every other request is answered
//! [`Response::Done`]; wrap it in a [`Command`], which refuses (at construction) a request
//! whose reply is not `Done`. Which requests those are is decided area by area, every
//! request named, so that a new request does not compile until its reply is.

use super::message::{Limits, Response, Value, ValueKind, MAX_SHAPE_RANK};
use super::request::{DataRequest, KernelRequest, ProgramRequest, Request};
use super::target::Target;
use crate::dtype::DataType;

/// A request type and the payload of its reply.
pub trait Endpoint {
    /// What a successful reply carries (borrowing from the reply's frame).
    type Reply<'r>;
    /// The request this endpoint sends.
    fn request(&self) -> Request<'_>;
    /// The payload of `response`, or `None` when `response` is not this endpoint's reply.
    fn reply(response: Response<'_>) -> Option<Self::Reply<'_>>;
}

/// Any request answered [`Response::Done`].
#[derive(Debug, Clone, PartialEq)]
pub struct Command<'a>(Request<'a>);

impl<'a> Command<'a> {
    /// `request` as a command; `None` when its reply is not [`Response::Done`] (use its own
    /// endpoint type instead).
    pub fn new(request: Request<'a>) -> Option<Self> {
        is_command(&request).then_some(Self(request))
    }
}

/// True for a request a [`Command`] carries: one answered [`Response::Done`] and nothing
/// else.
fn is_command(request: &Request<'_>) -> bool {
    use DataRequest as D;
    use KernelRequest as K;
    use ProgramRequest as P;
    match request {
        Request::Hello { .. } => false,
        Request::Data(request) => match request {
            D::Write { .. } | D::WriteBulk { .. } | D::Wrote { .. } | D::Took { .. } => true,
            D::Read { .. } | D::ReadBulk { .. } | D::Locate { .. } => false,
        },
        Request::Memory(_) | Request::Streams(_) => true,
        Request::Program(request) => match request {
            P::SetOptimizer { .. }
            | P::SetSeed { .. }
            | P::SetRngState { .. }
            | P::Prepare { .. }
            | P::ResetStep => true,
            // A step exchanges contributions with the host before its reply: never a
            // command.
            P::GetSeed | P::GetRngState { .. } | P::RunStep { .. } | P::CycleCount { .. } => false,
        },
        Request::Kernels(request) => match request {
            K::SetRegister { .. }
            | K::FreeRegister { .. }
            | K::Invoke { .. }
            | K::HasFunction { .. }
            | K::AllocArray { .. } => true,
            K::GetRegister { .. } | K::DescribeRegister { .. } => false,
        },
    }
}

impl Endpoint for Command<'_> {
    type Reply<'r> = ();
    fn request(&self) -> Request<'_> {
        self.0.clone()
    }
    fn reply(response: Response<'_>) -> Option<()> {
        matches!(response, Response::Done).then_some(())
    }
}

/// [`Request::Hello`]: the device's limits, if it speaks `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The host's protocol version.
    pub version: u16,
    /// The replica the device serves (its first lane's).
    pub replica: u32,
    /// Replicas it serves from `replica` on.
    pub lanes: u16,
}

impl Endpoint for Hello {
    type Reply<'r> = (u16, Limits);
    fn request(&self) -> Request<'_> {
        Request::Hello {
            version: self.version,
            replica: self.replica,
            lanes: self.lanes,
        }
    }
    fn reply(response: Response<'_>) -> Option<(u16, Limits)> {
        match response {
            Response::Hello { version, limits } => Some((version, limits)),
            _ => None,
        }
    }
}

/// [`ProgramRequest::GetSeed`]: the random seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetSeed;

impl Endpoint for GetSeed {
    type Reply<'r> = u64;
    fn request(&self) -> Request<'_> {
        Request::Program(ProgramRequest::GetSeed)
    }
    fn reply(response: Response<'_>) -> Option<u64> {
        match response {
            Response::Seed { seed } => Some(seed),
            _ => None,
        }
    }
}

/// [`ProgramRequest::GetRngState`]: the generator's words of lane `.0`'s replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetRngState(pub u16);

impl Endpoint for GetRngState {
    type Reply<'r> = [u32; 4];
    fn request(&self) -> Request<'_> {
        Request::Program(ProgramRequest::GetRngState { lane: self.0 })
    }
    fn reply(response: Response<'_>) -> Option<[u32; 4]> {
        match response {
            Response::RngState { state } => Some(state),
            _ => None,
        }
    }
}

/// [`ProgramRequest::CycleCount`]: cycles counted by lane `.0`'s replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CycleCount(pub u16);

impl Endpoint for CycleCount {
    type Reply<'r> = u64;
    fn request(&self) -> Request<'_> {
        Request::Program(ProgramRequest::CycleCount { lane: self.0 })
    }
    fn reply(response: Response<'_>) -> Option<u64> {
        match response {
            Response::Cycles { cycles } => Some(cycles),
            _ => None,
        }
    }
}

/// Reads `Response::Data` out of a response.
fn data(response: Response<'_>) -> Option<&[u8]> {
    match response {
        Response::Data { data } => Some(data),
        _ => None,
    }
}

/// [`DataRequest::Read`]: bytes of a target, exactly `len` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// Where the bytes come from.
    pub target: Target,
    /// Byte offset.
    pub offset: u32,
    /// Bytes wanted.
    pub len: u32,
}

impl Endpoint for Read {
    type Reply<'r> = &'r [u8];
    fn request(&self) -> Request<'_> {
        Request::Data(DataRequest::Read {
            target: self.target,
            offset: self.offset,
            len: self.len,
        })
    }
    fn reply(response: Response<'_>) -> Option<&[u8]> {
        data(response)
    }
}

/// [`DataRequest::Locate`]: where a target's bytes lie in the device's memory, as the range
/// `at..at + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Locate {
    /// The target.
    pub target: Target,
}

impl Endpoint for Locate {
    type Reply<'r> = core::ops::Range<usize>;
    fn request(&self) -> Request<'_> {
        Request::Data(DataRequest::Locate {
            target: self.target,
        })
    }
    fn reply(response: Response<'_>) -> Option<core::ops::Range<usize>> {
        match response {
            Response::Located { at, len } => {
                let (at, len) = (at as usize, len as usize);
                Some(at..at.checked_add(len)?)
            }
            _ => None,
        }
    }
}

/// [`KernelRequest::GetRegister`]: a register's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetRegister {
    /// Register id.
    pub id: u16,
}

impl Endpoint for GetRegister {
    type Reply<'r> = Value<'r>;
    fn request(&self) -> Request<'_> {
        Request::Kernels(KernelRequest::GetRegister { id: self.id })
    }
    fn reply(response: Response<'_>) -> Option<Value<'_>> {
        match response {
            Response::Register { value } => Some(value),
            _ => None,
        }
    }
}

/// What [`DescribeRegister`] learns about a register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    /// The kind of value.
    pub kind: ValueKind,
    /// The element type, for arrays and tensors.
    pub dtype: Option<DataType>,
    /// The shape, for arrays and shapes.
    pub shape: heapless::Vec<u32, MAX_SHAPE_RANK>,
    /// Bytes of the value's data.
    pub bytes: u32,
    /// Where those bytes start in the device's memory (see [`Response::Described`]).
    pub at: u32,
}

/// [`KernelRequest::DescribeRegister`]: what a register holds, without its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescribeRegister {
    /// Register id.
    pub id: u16,
}

impl Endpoint for DescribeRegister {
    type Reply<'r> = Description;
    fn request(&self) -> Request<'_> {
        Request::Kernels(KernelRequest::DescribeRegister { id: self.id })
    }
    fn reply(response: Response<'_>) -> Option<Description> {
        match response {
            Response::Described {
                kind,
                dtype,
                shape,
                bytes,
                at,
            } => Some(Description {
                kind,
                dtype,
                shape,
                bytes,
                at,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_refuse_requests_with_payload_replies() {
        assert!(Command::new(Request::Program(ProgramRequest::GetSeed)).is_none());
        assert!(Command::new(Request::Data(DataRequest::Read {
            target: Target::Register(1),
            offset: 0,
            len: 4
        }))
        .is_none());
        assert!(Command::new(Request::Program(ProgramRequest::SetSeed { seed: 1 })).is_some());
    }

    #[test]
    fn a_reply_of_another_type_is_none() {
        assert_eq!(GetSeed::reply(Response::Seed { seed: 7 }), Some(7));
        assert_eq!(GetSeed::reply(Response::Done), None);
        assert_eq!(<Command<'_> as Endpoint>::reply(Response::Done), Some(()));
        assert_eq!(
            <Command<'_> as Endpoint>::reply(Response::Seed { seed: 1 }),
            None
        );
        assert_eq!(
            Read::reply(Response::Data { data: &[1, 2] }),
            Some(&[1u8, 2][..])
        );
    }
}
