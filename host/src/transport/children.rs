//! The child processes tessera starts — device processes, QEMU, defmt-print — and how they
//! end.
//!
//! Every child is started by [`spawn`], which registers it in one registry while holding
//! the registry's lock. Dropping its [`Adopted`] handle kills and reaps it.
//! [`stop_on_signals`] makes SIGINT, SIGTERM and SIGHUP to tessera do the same for every
//! child still registered before tessera exits with status 128 + the signal's number.
//! Children are killed with SIGKILL, which also ends a stopped child: without this, a
//! stopped device process, or a QEMU still serving its socket, would outlive tessera.
//!
//! Starting and registering under one lock is what makes "every child" true: the signal
//! handler takes the same lock, so it sees a child either not started yet (and none starts
//! after it) or registered. Before, a signal landing between a child's start and its
//! registration (a busy machine can stretch those few instructions to milliseconds) left
//! that child running after tessera exited.

use std::io;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// Every child not yet stopped, with its registry key.
static REGISTRY: Mutex<Vec<(u64, Child)>> = Mutex::new(Vec::new());
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

fn registry() -> MutexGuard<'static, Vec<(u64, Child)>> {
    // A panic while the lock was held leaves the list itself intact: keep using it.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A registered child. Dropping it kills and reaps the child.
#[derive(Debug)]
pub struct Adopted {
    key: u64,
    pid: u32,
    /// What it runs, for logs.
    name: &'static str,
}

/// The pipes of a child just started, those its command asked for.
#[derive(Debug)]
pub struct Pipes {
    /// The writing end of the child's stdin, when piped.
    pub stdin: Option<ChildStdin>,
    /// The reading end of the child's stdout, when piped.
    pub stdout: Option<ChildStdout>,
}

/// Starts `command`, which runs `name` (for logs), and registers the child before anyone
/// can stop tessera.
pub fn spawn(command: &mut Command, name: &'static str) -> io::Result<(Adopted, Pipes)> {
    let mut children = registry();
    let mut child = command.spawn()?;
    let pipes = Pipes {
        stdin: child.stdin.take(),
        stdout: child.stdout.take(),
    };
    let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
    let pid = child.id();
    children.push((key, child));
    drop(children);
    tracing::debug!(pid, name, "started a child process");
    Ok((Adopted { key, pid, name }, pipes))
}

impl Adopted {
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// How the child ended, if it has.
    pub fn try_wait(&self) -> io::Result<Option<ExitStatus>> {
        match registry().iter_mut().find(|(key, _)| *key == self.key) {
            Some((_, child)) => child.try_wait(),
            None => Ok(None),
        }
    }

    /// Waits up to `limit` for the child to end by itself.
    pub fn wait_timeout(&self, limit: Duration) -> io::Result<Option<ExitStatus>> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if start.elapsed() >= limit {
                return Ok(None);
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Adopted {
    fn drop(&mut self) {
        // The child is killed and reaped with the registry locked: taken out first and
        // stopped after, it could be killed but not yet reaped when a signal makes tessera
        // exit — a zombie left to whichever process adopts orphans, which may never reap it.
        let mut children = registry();
        if let Some(at) = children.iter().position(|(key, _)| *key == self.key) {
            let (_, mut child) = children.swap_remove(at);
            stop(&mut child);
            tracing::debug!(pid = self.pid, name = self.name, "stopped a child process");
        }
    }
}

fn stop(child: &mut Child) {
    // Both fail only for a child already reaped, which is what we want anyway.
    let _ = child.kill();
    let _ = child.wait();
}

/// From now on, SIGINT, SIGTERM and SIGHUP stop every registered child, remove the
/// temporary files of saves under way, and then exit with 128 + the signal's number.
/// Calling it again does nothing.
pub fn stop_on_signals() -> io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    static INSTALLED: Once = Once::new();
    let mut result = Ok(());
    INSTALLED.call_once(|| {
        result = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).and_then(
            |mut signals| {
                thread::Builder::new()
                    .name("tessera-signals".into())
                    .spawn(move || {
                        if let Some(signal) = signals.forever().next() {
                            tracing::warn!(signal, "stopping every device process, then exiting");
                            // The registry stays locked until the process is gone: a thread
                            // that meanwhile sees its device vanish blocks in the drop of
                            // that device's handle instead of exiting with an error first.
                            let mut children = registry();
                            for (_, child) in children.iter_mut() {
                                stop(child);
                            }
                            // Exiting runs no destructor: a save under way would leave its
                            // temporary file behind.
                            crate::atomic::remove_pending();
                            std::process::exit(128 + signal);
                        }
                    })
                    .map(drop)
            },
        );
    });
    result
}
