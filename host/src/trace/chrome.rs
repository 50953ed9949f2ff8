//! The trace written in the Chrome trace-event format: one JSON object whose `traceEvents`
//! are complete events (`"ph": "X"`, start and length in microseconds) and the metadata
//! events that name the two processes and their tracks.
//!
//! A device's `idle` events are worked out here, at the end, not while the run goes on: the
//! gaps between its outermost events, and from its last to the trace's end.

use std::fs::File;
use std::io::{self, BufWriter, Write};

use serde_json::{json, Map, Value};

use super::record::{Event, Finished, Track};

/// Process 1 holds the host's threads, process 2 the devices.
const HOST: u32 = 1;
const DEVICES: u32 = 2;

/// Writes `finished` into `file`; returns the events written (spans and idle gaps).
pub(super) fn write(file: File, finished: &Finished) -> io::Result<usize> {
    let mut out = BufWriter::new(file);
    out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
    let mut first = true;
    let mut put = |out: &mut BufWriter<File>, value: Value| -> io::Result<()> {
        if !std::mem::take(&mut first) {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *out, &value).map_err(io::Error::from)
    };
    put(&mut out, meta("process_name", HOST, None, "tessera host"))?;
    put(
        &mut out,
        meta("process_name", DEVICES, None, "tessera devices"),
    )?;
    for (number, name) in &finished.threads {
        put(&mut out, meta("thread_name", HOST, Some(*number), name))?;
    }
    let mut devices: Vec<u64> = (finished.events.iter())
        .filter_map(|e| match e.track {
            Track::Device(d) => Some(d),
            Track::Thread(_) => None,
        })
        .collect();
    devices.sort_unstable();
    devices.dedup();
    for &device in &devices {
        let name = format!("device {device}");
        put(
            &mut out,
            meta("thread_name", DEVICES, Some(tid(device)), &name),
        )?;
    }
    let mut written = 0;
    for event in &finished.events {
        put(&mut out, complete(event))?;
        written += 1;
    }
    for idle in idle_gaps(&finished.events, &devices, finished.end) {
        put(&mut out, complete(&idle))?;
        written += 1;
    }
    out.write_all(b"\n]}\n")?;
    out.flush()?;
    Ok(written)
}

/// A device's track number (Chrome's `tid` is a 32-bit number here).
fn tid(device: u64) -> u32 {
    u32::try_from(device).unwrap_or(u32::MAX)
}

fn meta(kind: &str, pid: u32, tid: Option<u32>, name: &str) -> Value {
    let mut event = json!({"name": kind, "ph": "M", "pid": pid, "args": {"name": name}});
    if let Some(tid) = tid {
        event["tid"] = json!(tid);
    }
    event
}

fn complete(event: &Event) -> Value {
    let (pid, tid, cat) = match event.track {
        Track::Thread(n) => (HOST, n, "host"),
        Track::Device(d) => (DEVICES, tid(d), "device"),
    };
    let args: Map<String, Value> = (event.args.iter())
        .map(|(k, v)| ((*k).to_owned(), Value::String(v.clone())))
        .collect();
    json!({
        "name": event.name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
        "ts": event.start, "dur": event.length, "args": args,
    })
}

/// Each device's idle time: between its outermost events, and after its last until `end`.
pub(super) fn idle_gaps(events: &[Event], devices: &[u64], end: f64) -> Vec<Event> {
    let mut gaps = Vec::new();
    for &device in devices {
        let mut spans: Vec<(f64, f64)> = (events.iter())
            .filter(|e| e.track == Track::Device(device))
            .map(|e| (e.start, e.start + e.length))
            .collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut covered: Option<f64> = None;
        for (start, stop) in spans {
            if let Some(until) = covered.filter(|&until| start > until) {
                gaps.push(idle(device, until, start));
            }
            covered = Some(covered.map_or(stop, |c: f64| c.max(stop)));
        }
        if let Some(until) = covered.filter(|&until| end > until) {
            gaps.push(idle(device, until, end));
        }
    }
    gaps
}

fn idle(device: u64, from: f64, to: f64) -> Event {
    Event {
        name: "idle",
        track: Track::Device(device),
        start: from,
        length: to - from,
        args: Vec::new(),
    }
}
