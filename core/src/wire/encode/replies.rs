//! What a device sends the host ([`FromDevice`]), written field by field in declaration
//! order, each enum's variant by position (the [module](super) rules). Runs of integer
//! fields go out in one [`Writer::varints`] call each: the same bytes, less code.

use super::{Encode, Writer};
use crate::dtype::DataType;
use crate::program::{AnchorTensor, ProgramFault, ProgramPart, RuleKind};
use crate::wire::{
    Array, Contribution, ErrorCode, FrameError, FromDevice, Invariant, Limits, ReduceOp,
    RequestKind, Response, Value, ValueKind,
};

impl FromDevice<'_> {
    /// Writes the message into `out` as a frame's body (postcard's bytes, as
    /// [`encode_body`](crate::wire::encode_body) writes them); returns its length, or
    /// [`FrameError::TooLarge`] if it does not fit. Encoded by hand, without serde:
    /// postcard's bytes for a fraction of serde's code in a device's flash.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, FrameError> {
        let mut w = Writer::new(out);
        w.put(self).ok_or(FrameError::TooLarge)?;
        Ok(w.len())
    }
}

impl Encode for FromDevice<'_> {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        match self {
            Self::Reply(envelope) => {
                w.varints(&[0, envelope.seq])?;
                w.put(&envelope.body)
            }
            Self::Contribution(Contribution {
                step,
                round,
                op,
                data,
            }) => {
                w.varints(&[1, *step, *round, *op as u32])?;
                w.put(*data)
            }
        }
    }
}

impl Encode for Response<'_> {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        match self {
            Self::Hello { version, limits } => {
                w.varints(&[0, u32::from(*version)])?;
                w.put(limits)
            }
            Self::Done => w.variant(1),
            Self::Data { data } => {
                w.variant(2)?;
                w.put(*data)
            }
            Self::Seed { seed } => {
                w.variant(3)?;
                w.put(seed)
            }
            Self::RngState { state } => {
                let [a, b, c, d] = *state;
                w.varints(&[4, a, b, c, d])
            }
            Self::Cycles { cycles } => {
                w.variant(5)?;
                w.put(cycles)
            }
            Self::Register { value } => {
                w.variant(6)?;
                w.put(value)
            }
            Self::Error { request, code } => {
                w.varints(&[7, *request as u32])?;
                w.put(code)
            }
            Self::Described {
                kind,
                dtype,
                shape,
                bytes,
                at,
            } => {
                // An `Option`'s tag (0 or 1) is the byte of its varint.
                match dtype {
                    None => w.varints(&[8, *kind as u32, 0])?,
                    Some(dtype) => w.varints(&[8, *kind as u32, 1, *dtype as u32])?,
                }
                w.put(shape)?;
                w.varints(&[*bytes, *at])
            }
            Self::Located { at, len } => w.varints(&[9, *at, *len]),
            Self::Bulk { len } => w.varints(&[10, *len]),
        }
    }
}

impl Encode for Limits {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        w.varints(&[
            self.memory,
            self.max_frame,
            self.replica,
            u32::from(self.lanes),
            u32::from(self.window),
        ])
    }
}

impl Encode for Value<'_> {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        match self {
            Self::Int(v) => {
                w.variant(0)?;
                w.put(v)
            }
            Self::Float(v) => {
                w.variant(1)?;
                w.put(v)
            }
            Self::Shape(dims) => {
                w.variant(2)?;
                w.put(dims)
            }
            Self::Str(s) => {
                w.variant(3)?;
                w.put(*s)
            }
            Self::Array(Array { dtype, shape, data }) => {
                w.varints(&[4, *dtype as u32])?;
                w.put(shape)?;
                w.put(*data)
            }
        }
    }
}

impl Encode for ErrorCode {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        // The variant's position, then its fields: each a `u16` or `u32` varint unless
        // named otherwise. One `varints` call for all of them.
        let (n, values): (usize, [u32; 4]) = match *self {
            Self::Version { device } => (2, [0, u32::from(device), 0, 0]),
            Self::OutOfMemory {
                requested,
                available,
            } => (3, [1, requested, available, 0]),
            Self::TableFull => (1, [2, 0, 0, 0]),
            Self::UnknownId { id } => (2, [3, u32::from(id), 0, 0]),
            Self::IdInUse { id } => (2, [4, u32::from(id), 0, 0]),
            Self::OutOfBounds { offset, len, size } => (4, [5, offset, len, size]),
            Self::ItemSize { expected, actual } => (3, [6, expected, actual, 0]),
            Self::FifoFull { fifo } => (2, [7, u32::from(fifo), 0, 0]),
            Self::FifoEmpty { fifo } => (2, [8, u32::from(fifo), 0, 0]),
            Self::FifoPosition {
                fifo,
                expected,
                offset,
            } => (4, [9, u32::from(fifo), expected, offset]),
            Self::Program(fault) => {
                w.variant(10)?;
                return w.put(&fault);
            }
            Self::NotPrepared => (1, [11, 0, 0, 0]),
            Self::ReplicaOutOfRange { replica, replicas } => (3, [12, replica, replicas, 0]),
            Self::FifoShape { item_bytes, depth } => (3, [13, item_bytes, depth, 0]),
            Self::Internal { site } => (2, [14, site as u32, 0, 0]),
            Self::ReplyTooLarge => (1, [15, 0, 0, 0]),
            Self::UnknownFunction => (1, [16, 0, 0, 0]),
            Self::BadArguments => (1, [17, 0, 0, 0]),
            Self::Malformed => (1, [18, 0, 0, 0]),
            Self::UnexpectedReduced => (1, [19, 0, 0, 0]),
            Self::ReduceTimeout => (1, [20, 0, 0, 0]),
            Self::ReductionTooLarge { bytes, max } => (3, [21, bytes, max, 0]),
            Self::BulkUnavailable => (1, [22, 0, 0, 0]),
            Self::StepAbandoned => (1, [23, 0, 0, 0]),
            Self::NotInstrumented => (1, [24, 0, 0, 0]),
            Self::Lanes { lanes, max } => (3, [25, u32::from(lanes), u32::from(max), 0]),
            Self::LanesApart { variable, replica } => {
                // `variable` is a `u8`: its byte, not a varint.
                w.variant(26)?;
                w.put(&variable)?;
                return w.put(&replica);
            }
            Self::NoSuchLane { lane, lanes } => (3, [27, u32::from(lane), u32::from(lanes), 0]),
        };
        w.varints(values.get(..n)?)
    }
}

impl Encode for ProgramFault {
    fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
        match self.part {
            ProgramPart::Program => w.variant(0)?,
            ProgramPart::Variable { index } => {
                w.variant(1)?;
                w.put(&index)?;
            }
            ProgramPart::Stream { index } => {
                w.variant(2)?;
                w.put(&index)?;
            }
            ProgramPart::Layer { index } => {
                w.variant(3)?;
                w.put(&index)?;
            }
            ProgramPart::Anchor { tensor } => {
                w.varints(&[4, tensor as u32])?;
            }
        }
        w.put(&self.rule)
    }
}

/// Enums without fields: a value is its position.
macro_rules! positions {
    ($($t:ty),*) => {$(
        impl Encode for $t {
            fn encode(&self, w: &mut Writer<'_>) -> Option<()> {
                w.variant(*self as u32)
            }
        }
    )*};
}
positions!(
    RequestKind,
    ValueKind,
    Invariant,
    RuleKind,
    ReduceOp,
    AnchorTensor,
    DataType
);
