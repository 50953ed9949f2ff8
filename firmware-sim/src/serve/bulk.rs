//! Bulk requests: their bytes move beside their messages, straight between the link and
//! their target, and the server runs them itself.
//!
//! # Rules
//!
//! - The server runs a bulk request whose bytes fit the link's window, and only when the
//!   host's numbering runs it: a retry gets its kept reply alone and never touches the
//!   window. Any other bulk request goes to the device like every request (which refuses
//!   it on a link that carries no bytes beside its messages).
//! - A write's bytes are received straight into their target, a read's sent beside the
//!   reply straight from it; the move is settled (a FIFO counts it) only once the bytes
//!   moved. Bytes that do not come, or cannot go, make the reply
//!   [`ErrorCode::BulkUnavailable`].

use tessera_core::wire::{
    DataRequest, Envelope, ErrorCode, Request, RequestKind, Response, Target,
};

use super::reply::reply;
use super::{ServeError, Server};
use crate::arena::Access;
use crate::device::Device;
use crate::link::Messages;
use crate::reply_cache::{ReplyCache, Verdict};

/// Runs request `envelope` in the server ([`answer_bulk`]) if it is a bulk request whose
/// bytes fit the link's window and the host's numbering runs it; `false`, with nothing
/// done, for any other request (a retry is answered as any request is: its kept reply).
pub(super) fn answered_bulk<M: Messages, const FRAME: usize, const WINDOW: usize>(
    cache: &mut ReplyCache<'_, FRAME, WINDOW>,
    envelope: &Envelope<Request<'_>>,
    device: &mut Device<'_>,
    link: &mut M,
) -> Result<bool, ServeError<M::Error>> {
    // A bulk request's bytes come or go beside its message, straight between the link and
    // the register: the server runs it itself.
    let Some((access, target, offset, len)) = bulk_request(&envelope.body) else {
        return Ok(false);
    };
    let seq = envelope.seq;
    let fits = usize::try_from(len).is_ok_and(|len| len <= link.bulk_capacity());
    if !fits || cache.verdict(seq, false) != Verdict::Run {
        return Ok(false);
    }
    let kind = envelope.body.kind();
    answer_bulk(
        cache,
        seq,
        (kind, access),
        (target, offset, len),
        device,
        link,
    )?;
    Ok(true)
}

/// The access, target, offset and length of a bulk request; `None` for any other request.
fn bulk_request(body: &Request<'_>) -> Option<(Access, Target, u32, u32)> {
    match *body {
        Request::Data(DataRequest::WriteBulk {
            target,
            offset,
            len,
        }) => Some((Access::Write, target, offset, len)),
        Request::Data(DataRequest::ReadBulk {
            target,
            offset,
            len,
        }) => Some((Access::Read, target, offset, len)),
        _ => None,
    }
}

/// Runs a bulk request: a write's bytes are received straight into their target, a read's
/// sent beside the reply straight from it; the move is settled (a FIFO counts it) only once
/// the bytes moved. The reply is kept for retries; a retry gets it alone (on the links that
/// carry bulk nothing is lost, so the first reply has already arrived).
fn answer_bulk<M: Messages, const FRAME: usize, const WINDOW: usize>(
    cache: &mut ReplyCache<'_, FRAME, WINDOW>,
    seq: u32,
    (request, access): (RequestKind, Access),
    (target, offset, len): (Target, u32, u32),
    device: &mut Device<'_>,
    link: &mut M,
) -> Result<(), ServeError<M::Error>> {
    let limit = Server::<FRAME, WINDOW>::body_limit();
    let response = if access == Access::Write {
        match device.place(target, offset, len, access) {
            Ok(into) => match link.receive_bulk(into).map_err(ServeError::Link)? {
                true => {
                    device.settle(target, len as usize, access);
                    Response::Done
                }
                // No bytes, or too few, came with it.
                false => Response::Error {
                    request,
                    code: ErrorCode::BulkUnavailable,
                },
            },
            Err(code) => Response::Error { request, code },
        }
    } else {
        match device.place(target, offset, len, access) {
            Ok(bytes) => {
                let bytes = &*bytes;
                let slot = &mut cache.slot(seq)[..limit];
                let body = Response::Bulk { len };
                let n = reply(seq, body)
                    .encode(slot)
                    .map_err(|_| ServeError::ReplyTooLarge)?;
                cache.keep(seq, n);
                let reply = cache.cached(seq).unwrap_or(&[]);
                if link.send_bulk(reply, bytes).map_err(ServeError::Link)? {
                    device.settle(target, len as usize, access);
                    return Ok(());
                }
                // The link could not carry them: the kept reply becomes this error.
                Response::Error {
                    request,
                    code: ErrorCode::BulkUnavailable,
                }
            }
            Err(code) => Response::Error { request, code },
        }
    };
    let slot = &mut cache.slot(seq)[..limit];
    let n = reply(seq, response)
        .encode(slot)
        .map_err(|_| ServeError::ReplyTooLarge)?;
    cache.keep(seq, n);
    link.send(cache.cached(seq).unwrap_or(&[]))
        .map_err(ServeError::Link)
}
