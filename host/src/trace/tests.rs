//! The writer's idle gaps and the file's shape (the recorder itself is exercised end to end
//! by the suite's `trace` tests, each in a process of its own: a trace takes the process).

use std::path::Path;

use super::chrome::idle_gaps;
use super::rank_file;
use super::record::{Event, Track};

fn event(track: Track, start: f64, length: f64) -> Event {
    Event {
        name: "serve",
        track,
        start,
        length,
        args: Vec::new(),
    }
}

/// Catches idle time counted inside a device's nested events, or gaps of one device laid
/// on another: only the gaps between its outermost events, and after its last, are idle.
#[test]
fn a_devices_idle_time_is_the_gaps_between_its_outermost_events() {
    let events = [
        event(Track::Device(0), 10.0, 10.0),
        event(Track::Device(0), 12.0, 3.0), // inside the first
        event(Track::Device(0), 25.0, 5.0),
        event(Track::Device(1), 0.0, 40.0),
        event(Track::Thread(1), 20.0, 1.0),
    ];
    let gaps = idle_gaps(&events, &[0, 1], 50.0);
    let spans: Vec<_> = gaps.iter().map(|g| (g.track, g.start, g.length)).collect();
    assert_eq!(
        spans,
        [
            (Track::Device(0), 20.0, 5.0),
            (Track::Device(0), 30.0, 20.0),
            (Track::Device(1), 40.0, 10.0),
        ]
    );
}

/// Catches ranks of one job writing one trace file (two processes truncating and
/// writing it at once): across ranks each rank's name carries its rank.
#[test]
fn each_rank_traces_into_a_file_of_its_own() {
    let path = Path::new("/tmp/out/run.json");
    assert_eq!(
        rank_file(path, 0, 1),
        path,
        "one instance: the path as given"
    );
    assert_eq!(rank_file(path, 0, 2), Path::new("/tmp/out/run.rank0.json"));
    assert_eq!(rank_file(path, 1, 2), Path::new("/tmp/out/run.rank1.json"));
    assert_eq!(
        rank_file(Path::new("trace"), 3, 4),
        Path::new("trace.rank3")
    );
}
