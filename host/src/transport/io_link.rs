//! A device's byte link over any std reader and writer: a socket to a device thread, a
//! tunnel's chunks (a worker whose controller is on another rank), or stdin/stdout. Frames
//! travel on it as the firmware's [`Framed`](tessera_firmware_sim::Framed) link writes
//! and reads them.
//!
//! # Rules
//!
//! - Reads come from a thread of their own (or from a queue another thread feeds), so
//!   that `read_ready` answers without blocking, whatever the reader.
//! - A read waits as every device wait does ([`SPIN`], then asleep); 0 bytes only once
//!   the reader ended (the host went away).
//! - Writes go straight to the writer.

use std::io;
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::thread;

use embedded_io::{ErrorType, Read, ReadReady, Write};

use super::spin::{receive_spinning, SPIN};

/// A link whose reads come from a background thread, so that `read_ready` can answer
/// without blocking on any kind of reader.
pub struct IoLink<W> {
    incoming: Receiver<Vec<u8>>,
    pending: Vec<u8>,
    at: usize,
    writer: W,
}

impl<W: io::Write> IoLink<W> {
    /// Reads `reader` on a thread of its own; writes go straight to `writer`.
    pub fn new<R: io::Read + Send + 'static>(mut reader: R, writer: W) -> Self {
        let (tx, incoming) = mpsc::sync_channel(64);
        thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            // Ends at end of file, on a read error, or when the link is dropped.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                if tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Self::on_chunks(incoming, writer)
    }

    /// A link whose bytes arrive already in chunks on `incoming` (a queue another thread
    /// feeds): no reader thread of its own between them and the device.
    pub fn on_chunks(incoming: Receiver<Vec<u8>>, writer: W) -> Self {
        Self {
            incoming,
            pending: Vec::new(),
            at: 0,
            writer,
        }
    }
}

impl<W> core::fmt::Debug for IoLink<W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IoLink")
            .field("pending", &(self.pending.len() - self.at))
            .finish_non_exhaustive()
    }
}

impl<W> ErrorType for IoLink<W> {
    type Error = io::Error;
}

impl<W: io::Write> Read for IoLink<W> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, io::Error> {
        if self.at == self.pending.len() {
            match receive_spinning(&self.incoming, None, SPIN) {
                Ok(chunk) => {
                    self.pending = chunk;
                    self.at = 0;
                }
                Err(_) => return Ok(0), // the reader ended: end of file
            }
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl<W: io::Write> ReadReady for IoLink<W> {
    fn read_ready(&mut self) -> Result<bool, io::Error> {
        if self.at < self.pending.len() {
            return Ok(true);
        }
        match self.incoming.try_recv() {
            Ok(chunk) => {
                self.pending = chunk;
                self.at = 0;
                Ok(true)
            }
            Err(TryRecvError::Empty) => Ok(false),
            // End of file is "ready": the next read returns 0.
            Err(TryRecvError::Disconnected) => Ok(true),
        }
    }
}

impl<W: io::Write> Write for IoLink<W> {
    fn write(&mut self, buf: &[u8]) -> Result<usize, io::Error> {
        self.writer.write(buf)
    }

    fn flush(&mut self) -> Result<(), io::Error> {
        self.writer.flush()
    }
}
