//! The device's decoders, written by hand without serde ([`ToDevice::decode`],
//! [`Program::decode`]), against postcard's: on every message a host sends, with arbitrary
//! fields, on programs of any content, and on their bytes damaged or arbitrary, each gives
//! the value postcard gives and refuses what postcard refuses. (Values are compared by
//! their bytes re-encoded, so that a NaN equals itself.)

use proptest::prelude::*;
use tessera_core::dtype::DataType;
use tessera_core::program::Program;
use tessera_core::wire::{
    decode_body, Arg, Array, Combined, DataRequest, Envelope, FrameError, KernelRequest,
    MemoryRequest, ProgramRequest, Request, StreamRequest, Target, ToDevice, Value, MAX_CALL_ARGS,
    MAX_SHAPE_RANK,
};

use crate::program_props::{any_program, near_valid_program};

const BYTES: [u8; 64] = {
    let mut d = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        d[i] = (i * 37 % 256) as u8;
        i += 1;
    }
    d
};

/// Mostly small numbers (one varint byte), sometimes the widest.
fn number<T: Arbitrary + From<u8> + Copy + core::fmt::Debug + 'static>() -> BoxedStrategy<T> {
    prop_oneof![3 => (0u8..=200).prop_map(T::from), 1 => any::<T>()].boxed()
}

fn bytes() -> impl Strategy<Value = &'static [u8]> {
    (0..=BYTES.len()).prop_map(|n| &BYTES[..n])
}

fn text() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "add_one", "fill", "né", "a somewhat longer name"])
}

fn shape() -> impl Strategy<Value = heapless::Vec<u32, MAX_SHAPE_RANK>> {
    prop::collection::vec(number::<u32>(), 0..=MAX_SHAPE_RANK)
        .prop_map(|d| heapless::Vec::from_slice(&d).expect("within the rank"))
}

fn dtype() -> impl Strategy<Value = DataType> {
    prop::sample::select(DataType::ALL.to_vec())
}

fn target() -> impl Strategy<Value = Target> {
    (0..4u8, number::<u16>()).prop_map(|(kind, id)| match kind {
        0 => Target::Register(id),
        1 => Target::Slot(id),
        2 => Target::Fifo(id),
        _ => Target::Variable(id),
    })
}

fn value() -> impl Strategy<Value = Value<'static>> {
    prop_oneof![
        any::<i64>().prop_map(Value::Int),
        any::<f64>().prop_map(Value::Float),
        shape().prop_map(Value::Shape),
        text().prop_map(Value::Str),
        (dtype(), shape(), bytes()).prop_map(|(dtype, shape, data)| Value::Array(Array {
            dtype,
            shape,
            data
        })),
    ]
}

fn arg() -> impl Strategy<Value = Arg<'static>> {
    prop_oneof![
        number::<u16>().prop_map(Arg::Register),
        value().prop_map(Arg::Value)
    ]
}

fn data_request() -> impl Strategy<Value = DataRequest<'static>> {
    let (t, n) = (target, number::<u32>);
    prop_oneof![
        (t(), n(), bytes()).prop_map(|(target, offset, data)| DataRequest::Write {
            target,
            offset,
            data
        }),
        (t(), n(), n()).prop_map(|(target, offset, len)| DataRequest::Read {
            target,
            offset,
            len
        }),
        (t(), n(), n()).prop_map(|(target, offset, len)| DataRequest::WriteBulk {
            target,
            offset,
            len
        }),
        (t(), n(), n()).prop_map(|(target, offset, len)| DataRequest::ReadBulk {
            target,
            offset,
            len
        }),
        t().prop_map(|target| DataRequest::Locate { target }),
        (t(), n(), n()).prop_map(|(target, offset, len)| DataRequest::Wrote {
            target,
            offset,
            len
        }),
        (t(), n(), n()).prop_map(|(target, offset, len)| DataRequest::Took {
            target,
            offset,
            len
        }),
    ]
}

fn memory_request() -> impl Strategy<Value = MemoryRequest> {
    (0..3u8, number::<u16>(), number::<u32>()).prop_map(|(kind, id, n)| match kind {
        0 => MemoryRequest::AllocSlot { slot: id, bytes: n },
        1 => MemoryRequest::RemoteLoad {
            slot: id,
            variable: n as u16,
        },
        _ => MemoryRequest::RemoteStore {
            variable: id,
            slot: n as u16,
        },
    })
}

fn program_request() -> impl Strategy<Value = ProgramRequest<'static>> {
    prop_oneof![
        (any::<f32>(), any::<f32>()).prop_map(|(learning_rate, momentum)| {
            ProgramRequest::SetOptimizer {
                learning_rate,
                momentum,
            }
        }),
        number::<u64>().prop_map(|seed| ProgramRequest::SetSeed { seed }),
        Just(ProgramRequest::GetSeed),
        (number::<u16>(), any::<[u32; 4]>())
            .prop_map(|(lane, state)| ProgramRequest::SetRngState { lane, state }),
        number::<u16>().prop_map(|lane| ProgramRequest::GetRngState { lane }),
        (number::<u32>(), bytes())
            .prop_map(|(replicas, program)| ProgramRequest::Prepare { replicas, program }),
        (any::<bool>(), any::<bool>())
            .prop_map(|(fed, took)| ProgramRequest::RunStep { fed, took }),
        number::<u16>().prop_map(|lane| ProgramRequest::CycleCount { lane }),
        Just(ProgramRequest::ResetStep),
    ]
}

fn kernel_request() -> impl Strategy<Value = KernelRequest<'static>> {
    let id = number::<u16>;
    prop_oneof![
        (id(), value()).prop_map(|(id, value)| KernelRequest::SetRegister { id, value }),
        id().prop_map(|id| KernelRequest::GetRegister { id }),
        id().prop_map(|id| KernelRequest::FreeRegister { id }),
        (
            text(),
            prop::collection::vec(arg(), 0..=MAX_CALL_ARGS),
            id()
        )
            .prop_map(|(function, args, out)| KernelRequest::Invoke {
                function,
                args: heapless::Vec::from_slice(&args).expect("within the arguments"),
                out,
            }),
        text().prop_map(|function| KernelRequest::HasFunction { function }),
        (id(), dtype(), shape()).prop_map(|(id, dtype, shape)| KernelRequest::AllocArray {
            id,
            dtype,
            shape
        }),
        id().prop_map(|id| KernelRequest::DescribeRegister { id }),
    ]
}

fn request() -> impl Strategy<Value = Request<'static>> {
    prop_oneof![
        (number::<u16>(), number::<u32>(), number::<u16>()).prop_map(
            |(version, replica, lanes)| Request::Hello {
                version,
                replica,
                lanes
            }
        ),
        data_request().prop_map(Request::Data),
        memory_request().prop_map(Request::Memory),
        (number::<u16>(), number::<u32>(), number::<u16>()).prop_map(
            |(fifo, item_bytes, depth)| Request::Streams(StreamRequest::CreateFifo {
                fifo,
                item_bytes,
                depth
            })
        ),
        program_request().prop_map(Request::Program),
        kernel_request().prop_map(Request::Kernels),
    ]
}

/// Every message a host sends a device.
fn to_device() -> impl Strategy<Value = ToDevice<'static>> {
    prop_oneof![
        4 => (number::<u32>(), request())
            .prop_map(|(seq, body)| ToDevice::Request(Envelope { seq, body })),
        1 => (number::<u32>(), number::<u32>(), bytes())
            .prop_map(|(step, round, data)| ToDevice::Combined(Combined { step, round, data })),
    ]
}

/// What to do to a message's bytes: nothing, or flip, replace, insert or remove a byte,
/// or cut them short.
fn damage() -> impl Strategy<Value = (u8, prop::sample::Index, u8)> {
    (0u8..6, any::<prop::sample::Index>(), any::<u8>())
}

fn damaged(mut bytes: Vec<u8>, (kind, at, byte): (u8, prop::sample::Index, u8)) -> Vec<u8> {
    let i = at.index(bytes.len() + 1);
    match kind {
        0 => {}
        1 if i < bytes.len() => bytes[i] ^= byte | 1,
        2 if i < bytes.len() => bytes[i] = byte,
        3 => bytes.insert(i, byte),
        4 if i < bytes.len() => {
            bytes.remove(i);
        }
        _ => bytes.truncate(i),
    }
    bytes
}

fn encoded<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let mut buffer = [0u8; 4096];
    postcard::to_slice(value, &mut buffer)
        .expect("fits 4 KiB")
        .to_vec()
}

/// `bytes` decoded as a message by hand and by postcard: the same message, or both
/// refused.
fn messages_agree(bytes: &[u8]) -> Result<(), TestCaseError> {
    let by_hand = ToDevice::decode(bytes).map(|m| encoded(&m));
    let by_postcard = decode_body::<ToDevice<'_>>(bytes).map(|m| encoded(&m));
    prop_assert_eq!(by_hand, by_postcard, "{:02x?}", bytes);
    Ok(())
}

/// `bytes` decoded as a program by hand and by postcard (exactly one program, nothing
/// after it: `Program::decode`'s rule): the same program, or both refused.
fn programs_agree(bytes: &[u8]) -> Result<(), TestCaseError> {
    let by_hand = Program::decode(bytes).map(|p| encoded(&p));
    let by_postcard = match postcard::take_from_bytes::<Program>(bytes) {
        Ok((program, [])) => Ok(encoded(&program)),
        _ => Err(FrameError::Malformed),
    };
    prop_assert_eq!(by_hand, by_postcard, "{:02x?}", bytes);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Catches a field read out of order or as the wrong type, a variant at the wrong
    /// position, a length or a rule postcard has and the hand decoder lacks (or the other
    /// way round) — on every kind of message, whole and damaged.
    #[test]
    fn messages_decode_as_postcard_decodes_them(message in to_device(), damage in damage()) {
        let bytes = encoded(&message);
        let by_hand = ToDevice::decode(&bytes).map(|m| encoded(&m));
        prop_assert_eq!(by_hand, Ok(bytes.clone()), "a whole message comes back");
        messages_agree(&damaged(bytes, damage))?;
    }

    /// The same for programs of any content (names, shapes, groupings, shards, layers,
    /// anchors and optimizers of every form), whole and damaged.
    #[test]
    fn programs_decode_as_postcard_decodes_them(
        program in prop_oneof![any_program(), near_valid_program().prop_map(|(p, _)| p)],
        damage in damage(),
    ) {
        let bytes = encoded(&program);
        let by_hand = Program::decode(&bytes).map(|p| encoded(&p));
        prop_assert_eq!(by_hand, Ok(bytes.clone()), "a whole program comes back");
        programs_agree(&damaged(bytes, damage))?;
    }

    /// Arbitrary bytes, mostly small ones (so that variants and lengths often make sense).
    #[test]
    fn arbitrary_bytes_decode_as_postcard_decodes_them(
        bytes in prop::collection::vec(prop_oneof![3 => 0u8..8, 1 => any::<u8>()], 0..48)
    ) {
        messages_agree(&bytes)?;
        programs_agree(&bytes)?;
    }
}
