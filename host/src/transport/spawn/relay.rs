//! A device served for a byte link whose other end is not a channel of this process (a
//! worker of a session whose controller is on another MPI rank): the link's bytes go to
//! the device and the device's bytes go back, unread here.
//!
//! - On threads, the device reads and writes the link itself (a device thread on a byte
//!   link, as with faults injected).
//! - In a child process, under QEMU or on a serial port, two threads relay the bytes: the link to the
//!   device's input, the device's output to the link.
//!
//! The host maps the device's memory where the placement shares it (threads and child
//! processes: [`Served::memory`]), for the rank's own work on it while the device is idle.
//! [`Served::wait`] is called once the link has ended.
//!
//! The device stops when the link ends: a device thread's loop ends with its input; a
//! device process is stopped (QEMU would serve its socket forever). The end of its output
//! ends the link the other way. [`Served::wait`] returns once all of that is done.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;
use std::thread::{self, JoinHandle};

use std::sync::mpsc::Receiver;

use tessera_firmware_sim::Memory;

use super::{DeviceHandle, Incoming, Link, Liveness, Outgoing};
use crate::transport::board::BusyLine;
use crate::transport::device::run_device_on_link;
use crate::transport::io_link::IoLink;
use crate::transport::shared::SharedMemory;
use crate::transport::TransportError;

/// A device serving a link, and what keeps it running.
pub(crate) struct Served {
    /// The device thread, or the relay of the link's bytes to the device.
    inward: JoinHandle<()>,
    /// The relay of the device's bytes to the link (a device process only).
    outward: Option<JoinHandle<()>>,
    /// The device process.
    handle: Option<DeviceHandle>,
    /// The host's mapping of the device's memory, where the placement shares it.
    memory: Option<SharedMemory>,
    /// A device thread's busy line.
    busy: Option<BusyLine>,
}

impl Served {
    /// What the device is doing, as this host sees it (its controller, on another rank,
    /// asks while the device is silent).
    pub(crate) fn liveness(&self) -> Liveness {
        match (&self.handle, &self.busy) {
            (Some(handle), _) => handle.liveness(),
            (None, _) if self.inward.is_finished() => Liveness::Ended,
            (None, Some(busy)) if busy.is_high() => Liveness::Busy,
            (None, _) => Liveness::Idle,
        }
    }

    /// The host's mapping of the device's memory (threads and child processes; `None`
    /// under QEMU). Read and write it only while the device is idle (its controller has
    /// every reply and sends nothing meanwhile).
    pub(crate) fn memory(&mut self) -> Option<&mut SharedMemory> {
        self.memory.as_mut()
    }

    /// Stops the device once its link has ended (its controller has dropped it): a device
    /// process is stopped first (QEMU never stops by itself, and a stopped or stuck device
    /// would keep a relay blocked on its input), then every thread is waited for; a device
    /// thread ends with its link.
    pub(crate) fn wait(mut self) {
        drop(self.handle.take());
        let _ = self.inward.join();
        if let Some(outward) = self.outward.take() {
            let _ = outward.join();
        }
    }
}

/// Device `replica` in a thread of this process, `memory` bytes of arena, reading the
/// link's `chunks` as they come and writing to `writer`.
pub(crate) fn thread_on(
    replica: u32,
    memory: usize,
    chunks: Receiver<Vec<u8>>,
    writer: impl Write + Send + 'static,
) -> Result<Served, TransportError> {
    let host = match u32::try_from(memory) {
        Ok(1..) => Some(SharedMemory::create(memory)?),
        _ => None,
    };
    let device = host.as_ref().map(SharedMemory::map_again).transpose()?;
    let busy = BusyLine::default();
    let mut line = busy.clone();
    let thread = thread::Builder::new()
        .name(format!("tessera-device-{replica}"))
        .spawn(move || {
            // The link's chunks go straight to the device: no reader thread between.
            let link = IoLink::on_chunks(chunks, writer);
            let (mut device, mut own) = (device, Vec::new());
            let arena: &mut (dyn Memory + Send) = match device {
                Some(ref mut shared) => shared,
                None => {
                    own.resize(memory, 0u8);
                    &mut own
                }
            };
            let served = run_device_on_link(replica, arena, link, &mut line);
            if let Err(e) = served {
                tracing::warn!(replica, error = %e, "device thread stopped");
            }
        })?;
    Ok(Served {
        inward: thread,
        outward: None,
        handle: None,
        memory: host,
        busy: Some(busy),
    })
}

/// The device of `link` (a child process or QEMU) relayed to and from `reader` and
/// `writer`.
fn relayed(
    link: Link,
    replica: u32,
    reader: impl Read + Send + 'static,
    writer: impl Write + Send + 'static,
) -> Result<Served, TransportError> {
    let super::Parts {
        incoming,
        outgoing,
        handle,
        memory,
        ..
    } = link.into_parts();
    let from_device: Box<dyn Read + Send> = match incoming {
        Incoming::Bytes(reader) => reader,
        Incoming::Pipe(fd) => Box::new(File::from(fd)),
        Incoming::Messages(_) | Incoming::Served(..) | Incoming::Ring(..) => {
            return Err(not_bytes(replica))
        }
        #[cfg(feature = "mpi")]
        Incoming::Chunks(_) => return Err(not_bytes(replica)),
    };
    let Outgoing::Bytes(to_device) = outgoing else {
        return Err(not_bytes(replica));
    };
    let inward = spawn_copy(format!("tessera-relay-in-{replica}"), reader, to_device)?;
    let outward = spawn_copy(format!("tessera-relay-out-{replica}"), from_device, writer)?;
    Ok(Served {
        inward,
        outward: Some(outward),
        handle: Some(handle),
        memory,
        busy: None,
    })
}

/// A thread copying `from` to `to` until `from` ends (or `to` fails); `to` is dropped
/// then, which ends what reads it.
fn spawn_copy(
    name: String,
    mut from: impl Read + Send + 'static,
    mut to: impl Write + Send + 'static,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new().name(name).spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).and_then(|()| to.flush()).is_err() {
                        break;
                    }
                }
            }
        }
    })
}

fn not_bytes(replica: u32) -> TransportError {
    TransportError::Io(io::Error::other(format!(
        "replica {replica}: only a byte link can be relayed"
    )))
}

/// Device `replica` in a child process (`exe device`) relayed to and from the link.
pub(crate) fn child_on(
    exe: &Path,
    replica: u32,
    memory: usize,
    reader: impl Read + Send + 'static,
    writer: impl Write + Send + 'static,
) -> Result<Served, TransportError> {
    relayed(
        super::child_process(exe, replica, memory)?,
        replica,
        reader,
        writer,
    )
}

/// Device `replica` as the firmware under QEMU relayed to and from the link.
pub(crate) fn qemu_on(
    firmware: &Path,
    replica: u32,
    reader: impl Read + Send + 'static,
    writer: impl Write + Send + 'static,
) -> Result<Served, TransportError> {
    relayed(super::qemu(firmware, replica)?, replica, reader, writer)
}

/// The board on serial port `port` (at `baud`) relayed to and from the link, as device
/// `replica`.
pub(crate) fn serial_on(
    port: &Path,
    baud: u32,
    replica: u32,
    reader: impl Read + Send + 'static,
    writer: impl Write + Send + 'static,
) -> Result<Served, TransportError> {
    relayed(super::serial(port, baud)?, replica, reader, writer)
}
