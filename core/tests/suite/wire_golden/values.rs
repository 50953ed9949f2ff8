//! Representative values of every message, each with its golden bytes written literally.

use super::*;

// ---------------------------------------------------------------------------------------
// Representative values. Fields of one message get distinct values, so that swapping two
// fields of the same type changes the bytes.

pub(super) const ONE_F32: &[u8] = &[0x00, 0x00, 0x80, 0x3f];

/// One variable (sharded, balanced), two streams, one anchor, three layers.
pub(super) fn program() -> Program {
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
        micro_batch_size: 3,
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

/// [`program`] as a `Prepare` request carries it (leaked: the cases live as long as the
/// test).
pub(super) fn program_bytes() -> &'static [u8] {
    let mut bytes = vec![0u8; 512];
    let len = program()
        .encode(&mut bytes)
        .expect("the program fits")
        .len();
    bytes.truncate(len);
    Vec::leak(bytes)
}

pub(super) fn limits() -> Limits {
    Limits {
        memory: 65536,
        max_frame: 1024,
        replica: 3,
        lanes: 2,
        window: 16,
    }
}

/// A 2×3 `int16` array.
pub(super) fn array() -> Array<'static> {
    Array {
        dtype: DataType::I16,
        shape: heapless::Vec::from_slice(&[2, 3]).unwrap(),
        data: &[1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 0xff, 0xff],
    }
}

/// Every request, inside an envelope with sequence number 5.
pub(super) fn requests() -> Vec<(&'static str, Envelope<Request<'static>>, &'static str)> {
    let env = |body| Envelope { seq: 5, body };
    vec![
        (
            "Hello",
            env(Request::Hello {
                version: 2,
                replica: 3,
                lanes: 2,
            }),
            "05 00 02 03 02",
        ),
        (
            "AllocSlot",
            env(Request::Memory(MemoryRequest::AllocSlot {
                slot: 1,
                bytes: 300,
            })),
            "05 02 00 01 ac 02",
        ),
        (
            "CreateFifo",
            env(Request::Streams(StreamRequest::CreateFifo {
                fifo: 4,
                item_bytes: 8,
                depth: 9,
            })),
            "05 03 00 04 08 09",
        ),
        (
            "SetOptimizer",
            env(Request::Program(ProgramRequest::SetOptimizer {
                learning_rate: 0.5,
                momentum: 0.25,
            })),
            "05 04 00 00 00 00 3f 00 00 80 3e",
        ),
        (
            "SetSeed",
            env(Request::Program(ProgramRequest::SetSeed {
                seed: 0x0123_4567_89ab_cdef,
            })),
            "05 04 01 ef 9b af cd f8 ac d1 91 01",
        ),
        ("GetSeed", env(Request::Program(ProgramRequest::GetSeed)), "05 04 02"),
        (
            "SetRngState",
            env(Request::Program(ProgramRequest::SetRngState {
                lane: 1,
                state: [1, 2, 3, 4],
            })),
            "05 04 03 01 01 02 03 04",
        ),
        (
            "GetRngState",
            env(Request::Program(ProgramRequest::GetRngState { lane: 1 })),
            "05 04 04 01",
        ),
        (
            "Prepare",
            env(Request::Program(ProgramRequest::Prepare {
                replicas: 4,
                program: program_bytes(),
            })),
            "05 04 05 04 35 01 01 77 02 02 03 02 00 01 02 01 01 02 01 78 02 01 02 00 01 74 06 01 01 \
             00 01 00 01 07 03 00 00 03 00 00 00 3f 04 01 00 07 08 03 01 00 00 00 3f 00 00 80 3e 01",
        ),
        (
            "RunStep",
            env(Request::Program(ProgramRequest::RunStep {
                fed: true,
                took: false,
            })),
            "05 04 06 01 00",
        ),
        (
            "CycleCount",
            env(Request::Program(ProgramRequest::CycleCount { lane: 1 })),
            "05 04 07 01",
        ),
        (
            "SetRegister",
            env(Request::Kernels(KernelRequest::SetRegister {
                id: 11,
                value: Value::Int(-2),
            })),
            "05 05 00 0b 00 03",
        ),
        (
            "GetRegister",
            env(Request::Kernels(KernelRequest::GetRegister { id: 12 })),
            "05 05 01 0c",
        ),
        (
            "FreeRegister",
            env(Request::Kernels(KernelRequest::FreeRegister { id: 13 })),
            "05 05 02 0d",
        ),
        (
            "RemoteLoad",
            env(Request::Memory(MemoryRequest::RemoteLoad {
                slot: 15,
                variable: 16,
            })),
            "05 02 01 0f 10",
        ),
        (
            "RemoteStore",
            env(Request::Memory(MemoryRequest::RemoteStore {
                variable: 17,
                slot: 18,
            })),
            "05 02 02 11 12",
        ),
        (
            "Invoke",
            env(Request::Kernels(KernelRequest::Invoke {
                function: "mul",
                args: heapless::Vec::from_slice(&[Arg::Register(19), Arg::Value(Value::Int(3))])
                    .unwrap(),
                out: 20,
            })),
            "05 05 03 03 6d 75 6c 02 00 13 01 00 06 14",
        ),
        (
            "HasFunction",
            env(Request::Kernels(KernelRequest::HasFunction { function: "relu" })),
            "05 05 04 04 72 65 6c 75",
        ),
        (
            "AllocArray",
            env(Request::Kernels(KernelRequest::AllocArray {
                id: 21,
                dtype: DataType::U32,
                shape: heapless::Vec::from_slice(&[4, 200]).unwrap(),
            })),
            "05 05 05 15 0a 02 04 c8 01",
        ),
        (
            "DescribeRegister",
            env(Request::Kernels(KernelRequest::DescribeRegister { id: 26 })),
            "05 05 06 1a",
        ),
        (
            "Write",
            env(Request::Data(DataRequest::Write {
                target: Target::Slot(2),
                offset: 130,
                data: &[0xaa, 0xbb],
            })),
            "05 01 00 01 02 82 01 02 aa bb",
        ),
        (
            "Read",
            env(Request::Data(DataRequest::Read {
                target: Target::Register(3),
                offset: 6,
                len: 7,
            })),
            "05 01 01 00 03 06 07",
        ),
        (
            "WriteBulk",
            env(Request::Data(DataRequest::WriteBulk {
                target: Target::Fifo(27),
                offset: 128,
                len: 70000,
            })),
            "05 01 02 02 1b 80 01 f0 a2 04",
        ),
        (
            "ReadBulk",
            env(Request::Data(DataRequest::ReadBulk {
                target: Target::Slot(29),
                offset: 300,
                len: 4096,
            })),
            "05 01 03 01 1d ac 02 80 20",
        ),
        (
            "Locate",
            env(Request::Data(DataRequest::Locate {
                target: Target::Variable(31),
            })),
            "05 01 04 03 1f",
        ),
        (
            "Wrote",
            env(Request::Data(DataRequest::Wrote {
                target: Target::Fifo(32),
                offset: 301,
                len: 4097,
            })),
            "05 01 05 02 20 ad 02 81 20",
        ),
        (
            "Took",
            env(Request::Data(DataRequest::Took {
                target: Target::Fifo(33),
                offset: 302,
                len: 4098,
            })),
            "05 01 06 02 21 ae 02 82 20",
        ),
        ("ResetStep", env(Request::Program(ProgramRequest::ResetStep)), "05 04 08"),
    ]
}

/// Every response, inside an envelope with sequence number 5.
pub(super) fn responses() -> Vec<(&'static str, Envelope<Response<'static>>, &'static str)> {
    let env = |body| Envelope { seq: 5, body };
    vec![
        (
            "Hello",
            env(Response::Hello {
                version: 2,
                limits: limits(),
            }),
            "05 00 02 80 80 04 80 08 03 02 10",
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
            "Error",
            env(Response::Error {
                request: RequestKind::Write,
                code: ErrorCode::FifoFull { fifo: 5 },
            }),
            "05 07 14 07 05",
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
            "05 08 04 01 01 02 03 07 2a 80 20",
        ),
        (
            "Located",
            env(Response::Located { at: 4096, len: 300 }),
            "05 09 80 20 ac 02",
        ),
        ("Bulk", env(Response::Bulk { len: 513 }), "05 0a 81 04"),
    ]
}

pub(super) fn error_codes() -> Vec<(&'static str, ErrorCode, &'static str)> {
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
        (
            "FifoPosition",
            ErrorCode::FifoPosition {
                fifo: 8,
                expected: 300,
                offset: 9,
            },
            "09 08 ac 02 09",
        ),
        (
            "Program",
            ErrorCode::Program(ProgramFault {
                part: ProgramPart::Variable { index: 2 },
                rule: RuleKind::Dimensions,
            }),
            "0a 01 02 03",
        ),
        ("NotPrepared", ErrorCode::NotPrepared, "0b"),
        (
            "ReplicaOutOfRange",
            ErrorCode::ReplicaOutOfRange {
                replica: 4,
                replicas: 3,
            },
            "0c 04 03",
        ),
        (
            "FifoShape",
            ErrorCode::FifoShape {
                item_bytes: 0,
                depth: 70000,
            },
            "0d 00 f0 a2 04",
        ),
        (
            "Internal",
            ErrorCode::Internal {
                site: Invariant::ScratchLayout,
            },
            "0e 02",
        ),
        ("ReplyTooLarge", ErrorCode::ReplyTooLarge, "0f"),
        ("UnknownFunction", ErrorCode::UnknownFunction, "10"),
        ("BadArguments", ErrorCode::BadArguments, "11"),
        ("Malformed", ErrorCode::Malformed, "12"),
        ("UnexpectedReduced", ErrorCode::UnexpectedReduced, "13"),
        ("ReduceTimeout", ErrorCode::ReduceTimeout, "14"),
        (
            "ReductionTooLarge",
            ErrorCode::ReductionTooLarge {
                bytes: 5000,
                max: 1024,
            },
            "15 88 27 80 08",
        ),
        ("BulkUnavailable", ErrorCode::BulkUnavailable, "16"),
        ("StepAbandoned", ErrorCode::StepAbandoned, "17"),
        ("NotInstrumented", ErrorCode::NotInstrumented, "18"),
        ("Lanes", ErrorCode::Lanes { lanes: 65, max: 64 }, "19 41 40"),
        (
            "LanesApart",
            ErrorCode::LanesApart {
                variable: 1,
                replica: 2,
            },
            "1a 01 02",
        ),
        (
            "NoSuchLane",
            ErrorCode::NoSuchLane { lane: 3, lanes: 2 },
            "1b 03 02",
        ),
    ]
}

pub(super) fn values() -> Vec<(&'static str, Value<'static>, &'static str)> {
    vec![
        ("Int", Value::Int(-2), "00 03"),
        ("Float", Value::Float(1.5), "01 00 00 00 00 00 00 f8 3f"),
        (
            "Shape",
            Value::Shape(heapless::Vec::from_slice(&[2, 300]).unwrap()),
            "02 02 02 ac 02",
        ),
        ("Str", Value::Str("w"), "03 01 77"),
        (
            "Array",
            Value::Array(array()),
            "04 05 02 02 03 0c 01 00 02 00 03 00 04 00 05 00 ff ff",
        ),
    ]
}

pub(super) fn value_kinds() -> Vec<(&'static str, ValueKind, &'static str)> {
    use ValueKind::*;
    vec![
        ("Int", Int, "00"),
        ("Float", Float, "01"),
        ("Shape", Shape, "02"),
        ("Str", Str, "03"),
        ("Array", Array, "04"),
    ]
}

pub(super) fn args() -> Vec<(&'static str, Arg<'static>, &'static str)> {
    vec![
        ("Register", Arg::Register(300), "00 ac 02"),
        ("Value", Arg::Value(Value::Str("x")), "01 03 01 78"),
    ]
}

/// Every element type: it travels as its position in the list.
pub(super) fn data_types() -> Vec<(&'static str, DataType, &'static str)> {
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

pub(super) fn kinds() -> Vec<(&'static str, RequestKind, &'static str)> {
    use RequestKind::*;
    vec![
        ("Hello", Hello, "00"),
        ("AllocSlot", AllocSlot, "01"),
        ("CreateFifo", CreateFifo, "02"),
        ("SetOptimizer", SetOptimizer, "03"),
        ("SetSeed", SetSeed, "04"),
        ("GetSeed", GetSeed, "05"),
        ("SetRngState", SetRngState, "06"),
        ("GetRngState", GetRngState, "07"),
        ("Prepare", Prepare, "08"),
        ("RunStep", RunStep, "09"),
        ("CycleCount", CycleCount, "0a"),
        ("SetRegister", SetRegister, "0b"),
        ("GetRegister", GetRegister, "0c"),
        ("FreeRegister", FreeRegister, "0d"),
        ("RemoteLoad", RemoteLoad, "0e"),
        ("RemoteStore", RemoteStore, "0f"),
        ("Invoke", Invoke, "10"),
        ("HasFunction", HasFunction, "11"),
        ("AllocArray", AllocArray, "12"),
        ("DescribeRegister", DescribeRegister, "13"),
        ("Write", Write, "14"),
        ("Read", Read, "15"),
        ("WriteBulk", WriteBulk, "16"),
        ("ReadBulk", ReadBulk, "17"),
        ("Locate", Locate, "18"),
        ("Wrote", Wrote, "19"),
        ("Took", Took, "1a"),
        ("ResetStep", ResetStep, "1b"),
        ("Malformed", Malformed, "1c"),
    ]
}

pub(super) fn ops() -> Vec<(&'static str, ReduceOp, &'static str)> {
    vec![
        ("Sum", ReduceOp::Sum, "00"),
        ("Avg", ReduceOp::Avg, "01"),
        ("Prod", ReduceOp::Prod, "02"),
        ("Min", ReduceOp::Min, "03"),
        ("Max", ReduceOp::Max, "04"),
    ]
}
