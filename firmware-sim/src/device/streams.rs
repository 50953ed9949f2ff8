//! The device's stream area: the FIFOs that carry a step's samples in and its anchors
//! out ([`fifo`](crate::fifo) states how one behaves).
//!
//! # Rules
//!
//! - A FIFO is created under an id the host chooses, with items of at least one byte and
//!   a depth of at least one.
//! - A push appends any number of bytes and is refused whole when they do not fit.
//! - A pop answers in one reply: items that would not fit one are refused before any is
//!   taken, so a refused pop loses nothing.
//!
//! # Errors
//!
//! [`UnknownId`](ErrorCode::UnknownId), [`IdInUse`](ErrorCode::IdInUse),
//! [`TableFull`](ErrorCode::TableFull), [`FifoShape`](ErrorCode::FifoShape),
//! [`OutOfMemory`](ErrorCode::OutOfMemory), [`FifoFull`](ErrorCode::FifoFull),
//! [`FifoEmpty`](ErrorCode::FifoEmpty), [`OutOfBounds`](ErrorCode::OutOfBounds) (a pop that
//! would wrap the ring), [`ReplyTooLarge`](ErrorCode::ReplyTooLarge).

use tessera_core::wire::{ErrorCode, Invariant, Request, Response};

use super::{Answer, Device};
use crate::broken;

/// Runs a stream request.
pub(super) fn handle<'d>(device: &'d mut Device<'_>, request: &Request<'_>) -> Answer<'d> {
    let (arena, fifos) = (&mut device.arena, &mut device.fifos);
    match *request {
        Request::CreateFifo {
            fifo,
            item_bytes,
            depth,
        } => fifos.create(arena, fifo, item_bytes, depth)?,
        Request::PushFifo { fifo, data } => fifos.push(arena, fifo, data)?,
        Request::PopFifo { fifo, items } => {
            let bytes = fifos.get(fifo)?.item_bytes.saturating_mul(items as usize);
            if bytes > device.limits.max_chunk() {
                return Err(ErrorCode::ReplyTooLarge);
            }
            let (block, range) = fifos.pop(arena, fifo, items as usize)?;
            let data = arena
                .bytes(block)
                .get(range)
                .ok_or(broken(Invariant::FifoRing))?;
            return Ok(Some(Response::Data { data }));
        }
        _ => return Err(broken(Invariant::Routing)),
    }
    Ok(None)
}
