//! What the host sends a device ([`ToDevice`]), decoded field by field in declaration
//! order, each enum's variants by position (the [module](super) rules).

use super::{Decode, Reader};
use crate::wire::{
    Arg, Array, Combined, DataRequest, Envelope, FrameError, KernelRequest, MemoryRequest,
    ProgramRequest, Request, StreamRequest, Target, ToDevice, Value,
};

impl<'a> ToDevice<'a> {
    /// The message at the start of `body` (a frame's body: what follows the message is
    /// ignored, as [`decode_body`](crate::wire::decode_body) ignores it): the value
    /// `decode_body` gives, and [`FrameError::Malformed`] where it fails. Decoded by hand,
    /// without serde: postcard's bytes for a fraction of serde's code in a device's flash.
    pub fn decode(body: &'a [u8]) -> Result<Self, FrameError> {
        Reader::new(body).read().ok_or(FrameError::Malformed)
    }
}

impl<'a> Decode<'a> for ToDevice<'a> {
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        Some(match r.variant(2)? {
            0 => Self::Request(Envelope {
                seq: r.read()?,
                body: r.read()?,
            }),
            _ => Self::Combined(Combined {
                step: r.read()?,
                round: r.read()?,
                data: r.read()?,
            }),
        })
    }
}

impl<'a> Decode<'a> for Request<'a> {
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        Some(match r.variant(6)? {
            0 => Self::Hello {
                version: r.read()?,
                replica: r.read()?,
                lanes: r.read()?,
            },
            1 => Self::Data(r.read()?),
            2 => Self::Memory(r.read()?),
            3 => Self::Streams(r.read()?),
            4 => Self::Program(r.read()?),
            _ => Self::Kernels(r.read()?),
        })
    }
}

impl<'a> Decode<'a> for DataRequest<'a> {
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        let variant = r.variant(7)?;
        let target = r.read()?;
        if variant == 4 {
            return Some(Self::Locate { target });
        }
        let offset = r.read()?;
        if variant == 0 {
            let data = r.read()?;
            return Some(Self::Write {
                target,
                offset,
                data,
            });
        }
        // The rest are all three fields of the same types: target, offset, length.
        let len = r.read()?;
        Some(match variant {
            1 => Self::Read {
                target,
                offset,
                len,
            },
            2 => Self::WriteBulk {
                target,
                offset,
                len,
            },
            3 => Self::ReadBulk {
                target,
                offset,
                len,
            },
            5 => Self::Wrote {
                target,
                offset,
                len,
            },
            _ => Self::Took {
                target,
                offset,
                len,
            },
        })
    }
}

impl Decode<'_> for Target {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        let variant = r.variant(4)?;
        let id = r.read()?;
        Some(match variant {
            0 => Self::Register(id),
            1 => Self::Slot(id),
            2 => Self::Fifo(id),
            _ => Self::Variable(id),
        })
    }
}

impl Decode<'_> for MemoryRequest {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(match r.variant(3)? {
            0 => Self::AllocSlot {
                slot: r.read()?,
                bytes: r.read()?,
            },
            1 => Self::RemoteLoad {
                slot: r.read()?,
                variable: r.read()?,
            },
            _ => Self::RemoteStore {
                variable: r.read()?,
                slot: r.read()?,
            },
        })
    }
}

impl Decode<'_> for StreamRequest {
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        r.variant(1)?;
        Some(Self::CreateFifo {
            fifo: r.read()?,
            item_bytes: r.read()?,
            depth: r.read()?,
        })
    }
}

impl<'a> Decode<'a> for ProgramRequest<'a> {
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        Some(match r.variant(9)? {
            0 => Self::SetOptimizer {
                learning_rate: r.read()?,
                momentum: r.read()?,
            },
            1 => Self::SetSeed { seed: r.read()? },
            2 => Self::GetSeed,
            3 => Self::SetRngState {
                lane: r.read()?,
                state: r.read()?,
            },
            4 => Self::GetRngState { lane: r.read()? },
            5 => Self::Prepare {
                replicas: r.read()?,
                program: r.read()?,
            },
            6 => Self::RunStep {
                fed: r.read()?,
                took: r.read()?,
            },
            7 => Self::CycleCount { lane: r.read()? },
            _ => Self::ResetStep,
        })
    }
}

impl<'a> Decode<'a> for KernelRequest<'a> {
    // Out of line: inlined into the message's decoder, it took some 50 bytes more of a
    // device's flash (LLVM's choices inside one large function).
    #[inline(never)]
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        Some(match r.variant(7)? {
            0 => Self::SetRegister {
                id: r.read()?,
                value: r.read()?,
            },
            1 => Self::GetRegister { id: r.read()? },
            2 => Self::FreeRegister { id: r.read()? },
            3 => Self::Invoke {
                function: r.read()?,
                args: r.read()?,
                out: r.read()?,
            },
            4 => Self::HasFunction {
                function: r.read()?,
            },
            5 => Self::AllocArray {
                id: r.read()?,
                dtype: r.read()?,
                shape: r.read()?,
            },
            _ => Self::DescribeRegister { id: r.read()? },
        })
    }
}

impl<'a> Decode<'a> for Arg<'a> {
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        Some(match r.variant(2)? {
            0 => Self::Register(r.read()?),
            _ => Self::Value(r.read()?),
        })
    }
}

impl<'a> Decode<'a> for Value<'a> {
    fn decode(r: &mut Reader<'a>) -> Option<Self> {
        Some(match r.variant(5)? {
            0 => Self::Int(r.read()?),
            1 => Self::Float(r.read()?),
            2 => Self::Shape(r.read()?),
            3 => Self::Str(r.read()?),
            _ => Self::Array(Array {
                dtype: r.read()?,
                shape: r.read()?,
                data: r.read()?,
            }),
        })
    }
}
