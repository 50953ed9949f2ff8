//! The request protocol over one link: sequence numbers, deadlines and retries.
//!
//! A [`Channel`] frames each request in an envelope with a fresh sequence number and waits
//! for the reply carrying the same number under a deadline. A missing or damaged reply is
//! retried under the same number: the device answers a retry from its reply cache instead
//! of running the request twice. Replies with other numbers (answers to earlier retries)
//! are skipped. A device that stops answering or closes its link is an error, never a hang.
//!
//! Every frame goes out preceded by a `0x00` delimiter, so garbage the device's decoder
//! holds before it ends there and costs only itself, and is flushed at once.

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{
    encode_frame, max_frame_len, Envelope, Limits, Request, Response, PROTOCOL_VERSION,
};

use super::fault::FaultConfig;
use super::reader::{read_frames, MAX_FRAME};
use super::spawn::{self, DeviceHandle, Link};
use super::TransportError;

/// How long a request waits for its reply before it is sent again.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(500);
/// Times a request is sent before its device is declared dead.
const ATTEMPTS: u32 = 8;
/// How long a device process that closed its link may take to report its exit status.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// A reply: the frame body it came in, and its decoded response.
#[derive(Clone)]
pub struct Reply {
    seq: u32,
    body: Vec<u8>,
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reply")
            .field("seq", &self.seq())
            .field("response", &self.response())
            .finish()
    }
}

impl Reply {
    /// The response, borrowing its payload from the frame.
    pub fn response(&self) -> Response<'_> {
        // Checked when the reply was accepted (see `Channel::wait`).
        decode_body::<Envelope<Response<'_>>>(&self.body)
            .map(|e| e.body)
            .unwrap_or(Response::Done)
    }

    /// The sequence number.
    pub fn seq(&self) -> u32 {
        self.seq
    }
}

/// A link to one device. See the module documentation.
pub struct Channel {
    writer: Box<dyn Write + Send>,
    frames: Receiver<Vec<u8>>,
    next_seq: u32,
    deadline: Duration,
    /// The replica this channel was opened for (the device confirms it in its hello).
    replica: u32,
    limits: Limits,
    scratch: Vec<u8>,
    out: Vec<u8>,
    retries: u64,
    /// Held to be dropped with the channel, after the link's other ends: it stops the
    /// device.
    handle: DeviceHandle,
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("replica", &self.replica)
            .field("device", &self.handle.program())
            .field("next_seq", &self.next_seq)
            .field("limits", &self.limits)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl Channel {
    /// A device in a thread of this process, `memory` bytes of arena, optionally with
    /// faults injected in both directions.
    pub fn in_process(
        replica: u32,
        memory: usize,
        faults: Option<FaultConfig>,
    ) -> Result<Self, TransportError> {
        Self::open(spawn::in_process(replica, memory, faults)?, replica)
    }

    /// A device in a child process (`tessera device`, `exe` being the `tessera` binary),
    /// speaking over its stdio.
    pub fn child_process(exe: &Path, replica: u32, memory: usize) -> Result<Self, TransportError> {
        Self::open(spawn::child_process(exe, replica, memory)?, replica)
    }

    /// The bare-metal firmware (`firmware`, an ELF for mps2-an385) under
    /// `qemu-system-arm`, its UART0 on a Unix socket. The firmware's defmt logs go through
    /// `defmt-print` to stderr. Dropping the channel kills QEMU. The firmware and the tools
    /// are checked before anything starts.
    pub fn qemu(firmware: &Path, replica: u32) -> Result<Self, TransportError> {
        Self::open(spawn::qemu(firmware, replica)?, replica)
    }

    fn open(link: Link, replica: u32) -> Result<Self, TransportError> {
        let Link {
            reader,
            writer,
            handle,
        } = link;
        let (tx, frames) = mpsc::channel();
        thread::Builder::new()
            .name(format!("tessera-link-{replica}"))
            .spawn(move || read_frames(reader, tx, replica))?;
        let mut channel = Self {
            writer,
            frames,
            next_seq: 1,
            deadline: DEFAULT_DEADLINE,
            replica,
            limits: Limits {
                memory: 0,
                max_frame: 256,
                replica,
            },
            scratch: vec![0; MAX_FRAME],
            out: vec![0; 1 + max_frame_len(MAX_FRAME)],
            retries: 0,
            handle,
        };
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            replica,
        };
        let reply = match channel.request(&hello) {
            Ok(reply) => reply,
            // A device process that ended before its hello says how it ended.
            Err(TransportError::Closed { .. }) => {
                return Err(match channel.handle.exit_status(EXIT_GRACE) {
                    Some(status) => TransportError::Exited {
                        replica,
                        program: channel.handle.program(),
                        status,
                    },
                    None => TransportError::Closed { replica },
                })
            }
            Err(TransportError::Device {
                code: tessera_core::wire::ErrorCode::Version { device },
                ..
            }) => {
                return Err(TransportError::Version {
                    replica,
                    device,
                    host: PROTOCOL_VERSION,
                })
            }
            Err(e) => return Err(e),
        };
        match reply.response() {
            Response::Hello {
                version: PROTOCOL_VERSION,
                limits,
            } if limits.replica == replica => channel.limits = limits,
            other => return Err(channel.unexpected(&hello, &other)),
        }
        tracing::debug!(
            replica,
            max_frame = channel.limits.max_frame,
            "device ready"
        );
        Ok(channel)
    }

    /// The error for a reply of the wrong type.
    pub fn unexpected(&self, request: &Request<'_>, reply: &Response<'_>) -> TransportError {
        TransportError::UnexpectedReply {
            replica: self.replica,
            request: request.kind(),
            reply: format!("{reply:?}"),
        }
    }

    /// The device's limits from its hello.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Requests sent again because their reply did not arrive in time.
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// The replica this channel reaches.
    pub fn replica(&self) -> u32 {
        self.replica
    }

    /// How long each attempt waits for its reply.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Changes how long each attempt waits for its reply.
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    /// Sends `request` and returns the device's reply, retrying under the same sequence
    /// number until the deadline of the last attempt. An error reply is an error.
    pub fn request(&mut self, request: &Request<'_>) -> Result<Reply, TransportError> {
        let seq = self.send(request)?;
        for attempt in 1..=ATTEMPTS {
            if let Some(reply) = self.wait(seq, self.deadline)? {
                if let Response::Error { request, code } = reply.response() {
                    tracing::debug!(replica = self.replica, ?request, %code, "device error");
                    return Err(TransportError::Device {
                        replica: self.replica,
                        request,
                        code,
                    });
                }
                return Ok(reply);
            }
            if attempt < ATTEMPTS {
                self.retries += 1;
                tracing::debug!(replica = self.replica, seq, attempt, request = ?request.kind(), "no reply in time: retrying");
                self.resend(seq, request)?;
            }
        }
        tracing::warn!(replica = self.replica, request = ?request.kind(), attempts = ATTEMPTS, "device did not answer");
        Err(TransportError::Timeout {
            replica: self.replica,
            request: request.kind(),
            attempts: ATTEMPTS,
        })
    }

    /// Sends `request` with a fresh sequence number, without waiting; returns the number.
    pub fn send(&mut self, request: &Request<'_>) -> Result<u32, TransportError> {
        let seq = self.next_seq;
        // Zero is never used: the device answers undecodable frames under it.
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        self.resend(seq, request)?;
        Ok(seq)
    }

    /// Sends `request` (again) under `seq`.
    pub fn resend(&mut self, seq: u32, request: &Request<'_>) -> Result<(), TransportError> {
        let envelope = Envelope { seq, body: request };
        // out[0] is the delimiter that ends whatever the device's decoder holds.
        let Some((first, rest)) = self.out.split_first_mut() else {
            return Err(TransportError::Io(std::io::Error::other("no frame buffer")));
        };
        *first = 0;
        let too_large = |bytes| TransportError::TooLarge {
            replica: self.replica,
            request: request.kind(),
            bytes,
            max: self.limits.max_frame as usize,
        };
        let n = 1 + encode_frame(&envelope, &mut self.scratch, rest)
            .map_err(|_| too_large(MAX_FRAME))?;
        // The device would drop a longer frame unread: refuse it here, at once.
        if n - 1 > self.limits.max_frame as usize {
            return Err(too_large(n - 1));
        }
        self.writer.write_all(&self.out[..n])?;
        self.writer.flush()?;
        Ok(())
    }

    /// The next reply for `seq`, waiting at most `deadline`; `Ok(None)` when the deadline
    /// passes. Replies with other sequence numbers (answers to earlier retries) and bodies
    /// that are not responses are skipped.
    pub fn wait(&mut self, seq: u32, deadline: Duration) -> Result<Option<Reply>, TransportError> {
        let end = Instant::now() + deadline;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.frames.recv_timeout(left) {
                Ok(body) => match decode_body::<Envelope<Response<'_>>>(&body) {
                    Ok(envelope) if envelope.seq == seq => return Ok(Some(Reply { seq, body })),
                    _ => continue,
                },
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(TransportError::Closed {
                        replica: self.replica,
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;
    use std::sync::{Arc, Mutex};

    use tessera_core::wire::FrameDecoder;

    use super::*;

    /// A writer that keeps what it is given.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Without a leading delimiter, garbage the device's decoder held (the rest of a
    /// truncated frame) ran into the next frame and cost it too: a truncated request cost
    /// its retry as well.
    #[test]
    fn every_frame_starts_with_a_delimiter() {
        let capture = Capture::default();
        let (_, frames) = mpsc::channel();
        let (ours, _theirs) = UnixStream::pair().unwrap();
        let mut channel = Channel {
            writer: Box::new(capture.clone()),
            frames,
            next_seq: 1,
            deadline: DEFAULT_DEADLINE,
            replica: 0,
            limits: Limits {
                memory: 0,
                max_frame: 256,
                replica: 0,
            },
            scratch: vec![0; 512],
            out: vec![0; 600],
            retries: 0,
            handle: DeviceHandle::Thread(None, ours),
        };
        channel.send(&Request::GetSeed).unwrap();
        let sent = capture.0.lock().unwrap().clone();
        assert_eq!(sent.first(), Some(&0), "the frame opens with 0x00");

        // What a device decodes when half a damaged frame came before it.
        let mut held = vec![0x42u8; 9];
        held.extend_from_slice(&sent);
        let mut decoder = FrameDecoder::<256>::new();
        let outcomes: Vec<bool> = held
            .iter()
            .filter_map(|&b| decoder.push(b).map(|frame| frame.is_ok()))
            .collect();
        assert_eq!(
            outcomes,
            [false, true],
            "the garbage, then the intact request"
        );
    }
}
