//! A device process that serves a share of a training runtime's devices (`tessera
//! devices`): several devices, each with a message ring each way in memory shared with the
//! host (`transport::ring`), its own memory and its own bulk window, all inherited from
//! the host, served in turn by the process's one thread.
//!
//! A process per device put four device processes and the host on two cores: each
//! process looked for its mail by yielding its core, and the host — which handles every
//! message of every device — got a third of a core (`perf`: 28 % of the samples, the
//! device processes 70 %, mostly `sched_yield` and the switches between address spaces).
//! A step ran at 0.3× the same step on device threads. One process serving every device
//! of a share leaves the host a core of its own and each device process another
//! (`spawn::process` decides how many).
//!
//! # Rules
//!
//! - A device never waits inside a request (a step runs in legs, each ending at an
//!   exchange), so one thread serves many: it serves each device whose ring has mail
//!   ([`serve_pending`]), and when none has, looks again (a load per ring), yielding its
//!   core between looks for up to [`SPIN`] while the core is not contended
//!   (`transport::contention`), then sleeps on the share's doorbell, which the host rings
//!   when it writes to a sleeping share.
//! - A device's requests are served in the order they came, on its own rings: its
//!   replies, kept replies and memory are its own.
//! - A device whose ring from the host ends (its channel dropped), or whose link fails,
//!   is served no more; the others go on. The process ends once every device's ring has
//!   ended, or when its host has gone (checked every [`HOST_CHECK`] asleep, should the
//!   reaper not have stopped it).
//! - Between two calls nobody watches a waiting step's deadline (as in the thread
//!   pool): the host's retries stand in for it.

use std::io;
use std::time::{Duration, Instant};

use tessera_firmware_sim::{serve_pending, Device, Incoming, Memory, Messages, Server};

use super::board::NoPin;
use super::contention::{may_yield, yield_core};
use super::device::{open_inherited, Windowed, HOST_FRAME, HOST_WINDOW};
use super::ring::{self, Bell, Received, RingError, RingReceiver, RingSender};
use super::shared::{RingMemory, SharedMemory};
use super::spin::SPIN;

/// How often a sleeping device process checks that its host is still there.
const HOST_CHECK: Duration = Duration::from_millis(100);

/// One device of a process share (`tessera devices --device`), by the descriptors it
/// inherited from the host; its rings are in the share's ring memory, by its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InheritedDevice {
    /// The replica the device is.
    pub replica: u32,
    /// The descriptor number of the device's memory, shared with the host.
    pub memory: u32,
    /// The descriptor number of the window bulk bytes pass through.
    pub window: u32,
}

impl std::str::FromStr for InheritedDevice {
    type Err = String;

    /// `REPLICA:MEMORY:WINDOW`, three numbers.
    fn from_str(text: &str) -> Result<Self, String> {
        let numbers: Vec<u32> = text
            .split(':')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{text:?}: {e}"))?;
        match numbers[..] {
            [replica, memory, window] => Ok(Self {
                replica,
                memory,
                window,
            }),
            _ => Err(format!(
                "{text:?}: expected REPLICA:MEMORY:WINDOW, three numbers"
            )),
        }
    }
}

/// A device of the share, with everything serving it takes.
struct Member {
    replica: u32,
    /// Its rings from and to the host, until its ring from the host ends or its link
    /// fails: dropping the ring to the host then tells the host at once.
    rings: Option<(RingReceiver, RingSender)>,
    window: SharedMemory,
    device: Device<'static>,
    server: Box<Server<'static, HOST_FRAME, HOST_WINDOW>>,
}

impl Member {
    /// Device `index` of the share, `inherited`, with `memory` bytes of memory, a window
    /// of `window_bytes` and its rings in `rings`.
    fn open(
        index: usize,
        inherited: &InheritedDevice,
        rings: &SharedMemory,
        memory: usize,
        window_bytes: usize,
    ) -> io::Result<Self> {
        let window = SharedMemory::open(open_inherited(inherited.window)?, window_bytes)?;
        let shared: Box<dyn Memory + Send> = Box::new(SharedMemory::open(
            open_inherited(inherited.memory)?,
            memory,
        )?);
        let (to_device, from_device) = ring::share_rings(index);
        // The kept replies (a megabyte per device) live on the heap.
        let replies: Box<[[u8; HOST_FRAME]; HOST_WINDOW]> = vec![[0u8; HOST_FRAME]; HOST_WINDOW]
            .into_boxed_slice()
            .try_into()
            .map_err(|_| io::Error::other("reply storage of the wrong size"))?;
        let server = Box::new(Server::owning(replies));
        let inbox = RingReceiver::new(rings.map_again()?, to_device, ring::DOORBELL)?;
        let outbox = RingSender::new(
            rings.map_again()?,
            from_device,
            from_device + ring::OWN_BELL,
        )?;
        Ok(Self {
            replica: inherited.replica,
            rings: Some((inbox, outbox)),
            window,
            device: Device::owning(inherited.replica, shared, server.link()),
            server,
        })
    }

    /// True while it is served.
    fn is_open(&self) -> bool {
        self.rings.is_some()
    }

    /// True when it is served and its ring from the host has mail.
    fn has_mail(&self) -> bool {
        self.rings
            .as_ref()
            .is_some_and(|(inbox, _)| inbox.has_mail())
    }

    /// Serves every message its ring holds now; closes the member at the ring's end or
    /// on a link error.
    fn serve(&mut self, host: u32) {
        let Some((inbox, outbox)) = self.rings.as_mut() else {
            return;
        };
        let mut link = Windowed {
            link: RingLink {
                inbox,
                outbox,
                host,
            },
            window: &mut self.window,
        };
        match serve_pending(&mut self.server, &mut self.device, &mut link, &mut NoPin) {
            Ok(true) => {}
            // Its channel is gone.
            Ok(false) => self.rings = None,
            Err(e) => {
                tracing::debug!(replica = self.replica, error = %e, "device stopped");
                self.rings = None;
            }
        }
    }
}

/// A device's two rings as the serve loop's link, and the host's process id.
struct RingLink<'r> {
    inbox: &'r mut RingReceiver,
    outbox: &'r mut RingSender,
    host: u32,
}

impl Messages for RingLink<'_> {
    type Error = io::Error;

    fn receive(&mut self, into: &mut [u8], wait: bool) -> Result<Incoming, io::Error> {
        loop {
            return Ok(match self.inbox.receive(into) {
                Ok(Received::Message(n)) => Incoming::Message(n),
                Ok(Received::Closed) => Incoming::Closed,
                Ok(Received::Empty) if wait => {
                    if std::os::unix::process::parent_id() != self.host {
                        return Err(io::Error::other("the host has gone"));
                    }
                    self.inbox.sleep(Some(HOST_CHECK));
                    continue;
                }
                Ok(Received::Empty) => Incoming::Idle,
                // Skipped, like a damaged frame: the host's retry gets an answer.
                Err(RingError::TooLong { .. }) => Incoming::Damaged,
                Err(e) => return Err(e.into()),
            });
        }
    }

    fn send(&mut self, body: &[u8]) -> Result<(), io::Error> {
        Ok(self.outbox.send(body)?)
    }
}

/// The whole of `tessera devices`: `devices`, each with `memory` bytes of shared memory
/// and a window of `window_bytes`, their rings in the shared memory `rings` (an inherited
/// descriptor), served until every one's ring from the host has ended.
pub fn run_process_share(
    memory: usize,
    window_bytes: usize,
    rings: u32,
    devices: &[InheritedDevice],
) -> io::Result<()> {
    // Its host, first of all: should the host die while the process starts, the process
    // is an orphan already and ends at its first check.
    let host = std::os::unix::process::parent_id();
    // Mapped again for each ring; this mapping itself is never read.
    let shared = SharedMemory::open(open_inherited(rings)?, ring::share_bytes(devices.len()))?;
    let doorbell_memory = RingMemory::new(shared.map_again()?);
    let doorbell = Bell::at(&doorbell_memory, ring::DOORBELL)
        .ok_or_else(|| io::Error::other("the share's doorbell is not in its memory"))?;
    let mut members = devices
        .iter()
        .enumerate()
        .map(|(i, d)| Member::open(i, d, &shared, memory, window_bytes))
        .collect::<io::Result<Vec<_>>>()?;
    loop {
        let mut heard = false;
        for member in members.iter_mut().filter(|m| m.has_mail()) {
            heard = true;
            member.serve(host);
        }
        if !members.iter().any(Member::is_open) {
            return Ok(());
        }
        if !heard {
            wait_for_any(&members, &doorbell, host)?;
        }
    }
}

/// Waits until an open member's ring has mail: looking, yielding the core between looks,
/// for up to [`SPIN`] while the core is not contended (`transport::contention`), then
/// asleep on the doorbell; an error once the host has gone.
fn wait_for_any(members: &[Member], doorbell: &Bell<'_>, host: u32) -> io::Result<()> {
    let any = || members.iter().any(Member::has_mail);
    let start = Instant::now();
    while start.elapsed() < SPIN {
        if any() {
            return Ok(());
        }
        if !may_yield() {
            break;
        }
        yield_core();
    }
    loop {
        doorbell.sleep(Some(HOST_CHECK), any);
        if any() {
            return Ok(());
        }
        if std::os::unix::process::parent_id() != host {
            return Err(io::Error::other("the host has gone"));
        }
    }
}
