//! A simulated device served from this host: the whole of a device thread and of the
//! `tessera device` child process, on a byte link or on a message queue.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

use tessera_firmware_sim::{
    serve, serve_messages, CycleCounter, Device, Framed, Framing, Incoming, Memory, Messages,
    ServeError, Server,
};

use super::board::{BusyLine, InstantClock, NoPin};
use super::io_link::IoLink;
use super::pipe_link::PipeLink;
use super::shared::SharedMemory;

/// Frame capacity of host-placed devices (64 KiB chunks plus framing).
pub const HOST_FRAME: usize = 66 * 1024;
/// Requests a host-placed device keeps replies for.
pub const HOST_WINDOW: usize = 16;

type HostServer<'b> = Server<'b, HOST_FRAME, HOST_WINDOW>;

/// Serves a device for `replica` with `memory` bytes of arena on `reader`/`writer` (framed)
/// until the reader ends (the host went away), which returns `Ok`.
pub fn run_device(
    replica: u32,
    memory: usize,
    reader: impl Read + Send + 'static,
    writer: impl Write,
) -> Result<(), io::Error> {
    run_device_watched(replica, memory, reader, writer, &mut BusyLine::default())
}

/// Like [`run_device`], driving `busy` high while a request runs (a device thread, whose
/// host reads the line to tell a busy device from a dead one).
pub(super) fn run_device_watched(
    replica: u32,
    memory: usize,
    reader: impl Read + Send + 'static,
    writer: impl Write,
    busy: &mut BusyLine,
) -> Result<(), io::Error> {
    let mut arena = Vec::new();
    arena.try_reserve_exact(memory).map_err(|_| {
        io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!("device {replica}: the host cannot allocate {memory} bytes of memory"),
        )
    })?;
    arena.resize(memory, 0u8);
    run_device_on(replica, &mut arena, reader, writer, busy)
}

/// Like [`run_device_watched`], on `arena` (memory the host may map too).
pub(super) fn run_device_on(
    replica: u32,
    arena: &mut (dyn Memory + Send),
    reader: impl Read + Send + 'static,
    writer: impl Write,
    busy: &mut BusyLine,
) -> Result<(), io::Error> {
    run_device_on_link(replica, arena, IoLink::new(reader, writer), busy)
}

/// Like [`run_device_on`], on a link made already.
pub(super) fn run_device_on_link<W: Write>(
    replica: u32,
    arena: &mut (dyn Memory + Send),
    mut link: IoLink<W>,
    busy: &mut BusyLine,
) -> Result<(), io::Error> {
    with_device(replica, arena, |server, device| {
        serve(server, device, &mut link, &mut InstantClock::new(), busy)
    })
}

/// Descriptors a `tessera device` process inherits from its host, by number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inherited {
    /// The device's memory, shared with the host (which reads and writes it in place).
    pub memory: Option<u32>,
    /// The shared window bulk bytes pass through, and its size.
    pub window: Option<(u32, usize)>,
}

/// The whole of `tessera device`: one device on stdin/stdout (frames only; a closed stdin —
/// the host went away — ends it) with `memory` bytes of memory: the host's shared memory
/// when it names one (with a window: the host reads in place only what the device can
/// receive beside its frames), else memory of its own; bulk bytes through the host's window
/// when it names one.
pub fn run_device_process(replica: u32, memory: usize, inherited: Inherited) -> io::Result<()> {
    // Stdout is line-buffered: on binary frames that is a write per 0x0A byte. The device
    // flushes after every frame, so a plain buffer loses nothing.
    let stdout = io::BufWriter::with_capacity(128 << 10, io::stdout().lock());
    let Some((fd, bytes)) = inherited.window else {
        if inherited.memory.is_some() {
            return Err(io::Error::other(
                "shared device memory needs a shared window beside it",
            ));
        }
        return run_device(replica, memory, io::stdin(), stdout);
    };
    let mut window = SharedMemory::open(open_inherited(fd)?, bytes)?;
    let (mut shared, mut own) = (None, Vec::new());
    let arena: &mut (dyn Memory + Send) = match inherited.memory {
        Some(fd) => shared.insert(SharedMemory::open(open_inherited(fd)?, memory)?),
        None => {
            own.resize(memory, 0u8);
            &mut own
        }
    };
    let stdin = io::stdin();
    run_device_with_window(replica, arena, stdin.as_fd(), stdout, &mut window)
}

/// Shared memory inherited from the host as descriptor `fd`, opened anew by its `/proc`
/// name for reading and writing (no `unsafe` taking over a raw descriptor).
pub(super) fn open_inherited(fd: u32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{fd}"))
}

/// Like [`run_device`], with `arena` as the device's memory (the host's shared memory, or
/// memory of its own) and bulk bytes passing through `window`, a shared-memory window the
/// host maps too (the child-process placement).
fn run_device_with_window(
    replica: u32,
    arena: &mut (dyn Memory + Send),
    pipe: BorrowedFd<'_>,
    writer: impl Write,
    window: &mut SharedMemory,
) -> Result<(), io::Error> {
    // Read in place: no reader thread between the host's bytes and the device.
    let mut link = PipeLink::new(pipe, writer)?;
    let mut framing = Box::new(Framing::<HOST_FRAME>::new());
    let mut windowed = Windowed {
        link: FramedPipe(Framed {
            link: &mut link,
            framing: &mut framing,
        }),
        window,
    };
    with_device(replica, arena, |server, device| {
        serve_messages(
            server,
            device,
            &mut windowed,
            &mut InstantClock::new(),
            &mut NoPin,
        )
    })
}

/// A device's framed pipe, whose waits during a step are woken by the host's bytes.
struct FramedPipe<'a, 'p, W>(Framed<'a, PipeLink<'p, W>, HOST_FRAME>);

impl<W: Write> Messages for FramedPipe<'_, '_, W> {
    type Error = io::Error;

    fn receive(&mut self, into: &mut [u8], wait: bool) -> Result<Incoming, io::Error> {
        self.0.receive(into, wait)
    }

    /// Woken by the host's bytes: without it, a step waiting for its combination slept
    /// between looks (50 µs asked, 60–110 µs slept), once per exchange.
    fn receive_within(&mut self, into: &mut [u8], us: u32) -> Result<Option<Incoming>, io::Error> {
        match self.0.receive(into, false)? {
            Incoming::Idle => {}
            heard => return Ok(Some(heard)),
        }
        let limit = std::time::Duration::from_micros(u64::from(us));
        if !self.0.link.wait_readable(Some(limit))? {
            return Ok(Some(Incoming::Idle));
        }
        self.0.receive(into, false).map(Some)
    }

    fn send(&mut self, body: &[u8]) -> Result<(), io::Error> {
        self.0.send(body)
    }
}

/// A device's link `M` whose bulk bytes pass through a shared window.
pub(super) struct Windowed<'w, M> {
    pub link: M,
    pub window: &'w mut SharedMemory,
}

impl<M: Messages<Error = io::Error>> Messages for Windowed<'_, M> {
    type Error = io::Error;

    fn receive(&mut self, into: &mut [u8], wait: bool) -> Result<Incoming, io::Error> {
        self.link.receive(into, wait)
    }

    fn receive_within(&mut self, into: &mut [u8], us: u32) -> Result<Option<Incoming>, io::Error> {
        self.link.receive_within(into, us)
    }

    fn send(&mut self, body: &[u8]) -> Result<(), io::Error> {
        self.link.send(body)
    }

    fn bulk_capacity(&self) -> usize {
        self.window.len()
    }

    fn receive_bulk(&mut self, into: &mut [u8]) -> Result<bool, io::Error> {
        // The host filled the window before it sent the request.
        match self.window.bytes(into.len()) {
            Some(from) => {
                into.copy_from_slice(from);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn send_bulk(&mut self, body: &[u8], bulk: &[u8]) -> Result<bool, io::Error> {
        // Into the window first: the host reads it once the reply has arrived.
        if !self.window.write(bulk) {
            return Ok(false);
        }
        self.link.send(body)?;
        Ok(true)
    }
}

/// Builds a device on `arena` and its server on the heap, and runs `serve` on them.
fn with_device(
    replica: u32,
    arena: &mut (dyn Memory + Send),
    serve: impl FnOnce(&mut HostServer<'_>, &mut Device<'_>) -> Result<(), ServeError<io::Error>>,
) -> Result<(), io::Error> {
    let cycles = CycleCounter::new();
    // The kept replies (a megabyte) live on the heap.
    let mut replies = vec![[0u8; HOST_FRAME]; HOST_WINDOW];
    let replies: &mut [[u8; HOST_FRAME]; HOST_WINDOW] = replies
        .as_mut_slice()
        .try_into()
        .map_err(|_| io::Error::other("reply storage of the wrong size"))?;
    let mut server = Box::new(Server::new(replies));
    let mut device = Device::new(replica, arena, server.link(), &cycles);
    match serve(&mut server, &mut device) {
        Ok(()) => Ok(()),
        // The host went away while the device worked (it gave up on a long request, or
        // ended): there is nobody left to tell.
        Err(ServeError::Link(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(ServeError::Link(e)) => Err(e),
        Err(e) => Err(io::Error::other(e)),
    }
}
