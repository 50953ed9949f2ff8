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
use tessera_core::wire::endpoint::Description;
use tessera_core::wire::ValueKind;

use super::collective::ReduceOp;
use super::state::array_shape;
use super::{SessionError, State};
use crate::combine::{self, BLOCK};
use crate::transport::{stream, SharedMemory, SplitError, TransportError};

const OPERATION: &str = "allreduce";

/// Elements of every member read, combined and written per pass: four of the kernel's
/// blocks (64 KiB of f32 per member), so that the copies read and the result stay in the
/// L2 cache while the next pass streams in.
const PASS: usize = 4 * BLOCK;

/// `bytes` of register `register` at `at` lie inside worker `worker`'s `memory` bytes: the
/// rule every read or write of a worker's memory in place is checked by, first.
pub(super) fn inside_memory(
    worker: usize,
    register: u16,
    at: usize,
    bytes: usize,
    memory: usize,
) -> Result<(), SessionError> {
    if at.checked_add(bytes).is_none_or(|end| end > memory) {
        return Err(SessionError::OutsideMemory {
            worker,
            register,
            at,
            bytes,
            memory,
        });
    }
    Ok(())
}

/// Where one member's source and destination bytes are in its memory.
pub(super) struct Member {
    pub(super) worker: usize,
    pub(super) src: usize,
    pub(super) dst: usize,
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
                let memory = self
                    .with_memory(worker, |memory| memory.len())?
                    .unwrap_or(0);
                inside_memory(worker, register, at, bytes, memory)?;
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
    /// host threads as there are cores (the workers are idle meanwhile), each thread
    /// writing only through its own views of the members' memories (disjoint, so that no
    /// two threads touch one byte: [`SharedMemory::split_mut`] checks it).
    pub(super) fn run_in_place(
        &mut self,
        plan: &InPlace,
        op: ReduceOp,
    ) -> Result<(), SessionError> {
        let block = PASS * plan.dtype.size();
        let blocks = plan.bytes.div_ceil(block);
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, blocks.max(1));
        let per_thread = blocks.div_ceil(threads) * block;
        let parts: Vec<Range<usize>> = (0..plan.bytes)
            .step_by(per_thread.max(1))
            .map(|start| start..plan.bytes.min(start + per_thread))
            .collect();
        let mut memories = self.workers[plan.group.clone()]
            .iter_mut()
            .map(|channel| {
                let replica = channel.replica();
                // Every member maps its memory (the plan checked); a channel that lost its
                // mapping could only have been closed.
                channel
                    .device_memory()?
                    .ok_or(TransportError::Closed { replica })
            })
            .collect::<Result<Vec<&mut SharedMemory>, _>>()?;
        // Each part's views of every member, in member order.
        let mut views: Vec<Vec<Views<'_>>> = parts.iter().map(|_| Vec::new()).collect();
        for (member, memory) in plan.members.iter().zip(&mut memories) {
            for (part, member_views) in views.iter_mut().zip(member.split(plan, &parts, memory)?) {
                part.push(member_views);
            }
        }
        let mut views = views.into_iter();
        // This thread takes the first part; the others (none for a small array) get a
        // thread each.
        let Some(first) = views.next() else {
            return Ok(());
        };
        std::thread::scope(|scope| {
            let others: Vec<_> = views
                .map(|part| scope.spawn(move || reduce_range(plan, op, part)))
                .collect();
            let mine = reduce_range(plan, op, first);
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

/// One member's bytes of one part of an allreduce: its source and destination (the same
/// bytes when the registers are).
enum Views<'m> {
    Same(&'m mut [u8]),
    Apart {
        src: &'m mut [u8],
        dst: &'m mut [u8],
    },
}

impl Views<'_> {
    fn src(&self) -> &[u8] {
        match self {
            Self::Same(bytes) | Self::Apart { src: bytes, .. } => bytes,
        }
    }

    fn dst(&mut self) -> &mut [u8] {
        match self {
            Self::Same(bytes) | Self::Apart { dst: bytes, .. } => bytes,
        }
    }
}

impl Member {
    /// This member's views of every part of the array, one per part, in `memory`: split so
    /// that no two share a byte, or an error naming the register whose bytes the memory
    /// does not hold (the plan checked them) or the two that overlap.
    fn split<'m>(
        &self,
        plan: &InPlace,
        parts: &[Range<usize>],
        memory: &'m mut SharedMemory,
    ) -> Result<Vec<Views<'m>>, SessionError> {
        let same = self.src == self.dst;
        let shift = |at: usize, part: &Range<usize>| at + part.start..at + part.end;
        let ranges: Vec<Range<usize>> = parts
            .iter()
            .flat_map(|part| {
                let dst = (!same).then(|| shift(self.dst, part));
                std::iter::once(shift(self.src, part)).chain(dst)
            })
            .collect();
        let (src_register, dst_register) = plan.registers;
        let memory_len = memory.len();
        let mut views = memory
            .split_mut(&ranges)
            .map_err(|e| match e {
                SplitError::Outside { range, .. } => SessionError::OutsideMemory {
                    worker: self.worker,
                    register: if range.start >= self.src && range.end <= self.src + plan.bytes {
                        src_register
                    } else {
                        dst_register
                    },
                    at: range.start,
                    bytes: range.len(),
                    memory: memory_len,
                },
                SplitError::Overlap(..) => SessionError::RegistersOverlap {
                    worker: self.worker,
                    registers: plan.registers,
                    at: (self.src, self.dst),
                    bytes: plan.bytes,
                },
            })?
            .into_iter();
        let mut split = Vec::with_capacity(parts.len());
        while let Some(src) = views.next() {
            split.push(match (same, views.next()) {
                (false, Some(dst)) => Views::Apart { src, dst },
                _ => Views::Same(src),
            });
        }
        Ok(split)
    }
}

/// One part of a planned allreduce (a whole number of blocks from the array's start),
/// block by block, through `views`, one per member.
fn reduce_range(
    plan: &InPlace,
    op: ReduceOp,
    mut views: Vec<Views<'_>>,
) -> Result<(), SessionError> {
    let block = PASS * plan.dtype.size();
    let part = views.first().map_or(0, |view| view.src().len());
    let mut inputs: Vec<Vec<u8>> = views.iter().map(|_| vec![0u8; block]).collect();
    let mut out = vec![0u8; block];
    for start in (0..part).step_by(block) {
        let end = part.min(start + block);
        let len = end - start;
        // Every member's block is read before any is written: a source that is also the
        // destination is safe.
        for (view, input) in views.iter().zip(&mut inputs) {
            input[..len].copy_from_slice(&view.src()[start..end]);
        }
        let inputs: Vec<&[u8]> = inputs.iter().map(|input| &input[..len]).collect();
        let out = &mut out[..len];
        combine::combine(plan.dtype, op, &inputs, out).map_err(|e| SessionError::combine(e, 0))?;
        for view in &mut views {
            // Streaming stores: the result is not read again here, and a plain store
            // would read every line of the destination first (~15% of the time measured).
            // Equal lengths by construction: `out` is the block, as is the view's range.
            let streamed = stream(&mut view.dst()[start..end], out);
            debug_assert!(streamed, "a block and its destination differ in length");
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
    pub(super) fn locate(
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
        check_sources(group.clone(), &sources, dtype, bytes)?;
        if !matches!(dtype, DataType::F32 | DataType::F64) {
            return Ok(None);
        }
        let targets = self.describe_all(group.clone(), dst)?;
        let members = members(group, &sources, targets, dtype, bytes)?;
        Ok(members.map(|members| (dtype, bytes, members)))
    }
}

/// A member's source register: its element type, its shape, and its description.
type Source = (DataType, Vec<u32>, Description);

/// Every source of `group` holds `bytes` of `dtype`, a type an allreduce combines.
fn check_sources(
    group: Range<usize>,
    sources: &[Source],
    dtype: DataType,
    bytes: usize,
) -> Result<(), SessionError> {
    let size = dtype.size().max(1);
    for (worker, (actual, _, _)) in group.clone().zip(sources) {
        if *actual != dtype {
            return Err(SessionError::DtypeMismatch {
                operation: OPERATION,
                worker,
                expected: dtype,
                actual: *actual,
            });
        }
    }
    for (worker, (_, _, source)) in group.zip(sources) {
        if source.bytes as usize != bytes {
            return Err(SessionError::Elements {
                operation: OPERATION,
                worker,
                expected: bytes / size,
                actual: source.bytes as usize / size,
            });
        }
    }
    if !combine::supported(dtype) {
        return Err(SessionError::Dtype {
            operation: OPERATION,
            dtype,
        });
    }
    Ok(())
}

/// Where each member of `group` has its source and its destination (`targets`), every
/// destination checked to hold `bytes` of `dtype`; `None` when one is not an array yet or
/// overlaps its source without being it.
fn members(
    group: Range<usize>,
    sources: &[Source],
    targets: Vec<Description>,
    dtype: DataType,
    bytes: usize,
) -> Result<Option<Vec<Member>>, SessionError> {
    let size = dtype.size().max(1);
    let mut members = Vec::with_capacity(group.len());
    let mut in_place = true;
    for ((worker, (_, _, source)), target) in group.zip(sources).zip(targets) {
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
    Ok(in_place.then_some(members))
}
