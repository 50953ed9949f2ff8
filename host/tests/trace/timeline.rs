//! A trace file read back and held to the trace module's rules: complete events that nest
//! on each track, and devices whose events and idle gaps cover them from their first event
//! to the trace's end.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// A track: (process, thread) — process 1 the host's threads, 2 the devices.
pub type Track = (u64, u64);

#[derive(Debug, Clone)]
pub struct Event {
    pub name: String,
    pub start: f64,
    pub end: f64,
}

/// The complete events of a trace, by track.
pub struct Timeline {
    tracks: BTreeMap<Track, Vec<Event>>,
    /// The latest end of any event.
    end: f64,
}

/// Times are microseconds as floats; a child's end is read after its parent's start.
const SLACK: f64 = 1e-3;

impl Timeline {
    /// Reads `path`, checking each event's fields.
    pub fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).expect("the trace is written");
        let json: Value = serde_json::from_str(&text).expect("the trace is JSON");
        let events = json["traceEvents"].as_array().expect("traceEvents");
        let mut tracks: BTreeMap<Track, Vec<Event>> = BTreeMap::new();
        let mut end: f64 = 0.0;
        for e in events {
            if e["ph"] == "M" {
                continue;
            }
            assert_eq!(e["ph"], "X", "{e}");
            let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
            assert!(
                ts >= 0.0 && dur >= 0.0 && ts.is_finite() && dur.is_finite(),
                "{e}"
            );
            let track = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
            let name = e["name"].as_str().unwrap().to_owned();
            end = end.max(ts + dur);
            (tracks.entry(track).or_default()).push(Event {
                name,
                start: ts,
                end: ts + dur,
            });
        }
        for list in tracks.values_mut() {
            list.sort_by(|a, b| a.start.total_cmp(&b.start).then(b.end.total_cmp(&a.end)));
        }
        Self { tracks, end }
    }

    /// Complete events on every track.
    pub fn events(&self) -> usize {
        self.tracks.values().map(Vec::len).sum()
    }

    /// Every track's events are apart or one inside another.
    pub fn assert_nested(&self) {
        for (track, events) in &self.tracks {
            let mut open: Vec<&Event> = Vec::new();
            for e in events {
                while open.last().is_some_and(|o| o.end <= e.start + SLACK) {
                    open.pop();
                }
                if let Some(parent) = open.last() {
                    assert!(
                        e.end <= parent.end + SLACK,
                        "{track:?}: {e:?} overlaps {parent:?} without nesting"
                    );
                }
                open.push(e);
            }
        }
    }

    /// The host's track that has events named `name`.
    pub fn host_track_with(&self, name: &str) -> Track {
        *(self.tracks.iter())
            .find(|(t, events)| t.0 == 1 && events.iter().any(|e| e.name == name))
            .unwrap_or_else(|| panic!("no host track has `{name}`"))
            .0
    }

    /// The devices' tracks.
    pub fn device_tracks(&self) -> Vec<Track> {
        self.tracks.keys().copied().filter(|t| t.0 == 2).collect()
    }

    pub fn count(&self, track: Track, name: &str) -> usize {
        let events = self.tracks.get(&track).map_or(&[][..], Vec::as_slice);
        events.iter().filter(|e| e.name == name).count()
    }

    /// Each `name` event on `track` lies inside an `outer` event of the same track.
    pub fn assert_each_inside(&self, track: Track, name: &str, outer: &str) {
        let events = &self.tracks[&track];
        for e in events.iter().filter(|e| e.name == name) {
            assert!(
                (events.iter()).any(|o| o.name == outer
                    && o.start <= e.start + SLACK
                    && e.end <= o.end + SLACK),
                "{track:?}: {e:?} is not inside any `{outer}`"
            );
        }
    }

    /// From its first event to the trace's end, `track`'s outermost events and its `idle`
    /// gaps follow one another without a hole or an overlap.
    pub fn assert_covered(&self, track: Track) {
        let events = &self.tracks[&track];
        let mut covered = events.first().expect("a device track has events").start;
        for e in events {
            if e.end <= covered + SLACK && e.name != "idle" {
                continue; // inside an earlier one
            }
            assert!(
                (e.start - covered).abs() <= SLACK,
                "{track:?}: a hole or overlap at {covered} before {e:?}"
            );
            covered = e.end;
        }
        assert!(
            (self.end - covered).abs() <= SLACK,
            "{track:?}: covered until {covered}, the trace ends at {}",
            self.end
        );
    }
}
