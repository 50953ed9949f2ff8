//! The device's stream area: creating the FIFOs that carry a step's samples in and its
//! anchors out ([`fifo`](crate::fifo) states how one behaves; their bytes move through
//! [`data`](super::data)).
//!
//! # Rules
//!
//! - A FIFO is created under an id the host chooses, with items of at least one byte and
//!   a depth of at least one.
//!
//! # Errors
//!
//! [`UnknownId`](tessera_core::wire::ErrorCode::UnknownId), [`IdInUse`](tessera_core::wire::ErrorCode::IdInUse),
//! [`TableFull`](tessera_core::wire::ErrorCode::TableFull), [`FifoShape`](tessera_core::wire::ErrorCode::FifoShape),
//! [`OutOfMemory`](tessera_core::wire::ErrorCode::OutOfMemory).

use tessera_core::wire::StreamRequest;

use super::{Answer, Device};

/// Runs a stream request.
// Out of line, as every area's handler: inlined into `Device::handle`, the five took some
// 580 bytes more of the Cortex-M4F firmware's flash (LLVM's choices inside one large function).
#[inline(never)]
pub(super) fn handle<'d>(device: &'d mut Device<'_>, request: &StreamRequest) -> Answer<'d> {
    let (arena, fifos) = (&mut device.arena, &mut device.fifos);
    match *request {
        StreamRequest::CreateFifo {
            fifo,
            item_bytes,
            depth,
        } => fifos.create(arena, fifo, item_bytes, depth)?,
    }
    Ok(None)
}
