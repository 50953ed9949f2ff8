//! The device's memory area: remote-buffer slots, and copies between slots and on-device
//! variables.
//!
//! # Rules
//!
//! - A slot is allocated zeroed, under an id the host chooses, and keeps its size.
//! - A write or read addresses bytes `[offset, offset + len)` of one slot; the range is
//!   checked (with an overflow-checked end) before a byte moves, so a refused write leaves
//!   the slot as it was.
//! - A read answers in one frame: more than the link's frame is refused before reading.
//! - A load copies a slot into a variable, creating the variable with the slot's size if
//!   there is none; a store copies a variable into an existing slot. Both need the two to
//!   be the same size.
//! - A bulk request reaching here came on a link that carries no bytes beside its
//!   messages (the serve loop answers bulk requests itself where it does).
//!
//! # Errors
//!
//! [`UnknownId`](ErrorCode::UnknownId) (no such slot or variable),
//! [`IdInUse`](ErrorCode::IdInUse), [`TableFull`](ErrorCode::TableFull),
//! [`OutOfMemory`](ErrorCode::OutOfMemory), [`OutOfBounds`](ErrorCode::OutOfBounds),
//! [`ReplyTooLarge`](ErrorCode::ReplyTooLarge), [`BulkUnavailable`](ErrorCode::BulkUnavailable).

use tessera_core::wire::{ErrorCode, Invariant, Request, Response};

use super::{Answer, Device};
use crate::arena::{saturate, Owner};
use crate::broken;

/// Runs a memory request.
pub(super) fn handle<'d>(device: &'d mut Device<'_>, request: &Request<'_>) -> Answer<'d> {
    match *request {
        Request::AllocSlot { slot, bytes } => {
            device.arena.alloc(Owner::Slot(slot), bytes as usize)?;
        }
        Request::WriteSlot { slot, offset, data } => {
            slot_range(device, slot, offset, saturate(data.len()))?.copy_from_slice(data);
        }
        Request::ReadSlot { slot, offset, len } => {
            if len > device.limits.max_frame {
                return Err(ErrorCode::ReplyTooLarge);
            }
            let data = slot_range(device, slot, offset, len)?;
            return Ok(Some(Response::Data { data }));
        }
        Request::RemoteLoad { slot, variable } => {
            let arena = &mut device.arena;
            let from = arena
                .find(Owner::Slot(slot))
                .ok_or(ErrorCode::UnknownId { id: slot })?;
            let to = match arena.find(Owner::Variable(variable)) {
                Some(block) => block,
                None => arena.alloc(Owner::Variable(variable), from.len)?,
            };
            arena.copy(from, to)?;
        }
        Request::RemoteStore { variable, slot } => {
            let arena = &mut device.arena;
            let from = arena
                .find(Owner::Variable(variable))
                .ok_or(ErrorCode::UnknownId { id: variable })?;
            let to = arena
                .find(Owner::Slot(slot))
                .ok_or(ErrorCode::UnknownId { id: slot })?;
            arena.copy(from, to)?;
        }
        Request::WriteSlotBulk { .. } | Request::ReadSlotBulk { .. } => {
            return Err(ErrorCode::BulkUnavailable)
        }
        _ => return Err(broken(Invariant::Routing)),
    }
    Ok(None)
}

/// Bytes `[offset, offset + len)` of slot `slot`, checked.
pub(super) fn slot_range<'d>(
    device: &'d mut Device<'_>,
    slot: u16,
    offset: u32,
    len: u32,
) -> Result<&'d mut [u8], ErrorCode> {
    let block = device
        .arena
        .find(Owner::Slot(slot))
        .ok_or(ErrorCode::UnknownId { id: slot })?;
    let size = saturate(block.len);
    let start = offset as usize;
    let bytes = device.arena.bytes_mut(block);
    start
        .checked_add(len as usize)
        .and_then(|end| bytes.get_mut(start..end))
        .ok_or(ErrorCode::OutOfBounds { offset, len, size })
}
