//! The reaper of a device process: it stops the device once this process is gone, however
//! it ended.

use std::io;
use std::process::{ChildStdin, Command, Stdio};

use crate::transport::children::{self, Adopted};
use crate::transport::TransportError;

/// A shell that waits for its stdin to close — which happens when this process ends, however
/// it ends, even by SIGKILL — and then kills `pids` (SIGKILL ends a stopped process too).
/// Its stdin's other end is returned, to be held until the processes are stopped.
pub(super) fn reaper(replica: u32, pids: &[u32]) -> Result<(Adopted, ChildStdin), TransportError> {
    let mut command = Command::new("sh");
    command
        .args([
            "-c",
            "read _; kill -KILL \"$@\" 2>/dev/null",
            "tessera-reaper",
        ])
        .args(pids.iter().map(u32::to_string))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let (child, pipes) = children::spawn(&mut command, "tessera-reaper").map_err(|source| {
        TransportError::Spawn {
            replica,
            program: "sh".into(),
            source,
        }
    })?;
    match pipes.stdin {
        Some(stdin) => Ok((child, stdin)),
        None => Err(io::Error::other("the reaper has no stdin pipe").into()),
    }
}
