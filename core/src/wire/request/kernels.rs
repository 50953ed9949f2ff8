//! The kernel area's requests: the register file an SPMD session keeps on each worker, and
//! the named functions that run on it (an array's bytes, and a string's, move through the
//! data path: [`DataRequest`](super::DataRequest)).

use serde::{Deserialize, Serialize};

use super::RequestKind;
use crate::dtype::DataType;
use crate::wire::message::{Arg, Value, MAX_CALL_ARGS, MAX_SHAPE_RANK};

/// Host to device: registers and calls.
// `Invoke` carries its arguments inline (a few hundred bytes): a request is built once on
// the stack and encoded at once, and no_std has no box to put them in.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum KernelRequest<'a> {
    /// Stores a value in register `id` (replacing what it held).
    SetRegister {
        /// Register id (0 is reserved).
        id: u16,
        /// The value.
        value: Value<'a>,
    },
    /// Returns the value of register `id`.
    GetRegister {
        /// Register id.
        id: u16,
    },
    /// Frees register `id`.
    FreeRegister {
        /// Register id.
        id: u16,
    },
    /// Calls a named device function on registers and values, storing the result in `out`
    /// (0: discard).
    Invoke {
        /// Function name.
        function: &'a str,
        /// Arguments, in order.
        args: heapless::Vec<Arg<'a>, MAX_CALL_ARGS>,
        /// Result register.
        out: u16,
    },
    /// Done if the device has a function of this name, else an
    /// [`UnknownFunction`](crate::wire::ErrorCode::UnknownFunction) error.
    HasFunction {
        /// Function name.
        function: &'a str,
    },
    /// Makes register `id` a zeroed array (replacing what it held), to be filled with
    /// [`Write`](super::DataRequest::Write) (or moved in place).
    AllocArray {
        /// Register id (0 is reserved).
        id: u16,
        /// Element type.
        dtype: DataType,
        /// Dimensions.
        shape: heapless::Vec<u32, MAX_SHAPE_RANK>,
    },
    /// What register `id` holds, without its bytes.
    DescribeRegister {
        /// Register id.
        id: u16,
    },
}

impl KernelRequest<'_> {
    /// The kind of this request, for error replies.
    pub fn kind(&self) -> RequestKind {
        match self {
            Self::SetRegister { .. } => RequestKind::SetRegister,
            Self::GetRegister { .. } => RequestKind::GetRegister,
            Self::FreeRegister { .. } => RequestKind::FreeRegister,
            Self::Invoke { .. } => RequestKind::Invoke,
            Self::HasFunction { .. } => RequestKind::HasFunction,
            Self::AllocArray { .. } => RequestKind::AllocArray,
            Self::DescribeRegister { .. } => RequestKind::DescribeRegister,
        }
    }
}
