//! The session across MPI ranks beside the same jobs written by hand with raw MPI, and
//! beside MPI's plain collectives, in the same run. Run it under mpirun (the test command's
//! environment), e.g.:
//!
//! ```sh
//! cargo bench -p tessera-host --features mpi --bench ranks --no-run
//! mpirun -np 2 target/release/deps/ranks-*[!.d] # (the file cargo printed)
//! ```
//!
//! 4 workers in threads, 2 per rank on 2 ranks; each collective at 16 MiB of f32 per worker
//! and at 4 KiB. Rank 0 prints, for each, the session's time and beside it:
//!
//! - **by hand**: the same job under the same rule, written with raw MPI on buffers the
//!   bench owns (2 per rank, standing for the workers): for the allreduce in worker order,
//!   every worker's slices to their ranks (one all-to-all), each rank folding its slice of
//!   every worker's source in worker order in f64, the slices gathered into one worker's
//!   destination (one allgather) and copied into the other's; ranks first, the rank's two
//!   workers summed, `MPI_Allreduce` of that one buffer, copied into each worker; a
//!   broadcast or an allgather, MPI's into one worker's destination, copied into the
//!   other's.
//! - **MPI's own**: MPI's plain collective of one buffer per rank, the same bytes (what
//!   an allreduce of one buffer per rank costs, which neither rule is).
//!
//! The ratios are the baseline's time over the session's (1.00x: as fast). An allgather
//! gathers 4 MiB per worker (16 MiB into each destination). Last, call + sync of all
//! workers across the ranks beside the same on one host (the 4 workers in threads of rank
//! 0, after the cross-rank session has ended). Every figure is a median of several runs.

use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;
use tessera_core::dtype::DataType;
use tessera_host::instance::{Instances, Mpi};
use tessera_host::placement;
use tessera_host::runtime::Placement;
use tessera_host::session::collective::{ReduceOp, ReduceOrder, Scope};
use tessera_host::session::{CallArg, Session};

const WORKERS: usize = 4;
const PER_RANK: usize = 2;
/// f32 elements per worker: 16 MiB, and 4 KiB.
const SIZES: [usize; 2] = [4 << 20, 1 << 10];
const MEMORY: usize = 3 * (16 << 20) + (8 << 20);
const RUNS: usize = 7;
const CALLS: usize = 200;

/// How many times one run repeats a job of `elements`: small ones are timed in batches.
fn repeats(elements: usize) -> usize {
    if elements < 1 << 16 {
        200
    } else {
        1
    }
}

/// The median over `RUNS` runs of the mean time of `reps` calls of `f`.
fn median(reps: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..reps {
                f();
            }
            start.elapsed() / reps as u32
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

/// One collective's baselines, timed on every rank (rank 0's times are printed).
struct ByHand {
    worker_order: Duration,
    ranks_first: Duration,
    allreduce: Duration,
    broadcast_copied: Duration,
    broadcast: Duration,
    allgather_copied: Duration,
    allgather: Duration,
}

/// What the session takes for one size.
struct Figures {
    worker_order: Duration,
    ranks_first: Duration,
    broadcast: Duration,
    allgather: Duration,
}

fn main() {
    let (_guard, mpi) = Mpi::initialize_for_threads().expect("MPI for threads");
    assert_eq!(
        mpi.size() * PER_RANK,
        WORKERS,
        "run it on {} ranks",
        WORKERS / PER_RANK
    );
    let by_hand: Vec<ByHand> = SIZES.iter().map(|&n| by_hand(n)).collect();
    let session = Session::across_ranks(&mpi, &Placement::Thread, WORKERS, 1, MEMORY)
        .expect("a session across the ranks");
    // Only rank 0 has the controller; the others have served it by now.
    let Some(session) = session else {
        return;
    };
    let across: Vec<Figures> = SIZES.iter().map(|&n| measure(&session, n)).collect();
    let call_across = calls(&session);
    drop(session);
    let local = placement::open(
        &Placement::Thread,
        0..WORKERS as u32,
        MEMORY,
        placement::Serving::Alongside,
    )
    .expect("workers");
    let one_host = Session::on(local, 1).expect("a session on one host");
    let call_alone = calls(&one_host);
    println!(
        "session across {} ranks, {WORKERS} workers in threads ({PER_RANK} per rank); \
         median of {RUNS}; (x): the baseline's time over the session's",
        mpi.size(),
    );
    for ((&elements, theirs), ours) in SIZES.iter().zip(&by_hand).zip(&across) {
        let size = size_name(elements * 4);
        let line = |what: &str, ours: Duration, baselines: &[(&str, Duration)]| {
            let mut text = format!("{what:<28} {size:>6}: session {:>9}", time(ours));
            for (name, theirs) in baselines {
                let ratio = theirs.as_secs_f64() / ours.as_secs_f64();
                text += &format!("   {name} {:>9} ({ratio:.2}x)", time(*theirs));
            }
            println!("{text}");
        };
        line(
            "allreduce, worker order",
            ours.worker_order,
            &[
                ("by hand", theirs.worker_order),
                ("MPI's allreduce", theirs.allreduce),
            ],
        );
        line(
            "allreduce, ranks first",
            ours.ranks_first,
            &[
                ("by hand", theirs.ranks_first),
                ("MPI's allreduce", theirs.allreduce),
            ],
        );
        line(
            "broadcast from worker 0",
            ours.broadcast,
            &[
                ("by hand", theirs.broadcast_copied),
                ("MPI's broadcast", theirs.broadcast),
            ],
        );
        line(
            "allgather (size: result)",
            ours.allgather,
            &[
                ("by hand", theirs.allgather_copied),
                ("MPI's allgather", theirs.allgather),
            ],
        );
    }
    println!(
        "call + sync of all workers: across ranks {}   one host {} ({:.2}x)",
        time(call_across),
        time(call_alone),
        call_alone.as_secs_f64() / call_across.as_secs_f64(),
    );
}

fn size_name(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn time(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} us")
    }
}

/// The elements rank `k` of `ranks` combines (the session's split).
fn slice(elements: usize, ranks: usize, k: usize) -> std::ops::Range<usize> {
    elements * k / ranks..elements * (k + 1) / ranks
}

fn counts(values: impl Iterator<Item = usize>) -> (Vec<Count>, Vec<Count>) {
    let counts: Vec<Count> = values.map(|n| n as Count).collect();
    let displs = counts
        .iter()
        .scan(0, |at, &n| {
            let here = *at;
            *at += n;
            Some(here)
        })
        .collect();
    (counts, displs)
}

/// The baselines (module doc) for `elements` f32 per worker, on every rank.
fn by_hand(elements: usize) -> ByHand {
    let world = SimpleCommunicator::world();
    let (ranks, me) = (world.size() as usize, world.rank() as usize);
    let reps = repeats(elements);
    let sources: Vec<Vec<f32>> = (0..PER_RANK)
        .map(|j| vec![(me * PER_RANK + j) as f32 + 0.5; elements])
        .collect();
    let mut dests: Vec<Vec<f32>> = vec![vec![0.0; elements]; PER_RANK];
    // Worker order: slice k of each local source to rank k, folded in worker order in f64.
    let mut send = vec![0f32; elements * PER_RANK];
    let mine = slice(elements, ranks, me);
    let mut receive = vec![0f32; mine.len() * WORKERS];
    let mut combined = vec![0f32; mine.len()];
    let (send_counts, send_displs) =
        counts((0..ranks).map(|k| slice(elements, ranks, k).len() * PER_RANK));
    let (receive_counts, receive_displs) = counts((0..ranks).map(|_| mine.len() * PER_RANK));
    let (gather_counts, gather_displs) =
        counts((0..ranks).map(|k| slice(elements, ranks, k).len()));
    let worker_order = median(reps, || {
        let mut at = 0;
        for k in 0..ranks {
            for source in &sources {
                let part = &source[slice(elements, ranks, k)];
                send[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
        }
        let outgoing = Partition::new(&send[..], &send_counts[..], &send_displs[..]);
        let mut incoming =
            PartitionMut::new(&mut receive[..], &receive_counts[..], &receive_displs[..]);
        world.all_to_all_varcount_into(&outgoing, &mut incoming);
        let n = mine.len();
        for (i, out) in combined.iter_mut().enumerate() {
            let mut acc = f64::from(receive[i]);
            for w in 1..WORKERS {
                acc += f64::from(receive[w * n + i]);
            }
            *out = acc as f32;
        }
        let (first, others) = dests.split_first_mut().expect("workers");
        let mut gathered =
            PartitionMut::new(&mut first[..], &gather_counts[..], &gather_displs[..]);
        world.all_gather_varcount_into(&combined[..], &mut gathered);
        for other in others {
            other.copy_from_slice(first);
        }
    });
    // Ranks first: the rank's workers summed, MPI's allreduce of that, copied out.
    let mut partial = vec![0f32; elements];
    let ranks_first = median(reps, || {
        for (i, p) in partial.iter_mut().enumerate() {
            *p = sources[0][i] + sources[1][i];
        }
        let (first, others) = dests.split_first_mut().expect("workers");
        world.all_reduce_into(&partial[..], &mut first[..], SystemOperation::sum());
        for other in others {
            other.copy_from_slice(first);
        }
    });
    let allreduce = median(reps, || {
        world.all_reduce_into(&sources[0][..], &mut dests[0][..], SystemOperation::sum())
    });
    let root = world.process_at_rank(0);
    let broadcast_copied = median(reps, || {
        let (first, others) = dests.split_first_mut().expect("workers");
        if me == 0 {
            first.copy_from_slice(&sources[0]);
        }
        root.broadcast_into(&mut first[..]);
        for other in others {
            other.copy_from_slice(first);
        }
    });
    let broadcast = median(reps, || root.broadcast_into(&mut dests[0][..]));
    // An allgather of a quarter of `elements` per worker: `elements` in each destination.
    let quarter = elements / WORKERS;
    let mut local = vec![0f32; quarter * PER_RANK];
    let allgather_copied = median(reps, || {
        for (j, source) in sources.iter().enumerate() {
            local[j * quarter..(j + 1) * quarter].copy_from_slice(&source[..quarter]);
        }
        let (first, others) = dests.split_first_mut().expect("workers");
        world.all_gather_into(&local[..], &mut first[..quarter * WORKERS]);
        for other in others {
            other[..quarter * WORKERS].copy_from_slice(&first[..quarter * WORKERS]);
        }
    });
    let allgather = median(reps, || {
        world.all_gather_into(&local[..], &mut dests[0][..quarter * WORKERS])
    });
    ByHand {
        worker_order,
        ranks_first,
        allreduce,
        broadcast_copied,
        broadcast,
        allgather_copied,
        allgather,
    }
}

/// The session's collectives of `elements` f32 per worker (an allgather: a quarter of
/// them per worker).
fn measure(session: &Session, elements: usize) -> Figures {
    let reps = repeats(elements);
    let register = |n: usize| {
        session
            .empty(DataType::F32, &[n as u32])
            .expect("a register")
    };
    let (src, dst) = (register(elements), register(elements));
    let quarter = register(elements / WORKERS);
    let allreduce = |order| {
        median(reps, || {
            session
                .allreduce_in_order(&src, &dst, ReduceOp::Sum, Scope::Global, order)
                .expect("allreduce")
        })
    };
    Figures {
        worker_order: allreduce(ReduceOrder::Workers),
        ranks_first: allreduce(ReduceOrder::RanksFirst),
        broadcast: median(reps, || {
            session
                .broadcast_from_worker0(&src, &dst, Scope::Global)
                .expect("broadcast")
        }),
        allgather: median(reps, || {
            session
                .allgather(&quarter, &dst, Scope::Global)
                .expect("allgather")
        }),
    }
}

/// The mean call + sync of all workers on `session`.
fn calls(session: &Session) -> Duration {
    let add_one = session.get_function("add_one").expect("add_one");
    let start = Instant::now();
    for _ in 0..CALLS {
        let _out = session.call(&add_one, &[CallArg::Int(1)]).expect("call");
        session.sync_all().expect("sync");
    }
    start.elapsed() / CALLS as u32
}
