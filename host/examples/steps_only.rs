// Scratch profiling harness (not committed): runtime steps alone.
use std::time::Instant;
use tessera_core::grouping::CommGroup;
use tessera_host::runtime::{Placement, Runtime, StepIo};
use tessera_host::train::data::Dataset;
use tessera_host::train::{model, TrainJob, DEVICE_MEMORY};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    sizes();
    let replicas: usize = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(4);
    let mbs: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let steps: usize = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let hidden: usize = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(24);
    let mut job = TrainJob {
        replicas,
        micro_batch_size: mbs,
        accumulation: a.get(5).and_then(|s| s.parse().ok()).unwrap_or(32 / mbs),
        hidden,
        ..TrainJob::default()
    };
    if a.get(6).is_some_and(|s| s == "none") {
        job.comm = CommGroup::None;
        job.output_comm = CommGroup::None;
    }
    if replicas == 1 {
        job.comm = CommGroup::None;
        job.output_comm = CommGroup::None;
    }
    let data = Dataset::spirals(3000, 3, 42);
    let program = model::program(&job, 2, 3).unwrap();
    let mut rt = Runtime::prepare(
        program.clone(),
        replicas,
        &match std::env::var("PLACEMENT").as_deref() {
            Ok("process") => Placement::Process("/work/main/target/release/tessera".into()),
            _ => Placement::Thread,
        },
        DEVICE_MEMORY,
    )
    .unwrap();
    if let Ok(n) = std::env::var("NICE") {
        let me = std::process::id();
        let _ = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "for p in $(pgrep -P {me} -x tessera); do renice -n {n} -p $p >/dev/null; done"
            ))
            .status();
    }
    let init = model::initial_weights(&program, replicas, 42).unwrap();
    rt.set_random_seed(42).unwrap();
    rt.weights_from_host(&init).unwrap();
    let per_step = job.batches_per_step * job.accumulation * replicas * mbs;
    let window = rt.window();
    let ios: Vec<StepIo> = (0..16)
        .map(|s| {
            let (i, l) = data
                .share(
                    (s * per_step) % 3000,
                    job.batches_per_step * job.accumulation,
                    replicas,
                    window,
                    mbs,
                )
                .unwrap();
            [
                (model::INPUT.to_string(), i),
                (model::LABELS.to_string(), l),
            ]
            .into()
        })
        .collect();
    let start = Instant::now();
    for s in 0..steps {
        rt.run(&ios[s % 16]).unwrap();
    }
    let t = start.elapsed().as_secs_f64();
    println!(
        "{replicas} replicas mb{mbs} h{hidden}: {:.0} samples/s, {:.1} us/step",
        (steps * per_step) as f64 / t,
        t / steps as f64 * 1e6
    );
}
#[allow(dead_code)]
fn sizes() {
    eprintln!(
        "Request {} Response {} Program {} FromDevice {} ToDevice {}",
        std::mem::size_of::<tessera_core::wire::Request>(),
        std::mem::size_of::<tessera_core::wire::Response>(),
        std::mem::size_of::<tessera_core::program::Program>(),
        std::mem::size_of::<tessera_core::wire::FromDevice>(),
        std::mem::size_of::<tessera_core::wire::ToDevice>()
    );
}
