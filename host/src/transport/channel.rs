use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tessera_core::wire::frame::decode_body;
use tessera_core::wire::{
    encode_frame, max_frame_len, Envelope, ErrorCode, FrameDecoder, Limits, Request, RequestKind,
    Response, PROTOCOL_VERSION,
};
use tessera_firmware_sim::std_link::{NoPin, SleepDelay, StdLink};
use tessera_firmware_sim::{serve, CycleCounter, Device, Server};

use super::fault::{FaultConfig, FaultInjector};

/// How long a request waits for its reply before it is sent again.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(500);
/// Times a request is sent before its device is declared dead.
const ATTEMPTS: u32 = 8;
/// Frame capacity of host-placed devices (64 KiB chunks plus framing).
const HOST_FRAME: usize = 66 * 1024;
/// Largest frame the host accepts: any device's (host-placed devices send the largest).
const MAX_FRAME: usize = 128 * 1024;
/// Stack for the device and link threads: the frame buffers are built on the stack before
/// they are boxed, several times over in unoptimised builds.
const THREAD_STACK: usize = 8 << 20;

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
        // Checked when the reply was accepted.
        decode_body::<Envelope<Response<'_>>>(&self.body)
            .map(|e| e.body)
            .unwrap_or(Response::Done)
    }

    /// The sequence number.
    pub fn seq(&self) -> u32 {
        self.seq
    }
}

/// Why a request failed.
#[derive(Debug)]
pub enum TransportError {
    /// The link could not be written.
    Io(io::Error),
    /// The device closed its link or exited.
    Closed {
        /// The replica.
        replica: u32,
    },
    /// No reply after every attempt: the device is dead or unreachable.
    Timeout {
        /// The replica.
        replica: u32,
        /// The request that went unanswered.
        request: RequestKind,
        /// Attempts made.
        attempts: u32,
    },
    /// The device answered with an error.
    Device {
        /// The replica.
        replica: u32,
        /// The request.
        request: RequestKind,
        /// Why.
        code: ErrorCode,
    },
    /// The device speaks another protocol version or answered out of turn.
    Protocol(String),
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "link error: {e}"),
            Self::Closed { replica } => write!(f, "device {replica} closed its link"),
            Self::Timeout {
                replica,
                request,
                attempts,
            } => write!(
                f,
                "device {replica} did not answer {request:?} after {attempts} attempts"
            ),
            Self::Device {
                replica,
                request,
                code,
            } => {
                write!(f, "device {replica} refused {request:?}: {code}")
            }
            Self::Protocol(text) => write!(f, "protocol error: {text}"),
        }
    }
}

impl std::error::Error for TransportError {}

impl From<io::Error> for TransportError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// What keeps the device alive; dropping it stops the device (declared last in
/// [`Channel`], so it is dropped after the link's other ends).
enum Placement {
    /// The device thread, and our socket end: shutting it down ends the device's loop
    /// even though the reader thread holds a duplicate of it.
    Thread(Option<JoinHandle<()>>, UnixStream),
    Child(Child),
    /// The emulator, the defmt decoder reading its stdout, and the folder of its socket.
    Qemu {
        qemu: Child,
        decoder: Option<Child>,
        dir: PathBuf,
    },
}

/// A link to one device. See the module documentation.
pub struct Channel {
    writer: Box<dyn Write + Send>,
    frames: Receiver<Vec<u8>>,
    next_seq: u32,
    deadline: Duration,
    limits: Limits,
    scratch: Vec<u8>,
    out: Vec<u8>,
    retries: u64,
    /// Held only to be dropped with the channel: it stops the device.
    _placement: Placement,
}

impl Channel {
    /// A device in a thread of this process, `memory` bytes of arena, optionally with
    /// faults injected in both directions.
    pub fn in_process(
        replica: u32,
        memory: usize,
        faults: Option<FaultConfig>,
    ) -> Result<Self, TransportError> {
        let (host_end, device_end) = UnixStream::pair()?;
        let device_reader = device_end.try_clone()?;
        let device_faults = faults.map(|f| FaultConfig {
            seed: f.seed ^ 0xD5,
            ..f
        });
        let thread = thread::Builder::new()
            .stack_size(THREAD_STACK)
            .name(format!("tessera-device-{replica}"))
            .spawn(move || {
                let writer: Box<dyn Write + Send> = match device_faults {
                    Some(config) => Box::new(FaultInjector::new(device_end, config)),
                    None => Box::new(device_end),
                };
                let _ = run_device(replica, memory, device_reader, writer);
            })?;
        let reader = host_end.try_clone()?;
        let control = host_end.try_clone()?;
        let writer: Box<dyn Write + Send> = match faults {
            Some(config) => Box::new(FaultInjector::new(host_end, config)),
            None => Box::new(host_end),
        };
        Self::open(
            reader,
            writer,
            Placement::Thread(Some(thread), control),
            replica,
        )
    }

    /// A device in a child process (`tessera device`, `exe` being the `tessera` binary),
    /// speaking over its stdio.
    pub fn child_process(exe: &Path, replica: u32, memory: usize) -> Result<Self, TransportError> {
        let mut child = Command::new(exe)
            .args([
                "device",
                "--replica",
                &replica.to_string(),
                "--memory",
                &memory.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(TransportError::Protocol(
                "child process without stdio pipes".into(),
            ));
        };
        Self::open(stdout, Box::new(stdin), Placement::Child(child), replica)
    }

    /// The bare-metal firmware (`firmware`, an ELF for mps2-an385) under
    /// `qemu-system-arm`, its UART0 on a Unix socket. The firmware's defmt logs go through
    /// `defmt-print` to stderr. Dropping the channel kills QEMU.
    pub fn qemu(firmware: &Path, replica: u32) -> Result<Self, TransportError> {
        static LAUNCHES: AtomicU32 = AtomicU32::new(0);
        let launch = LAUNCHES.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("tessera-qemu-{}-{launch}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let socket = dir.join("uart0.sock");
        let chardev = format!(
            "socket,id=uart0,path={},server=on,wait=off",
            socket.display()
        );
        let mut qemu = Command::new("qemu-system-arm")
            .args([
                "-machine",
                "mps2-an385",
                "-cpu",
                "cortex-m3",
                "-display",
                "none",
                "-monitor",
                "none",
            ])
            .args([
                "-semihosting-config",
                "enable=on,target=native",
                "-chardev",
                &chardev,
            ])
            .args(["-serial", "chardev:uart0", "-kernel"])
            .arg(firmware)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| TransportError::Protocol(format!("cannot start qemu-system-arm: {e}")))?;
        let logs = qemu.stdout.take();
        let decoder = logs.and_then(|logs| {
            Command::new("defmt-print")
                .arg("-e")
                .arg(firmware)
                .stdin(logs)
                .stdout(Stdio::from(io::stderr()))
                .spawn()
                .ok()
        });
        // From here on, an early return stops QEMU through the placement's drop.
        let placement = Placement::Qemu { qemu, decoder, dir };
        let stream = connect_when_ready(&socket, Duration::from_secs(10))?;
        let reader = stream.try_clone()?;
        Self::open(reader, Box::new(stream), placement, replica)
    }

    fn open(
        reader: impl Read + Send + 'static,
        writer: Box<dyn Write + Send>,
        placement: Placement,
        replica: u32,
    ) -> Result<Self, TransportError> {
        let (tx, frames) = mpsc::channel();
        thread::Builder::new()
            .name("tessera-link".into())
            .stack_size(THREAD_STACK)
            .spawn(move || read_frames(reader, tx))?;
        let mut channel = Self {
            writer,
            frames,
            next_seq: 1,
            deadline: DEFAULT_DEADLINE,
            limits: Limits {
                memory: 0,
                max_frame: 256,
                replica: u32::MAX,
            },
            scratch: vec![0; MAX_FRAME],
            out: vec![0; max_frame_len(MAX_FRAME)],
            retries: 0,
            _placement: placement,
        };
        let reply = channel.request(&Request::Hello {
            version: PROTOCOL_VERSION,
            replica,
        })?;
        match reply.response() {
            Response::Hello {
                version: PROTOCOL_VERSION,
                limits,
            } if limits.replica == replica => channel.limits = limits,
            other => {
                return Err(TransportError::Protocol(format!(
                    "unexpected hello reply {other:?}"
                )))
            }
        }
        Ok(channel)
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
        self.limits.replica
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
                    return Err(TransportError::Device {
                        replica: self.replica(),
                        request,
                        code,
                    });
                }
                return Ok(reply);
            }
            if attempt < ATTEMPTS {
                self.retries += 1;
                self.resend(seq, request)?;
            }
        }
        Err(TransportError::Timeout {
            replica: self.replica(),
            request: request.kind(),
            attempts: ATTEMPTS,
        })
    }

    /// Sends `request` with a fresh sequence number, without waiting.
    pub fn send(&mut self, request: &Request<'_>) -> Result<u32, TransportError> {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        self.resend(seq, request)?;
        Ok(seq)
    }

    /// Sends `request` again under `seq`.
    pub fn resend(&mut self, seq: u32, request: &Request<'_>) -> Result<(), TransportError> {
        let n = encode_frame(
            &Envelope { seq, body: request },
            &mut self.scratch,
            &mut self.out,
        )
        .map_err(|e| TransportError::Protocol(format!("cannot frame {:?}: {e}", request.kind())))?;
        // The device would drop a longer frame unread: refuse it here, at once.
        if n > self.limits.max_frame as usize {
            return Err(TransportError::Protocol(format!(
                "a {:?} frame of {n} bytes exceeds device {}'s maximum frame of {} bytes",
                request.kind(),
                self.replica(),
                self.limits.max_frame
            )));
        }
        self.writer.write_all(&self.out[..n])?;
        self.writer.flush()?;
        Ok(())
    }

    /// The next reply for `seq`, waiting at most `deadline`; `Ok(None)` when the deadline
    /// passes. Replies with other sequence numbers (answers to earlier retries) are skipped.
    pub fn wait(&mut self, seq: u32, deadline: Duration) -> Result<Option<Reply>, TransportError> {
        let end = Instant::now() + deadline;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.frames.recv_timeout(left) {
                Ok(body) => {
                    // Replies to earlier requests (answers to retries) are stale: skip them.
                    match decode_body::<Envelope<Response<'_>>>(&body) {
                        Ok(envelope) if envelope.seq == seq => {
                            return Ok(Some(Reply { seq, body }))
                        }
                        _ => continue,
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(TransportError::Closed {
                        replica: self.replica(),
                    })
                }
            }
        }
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        match self {
            Placement::Thread(handle, control) => {
                // Shutting the socket down (every duplicate of it) ends the device's loop.
                let _ = control.shutdown(std::net::Shutdown::Both);
                if let Some(handle) = handle.take() {
                    let _ = handle.join();
                }
            }
            Placement::Child(child) => stop(child),
            Placement::Qemu { qemu, decoder, dir } => {
                stop(qemu);
                if let Some(decoder) = decoder {
                    // It ends by itself once QEMU's stdout closes.
                    let _ = decoder.wait();
                }
                let _ = fs::remove_dir_all(dir);
            }
        }
    }
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Connects to QEMU's UART socket, which appears a moment after QEMU starts.
fn connect_when_ready(socket: &Path, limit: Duration) -> io::Result<UnixStream> {
    let start = Instant::now();
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => return Ok(stream),
            Err(e) if start.elapsed() > limit => return Err(e),
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Serves a host-placed device with `memory` bytes of arena on `reader`/`writer` until
/// the reader ends. This is the whole of a device thread and of `tessera device`.
pub fn run_device(
    replica: u32,
    memory: usize,
    reader: impl Read + Send + 'static,
    writer: impl Write,
) -> Result<(), io::Error> {
    let mut arena = vec![0u8; memory];
    let cycles = CycleCounter::new();
    let mut device = Device::new(replica, &mut arena, HOST_FRAME, &cycles);
    let mut server = Box::new(Server::<HOST_FRAME>::new());
    let mut link = StdLink::new(reader, writer);
    match serve(
        &mut server,
        &mut device,
        &mut link,
        &mut SleepDelay,
        &mut NoPin,
    ) {
        Ok(()) => Ok(()),
        Err(tessera_firmware_sim::ServeError::Link(e)) => Err(e),
        Err(e) => Err(io::Error::other(format!("{e:?}"))),
    }
}

/// Decodes frames from `reader` and forwards their checked bodies until the link ends.
fn read_frames(mut reader: impl Read, tx: mpsc::Sender<Vec<u8>>) {
    let mut decoder = Box::new(FrameDecoder::<MAX_FRAME>::new());
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = reader.read(&mut buf) {
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let (used, frame) = decoder.feed(rest);
            rest = &rest[used..];
            if let Some(Ok(body)) = frame {
                if tx.send(body.to_vec()).is_err() {
                    return;
                }
            }
        }
    }
}
