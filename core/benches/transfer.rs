//! Sharded weights to 8 replicas and back, against a plain `copy_from_slice` of the same
//! bytes measured in the same run (the floor any transfer is judged by).
//!
//! `cargo bench -p tessera-core --bench transfer`; each group reports throughput in bytes
//! of the tensor, so `to_replicas` / `copy` is the ratio to compare.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode, VariableSettings};
use tessera_core::shard::ShardLayout;
use tessera_core::transfer::{InstanceWindow, WeightLayout};

const REPLICAS: usize = 8;
const SIZES: [usize; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20];

fn sharded_weights(c: &mut Criterion) {
    let spec = GroupingSpec::Comm(CommGroup::All);
    let settings = VariableSettings::new(spec, RetrievalMode::OnePerGroup, REPLICAS).unwrap();
    let mut group = c.benchmark_group("sharded_weights_8_replicas");
    for bytes in SIZES {
        // f32 elements, balanced over all 8 replicas.
        let elements = bytes / 4;
        let shard = ShardLayout::balanced(elements, REPLICAS).unwrap();
        let window = InstanceWindow::whole(REPLICAS);
        let layout = WeightLayout::new(settings, elements, 4, Some(shard), window).unwrap();
        let host: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
        let mut back = vec![0u8; bytes];
        let mut slots = vec![vec![0u8; layout.slot_bytes()]; REPLICAS];

        group.throughput(Throughput::Bytes(bytes as u64));
        if bytes >= 16 << 20 {
            group
                .sample_size(10)
                .measurement_time(Duration::from_secs(3));
        } else {
            group
                .sample_size(50)
                .measurement_time(Duration::from_secs(2));
        }
        group.bench_with_input(BenchmarkId::new("copy", bytes), &bytes, |b, _| {
            b.iter(|| back.copy_from_slice(black_box(&host)))
        });
        group.bench_with_input(BenchmarkId::new("to_replicas", bytes), &bytes, |b, _| {
            b.iter(|| {
                layout
                    .to_replicas(black_box(&host), &mut slots[..])
                    .unwrap()
            })
        });
        group.bench_with_input(BenchmarkId::new("to_host", bytes), &bytes, |b, _| {
            b.iter(|| {
                layout
                    .to_host(&mut slots[..], black_box(&mut back))
                    .unwrap()
            })
        });
        assert_eq!(back, host, "the round trip must reproduce the tensor");
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500));
    targets = sharded_weights
}
criterion_main!(benches);
