//! A picture of a [`Report`]: one column per local replica, coloured by group, with the
//! replica's slot drawn below it — the reference elements it holds and its padding.

use std::fmt::Write;

use super::Report;

const COLUMN: usize = 96;
const MARGIN: usize = 24;
const BOX_H: usize = 44;
const SLOT_Y: usize = 120;
const SLOT_H: usize = 28;

/// Renders `report` as a standalone SVG document.
pub fn render(report: &Report) -> String {
    let columns = report.placement.len().max(1);
    let width = 2 * MARGIN + columns * COLUMN;
    let height = SLOT_Y + SLOT_H + 64;
    let mut svg = String::new();
    // Writing to a String cannot fail; `let _` keeps that visible.
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="11">"#
    );
    let g = &report.grouping;
    let title = format!(
        "ReplicaGrouping(numReplicas={}, stride={}, groupSize={}) · {} groups · {}",
        g.replicas, g.stride, g.group_size, report.num_groups, report.retrieval
    );
    let _ = writeln!(
        svg,
        r#"<text x="{MARGIN}" y="18" font-size="13">{title}</text>"#
    );
    let slot_elements = slot_elements(report).max(1);
    for (column, p) in report.placement.iter().enumerate() {
        let x = MARGIN + column * COLUMN;
        let group = report.assignment[p.replica];
        let colour = colour(group, report.num_groups);
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="40" width="{}" height="{BOX_H}" rx="6" fill="{colour}" stroke="black"/>"#,
            COLUMN - 8
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="58">replica {}</text>"#,
            x + 8,
            p.replica
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="74">g{} #{} row {}</text>"#,
            x + 8,
            group,
            report.index_in_group[p.replica],
            p.row
        );
        // The slot: grey padding underneath, the held pieces on top.
        let bar = COLUMN - 8;
        let _ = writeln!(
            svg,
            r##"<rect x="{x}" y="{SLOT_Y}" width="{bar}" height="{SLOT_H}" fill="#ddd" stroke="black"/>"##
        );
        for &[begin, end, dst] in &p.pieces {
            let px = x + dst * bar / slot_elements;
            let pw = ((end - begin) * bar / slot_elements).max(1);
            let _ = writeln!(
                svg,
                r#"<rect x="{px}" y="{SLOT_Y}" width="{pw}" height="{SLOT_H}" fill="{colour}"><title>elements [{begin}, {end}) at {dst}</title></rect>"#
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}">[{begin},{end})</text>"#,
                px + 2,
                SLOT_Y + SLOT_H + 14
            );
        }
    }
    let legend = format!(
        "slot: coloured = row elements held, grey = padding · collective to host: {}",
        report.collective
    );
    let _ = writeln!(
        svg,
        r#"<text x="{MARGIN}" y="{}">{legend}</text>"#,
        height - 12
    );
    svg.push_str("</svg>\n");
    svg
}

/// Elements of one slot: a shard with padding, or a whole row.
fn slot_elements(report: &Report) -> usize {
    match &report.shard {
        Some(shard) => shard.per_replica,
        None => report
            .placement
            .iter()
            .flat_map(|p| p.pieces.iter().map(|piece| piece[1]))
            .max()
            .unwrap_or(0),
    }
}

/// A distinct hue per group.
fn colour(group: usize, groups: usize) -> String {
    let hue = group * 360 / groups.max(1);
    format!("hsl({hue}, 70%, 75%)")
}
