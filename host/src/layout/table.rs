//! The readable form of a [`Report`]: a summary and one line per local replica.

use std::fmt::{self, Write};

use super::Report;

/// Renders `report` for a terminal.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_table(report, &mut out);
    out
}

fn write_table(r: &Report, out: &mut String) -> fmt::Result {
    let g = &r.grouping;
    writeln!(
        out,
        "grouping     ReplicaGrouping(numReplicas={}, stride={}, groupSize={})",
        g.replicas, g.stride, g.group_size
    )?;
    writeln!(
        out,
        "comm group   {}",
        r.comm_group
            .as_deref()
            .unwrap_or("(none: not a comm group)")
    )?;
    writeln!(
        out,
        "groups       {}: {}",
        r.num_groups,
        list(r.groups.iter().map(|m| format!("{m:?}")))
    )?;
    match &r.transpose {
        Some(t) => writeln!(
            out,
            "transpose    stride {}, group size {}",
            t.stride, t.group_size
        )?,
        None => writeln!(out, "transpose    (not representable)")?,
    }
    writeln!(
        out,
        "retrieval    {} (returning {} rows)",
        r.retrieval, r.returning
    )?;
    writeln!(
        out,
        "host shape   {:?}   returned shape {:?}",
        r.host_shape, r.returned_shape
    )?;
    if let Some(s) = &r.shard {
        let kind = s.kind.map(|k| k.to_string()).unwrap_or_default();
        writeln!(
            out,
            "shard        {kind} over {} replicas: {} elements each, {} gathered",
            s.domain, s.per_replica, s.gathered_elements
        )?;
    }
    writeln!(
        out,
        "collective   {} (weights to host, across instances)",
        r.collective
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:>7}  {:>5}  {:>5}  {:>4}  holds (row elements -> slot offset)",
        "replica", "group", "index", "row"
    )?;
    for p in &r.placement {
        let holds = list(
            p.pieces
                .iter()
                .map(|[b, e, d]| format!("[{b}, {e}) -> {d}")),
        );
        let holds = if holds.is_empty() {
            "padding only".to_string()
        } else {
            holds
        };
        let replica = p.replica;
        let at = |list: &[usize]| list.get(replica).copied().unwrap_or(0);
        let (group, index) = (at(&r.assignment), at(&r.index_in_group));
        writeln!(
            out,
            "{replica:>7}  {group:>5}  {index:>5}  {:>4}  {holds}",
            p.row
        )?;
    }
    Ok(())
}

fn list(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}
