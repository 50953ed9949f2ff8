//! The device's data path: the bytes of every [`Target`] — a register's array, a
//! remote-buffer slot, a variable, a stream FIFO — however the host moves them.
//!
//! # Rules
//!
//! - Every move is placed first ([`Device::place`]): the range is checked against the
//!   target (an overflow-checked end inside a register's array or string, a slot or a
//!   variable; a FIFO's stream position, free bytes and whole items as
//!   [`fifo`](crate::fifo) says)
//!   before a byte moves, so a refused move leaves the target as it was.
//! - Then the bytes move — copied from a [`Write`](DataRequest::Write)'s frame, received
//!   beside a bulk request by the serve loop, or written by the host itself in place —
//!   and only then is the move settled ([`Device::settle`]): a FIFO takes in written bytes
//!   or drops read ones. Registers, slots and variables have nothing to settle.
//! - A read answered in a frame fits one: more than the link's chunk is refused before
//!   anything is read (a FIFO loses nothing).
//! - [`Locate`](DataRequest::Locate) answers where a target's bytes lie in the device's
//!   memory (a FIFO's: its whole ring); [`Wrote`](DataRequest::Wrote) and
//!   [`Took`](DataRequest::Took) report a move the host made there, checked and settled as
//!   the same move in a frame; a [`RunStep`](tessera_core::wire::ProgramRequest::RunStep)
//!   that says the host fed the step in place reports a
//!   whole-ring write to every stream FIFO, and one that says it took the last step's
//!   anchors in place a whole-ring read of every anchor FIFO, checked and settled the same
//!   way ([`Device::count_whole`]). A step that ends well leaves every anchor FIFO holding
//!   exactly its ring from the ring's start ([`Device::anchors_whole`] checks it), so what
//!   the host reads in place after it is that step's, all of it.
//! - A bulk request reaching here came on a link that carries no bytes beside its
//!   messages (the serve loop answers bulk requests itself where it does).
//!
//! # Errors
//!
//! [`UnknownId`](ErrorCode::UnknownId), [`OutOfBounds`](ErrorCode::OutOfBounds),
//! [`BadArguments`](ErrorCode::BadArguments) (a write to a register that holds no array,
//! a read of one without bytes), [`FifoPosition`](ErrorCode::FifoPosition),
//! [`FifoFull`](ErrorCode::FifoFull), [`FifoEmpty`](ErrorCode::FifoEmpty),
//! [`ItemSize`](ErrorCode::ItemSize), [`ReplyTooLarge`](ErrorCode::ReplyTooLarge),
//! [`BulkUnavailable`](ErrorCode::BulkUnavailable).

use core::ops::Range;

use tessera_core::program::ids;
use tessera_core::wire::{DataRequest, ErrorCode, Invariant, Response, Target};

use super::{Answer, Device};
use crate::arena::{saturate, Access, Block, Owner};
use crate::broken;

/// The FIFOs of the prepared program a whole-ring report covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rings {
    /// Every stream FIFO: the host wrote a step's inputs.
    Streams,
    /// Every anchor FIFO: the host read a step's anchors.
    Anchors,
}

/// Runs a data-path request.
// Out of line, as every area's handler: inlined into `Device::handle`, the five took some
// 580 bytes more of the Cortex-M4F firmware's flash (LLVM's choices inside one large function).
#[inline(never)]
pub(super) fn handle<'d>(device: &'d mut Device<'_>, request: &DataRequest<'_>) -> Answer<'d> {
    match *request {
        DataRequest::Write {
            target,
            offset,
            data,
        } => {
            let into = device.place(target, offset, saturate(data.len()), Access::Write)?;
            if !crate::copy_exact(into, data) {
                return Err(broken(Invariant::FifoRing));
            }
            device.settle(target, data.len(), Access::Write);
        }
        DataRequest::Read {
            target,
            offset,
            len,
        } => {
            if len as usize > device.limits.max_chunk() {
                return Err(ErrorCode::ReplyTooLarge);
            }
            let (block, range) = device.range(target, offset, len, Access::Read)?;
            device.settle(target, range.len(), Access::Read);
            // Settling only counts: the bytes stay where they are until the next write.
            let data = device
                .arena
                .bytes(block)
                .get(range)
                .ok_or(broken(Invariant::FifoRing))?;
            return Ok(Some(Response::Data { data }));
        }
        DataRequest::Locate { target } => {
            let block = device.block(target)?;
            return Ok(Some(Response::Located {
                at: saturate(device.arena.address(block)),
                len: saturate(block.len),
            }));
        }
        DataRequest::Wrote {
            target,
            offset,
            len,
        } => {
            device.range(target, offset, len, Access::Write)?;
            device.settle(target, len as usize, Access::Write);
        }
        DataRequest::Took {
            target,
            offset,
            len,
        } => {
            device.range(target, offset, len, Access::Read)?;
            device.settle(target, len as usize, Access::Read);
        }
        DataRequest::WriteBulk { .. } | DataRequest::ReadBulk { .. } => {
            return Err(ErrorCode::BulkUnavailable)
        }
    }
    Ok(None)
}

impl Device<'_> {
    /// Bytes `[offset, offset + len)` of `target`, checked for a move in direction
    /// `access` (the module's rules): where a bulk request's bytes land or come from.
    /// Nothing changes until [`Device::settle`].
    pub fn place(
        &mut self,
        target: Target,
        offset: u32,
        len: u32,
        access: Access,
    ) -> Result<&mut [u8], ErrorCode> {
        let (block, range) = self.range(target, offset, len, access)?;
        self.arena
            .bytes_mut(block)
            .get_mut(range)
            .ok_or(broken(Invariant::FifoRing))
    }

    /// Counts every FIFO of `rings` moved whole by the host in place, each from the start
    /// of its ring (one step's items, which the FIFO holds exactly) and checked as a
    /// [`Wrote`](DataRequest::Wrote) (stream FIFOs) or [`Took`](DataRequest::Took) (anchor
    /// FIFOs) of that span is. The first refusal ends the count (the FIFOs counted before it stay
    /// counted: the host resets a failed step's state).
    pub(super) fn count_whole(&mut self, rings: Rings) -> Result<(), ErrorCode> {
        self.whole_rings(rings, true)
    }

    /// Checks that every anchor FIFO holds exactly its ring, from the ring's start: what a
    /// finished step leaves for the host to read in place ([`Invariant::AnchorsWhole`]
    /// otherwise).
    pub(super) fn anchors_whole(&mut self) -> Result<(), ErrorCode> {
        self.whole_rings(Rings::Anchors, false)
            .map_err(|_| broken(Invariant::AnchorsWhole))
    }

    /// Checks a whole-ring move of every lane's FIFO of `rings` (see [`Device::count_whole`]),
    /// counting each when `settle`.
    fn whole_rings(&mut self, rings: Rings, settle: bool) -> Result<(), ErrorCode> {
        let program = self.prepared.as_ref().map(|p| &p.program);
        let (count, access) = match rings {
            Rings::Streams => (program.map_or(0, |p| p.streams.len()), Access::Write),
            Rings::Anchors => (program.map_or(0, |p| p.anchors.len()), Access::Read),
        };
        let lanes = self.prepared.as_ref().map_or(0, |p| p.lanes());
        // Lane after lane, each in id order: one walk over the FIFO table.
        let mut walk = 0;
        for lane in 0..lanes {
            for k in 0..count as u8 {
                let id = match rings {
                    Rings::Streams => ids::stream_fifo(k),
                    Rings::Anchors => ids::anchor_fifo(k),
                };
                let id = crate::program::lane_id(lane, id);
                self.fifos.whole_walking(&mut walk, id, access, settle)?;
            }
        }
        Ok(())
    }

    /// Counts a placed move of `len` bytes as done: a FIFO takes in written bytes or drops
    /// read ones; registers and slots have nothing to count.
    pub fn settle(&mut self, target: Target, len: usize, access: Access) {
        if let Target::Fifo(id) = target {
            self.fifos.settle(id, len, access);
        }
    }

    /// The block holding `target`'s bytes and the checked range of a move in it.
    fn range(
        &self,
        target: Target,
        offset: u32,
        len: u32,
        access: Access,
    ) -> Result<(Block, Range<usize>), ErrorCode> {
        match target {
            Target::Register(id) => self.registers.range(&self.arena, id, offset, len, access),
            Target::Fifo(id) => self.fifos.place(id, offset, len as usize, access),
            Target::Slot(_) | Target::Variable(_) => {
                let block = self.block(target)?;
                let size = saturate(block.len);
                let start = offset as usize;
                let range = start
                    .checked_add(len as usize)
                    .filter(|&end| end <= block.len)
                    .map(|end| start..end)
                    .ok_or(ErrorCode::OutOfBounds { offset, len, size })?;
                Ok((block, range))
            }
        }
    }

    /// The block holding `target`'s bytes.
    fn block(&self, target: Target) -> Result<Block, ErrorCode> {
        let (owner, id) = match target {
            Target::Register(id) => {
                return self
                    .registers
                    .block(&self.arena, id)?
                    .ok_or(ErrorCode::BadArguments)
            }
            Target::Slot(id) => (Owner::Slot(id), id),
            Target::Variable(id) => (Owner::Variable(id), id),
            Target::Fifo(id) => {
                self.fifos.get(id)?;
                (Owner::Fifo(id), id)
            }
        };
        self.arena.find(owner).ok_or(ErrorCode::UnknownId { id })
    }
}
