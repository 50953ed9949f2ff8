//! Starting a device in each placement, and stopping it: a thread of this process on a
//! socket pair, a child process (`tessera device`) on its stdio or a share of a training
//! runtime's devices in one (`tessera devices`) on rings, or the bare-metal firmware
//! under QEMU (`qemu-system-arm`, or `qemu-system-riscv32` for a RISC-V build) with UART0
//! on a Unix socket and its defmt logs decoded by `defmt-print`.
//!
//! Every device process has a reaper: a shell that kills it once this process is gone,
//! however it ended (SIGKILL included). A device process would end by itself when its link
//! closes — but not while it is stopped (SIGSTOP, a debugger), and QEMU serves its socket
//! forever. The reaper does not depend on which thread started the device, as a
//! parent-death signal would (Linux sends that when the spawning *thread* ends).
//!
//! The QEMU placement checks everything it needs before it starts anything: the firmware
//! exists and is a 32-bit little-endian ARM or RISC-V ELF, and its emulator
//! (`qemu-system-arm` or `qemu-system-riscv32`, by the ELF's `e_machine`) and `defmt-print`
//! are on the `PATH`. Every child process is adopted by [`children`](super::children) so
//! that dropping the link, or a signal to tessera, stops it.
//!
//! # Files
//!
//! - `thread`: a device thread of this process on a socket pair (faults injected), or a
//!   pooled one.
//! - `pool`: the thread placement's devices served by at most as many threads as cores
//!   (one of them, for a training step, the host's own), whichever is free.
//! - `process`: a `tessera device` child process on its stdio, or a share of a training
//!   runtime's devices in one `tessera devices` process.
//! - `qemu`: the firmware under QEMU, UART0 on a Unix socket.
//! - `serial`: a board flashed with the firmware, on a serial port (framed bytes only).
//! - `reaper`: the shell that kills a device process once tessera is gone.
//! - `handle`: what keeps a device running ([`DeviceHandle`]) and what it is doing
//!   ([`Liveness`]).
//! - `firmware`: what the QEMU placement needs ([`check_firmware`]).
//! - `relay` (feature `mpi`): a device serving a byte link this process does not read (a
//!   worker whose controller is on another rank).

mod firmware;
mod handle;
mod pool;
mod process;
mod qemu;
mod reaper;
#[cfg(feature = "mpi")]
mod relay;
mod serial;
mod thread;

pub(super) use firmware::QEMUS;
pub use firmware::{check_firmware, FirmwareError};
pub(super) use handle::DeviceHandle;
pub use handle::Liveness;
#[cfg(test)]
pub(super) use pool::pool_on;
pub(super) use pool::{in_process_pool, Mailbox, Pool};
pub(super) use process::{child_process, device_processes};
pub(super) use qemu::qemu;
#[cfg(feature = "mpi")]
pub(crate) use relay::{child_on, qemu_on, serial_on, thread_on, Served};
pub(super) use serial::serial;
pub use serial::{check_ports, port_of, wire_deadline, SerialError, BAUD, DEFAULT_BAUD};
pub(super) use thread::in_process;

use std::io::{Read, Write};
use std::sync::mpsc::Receiver;

use super::queue::Message;
use super::shared::{SharedMemory, Window};

/// A new link to a device, by kind: each case holds exactly what its kind of link has, so
/// what a channel can do on it — whole messages or framed bytes, bulk bytes beside a
/// message, memory the host maps — follows from the case, and a new placement is one new
/// case here (and its line in [`Link::into_parts`]).
pub(super) enum Link {
    /// A device thread of the pool: whole messages (and bulk bytes) on queues; its memory
    /// mapped by the host where the pool could share it.
    Pooled {
        to: Mailbox,
        from: Incoming,
        memory: Option<SharedMemory>,
        handle: DeviceHandle,
    },
    /// Frames both ways and nothing else: a device thread behind injected faults, or a
    /// board on a serial port.
    Framed {
        to: Box<dyn Write + Send>,
        from: Box<dyn Read + Send>,
        handle: DeviceHandle,
    },
    /// A device another rank serves: frames both ways, arriving in the chunks the post
    /// office delivers (`transport::tunnel`), which the channel decodes in place.
    #[cfg(feature = "mpi")]
    Remote {
        to: Box<dyn Write + Send>,
        from: Receiver<Vec<u8>>,
        handle: DeviceHandle,
    },
    /// A child process serving one device: frames on its stdin, its stdout read in place;
    /// bulk bytes through a window, and its memory, both mapped by the host.
    Child {
        stdin: Box<dyn Write + Send>,
        stdout: std::os::fd::OwnedFd,
        window: SharedMemory,
        memory: SharedMemory,
        handle: DeviceHandle,
    },
    /// A device of a process share: messages on rings in shared memory (the process's
    /// stdout, whose end says it has gone); bulk bytes through a window, and its memory,
    /// both mapped by the host.
    Share {
        to: crate::transport::ring::RingSender,
        from: crate::transport::ring::RingReceiver,
        stdout: std::os::fd::OwnedFd,
        window: SharedMemory,
        memory: SharedMemory,
        handle: DeviceHandle,
    },
    /// The firmware under QEMU: frames on its UART socket; bulk bytes through the file it
    /// reads by semihosting; nothing the host can map.
    Qemu {
        to: Box<dyn Write + Send>,
        from: Box<dyn Read + Send>,
        bulk: Window,
        handle: DeviceHandle,
    },
}

/// What a channel keeps of a link: where messages come from and go, the window, the
/// memory, and what keeps the device running.
pub(super) struct Parts {
    pub incoming: Incoming,
    pub outgoing: Outgoing,
    pub handle: DeviceHandle,
    pub window: Option<Window>,
    pub memory: Option<SharedMemory>,
}

impl Link {
    /// The link's parts, as a channel keeps them.
    pub(super) fn into_parts(self) -> Parts {
        let parts = |incoming, outgoing, handle, window, memory| Parts {
            incoming,
            outgoing,
            handle,
            window,
            memory,
        };
        match self {
            Self::Pooled {
                to,
                from,
                memory,
                handle,
            } => parts(from, Outgoing::Messages(to), handle, None, memory),
            Self::Framed { to, from, handle } => parts(
                Incoming::Bytes(from),
                Outgoing::Bytes(to),
                handle,
                None,
                None,
            ),
            #[cfg(feature = "mpi")]
            Self::Remote { to, from, handle } => parts(
                Incoming::Chunks(from),
                Outgoing::Bytes(to),
                handle,
                None,
                None,
            ),
            Self::Child {
                stdin,
                stdout,
                window,
                memory,
                handle,
            } => parts(
                Incoming::Pipe(stdout),
                Outgoing::Bytes(stdin),
                handle,
                Some(Window::Shared(window)),
                Some(memory),
            ),
            Self::Share {
                to,
                from,
                stdout,
                window,
                memory,
                handle,
            } => parts(
                Incoming::Ring(from, stdout),
                Outgoing::Ring(to),
                handle,
                Some(Window::Shared(window)),
                Some(memory),
            ),
            Self::Qemu {
                to,
                from,
                bulk,
                handle,
            } => parts(
                Incoming::Bytes(from),
                Outgoing::Bytes(to),
                handle,
                Some(bulk),
                None,
            ),
        }
    }
}

/// Where the device's messages come from.
pub(super) enum Incoming {
    /// A byte link: frames, decoded by a reader thread.
    Bytes(Box<dyn Read + Send>),
    /// Whole messages (and bulk bytes) from a device thread.
    Messages(Receiver<Message>),
    /// Whole messages from a pooled device, the pool's ready devices served while waiting
    /// for them (the host's thread being one of the pool's servers).
    Served(Receiver<Message>, std::sync::Arc<Pool>),
    /// A child process's stdout: frames, read in place by the channel.
    Pipe(std::os::fd::OwnedFd),
    /// A message ring from a device of a process share, and that process's stdout, whose
    /// end says the process has gone.
    Ring(crate::transport::ring::RingReceiver, std::os::fd::OwnedFd),
    /// A byte link's chunks on a queue another thread feeds (a link between ranks):
    /// frames, decoded by the channel in place.
    #[cfg(feature = "mpi")]
    Chunks(Receiver<Vec<u8>>),
}

/// Where messages to the device go.
pub(super) enum Outgoing {
    /// A byte link: frames.
    Bytes(Box<dyn Write + Send>),
    /// Whole messages (and bulk bytes) to a device thread.
    Messages(Mailbox),
    /// Whole messages on a ring to a device of a process share (bulk bytes through its
    /// window).
    Ring(crate::transport::ring::RingSender),
}
