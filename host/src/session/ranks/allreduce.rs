//! A global float allreduce across ranks, its bulk data moving between the ranks by MPI and
//! each rank reading and writing its own workers in place, in the memory its host maps.
//!
//! # Rules
//!
//! - **When.** A global allreduce of `f32` or `f64` arrays into array destinations, when
//!   every rank's host maps its workers' memory (threads and child processes, not QEMU).
//!   Otherwise (groups, integers, a destination not an array yet, QEMU) the data goes
//!   through rank 0 as for any other operation.
//! - **Bit for bit one host's result.** The elements are split among the ranks (rank `k`
//!   of `R` takes elements `k·E/R .. (k+1)·E/R`). Each rank sends every other rank that
//!   rank's slice of each of its workers' sources (one all-to-all), combines its own slice
//!   of every worker's source in global worker order with the kernel one host uses
//!   (element by element, so slicing changes no result), and the combined slices are
//!   gathered to every rank (one allgather), which writes the whole result into each of
//!   its workers' destinations.
//! - **Checked before it starts.** Rank 0 checks every type, size and range (against each
//!   worker's memory, as its hello announced it) before any rank is asked. A rank that still
//!   cannot read or write a worker's memory takes part in both collectives (with zeros)
//!   and reports the failure after, so no rank is left waiting in one.

use std::ops::Range;

use serde::{Deserialize, Serialize};
use tessera_core::dtype::DataType;

use super::super::direct::Member;
use super::super::{SessionError, State};
use super::control::{FromRank, ToRank};
use crate::combine::{self, ReduceOp};
use crate::instance::{Instances, Mpi};
use crate::transport::SharedMemory;

/// One rank's part of an allreduce across ranks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Part {
    op: ReduceOp,
    dtype: DataType,
    /// Elements of every source and destination.
    elements: usize,
    /// Workers each rank hosts.
    per_rank: usize,
    /// Where this rank's workers' source and destination bytes start in their memory, in
    /// worker order.
    members: Vec<(usize, usize)>,
}

/// The elements rank `k` of `ranks` combines.
fn slice(elements: usize, ranks: usize, k: usize) -> Range<usize> {
    elements * k / ranks..elements * (k + 1) / ranks
}

impl State {
    /// The allreduce of register `src` into `dst` over every worker across the ranks, by
    /// the module's rules; `false` when it cannot run so (nothing was sent: the copying
    /// path runs). The workers are synced.
    pub(in crate::session) fn allreduce_across(
        &mut self,
        src: u16,
        dst: u16,
        op: ReduceOp,
    ) -> Result<bool, SessionError> {
        let Some((mpi, per_rank, maps)) = self
            .across
            .as_ref()
            .map(|a| (a.mpi, a.per_rank, a.maps_memory))
        else {
            return Ok(false);
        };
        let workers = self.workers.len();
        let local = 0..per_rank.min(workers);
        if !maps
            || !self.workers[local.clone()]
                .iter()
                .all(|w| w.shares_memory())
        {
            return Ok(false);
        }
        let Some((dtype, bytes, members)) = self.locate(0..workers, src, dst)? else {
            return Ok(false);
        };
        self.check_ranges(&members, (src, dst), bytes)?;
        let part = |rank: usize| Part {
            op,
            dtype,
            elements: bytes / dtype.size().max(1),
            per_rank,
            members: members[rank * per_rank..(rank + 1) * per_rank]
                .iter()
                .map(|m| (m.src, m.dst))
                .collect(),
        };
        let ranks = workers / per_rank.max(1);
        if let Some(across) = &self.across {
            for rank in 1..ranks {
                across.tell(rank, &ToRank::Allreduce(part(rank)))?;
            }
        }
        // Rank 0's own part, on the memory of its workers (idle: every reply is in).
        let mut memories = Vec::with_capacity(per_rank);
        for channel in &mut self.workers[local] {
            memories.push(channel.device_memory()?);
        }
        // Taken out of the state while the workers' memory is borrowed from it.
        let mut scratch = self
            .across
            .as_mut()
            .map(|a| std::mem::take(&mut a.scratch))
            .unwrap_or_default();
        let mine = run(&mpi, &part(0), &mut memories, &mut scratch);
        if let Some(across) = &mut self.across {
            across.scratch = scratch;
        }
        let mut failures: Vec<(usize, String)> = Vec::new();
        if let Err(reason) = mine {
            failures.push((0, reason));
        }
        if let Some(across) = &self.across {
            for (rank, answer) in (1..ranks).zip(across.answers()?) {
                match answer {
                    FromRank::Done => {}
                    FromRank::Failed(reason) => failures.push((rank, reason)),
                    FromRank::Finished => failures.push((rank, "it has finished".into())),
                }
            }
        }
        if let Some((rank, reason)) = failures.into_iter().next() {
            return Err(SessionError::Rank {
                rank,
                operation: "allreduce",
                reason,
            });
        }
        Ok(true)
    }

    /// Every member's source and destination lie inside its memory, as its hello said.
    fn check_ranges(
        &self,
        members: &[Member],
        registers: (u16, u16),
        bytes: usize,
    ) -> Result<(), SessionError> {
        for member in members {
            let memory = self.workers[member.worker].limits().memory as usize;
            for (at, register) in [(member.src, registers.0), (member.dst, registers.1)] {
                if at.checked_add(bytes).is_none_or(|end| end > memory) {
                    return Err(SessionError::OutsideMemory {
                        worker: member.worker,
                        register,
                        at,
                        bytes,
                        memory,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Buffers an allreduce across ranks reuses from one to the next: their pages are touched
/// once, not on every call.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    send: Vec<u8>,
    receive: Vec<u8>,
    combined: Vec<u8>,
    spare: Vec<u8>,
}

/// This rank's part of an allreduce (module doc), on `memories`, its workers' memory in
/// worker order (`None` where it is not mapped). A failure here is reported after both
/// collectives are done.
pub(super) fn run(
    mpi: &Mpi,
    part: &Part,
    memories: &mut [Option<&mut SharedMemory>],
    scratch: &mut Scratch,
) -> Result<(), String> {
    let size = part.dtype.size().max(1);
    let (ranks, me) = (mpi.size(), mpi.rank());
    let bytes = part.elements * size;
    let local = part.members.len();
    let mut failure: Option<String> = None;
    let mut fail = |reason: String| {
        failure.get_or_insert(reason);
    };
    if memories.len() != local || local != part.per_rank {
        fail(format!(
            "{} workers' memory for {local} members ({} per rank)",
            memories.len(),
            part.per_rank
        ));
    }
    // Rank k's slice of every local source, rank after rank, in worker order.
    let slice_bytes = |k: usize| slice(part.elements, ranks, k).len() * size;
    let send_counts: Vec<usize> = (0..ranks).map(|k| slice_bytes(k) * local).collect();
    scratch.send.clear();
    for k in 0..ranks {
        let range = slice(part.elements, ranks, k);
        for (j, &(src, _)) in part.members.iter().enumerate() {
            let source = memories
                .get(j)
                .and_then(|m| m.as_ref())
                .and_then(|m| m.range(src + range.start * size, range.len() * size));
            match source {
                Some(source) => scratch.send.extend_from_slice(source),
                None => {
                    fail(format!(
                        "worker {j} of this rank: its source is not readable at {src} \
                         ({bytes} bytes)"
                    ));
                    let len = scratch.send.len() + range.len() * size;
                    scratch.send.resize(len, 0);
                }
            }
        }
    }
    // This rank's slice of every worker's source, in global worker order.
    let n = slice_bytes(me);
    let receive_counts = vec![n * part.per_rank; ranks];
    scratch.receive.resize(n * part.per_rank * ranks, 0);
    mpi.all_to_all_into(
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
    scratch.combined.resize(n, 0);
    if let Err(e) = combine::combine(part.dtype, part.op, &inputs, &mut scratch.combined) {
        fail(format!("combining: {e:?}"));
    }
    // Gathered straight into the first worker's destination, then copied to the others'.
    let (first, others) = match memories.split_first_mut() {
        Some((first, others)) => (first.as_mut(), others),
        None => (None, &mut [][..]),
    };
    let first_dst = part.members.first().map_or(0, |&(_, dst)| dst);
    let target = match first.and_then(|m| m.range_mut(first_dst, bytes)) {
        Some(target) => target,
        None => {
            fail(format!(
                "worker 0 of this rank: its destination is not writable at {first_dst} \
                 ({bytes} bytes)"
            ));
            scratch.spare.resize(bytes, 0);
            &mut scratch.spare[..]
        }
    };
    mpi.all_gather_into(&scratch.combined, target)
        .map_err(|e| e.to_string())?;
    for ((j, memory), &(_, dst)) in others.iter_mut().enumerate().zip(&part.members[1..]) {
        match memory.as_mut().and_then(|m| m.range_mut(dst, bytes)) {
            Some(out) => out.copy_from_slice(target),
            None => fail(format!(
                "worker {} of this rank: its destination is not writable at {dst} ({bytes} \
                 bytes)",
                j + 1
            )),
        }
    }
    match failure {
        None => Ok(()),
        Some(reason) => Err(reason),
    }
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
