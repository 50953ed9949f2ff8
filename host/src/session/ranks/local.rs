//! Collectives in groups that each lie wholly on one rank (tensor parallelism within a
//! host, say), run by each rank on its own workers' memory: their data never leave the
//! rank, and none goes through rank 0.
//!
//! # Rules
//!
//! - **When.** An allreduce (of floats), allgather, broadcast, scatter or gather in groups,
//!   when the group
//!   size divides the workers per rank (so no group crosses a rank) and every rank's host
//!   maps its workers' memory. Otherwise the collective takes the path of groups that
//!   cross ranks: through rank 0.
//! - **Checked before it starts**, group by group, by rank 0, as one host checks (every
//!   type, size and range); a group whose registers the in-place path cannot take (an
//!   integer allreduce, a destination not an array yet) sends the whole collective down the
//!   copying path, which reports every refusal.
//! - **One host's result.** Each group is computed as one host computes it: the allreduce
//!   folds the members' sources in worker order with the one kernel; the allgather
//!   concatenates them in worker order (the gather too, for the leader only); the broadcast
//!   copies the leader's; the scatter cuts the leader's into equal parts by flat element
//!   count, part `i` to member `i`. The result is built aside, then written into the
//!   destinations (a source that is also the destination is safe).

use serde::{Deserialize, Serialize};
use tessera_core::dtype::DataType;

use super::collectives::Kind;
use super::control::ToRank;
use crate::combine;
use crate::session::{SessionError, State};
use crate::transport::SharedMemory;

/// One group on a rank: its type, the bytes of a member's source, and each member's
/// index on the rank with where its source and destination are.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::session) struct LocalGroup {
    dtype: DataType,
    src_bytes: usize,
    members: Vec<(usize, usize, usize)>,
}

/// A rank's groups of one collective.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::session) struct LocalPart {
    kind: Kind,
    groups: Vec<LocalGroup>,
}

impl State {
    /// Collective `kind` of `src` into `dst` in every group (of `group_size` workers), each
    /// group run by the rank that hosts it, by the module's rules; `false` when it cannot
    /// run so (nothing was sent). The workers are synced.
    pub(in crate::session) fn collective_in_groups(
        &mut self,
        kind: Kind,
        src: u16,
        dst: u16,
        group_size: usize,
    ) -> Result<bool, SessionError> {
        let Some(per_rank) = self.ranks_in_place() else {
            return Ok(false);
        };
        let workers = self.workers.len();
        let local = per_rank.min(workers);
        if group_size == 0 || !per_rank.is_multiple_of(group_size) {
            return Ok(false);
        }
        let ranks = workers / per_rank.max(1);
        let mut parts: Vec<LocalPart> = (0..ranks)
            .map(|_| LocalPart {
                kind,
                groups: Vec::new(),
            })
            .collect();
        for start in (0..workers).step_by(group_size) {
            let group = start..start + group_size;
            let Some((dtype, src_bytes, members)) = self.plan_group(kind, group, src, dst)? else {
                return Ok(false);
            };
            let rank = start / per_rank;
            parts[rank].groups.push(LocalGroup {
                dtype,
                src_bytes,
                members: members
                    .iter()
                    .map(|m| (m.worker - rank * per_rank, m.src, m.dst))
                    .collect(),
            });
        }
        // Taken before any rank is told: past this point, nothing stops rank 0 taking part.
        let mut memories = Vec::with_capacity(local);
        for channel in &mut self.workers[..local] {
            memories.push(channel.device_memory()?);
        }
        if let Some(across) = &self.across {
            across.tell_all(|rank| ToRank::InGroups(parts[rank].clone()))?;
        }
        let mine = run(&parts[0], &mut memories);
        if let Some(across) = &self.across {
            across.outcome(mine, kind.operation())?;
        }
        Ok(true)
    }
}

/// This rank's groups of `part`, on `memories` (its workers' memory in order; `None` where
/// it is not mapped). Every group is run; the first failure is the answer.
pub(in crate::session) fn run(
    part: &LocalPart,
    memories: &mut [Option<&mut SharedMemory>],
) -> Result<(), String> {
    let mut first = None;
    for group in &part.groups {
        if let Err(reason) = run_group(part.kind, group, memories) {
            first.get_or_insert(reason);
        }
    }
    match first {
        None => Ok(()),
        Some(reason) => Err(reason),
    }
}

/// One group: its result built from the members' sources ([`group_result`]), then written
/// into the members' destinations.
fn run_group(
    kind: Kind,
    group: &LocalGroup,
    memories: &mut [Option<&mut SharedMemory>],
) -> Result<(), String> {
    let result = group_result(kind, group, memories)?;
    // What each member's destination gets: the whole result, its part of a scatter, and
    // for a gather the leader only.
    let part = result.len() / group.members.len().max(1);
    for (i, &(j, _, dst)) in group.members.iter().enumerate() {
        let mine = match kind {
            Kind::Scatter => &result[i * part..(i + 1) * part],
            Kind::Gather if i > 0 => continue,
            _ => &result[..],
        };
        let target = memories
            .get_mut(j)
            .and_then(|m| m.as_mut())
            .and_then(|m| m.range_mut(dst, mine.len()))
            .ok_or_else(|| {
                format!(
                    "worker {j} of this rank: its destination is not writable at {dst} ({} bytes)",
                    mine.len()
                )
            })?;
        target.copy_from_slice(mine);
    }
    Ok(())
}

/// What one group's collective makes of its members' sources: the allreduce's
/// combination, the concatenation (allgather, gather), or the leader's (broadcast,
/// scatter), built aside.
fn group_result(
    kind: Kind,
    group: &LocalGroup,
    memories: &[Option<&mut SharedMemory>],
) -> Result<Vec<u8>, String> {
    let bytes = group.src_bytes;
    let source =
        |j: usize, at: usize| -> Result<Vec<u8>, String> {
            let found = memories.get(j).and_then(|m| m.as_ref());
            found.and_then(|m| m.range(at, bytes)).map(<[u8]>::to_vec).ok_or_else(|| {
            format!("worker {j} of this rank: its source is not readable at {at} ({bytes} bytes)")
        })
        };
    let result = match kind {
        Kind::Allreduce(op) => {
            let sources = group
                .members
                .iter()
                .map(|&(j, src, _)| source(j, src))
                .collect::<Result<Vec<_>, _>>()?;
            let inputs: Vec<&[u8]> = sources.iter().map(Vec::as_slice).collect();
            let mut out = vec![0u8; bytes];
            combine::combine(group.dtype, op, &inputs, &mut out)
                .map_err(|e| format!("combining: {e:?}"))?;
            out
        }
        Kind::Allgather => {
            let mut out = Vec::with_capacity(bytes * group.members.len());
            for &(j, src, _) in &group.members {
                out.extend_from_slice(&source(j, src)?);
            }
            out
        }
        Kind::Broadcast | Kind::Scatter => {
            let &(j, src, _) = group
                .members
                .first()
                .ok_or_else(|| "a group without members".to_string())?;
            source(j, src)?
        }
        Kind::Gather => {
            let mut out = Vec::with_capacity(bytes * group.members.len());
            for &(j, src, _) in &group.members {
                out.extend_from_slice(&source(j, src)?);
            }
            out
        }
    };
    Ok(result)
}
