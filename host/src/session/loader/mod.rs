//! Sharded loading of safetensors files into a session, as TVM Disco's shard loader does:
//! each tensor of a file becomes one register, the same id on every worker, and each
//! worker's register holds that worker's part of the tensor.
//!
//! # Contract
//!
//! - **Rules.** [`ShardRules`] gives each tensor a [`ShardRule`]. [`ShardRule::Split`]
//!   cuts the tensor into equal parts along one dimension, part *r* to the worker of rank
//!   *r*; the tensor is row-major, so a split on dimension 0 takes contiguous rows and a
//!   split on a later dimension gathers a strided block. [`ShardRule::Replicate`] gives
//!   every worker the whole tensor. A tensor the rules do not name takes the default rule
//!   (replicate, unless [`ShardRules::with_default`] says otherwise). With
//!   [`Scope::Global`] a split spans all the session's workers; with [`Scope::InGroup`]
//!   each group holds the whole tensor, split across its own workers in rank order.
//! - **Presharded files.** [`Session::load_presharded`] takes one file per worker and
//!   gives worker *i* file *i*'s tensors as they are: no worker's data goes anywhere but
//!   to that worker. Every file must hold the same tensor names, each with the same type
//!   and shape (what an even split gives).
//! - **Checked before anything moves.** Every file is opened under the rules of every file
//!   tessera reads ([`crate::input`]: a regular file, never read past its size) and its
//!   header read and checked ([`crate::input::safetensors`]: every size it claims against
//!   the file), and every tensor checked — its element type, its shape, the rule's
//!   dimension and that the dimension divides — before the first register is allocated: a
//!   refused load allocates nothing and sends nothing.
//! - **Room before bytes.** Every register is allocated on every worker, and the workers
//!   answer, before a tensor byte is read: a tensor no worker has room for is refused
//!   before the host reads it.
//! - **Read by ranges.** Each worker's part is read from the file where it lies, part by
//!   part (`part`): the host holds one part at a time, never the file.
//! - **All or nothing.** A load waits for its workers. If one fails (out of memory, a
//!   full register table, a broken link) the error names the tensor and the worker, the
//!   load's registers are freed, and the session stays usable.
//! - **Across MPI ranks** (feature `mpi`), each rank reads only its own workers' parts of
//!   the file, straight into their memory, after rank 0 has checked the header (`across`).
//! - **Errors name the cause.** A [`LoadError`] names the file, the tensor, its shape and
//!   the rule. A truncated or corrupt file is a [`LoadError::Format`], never a panic.
//!
//! Element types are those safetensors and [`DataType`] share: F16, BF16, F32, F64,
//! I8–I64, U8–U64, BOOL, F8_E4M3 and F8_E5M2; any other is a [`LoadError::Dtype`]. Bytes
//! are copied as they are: both sides are little-endian.
//!
//! ```
//! use std::collections::HashMap;
//! use safetensors::{tensor::TensorView, Dtype};
//! use tessera_host::runtime::Placement;
//! use tessera_host::session::loader::ShardRules;
//! use tessera_host::session::{HostValue, Session};
//!
//! // A (2, 4) f32 tensor, saved the way any safetensors writer saves it.
//! let values: Vec<f32> = (0..8).map(|i| i as f32).collect();
//! let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
//! let view = TensorView::new(Dtype::F32, vec![2, 4], &bytes)?;
//! let file = std::env::temp_dir().join(format!("loader-doc-{}.safetensors", std::process::id()));
//! std::fs::write(&file, safetensors::serialize([("w", view)], None)?)?;
//!
//! let session = Session::new(&Placement::Thread, 2, 1, 1 << 20)?;
//! let loaded = session.load_safetensors(&file, &ShardRules::new().split("w", 1))?;
//! std::fs::remove_file(&file)?;
//! let HostValue::Array(part) = session.debug_get(&loaded["w"], 1)? else { panic!() };
//! assert_eq!(part.shape(), &[2, 2]);
//! assert_eq!(part.to_f32().unwrap(), [2.0, 3.0, 6.0, 7.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;

use safetensors::tensor::TensorInfo;
use safetensors::Dtype;
use tessera_core::dtype::DataType;

use super::collective::Scope;
use super::{Command, Register, Session, SessionError, State};
use crate::array::{byte_len, ArrayError, HostArray};
use crate::input::safetensors::{Header, HeaderError};
use crate::input::Input;

#[cfg(feature = "mpi")]
pub(in crate::session) mod across;
mod error;
mod part;

use part::Cut;

pub use error::LoadError;
pub use part::PartError;

/// How one tensor is spread over the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardRule {
    /// Equal parts along dimension `dim`, part *r* to the worker of rank *r*.
    Split {
        /// The dimension cut (0 = the outermost).
        dim: usize,
    },
    /// The whole tensor on every worker.
    #[default]
    Replicate,
}

impl fmt::Display for ShardRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Split { dim } => write!(f, "split on dimension {dim}"),
            Self::Replicate => f.write_str("replicate"),
        }
    }
}

/// A [`ShardRule`] per tensor name, a default rule for the others, and the workers a split
/// spans.
///
/// ```
/// use tessera_host::session::collective::Scope;
/// use tessera_host::session::loader::{ShardRule, ShardRules};
///
/// let rules = ShardRules::new().split("attn.q", 1).split("mlp.up", 0);
/// assert_eq!(rules.rule("attn.q"), ShardRule::Split { dim: 1 });
/// assert_eq!(rules.rule("norm"), ShardRule::Replicate);
/// assert_eq!(rules.scope(), Scope::Global);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRules {
    named: BTreeMap<String, ShardRule>,
    default: ShardRule,
    scope: Scope,
}

impl Default for ShardRules {
    fn default() -> Self {
        Self::new()
    }
}

impl ShardRules {
    /// No named rule: every tensor replicated, splits spanning all workers.
    pub fn new() -> Self {
        Self {
            named: BTreeMap::new(),
            default: ShardRule::Replicate,
            scope: Scope::Global,
        }
    }

    /// Splits `tensor` on dimension `dim`.
    pub fn split(self, tensor: impl Into<String>, dim: usize) -> Self {
        self.with_rule(tensor, ShardRule::Split { dim })
    }

    /// Gives every worker the whole of `tensor`.
    pub fn replicate(self, tensor: impl Into<String>) -> Self {
        self.with_rule(tensor, ShardRule::Replicate)
    }

    /// Gives `tensor` `rule` (replacing an earlier rule for it).
    pub fn with_rule(mut self, tensor: impl Into<String>, rule: ShardRule) -> Self {
        self.named.insert(tensor.into(), rule);
        self
    }

    /// The rule of every tensor not named.
    pub fn with_default(mut self, rule: ShardRule) -> Self {
        self.default = rule;
        self
    }

    /// The workers a split spans: all of them, or each group's own.
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// The rule for `tensor`.
    pub fn rule(&self, tensor: &str) -> ShardRule {
        self.named.get(tensor).copied().unwrap_or(self.default)
    }

    /// The workers a split spans.
    pub fn scope(&self) -> Scope {
        self.scope
    }
}

impl Session {
    /// Loads every tensor of the safetensors file at `path`, spread over the workers by
    /// `rules`; returns a register per tensor name. See the module documentation.
    pub fn load_safetensors(
        &self,
        path: impl AsRef<Path>,
        rules: &ShardRules,
    ) -> Result<HashMap<String, Register>, LoadError> {
        let file = path.as_ref();
        // Across MPI ranks, each rank reads its own workers' parts (see `across`).
        #[cfg(feature = "mpi")]
        if let Some(loaded) = self.load_across_ranks(file, rules)? {
            return Ok(loaded);
        }
        let (input, tensors) = open(file)?;
        let planned = self.plan_file(file, tensors, rules)?;
        self.write_planned(&[input], planned, Writing::FromHost)
    }

    /// Every tensor of `file` (`tensors`) checked under `rules` and planned: the rules
    /// name only tensors the file has, and each rule fits its tensor.
    fn plan_file(
        &self,
        file: &Path,
        tensors: Vec<(String, Described)>,
        rules: &ShardRules,
    ) -> Result<Vec<Planned>, LoadError> {
        for (name, &rule) in &rules.named {
            if !tensors.iter().any(|(n, _)| n == name) {
                return Err(LoadError::UnknownTensor {
                    file: file.to_path_buf(),
                    tensor: name.clone(),
                    rule,
                });
            }
        }
        let (workers, groups) = self.size(file)?;
        let span = match rules.scope {
            Scope::Global => workers,
            Scope::InGroup => workers / groups.max(1),
        }
        .max(1);
        let mut planned = Vec::with_capacity(tensors.len());
        for (name, view) in tensors {
            let rule = rules.rule(&name);
            planned.push(plan_split(file, name, &view, rule, span)?);
        }
        Ok(planned)
    }

    /// Loads presharded files, `paths[i]` holding worker *i*'s part of every tensor; returns
    /// a register per tensor name. See the module documentation.
    pub fn load_presharded<P: AsRef<Path>>(
        &self,
        paths: &[P],
    ) -> Result<HashMap<String, Register>, LoadError> {
        let (workers, _) = self.size(paths.first().map_or(Path::new(""), AsRef::as_ref))?;
        if paths.len() != workers {
            return Err(LoadError::FileCount {
                files: paths.len(),
                workers,
            });
        }
        let files: Vec<&Path> = paths.iter().map(AsRef::as_ref).collect();
        let mut inputs = Vec::with_capacity(workers);
        let mut parsed = Vec::with_capacity(workers);
        for file in &files {
            let (input, tensors) = open(file)?;
            inputs.push(input);
            parsed.push(tensors);
        }
        let mut planned = Vec::new();
        for (name, view) in &parsed[0] {
            let mut first = plan_split(files[0], name.clone(), view, ShardRule::Replicate, 1)?;
            let mut offsets = Vec::with_capacity(workers);
            for (worker, tensors) in parsed.iter().enumerate() {
                let found = tensors.binary_search_by(|(n, _)| n.as_str().cmp(name));
                let Ok(at) = found else {
                    return Err(LoadError::ShardMissing {
                        file: files[worker].to_path_buf(),
                        worker,
                        tensor: name.clone(),
                        other: files[0].to_path_buf(),
                    });
                };
                let other = &tensors[at].1;
                let dtype = element_type(files[worker], name, other.dtype)?;
                if (dtype, &other.shape) != (first.dtype, &view.shape) {
                    return Err(LoadError::ShardMismatch {
                        file: files[worker].to_path_buf(),
                        worker,
                        tensor: name.clone(),
                        found: (dtype, other.shape.clone()),
                        expected: (first.dtype, view.shape.clone()),
                    });
                }
                offsets.push(other.offset);
            }
            first.source = Source::PerWorker(offsets);
            planned.push(first);
        }
        // Every file holds worker 0's names; one holding more has a name worker 0's lacks.
        for (worker, tensors) in parsed.iter().enumerate().skip(1) {
            let lacking = |(n, _): &&(String, _)| {
                parsed[0]
                    .binary_search_by(|(first, _)| first.cmp(n))
                    .is_err()
            };
            if let Some((name, _)) = tensors.iter().find(lacking) {
                return Err(LoadError::ShardMissing {
                    file: files[0].to_path_buf(),
                    worker: 0,
                    tensor: name.clone(),
                    other: files[worker].to_path_buf(),
                });
            }
        }
        self.write_planned(&inputs, planned, Writing::FromHost)
    }

    /// Copies `arrays[i]` from the host to worker *i*, all into one new register (the
    /// same id on every worker). There must be one array per worker; they may differ in
    /// type and shape. Returns once the copies are sent: failures come back at the next
    /// sync, as with [`Session::copy_to_worker0`].
    pub fn copy_to_workers(&self, arrays: &[HostArray]) -> Result<Register, SessionError> {
        let mut state = self.lock()?;
        let workers = state.workers.len();
        if arrays.len() != workers {
            return Err(SessionError::Count {
                what: "arrays (one per worker)",
                expected: workers,
                actual: arrays.len(),
            });
        }
        let id = state.allocate_id()?;
        for (worker, array) in arrays.iter().enumerate() {
            let sent = state.write_host_array(worker, id, array.into());
            if let Err(e) = sent {
                release(&mut state, &[id]);
                return Err(e);
            }
        }
        drop(state);
        Ok(self.handle(id))
    }

    /// The workers and groups, if the session is still up.
    fn size(&self, file: &Path) -> Result<(usize, usize), LoadError> {
        let state = self.lock().map_err(|source| LoadError::Session {
            file: file.to_path_buf(),
            source,
        })?;
        Ok((state.workers.len(), state.num_groups))
    }

    /// Allocates every planned tensor's register on every worker and waits for them, then
    /// fills them (worker `w`'s part from `files[w % files.len()]`, or by the ranks) and
    /// waits again; hands out the registers — or frees them all on a failure.
    fn write_planned(
        &self,
        files: &[Input],
        planned: Vec<Planned>,
        writing: Writing,
    ) -> Result<HashMap<String, Register>, LoadError> {
        let file_of = |worker: usize| files[worker % files.len()].path().to_path_buf();
        let session_error = |source| LoadError::Session {
            file: file_of(0),
            source,
        };
        let mut state = self.lock().map_err(session_error)?;
        let workers = state.workers.len();
        // Earlier failures are reported now, not blamed on this load.
        state.sync_each(0..workers).map_err(session_error)?;
        let mut ids: Vec<u16> = Vec::with_capacity(planned.len());
        if let Err(source) = allocate(&mut state, &planned, &mut ids) {
            abandon(&mut state, &ids);
            return Err(session_error(source));
        }
        // Room on every worker before a byte is read.
        if let Err(source) = state.sync_each(0..workers) {
            release(&mut state, &ids);
            return Err(named(source, &ids, &planned, file_of).unwrap_or_else(session_error));
        }
        let filled = match &writing {
            Writing::FromHost => fill_from_host(&mut state, files, &planned, &ids),
            #[cfg(feature = "mpi")]
            Writing::ByRanks => state
                .fill_by_ranks(files[0].path(), files[0].len(), &planned, &ids)
                .map_err(session_error),
        };
        if let Err(e) = filled {
            abandon(&mut state, &ids);
            return Err(e);
        }
        if let Err(source) = state.sync_each(0..workers) {
            release(&mut state, &ids);
            return Err(named(source, &ids, &planned, file_of).unwrap_or_else(session_error));
        }
        drop(state);
        tracing::debug!(
            file = %file_of(0).display(),
            files = files.len(),
            tensors = planned.len(),
            "loaded safetensors"
        );
        Ok(planned
            .into_iter()
            .zip(ids)
            .map(|(tensor, id)| (tensor.name, self.handle(id)))
            .collect())
    }
}

/// The worker failure in `source` that names one of this load's registers (`ids`, of the
/// tensors `planned`), as an error naming the tensor and the file (`file_of` the worker).
fn named(
    source: SessionError,
    ids: &[u16],
    planned: &[Planned],
    file_of: impl Fn(usize) -> std::path::PathBuf,
) -> Result<LoadError, SessionError> {
    let failed =
        source
            .worker_failures()
            .into_iter()
            .find_map(|(worker, command, _)| match command {
                Command::Alloc(id) | Command::Set(id) => ids
                    .iter()
                    .position(|i| i == id)
                    .map(|at| (worker, planned[at].name.clone())),
                _ => None,
            });
    match failed {
        Some((worker, tensor)) => Ok(LoadError::Worker {
            file: file_of(worker),
            tensor,
            source: Box::new(source),
        }),
        None => Err(source),
    }
}

/// How a load's bytes reach the workers.
enum Writing {
    /// From the host, which reads the files part by part.
    FromHost,
    /// Each rank of a session across MPI ranks reads its workers' parts from the file
    /// itself, into their memory.
    #[cfg(feature = "mpi")]
    ByRanks,
}

/// Allocates a register per planned tensor (its id pushed to `ids` at once, so a failure
/// can free it) on every worker.
fn allocate(
    state: &mut State,
    planned: &[Planned],
    ids: &mut Vec<u16>,
) -> Result<(), SessionError> {
    for tensor in planned {
        let id = state.allocate_id()?;
        ids.push(id);
        let alloc = super::state::alloc_request(id, tensor.dtype, &tensor.shape)?;
        for worker in 0..state.workers.len() {
            state.submit(worker, &alloc, Command::Alloc(id))?;
        }
    }
    Ok(())
}

/// Every worker's part of every planned tensor (registers `ids`) read from `files` and
/// written to its register, part by part: a part shared by several workers (a replicated
/// tensor, or a group's split) is read once for them.
fn fill_from_host(
    state: &mut State,
    files: &[Input],
    planned: &[Planned],
    ids: &[u16],
) -> Result<(), LoadError> {
    let session_error = |worker: usize, source| LoadError::Session {
        file: files[worker % files.len()].path().to_path_buf(),
        source,
    };
    let mut buffer = Vec::new();
    for (tensor, &id) in planned.iter().zip(ids) {
        // The file and the part the buffer holds.
        let mut held = None;
        for worker in 0..state.workers.len() {
            let (file, part) = match &tensor.source {
                Source::Split { cut } => (0, worker % cut.parts.max(1)),
                Source::PerWorker(_) => (worker % files.len(), 0),
            };
            if held != Some((file, part)) {
                tensor.read_part(&files[file], part, worker, &mut buffer)?;
                held = Some((file, part));
            }
            state
                .write_bytes(worker, id, &buffer, None)
                .map_err(|e| session_error(worker, e))?;
        }
    }
    Ok(())
}

/// After a load failed part-way: what was sent is claimed (its outcome overshadowed), so
/// no later sync reports this load's commands, and its registers are freed.
fn abandon(state: &mut State, ids: &[u16]) {
    for worker in 0..state.workers.len() {
        let _ = state.sync(worker);
    }
    release(state, ids);
}

/// Frees `ids` on every worker after a failed load (a failure to free is already
/// overshadowed by the error being returned).
fn release(state: &mut State, ids: &[u16]) {
    for &id in ids {
        if let Err(e) = state.free(id) {
            tracing::warn!(register = id, error = %e, "cannot free a register of a failed load");
        }
    }
}

/// One tensor, checked and ready to write.
struct Planned {
    name: String,
    dtype: DataType,
    /// Each worker's register shape.
    shape: Vec<u32>,
    source: Source,
}

/// Where each worker's bytes lie.
enum Source {
    /// Part `worker % cut.parts` of one tensor of the (first) file.
    Split { cut: Cut },
    /// Worker `w`'s bytes, the whole of its register, at offset `w` of file `w`.
    PerWorker(Vec<u64>),
}

impl Planned {
    /// Part `part` of the tensor, for `worker`, read from `file` into `buffer` (resized to
    /// the part's length, the allocation fallible).
    fn read_part(
        &self,
        file: &Input,
        part: usize,
        worker: usize,
        buffer: &mut Vec<u8>,
    ) -> Result<(), LoadError> {
        let whole;
        let (cut, part) = match &self.source {
            Source::Split { cut } => (cut, part),
            Source::PerWorker(offsets) => {
                // One part, the whole tensor, at this file's own offset.
                whole = Cut {
                    offset: offsets[worker % offsets.len()],
                    shape: self.shape.iter().map(|&d| d as usize).collect(),
                    size: self.dtype.size(),
                    dim: 0,
                    parts: 1,
                };
                (&whole, 0)
            }
        };
        let len = cut.part_len();
        buffer.clear();
        buffer
            .try_reserve_exact(len)
            .map_err(|_| LoadError::HostMemory {
                file: file.path().to_path_buf(),
                tensor: self.name.clone(),
                bytes: len,
            })?;
        buffer.resize(len, 0);
        cut.read(file, part, buffer)
            .map_err(|source| LoadError::Part {
                tensor: self.name.clone(),
                source,
            })
    }
}

/// `file` opened under the input rules, and its tensors (sorted by name, so register ids
/// follow the names) as its checked header describes them.
fn open(file: &Path) -> Result<(Input, Vec<(String, Described)>), LoadError> {
    let input = Input::open(file)?;
    let header = Header::read(&input).map_err(|e| match e {
        HeaderError::Input(e) => LoadError::Input(e),
        HeaderError::Claim {
            path,
            part,
            claimed,
            actual,
        } => LoadError::Claim {
            file: path,
            part,
            claimed,
            actual,
        },
        HeaderError::Format { path, source } => LoadError::Format { file: path, source },
    })?;
    let tensors = header
        .by_name()
        .into_iter()
        .map(|(name, info)| (name, Described::of(&header, info)))
        .collect();
    Ok((input, tensors))
}

/// The tessera type of a safetensors type.
fn element_type(file: &Path, tensor: &str, dtype: Dtype) -> Result<DataType, LoadError> {
    Ok(match dtype {
        Dtype::BOOL => DataType::Bool,
        Dtype::U8 => DataType::U8,
        Dtype::I8 => DataType::I8,
        Dtype::F8_E5M2 => DataType::F8E5M2,
        Dtype::F8_E4M3 => DataType::F8E4M3,
        Dtype::I16 => DataType::I16,
        Dtype::U16 => DataType::U16,
        Dtype::F16 => DataType::F16,
        Dtype::BF16 => DataType::BF16,
        Dtype::I32 => DataType::I32,
        Dtype::U32 => DataType::U32,
        Dtype::F32 => DataType::F32,
        Dtype::F64 => DataType::F64,
        Dtype::I64 => DataType::I64,
        Dtype::U64 => DataType::U64,
        _ => {
            return Err(LoadError::Dtype {
                file: file.to_path_buf(),
                tensor: tensor.into(),
                dtype,
            })
        }
    })
}

/// What planning needs of a tensor: its type, its shape, where its data start in the file
/// and how long they are.
struct Described {
    dtype: Dtype,
    shape: Vec<usize>,
    offset: u64,
    data_len: usize,
}

impl Described {
    fn of(header: &Header, info: &TensorInfo) -> Self {
        Self {
            dtype: info.dtype,
            shape: info.shape.clone(),
            offset: header.start_of(info),
            data_len: info.data_offsets.1 - info.data_offsets.0,
        }
    }
}

/// Checks tensor `name` under `rule` across `span` workers and plans its parts.
fn plan_split(
    file: &Path,
    name: String,
    view: &Described,
    rule: ShardRule,
    span: usize,
) -> Result<Planned, LoadError> {
    let dtype = element_type(file, &name, view.dtype)?;
    let shape = view.shape.clone();
    let (dim, parts) = match rule {
        ShardRule::Replicate => (0, 1),
        ShardRule::Split { dim } => {
            let Some(&extent) = shape.get(dim) else {
                return Err(LoadError::NoDim {
                    file: file.to_path_buf(),
                    tensor: name,
                    shape,
                    rule,
                });
            };
            if extent % span != 0 {
                return Err(LoadError::Indivisible {
                    file: file.to_path_buf(),
                    tensor: name,
                    shape,
                    rule,
                    workers: span,
                });
            }
            (dim, span)
        }
    };
    let checked = shape
        .iter()
        .map(|&d| u32::try_from(d).map_err(|_| ArrayError::Overflow))
        .collect::<Result<Vec<u32>, _>>()
        .and_then(|whole| {
            let expected = byte_len(dtype, &whole)?;
            if view.data_len != expected {
                return Err(ArrayError::Length {
                    expected,
                    actual: view.data_len,
                });
            }
            Ok(whole)
        });
    let mut part_shape = match checked {
        Ok(whole) => whole,
        Err(source) => {
            return Err(LoadError::Shape {
                file: file.to_path_buf(),
                tensor: name,
                shape,
                source,
            })
        }
    };
    if let Some(extent) = part_shape.get_mut(dim) {
        // A part is no larger than the whole dimension, which fits u32 (checked above).
        *extent = (shape[dim] / parts) as u32;
    }
    Ok(Planned {
        name,
        dtype,
        shape: part_shape,
        source: Source::Split {
            cut: Cut {
                offset: view.offset,
                shape,
                size: dtype.size(),
                dim,
                parts,
            },
        },
    })
}
