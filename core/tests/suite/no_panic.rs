//! No input, however unreasonable, panics the core: every query on arbitrary numbers
//! returns a value or an error. Iterators are only drawn a bounded number of items, since
//! arbitrary sizes may be astronomically large.

use proptest::prelude::*;
use tessera_core::grouping::{
    CommGroup, GroupingSpec, ReplicaGrouping, RetrievalMode, Shape, VariableSettings,
};
use tessera_core::shard::{Interval, ShardLayout};
use tessera_core::transfer::{InstanceWindow, WeightLayout};

/// Mostly small numbers, sometimes edge values, sometimes anything.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..20,
        1 => Just(usize::MAX),
        1 => Just(usize::MAX / 2 + 1),
        1 => any::<usize>(),
    ]
}

fn comm() -> impl Strategy<Value = CommGroup> {
    prop_oneof![
        Just(CommGroup::All),
        Just(CommGroup::None),
        size().prop_map(CommGroup::Consecutive),
        size().prop_map(CommGroup::Orthogonal),
    ]
}

fn retrieval() -> impl Strategy<Value = RetrievalMode> {
    prop_oneof![
        Just(RetrievalMode::OnePerGroup),
        Just(RetrievalMode::AllReplicas)
    ]
}

fn query_grouping(g: &ReplicaGrouping, probe: usize) {
    let _ = g.group_of(probe);
    let _ = g.replica_at(probe, probe);
    let _ = g.replica_at(probe % g.num_groups(), 0);
    let _ = g.index_in_group(probe);
    let _ = g.index_in_group(g.replicas() - 1);
    if let Ok(members) = g.members(probe) {
        members.take(4).for_each(drop);
    }
    if let Ok(members) = g.members(g.num_groups() - 1) {
        members.take(4).for_each(drop);
    }
    g.assignment().take(4).for_each(drop);
    let _ = g.transpose();
    let _ = CommGroup::from_grouping(g);
    let _ = g.to_string();
}

fn query_shard(layout: &ShardLayout<'_>, probe: usize) {
    for shard in [probe, 0, layout.domain() - 1] {
        if let Ok(pieces) = layout.pieces(shard) {
            pieces.take(8).for_each(drop);
        }
        if let Ok(padding) = layout.padding(shard) {
            padding.take(8).for_each(drop);
        }
    }
    layout.intervals().take(8).for_each(drop);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn groupings(n in size(), s in size(), k in size(), probe in size()) {
        if let Ok(g) = ReplicaGrouping::new(n, s, k) {
            query_grouping(&g, probe);
        }
    }

    #[test]
    fn comm_groups_and_settings(
        n in size(), c in comm(), mode in retrieval(),
        dims in prop::collection::vec(size(), 0..10), probe in size(),
    ) {
        if let Ok(g) = c.to_grouping(n) {
            query_grouping(&g, probe);
        }
        if let Ok(vs) = VariableSettings::new(GroupingSpec::Comm(c), mode, n) {
            let _ = vs.representative(probe);
            let _ = vs.returning();
            if let Ok(shape) = Shape::new(&dims) {
                let _ = shape.elements();
                let _ = vs.host_shape(&shape);
                let _ = vs.returned_shape(&shape);
                let _ = vs.replica_shape(&shape);
            }
        }
    }

    #[test]
    fn comm_group_text(text in "\\PC{0,16}") {
        let _ = text.parse::<CommGroup>();
    }

    #[test]
    fn regular_shard_layouts(n in size(), d in size(), probe in size()) {
        if let Ok(layout) = ShardLayout::balanced(n, d) {
            query_shard(&layout, probe);
        }
        if let Ok(layout) = ShardLayout::padded_tail(n, d) {
            query_shard(&layout, probe);
        }
    }

    #[test]
    fn explicit_shard_layouts(
        n in size(), d in size(), t in size(),
        raw in prop::collection::vec((size(), size()), 0..8), probe in size(),
    ) {
        let intervals: Vec<Interval> =
            raw.into_iter().map(|(begin, end)| Interval { begin, end }).collect();
        if let Ok(layout) = ShardLayout::explicit(n, d, t, &intervals) {
            query_shard(&layout, probe);
        }
    }

    #[test]
    fn transfers_with_any_sizes(
        s in 1usize..4, k in 1usize..4, blocks in 1usize..4, mode in retrieval(),
        elements in 0usize..12, es in 0usize..5, domain in 0usize..5, padded in any::<bool>(),
        window in (0usize..14, 0usize..14, any::<bool>()),
        host_delta in -2isize..=2, slot_delta in -2isize..=2, probe in 0usize..16,
    ) {
        let n = s * k * blocks;
        let spec = GroupingSpec::Strided { stride: s, group_size: k };
        let vs = VariableSettings::new(spec, mode, n).unwrap();
        let shard = match (domain, padded) {
            (0, _) => None,
            (d, true) => ShardLayout::padded_tail(elements, d).ok(),
            (d, false) => ShardLayout::balanced(elements, d).ok(),
        };
        // Mostly a valid instance window, sometimes anything.
        let window = match window {
            (count, index, true) => InstanceWindow::split(n, count, index).unwrap_or(InstanceWindow::whole(n)),
            (offset, local, false) => InstanceWindow { offset, local },
        };
        let Ok(layout) = WeightLayout::new(vs, elements, es, shard, window) else {
            return Ok(());
        };
        let near = |size: usize, delta: isize| size.saturating_add_signed(delta);
        let _ = layout.placement(probe);
        let mut slots = vec![vec![0u8; near(layout.slot_bytes(), slot_delta)]; window.local];
        let from = vec![1u8; near(layout.from_host_bytes(), host_delta)];
        let mut to = vec![0u8; near(layout.to_host_bytes(), host_delta)];
        let _ = layout.to_replicas(&from, &mut slots[..]);
        let _ = layout.to_host(&mut slots[..], &mut to);
        let mut dst = vec![0u8; near(layout.from_host_bytes(), slot_delta)];
        let _ = layout.downsample(&to, &mut dst);
        // Fewer slots than the window claims must be an error, not a panic.
        let half = window.local / 2;
        let _ = layout.to_replicas(&from, &mut slots[..half]);
        let _ = layout.to_host(&mut slots[..half], &mut to);
    }

    /// Huge element counts on small groupings: every size query and the size checks of
    /// every transfer (with empty buffers, so nothing is allocated). Catches a byte size
    /// that `new` did not check, such as the all-replicas buffer `downsample` reads when
    /// the layout returns one row per group.
    #[test]
    fn transfers_with_huge_sizes(
        s in 1usize..4, k in 1usize..4, blocks in 1usize..4, mode in retrieval(),
        elements in size(), es in size(), domain in 0usize..5, padded in any::<bool>(),
    ) {
        let n = s * k * blocks;
        let spec = GroupingSpec::Strided { stride: s, group_size: k };
        let vs = VariableSettings::new(spec, mode, n).unwrap();
        let shard = match (domain, padded) {
            (0, _) => None,
            (d, true) => ShardLayout::padded_tail(elements, d).ok(),
            (d, false) => ShardLayout::balanced(elements, d).ok(),
        };
        let Ok(layout) = WeightLayout::new(vs, elements, es, shard, InstanceWindow::whole(n)) else {
            return Ok(());
        };
        let _ = (layout.from_host_bytes(), layout.to_host_bytes(), layout.slot_bytes());
        for local in 0..n {
            let _ = layout.placement(local);
        }
        let mut slots: Vec<Vec<u8>> = vec![Vec::new(); n];
        let _ = layout.to_replicas(&[], &mut slots[..]);
        let _ = layout.to_host(&mut slots[..], &mut []);
        let _ = layout.downsample(&[], &mut []);
    }
}

mod streams {
    use proptest::prelude::*;
    use tessera_core::dtype::{convert_input, ConvertError, DataType};
    use tessera_core::stream::{AnchorReturnType, DataFlow, StreamKind, StreamSpec};

    use super::size;

    fn dtype() -> impl Strategy<Value = DataType> {
        (0usize..DataType::ALL.len()).prop_map(|i| DataType::ALL[i])
    }

    fn anchor() -> impl Strategy<Value = AnchorReturnType> {
        prop_oneof![
            Just(AnchorReturnType::All),
            Just(AnchorReturnType::Final),
            Just(AnchorReturnType::Sum),
            size().prop_map(AnchorReturnType::EveryN),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn conversions(from in dtype(), to in dtype(), src in prop::collection::vec(any::<u8>(), 0..64), dst_len in 0usize..40) {
            let mut dst = vec![0u8; dst_len];
            let _ = convert_input("t", from, &src, to, &mut dst);
        }

        /// int64 → int32 succeeds exactly when every value fits, at any alignment, and
        /// otherwise names the first value that does not.
        #[test]
        fn narrowing_is_exact(values in prop::collection::vec(prop_oneof![any::<i32>().prop_map(i64::from), any::<i64>()], 0..32), shift in 0usize..8) {
            let mut raw = vec![0u8; shift];
            raw.extend(values.iter().flat_map(|v| v.to_ne_bytes()));
            let src = &raw[shift..];
            let mut out = vec![0u8; values.len() * 4 + 1];
            let dst = &mut out[1..];
            let result = convert_input("ids", DataType::I64, src, DataType::I32, dst);
            match values.iter().position(|v| i32::try_from(*v).is_err()) {
                None => {
                    prop_assert_eq!(result, Ok(()));
                    let narrowed: Vec<i64> = dst.chunks(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap()).into()).collect();
                    prop_assert_eq!(narrowed, values);
                }
                Some(index) => prop_assert_eq!(result, Err(ConvertError::OutOfRange { tensor: "ids", index, value: values[index] })),
            }
        }

        #[test]
        fn dataflow_arithmetic(bps in size(), af in size(), a in anchor(), sample in size(), replicas in size(), broadcast in any::<bool>(), batch in size(), micro in size(), received in size()) {
            let _ = a.action(batch, micro, bps, af);
            let _ = a.to_string().parse::<AnchorReturnType>();
            if let Ok(flow) = DataFlow::new(bps, af) {
                let _ = flow.check_anchor(a);
                let _ = flow.outputs_per_replica(Some(a));
                let _ = flow.micro_batch(batch, micro);
                let _ = a.output_index(batch, micro, &flow);
                let _ = a.output_index(bps.saturating_sub(1), af.saturating_sub(1), &flow);
                for kind in [StreamKind::Input { broadcast }, StreamKind::Output(a)] {
                    let spec = StreamSpec { name: "s", sample_elements: sample, kind };
                    let _ = flow.expected_elements(&spec, replicas);
                    let _ = flow.check_sizes(replicas, &[spec], &[("s", received), ("other", 1)]);
                }
            }
        }

        #[test]
        fn anchor_text(text in "\\PC{0,24}") {
            let _ = text.parse::<AnchorReturnType>();
            let _ = text.parse::<DataType>();
        }
    }
}
