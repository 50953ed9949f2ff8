//! A pass of several micro-batches (the step's scratch rule) computes what one
//! micro-batch at a time does, to the bit.

use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{ids, AnchorTensor, Layer, Optimizer, Program, Sharding};
use tessera_core::stream::AnchorReturnType;
use tessera_core::wire::{
    DataRequest, ErrorCode, MemoryRequest, ProgramRequest, Request, Response, Target,
};
use tessera_firmware_sim::{Access, CycleCounter, Device};

use crate::support::WIDE_LINK as LINK;

/// Micro-batches per batch, and samples per micro-batch.
const ACCUMULATION: u32 = 8;
const SAMPLES: u32 = 2;
const BATCHES: u32 = 2;

/// Two anchors at a time (a program's most), every return type among them.
const ANCHORS: [[(AnchorTensor, AnchorReturnType); 2]; 2] = [
    [
        (AnchorTensor::Loss, AnchorReturnType::All),
        (AnchorTensor::Output, AnchorReturnType::EveryN(2)),
    ],
    [
        (AnchorTensor::Loss, AnchorReturnType::Sum),
        (AnchorTensor::Output, AnchorReturnType::Final),
    ],
];

/// What a case trains: the anchors (a set of [`ANCHORS`]), the loss, and dropout layers.
#[derive(Debug, Clone, Copy)]
struct Case {
    anchors: usize,
    squared_error: bool,
    dropouts: usize,
}

/// `x[3] → w1[6, 3] → +b1 → ReLU → dropout(s) → w2[4, 6] → +b2 → loss`, on one replica.
fn program(case: Case) -> Program {
    let momentum = Optimizer::SgdMomentum {
        learning_rate: 0.3,
        momentum: 0.9,
    };
    let mut p = Program::new(BATCHES, ACCUMULATION, momentum);
    p.micro_batch_size = SAMPLES;
    let none = GroupingSpec::Comm(CommGroup::None);
    let one = RetrievalMode::OnePerGroup;
    let mut var = |name, shape: &[u32]| {
        p.add_variable(name, shape, none, one, Sharding::None)
            .unwrap()
    };
    let (w1, b1, w2, b2) = (
        var("w1", &[6, 3]),
        var("b1", &[6]),
        var("w2", &[4, 6]),
        var("b2", &[4]),
    );
    p.input = p.add_stream("x", DataType::F32, &[3], false).unwrap();
    let last = if case.squared_error {
        let targets = p.add_stream("t", DataType::F32, &[4], false).unwrap();
        Layer::MeanSquaredError { targets }
    } else {
        let labels = p.add_stream("label", DataType::I32, &[1], false).unwrap();
        Layer::SoftmaxCrossEntropy { labels }
    };
    let mut layers = vec![
        Layer::Linear { weight: w1 },
        Layer::Bias { bias: b1 },
        Layer::Relu,
    ];
    layers.extend((0..case.dropouts).map(|_| Layer::Dropout { rate: 0.25 }));
    layers.extend([Layer::Linear { weight: w2 }, Layer::Bias { bias: b2 }, last]);
    for layer in layers {
        p.add_layer(layer).unwrap();
    }
    for (tensor, return_type) in ANCHORS[case.anchors] {
        p.add_anchor(tensor, return_type).unwrap();
    }
    p
}

fn ok(device: &mut Device<'_>, request: Request<'_>) {
    let what = format!("{request:?}");
    if let Response::Error { code, .. } = device.handle(request) {
        panic!("{what} refused: {code}");
    }
}

/// Writes `data` at `offset` of `target` by a request.
fn write(device: &mut Device<'_>, target: Target, offset: u32, data: &[u8]) {
    ok(
        device,
        Request::Data(DataRequest::Write {
            target,
            offset,
            data,
        }),
    );
}

fn read(device: &mut Device<'_>, target: Target, len: usize) -> Vec<u8> {
    let len = u32::try_from(len).unwrap();
    match device.handle(Request::Data(DataRequest::Read {
        target,
        offset: 0,
        len,
    })) {
        Response::Data { data } => data.to_vec(),
        other => panic!("a read answered {other:?}"),
    }
}

/// Three steps of `program(case)` on a device of `memory` bytes (`None` if it cannot be
/// prepared there for lack of memory): the pass it chose, then every anchor's bytes, then
/// every variable's and velocity's.
fn train(case: Case, memory: usize) -> Option<(usize, Vec<Vec<u8>>)> {
    train_fed(case, memory, Feed::Requests)
}

/// How a step's inputs reach the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// `Write` requests into each stream FIFO, emptied by the step before.
    Requests,
    /// Straight into each FIFO's ring, as a host that maps the device's memory does.
    InPlace,
    /// `Write` requests, the ring's first item read back by the host before the last is
    /// written: the step's items start one item into the ring and wrap its end.
    Straddling,
}

/// Writes `data` (`items` items) into stream FIFO `target` so that they start one item
/// into its ring (one step deep) and the last lies at the ring's start: a first item
/// written and read back by the host moves the ring on.
fn write_straddling(device: &mut Device<'_>, target: Target, data: &[u8], items: usize) {
    let item = data.len() / items;
    let (first, last) = data.split_at((items - 1) * item);
    write(device, target, 0, &data[..item]);
    write(device, target, u32::try_from(item).unwrap(), first);
    read(device, target, item);
    write(device, target, 0, last);
}

/// [`train`], its inputs written and its anchors read `in_place` (straight into each stream
/// FIFO's ring and out of each anchor FIFO's, as a host that maps the device's memory
/// does, and the next step told so: `RunStep { fed: true, took: true }`) or by `Write` and
/// `Read` requests. In place, a first step that says it took anchors the device does not
/// hold, and one fed onto a FIFO not left empty, must be refused; the second is reset as
/// the host resets a failed step.
fn train_fed(case: Case, memory: usize, feed: Feed) -> Option<(usize, Vec<Vec<u8>>)> {
    let in_place = feed == Feed::InPlace;
    let (mut arena, cycles) = (vec![0u8; memory], CycleCounter::new());
    let mut arena = &mut arena[..];
    let mut device = Device::new(0, &mut arena, LINK, &cycles);
    let program = program(case);
    let encoded = crate::support::encoded(&program);
    let prepare = Request::Program(ProgramRequest::Prepare {
        replicas: 1,
        program: &encoded,
    });
    if let Response::Error { code, .. } = device.handle(prepare) {
        // Only a lack of memory is expected: anything else is the test's mistake.
        assert!(matches!(code, ErrorCode::OutOfMemory { .. }), "{code}");
        return None;
    }
    ok(
        &mut device,
        Request::Program(ProgramRequest::SetSeed { seed: 7 }),
    );
    // Weights drawn from a fixed formula (zeros would leave every output the same).
    for i in 0..program.variables.len() as u8 {
        let n = program.held_elements(usize::from(i), 1).unwrap();
        let data: Vec<u8> = (0..n)
            .flat_map(|k| ((k as f32 * 1.7 + f32::from(i)).cos() * 0.6).to_le_bytes())
            .collect();
        let slot = ids::slot(i);
        ok(
            &mut device,
            Request::Data(DataRequest::Write {
                target: Target::Slot(slot),
                offset: 0,
                data: &data,
            }),
        );
        ok(
            &mut device,
            Request::Memory(MemoryRequest::RemoteLoad {
                slot,
                variable: ids::variable(i),
            }),
        );
    }
    let items = (ACCUMULATION * BATCHES * SAMPLES) as usize;
    let mut out = Vec::new();
    for step in 0..3u32 {
        let x: Vec<u8> = (0..items * 3)
            .flat_map(|i| ((i as f32 * 0.37 + step as f32).sin()).to_le_bytes())
            .collect();
        let labels: Vec<u8> = if case.squared_error {
            (0..items * 4)
                .flat_map(|i| ((i as f32 * 0.11).cos()).to_le_bytes())
                .collect()
        } else {
            (0..items)
                .flat_map(|i| ((i % 4) as i32).to_le_bytes())
                .collect()
        };
        if in_place && step == 0 {
            let refused = device.handle(Request::Program(ProgramRequest::RunStep {
                fed: false,
                took: true,
            }));
            let Response::Error { code, .. } = refused else {
                panic!("a step reporting anchors the device never held ran: {refused:?}");
            };
            let first = ids::anchor_fifo(0);
            assert_eq!(code, ErrorCode::FifoEmpty { fifo: first }, "{code}");
            // The second FIFO: the first is counted before the refusal, and the reset must
            // empty it again.
            let target = Target::Fifo(ids::stream_fifo(1));
            write(&mut device, target, 0, &labels[..4]);
            let refused = device.handle(Request::Program(ProgramRequest::RunStep {
                fed: true,
                took: false,
            }));
            let Response::Error { code, .. } = refused else {
                panic!("a step fed onto a FIFO holding bytes ran: {refused:?}");
            };
            assert!(matches!(code, ErrorCode::FifoPosition { .. }), "{code}");
            ok(&mut device, Request::Program(ProgramRequest::ResetStep));
        }
        for (k, data) in [(0u8, &x), (1, &labels)] {
            let target = Target::Fifo(ids::stream_fifo(k));
            match feed {
                Feed::InPlace => {
                    let len = u32::try_from(data.len()).unwrap();
                    let ring = device.place(target, 0, len, Access::Write).unwrap();
                    ring.copy_from_slice(data);
                }
                Feed::Requests => write(&mut device, target, 0, data),
                Feed::Straddling => {
                    let micro_batches = (ACCUMULATION * BATCHES) as usize;
                    write_straddling(&mut device, target, data, micro_batches)
                }
            }
        }
        ok(
            &mut device,
            Request::Program(ProgramRequest::RunStep {
                fed: in_place,
                took: in_place && step > 0,
            }),
        );
        for (j, a) in program.anchors.iter().enumerate() {
            let flow = program.data_flow().unwrap();
            let width = program.anchor_width(a.tensor).unwrap();
            let len = flow.outputs_per_replica(Some(a.return_type)) * width * 4;
            let target = Target::Fifo(ids::anchor_fifo(j as u8));
            out.push(if in_place {
                let len = u32::try_from(len).unwrap();
                device.place(target, 0, len, Access::Read).unwrap().to_vec()
            } else {
                read(&mut device, target, len)
            });
        }
    }
    for i in 0..program.variables.len() as u8 {
        let len = program.held_elements(usize::from(i), 1).unwrap() * 4;
        for variable in [ids::variable(i), ids::velocity(i)] {
            let slot = ids::slot(i);
            ok(
                &mut device,
                Request::Memory(MemoryRequest::RemoteStore { variable, slot }),
            );
            out.push(read(&mut device, Target::Slot(slot), len));
        }
    }
    let pass = device.pass().expect("a prepared program");
    Some((pass, out))
}

/// The smallest arena `program(case)` can be prepared and trained in (within 16 bytes).
fn smallest_arena(case: Case) -> usize {
    let (mut fits, mut fails) = (1usize << 20, 0usize);
    while fits - fails > 16 {
        let mid = (fits + fails) / 2;
        if train(case, mid).is_some() {
            fits = mid;
        } else {
            fails = mid;
        }
    }
    fits
}

/// Catches a pass of several micro-batches that computes other numbers than one
/// micro-batch at a time: a dropout mask drawn in another order, a gradient added in
/// another order, an anchor given another micro-batch's rows, a `Sum` anchor summed over
/// the pass instead of micro-batch by micro-batch, a squared error's targets misplaced. A
/// device with room for the widest pass and one with room for a single micro-batch (the
/// smallest arena the program fits) must end with the same bytes.
///
/// Also catches a `RunStep { fed: true }` that miscounts the FIFOs the host wrote in place
/// (the step would read too few samples, or stale ones) or runs onto a FIFO not left empty,
/// and a `RunStep { took: true }` that leaves anchors the host read in place (the next
/// step's would not fit) or drops ones it never held: fed and read in place, the same
/// steps end with the same bytes.
///
/// And catches a pass that pops its micro-batches' items at once where they wrap the ring's
/// end (a host read a stream FIFO, so its items do not start at the ring's start): such a
/// pass takes them item by item, to the same bytes.
#[test]
fn a_pass_of_micro_batches_trains_to_the_same_bits_as_one_at_a_time() {
    for anchors in 0..ANCHORS.len() {
        for squared_error in [false, true] {
            let case = Case {
                anchors,
                squared_error,
                dropouts: 1,
            };
            let (roomy_pass, roomy) = train(case, 1 << 20).expect("the program fits a megabyte");
            let (_, fed) = train_fed(case, 1 << 20, Feed::InPlace).unwrap();
            assert_eq!(fed, roomy, "{case:?}: fed in place");
            let (_, straddling) = train_fed(case, 1 << 20, Feed::Straddling).unwrap();
            assert_eq!(straddling, roomy, "{case:?}: items across the ring's end");
            let (tight_pass, tight) = train(case, smallest_arena(case)).unwrap();
            assert_eq!(
                (roomy_pass, tight_pass),
                (8, 1),
                "{case:?}: the passes compared"
            );
            assert_eq!(roomy.len(), tight.len());
            for (i, (a, b)) in roomy.iter().zip(&tight).enumerate() {
                assert_eq!(a, b, "{case:?}: output {i} differs between the passes");
            }
        }
    }
}

/// Catches passes over a program with two dropout layers: a pass would draw the first
/// layer's masks for all its micro-batches before the second's, where single micro-batches
/// draw both for one micro-batch, then both for the next. (The device's unit tests check
/// the passes such a program allows, and how much of the free memory a wide pass may take.)
#[test]
fn two_dropout_layers_compute_one_micro_batch_a_pass() {
    let case = Case {
        anchors: 0,
        squared_error: false,
        dropouts: 2,
    };
    let (pass, _) = train(case, 1 << 20).unwrap();
    assert_eq!(pass, 1);
}
