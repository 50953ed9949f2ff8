//! Requests per second and payload throughput over every placement of a device: a thread
//! in this process, a child process on stdio, a training runtime's child process (a
//! process share, on message rings in shared memory), and the firmware under QEMU (when built:
//! `$TESSERA_FIRMWARE` or the workspace's release build), for 1 KiB and 1 MiB payloads
//! written to and read from a remote slot.
//!
//! `cargo bench -p tessera-host --bench transport`. Where the host maps the device's memory
//! (threads, child processes) a slot's bytes move in place, around one request; a bare
//! request (`GetSeed`, `request` below) is one round trip, so its time is the latency
//! (requests/s = 1 / time).

use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tessera_core::transfer::RemoteSlots;
use tessera_core::wire::endpoint::GetSeed;
use tessera_host::transport::{Channel, ChannelSlots};

const SLOT: u16 = 1;
/// Payloads over the host placements.
const SIZES: &[usize] = &[1 << 10, 1 << 20];
/// Payloads over QEMU, whose UART model takes in about 18 KiB/s: a 1 MiB write would take
/// a minute per iteration.
const QEMU_SIZES: &[usize] = &[1 << 10, 64 << 10];

fn placements() -> Vec<(&'static str, Channel)> {
    let exe = Path::new(env!("CARGO_BIN_EXE_tessera"));
    let mut all = vec![
        ("in_process", Channel::in_process(0, 4 << 20, None).unwrap()),
        (
            "child_process",
            Channel::child_process(exe, 0, 4 << 20).unwrap(),
        ),
        (
            "process_share",
            Channel::device_processes(exe, std::slice::from_ref(&(0..1)), 4 << 20)
                .unwrap()
                .remove(0),
        ),
    ];
    let firmware = std::env::var_os("TESSERA_FIRMWARE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/thumbv7em-none-eabihf/firmware/tessera-firmware")
        });
    if firmware.exists() {
        all.push(("qemu", Channel::qemu(&firmware, 0).unwrap()));
    } else {
        eprintln!("no firmware at {}: QEMU not measured", firmware.display());
    }
    all
}

fn transport(c: &mut Criterion) {
    let mut group = c.benchmark_group("transport");
    group
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    for (name, channel) in placements() {
        let mut channels = [channel];
        let mut slots = ChannelSlots::allocate(&mut channels, SLOT, 1 << 20).unwrap();
        let sizes = if name == "qemu" { QEMU_SIZES } else { SIZES };
        if name == "qemu" {
            group.sample_size(10);
        }
        for &bytes in sizes {
            let payload: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
            let mut back = vec![0u8; bytes];
            // Check the round trip once, whatever the benchmark filter runs below.
            slots.write(0, 0, &payload).unwrap();
            slots.read(0, 0, &mut back).unwrap();
            assert_eq!(back, payload, "{name}: read back what was written");
            group.throughput(Throughput::Bytes(bytes as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("{name}/write"), bytes),
                &bytes,
                |b, _| b.iter(|| slots.write(0, 0, &payload).unwrap()),
            );
            group.bench_with_input(
                BenchmarkId::new(format!("{name}/read"), bytes),
                &bytes,
                |b, _| b.iter(|| slots.read(0, 0, &mut back).unwrap()),
            );
        }
        // The slots' borrow of the channel ends here.
        let [channel] = &mut channels;
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new(name, "request"), |b| {
            b.iter(|| channel.call(&GetSeed).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, transport);
criterion_main!(benches);
