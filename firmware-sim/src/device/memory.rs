//! The device's memory area: remote-buffer slots, and copies between slots and on-device
//! variables (a slot's bytes move through [`data`](super::data)).
//!
//! # Rules
//!
//! - A slot is allocated zeroed, under an id the host chooses, and keeps its size.
//! - A load copies a slot into a variable, creating the variable with the slot's size if
//!   there is none; a store copies a variable into an existing slot. Both need the two to
//!   be the same size.
//!
//! # Errors
//!
//! [`UnknownId`](ErrorCode::UnknownId) (no such slot or variable),
//! [`IdInUse`](ErrorCode::IdInUse), [`TableFull`](ErrorCode::TableFull),
//! [`OutOfMemory`](ErrorCode::OutOfMemory), [`OutOfBounds`](ErrorCode::OutOfBounds)
//! (a load or store between blocks of different sizes).

use tessera_core::wire::{ErrorCode, MemoryRequest};

use super::{Answer, Device};
use crate::arena::Owner;

/// Runs a memory request.
// Out of line, as every area's handler: inlined into `Device::handle`, the five took some
// 580 bytes more of the Cortex-M4F firmware's flash (LLVM's choices inside one large function).
#[inline(never)]
pub(super) fn handle<'d>(device: &'d mut Device<'_>, request: &MemoryRequest) -> Answer<'d> {
    match *request {
        MemoryRequest::AllocSlot { slot, bytes } => {
            device.arena.alloc(Owner::Slot(slot), bytes as usize)?;
        }
        MemoryRequest::RemoteLoad { slot, variable } => {
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
        MemoryRequest::RemoteStore { variable, slot } => {
            let arena = &mut device.arena;
            let from = arena
                .find(Owner::Variable(variable))
                .ok_or(ErrorCode::UnknownId { id: variable })?;
            let to = arena
                .find(Owner::Slot(slot))
                .ok_or(ErrorCode::UnknownId { id: slot })?;
            arena.copy(from, to)?;
        }
    }
    Ok(None)
}
