//! Checkpoints: a training run's whole state in one safetensors file, to stop and resume
//! bit for bit.
//!
//! # What a checkpoint holds
//!
//! - one tensor per variable, named as the variable, in its **host shape**: its shape, with
//!   the group dimension first when it has several groups (one value per group, read from
//!   each group's first replica whatever the retrieval mode). Both rules are core's, called
//!   here, not restated: `VariableSettings::host_shape` and `WeightLayout::downsample`;
//! - the optimizer's state as tensors of their own, `optimizer/NAME/velocity`, in the same
//!   shapes (only for a program whose optimizer keeps one);
//! - metadata: the format and its version, the program's [`fingerprint`], the replicas, the
//!   steps trained so far, the random seed, every replica's RNG state, the grouping and
//!   shard layout of each variable (for people and `tessera inspect`: loading checks the
//!   fingerprint, which covers them), what the run trained on (its data's sample count and
//!   fingerprint, [`DataRecord`], when the run recorded it), and a CRC-32 over all of the
//!   above and every tensor's name, type, shape and bytes.
//!
//! # Contract
//!
//! - **Atomic save, of a regular file only.** The file is written beside its destination
//!   under a temporary name, flushed to disk, and renamed over the destination: a save
//!   interrupted at any point leaves the previous checkpoint, or none, never half of one.
//!   The destination must be absent or a regular file (a symbolic link is refused, not
//!   followed), and no temporary outlives its save ([`crate::atomic`] states the rules).
//! - **Same state, same bytes**: two saves of one checkpoint are byte-identical.
//! - **Checked load.** [`Checkpoint::load`] reads only a regular file, never allocates more
//!   than the file holds, and refuses a file that is truncated, lies about its sizes,
//!   altered (the checksum), of another format version, or holds a value no run writes
//!   (the rules are in `read.rs`); [`Checkpoint::load_for`] also checks the program's
//!   fingerprint and every tensor's shape from the header, before reading any tensor.
//!   [`Checkpoint::restore`] refuses one made for another program (the fingerprints
//!   differ) or whose tensors do not match the program (naming the tensor and both
//!   shapes) or that holds a value no run trains from (NaN, an infinity, a magnitude of
//!   2^64 or more: core's `finite` rule, [`CheckpointError::BadValue`], checked by
//!   [`Checkpoint::load`] too). Every check passes before anything reaches a device: a
//!   refused checkpoint loads nothing.
//! - **Exact resume.** Weights, optimizer state and RNG state are everything a device keeps
//!   between steps, so a run resumed from a checkpoint continues exactly as the run that
//!   wrote it would have (the data position is the step count).

mod error;
mod format;
mod read;

use std::collections::BTreeMap;
use std::path::Path;

use tessera_core::grouping::RetrievalMode;
use tessera_core::program::Program;
use tessera_core::transfer::InstanceWindow;

pub use error::CheckpointError;

use crate::array::HostArray;
use crate::runtime::{weights, Runtime, RuntimeError, WeightsIo, RNG_WORDS};

/// The file format's name, in its metadata.
pub const FORMAT: &str = "tessera-checkpoint";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;
/// The largest step count a checkpoint may hold: 2^48 steps, nine years at a million steps
/// a second. A larger one was not written by a run, and with it every count that follows
/// (steps still to train, data positions) stays far from overflowing.
pub const MAX_STEP: u64 = 1 << 48;

/// What a run trained on: resuming on other data would continue another run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRecord {
    /// Samples in the data.
    pub samples: u64,
    /// A fingerprint of the samples: CRC-64 of every input and label as the run holds them.
    pub fingerprint: u64,
}

/// What a checkpoint holds, without its tensors' values (what `tessera inspect` shows).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The program's [`fingerprint`].
    pub fingerprint: u64,
    /// Replicas of the run.
    pub replicas: usize,
    /// Steps trained so far.
    pub step: u64,
    /// The random seed.
    pub seed: u64,
    /// Each variable's grouping and shard layout, in words, by name.
    pub layouts: BTreeMap<String, String>,
    /// What the run trained on, when it recorded it.
    pub data: Option<DataRecord>,
    /// Every tensor: its name, type and shape, in file order.
    pub tensors: Vec<(String, tessera_core::dtype::DataType, Vec<u32>)>,
}

/// A training run's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The program's [`fingerprint`].
    pub fingerprint: u64,
    /// Replicas of the run.
    pub replicas: usize,
    /// Steps trained so far.
    pub step: u64,
    /// The random seed.
    pub seed: u64,
    /// Every replica's RNG state, concatenated in replica order.
    pub rng: Vec<u32>,
    /// Every variable in its host shape.
    pub weights: WeightsIo,
    /// Every variable's optimizer state in its host shape (empty for plain SGD).
    pub optimizer: WeightsIo,
    /// Each variable's grouping and shard layout, in words (metadata for people), by name.
    pub layouts: BTreeMap<String, String>,
    /// What the run trained on ([`capture`](Self::capture) leaves it to the caller: the
    /// runtime does not know the data).
    pub data: Option<DataRecord>,
}

/// A 64-bit fingerprint of `program` prepared on `replicas` replicas: CRC-64 of its wire
/// encoding and the replica count. Two runs share a fingerprint exactly when they run the
/// same program on as many replicas. A program that does not encode has none
/// ([`CheckpointError::Fingerprint`]).
pub fn fingerprint(program: &Program, replicas: usize) -> Result<u64, CheckpointError> {
    const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_XZ);
    let encoding = postcard::to_allocvec(program).map_err(CheckpointError::Fingerprint)?;
    let mut digest = CRC64.digest();
    digest.update(&encoding);
    digest.update(&(replicas as u64).to_le_bytes());
    Ok(digest.finalize())
}

impl Checkpoint {
    /// The state of `runtime` after `step` steps of a run seeded with `seed`. The runtime's
    /// failures are [`CheckpointError::Runtime`].
    pub fn capture(runtime: &mut Runtime, step: u64, seed: u64) -> Result<Self, CheckpointError> {
        let program = runtime.program().clone();
        let replicas = runtime.replicas();
        let fingerprint = fingerprint(&program, replicas)?;
        let returned = runtime.weights_to_host()?;
        let velocity = runtime.optimizer_state_to_host()?;
        Ok(Self {
            fingerprint,
            replicas,
            step,
            seed,
            rng: runtime.rng_state()?,
            weights: host_shaped(&program, replicas, returned)?,
            optimizer: host_shaped(&program, replicas, velocity)?,
            layouts: layouts(&program, replicas),
            data: None,
        })
    }

    /// Checks this checkpoint against `runtime`'s program, then loads its weights,
    /// optimizer state, seed and RNG state (in that order, after every check).
    pub fn restore(&self, runtime: &mut Runtime) -> Result<(), CheckpointError> {
        let program = runtime.program().clone();
        let replicas = runtime.replicas();
        let expected = fingerprint(&program, replicas)?;
        if self.fingerprint != expected {
            return Err(CheckpointError::Program {
                file: self.fingerprint,
                program: expected,
            });
        }
        let words = RNG_WORDS * replicas;
        if self.rng.len() != words {
            return Err(CheckpointError::RngState {
                expected: words,
                actual: self.rng.len(),
            });
        }
        // Every tensor must belong to a variable: an extra one means another program.
        let velocity = program.optimizer.has_velocity();
        let strangers = self
            .weights
            .keys()
            .map(|n| (n.clone(), false))
            .chain(self.optimizer.keys().map(|n| (n.clone(), true)));
        for (name, optimizer) in strangers {
            if program.variable_index(&name).is_none() || (optimizer && !velocity) {
                let tensor = if optimizer {
                    format::velocity_name(&name)
                } else {
                    name
                };
                return Err(CheckpointError::Unexpected { tensor });
            }
        }
        for (i, v) in program.variables.iter().enumerate() {
            let shape = host_shape(&program, replicas, i)?;
            check_tensor(&self.weights, v.name.as_str(), &shape)?;
            if program.optimizer.has_velocity() {
                check_tensor(&self.optimizer, v.name.as_str(), &shape)
                    .map_err(|e| e.in_optimizer_state())?;
            }
        }
        runtime.weights_from_host(&self.weights)?;
        if program.optimizer.has_velocity() {
            runtime.optimizer_state_from_host(&self.optimizer)?;
        }
        runtime.set_random_seed(self.seed)?;
        runtime.set_rng_state(&self.rng)?;
        Ok(())
    }

    /// Writes the checkpoint to `path`, atomically (see the module's contract).
    pub fn save(&self, path: &Path) -> Result<(), CheckpointError> {
        format::save(self, path)
    }

    /// Reads a checkpoint, checking its sizes, format, version, checksum and values.
    pub fn load(path: &Path) -> Result<Self, CheckpointError> {
        read::load(path, None)
    }

    /// Reads a checkpoint for `program` on `replicas` replicas: as [`load`](Self::load),
    /// and the fingerprint and every tensor's type and shape are checked from the header,
    /// before any tensor is read (so none is allocated larger than its variable).
    pub fn load_for(
        path: &Path,
        program: &Program,
        replicas: usize,
    ) -> Result<Self, CheckpointError> {
        let mut tensors = BTreeMap::new();
        for (i, v) in program.variables.iter().enumerate() {
            let shape = host_shape(program, replicas, i)?;
            if program.optimizer.has_velocity() {
                tensors.insert(format::velocity_name(v.name.as_str()), shape.clone());
            }
            tensors.insert(v.name.to_string(), shape);
        }
        let expected = read::Expected {
            fingerprint: fingerprint(program, replicas)?,
            tensors,
        };
        read::load(path, Some(&expected))
    }

    /// Checks a checkpoint as [`load`](Self::load) does without holding its tensors, and
    /// says what it holds.
    pub fn summary(path: &Path) -> Result<Summary, CheckpointError> {
        read::scan(path)
    }
}

/// Variable `index`'s host shape: core's rule (`VariableSettings::host_shape`), as the
/// runtime takes weights.
fn host_shape(program: &Program, replicas: usize, index: usize) -> Result<Vec<u32>, RuntimeError> {
    let shape = weights::shape_on_host(program, replicas, index, false)?;
    // Dimensions of a variable and group counts (at most the replicas) fit in 32 bits.
    Ok(shape.into_iter().map(|d| d as u32).collect())
}

/// `arrays` (returned shapes) in host shapes: with [`RetrievalMode::AllReplicas`], each
/// group's row is its representative's (first replica's), kept by core's
/// `WeightLayout::downsample`.
fn host_shaped(
    program: &Program,
    replicas: usize,
    arrays: WeightsIo,
) -> Result<WeightsIo, RuntimeError> {
    let mut out = WeightsIo::new();
    for (name, array) in arrays {
        let Some(index) = program.variable_index(&name) else {
            continue;
        };
        let shape = host_shape(program, replicas, index)?;
        let layout = weights::layout(program, replicas, InstanceWindow::whole(replicas), index)?;
        let bytes = match layout.settings().retrieval() {
            RetrievalMode::OnePerGroup => array.bytes().to_vec(),
            RetrievalMode::AllReplicas => {
                let mut rows = crate::pages::zeroed(layout.from_host_bytes()).map_err(|e| {
                    RuntimeError::HostMemory {
                        name: name.clone(),
                        bytes: e.bytes,
                    }
                })?;
                layout
                    .downsample(array.bytes(), &mut rows)
                    .map_err(|e| weights::transfer_error(&name, e, |never| match never {}))?;
                rows
            }
        };
        let len = bytes.len();
        let array =
            HostArray::new(array.dtype(), &shape, bytes).map_err(|_| RuntimeError::Bytes {
                name: name.clone(),
                expected: shape.iter().map(|&d| d as usize).product::<usize>() * 4,
                actual: len,
                what: "host buffer",
            })?;
        out.insert(name, array);
    }
    Ok(out)
}

/// Each variable's grouping and shard layout, in words.
fn layouts(program: &Program, replicas: usize) -> BTreeMap<String, String> {
    program
        .variables
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name.to_string(), describe_variable(program, replicas, i)))
        .collect()
}

/// Variable `index`'s grouping, retrieval mode and shard layout, in words (what
/// checkpoints record and `tessera inspect` shows).
pub fn describe_variable(program: &Program, replicas: usize, index: usize) -> String {
    let grouping = program
        .settings(index, replicas)
        .map(|s| describe(s.grouping()))
        .unwrap_or_else(|e| format!("invalid: {e}"));
    let shard = match program.shard_layout(index, replicas) {
        Ok(Some(layout)) => {
            let mut text = format!(
                "{} over {} shards of {} elements",
                layout.kind(),
                layout.domain(),
                layout.per_replica()
            );
            if layout.kind() == tessera_core::shard::LayoutKind::Explicit {
                for r in layout.intervals() {
                    text.push_str(&format!(" [{}, {})", r.begin, r.end));
                }
            }
            text
        }
        Ok(None) => "not sharded".to_string(),
        Err(e) => format!("invalid: {e}"),
    };
    let retrieval = program
        .variables
        .get(index)
        .map(|v| v.retrieval.to_string())
        .unwrap_or_default();
    format!("{grouping}, {retrieval}, {shard}")
}

/// A grouping in words: its comm group when it has one, then its groups.
pub fn describe(grouping: &tessera_core::grouping::ReplicaGrouping) -> String {
    let groups = format!(
        "{} group(s) of {} (stride {})",
        grouping.num_groups(),
        grouping.group_size(),
        grouping.stride()
    );
    match tessera_core::grouping::CommGroup::from_grouping(grouping) {
        Ok(comm) => format!("{comm}: {groups}"),
        Err(_) => groups,
    }
}

/// `arrays[name]` exists, is `f32` and shaped `shape`.
fn check_tensor(arrays: &WeightsIo, name: &str, shape: &[u32]) -> Result<(), CheckpointError> {
    let array = arrays.get(name).ok_or_else(|| CheckpointError::Missing {
        tensor: name.to_string(),
    })?;
    if array.dtype() != tessera_core::dtype::DataType::F32 || array.shape() != shape {
        return Err(CheckpointError::Shape {
            tensor: name.to_string(),
            expected: shape.to_vec(),
            actual: array.shape().to_vec(),
            dtype: array.dtype(),
        });
    }
    check_values(name, array)
}

/// Every value of the `f32` tensor `array` (named `name`) one a run trains from (core's
/// `finite` rule).
fn check_values(name: &str, array: &HostArray) -> Result<(), CheckpointError> {
    if array.dtype() != tessera_core::dtype::DataType::F32 {
        return Ok(());
    }
    match tessera_core::finite::first_unfit(array.bytes()) {
        None => Ok(()),
        Some((flat, value)) => Err(CheckpointError::BadValue {
            tensor: name.to_string(),
            index: crate::runtime::values::index_in(array.shape(), flat),
            value,
        }),
    }
}
