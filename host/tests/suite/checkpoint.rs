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
use tessera_host::train::model::default_anchors;
use tessera_host::train::{train, DataSource, TrainJob, TrainReport, DEVICE_MEMORY};

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
// 1. Round trips
// ---------------------------------------------------------------------------------------

/// Trains `comm` × every retrieval mode × every shard layout of `w1` two steps, captures,
/// saves, loads and restores into a new runtime of the same program.
///
/// Catches: a tensor, the optimizer state, the seed or any replica's RNG state lost or
/// reordered on the way through the file; a host shape computed wrongly for a grouped,
/// all-replicas or sharded variable (the explicit layout's padding and piece order
/// included); metadata or a checksum that do not survive a save and a load.
fn round_trips(comm: CommGroup) {
    let scratch = Scratch::new(&format!("round-trip-{}", comm).replace(':', "-"));
    let path = scratch.path("state.safetensors");
    for retrieval in [RetrievalMode::OnePerGroup, RetrievalMode::AllReplicas] {
        for shard in SHARDS {
            let case = format!("{comm}, {retrieval:?}, w1 {shard:?}");
            let program = mlp(comm, retrieval, shard, HIDDEN, REPLICAS);
            let mut original = started(program.clone(), 1);
            run_steps(&mut original, 0, 2);
            let captured = Checkpoint::capture(&mut original, 2, SEED).unwrap();
            assert_eq!(captured.step, 2, "{case}");
            assert_eq!(captured.replicas, REPLICAS, "{case}");
            assert_eq!(captured.rng.len(), 4 * REPLICAS, "{case}");
            let names: Vec<&str> = ["b1", "b2", "w1", "w2"].into();
            assert_eq!(
                captured
                    .weights
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                names,
                "{case}"
            );
            assert_eq!(
                captured
                    .optimizer
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                names,
                "{case}"
            );
            // Two steps with momentum: the velocity is not all zeros.
            assert!(
                captured
                    .optimizer
                    .values()
                    .any(|a| a.to_f32().unwrap().iter().any(|&v| v != 0.0)),
                "{case}: no velocity was captured"
            );

            captured.save(&path).unwrap();
            let loaded = Checkpoint::load(&path).unwrap();
            assert_same_checkpoint(&format!("{case}: through the file"), &loaded, &captured);

            let mut fresh = started(program.clone(), 2);
            assert!(
                state(&mut fresh).weights != state(&mut original).weights,
                "{case}: the new runtime must start elsewhere"
            );
            loaded.restore(&mut fresh).unwrap();
            assert_same_state(
                &format!("{case}: after restore"),
                &state(&mut fresh),
                &state(&mut original),
            );

            // And both continue alike (dropout draws from the restored generators).
            let io = step_io(&program, REPLICAS, 2);
            let a = original.run(&io).unwrap();
            let b = fresh.run(&io).unwrap();
            assert_same_arrays(&format!("{case}: the next step's loss"), &a, &b);
            assert_same_state(
                &format!("{case}: after the next step"),
                &state(&mut fresh),
                &state(&mut original),
            );
        }
    }
}

/// See [`round_trips`]: `w1`/`b1` in one group of all four replicas.
#[test]
fn round_trips_in_comm_group_all() {
    round_trips(CommGroup::All);
}

/// See [`round_trips`]: every replica alone (four rows per variable, shards of one).
#[test]
fn round_trips_in_comm_group_none() {
    round_trips(CommGroup::None);
}

/// See [`round_trips`]: groups of consecutive replicas.
#[test]
fn round_trips_in_comm_group_consecutive() {
    round_trips(CommGroup::Consecutive(2));
}

/// See [`round_trips`]: strided groups, whose first replicas are not consecutive.
#[test]
fn round_trips_in_comm_group_orthogonal() {
    round_trips(CommGroup::Orthogonal(2));
}

/// Catches: a checkpoint that is another value after a save and a load
/// (`Checkpoint: PartialEq` is how a caller compares two runs' states). The state is
/// checked above; this checks the rest, the layouts included.
#[test]
fn a_saved_checkpoint_loads_as_the_same_value() {
    let scratch = Scratch::new("same-value");
    let path = scratch.path("state.safetensors");
    let mut runtime = started(default_mlp(), 1);
    run_steps(&mut runtime, 0, 2);
    let captured = Checkpoint::capture(&mut runtime, 2, SEED).unwrap();
    captured.save(&path).unwrap();
    let loaded = Checkpoint::load(&path).unwrap();
    assert_same_checkpoint("through the file", &loaded, &captured);
    assert_eq!(
        loaded.layouts, captured.layouts,
        "the layouts, by variable name"
    );
    assert!(
        loaded == captured,
        "the loaded checkpoint differs from the saved one"
    );
}

// ---------------------------------------------------------------------------------------
// 2. Exact resume
// ---------------------------------------------------------------------------------------

/// A small `tessera train` job, as [`cli_job`] spells it on the command line.
fn job(steps: usize, placement: Placement) -> TrainJob {
    TrainJob {
        replicas: 4,
        comm: CommGroup::All,
        output_comm: CommGroup::Consecutive(2),
        sharding: Sharding::Balanced,
        retrieval: RetrievalMode::OnePerGroup,
        hidden: 8,
        batches_per_step: 2,
        accumulation: 2,
        steps,
        learning_rate: 0.2,
        momentum: 0.9,
        dropout: 0.1,
        anchors: default_anchors(),
        data: DataSource::Spirals {
            samples: 300,
            classes: 3,
        },
        seed: 7,
        placement,
        tolerance: 1e-3,
        progress: false,
        checkpoint: None,
        every: 0,
        resume: None,
        save_executable: None,
        executable: None,
    }
}

/// [`job`]'s model on the command line (without `--steps` and `--seed`).
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

/// The job's checkpoint after training it `2k` steps in one run equals the one after `k`
/// steps and `k` more resumed from the first run's checkpoint.
fn assert_same_run(what: &str, long: &Path, resumed: &Path, steps: u64) {
    let long = Checkpoint::load(long).unwrap();
    let resumed = Checkpoint::load(resumed).unwrap();
    assert_eq!(long.step, steps, "{what}");
    assert_eq!(resumed.step, steps, "{what}: the resumed run's step count");
    assert_same_checkpoint(what, &resumed, &long);
}

/// Through the library, on `placement`: 2k steps against k steps, a checkpoint and k
/// more resumed from it by a job with another seed (the checkpoint's replaces it).
fn resume_through_the_library(label: &str, placement: Placement) {
    let k = 3;
    let scratch = Scratch::new(&format!("resume-library-{label}"));
    let (long_path, short_path, resumed_path) = (
        scratch.path("long.safetensors"),
        scratch.path("short.safetensors"),
        scratch.path("resumed.safetensors"),
    );
    let run = |job: TrainJob| -> TrainReport { train(&job).expect("the job runs") };
    let long = run(TrainJob {
        checkpoint: Some(long_path.clone()),
        ..job(2 * k, placement.clone())
    });
    let short = run(TrainJob {
        checkpoint: Some(short_path.clone()),
        every: 1,
        ..job(k, placement.clone())
    });
    let resumed = run(TrainJob {
        resume: Some(short_path.clone()),
        checkpoint: Some(resumed_path.clone()),
        seed: 1234,
        ..job(k, placement.clone())
    });
    assert_same_run(
        &format!("{placement:?}"),
        &long_path,
        &resumed_path,
        2 * k as u64,
    );
    assert_eq!(long.step_losses.len(), 2 * k);
    assert_eq!(short.step_losses[..], long.step_losses[..k]);
    assert_eq!(
        resumed.step_losses[..],
        long.step_losses[k..],
        "the resumed run's losses are the long run's last {k}"
    );
    // The reference continues from the checkpoint too.
    assert!(
        resumed.passed(1e-3),
        "the resumed run differs from its reference: weights {}, anchors {}",
        resumed.weight_check,
        resumed.anchor_check
    );
}

/// Catches: state missing from the checkpoint (optimizer velocity, the dropout RNG), a
/// resumed run that restarts its data at step 0 or draws it from the job's seed instead of
/// the checkpoint's, or a reference that does not resume with the devices.
#[test]
fn resume_is_exact_through_the_library_on_threads() {
    resume_through_the_library("threads", Placement::Thread);
}

/// As above with every device in a child process (state crossing a pipe both ways).
#[test]
fn resume_is_exact_through_the_library_in_child_processes() {
    resume_through_the_library(
        "processes",
        Placement::Process(PathBuf::from(env!("CARGO_BIN_EXE_tessera"))),
    );
}

/// Through the binary: `tessera train` for 2k steps against k steps and a new process
/// resuming with `--resume` for k more (and another `--seed`, which the checkpoint's
/// replaces), `model` being the job's other arguments.
fn resume_in_a_new_process(what: &str, model: &[&str], k: usize) {
    let scratch = Scratch::new(&format!("resume-cli-{}", what.replace(' ', "-")));
    let (long, short, resumed) = (
        scratch.path("long.safetensors"),
        scratch.path("short.safetensors"),
        scratch.path("resumed.safetensors"),
    );
    let (k_text, two_k) = (k.to_string(), (2 * k).to_string());
    let train_args = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["train".to_string()];
        args.extend(model.iter().map(|s| s.to_string()));
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let run = |label: &str, extra: &[&str]| {
        let args = train_args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_success(&format!("{what}: {label}"), &tessera(&args));
    };
    run(
        "the long run",
        &[
            "--steps",
            &two_k,
            "--seed",
            "7",
            "--checkpoint",
            text(&long),
        ],
    );
    run(
        "the first half",
        &[
            "--steps",
            &k_text,
            "--seed",
            "7",
            "--checkpoint",
            text(&short),
        ],
    );
    run(
        "the resumed half",
        &[
            "--steps",
            &k_text,
            "--resume",
            text(&short),
            "--checkpoint",
            text(&resumed),
            "--seed",
            "99",
        ],
    );
    assert_same_run(what, &long, &resumed, 2 * k as u64);
}

/// Catches: a resume that only works inside the process that wrote the checkpoint (state
/// kept in memory, not in the file), or a command line that does not pass `--resume` and
/// `--checkpoint` through.
#[test]
fn resume_is_exact_in_a_new_process_on_threads() {
    resume_in_a_new_process("threads", &CLI_JOB, 3);
}

/// As above with `--placement process`.
#[test]
fn resume_is_exact_in_a_new_process_with_child_process_devices() {
    let model = [&CLI_JOB[..], &["--placement", "process"]].concat();
    resume_in_a_new_process("processes", &model, 3);
}

/// As above on the firmware in QEMU: the firmware's RNG and velocity state go through the
/// same file.
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn resume_is_exact_in_a_new_process_in_qemu() {
    let firmware = common::firmware();
    let firmware = text(&firmware).to_string();
    resume_in_a_new_process(
        "qemu",
        &[
            "--placement",
            "qemu",
            "--firmware",
            &firmware,
            "--replicas",
            "2",
            "--hidden",
            "8",
            "--samples",
            "300",
            "--batches-per-step",
            "1",
            "--accumulation",
            "4",
        ],
        1,
    );
}

// ---------------------------------------------------------------------------------------
// 3. Refusals
// ---------------------------------------------------------------------------------------

/// A checkpoint file of [`default_mlp`] after two steps, its bytes, and a runtime of the
/// same program in another state to restore into.
struct Refusals {
    scratch: Scratch,
    good: Checkpoint,
    bytes: Vec<u8>,
    target: Runtime,
    target_state: DeviceState,
}

impl Refusals {
    fn new(name: &str) -> Self {
        let scratch = Scratch::new(name);
        let mut source = started(default_mlp(), 1);
        run_steps(&mut source, 0, 2);
        let good = Checkpoint::capture(&mut source, 2, SEED).unwrap();
        let path = scratch.path("good.safetensors");
        good.save(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let mut target = started(default_mlp(), 2);
        run_steps(&mut target, 0, 1);
        let target_state = state(&mut target);
        Self {
            scratch,
            good,
            bytes,
            target,
            target_state,
        }
    }

    /// Loads and restores `bytes`; returns the refusal, after checking it is one line and
    /// the target runtime kept its state.
    fn refuse_bytes(&mut self, what: &str, bytes: &[u8]) -> CheckpointError {
        let path = self.scratch.path("bad.safetensors");
        std::fs::write(&path, bytes).unwrap();
        self.refuse_file(what, &path)
    }

    fn refuse_file(&mut self, what: &str, path: &Path) -> CheckpointError {
        let result = Checkpoint::load(path).and_then(|c| c.restore(&mut self.target));
        let Err(e) = result else {
            panic!("{what}: the checkpoint was accepted");
        };
        assert_one_line(what, &e.to_string());
        assert_same_state(
            &format!("{what}: refused ({e}), yet the runtime changed"),
            &state(&mut self.target),
            &self.target_state,
        );
        e
    }

    /// Saves `c` (a valid file: its checksum is right) and refuses it at restore.
    fn refuse_checkpoint(&mut self, what: &str, c: &Checkpoint) -> CheckpointError {
        let path = self.scratch.path("crafted.safetensors");
        c.save(&path).unwrap();
        assert_same_checkpoint(
            &format!("{what}: the crafted file"),
            &Checkpoint::load(&path).unwrap(),
            c,
        );
        self.refuse_file(what, &path)
    }
}

/// Catches: a truncated file read as a shorter checkpoint (or a panic on a short header)
/// instead of refused.
#[test]
fn a_truncated_checkpoint_is_refused() {
    let mut t = Refusals::new("truncated");
    let len = t.bytes.len();
    let header = header_range(&t.bytes);
    let cuts = [
        0,
        1,
        7,
        8,
        header.start + 1,
        header.end / 2,
        header.end - 1,
        header.end,
        header.end + 1,
        (header.end + len) / 2,
        len - 4,
        len - 1,
    ];
    for cut in cuts {
        let bytes = t.bytes[..cut].to_vec();
        let e = t.refuse_bytes(&format!("cut at {cut} of {len}"), &bytes);
        assert!(
            matches!(
                e,
                CheckpointError::Format(_) | CheckpointError::Claim { .. }
            ),
            "cut at {cut} of {len}: refused as {e:?}, not as an incomplete file"
        );
    }
}

/// Catches: a checksum that does not cover the tensor bytes, a metadata entry, a tensor's
/// name or shape; a decoder that panics on a damaged header. Every byte of the file has
/// one bit flipped in turn: each is refused, but for a flip that changes only the case of
/// a hex digit of the recorded checksum (the same number).
#[test]
fn a_flipped_bit_anywhere_in_a_checkpoint_is_refused() {
    let mut t = Refusals::new("bit-flip");
    let header = header_range(&t.bytes);
    // Targeted: the last byte of the tensor data, and the step in the metadata.
    let mut data = t.bytes.clone();
    let last = data.len() - 1;
    data[last] ^= 0x01;
    let e = t.refuse_bytes("a bit of the tensor data", &data);
    assert!(matches!(e, CheckpointError::Checksum { .. }), "{e:?}");
    assert!(e.to_string().contains("altered"), "{e}");
    let step = metadata_value(&t.bytes, "step");
    let mut meta = t.bytes.clone();
    meta[step.start] ^= 0x01; // "2" → "3"
    let e = t.refuse_bytes("a bit of the step in the metadata", &meta);
    assert!(matches!(e, CheckpointError::Checksum { .. }), "{e:?}");

    // Every byte.
    let checksum = metadata_value(&t.bytes, "checksum");
    let path = t.scratch.path("flipped.safetensors");
    let mut accepted = Vec::new();
    for i in 0..t.bytes.len() {
        let mut bytes = t.bytes.clone();
        bytes[i] ^= 1 << (i % 8);
        std::fs::write(&path, &bytes).unwrap();
        match Checkpoint::load(&path) {
            Err(e) => assert_one_line(&format!("byte {i}"), &e.to_string()),
            Ok(c) => {
                assert!(
                    checksum.contains(&i),
                    "byte {i} (header {header:?}, checksum {checksum:?}) flipped: accepted"
                );
                assert_same_checkpoint(&format!("byte {i} flipped"), &c, &t.good);
                accepted.push(i);
            }
        }
    }
    assert!(
        accepted.len() <= checksum.len(),
        "accepted flips: {accepted:?}"
    );
    // Nothing reached the runtime.
    assert_same_state("after the flips", &state(&mut t.target), &t.target_state);
}

/// Catches: a file of another format version read as this one. The version is checked
/// before the checksum, so the refusal names the versions even though the edit also
/// breaks the checksum; likewise a file of another format is named as such.
#[test]
fn a_checkpoint_of_another_format_version_is_refused() {
    let mut t = Refusals::new("version");
    let version = metadata_value(&t.bytes, "version");
    assert_eq!(&t.bytes[version.clone()], b"1");
    let mut bytes = t.bytes.clone();
    bytes[version.start] = b'2';
    let e = t.refuse_bytes("version 2", &bytes);
    assert!(
        matches!(
            e,
            CheckpointError::Version {
                file: 2,
                supported: 1
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("version 2"), "{e}");

    let format = metadata_value(&t.bytes, "format");
    let mut bytes = t.bytes.clone();
    bytes[format.end - 1] = b'X';
    let e = t.refuse_bytes("another format", &bytes);
    assert!(
        matches!(e, CheckpointError::NotACheckpoint { entry: "format" }),
        "{e:?}"
    );
}

/// Catches: a checkpoint restored into another program — another hidden size, another
/// comm group, another replica count — instead of refused by its fingerprint, with both
/// fingerprints named.
#[test]
fn a_checkpoint_of_another_program_is_refused() {
    let scratch = Scratch::new("other-program");
    let path = scratch.path("other.safetensors");
    let others = [
        (
            "hidden 16",
            mlp(
                CommGroup::All,
                RetrievalMode::OnePerGroup,
                Shard::Balanced,
                16,
                REPLICAS,
            ),
            REPLICAS,
        ),
        (
            "comm consecutive:2",
            mlp(
                CommGroup::Consecutive(2),
                RetrievalMode::OnePerGroup,
                Shard::Balanced,
                HIDDEN,
                REPLICAS,
            ),
            REPLICAS,
        ),
        (
            "2 replicas",
            mlp(
                CommGroup::All,
                RetrievalMode::OnePerGroup,
                Shard::Balanced,
                HIDDEN,
                2,
            ),
            2,
        ),
    ];
    let mut target = started(default_mlp(), 2);
    let before = state(&mut target);
    let mine = fingerprint(&default_mlp(), REPLICAS);
    for (what, program, replicas) in others {
        let mut other = started_with(program.clone(), replicas, DEVICE_MEMORY, 3);
        run_steps(&mut other, 0, 1);
        Checkpoint::capture(&mut other, 1, SEED)
            .unwrap()
            .save(&path)
            .unwrap();
        let theirs = fingerprint(&program, replicas);
        assert_ne!(theirs, mine, "{what}");
        let loaded = Checkpoint::load(&path).unwrap();
        let e = loaded.restore(&mut target).expect_err(what);
        match e {
            CheckpointError::Program { file, program } => {
                assert_eq!((file, program), (theirs, mine), "{what}");
            }
            ref other => panic!("{what}: refused as {other:?}"),
        }
        let message = e.to_string();
        assert_one_line(what, &message);
        assert!(
            message.contains(&format!("{theirs:016x}"))
                && message.contains(&format!("{mine:016x}")),
            "{what}: {message}"
        );
        assert_same_state(
            &format!("{what}: the runtime changed"),
            &state(&mut target),
            &before,
        );
    }
}

/// Catches: a tensor of the wrong shape (a valid file: its checksum is right), a missing
/// tensor or a short RNG state loaded anyway, or refused only after the tensors before it
/// reached the devices; each refusal names the tensor and both shapes.
#[test]
fn a_checkpoint_whose_tensors_do_not_match_is_refused() {
    let mut t = Refusals::new("shapes");
    let reshape = |c: &mut Checkpoint, optimizer: bool, name: &str, shape: &[u32]| {
        let map = if optimizer {
            &mut c.optimizer
        } else {
            &mut c.weights
        };
        let array = map[name].reshaped(shape).unwrap();
        map.insert(name.to_string(), array);
    };

    // w1 is [8, 4] (one group of all replicas), written as [4, 8].
    let mut c = t.good.clone();
    reshape(&mut c, false, "w1", &[4, 8]);
    let e = t.refuse_checkpoint("w1 transposed", &c);
    match &e {
        CheckpointError::Shape {
            tensor,
            expected,
            actual,
            dtype,
        } => {
            assert_eq!(tensor, "w1");
            assert_eq!(expected, &[8, 4]);
            assert_eq!(actual, &[4, 8]);
            assert_eq!(*dtype, DataType::F32);
        }
        other => panic!("refused as {other:?}"),
    }
    let message = e.to_string();
    assert!(
        message.contains("w1") && message.contains("[4, 8]") && message.contains("[8, 4]"),
        "{message}"
    );

    // w2 has two groups: [2, 3, 8]; its velocity written as [6, 8]. The weights before it
    // are all good: none may reach the devices.
    let mut c = t.good.clone();
    reshape(&mut c, true, "w2", &[6, 8]);
    let e = t.refuse_checkpoint("w2's velocity without its group dimension", &c);
    match &e {
        CheckpointError::Shape {
            tensor,
            expected,
            actual,
            ..
        } => {
            assert_eq!(tensor, "optimizer/w2/velocity");
            assert_eq!(expected, &[2, 3, 8]);
            assert_eq!(actual, &[6, 8]);
        }
        other => panic!("refused as {other:?}"),
    }
    assert!(e.to_string().contains("optimizer/w2/velocity"), "{e}");

    let mut c = t.good.clone();
    c.weights.remove("b1");
    let e = t.refuse_checkpoint("no b1", &c);
    assert!(
        matches!(&e, CheckpointError::Missing { tensor } if tensor == "b1"),
        "{e:?}"
    );

    let mut c = t.good.clone();
    c.optimizer.remove("b2");
    let e = t.refuse_checkpoint("no velocity of b2", &c);
    assert!(
        matches!(&e, CheckpointError::Missing { tensor } if tensor == "optimizer/b2/velocity"),
        "{e:?}"
    );

    // A short RNG state: in a file, refused at load (no run writes one); as a value that
    // never went through a file, refused by restore.
    let mut c = t.good.clone();
    c.rng.pop();
    let path = t.scratch.path("short-rng.safetensors");
    c.save(&path).unwrap();
    let e = t.refuse_file("a short RNG state in a file", &path);
    assert!(
        matches!(e, CheckpointError::Impossible { entry: "rng", .. }),
        "{e:?}"
    );
    let e = c.restore(&mut t.target).unwrap_err();
    assert!(
        matches!(
            e,
            CheckpointError::RngState {
                expected: 16,
                actual: 15
            }
        ),
        "{e:?}"
    );
    assert_same_state(
        "a short RNG state restored",
        &state(&mut t.target),
        &t.target_state,
    );

    // A weight no variable has.
    let mut c = t.good.clone();
    let extra = c.weights["b1"].clone();
    c.weights.insert("ghost".to_string(), extra);
    let e = t.refuse_checkpoint("a weight of no variable", &c);
    assert!(e.to_string().contains("ghost"), "{e}");
}

/// Catches: an optimizer tensor of no variable (a valid file: its checksum is right)
/// refused only after the weights were loaded — the contract says a refused checkpoint
/// loads nothing.
#[test]
fn a_checkpoint_with_velocity_of_no_variable_loads_nothing() {
    let mut t = Refusals::new("ghost-velocity");
    let mut c = t.good.clone();
    let extra = c.optimizer["b1"].clone();
    c.optimizer.insert("ghost".to_string(), extra);
    let e = t.refuse_checkpoint("a velocity of no variable", &c);
    assert!(e.to_string().contains("ghost"), "{e}");
}

/// The bytes of [`default_mlp`]'s executable on four threads.
fn executable_bytes() -> (Executable, Vec<u8>) {
    let runtime = started(default_mlp(), 1);
    let exe = runtime.executable();
    let bytes = exe.encode().unwrap();
    assert_eq!(Executable::decode(&bytes).unwrap(), exe);
    (exe, bytes)
}

/// Catches: a truncated, altered, foreign or future executable decoded anyway (or a panic
/// on a short one). Every byte has one bit flipped in turn: a flip in the magic is "not an
/// executable", in the version "another version", anywhere else a checksum mismatch.
#[test]
fn a_damaged_executable_is_refused() {
    let scratch = Scratch::new("executable-damage");
    let (_, good) = executable_bytes();
    let len = good.len();
    let path = scratch.path("bad.tsx");
    for cut in [0, 4, 8, 9, 10, 13, 14, 15, len / 2, len - 4, len - 1] {
        std::fs::write(&path, &good[..cut]).unwrap();
        let e = Executable::load(&path).expect_err("a truncated executable");
        assert_one_line(&format!("cut at {cut}"), &e.to_string());
        match cut {
            0..=7 => assert!(
                matches!(e, ExecutableError::NotAnExecutable),
                "{cut}: {e:?}"
            ),
            // Refused; the kind is not pinned: a file cut inside its version is named
            // "version 0" today, not truncated.
            8..=13 => {}
            _ => assert!(
                matches!(e, ExecutableError::Checksum { .. }),
                "{cut}: {e:?}"
            ),
        }
    }
    for i in 0..len {
        let mut bytes = good.clone();
        bytes[i] ^= 1 << (i % 8);
        let e = Executable::decode(&bytes).expect_err("a flipped executable");
        assert_one_line(&format!("byte {i}"), &e.to_string());
        match i {
            0..=7 => assert!(matches!(e, ExecutableError::NotAnExecutable), "{i}: {e:?}"),
            8..=9 => assert!(matches!(e, ExecutableError::Version { .. }), "{i}: {e:?}"),
            _ => assert!(matches!(e, ExecutableError::Checksum { .. }), "{i}: {e:?}"),
        }
    }
    // Another magic; another version (checked before the checksum).
    let mut bytes = good.clone();
    bytes[..8].copy_from_slice(b"NOTANEXE");
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        Executable::load(&path),
        Err(ExecutableError::NotAnExecutable)
    ));
    let mut bytes = good.clone();
    bytes[8..10].copy_from_slice(&(executable::VERSION + 1).to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let e = Executable::load(&path).expect_err("version 2");
    assert!(
        matches!(
            e,
            ExecutableError::Version {
                file: 2,
                supported: 1
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("version 2"), "{e}");
}

/// Catches: an executable placed on devices other than those it was prepared for (here,
/// with half the memory), which could then run out of memory mid-run.
#[test]
fn an_executable_for_other_devices_is_refused() {
    let (exe, _) = executable_bytes();
    assert_eq!(exe.limits.memory as usize, DEVICE_MEMORY);
    let e = Runtime::load_executable(&exe, &Placement::Thread, DEVICE_MEMORY / 2)
        .expect_err("devices with half the memory");
    match &e {
        RuntimeError::Limits { saved, actual, .. } => {
            assert_eq!(saved.memory as usize, DEVICE_MEMORY);
            assert_eq!(actual.memory as usize, DEVICE_MEMORY / 2);
        }
        other => panic!("refused as {other:?}"),
    }
    assert_one_line("limits", &e.to_string());
}

/// Catches: an executable holding a hand-built program that breaks core's rules (here, a
/// layer reading a variable the program does not have) placed as it was, which the devices
/// could only refuse as a generic bad configuration: it is refused before any device
/// starts (the placement here cannot start one), naming the rule.
#[test]
fn an_executable_with_an_invalid_program_names_the_rule() {
    let (mut exe, _) = executable_bytes();
    exe.program
        .layers
        .insert(0, Layer::Linear { weight: 42 })
        .unwrap();
    let nowhere = Placement::Process(PathBuf::from("/nonexistent/tessera"));
    let e =
        Runtime::load_executable(&exe, &nowhere, DEVICE_MEMORY).expect_err("an invalid program");
    assert!(matches!(e, RuntimeError::Program(_)), "{e:?}");
    assert!(
        e.to_string().contains("42"),
        "the rule names the variable: {e}"
    );
    assert_one_line("invalid program", &e.to_string());
}

/// Catches: an explicit shard layout (its intervals, padding and order) lost or altered on
/// the way through the file, or an executable that places the program differently from
/// preparing it: both runtimes train alike, bit for bit.
#[test]
fn an_executable_with_an_explicit_layout_round_trips_and_runs() {
    let scratch = Scratch::new("executable-explicit");
    let path = scratch.path("explicit.tsx");
    let program = mlp(
        CommGroup::All,
        RetrievalMode::AllReplicas,
        Shard::Explicit,
        HIDDEN,
        REPLICAS,
    );
    assert!(matches!(
        program.variables[0].sharding,
        Sharding::Explicit { .. }
    ));
    let mut prepared = started(program.clone(), 1);
    prepared.executable().save(&path).unwrap();
    let loaded = Executable::load(&path).unwrap();
    assert_eq!(loaded, prepared.executable());
    assert_eq!(loaded.program, program);
    assert_eq!(loaded.replicas as usize, REPLICAS);

    let mut placed =
        Runtime::load_executable(&loaded, &Placement::Thread, DEVICE_MEMORY).expect("it loads");
    assert_eq!(placed.program(), &program);
    assert_eq!(placed.executable(), loaded);
    placed.set_random_seed(SEED).unwrap();
    placed
        .weights_from_host(&initial_weights(&program, REPLICAS, 1))
        .unwrap();
    assert_same_state("before", &state(&mut placed), &state(&mut prepared));
    for step in 0..3 {
        let io = step_io(&program, REPLICAS, step);
        assert_same_arrays(
            &format!("step {step}'s loss"),
            &placed.run(&io).unwrap(),
            &prepared.run(&io).unwrap(),
        );
    }
    assert_same_state("after 3 steps", &state(&mut placed), &state(&mut prepared));
}

// ---------------------------------------------------------------------------------------
// 4. A kill during a save
// ---------------------------------------------------------------------------------------

/// A data file of `samples` samples of `features` values and one of `classes` labels.
fn write_data(path: &Path, samples: usize, features: usize, classes: u32) {
    use safetensors::tensor::TensorView;
    let mut rng = Rng::from_seed(0xda7a);
    let inputs: Vec<u8> = (0..samples * features)
        .flat_map(|_| (rng.next_f32() * 2.0 - 1.0).to_le_bytes())
        .collect();
    let labels: Vec<u8> = (0..samples)
        .flat_map(|_| ((rng.next_u32() % classes) as i32).to_le_bytes())
        .collect();
    let views = [
        (
            "inputs",
            TensorView::new(safetensors::Dtype::F32, vec![samples, features], &inputs).unwrap(),
        ),
        (
            "labels",
            TensorView::new(safetensors::Dtype::I32, vec![samples], &labels).unwrap(),
        ),
    ];
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// `tessera train --steps 400 --every 1 --checkpoint P` killed (SIGKILL) at random moments
/// after it has written a checkpoint; each run after the first resumes from P. The model
/// reads 2048 features into 64 hidden units, each replica its own (`--comm none`), so
/// that a checkpoint is 4 MiB and most of the run is spent saving it: most kills land in
/// a save.
///
/// Catches: a save that writes P in place (a kill mid-write leaves half a file) or that
/// renames before the bytes are complete; a temporary file that takes P's name; a reader
/// that sees half a checkpoint while a save is under way. The moments are drawn from a
/// seed printed on stderr (`TESSERA_TEST_SEED` replays them).
#[test]
fn a_kill_during_a_save_leaves_the_previous_checkpoint() {
    let scratch = Scratch::new("kill");
    let path = scratch.path("run.safetensors");
    let name = "run.safetensors";
    let seed = std::env::var("TESSERA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("kill moments from TESSERA_TEST_SEED={seed}");
    let mut rng = Rng::from_seed(seed);
    let data = scratch.path("data.safetensors");
    write_data(&data, 64, 2048, 3);
    let job = [
        "train",
        "--data",
        text(&data),
        "--comm",
        "none",
        "--shard",
        "none",
        "--hidden",
        "64",
        "--learning-rate",
        "0.01",
        "--batches-per-step",
        "1",
        "--accumulation",
        "1",
    ];
    let mut killed = Vec::new();
    let mut step = 0u64;
    for round in 0..12 {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
        command.args(job).args([
            "--steps",
            "400",
            "--every",
            "1",
            "--checkpoint",
            text(&path),
        ]);
        if round > 0 {
            command.args(["--resume", text(&path)]);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tessera starts");
        killed.push(child.id());
        // Until this run has saved a checkpoint of its own, P holds the last run's (or
        // nothing yet): every read sees a whole checkpoint.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match Checkpoint::load(&path) {
                Ok(c) if c.step > step => break,
                Ok(_) => {}
                Err(CheckpointError::Input(InputError::Io { source, .. }))
                    if round == 0 && source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("round {round}: reading P while it is saved: {e}"),
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "round {round}: the run ended before it was killed"
            );
            assert!(Instant::now() < deadline, "round {round}: no checkpoint");
            std::thread::sleep(Duration::from_millis(1));
        }
        if round % 2 == 1 {
            // In a save: once this run's temporary file (`.P.tmp-PID-N`) exists, within
            // half a millisecond.
            let prefix = format!(".{name}.tmp-{}-", child.id());
            let saving = || {
                std::fs::read_dir(&scratch.0)
                    .unwrap()
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            };
            while !saving() {
                assert!(
                    child.try_wait().unwrap().is_none(),
                    "round {round}: the run ended before it was killed"
                );
                assert!(Instant::now() < deadline, "round {round}: no save");
                std::thread::sleep(Duration::from_micros(100));
            }
            std::thread::sleep(Duration::from_micros(u64::from(rng.next_u32() % 500)));
        } else {
            // Anywhere in a step or a save.
            std::thread::sleep(Duration::from_micros(u64::from(rng.next_u32() % 60_000)));
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "round {round}: killed, yet {status:?}");
        let c = Checkpoint::load(&path)
            .unwrap_or_else(|e| panic!("round {round}: after the kill, P does not load: {e}"));
        assert!(c.step > step, "round {round}: step {} after {step}", c.step);
        eprintln!("round {round}: killed at step {}", c.step);
        step = c.step;
        // Beside P, at most the killed runs' temporary files: never another name.
        for entry in std::fs::read_dir(&scratch.0).unwrap() {
            let file = entry.unwrap().file_name().to_string_lossy().into_owned();
            if file == name || file == "data.safetensors" {
                continue;
            }
            let pid = file
                .strip_prefix(&format!(".{name}.tmp-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            assert!(
                pid.is_some_and(|p| killed.contains(&p)),
                "round {round}: unexpected file {file}"
            );
        }
    }
    let leftovers = std::fs::read_dir(&scratch.0).unwrap().count() - 2;
    eprintln!(
        "{leftovers} of {} kills left a temporary file (killed mid-save)",
        killed.len()
    );
    assert!(
        leftovers > 0,
        "no kill landed in a save: the test proved nothing"
    );
    // The last checkpoint resumes.
    let out = tessera(
        &[
            &job[..],
            &[
                "--steps",
                "1",
                "--resume",
                text(&path),
                "--checkpoint",
                text(&path),
            ],
        ]
        .concat(),
    );
    assert_success("resuming after the kills", &out);
    assert_eq!(Checkpoint::load(&path).unwrap().step, step + 1);
}

// ---------------------------------------------------------------------------------------
// 5. tessera inspect
// ---------------------------------------------------------------------------------------

/// Asserts `tessera inspect` refused with exit status 2, one line on stderr and nothing
/// on stdout.
fn assert_inspect_refused(what: &str, args: &[&str]) -> String {
    let out = tessera(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
    assert_one_line(what, &stderr);
    assert!(stderr.starts_with("error: "), "{what}: {stderr}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert!(out.stdout.is_empty(), "{what}: stdout {:?}", out.stdout);
    stderr
}

/// Catches: a table or JSON report that leaves out or misnames a tensor, its host shape,
/// the step or the fingerprint; an executable's fingerprint that differs from the
/// checkpoint of the same run (computed for the wrong replica count); a corrupt file shown
/// instead of refused.
#[test]
fn inspect_shows_a_checkpoint_and_an_executable() {
    let scratch = Scratch::new("inspect");
    let (checkpoint, exe) = (scratch.path("run.safetensors"), scratch.path("run.tsx"));
    let out = tessera(
        &[
            &["train"][..],
            &CLI_JOB[..],
            &[
                "--steps",
                "2",
                "--seed",
                "7",
                "--checkpoint",
                text(&checkpoint),
                "--save-executable",
                text(&exe),
            ],
        ]
        .concat(),
    );
    assert_success("the run", &out);
    let c = Checkpoint::load(&checkpoint).unwrap();
    let fp = format!("{:016x}", c.fingerprint);
    let tensors: Vec<(String, Vec<u32>)> = c
        .weights
        .iter()
        .map(|(n, a)| (n.clone(), a.shape().to_vec()))
        .chain(
            c.optimizer
                .iter()
                .map(|(n, a)| (format!("optimizer/{n}/velocity"), a.shape().to_vec())),
        )
        .collect();
    assert_eq!(tensors.len(), 8);

    // The table.
    let out = tessera(&["inspect", text(&checkpoint)]);
    assert_success("inspect", &out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("checkpoint") && table.contains(&fp),
        "{table}"
    );
    assert!(table.contains("step 2"), "{table}");
    for (name, shape) in &tensors {
        let shape = format!("{shape:?}");
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name) && l.contains(&shape)),
            "{name} {shape} missing from\n{table}"
        );
    }

    // The JSON.
    let out = tessera(&["inspect", "--json", text(&checkpoint)]);
    assert_success("inspect --json", &out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["kind"], "checkpoint");
    assert_eq!(json["fingerprint"], fp.as_str());
    assert_eq!(json["step"], 2);
    assert_eq!(json["seed"], 7);
    assert_eq!(json["replicas"], 4);
    let listed: Vec<(String, Vec<u32>)> = json["tensors"]
        .as_array()
        .expect("a tensor list")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                serde_json::from_value(t["shape"].clone()).unwrap(),
            )
        })
        .collect();
    let (mut want, mut got) = (tensors.clone(), listed);
    want.sort();
    got.sort();
    assert_eq!(got, want);

    // The executable: the same program on as many replicas, so the same fingerprint.
    let out = tessera(&["inspect", text(&exe)]);
    assert_success("inspect the executable", &out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("executable") && table.contains(&fp),
        "{table}"
    );
    for name in ["w1", "b1", "w2", "b2"] {
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} missing from\n{table}"
        );
    }
    let out = tessera(&["inspect", "--json", text(&exe)]);
    assert_success("inspect --json the executable", &out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["kind"], "executable");
    assert_eq!(json["fingerprint"], fp.as_str());
    assert_eq!(json["replicas"], 4);
    let w1 = json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "w1")
        .expect("w1");
    assert_eq!(w1["shape"], serde_json::json!([8, 2]), "{w1}");

    // Corrupt files.
    for (what, file) in [("checkpoint", &checkpoint), ("executable", &exe)] {
        let mut bytes = std::fs::read(file).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x10;
        let bad = scratch.path(&format!("bad-{what}"));
        std::fs::write(&bad, &bytes).unwrap();
        for json in [false, true] {
            let mut args = vec!["inspect", text(&bad)];
            if json {
                args.push("--json");
            }
            let line = assert_inspect_refused(&format!("a corrupt {what}"), &args);
            assert!(line.contains(text(&bad)), "{line}");
        }
    }
    let missing = scratch.path("missing");
    assert_inspect_refused("a missing file", &["inspect", text(&missing)]);
}

// ---------------------------------------------------------------------------------------
// 6. Command-line errors
// ---------------------------------------------------------------------------------------

/// `tessera train` with `TESSERA_LOG=debug` (a device that starts says "device ready" on
/// stderr): refused with exit status 2 and one line, quickly.
fn assert_train_refused(what: &str, args: &[&str]) -> String {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("train")
        .args(args)
        .env("TESSERA_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .expect("tessera runs");
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
    assert_one_line(what, &stderr);
    assert!(stderr.starts_with("error: "), "{what}: {stderr}");
    assert!(!stderr.contains("device ready"), "{what}: {stderr}");
    assert!(elapsed < Duration::from_secs(5), "{what}: took {elapsed:?}");
    stderr
}

/// Catches: a `--resume` of a missing file or of another program's checkpoint found only
/// after the devices started (or not at all), or reported in more than one line.
#[test]
fn resume_errors_are_one_line_before_any_device_starts() {
    let scratch = Scratch::new("cli-errors");
    let missing = scratch.path("missing.safetensors");
    let process = ["--placement", "process"];

    // The probe works: a run that starts its devices says so.
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(
            [
                &["train"][..],
                &CLI_JOB[..],
                &process[..],
                &["--steps", "1"],
            ]
            .concat(),
        )
        .env("TESSERA_LOG", "debug")
        .output()
        .unwrap();
    assert_success("a valid run", &out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("device ready"));

    let line = assert_train_refused(
        "a missing checkpoint",
        &[
            &CLI_JOB[..],
            &process[..],
            &["--steps", "1", "--resume", text(&missing)],
        ]
        .concat(),
    );
    assert!(
        line.contains("--resume") && line.contains(text(&missing)),
        "{line}"
    );

    // Checkpoints of hidden 16 and hidden 8: resuming the hidden-8 job from the first.
    let (wide, narrow) = (
        scratch.path("hidden16.safetensors"),
        scratch.path("hidden8.safetensors"),
    );
    for (hidden, path) in [("16", &wide), ("8", &narrow)] {
        let mut args = CLI_JOB.to_vec();
        args[3] = hidden; // --hidden
        let out = tessera(
            &[
                &["train"][..],
                &args[..],
                &["--steps", "1", "--checkpoint", text(path)],
            ]
            .concat(),
        );
        assert_success(&format!("hidden {hidden}"), &out);
    }
    let (theirs, mine) = (
        Checkpoint::load(&wide).unwrap().fingerprint,
        Checkpoint::load(&narrow).unwrap().fingerprint,
    );
    let line = assert_train_refused(
        "another program's checkpoint",
        &[
            &CLI_JOB[..],
            &process[..],
            &["--steps", "1", "--resume", text(&wide)],
        ]
        .concat(),
    );
    assert!(
        line.contains("--resume")
            && line.contains(&format!("{theirs:016x}"))
            && line.contains(&format!("{mine:016x}")),
        "{line}"
    );

    // A corrupt checkpoint, likewise.
    let mut bytes = std::fs::read(&narrow).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let corrupt = scratch.path("corrupt.safetensors");
    std::fs::write(&corrupt, bytes).unwrap();
    let line = assert_train_refused(
        "a corrupt checkpoint",
        &[
            &CLI_JOB[..],
            &process[..],
            &["--steps", "1", "--resume", text(&corrupt)],
        ]
        .concat(),
    );
    assert!(line.contains("altered"), "{line}");
}
