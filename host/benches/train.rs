//! Training speed beside its physical limit, measured in the same run: each job trained by
//! `tessera train`'s library call on device threads (one in child processes), next to the
//! baseline — the same model
//! trained over the same samples, step for step, by a plain single-threaded Rust loop over
//! whole batches as matrices (forward, softmax cross-entropy, backward, SGD with momentum;
//! no runtime, no threads, no copies). Prints samples per second of both and the ratio
//! (1.0× = as fast as the plain loop on one core).
//!
//! `cargo bench -p tessera-host --bench train [-- --steps N]`. Jobs: the default job (4
//! replicas, 2 features → 24 hidden → 3 classes), a 64 → 64 → 10 job on generated data,
//! both again with the batch's 32 samples per replica as one micro-batch of 32
//! (`--micro-batch-size 32 --accumulation 1`: the same math), the default job on one
//! replica, and the default job in child processes — beside the loop, then beside the same
//! job on device threads, trained in alternation, alone and again with a busy loop on every
//! core beside them (a loaded machine); last, a fixed step of 256 samples on
//! 64 replicas beside the same step on one (the runtime's cost per replica; its devices
//! run the replicas as lanes, a device per core), the limit of a device walk per replica
//! beside the same step on one (one replica's share of the step trained alone, times the
//! cores: the replicas' walks with nothing between them — what a runtime that walks each
//! replica apart could reach at best, as it did before lanes), and the
//! runtime's cost per replica per update (a batch's weight update) worked out from the
//! first two. Each figure is the median of three runs.

use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tessera_core::grouping::CommGroup;
use tessera_host::runtime::Placement;
use tessera_host::train::data::Dataset;
use tessera_host::train::{train, DataSource, TrainJob};

/// Runs of each measurement; the median is printed.
const RUNS: usize = 3;

fn main() {
    let steps = steps_from_args();
    let dir = std::env::temp_dir().join(format!("tessera-bench-train-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let wide = dir.join("wide.safetensors");
    let wide_data = generated(4096, 64, 10, 7);
    write_dataset(&wide, &wide_data);
    println!(
        "training beside a plain single-threaded loop ({steps} steps; device threads unless named)"
    );
    println!(
        "{:<34} {:>14} {:>14} {:>8}",
        "job", "tessera/s", "baseline/s", "ratio"
    );
    let default = default_job(steps);
    let spirals = Dataset::spirals(3000, 3, default.seed).unwrap();
    let default_speed = compare("default (4 replicas, 2→24→3)", &default, &spirals);
    let wide_job = TrainJob {
        hidden: 64,
        data: DataSource::File(wide.clone()),
        ..default_job(steps)
    };
    let wide_speed = compare("64→64→10 (4 replicas)", &wide_job, &wide_data);
    // The same samples per update, as one micro-batch of 32 per replica.
    let batched = |job: &TrainJob| TrainJob {
        micro_batch_size: 32,
        accumulation: job.accumulation / 32,
        ..job.clone()
    };
    compare("default, micro-batch 32", &batched(&default), &spirals);
    compare("64→64→10, micro-batch 32", &batched(&wide_job), &wide_data);
    let single = TrainJob {
        replicas: 1,
        comm: CommGroup::None,
        output_comm: CommGroup::None,
        ..default_job(steps)
    };
    compare("default on 1 replica", &single, &spirals);
    let processes = TrainJob {
        placement: Placement::Process(env!("CARGO_BIN_EXE_tessera").into()),
        ..default_job(steps)
    };
    compare("default in child processes", &processes, &spirals);
    versus("child processes vs threads", &processes, &default);
    {
        // Every core busy with other work (a loaded machine): how each placement's waits
        // share the cores (see `transport::contention`).
        let _busy = BusyCores::start(cores());
        versus("  the same, every core busy", &processes, &default);
    }
    scaling(steps);
    println!("\nthe step inputs' value check (core::finite) beside the step it is part of");
    println!(
        "{:<34} {:>14} {:>14} {:>8}",
        "job", "check ns", "step ns", "share"
    );
    input_check("default (4 replicas, 2→24→3)", &default, 2, default_speed);
    input_check("64→64→10 (4 replicas)", &wide_job, 64, wide_speed);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The time the runtime's check of a step's `f32` inputs takes for `job` (samples of
/// `features` values), beside the step's time at `speed` samples per second (measured
/// above in this run).
fn input_check(name: &str, job: &TrainJob, features: usize, speed: f64) {
    let samples = job.batches_per_step * job.accumulation * job.micro_batch_size * job.replicas;
    let inputs: Vec<u8> = (0..samples * features)
        .flat_map(|i| (i as f32 * 1e-3).to_le_bytes())
        .collect();
    const REPS: u32 = 2000;
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        for _ in 0..REPS {
            black_box(tessera_core::finite::first_unfit(black_box(&inputs)));
        }
        runs.push(start.elapsed().as_secs_f64() / f64::from(REPS));
    }
    let check = median(runs);
    let step = samples as f64 / speed;
    println!(
        "{name:<34} {:>14} {:>14} {:>7.2}%",
        format!("{:.0}", check * 1e9),
        format!("{:.0}", step * 1e9),
        100.0 * check / step
    );
}

/// The machine's cores.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Threads that keep `n` cores busy (a loop of spin hints) until dropped.
struct BusyCores {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyCores {
    fn start(n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for BusyCores {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// `--steps N` from the command line (cargo bench passes `--bench` too), else 400.
fn steps_from_args() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--steps")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(400)
}

/// `tessera train`'s defaults, for `steps` steps, without progress bar.
fn default_job(steps: usize) -> TrainJob {
    TrainJob {
        steps,
        ..TrainJob::default()
    }
}

/// Trains `job` and the baseline on `data` in alternation and prints their medians;
/// returns `job`'s (samples per second).
fn compare(name: &str, job: &TrainJob, data: &Dataset) -> f64 {
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..RUNS {
        let report = train(job).expect("the job trains and passes its checks");
        ours.push(report.samples_per_second);
        theirs.push(baseline(job, data));
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "{name:<34} {:>14} {:>14} {:>7.2}×",
        format!("{:.0}", ours),
        format!("{:.0}", theirs),
        ours / theirs
    );
    ours
}

/// Trains `job` and `baseline` (another placement of it) in alternation and prints their
/// medians.
fn versus(name: &str, job: &TrainJob, baseline: &TrainJob) {
    let speed = |job: &TrainJob| train(job).expect("the job trains").samples_per_second;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..RUNS {
        ours.push(speed(job));
        theirs.push(speed(baseline));
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "{name:<34} {:>14} {:>14} {:>7.2}×",
        format!("{ours:.0}"),
        format!("{theirs:.0}"),
        ours / theirs
    );
}

/// A fixed step of 256 samples (2 batches of 128) on 64 replicas beside the same step on
/// one: how the runtime's cost per replica grows; then how far a device walk per replica
/// could go at best.
fn scaling(steps: usize) {
    let fixed = |replicas: usize| TrainJob {
        replicas,
        comm: CommGroup::All,
        output_comm: CommGroup::All,
        accumulation: 128 / replicas,
        ..default_job(steps)
    };
    // The limit of walking each replica's batches apart: one replica on a replica's share
    // of the 64-replica step (2 micro-batches a batch, so nothing to exchange), as many
    // samples as the 64-replica runs, times the cores — the 64 replicas' walks spread over
    // every core with nothing between them: no exchange, no message, no wait.
    let share = TrainJob {
        replicas: 1,
        steps: steps * 64,
        ..fixed(64)
    };
    // The three trained in turn, run after run: a VM whose cores slow down for a while
    // slows all three alike.
    let speed = |job: &TrainJob| train(job).expect("the job trains").samples_per_second;
    let (mut ones, mut manys, mut shares) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        ones.push(speed(&fixed(1)));
        manys.push(speed(&fixed(64)));
        shares.push(speed(&share));
    }
    let (one, many) = (median(ones), median(manys));
    let apart = median(shares) * cores() as f64;
    println!(
        "{:<34} {:>14} {:>14} {:>7.2}×",
        "256 per step: 64 replicas vs 1",
        format!("{many:.0}"),
        format!("{one:.0}"),
        many / one
    );
    println!(
        "{:<34} {:>14} {:>14} {:>7.2}×",
        format!("  walked apart at best, {} cores", cores()),
        format!("{apart:.0}"),
        format!("{one:.0}"),
        apart / one
    );
    // The runtime's cost per replica per update (a batch: one weight update): the time of
    // a step on 64 replicas beyond the time of the same step on one, divided by the 64
    // replicas and the step's updates.
    let job = fixed(64);
    let samples =
        (job.replicas * job.accumulation * job.micro_batch_size * job.batches_per_step) as f64;
    let seconds = |speed: f64| samples / speed.max(1e-9);
    let per_update =
        (seconds(many) - seconds(one)) / job.replicas as f64 / job.batches_per_step as f64;
    println!(
        "{:<34} {:>14}",
        "  runtime per replica per update",
        format!("{:.1} µs", per_update * 1e6)
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Samples per second of the plain loop over `job`'s steps: every batch is
/// `replicas × accumulation` samples, taken in order from `data` as the job takes them.
fn baseline(job: &TrainJob, data: &Dataset) -> f64 {
    let mut model = Plain::new(data.features, job.hidden, data.classes, job.seed);
    let batch = job.replicas * job.accumulation * job.micro_batch_size;
    let mut at = 0;
    let start = Instant::now();
    for _ in 0..job.steps * job.batches_per_step {
        if at + batch > data.len() {
            at = 0;
        }
        let x = &data.inputs[at * data.features..(at + batch) * data.features];
        let labels = &data.labels[at..at + batch];
        model.batch(x, labels, job);
        at += batch;
    }
    let seconds = start.elapsed().as_secs_f64();
    black_box(&model);
    (job.steps * job.batches_per_step * batch) as f64 / seconds.max(1e-9)
}

/// The job's perceptron, trained by plain loops: `x → W1 → +b1 → ReLU → dropout → W2 →
/// +b2 → softmax cross-entropy`, the mean gradient of a batch, SGD with momentum.
#[derive(Debug)]
struct Plain {
    sizes: (usize, usize, usize),
    /// `w1` `[h, f]`, `b1`, `w2` `[c, h]`, `b2`.
    weights: [Vec<f32>; 4],
    /// Their momenta, in the same order.
    momenta: [Vec<f32>; 4],
    /// Their gradients of the batch, in the same order.
    grads: [Vec<f32>; 4],
    hidden: Vec<f32>,
    mask: Vec<f32>,
    logits: Vec<f32>,
    rng: u64,
}

impl Plain {
    fn new(f: usize, h: usize, c: usize, seed: u64) -> Self {
        let shapes = [h * f, h, c * h, c];
        let mut rng = seed | 1;
        let weights = shapes.map(|n| {
            (0..n)
                .map(|_| (uniform(&mut rng) - 0.5) * 0.5)
                .collect::<Vec<f32>>()
        });
        Self {
            sizes: (f, h, c),
            weights,
            momenta: shapes.map(|n| vec![0.0; n]),
            grads: shapes.map(|n| vec![0.0; n]),
            hidden: Vec::new(),
            mask: Vec::new(),
            logits: Vec::new(),
            rng,
        }
    }

    /// One batch: forward, loss gradient, backward, update.
    fn batch(&mut self, x: &[f32], labels: &[i64], job: &TrainJob) {
        let (f, h, c) = self.sizes;
        let n = labels.len();
        self.forward(x, n, job.dropout);
        // Softmax cross-entropy: d logits = (softmax − one-hot) / n, in place.
        for (row, &label) in self.logits.chunks_exact_mut(c).zip(labels) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut total = 0.0;
            for v in row.iter_mut() {
                *v = (*v - max).exp();
                total += *v;
            }
            for v in row.iter_mut() {
                *v /= total * n as f32;
            }
            row[label as usize] -= 1.0 / n as f32;
        }
        for g in &mut self.grads {
            g.fill(0.0);
        }
        let [gw1, gb1, gw2, gb2] = &mut self.grads;
        let w2 = &self.weights[2];
        let mut dh = vec![0.0f32; h];
        for i in 0..n {
            let (dl, hid) = (&self.logits[i * c..][..c], &self.hidden[i * h..][..h]);
            dh.fill(0.0);
            for k in 0..c {
                gb2[k] += dl[k];
                axpy(&mut gw2[k * h..][..h], dl[k], hid);
                axpy(&mut dh, dl[k], &w2[k * h..][..h]);
            }
            let (mask, xi) = (&self.mask[i * h..][..h], &x[i * f..][..f]);
            for j in 0..h {
                let dz = if hid[j] > 0.0 { dh[j] * mask[j] } else { 0.0 };
                gb1[j] += dz;
                axpy(&mut gw1[j * f..][..f], dz, xi);
            }
        }
        for ((w, v), g) in self
            .weights
            .iter_mut()
            .zip(&mut self.momenta)
            .zip(&self.grads)
        {
            for ((w, v), g) in w.iter_mut().zip(v.iter_mut()).zip(g) {
                *v = job.momentum * *v + g;
                *w -= job.learning_rate * *v;
            }
        }
    }

    /// The hidden activations (after ReLU and dropout) and the logits of `n` samples.
    fn forward(&mut self, x: &[f32], n: usize, dropout: f32) {
        let (f, h, c) = self.sizes;
        let [w1, b1, w2, b2] = &self.weights;
        self.hidden.resize(n * h, 0.0);
        self.mask.resize(n * h, 0.0);
        self.logits.resize(n * c, 0.0);
        let keep = 1.0 / (1.0 - dropout);
        for i in 0..n {
            let xi = &x[i * f..][..f];
            for j in 0..h {
                let z = b1[j] + dot(&w1[j * f..][..f], xi);
                let m = if uniform(&mut self.rng) < dropout {
                    0.0
                } else {
                    keep
                };
                self.mask[i * h + j] = m;
                self.hidden[i * h + j] = z.max(0.0) * m;
            }
            let hid = &self.hidden[i * h..][..h];
            for k in 0..c {
                self.logits[i * c + k] = b2[k] + dot(&w2[k * h..][..h], hid);
            }
        }
    }
}

/// The device's own dot product (eight lanes in a fixed order), so that both sides run
/// the same arithmetic and the ratio measures the runtime, not a kernel.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    tessera_firmware_sim::dot(a, b)
}

fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// A uniform draw in `[0, 1)` (xorshift; the baseline's dropout needs speed, not quality).
fn uniform(state: &mut u64) -> f32 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 40) as f32 / (1u64 << 24) as f32
}

/// `n` samples of `features` values in `[-1, 1)`, labelled by the largest of `classes`
/// fixed random projections (learnable by the job's model).
fn generated(n: usize, features: usize, classes: usize, seed: u64) -> Dataset {
    let mut rng = seed | 1;
    let projections: Vec<f32> = (0..classes * features)
        .map(|_| uniform(&mut rng) * 2.0 - 1.0)
        .collect();
    let inputs: Vec<f32> = (0..n * features)
        .map(|_| uniform(&mut rng) * 2.0 - 1.0)
        .collect();
    let labels = inputs
        .chunks_exact(features)
        .map(|x| {
            let scores = projections.chunks_exact(features).map(|p| dot(p, x));
            let best = scores
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map_or(0, |(k, _)| k);
            best as i64
        })
        .collect();
    Dataset {
        inputs,
        labels,
        features,
        classes,
        label_type: tessera_core::dtype::DataType::I32,
    }
}

/// Writes `data` as the safetensors file `tessera train --data` reads.
fn write_dataset(path: &Path, data: &Dataset) {
    use safetensors::tensor::{Dtype, TensorView};
    let inputs: Vec<u8> = data.inputs.iter().flat_map(|v| v.to_le_bytes()).collect();
    let labels: Vec<u8> = data
        .labels
        .iter()
        .flat_map(|&l| (l as i32).to_le_bytes())
        .collect();
    let n = data.len();
    let tensors = [
        (
            "inputs",
            TensorView::new(Dtype::F32, vec![n, data.features], &inputs).expect("inputs"),
        ),
        (
            "labels",
            TensorView::new(Dtype::I32, vec![n], &labels).expect("labels"),
        ),
    ];
    let bytes = safetensors::serialize(tensors, None).expect("a safetensors file");
    std::fs::write(path, bytes).expect("the data file is written");
}
