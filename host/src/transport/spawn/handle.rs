//! What keeps a device running, whatever its placement, and what the host can see of it
//! while it does not answer.

use std::fs;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{ChildStdin, ExitStatus};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::pool::Workers;
use super::process::DeviceProcess;
use super::serial::PortClosing;
use crate::transport::board::BusyLine;
use crate::transport::children::Adopted;

/// How long the defmt decoder may take to print QEMU's last logs once QEMU is gone.
const DECODER_DRAIN: Duration = Duration::from_secs(1);

/// What keeps a device running; dropping it stops the device.
pub(in crate::transport) enum DeviceHandle {
    /// The device thread, and our socket end if it has one: shutting it down ends the
    /// device's loop even though the reader thread holds a duplicate of it (a queue ends
    /// when the channel drops its sender).
    Thread(Option<JoinHandle<()>>, Option<UnixStream>, BusyLine),
    /// Device `i` of a pool ([`super::pool`]): served, with its siblings, by the pool's
    /// threads (and the host's own thread inside its waits, when it serves).
    Pooled(Arc<Workers>, usize),
    /// A device process (`tessera device`, or `tessera devices` with its siblings),
    /// stopped when its last device's handle drops.
    Child(Arc<DeviceProcess>),
    /// The emulator (and its name: `qemu-system-arm` or `qemu-system-riscv32`), the defmt
    /// decoder reading its stdout, their reaper (and the end of its stdin we hold), and the
    /// folder of the UART socket.
    Qemu {
        program: &'static str,
        qemu: Option<Adopted>,
        decoder: Option<Adopted>,
        reaper: Option<(Adopted, ChildStdin)>,
        dir: PathBuf,
    },
    /// A board on a serial port: closing it ends the link's reader and lets go of the port.
    Serial(PortClosing),
    /// A device on another rank of an MPI job, reached through a link between the ranks
    /// (`transport::tunnel`); that rank keeps it running.
    /// Asks the serving rank what the device is doing.
    #[cfg(feature = "mpi")]
    Remote(Box<dyn Fn() -> Liveness + Send>),
}

impl DeviceHandle {
    /// The program running the device.
    pub fn program(&self) -> &'static str {
        match self {
            Self::Thread(..) | Self::Pooled(..) => "thread",
            Self::Child(process) => process.program(),
            Self::Qemu { program, .. } => program,
            Self::Serial(_) => "a board on a serial port",
            #[cfg(feature = "mpi")]
            Self::Remote(_) => "another rank",
        }
    }

    /// Whether the device has ended, where this process sees that without asking it (a
    /// device thread's end, a pooled device's flag); `None` where only an answer tells (a
    /// process, an emulator, a board, another rank).
    pub fn ended_as_seen_here(&self) -> Option<bool> {
        match self {
            Self::Thread(..) | Self::Pooled(..) => Some(self.liveness() == Liveness::Ended),
            _ => None,
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
            Self::Pooled(workers, i) if workers.has_ended(*i) => Liveness::Ended,
            Self::Pooled(workers, i) if workers.is_busy(*i) => Liveness::Busy,
            Self::Pooled(..) => Liveness::Idle,
            Self::Child(process) => match process.child() {
                Some(child) => process_liveness(child.pid()),
                None => Liveness::Ended,
            },
            // An emulator is always on a core, working or not: only its end and a stop
            // tell anything.
            Self::Qemu {
                qemu: Some(qemu), ..
            } => match process_liveness(qemu.pid()) {
                Liveness::Busy => Liveness::Unknown,
                other => other,
            },
            // A board shows nothing but its answers.
            Self::Serial(_) => Liveness::Unknown,
            // Its rank sees it: asked.
            #[cfg(feature = "mpi")]
            Self::Remote(ask) => ask(),
            _ => Liveness::Ended,
        }
    }

    /// How the device's process ended, if it has (waiting up to `limit` for it).
    pub fn exit_status(&self, limit: Duration) -> Option<ExitStatus> {
        let child = match self {
            Self::Child(process) => process.child(),
            Self::Qemu { qemu, .. } => qemu.as_ref(),
            _ => None,
        };
        child.and_then(|child| child.wait_timeout(limit).ok().flatten())
    }
}

impl Drop for DeviceHandle {
    fn drop(&mut self) {
        match self {
            // The last device of the pool to go joins its threads (`Workers`' drop).
            Self::Pooled(..) => {}
            // Its rank stops it once the link ends (the channel's writer is dropped).
            #[cfg(feature = "mpi")]
            Self::Remote(_) => {}
            Self::Thread(handle, control, _) => {
                // Shutting the socket down (every duplicate of it) ends the device's loop.
                if let Some(control) = control {
                    let _ = control.shutdown(std::net::Shutdown::Both);
                }
                if let Some(handle) = handle.take() {
                    let _ = handle.join();
                }
            }
            // The last device of its process to go stops it (`DeviceProcess`'s drop).
            Self::Child(_) => {}
            Self::Serial(closing) => closing.close(),
            Self::Qemu {
                qemu,
                decoder,
                reaper,
                dir,
                ..
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// The host cannot tell (an emulator is on a core whether or not its firmware works; a
    /// board on a serial port shows nothing but its answers).
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
