//! Serving a pooled device: the pool's threads, the host's wait serving in their stead, and
//! one device's mail served and let go.
//!
//! # Rules
//!
//! - **One server at a time**: a server takes a device's lock without waiting; a device
//!   whose lock another server holds is marked to be readied again, and left to that server,
//!   which readies it once it lets go ([`Pool::let_go`]). No server waits for another.
//! - **Unready before its mail is read**, so a message sent meanwhile readies it again.
//! - **Busy lines**: a server's line is high while it serves, a device's while one of its
//!   requests runs (`serve_pending` drives it).
//! - **Served no more** once it fails, panics, or its channel is gone: its slot is emptied
//!   and it is marked ended; a panic is caught here and its request's line set low.
//! - **A server's own device first**: a pool thread, and the host's wait, remember the
//!   device they served last and prefer it (`Ready::take`).

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError};
use std::thread::{self, JoinHandle};

use embedded_hal::digital::OutputPin;
use tessera_firmware_sim::serve_pending;

use super::{lock, Pool};
use crate::transport::board::BusyLine;
use crate::transport::TransportError;

/// Starts a pool thread for each of `servers` (indices into the pool's busy lines).
pub(super) fn start_threads(
    pool: &Arc<Pool>,
    servers: Range<usize>,
) -> Result<Vec<JoinHandle<()>>, TransportError> {
    let mut threads = Vec::with_capacity(servers.len());
    for server in servers {
        let pool = Arc::clone(pool);
        let thread = thread::Builder::new()
            .name(format!("tessera-devices-{server}"))
            .spawn(move || pool.serve_until_closed(server))?;
        threads.push(thread);
    }
    Ok(threads)
}

impl Pool {
    /// A pool thread's life, as server `server`: every ready device it takes is served,
    /// the one it served last first, until the pool closes.
    fn serve_until_closed(&self, server: usize) {
        let Some(mut line) = self.lines.get(server).cloned() else {
            return;
        };
        let mut last = None;
        while let Some(device) = self.next(last) {
            // Only a device it served is in its core's caches.
            if self.serve(device, &mut line) {
                last = Some(device);
            }
        }
    }

    /// For the host's wait: serves one ready device (skipping any another server is
    /// serving); false when none was left to serve.
    pub(in crate::transport) fn serve_one(&self) -> bool {
        let Some(mut line) = self.lines.first().cloned() else {
            return false;
        };
        loop {
            let last = self.host_last.load(Ordering::Relaxed);
            let Some(device) = lock(&self.ready).take(Some(last)) else {
                return false;
            };
            if self.serve(device, &mut line) {
                self.host_last.store(device, Ordering::Relaxed);
                return true;
            }
        }
    }

    /// Serves device `device`'s mail, its server's `line` high meanwhile and the device's
    /// while each request runs; true if it did (false: it has ended, or another server is
    /// serving it and will serve it again).
    fn serve(&self, device: usize, line: &mut BusyLine) -> bool {
        let Some(member) = self.members.get(device) else {
            return false;
        };
        let slot = &member.slot;
        let mut slot = match slot.try_lock() {
            Ok(slot) => slot,
            Err(TryLockError::Poisoned(slot)) => slot.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // Left to its server, which looks at `again` once it has let go; should it
                // have let go already, the lock is free now (it looked under the same lock
                // this mark was made under, before or after it).
                if let Some(again) = lock(&self.ready).again.get_mut(device) {
                    *again = true;
                }
                match slot.try_lock() {
                    Ok(slot) => slot,
                    Err(TryLockError::Poisoned(slot)) => slot.into_inner(),
                    Err(TryLockError::WouldBlock) => return false,
                }
            }
        };
        // Unready before its mail is read (module rules): acquire-release, so that the mail
        // sent before it was readied is seen.
        member.queued.swap(false, Ordering::AcqRel);
        let Some(s) = slot.as_mut() else {
            return false;
        };
        // A device's track in a trace (`crate::trace`): its requests, on whichever server.
        let _served = crate::trace::traced!("serve", device = s.replica);
        let _ = line.set_high();
        let served = catch_unwind(AssertUnwindSafe(|| {
            serve_pending(&mut s.server, &mut s.device, &mut s.link, &mut s.busy)
        }));
        let _ = line.set_low();
        let ends = match served {
            Ok(Ok(true)) => false,
            // Its channel is gone: nobody reads its replies any more.
            Ok(Ok(false)) => true,
            Ok(Err(e)) => {
                tracing::debug!(replica = s.replica, error = %e, "device stopped");
                true
            }
            Err(_) => {
                tracing::warn!(
                    replica = s.replica,
                    "a pooled device panicked: it is served no more"
                );
                // The panic left its request's line high.
                let _ = s.busy.set_low();
                true
            }
        };
        if ends {
            *slot = None;
            member.ended.store(true, Ordering::Release);
        }
        drop(slot);
        self.let_go(device);
        true
    }

    /// After its server has let go of device `device`: readies it again if another server
    /// found it being served meanwhile (module rules).
    pub(super) fn let_go(&self, device: usize) {
        let mut ready = lock(&self.ready);
        if ready.again.get_mut(device).is_some_and(std::mem::take) {
            ready.devices.push_back(device);
            self.ring(&mut ready);
        }
    }
}
