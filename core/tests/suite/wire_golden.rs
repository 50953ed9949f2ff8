//! Golden bytes for every wire message.
//!
//! One representative value of every `Request`, `Response`, `ErrorCode`, `Value`, `Arg`,
//! `ValueKind`, `RequestKind`, `ReduceOp` and `DataType` variant, and of `Limits`,
//! `Program`, `Array` and `Envelope`, is encoded and compared with bytes written
//! literally below; each also decodes back to the value it came from. A few whole frames
//! pin the framing (CRC-32 and COBS) as well.
//!
//! What this catches: host and device built from different commits must agree byte for
//! byte, and postcard writes an enum variant as its position and a struct as its fields in
//! declaration order. So reordering variants, inserting one anywhere but at the end,
//! reordering, adding, removing or retyping a field, or changing the framing changes bytes
//! here and fails, instead of passing silently and breaking the link. Such a change must
//! come with a [`PROTOCOL_VERSION`] bump, which [`protocol_version_is_pinned`] asks for.
//!
//! The `*_variant` helpers match exhaustively (no `_` arm): a new variant does not compile
//! until it is given a position there, and then the coverage checks fail until it has a
//! golden case. The number of variants is also probed from the decoder itself, so a
//! variant cannot be left out of both.
//!
//! The literals were produced once by running the encoder and checked by hand against
//! postcard's format (varints, zigzag for signed, fixed little-endian floats, length-prefixed
//! slices and strings). To update after an intended change: bump the version, run this
//! test, and paste the `actual` bytes it prints.

use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{
    Anchor, AnchorTensor, Layer, Optimizer, Program, Sharding, Stream, Variable,
};
use tessera_core::stream::AnchorReturnType;
use tessera_core::wire::{
    decode_body, encode_frame, Arg, Array, Envelope, ErrorCode, FrameDecoder, Limits, ReduceOp,
    Request, RequestKind, Response, Value, ValueKind, PROTOCOL_VERSION,
};

/// `"0a ff"` → `[0x0a, 0xff]`.
fn bytes(hex: &str) -> Vec<u8> {
    hex.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).expect("two hex digits"))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Encodes every `(name, value, golden)` of `$cases` with postcard, compares with the
/// golden bytes and decodes them back as `$ty`; panics with every mismatch at once (the
/// `actual` lines are what to paste after an intended change).
macro_rules! check_golden {
    ($ty:ty, $cases:expr) => {{
        let mut failures = Vec::new();
        for (name, value, golden) in $cases.iter() {
            let mut buf = [0u8; 256];
            let encoded = postcard::to_slice(value, &mut buf).expect("fits the buffer");
            let actual = hex(encoded);
            if actual != hex(&bytes(golden)) {
                failures.push(format!(
                    "{name}: expected {golden}\n{name}: actual   {actual}"
                ));
                continue;
            }
            let decoded: $ty = decode_body(encoded).expect("golden bytes decode");
            if decoded != *value {
                failures.push(format!("{name}: decodes to {decoded:?}, not {value:?}"));
            }
        }
        assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    }};
}

/// How many variants the decoder knows: the first variant index that no longer decodes
/// (fields filled with zero bytes, which every field type here accepts).
fn probed_variants(decodes: impl Fn(&[u8]) -> bool) -> u32 {
    let mut index = 0u8;
    loop {
        let mut body = [0u8; 64];
        body[0] = index;
        if !decodes(&body) {
            return u32::from(index);
        }
        index += 1;
        assert!(index < 0x80, "more variants than one varint byte");
    }
}

/// Asserts that `positions` (the variant position of every golden case) are exactly
/// `0..n`, each once, where `n` is what the decoder knows.
fn assert_covers(what: &str, mut positions: Vec<u32>, variants: u32) {
    positions.sort_unstable();
    let expected: Vec<u32> = (0..variants).collect();
    assert_eq!(
        positions, expected,
        "{what}: every variant needs exactly one golden case"
    );
}

// ---------------------------------------------------------------------------------------
// Exhaustive matches: a new variant fails to compile here.

fn request_variant(request: &Request<'_>) -> u32 {
    match request {
        Request::Hello { .. } => 0,
        Request::Reset => 1,
        Request::AllocSlot { .. } => 2,
        Request::WriteSlot { .. } => 3,
        Request::ReadSlot { .. } => 4,
        Request::CreateFifo { .. } => 5,
        Request::PushFifo { .. } => 6,
        Request::PopFifo { .. } => 7,
        Request::SetOptimizer { .. } => 8,
        Request::SetSeed { .. } => 9,
        Request::GetSeed => 10,
        Request::SetRngState { .. } => 11,
        Request::GetRngState => 12,
        Request::Prepare { .. } => 13,
        Request::RunStep => 14,
        Request::Reduced { .. } => 15,
        Request::CycleCount => 16,
        Request::SetRegister { .. } => 17,
        Request::GetRegister { .. } => 18,
        Request::FreeRegister { .. } => 19,
        Request::Call { .. } => 20,
        Request::RemoteLoad { .. } => 21,
        Request::RemoteStore { .. } => 22,
        Request::Invoke { .. } => 23,
        Request::HasFunction { .. } => 24,
        Request::Ping => 25,
        Request::AllocArray { .. } => 26,
        Request::WriteArray { .. } => 27,
        Request::ReadArray { .. } => 28,
        Request::DescribeRegister { .. } => 29,
        Request::WriteArrayBulk { .. } => 30,
        Request::ReadArrayBulk { .. } => 31,
        Request::WriteSlotBulk { .. } => 32,
        Request::ReadSlotBulk { .. } => 33,
        Request::ResetStep => 34,
    }
}

fn response_variant(response: &Response<'_>) -> u32 {
    match response {
        Response::Hello { .. } => 0,
        Response::Done => 1,
        Response::Data { .. } => 2,
        Response::Seed { .. } => 3,
        Response::RngState { .. } => 4,
        Response::Cycles { .. } => 5,
        Response::Register { .. } => 6,
        Response::Reduce { .. } => 7,
        Response::Error { .. } => 8,
        Response::Described { .. } => 9,
        Response::Bulk { .. } => 10,
    }
}

fn error_variant(code: &ErrorCode) -> u32 {
    match code {
        ErrorCode::Version { .. } => 0,
        ErrorCode::OutOfMemory { .. } => 1,
        ErrorCode::TableFull => 2,
        ErrorCode::UnknownId { .. } => 3,
        ErrorCode::IdInUse { .. } => 4,
        ErrorCode::OutOfBounds { .. } => 5,
        ErrorCode::ItemSize { .. } => 6,
        ErrorCode::FifoFull { .. } => 7,
        ErrorCode::FifoEmpty { .. } => 8,
        ErrorCode::NotConfigured => 9,
        ErrorCode::BadConfig => 10,
        ErrorCode::ReplyTooLarge => 11,
        ErrorCode::UnknownFunction => 12,
        ErrorCode::BadArguments => 13,
        ErrorCode::Malformed => 14,
        ErrorCode::UnexpectedReduced => 15,
        ErrorCode::ReduceTimeout => 16,
        ErrorCode::ReductionTooLarge { .. } => 17,
        ErrorCode::BulkUnavailable => 18,
        ErrorCode::StepAbandoned => 19,
        ErrorCode::NotInstrumented => 20,
    }
}

fn value_variant(value: &Value<'_>) -> u32 {
    match value {
        Value::Int(_) => 0,
        Value::Float(_) => 1,
        Value::Shape(_) => 2,
        Value::Str(_) => 3,
        Value::Tensor(_) => 4,
        Value::Array(_) => 5,
    }
}

fn value_kind_variant(kind: ValueKind) -> u32 {
    match kind {
        ValueKind::Int => 0,
        ValueKind::Float => 1,
        ValueKind::Shape => 2,
        ValueKind::Str => 3,
        ValueKind::Tensor => 4,
        ValueKind::Array => 5,
    }
}

fn arg_variant(arg: &Arg<'_>) -> u32 {
    match arg {
        Arg::Register(_) => 0,
        Arg::Value(_) => 1,
    }
}

fn data_type_variant(dtype: DataType) -> u32 {
    match dtype {
        DataType::F16 => 0,
        DataType::BF16 => 1,
        DataType::F32 => 2,
        DataType::F64 => 3,
        DataType::I8 => 4,
        DataType::I16 => 5,
        DataType::I32 => 6,
        DataType::I64 => 7,
        DataType::U8 => 8,
        DataType::U16 => 9,
        DataType::U32 => 10,
        DataType::U64 => 11,
        DataType::Bool => 12,
        DataType::F8E4M3 => 13,
        DataType::F8E5M2 => 14,
    }
}

fn kind_variant(kind: RequestKind) -> u32 {
    match kind {
        RequestKind::Hello => 0,
        RequestKind::Reset => 1,
        RequestKind::AllocSlot => 2,
        RequestKind::WriteSlot => 3,
        RequestKind::ReadSlot => 4,
        RequestKind::CreateFifo => 5,
        RequestKind::PushFifo => 6,
        RequestKind::PopFifo => 7,
        RequestKind::SetOptimizer => 8,
        RequestKind::SetSeed => 9,
        RequestKind::GetSeed => 10,
        RequestKind::SetRngState => 11,
        RequestKind::GetRngState => 12,
        RequestKind::Prepare => 13,
        RequestKind::RunStep => 14,
        RequestKind::Reduced => 15,
        RequestKind::CycleCount => 16,
        RequestKind::SetRegister => 17,
        RequestKind::GetRegister => 18,
        RequestKind::FreeRegister => 19,
        RequestKind::Call => 20,
        RequestKind::Malformed => 21,
        RequestKind::RemoteLoad => 22,
        RequestKind::RemoteStore => 23,
        RequestKind::Invoke => 24,
        RequestKind::HasFunction => 25,
        RequestKind::Ping => 26,
        RequestKind::AllocArray => 27,
        RequestKind::WriteArray => 28,
        RequestKind::ReadArray => 29,
        RequestKind::DescribeRegister => 30,
        RequestKind::WriteArrayBulk => 31,
        RequestKind::ReadArrayBulk => 32,
        RequestKind::WriteSlotBulk => 33,
        RequestKind::ReadSlotBulk => 34,
        RequestKind::ResetStep => 35,
    }
}

fn op_variant(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
    }
}

// ---------------------------------------------------------------------------------------
// Representative values. Fields of one message get distinct values, so that swapping two
// fields of the same type changes the bytes.

const ONE_F32: &[u8] = &[0x00, 0x00, 0x80, 0x3f];

/// One variable (sharded, balanced), two streams, one anchor, three layers.
fn program() -> Program {
    let name = |n: &str| n.try_into().expect("short name");
    let dims = |d: &[u32]| heapless::Vec::from_slice(d).expect("low rank");
    let mut p = Program {
        variables: heapless::Vec::new(),
        streams: heapless::Vec::new(),
        anchors: heapless::Vec::new(),
        layers: heapless::Vec::new(),
        input: 0,
        batches_per_step: 7,
        accumulation: 8,
        optimizer: Optimizer::SgdMomentum {
            learning_rate: 0.5,
            momentum: 0.25,
        },
        instrumented: true,
    };
    let variable = Variable {
        name: name("w"),
        dtype: DataType::F32,
        shape: dims(&[3, 2]),
        grouping: GroupingSpec::Comm(CommGroup::Consecutive(2)),
        retrieval: RetrievalMode::AllReplicas,
        sharding: Sharding::Balanced,
    };
    p.variables.push(variable).expect("room");
    for (n, dtype, sample) in [("x", DataType::F32, 2), ("t", DataType::I32, 1)] {
        let stream = Stream {
            name: name(n),
            dtype,
            sample: dims(&[sample]),
            broadcast: false,
        };
        p.streams.push(stream).expect("room");
    }
    let anchor = Anchor {
        tensor: AnchorTensor::Loss,
        return_type: AnchorReturnType::EveryN(7),
    };
    p.anchors.push(anchor).expect("room");
    for layer in [
        Layer::Linear { weight: 0 },
        Layer::Dropout { rate: 0.5 },
        Layer::SoftmaxCrossEntropy { labels: 1 },
    ] {
        p.layers.push(layer).expect("room");
    }
    p
}

fn limits() -> Limits {
    Limits {
        memory: 65536,
        max_frame: 1024,
        replica: 3,
        window: 16,
    }
}

/// A 2×3 `int16` array.
fn array() -> Array<'static> {
    Array {
        dtype: DataType::I16,
        shape: heapless::Vec::from_slice(&[2, 3]).unwrap(),
        data: &[1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 0xff, 0xff],
    }
}

/// Every request, inside an envelope with sequence number 5.
fn requests() -> Vec<(&'static str, Envelope<Request<'static>>, &'static str)> {
    let env = |body| Envelope { seq: 5, body };
    vec![
        (
            "Hello",
            env(Request::Hello {
                version: 2,
                replica: 3,
            }),
            "05 00 02 03",
        ),
        ("Reset", env(Request::Reset), "05 01"),
        (
            "AllocSlot",
            env(Request::AllocSlot {
                slot: 1,
                bytes: 300,
            }),
            "05 02 01 ac 02",
        ),
        (
            "WriteSlot",
            env(Request::WriteSlot {
                slot: 2,
                offset: 5,
                data: &[0xaa, 0xbb],
            }),
            "05 03 02 05 02 aa bb",
        ),
        (
            "ReadSlot",
            env(Request::ReadSlot {
                slot: 3,
                offset: 6,
                len: 7,
            }),
            "05 04 03 06 07",
        ),
        (
            "CreateFifo",
            env(Request::CreateFifo {
                fifo: 4,
                item_bytes: 8,
                depth: 9,
            }),
            "05 05 04 08 09",
        ),
        (
            "PushFifo",
            env(Request::PushFifo {
                fifo: 5,
                data: &[1, 2, 3],
            }),
            "05 06 05 03 01 02 03",
        ),
        (
            "PopFifo",
            env(Request::PopFifo { fifo: 6, items: 3 }),
            "05 07 06 03",
        ),
        (
            "SetOptimizer",
            env(Request::SetOptimizer {
                learning_rate: 0.5,
                momentum: 0.25,
            }),
            "05 08 00 00 00 3f 00 00 80 3e",
        ),
        (
            "SetSeed",
            env(Request::SetSeed {
                seed: 0x0123_4567_89ab_cdef,
            }),
            "05 09 ef 9b af cd f8 ac d1 91 01",
        ),
        ("GetSeed", env(Request::GetSeed), "05 0a"),
        (
            "SetRngState",
            env(Request::SetRngState {
                state: [1, 2, 3, 4],
            }),
            "05 0b 01 02 03 04",
        ),
        ("GetRngState", env(Request::GetRngState), "05 0c"),
        (
            "Prepare",
            env(Request::Prepare {
                replicas: 4,
                program: program(),
            }),
            "05 0d 04 01 01 77 02 02 03 02 00 01 02 01 01 02 01 78 02 01 02 00 01 74 06 01 01 00 01 \
             00 01 07 03 00 00 03 00 00 00 3f 04 01 00 07 08 01 00 00 00 3f 00 00 80 3e 01",
        ),
        ("RunStep", env(Request::RunStep), "05 0e"),
        (
            "Reduced",
            env(Request::Reduced {
                round: 10,
                data: ONE_F32,
            }),
            "05 0f 0a 04 00 00 80 3f",
        ),
        ("CycleCount", env(Request::CycleCount), "05 10"),
        (
            "SetRegister",
            env(Request::SetRegister {
                id: 11,
                value: Value::Int(-2),
            }),
            "05 11 0b 00 03",
        ),
        (
            "GetRegister",
            env(Request::GetRegister { id: 12 }),
            "05 12 0c",
        ),
        (
            "FreeRegister",
            env(Request::FreeRegister { id: 13 }),
            "05 13 0d",
        ),
        (
            "Call",
            env(Request::Call {
                function: "add",
                args: heapless::Vec::from_slice(&[1, 2]).unwrap(),
                out: 14,
            }),
            "05 14 03 61 64 64 02 01 02 0e",
        ),
        (
            "RemoteLoad",
            env(Request::RemoteLoad {
                slot: 15,
                variable: 16,
            }),
            "05 15 0f 10",
        ),
        (
            "RemoteStore",
            env(Request::RemoteStore {
                variable: 17,
                slot: 18,
            }),
            "05 16 11 12",
        ),
        (
            "Invoke",
            env(Request::Invoke {
                function: "mul",
                args: heapless::Vec::from_slice(&[Arg::Register(19), Arg::Value(Value::Int(3))])
                    .unwrap(),
                out: 20,
            }),
            "05 17 03 6d 75 6c 02 00 13 01 00 06 14",
        ),
        (
            "HasFunction",
            env(Request::HasFunction { function: "relu" }),
            "05 18 04 72 65 6c 75",
        ),
        ("Ping", env(Request::Ping), "05 19"),
        (
            "AllocArray",
            env(Request::AllocArray {
                id: 21,
                dtype: DataType::U32,
                shape: heapless::Vec::from_slice(&[4, 200]).unwrap(),
            }),
            "05 1a 15 0a 02 04 c8 01",
        ),
        (
            "WriteArray",
            env(Request::WriteArray {
                id: 22,
                offset: 130,
                data: &[0xcc, 0xdd],
            }),
            "05 1b 16 82 01 02 cc dd",
        ),
        (
            "ReadArray",
            env(Request::ReadArray {
                id: 23,
                offset: 24,
                len: 25,
            }),
            "05 1c 17 18 19",
        ),
        (
            "DescribeRegister",
            env(Request::DescribeRegister { id: 26 }),
            "05 1d 1a",
        ),
        (
            "WriteArrayBulk",
            env(Request::WriteArrayBulk {
                id: 27,
                offset: 128,
                len: 70000,
            }),
            "05 1e 1b 80 01 f0 a2 04",
        ),
        (
            "ReadArrayBulk",
            env(Request::ReadArrayBulk {
                id: 29,
                offset: 300,
                len: 4096,
            }),
            "05 1f 1d ac 02 80 20",
        ),
        (
            "WriteSlotBulk",
            env(Request::WriteSlotBulk {
                slot: 31,
                offset: 301,
                len: 4097,
            }),
            "05 20 1f ad 02 81 20",
        ),
        (
            "ReadSlotBulk",
            env(Request::ReadSlotBulk {
                slot: 33,
                offset: 302,
                len: 4098,
            }),
            "05 21 21 ae 02 82 20",
        ),
        ("ResetStep", env(Request::ResetStep), "05 22"),
    ]
}

/// Every response, inside an envelope with sequence number 5.
fn responses() -> Vec<(&'static str, Envelope<Response<'static>>, &'static str)> {
    let env = |body| Envelope { seq: 5, body };
    vec![
        (
            "Hello",
            env(Response::Hello {
                version: 2,
                limits: limits(),
            }),
            "05 00 02 80 80 04 80 08 03 10",
        ),
        ("Done", env(Response::Done), "05 01"),
        (
            "Data",
            env(Response::Data { data: &[9, 8] }),
            "05 02 02 09 08",
        ),
        ("Seed", env(Response::Seed { seed: 42 }), "05 03 2a"),
        (
            "RngState",
            env(Response::RngState {
                state: [5, 6, 7, 8],
            }),
            "05 04 05 06 07 08",
        ),
        (
            "Cycles",
            env(Response::Cycles { cycles: 1000 }),
            "05 05 e8 07",
        ),
        (
            "Register",
            env(Response::Register {
                value: Value::Float(1.5),
            }),
            "05 06 01 00 00 00 00 00 00 f8 3f",
        ),
        (
            "Reduce",
            env(Response::Reduce {
                round: 2,
                op: ReduceOp::Mean,
                data: ONE_F32,
            }),
            "05 07 02 01 04 00 00 80 3f",
        ),
        (
            "Error",
            env(Response::Error {
                request: RequestKind::PushFifo,
                code: ErrorCode::FifoFull { fifo: 5 },
            }),
            "05 08 06 07 05",
        ),
        (
            "Described",
            env(Response::Described {
                kind: ValueKind::Array,
                dtype: Some(DataType::BF16),
                shape: heapless::Vec::from_slice(&[3, 7]).unwrap(),
                bytes: 42,
                at: 4096,
            }),
            "05 09 05 01 01 02 03 07 2a 80 20",
        ),
        ("Bulk", env(Response::Bulk { len: 513 }), "05 0a 81 04"),
    ]
}

fn error_codes() -> Vec<(&'static str, ErrorCode, &'static str)> {
    vec![
        ("Version", ErrorCode::Version { device: 2 }, "00 02"),
        (
            "OutOfMemory",
            ErrorCode::OutOfMemory {
                requested: 300,
                available: 7,
            },
            "01 ac 02 07",
        ),
        ("TableFull", ErrorCode::TableFull, "02"),
        ("UnknownId", ErrorCode::UnknownId { id: 4 }, "03 04"),
        ("IdInUse", ErrorCode::IdInUse { id: 5 }, "04 05"),
        (
            "OutOfBounds",
            ErrorCode::OutOfBounds {
                offset: 1,
                len: 2,
                size: 3,
            },
            "05 01 02 03",
        ),
        (
            "ItemSize",
            ErrorCode::ItemSize {
                expected: 8,
                actual: 9,
            },
            "06 08 09",
        ),
        ("FifoFull", ErrorCode::FifoFull { fifo: 6 }, "07 06"),
        ("FifoEmpty", ErrorCode::FifoEmpty { fifo: 7 }, "08 07"),
        ("NotConfigured", ErrorCode::NotConfigured, "09"),
        ("BadConfig", ErrorCode::BadConfig, "0a"),
        ("ReplyTooLarge", ErrorCode::ReplyTooLarge, "0b"),
        ("UnknownFunction", ErrorCode::UnknownFunction, "0c"),
        ("BadArguments", ErrorCode::BadArguments, "0d"),
        ("Malformed", ErrorCode::Malformed, "0e"),
        ("UnexpectedReduced", ErrorCode::UnexpectedReduced, "0f"),
        ("ReduceTimeout", ErrorCode::ReduceTimeout, "10"),
        (
            "ReductionTooLarge",
            ErrorCode::ReductionTooLarge {
                bytes: 5000,
                max: 1024,
            },
            "11 88 27 80 08",
        ),
        ("BulkUnavailable", ErrorCode::BulkUnavailable, "12"),
        ("StepAbandoned", ErrorCode::StepAbandoned, "13"),
        ("NotInstrumented", ErrorCode::NotInstrumented, "14"),
    ]
}

fn values() -> Vec<(&'static str, Value<'static>, &'static str)> {
    vec![
        ("Int", Value::Int(-2), "00 03"),
        ("Float", Value::Float(1.5), "01 00 00 00 00 00 00 f8 3f"),
        (
            "Shape",
            Value::Shape(heapless::Vec::from_slice(&[2, 300]).unwrap()),
            "02 02 02 ac 02",
        ),
        ("Str", Value::Str("w"), "03 01 77"),
        ("Tensor", Value::Tensor(ONE_F32), "04 04 00 00 80 3f"),
        (
            "Array",
            Value::Array(array()),
            "05 05 02 02 03 0c 01 00 02 00 03 00 04 00 05 00 ff ff",
        ),
    ]
}

fn value_kinds() -> Vec<(&'static str, ValueKind, &'static str)> {
    use ValueKind::*;
    vec![
        ("Int", Int, "00"),
        ("Float", Float, "01"),
        ("Shape", Shape, "02"),
        ("Str", Str, "03"),
        ("Tensor", Tensor, "04"),
        ("Array", Array, "05"),
    ]
}

fn args() -> Vec<(&'static str, Arg<'static>, &'static str)> {
    vec![
        ("Register", Arg::Register(300), "00 ac 02"),
        ("Value", Arg::Value(Value::Str("x")), "01 03 01 78"),
    ]
}

/// Every element type: it travels as its position in the list.
fn data_types() -> Vec<(&'static str, DataType, &'static str)> {
    use DataType::*;
    vec![
        ("F16", F16, "00"),
        ("BF16", BF16, "01"),
        ("F32", F32, "02"),
        ("F64", F64, "03"),
        ("I8", I8, "04"),
        ("I16", I16, "05"),
        ("I32", I32, "06"),
        ("I64", I64, "07"),
        ("U8", U8, "08"),
        ("U16", U16, "09"),
        ("U32", U32, "0a"),
        ("U64", U64, "0b"),
        ("Bool", Bool, "0c"),
        ("F8E4M3", F8E4M3, "0d"),
        ("F8E5M2", F8E5M2, "0e"),
    ]
}

fn kinds() -> Vec<(&'static str, RequestKind, &'static str)> {
    use RequestKind::*;
    vec![
        ("Hello", Hello, "00"),
        ("Reset", Reset, "01"),
        ("AllocSlot", AllocSlot, "02"),
        ("WriteSlot", WriteSlot, "03"),
        ("ReadSlot", ReadSlot, "04"),
        ("CreateFifo", CreateFifo, "05"),
        ("PushFifo", PushFifo, "06"),
        ("PopFifo", PopFifo, "07"),
        ("SetOptimizer", SetOptimizer, "08"),
        ("SetSeed", SetSeed, "09"),
        ("GetSeed", GetSeed, "0a"),
        ("SetRngState", SetRngState, "0b"),
        ("GetRngState", GetRngState, "0c"),
        ("Prepare", Prepare, "0d"),
        ("RunStep", RunStep, "0e"),
        ("Reduced", Reduced, "0f"),
        ("CycleCount", CycleCount, "10"),
        ("SetRegister", SetRegister, "11"),
        ("GetRegister", GetRegister, "12"),
        ("FreeRegister", FreeRegister, "13"),
        ("Call", Call, "14"),
        ("Malformed", Malformed, "15"),
        ("RemoteLoad", RemoteLoad, "16"),
        ("RemoteStore", RemoteStore, "17"),
        ("Invoke", Invoke, "18"),
        ("HasFunction", HasFunction, "19"),
        ("Ping", Ping, "1a"),
        ("AllocArray", AllocArray, "1b"),
        ("WriteArray", WriteArray, "1c"),
        ("ReadArray", ReadArray, "1d"),
        ("DescribeRegister", DescribeRegister, "1e"),
        ("WriteArrayBulk", WriteArrayBulk, "1f"),
        ("ReadArrayBulk", ReadArrayBulk, "20"),
        ("WriteSlotBulk", WriteSlotBulk, "21"),
        ("ReadSlotBulk", ReadSlotBulk, "22"),
        ("ResetStep", ResetStep, "23"),
    ]
}

fn ops() -> Vec<(&'static str, ReduceOp, &'static str)> {
    vec![("Sum", ReduceOp::Sum, "00"), ("Mean", ReduceOp::Mean, "01")]
}

// ---------------------------------------------------------------------------------------

/// A change to the bytes below is a protocol change: bump [`PROTOCOL_VERSION`] with it and
/// update this number together with the literals.
#[test]
fn protocol_version_is_pinned() {
    assert_eq!(PROTOCOL_VERSION, 9);
}

#[test]
fn every_request_has_its_golden_bytes() {
    let cases = requests();
    check_golden!(Envelope<Request<'_>>, cases);
    assert_covers(
        "Request",
        cases
            .iter()
            .map(|(_, e, _)| request_variant(&e.body))
            .collect(),
        probed_variants(|b| decode_body::<Request<'_>>(b).is_ok()),
    );
    // `kind()` is what error replies carry; each request reports its own kind.
    for (name, envelope, _) in &cases {
        assert_eq!(format!("{:?}", envelope.body.kind()), *name);
    }
}

#[test]
fn every_response_has_its_golden_bytes() {
    let cases = responses();
    check_golden!(Envelope<Response<'_>>, cases);
    assert_covers(
        "Response",
        cases
            .iter()
            .map(|(_, e, _)| response_variant(&e.body))
            .collect(),
        probed_variants(|b| decode_body::<Response<'_>>(b).is_ok()),
    );
}

#[test]
fn every_error_code_has_its_golden_bytes() {
    let cases = error_codes();
    check_golden!(ErrorCode, cases);
    assert_covers(
        "ErrorCode",
        cases.iter().map(|(_, c, _)| error_variant(c)).collect(),
        probed_variants(|b| decode_body::<ErrorCode>(b).is_ok()),
    );
}

#[test]
fn every_value_has_its_golden_bytes() {
    let cases = values();
    check_golden!(Value<'_>, cases);
    assert_covers(
        "Value",
        cases.iter().map(|(_, v, _)| value_variant(v)).collect(),
        probed_variants(|b| decode_body::<Value<'_>>(b).is_ok()),
    );
}

#[test]
fn every_value_kind_has_its_golden_bytes() {
    let cases = value_kinds();
    check_golden!(ValueKind, cases);
    assert_covers(
        "ValueKind",
        cases
            .iter()
            .map(|(_, k, _)| value_kind_variant(*k))
            .collect(),
        probed_variants(|b| decode_body::<ValueKind>(b).is_ok()),
    );
}

#[test]
fn every_arg_has_its_golden_bytes() {
    let cases = args();
    check_golden!(Arg<'_>, cases);
    assert_covers(
        "Arg",
        cases.iter().map(|(_, a, _)| arg_variant(a)).collect(),
        probed_variants(|b| decode_body::<Arg<'_>>(b).is_ok()),
    );
}

/// Every data type, and in the order of `DataType::ALL` (its position is its wire byte).
#[test]
fn every_data_type_has_its_golden_bytes() {
    let cases = data_types();
    check_golden!(DataType, cases);
    assert_covers(
        "DataType",
        cases
            .iter()
            .map(|(_, t, _)| data_type_variant(*t))
            .collect(),
        probed_variants(|b| decode_body::<DataType>(b).is_ok()),
    );
    let listed: Vec<DataType> = cases.iter().map(|(_, t, _)| *t).collect();
    assert_eq!(listed, DataType::ALL, "DataType::ALL is the wire order");
}

#[test]
fn every_request_kind_has_its_golden_bytes() {
    let cases = kinds();
    check_golden!(RequestKind, cases);
    assert_covers(
        "RequestKind",
        cases.iter().map(|(_, k, _)| kind_variant(*k)).collect(),
        probed_variants(|b| decode_body::<RequestKind>(b).is_ok()),
    );
}

#[test]
fn every_reduce_op_has_its_golden_bytes() {
    let cases = ops();
    check_golden!(ReduceOp, cases);
    assert_covers(
        "ReduceOp",
        cases.iter().map(|(_, o, _)| op_variant(*o)).collect(),
        probed_variants(|b| decode_body::<ReduceOp>(b).is_ok()),
    );
}

/// The plain structs on their own: field order and types.
#[test]
fn limits_program_and_array_have_their_golden_bytes() {
    check_golden!(Limits, [("Limits", limits(), "80 80 04 80 08 03 10")]);
    check_golden!(
        Array<'_>,
        [(
            "Array",
            array(),
            "05 02 02 03 0c 01 00 02 00 03 00 04 00 05 00 ff ff"
        )]
    );
    check_golden!(
        Program,
        [(
            "Program",
            program(),
            "01 01 77 02 02 03 02 00 01 02 01 01 02 01 78 02 01 02 00 01 74 06 01 01 00 01 00 01 \
             07 03 00 00 03 00 00 00 3f 04 01 00 07 08 01 00 00 00 3f 00 00 80 3e 01"
        )]
    );
}

/// An `Option` is a tag byte (0: `None`; 1: `Some`, then the value). The `Described` case
/// above carries `Some`; this pins `None`, and an empty shape, as a device sends them for a
/// plain integer register.
#[test]
fn described_without_a_dtype_has_its_golden_bytes() {
    let env = |body| Envelope { seq: 5, body };
    check_golden!(
        Envelope<Response<'_>>,
        [(
            "Described (no dtype)",
            env(Response::Described {
                kind: ValueKind::Int,
                dtype: None,
                shape: heapless::Vec::new(),
                bytes: 0,
                at: 0,
            }),
            "05 09 00 00 00 00 00",
        )]
    );
}

/// Whole frames: `COBS(body ‖ CRC-32 little-endian) ‖ 00`. Catches a change of checksum,
/// byte order or stuffing, and an envelope whose sequence number is not a varint first.
#[test]
fn frames_have_their_golden_bytes() {
    let request = Envelope {
        seq: 0x0102_0304,
        body: Request::PushFifo {
            fifo: 1,
            data: &[0, 0, 0],
        },
    };
    let response = Envelope {
        seq: 0,
        body: Response::Done,
    };
    let golden_request = bytes("08 84 86 88 08 06 01 03 01 01 05 83 0d 96 53 00");
    let golden_response = bytes("01 06 01 69 22 de 36 00");
    let (mut scratch, mut out) = ([0u8; 64], [0u8; 80]);
    let n = encode_frame(&request, &mut scratch, &mut out).unwrap();
    assert_eq!(hex(&out[..n]), hex(&golden_request), "request frame");
    let n = encode_frame(&response, &mut scratch, &mut out).unwrap();
    assert_eq!(hex(&out[..n]), hex(&golden_response), "response frame");

    let mut decoder = FrameDecoder::<80>::new();
    let (used, got) = decoder.feed(&golden_request);
    assert_eq!(used, golden_request.len());
    let body = got.expect("a whole frame").expect("a good frame");
    assert_eq!(decode_body::<Envelope<Request<'_>>>(body), Ok(request));
    let (_, got) = decoder.feed(&golden_response);
    let body = got.expect("a whole frame").expect("a good frame");
    assert_eq!(decode_body::<Envelope<Response<'_>>>(body), Ok(response));
}
