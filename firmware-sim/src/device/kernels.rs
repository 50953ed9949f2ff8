//! The device's register and kernel area: the register file an SPMD session keeps on
//! each worker ([`registers`](crate::registers) states its rules) and the named functions
//! that run on it ([`functions`](crate::functions) states theirs).
//!
//! # Rules
//!
//! - Register ids are the host's; 0 is reserved. Setting a register replaces what it
//!   held; freeing one that holds nothing is refused.
//! - An array is allocated zeroed; its bytes (and a string's) move through
//!   [`data`](super::data).
//! - A call names its function first: an unknown name is refused before anything runs.
//!
//! # Errors
//!
//! [`UnknownId`](tessera_core::wire::ErrorCode::UnknownId), [`TableFull`](tessera_core::wire::ErrorCode::TableFull),
//! [`OutOfMemory`](tessera_core::wire::ErrorCode::OutOfMemory), [`BadArguments`](tessera_core::wire::ErrorCode::BadArguments),
//! [`UnknownFunction`](tessera_core::wire::ErrorCode::UnknownFunction).

use tessera_core::wire::{KernelRequest, Response};

use super::{Answer, Device};
use crate::functions;

/// Runs a register or kernel request.
// Out of line, as every area's handler: inlined into `Device::handle`, the five took some
// 580 bytes more of the Cortex-M4F firmware's flash (LLVM's choices inside one large function).
#[inline(never)]
pub(super) fn handle<'d>(device: &'d mut Device<'_>, request: &KernelRequest<'_>) -> Answer<'d> {
    let (arena, registers) = (&mut device.arena, &mut device.registers);
    match *request {
        KernelRequest::SetRegister { id, ref value } => registers.set(arena, id, value)?,
        KernelRequest::GetRegister { id } => {
            let value = registers.get(arena, id)?;
            return Ok(Some(Response::Register { value }));
        }
        KernelRequest::FreeRegister { id } => {
            registers.stored(id)?;
            registers.free(arena, id);
        }
        KernelRequest::DescribeRegister { id } => return Ok(Some(registers.describe(arena, id)?)),
        KernelRequest::AllocArray {
            id,
            dtype,
            ref shape,
        } => registers.alloc_array(arena, id, dtype, shape)?,
        KernelRequest::Invoke {
            function,
            ref args,
            out,
        } => {
            let f = functions::lookup(device.functions, function)?;
            let replica = device.limits.replica;
            functions::call::run(registers, arena, f, args, out, replica)?;
        }
        KernelRequest::HasFunction { function } => {
            functions::lookup(device.functions, function)?;
        }
    }
    Ok(None)
}
