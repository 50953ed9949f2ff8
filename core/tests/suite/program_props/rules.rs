//! Queries and rules: every query of a program, its checked queries and reduction schedule,
//! and an independent reading of the module documentation's rules ([`follows_rules`]).

use super::*;

// ---------------------------------------------------------------------------------------
// Queries.

/// Every query of a program, on every index in range and a few past it; panics are the
/// only failure. Returns the reductions for further checks.
pub(super) fn query_everything(p: &Program, replicas: usize) -> Vec<Reduction> {
    let result = p.check(replicas);
    if let Err(e) = result {
        let _ = e.to_string();
    }
    // A reduction list is at most one gather and one gradient per variable; take more than
    // that to catch an iterator that never ends.
    let reductions: Vec<Reduction> = p.reductions(replicas).take(4 * MAX_VARIABLES).collect();
    assert!(reductions.len() <= 2 * p.variables.len());
    for i in 0..p.variables.len() + 2 {
        for n in [replicas, 0, 1, usize::MAX] {
            let _ = p.held_elements(i, n);
            if let Ok(Some(layout)) = p.shard_layout(i, n) {
                let _ = layout.gathered_len();
            }
            let _ = p.settings(i, n);
        }
        let _ = p.layer_of(i);
    }
    let _ = p.output_width();
    let _ = p.data_flow();
    for v in &p.variables {
        let _ = p.variable_index(&v.name);
    }
    for s in &p.streams {
        let _ = p.stream_index(&s.name);
    }
    reductions
}

/// A program that passed `check` answers every per-variable query.
pub(super) fn assert_checked_queries(p: &Program, replicas: usize) {
    for i in 0..p.variables.len() {
        assert!(p.settings(i, replicas).is_ok(), "settings of {i}");
        assert!(p.shard_layout(i, replicas).is_ok(), "shard layout of {i}");
        assert!(p.held_elements(i, replicas).is_ok(), "held elements of {i}");
    }
    assert!(p.output_width().is_some());
}

/// The schedule rules of the module documentation, for a program that passed `check`.
pub(super) fn assert_schedule(p: &Program, replicas: usize, reductions: &[Reduction]) {
    let group_size = |v: usize| {
        p.settings(v, replicas)
            .expect("a checked grouping")
            .grouping()
            .group_size()
    };
    // Every round names a variable a layer uses, whose group has several members.
    for r in reductions {
        let v = usize::from(r.variable());
        assert!(v < p.variables.len(), "{r:?} names no variable");
        assert!(p.layer_of(v).is_some(), "{r:?}: no layer uses it");
        assert!(group_size(v) > 1, "{r:?}: a group of one");
    }
    // Gathers come before gradients, each list in variable order.
    let gathers = reductions
        .iter()
        .take_while(|r| matches!(r, Reduction::Gather { .. }))
        .count();
    assert!(
        reductions[gathers..]
            .iter()
            .all(|r| matches!(r, Reduction::Gradient { .. })),
        "a gather after a gradient: {reductions:?}"
    );
    for list in [&reductions[..gathers], &reductions[gathers..]] {
        assert!(
            list.windows(2).all(|w| w[0].variable() < w[1].variable()),
            "not in variable order: {reductions:?}"
        );
    }
    // Each trained shared variable: exactly one gradient round, and one gather exactly when
    // it is sharded.
    for v in 0..p.variables.len() {
        let shared = p.layer_of(v).is_some() && group_size(v) > 1;
        let count = |round: Reduction| reductions.iter().filter(|&&r| r == round).count();
        let variable = v as u8;
        assert_eq!(
            count(Reduction::Gradient { variable }),
            usize::from(shared),
            "gradient rounds of {v}: {reductions:?}"
        );
        let sharded = p.variables[v].sharding != Sharding::None;
        assert_eq!(
            count(Reduction::Gather { variable }),
            usize::from(shared && sharded),
            "gather rounds of {v}: {reductions:?}"
        );
    }
}

/// The rules of the module documentation, written again from the documentation alone
/// (shard layouts are built with `tessera_core::shard`, whose own tests cover them): the
/// oracle `check` is compared with.
pub(super) fn follows_rules(p: &Program, replicas: usize) -> bool {
    // At least one replica.
    if replicas == 0 {
        return false;
    }
    let dims_ok = |d: &[u32]| !d.is_empty() && !d.contains(&0) && elements(d).is_some();
    // Names: non-empty, unique across variables and streams.
    let mut names: Vec<&str> = p.variables.iter().map(|v| v.name.as_str()).collect();
    names.extend(p.streams.iter().map(|s| s.name.as_str()));
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    if names.len() != count || names.contains(&"") {
        return false;
    }
    // Variables: f32, valid dims, a grouping that resolves, a layout that builds over the
    // group.
    for v in &p.variables {
        if v.dtype != DataType::F32 || !dims_ok(&v.shape) {
            return false;
        }
        let Ok(grouping) = v.grouping.resolve(replicas) else {
            return false;
        };
        let (n, domain) = (elements(&v.shape).unwrap(), grouping.group_size());
        let layout = match &v.sharding {
            Sharding::None => Ok(()),
            Sharding::Balanced => ShardLayout::balanced(n, domain).map(drop),
            Sharding::PaddedTail => ShardLayout::padded_tail(n, domain).map(drop),
            Sharding::Explicit {
                per_replica,
                intervals,
            } => ShardLayout::explicit(n, domain, *per_replica as usize, intervals).map(drop),
        };
        if layout.is_err() {
            return false;
        }
    }
    if !p.streams.iter().all(|s| dims_ok(&s.sample)) {
        return false;
    }
    // The model: from an f32 input, widths chained, one loss at the end.
    let Some(input) = p.streams.get(usize::from(p.input)) else {
        return false;
    };
    if input.dtype != DataType::F32 || p.layers.is_empty() {
        return false;
    }
    let mut width = elements(&input.sample).unwrap();
    let mut uses = [0usize; 256];
    for (i, layer) in p.layers.iter().enumerate() {
        let last = i + 1 == p.layers.len();
        let loss_stream = |index: u8, dtype: DataType| {
            p.streams
                .get(usize::from(index))
                .filter(|s| index != p.input && s.dtype == dtype)
                .map(|s| elements(&s.sample).unwrap())
        };
        let ok = match *layer {
            Layer::Linear { weight } => {
                uses[usize::from(weight)] += 1;
                match p.variables.get(usize::from(weight)).map(|v| &v.shape[..]) {
                    Some(&[outputs, inputs]) if inputs as usize == width => {
                        width = outputs as usize;
                        !last
                    }
                    _ => false,
                }
            }
            Layer::Bias { bias } => {
                uses[usize::from(bias)] += 1;
                let shape = p.variables.get(usize::from(bias)).map(|v| &v.shape[..]);
                !last && matches!(shape, Some(&[w]) if w as usize == width)
            }
            Layer::Relu => !last,
            Layer::Dropout { rate } => !last && (0.0..1.0).contains(&rate),
            Layer::SoftmaxCrossEntropy { labels } => {
                last && width >= 2 && loss_stream(labels, DataType::I32) == Some(1)
            }
            Layer::MeanSquaredError { targets } => {
                last && loss_stream(targets, DataType::F32) == Some(width)
            }
        };
        if !ok {
            return false;
        }
    }
    if uses.iter().any(|&n| n > 1) {
        return false;
    }
    // Data flow and anchors.
    let (bps, af) = (p.batches_per_step as usize, p.accumulation as usize);
    if bps == 0 || af == 0 {
        return false;
    }
    for (i, a) in p.anchors.iter().enumerate() {
        if p.anchors[..i].iter().any(|b| b.tensor == a.tensor) {
            return false;
        }
        if let AnchorReturnType::EveryN(period) = a.return_type {
            if period == 0 || period > bps || !bps.is_multiple_of(period) {
                return false;
            }
        }
    }
    // Optimizer.
    let (lr, momentum) = match p.optimizer {
        Optimizer::Sgd { learning_rate } => (learning_rate, 0.0),
        Optimizer::SgdMomentum {
            learning_rate,
            momentum,
        } => (learning_rate, momentum),
    };
    lr.is_finite() && lr >= 0.0 && (0.0..1.0).contains(&momentum)
}

pub(super) fn round_trip(p: &Program) -> Program {
    let mut buffer = [0u8; 4096];
    let bytes = postcard::to_slice(p, &mut buffer).expect("fits 4 KiB");
    postcard::from_bytes(bytes).expect("decodes")
}
