//! Collectives in sets that each lie wholly on one rank (tensor parallelism within a host,
//! say), run by each rank on its own members' memory: their bytes never leave the rank, and
//! none goes through rank 0.
//!
//! # Rules
//!
//! - **When** (besides the module's conditions): the set size divides the members per
//!   rank, so that no set crosses a rank; a reduction (of any type the kernel combines,
//!   in either order: on one rank they agree), an allgather, a broadcast, a scatter or a
//!   gather.
//! - **One host's result.** Each set is computed as one host computes it: the reduction
//!   folds the sources in member order with the one kernel; the allgather concatenates them
//!   in member order (the gather too, into the leader's destination only); the broadcast
//!   copies the leader's; the scatter cuts the leader's into equal parts, part `i` to
//!   member `i`. The result is built aside, then written into the destinations (a source
//!   that is also a destination is safe).

use serde::{Deserialize, Serialize};
use tessera_core::dtype::DataType;

use super::super::{Group, GroupError, Kind, Place, Set};
use super::failure::RankFailure;
use crate::combine;
use crate::transport::SharedMemory;

/// One set on a rank: its type, the bytes of a source, where each source is (member on the
/// rank, address) and where each destination is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LocalSet {
    dtype: DataType,
    src_bytes: usize,
    sources: Vec<(usize, usize)>,
    dests: Vec<(usize, usize)>,
}

/// A rank's sets of one collective.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LocalPart {
    kind: Kind,
    sets: Vec<LocalSet>,
}

/// Collective `kind` of `dtype` in `sets` (each of `size` consecutive members, no set
/// crossing a rank), each run by the rank that hosts it, by the module's rules; `false`
/// when it cannot run so (nothing was sent).
pub(in crate::transport::group) fn run_in_sets(
    group: &mut Group,
    kind: Kind,
    dtype: DataType,
    sets: &[Set],
    size: usize,
) -> Result<bool, GroupError> {
    let Some(ranks) = group.mapped_ranks() else {
        return Ok(false);
    };
    let per_rank = ranks.per_rank;
    let reducible = combine::supported(dtype) || !matches!(kind, Kind::Reduce(..));
    if size == 0 || !per_rank.is_multiple_of(size) || !reducible {
        return Ok(false);
    }
    let count = group.members.len() / per_rank;
    let mut parts: Vec<LocalPart> = (0..count)
        .map(|_| LocalPart {
            kind,
            sets: Vec::new(),
        })
        .collect();
    for set in sets {
        let (Some(sources), Some(dests)) =
            (group.addresses(&set.sources)?, group.addresses(&set.dests)?)
        else {
            return Ok(false);
        };
        let Some(first) = set.sources.first().or(set.dests.first()) else {
            continue;
        };
        let rank = first.member / per_rank;
        let on_rank = |places: &[Place], at: Vec<usize>| -> Vec<(usize, usize)> {
            places
                .iter()
                .zip(at)
                .map(|(p, at)| (p.member % per_rank, at))
                .collect()
        };
        parts[rank].sets.push(LocalSet {
            dtype,
            src_bytes: first.span.len,
            sources: on_rank(&set.sources, sources),
            dests: on_rank(&set.dests, dests),
        });
    }
    let ranks = match group.ranks.as_mut() {
        Some(ranks) => ranks,
        None => return Ok(false),
    };
    // Taken before any rank is told: past this point, nothing stops rank 0 taking part.
    let mut memories = Vec::with_capacity(per_rank);
    for (member, channel) in group.members[..per_rank].iter_mut().enumerate() {
        memories.push(channel.device_memory().map_err(GroupError::on(member))?);
    }
    ranks.tell_all(|rank| parts[rank].clone())?;
    let hush = ranks.office.hush();
    let mine = run(&parts[0], &mut memories);
    drop(hush);
    ranks.outcome(mine, kind.operation())?;
    let dests: Vec<Place> = sets
        .iter()
        .flat_map(|set| set.dests.iter().copied())
        .collect();
    group.confirm(&dests)?;
    Ok(true)
}

/// This rank's sets of `part`, on `memories` (its members' memory in order; `None` where
/// it is not mapped). Every set is run; the first failure is the answer.
pub(crate) fn run(
    part: &LocalPart,
    memories: &mut [Option<&mut SharedMemory>],
) -> Result<(), RankFailure> {
    let mut first = None;
    for set in &part.sets {
        if let Err(failure) = run_set(part.kind, set, memories) {
            first.get_or_insert(failure);
        }
    }
    match first {
        None => Ok(()),
        Some(failure) => Err(failure),
    }
}

/// One set: its result built from the sources ([`set_result`]), then written into the
/// destinations.
fn run_set(
    kind: Kind,
    set: &LocalSet,
    memories: &mut [Option<&mut SharedMemory>],
) -> Result<(), RankFailure> {
    let result = set_result(kind, set, memories)?;
    // What each destination gets: the whole result, or its part of a scatter.
    let part = result.len() / set.dests.len().max(1);
    for (i, &(j, dst)) in set.dests.iter().enumerate() {
        let mine = match kind {
            Kind::Scatter => &result[i * part..(i + 1) * part],
            _ => &result[..],
        };
        let target = memories
            .get_mut(j)
            .and_then(|m| m.as_mut())
            .and_then(|m| m.range_mut(dst, mine.len()))
            .ok_or(RankFailure::Outside {
                member: j,
                at: dst,
                len: mine.len(),
            })?;
        target.copy_from_slice(mine);
    }
    Ok(())
}

/// What one set's collective makes of its sources: the reduction's combination, the
/// concatenation (allgather, gather), or the leader's (broadcast, scatter), built aside.
fn set_result(
    kind: Kind,
    set: &LocalSet,
    memories: &[Option<&mut SharedMemory>],
) -> Result<Vec<u8>, RankFailure> {
    let bytes = set.src_bytes;
    let source = |&(j, at): &(usize, usize)| -> Result<&[u8], RankFailure> {
        let found = memories.get(j).and_then(|m| m.as_ref());
        found
            .and_then(|m| m.range(at, bytes))
            .ok_or(RankFailure::Outside {
                member: j,
                at,
                len: bytes,
            })
    };
    let sources = set
        .sources
        .iter()
        .map(source)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(match kind {
        // One rank's workers: worker order and ranks first are the same fold.
        Kind::Reduce(op, _) => {
            let mut out = vec![0u8; bytes];
            combine::combine(set.dtype, op, &sources, &mut out).map_err(RankFailure::Combine)?;
            out
        }
        Kind::Allgather | Kind::Gather | Kind::Broadcast | Kind::Scatter => sources.concat(),
    })
}
