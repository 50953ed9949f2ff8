//! Weights to host across instances beside the raw MPI collective of the same bytes, in the
//! same run. Run it under mpirun (the test command's environment), e.g.:
//!
//! ```sh
//! cargo bench -p tessera-host --features mpi --bench instances --no-run
//! mpirun -np 2 target/release/deps/instances-*[!.d] # (the file cargo printed)
//! ```
//!
//! 8 replicas, 64 MiB of f32 weights: sharded across all replicas (weights to host ends in
//! an OR-allreduce of 64 MiB) and unsharded with every replica's row returned (ends in an
//! allgather). Rank 0 prints each figure beside the raw collective's, for weights to host
//! into new arrays and into the caller's arrays (reused, as the raw collective reuses its
//! buffer); target ≥ 0.8×.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use mpi::traits::*;

use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
use tessera_core::program::{Layer, Optimizer, Program, Sharding};
use tessera_host::instance::Instances;
use tessera_host::runtime::{Placement, Runtime};
use tessera_host::session::HostArray;

const REPLICAS: usize = 8;
const BYTES: usize = 64 << 20;
const RUNS: usize = 3;

/// A program holding one variable of `elements` f32 values (64 MiB: no layer trains it, so no
/// reduction has to carry it in one frame) beside a small model.
fn program(
    elements: u32,
    grouping: CommGroup,
    retrieval: RetrievalMode,
    sharding: Sharding,
) -> Program {
    let mut p = Program::new(1, 1, Optimizer::Sgd { learning_rate: 0.0 });
    let none = GroupingSpec::Comm(CommGroup::None);
    p.add_variable(
        "w",
        &[elements / 1024, 1024],
        GroupingSpec::Comm(grouping),
        retrieval,
        sharding,
    )
    .unwrap();
    let v = p
        .add_variable(
            "v",
            &[1, 4],
            none,
            RetrievalMode::OnePerGroup,
            Sharding::None,
        )
        .unwrap();
    p.add_stream("x", DataType::F32, &[4], false).unwrap();
    let t = p.add_stream("t", DataType::F32, &[1], false).unwrap();
    p.add_layer(Layer::Linear { weight: v }).unwrap();
    p.add_layer(Layer::MeanSquaredError { targets: t }).unwrap();
    p
}

fn best(mut f: impl FnMut()) -> f64 {
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let (instances, _mpi) = tessera_host::instance::from_environment().expect("instances");
    let leader = instances.rank() == 0;
    let elements = (BYTES / 4) as u32;
    let cases = [
        (
            "sharded over all, one row",
            CommGroup::All,
            RetrievalMode::OnePerGroup,
            Sharding::Balanced,
        ),
        (
            "unsharded, every replica's row",
            CommGroup::None,
            RetrievalMode::AllReplicas,
            Sharding::None,
        ),
    ];
    if leader {
        println!(
            "weights to host, {REPLICAS} replicas over {} instances, {} MiB (best of {RUNS})",
            instances.size(),
            BYTES >> 20
        );
    }
    for (name, comm, retrieval, sharding) in cases {
        let p = program(elements, comm, retrieval, sharding.clone());
        let mut runtime = with_weights(p, &instances, elements, comm, &sharding);
        let ours = best(|| {
            runtime.weights_to_host().expect("weights to host");
        });
        // Into the caller's arrays, reused from run to run as the raw collective's buffer is.
        let mut into = runtime.weights_to_host().expect("weights to host");
        let ours_into = best(|| {
            runtime
                .weights_to_host_into(&mut into)
                .expect("weights to host into");
        });
        let returned = match retrieval {
            RetrievalMode::AllReplicas => BYTES * REPLICAS,
            RetrievalMode::OnePerGroup => BYTES,
        };
        let raw = raw_collective(&*instances, retrieval, returned);
        if leader {
            let mb = returned as f64 / 1e6;
            println!(
                "{name:32} tessera {:8.0} MB/s ({:.2}x), into the caller's arrays {:8.0} MB/s \
                 ({:.2}x)   raw MPI {:8.0} MB/s",
                mb / ours,
                raw / ours,
                mb / ours_into,
                raw / ours_into,
                mb / raw,
            );
        }
    }
}

/// `p` prepared on `REPLICAS` replicas over `instances`, its variable `w` (`elements`
/// values per group of `comm`, sharded as `sharding`) sent from the host, all 0.5.
fn with_weights(
    p: Program,
    instances: &Arc<dyn Instances>,
    elements: u32,
    comm: CommGroup,
    sharding: &Sharding,
) -> Runtime {
    let per_replica = match sharding {
        Sharding::None => BYTES,
        _ => BYTES / REPLICAS,
    };
    let memory = 3 * per_replica + (16 << 20);
    let mut runtime =
        Runtime::prepare_in(p, REPLICAS, instances.clone(), &Placement::Thread, memory)
            .expect("prepare");
    let groups = match comm {
        CommGroup::None => REPLICAS as u32,
        _ => 1,
    };
    let mut shape = vec![elements / 1024, 1024];
    if groups > 1 {
        shape.insert(0, groups);
    }
    let values = vec![0.5f32; (elements * groups) as usize];
    let weights = BTreeMap::from([(
        "w".to_string(),
        HostArray::from_f32(&shape, &values).unwrap(),
    )]);
    runtime
        .weights_from_host(&weights)
        .expect("weights from host");
    runtime
}

/// The best time of the raw MPI collective that weights to host ends in for `retrieval`,
/// over `returned` bytes: an OR-allreduce of one row, or an allgather of every replica's.
fn raw_collective(instances: &dyn Instances, retrieval: RetrievalMode, returned: usize) -> f64 {
    match retrieval {
        RetrievalMode::OnePerGroup => {
            let mut buffer = vec![0u8; returned];
            best(|| instances.allreduce_or(&mut buffer).expect("allreduce"))
        }
        RetrievalMode::AllReplicas => {
            // MPI's own allgather into a buffer reused from run to run, as the arrays of
            // weights to host into the caller's are.
            let mine = vec![0u8; returned / instances.size()];
            let mut all = vec![0u8; returned];
            let world = mpi::topology::SimpleCommunicator::world();
            best(|| world.all_gather_into(&mine[..], &mut all[..]))
        }
    }
}
