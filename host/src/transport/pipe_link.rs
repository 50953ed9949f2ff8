//! The byte link of a `tessera device` process: its stdin read in place, without a reader
//! thread.
//!
//! A reader thread blocked in `read` is woken by the kernel for every message the host
//! sends (tens of microseconds on a small virtual machine), and then hands the bytes to
//! the device thread: two hops per message. Here the device's own thread reads the pipe,
//! set non-blocking (through `rustix`: no `unsafe` here): it looks for bytes as every
//! device wait does (yielding its core between looks for up to [`SPIN`]), then sleeps in
//! `poll` until they come.
//!
//! # Rules
//!
//! - A read returns the bytes already buffered, else waits for at least one byte; 0 only
//!   at end of file (the host went away).
//! - [`PipeLink::wait_readable`] waits at most its limit, and says whether a read would
//!   not block (end of file included).
//! - Writes go straight to the writer.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::thread;
use std::time::{Duration, Instant};

use embedded_io::{ErrorType, Read, ReadReady, Write};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use rustix::io::Errno;

use super::spin::SPIN;

/// Bytes read from the pipe at once.
const CHUNK: usize = 64 * 1024;

/// A pipe (or socket) read in place, without blocking: what it has read and not yet
/// handed out, and whether it ended.
pub struct Pipe<F> {
    fd: F,
    buf: Vec<u8>,
    /// Bytes `at..len` of `buf` are unread.
    at: usize,
    len: usize,
    ended: bool,
}

impl<F: AsFd> Pipe<F> {
    /// Reads `fd`, made non-blocking.
    pub fn new(fd: F) -> io::Result<Self> {
        let flags = fcntl_getfl(&fd)?;
        fcntl_setfl(&fd, flags | OFlags::NONBLOCK)?;
        Ok(Self {
            fd,
            buf: vec![0; CHUNK],
            at: 0,
            len: 0,
            ended: false,
        })
    }

    /// One read that does not block: true when bytes are buffered or the pipe ended.
    pub fn fill(&mut self) -> io::Result<bool> {
        if self.at < self.len || self.ended {
            return Ok(true);
        }
        match rustix::io::read(&self.fd, &mut self.buf[..]) {
            Ok(0) => self.ended = true,
            Ok(n) => (self.at, self.len) = (0, n),
            Err(Errno::AGAIN | Errno::INTR) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        Ok(true)
    }

    /// Waits up to `limit` (`None`: as long as it takes) for bytes to read: true when a
    /// read would not block (end of file included).
    pub fn wait_readable(&mut self, limit: Option<Duration>) -> io::Result<bool> {
        let start = Instant::now();
        let spin = limit.map_or(SPIN, |l| l.min(SPIN));
        loop {
            if self.fill()? {
                return Ok(true);
            }
            if start.elapsed() >= spin {
                break;
            }
            thread::yield_now();
        }
        let left = limit.map(|l| l.saturating_sub(start.elapsed()));
        if left == Some(Duration::ZERO) {
            return Ok(false);
        }
        let timeout = left.and_then(|l| Timespec::try_from(l).ok());
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(Errno::INTR) => self.fill(),
            Err(e) => Err(e.into()),
        }
    }

    /// The bytes read and not yet taken (empty at the end, or when none are buffered).
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.at..self.len]
    }

    /// Marks the first `n` buffered bytes taken.
    pub fn consume(&mut self, n: usize) {
        self.at = (self.at + n).min(self.len);
    }

    /// True once the other end is gone and every byte was taken.
    pub fn ended(&self) -> bool {
        self.ended && self.at == self.len
    }
}

/// The device's side of a `tessera device` process: its stdin read in place, its stdout
/// written through `W`.
pub struct PipeLink<'p, W> {
    pipe: Pipe<BorrowedFd<'p>>,
    writer: W,
}

impl<'p, W: io::Write> PipeLink<'p, W> {
    /// Reads `pipe` (made non-blocking), writes `writer`.
    pub fn new(pipe: BorrowedFd<'p>, writer: W) -> io::Result<Self> {
        Ok(Self {
            pipe: Pipe::new(pipe)?,
            writer,
        })
    }

    /// See [`Pipe::wait_readable`].
    pub fn wait_readable(&mut self, limit: Option<Duration>) -> io::Result<bool> {
        self.pipe.wait_readable(limit)
    }
}

impl<W> ErrorType for PipeLink<'_, W> {
    type Error = io::Error;
}

impl<W: io::Write> Read for PipeLink<'_, W> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, io::Error> {
        while !self.pipe.wait_readable(None)? {}
        let from = self.pipe.buffered();
        let n = buf.len().min(from.len());
        buf[..n].copy_from_slice(&from[..n]);
        self.pipe.consume(n);
        Ok(n)
    }
}

impl<W: io::Write> ReadReady for PipeLink<'_, W> {
    fn read_ready(&mut self) -> Result<bool, io::Error> {
        self.pipe.fill()
    }
}

impl<W: io::Write> Write for PipeLink<'_, W> {
    fn write(&mut self, buf: &[u8]) -> Result<usize, io::Error> {
        self.writer.write(buf)
    }

    fn flush(&mut self) -> Result<(), io::Error> {
        self.writer.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::os::unix::net::UnixStream;

    use super::*;

    /// Catches a link that blocks where it should not, loses bytes between reads, or
    /// misses the end: a wait with nothing sent times out, bytes are read in order across
    /// reads, and the end reads as 0.
    #[test]
    fn reads_wait_for_bytes_in_order_and_end_at_the_end() {
        let (mut host, device) = UnixStream::pair().unwrap();
        let mut link = PipeLink::new(device.as_fd(), Vec::new()).unwrap();
        let limit = Some(Duration::from_millis(2));
        assert!(!link.wait_readable(limit).unwrap(), "nothing sent");
        assert!(!link.read_ready().unwrap());
        host.write_all(b"abc").unwrap();
        let mut two = [0u8; 2];
        assert_eq!(link.read(&mut two).unwrap(), 2);
        assert_eq!(&two, b"ab");
        assert_eq!(link.read(&mut two).unwrap(), 1);
        assert_eq!(two[0], b'c');
        drop(host);
        assert!(link.wait_readable(limit).unwrap(), "the end is readable");
        assert_eq!(link.read(&mut two).unwrap(), 0);
    }
}
