//! A device in a child process: `tessera device`, speaking over its stdio, its memory
//! and its bulk window shared with the host.

use std::io;
use std::path::Path;
use std::process::{Command, Stdio};

use super::reaper::reaper;
use super::{spawning, DeviceHandle, Incoming, Link, Outgoing};
use crate::transport::children;
use crate::transport::shared::{SharedMemory, Window};
use crate::transport::TransportError;

/// The program that runs a device in a child process.
pub(super) const DEVICE_PROCESS: &str = "tessera device";

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
    // The window's descriptor is inheritable until the child has it; no other child starts
    // meanwhile.
    let guard = spawning();
    let window = SharedMemory::create(WINDOW_BYTES, true)?;
    // The device's memory, shared so that the host reads and writes it in place.
    let shared = SharedMemory::create(memory, true)?;
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
    let spawned = children::spawn(&mut command, DEVICE_PROCESS);
    window.seal_from_children()?;
    shared.seal_from_children()?;
    drop(guard);
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
    Ok(Link {
        incoming: Incoming::Pipe(stdout.into()),
        outgoing: Outgoing::Bytes(Box::new(stdin)),
        handle: DeviceHandle::Child {
            child: Some(child),
            reaper: Some(reaper),
        },
        window: Some(Window::Shared(window)),
        memory: Some(shared),
    })
}
