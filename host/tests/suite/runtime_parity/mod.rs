//! Issue #9's tests of the device runtime ([`Runtime`]): every grouping, retrieval and
//! shard layout against the f64 reference, on threads, child processes and QEMU; PopART's
//! anchor cases through a real program; the step IO's size and type checks; the errors of
//! prepare and of weights from host; momentum and optimizer changes; cycle counts.
//!
//! Each test's doc comment names the bug it catches.

use crate::common;

use std::path::PathBuf;
use std::time::Instant;

use serde_json::Value;
use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{AnchorTensor, Layer, Optimizer, Program, ProgramError, Sharding};
use tessera_core::rng::Rng;
use tessera_core::shard::Interval;
use tessera_core::stream::{AnchorReturnType, DataFlow};
use tessera_core::wire::{ErrorCode, RequestKind};
use tessera_host::runtime::check::max_relative_error;
use tessera_host::runtime::reference::Reference;
use tessera_host::runtime::{Placement, Runtime, RuntimeError, StepIo, WeightsIo, MAX_REPLICAS};
use tessera_host::session::HostArray;
use tessera_host::transport::TransportError;

/// PopART's data-flow and anchor cases, as the repository's conformance suite reads them.
const STREAMS: &str = include_str!("../../../../tests/data/streams.json");

const REPLICAS: usize = 4;
const MEMORY: usize = 1 << 20;
const SEED: u64 = 0x7E55_E2A9;
const TOLERANCE: f64 = 1e-5;

/// The MLP: `x[FEATURES] → Linear(w1) → Bias(b1) → ReLU → Linear(w2) → softmax CE`.
const FEATURES: u32 = 3;
const HIDDEN: u32 = 5;
const CLASSES: u32 = 3;
const BPS: u32 = 2;
const AF: u32 = 2;
const LEARNING_RATE: f32 = 0.1;

const COMMS: [CommGroup; 4] = [
    CommGroup::All,
    CommGroup::None,
    CommGroup::Consecutive(2),
    CommGroup::Orthogonal(2),
];
const RETRIEVALS: [RetrievalMode; 2] = [RetrievalMode::OnePerGroup, RetrievalMode::AllReplicas];
const LAYOUTS: [Layout; 4] = [
    Layout::None,
    Layout::Balanced,
    Layout::PaddedTail,
    Layout::Explicit,
];

// ---------------------------------------------------------------------------------------
// Programs, weights and data.

/// How `w1` is sharded across its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    None,
    Balanced,
    PaddedTail,
    Explicit,
}

/// One cell of the parity matrix: `w1`'s (and `b1`'s) comm group, every variable's
/// retrieval mode, and `w1`'s shard layout. `w2` lives in [`second_comm`]`(comm)`.
#[derive(Debug, Clone, Copy)]
struct Combo {
    comm: CommGroup,
    retrieval: RetrievalMode,
    layout: Layout,
}

impl std::fmt::Display for Combo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "comm {} (w2 {}), retrieval {}, layout {:?}",
            self.comm,
            second_comm(self.comm),
            self.retrieval,
            self.layout
        )
    }
}

fn combos() -> Vec<Combo> {
    let mut all = Vec::new();
    for comm in COMMS {
        for retrieval in RETRIEVALS {
            for layout in LAYOUTS {
                all.push(Combo {
                    comm,
                    retrieval,
                    layout,
                });
            }
        }
    }
    all
}

/// `w2`'s comm group: always a different one than `w1`'s.
fn second_comm(first: CommGroup) -> CommGroup {
    match first {
        CommGroup::All => CommGroup::Orthogonal(2),
        CommGroup::None => CommGroup::Consecutive(2),
        CommGroup::Consecutive(_) => CommGroup::None,
        CommGroup::Orthogonal(_) => CommGroup::All,
    }
}

fn group_size(comm: CommGroup, replicas: usize) -> usize {
    comm.to_grouping(replicas).unwrap().group_size()
}

/// `w1`'s sharding over a domain of `domain` replicas (its group size). `w1` has 15
/// elements; the explicit layouts leave padding inside and between the intervals.
fn sharding(layout: Layout, domain: usize) -> Sharding {
    match layout {
        Layout::None => Sharding::None,
        Layout::Balanced => Sharding::Balanced,
        Layout::PaddedTail => Sharding::PaddedTail,
        Layout::Explicit => {
            let (per_replica, intervals): (u32, &[(usize, usize)]) = match domain {
                // A group of one: the single shard holds everything, padding at 0 and 9.
                1 => (17, &[(1, 9), (10, 17)]),
                2 => (9, &[(0, 7), (9, 17)]),
                4 => (5, &[(0, 4), (5, 9), (10, 14), (15, 18)]),
                _ => panic!("no explicit layout for a domain of {domain}"),
            };
            let intervals: Vec<Interval> = intervals
                .iter()
                .map(|&(begin, end)| Interval { begin, end })
                .collect();
            Sharding::Explicit {
                per_replica,
                intervals: heapless::Vec::from_slice(&intervals).unwrap(),
            }
        }
    }
}

fn sgd(learning_rate: f32) -> Optimizer {
    Optimizer::Sgd { learning_rate }
}

/// The MLP of `combo` on `replicas` replicas, anchoring the loss (every micro-batch) and
/// the output (every second micro-batch).
fn mlp(combo: Combo, replicas: usize, hidden: u32, optimizer: Optimizer) -> Program {
    let mut p = Program::new(BPS, AF, optimizer);
    let first = GroupingSpec::Comm(combo.comm);
    let second = GroupingSpec::Comm(second_comm(combo.comm));
    let domain = group_size(combo.comm, replicas);
    let r = combo.retrieval;
    let w1 = p
        .add_variable(
            "w1",
            &[hidden, FEATURES],
            first,
            r,
            sharding(combo.layout, domain),
        )
        .unwrap();
    let b1 = p
        .add_variable("b1", &[hidden], first, r, Sharding::None)
        .unwrap();
    let w2 = p
        .add_variable("w2", &[CLASSES, hidden], second, r, Sharding::None)
        .unwrap();
    p.input = p
        .add_stream("x", DataType::F32, &[FEATURES], false)
        .unwrap();
    let labels = p.add_stream("label", DataType::I32, &[1], false).unwrap();
    for layer in [
        Layer::Linear { weight: w1 },
        Layer::Bias { bias: b1 },
        Layer::Relu,
        Layer::Linear { weight: w2 },
        Layer::SoftmaxCrossEntropy { labels },
    ] {
        p.add_layer(layer).unwrap();
    }
    p.add_anchor(AnchorTensor::Loss, AnchorReturnType::All)
        .unwrap();
    p.add_anchor(AnchorTensor::Output, AnchorReturnType::EveryN(2))
        .unwrap();
    p.check(replicas).unwrap();
    p
}

/// The default parity MLP.
fn default_mlp(combo: Combo) -> Program {
    mlp(combo, REPLICAS, HIDDEN, sgd(LEARNING_RATE))
}

/// Deterministic values in `[-scale, scale)`.
fn values(salt: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut rng = Rng::from_seed(salt.wrapping_mul(0x9E37_79B9).wrapping_add(17));
    (0..n)
        .map(|_| (rng.next_f32() * 2.0 - 1.0) * scale)
        .collect()
}

fn dims(shape: &[u32]) -> Vec<usize> {
    shape.iter().map(|&d| d as usize).collect()
}

/// Variable `index`'s value per group: distinct for every group and variable.
fn group_values(p: &Program, replicas: usize, index: usize) -> Vec<Vec<f32>> {
    let v = &p.variables[index];
    let n: usize = dims(&v.shape).iter().product();
    let groups = p.settings(index, replicas).unwrap().grouping().num_groups();
    (0..groups)
        .map(|g| values(1000 * index as u64 + g as u64, n, 0.6))
        .collect()
}

/// Every variable in its host shape: `[groups, …shape]`, the group dimension only when
/// there are several groups.
fn initial_weights(p: &Program, replicas: usize) -> WeightsIo {
    let mut w = WeightsIo::new();
    for (i, v) in p.variables.iter().enumerate() {
        let rows = group_values(p, replicas, i);
        let mut shape = v.shape.to_vec();
        if rows.len() > 1 {
            shape.insert(0, rows.len() as u32);
        }
        let array = HostArray::from_f32(&shape, &rows.concat()).unwrap();
        w.insert(v.name.to_string(), array);
    }
    w
}

/// The shape weights to host returns: one row per group (OnePerGroup) or per replica
/// (AllReplicas), the row dimension dropped when one row returns.
fn returned_shape(p: &Program, replicas: usize, index: usize) -> Vec<u32> {
    let v = &p.variables[index];
    let settings = p.settings(index, replicas).unwrap();
    let rows = match v.retrieval {
        RetrievalMode::OnePerGroup => settings.grouping().num_groups(),
        RetrievalMode::AllReplicas => replicas,
    };
    let mut shape = v.shape.to_vec();
    if rows > 1 {
        shape.insert(0, rows as u32);
    }
    shape
}

/// Samples of one step per replica.
fn per_replica(p: &Program) -> usize {
    (p.batches_per_step * p.accumulation * p.micro_batch_size) as usize
}

/// Step `step`'s inputs for the MLP: `x` and `label` (int32).
fn mlp_io(p: &Program, replicas: usize, step: usize) -> StepIo {
    let samples = per_replica(p) * replicas;
    let x = values(50 + step as u64, samples * FEATURES as usize, 1.0);
    let labels: Vec<i32> = (0..samples)
        .map(|k| ((k * 7 + step * 5 + k / 3) % CLASSES as usize) as i32)
        .collect();
    [
        (
            "x".to_string(),
            HostArray::from_f32(&[samples as u32, FEATURES], &x).unwrap(),
        ),
        (
            "label".to_string(),
            HostArray::from_i32(&[samples as u32], &labels).unwrap(),
        ),
    ]
    .into()
}

fn labels_of(io: &StepIo) -> Vec<i32> {
    io["label"].to_i32().unwrap()
}

fn with(io: &StepIo, name: &str, array: HostArray) -> StepIo {
    let mut io = io.clone();
    io.insert(name.to_string(), array);
    io
}

fn prepare(program: &Program, replicas: usize, placement: &Placement) -> Runtime {
    Runtime::prepare(program.clone(), replicas, placement, MEMORY)
        .unwrap_or_else(|e| panic!("prepare: {e}"))
}

fn thread() -> Placement {
    Placement::Thread
}

fn process() -> Placement {
    Placement::Process(PathBuf::from(env!("CARGO_BIN_EXE_tessera")))
}

/// Compares one step's anchors with the reference's, values and shapes.
fn compare_anchors(
    p: &Program,
    replicas: usize,
    anchors: &tessera_host::runtime::step_io::Anchors,
    expected: &tessera_host::runtime::reference::Values,
    what: &str,
) -> Result<(), String> {
    let names: Vec<&String> = anchors.keys().collect();
    let want: Vec<&String> = expected.keys().collect();
    if names != want {
        return Err(format!("{what}: anchors {names:?}, reference {want:?}"));
    }
    let flow = p.data_flow().unwrap();
    for a in &p.anchors {
        let name = a.tensor.name();
        let array = &anchors[name];
        let mut shape = vec![
            flow.outputs_per_replica(Some(a.return_type)) as u32,
            replicas as u32,
        ];
        if p.micro_batch_size > 1 {
            shape.push(p.micro_batch_size);
        }
        if a.tensor == AnchorTensor::Output {
            shape.push(p.output_width().unwrap() as u32);
        }
        if array.shape() != shape {
            return Err(format!(
                "{what}: anchor `{name}` has shape {:?}, not {shape:?}",
                array.shape()
            ));
        }
        let device = array.to_f32().ok_or(format!("{what}: `{name}` not f32"))?;
        let error = max_relative_error(&device, &expected[name])
            .map_err(|e| format!("{what}: anchor `{name}`: {e}"))?;
        if error > TOLERANCE {
            return Err(format!(
                "{what}: anchor `{name}` is off by {error:e}: device {device:?}, reference {:?}",
                expected[name]
            ));
        }
    }
    Ok(())
}

/// Compares weights to host with the reference's, values and returned shapes.
fn compare_weights(
    p: &Program,
    replicas: usize,
    weights: &WeightsIo,
    reference: &Reference,
    what: &str,
) -> Result<(), String> {
    let want = reference.weights();
    if weights.len() != p.variables.len() {
        return Err(format!("{what}: {} weights returned", weights.len()));
    }
    for (i, v) in p.variables.iter().enumerate() {
        let name = v.name.as_str();
        let array = weights
            .get(name)
            .ok_or(format!("{what}: `{name}` missing"))?;
        let shape = returned_shape(p, replicas, i);
        if array.shape() != shape {
            return Err(format!(
                "{what}: `{name}` returned with shape {:?}, the rule says {shape:?}",
                array.shape()
            ));
        }
        let device = array.to_f32().ok_or(format!("{what}: `{name}` not f32"))?;
        let error = max_relative_error(&device, &want[name])
            .map_err(|e| format!("{what}: weight `{name}`: {e}"))?;
        if error > TOLERANCE {
            return Err(format!(
                "{what}: weight `{name}` is off by {error:e}: device {device:?}, reference {:?}",
                want[name]
            ));
        }
    }
    Ok(())
}

/// Trains `program` for `steps` steps on `placement` and on the reference, comparing every
/// anchor of every step and every weight at the end.
fn parity(
    program: &Program,
    replicas: usize,
    placement: &Placement,
    steps: usize,
    what: &str,
) -> Result<(), String> {
    let mut runtime = Runtime::prepare(program.clone(), replicas, placement, MEMORY)
        .map_err(|e| format!("{what}: prepare: {e}"))?;
    runtime
        .set_random_seed(SEED)
        .map_err(|e| format!("{what}: seed: {e}"))?;
    let initial = initial_weights(program, replicas);
    runtime
        .weights_from_host(&initial)
        .map_err(|e| format!("{what}: weights from host: {e}"))?;
    let mut reference = Reference::new(program, replicas, SEED, &initial)
        .map_err(|e| format!("{what}: reference: {e}"))?;
    for step in 0..steps {
        let io = mlp_io(program, replicas, step);
        let anchors = runtime
            .run(&io)
            .map_err(|e| format!("{what}: step {step}: {e}"))?;
        let expected = reference
            .step(&io)
            .map_err(|e| format!("{what}: reference step {step}: {e}"))?;
        compare_anchors(
            program,
            replicas,
            &anchors,
            &expected,
            &format!("{what}, step {step}"),
        )?;
    }
    let weights = runtime
        .weights_to_host()
        .map_err(|e| format!("{what}: weights to host: {e}"))?;
    compare_weights(program, replicas, &weights, &reference, what)?;
    // The comparison is not vacuous: training moved every variable well past the
    // tolerance.
    let start = Reference::new(program, replicas, SEED, &initial)
        .map_err(|e| format!("{what}: reference: {e}"))?
        .weights();
    for (name, trained) in reference.weights() {
        let moved = trained
            .iter()
            .zip(&start[&name])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        if moved < 1e3 * TOLERANCE {
            return Err(format!("{what}: `{name}` barely trained ({moved:e})"));
        }
    }
    Ok(())
}

/// Runs `check` on every combination, reporting every failure at once.
fn every_combo(check: impl Fn(Combo) -> Result<(), String>) {
    let start = Instant::now();
    let failures: Vec<String> = combos()
        .into_iter()
        .filter_map(|combo| check(combo).err())
        .collect();
    eprintln!("{} combinations in {:?}", combos().len(), start.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {} combinations failed:\n{}",
        failures.len(),
        combos().len(),
        failures.join("\n")
    );
}

/// The combination the single-case tests use: `consecutive:2`, one per group, balanced.
fn default_combo() -> Combo {
    Combo {
        comm: CommGroup::Consecutive(2),
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::Balanced,
    }
}

mod anchors;
mod cycles_and_callbacks;
mod errors;
mod micro_batch;
mod optimizer;
mod parity;
mod stream_checks;
