//! A device of several lanes (core's `lanes` rule) trains its replicas to the bits devices
//! of one replica each train them to: the same anchors, weights, velocities, RNG states
//! and cycle counts, under one reducer that combines every replica's contribution alike.

use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, ReplicaGrouping, RetrievalMode};
use tessera_core::program::lanes::in_lane;
use tessera_core::program::{ids, AnchorTensor, Layer, Optimizer, Program, Reduction, Sharding};
use tessera_core::stream::AnchorReturnType;
use tessera_core::wire::{
    DataRequest, ErrorCode, MemoryRequest, ProgramRequest, ReduceOp, Request, Response, Target,
};
use tessera_firmware_sim::Progress;
use tessera_firmware_sim::{CycleCounter, Device, Memory};

use crate::support::WIDE_LINK as LINK;
const REPLICAS: usize = 4;
const ACCUMULATION: u32 = 4;
const SAMPLES: u32 = 2;
const BATCHES: u32 = 2;

/// `x[3] → w1[6, 3] → +b1 → ReLU → dropout → w2[4, 6] → +b2 → softmax cross-entropy`:
/// `w1` sharded across all four replicas, `b1` too with a padded tail (shards of two: the
/// last replica's is only padding), `w2` in consecutive pairs and `b2` in pairs and
/// sharded; a loss anchor of every micro-batch and a summed output.
fn program() -> Program {
    let momentum = Optimizer::SgdMomentum {
        learning_rate: 0.3,
        momentum: 0.9,
    };
    let mut p = Program::new(BATCHES, ACCUMULATION, momentum);
    p.micro_batch_size = SAMPLES;
    let one = RetrievalMode::OnePerGroup;
    let mut var = |name, shape: &[u32], comm, sharding| {
        p.add_variable(name, shape, GroupingSpec::Comm(comm), one, sharding)
            .unwrap()
    };
    let pairs = CommGroup::Consecutive(2);
    let w1 = var("w1", &[6, 3], CommGroup::All, Sharding::Balanced);
    let b1 = var("b1", &[6], CommGroup::All, Sharding::PaddedTail);
    let w2 = var("w2", &[4, 6], pairs, Sharding::None);
    let b2 = var("b2", &[4], pairs, Sharding::PaddedTail);
    p.input = p.add_stream("x", DataType::F32, &[3], false).unwrap();
    let labels = p.add_stream("label", DataType::I32, &[1], false).unwrap();
    for layer in [
        Layer::Linear { weight: w1 },
        Layer::Bias { bias: b1 },
        Layer::Relu,
        Layer::Dropout { rate: 0.25 },
        Layer::Linear { weight: w2 },
        Layer::Bias { bias: b2 },
        Layer::SoftmaxCrossEntropy { labels },
    ] {
        p.add_layer(layer).unwrap();
    }
    p.add_anchor(AnchorTensor::Loss, AnchorReturnType::All)
        .unwrap();
    p.add_anchor(AnchorTensor::Output, AnchorReturnType::Sum)
        .unwrap();
    p.instrumented = true;
    p
}

fn ok(device: &mut Device<'_>, request: Request<'_>) -> Response<'static> {
    let what = format!("{request:?}");
    match device.handle(request) {
        Response::Error { code, .. } => panic!("{what} refused: {code}"),
        Response::Data { data } => Response::Data {
            data: data.to_vec().leak(),
        },
        Response::RngState { state } => Response::RngState { state },
        Response::Cycles { cycles } => Response::Cycles { cycles },
        _ => Response::Done,
    }
}

fn read(device: &mut Device<'_>, target: Target, len: usize) -> Vec<u8> {
    let len = u32::try_from(len).unwrap();
    let request = Request::Data(DataRequest::Read {
        target,
        offset: 0,
        len,
    });
    match ok(device, request) {
        Response::Data { data } => data.to_vec(),
        other => panic!("a read answered {other:?}"),
    }
}

/// Lane `lane`'s copy of id `id`.
fn lane(lane: usize, id: u16) -> u16 {
    in_lane(lane, id).unwrap()
}

/// A device of a megabyte, replica `replica` until a hello says otherwise (its memory and
/// counter live as long as the test binary: a few megabytes in all).
fn device(replica: u32) -> Device<'static> {
    let memory: &'static mut [u8] = vec![0u8; 1 << 20].leak();
    let memory: &'static mut (dyn Memory + Send) = Box::leak(Box::new(memory));
    Device::new(
        replica,
        memory,
        LINK,
        Box::leak(Box::new(CycleCounter::new())),
    )
}

/// Devices of `lanes` lanes each for the run's replicas, in replica order, prepared and
/// loaded with the same weights and seed.
fn devices(p: &Program, lanes: usize) -> Vec<Device<'static>> {
    let encoded = crate::support::encoded(p);
    (0..REPLICAS / lanes)
        .map(|d| {
            let first = (d * lanes) as u32;
            let mut device = device(first);
            let hello = Request::Hello {
                version: tessera_core::wire::PROTOCOL_VERSION,
                replica: first,
                lanes: lanes as u16,
            };
            ok(&mut device, hello);
            let prepare = Request::Program(ProgramRequest::Prepare {
                replicas: REPLICAS as u32,
                program: &encoded,
            });
            ok(&mut device, prepare);
            ok(
                &mut device,
                Request::Program(ProgramRequest::SetSeed { seed: 11 }),
            );
            for l in 0..lanes {
                for i in 0..p.variables.len() as u8 {
                    let n = p.held_elements(usize::from(i), REPLICAS).unwrap();
                    // Each replica's share of a formula: equal within every group.
                    let data: Vec<u8> = (0..n)
                        .flat_map(|k| ((k as f32 * 1.7 + f32::from(i)).cos() * 0.6).to_le_bytes())
                        .collect();
                    let slot = lane(l, ids::slot(i));
                    let write = Request::Data(DataRequest::Write {
                        target: Target::Slot(slot),
                        offset: 0,
                        data: &data,
                    });
                    ok(&mut device, write);
                    let variable = lane(l, ids::variable(i));
                    ok(
                        &mut device,
                        Request::Memory(MemoryRequest::RemoteLoad { slot, variable }),
                    );
                }
            }
            device
        })
        .collect()
}

/// Every segment of an exchange: the grouping its round combines under and its elements.
fn segments(p: &Program, rounds: &[Reduction]) -> Vec<(ReplicaGrouping, usize)> {
    rounds
        .iter()
        .map(|r| {
            let v = usize::from(r.variable());
            let grouping = *p.settings(v, REPLICAS).unwrap().grouping();
            let n = p.variables[v].shape.iter().product::<u32>() as usize;
            (grouping, n)
        })
        .collect()
}

/// Each replica's answer to an exchange every replica contributed `inputs` to: every
/// segment's groups summed in f64 in replica order (divided by the group's size for a
/// mean), rounded once to f32.
fn combine(
    segments: &[(ReplicaGrouping, usize)],
    op: ReduceOp,
    inputs: &[Vec<f32>],
) -> Vec<Vec<f32>> {
    let mut answers = vec![Vec::new(); inputs.len()];
    let mut at = 0;
    for (grouping, n) in segments {
        for (r, answer) in answers.iter_mut().enumerate() {
            let group = grouping.group_of(r).unwrap();
            let members: Vec<usize> = grouping.members(group).unwrap().collect();
            answer.extend((at..at + n).map(|e| {
                let sum: f64 = members.iter().map(|&m| f64::from(inputs[m][e])).sum();
                let value = match op {
                    ReduceOp::Sum => sum,
                    ReduceOp::Avg => sum / members.len() as f64,
                    other => panic!("a device contributes sums and means, not {other:?}"),
                };
                value as f32
            }));
        }
        at += n;
    }
    answers
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn bytes(floats: &[f32]) -> Vec<u8> {
    floats.iter().flat_map(|f| f.to_le_bytes()).collect()
}

/// Three steps on devices of `lanes` lanes: every replica's anchors, then its variables
/// and velocities, its RNG state and its cycle count, replica by replica.
fn train(lanes: usize) -> Vec<Vec<u8>> {
    let p = program();
    let mut devices = devices(&p, lanes);
    let cut = p.exchanges(REPLICAS, usize::MAX);
    let rounds = cut.rounds().to_vec();
    let exchanges: Vec<_> = cut.collect();
    let items = (ACCUMULATION * BATCHES) as usize;
    let mut out = vec![Vec::new(); REPLICAS];
    for step in 0..3u32 {
        for (d, device) in devices.iter_mut().enumerate() {
            for l in 0..lanes {
                let replica = d * lanes + l;
                let x: Vec<u8> = (0..items * SAMPLES as usize * 3)
                    .flat_map(|i| {
                        ((i as f32 * 0.37 + (step as usize * 5 + replica) as f32).sin())
                            .to_le_bytes()
                    })
                    .collect();
                let labels: Vec<u8> = (0..items * SAMPLES as usize)
                    .flat_map(|i| (((i + replica) % 4) as i32).to_le_bytes())
                    .collect();
                for (k, data) in [(0u8, &x), (1, &labels)] {
                    let target = Target::Fifo(lane(l, ids::stream_fifo(k)));
                    ok(
                        device,
                        Request::Data(DataRequest::Write {
                            target,
                            offset: 0,
                            data,
                        }),
                    );
                }
            }
        }
        // Every device to its first exchange, then exchange after exchange.
        let mut waiting: Vec<Option<(u32, ReduceOp, Vec<f32>)>> = devices
            .iter_mut()
            .map(|d| contribution(d.start_step(false, false)))
            .collect();
        while waiting.iter().any(Option::is_some) {
            let (round, op) = waiting
                .iter()
                .flatten()
                .map(|(r, o, _)| (*r, *o))
                .next()
                .unwrap();
            assert!(waiting
                .iter()
                .all(|w| matches!(w, Some((r, _, _)) if *r == round)));
            let e = &exchanges[round as usize % exchanges.len()];
            let segments = segments(&p, &rounds[e.rounds.clone()]);
            let inputs: Vec<Vec<f32>> = waiting
                .iter()
                .flat_map(|w| {
                    let data = &w.as_ref().unwrap().2;
                    assert_eq!(data.len() * 4, e.bytes * lanes, "every lane's part");
                    data.chunks(data.len() / lanes)
                        .map(<[f32]>::to_vec)
                        .collect::<Vec<_>>()
                })
                .collect();
            let answers = combine(&segments, op, &inputs);
            waiting = devices
                .iter_mut()
                .enumerate()
                .map(|(d, device)| {
                    let first = &answers[d * lanes];
                    for l in 1..lanes {
                        assert_eq!(&answers[d * lanes + l], first, "lanes answered alike");
                    }
                    contribution(device.answer_step(&bytes(first)))
                })
                .collect();
        }
        for (d, device) in devices.iter_mut().enumerate() {
            for l in 0..lanes {
                for (j, a) in p.anchors.iter().enumerate() {
                    let flow = p.data_flow().unwrap();
                    let width = p.anchor_width(a.tensor).unwrap();
                    let len = flow.outputs_per_replica(Some(a.return_type)) * width * 4;
                    let target = Target::Fifo(lane(l, ids::anchor_fifo(j as u8)));
                    out[d * lanes + l].push(read(device, target, len));
                }
            }
        }
    }
    for (d, device) in devices.iter_mut().enumerate() {
        for l in 0..lanes {
            let replica = &mut out[d * lanes + l];
            for i in 0..p.variables.len() as u8 {
                let len = p.held_elements(usize::from(i), REPLICAS).unwrap() * 4;
                for variable in [ids::variable(i), ids::velocity(i)] {
                    let slot = lane(l, ids::slot(i));
                    let variable = lane(l, variable);
                    ok(
                        device,
                        Request::Memory(MemoryRequest::RemoteStore { variable, slot }),
                    );
                    replica.push(read(device, Target::Slot(slot), len));
                }
            }
            let Response::RngState { state } = ok(
                device,
                Request::Program(ProgramRequest::GetRngState { lane: l as u16 }),
            ) else {
                panic!("no RNG state");
            };
            replica.push(bytes(&state.map(f32::from_bits)));
            let Response::Cycles { cycles } = ok(
                device,
                Request::Program(ProgramRequest::CycleCount { lane: l as u16 }),
            ) else {
                panic!("no cycle count");
            };
            assert!(cycles > 0);
            replica.push(cycles.to_le_bytes().to_vec());
        }
    }
    out.into_iter().flatten().collect()
}

/// The contribution a leg ends with, as floats; `None` once the step is done.
fn contribution(progress: Progress<'_>) -> Option<(u32, ReduceOp, Vec<f32>)> {
    match progress {
        Progress::Contribute { round, op, data } => Some((round, op, floats(data))),
        Progress::Finished(Response::Done) => None,
        Progress::Finished(other) => panic!("the step ended {other:?}"),
    }
}

/// Catches a device of several lanes that trains its replicas other than devices of their
/// own would: a weight gradient that sums every lane's rows into one, a dropout mask drawn
/// from one generator for all lanes, a lane's stream items or anchors taken from
/// another's FIFO, a shard updated for the wrong lane (or one of only padding given
/// elements), a copy of a shared variable left behind, the combination put where only one lane reads it, a cycle count of all lanes.
#[test]
fn lanes_train_to_the_bits_of_one_device_per_replica() {
    let alone = train(1);
    assert_eq!(train(2), alone, "two devices of two lanes");
}

/// Catches lanes that straddle a group: replicas 1 and 2 are in different pairs of `w2`,
/// so a device running them as lanes would keep one copy of two diverging weights.
#[test]
fn lanes_apart_in_a_group_are_refused_at_prepare() {
    let p = program();
    let encoded = crate::support::encoded(&p);
    let mut device = device(1);
    let hello = Request::Hello {
        version: tessera_core::wire::PROTOCOL_VERSION,
        replica: 1,
        lanes: 2,
    };
    ok(&mut device, hello);
    let prepare = Request::Program(ProgramRequest::Prepare {
        replicas: REPLICAS as u32,
        program: &encoded,
    });
    let Response::Error { code, .. } = device.handle(prepare) else {
        panic!("lanes across two groups were prepared");
    };
    assert_eq!(
        code,
        ErrorCode::LanesApart {
            variable: 2,
            replica: 2
        }
    );
    let lanes = Request::Program(ProgramRequest::GetRngState { lane: 2 });
    let Response::Error { code, .. } = device.handle(lanes) else {
        panic!("a lane the device does not run answered");
    };
    assert_eq!(code, ErrorCode::NoSuchLane { lane: 2, lanes: 2 });
    let hello = Request::Hello {
        version: tessera_core::wire::PROTOCOL_VERSION,
        replica: 0,
        lanes: 65,
    };
    let Response::Error { code, .. } = device.handle(hello) else {
        panic!("65 lanes were taken");
    };
    assert_eq!(code, ErrorCode::Lanes { lanes: 65, max: 64 });
}

/// Catches a device that keeps a program prepared for other lanes after a hello changes
/// them: its step would walk the old lanes (or fail as a device bug) while RNG states and
/// cycle counts answered for the new ones. The program goes with the hello: a step is then
/// refused as not prepared, and the new lanes are the ones answered for.
#[test]
fn a_hello_of_other_lanes_drops_the_program() {
    let p = program();
    let mut devices = devices(&p, 2);
    let device = &mut devices[0];
    let hello = |lanes| Request::Hello {
        version: tessera_core::wire::PROTOCOL_VERSION,
        replica: 0,
        lanes,
    };
    ok(device, hello(2));
    let step = Request::Program(ProgramRequest::RunStep {
        fed: false,
        took: false,
    });
    // No host answers its first exchange here: the step is refused for that.
    let Response::Error { code, .. } = device.handle(step.clone()) else {
        panic!("a step without a host ran");
    };
    assert_eq!(
        code,
        ErrorCode::ReduceTimeout,
        "the same hello keeps the program"
    );
    ok(device, hello(1));
    let Response::Error { code, .. } = device.handle(step) else {
        panic!("a step ran on a program of other lanes");
    };
    assert_eq!(code, ErrorCode::NotPrepared);
    let Response::Error { code, .. } =
        device.handle(Request::Program(ProgramRequest::GetRngState { lane: 1 }))
    else {
        panic!("a lane the device no longer runs answered");
    };
    assert_eq!(code, ErrorCode::NoSuchLane { lane: 1, lanes: 1 });
}
