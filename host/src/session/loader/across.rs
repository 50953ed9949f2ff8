//! Sharded loading in a session across MPI ranks (feature `mpi`): each rank reads its own
//! workers' parts of the file, straight into their memory, and no rank reads another's.
//!
//! # Rules
//!
//! - **When.** [`Session::load_safetensors`] in a session across ranks whose hosts map
//!   their workers' memory (threads and child processes). The file must be readable at the
//!   same path on every rank (a shared file system); presharded loads and QEMU workers
//!   take the path through rank 0.
//! - **Rank 0 reads the header only**, as a load on one host does (the input rules, the
//!   header's claims against the file), and checks every tensor under the rules as a load on one host does
//!   (names, types, shapes, dimensions that divide), without reading the data; then it
//!   allocates every register on every worker and asks where each part lies.
//! - **Each rank reads its parts.** Rank 0 tells each rank, for each of its workers and
//!   tensors, where the tensor's data start in the file, how it is cut and where the part
//!   goes; the rank reads exactly that part — a contiguous range, or one run per row for a
//!   cut on an inner dimension — into the worker's memory (the worker is idle meanwhile),
//!   from the file opened under the input rules and found the size rank 0 found. Rank 0
//!   does the same for its own workers.
//! - **All or nothing**, as on one host: a rank that fails says why (the file, the read),
//!   the load's registers are freed everywhere, and the error names the rank.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::part::Cut;
use super::{open, LoadError, Planned, ShardRules, Source, Writing};
use crate::input::Input;
use crate::session::ranks::ToRank;
use crate::session::{Register, Session, SessionError, State};
use crate::transport::SharedMemory;

/// One part of one tensor for one worker: where it comes from and where it goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::session) struct PartAt {
    /// The tensor and how it is cut.
    cut: Cut,
    /// Which part this is.
    part: usize,
    /// Where the part goes in the worker's memory.
    at: usize,
}

/// What one rank reads: the file (and its size as rank 0 saw it), and each of its workers'
/// parts, in worker order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::session) struct LoadParts {
    file: PathBuf,
    len: u64,
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
        // Every rank opens the file by the same path: an absolute one.
        let file = std::path::absolute(file).map_err(|source| LoadError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        let (input, tensors) = open(&file)?;
        let planned = self.plan_file(&file, tensors, rules)?;
        self.write_planned(&[input], planned, Writing::ByRanks)
            .map(Some)
    }
}

impl State {
    /// Every rank's workers' parts of `planned` (registers `ids`, allocated on every
    /// worker) read from `file` (`len` bytes when rank 0 opened it) into their memory.
    pub(super) fn fill_by_ranks(
        &mut self,
        file: &Path,
        len: u64,
        planned: &[Planned],
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
                .zip(&at)
                .filter_map(|(tensor, at)| match &tensor.source {
                    Source::Split { cut } => Some(PartAt {
                        cut: cut.clone(),
                        part: worker % cut.parts.max(1),
                        at: at[worker],
                    }),
                    // A presharded load never comes here.
                    Source::PerWorker(_) => None,
                })
                .collect()
        };
        let load = |rank: usize| LoadParts {
            file: file.to_path_buf(),
            len,
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
/// The file is opened under the input rules, and must be the size rank 0 found.
pub(in crate::session) fn read_parts(
    load: &LoadParts,
    memories: &mut [Option<&mut SharedMemory>],
) -> Result<(), String> {
    let input = Input::open(&load.file).map_err(|e| e.to_string())?;
    if input.len() != load.len {
        return Err(format!(
            "{} is {} bytes on this rank, {} on rank 0: not the same file",
            load.file.display(),
            input.len(),
            load.len
        ));
    }
    let mut first = None;
    for (j, parts) in load.workers.iter().enumerate() {
        for part in parts {
            let read = match memories.get_mut(j).and_then(|m| m.as_mut()) {
                Some(memory) => read_part(&input, part, memory),
                None => Err(format!("worker {j} of this rank: its memory is not mapped")),
            };
            if let Err(reason) = read {
                first.get_or_insert(reason);
            }
        }
    }
    match first {
        None => Ok(()),
        Some(reason) => Err(reason),
    }
}

/// `part` read from `input` into `memory` at `part.at`.
fn read_part(input: &Input, part: &PartAt, memory: &mut SharedMemory) -> Result<(), String> {
    let bytes = part.cut.part_len();
    let target = memory.range_mut(part.at, bytes).ok_or_else(|| {
        format!(
            "{bytes} bytes at {} lie outside the worker's memory",
            part.at
        )
    })?;
    part.cut
        .read(input, part.part, target)
        .map_err(|e| e.to_string())
}
