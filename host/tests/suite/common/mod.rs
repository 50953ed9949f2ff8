//! What the host's end-to-end suites share: the firmware's path, a small model builder (a
//! linear model or a two-layer perceptron, each layer in the comm group, sharding and
//! retrieval mode asked for), deterministic weights and step IO for any program, the
//! comparison with the host reference, and data files for `tessera train --data` in
//! temporary files that remove themselves.
//!
//! Every suite runs in one test process, in parallel. A test that finds its device
//! processes among this process's children (`pgrep -P <pid>`) does so by a `--memory` size
//! no other test gives its devices; the sizes taken:
//!
//! - `dead_device`: `(1 << 16) + 4096 * 47`;
//! - `step_failure`: `(1 << 16) + 4096 * 59` per replica;
//! - `process_share`: `(1 << 16) + 4096 * n` for n = 51, 55 and 57;
//! - `busy_device`: `(4 << 20) + 4096 * 53`;
//! - `session_errors`: `(17 << 20) + 4096 * 41` and `(4 << 20) + 4096 * 43`;
//! - `session_scenarios`: `(4 << 20) + 4096 * n` for scenarios n = 27, 29 and 31.
#![allow(dead_code)] // each suite uses its own part

pub mod pty_board;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{elements, AnchorTensor, Layer, Optimizer, Program, Sharding};
use tessera_core::rng::Rng;
use tessera_core::stream::AnchorReturnType;
use tessera_host::runtime::check::max_relative_error;
use tessera_host::runtime::{StepIo, WeightsIo};
use tessera_host::session::HostArray;
use tessera_host::train::{DataSource, TrainJob};

/// The firmware ELF: `$TESSERA_FIRMWARE`, or the release build in this workspace. A QEMU
/// test that cannot find it fails, never skips.
pub fn firmware() -> PathBuf {
    let path = std::env::var_os("TESSERA_FIRMWARE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/thumbv7em-none-eabihf/firmware/tessera-firmware")
        });
    assert!(
        path.exists(),
        "the QEMU test cannot run: no firmware at {}; build it with `cargo build -p \
         tessera-firmware-sim --target thumbv7em-none-eabihf --features firmware --profile firmware` \
         (tests/ci.sh does)",
        path.display()
    );
    path
}

/// The firmware ELF built with the custom kernel example's kernel (feature `custom-kernel`):
/// `$TESSERA_CUSTOM_FIRMWARE`, or where tests/ci.sh puts it in this workspace. A QEMU test
/// that cannot find it fails, never skips.
pub fn custom_firmware() -> PathBuf {
    let path = std::env::var_os("TESSERA_CUSTOM_FIRMWARE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/thumbv7em-none-eabihf/firmware/tessera-firmware-custom-kernel")
        });
    assert!(
        path.exists(),
        "the QEMU test cannot run: no firmware with the custom kernel at {}; build it with \
         `cargo build -p tessera-firmware-sim --target thumbv7em-none-eabihf --features \
         custom-kernel --profile firmware` and copy it there (tests/ci.sh does)",
        path.display()
    );
    path
}

/// Held by every QEMU test (each runs four emulated boards flat out), so that no two run
/// together. Every suite shares this one process now; as separate binaries, QEMU tests of
/// different suites never ran side by side, and a QEMU job beside another on two busy cores
/// missed its link deadlines (`train_cli::the_default_job_passes_in_qemu`: "device 0 did
/// not answer a FIFO write after 8 attempts", once in three runs).
pub fn exclusive() -> MutexGuard<'static, ()> {
    static EXCLUSIVE: Mutex<()> = Mutex::new(());
    // A test that failed while holding it says so itself; the next one may still run.
    EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Deterministic data in `[-1, 1)`: value `i` of the array called `salt`.
pub fn value(salt: u64, i: usize) -> f32 {
    Rng::from_seed(salt.wrapping_mul(1_000_003).wrapping_add(i as u64)).next_f32() * 2.0 - 1.0
}

/// Where one dense layer's weight and bias live.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    /// The comm group of the weight and the bias.
    pub comm: CommGroup,
    /// How the weight is split across its group (the bias is never sharded).
    pub sharding: Sharding,
    /// How the weight and the bias come back to the host.
    pub retrieval: RetrievalMode,
}

impl Placed {
    /// In `comm`, unsharded, one row per group.
    pub fn comm(comm: CommGroup) -> Self {
        Self {
            comm,
            sharding: Sharding::None,
            retrieval: RetrievalMode::OnePerGroup,
        }
    }

    /// Sharded as `sharding` across its group.
    pub fn sharded(mut self, sharding: Sharding) -> Self {
        self.sharding = sharding;
        self
    }

    /// Coming back as `retrieval` says.
    pub fn returning(mut self, retrieval: RetrievalMode) -> Self {
        self.retrieval = retrieval;
        self
    }
}

/// The model's loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Softmax cross-entropy over an `int32` stream `label` of one class per sample.
    CrossEntropy,
    /// Mean squared error against an `f32` stream `target` of `outputs` values per sample.
    MeanSquared,
}

/// A small model, as a core [`Program`]:
///
/// - linear (`hidden: None`): `x → Dropout → Linear(w1) → Bias(b1) → loss`;
/// - two layers: `x → Linear(w1) → Bias(b1) → ReLU → Dropout → Linear(w2) → Bias(b2) →
///   loss`, `w1`/`b1` placed as `first` and `w2`/`b2` as `second`.
///
/// The dropout layer is left out when its rate is 0. The input stream is `x` (`f32`,
/// `inputs` values per sample).
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Values per input sample.
    pub inputs: u32,
    /// Hidden units of a two-layer model; `None`: a linear model.
    pub hidden: Option<u32>,
    /// Outputs (classes of a cross-entropy).
    pub outputs: u32,
    /// The first layer's placement.
    pub first: Placed,
    /// The second layer's placement (two-layer models only).
    pub second: Placed,
    /// Dropout rate (0: no dropout layer).
    pub dropout: f32,
    /// The loss.
    pub loss: Loss,
    /// Batches per step.
    pub batches_per_step: u32,
    /// Micro-batches per batch.
    pub accumulation: u32,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// The anchored tensors and their return types.
    pub anchors: Vec<(AnchorTensor, AnchorReturnType)>,
    /// Whether the devices count their work.
    pub instrumented: bool,
}

impl Model {
    /// A linear model of `inputs` → `outputs`, trained with an MSE loss by plain SGD in
    /// one batch of one micro-batch per step, every replica in one group, the loss
    /// anchored every micro-batch; the fields are public for the rest.
    pub fn linear(inputs: u32, outputs: u32) -> Self {
        Self {
            inputs,
            hidden: None,
            outputs,
            first: Placed::comm(CommGroup::All),
            second: Placed::comm(CommGroup::All),
            dropout: 0.0,
            loss: Loss::MeanSquared,
            batches_per_step: 1,
            accumulation: 1,
            optimizer: Optimizer::Sgd { learning_rate: 0.1 },
            anchors: vec![(AnchorTensor::Loss, AnchorReturnType::All)],
            instrumented: false,
        }
    }

    /// A two-layer perceptron: like [`Model::linear`] with `hidden` hidden units.
    pub fn mlp(inputs: u32, hidden: u32, outputs: u32) -> Self {
        Self {
            hidden: Some(hidden),
            ..Self::linear(inputs, outputs)
        }
    }

    /// The program (panics when it outgrows a capacity: a bug in the test).
    pub fn program(&self) -> Program {
        let mut p = Program::new(self.batches_per_step, self.accumulation, self.optimizer);
        p.instrumented = self.instrumented;
        p.input = p
            .add_stream("x", DataType::F32, &[self.inputs], false)
            .unwrap();
        let loss = match self.loss {
            Loss::CrossEntropy => Layer::SoftmaxCrossEntropy {
                labels: p.add_stream("label", DataType::I32, &[1], false).unwrap(),
            },
            Loss::MeanSquared => Layer::MeanSquaredError {
                targets: p
                    .add_stream("target", DataType::F32, &[self.outputs], false)
                    .unwrap(),
            },
        };
        fn add(p: &mut Program, name: &str, shape: &[u32], placed: &Placed, shard: bool) -> u8 {
            let sharding = if shard {
                placed.sharding.clone()
            } else {
                Sharding::None
            };
            let grouping = GroupingSpec::Comm(placed.comm);
            p.add_variable(name, shape, grouping, placed.retrieval, sharding)
                .unwrap()
        }
        let dropout = (self.dropout > 0.0).then_some(Layer::Dropout { rate: self.dropout });
        let mut layers = Vec::new();
        match self.hidden {
            None => {
                let w1 = add(
                    &mut p,
                    "w1",
                    &[self.outputs, self.inputs],
                    &self.first,
                    true,
                );
                let b1 = add(&mut p, "b1", &[self.outputs], &self.first, false);
                layers.extend(dropout);
                layers.extend([Layer::Linear { weight: w1 }, Layer::Bias { bias: b1 }]);
            }
            Some(h) => {
                let w1 = add(&mut p, "w1", &[h, self.inputs], &self.first, true);
                let b1 = add(&mut p, "b1", &[h], &self.first, false);
                let w2 = add(&mut p, "w2", &[self.outputs, h], &self.second, true);
                let b2 = add(&mut p, "b2", &[self.outputs], &self.second, false);
                layers.extend([
                    Layer::Linear { weight: w1 },
                    Layer::Bias { bias: b1 },
                    Layer::Relu,
                ]);
                layers.extend(dropout);
                layers.extend([Layer::Linear { weight: w2 }, Layer::Bias { bias: b2 }]);
            }
        }
        layers.push(loss);
        for layer in layers {
            p.add_layer(layer).unwrap();
        }
        for &(tensor, return_type) in &self.anchors {
            p.add_anchor(tensor, return_type).unwrap();
        }
        p
    }
}

/// A small `tessera train` job on device threads: 4 replicas, 8 hidden units, 2 batches of 2
/// micro-batches per step, 300 spiral samples. Suites change what they test with `..`.
pub fn small_train_job(steps: usize) -> TrainJob {
    TrainJob {
        hidden: 8,
        accumulation: 2,
        steps,
        learning_rate: 0.2,
        data: DataSource::Spirals {
            samples: 300,
            classes: 3,
        },
        seed: 7,
        ..TrainJob::default()
    }
}

/// Deterministic starting weights for every variable of `program` on `replicas` replicas,
/// in their host shapes (a group dimension first when a variable has several groups; each
/// group starts from its own values), from `salt`.
pub fn initial_weights(program: &Program, replicas: usize, salt: u64) -> WeightsIo {
    program
        .variables
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let groups = program.settings(i, replicas).unwrap().group_count();
            let n = elements(&v.shape).unwrap();
            let values: Vec<f32> = (0..groups * n)
                .map(|k| 0.5 * value(salt.wrapping_add(i as u64), k))
                .collect();
            let mut shape = v.shape.to_vec();
            if groups > 1 {
                shape.insert(0, groups as u32);
            }
            let array = HostArray::from_f32(&shape, &values).unwrap();
            (v.name.to_string(), array)
        })
        .collect()
}

/// Deterministic arrays for one step of `program` on `replicas` replicas, one per stream,
/// from `salt`: `[samples, …sample]` with `samples = bps·af × replicas` (`× 1` for a
/// broadcast stream). The labels a cross-entropy reads are `int64` classes (the runtime
/// narrows them to the stream's `int32`, checking each); every other stream holds `f32`
/// values in `[-1, 1)`.
pub fn step_io(program: &Program, replicas: usize, salt: u64) -> StepIo {
    let micro_batches = (program.batches_per_step * program.accumulation) as usize;
    let classes = program.output_width().unwrap();
    let labels = match program.layers.last() {
        Some(&Layer::SoftmaxCrossEntropy { labels }) => Some(usize::from(labels)),
        _ => None,
    };
    program
        .streams
        .iter()
        .enumerate()
        .map(|(k, s)| {
            // Every micro-batch holds `micro_batch_size` samples of every stream.
            let samples = micro_batches
                * if s.broadcast { 1 } else { replicas }
                * program.micro_batch_size as usize;
            let mut shape = vec![samples as u32];
            shape.extend_from_slice(&s.sample);
            let n = samples * elements(&s.sample).unwrap();
            let salt = salt.wrapping_mul(31).wrapping_add(k as u64);
            let array = if labels == Some(k) {
                let values: Vec<i64> = (0..n)
                    .map(|i| ((value(salt, i) + 1.0) / 2.0 * classes as f32) as i64)
                    .map(|c| c.min(classes as i64 - 1))
                    .collect();
                HostArray::from_i64(&shape, &values).unwrap()
            } else {
                let values: Vec<f32> = (0..n).map(|i| value(salt, i)).collect();
                HostArray::from_f32(&shape, &values).unwrap()
            };
            (s.name.to_string(), array)
        })
        .collect()
}

/// Asserts that `device` (`f32`) is within `tolerance` of `reference`, NaN, infinities and
/// a different number of values failing; `what` names it in the message.
pub fn assert_close(what: &str, device: &HostArray, reference: &[f64], tolerance: f64) {
    let values = device
        .to_f32()
        .unwrap_or_else(|| panic!("{what}: not f32 but {}", device.dtype()));
    match max_relative_error(&values, reference) {
        Ok(error) => assert!(
            error < tolerance,
            "{what} differs from the reference by {error:e} (tolerance {tolerance:e})"
        ),
        Err(e) => panic!("{what} cannot be compared with the reference: {e}"),
    }
}

/// The shape of `array` as `usize`s.
pub fn shape_of(array: &HostArray) -> Vec<usize> {
    array.shape().iter().map(|&d| d as usize).collect()
}

/// A data file for `tessera train --data`: a safetensors file holding `inputs` (`f32`,
/// shaped `inputs_shape`) and `labels` (`int64`, `[labels.len()]`), written by hand (an
/// 8-byte header length, the JSON header, the bytes).
pub fn write_safetensors(path: &Path, inputs_shape: &[usize], inputs: &[f32], labels: &[i64]) {
    let inputs_bytes: Vec<u8> = inputs.iter().flat_map(|v| v.to_le_bytes()).collect();
    let labels_bytes: Vec<u8> = labels.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (a, b) = (inputs_bytes.len(), inputs_bytes.len() + labels_bytes.len());
    let header = format!(
        r#"{{"inputs":{{"dtype":"F32","shape":{inputs_shape:?},"data_offsets":[0,{a}]}},"labels":{{"dtype":"I64","shape":[{}],"data_offsets":[{a},{b}]}}}}"#,
        labels.len()
    );
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend(inputs_bytes);
    file.extend(labels_bytes);
    std::fs::write(path, file).unwrap();
}

/// A file of this test process's own under the temporary directory, removed when dropped.
pub struct TempFile(PathBuf);

impl TempFile {
    /// `name` under the temporary directory, prefixed with this process's id.
    pub fn new(name: &str) -> Self {
        Self(std::env::temp_dir().join(format!("tessera-test-{}-{name}", std::process::id())))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Its path as an argument.
    pub fn arg(&self) -> &str {
        self.0
            .to_str()
            .expect("the temporary directory's path is UTF-8")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

/// This test process's children whose command line matches `pattern` (`pgrep -P <pid> -f
/// <pattern>`), by pid.
pub fn children_matching(pattern: &str) -> Vec<u32> {
    let out = std::process::Command::new("pgrep")
        .args(["-P", &std::process::id().to_string(), "-f", pattern])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// This test process's device processes for `replica` (any replica: `None`) started with
/// `memory` bytes — a size of the test's own (see the module documentation).
pub fn devices_with_memory(replica: Option<u32>, memory: usize) -> Vec<u32> {
    let replica = replica.map_or("[0-9]+".to_string(), |r| r.to_string());
    children_matching(&format!(
        "tessera device --replica {replica} --memory {memory} "
    ))
}
