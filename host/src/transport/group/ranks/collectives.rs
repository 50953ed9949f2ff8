//! Collectives in sets of whole ranks whose bytes move between the ranks by MPI, each rank
//! reading and writing its own members in place: a reduction, an allgather and a
//! broadcast.
//!
//! # Rules
//!
//! - **When** (besides the module's conditions): every set spans whole ranks (each set's
//!   ranks are split off the others for it: what follows holds among them), and every
//!   buffer of the collective fits one MPI call; for a reduction, of a type the kernel
//!   combines (`crate::combine`).
//! - **Reduction in worker order: bit for bit one host's result.** The elements are split
//!   among the ranks (rank `k` of `R` takes elements `k·E/R .. (k+1)·E/R`). Each rank sends
//!   every other rank that rank's slice of each of its members' sources (one all-to-all),
//!   combines its own slice of every member's source in member order with the kernel one
//!   host uses (element by element, so slicing changes no result), and the combined slices
//!   are gathered to every rank (one allgather), which writes the result into each of its
//!   members' destinations.
//! - **Reduction ranks first** (floats, more than one member per rank): each rank first
//!   folds its own members' sources into one array (a mean's as a sum, rounded to the
//!   type), sends every other rank that rank's slice of it (one all-to-all: one array per
//!   rank crosses, not one per member), combines its own slice of every rank's array in
//!   rank order (a mean divided by every member), and the slices are gathered as above:
//!   the kernel's ranks-first result for runs of the members per rank.
//! - **Integers agree before writing**: an integer combination can fail (overflow) on one
//!   rank's slice alone, so the ranks agree (one small allreduce) whether every slice was
//!   combined, and none writes a destination unless all were: a refused reduction writes
//!   nothing, as on one host.
//! - **Allgather**: each rank's members' sources, in member order, gathered to every rank
//!   (one allgather) straight into its first member's destination, then copied to the
//!   others'. **Broadcast**: the leader's source, on the set's first rank, broadcast (one MPI
//!   broadcast) into every rank's first member's destination, then copied to the others'.
//! - A rank that cannot read or write a member's memory still takes part in every MPI
//!   collective (with zeros) and reports the failure after.

use std::ops::Range;

use serde::{Deserialize, Serialize};
use tessera_core::dtype::DataType;

use super::super::{Group, GroupError, Kind, Place, Set};
use super::failure::RankFailure;
use super::MPI_BYTES;
use crate::combine::{self, ReduceOrder};
use crate::instance::{Mpi, Peers};
use crate::transport::SharedMemory;
use tessera_core::wire::ReduceOp;

/// One rank's part of a collective across ranks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Part {
    kind: Kind,
    dtype: DataType,
    /// Bytes of each member's source (the leader's, for a broadcast).
    src_bytes: usize,
    /// Members each rank hosts.
    per_rank: usize,
    /// Where this rank's members' source and destination bytes start in their memory, in
    /// member order (a broadcast reads the leader's source only).
    members: Vec<(usize, usize)>,
    /// The set this rank's members belong to, when the collective runs in sets smaller
    /// than the group (its ranks are split off the others for it); `None`: every rank.
    color: Option<u32>,
}

impl Part {
    /// Bytes of each destination, `ranks` taking part.
    fn dst_bytes(&self, ranks: usize) -> usize {
        match self.kind {
            Kind::Allgather => self.src_bytes * self.per_rank * ranks,
            _ => self.src_bytes,
        }
    }
}

/// The elements rank `k` of `ranks` combines.
fn slice(elements: usize, ranks: usize, k: usize) -> Range<usize> {
    elements * k / ranks..elements * (k + 1) / ranks
}

/// Collective `kind` of `dtype` over `sets` (each of `size` consecutive members from a
/// multiple of `size`, spanning whole ranks) across the ranks, by the module's rules;
/// `false` when it cannot run so (nothing was sent).
pub(in crate::transport::group) fn run_across(
    group: &mut Group,
    kind: Kind,
    dtype: DataType,
    sets: &[Set],
    size: usize,
) -> Result<bool, GroupError> {
    let Some(ranks) = group.mapped_ranks() else {
        return Ok(false);
    };
    let (per_rank, members) = (ranks.per_rank, group.members.len());
    let fits = match kind {
        Kind::Reduce(..) => combine::supported(dtype),
        Kind::Allgather | Kind::Broadcast => true,
        Kind::Scatter | Kind::Gather => false,
    };
    if !fits || size == 0 || !size.is_multiple_of(per_rank) {
        return Ok(false);
    }
    let global = size == members;
    let mut parts = Vec::with_capacity(members / per_rank);
    for (index, set) in sets.iter().enumerate() {
        let (Some(sources), Some(dests)) =
            (group.addresses(&set.sources)?, group.addresses(&set.dests)?)
        else {
            return Ok(false);
        };
        let src_bytes = set.sources.first().map_or(0, |p| p.span.len);
        let largest = (src_bytes.saturating_mul(per_rank).saturating_mul(2))
            .max(set.dests.first().map_or(0, |p| p.span.len));
        if largest > MPI_BYTES {
            return Ok(false);
        }
        for first in (0..size).step_by(per_rank) {
            let members = (first..first + per_rank)
                .map(|i| (sources.get(i).copied().unwrap_or(0), dests[i]))
                .collect();
            parts.push(Part {
                kind,
                dtype,
                src_bytes,
                per_rank,
                members,
                color: (!global).then_some(index as u32),
            });
        }
    }
    let ranks = group.ranks.as_mut().expect("mapped ranks are ranks");
    let mpi = ranks.mpi;
    // Rank 0's own part, on its members' memory (idle: every reply is in), taken before any
    // rank is told: past this point, nothing stops rank 0 taking part.
    let mut memories = Vec::with_capacity(per_rank);
    for (member, channel) in group.members[..per_rank].iter_mut().enumerate() {
        memories.push(channel.device_memory().map_err(GroupError::on(member))?);
    }
    ranks.tell_all(|rank| parts[rank].clone())?;
    let mut scratch = std::mem::take(&mut ranks.scratch);
    let hush = ranks.office.hush();
    let mine = run(&mpi, &parts[0], &mut memories, &mut scratch);
    drop(hush);
    ranks.scratch = scratch;
    ranks.outcome(mine, kind.operation())?;
    let dests: Vec<Place> = sets
        .iter()
        .flat_map(|set| set.dests.iter().copied())
        .collect();
    group.confirm(&dests)?;
    Ok(true)
}

/// Buffers a collective across ranks reuses from one to the next: their pages are touched
/// once, not on every call.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    send: Vec<u8>,
    receive: Vec<u8>,
    combined: Vec<u8>,
    spare: Vec<u8>,
}

/// The first failure of a rank's part, kept to be reported after the collectives.
#[derive(Default)]
struct Failure(Option<RankFailure>);

impl Failure {
    fn note(&mut self, failure: impl FnOnce() -> RankFailure) {
        if self.0.is_none() {
            self.0 = Some(failure());
        }
    }
}

/// A rank's failure of MPI's side.
fn mpi_failure(e: crate::instance::InstanceError) -> RankFailure {
    RankFailure::Mpi {
        reason: e.to_string(),
    }
}

/// This rank's part of a collective (module doc), on `memories`, its members' memory in
/// member order (`None` where it is not mapped). A failure here is reported after every
/// collective of the part is done.
pub(crate) fn run(
    mpi: &Mpi,
    part: &Part,
    memories: &mut [Option<&mut SharedMemory>],
    scratch: &mut Scratch,
) -> Result<(), RankFailure> {
    // Every rank splits off its set's ranks, or takes all of them.
    let peers = match part.color {
        None => mpi.peers(),
        Some(color) => mpi.split(color).map_err(mpi_failure)?,
    };
    let mut failure = Failure::default();
    if memories.len() != part.members.len() || part.members.len() != part.per_rank {
        failure.note(|| RankFailure::Unfit {
            what: format!(
                "{} members' memory for {} places ({} per rank)",
                memories.len(),
                part.members.len(),
                part.per_rank
            ),
        });
    }
    let dst_bytes = part.dst_bytes(peers.size());
    match part.kind {
        Kind::Reduce(op, order) => {
            let reduction = Reduction { op, order };
            allreduce(&peers, part, reduction, memories, scratch, &mut failure)?
        }
        Kind::Allgather => {
            scratch.send.clear();
            for (j, &(src, _)) in part.members.iter().enumerate() {
                read_into(
                    &mut scratch.send,
                    memories,
                    j,
                    src,
                    part.src_bytes,
                    &mut failure,
                );
            }
            let send = std::mem::take(&mut scratch.send);
            let gathered = fan_out(memories, part, dst_bytes, scratch, &mut failure, |target| {
                peers.all_gather_into(&send, target)
            });
            scratch.send = send;
            gathered?;
        }
        // Never asked for across ranks (`run_across` refuses them).
        Kind::Scatter | Kind::Gather => failure.note(|| RankFailure::Unfit {
            what: "a scatter or gather across ranks".into(),
        }),
        Kind::Broadcast => {
            let root = peers.rank() == 0;
            let mut leader = Vec::new();
            if root {
                let src = part.members.first().map_or(0, |&(src, _)| src);
                read_into(&mut leader, memories, 0, src, part.src_bytes, &mut failure);
            }
            fan_out(memories, part, dst_bytes, scratch, &mut failure, |target| {
                if root {
                    target.copy_from_slice(&leader);
                }
                peers.broadcast_from_first(target)
            })?;
        }
    }
    match failure.0 {
        None => Ok(()),
        Some(failure) => Err(failure),
    }
}

/// Appends member `j`'s `bytes` at `at` to `out` (zeros, noted, where they cannot be read).
fn read_into(
    out: &mut Vec<u8>,
    memories: &[Option<&mut SharedMemory>],
    j: usize,
    at: usize,
    bytes: usize,
    failure: &mut Failure,
) {
    let source = memories
        .get(j)
        .and_then(|m| m.as_ref())
        .and_then(|m| m.range(at, bytes));
    match source {
        Some(source) => out.extend_from_slice(source),
        None => {
            failure.note(|| RankFailure::Outside {
                member: j,
                at,
                len: bytes,
            });
            out.resize(out.len() + bytes, 0);
        }
    }
}

/// Fills the first member's destination by `fill` (or a spare buffer, noted, where it
/// cannot be written: `fill` runs whatever happens, since it takes part in a collective),
/// then copies it into every other member's destination.
fn fan_out(
    memories: &mut [Option<&mut SharedMemory>],
    part: &Part,
    bytes: usize,
    scratch: &mut Scratch,
    failure: &mut Failure,
    fill: impl FnOnce(&mut [u8]) -> Result<(), crate::instance::InstanceError>,
) -> Result<(), RankFailure> {
    let (first, others) = match memories.split_first_mut() {
        Some((first, others)) => (first.as_mut(), others),
        None => (None, &mut [][..]),
    };
    let first_dst = part.members.first().map_or(0, |&(_, dst)| dst);
    let target = match first.and_then(|m| m.range_mut(first_dst, bytes)) {
        Some(target) => target,
        None => {
            failure.note(|| RankFailure::Outside {
                member: 0,
                at: first_dst,
                len: bytes,
            });
            scratch.spare.resize(bytes, 0);
            &mut scratch.spare[..]
        }
    };
    fill(target).map_err(mpi_failure)?;
    let dsts = part.members.iter().skip(1).map(|&(_, dst)| dst);
    for ((j, memory), dst) in others.iter_mut().enumerate().zip(dsts) {
        match memory.as_mut().and_then(|m| m.range_mut(dst, bytes)) {
            Some(out) => out.copy_from_slice(target),
            None => failure.note(|| RankFailure::Outside {
                member: j + 1,
                at: dst,
                len: bytes,
            }),
        }
    }
    Ok(())
}

/// What a reduction computes: its operation, in its order.
#[derive(Clone, Copy)]
struct Reduction {
    op: ReduceOp,
    order: ReduceOrder,
}

/// A reduction's part on this rank (module doc): this rank's slice of the result combined
/// (in worker order, or ranks first), then gathered into every member's destination.
fn allreduce(
    peers: &Peers,
    part: &Part,
    reduction: Reduction,
    memories: &mut [Option<&mut SharedMemory>],
    scratch: &mut Scratch,
    failure: &mut Failure,
) -> Result<(), RankFailure> {
    let floats = matches!(part.dtype, DataType::F32 | DataType::F64);
    let ranks_first = reduction.order == ReduceOrder::RanksFirst
        && floats
        && part.per_rank > 1
        && peers.size() > 1;
    let slice_of = match ranks_first {
        true => slice_ranks_first,
        false => slice_in_worker_order,
    };
    let mut combined = std::mem::take(&mut scratch.combined);
    let combining = slice_of(
        peers,
        part,
        reduction.op,
        memories,
        scratch,
        &mut combined,
        failure,
    );
    let gathered = combining.and_then(|()| {
        // Integers: every rank's slice combined, or no destination written anywhere.
        if !floats && peers.any(failure.0.is_some()) {
            return Ok(());
        }
        fan_out(memories, part, part.src_bytes, scratch, failure, |target| {
            peers.all_gather_into(&combined, target)
        })
    });
    scratch.combined = combined;
    gathered
}

/// The bytes of the slice of `elements` that peer `k` of `ranks` combines.
fn slice_bytes(part: &Part, ranks: usize, k: usize) -> usize {
    let size = part.dtype.size().max(1);
    slice(part.src_bytes / size, ranks, k).len() * size
}

/// This rank's slice of every member's source, combined in member order into `combined`
/// (module doc: worker order). `Err` is MPI's; the kernel's failure is noted.
fn slice_in_worker_order(
    peers: &Peers,
    part: &Part,
    op: ReduceOp,
    memories: &[Option<&mut SharedMemory>],
    scratch: &mut Scratch,
    combined: &mut Vec<u8>,
    failure: &mut Failure,
) -> Result<(), RankFailure> {
    let size = part.dtype.size().max(1);
    let ranks = peers.size();
    let elements = part.src_bytes / size;
    // Rank k's slice of every local source, rank after rank, in member order (as many as
    // every rank expects: a member missing here is zeros, noted).
    scratch.send.clear();
    for k in 0..ranks {
        let range = slice(elements, ranks, k);
        for j in 0..part.per_rank {
            let src = part.members.get(j).map_or(0, |&(src, _)| src);
            let at = src + range.start * size;
            read_into(
                &mut scratch.send,
                memories,
                j,
                at,
                range.len() * size,
                failure,
            );
        }
    }
    // This rank's slice of every member's source, in global member order.
    combine_slices(peers, part, op, scratch, part.per_rank, combined, failure)
}

/// This rank's members folded into one array, whose slices go to their ranks; this rank's
/// slice of every rank's array combined in rank order into `combined` (module doc: ranks
/// first). `Err` is MPI's; the kernel's failure is noted.
fn slice_ranks_first(
    peers: &Peers,
    part: &Part,
    op: ReduceOp,
    memories: &[Option<&mut SharedMemory>],
    scratch: &mut Scratch,
    combined: &mut Vec<u8>,
    failure: &mut Failure,
) -> Result<(), RankFailure> {
    let bytes = part.src_bytes;
    // A source that cannot be read takes part as zeros (noted).
    scratch.spare.clear();
    scratch.spare.resize(bytes, 0);
    let mut sources: Vec<&[u8]> = Vec::with_capacity(part.members.len());
    for (j, &(src, _)) in part.members.iter().enumerate() {
        let found = memories
            .get(j)
            .and_then(|m| m.as_ref())
            .and_then(|m| m.range(src, bytes));
        sources.push(found.unwrap_or_else(|| {
            failure.note(|| RankFailure::Outside {
                member: j,
                at: src,
                len: bytes,
            });
            &scratch.spare[..]
        }));
    }
    scratch.send.resize(bytes, 0);
    let folded = combine::combine_over(
        part.dtype,
        combine::partial_op(op),
        &sources,
        &mut scratch.send,
        1,
    );
    if let Err(e) = folded {
        failure.note(|| RankFailure::Combine(e));
    }
    // The folded array lies in rank order already: slice k goes to rank k as it is.
    combine_slices(peers, part, op, scratch, 1, combined, failure)
}

/// Sends `scratch.send` — rank `k`'s slice of each of this rank's `arrays` arrays, rank
/// after rank — in one all-to-all, receives this rank's slice of `arrays` arrays from every
/// rank, and combines them in the order received (rank after rank) into `combined`, a mean
/// dividing by every member of the ranks. `Err` is MPI's; the kernel's failure is noted.
fn combine_slices(
    peers: &Peers,
    part: &Part,
    op: ReduceOp,
    scratch: &mut Scratch,
    arrays: usize,
    combined: &mut Vec<u8>,
    failure: &mut Failure,
) -> Result<(), RankFailure> {
    let ranks = peers.size();
    let send_counts: Vec<usize> = (0..ranks)
        .map(|k| slice_bytes(part, ranks, k) * arrays)
        .collect();
    let n = slice_bytes(part, ranks, peers.rank());
    scratch.receive.resize(n * arrays * ranks, 0);
    peers
        .all_to_all_into(
            &scratch.send,
            &send_counts,
            &mut scratch.receive,
            &vec![n * arrays; ranks],
        )
        .map_err(mpi_failure)?;
    let inputs: Vec<&[u8]> = match n {
        0 => vec![&[]; ranks * arrays],
        n => scratch.receive.chunks_exact(n).collect(),
    };
    combined.resize(n, 0);
    let members = part.per_rank * ranks;
    if let Err(e) = combine::combine_over(part.dtype, op, &inputs, combined, members) {
        failure.note(|| RankFailure::Combine(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches slices that skip or repeat elements at the seams, or panic when there are
    /// fewer elements than ranks.
    #[test]
    fn the_slices_cover_every_element_once() {
        for elements in [0, 1, 3, 7, 64, 1000] {
            for ranks in 1..=5 {
                let mut next = 0;
                for k in 0..ranks {
                    let range = slice(elements, ranks, k);
                    assert_eq!(range.start, next, "{elements} over {ranks}, rank {k}");
                    next = range.end;
                }
                assert_eq!(next, elements);
            }
        }
    }
}
