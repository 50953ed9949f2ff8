//! The host's reading side of a link: a thread that decodes frames from the device and
//! forwards their checked bodies, so that a channel can wait for a reply with a deadline.
//! Damaged frames are dropped here (the request is retried); the thread ends with the link.

use std::io::Read;
use std::sync::mpsc::Sender;

use tessera_core::wire::FrameDecoder;

use super::queue::Message;

/// Largest frame the host accepts: any device's (host-placed devices send the largest).
pub const MAX_FRAME: usize = 128 * 1024;

/// Decodes frames from `reader` and sends their bodies on `tx` until the link ends or the
/// receiving channel is gone.
pub fn read_frames(mut reader: impl Read, tx: Sender<Message>, replica: u32) {
    let mut decoder = Box::new(FrameDecoder::<MAX_FRAME>::new());
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = reader.read(&mut buf) {
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let (used, frame) = decoder.feed(rest);
            rest = &rest[used..];
            match frame {
                // The channel is gone: nobody is waiting for replies any more.
                Some(Ok(body)) if tx.send(Message::alone(body.to_vec())).is_err() => return,
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::debug!(replica, error = %e, "dropped a damaged frame"),
                None => {}
            }
        }
    }
}
