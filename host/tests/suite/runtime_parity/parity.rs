//! Parity with the f64 reference: every comm group × retrieval mode × shard layout on
//! threads, and a representative subset on child processes and QEMU.

use super::*;

// ---------------------------------------------------------------------------------------
// 1. Parity with the reference, every combination, threads.

/// Every comm group × retrieval × shard layout on 4 thread replicas trains like the f64
/// reference (every anchor of 3 steps, every weight after), and every weight comes back
/// in its returned shape. Catches a grouping, retrieval or layout the runtime moves,
/// gathers, averages or reassembles wrongly (a shard put at the wrong offset, a gradient
/// averaged over the wrong group, a group's row returned for another), and a returned
/// shape that keeps a row dimension of one or drops one of several.
#[test]
fn every_grouping_retrieval_and_layout_matches_the_reference() {
    every_combo(|combo| {
        parity(
            &default_mlp(combo),
            REPLICAS,
            &thread(),
            3,
            &combo.to_string(),
        )
    });
}

/// Weights from host then to host, without training, give back exactly the values sent,
/// for every combination; with AllReplicas each replica's row is its group's value.
/// Catches a layout whose split and reassembly disagree (a shard or padding offset off by
/// one returns shifted or zeroed elements), a row handed to the wrong group, and an
/// AllReplicas row copied from another group's representative.
#[test]
fn weights_round_trip_exactly_for_every_combination() {
    every_combo(|combo| {
        let what = combo.to_string();
        let p = default_mlp(combo);
        let mut runtime = Runtime::prepare(p.clone(), REPLICAS, &thread(), MEMORY)
            .map_err(|e| format!("{what}: prepare: {e}"))?;
        let initial = initial_weights(&p, REPLICAS);
        runtime
            .weights_from_host(&initial)
            .map_err(|e| format!("{what}: from host: {e}"))?;
        let back = runtime
            .weights_to_host()
            .map_err(|e| format!("{what}: to host: {e}"))?;
        if !runtime.weights_in_sync() {
            return Err(format!("{what}: weights not in sync after weights to host"));
        }
        for (i, v) in p.variables.iter().enumerate() {
            let name = v.name.as_str();
            let groups = group_values(&p, REPLICAS, i);
            let grouping = *p.settings(i, REPLICAS).unwrap().grouping();
            let rows: Vec<f32> = match v.retrieval {
                RetrievalMode::OnePerGroup => groups.concat(),
                RetrievalMode::AllReplicas => (0..REPLICAS)
                    .flat_map(|r| groups[grouping.group_of(r).unwrap()].clone())
                    .collect(),
            };
            let array = &back[name];
            let shape = returned_shape(&p, REPLICAS, i);
            if array.shape() != shape {
                return Err(format!(
                    "{what}: `{name}` has shape {:?}, not {shape:?}",
                    array.shape()
                ));
            }
            let got = array.to_f32().unwrap();
            let same = got.len() == rows.len()
                && got
                    .iter()
                    .zip(&rows)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            if !same {
                return Err(format!(
                    "{what}: `{name}` came back as {got:?}, sent {rows:?}"
                ));
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------
// 2. Other placements.

/// A representative subset on child processes (sharded in a group of four, explicit
/// layout with AllReplicas in consecutive pairs, padded tail in orthogonal pairs). Catches
/// what only a real byte link shows: weights, streams or anchors split across frames or
/// the shared window wrongly, and reductions answered out of order between processes.
#[test]
fn child_processes_match_the_reference() {
    for combo in [
        Combo {
            comm: CommGroup::All,
            retrieval: RetrievalMode::OnePerGroup,
            layout: Layout::Balanced,
        },
        Combo {
            comm: CommGroup::Consecutive(2),
            retrieval: RetrievalMode::AllReplicas,
            layout: Layout::Explicit,
        },
        Combo {
            comm: CommGroup::Orthogonal(2),
            retrieval: RetrievalMode::OnePerGroup,
            layout: Layout::PaddedTail,
        },
    ] {
        let what = format!("process: {combo}");
        if let Err(e) = parity(&default_mlp(combo), REPLICAS, &process(), 2, &what) {
            panic!("{e}");
        }
    }
}

/// The firmware under QEMU (four processes) trains like the reference with a sharded
/// first layer in orthogonal pairs. Catches a device program that behaves differently on
/// the bare-metal target (`f32` math, frame sizes of the UART link, its memory).
#[test]
#[ignore = "needs qemu-system-arm, defmt-print and the firmware: tests/ci.sh runs it (--include-ignored)"]
fn qemu_matches_the_reference() {
    let _exclusive = common::exclusive();
    let combo = Combo {
        comm: CommGroup::Orthogonal(2),
        retrieval: RetrievalMode::AllReplicas,
        layout: Layout::Balanced,
    };
    let placement = Placement::Qemu(common::firmware());
    if let Err(e) = parity(&default_mlp(combo), REPLICAS, &placement, 2, "qemu") {
        panic!("{e}");
    }
}
