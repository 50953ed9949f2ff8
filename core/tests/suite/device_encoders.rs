//! The device's encoder, written by hand without serde ([`FromDevice::encode`]), against
//! postcard's: for every message a device sends (every reply, every error with every
//! program fault and invariant, every value, contributions), with arbitrary fields, it
//! writes the bytes postcard writes, and into a buffer too small for them it refuses as
//! postcard does, whatever the buffer's size.

use proptest::prelude::*;
use serde::de::DeserializeOwned;
use tessera_core::dtype::DataType;
use tessera_core::program::{ProgramFault, ProgramPart};
use tessera_core::wire::{
    decode_body, Array, Contribution, Envelope, ErrorCode, FrameError, FromDevice, Limits,
    Response, Value, MAX_SHAPE_RANK,
};

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

/// Every variant of an enum whose variants have no fields, as postcard reads them from
/// their positions: a variant added later is covered without a change here.
fn every<T: DeserializeOwned + Clone + core::fmt::Debug + 'static>() -> impl Strategy<Value = T> {
    let all: Vec<T> = (0u8..=127)
        .map_while(|position| decode_body::<T>(&[position]).ok())
        .collect();
    prop::sample::select(all)
}

fn value() -> impl Strategy<Value = Value<'static>> {
    prop_oneof![
        any::<i64>().prop_map(Value::Int),
        any::<f64>().prop_map(Value::Float),
        shape().prop_map(Value::Shape),
        text().prop_map(Value::Str),
        (every::<DataType>(), shape(), bytes())
            .prop_map(|(dtype, shape, data)| { Value::Array(Array { dtype, shape, data }) }),
    ]
}

fn fault() -> impl Strategy<Value = ProgramFault> {
    let part = prop_oneof![
        Just(ProgramPart::Program),
        any::<u8>().prop_map(|index| ProgramPart::Variable { index }),
        any::<u8>().prop_map(|index| ProgramPart::Stream { index }),
        any::<u8>().prop_map(|index| ProgramPart::Layer { index }),
        every().prop_map(|tensor| ProgramPart::Anchor { tensor }),
    ];
    (part, every()).prop_map(|(part, rule)| ProgramFault { part, rule })
}

/// Every error, its fields from three numbers, a fault and an invariant.
fn error_code() -> impl Strategy<Value = ErrorCode> {
    (
        0u8..28,
        [number::<u32>(), number::<u32>(), number::<u32>()],
        fault(),
        every(),
    )
        .prop_map(|(position, [a, b, c], fault, site)| {
            let (short, byte) = (a as u16, a as u8);
            match position {
                0 => ErrorCode::Version { device: short },
                1 => ErrorCode::OutOfMemory {
                    requested: a,
                    available: b,
                },
                2 => ErrorCode::TableFull,
                3 => ErrorCode::UnknownId { id: short },
                4 => ErrorCode::IdInUse { id: short },
                5 => ErrorCode::OutOfBounds {
                    offset: a,
                    len: b,
                    size: c,
                },
                6 => ErrorCode::ItemSize {
                    expected: a,
                    actual: b,
                },
                7 => ErrorCode::FifoFull { fifo: short },
                8 => ErrorCode::FifoEmpty { fifo: short },
                9 => ErrorCode::FifoPosition {
                    fifo: short,
                    expected: b,
                    offset: c,
                },
                10 => ErrorCode::Program(fault),
                11 => ErrorCode::NotPrepared,
                12 => ErrorCode::ReplicaOutOfRange {
                    replica: a,
                    replicas: b,
                },
                13 => ErrorCode::FifoShape {
                    item_bytes: a,
                    depth: b,
                },
                14 => ErrorCode::Internal { site },
                15 => ErrorCode::ReplyTooLarge,
                16 => ErrorCode::UnknownFunction,
                17 => ErrorCode::BadArguments,
                18 => ErrorCode::Malformed,
                19 => ErrorCode::UnexpectedReduced,
                20 => ErrorCode::ReduceTimeout,
                21 => ErrorCode::ReductionTooLarge { bytes: a, max: b },
                22 => ErrorCode::BulkUnavailable,
                23 => ErrorCode::StepAbandoned,
                24 => ErrorCode::NotInstrumented,
                25 => ErrorCode::Lanes {
                    lanes: short,
                    max: b as u16,
                },
                26 => ErrorCode::LanesApart {
                    variable: byte,
                    replica: b,
                },
                _ => ErrorCode::NoSuchLane {
                    lane: short,
                    lanes: b as u16,
                },
            }
        })
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        number::<u32>(),
        number::<u32>(),
        number::<u32>(),
        number::<u16>(),
        number::<u16>(),
    )
        .prop_map(|(memory, max_frame, replica, lanes, window)| Limits {
            memory,
            max_frame,
            replica,
            lanes,
            window,
        })
}

fn response() -> impl Strategy<Value = Response<'static>> {
    let n = number::<u32>;
    prop_oneof![
        1 => (number::<u16>(), limits()).prop_map(|(version, limits)| Response::Hello { version, limits }),
        1 => Just(Response::Done),
        1 => bytes().prop_map(|data| Response::Data { data }),
        1 => number::<u64>().prop_map(|seed| Response::Seed { seed }),
        1 => any::<[u32; 4]>().prop_map(|state| Response::RngState { state }),
        1 => number::<u64>().prop_map(|cycles| Response::Cycles { cycles }),
        1 => value().prop_map(|value| Response::Register { value }),
        3 => (every(), error_code()).prop_map(|(request, code)| Response::Error { request, code }),
        1 => (every(), prop::option::of(every()), shape(), n(), n()).prop_map(
            |(kind, dtype, shape, bytes, at)| Response::Described {
                kind,
                dtype,
                shape,
                bytes,
                at
            }
        ),
        1 => (n(), n()).prop_map(|(at, len)| Response::Located { at, len }),
        1 => n().prop_map(|len| Response::Bulk { len }),
    ]
}

/// Every message a device sends its host.
fn from_device() -> impl Strategy<Value = FromDevice<'static>> {
    prop_oneof![
        4 => (number::<u32>(), response())
            .prop_map(|(seq, body)| FromDevice::Reply(Envelope { seq, body })),
        1 => (number::<u32>(), number::<u32>(), every(), bytes()).prop_map(
            |(step, round, op, data)| FromDevice::Contribution(Contribution { step, round, op, data })
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Catches a field written out of order or as the wrong type, a variant at the wrong
    /// position, or a length postcard writes and the hand encoder does not (or the other
    /// way round): the bytes are postcard's, and they decode back to the message.
    #[test]
    fn messages_encode_as_postcard_encodes_them(message in from_device()) {
        let mut by_postcard = [0u8; 512];
        let expected = postcard::to_slice(&message, &mut by_postcard).expect("fits").to_vec();
        let mut by_hand = [0u8; 512];
        let n = message.encode(&mut by_hand);
        prop_assert_eq!(n, Ok(expected.len()));
        prop_assert_eq!(&by_hand[..expected.len()], &expected[..]);
        prop_assert_eq!(decode_body::<FromDevice<'_>>(&expected), Ok(message));
    }

    /// A buffer too small for the message is refused ([`FrameError::TooLarge`]), as
    /// postcard refuses it; one large enough is filled with the same bytes, whatever
    /// comes after them. Catches a write past the buffer's end, a check off by one, and
    /// a partial message reported as whole.
    #[test]
    fn buffers_too_small_are_refused_as_postcard_refuses_them(
        message in from_device(),
        room in 0usize..96,
    ) {
        let mut by_postcard = vec![0u8; room];
        let expected = postcard::to_slice(&message, &mut by_postcard).map(|b| b.to_vec());
        let mut by_hand = vec![0u8; room];
        match (message.encode(&mut by_hand), expected) {
            (Ok(n), Ok(bytes)) => prop_assert_eq!(&by_hand[..n], &bytes[..]),
            (Err(error), Err(_)) => prop_assert_eq!(error, FrameError::TooLarge),
            (by_hand, by_postcard) => prop_assert!(
                false,
                "by hand {:?}, by postcard {:?}",
                by_hand,
                by_postcard.map(|b| b.len())
            ),
        }
    }
}
