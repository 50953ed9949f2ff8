//! No host frame can make the device panic: random bytes and random well-formed requests
//! (any ids, offsets, lengths and values) go through the real serve loop, and every
//! well-formed request gets exactly one reply.

use proptest::prelude::*;
use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{AnchorTensor, Layer, Optimizer, Program, Sharding};
use tessera_core::stream::AnchorReturnType;
use tessera_core::wire::{
    Arg, Array, DataRequest, KernelRequest, MemoryRequest, ProgramRequest, Request, StreamRequest,
    Target, Value,
};

use crate::support;

use support::{frame, replies, serve_all, MemLink};

fn run(input: Vec<u8>) -> Vec<u8> {
    let mut link = MemLink::new(input);
    serve_all(&mut link);
    link.output
}

fn small() -> impl Strategy<Value = u32> {
    prop_oneof![0u32..8, 0u32..5000, Just(u32::MAX)]
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        id().prop_map(Target::Register),
        id().prop_map(Target::Slot),
        id().prop_map(Target::Fifo),
    ]
}

fn id() -> impl Strategy<Value = u16> {
    prop_oneof![0u16..4, any::<u16>()]
}

const BYTES: [u8; 64] = [7; 64];

/// A program of `inputs → outputs` (either may be 0, which the device must refuse), with
/// or without dropout, sharded three ways, anchoring the output or not. Groups have one
/// member: a group step waits for the host's reduction and would rightly consume the
/// frames that follow it.
#[allow(clippy::too_many_arguments)]
fn program(
    inputs: u32,
    outputs: u32,
    hidden: usize,
    batches: u32,
    accumulation: u32,
    sharding: usize,
    dropout: f32,
    anchor: bool,
) -> Program {
    let sharding = [Sharding::None, Sharding::Balanced, Sharding::PaddedTail][sharding].clone();
    let mut p = Program::new(batches, accumulation, Optimizer::Sgd { learning_rate: 0.1 });
    let none = GroupingSpec::Comm(CommGroup::None);
    let one = RetrievalMode::OnePerGroup;
    let x = p.add_stream("x", DataType::F32, &[inputs], false).unwrap();
    let t = p.add_stream("t", DataType::I32, &[1], false).unwrap();
    let w1 = p.add_variable(
        "w1",
        &[hidden as u32 + 2, inputs],
        none,
        one,
        sharding.clone(),
    );
    let w2 = p.add_variable("w2", &[outputs, hidden as u32 + 2], none, one, sharding);
    p.add_layer(Layer::Linear {
        weight: w1.unwrap(),
    })
    .unwrap();
    p.add_layer(Layer::Relu).unwrap();
    p.add_layer(Layer::Dropout { rate: dropout }).unwrap();
    p.add_layer(Layer::Linear {
        weight: w2.unwrap(),
    })
    .unwrap();
    p.add_layer(Layer::SoftmaxCrossEntropy { labels: t })
        .unwrap();
    if anchor {
        p.add_anchor(AnchorTensor::Output, AnchorReturnType::All)
            .unwrap();
    }
    p.input = x;
    p
}

fn request() -> impl Strategy<Value = Request<'static>> {
    prop_oneof![
        (any::<u32>(), 0..4u16).prop_map(|(replica, lanes)| Request::Hello {
            version: tessera_core::wire::PROTOCOL_VERSION,
            replica,
            lanes,
        }),
        any::<u16>().prop_map(|version| Request::Hello {
            version,
            replica: 0,
            lanes: 1,
        }),
        Just(Request::Program(ProgramRequest::ResetStep)),
        (id(), small())
            .prop_map(|(slot, bytes)| Request::Memory(MemoryRequest::AllocSlot { slot, bytes })),
        (target(), small(), 0usize..64).prop_map(|(target, offset, n)| Request::Data(
            DataRequest::Write {
                target,
                offset,
                data: &BYTES[..n]
            }
        )),
        (target(), small(), small(), 0u8..5).prop_map(|(target, offset, len, which)| {
            match which {
                0 => Request::Data(DataRequest::Read {
                    target,
                    offset,
                    len,
                }),
                1 => Request::Data(DataRequest::ReadBulk {
                    target,
                    offset,
                    len,
                }),
                2 => Request::Data(DataRequest::WriteBulk {
                    target,
                    offset,
                    len,
                }),
                3 => Request::Data(DataRequest::Wrote {
                    target,
                    offset,
                    len,
                }),
                _ => Request::Data(DataRequest::Took {
                    target,
                    offset,
                    len,
                }),
            }
        }),
        target().prop_map(|target| Request::Data(DataRequest::Locate { target })),
        (id(), small(), any::<u16>()).prop_map(|(fifo, item_bytes, depth)| Request::Streams(
            StreamRequest::CreateFifo {
                fifo,
                item_bytes,
                depth
            }
        )),
        any::<u64>().prop_map(|seed| Request::Program(ProgramRequest::SetSeed { seed })),
        (0..3u16, any::<[u32; 4]>()).prop_map(|(lane, state)| Request::Program(
            ProgramRequest::SetRngState { lane, state }
        )),
        (
            0u32..4,
            0u32..4,
            0usize..4,
            0u32..3,
            0u32..3,
            0u32..5,
            0usize..3,
            -1.0f32..2.0,
            any::<bool>(),
        )
            .prop_map(
                |(inputs, outputs, comm, b, a, replicas, sharding, dropout, anchor)| {
                    let program = program(inputs, outputs, comm, b, a, sharding, dropout, anchor);
                    Request::Program(ProgramRequest::Prepare {
                        replicas,
                        // Leaked: a generated request lives as long as the test.
                        program: Vec::leak(support::encoded(&program)),
                    })
                }
            ),
        (any::<f32>(), any::<f32>()).prop_map(|(learning_rate, momentum)| {
            Request::Program(ProgramRequest::SetOptimizer {
                learning_rate,
                momentum,
            })
        }),
        (any::<bool>(), any::<bool>())
            .prop_map(|(fed, took)| Request::Program(ProgramRequest::RunStep { fed, took })),
        (id(), id()).prop_map(
            |(slot, variable)| Request::Memory(MemoryRequest::RemoteLoad { slot, variable })
        ),
        (id(), id()).prop_map(
            |(variable, slot)| Request::Memory(MemoryRequest::RemoteStore { variable, slot })
        ),
        (0..3u16).prop_map(|lane| Request::Program(ProgramRequest::CycleCount { lane })),
        (id(), any::<i64>()).prop_map(|(id, v)| Request::Kernels(KernelRequest::SetRegister {
            id,
            value: Value::Int(v)
        })),
        (id(), 0usize..64, any::<bool>()).prop_map(|(id, n, right)| Request::Kernels(
            KernelRequest::SetRegister {
                id,
                value: Value::Array(Array {
                    dtype: DataType::F32,
                    // A shape that matches the bytes only sometimes.
                    shape: heapless::Vec::from_slice(&[(n / 4) as u32 + u32::from(!right)])
                        .unwrap(),
                    data: &BYTES[..n]
                })
            }
        )),
        id().prop_map(|id| Request::Kernels(KernelRequest::GetRegister { id })),
        id().prop_map(|id| Request::Kernels(KernelRequest::FreeRegister { id })),
        (
            prop_oneof![
                Just("add"),
                Just("sum"),
                Just("scale"),
                Just("replica_id"),
                Just("nope")
            ],
            prop::collection::vec(id(), 0..5),
            id()
        )
            .prop_map(
                |(function, args, out)| Request::Kernels(KernelRequest::Invoke {
                    function,
                    args: args.into_iter().take(4).map(Arg::Register).collect(),
                    out,
                })
            ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        run(bytes);
    }

    #[test]
    fn random_requests_get_one_reply_each(requests in prop::collection::vec(request(), 1..40)) {
        let mut input = Vec::new();
        for (seq, body) in requests.iter().enumerate() {
            input.extend_from_slice(&frame(seq as u32 + 1, body));
        }
        let seqs: Vec<u32> = replies(&run(input)).into_iter().map(|(seq, _)| seq).collect();
        let expected: Vec<u32> = (1..=requests.len() as u32).collect();
        prop_assert_eq!(seqs, expected);
    }
}
