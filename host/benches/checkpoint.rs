//! Checkpoint save and load throughput beside plain file IO of the same bytes, in the same
//! directory and the same run (issue #10's target: at least 0.8× plain IO).
//!
//! The checkpoint holds 64 MiB of weights (four `f32` tensors of 16 MiB, two replicas'
//! RNG state, layouts as a run writes them); the benchmark is about the file, so it is made
//! by hand rather than captured from devices. Each operation runs `RUNS` times, interleaved
//! with the others so that they see the same disk; the median is reported.
//!
//! - save: [`Checkpoint::save`] (encode with its checksum, write a temporary file, flush it
//!   to disk, rename it, flush the directory) against `std::fs::write` of the file's bytes
//!   and, for reference, the same write followed by `File::sync_all` (what durability costs
//!   on this disk);
//! - load: [`Checkpoint::load`] (read, parse, check the version and the checksum, copy every
//!   tensor out) against `std::fs::read` of the same file.
//!
//! Below the table, where the time goes: the checksum as the format computes it
//! (`crc32fast`, with the CPU's carry-less multiply), the same CRC with the `crc` crate's
//! 16-byte table (what the format used before), and one copy of the bytes (a save and a
//! load each make a few).
//!
//! Run with `cargo bench -p tessera-host --bench checkpoint`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tessera_host::checkpoint::Checkpoint;
use tessera_host::runtime::WeightsIo;
use tessera_host::session::HostArray;

/// Bytes of weights.
const WEIGHT_BYTES: usize = 64 << 20;
/// Tensors they are split into.
const TENSORS: usize = 4;
/// Bytes of a mebibyte.
const MIB: f64 = 1_048_576.0;
/// Runs of each operation.
const RUNS: usize = 7;

/// The same CRC as the format's, sixteen bytes per table step.
const CRC32_SLICE16: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);

fn checkpoint() -> Checkpoint {
    let per_tensor = WEIGHT_BYTES / TENSORS / 4;
    let mut weights = WeightsIo::new();
    let mut layouts = std::collections::BTreeMap::new();
    for t in 0..TENSORS {
        // Values that do not compress or repeat: a cheap hash of the position.
        let values: Vec<f32> = (0..per_tensor)
            .map(|i| {
                let x = (i as u32 ^ ((t as u32) << 28)).wrapping_mul(0x9e37_79b9);
                (x >> 8) as f32 / (1 << 24) as f32 - 0.5
            })
            .collect();
        let name = format!("layer{t}");
        let array = HostArray::from_f32(&[1024, (per_tensor / 1024) as u32], &values)
            .expect("the shape fits");
        weights.insert(name.clone(), array);
        layouts.insert(
            name,
            "all: 1 group(s) of 2 (stride 1), one-per-group, not sharded".to_string(),
        );
    }
    Checkpoint {
        fingerprint: 0x0123_4567_89ab_cdef,
        replicas: 2,
        step: 1000,
        seed: 42,
        rng: (0..8).collect(),
        weights,
        optimizer: WeightsIo::new(),
        layouts,
        data: None,
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

fn mib_per_second(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / MIB / t.as_secs_f64()
}

fn main() {
    let dir: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("checkpoint-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("the bench directory");
    let files = Files {
        saved: dir.join("checkpoint.safetensors"),
        plain: dir.join("plain.bin"),
        durable: dir.join("durable.bin"),
    };
    let c = checkpoint();
    let bytes = round_trip(&c, &files.saved);
    let times = measure(&c, &bytes, &files);
    let _ = std::fs::remove_dir_all(&dir);
    report(times, bytes.len(), &dir);
}

/// The files the benchmark writes, in one directory.
struct Files {
    /// The checkpoint, saved and loaded.
    saved: PathBuf,
    /// Its bytes, written plainly.
    plain: PathBuf,
    /// Its bytes, written and synced.
    durable: PathBuf,
}

/// Each operation's time in every run.
struct Times {
    save: Vec<Duration>,
    write: Vec<Duration>,
    write_sync: Vec<Duration>,
    load: Vec<Duration>,
    read: Vec<Duration>,
    crc_fast: Vec<Duration>,
    crc_slice16: Vec<Duration>,
    copy: Vec<Duration>,
}

/// Saves `c` in `saved` and loads it back, checking it survived; returns the file's bytes.
fn round_trip(c: &Checkpoint, saved: &Path) -> Vec<u8> {
    c.save(saved).expect("the checkpoint saves");
    let bytes = std::fs::read(saved).expect("the file reads");
    let loaded = Checkpoint::load(saved).expect("the checkpoint loads");
    assert!(
        loaded.weights == c.weights && loaded.rng == c.rng && loaded.step == c.step,
        "the checkpoint did not survive the file"
    );
    bytes
}

/// Every operation `RUNS` times, interleaved (`bytes` being `c`'s file).
fn measure(c: &Checkpoint, bytes: &[u8], files: &Files) -> Times {
    let Files {
        saved,
        plain,
        durable,
    } = files;
    let (mut save, mut write, mut write_sync, mut load, mut read) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut crc_fast, mut crc_slice16, mut copy) = (vec![], vec![], vec![]);
    for _ in 0..RUNS {
        save.push(time(|| c.save(saved).expect("save")));
        write.push(time(|| std::fs::write(plain, bytes).expect("write")));
        write_sync.push(time(|| {
            let mut file = std::fs::File::create(durable).expect("create");
            file.write_all(bytes).expect("write");
            file.sync_all().expect("sync");
        }));
        load.push(time(|| {
            std::hint::black_box(Checkpoint::load(saved).expect("load"));
        }));
        read.push(time(|| {
            std::hint::black_box(std::fs::read(saved).expect("read"));
        }));
        crc_fast.push(time(|| {
            std::hint::black_box(crc32fast::hash(bytes));
        }));
        crc_slice16.push(time(|| {
            std::hint::black_box(CRC32_SLICE16.checksum(bytes));
        }));
        copy.push(time(|| {
            std::hint::black_box(bytes.to_vec());
        }));
    }
    Times {
        save,
        write,
        write_sync,
        load,
        read,
        crc_fast,
        crc_slice16,
        copy,
    }
}

/// Prints the medians of `times` for a file of `n` bytes in `dir`: each operation beside
/// its baseline, then where the time goes.
fn report(times: Times, n: usize, dir: &Path) {
    let save = median(times.save);
    let rows = [
        ("save", save, "std::fs::write", median(times.write)),
        ("save", save, "write + sync_all", median(times.write_sync)),
        (
            "load",
            median(times.load),
            "std::fs::read",
            median(times.read),
        ),
    ];
    println!(
        "checkpoint file: {:.1} MiB ({} tensors of {:.0} MiB), in {}; median of {RUNS} runs",
        n as f64 / MIB,
        TENSORS,
        (WEIGHT_BYTES / TENSORS) as f64 / MIB,
        dir.parent()
            .map_or(String::new(), |p| p.display().to_string()),
    );
    println!(
        "{:<6} {:>10} {:>10}   {:<18} {:>10} {:>10}   {:>6}  target",
        "op", "time", "MiB/s", "baseline", "time", "MiB/s", "ratio"
    );
    for (op, t, base, bt) in rows {
        let (speed, base_speed) = (mib_per_second(n, t), mib_per_second(n, bt));
        let ratio = speed / base_speed;
        println!(
            "{op:<6} {:>8.1}ms {speed:>10.0}   {base:<18} {:>8.1}ms {base_speed:>10.0}   {ratio:>5.2}×  {}",
            t.as_secs_f64() * 1e3,
            bt.as_secs_f64() * 1e3,
            if ratio >= 0.8 { "≥ 0.8× met" } else { "below 0.8×" }
        );
    }
    println!("where the time goes (same bytes):");
    for (what, t) in [
        ("CRC-32, crc32fast (the format's)", median(times.crc_fast)),
        ("CRC-32, 16-byte table (before)", median(times.crc_slice16)),
        ("one copy of the bytes", median(times.copy)),
    ] {
        println!(
            "  {what:<40} {:>8.1}ms {:>10.0} MiB/s",
            t.as_secs_f64() * 1e3,
            mib_per_second(n, t)
        );
    }
}
