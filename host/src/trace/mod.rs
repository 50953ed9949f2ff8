//! Where the time of a run goes: a timeline in the Chrome trace-event format, which
//! Perfetto (ui.perfetto.dev) and `chrome://tracing` open.
//!
//! The runtime, the session, the step driver, the device pool and the device code mark
//! their work with `tracing` spans at the `TRACE` level (target `tessera`, and
//! `tessera::device` for the device's own phases). A [`Trace`] records those spans — no
//! others — while it runs and writes them as complete events when it finishes.
//!
//! # Rules
//!
//! - **One trace at a time per process.** A trace records every runtime and session of the
//!   process and every device thread while it runs; [`Trace::start`] while another runs is
//!   [`TraceError::AlreadyTracing`].
//! - **Off costs a flag per marked place**: a thread takes the trace's subscriber
//!   (`scope`) only while a trace runs (else one atomic load), and a span no subscriber
//!   wants is not built (`tracing`'s level check). On, each span costs its clock readings
//!   and a lock: read a trace's proportions, not its absolute times, where the steps are
//!   short.
//! - **A file per process**: across MPI ranks, the command line and a runtime of several
//!   instances write rank `r`'s trace to `run.rank<r>.json` for `run.json`
//!   (`rank_file`), never one file from two processes.
//! - **The file is created at start**, so a path that cannot be written fails before the
//!   run, and written at [`Trace::finish`] (a trace dropped unfinished is written then, and
//!   a failure to write is logged: drop cannot return it).
//! - **Tracks**: process 1 holds one track per host thread (named after the thread), process
//!   2 one per device (`device N`: a session's worker, or a runtime's device by its first
//!   replica — a device runs several replicas as lanes). A span marked with a `device`
//!   field, and every span inside it, goes on that device's track, on whichever thread
//!   served it.
//! - **Events nest**: spans close before their parents on one thread, and one server at a
//!   time serves a device, so a track's events are either apart or one inside the other.
//!   Between a device's outermost events, from its first to the end of the trace, the
//!   device is `idle`; those gaps are written as events too.
//! - **What each placement shows**: on threads, a device's track holds its requests and,
//!   within a step, its phases (`load`, `forward`, `backward`, `anchors`, `exchange`,
//!   `update`); the devices of child processes, QEMU boards and serial ports run elsewhere,
//!   so their tracks stay empty and the host's tracks (step, rounds, combines, waits,
//!   commands) show what the host did and waited for.

mod chrome;
mod record;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::dispatcher::{self, DefaultGuard, Dispatch};
use tracing_subscriber::layer::SubscriberExt;

use record::{Recorded, Recorder};

/// Whether a trace runs: read at every marked place, so that off costs one load.
static TRACING: AtomicBool = AtomicBool::new(false);

/// The running trace's subscriber, for the threads that mark work ([`scope`]).
static RUNNING: Mutex<Option<Dispatch>> = Mutex::new(None);

/// Why a trace could not start or be written.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Another trace of this process runs (one at a time: module rules).
    #[error("a trace is already running in this process (one at a time)")]
    AlreadyTracing,
    /// The trace's file could not be created or written.
    #[error("trace file {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// A trace that runs (module rules): started by [`Trace::start`], written by
/// [`Trace::finish`].
#[derive(Debug)]
pub struct Trace {
    path: PathBuf,
    file: Option<File>,
    recorded: Arc<Recorded>,
}

/// What a finished trace wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSummary {
    /// The file.
    pub path: PathBuf,
    /// Events written: spans, and the devices' idle gaps.
    pub events: usize,
}

impl Trace {
    /// Creates `path` (truncating it) and starts recording every marked span of this
    /// process into it.
    pub fn start(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref().to_path_buf();
        let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
        if running.is_some() {
            return Err(TraceError::AlreadyTracing);
        }
        let file = File::create(&path).map_err(|source| TraceError::File {
            path: path.clone(),
            source,
        })?;
        let recorded = Arc::new(Recorded::new());
        let recorder = Recorder::new(Arc::clone(&recorded));
        *running = Some(Dispatch::new(tracing_subscriber::registry().with(recorder)));
        TRACING.store(true, Ordering::Release);
        Ok(Self {
            path,
            file: Some(file),
            recorded,
        })
    }

    /// Stops recording and writes the file.
    pub fn finish(mut self) -> Result<TraceSummary, TraceError> {
        self.stop_and_write()
    }

    fn stop_and_write(&mut self) -> Result<TraceSummary, TraceError> {
        TRACING.store(false, Ordering::Release);
        // Spans still open on other threads close into the recorder, which no longer keeps
        // them: what is written is what ended while the trace ran.
        RUNNING
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let finished = self.recorded.close();
        let Some(file) = self.file.take() else {
            return Ok(TraceSummary {
                path: self.path.clone(),
                events: 0,
            });
        };
        let written = chrome::write(file, &finished).map_err(|source| TraceError::File {
            path: self.path.clone(),
            source,
        })?;
        Ok(TraceSummary {
            path: self.path.clone(),
            events: written,
        })
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        if self.file.is_some() {
            if let Err(e) = self.stop_and_write() {
                tracing::warn!(error = %e, "the trace could not be written");
            }
        }
    }
}

/// Where rank `rank` of `ranks` writes the trace asked for at `path`: `path` itself on one
/// instance; across ranks, `run.json` becomes `run.rank1.json` (each rank's own timeline,
/// never two processes writing one file).
pub(crate) fn rank_file(path: &Path, rank: usize, ranks: usize) -> PathBuf {
    if ranks <= 1 {
        return path.to_path_buf();
    }
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.rank{rank}.{}", ext.to_string_lossy()),
        None => format!("{stem}.rank{rank}"),
    };
    path.with_file_name(name)
}

/// A trace a runtime or a session keeps until it is finished or they are dropped (their
/// `start_trace` and `finish_trace`).
#[derive(Debug, Default)]
pub(crate) struct Held(Mutex<Option<Trace>>);

impl Held {
    /// Starts a trace into `path` and keeps it.
    pub(crate) fn start(&self, path: &Path) -> Result<(), TraceError> {
        let trace = Trace::start(path)?;
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(trace);
        Ok(())
    }

    /// Finishes the kept trace, if there is one.
    pub(crate) fn finish(&self) -> Result<Option<TraceSummary>, TraceError> {
        let held = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        held.map(Trace::finish).transpose()
    }
}

/// For a thread about to do marked work: the running trace's subscriber as its default
/// until the guard drops; `None` (one atomic load) when no trace runs.
pub(crate) fn scope() -> Option<DefaultGuard> {
    if !TRACING.load(Ordering::Relaxed) {
        return None;
    }
    let running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
    running.as_ref().map(dispatcher::set_default)
}

/// A span of marked host work named `$name` (target `tessera`), entered, with the running
/// trace in scope first: `let _t = traced!("step");`.
macro_rules! traced {
    ($name:literal $(, $($field:tt)*)?) => {
        (
            $crate::trace::scope(),
            ::tracing::trace_span!(target: "tessera", $name $(, $($field)*)?).entered(),
        )
    };
}
pub(crate) use traced;

#[cfg(test)]
mod tests;
