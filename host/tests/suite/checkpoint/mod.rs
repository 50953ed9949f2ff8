//! Checkpoints and saved executables (issue #10): a run's whole state survives a file bit
//! for bit, a resumed run continues exactly as the run that wrote it, every damaged or
//! foreign file is refused before anything reaches a device, a kill during a save leaves
//! the previous checkpoint, and `tessera inspect` and `tessera train --resume` say what
//! they found.
//!
//! Files are compared by loading them (a field that differs is named); `file_trust.rs`
//! checks that the same state also gives the same bytes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{AnchorTensor, Layer, Optimizer, Program, Sharding};
use tessera_core::rng::Rng;
use tessera_core::shard::Interval;
use tessera_core::stream::AnchorReturnType;
use tessera_host::checkpoint::{fingerprint, Checkpoint, CheckpointError};
use tessera_host::executable::{self, Executable, ExecutableError};
use tessera_host::input::InputError;
use tessera_host::runtime::{Placement, Runtime, RuntimeError, StepIo, WeightsIo};
use tessera_host::session::HostArray;
use tessera_host::train::{train, TrainJob, TrainReport, DEVICE_MEMORY};

// ---------------------------------------------------------------------------------------
// Shared pieces
// ---------------------------------------------------------------------------------------

const REPLICAS: usize = 4;
const INPUTS: u32 = 4;
const HIDDEN: u32 = 8;
const CLASSES: u32 = 3;
const BATCHES_PER_STEP: u32 = 2;
const ACCUMULATION: u32 = 2;
const SEED: u64 = 0x5eed;

/// A directory of its own under Cargo's scratch space, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("checkpoint-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the scratch directory is created");
        Self(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

/// How `w1` is split across its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shard {
    None,
    Balanced,
    PaddedTail,
    Explicit,
}

const SHARDS: [Shard; 4] = [
    Shard::None,
    Shard::Balanced,
    Shard::PaddedTail,
    Shard::Explicit,
];

/// `shard` for `elements` elements over a group of `group` members. The explicit layout
/// pads every shard at its start and lists the tensor's pieces from the last shard to the
/// first, so that no piece sits where a regular layout would put it.
fn sharding(shard: Shard, group: usize, elements: usize) -> Sharding {
    match shard {
        Shard::None => Sharding::None,
        Shard::Balanced => Sharding::Balanced,
        Shard::PaddedTail => Sharding::PaddedTail,
        Shard::Explicit => {
            assert_eq!(elements % group, 0, "the explicit layout splits evenly");
            let piece = elements / group;
            let per_replica = piece + 1;
            let intervals: Vec<Interval> = (0..group)
                .rev()
                .map(|s| Interval {
                    begin: s * per_replica + 1,
                    end: (s + 1) * per_replica,
                })
                .collect();
            Sharding::Explicit {
                per_replica: per_replica as u32,
                intervals: heapless::Vec::from_slice(&intervals).expect("at most 8 intervals"),
            }
        }
    }
}

/// A two-layer perceptron: `x → Linear(w1) → Bias(b1) → ReLU → Dropout → Linear(w2) →
/// Bias(b2) → softmax cross-entropy`, `w1`/`b1` in `comm` (`w1` sharded as `shard`),
/// `w2`/`b2` in `consecutive:2`, every variable returned as `retrieval` says; SGD with
/// momentum, so the optimizer keeps a velocity per variable; the loss anchored.
fn mlp(
    comm: CommGroup,
    retrieval: RetrievalMode,
    shard: Shard,
    hidden: u32,
    replicas: usize,
) -> Program {
    let mut p = Program::new(
        BATCHES_PER_STEP,
        ACCUMULATION,
        Optimizer::SgdMomentum {
            learning_rate: 0.1,
            momentum: 0.9,
        },
    );
    let group = comm
        .to_grouping(replicas)
        .expect("the comm group fits")
        .group_size();
    let first = GroupingSpec::Comm(comm);
    let second = GroupingSpec::Comm(CommGroup::Consecutive(2));
    let w1_sharding = sharding(shard, group, (hidden * INPUTS) as usize);
    let w1 = p
        .add_variable("w1", &[hidden, INPUTS], first, retrieval, w1_sharding)
        .unwrap();
    let b1 = p
        .add_variable("b1", &[hidden], first, retrieval, Sharding::None)
        .unwrap();
    let w2 = p
        .add_variable("w2", &[CLASSES, hidden], second, retrieval, Sharding::None)
        .unwrap();
    let b2 = p
        .add_variable("b2", &[CLASSES], second, retrieval, Sharding::None)
        .unwrap();
    p.input = p.add_stream("x", DataType::F32, &[INPUTS], false).unwrap();
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
    p
}

/// The default program of these tests: `w1`/`b1` in `all`, `w1` balanced.
fn default_mlp() -> Program {
    mlp(
        CommGroup::All,
        RetrievalMode::OnePerGroup,
        Shard::Balanced,
        HIDDEN,
        REPLICAS,
    )
}

/// Deterministic starting weights in their host shapes, different per `salt`.
fn initial_weights(p: &Program, replicas: usize, salt: u64) -> WeightsIo {
    let mut rng = Rng::from_seed(salt);
    let mut weights = WeightsIo::new();
    for (i, v) in p.variables.iter().enumerate() {
        let groups = p.settings(i, replicas).unwrap().group_count();
        let n: usize = v.shape.iter().map(|&d| d as usize).product();
        let values: Vec<f32> = (0..groups * n).map(|_| rng.next_f32() - 0.5).collect();
        let mut shape: Vec<u32> = v.shape.to_vec();
        if groups > 1 {
            shape.insert(0, groups as u32);
        }
        weights.insert(
            v.name.to_string(),
            HostArray::from_f32(&shape, &values).unwrap(),
        );
    }
    weights
}

/// Step `step`'s inputs and labels for `p` on `replicas` replicas.
fn step_io(p: &Program, replicas: usize, step: u64) -> StepIo {
    let samples = (p.batches_per_step * p.accumulation) as usize * replicas;
    let mut rng = Rng::from_seed(0x1000 + step);
    let x: Vec<f32> = (0..samples * INPUTS as usize)
        .map(|_| rng.next_f32() * 2.0 - 1.0)
        .collect();
    let labels: Vec<i32> = (0..samples)
        .map(|_| (rng.next_u32() % CLASSES) as i32)
        .collect();
    [
        (
            "x".to_string(),
            HostArray::from_f32(&[samples as u32, INPUTS], &x).unwrap(),
        ),
        (
            "label".to_string(),
            HostArray::from_i32(&[samples as u32], &labels).unwrap(),
        ),
    ]
    .into()
}

/// `p` prepared on `replicas` threads with `memory` bytes each, seeded and given weights
/// drawn from `salt`.
fn started_with(p: Program, replicas: usize, memory: usize, salt: u64) -> Runtime {
    let weights = initial_weights(&p, replicas, salt);
    let mut runtime =
        Runtime::prepare(p, replicas, &Placement::Thread, memory).expect("the program prepares");
    runtime.set_random_seed(SEED).unwrap();
    runtime.weights_from_host(&weights).unwrap();
    runtime
}

fn started(p: Program, salt: u64) -> Runtime {
    started_with(p, REPLICAS, DEVICE_MEMORY, salt)
}

/// Runs steps `from..to`.
fn run_steps(runtime: &mut Runtime, from: u64, to: u64) {
    let p = runtime.program().clone();
    let replicas = runtime.replicas();
    for step in from..to {
        runtime
            .run(&step_io(&p, replicas, step))
            .expect("the step runs");
    }
}

/// Everything a device keeps between steps, as the host sees it.
#[derive(Debug, PartialEq)]
struct DeviceState {
    weights: WeightsIo,
    optimizer: WeightsIo,
    rng: Vec<u32>,
    seed: u64,
}

fn state(runtime: &mut Runtime) -> DeviceState {
    DeviceState {
        weights: runtime.weights_to_host().unwrap(),
        optimizer: runtime.optimizer_state_to_host().unwrap(),
        rng: runtime.rng_state().unwrap(),
        seed: runtime.random_seed().unwrap(),
    }
}

/// Asserts `a` and `b` hold the same arrays, bit for bit (short messages: the `Debug` of a
/// map of arrays prints every byte).
fn assert_same_arrays(what: &str, a: &WeightsIo, b: &WeightsIo) {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{what}: the tensors"
    );
    for (name, x) in a {
        let y = &b[name];
        assert_eq!(
            (x.dtype(), x.shape()),
            (y.dtype(), y.shape()),
            "{what}: {name}'s type and shape"
        );
        if let Some(at) = x.bytes().iter().zip(y.bytes()).position(|(p, q)| p != q) {
            panic!(
                "{what}: {name} differs from byte {at} on ({} bytes)",
                x.bytes().len()
            );
        }
    }
}

fn assert_same_state(what: &str, a: &DeviceState, b: &DeviceState) {
    assert_same_arrays(&format!("{what}: weights"), &a.weights, &b.weights);
    assert_same_arrays(
        &format!("{what}: optimizer state"),
        &a.optimizer,
        &b.optimizer,
    );
    assert_eq!(a.rng, b.rng, "{what}: RNG state");
    assert_eq!(a.seed, b.seed, "{what}: seed");
}

/// Asserts two checkpoints hold the same run state, field by field, layouts included.
fn assert_same_checkpoint(what: &str, a: &Checkpoint, b: &Checkpoint) {
    assert_eq!(
        (a.fingerprint, a.replicas, a.step, a.seed),
        (b.fingerprint, b.replicas, b.step, b.seed),
        "{what}: fingerprint, replicas, step and seed"
    );
    assert_eq!(a.rng, b.rng, "{what}: RNG state");
    assert_same_arrays(&format!("{what}: weights"), &a.weights, &b.weights);
    assert_same_arrays(
        &format!("{what}: optimizer state"),
        &a.optimizer,
        &b.optimizer,
    );
    assert_eq!(a.layouts, b.layouts, "{what}: layouts");
}

fn assert_one_line(what: &str, message: &str) {
    assert!(
        !message.trim().is_empty() && message.trim_end().lines().count() == 1,
        "{what}: not one line: {message:?}"
    );
}

/// The `safetensors` header of a checkpoint's bytes: its byte range.
fn header_range(bytes: &[u8]) -> std::ops::Range<usize> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    8..8 + n
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Where the text of metadata entry `key`'s value lies in a checkpoint's bytes.
fn metadata_value(bytes: &[u8], key: &str) -> std::ops::Range<usize> {
    let header = header_range(bytes);
    let pattern = format!("\"{key}\":\"");
    let at = find(&bytes[header.clone()], pattern.as_bytes()).unwrap_or_else(|| {
        panic!(
            "no {pattern} in the header {}",
            String::from_utf8_lossy(&bytes[header.clone()])
        )
    });
    let start = header.start + at + pattern.len();
    let len = bytes[start..]
        .iter()
        .position(|&b| b == b'"')
        .expect("the value ends");
    start..start + len
}

// ---------------------------------------------------------------------------------------
// The command line
// ---------------------------------------------------------------------------------------

/// [`resume`]'s small job's model on the command line (without `--steps` and `--seed`).
const CLI_JOB: [&str; 10] = [
    "--replicas",
    "4",
    "--hidden",
    "8",
    "--samples",
    "300",
    "--batches-per-step",
    "2",
    "--accumulation",
    "2",
];

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("tessera runs")
}

fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

mod command_line;
mod damage;
mod resume;
mod save_kill;
mod save_load;
mod saved_executable;
