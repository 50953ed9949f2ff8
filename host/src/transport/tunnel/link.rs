//! A link's two ends: the reader of what the other rank wrote, and the writer whose every
//! write is one message to it (the office's rules, in the module doc of `tunnel`).

use std::io::{self, Read, Write};
use std::sync::mpsc::{Receiver, Sender};

use super::{Post, BYTES, END};

/// The reading end of a link: the bytes the other rank wrote, in order; the end of the
/// stream once it dropped its writer (or this rank's office stopped).
#[derive(Debug)]
pub struct LinkReader {
    incoming: Receiver<Vec<u8>>,
    pending: Vec<u8>,
    at: usize,
}

impl LinkReader {
    /// A link's reading end, its bytes arriving on `incoming`.
    pub(super) fn new(incoming: Receiver<Vec<u8>>) -> Self {
        Self {
            incoming,
            pending: Vec::new(),
            at: 0,
        }
    }

    /// The queue the link's bytes arrive on, in chunks as the other rank wrote them, for a
    /// reader that takes them whole (a device's link, or a channel decoding its frames in
    /// place) rather than through [`Read`].
    pub fn into_chunks(self) -> Receiver<Vec<u8>> {
        debug_assert!(
            self.at >= self.pending.len(),
            "bytes already taken are not lost"
        );
        self.incoming
    }
}

impl Read for LinkReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at >= self.pending.len() {
            match self.incoming.recv() {
                Ok(bytes) => {
                    self.pending = bytes;
                    self.at = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The writing end of a link: each write is one message to the other rank. Dropping it
/// ends the link there.
#[derive(Debug)]
pub struct LinkWriter {
    to: i32,
    tag: i32,
    posts: Sender<Post>,
}

impl LinkWriter {
    /// A link's writing end: its bytes go to rank `to` under `tag`, posted on `posts`.
    pub(super) fn new(to: i32, tag: i32, posts: Sender<Post>) -> Self {
        Self { to, tag, posts }
    }

    fn post(&self, kind: u8, payload: &[u8]) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(1 + payload.len());
        bytes.push(kind);
        bytes.extend_from_slice(payload);
        self.posts
            .send(Post::Send {
                to: self.to,
                tag: self.tag,
                bytes,
            })
            .map_err(|_| gone())
    }
}

impl Write for LinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.post(BYTES, buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LinkWriter {
    fn drop(&mut self) {
        let _ = self.post(END, &[]);
    }
}

/// The link's office has stopped: the link is closed.
pub(super) fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the rank's post office has stopped",
    )
}
