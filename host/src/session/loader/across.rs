//! Sharded loading in a session across MPI ranks (feature `mpi`): each rank reads its own
//! workers' parts of the file, straight into their memory, and no rank reads another's.
//!
//! # Rules
//!
//! - **When.** [`Session::load_safetensors`] in a session across ranks whose hosts map
//!   their workers' memory (threads and child processes). The file must be readable at the
//!   same path on every rank (a shared file system); presharded loads and QEMU workers
//!   take the path through rank 0.
//! - **Rank 0 reads the header only.** It checks the header as the safetensors crate
//!   checks a whole file, and every tensor under the rules as a load on one host does
//!   (names, types, shapes, dimensions that divide), without reading the data; then it
//!   allocates every register on every worker and asks where each part lies.
//! - **Each rank reads its parts.** Rank 0 tells each rank, for each of its workers and
//!   tensors, where the tensor's data start in the file, how it is cut and where the part
//!   goes; the rank reads exactly that part — a contiguous range, or one run per row for a
//!   cut on an inner dimension — into the worker's memory (the worker is idle meanwhile).
//!   Rank 0 does the same for its own workers.
//! - **All or nothing**, as on one host: a rank that fails says why (the file, the read),
//!   the load's registers are freed everywhere, and the error names the rank.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use safetensors::tensor::Metadata;
use safetensors::SafeTensorError;
use serde::{Deserialize, Serialize};

use super::{Described, LoadError, Planned, ShardRules, Source, Writing};

/// The largest header the safetensors crate reads (its own limit).
const MAX_HEADER: usize = 100_000_000;
use crate::session::ranks::ToRank;
use crate::session::{Register, Session, SessionError, State};
use crate::transport::SharedMemory;

/// One part of one tensor for one worker: where it comes from and where it goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::session) struct PartAt {
    /// Where the whole tensor's data start in the file.
    offset: u64,
    /// The whole tensor's shape.
    shape: Vec<usize>,
    /// Bytes of an element.
    size: usize,
    /// The dimension cut, the parts it is cut into, and which part this is.
    dim: usize,
    parts: usize,
    part: usize,
    /// Where the part goes in the worker's memory.
    at: usize,
}

/// What one rank reads: the file, and each of its workers' parts, in worker order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::session) struct LoadParts {
    file: PathBuf,
    workers: Vec<Vec<PartAt>>,
}

impl Session {
    /// [`Session::load_safetensors`] across ranks by the module's rules; `None` when the
    /// session does not span ranks that map their workers' memory (nothing was done).
    pub(super) fn load_across_ranks(
        &self,
        file: &Path,
        rules: &ShardRules,
    ) -> Result<Option<HashMap<String, Register>>, LoadError> {
        let session_error = |source| LoadError::Session {
            file: file.to_path_buf(),
            source,
        };
        if self
            .lock()
            .map_err(session_error)?
            .ranks_in_place()
            .is_none()
        {
            return Ok(None);
        }
        let (tensors, offsets) = header_only(file)?;
        let planned = self.plan_file(file, tensors, rules)?;
        let file = std::path::absolute(file).map_err(|source| LoadError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        self.write_planned(&[&file], planned, Writing::ByRanks(offsets))
            .map(Some)
    }
}

/// A tensor's name and what its header says of it.
type Named = (String, Described<'static>);

/// The tensors of `file` (sorted by name) as its header describes them, their data left in
/// the file, and where each one's data start in it. The header is checked as the
/// safetensors crate checks a whole file (sizes, offsets, every tensor's bytes), and the
/// data part's length against the file's, without reading the data.
fn header_only(file: &Path) -> Result<(Vec<Named>, Vec<u64>), LoadError> {
    let read_error = |source| LoadError::Read {
        file: file.to_path_buf(),
        source,
    };
    let format_error = |source| LoadError::Format {
        file: file.to_path_buf(),
        source,
    };
    let mut opened = File::open(file).map_err(read_error)?;
    let len = opened.metadata().map_err(read_error)?.len();
    // The same refusals as parsing the whole file: a file too short is a format error.
    if len < 8 {
        return Err(format_error(SafeTensorError::HeaderTooSmall));
    }
    let mut prefix = [0u8; 8];
    opened.read_exact(&mut prefix).map_err(read_error)?;
    let header = u64::from_le_bytes(prefix);
    if header > MAX_HEADER as u64 {
        return Err(format_error(SafeTensorError::HeaderTooLarge));
    }
    let end = header + 8;
    if end > len {
        return Err(format_error(SafeTensorError::InvalidHeaderLength));
    }
    let mut text = vec![0u8; header as usize];
    opened.read_exact(&mut text).map_err(read_error)?;
    let text =
        std::str::from_utf8(&text).map_err(|e| format_error(SafeTensorError::InvalidHeader(e)))?;
    let metadata: Metadata = serde_json::from_str(text)
        .map_err(|e| format_error(SafeTensorError::InvalidHeaderDeserialization(e)))?;
    if metadata.data_len() as u64 + end != len {
        return Err(format_error(SafeTensorError::MetadataIncompleteBuffer));
    }
    let mut tensors: Vec<_> = metadata.tensors().into_iter().collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let offsets = tensors
        .iter()
        .map(|(_, info)| end + info.data_offsets.0 as u64)
        .collect();
    let described = tensors
        .into_iter()
        .map(|(name, info)| {
            let described = Described {
                dtype: info.dtype,
                shape: info.shape.clone(),
                data: &[],
                data_len: info.data_offsets.1 - info.data_offsets.0,
            };
            (name, described)
        })
        .collect();
    Ok((described, offsets))
}

impl State {
    /// Every rank's workers' parts of `planned` (registers `ids`, allocated on every
    /// worker; the tensors' data at `offsets` of `file`) read into their memory.
    pub(super) fn fill_by_ranks(
        &mut self,
        file: &Path,
        planned: &[Planned<'_>],
        offsets: &[u64],
        ids: &[u16],
    ) -> Result<(), SessionError> {
        let workers = self.workers.len();
        let Some(per_rank) = self.across.as_ref().map(|a| a.per_rank()) else {
            return Ok(());
        };
        // Where each part lies, tensor by tensor: `at[tensor][worker]`.
        let mut at = Vec::with_capacity(ids.len());
        for &id in ids {
            let described = self.describe_all(0..workers, id)?;
            at.push(described.iter().map(|d| d.at as usize).collect::<Vec<_>>());
        }
        let parts_of = |worker: usize| -> Vec<PartAt> {
            planned
                .iter()
                .zip(offsets)
                .zip(&at)
                .map(|((tensor, &offset), at)| {
                    let (shape, dim, parts) = match &tensor.source {
                        Source::Split {
                            shape, dim, parts, ..
                        } => (shape.clone(), *dim, *parts),
                        // A presharded load never comes here.
                        Source::PerWorker(_) => (Vec::new(), 0, 1),
                    };
                    PartAt {
                        offset,
                        shape,
                        size: tensor.dtype.size(),
                        dim,
                        parts,
                        part: worker % parts.max(1),
                        at: at[worker],
                    }
                })
                .collect()
        };
        let load = |rank: usize| LoadParts {
            file: file.to_path_buf(),
            workers: (rank * per_rank..(rank + 1) * per_rank)
                .map(parts_of)
                .collect(),
        };
        // Taken before any rank is told: past this point, nothing stops rank 0 taking part.
        let mut memories = Vec::with_capacity(per_rank);
        for channel in &mut self.workers[..per_rank.min(workers)] {
            memories.push(channel.device_memory()?);
        }
        if let Some(across) = &self.across {
            across.tell_all(|rank| ToRank::Load(load(rank)))?;
        }
        let mine = read_parts(&load(0), &mut memories);
        match &self.across {
            Some(across) => across.outcome(mine, "load"),
            None => Ok(()),
        }
    }
}

/// Reads `load`'s parts into `memories`, this rank's workers' memory in worker order
/// (`None` where it is not mapped); every part is tried, the first failure is the answer.
pub(in crate::session) fn read_parts(
    load: &LoadParts,
    memories: &mut [Option<&mut SharedMemory>],
) -> Result<(), String> {
    let file = File::open(&load.file).map_err(|e| format!("{}: {e}", load.file.display()))?;
    let mut first = None;
    for (j, parts) in load.workers.iter().enumerate() {
        for part in parts {
            let read = match memories.get_mut(j).and_then(|m| m.as_mut()) {
                Some(memory) => read_part(&file, part, memory),
                None => Err(format!("worker {j} of this rank: its memory is not mapped")),
            };
            if let Err(reason) = read {
                first.get_or_insert(format!("{}: {reason}", load.file.display()));
            }
        }
    }
    match first {
        None => Ok(()),
        Some(reason) => Err(reason),
    }
}

/// Part `part.part` of `part.parts` of the tensor (row-major, cut on `part.dim`) from
/// `file` into `memory` at `part.at`: one read for a cut on the outermost dimension (or
/// none), one per row otherwise.
fn read_part(file: &File, part: &PartAt, memory: &mut SharedMemory) -> Result<(), String> {
    let parts = part.parts.max(1);
    let total: usize = part.shape.iter().product::<usize>() * part.size;
    let outer: usize = part.shape.get(..part.dim).map_or(1, |d| d.iter().product());
    let inner: usize = part
        .shape
        .get(part.dim + 1..)
        .map_or(1, |d| d.iter().product())
        * part.size;
    let extent = part.shape.get(part.dim).copied().unwrap_or(1);
    let (run, stride) = if parts == 1 {
        (total, total)
    } else {
        (extent / parts * inner, extent * inner)
    };
    let rows = if parts == 1 { 1 } else { outer };
    let bytes = run * rows;
    let target = memory.range_mut(part.at, bytes).ok_or_else(|| {
        format!(
            "{bytes} bytes at {} lie outside the worker's memory",
            part.at
        )
    })?;
    for (row, out) in target.chunks_exact_mut(run.max(1)).enumerate().take(rows) {
        let from = part.offset + (row * stride + part.part * run) as u64;
        file.read_exact_at(out, from)
            .map_err(|e| format!("reading {} bytes at {from}: {e}", out.len()))?;
    }
    Ok(())
}
