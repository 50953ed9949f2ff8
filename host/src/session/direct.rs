//! An allreduce computed in place in the workers' memory, where the host maps it (device
//! threads and child processes): each block of elements is read from every member's
//! source, combined, and written to every member's destination before the next block, so
//! every byte is read once and written once, and nothing is copied through a host array.
//!
//! # Contract
//!
//! - Taken only for float arrays (whose combination cannot fail once the sizes are
//!   checked), when every member's memory is mapped and every destination already holds an
//!   array; otherwise the copying path runs (it also turns a tensor destination into an
//!   array, and computes integer results whole, since they can overflow).
//! - Every type, element count and memory range of every group is checked before the first
//!   byte is written, as on the copying path.
//! - A source that is also the destination is safe: a block is read from every member
//!   before it is written to any.

use std::ops::Range;

use tessera_core::dtype::DataType;
use tessera_core::wire::ValueKind;

use super::collective::ReduceOp;
use super::reduce::{self, BLOCK};
use super::state::array_shape;
use super::{SessionError, State};
use crate::transport::{SharedMemory, TransportError};

const OPERATION: &str = "allreduce";

/// Elements of every member read, combined and written per pass: four of the kernel's
/// blocks (64 KiB of f32 per member), so that the copies read and the result stay in the
/// L2 cache while the next pass streams in.
const PASS: usize = 4 * BLOCK;

/// Where one member's source and destination bytes are in its memory.
struct Member {
    worker: usize,
    src: usize,
    dst: usize,
}

/// One group's allreduce, checked and ready to run in place.
pub(super) struct InPlace {
    group: Range<usize>,
    /// The source and destination registers.
    registers: (u16, u16),
    dtype: DataType,
    bytes: usize,
    members: Vec<Member>,
}

impl State {
    /// The allreduce of register `src` into `dst` over the workers of `group`, checked, if
    /// it can run in place (module doc); `None` when the copying path must run instead.
    /// The workers are synced.
    pub(super) fn plan_in_place(
        &mut self,
        group: Range<usize>,
        src: u16,
        dst: u16,
    ) -> Result<Option<InPlace>, SessionError> {
        if !self.workers[group.clone()]
            .iter()
            .all(|w| w.shares_memory())
        {
            return Ok(None);
        }
        let Some((dtype, bytes, members)) = self.locate(group.clone(), src, dst)? else {
            return Ok(None);
        };
        for (worker, member) in group.clone().zip(&members) {
            for (at, register) in [(member.src, src), (member.dst, dst)] {
                let memory = self.with_memory(worker, SharedMemory::len)?.unwrap_or(0);
                if at.checked_add(bytes).is_none_or(|end| end > memory) {
                    return Err(SessionError::OutsideMemory {
                        worker,
                        register,
                        at,
                        bytes,
                        memory,
                    });
                }
            }
        }
        Ok(Some(InPlace {
            group,
            registers: (src, dst),
            dtype,
            bytes,
            members,
        }))
    }

    /// Runs a planned allreduce: block by block, every member's source read, combined,
    /// and written to every member's destination; the blocks are split between as many
    /// host threads as there are cores (the workers are idle meanwhile).
    pub(super) fn run_in_place(
        &mut self,
        plan: &InPlace,
        op: ReduceOp,
    ) -> Result<(), SessionError> {
        let memories = self.workers[plan.group.clone()]
            .iter_mut()
            .map(|channel| {
                let replica = channel.replica();
                // Every member maps its memory (the plan checked); a channel that lost its
                // mapping could only have been closed.
                channel
                    .device_memory()?
                    .ok_or(TransportError::Closed { replica })
            })
            .collect::<Result<Vec<&SharedMemory>, _>>()?;
        let block = PASS * plan.dtype.size();
        let blocks = plan.bytes.div_ceil(block);
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, blocks.max(1));
        let per_thread = blocks.div_ceil(threads) * block;
        let memories = &memories;
        let mut parts = (0..plan.bytes)
            .step_by(per_thread.max(1))
            .map(|start| start..plan.bytes.min(start + per_thread));
        // This thread takes the first part; the others (none for a small array) get a
        // thread each.
        let first = parts.next().unwrap_or(0..0);
        std::thread::scope(|scope| {
            let others: Vec<_> = parts
                .map(|range| scope.spawn(move || reduce_range(plan, op, memories, range)))
                .collect();
            let mine = reduce_range(plan, op, memories, first);
            // The first failure is the answer (the scope joins the rest); a panic in a part
            // goes on as a panic here.
            others.into_iter().fold(mine, |outcome, part| {
                let theirs = part
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                outcome.and(theirs)
            })
        })
    }
}

/// The bytes `range` of a planned allreduce (a whole number of blocks from the start),
/// block by block.
fn reduce_range(
    plan: &InPlace,
    op: ReduceOp,
    memories: &[&SharedMemory],
    range: Range<usize>,
) -> Result<(), SessionError> {
    let block = PASS * plan.dtype.size();
    let mut inputs: Vec<Vec<u8>> = plan.members.iter().map(|_| vec![0u8; block]).collect();
    let mut out = vec![0u8; block];
    for start in range.clone().step_by(block) {
        let len = block.min(range.end - start);
        // Ranges checked by the plan: every read and write lands in its memory (a refusal
        // here would mean the plan was wrong, and is an error, never a stale block).
        let outside =
            |member: &Member, memory: &SharedMemory, (register, at)| SessionError::OutsideMemory {
                worker: member.worker,
                register,
                at,
                bytes: len,
                memory: memory.len(),
            };
        for ((member, memory), input) in plan.members.iter().zip(memories).zip(&mut inputs) {
            let at = member.src + start;
            if !memory.read_at(at, &mut input[..len]) {
                return Err(outside(member, memory, (plan.registers.0, at)));
            }
        }
        let views: Vec<&[u8]> = inputs.iter().map(|input| &input[..len]).collect();
        let out = &mut out[..len];
        reduce::combine(plan.dtype, op, &views, out)?;
        for (member, memory) in plan.members.iter().zip(memories) {
            // Streaming stores: the result is not read again here, and a plain store
            // would read every line of the destination first (~15% of the time measured).
            let at = member.dst + start;
            if !memory.stream_at(at, out) {
                return Err(outside(member, memory, (plan.registers.1, at)));
            }
        }
    }
    Ok(())
}

impl State {
    /// The element type and byte length every member's source shares, and where each
    /// member's source and destination are; `None` when the copying path must run (integer
    /// arrays, a destination that is not an array yet, ranges that overlap without being the
    /// same). Every rule of the copying path is checked here, in its order (every source,
    /// then every destination), before anything is written.
    fn locate(
        &mut self,
        group: Range<usize>,
        src: u16,
        dst: u16,
    ) -> Result<Option<(DataType, usize, Vec<Member>)>, SessionError> {
        // Every member asked at once: one round trip, not one per member.
        let sources = group
            .clone()
            .zip(self.describe_all(group.clone(), src)?)
            .map(|(worker, described)| {
                let (dtype, shape) = array_shape(worker, src, &described)?;
                Ok((dtype, shape, described))
            })
            .collect::<Result<Vec<_>, SessionError>>()?;
        let Some((dtype, _, first)) = sources.first() else {
            return Ok(None);
        };
        let (dtype, bytes) = (*dtype, first.bytes as usize);
        let size = dtype.size().max(1);
        for (worker, (actual, _, _)) in group.clone().zip(&sources) {
            if *actual != dtype {
                return Err(SessionError::DtypeMismatch {
                    operation: OPERATION,
                    worker,
                    expected: dtype,
                    actual: *actual,
                });
            }
        }
        for (worker, (_, _, source)) in group.clone().zip(&sources) {
            if source.bytes as usize != bytes {
                return Err(SessionError::Elements {
                    operation: OPERATION,
                    worker,
                    expected: bytes / size,
                    actual: source.bytes as usize / size,
                });
            }
        }
        if !reduce::supported(dtype) {
            return Err(SessionError::Dtype {
                operation: OPERATION,
                dtype,
            });
        }
        if !matches!(dtype, DataType::F32 | DataType::F64) {
            return Ok(None);
        }
        let mut members = Vec::with_capacity(group.len());
        let mut in_place = true;
        let targets = self.describe_all(group.clone(), dst)?;
        for ((worker, (_, _, source)), target) in group.zip(&sources).zip(targets) {
            let target_dtype = target.dtype.unwrap_or(DataType::F32);
            if target_dtype != dtype {
                return Err(SessionError::DtypeMismatch {
                    operation: OPERATION,
                    worker,
                    expected: dtype,
                    actual: target_dtype,
                });
            }
            if target.bytes as usize != bytes {
                return Err(SessionError::Elements {
                    operation: OPERATION,
                    worker,
                    expected: target.bytes as usize / size,
                    actual: bytes / size,
                });
            }
            let (src_at, dst_at) = (source.at as usize, target.at as usize);
            // The same register, or apart: a partial overlap would read results back in.
            let apart = src_at == dst_at || src_at.abs_diff(dst_at) >= bytes;
            in_place &= target.kind == ValueKind::Array && apart;
            members.push(Member {
                worker,
                src: src_at,
                dst: dst_at,
            });
        }
        Ok(in_place.then_some((dtype, bytes, members)))
    }
}
