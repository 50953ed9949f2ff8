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
const STREAMS: &str = include_str!("../../../tests/data/streams.json");

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
    (p.batches_per_step * p.accumulation) as usize
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

// ---------------------------------------------------------------------------------------
// 1. Parity with the reference, every combination, threads.

/// Every comm group × retrieval × shard layout on 4 thread replicas trains like the f64
/// reference (every anchor of 3 steps, every weight after), and every weight comes back
/// in its returned shape. Catches a grouping, retrieval or layout the runtime moves,
/// gathers, averages or reassembles wrongly (a shard put at the wrong offset, a gradient
/// averaged over the wrong group, a group's row returned for another), and a returned
/// shape that keeps a row dimension of one or drops one of several.
#[test]
fn every_grouping_retrieval_and_layout_matches_the_reference() {
    every_combo(|combo| {
        parity(
            &default_mlp(combo),
            REPLICAS,
            &thread(),
            3,
            &combo.to_string(),
        )
    });
}

/// Weights from host then to host, without training, give back exactly the values sent,
/// for every combination; with AllReplicas each replica's row is its group's value.
/// Catches a layout whose split and reassembly disagree (a shard or padding offset off by
/// one returns shifted or zeroed elements), a row handed to the wrong group, and an
/// AllReplicas row copied from another group's representative.
#[test]
fn weights_round_trip_exactly_for_every_combination() {
    every_combo(|combo| {
        let what = combo.to_string();
        let p = default_mlp(combo);
        let mut runtime = Runtime::prepare(p.clone(), REPLICAS, &thread(), MEMORY)
            .map_err(|e| format!("{what}: prepare: {e}"))?;
        let initial = initial_weights(&p, REPLICAS);
        runtime
            .weights_from_host(&initial)
            .map_err(|e| format!("{what}: from host: {e}"))?;
        let back = runtime
            .weights_to_host()
            .map_err(|e| format!("{what}: to host: {e}"))?;
        if !runtime.weights_in_sync() {
            return Err(format!("{what}: weights not in sync after weights to host"));
        }
        for (i, v) in p.variables.iter().enumerate() {
            let name = v.name.as_str();
            let groups = group_values(&p, REPLICAS, i);
            let grouping = *p.settings(i, REPLICAS).unwrap().grouping();
            let rows: Vec<f32> = match v.retrieval {
                RetrievalMode::OnePerGroup => groups.concat(),
                RetrievalMode::AllReplicas => (0..REPLICAS)
                    .flat_map(|r| groups[grouping.group_of(r).unwrap()].clone())
                    .collect(),
            };
            let array = &back[name];
            let shape = returned_shape(&p, REPLICAS, i);
            if array.shape() != shape {
                return Err(format!(
                    "{what}: `{name}` has shape {:?}, not {shape:?}",
                    array.shape()
                ));
            }
            let got = array.to_f32().unwrap();
            let same = got.len() == rows.len()
                && got
                    .iter()
                    .zip(&rows)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            if !same {
                return Err(format!(
                    "{what}: `{name}` came back as {got:?}, sent {rows:?}"
                ));
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------
// 2. Other placements.

/// A representative subset on child processes (sharded in a group of four, explicit
/// layout with AllReplicas in consecutive pairs, padded tail in orthogonal pairs). Catches
/// what only a real byte link shows: weights, streams or anchors split across frames or
/// the shared window wrongly, and reductions answered out of order between processes.
#[test]
fn child_processes_match_the_reference() {
    for combo in [
        Combo {
            comm: CommGroup::All,
            retrieval: RetrievalMode::OnePerGroup,
            layout: Layout::Balanced,
        },
        Combo {
            comm: CommGroup::Consecutive(2),
            retrieval: RetrievalMode::AllReplicas,
            layout: Layout::Explicit,
        },
        Combo {
            comm: CommGroup::Orthogonal(2),
            retrieval: RetrievalMode::OnePerGroup,
            layout: Layout::PaddedTail,
        },
    ] {
        let what = format!("process: {combo}");
        if let Err(e) = parity(&default_mlp(combo), REPLICAS, &process(), 2, &what) {
            panic!("{e}");
        }
    }
}

/// The firmware under QEMU (four processes) trains like the reference with a sharded
/// first layer in orthogonal pairs. Catches a device program that behaves differently on
/// the bare-metal target (`f32` math, frame sizes of the UART link, its memory).
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn qemu_matches_the_reference() {
    let combo = Combo {
        comm: CommGroup::Orthogonal(2),
        retrieval: RetrievalMode::AllReplicas,
        layout: Layout::Balanced,
    };
    let placement = Placement::Qemu(common::firmware());
    if let Err(e) = parity(&default_mlp(combo), REPLICAS, &placement, 2, "qemu") {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------
// 3. PopART's anchor cases through the runtime.

/// One PopART anchor case: a step of `bps` batches of `af` micro-batches over `input`
/// (samples of `sample` elements), and what each anchor returns (one replica).
#[derive(Debug)]
struct AnchorCase {
    note: String,
    bps: usize,
    af: usize,
    sample: usize,
    input: Vec<f32>,
    returns: Vec<(AnchorReturnType, Vec<f32>)>,
}

fn floats(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(items) => items.iter().flat_map(floats).collect(),
        n => vec![n.as_f64().unwrap() as f32],
    }
}

/// The anchor cases of `streams.json`: the identity model's (inference, whose inputs
/// the notes give) and the training cases with accumulation.
fn anchor_cases() -> Vec<AnchorCase> {
    let doc: Value = serde_json::from_str(STREAMS).unwrap();
    let mut cases = Vec::new();
    let one_to_eight: Vec<f32> = (1..=8).map(|v| v as f32).collect();
    for case in doc["dataflow"].as_array().unwrap() {
        let Some(note) = case["note"].as_str() else {
            continue;
        };
        let (sample, bps) = if note.contains("identity model, bps=8") {
            (1, 8)
        } else if note.contains("identity model, sample [2], bps=4") {
            (2, 4)
        } else {
            continue;
        };
        let returns = ["all", "everyn_2", "everyn_4", "final", "sum"]
            .iter()
            .filter(|key| !case[**key].is_null())
            .map(|key| {
                let anchor = key.replace('_', ":").parse().unwrap();
                (anchor, floats(&case[*key]))
            })
            .collect();
        cases.push(AnchorCase {
            note: note.to_string(),
            bps,
            af: 1,
            sample,
            input: one_to_eight.clone(),
            returns,
        });
    }
    for case in doc["training"].as_array().unwrap() {
        cases.push(AnchorCase {
            note: case["note"].as_str().unwrap().to_string(),
            bps: case["bps"].as_u64().unwrap() as usize,
            af: case["af"].as_u64().unwrap() as usize,
            sample: case["sample"].as_u64().unwrap() as usize,
            input: floats(&case["input"]),
            returns: case["returns"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(text, expected)| (text.parse().unwrap(), floats(expected)))
                .collect(),
        });
    }
    cases
}

/// A linear layer of identity weights under MSE against zero targets, never trained
/// (learning rate 0): the output anchor is the input sample itself, and the loss anchor
/// `Σx² / sample`, both exact in `f32` for PopART's small integers.
fn identity_program(sample: usize, bps: usize, af: usize, anchor: AnchorReturnType) -> Program {
    let mut p = Program::new(bps as u32, af as u32, sgd(0.0));
    let s = sample as u32;
    let w = p
        .add_variable(
            "w",
            &[s, s],
            GroupingSpec::Comm(CommGroup::All),
            RetrievalMode::OnePerGroup,
            Sharding::None,
        )
        .unwrap();
    p.input = p.add_stream("x", DataType::F32, &[s], false).unwrap();
    let t = p.add_stream("t", DataType::F32, &[s], false).unwrap();
    p.add_layer(Layer::Linear { weight: w }).unwrap();
    p.add_layer(Layer::MeanSquaredError { targets: t }).unwrap();
    p.add_anchor(AnchorTensor::Loss, anchor).unwrap();
    p.add_anchor(AnchorTensor::Output, anchor).unwrap();
    p
}

/// PopART's anchor cases (`streams.json`: the identity model's All / EveryN / Final / Sum,
/// and the training cases with accumulation, bps 2 af 2 EveryN 2 among them) through the
/// runtime, on 1 and on 2 replicas: each anchor returns the case's number of outputs per
/// replica, the case's values in the case's order (replica `r`'s inputs shifted by
/// `10·r`, so output `j` of replica `r` is row `j·R + r`), the loss of exactly those
/// micro-batches, and what the reference returns. Catches a device loop or host
/// reassembly that counts EveryN over batches instead of micro-batches, writes Final
/// before the last micro-batch, resets or misses part of a Sum, or interleaves replicas'
/// outputs in the wrong order.
#[test]
fn popart_anchor_cases_through_the_runtime() {
    const SHIFT: f32 = 10.0;
    let cases = anchor_cases();
    let mut checked = 0;
    for case in &cases {
        for &(anchor, ref expected) in &case.returns {
            for replicas in [1, 2] {
                let what = format!("{} — {anchor}, {replicas} replicas", case.note);
                let (bps, af, sample) = (case.bps, case.af, case.sample);
                let micro = bps * af;
                assert_eq!(case.input.len(), micro * sample, "{what}");
                let program = identity_program(sample, bps, af, anchor);
                let mut runtime = prepare(&program, replicas, &thread());
                let identity: Vec<f32> = (0..sample * sample)
                    .map(|k| if k % (sample + 1) == 0 { 1.0 } else { 0.0 })
                    .collect();
                let weights: WeightsIo = [(
                    "w".to_string(),
                    HostArray::from_f32(&[sample as u32, sample as u32], &identity).unwrap(),
                )]
                .into();
                runtime.weights_from_host(&weights).unwrap();
                let mut reference = Reference::new(&program, replicas, SEED, &weights).unwrap();

                // User sample j·R + r is replica r's j-th: the case's j-th, shifted.
                let mut x = Vec::new();
                for j in 0..micro {
                    for r in 0..replicas {
                        let s = &case.input[j * sample..(j + 1) * sample];
                        x.extend(s.iter().map(|v| v + SHIFT * r as f32));
                    }
                }
                let n = (micro * replicas) as u32;
                let io: StepIo = [
                    (
                        "x".to_string(),
                        HostArray::from_f32(&[n, sample as u32], &x).unwrap(),
                    ),
                    (
                        "t".to_string(),
                        HostArray::from_f32(&[n, sample as u32], &vec![0.0; x.len()]).unwrap(),
                    ),
                ]
                .into();
                let anchors = runtime.run(&io).unwrap_or_else(|e| panic!("{what}: {e}"));

                let outputs = expected.len() / sample;
                let flow = DataFlow::new(bps, af).unwrap();
                assert_eq!(
                    flow.outputs_per_replica(Some(anchor)),
                    outputs,
                    "{what}: the case's output count"
                );
                let output = &anchors["output"];
                let loss = &anchors["loss"];
                assert_eq!(
                    output.shape(),
                    [outputs as u32, replicas as u32, sample as u32],
                    "{what}: output anchor shape"
                );
                assert_eq!(
                    loss.shape(),
                    [outputs as u32, replicas as u32],
                    "{what}: loss anchor shape"
                );

                // The case's values, row j·R + r, shifted by replica.
                let summed = if anchor == AnchorReturnType::Sum {
                    micro as f32
                } else {
                    1.0
                };
                let mut want_output = Vec::new();
                let mut want_loss = Vec::new();
                let sample_loss = |s: &[f32]| s.iter().map(|v| v * v).sum::<f32>() / sample as f32;
                for j in 0..outputs {
                    for r in 0..replicas {
                        let row = &expected[j * sample..(j + 1) * sample];
                        let shift = SHIFT * r as f32;
                        want_output.extend(row.iter().map(|v| v + shift * summed));
                        want_loss.push(if anchor == AnchorReturnType::Sum {
                            (0..micro)
                                .map(|m| {
                                    let s: Vec<f32> = case.input[m * sample..(m + 1) * sample]
                                        .iter()
                                        .map(|v| v + shift)
                                        .collect();
                                    sample_loss(&s)
                                })
                                .sum()
                        } else {
                            let s: Vec<f32> = row.iter().map(|v| v + shift).collect();
                            sample_loss(&s)
                        });
                    }
                }
                assert_eq!(output.to_f32().unwrap(), want_output, "{what}: output");
                assert_eq!(loss.to_f32().unwrap(), want_loss, "{what}: loss");

                let reference = reference.step(&io).unwrap();
                compare_anchors(&program, replicas, &anchors, &reference, &what)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            checked += 1;
        }
    }
    assert_eq!(
        checked, 17,
        "streams.json lost anchor cases: 4 + 3 identity-model returns and 10 training returns"
    );
}

// ---------------------------------------------------------------------------------------
// 4. Size checks.

fn default_combo() -> Combo {
    Combo {
        comm: CommGroup::Consecutive(2),
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::Balanced,
    }
}

fn assert_elements(
    result: Result<impl std::fmt::Debug, RuntimeError>,
    stream: &str,
    expected: usize,
    received: usize,
) {
    let err = result.expect_err("a short array must be refused");
    match &err {
        RuntimeError::Elements {
            name,
            expected: e,
            received: got,
            sample,
            per_replica,
            replicas,
        } => {
            assert_eq!(
                (name.as_str(), *e, *got),
                (stream, expected, received),
                "{err}"
            );
            assert_eq!(sample * per_replica * replicas, expected, "{err}");
        }
        other => panic!("expected an element-count error, got {other:?}"),
    }
    let text = err.to_string();
    for part in [
        format!("`{stream}`"),
        expected.to_string(),
        received.to_string(),
    ] {
        assert!(text.contains(&part), "'{text}' must mention {part}");
    }
}

/// A short array is refused as an element-count error naming the stream and the counts,
/// on the first run and on a later run after a good one, never a panic, and the runtime
/// still runs afterwards. Catches a size check made only on the first run (PopART's
/// rule, which lets a later short array read past its end or panic in the splitter) and
/// a check that leaves half a step in the devices' FIFOs.
#[test]
fn short_arrays_are_refused_on_every_run() {
    let p = default_mlp(default_combo());
    let mut runtime = prepare(&p, REPLICAS, &thread());
    runtime
        .weights_from_host(&initial_weights(&p, REPLICAS))
        .unwrap();
    let io = mlp_io(&p, REPLICAS, 0);
    let samples = per_replica(&p) * REPLICAS; // 16
    let x = values(9, (samples - 1) * FEATURES as usize, 1.0);
    let short_x = with(
        &io,
        "x",
        HostArray::from_f32(&[samples as u32 - 1, FEATURES], &x).unwrap(),
    );
    assert_elements(
        runtime.run(&short_x),
        "x",
        samples * FEATURES as usize,
        (samples - 1) * FEATURES as usize,
    );

    let first = runtime.run(&io).expect("a good run after a refused one");
    let labels = labels_of(&io);
    let short_labels = with(
        &io,
        "label",
        HostArray::from_i32(&[samples as u32 - 1], &labels[1..]).unwrap(),
    );
    assert_elements(runtime.run(&short_labels), "label", samples, samples - 1);
    // A long array too.
    let long: Vec<i32> = labels.iter().chain(&labels[..2]).copied().collect();
    let long_labels = with(
        &io,
        "label",
        HostArray::from_i32(&[samples as u32 + 2], &long).unwrap(),
    );
    assert_elements(runtime.run(&long_labels), "label", samples, samples + 2);

    // Nothing of the refused steps reached the devices: the next step is the reference's
    // second one.
    let initial = initial_weights(&p, REPLICAS);
    let mut reference = Reference::new(&p, REPLICAS, SEED, &initial).unwrap();
    let want = reference.step(&io).unwrap();
    compare_anchors(&p, REPLICAS, &first, &want, "first step").unwrap();
    let second = runtime.run(&io).unwrap();
    let want = reference.step(&io).unwrap();
    compare_anchors(&p, REPLICAS, &second, &want, "after refused steps").unwrap();
}

/// PopART's size-check case (stream `x` of sample `[2, 2]`, bps 2, one replica, given 4
/// elements: "Expected 8, but received 4") through the runtime. Catches a check that
/// counts samples instead of elements, or forgets the batches per step.
#[test]
fn popart_size_check_case_through_the_runtime() {
    let doc: Value = serde_json::from_str(STREAMS).unwrap();
    let case = doc["dataflow"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["note"].as_str().is_some_and(|n| n.contains("given 4")))
        .expect("streams.json lost the size-check case");
    assert!(case["error_mentions"]
        .as_str()
        .unwrap()
        .contains("Expected 8, but received 4"));
    let mut p = Program::new(2, 1, sgd(0.0));
    let w = p
        .add_variable(
            "w",
            &[1, 4],
            GroupingSpec::Comm(CommGroup::All),
            RetrievalMode::OnePerGroup,
            Sharding::None,
        )
        .unwrap();
    p.input = p.add_stream("x", DataType::F32, &[2, 2], false).unwrap();
    let t = p.add_stream("t", DataType::F32, &[1], false).unwrap();
    p.add_layer(Layer::Linear { weight: w }).unwrap();
    p.add_layer(Layer::MeanSquaredError { targets: t }).unwrap();
    let mut runtime = prepare(&p, 1, &thread());
    let io: StepIo = [
        (
            "x".to_string(),
            HostArray::from_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap(),
        ),
        (
            "t".to_string(),
            HostArray::from_f32(&[2], &[0.0, 0.0]).unwrap(),
        ),
    ]
    .into();
    assert_elements(runtime.run(&io), "x", 8, 4);
}

/// An array for a stream the program does not have, a missing stream, and an array of a
/// type that does not convert (f64 to an f32 stream) are errors naming the stream. Catches
/// unknown names silently ignored, a missing stream fed zeros or a panic on the map
/// lookup, and f64 bytes reinterpreted as f32 (the element count matches, so only the
/// type check can catch it).
#[test]
fn unknown_missing_and_unconvertible_streams_are_refused() {
    let p = default_mlp(default_combo());
    let mut runtime = prepare(&p, REPLICAS, &thread());
    let io = mlp_io(&p, REPLICAS, 0);

    let unknown = with(&io, "y", HostArray::from_f32(&[1], &[0.0]).unwrap());
    match runtime.run(&unknown) {
        Err(RuntimeError::UnknownTensor { name, expected }) => {
            assert_eq!((name.as_str(), expected), ("y", "stream"));
        }
        other => panic!("expected an unknown-stream error, got {other:?}"),
    }

    let mut missing = io.clone();
    missing.remove("label");
    match runtime.run(&missing) {
        Err(RuntimeError::MissingStream { name }) => assert_eq!(name, "label"),
        other => panic!("expected a missing-stream error, got {other:?}"),
    }

    let x: Vec<f64> = io["x"]
        .to_f32()
        .unwrap()
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    let doubles = with(&io, "x", HostArray::from_f64(io["x"].shape(), &x).unwrap());
    let err = runtime.run(&doubles).unwrap_err();
    match &err {
        RuntimeError::Type {
            name,
            expected,
            actual,
        } => assert_eq!(
            (name.as_str(), *expected, *actual),
            ("x", DataType::F32, DataType::F64)
        ),
        other => panic!("expected a type error, got {other:?}"),
    }
    assert!(err.to_string().contains("`x`"), "{err}");

    // Still usable.
    runtime.run(&io).unwrap();
}

// ---------------------------------------------------------------------------------------
// 5. Type conversions through a stream.

/// Labels given as int64 train bit for bit like the same labels as int32 (anchors and
/// weights). Catches a narrowing that reads the wrong half of each int64, or feeds the
/// int64 bytes unconverted (twice as many labels, every other one 0).
#[test]
fn int64_labels_train_like_int32_labels() {
    let p = default_mlp(default_combo());
    let initial = initial_weights(&p, REPLICAS);
    let mut narrow = prepare(&p, REPLICAS, &thread());
    let mut wide = prepare(&p, REPLICAS, &thread());
    narrow.weights_from_host(&initial).unwrap();
    wide.weights_from_host(&initial).unwrap();
    for step in 0..2 {
        let io = mlp_io(&p, REPLICAS, step);
        let labels: Vec<i64> = labels_of(&io).iter().map(|&l| i64::from(l)).collect();
        let io64 = with(
            &io,
            "label",
            HostArray::from_i64(io["label"].shape(), &labels).unwrap(),
        );
        let a = narrow.run(&io).unwrap();
        let b = wide.run(&io64).unwrap();
        assert_eq!(
            a, b,
            "step {step}: anchors differ between int32 and int64 labels"
        );
    }
    assert_eq!(
        narrow.weights_to_host().unwrap(),
        wide.weights_to_host().unwrap(),
        "weights differ between int32 and int64 labels"
    );
}

/// An int64 label beyond int32 is an out-of-range error naming the stream, the element
/// and the value; a label outside the classes (too large, or negative) is a label error.
/// Catches a narrowing that truncates (2³¹ would become a valid-looking negative, 2³² + 1
/// the label 1) and a cross-entropy that indexes past its classes.
#[test]
fn out_of_range_and_invalid_labels_are_refused() {
    let p = default_mlp(default_combo());
    let mut runtime = prepare(&p, REPLICAS, &thread());
    let io = mlp_io(&p, REPLICAS, 0);
    let shape = io["label"].shape().to_vec();
    let labels64: Vec<i64> = labels_of(&io).iter().map(|&l| i64::from(l)).collect();

    for (index, value) in [
        (5, i64::from(i32::MAX) + 1),
        (0, (1 << 32) + 1),
        (15, i64::MIN),
    ] {
        let mut bad = labels64.clone();
        bad[index] = value;
        let io = with(&io, "label", HostArray::from_i64(&shape, &bad).unwrap());
        match runtime.run(&io) {
            Err(RuntimeError::OutOfRange {
                name,
                index: i,
                value: v,
            }) => assert_eq!((name.as_str(), i, v), ("label", index, value)),
            other => panic!("{value}: expected an out-of-range error, got {other:?}"),
        }
    }

    let labels = labels_of(&io);
    for (index, value) in [(2, CLASSES as i32), (7, -1), (11, i32::MAX)] {
        let mut bad = labels.clone();
        bad[index] = value;
        let io32 = with(&io, "label", HostArray::from_i32(&shape, &bad).unwrap());
        let wide: Vec<i64> = bad.iter().map(|&l| i64::from(l)).collect();
        let io64 = with(&io, "label", HostArray::from_i64(&shape, &wide).unwrap());
        for io in [io32, io64] {
            let err = runtime.run(&io).unwrap_err();
            match &err {
                RuntimeError::Label {
                    name,
                    index: i,
                    value: v,
                    classes,
                } => assert_eq!(
                    (name.as_str(), *i, *v, *classes),
                    ("label", index, i64::from(value), CLASSES as usize)
                ),
                other => panic!("{value}: expected a label error, got {other:?}"),
            }
            assert!(err.to_string().contains("`label`"), "{err}");
        }
    }
    runtime.run(&io).unwrap();
}

/// uint8 arrays feed an fp8 stream (a stream no layer reads), and the step still matches
/// the reference; an array of another type for it (int8, f32) is a type error. Catches
/// a uint8 → fp8 conversion refused, or one that lets any byte-sized type through.
#[test]
fn uint8_feeds_an_fp8_stream() {
    for fp8 in [DataType::F8E4M3, DataType::F8E5M2] {
        let mut p = default_mlp(default_combo());
        p.add_stream("aux", fp8, &[2], false).unwrap();
        p.check(REPLICAS).unwrap();
        let mut runtime = prepare(&p, REPLICAS, &thread());
        let initial = initial_weights(&p, REPLICAS);
        runtime.weights_from_host(&initial).unwrap();
        let mut reference = Reference::new(&p, REPLICAS, SEED, &initial).unwrap();
        let samples = per_replica(&p) * REPLICAS;
        let bytes: Vec<u8> = (0..samples * 2).map(|i| (i * 37 % 256) as u8).collect();
        let shape = [samples as u32, 2];
        let io = with(
            &mlp_io(&p, REPLICAS, 0),
            "aux",
            HostArray::from_u8(&shape, &bytes).unwrap(),
        );
        let anchors = runtime
            .run(&io)
            .unwrap_or_else(|e| panic!("{fp8}: uint8 into an fp8 stream: {e}"));
        let want = reference.step(&io).unwrap();
        compare_anchors(&p, REPLICAS, &anchors, &want, &format!("{fp8}")).unwrap();

        let signed: Vec<i8> = bytes.iter().map(|&b| b as i8).collect();
        let int8 = HostArray::new(DataType::I8, &shape, bytemuck_i8(&signed)).unwrap();
        let floats = HostArray::from_f32(&shape, &vec![0.5; samples * 2]).unwrap();
        for (array, dtype) in [(int8, DataType::I8), (floats, DataType::F32)] {
            match runtime.run(&with(&io, "aux", array)) {
                Err(RuntimeError::Type {
                    name,
                    expected,
                    actual,
                }) => assert_eq!((name.as_str(), expected, actual), ("aux", fp8, dtype)),
                other => panic!("{dtype} into {fp8}: expected a type error, got {other:?}"),
            }
        }
    }
}

fn bytemuck_i8(values: &[i8]) -> Vec<u8> {
    values.iter().map(|&v| v as u8).collect()
}

// ---------------------------------------------------------------------------------------
// 6. Errors at prepare.

/// A program too large for the device memory (4096 bytes, a hidden layer of 256) is a
/// device error — out of memory, on Prepare — naming the replica. Catches a device that
/// overruns its arena or panics, and a runtime that reports the failure without saying
/// which device or why.
#[test]
fn a_program_larger_than_the_device_memory_is_out_of_memory() {
    let combo = Combo {
        comm: CommGroup::None,
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::None,
    };
    let p = mlp(combo, REPLICAS, 256, sgd(LEARNING_RATE));
    let err = Runtime::prepare(p, REPLICAS, &thread(), 4096).unwrap_err();
    match &err {
        RuntimeError::Transport(TransportError::Device {
            replica,
            request,
            code,
        }) => {
            assert_eq!(*request, RequestKind::Prepare, "{err}");
            assert!(
                matches!(code, ErrorCode::OutOfMemory { .. }),
                "{err}: expected out of memory"
            );
            assert_eq!(
                *replica, 0,
                "the first replica to answer is replica 0: {err}"
            );
        }
        other => panic!("expected a device error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("device 0"), "'{text}' must name the replica");
}

/// An invalid program is a program error before any device starts: even with a device
/// executable or firmware that does not exist, the program is what is reported. Catches
/// devices started (and possibly left running) for a program that can never run, and a
/// program error hidden behind a placement error.
#[test]
fn an_invalid_program_is_refused_before_any_device_starts() {
    let mut p = default_mlp(default_combo());
    p.optimizer = sgd(-1.0);
    for placement in [
        thread(),
        Placement::Process(PathBuf::from("/nonexistent/tessera")),
        Placement::Qemu(PathBuf::from("/nonexistent/firmware.elf")),
    ] {
        match Runtime::prepare(p.clone(), REPLICAS, &placement, MEMORY) {
            Err(RuntimeError::Program(ProgramError::Optimizer)) => {}
            other => panic!("{placement:?}: expected a program error, got {other:?}"),
        }
    }
    // A grouping that does not divide the replicas, named by its variable.
    let p = default_mlp(Combo {
        comm: CommGroup::Consecutive(2),
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::None,
    });
    let placement = Placement::Process(PathBuf::from("/nonexistent/tessera"));
    match Runtime::prepare(p, 3, &placement, MEMORY) {
        Err(RuntimeError::Program(ProgramError::Variable { name, .. })) => {
            assert_eq!(name.as_str(), "w1");
        }
        other => panic!("expected a program error naming w1, got {other:?}"),
    }
}

/// A device executable that does not exist is an error naming replica 0 (the runtime's
/// contract: "an unreachable one is an error naming its replica"). Catches a spawn failure
/// that says what could not start but not which replica it was for.
#[test]
fn an_unreachable_device_is_an_error_naming_its_replica() {
    let p = default_mlp(default_combo());
    let placement = Placement::Process(PathBuf::from("/nonexistent/tessera"));
    let err = Runtime::prepare(p, REPLICAS, &placement, MEMORY).unwrap_err();
    assert!(
        matches!(err, RuntimeError::Transport(_)),
        "expected a transport error, got {err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("/nonexistent/tessera"),
        "'{text}' must name the program"
    );
    assert!(
        text.contains("device 0") || text.contains("replica 0"),
        "'{text}' must name replica 0"
    );
}

/// Zero replicas, or more than one runtime drives, are refused before any device starts.
/// Catches a runtime with no channels that later indexes replica 0 (random seed, RNG
/// state) and panics.
#[test]
fn zero_or_too_many_replicas_are_refused() {
    let p = default_mlp(Combo {
        comm: CommGroup::None,
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::None,
    });
    for replicas in [0, MAX_REPLICAS + 1] {
        match Runtime::prepare(p.clone(), replicas, &thread(), MEMORY) {
            Err(RuntimeError::Replicas { replicas: r, max }) => {
                assert_eq!((r, max), (replicas, MAX_REPLICAS));
            }
            other => panic!("{replicas} replicas: expected a replicas error, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// 7. Weights from host errors.

/// Weights from host refuses an array of the wrong shape (naming the tensor and both
/// shapes), of the wrong type, or for an unknown variable; and when one array of several
/// is wrong nothing moves, even the arrays checked before it. Catches a check made per
/// array as it moves (the first arrays land, the device is left half-updated), a shape
/// check that only compares element counts (`w2`'s `[4, 5, 3]` for its four groups'
/// `[4, 3, 5]` has the same count), a group dimension left out, and f64 bytes taken as
/// f32.
#[test]
fn weights_from_host_errors_change_nothing() {
    let p = default_mlp(default_combo()); // w1 and b1 in 2 groups, w2 in 4.
    let mut runtime = prepare(&p, REPLICAS, &thread());
    let initial = initial_weights(&p, REPLICAS);
    runtime.weights_from_host(&initial).unwrap();
    let before = runtime.weights_to_host().unwrap();

    // Other values for every variable, so that anything that moved shows.
    let changed: WeightsIo = initial
        .iter()
        .map(|(name, a)| {
            let v: Vec<f32> = a.to_f32().unwrap().iter().map(|x| x + 1.0).collect();
            (name.clone(), HostArray::from_f32(a.shape(), &v).unwrap())
        })
        .collect();

    // w2 (last in name order) with each group's value transposed: same element count.
    let mut wrong_shape = changed.clone();
    let w2 = changed["w2"].reshaped(&[4, HIDDEN, CLASSES]).unwrap();
    wrong_shape.insert("w2".to_string(), w2);
    let err = runtime.weights_from_host(&wrong_shape).unwrap_err();
    match &err {
        RuntimeError::Shape {
            name,
            expected,
            actual,
            ..
        } => {
            assert_eq!(name, "w2");
            assert_eq!(expected, &[4, CLASSES as usize, HIDDEN as usize]);
            assert_eq!(actual, &[4, HIDDEN as usize, CLASSES as usize]);
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    let text = err.to_string();
    for part in ["`w2`", "[4, 3, 5]", "[4, 5, 3]"] {
        assert!(text.contains(part), "'{text}' must mention {part}");
    }

    // w1 without its group dimension.
    let mut missing_groups = changed.clone();
    let w1 = changed["w1"].to_f32().unwrap();
    let w1 = HostArray::from_f32(&[HIDDEN, FEATURES], &w1[..15]).unwrap();
    missing_groups.insert("w1".to_string(), w1);
    match runtime.weights_from_host(&missing_groups).unwrap_err() {
        RuntimeError::Shape {
            name,
            expected,
            actual,
            ..
        } => {
            assert_eq!(name, "w1");
            assert_eq!(expected, [2, HIDDEN as usize, FEATURES as usize]);
            assert_eq!(actual, [HIDDEN as usize, FEATURES as usize]);
        }
        other => panic!("expected a shape error, got {other:?}"),
    }

    // w2 as f64.
    let mut wrong_type = changed.clone();
    let w2: Vec<f64> = changed["w2"]
        .to_f32()
        .unwrap()
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    wrong_type.insert(
        "w2".to_string(),
        HostArray::from_f64(changed["w2"].shape(), &w2).unwrap(),
    );
    match runtime.weights_from_host(&wrong_type).unwrap_err() {
        RuntimeError::Type {
            name,
            expected,
            actual,
        } => assert_eq!(
            (name.as_str(), expected, actual),
            ("w2", DataType::F32, DataType::F64)
        ),
        other => panic!("expected a type error, got {other:?}"),
    }

    // A name no variable has (sorted after every real one).
    let mut unknown = changed.clone();
    unknown.insert("zz".to_string(), HostArray::from_f32(&[1], &[0.0]).unwrap());
    match runtime.weights_from_host(&unknown).unwrap_err() {
        RuntimeError::UnknownTensor { name, expected } => {
            assert_eq!((name.as_str(), expected), ("zz", "variable"));
        }
        other => panic!("expected an unknown-variable error, got {other:?}"),
    }

    assert_eq!(
        runtime.weights_to_host().unwrap(),
        before,
        "a refused weights from host changed the device"
    );
    // The good arrays do move.
    runtime.weights_from_host(&changed).unwrap();
    assert_ne!(runtime.weights_to_host().unwrap(), before);
}

// ---------------------------------------------------------------------------------------
// 8. Momentum and optimizer changes.

/// SGD with momentum matches the reference over 3 steps, with `w1` sharded (its velocity
/// sharded alike) and in another group than `w2`. Catches a velocity that is not kept
/// between batches or steps, one kept whole on a sharded replica (or updated outside its
/// shard), and momentum applied before the group average.
#[test]
fn momentum_matches_the_reference() {
    for combo in [
        Combo {
            comm: CommGroup::All,
            retrieval: RetrievalMode::OnePerGroup,
            layout: Layout::PaddedTail,
        },
        Combo {
            comm: CommGroup::Orthogonal(2),
            retrieval: RetrievalMode::AllReplicas,
            layout: Layout::Explicit,
        },
    ] {
        let optimizer = Optimizer::SgdMomentum {
            learning_rate: 0.05,
            momentum: 0.9,
        };
        let p = mlp(combo, REPLICAS, HIDDEN, optimizer);
        if let Err(e) = parity(&p, REPLICAS, &thread(), 3, &format!("momentum: {combo}")) {
            panic!("{e}");
        }
    }
}

/// Trains one step, changes the optimizer's values on the runtime and on the reference,
/// trains two more, comparing every anchor and the final weights; the final weights must
/// also differ from a reference that kept the old values.
fn change_optimizer(p: &Program, change: Optimizer) -> Result<(), String> {
    let mut runtime = prepare(p, REPLICAS, &thread());
    let initial = initial_weights(p, REPLICAS);
    runtime.weights_from_host(&initial).unwrap();
    let mut reference = Reference::new(p, REPLICAS, SEED, &initial).unwrap();
    let mut unchanged = Reference::new(p, REPLICAS, SEED, &initial).unwrap();
    let io = mlp_io(p, REPLICAS, 0);
    let anchors = runtime.run(&io).unwrap();
    compare_anchors(
        p,
        REPLICAS,
        &anchors,
        &reference.step(&io).unwrap(),
        "before",
    )?;
    unchanged.step(&io).unwrap();

    runtime.set_optimizer(change).unwrap();
    reference.set_optimizer(change);
    for step in 1..3 {
        let io = mlp_io(p, REPLICAS, step);
        let anchors = runtime.run(&io).unwrap();
        let want = reference.step(&io).unwrap();
        compare_anchors(p, REPLICAS, &anchors, &want, &format!("after, step {step}"))?;
        unchanged.step(&io).unwrap();
    }
    let weights = runtime.weights_to_host().unwrap();
    compare_weights(p, REPLICAS, &weights, &reference, "after the change")?;
    // The change mattered: the reference that kept the old values is far off.
    if compare_weights(p, REPLICAS, &weights, &unchanged, "unchanged").is_ok() {
        return Err("the optimizer change made no difference".to_string());
    }
    Ok(())
}

/// `set_optimizer` between runs changes the learning rate (and the momentum) the devices
/// use, exactly as the reference given the same change. Catches values that do not reach
/// the devices, reach only some of them, or are reset at the next run or prepare.
#[test]
fn set_optimizer_changes_the_learning_rate() {
    let p = default_mlp(default_combo());
    change_optimizer(&p, sgd(0.4)).unwrap_or_else(|e| panic!("sgd: {e}"));

    let momentum = Optimizer::SgdMomentum {
        learning_rate: 0.05,
        momentum: 0.9,
    };
    let p = mlp(default_combo(), REPLICAS, HIDDEN, momentum);
    let change = Optimizer::SgdMomentum {
        learning_rate: 0.2,
        momentum: 0.5,
    };
    change_optimizer(&p, change).unwrap_or_else(|e| panic!("momentum: {e}"));
}

// ---------------------------------------------------------------------------------------
// 9. Cycle counts.

/// Cycle counts are refused (by every device, as a device error) unless the program is
/// instrumented; instrumented, every replica counts work > 0, replicas doing identical
/// work count the same, and a second identical step doubles the count. Catches counts
/// returned for an uninstrumented program, a count that stays 0, one that differs between
/// replicas doing the same work, and one reset (or counted twice) per step.
#[test]
fn cycle_counts_need_instrumentation() {
    let combo = Combo {
        comm: CommGroup::All,
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::None,
    };
    let p = default_mlp(combo);
    let mut runtime = prepare(&p, REPLICAS, &thread());
    runtime.run(&mlp_io(&p, REPLICAS, 0)).unwrap();
    match runtime.cycle_counts() {
        Err(RuntimeError::Transport(TransportError::Device {
            request: RequestKind::CycleCount,
            code: ErrorCode::NotInstrumented,
            ..
        })) => {}
        other => panic!("expected a not-instrumented error, got {other:?}"),
    }

    let mut p = p;
    p.instrumented = true;
    let mut runtime = prepare(&p, REPLICAS, &thread());
    runtime
        .weights_from_host(&initial_weights(&p, REPLICAS))
        .unwrap();
    runtime.run(&mlp_io(&p, REPLICAS, 0)).unwrap();
    let once = runtime.cycle_counts().unwrap();
    assert_eq!(once.len(), REPLICAS);
    assert!(once[0] > 0, "no work counted: {once:?}");
    assert!(
        once.iter().all(|&c| c == once[0]),
        "replicas of identical work counted differently: {once:?}"
    );
    runtime.run(&mlp_io(&p, REPLICAS, 1)).unwrap();
    let twice = runtime.cycle_counts().unwrap();
    let doubled: Vec<u64> = once.iter().map(|c| 2 * c).collect();
    assert_eq!(
        twice, doubled,
        "a second identical step must double the count"
    );
}

/// Step IO through callbacks, in the stream's own types.
struct Callbacks<'a> {
    /// The arrays the callbacks serve, already in the streams' types (labels as int32).
    io: &'a StepIo,
    replicas: usize,
    /// Values handed back, by tensor: `(replica, index, bytes)`.
    outputs: Vec<(String, usize, usize, Vec<u8>)>,
}

impl tessera_host::runtime::step_io::StepCallbacks for Callbacks<'_> {
    fn input(&mut self, stream: &str, replica: usize, index: usize, sample: &mut [u8]) {
        let bytes = self.io[stream].bytes();
        // Sample `index` of replica `replica` is the user's sample `index·R + replica`.
        let at = (index * self.replicas + replica) * sample.len();
        sample.copy_from_slice(&bytes[at..at + sample.len()]);
    }
    fn output(&mut self, tensor: &str, replica: usize, index: usize, value: &[u8]) {
        self.outputs
            .push((tensor.to_string(), replica, index, value.to_vec()));
    }
}

/// Callbacks feed a step exactly as arrays do: the same anchors (value `index` of replica
/// `r` is row `index·R + r` of the array) and the same weights, bit for bit. Catches
/// callbacks asked for samples in another order than the splitter hands arrays out.
#[test]
fn callbacks_train_exactly_like_arrays() {
    let combo = Combo {
        comm: CommGroup::All,
        retrieval: RetrievalMode::OnePerGroup,
        layout: Layout::Balanced,
    };
    let program = default_mlp(combo);
    let initial = initial_weights(&program, REPLICAS);
    let mut arrays = prepare(&program, REPLICAS, &thread());
    let mut callbacks = prepare(&program, REPLICAS, &thread());
    for runtime in [&mut arrays, &mut callbacks] {
        runtime.set_random_seed(SEED).unwrap();
        runtime.weights_from_host(&initial).unwrap();
    }
    for step in 0..2 {
        let io = mlp_io(&program, REPLICAS, step);
        // The callbacks serve the labels in the stream's type, int32.
        let labels = HostArray::from_i32(&[labels_of(&io).len() as u32], &labels_of(&io)).unwrap();
        let typed = with(&io, "label", labels);
        let anchors = arrays.run(&io).unwrap();
        let mut served = Callbacks {
            io: &typed,
            replicas: REPLICAS,
            outputs: Vec::new(),
        };
        callbacks.run_with(&mut served).unwrap();
        assert!(!served.outputs.is_empty(), "the anchors came back");
        for (tensor, replica, index, value) in &served.outputs {
            let array = &anchors[tensor];
            let row = index * REPLICAS + replica;
            let width = value.len();
            assert_eq!(
                &array.bytes()[row * width..(row + 1) * width],
                &value[..],
                "step {step}: {tensor} value {index} of replica {replica}"
            );
        }
    }
    assert_eq!(
        arrays.weights_to_host().unwrap(),
        callbacks.weights_to_host().unwrap(),
        "the weights, bit for bit"
    );
}

/// A broadcast stream (one sample per micro-batch for every replica) beside a per-replica
/// one trains like the reference. Catches a runtime that asks the splitter for a
/// broadcast sample on behalf of every replica (it serves replica 0 only) and fails.
#[test]
fn a_broadcast_stream_feeds_every_replica() {
    let mut p = Program::new(BPS, AF, sgd(LEARNING_RATE));
    let all = GroupingSpec::Comm(CommGroup::All);
    let w = p
        .add_variable(
            "w",
            &[CLASSES, FEATURES],
            all,
            RetrievalMode::OnePerGroup,
            Sharding::Balanced,
        )
        .unwrap();
    p.input = p.add_stream("x", DataType::F32, &[FEATURES], true).unwrap();
    let labels = p.add_stream("label", DataType::I32, &[1], false).unwrap();
    p.add_layer(Layer::Linear { weight: w }).unwrap();
    p.add_layer(Layer::SoftmaxCrossEntropy { labels }).unwrap();
    p.add_anchor(AnchorTensor::Loss, AnchorReturnType::All)
        .unwrap();
    let micro = (BPS * AF) as usize;
    let initial = initial_weights(&p, REPLICAS);
    let mut runtime = prepare(&p, REPLICAS, &thread());
    runtime.set_random_seed(SEED).unwrap();
    runtime.weights_from_host(&initial).unwrap();
    let mut reference = Reference::new(&p, REPLICAS, SEED, &initial).unwrap();
    for step in 0..2 {
        let x = values(40 + step, micro * FEATURES as usize, 1.0);
        let labels: Vec<i32> = (0..micro * REPLICAS)
            .map(|i| ((i + step as usize) % CLASSES as usize) as i32)
            .collect();
        let io: StepIo = [
            (
                "x".to_string(),
                HostArray::from_f32(&[micro as u32, FEATURES], &x).unwrap(),
            ),
            (
                "label".to_string(),
                HostArray::from_i32(&[labels.len() as u32], &labels).unwrap(),
            ),
        ]
        .into();
        let anchors = runtime.run(&io).unwrap();
        let expected = reference.step(&io).unwrap();
        let loss = anchors["loss"].to_f32().unwrap();
        let error = max_relative_error(&loss, &expected["loss"]).unwrap();
        assert!(error < TOLERANCE, "step {step}: losses differ by {error:e}");
    }
    let weights = runtime.weights_to_host().unwrap();
    let expected = reference.weights();
    let error = max_relative_error(&weights["w"].to_f32().unwrap(), &expected["w"]).unwrap();
    assert!(error < TOLERANCE, "weights differ by {error:e}");
}
