//! Worked examples of the transfer rules in the module documentation; the property tests
//! in `tests/` cover every layout.

use std::vec;
use std::vec::Vec;

use super::*;
use crate::grouping::{GroupingSpec, RetrievalMode, VariableSettings};
use crate::shard::ShardLayout;

fn settings(
    replicas: usize,
    stride: usize,
    group_size: usize,
    mode: RetrievalMode,
) -> VariableSettings {
    VariableSettings::new(GroupingSpec::Strided { stride, group_size }, mode, replicas).unwrap()
}

fn slots(count: usize, bytes: usize) -> Vec<Vec<u8>> {
    vec![vec![0xAA; bytes]; count]
}

#[test]
fn unsharded_replicas_get_their_group_row() {
    // 4 replicas, groups [[0,2],[1,3]], one-byte elements, 2 elements per row.
    let layout = WeightLayout::new(
        settings(4, 2, 2, RetrievalMode::OnePerGroup),
        2,
        1,
        None,
        InstanceWindow::whole(4),
    )
    .unwrap();
    let mut remote = slots(4, 2);
    layout.to_replicas(&[1, 2, 3, 4], &mut remote[..]).unwrap();
    assert_eq!(remote, [[1, 2], [3, 4], [1, 2], [3, 4]]);
    let mut host = [9; 4];
    assert_eq!(
        layout.to_host(&mut remote[..], &mut host),
        Ok(Collective::None)
    );
    assert_eq!(host, [1, 2, 3, 4]);
}

#[test]
fn sharded_slots_hold_shards_and_zero_padding() {
    // One group of 4, balanced over a domain of 2: n = 3, T = 2, shard 1 padded.
    let shard = ShardLayout::balanced(3, 2).unwrap();
    let layout = WeightLayout::new(
        settings(4, 1, 4, RetrievalMode::AllReplicas),
        3,
        1,
        Some(shard),
        InstanceWindow::whole(4),
    )
    .unwrap();
    let mut remote = slots(4, 2);
    layout.to_replicas(&[7, 8, 9], &mut remote[..]).unwrap();
    assert_eq!(remote, [[7, 0], [8, 9], [7, 0], [8, 9]]);
    let mut host = [0; 12];
    layout.to_host(&mut remote[..], &mut host).unwrap();
    assert_eq!(host, [7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9]);
}

#[test]
fn second_instance_of_a_split_group_needs_a_sum() {
    // Group of 2 over 2 instances, each holding one shard of [1, 2, 3, 4].
    let shard = ShardLayout::padded_tail(4, 2).unwrap();
    let mut sum = [0u8; 4];
    for index in 0..2 {
        let window = InstanceWindow::split(2, 2, index).unwrap();
        let layout = WeightLayout::new(
            settings(2, 1, 2, RetrievalMode::OnePerGroup),
            4,
            1,
            Some(shard),
            window,
        )
        .unwrap();
        let mut remote = slots(1, 2);
        layout.to_replicas(&[1, 2, 3, 4], &mut remote[..]).unwrap();
        let mut host = [0xFF; 4];
        assert_eq!(
            layout.to_host(&mut remote[..], &mut host),
            Ok(Collective::SumAllreduce)
        );
        for (acc, byte) in sum.iter_mut().zip(host) {
            *acc += byte;
        }
    }
    assert_eq!(sum, [1, 2, 3, 4]);
}

#[test]
fn size_errors_name_both_sizes_and_touch_nothing() {
    let layout = WeightLayout::new(
        settings(2, 1, 1, RetrievalMode::OnePerGroup),
        2,
        4,
        None,
        InstanceWindow::whole(2),
    )
    .unwrap();
    let mut remote = slots(2, 8);
    let err = layout.to_replicas(&[0; 15], &mut remote[..]).unwrap_err();
    assert_eq!(
        err,
        TransferError::HostSize {
            expected: 16,
            actual: 15
        }
    );
    let mut short = [vec![0xAA; 8], vec![0xAA; 7]];
    let err = layout.to_replicas(&[0; 16], &mut short[..]).unwrap_err();
    assert_eq!(
        err,
        TransferError::SlotSize {
            replica: 1,
            expected: 8,
            actual: 7
        }
    );
    assert_eq!(
        short[0], [0xAA; 8],
        "a failed transfer must not write any slot"
    );
}

#[test]
fn layout_validation() {
    let s = settings(4, 1, 2, RetrievalMode::OnePerGroup);
    let shard = ShardLayout::balanced(8, 4).unwrap();
    assert_eq!(
        WeightLayout::new(s, 8, 4, Some(shard), InstanceWindow::whole(4)),
        Err(LayoutError::DomainNotDividingGroup {
            domain: 4,
            group_size: 2
        })
    );
    let window = InstanceWindow {
        offset: 3,
        local: 2,
    };
    assert_eq!(
        WeightLayout::new(s, 8, 4, None, window),
        Err(LayoutError::WindowOutOfRange {
            offset: 3,
            local: 2,
            replicas: 4
        })
    );
    assert_eq!(
        WeightLayout::new(s, usize::MAX, 2, None, InstanceWindow::whole(4)),
        Err(LayoutError::TooLarge)
    );
}

#[test]
fn downsample_takes_representatives() {
    let layout = WeightLayout::new(
        settings(4, 2, 2, RetrievalMode::AllReplicas),
        1,
        1,
        None,
        InstanceWindow::whole(4),
    )
    .unwrap();
    let mut dst = [0; 2];
    layout.downsample(&[10, 11, 12, 13], &mut dst).unwrap();
    assert_eq!(dst, [10, 11]);
    assert!(layout.downsample(&[10, 11, 12], &mut dst).is_err());
}

/// Catches the unchecked `row_bytes × replicas` in `downsample`: with one row per group,
/// `new` only checks `row_bytes × groups`, so an all-replicas buffer of a huge variable can
/// overflow `usize`. That must be a size error, not an overflow panic (or, without
/// overflow checks, a wrapped size that a short buffer could match).
#[test]
fn downsample_of_an_impossible_size_is_an_error() {
    // One group of 4: the to-host buffer is one row of `usize::MAX / 2` bytes, which
    // fits; the all-replicas buffer would be 4 rows, which does not.
    let layout = WeightLayout::new(
        settings(4, 1, 4, RetrievalMode::OnePerGroup),
        usize::MAX / 2,
        1,
        None,
        InstanceWindow::whole(4),
    )
    .unwrap();
    assert_eq!(
        layout.downsample(&[], &mut []),
        Err(TransferError::Layout(LayoutError::TooLarge))
    );
}
