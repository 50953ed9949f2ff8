//! The messages' envelope and what they carry: a sequence number around every message,
//! the values, arrays and arguments requests carry ([`request`](super::request) lists the
//! requests, host to device), the device's limits, and every reply, device to host
//! ([`Response`]). Payloads borrow from the frame they were decoded from.

use serde::{Deserialize, Serialize};

use crate::dtype::DataType;

use super::request::RequestKind;

pub use super::error::{ErrorCode, Invariant};

/// The protocol version a [`Request::Hello`](super::Request::Hello) carries; bumped on any
/// change to the bytes of any message (host and device must run exactly the same one: see
/// the [`wire`](super) module).
pub const PROTOCOL_VERSION: u16 = 20;

/// Registers hold shapes of at most this rank.
pub const MAX_SHAPE_RANK: usize = 8;

/// Arguments a [`KernelRequest::Invoke`](super::KernelRequest::Invoke) can pass.
pub const MAX_CALL_ARGS: usize = 4;

/// One message and its sequence number. Replies carry the sequence number of the request
/// they answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// Chosen by the host, increasing per request; retries reuse it.
    pub seq: u32,
    /// The message.
    pub body: T,
}

/// What a device can hold, announced in its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Limits {
    /// Bytes of arena for slots, FIFOs and registers.
    pub memory: u32,
    /// Largest frame the device accepts or sends, delimiter included.
    pub max_frame: u32,
    /// The replica this device is (its first lane's, when it runs several).
    pub replica: u32,
    /// Replicas it runs from `replica` on, one per lane
    /// ([`lanes`](crate::program::lanes)): as the hello asked.
    pub lanes: u16,
    /// Requests whose replies the device keeps for retries: the host never has more than
    /// this many outstanding.
    pub window: u16,
}

impl Limits {
    /// The largest bulk chunk that fits one frame with its envelope.
    #[inline(never)]
    pub fn max_chunk(&self) -> usize {
        // Worst case for COBS is one extra byte per 254; the envelope and payload header
        // take at most 32 bytes.
        let frame = self.max_frame as usize;
        frame.saturating_sub(super::FRAME_OVERHEAD + frame / 254 + 32)
    }
}

/// A register value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Value<'a> {
    /// A signed integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A shape.
    Shape(heapless::Vec<u32, MAX_SHAPE_RANK>),
    /// A short string.
    #[serde(borrow)]
    Str(&'a str),
    /// An array of any element type.
    #[serde(borrow)]
    Array(Array<'a>),
}

/// An array: element type, shape (row-major) and little-endian bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Array<'a> {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions; empty for a scalar.
    pub shape: heapless::Vec<u32, MAX_SHAPE_RANK>,
    /// The elements, `dtype`'s size each, little-endian.
    #[serde(borrow, serialize_with = "super::bytes::serialize")]
    pub data: &'a [u8],
}

/// What a register holds, without its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ValueKind {
    /// An integer ([`Value::Int`]).
    Int,
    /// A float ([`Value::Float`]).
    Float,
    /// A shape ([`Value::Shape`]).
    Shape,
    /// A string ([`Value::Str`]).
    Str,
    /// An array ([`Value::Array`]) of any element type.
    Array,
}

/// An argument of a [`KernelRequest::Invoke`](super::KernelRequest::Invoke): a register the
/// device holds, or a value sent with the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Arg<'a> {
    /// The value of this register.
    Register(u16),
    /// This value.
    #[serde(borrow)]
    Value(Value<'a>),
}

/// How arrays combine element by element: a device's
/// [`Contribution`](super::Contribution) with its group's others, and the host's
/// collectives (tessera-host's session allreduce, whose combine kernel states the
/// arithmetic).
///
/// # Rules
///
/// - A device's step contributes only [`Sum`](Self::Sum) (gathers) and
///   [`Avg`](Self::Avg) (means) of `f32` buffers; the host's step rounds refuse a
///   contribution asking for any other operation.
/// - The wire writes a variant as its position: `Sum` and `Avg` keep 0 and 1 (`Avg` was
///   named `Mean`), and the operations only the host's collectives use come after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum,
    /// Element-wise mean: the sum divided by the number of members (integers truncate).
    Avg,
    /// Element-wise product.
    Prod,
    /// Element-wise minimum.
    Min,
    /// Element-wise maximum.
    Max,
}

/// Device to host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response<'a> {
    /// Answer to [`Request::Hello`](super::Request::Hello).
    Hello {
        /// The device's [`PROTOCOL_VERSION`].
        version: u16,
        /// What it can hold.
        limits: Limits,
    },
    /// The request ran.
    Done,
    /// Bytes read ([`DataRequest::Read`](super::DataRequest::Read)).
    Data {
        /// The bytes.
        #[serde(borrow, serialize_with = "super::bytes::serialize")]
        data: &'a [u8],
    },
    /// The random seed.
    Seed {
        /// The seed.
        seed: u64,
    },
    /// The RNG state.
    RngState {
        /// The generator's words.
        state: [u32; 4],
    },
    /// Cycles counted by the device.
    Cycles {
        /// The count.
        cycles: u64,
    },
    /// A register's value.
    Register {
        /// The value.
        value: Value<'a>,
    },
    /// The request failed.
    Error {
        /// Which request.
        request: RequestKind,
        /// Why.
        code: ErrorCode,
    },
    /// What a register holds
    /// ([`KernelRequest::DescribeRegister`](super::KernelRequest::DescribeRegister)).
    Described {
        /// The kind of value.
        kind: ValueKind,
        /// The element type, for arrays (F32 for tensors).
        dtype: Option<DataType>,
        /// The shape, for arrays and shapes.
        shape: heapless::Vec<u32, MAX_SHAPE_RANK>,
        /// Bytes the value's data takes (arrays, tensors, strings), else 0.
        bytes: u32,
        /// Where those bytes start in the device's memory, counted from its first byte (0
        /// when there are none): a host that shares the device's memory reads and writes
        /// them there while the device is idle.
        at: u32,
    },
    /// Answer to [`DataRequest::Locate`](super::DataRequest::Locate): the target's bytes
    /// are `[at, at + len)` of the device's memory, counted from its first byte (a FIFO's:
    /// its whole ring).
    Located {
        /// Where they start.
        at: u32,
        /// How many there are.
        len: u32,
    },
    /// Answer to [`DataRequest::ReadBulk`](super::DataRequest::ReadBulk): the `len` bytes
    /// travel beside this reply.
    Bulk {
        /// Bytes beside the reply.
        len: u32,
    },
}
