//! Devices in child processes: one device per process (`tessera device`, speaking over its
//! stdio), or a share of a training runtime's devices per process (`tessera devices`, each
//! device on message rings in memory shared with the host); every device's memory and
//! bulk window shared with the host.
//!
//! # Rules
//!
//! - A session gets a process per device: its workers compute while the controller goes
//!   on, and each can fail (or be stopped) alone.
//! - A training runtime's host only waits while its devices compute, handling every
//!   message of every device: its `n` devices go into `k = min(n, max(cores − 1, 1))`
//!   processes, device `i` into process `i mod k`, so the host keeps a core of its own
//!   (the reason: `transport::process_share`). A device process's failure is every one of
//!   its devices' failure.
//! - A device process inherits its memories' descriptors and no other child does
//!   ([`SharedMemory::hand_to`]), whichever thread starts it. A `tessera devices` process's
//!   stdout carries nothing: its end tells each of its channels the process has gone
//!   (a killed process never closes its rings).

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Arc;

use super::reaper::reaper;
use super::{DeviceHandle, Link};
use crate::transport::children::{self, Adopted};
use crate::transport::ring::{self, RingReceiver, RingSender};
use crate::transport::shared::SharedMemory;
use crate::transport::TransportError;

/// The program that runs a device in a child process.
const DEVICE_PROCESS: &str = "tessera device";
/// The program that runs a share of a training runtime's devices in a child process.
const PROCESS_SHARE: &str = "tessera devices";

/// A device process and its reaper (and the end of its stdin we hold); dropping the last
/// handle to it stops it, the reaper first, so that it never kills a process id that was
/// reused.
#[derive(Debug)]
pub(in crate::transport) struct DeviceProcess {
    child: Option<Adopted>,
    reaper: Option<(Adopted, ChildStdin)>,
    /// The program it runs.
    program: &'static str,
}

impl DeviceProcess {
    /// The program it runs: `tessera device` or `tessera devices`.
    pub(in crate::transport) fn program(&self) -> &'static str {
        self.program
    }

    /// The process, while it is ours.
    pub(in crate::transport) fn child(&self) -> Option<&Adopted> {
        self.child.as_ref()
    }
}

impl Drop for DeviceProcess {
    fn drop(&mut self) {
        drop(self.reaper.take());
        drop(self.child.take());
    }
}

/// Bytes of the shared window of a child-process device: the largest array that moves in
/// one bulk request (the session sends larger ones in framed chunks). Pages are only
/// touched when used.
pub const WINDOW_BYTES: usize = 80 << 20;

/// A device in a child process (`exe device`, `exe` being the `tessera` binary), speaking
/// over its stdio.
pub(in crate::transport) fn child_process(
    exe: &Path,
    replica: u32,
    memory: usize,
) -> Result<Link, TransportError> {
    let window = SharedMemory::create(WINDOW_BYTES)?;
    // The device's memory, shared so that the host reads and writes it in place.
    let shared = SharedMemory::create(memory)?;
    let mut command = Command::new(exe);
    command
        .args(["device", "--replica", &replica.to_string()])
        .args(["--memory", &memory.to_string()])
        .args(["--memory-fd", &shared.fd().to_string()])
        .args(["--window-fd", &window.fd().to_string()])
        .args(["--window-bytes", &WINDOW_BYTES.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    SharedMemory::hand_to(&mut command, &[&shared, &window]);
    let spawned = children::spawn(&mut command, DEVICE_PROCESS);
    let (child, pipes) = spawned.map_err(|source| TransportError::Spawn {
        replica,
        program: exe.to_path_buf(),
        source,
    })?;
    let pid = child.pid();
    let (Some(stdin), Some(stdout)) = (pipes.stdin, pipes.stdout) else {
        return Err(io::Error::other("the child process has no stdio pipes").into());
    };
    // Should the reaper not start, dropping `child` stops the device.
    let reaper = reaper(replica, &[pid])?;
    Ok(Link::Child {
        stdin: Box::new(stdin),
        stdout: stdout.into(),
        window,
        memory: shared,
        handle: DeviceHandle::Child(Arc::new(DeviceProcess {
            child: Some(child),
            reaper: Some(reaper),
            program: DEVICE_PROCESS,
        })),
    })
}

/// One device per first replica of `devices` (each device's first lane's) for a training
/// runtime, `memory` bytes each, in as many `tessera devices` processes as the module's
/// rules say; links in the order of `devices`.
pub(in crate::transport) fn device_processes(
    exe: &Path,
    devices: &[u32],
    memory: usize,
) -> Result<Vec<Link>, TransportError> {
    let n = devices.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let k = n.min(cores.saturating_sub(1).max(1)).max(1);
    let mut links: Vec<Option<Link>> = (0..n).map(|_| None).collect();
    for share in 0..k {
        let members: Vec<(usize, u32)> = (devices.iter().copied())
            .enumerate()
            .skip(share)
            .step_by(k)
            .collect();
        for (i, link) in process_share(exe, &members, memory)? {
            links[i] = Some(link);
        }
    }
    Ok(links.into_iter().flatten().collect())
}

/// Devices `members` (index among the runtime's devices, replica) in one `tessera devices`
/// process (`exe devices`), `memory` bytes each, with their rings in memory shared with
/// it: their links, by index.
fn process_share(
    exe: &Path,
    members: &[(usize, u32)],
    memory: usize,
) -> Result<Vec<(usize, Link)>, TransportError> {
    let first = members.first().map_or(0, |&(_, r)| r);
    let rings = SharedMemory::create(ring::share_bytes(members.len()))?;
    let mut shared = Vec::with_capacity(members.len());
    for _ in members {
        let window = SharedMemory::create(WINDOW_BYTES)?;
        shared.push((window, SharedMemory::create(memory)?));
    }
    let mut command = Command::new(exe);
    command
        .args(["devices", "--memory", &memory.to_string()])
        .args(["--window-bytes", &WINDOW_BYTES.to_string()])
        .args(["--rings", &rings.fd().to_string()]);
    for (&(_, replica), (window, memory)) in members.iter().zip(&shared) {
        let device = format!("{replica}:{}:{}", memory.fd(), window.fd());
        command.args(["--device", &device]);
    }
    // Its stdout carries nothing: its end tells the host the process has gone.
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut handed = vec![&rings];
    handed.extend(shared.iter().flat_map(|(window, memory)| [window, memory]));
    SharedMemory::hand_to(&mut command, &handed);
    let spawned = children::spawn(&mut command, PROCESS_SHARE);
    let (child, pipes) = spawned.map_err(|source| TransportError::Spawn {
        replica: first,
        program: exe.to_path_buf(),
        source,
    })?;
    let Some(stdout) = pipes.stdout else {
        return Err(io::Error::other("the device process has no stdout pipe").into());
    };
    let stdout = OwnedFd::from(stdout);
    // Should the reaper not start, dropping `child` stops the process.
    let reaper = reaper(first, &[child.pid()])?;
    let process = Arc::new(DeviceProcess {
        child: Some(child),
        reaper: Some(reaper),
        program: PROCESS_SHARE,
    });
    let mut links = Vec::with_capacity(members.len());
    for (j, (&(i, _), (window, memory))) in members.iter().zip(shared).enumerate() {
        let (to_device, from_device) = ring::share_rings(j);
        let link = Link::Share {
            to: RingSender::new(rings.map_again()?, to_device, ring::DOORBELL)?,
            from: RingReceiver::new(
                rings.map_again()?,
                from_device,
                from_device + ring::OWN_BELL,
            )?,
            stdout: stdout.try_clone()?,
            window,
            memory,
            handle: DeviceHandle::Child(Arc::clone(&process)),
        };
        links.push((i, link));
    }
    Ok(links)
}
