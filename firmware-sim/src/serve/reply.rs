//! Replies: kept in the [`ReplyCache`] for retries, and sent.
//!
//! # Rules
//!
//! - A reply body is at most [`Server::body_limit`] bytes, so its frame fits `FRAME`; a
//!   request's reply that does not fit becomes its `ReplyTooLarge` error reply, and one
//!   that still does not fit stops the loop ([`ServeError::ReplyTooLarge`]).
//! - Only a request that ran fills the cache; a frame that does not decode as a request is
//!   answered `Malformed` from a buffer of its own.

use tessera_core::wire::{Envelope, ErrorCode, FromDevice, Request, RequestKind, Response};

use super::{ServeError, Server};
use crate::device::Device;
use crate::link::Messages;
use crate::reply_cache::ReplyCache;

/// Keeps `reply` as request `seq`'s and sends it.
pub(super) fn finish<M: Messages, const FRAME: usize, const WINDOW: usize>(
    cache: &mut ReplyCache<'_, FRAME, WINDOW>,
    seq: u32,
    reply: Response<'_>,
    link: &mut M,
) -> Result<(), ServeError<M::Error>> {
    let limit = Server::<FRAME, WINDOW>::body_limit();
    let slot = &mut cache.slot(seq)[..limit];
    let n = self::reply(seq, reply)
        .encode(slot)
        .map_err(|_| ServeError::ReplyTooLarge)?;
    cache.keep(seq, n);
    link.send(cache.cached(seq).unwrap_or(&[]))
        .map_err(ServeError::Link)
}

/// Runs request `envelope` on `device` and keeps its reply for retries.
pub(super) fn run_request<E, const FRAME: usize, const WINDOW: usize>(
    cache: &mut ReplyCache<'_, FRAME, WINDOW>,
    envelope: Envelope<Request<'_>>,
    device: &mut Device<'_>,
) -> Result<(), ServeError<E>> {
    let (seq, kind) = (envelope.seq, envelope.body.kind());
    let limit = Server::<FRAME, WINDOW>::body_limit();
    let slot = &mut cache.slot(seq)[..limit];
    let response = device.handle(envelope.body);
    let n = match reply(seq, response).encode(slot) {
        Ok(n) => n,
        Err(_) => {
            let error = Response::Error {
                request: kind,
                code: ErrorCode::ReplyTooLarge,
            };
            reply(seq, error)
                .encode(slot)
                .map_err(|_| ServeError::ReplyTooLarge)?
        }
    };
    cache.keep(seq, n);
    Ok(())
}

/// The reply `body` to request `seq`, as it travels.
pub(super) fn reply(seq: u32, body: Response<'_>) -> FromDevice<'_> {
    FromDevice::Reply(Envelope { seq, body })
}

/// Answers a frame that is not a request, from a buffer of its own (the reply cache keeps
/// the last real replies for retries).
pub(super) fn send_malformed<M: Messages>(link: &mut M) -> Result<(), ServeError<M::Error>> {
    let malformed = reply(
        0,
        Response::Error {
            request: RequestKind::Malformed,
            code: ErrorCode::Malformed,
        },
    );
    let mut body = [0u8; 16];
    let n = malformed
        .encode(&mut body)
        .map_err(|_| ServeError::ReplyTooLarge)?;
    // `n` is what `encode` wrote, within `body` (`get`: no slicing panic path).
    link.send(body.get(..n).unwrap_or_default())
        .map_err(ServeError::Link)
}
