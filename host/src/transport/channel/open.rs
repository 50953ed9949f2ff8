//! Opening a channel on each placement: the link started (or a serial port opened), its
//! frames decoded by a thread of their own where it is a byte link read through `Read`
//! (in place where its bytes come in chunks on a queue: a link between ranks), and the
//! hello that checks the protocol version and the replica before anything else is sent.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tessera_core::wire::endpoint::Hello;
use tessera_core::wire::{max_frame_len, ErrorCode, Limits, RequestKind, PROTOCOL_VERSION};

use super::super::fault::FaultConfig;
use super::super::frames::Frames;
use super::super::reader::{read_frames, MAX_FRAME};
use super::super::spawn::{self, DeviceHandle, Incoming, Link};
use super::located::Located;
use super::spares::Spares;
use super::{Channel, Traffic, TransportError, BUSY_DEADLINE, DEFAULT_DEADLINE, EXIT_GRACE};
use crate::transport::spin::SPIN;

impl Channel {
    /// A device in a thread of this process, `memory` bytes of arena, optionally with
    /// faults injected in both directions.
    ///
    /// ```
    /// use tessera_core::wire::endpoint::{Command, GetSeed};
    /// use tessera_core::wire::{ProgramRequest, Request};
    /// use tessera_host::transport::Channel;
    ///
    /// // Replica 2 in a thread, 64 KiB of arena, no faults; the hello is done when it returns.
    /// let mut channel = Channel::in_process(2, 64 << 10, None)?;
    /// assert_eq!((channel.replica(), channel.limits().memory), (2, 64 << 10));
    /// // Typed endpoints: a command is answered `Done`, `GetSeed` with the seed.
    /// let set = Request::Program(ProgramRequest::SetSeed { seed: 7 });
    /// channel.call(&Command::new(set).ok_or("not a command")?)?;
    /// assert_eq!(channel.call(&GetSeed)?.get(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_process(
        replica: u32,
        memory: usize,
        faults: Option<FaultConfig>,
    ) -> Result<Self, TransportError> {
        Self::open(spawn::in_process(replica, memory, faults)?, replica, 1)
    }

    /// One device per replica of `replicas` in threads of this process, `memory` bytes of
    /// arena each, served by at most as many threads as the machine has cores (see
    /// [`spawn::pool`](super::super::spawn)) — with `host_serves`, the calling thread being
    /// one of them; channels in replica order, each ready once its device has answered its
    /// hello.
    pub(crate) fn in_process_all(
        replicas: std::ops::Range<u32>,
        memory: usize,
        host_serves: bool,
    ) -> Result<Vec<Self>, TransportError> {
        let devices: Vec<_> = replicas.map(|r| r..r + 1).collect();
        Self::in_process_lanes(&devices, memory, host_serves)
    }

    /// Like [`in_process_all`](Self::in_process_all), one device for each range of
    /// `devices`, running its replicas as lanes ([`lanes`](tessera_core::program::lanes)),
    /// `memory` bytes of arena per lane.
    pub(crate) fn in_process_lanes(
        devices: &[std::ops::Range<u32>],
        memory: usize,
        host_serves: bool,
    ) -> Result<Vec<Self>, TransportError> {
        let (firsts, memory) = laned(devices, memory);
        spawn::in_process_pool(&firsts, memory, host_serves)?
            .into_iter()
            .zip(devices)
            .map(|(link, lanes)| Self::open_lanes(link, lanes))
            .collect()
    }

    /// [`in_process_all`](Self::in_process_all) as if the machine had `cores` cores.
    #[cfg(test)]
    pub(crate) fn in_process_on(
        replicas: std::ops::Range<u32>,
        memory: usize,
        host_serves: bool,
        cores: usize,
    ) -> Result<Vec<Self>, TransportError> {
        let firsts: Vec<u32> = replicas.clone().collect();
        spawn::pool_on(&firsts, memory, host_serves, cores)?
            .into_iter()
            .zip(replicas)
            .map(|(link, replica)| Self::open(link, replica, 1))
            .collect()
    }

    /// A device in a child process (`tessera device`, `exe` being the `tessera` binary),
    /// speaking over its stdio.
    pub fn child_process(exe: &Path, replica: u32, memory: usize) -> Result<Self, TransportError> {
        Self::open(spawn::child_process(exe, replica, memory)?, replica, 1)
    }

    /// One device for each range of `devices` for a training runtime, running its replicas
    /// as lanes ([`lanes`](tessera_core::program::lanes)), `memory` bytes per lane, in child
    /// processes that each serve a share of them (`tessera devices`, `exe` being the
    /// `tessera` binary; how many: `spawn::process`); channels in the order of `devices`,
    /// each ready once its device has answered its hello.
    pub fn device_processes(
        exe: &Path,
        devices: &[std::ops::Range<u32>],
        memory: usize,
    ) -> Result<Vec<Self>, TransportError> {
        let (firsts, memory) = laned(devices, memory);
        spawn::device_processes(exe, &firsts, memory)?
            .into_iter()
            .zip(devices)
            .map(|(link, lanes)| Self::open_lanes(link, lanes))
            .collect()
    }

    /// The bare-metal firmware (`firmware`, an ELF for mps2-an386 or mps2-an385 under
    /// `qemu-system-arm`, or for RISC-V's virt under `qemu-system-riscv32`), its UART0 on a
    /// Unix socket. The firmware's defmt logs go through
    /// `defmt-print` to stderr. Dropping the channel kills QEMU. The firmware and the tools
    /// are checked before anything starts.
    pub fn qemu(firmware: &Path, replica: u32) -> Result<Self, TransportError> {
        spawn::check_firmware(firmware)?;
        Self::qemu_checked(firmware, replica)
    }

    /// Like [`Channel::qemu`], for a caller that has checked the firmware and the tools
    /// already (once for all its devices: `placement::open`).
    pub(crate) fn qemu_checked(firmware: &Path, replica: u32) -> Result<Self, TransportError> {
        Self::open(spawn::qemu(firmware, replica)?, replica, 1)
    }

    /// A board flashed with the firmware on serial port `port` (a board's `/dev/ttyACM0`, a
    /// pseudo-terminal), as replica `replica`: the port opened in raw mode at `baud`, then
    /// the QEMU placement's framed link without its bulk file (every byte in framed
    /// chunks). The port is checked first; a hello that fails names it. Dropping the
    /// channel closes the port. See `spawn::serial`'s module doc for what a board needs.
    pub fn serial(port: &Path, baud: u32, replica: u32) -> Result<Self, TransportError> {
        spawn::check_ports(&[port.to_path_buf()], baud)?;
        Self::serial_checked(port, baud, replica)
    }

    /// Like [`Channel::serial`], for a caller that has checked every port already (once for
    /// all its devices: `placement::open`).
    pub(crate) fn serial_checked(
        port: &Path,
        baud: u32,
        replica: u32,
    ) -> Result<Self, TransportError> {
        let mut channel = Self::open(spawn::serial(port, baud)?, replica, 1).map_err(|e| {
            spawn::SerialError::Hello {
                port: port.to_path_buf(),
                replica,
                source: Box::new(e),
            }
        })?;
        let deadline = spawn::wire_deadline(baud, &channel.limits);
        channel.set_deadline(deadline);
        Ok(channel)
    }

    /// Worker `worker`, served by another rank of an MPI job (which started it), over a
    /// link between the ranks: a byte link like a socket's, so every rule of the request
    /// protocol holds end to end.
    /// `liveness` asks the serving rank what the device is doing while it is silent.
    #[cfg(feature = "mpi")]
    pub(crate) fn remote(
        worker: u32,
        reader: super::super::tunnel::LinkReader,
        writer: super::super::tunnel::LinkWriter,
        liveness: Box<dyn Fn() -> spawn::Liveness + Send>,
    ) -> Result<Self, TransportError> {
        let link = Link::Remote {
            to: Box::new(writer),
            from: reader.into_chunks(),
            handle: DeviceHandle::Remote(liveness),
        };
        Self::open(link, worker, 1)
    }

    /// A channel to the device of replicas `lanes` over `link` (see [`Channel::open`]).
    fn open_lanes(link: Link, lanes: &std::ops::Range<u32>) -> Result<Self, TransportError> {
        // At most MAX_REPLICAS replicas: their count fits 16 bits.
        let count = u16::try_from(lanes.len()).unwrap_or(u16::MAX);
        Self::open(link, lanes.start, count)
    }

    /// A channel to replica `replica` and the `lanes − 1` after it over `link`, ready once
    /// the device has answered its hello.
    fn open(link: Link, replica: u32, lanes: u16) -> Result<Self, TransportError> {
        let spawn::Parts {
            incoming,
            outgoing: writer,
            handle,
            window,
            memory,
        } = link.into_parts();
        let frames = messages(incoming, replica)?;
        let mut channel = Self {
            writer,
            frames,
            next_seq: 1,
            deadline: DEFAULT_DEADLINE,
            busy_deadline: BUSY_DEADLINE,
            limits: Limits {
                memory: 0,
                max_frame: 256,
                replica,
                lanes,
                window: 1,
            },
            scratch: vec![0; MAX_FRAME],
            out: vec![0; 1 + max_frame_len(MAX_FRAME)],
            spares: Spares::default(),
            in_flight: VecDeque::new(),
            held: None,
            quiet_since: None,
            arrived: VecDeque::new(),
            retries: 0,
            window,
            memory,
            located: Located::default(),
            traffic: Traffic::default(),
            spin: match handle {
                DeviceHandle::Qemu { .. } | DeviceHandle::Serial(_) => Duration::ZERO,
                _ => SPIN,
            },
            handle,
        };
        channel.hello(replica, lanes)?;
        Ok(channel)
    }

    /// The hello: checks the device's protocol version, replica and lanes, and takes the
    /// limits it announces.
    fn hello(&mut self, replica: u32, lanes: u16) -> Result<(), TransportError> {
        let hello = Hello {
            version: PROTOCOL_VERSION,
            replica,
            lanes,
        };
        let (version, limits) = match self.call(&hello) {
            Ok(reply) => reply.get(),
            // A device process that ended before its hello says how it ended.
            Err(TransportError::Closed { .. }) => {
                return Err(match self.handle.exit_status(EXIT_GRACE) {
                    Some(status) => TransportError::Exited {
                        replica,
                        program: self.handle.program(),
                        status,
                    },
                    None => TransportError::Closed { replica },
                })
            }
            Err(TransportError::Device {
                code: ErrorCode::Version { device },
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
        if version != PROTOCOL_VERSION || limits.replica != replica || limits.lanes != lanes {
            return Err(TransportError::UnexpectedReply {
                replica,
                request: RequestKind::Hello,
                reply: format!("version {version}, {limits:?}"),
            });
        }
        self.limits = Limits {
            window: limits.window.max(1),
            ..limits
        };
        tracing::debug!(replica, ?limits, "device ready");
        Ok(())
    }
}

/// The first replica of each device of `devices`, and the memory of the device of the most
/// lanes at `memory` bytes per lane (every device gets as much: one pool of one size; a
/// runtime's devices run as many lanes each: `placement::lanes_per_device`).
fn laned(devices: &[std::ops::Range<u32>], memory: usize) -> (Vec<u32>, usize) {
    let most = devices.iter().map(|d| d.len()).max().unwrap_or(1).max(1);
    let firsts = devices.iter().map(|d| d.start).collect();
    (firsts, memory.saturating_mul(most))
}

/// The messages from device `replica`'s link: a byte link gets a thread that decodes its
/// frames; a child's pipe is read in place, a process share's ring looked at in place.
fn messages(incoming: Incoming, replica: u32) -> Result<Frames, TransportError> {
    Ok(match incoming {
        Incoming::Bytes(reader) => {
            let (tx, frames) = mpsc::channel();
            thread::Builder::new()
                .name(format!("tessera-link-{replica}"))
                .spawn(move || read_frames(reader, tx, replica))?;
            Frames::Queue(frames)
        }
        Incoming::Messages(frames) => Frames::Queue(frames),
        Incoming::Served(frames, pool) => Frames::Served(frames, pool),
        Incoming::Pipe(pipe) => Frames::pipe(pipe, replica)?,
        Incoming::Ring(ring, process) => Frames::ring(ring, process, replica)?,
        #[cfg(feature = "mpi")]
        Incoming::Chunks(chunks) => Frames::chunks(chunks, replica),
    })
}
