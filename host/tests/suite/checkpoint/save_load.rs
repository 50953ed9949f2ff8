//! Round trips: a checkpoint saved and loaded restores every tensor, the optimizer state,
//! the seed and every replica's RNG state, in every comm group, retrieval mode and shard
//! layout.

use super::*;

// ---------------------------------------------------------------------------------------
// 1. Round trips
// ---------------------------------------------------------------------------------------

/// Trains `comm` × every retrieval mode × every shard layout of `w1` two steps, captures,
/// saves, loads and restores into a new runtime of the same program.
///
/// Catches: a tensor, the optimizer state, the seed or any replica's RNG state lost or
/// reordered on the way through the file; a host shape computed wrongly for a grouped,
/// all-replicas or sharded variable (the explicit layout's padding and piece order
/// included); metadata or a checksum that do not survive a save and a load.
fn round_trips(comm: CommGroup) {
    let scratch = Scratch::new(&format!("round-trip-{}", comm).replace(':', "-"));
    let path = scratch.path("state.safetensors");
    for retrieval in [RetrievalMode::OnePerGroup, RetrievalMode::AllReplicas] {
        for shard in SHARDS {
            let case = format!("{comm}, {retrieval:?}, w1 {shard:?}");
            let program = mlp(comm, retrieval, shard, HIDDEN, REPLICAS);
            let mut original = started(program.clone(), 1);
            run_steps(&mut original, 0, 2);
            let captured = Checkpoint::capture(&mut original, 2, SEED).unwrap();
            assert_eq!(captured.step, 2, "{case}");
            assert_eq!(captured.replicas, REPLICAS, "{case}");
            assert_eq!(captured.rng.len(), 4 * REPLICAS, "{case}");
            let names: Vec<&str> = ["b1", "b2", "w1", "w2"].into();
            assert_eq!(
                captured
                    .weights
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                names,
                "{case}"
            );
            assert_eq!(
                captured
                    .optimizer
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                names,
                "{case}"
            );
            // Two steps with momentum: the velocity is not all zeros.
            assert!(
                captured
                    .optimizer
                    .values()
                    .any(|a| a.to_f32().unwrap().iter().any(|&v| v != 0.0)),
                "{case}: no velocity was captured"
            );

            captured.save(&path).unwrap();
            let loaded = Checkpoint::load(&path).unwrap();
            assert_same_checkpoint(&format!("{case}: through the file"), &loaded, &captured);

            let mut fresh = started(program.clone(), 2);
            assert!(
                state(&mut fresh).weights != state(&mut original).weights,
                "{case}: the new runtime must start elsewhere"
            );
            loaded.restore(&mut fresh).unwrap();
            assert_same_state(
                &format!("{case}: after restore"),
                &state(&mut fresh),
                &state(&mut original),
            );

            // And both continue alike (dropout draws from the restored generators).
            let io = step_io(&program, REPLICAS, 2);
            let a = original.run(&io).unwrap();
            let b = fresh.run(&io).unwrap();
            assert_same_arrays(&format!("{case}: the next step's loss"), &a, &b);
            assert_same_state(
                &format!("{case}: after the next step"),
                &state(&mut fresh),
                &state(&mut original),
            );
        }
    }
}

/// See [`round_trips`]: `w1`/`b1` in one group of all four replicas.
#[test]
fn round_trips_in_comm_group_all() {
    round_trips(CommGroup::All);
}

/// See [`round_trips`]: every replica alone (four rows per variable, shards of one).
#[test]
fn round_trips_in_comm_group_none() {
    round_trips(CommGroup::None);
}

/// See [`round_trips`]: groups of consecutive replicas.
#[test]
fn round_trips_in_comm_group_consecutive() {
    round_trips(CommGroup::Consecutive(2));
}

/// See [`round_trips`]: strided groups, whose first replicas are not consecutive.
#[test]
fn round_trips_in_comm_group_orthogonal() {
    round_trips(CommGroup::Orthogonal(2));
}

/// Catches: a checkpoint that is another value after a save and a load
/// (`Checkpoint: PartialEq` is how a caller compares two runs' states). The state is
/// checked above; this checks the rest, the layouts included.
#[test]
fn a_saved_checkpoint_loads_as_the_same_value() {
    let scratch = Scratch::new("same-value");
    let path = scratch.path("state.safetensors");
    let mut runtime = started(default_mlp(), 1);
    run_steps(&mut runtime, 0, 2);
    let captured = Checkpoint::capture(&mut runtime, 2, SEED).unwrap();
    captured.save(&path).unwrap();
    let loaded = Checkpoint::load(&path).unwrap();
    assert_same_checkpoint("through the file", &loaded, &captured);
    assert_eq!(
        loaded.layouts, captured.layouts,
        "the layouts, by variable name"
    );
    assert!(
        loaded == captured,
        "the loaded checkpoint differs from the saved one"
    );
}
