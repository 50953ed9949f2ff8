//! A picture of a [`Report`]: one column per local replica, coloured by group, with the
//! replica's slot drawn below it — the reference elements it holds and its padding.
//!
//! At most [`MAX_COLUMNS`] replicas are drawn; the picture says how many more there are.

use std::fmt::Write;

use super::{PlacementReport, Report};

const COLUMN: usize = 96;
const MARGIN: usize = 24;
const BOX_H: usize = 44;
const SLOT_Y: usize = 120;
const SLOT_H: usize = 28;
/// Most replica columns one picture draws (the table and the JSON list them all).
pub const MAX_COLUMNS: usize = 256;

/// Renders `report` as a standalone SVG document.
pub fn render(report: &Report) -> String {
    let drawn = &report.placement[..report.placement.len().min(MAX_COLUMNS)];
    let hidden = report.placement.len() - drawn.len();
    let columns = drawn.len().max(1);
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
    for (column, p) in drawn.iter().enumerate() {
        draw_column(&mut svg, report, MARGIN + column * COLUMN, p, slot_elements);
    }
    if hidden > 0 {
        let _ = writeln!(
            svg,
            r#"<text x="{MARGIN}" y="{}">… and {hidden} more replicas, not drawn (at most {MAX_COLUMNS} are)</text>"#,
            height - 28
        );
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

/// Replica `p`'s column at `x`: its box, labelled with its group, index and row, and its
/// slot of `slot_elements` below.
fn draw_column(
    svg: &mut String,
    report: &Report,
    x: usize,
    p: &PlacementReport,
    slot_elements: usize,
) {
    let group = report.assignment.get(p.replica).copied().unwrap_or(0);
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
        report.index_in_group.get(p.replica).copied().unwrap_or(0),
        p.row
    );
    draw_slot(svg, x, &colour, &p.pieces, slot_elements);
}

/// The slot at `x`: grey padding underneath, the held `pieces` on top in `colour`.
fn draw_slot(
    svg: &mut String,
    x: usize,
    colour: &str,
    pieces: &[[usize; 3]],
    slot_elements: usize,
) {
    let bar = COLUMN - 8;
    let _ = writeln!(
        svg,
        r##"<rect x="{x}" y="{SLOT_Y}" width="{bar}" height="{SLOT_H}" fill="#ddd" stroke="black"/>"##
    );
    for &[begin, end, dst] in pieces {
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

#[cfg(test)]
mod tests {
    use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};

    use super::*;
    use crate::layout::{Request, MAX_REPLICAS};

    #[test]
    fn large_layouts_draw_a_bounded_picture() {
        let report = Report::build(&Request {
            replicas: MAX_REPLICAS,
            spec: GroupingSpec::Comm(CommGroup::None),
            retrieval: RetrievalMode::OnePerGroup,
            shape: vec![3],
            shard: None,
            instances: 1,
            instance: 0,
        })
        .unwrap();
        let picture = render(&report);
        assert_eq!(picture.matches(">replica ").count(), MAX_COLUMNS);
        assert!(picture.contains(&format!("and {} more replicas", MAX_REPLICAS - MAX_COLUMNS)));
        assert!(picture.len() < 1 << 20, "{} bytes", picture.len());
    }
}
