//! The session measured beside its baselines, in the same run: call + sync of worker 0 and
//! of all workers (4 workers), 2,000 pipelined calls then a sync beside that round trip,
//! copies to and from worker 0 beside `copy_from_slice` of the same bytes, an allreduce of
//! 16 MiB of f32 per worker beside one 16 MiB memcpy and one of 4 KiB beside one 4 KiB
//! memcpy — in threads and in child processes; and QEMU's bytes per second both ways (when
//! the firmware is built: `$TESSERA_FIRMWARE` or the workspace's release build), beside the
//! serial placement's on the same firmware with UART0 on a pty (as a board on a serial
//! port: every byte in frames, where QEMU's socket placement has its bulk file), and a
//! session's 1 MiB copy to worker 0 on both (and on QEMU's socket without its file, the
//! same UART as the pty's), timed in alternation, with their ratios. The 1 MiB copies in
//! frames take about a minute each: QEMU's UART hands the firmware one byte at a time.
//!
//! `cargo bench -p tessera-host --bench session`. Each figure is the median of several
//! runs; ratios are baseline time / session time (1.0× = as fast as memcpy), each copy and
//! allreduce timed in alternation with its memcpy (this machine's speed drifts). The copies are
//! Disco's, destination-passing: into a register that already holds an array of the shape
//! (`copy_to_worker0_into`), and into a host array (`copy_from_worker0_into`); the copies
//! that allocate their destination are shown beside them.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tessera_core::dtype::DataType;
use tessera_host::runtime::Placement;
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::{CallArg, HostArray, Session};
use tessera_host::transport::Channel;

const WORKERS: usize = 4;

/// The firmware under QEMU with UART0 on a pty (the suite's helper).
#[path = "../tests/suite/common/pty_board.rs"]
mod pty_board;

/// The median time of `runs` runs of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

/// `f` timed beside a memcpy of `bytes` (the baseline every copy is held to), the two
/// alternating so that a slower stretch of this shared machine weighs on both: the pair
/// (memcpy's time, `f`'s time) whose ratio is the median of `runs` (after one warm-up of
/// each, which touches every page).
fn beside_memcpy(bytes: usize, runs: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    let from = vec![1u8; bytes];
    let mut to = vec![0u8; bytes];
    to.copy_from_slice(&from);
    f();
    let mut pairs: Vec<(Duration, Duration)> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            to.copy_from_slice(black_box(&from));
            black_box(&to);
            let base = start.elapsed();
            let start = Instant::now();
            f();
            (base, start.elapsed())
        })
        .collect();
    let ratio = |(base, time): &(Duration, Duration)| time.as_secs_f64() / base.as_secs_f64();
    pairs.sort_by(|a, b| ratio(a).total_cmp(&ratio(b)));
    pairs[pairs.len() / 2]
}

fn calls(name: &str, session: &Session) {
    let add_one = session.get_function("add_one").unwrap();
    let one = |worker: Option<usize>| {
        let r = session.call(&add_one, &[CallArg::Int(1)]).unwrap();
        match worker {
            Some(w) => session.sync_worker(w).unwrap(),
            None => session.sync_all().unwrap(),
        }
        drop(r);
    };
    for _ in 0..100 {
        one(None);
    }
    let w0 = median(2001, || one(Some(0)));
    let all = median(2001, || one(None));
    println!(
        "{name:>8}  call + sync worker 0: {:8.1} µs   call + sync all {WORKERS}: {:8.1} µs",
        micros(w0),
        micros(all)
    );
    // Pipelined: 2,000 calls (each result dropped, which frees it on every worker), then
    // one sync of worker 0 — per call, beside the round trip above (one call + sync).
    let pipelined = median(11, || {
        for _ in 0..PIPELINED {
            drop(session.call(&add_one, &[CallArg::Int(1)]).unwrap());
        }
        session.sync_worker(0).unwrap();
    });
    session.sync_all().unwrap();
    let per_call = micros(pipelined) / PIPELINED as f64;
    println!(
        "{name:>8}  {PIPELINED} pipelined calls, then sync worker 0: {per_call:6.2} µs per call = {:4.2} of a call + sync   (target: ≤ 2 µs on threads, ≤ 8 µs in child processes)",
        per_call / micros(w0)
    );
}

/// Calls sent before one sync, as TVM Disco's pipelined benchmark does.
const PIPELINED: usize = 2000;

fn copies(name: &str, session: &Session, sizes: &[usize]) {
    for &bytes in sizes {
        let runs = if bytes >= 64 << 20 { 7 } else { 21 };
        let values: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
        let array = HostArray::from_u8(&[bytes as u32], &values).unwrap();
        let register = session.empty(DataType::U8, &[bytes as u32]).unwrap();
        let mut host = HostArray::from_u8(&[bytes as u32], &vec![0; bytes]).unwrap();
        let to = beside_memcpy(bytes, runs, || {
            session.copy_to_worker0_into(&array, &register).unwrap();
            session.sync_worker(0).unwrap();
        });
        let from = beside_memcpy(bytes, runs, || {
            session
                .copy_from_worker0_into(&register, &mut host)
                .unwrap();
            black_box(&host);
        });
        assert_eq!(host.bytes(), array.bytes(), "the copies arrived whole");
        let fresh_to = beside_memcpy(bytes, runs, || {
            black_box(session.copy_to_worker0(&array).unwrap());
            session.sync_worker(0).unwrap();
        });
        let fresh_from = beside_memcpy(bytes, runs, || {
            black_box(session.copy_from_worker0(&register).unwrap());
        });
        let ratio = |(base, time): (Duration, Duration)| base.as_secs_f64() / time.as_secs_f64();
        println!(
            "{name:>8}  {:>7} KiB  to worker 0: {:6.2} GB/s ({:4.2}× memcpy)   from worker 0: {:6.2} GB/s ({:4.2}× memcpy)   memcpy {:6.2} GB/s   (allocating: {:4.2}× / {:4.2}×)",
            bytes >> 10,
            gbps(bytes, to.1),
            ratio(to),
            gbps(bytes, from.1),
            ratio(from),
            gbps(bytes, to.0),
            ratio(fresh_to),
            ratio(fresh_from),
        );
    }
}

fn allreduce(name: &str, session: &Session) {
    let (base, time) = allreduce_beside_memcpy(session, 16 << 20, 11);
    println!(
        "{name:>8}  allreduce 16 MiB f32 × {WORKERS}: {:8.1} ms = {:5.1}× one 16 MiB memcpy ({:.2} ms)   (target on threads: ≤ 3×)",
        time.as_secs_f64() * 1e3,
        time.as_secs_f64() / base.as_secs_f64(),
        base.as_secs_f64() * 1e3
    );
    // A small allreduce: its time is the round trips to the workers, not the bytes.
    let (base, time) = allreduce_beside_memcpy(session, 4 << 10, 2001);
    println!(
        "{name:>8}  allreduce 4 KiB f32 × {WORKERS}:  {:8.1} µs   (one 4 KiB memcpy: {:.3} µs)   (target on threads: ≤ 20 µs)",
        micros(time),
        micros(base)
    );
}

/// An allreduce (sum) of `bytes` of f32 on every worker, in alternation with a memcpy of
/// as many bytes: the medians of `runs` of each (memcpy's, the allreduce's).
fn allreduce_beside_memcpy(session: &Session, bytes: usize, runs: usize) -> (Duration, Duration) {
    let elements = (bytes / 4) as u32;
    let src = session.empty(DataType::F32, &[elements]).unwrap();
    let dst = session.empty(DataType::F32, &[elements]).unwrap();
    session.sync_all().unwrap();
    beside_memcpy(bytes, runs, || {
        session
            .allreduce(&src, &dst, ReduceOp::Sum, Scope::Global)
            .unwrap();
    })
}

fn firmware() -> Option<PathBuf> {
    let path = std::env::var_os("TESSERA_FIRMWARE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/thumbv7em-none-eabihf/firmware/tessera-firmware")
        });
    path.exists().then_some(path)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_tessera"));
    for (name, placement) in [
        ("thread", Placement::Thread),
        ("process", Placement::Process(exe)),
    ] {
        let session = Session::new(&placement, WORKERS, 1, 192 << 20).unwrap();
        calls(name, &session);
        copies(name, &session, &[4 << 10, 1 << 20, 64 << 20]);
        allreduce(name, &session);
    }
    match firmware() {
        Some(firmware) => emulated(&firmware),
        None => println!("    qemu  no firmware built: not measured"),
    }
}

/// Register `register` of `session`, `bytes` long, copied to worker 0 and back: the median
/// time of `runs` copies each way.
fn copies_both_ways(session: &Session, bytes: usize, runs: usize) -> (Duration, Duration) {
    let values = vec![7u8; bytes];
    let array = HostArray::from_u8(&[bytes as u32], &values).unwrap();
    let register = session.empty(DataType::U8, &[bytes as u32]).unwrap();
    let mut host = HostArray::from_u8(&[bytes as u32], &vec![0; bytes]).unwrap();
    let to = median(runs, || copy_to(session, &array, &register));
    let from = median(runs, || {
        session
            .copy_from_worker0_into(&register, &mut host)
            .unwrap();
    });
    assert_eq!(host.bytes(), array.bytes(), "the copies arrived whole");
    (to, from)
}

fn copy_to(session: &Session, array: &HostArray, register: &tessera_host::session::Register) {
    session.copy_to_worker0_into(array, register).unwrap();
    session.sync_worker(0).unwrap();
}

fn kib_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1024.0 / d.as_secs_f64()
}

/// The firmware on QEMU boards: on its socket with its bulk file (the QEMU placement), on
/// its socket without the file (every byte in frames), and with UART0 on a pty (the serial
/// placement, frames only): 64 KiB both ways on each, then a 1 MiB copy to worker 0 on each
/// in alternation, and the serial placement's speed as a share of the two others'.
fn emulated(firmware: &Path) {
    let qemu = Session::new(&Placement::Qemu(firmware.to_path_buf()), 1, 1, 0).unwrap();
    let framed = Channel::qemu(firmware, 0).unwrap().without_bulk().unwrap();
    let framed = Session::on(vec![framed], 1).unwrap();
    let board = pty_board::PtyBoard::start(firmware);
    let serial =
        Session::new(&pty_board::placement(std::slice::from_ref(&board)), 1, 1, 0).unwrap();
    let sessions = [
        ("qemu", "socket, bulk file", &qemu),
        ("qemu", "socket, frames", &framed),
        ("serial", "pty, frames", &serial),
    ];
    let bytes = 64 << 10;
    // A UART and an emulator: the median of a few copies each way.
    for (name, path, session) in sessions {
        let (to, from) = copies_both_ways(session, bytes, 5);
        let target = if path == "socket, bulk file" {
            "   (target: 1024 KiB/s)"
        } else {
            ""
        };
        println!(
            "{name:>8}  64 KiB  to worker 0: {:7.1} KiB/s   from worker 0: {:7.1} KiB/s   ({path}){target}",
            kib_per_s(bytes, to),
            kib_per_s(bytes, from)
        );
    }
    let bytes = 1 << 20;
    let array = HostArray::from_u8(&[bytes as u32], &vec![3u8; bytes]).unwrap();
    let registers: Vec<_> = (sessions.iter())
        .map(|(_, _, s)| s.empty(DataType::U8, &[bytes as u32]).unwrap())
        .collect();
    // Alternating, so that a slower stretch of this shared machine weighs on all three;
    // the run whose serial copy took the median time.
    let mut runs: Vec<Vec<Duration>> = (0..3)
        .map(|_| {
            (sessions.iter().zip(&registers))
                .map(|((_, _, session), register)| {
                    let start = Instant::now();
                    copy_to(session, &array, register);
                    start.elapsed()
                })
                .collect()
        })
        .collect();
    runs.sort_by_key(|times| times[2]);
    let times = &runs[runs.len() / 2];
    let speed = |i: usize| kib_per_s(bytes, times[i]);
    println!(
        "   1 MiB  to worker 0: qemu (socket, bulk file) {:9.1} KiB/s   qemu (socket, frames) {:6.1} KiB/s   serial (pty, frames) {:6.1} KiB/s",
        speed(0),
        speed(1),
        speed(2)
    );
    println!(
        "          serial = {:.2e}× qemu's placement (target: at least 0.80×), {:4.2}× qemu's socket in frames",
        speed(2) / speed(0),
        speed(2) / speed(1)
    );
}
