//! The device's register and kernel area: the register file an SPMD session keeps on
//! each worker ([`registers`](crate::registers) states its rules) and the named functions
//! that run on it ([`functions`](crate::functions) states theirs).
//!
//! # Rules
//!
//! - Register ids are the host's; 0 is reserved. Setting a register replaces what it
//!   held; freeing one that holds nothing is refused.
//! - An array is allocated zeroed and written and read in checked chunks; a read answers
//!   in one frame (more is refused before reading).
//! - A call names its function first: an unknown name is refused before anything runs.
//! - A bulk request reaching here came on a link that carries no bytes beside its
//!   messages (the serve loop answers bulk requests itself where it does).
//!
//! # Errors
//!
//! [`UnknownId`](ErrorCode::UnknownId), [`TableFull`](ErrorCode::TableFull),
//! [`OutOfMemory`](ErrorCode::OutOfMemory), [`OutOfBounds`](ErrorCode::OutOfBounds),
//! [`ReplyTooLarge`](ErrorCode::ReplyTooLarge), [`BadArguments`](ErrorCode::BadArguments),
//! [`UnknownFunction`](ErrorCode::UnknownFunction),
//! [`BulkUnavailable`](ErrorCode::BulkUnavailable).

use tessera_core::wire::{ErrorCode, Invariant, Request, Response};

use super::{Answer, Device};
use crate::broken;
use crate::functions;

/// Runs a register or kernel request.
pub(super) fn handle<'d>(device: &'d mut Device<'_>, request: &Request<'_>) -> Answer<'d> {
    let (arena, registers) = (&mut device.arena, &mut device.registers);
    match *request {
        Request::SetRegister { id, ref value } => registers.set(arena, id, value)?,
        Request::GetRegister { id } => {
            let value = registers.get(arena, id)?;
            return Ok(Some(Response::Register { value }));
        }
        Request::FreeRegister { id } => {
            registers.stored(id)?;
            registers.free(arena, id);
        }
        Request::DescribeRegister { id } => return Ok(Some(registers.describe(arena, id)?)),
        Request::AllocArray {
            id,
            dtype,
            ref shape,
        } => registers.alloc_array(arena, id, dtype, shape)?,
        Request::WriteArray { id, offset, data } => registers.write(arena, id, offset, data)?,
        Request::ReadArray { id, offset, len } => {
            if len > device.limits.max_frame {
                return Err(ErrorCode::ReplyTooLarge);
            }
            let data = registers.read(arena, id, offset, len)?;
            return Ok(Some(Response::Data { data }));
        }
        Request::Invoke {
            function,
            ref args,
            out,
        } => {
            let f = functions::lookup(device.functions, function)?;
            let replica = device.limits.replica;
            functions::call::run(registers, arena, f, args, out, replica)?;
        }
        Request::HasFunction { function } => {
            functions::lookup(device.functions, function)?;
        }
        Request::WriteArrayBulk { .. } | Request::ReadArrayBulk { .. } => {
            return Err(ErrorCode::BulkUnavailable)
        }
        _ => return Err(broken(Invariant::Routing)),
    }
    Ok(None)
}
