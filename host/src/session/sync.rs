//! Waiting for the workers, and how long a silent worker is waited for.
//!
//! # Rules
//!
//! - **A sync reports every failure** among the commands the syncing thread sent, worker by
//!   worker, each naming its worker and command; another thread's failures stay for that
//!   thread (`pending`).
//! - **A bounded sync loses nothing**: when time runs out, the commands still running stay
//!   pending in order, and failures already claimed are reported by this thread's next
//!   sync.
//! - **Deadlines**: a command unanswered past the deadline is sent again; a worker silent
//!   through every attempt is reported as what it is — busy (waited for up to the busy
//!   deadline), stopped, ended, or timed out.

use std::time::{Duration, Instant};

use super::{Session, SessionError};
use crate::trace::traced;

impl Session {
    /// Waits for worker `worker` to finish every command sent to it; every failure among
    /// the commands this thread sent is the error (see the module doc).
    pub fn sync_worker(&self, worker: usize) -> Result<(), SessionError> {
        let _traced = traced!("sync", worker);
        let mut state = self.lock()?;
        state.check_worker(worker)?;
        state.sync(worker)
    }

    /// Waits for every worker; every failure among the commands this thread sent is the
    /// error, worker by worker (see the module doc).
    pub fn sync_all(&self) -> Result<(), SessionError> {
        let _traced = traced!("sync");
        let mut state = self.lock()?;
        let workers = state.workers.len();
        state.sync_each(0..workers)
    }

    /// [`sync_all`](Self::sync_all) for at most `wait`: `Ok(true)` when every worker
    /// answered (its failures are the error, as `sync_all`'s), `Ok(false)` when one had not
    /// yet — nothing is lost: the commands still running stay pending in order, and the
    /// failures already claimed are reported by this thread's next sync. For a caller that
    /// must look up between waits (a Python program polling for Ctrl-C).
    pub fn sync_all_for(&self, wait: Duration) -> Result<bool, SessionError> {
        let _traced = traced!("sync");
        let until = Instant::now() + wait;
        let mut state = self.lock()?;
        let workers = state.workers.len();
        state.sync_each_until(0..workers, until)
    }

    /// [`sync_worker`](Self::sync_worker) for at most `wait`, as
    /// [`sync_all_for`](Self::sync_all_for) is.
    pub fn sync_worker_for(&self, worker: usize, wait: Duration) -> Result<bool, SessionError> {
        let _traced = traced!("sync", worker);
        let until = Instant::now() + wait;
        let mut state = self.lock()?;
        state.check_worker(worker)?;
        state.sync_each_until([worker], until)
    }

    /// Changes how long every worker's oldest unanswered command may take before it is
    /// sent again. A worker silent through every attempt is then reported as what it is:
    /// busy (waited for, up to the busy deadline), stopped, ended, or timed out.
    pub fn set_deadline(&self, deadline: Duration) -> Result<(), SessionError> {
        let mut state = self.lock()?;
        for worker in &mut state.workers {
            worker.set_deadline(deadline);
        }
        Ok(())
    }

    /// Changes how long a worker that is busy with one command (a long kernel: its
    /// device works, it is not dead) may work on it before the command fails as busy
    /// ([`TransportError::Busy`](crate::transport::TransportError::Busy));
    /// [`BUSY_DEADLINE`](crate::transport::BUSY_DEADLINE) by default.
    pub fn set_busy_deadline(&self, deadline: Duration) -> Result<(), SessionError> {
        let mut state = self.lock()?;
        for worker in &mut state.workers {
            worker.set_busy_deadline(deadline);
        }
        Ok(())
    }
}
