//! Micro-batches of several samples: each device computes a micro-batch as a matrix of
//! `B` rows, and must train exactly as the reference does sample by sample.

use super::*;

use tessera_host::train::{train, TrainJob};

/// Samples per micro-batch in these tests: neither 1 nor a power of two.
const B: u32 = 3;

/// Every comm group × retrieval × shard layout, with micro-batches of 3 samples, trains
/// like the f64 reference on threads (every anchor of 3 steps, shaped with the micro-batch
/// axis, and every weight after). Catches rows computed with another row's input, a
/// gradient summed over one row only, a mean taken over micro-batches instead of samples,
/// and losses or outputs anchored for the first sample alone.
#[test]
fn micro_batches_of_several_samples_match_the_reference() {
    every_combo(|combo| {
        let mut p = default_mlp(combo);
        p.micro_batch_size = B;
        parity(&p, REPLICAS, &thread(), 3, &format!("{combo}, B = {B}"))
    });
}

/// The same on child processes, whose FIFO items travel through shared memory.
#[test]
fn micro_batches_match_the_reference_in_child_processes() {
    let combo = combos()[0];
    let mut p = default_mlp(combo);
    p.micro_batch_size = B;
    parity(&p, REPLICAS, &process(), 2, &format!("{combo}, B = {B}")).unwrap();
}

/// The suites' small `tessera train` job on one replica, 6 steps.
fn one_replica(micro_batch_size: usize, accumulation: usize) -> TrainJob {
    TrainJob {
        replicas: 1,
        comm: CommGroup::None,
        output_comm: CommGroup::None,
        sharding: Sharding::None,
        accumulation,
        micro_batch_size,
        ..common::small_train_job(6)
    }
}

/// A micro-batch of `B` samples with accumulation `A` is the same training as micro-batches
/// of one with accumulation `A·B`, bit for bit: rows are computed and their gradients
/// summed in sample order, dropout draws in element order, and the mean is over the
/// batch's samples. Catches a per-row gradient order, a mean over micro-batches, and a
/// dropout mask drawn in another order.
#[test]
fn a_micro_batch_of_b_trains_as_b_micro_batches_of_one() {
    let rows = train(&one_replica(4, 2)).unwrap();
    let singles = train(&one_replica(1, 8)).unwrap();
    assert!(rows.passed(1e-3), "{:?}", rows.weight_check);
    let bits = |r: &tessera_host::train::TrainReport| {
        r.step_losses
            .iter()
            .map(|l| l.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&rows), bits(&singles), "the same losses, step by step");
    assert_eq!(rows.accuracy.to_bits(), singles.accuracy.to_bits());
}

/// The same on the bare-metal firmware under QEMU (its `f32` math, its memory).
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn micro_batches_match_the_reference_under_qemu() {
    let _exclusive = common::exclusive();
    let mut p = default_mlp(combos()[0]);
    p.micro_batch_size = B;
    let placement = Placement::Qemu(common::firmware());
    parity(&p, REPLICAS, &placement, 2, "qemu, B = 3").unwrap();
}
