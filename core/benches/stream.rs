//! Step-IO costs: one input + complete pair per replica through the splitter (R = 8), and
//! the checked int64 → int32 narrowing of a 64 MiB input against a plain copy of the same
//! bytes, measured in the same run.
//!
//! `cargo bench -p tessera-core --bench stream`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tessera_core::dtype::{convert_input, DataType};
use tessera_core::stream::{DataFlow, Splitter, UpstreamIo};

const REPLICAS: usize = 8;

/// An upstream that hands out consecutive buffer numbers and accepts every completion.
struct Counter(u32);

impl UpstreamIo for Counter {
    type Buffer = u32;
    type Error = ();

    fn input(&mut self, _: usize, _: usize, _: bool) -> Result<Option<u32>, ()> {
        self.0 = self.0.wrapping_add(1);
        Ok(Some(self.0))
    }
    fn input_complete(&mut self, _: usize) -> Result<(), ()> {
        Ok(())
    }
    fn output(&mut self, _: usize, _: usize) -> Result<Option<u32>, ()> {
        Ok(Some(0))
    }
    fn output_complete(&mut self, _: usize) -> Result<(), ()> {
        Ok(())
    }
}

fn splitter_pairs(c: &mut Criterion) {
    // A run long enough never to reach the per-replica cap while measuring.
    let flow = DataFlow::new(usize::MAX, 1).unwrap();
    let mut splitter = Splitter::<u32, 4, REPLICAS, 4>::new(REPLICAS, flow).unwrap();
    let tensor = splitter.add_input(1024, false).unwrap();
    let mut io = Counter(0);
    let mut group = c.benchmark_group("splitter");
    group.throughput(Throughput::Elements(REPLICAS as u64));
    group.bench_function("in_complete_pair_per_replica_r8", |b| {
        b.iter(|| {
            for replica in 0..REPLICAS {
                let buffer = splitter.input(&mut io, tensor, replica, false).unwrap();
                black_box(buffer);
                splitter.input_complete(&mut io, tensor, replica).unwrap();
            }
        })
    });
    group.finish();
}

fn narrowing(c: &mut Criterion) {
    const BYTES: usize = 64 << 20;
    // i64 storage keeps the byte views aligned for the fast path.
    let values: Vec<i64> = (0..BYTES / 8)
        .map(|i| (i as i64 % 1_000_000) - 500_000)
        .collect();
    let src: &[u8] = bytemuck::cast_slice(&values);
    let mut narrowed = vec![0i32; BYTES / 8];
    let mut copied = vec![0i64; BYTES / 8];
    let mut group = c.benchmark_group("narrow_64MiB");
    group.throughput(Throughput::Bytes(BYTES as u64));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(4));
    group.bench_function("copy", |b| {
        b.iter(|| bytemuck::cast_slice_mut::<i64, u8>(&mut copied).copy_from_slice(black_box(src)))
    });
    group.bench_function("int64_to_int32_checked", |b| {
        let dst = bytemuck::cast_slice_mut::<i32, u8>(&mut narrowed);
        b.iter(|| convert_input("x", DataType::I64, black_box(src), DataType::I32, dst).unwrap())
    });
    // The same conversion from a misaligned source, element by element.
    let mut shifted = vec![0u8; BYTES + 1];
    shifted[1..].copy_from_slice(src);
    group.bench_function("int64_to_int32_checked_unaligned", |b| {
        let dst = bytemuck::cast_slice_mut::<i32, u8>(&mut narrowed);
        b.iter(|| {
            convert_input(
                "x",
                DataType::I64,
                black_box(&shifted[1..]),
                DataType::I32,
                dst,
            )
            .unwrap()
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500));
    targets = splitter_pairs, narrowing
}
criterion_main!(benches);
