//! Global collectives across ranks whose bulk data moves between the ranks by MPI, each
//! rank reading and writing its own workers in place, in the memory its host maps: an
//! allreduce of floats, an allgather and a broadcast.
//!
//! # Rules
//!
//! - **When.** A collective over every worker, or in groups that each span whole ranks
//!   (each group's ranks are split off the others for it: what follows holds among them),
//!   into array destinations of the right type and size, when every rank's host maps its
//!   workers' memory (threads and child processes, not QEMU); for an allreduce, of `f32`
//!   or `f64`; for an allgather, of sources of one size. Otherwise (groups that cut a
//!   rank's workers, integer allreduces, a destination not an array yet, QEMU) the data go
//!   through rank 0 as for any other operation, which also reports every refusal.
//! - **Checked before it starts.** Rank 0 checks every type, size and range (against each
//!   worker's memory, as its hello announced it) before any rank is asked. A rank that still
//!   cannot read or write a worker's memory takes part in every collective of the command
//!   (with zeros) and reports the failure after, so no rank is left waiting in one.
//! - **Allreduce: bit for bit one host's result.** The elements are split among the ranks
//!   (rank `k` of `R` takes elements `k·E/R .. (k+1)·E/R`). Each rank sends every other
//!   rank that rank's slice of each of its workers' sources (one all-to-all), combines its
//!   own slice of every worker's source in global worker order with the kernel one host
//!   uses (element by element, so slicing changes no result), and the combined slices are
//!   gathered to every rank (one allgather), which writes the result into each of its
//!   workers' destinations.
//! - A global scatter or gather moves worker 0's data, so it goes through rank 0; in groups
//!   on one rank it stays there (`local`).
//! - **Allgather**: each rank's workers' sources, in worker order, gathered to every rank
//!   (one allgather) straight into its first worker's destination, then copied to the
//!   others'. **Broadcast**: worker 0's source, on rank 0, broadcast (one MPI broadcast)
//!   into every rank's first worker's destination, then copied to the others'.

use std::ops::Range;

use serde::{Deserialize, Serialize};
use tessera_core::dtype::DataType;
use tessera_core::wire::endpoint::Description;
use tessera_core::wire::{ReduceOp, ValueKind};

use super::super::direct::{inside_memory, Member};
use super::super::{SessionError, State};
use super::control::ToRank;
use crate::combine;
use crate::instance::{Mpi, Peers};
use crate::transport::SharedMemory;

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::session) enum Kind {
    /// Element-wise combination, to every worker.
    Allreduce(ReduceOp),
    /// Every worker's source concatenated in worker order, to every worker.
    Allgather,
    /// Worker 0's source, to every worker.
    Broadcast,
    /// The leader's source cut into equal parts by flat element count, part `i` to member
    /// `i` (in groups on one rank only: see `local`).
    Scatter,
    /// The members' sources concatenated in worker order, to the leader (in groups on one
    /// rank only).
    Gather,
}

impl Kind {
    /// The operation's name, as errors give it.
    pub(in crate::session) fn operation(self) -> &'static str {
        match self {
            Self::Allreduce(_) => "allreduce",
            Self::Allgather => "allgather",
            Self::Broadcast => "broadcast",
            Self::Scatter => "scatter",
            Self::Gather => "gather",
        }
    }
}

/// One rank's part of a collective across ranks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::session) struct Part {
    kind: Kind,
    dtype: DataType,
    /// Bytes of each worker's source (worker 0's, for a broadcast).
    src_bytes: usize,
    /// Workers each rank hosts.
    per_rank: usize,
    /// Where this rank's workers' source and destination bytes start in their memory, in
    /// worker order.
    members: Vec<(usize, usize)>,
    /// The group this rank's workers belong to, when the collective runs in groups that
    /// span whole ranks (its ranks are split off the others for it); `None`: every rank.
    color: Option<u32>,
}

impl Part {
    /// Bytes of each destination, `ranks` taking part.
    fn dst_bytes(&self, ranks: usize) -> usize {
        match self.kind {
            Kind::Allgather | Kind::Gather => self.src_bytes * self.per_rank * ranks,
            Kind::Scatter => self.src_bytes / (self.per_rank * ranks).max(1),
            Kind::Allreduce(_) | Kind::Broadcast => self.src_bytes,
        }
    }
}

/// Bytes of a destination of `kind` over `members` workers whose sources hold `bytes`.
fn spread_bytes(kind: Kind, bytes: usize, members: usize) -> usize {
    match kind {
        Kind::Allgather | Kind::Gather => bytes * members,
        Kind::Scatter => bytes / members.max(1),
        Kind::Allreduce(_) | Kind::Broadcast => bytes,
    }
}

/// The elements rank `k` of `ranks` combines.
fn slice(elements: usize, ranks: usize, k: usize) -> Range<usize> {
    elements * k / ranks..elements * (k + 1) / ranks
}

impl State {
    /// Collective `kind` of register `src` into `dst` across the ranks, over every worker
    /// (`group_size` = the workers) or in groups of `group_size` that each span whole ranks,
    /// by the module's rules; `false` when it cannot run so (nothing was sent: the copying
    /// path runs). The workers are synced.
    pub(in crate::session) fn collective_across(
        &mut self,
        kind: Kind,
        src: u16,
        dst: u16,
        group_size: usize,
    ) -> Result<bool, SessionError> {
        let (Some(per_rank), Some(mpi)) =
            (self.ranks_in_place(), self.across.as_ref().map(|a| a.mpi))
        else {
            return Ok(false);
        };
        // A scatter or gather moves its leader's data: across ranks, its way is through
        // rank 0 (within a rank it stays there: `local`).
        if matches!(kind, Kind::Scatter | Kind::Gather) {
            return Ok(false);
        }
        let global = group_size == self.workers.len();
        let workers = self.workers.len();
        let local = 0..per_rank.min(workers);
        if group_size == 0 || !group_size.is_multiple_of(per_rank) {
            return Ok(false);
        }
        // Each rank's part, in rank order.
        let mut parts = Vec::with_capacity(workers / per_rank);
        for (index, start) in (0..workers).step_by(group_size).enumerate() {
            let group = start..start + group_size;
            let Some((dtype, src_bytes, members)) = self.plan_group(kind, group, src, dst)? else {
                return Ok(false);
            };
            // Every buffer of the collective (an allreduce's sends and receives hold about
            // a source per local worker) within what one MPI call moves.
            let largest = (src_bytes.saturating_mul(per_rank).saturating_mul(2))
                .max(spread_bytes(kind, src_bytes, group_size));
            if largest > super::MPI_BYTES {
                return Ok(false);
            }
            for first in (0..group_size).step_by(per_rank) {
                parts.push(Part {
                    kind,
                    dtype,
                    src_bytes,
                    per_rank,
                    members: members[first..first + per_rank]
                        .iter()
                        .map(|m| (m.src, m.dst))
                        .collect(),
                    color: (!global).then_some(index as u32),
                });
            }
        }
        // Rank 0's own part, on the memory of its workers (idle: every reply is in), taken
        // before any rank is told: past this point, nothing stops rank 0 taking part.
        let mut memories = Vec::with_capacity(per_rank);
        for channel in &mut self.workers[local] {
            memories.push(channel.device_memory()?);
        }
        if let Some(across) = &self.across {
            across.tell_all(|rank| ToRank::Collective(parts[rank].clone()))?;
        }
        // Taken out of the state while the workers' memory is borrowed from it.
        let mut scratch = self
            .across
            .as_mut()
            .map(|a| std::mem::take(&mut a.scratch))
            .unwrap_or_default();
        let mine = run(&mpi, &parts[0], &mut memories, &mut scratch);
        if let Some(across) = &mut self.across {
            across.scratch = scratch;
            across.outcome(mine, kind.operation())?;
        }
        Ok(true)
    }

    /// Collective `kind` of `src` into `dst` over the workers of `group`, checked: the type,
    /// the bytes of a source and where every member's source and destination are, if it can
    /// run in the workers' memory (module doc); `None` when it must take the copying path.
    pub(super) fn plan_group(
        &mut self,
        kind: Kind,
        group: Range<usize>,
        src: u16,
        dst: u16,
    ) -> Result<Option<(DataType, usize, Vec<Member>)>, SessionError> {
        let planned = match kind {
            Kind::Allreduce(_) => self.locate(group.clone(), src, dst)?,
            Kind::Allgather | Kind::Broadcast | Kind::Scatter | Kind::Gather => {
                self.locate_spread(kind, group.clone(), src, dst)?
            }
        };
        let Some((dtype, src_bytes, members)) = planned else {
            return Ok(None);
        };
        let dst_bytes = spread_bytes(kind, src_bytes, group.len());
        self.check_ranges(
            kind,
            group.start,
            &members,
            (src, dst),
            (src_bytes, dst_bytes),
        )?;
        Ok(Some((dtype, src_bytes, members)))
    }

    /// For an allgather or a broadcast over `group`: the type, the source's bytes and where
    /// every member's source and destination are, if it can run in the workers' memory
    /// (module doc).
    fn locate_spread(
        &mut self,
        kind: Kind,
        group: Range<usize>,
        src: u16,
        dst: u16,
    ) -> Result<Option<(DataType, usize, Vec<Member>)>, SessionError> {
        let sources = self.describe_all(group.clone(), src)?;
        let targets = self.describe_all(group.clone(), dst)?;
        let is_array = |d: &Description| d.kind == ValueKind::Array && d.dtype.is_some();
        let Some(leader) = sources.first().filter(|d| is_array(d)) else {
            return Ok(None);
        };
        let (dtype, bytes) = (leader.dtype, leader.bytes as usize);
        // A broadcast and a scatter read the leader's source only; a gather writes the
        // leader's destination only.
        let read = match kind {
            Kind::Broadcast | Kind::Scatter => &sources[..1],
            _ => &sources[..],
        };
        let written = match kind {
            Kind::Gather => &targets[..1],
            _ => &targets[..],
        };
        let same = |d: &Description| is_array(d) && d.dtype == dtype && d.bytes as usize == bytes;
        if !read.iter().all(same) {
            return Ok(None);
        }
        let size = dtype.map_or(1, |t| t.size().max(1));
        if kind == Kind::Scatter && !(bytes / size).is_multiple_of(group.len()) {
            // Refused by the copying path, which names the rule.
            return Ok(None);
        }
        let dst_bytes = spread_bytes(kind, bytes, group.len());
        let fits =
            |d: &Description| is_array(d) && d.dtype == dtype && d.bytes as usize == dst_bytes;
        if !written.iter().all(fits) {
            return Ok(None);
        }
        let members = group
            .zip(sources.iter().zip(&targets))
            .map(|(worker, (s, t))| Member {
                worker,
                src: s.at as usize,
                dst: t.at as usize,
            })
            .collect();
        Ok(dtype.map(|dtype| (dtype, bytes, members)))
    }

    /// Every source read and every destination lies inside its worker's memory, as its
    /// hello said (a broadcast reads `leader`'s source only).
    fn check_ranges(
        &self,
        kind: Kind,
        leader: usize,
        members: &[Member],
        registers: (u16, u16),
        (src_bytes, dst_bytes): (usize, usize),
    ) -> Result<(), SessionError> {
        for member in members {
            let memory = self.workers[member.worker].limits().memory as usize;
            let is_leader = member.worker == leader;
            let reads = !matches!(kind, Kind::Broadcast | Kind::Scatter) || is_leader;
            let writes = kind != Kind::Gather || is_leader;
            let ranges = [
                (member.src, registers.0, src_bytes, reads),
                (member.dst, registers.1, dst_bytes, writes),
            ];
            for (at, register, bytes, used) in ranges {
                if used {
                    inside_memory(member.worker, register, at, bytes, memory)?;
                }
            }
        }
        Ok(())
    }
}

/// Buffers a collective across ranks reuses from one to the next: their pages are touched
/// once, not on every call.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    send: Vec<u8>,
    receive: Vec<u8>,
    combined: Vec<u8>,
    spare: Vec<u8>,
}

/// The first failure of a rank's part, kept to be reported after the collectives.
#[derive(Default)]
struct Failure(Option<String>);

impl Failure {
    fn note(&mut self, reason: impl FnOnce() -> String) {
        if self.0.is_none() {
            self.0 = Some(reason());
        }
    }
}

/// This rank's part of a collective (module doc), on `memories`, its workers' memory in
/// worker order (`None` where it is not mapped). A failure here is reported after every
/// collective of the part is done.
pub(super) fn run(
    mpi: &Mpi,
    part: &Part,
    memories: &mut [Option<&mut SharedMemory>],
    scratch: &mut Scratch,
) -> Result<(), String> {
    // Every rank splits off its group's ranks, or takes all of them.
    let peers = match part.color {
        None => mpi.peers(),
        Some(color) => mpi.split(color).map_err(|e| e.to_string())?,
    };
    let mut failure = Failure::default();
    if memories.len() != part.members.len() || part.members.len() != part.per_rank {
        failure.note(|| {
            format!(
                "{} workers' memory for {} members ({} per rank)",
                memories.len(),
                part.members.len(),
                part.per_rank
            )
        });
    }
    let dst_bytes = part.dst_bytes(peers.size());
    match part.kind {
        Kind::Allreduce(op) => allreduce(&peers, part, op, memories, scratch, &mut failure)?,
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
        // Never asked for across ranks (`collective_across` refuses them).
        Kind::Scatter | Kind::Gather => {
            failure.note(|| "a scatter or gather is not run across ranks".into());
        }
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
        Some(reason) => Err(reason),
    }
}

/// Appends worker `j`'s `bytes` at `at` to `out` (zeros, noted, where they cannot be read).
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
            failure.note(|| {
                format!(
                    "worker {j} of this rank: its source is not readable at {at} ({bytes} bytes)"
                )
            });
            out.resize(out.len() + bytes, 0);
        }
    }
}

/// Fills the first worker's destination by `fill` (or a spare buffer, noted, where it
/// cannot be written: `fill` runs whatever happens, since it takes part in a collective),
/// then copies it into every other worker's destination.
fn fan_out(
    memories: &mut [Option<&mut SharedMemory>],
    part: &Part,
    bytes: usize,
    scratch: &mut Scratch,
    failure: &mut Failure,
    fill: impl FnOnce(&mut [u8]) -> Result<(), crate::instance::InstanceError>,
) -> Result<(), String> {
    let (first, others) = match memories.split_first_mut() {
        Some((first, others)) => (first.as_mut(), others),
        None => (None, &mut [][..]),
    };
    let first_dst = part.members.first().map_or(0, |&(_, dst)| dst);
    let target = match first.and_then(|m| m.range_mut(first_dst, bytes)) {
        Some(target) => target,
        None => {
            failure.note(|| {
                format!(
                    "worker 0 of this rank: its destination is not writable at {first_dst} \
                     ({bytes} bytes)"
                )
            });
            scratch.spare.resize(bytes, 0);
            &mut scratch.spare[..]
        }
    };
    fill(target).map_err(|e| e.to_string())?;
    let dsts = part.members.iter().skip(1).map(|&(_, dst)| dst);
    for ((j, memory), dst) in others.iter_mut().enumerate().zip(dsts) {
        match memory.as_mut().and_then(|m| m.range_mut(dst, bytes)) {
            Some(out) => out.copy_from_slice(target),
            None => failure.note(|| {
                format!(
                    "worker {} of this rank: its destination is not writable at {dst} \
                     ({bytes} bytes)",
                    j + 1
                )
            }),
        }
    }
    Ok(())
}

/// An allreduce's part on this rank (module doc).
fn allreduce(
    peers: &Peers,
    part: &Part,
    op: ReduceOp,
    memories: &mut [Option<&mut SharedMemory>],
    scratch: &mut Scratch,
    failure: &mut Failure,
) -> Result<(), String> {
    let size = part.dtype.size().max(1);
    let (ranks, me) = (peers.size(), peers.rank());
    let elements = part.src_bytes / size;
    let local = part.members.len();
    // Rank k's slice of every local source, rank after rank, in worker order.
    let slice_bytes = |k: usize| slice(elements, ranks, k).len() * size;
    let send_counts: Vec<usize> = (0..ranks).map(|k| slice_bytes(k) * local).collect();
    scratch.send.clear();
    for k in 0..ranks {
        let range = slice(elements, ranks, k);
        for (j, &(src, _)) in part.members.iter().enumerate() {
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
    // This rank's slice of every worker's source, in global worker order.
    let n = slice_bytes(me);
    let receive_counts = vec![n * part.per_rank; ranks];
    scratch.receive.resize(n * part.per_rank * ranks, 0);
    peers
        .all_to_all_into(
            &scratch.send,
            &send_counts,
            &mut scratch.receive,
            &receive_counts,
        )
        .map_err(|e| e.to_string())?;
    let inputs: Vec<&[u8]> = match n {
        0 => vec![&[]; ranks * part.per_rank],
        n => scratch.receive.chunks_exact(n).collect(),
    };
    let mut combined = std::mem::take(&mut scratch.combined);
    combined.resize(n, 0);
    if let Err(e) = combine::combine(part.dtype, op, &inputs, &mut combined) {
        failure.note(|| format!("combining: {e:?}"));
    }
    // Gathered straight into the first worker's destination, then copied to the others'.
    let gathered = fan_out(memories, part, part.src_bytes, scratch, failure, |target| {
        peers.all_gather_into(&combined, target)
    });
    scratch.combined = combined;
    gathered
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
