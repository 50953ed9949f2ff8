//! Starting a device in each placement, and stopping it: a thread of this process on a
//! socket pair, a child process (`tessera device`) on its stdio, or the bare-metal firmware
//! under `qemu-system-arm` with UART0 on a Unix socket and its defmt logs decoded by
//! `defmt-print`.
//!
//! Every device process has a reaper: a shell that kills it once this process is gone,
//! however it ended (SIGKILL included). A device process would end by itself when its link
//! closes — but not while it is stopped (SIGSTOP, a debugger), and QEMU serves its socket
//! forever. The reaper does not depend on which thread started the device, as a
//! parent-death signal would (Linux sends that when the spawning *thread* ends).
//!
//! The QEMU placement checks everything it needs before it starts anything: the firmware
//! exists and is a 32-bit little-endian ARM ELF, and `qemu-system-arm` and `defmt-print`
//! are on the `PATH`. Every child process is adopted by [`children`] so that dropping the
//! link, or a signal to tessera, stops it.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tessera_firmware_sim::std_link::{BusyLine, Message, Queue};

use super::children::{self, Adopted};
use super::device::{run_device_on_queue, run_device_watched};
use super::fault::{Delayed, FaultConfig, FaultInjector};
use super::shared::{SharedMemory, Window};
use super::TransportError;

/// The emulator the QEMU placement runs.
pub(super) const QEMU: &str = "qemu-system-arm";
/// The program that runs a device in a child process.
const DEVICE_PROCESS: &str = "tessera device";

/// How long QEMU's UART socket may take to appear.
const QEMU_START: Duration = Duration::from_secs(10);
/// How long the defmt decoder may take to print QEMU's last logs once QEMU is gone.
const DECODER_DRAIN: Duration = Duration::from_secs(1);

/// Both ends of a new link to a device, and what keeps the device running.
pub(super) struct Link {
    pub incoming: Incoming,
    pub outgoing: Outgoing,
    pub handle: DeviceHandle,
    /// The window bulk bytes pass through (child processes, QEMU).
    pub window: Option<Window>,
    /// The host's mapping of the device's memory (threads on a queue, child processes).
    pub memory: Option<SharedMemory>,
}

/// Held while a child process is started, so that the descriptor of a shared window, which
/// must be inherited by its own device process, is inherited by no other child tessera
/// starts meanwhile.
static SPAWNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn spawning() -> std::sync::MutexGuard<'static, ()> {
    SPAWNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Bytes of the bulk file of a QEMU device (its arena holds 3 MiB).
pub const QEMU_WINDOW_BYTES: usize = 2 << 20;
/// The bulk file's name in QEMU's working folder (the firmware opens it by this name).
const QEMU_BULK_FILE: &str = "bulk.bin";

/// Bytes of the shared window of a child-process device: the largest array that moves in
/// one bulk request (the session sends larger ones in framed chunks). Pages are only
/// touched when used.
pub const WINDOW_BYTES: usize = 80 << 20;

/// Where the device's messages come from.
pub(super) enum Incoming {
    /// A byte link: frames, decoded by a reader thread.
    Bytes(Box<dyn Read + Send>),
    /// Whole messages (and bulk bytes) from a device thread.
    Messages(Receiver<Message>),
}

/// Where messages to the device go.
pub(super) enum Outgoing {
    /// A byte link: frames.
    Bytes(Box<dyn Write + Send>),
    /// Whole messages (and bulk bytes) to a device thread.
    Messages(Sender<Message>),
}

/// What keeps a device running; dropping it stops the device.
pub(super) enum DeviceHandle {
    /// The device thread, and our socket end if it has one: shutting it down ends the
    /// device's loop even though the reader thread holds a duplicate of it (a queue ends
    /// when the channel drops its sender).
    Thread(Option<JoinHandle<()>>, Option<UnixStream>, BusyLine),
    /// A `tessera device` process and its reaper (and the end of its stdin we hold).
    Child {
        child: Option<Adopted>,
        reaper: Option<(Adopted, ChildStdin)>,
    },
    /// The emulator, the defmt decoder reading its stdout, their reaper (and the end of
    /// its stdin we hold), and the folder of the UART socket.
    Qemu {
        qemu: Option<Adopted>,
        decoder: Option<Adopted>,
        reaper: Option<(Adopted, ChildStdin)>,
        dir: PathBuf,
    },
}

impl DeviceHandle {
    /// The program running the device.
    pub fn program(&self) -> &'static str {
        match self {
            Self::Thread(..) => "thread",
            Self::Child { .. } => DEVICE_PROCESS,
            Self::Qemu { .. } => QEMU,
        }
    }

    /// What the device is doing while it does not answer (see [`Liveness`]).
    pub fn liveness(&self) -> Liveness {
        match self {
            Self::Thread(thread, _, busy) => match thread {
                Some(thread) if thread.is_finished() => Liveness::Ended,
                _ if busy.is_high() => Liveness::Busy,
                _ => Liveness::Idle,
            },
            Self::Child {
                child: Some(child), ..
            } => process_liveness(child.pid()),
            // An emulator is always on a core, working or not: only its end and a stop
            // tell anything.
            Self::Qemu {
                qemu: Some(qemu), ..
            } => match process_liveness(qemu.pid()) {
                Liveness::Busy => Liveness::Unknown,
                other => other,
            },
            _ => Liveness::Ended,
        }
    }

    /// How the device's process ended, if it has (waiting up to `limit` for it).
    pub fn exit_status(&self, limit: Duration) -> Option<ExitStatus> {
        match self {
            Self::Child {
                child: Some(child), ..
            }
            | Self::Qemu {
                qemu: Some(child), ..
            } => child.wait_timeout(limit).ok().flatten(),
            _ => None,
        }
    }
}

impl Drop for DeviceHandle {
    fn drop(&mut self) {
        match self {
            Self::Thread(handle, control, _) => {
                // Shutting the socket down (every duplicate of it) ends the device's loop.
                if let Some(control) = control {
                    let _ = control.shutdown(std::net::Shutdown::Both);
                }
                if let Some(handle) = handle.take() {
                    let _ = handle.join();
                }
            }
            // Dropping the adopted child kills and reaps it; the reaper goes first, so it
            // never kills a process id that was reused.
            Self::Child { child, reaper } => {
                drop(reaper.take());
                drop(child.take());
            }
            Self::Qemu {
                qemu,
                decoder,
                reaper,
                dir,
            } => {
                // The reaper goes first, so it never kills a process id that was reused.
                drop(reaper.take());
                drop(qemu.take());
                if let Some(decoder) = decoder.take() {
                    // It ends by itself once QEMU's stdout closes; give it a moment to
                    // print the last logs, then stop it anyway.
                    let _ = decoder.wait_timeout(DECODER_DRAIN);
                }
                let _ = fs::remove_dir_all(dir);
            }
        }
    }
}

/// What a device that does not answer is doing, as far as the host can see without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// It is running a request: a device thread's busy line is high, or a device process
    /// is on a core (its state is R: computing, where a device waiting for its link
    /// sleeps).
    Busy,
    /// It waits for its link: whatever it was sent did not reach it.
    Idle,
    /// Its process is stopped (SIGSTOP, a debugger): it will not answer until continued.
    Stopped,
    /// Its thread or process has ended.
    Ended,
    /// The host cannot tell (an emulator is on a core whether or not its firmware works).
    Unknown,
}

/// What process `pid` is doing, from its state in `/proc/PID/stat`.
fn process_liveness(pid: u32) -> Liveness {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Liveness::Ended;
    };
    // "pid (comm) S ...": the state follows the last ')' (the name may hold one).
    match stat
        .rsplit(')')
        .next()
        .map(str::trim_start)
        .and_then(|s| s.chars().next())
    {
        Some('R') => Liveness::Busy,
        Some('T' | 't') => Liveness::Stopped,
        Some('Z' | 'X' | 'x') | None => Liveness::Ended,
        Some(_) => Liveness::Idle,
    }
}

/// A device in a thread of this process, `memory` bytes of arena, optionally with faults
/// injected in both directions (latency on the host's side only).
pub(super) fn in_process(
    replica: u32,
    memory: usize,
    faults: Option<FaultConfig>,
) -> Result<Link, TransportError> {
    if faults.is_none() {
        return in_process_queue(replica, memory);
    }
    let (host_end, device_end) = UnixStream::pair()?;
    let device_reader = device_end.try_clone()?;
    let device_faults = faults.map(|f| FaultConfig {
        seed: f.seed ^ 0xD5,
        latency: Duration::ZERO,
        ..f
    });
    let busy = BusyLine::default();
    let mut line = busy.clone();
    let thread = thread::Builder::new()
        .name(format!("tessera-device-{replica}"))
        .spawn(move || {
            let writer: Box<dyn Write + Send> = match device_faults {
                Some(config) => Box::new(FaultInjector::new(device_end, config)),
                None => Box::new(device_end),
            };
            if let Err(e) = run_device_watched(replica, memory, device_reader, writer, &mut line) {
                tracing::warn!(replica, error = %e, "device thread stopped");
            }
        })?;
    let reader = host_end.try_clone()?;
    let control = host_end.try_clone()?;
    let writer: Box<dyn Write + Send> = match faults {
        Some(config) if config.latency > Duration::ZERO => Box::new(Delayed::new(
            FaultInjector::new(host_end, config),
            config.latency,
        )),
        Some(config) => Box::new(FaultInjector::new(host_end, config)),
        None => Box::new(host_end),
    };
    Ok(Link {
        incoming: Incoming::Bytes(Box::new(reader)),
        outgoing: Outgoing::Bytes(writer),
        handle: DeviceHandle::Thread(Some(thread), Some(control), busy),
        window: None,
        memory: None,
    })
}

/// A device thread on message queues: no framing, no socket. (Faults need bytes to damage:
/// with faults the device gets a socket instead.) Its memory is shared: the device maps it
/// as its arena, the host maps it again (see `shared`).
fn in_process_queue(replica: u32, memory: usize) -> Result<Link, TransportError> {
    let (to_device, device_in) = mpsc::channel();
    let (device_out, from_device) = mpsc::channel();
    // Shared when the device can name every offset in it on the wire (32 bits) and there is
    // a byte to map; otherwise the memory is the device's alone and the host copies.
    let (host_memory, mut device_memory) = match u32::try_from(memory) {
        Ok(1..) => {
            let host = SharedMemory::create(memory, false)?;
            let device = host.map_again()?;
            (Some(host), Some(device))
        }
        _ => (None, None),
    };
    let busy = BusyLine::default();
    let mut line = busy.clone();
    let thread = thread::Builder::new()
        .name(format!("tessera-device-{replica}"))
        .spawn(move || {
            let queue = Queue::new(device_in, device_out);
            let mut own = Vec::new();
            let arena = match device_memory.as_mut() {
                Some(shared) => shared.as_mut_slice(),
                None => {
                    own.resize(memory, 0u8);
                    &mut own[..]
                }
            };
            if let Err(e) = run_device_on_queue(replica, arena, queue, &mut line) {
                tracing::warn!(replica, error = %e, "device thread stopped");
            }
        })?;
    Ok(Link {
        incoming: Incoming::Messages(from_device),
        outgoing: Outgoing::Messages(to_device),
        // Dropping the channel's sender ends the device's loop.
        handle: DeviceHandle::Thread(Some(thread), None, busy),
        window: None,
        memory: host_memory,
    })
}

/// A device in a child process (`exe device`, `exe` being the `tessera` binary), speaking
/// over its stdio.
pub(super) fn child_process(
    exe: &Path,
    replica: u32,
    memory: usize,
) -> Result<Link, TransportError> {
    // The window's descriptor is inheritable until the child has it; no other child starts
    // meanwhile.
    let guard = spawning();
    let window = SharedMemory::create(WINDOW_BYTES, true)?;
    // The device's memory, shared so that the host reads and writes it in place.
    let shared = SharedMemory::create(memory, true)?;
    let spawned = Command::new(exe)
        .args(["device", "--replica", &replica.to_string()])
        .args(["--memory", &memory.to_string()])
        .args(["--memory-fd", &shared.fd().to_string()])
        .args(["--window-fd", &window.fd().to_string()])
        .args(["--window-bytes", &WINDOW_BYTES.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    window.seal_from_children()?;
    shared.seal_from_children()?;
    drop(guard);
    let mut child = spawned.map_err(|source| TransportError::Spawn {
        replica,
        program: exe.to_path_buf(),
        source,
    })?;
    let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
    let pid = child.id();
    let child = children::adopt(child, DEVICE_PROCESS);
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        return Err(io::Error::other("the child process has no stdio pipes").into());
    };
    // Should the reaper not start, dropping `child` stops the device.
    let reaper = reaper(replica, &[pid])?;
    Ok(Link {
        incoming: Incoming::Bytes(Box::new(stdout)),
        outgoing: Outgoing::Bytes(Box::new(stdin)),
        handle: DeviceHandle::Child {
            child: Some(child),
            reaper: Some(reaper),
        },
        window: Some(Window::Shared(window)),
        memory: Some(shared),
    })
}

/// The firmware ELF `firmware` under `qemu-system-arm` (mps2-an385), its UART0 on a Unix
/// socket, its defmt logs through `defmt-print` to stderr.
/// The firmware and the tools are the caller's to check ([`check_firmware`]), once.
pub(super) fn qemu(firmware: &Path, replica: u32) -> Result<Link, TransportError> {
    // QEMU runs in its own folder: name the firmware by its full path.
    let firmware = &fs::canonicalize(firmware).map_err(|source| FirmwareError::Unreadable {
        path: firmware.to_path_buf(),
        source,
    })?;
    static LAUNCHES: AtomicU32 = AtomicU32::new(0);
    let launch = LAUNCHES.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tessera-qemu-{}-{launch}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let socket = dir.join("uart0.sock");
    let chardev = format!(
        "socket,id=uart0,path={},server=on,wait=off",
        socket.display()
    );
    // The bulk file, in the folder QEMU runs in (semihosting paths are relative to it).
    let bulk = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join(QEMU_BULK_FILE))?;
    bulk.set_len(QEMU_WINDOW_BYTES as u64)?;
    // QEMU, its decoder and their reaper start together, while no window is inheritable.
    let guard = spawning();
    let mut qemu = Command::new(QEMU)
        .current_dir(&dir)
        .args(["-machine", "mps2-an385", "-cpu", "cortex-m3"])
        .args(["-display", "none", "-monitor", "none"])
        .args(["-semihosting-config", "enable=on,target=native"])
        .args(["-chardev", &chardev, "-serial", "chardev:uart0", "-kernel"])
        .arg(firmware)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| TransportError::Spawn {
            replica,
            program: QEMU.into(),
            source,
        })?;
    let logs = qemu.stdout.take();
    let qemu = children::adopt(qemu, QEMU);
    let decoder = match logs {
        Some(logs) => Some(
            Command::new("defmt-print")
                .arg("-e")
                .arg(firmware)
                .stdin(logs)
                .stdout(Stdio::from(io::stderr()))
                .spawn()
                .map_err(|source| TransportError::Spawn {
                    replica,
                    program: "defmt-print".into(),
                    source,
                })?,
        ),
        None => None,
    }
    .map(|decoder| children::adopt(decoder, "defmt-print"));
    let mut pids = vec![qemu.pid()];
    pids.extend(decoder.as_ref().map(Adopted::pid));
    let reaper = reaper(replica, &pids);
    drop(guard);
    // From here on, an early return stops QEMU through the handle's drop.
    let handle = DeviceHandle::Qemu {
        qemu: Some(qemu),
        decoder,
        reaper: Some(reaper?),
        dir,
    };
    let stream = connect_when_ready(&socket, &handle, replica)?;
    let reader = stream.try_clone()?;
    Ok(Link {
        incoming: Incoming::Bytes(Box::new(reader)),
        outgoing: Outgoing::Bytes(Box::new(stream)),
        handle,
        window: Some(Window::File {
            file: bulk,
            len: QEMU_WINDOW_BYTES,
        }),
        // The firmware's memory is the emulated board's: the host cannot map it.
        memory: None,
    })
}

/// A shell that waits for its stdin to close — which happens when this process ends, however
/// it ends, even by SIGKILL — and then kills `pids` (SIGKILL ends a stopped process too).
/// Its stdin's other end is returned, to be held until the processes are stopped.
fn reaper(replica: u32, pids: &[u32]) -> Result<(Adopted, ChildStdin), TransportError> {
    let mut child = Command::new("sh")
        .args([
            "-c",
            "read _; kill -KILL \"$@\" 2>/dev/null",
            "tessera-reaper",
        ])
        .args(pids.iter().map(u32::to_string))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| TransportError::Spawn {
            replica,
            program: "sh".into(),
            source,
        })?;
    let stdin = child.stdin.take();
    let child = children::adopt(child, "tessera-reaper");
    match stdin {
        Some(stdin) => Ok((child, stdin)),
        None => Err(io::Error::other("the reaper has no stdin pipe").into()),
    }
}

/// Connects to QEMU's UART socket, which appears a moment after QEMU starts.
fn connect_when_ready(
    socket: &Path,
    handle: &DeviceHandle,
    replica: u32,
) -> Result<UnixStream, TransportError> {
    let start = Instant::now();
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => return Ok(stream),
            Err(e) if start.elapsed() > QEMU_START => return Err(e.into()),
            Err(_) => {
                if let Some(status) = handle.exit_status(Duration::ZERO) {
                    return Err(TransportError::Exited {
                        replica,
                        program: QEMU,
                        status,
                    });
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// What is wrong with the firmware or the tools the QEMU placement needs.
#[derive(Debug)]
pub enum FirmwareError {
    /// The firmware file cannot be read.
    Unreadable {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file is not a 32-bit little-endian ARM ELF executable.
    NotArmElf {
        /// The path given.
        path: PathBuf,
    },
    /// A program the placement runs is not on the `PATH`.
    MissingTool {
        /// Its name.
        tool: &'static str,
        /// How to get it.
        install: &'static str,
    },
}

/// How to build the firmware, for error messages.
const BUILD_FIRMWARE: &str =
    "build it with `cargo build -p tessera-firmware-sim --target thumbv7m-none-eabi --features firmware --profile firmware`";

impl fmt::Display for FirmwareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable { path, source } => write!(
                f,
                "cannot read the firmware {}: {source} ({BUILD_FIRMWARE})",
                path.display()
            ),
            Self::NotArmElf { path } => write!(
                f,
                "{} is not the device firmware: it is not a 32-bit ARM ELF executable ({BUILD_FIRMWARE})",
                path.display()
            ),
            Self::MissingTool { tool, install } => {
                write!(f, "the QEMU placement needs `{tool}` on the PATH ({install})")
            }
        }
    }
}

impl std::error::Error for FirmwareError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unreadable { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Checks, before anything starts, that `firmware` is a 32-bit little-endian ARM ELF
/// executable and that `qemu-system-arm` and `defmt-print` can be found.
pub fn check_firmware(firmware: &Path) -> Result<(), FirmwareError> {
    let unreadable = |source| FirmwareError::Unreadable {
        path: firmware.to_path_buf(),
        source,
    };
    let mut header = [0u8; 20];
    File::open(firmware)
        .and_then(|mut file| file.read_exact(&mut header))
        .map_err(unreadable)?;
    // e_ident: magic, ELFCLASS32 (1), ELFDATA2LSB (1); e_type ET_EXEC (2); e_machine EM_ARM (40).
    let elf = header[..4] == *b"\x7fELF"
        && header[4] == 1
        && header[5] == 1
        && u16::from_le_bytes([header[16], header[17]]) == 2
        && u16::from_le_bytes([header[18], header[19]]) == 40;
    if !elf {
        return Err(FirmwareError::NotArmElf {
            path: firmware.to_path_buf(),
        });
    }
    for (tool, install) in [
        (QEMU, "apt-get install qemu-system-arm"),
        ("defmt-print", "cargo install --locked defmt-print"),
    ] {
        if !on_path(tool) {
            return Err(FirmwareError::MissingTool { tool, install });
        }
    }
    Ok(())
}

/// True when an executable file named `tool` is in a directory of `PATH`.
fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            fs::metadata(dir.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}
