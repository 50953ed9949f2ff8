//! `tessera inspect`: what a checkpoint or a saved executable holds, as a table or as JSON.
//!
//! The kind is told by the file's first bytes: an executable starts with its magic, anything
//! else is read as a checkpoint. Both are fully checked (format, version, checksum) before
//! anything is shown. Only a regular file is read ([`crate::input`]), and a checkpoint's
//! tensors go through its checksum a piece at a time: inspecting holds no tensor.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use tessera_core::program::Program;

use crate::checkpoint::{self, Checkpoint, CheckpointError, Summary};
use crate::executable::{self, Executable, ExecutableError};
use crate::input::{Input, InputError};

/// What a file holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `checkpoint` or `executable`.
    pub kind: &'static str,
    /// The format version.
    pub version: u32,
    /// The program's fingerprint, 16 hex digits.
    pub fingerprint: String,
    /// Replicas of the run.
    pub replicas: usize,
    /// Steps trained (checkpoints).
    pub step: Option<u64>,
    /// The random seed (checkpoints).
    pub seed: Option<u64>,
    /// Tensors (checkpoints) or variables (executables).
    pub tensors: Vec<Tensor>,
    /// Streams, anchors, data flow, optimizer and device limits (executables).
    pub program: Vec<(String, String)>,
}

/// One tensor or variable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tensor {
    /// Its name.
    pub name: String,
    /// Element type.
    pub dtype: String,
    /// Shape (host shape, in a checkpoint).
    pub shape: Vec<u32>,
    /// Grouping, retrieval and shard layout.
    pub layout: String,
}

/// Why a file could not be inspected.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The file is not a regular file, or could not be read.
    #[error("{0}")]
    Input(#[source] InputError),
    /// A checkpoint that does not load.
    #[error("{0}")]
    Checkpoint(#[source] CheckpointError),
    /// An executable that does not load.
    #[error("{0}")]
    Executable(#[source] ExecutableError),
}

/// Reads and checks the file at `path`.
pub fn inspect(path: &Path) -> Result<Report, InspectError> {
    let mut input = Input::open(path).map_err(InspectError::Input)?;
    let mut magic = [0u8; executable::MAGIC.len()];
    let is_executable = input.len() >= magic.len() as u64
        && input.read_exact(&mut magic).is_ok()
        && magic == executable::MAGIC;
    drop(input);
    if is_executable {
        let exe = Executable::load(path).map_err(InspectError::Executable)?;
        executable_report(&exe).map_err(InspectError::Checkpoint)
    } else {
        let c = Checkpoint::summary(path).map_err(InspectError::Checkpoint)?;
        Ok(checkpoint_report(&c))
    }
}

fn checkpoint_report(c: &Summary) -> Report {
    // Weights by name, then the optimizer's tensors by name (its own name's prefix).
    let mut sorted: Vec<&(String, _, Vec<u32>)> = c.tensors.iter().collect();
    sorted.sort_by_key(|(name, _, _)| (name.starts_with("optimizer/"), name.clone()));
    let tensors = sorted
        .into_iter()
        .map(|(name, dtype, shape)| {
            let variable = name
                .strip_prefix("optimizer/")
                .and_then(|n| n.strip_suffix("/velocity"))
                .unwrap_or(name);
            Tensor {
                name: name.clone(),
                dtype: dtype.to_string(),
                shape: shape.clone(),
                layout: c.layouts.get(variable).cloned().unwrap_or_default(),
            }
        })
        .collect();
    Report {
        kind: "checkpoint",
        version: checkpoint::VERSION,
        fingerprint: format!("{:016x}", c.fingerprint),
        replicas: c.replicas,
        step: Some(c.step),
        seed: Some(c.seed),
        tensors,
        program: vec![],
    }
}

fn executable_report(exe: &Executable) -> Result<Report, CheckpointError> {
    let p: &Program = &exe.program;
    let replicas = exe.replicas as usize;
    let fingerprint = checkpoint::fingerprint(p, replicas)?;
    let tensors = p
        .variables
        .iter()
        .enumerate()
        .map(|(i, v)| Tensor {
            name: v.name.to_string(),
            dtype: v.dtype.to_string(),
            shape: v.shape.to_vec(),
            layout: checkpoint::describe_variable(p, replicas, i),
        })
        .collect();
    let mut program = Vec::new();
    for s in &p.streams {
        let mode = if s.broadcast {
            "broadcast"
        } else {
            "per replica"
        };
        program.push((
            format!("stream {}", s.name),
            format!("{} {:?}, {mode}", s.dtype, &s.sample[..]),
        ));
    }
    for a in &p.anchors {
        program.push((
            format!("anchor {}", a.tensor.name()),
            a.return_type.to_string(),
        ));
    }
    program.push((
        "data flow".to_string(),
        format!(
            "{} batches per step, {} micro-batches per batch, {} samples per micro-batch",
            p.batches_per_step, p.accumulation, p.micro_batch_size
        ),
    ));
    program.push(("optimizer".to_string(), format!("{:?}", p.optimizer)));
    program.push(("layers".to_string(), format!("{:?}", &p.layers[..])));
    let l = exe.limits;
    program.push((
        "device limits".to_string(),
        format!(
            "{} bytes of memory, {}-byte frames, window {}",
            l.memory, l.max_frame, l.window
        ),
    ));
    Ok(Report {
        kind: "executable",
        version: u32::from(executable::VERSION),
        fingerprint: format!("{fingerprint:016x}"),
        replicas,
        step: None,
        seed: None,
        tensors,
        program,
    })
}

/// The report as a table.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} (format version {}), fingerprint {}, {} replicas",
        r.kind, r.version, r.fingerprint, r.replicas
    );
    if let (Some(step), Some(seed)) = (r.step, r.seed) {
        let _ = writeln!(out, "step {step}, seed {seed}");
    }
    let width = r
        .tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "{:width$}  {:8}  {:14}  layout",
        "name", "dtype", "shape"
    );
    for t in &r.tensors {
        let shape = format!("{:?}", t.shape);
        let _ = writeln!(
            out,
            "{:width$}  {:8}  {:14}  {}",
            t.name, t.dtype, shape, t.layout
        );
    }
    for (key, value) in &r.program {
        let _ = writeln!(out, "{key}: {value}");
    }
    out
}
