//! A device process that serves a share of a training runtime's devices (`tessera
//! devices`): several devices, each on pipes, memory and a bulk window of its own, all
//! inherited from the host, served in turn by the process's one thread.
//!
//! A process per device put four device processes and the host on two cores: each
//! process looked for its mail by yielding its core, and the host — which handles every
//! message of every device — got a third of a core (`perf`: 28 % of the samples, the
//! device processes 70 %, mostly `sched_yield` and the switches between address spaces).
//! A step ran at 0.3× the same step on device threads. One process serving every device
//! of a share leaves the host a core of its own and each device process another
//! ([`shares`](super::spawn) decides how many).
//!
//! # Rules
//!
//! - A device never waits inside a request (a step runs in legs, each ending at an
//!   exchange), so one thread serves many: it serves each device whose pipe has bytes
//!   ([`serve_pending`]), and when none has, looks again, yielding its core between
//!   looks for up to [`SPIN`], then sleeps in `poll` on every pipe still open.
//! - A device's requests are served in the order they came, on its own link: its
//!   replies, kept replies and memory are its own.
//! - A device whose pipe ends (its channel dropped), or whose link fails, is served no
//!   more; the others go on. The process ends once every device's pipe has ended.
//! - Between two calls nobody watches a waiting step's deadline (as in the thread
//!   pool): the host's retries stand in for it.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::thread;
use std::time::Instant;

use embedded_io::ReadReady;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use tessera_firmware_sim::std_link::{NoPin, StdClock, SPIN};
use tessera_firmware_sim::{serve_pending, Device, Framed, Framing, Memory, Server};

use super::device::{open_inherited, Windowed, HOST_FRAME, HOST_WINDOW};
use super::pipe_link::PipeLink;
use super::shared::SharedMemory;

/// One device of a device process, by the descriptors it inherited from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InheritedDevice {
    /// The replica the device is.
    pub replica: u32,
    /// The pipe the host's frames come on (read).
    pub input: u32,
    /// The pipe the device's frames go on (write).
    pub output: u32,
    /// The device's memory, shared with the host.
    pub memory: u32,
    /// The window bulk bytes pass through.
    pub window: u32,
}

impl std::str::FromStr for InheritedDevice {
    type Err = String;

    /// `REPLICA:INPUT:OUTPUT:MEMORY:WINDOW`, five numbers.
    fn from_str(text: &str) -> Result<Self, String> {
        let numbers: Vec<u32> = text
            .split(':')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{text:?}: {e}"))?;
        match numbers[..] {
            [replica, input, output, memory, window] => Ok(Self {
                replica,
                input,
                output,
                memory,
                window,
            }),
            _ => Err(format!(
                "{text:?}: expected REPLICA:INPUT:OUTPUT:MEMORY:WINDOW, five numbers"
            )),
        }
    }
}

/// A device of the share, with everything serving it takes.
struct Member {
    replica: u32,
    link: PipeLink<File, BufWriter<File>>,
    framing: Box<Framing<HOST_FRAME>>,
    window: SharedMemory,
    device: Device<'static>,
    server: Box<Server<'static, HOST_FRAME, HOST_WINDOW>>,
    /// Served until its pipe ends or its link fails.
    open: bool,
}

impl Member {
    /// Device `inherited` with `memory` bytes of memory and a window of `window_bytes`.
    fn open(inherited: &InheritedDevice, memory: usize, window_bytes: usize) -> io::Result<Self> {
        let mut both = OpenOptions::new();
        both.read(true).write(true);
        let input = open_inherited(inherited.input, OpenOptions::new().read(true))?;
        // Every frame is flushed whole: a buffer makes each frame one write.
        let output = open_inherited(inherited.output, OpenOptions::new().write(true))?;
        let output = BufWriter::with_capacity(128 << 10, output);
        let window = SharedMemory::open(open_inherited(inherited.window, &both)?, window_bytes)?;
        let shared: Box<dyn Memory + Send> = Box::new(SharedMemory::open(
            open_inherited(inherited.memory, &both)?,
            memory,
        )?);
        // The kept replies (a megabyte per device) live on the heap.
        let replies: Box<[[u8; HOST_FRAME]; HOST_WINDOW]> = vec![[0u8; HOST_FRAME]; HOST_WINDOW]
            .into_boxed_slice()
            .try_into()
            .map_err(|_| io::Error::other("reply storage of the wrong size"))?;
        let server = Box::new(Server::owning(replies));
        Ok(Self {
            replica: inherited.replica,
            link: PipeLink::new(input, output)?,
            framing: Box::new(Framing::new()),
            window,
            device: Device::owning(inherited.replica, shared, server.link()),
            server,
            open: true,
        })
    }

    /// Serves every message its pipe holds now; closes the member at the pipe's end or
    /// on a link error.
    fn serve(&mut self, clock: &mut StdClock) {
        let mut link = Windowed {
            framed: Framed {
                link: &mut self.link,
                framing: &mut self.framing,
            },
            window: &mut self.window,
        };
        match serve_pending(
            &mut self.server,
            &mut self.device,
            &mut link,
            clock,
            &mut NoPin,
        ) {
            Ok(true) => {}
            // Its channel is gone.
            Ok(false) => self.open = false,
            Err(e) => {
                tracing::debug!(replica = self.replica, error = %e, "device stopped");
                self.open = false;
            }
        }
    }
}

/// The whole of `tessera devices`: `devices`, each with `memory` bytes of shared memory
/// and a window of `window_bytes`, served until every one's pipe has ended.
pub fn run_process_share(
    memory: usize,
    window_bytes: usize,
    devices: &[InheritedDevice],
) -> io::Result<()> {
    let mut members = devices
        .iter()
        .map(|d| Member::open(d, memory, window_bytes))
        .collect::<io::Result<Vec<_>>>()?;
    let mut clock = StdClock::new();
    loop {
        let mut heard = false;
        for member in members.iter_mut().filter(|m| m.open) {
            if member.link.read_ready()? {
                heard = true;
                member.serve(&mut clock);
            }
        }
        if !members.iter().any(|m| m.open) {
            return Ok(());
        }
        if !heard {
            wait_for_any(&mut members)?;
        }
    }
}

/// Waits until an open member's pipe has bytes (or has ended): looking, yielding the
/// core between looks, for up to [`SPIN`], then asleep in `poll`.
fn wait_for_any(members: &mut [Member]) -> io::Result<()> {
    let start = Instant::now();
    while start.elapsed() < SPIN {
        for member in members.iter_mut().filter(|m| m.open) {
            if member.link.read_ready()? {
                return Ok(());
            }
        }
        thread::yield_now();
    }
    let mut fds: Vec<PollFd<'_>> = members
        .iter()
        .filter(|m| m.open)
        .map(|m| PollFd::from_borrowed_fd(m.link.fd(), PollFlags::IN))
        .collect();
    match poll(&mut fds, None) {
        Ok(_) | Err(Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
