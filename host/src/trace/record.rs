//! The recorder: a `tracing` layer that keeps every marked span that closes while the trace
//! runs as one complete event — its name, track, start and length, and its fields.
//!
//! A span's track is fixed when it is made (the module's rules on tracks): its own `device`
//! field, else its parent's device track, else the thread that made it. Only spans of the
//! `tessera` targets are recorded; events (log lines) are not.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Where an event is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Track {
    /// A host thread, by its number in this process.
    Thread(u32),
    /// A device: a runtime's replica or a session's worker.
    Device(u64),
}

/// One span that closed: a complete event.
#[derive(Debug, Clone)]
pub(super) struct Event {
    pub name: &'static str,
    pub track: Track,
    /// Microseconds from the trace's start.
    pub start: f64,
    pub length: f64,
    /// Its fields but `device`, as they were recorded.
    pub args: Vec<(&'static str, String)>,
}

/// What a trace kept: the events, and the names of the threads they ran on.
#[derive(Debug)]
pub(super) struct Recorded {
    start: Instant,
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    closed: bool,
    events: Vec<Event>,
    threads: BTreeMap<u32, String>,
}

/// Everything a finished trace writes.
pub(super) struct Finished {
    pub events: Vec<Event>,
    pub threads: BTreeMap<u32, String>,
    /// Microseconds from the trace's start to its finish.
    pub end: f64,
}

impl Recorded {
    pub(super) fn new() -> Self {
        Self {
            start: Instant::now(),
            kept: Mutex::new(Kept::default()),
        }
    }

    fn micros(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.start).as_secs_f64() * 1e6
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops keeping events and hands over what was kept.
    pub(super) fn close(&self) -> Finished {
        let end = self.micros(Instant::now());
        let mut kept = self.kept();
        kept.closed = true;
        Finished {
            events: std::mem::take(&mut kept.events),
            threads: std::mem::take(&mut kept.threads),
            end,
        }
    }
}

/// The layer that feeds a [`Recorded`].
pub(super) struct Recorder {
    recorded: Arc<Recorded>,
}

impl Recorder {
    pub(super) fn new(recorded: Arc<Recorded>) -> Self {
        Self { recorded }
    }
}

/// A span while it is open: when it was made, where it goes, its fields.
struct Open {
    start: Instant,
    track: Track,
    args: Vec<(&'static str, String)>,
}

/// This thread's number in the process (given on first use; never reused).
fn thread_number() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    thread_local! {
        static NUMBER: u32 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}

/// A span's fields: its `device`, if it names one, and the rest as text.
#[derive(Default)]
struct Fields {
    device: Option<u64>,
    args: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "device" {
            self.device = Some(value);
        } else {
            self.args.push((field.name(), value.to_string()));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        match u64::try_from(value) {
            Ok(v) => self.record_u64(field, v),
            Err(_) => self.args.push((field.name(), value.to_string())),
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.args.push((field.name(), value.to_owned()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.args.push((field.name(), format!("{value:?}")));
    }
}

fn marked(metadata: &Metadata<'_>) -> bool {
    metadata.is_span() && metadata.target().starts_with("tessera")
}

impl<S> Layer<S> for Recorder
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if marked(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        marked(metadata)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let Some(span) = ctx.span(id) else {
            return;
        };
        let inherited = span.parent().and_then(|parent| {
            let extensions = parent.extensions();
            extensions
                .get::<Open>()
                .map(|open| open.track)
                .filter(|t| matches!(t, Track::Device(_)))
        });
        let track = match (fields.device, inherited) {
            (Some(device), _) => Track::Device(device),
            (None, Some(track)) => track,
            (None, None) => {
                let number = thread_number();
                let mut kept = self.recorded.kept();
                kept.threads.entry(number).or_insert_with(|| {
                    let current = std::thread::current();
                    current.name().unwrap_or("thread").to_owned()
                });
                Track::Thread(number)
            }
        };
        span.extensions_mut().insert(Open {
            start: Instant::now(),
            track,
            args: fields.args,
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let end = Instant::now();
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        let recorded = &self.recorded;
        let start = recorded.micros(open.start);
        let event = Event {
            name: span.metadata().name(),
            track: open.track,
            start,
            length: (recorded.micros(end) - start).max(0.0),
            args: open.args,
        };
        let mut kept = recorded.kept();
        if !kept.closed {
            kept.events.push(event);
        }
    }
}
