//! The session across MPI ranks beside MPI itself and beside one host, in the same run. Run
//! it under mpirun (the test command's environment), e.g.:
//!
//! ```sh
//! cargo bench -p tessera-host --features mpi --bench ranks --no-run
//! mpirun -np 2 target/release/deps/ranks-*[!.d] # (the file cargo printed)
//! ```
//!
//! 4 workers in threads, 2 per rank on 2 ranks. Rank 0 prints: an allreduce (sum) of
//! 16 MiB of f32 per worker across the ranks beside MPI's own allreduce of the same bytes
//! between the ranks (target ≥ 0.8×); a broadcast of 16 MiB from worker 0 beside MPI's
//! broadcast of the bytes; and call + sync of all workers across the ranks beside the same
//! on one host (the 4 workers in threads of rank 0, after the cross-rank session has
//! ended). Each figure is the median of several runs.

use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use tessera_core::dtype::DataType;
use tessera_host::instance::{Instances, Mpi};
use tessera_host::placement;
use tessera_host::runtime::Placement;
use tessera_host::session::collective::{ReduceOp, Scope};
use tessera_host::session::{CallArg, Session};

const WORKERS: usize = 4;
const ELEMENTS: usize = 4 << 20;
const MEMORY: usize = 3 * ELEMENTS * 4 + (8 << 20);
const RUNS: usize = 7;
const CALLS: usize = 200;

/// The median time of `RUNS` runs of `f`.
fn median(mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

fn main() {
    let (_guard, mpi) = Mpi::initialize_for_threads().expect("MPI for threads");
    let leader = mpi.rank() == 0;
    let (raw, raw_broadcast) = (raw_allreduce(), raw_broadcast());
    let session = Session::across_ranks(&mpi, &Placement::Thread, WORKERS, 1, MEMORY)
        .expect("a session across the ranks");
    // Only rank 0 has the controller; the others have served it by now.
    let Some(session) = session else {
        return;
    };
    let across = measure(&session);
    drop(session);
    let local = placement::open(
        &Placement::Thread,
        0..WORKERS as u32,
        MEMORY,
        placement::Serving::Alongside,
    )
    .expect("workers");
    let one_host = Session::on(local, 1).expect("a session on one host");
    let alone = measure(&one_host);
    let mib = (ELEMENTS * 4) >> 20;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "session across {} ranks, {WORKERS} workers in threads ({} per rank), median of {RUNS}",
        mpi.size(),
        WORKERS / mpi.size()
    );
    println!(
        "allreduce of {mib} MiB of f32 per worker: across ranks {:7.2} ms ({:.2}x of MPI)   MPI's own {:7.2} ms   one host {:7.2} ms",
        ms(across.allreduce),
        raw.as_secs_f64() / across.allreduce.as_secs_f64(),
        ms(raw),
        ms(alone.allreduce),
    );
    println!(
        "broadcast of {mib} MiB from worker 0: across ranks {:7.2} ms ({:.2}x of MPI)   MPI's own {:7.2} ms   one host {:7.2} ms",
        ms(across.broadcast),
        raw_broadcast.as_secs_f64() / across.broadcast.as_secs_f64(),
        ms(raw_broadcast),
        ms(alone.broadcast),
    );
    println!(
        "call + sync of all workers: across ranks {:7.1} us   one host {:7.1} us ({:.2}x)",
        across.call.as_secs_f64() * 1e6,
        alone.call.as_secs_f64() * 1e6,
        alone.call.as_secs_f64() / across.call.as_secs_f64(),
    );
    assert!(leader);
}

/// MPI's allreduce (sum) of `ELEMENTS` f32 between the ranks, into a reused buffer.
fn raw_allreduce() -> Duration {
    let world = SimpleCommunicator::world();
    let send = vec![1.0f32; ELEMENTS];
    let mut receive = vec![0.0f32; ELEMENTS];
    median(|| world.all_reduce_into(&send[..], &mut receive[..], SystemOperation::sum()))
}

/// MPI's broadcast of `ELEMENTS` f32 from rank 0, into a reused buffer.
fn raw_broadcast() -> Duration {
    let world = SimpleCommunicator::world();
    let mut buffer = vec![1.0f32; ELEMENTS];
    median(|| world.process_at_rank(0).broadcast_into(&mut buffer[..]))
}

/// What [`measure`] times.
struct Figures {
    allreduce: Duration,
    broadcast: Duration,
    call: Duration,
}

/// On `session`: the median allreduce of `ELEMENTS` f32 per worker and broadcast of as
/// many from worker 0, and the mean call + sync of all workers.
fn measure(session: &Session) -> Figures {
    let src = session
        .empty(DataType::F32, &[ELEMENTS as u32])
        .expect("src");
    let dst = session
        .empty(DataType::F32, &[ELEMENTS as u32])
        .expect("dst");
    let allreduce = median(|| {
        session
            .allreduce(&src, &dst, ReduceOp::Sum, Scope::Global)
            .expect("allreduce")
    });
    let broadcast = median(|| {
        session
            .broadcast_from_worker0(&src, &dst, Scope::Global)
            .expect("broadcast")
    });
    let add_one = session.get_function("add_one").expect("add_one");
    let start = Instant::now();
    for _ in 0..CALLS {
        let _out = session.call(&add_one, &[CallArg::Int(1)]).expect("call");
        session.sync_all().expect("sync");
    }
    Figures {
        allreduce,
        broadcast,
        call: start.elapsed() / CALLS as u32,
    }
}
