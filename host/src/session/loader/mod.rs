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
//!   the file, straight into their memory, after rank 0 has checked the header (the
//!   group's fill across ranks, `transport::group::ranks`).
//! - **Errors name the cause.** A [`LoadError`] names the file, the tensor, its shape and
//!   the rule. A truncated or corrupt file is a [`LoadError::Format`], never a panic.
//!
//! Element types are those safetensors and [`DataType`](tessera_core::dtype::DataType)
//! share: F16, BF16, F32, F64, I8–I64, U8–U64, BOOL, F8_E4M3 and F8_E5M2; any other is a
//! [`LoadError::Dtype`]. Bytes are copied as they are: both sides are little-endian.
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

use super::collective::Scope;
use super::{Register, Session, SessionError};
use crate::array::HostArray;

mod error;
mod part;
mod plan;
mod write;

use crate::trace::traced;
use plan::{element_type, open, plan_split, Described, Planned, Source};
use write::release;

pub use error::LoadError;

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
        let _traced = traced!("load_safetensors");
        let file = path.as_ref();
        let (input, tensors) = open(file)?;
        let planned = self.plan_file(file, tensors, rules)?;
        self.write_planned(&[input], planned)
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
        self.write_planned(&inputs, planned)
    }

    /// Copies `arrays[i]` from the host to worker *i*, all into one new register (the
    /// same id on every worker). There must be one array per worker; they may differ in
    /// type and shape. Returns once the copies are sent: failures come back at the next
    /// sync, as with [`Session::copy_to_worker0`].
    pub fn copy_to_workers(&self, arrays: &[HostArray]) -> Result<Register, SessionError> {
        let _traced = traced!("copy_to_workers");
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
}
