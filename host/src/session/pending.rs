//! Commands sent and not yet answered, and who hears of their failures.
//!
//! # Rules
//!
//! - **Every failure is reported.** A sync claims every reply its workers owe and reports
//!   every command among them that failed, each naming its worker and the command: one as
//!   [`SessionError::Worker`], several as [`SessionError::Failures`] (worker by worker, in
//!   the order they were sent). None is dropped because another came first.
//! - **A failure goes to the thread that sent the command.** A session is shared between
//!   threads; each command records the thread that sent it, and a sync reports only that
//!   thread's failures. A failure of another thread's command that this sync claims is
//!   parked and reported by that thread's next sync of the worker, not blamed on whoever
//!   happened to sync first.
//! - **A dead link is reported once per thread.** A closed or silent link fails every
//!   command still waiting on it: each thread with commands there hears of it once (its
//!   first such command), the rest are dropped.
//! - **Successes are settled as they come in.** Each time a command is sent, the worker's
//!   oldest commands whose replies are already in and plain successes are claimed, in
//!   order, up to the first that is not (not in yet, or one that failed or carries a value,
//!   left for a sync): a thread that pipelines thousands of calls holds only what is still
//!   running, and its sync waits for that alone.
//! - Freeing a register a worker never held (a copy to worker 0 only gives the others
//!   nothing) is not a failure. Nor is a write into a register whose allocation failed
//!   earlier in the same sync: that one failure is reported, not once per chunk after it.

use std::thread::{self, ThreadId};
use std::time::Instant;

use tessera_core::wire::{ErrorCode, Request};

use super::{Command, SessionError, State, WorkerFailure};
use crate::transport::TransportError;

/// A command sent and not yet answered.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) seq: u32,
    pub(super) command: Command,
    /// The thread that sent it, which hears of its failure.
    thread: ThreadId,
}

impl Pending {
    /// Command `command`, sent as `seq` by the calling thread.
    pub(super) fn new(seq: u32, command: Command) -> Self {
        Self {
            seq,
            command,
            thread: thread::current().id(),
        }
    }
}

/// A failure waiting for the thread that sent the command.
#[derive(Debug)]
pub(super) struct Parked {
    thread: ThreadId,
    failure: WorkerFailure,
}

impl State {
    /// Sends `request` to `worker`, to be answered at the next sync.
    pub(super) fn submit(
        &mut self,
        worker: usize,
        request: &Request<'_>,
        command: Command,
    ) -> Result<(), SessionError> {
        let sent = self.workers[worker].submit(request);
        self.file(worker, sent, command)
    }

    /// Files `command`, sent to `worker` as `sent` says, as pending (or its error).
    pub(super) fn file(
        &mut self,
        worker: usize,
        sent: Result<u32, TransportError>,
        command: Command,
    ) -> Result<(), SessionError> {
        match sent {
            Ok(seq) => {
                self.pending[worker].push_back(Pending::new(seq, command));
                self.settle(worker);
                Ok(())
            }
            Err(source) => Err(SessionError::Worker {
                worker,
                command,
                source,
            }),
        }
    }

    /// Claims, without waiting, `worker`'s oldest commands whose replies are in and plain
    /// successes (module rules: settled as they come in).
    fn settle(&mut self, worker: usize) {
        while let Some(front) = self.pending[worker].front() {
            if !self.workers[worker].settle_done(front.seq) {
                break;
            }
            self.pending[worker].pop_front();
        }
    }

    /// Sends `request` to every worker (all sent before any reply is awaited); returns
    /// the sequence numbers, claimed by the caller.
    pub(super) fn submit_everywhere(
        &mut self,
        request: &Request<'_>,
    ) -> Result<Vec<u32>, SessionError> {
        let mut seqs = Vec::with_capacity(self.workers.len());
        for worker in &mut self.workers {
            seqs.push(worker.submit(request)?);
        }
        Ok(seqs)
    }

    /// Claims every pending reply of `worker`: every failure of the calling thread's
    /// commands is the error (module doc), the other threads' are parked for them.
    pub(super) fn sync(&mut self, worker: usize) -> Result<(), SessionError> {
        let mut failures = Vec::new();
        self.claim(worker, &mut failures, None);
        SessionError::of_failures(failures)
    }

    /// [`sync_each`](Self::sync_each) that stops waiting at `until`: true when every reply
    /// was claimed (the failures are the error, as `sync_each`'s), false when one had not
    /// arrived by then — what was claimed so far stays claimed, its failures parked for
    /// this thread's next sync of their workers, and the rest stay pending in order.
    pub(super) fn sync_each_until(
        &mut self,
        workers: impl IntoIterator<Item = usize>,
        until: Instant,
    ) -> Result<bool, SessionError> {
        let mut failures = Vec::new();
        for worker in workers {
            if !self.claim(worker, &mut failures, Some(until)) {
                let me = thread::current().id();
                self.parked
                    .extend(failures.into_iter().map(|failure| Parked {
                        thread: me,
                        failure,
                    }));
                return Ok(false);
            }
        }
        SessionError::of_failures(failures).map(|()| true)
    }

    /// [`sync`](Self::sync) of every worker in `workers`, every failure among them
    /// reported together.
    pub(super) fn sync_each(
        &mut self,
        workers: impl IntoIterator<Item = usize>,
    ) -> Result<(), SessionError> {
        let mut failures = Vec::new();
        for worker in workers {
            self.claim(worker, &mut failures, None);
        }
        SessionError::of_failures(failures)
    }

    /// Claims `worker`'s pending replies, adding the calling thread's failures (those
    /// parked for it first, being older) to `failures`; with `until`, only those that
    /// arrive by then: false when one had not (it and the rest stay pending).
    fn claim(
        &mut self,
        worker: usize,
        failures: &mut Vec<WorkerFailure>,
        until: Option<Instant>,
    ) -> bool {
        let me = thread::current().id();
        let mut kept = Vec::with_capacity(self.parked.len());
        for parked in self.parked.drain(..) {
            if parked.thread == me && parked.failure.worker == worker {
                failures.push(parked.failure);
            } else {
                kept.push(parked);
            }
        }
        self.parked = kept;
        let mut not_allocated = Vec::new();
        loop {
            if let (Some(until), Some(front)) = (until, self.pending[worker].front()) {
                // A link that fails here fails the receive below too, which reports it.
                if let Ok(false) = self.workers[worker].arrived_by(front.seq, until) {
                    return false;
                }
            }
            let Some(pending) = self.pending[worker].pop_front() else {
                return true;
            };
            let source = match self.workers[worker].receive(pending.seq) {
                Ok(reply) => {
                    self.workers[worker].recycle(reply);
                    continue;
                }
                Err(TransportError::Device {
                    code: ErrorCode::UnknownId { .. },
                    ..
                }) if matches!(pending.command, Command::Free(_)) => continue,
                Err(TransportError::Device {
                    code: ErrorCode::UnknownId { id },
                    ..
                }) if pending.command == Command::Set(id) && not_allocated.contains(&id) => {
                    continue
                }
                Err(e) => e,
            };
            if let Command::Alloc(id) = pending.command {
                not_allocated.push(id);
            }
            // A dead link fails everything after it: not waited on again (a silent one
            // would cost a deadline each), told once to every other thread waiting there.
            if dead_link(&source).is_some() {
                let mut told = vec![pending.thread];
                for rest in std::mem::take(&mut self.pending[worker]) {
                    if told.contains(&rest.thread) {
                        continue;
                    }
                    told.push(rest.thread);
                    if let Some(again) = dead_link(&source) {
                        let failure = WorkerFailure {
                            worker,
                            command: rest.command,
                            source: again,
                        };
                        self.hand(rest.thread, me, failure, failures);
                    }
                }
            }
            let failure = WorkerFailure {
                worker,
                command: pending.command,
                source,
            };
            self.hand(pending.thread, me, failure, failures);
        }
    }

    /// Gives `failure` to `thread`: into `failures` if it is this one (`me`), else parked.
    fn hand(
        &mut self,
        thread: ThreadId,
        me: ThreadId,
        failure: WorkerFailure,
        failures: &mut Vec<WorkerFailure>,
    ) {
        if thread == me {
            failures.push(failure);
        } else {
            self.parked.push(Parked { thread, failure });
        }
    }
}

/// The same error again if `e` says the link is dead (closed, its process gone, or silent
/// through every attempt), for the commands still waiting on it; `None` otherwise.
fn dead_link(e: &TransportError) -> Option<TransportError> {
    Some(match *e {
        TransportError::Closed { replica } => TransportError::Closed { replica },
        TransportError::Exited {
            replica,
            program,
            status,
        } => TransportError::Exited {
            replica,
            program,
            status,
        },
        TransportError::Timeout {
            replica,
            request,
            attempts,
        } => TransportError::Timeout {
            replica,
            request,
            attempts,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use crate::runtime::Placement;
    use crate::session::{CallArg, Session};
    use crate::transport::HOST_WINDOW;

    /// Catches a session that keeps every reply of pipelined calls until a sync: a thread
    /// that sends thousands of calls held thousands of replies (and their buffers), and its
    /// sync then claimed them one by one. Settled as they come in, what stays pending is
    /// at most the commands in flight.
    #[test]
    fn pipelined_successes_are_settled_before_the_sync() {
        let session = Session::new(&Placement::Thread, 2, 1, 1 << 16).unwrap();
        let add_one = session.get_function("add_one").unwrap();
        for _ in 0..1000 {
            // The call and, as the register drops, its free.
            drop(session.call(&add_one, &[CallArg::Int(1)]).unwrap());
        }
        let state = session.lock().unwrap();
        for (worker, pending) in state.pending.iter().enumerate() {
            // A window of requests in flight, and the replies in before the last send.
            assert!(
                pending.len() <= 2 * HOST_WINDOW,
                "worker {worker}: {} commands pending after 2000 sent",
                pending.len()
            );
        }
        drop(state);
        session.sync_all().unwrap();
    }

    /// Catches settling that swallows a failure: a failed call among pipelined successes
    /// is still reported by the next sync, naming its worker and the function.
    #[test]
    fn a_failure_among_settled_successes_is_still_reported() {
        let session = Session::new(&Placement::Thread, 2, 1, 1 << 16).unwrap();
        let add_one = session.get_function("add_one").unwrap();
        for _ in 0..100 {
            drop(session.call(&add_one, &[CallArg::Int(1)]).unwrap());
        }
        // add_one of no argument fails on every worker.
        drop(session.call(&add_one, &[]).unwrap());
        for _ in 0..100 {
            drop(session.call(&add_one, &[CallArg::Int(1)]).unwrap());
        }
        let failure = session.sync_all().unwrap_err();
        let failed: Vec<_> = failure.worker_failures().iter().map(|f| f.0).collect();
        assert_eq!(failed, [0, 1], "{failure}");
        assert!(failure.to_string().contains("add_one"), "{failure}");
        session.sync_all().unwrap();
    }
}
