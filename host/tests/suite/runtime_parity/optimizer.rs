//! Momentum and optimizer changes against the reference.

use super::*;

// ---------------------------------------------------------------------------------------
// 8. Momentum and optimizer changes.

/// SGD with momentum matches the reference over 3 steps, with `w1` sharded (its velocity
/// sharded alike) and in another group than `w2`. Catches a velocity that is not kept
/// between batches or steps, one kept whole on a sharded replica (or updated outside its
/// shard), and momentum applied before the group average.
#[test]
fn momentum_matches_the_reference() {
    for combo in [
        Combo {
            comm: CommGroup::All,
            retrieval: RetrievalMode::OnePerGroup,
            layout: Layout::PaddedTail,
        },
        Combo {
            comm: CommGroup::Orthogonal(2),
            retrieval: RetrievalMode::AllReplicas,
            layout: Layout::Explicit,
        },
    ] {
        let optimizer = Optimizer::SgdMomentum {
            learning_rate: 0.05,
            momentum: 0.9,
        };
        let p = mlp(combo, REPLICAS, HIDDEN, optimizer);
        if let Err(e) = parity(&p, REPLICAS, &thread(), 3, &format!("momentum: {combo}")) {
            panic!("{e}");
        }
    }
}

/// Trains one step, changes the optimizer's values on the runtime and on the reference,
/// trains two more, comparing every anchor and the final weights; the final weights must
/// also differ from a reference that kept the old values.
fn change_optimizer(p: &Program, change: Optimizer) -> Result<(), String> {
    let mut runtime = prepare(p, REPLICAS, &thread());
    let initial = initial_weights(p, REPLICAS);
    runtime.weights_from_host(&initial).unwrap();
    let mut reference = Reference::new(p, REPLICAS, SEED, &initial).unwrap();
    let mut unchanged = Reference::new(p, REPLICAS, SEED, &initial).unwrap();
    let io = mlp_io(p, REPLICAS, 0);
    let anchors = runtime.run(&io).unwrap();
    compare_anchors(
        p,
        REPLICAS,
        &anchors,
        &reference.step(&io).unwrap(),
        "before",
    )?;
    unchanged.step(&io).unwrap();

    runtime.set_optimizer(change).unwrap();
    reference.set_optimizer(change);
    for step in 1..3 {
        let io = mlp_io(p, REPLICAS, step);
        let anchors = runtime.run(&io).unwrap();
        let want = reference.step(&io).unwrap();
        compare_anchors(p, REPLICAS, &anchors, &want, &format!("after, step {step}"))?;
        unchanged.step(&io).unwrap();
    }
    let weights = runtime.weights_to_host().unwrap();
    compare_weights(p, REPLICAS, &weights, &reference, "after the change")?;
    // The change mattered: the reference that kept the old values is far off.
    if compare_weights(p, REPLICAS, &weights, &unchanged, "unchanged").is_ok() {
        return Err("the optimizer change made no difference".to_string());
    }
    Ok(())
}

/// `set_optimizer` between runs changes the learning rate (and the momentum) the devices
/// use, exactly as the reference given the same change. Catches values that do not reach
/// the devices, reach only some of them, or are reset at the next run or prepare.
#[test]
fn set_optimizer_changes_the_learning_rate() {
    let p = default_mlp(default_combo());
    change_optimizer(&p, sgd(0.4)).unwrap_or_else(|e| panic!("sgd: {e}"));

    let momentum = Optimizer::SgdMomentum {
        learning_rate: 0.05,
        momentum: 0.9,
    };
    let p = mlp(default_combo(), REPLICAS, HIDDEN, momentum);
    let change = Optimizer::SgdMomentum {
        learning_rate: 0.2,
        momentum: 0.5,
    };
    change_optimizer(&p, change).unwrap_or_else(|e| panic!("momentum: {e}"));
}
