//! The laws the rest of tessera relies on, checked on arbitrary valid groupings, and the
//! round trips of every text form in core.
//!
//! - `group_of`, `index_in_group` and `replica_at` are inverse bijections between replicas
//!   and (group, member) pairs; `assignment` and `members` agree with them. The transfer
//!   code indexes host rows with `group_of` and slots with `replica_at`: a grouping for
//!   which the two disagreed would send a row to the wrong replica.
//! - `transpose` takes one member from each group, and transposing twice gives the
//!   (normalised) grouping back; where it is not representable it is an error, not a panic.
//! - Comm groups map to the groupings their docs name, and back.
//! - Text forms (`CommGroup`, `AnchorReturnType`, `DataType`, and `ReplicaGrouping`'s
//!   display) round-trip.

use std::collections::BTreeSet;

use proptest::prelude::*;
use tessera_core::dtype::DataType;
use tessera_core::grouping::{CommGroup, GroupingError, ReplicaGrouping};
use tessera_core::stream::{AnchorError, AnchorReturnType};

/// A valid grouping as `(replicas, stride, group_size)`: `replicas` is a multiple of
/// `stride × group_size`. Mostly small, so that whole groupings can be enumerated.
fn small_grouping() -> impl Strategy<Value = (usize, usize, usize)> {
    (1usize..=6, 1usize..=6, 1usize..=6).prop_map(|(s, k, blocks)| (s * k * blocks, s, k))
}

/// A valid grouping with up to `usize::MAX` replicas: only sampled, never enumerated.
fn huge_grouping() -> impl Strategy<Value = (usize, usize, usize)> {
    (1usize..=1 << 16, 1usize..=1 << 16)
        .prop_flat_map(|(s, k)| (Just(s), Just(k), 1..=usize::MAX / (s * k)))
        .prop_map(|(s, k, blocks)| (s * k * blocks, s, k))
}

fn g(n: usize, s: usize, k: usize) -> ReplicaGrouping {
    ReplicaGrouping::new(n, s, k).expect("a valid grouping")
}

/// The grouping as its stored triple.
fn triple(grouping: &ReplicaGrouping) -> (usize, usize, usize) {
    (
        grouping.replicas(),
        grouping.stride(),
        grouping.group_size(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Validity is exactly `N, s, k > 0` and `N % (s·k) == 0`, and group size 1 stores
    /// stride 1. Catches a check that lets a partial block through (its last groups would
    /// be short of members) or a product that overflows into divisibility.
    #[test]
    fn validity_rule(n in 0usize..200, s in prop_oneof![0usize..20, Just(usize::MAX)], k in 0usize..20) {
        let valid = n > 0 && s > 0 && k > 0 && s.checked_mul(k).is_some_and(|b| n % b == 0);
        let result = ReplicaGrouping::new(n, s, k);
        prop_assert_eq!(result.is_ok(), valid);
        if let Ok(grouping) = result {
            let stored = if k == 1 { 1 } else { s };
            prop_assert_eq!(triple(&grouping), (n, stored, k));
            prop_assert_eq!(grouping.num_groups(), n / k);
        }
    }

    /// Every replica is member `index_in_group(r)` of group `group_of(r)`. Catches
    /// `group_of` and `replica_at` drifting apart, which would move weights between the
    /// wrong replicas.
    #[test]
    fn replica_at_inverts_group_of((n, s, k) in small_grouping()) {
        let grouping = g(n, s, k);
        for r in 0..n {
            let group = grouping.group_of(r).unwrap();
            let member = grouping.index_in_group(r).unwrap();
            prop_assert!(group < grouping.num_groups() && member < k);
            prop_assert_eq!(grouping.replica_at(group, member), Ok(r));
        }
        prop_assert!(grouping.group_of(n).is_err());
    }

    /// The same law on huge groupings, at sampled replicas, near the end included: no
    /// intermediate overflows.
    #[test]
    fn replica_at_inverts_group_of_when_huge((n, s, k) in huge_grouping(), at in any::<prop::sample::Index>()) {
        let grouping = g(n, s, k);
        for r in [0, n - 1, at.index(n)] {
            let group = grouping.group_of(r).unwrap();
            let member = grouping.index_in_group(r).unwrap();
            prop_assert_eq!(grouping.replica_at(group, member), Ok(r));
        }
        let last = grouping.num_groups() - 1;
        prop_assert!(grouping.replica_at(last, k - 1).is_ok_and(|r| r < n));
    }

    /// Every (group, member) pair names a distinct replica that maps back to it, so groups
    /// partition the replicas; `members` lists `replica_at(g, 0..k)`; `assignment` is
    /// `group_of` of every replica. Catches an `assignment` computed by its own formula
    /// that disagrees with `group_of`.
    #[test]
    fn members_and_assignment_agree((n, s, k) in small_grouping()) {
        let grouping = g(n, s, k);
        let mut seen = BTreeSet::new();
        for group in 0..grouping.num_groups() {
            let members: Vec<usize> = grouping.members(group).unwrap().collect();
            prop_assert_eq!(members.len(), k);
            for (member, &r) in members.iter().enumerate() {
                prop_assert_eq!(grouping.replica_at(group, member), Ok(r));
                prop_assert_eq!(grouping.group_of(r), Ok(group));
                prop_assert_eq!(grouping.index_in_group(r), Ok(member));
                prop_assert!(seen.insert(r), "replica {} in two groups", r);
            }
        }
        prop_assert_eq!(seen.len(), n);
        let assignment: Vec<usize> = grouping.assignment().collect();
        let expected: Vec<usize> = (0..n).map(|r| grouping.group_of(r).unwrap()).collect();
        prop_assert_eq!(assignment, expected);
        prop_assert!(grouping.members(grouping.num_groups()).is_err());
    }

    /// Where defined, the transpose's groups meet each group of the original in exactly
    /// one replica, and transposing again gives the original back. It is defined exactly
    /// for stride 1 or a single block, and otherwise an error. Catches a transpose that
    /// loses the normalisation of group size 1 (so that twice is not the identity).
    #[test]
    fn transpose_laws((n, s, k) in small_grouping()) {
        let grouping = g(n, s, k);
        let stride = grouping.stride();
        match grouping.transpose() {
            Ok(t) => {
                prop_assert!(stride == 1 || stride * k == n);
                prop_assert_eq!(t.transpose(), Ok(grouping));
                prop_assert_eq!(t.num_groups(), k);
                let pairs: BTreeSet<(usize, usize)> = (0..n)
                    .map(|r| (grouping.group_of(r).unwrap(), t.group_of(r).unwrap()))
                    .collect();
                prop_assert_eq!(pairs.len(), n, "{} ᵀ = {}: groups meet twice", grouping, t);
            }
            Err(e) => {
                prop_assert!(stride != 1 && stride * k != n);
                prop_assert_eq!(e, GroupingError::TransposeNotRepresentable { grouping });
            }
        }
    }

    /// Huge groupings transpose without overflow or panic.
    #[test]
    fn transpose_never_panics((n, s, k) in huge_grouping()) {
        let grouping = g(n, s, k);
        if let Ok(t) = grouping.transpose() {
            prop_assert_eq!(t.transpose(), Ok(grouping));
        }
    }

    /// The text form names the stored triple.
    #[test]
    fn replica_grouping_text_form((n, s, k) in small_grouping()) {
        let grouping = g(n, s, k);
        prop_assert_eq!(
            grouping.to_string(),
            format!(
                "ReplicaGrouping(numReplicas={n}, stride={}, groupSize={k})",
                grouping.stride()
            )
        );
    }

    /// All → (N,1,N), Consecutive k → (N,1,k), Orthogonal k → (N,N/k,k) with group g =
    /// {g, g+G, …}, None → (N,1,1); back from a grouping: size 1 is None, size N is All,
    /// stride G is Orthogonal, stride 1 is Consecutive, nothing else has a name. Catches an
    /// Orthogonal that takes `k` as the stride instead of the group size.
    #[test]
    fn comm_groups_map_to_groupings((n, s, k) in small_grouping()) {
        let groups = n / k;
        prop_assert_eq!(CommGroup::All.to_grouping(n), Ok(g(n, 1, n)));
        prop_assert_eq!(CommGroup::None.to_grouping(n), Ok(g(n, 1, 1)));
        prop_assert_eq!(CommGroup::Consecutive(k).to_grouping(n), Ok(g(n, 1, k)));
        let orthogonal = CommGroup::Orthogonal(k).to_grouping(n).unwrap();
        prop_assert_eq!(orthogonal, g(n, groups, k));
        for group in 0..groups {
            let members: Vec<usize> = orthogonal.members(group).unwrap().collect();
            let expected: Vec<usize> = (0..k).map(|i| group + i * groups).collect();
            prop_assert_eq!(members, expected);
        }

        let grouping = g(n, s, k);
        let named = CommGroup::from_grouping(&grouping);
        let expected = if k == 1 {
            Some(CommGroup::None)
        } else if k == n {
            Some(CommGroup::All)
        } else if grouping.stride() == groups {
            Some(CommGroup::Orthogonal(k))
        } else if grouping.stride() == 1 {
            Some(CommGroup::Consecutive(k))
        } else {
            None
        };
        prop_assert_eq!(named.ok(), expected);
        if let Ok(comm) = named {
            prop_assert_eq!(comm.to_grouping(n), Ok(grouping));
        }
    }

    /// A comm group that fits `N` survives the trip through its grouping, up to the two
    /// names every size has: size 1 is None and size N is All.
    #[test]
    fn comm_groups_round_trip(n in 1usize..64, k in 1usize..64, kind in 0u8..4) {
        let comm = match kind {
            0 => CommGroup::All,
            1 => CommGroup::None,
            2 => CommGroup::Consecutive(k),
            _ => CommGroup::Orthogonal(k),
        };
        match comm.to_grouping(n) {
            Ok(grouping) => {
                let size = grouping.group_size();
                let expected = match comm {
                    _ if size == 1 => CommGroup::None,
                    _ if size == n => CommGroup::All,
                    other => other,
                };
                prop_assert_eq!(CommGroup::from_grouping(&grouping), Ok(expected));
            }
            Err(e) => {
                prop_assert!(n % k != 0);
                prop_assert_eq!(e, GroupingError::CommGroupSize { group_size: k, replicas: n });
            }
        }
    }

    /// `CommGroup`'s text form round-trips: every value displays as text that parses back
    /// to it, and any text that parses displays as text that parses to the same value.
    #[test]
    fn comm_group_text_round_trips(k in any::<usize>(), kind in 0u8..4, text in "(all|none|consecutive|orthogonal|[a-z]{0,3})(:[+-]?[0-9]{0,22})?") {
        let comm = match kind {
            0 => CommGroup::All,
            1 => CommGroup::None,
            2 => CommGroup::Consecutive(k),
            _ => CommGroup::Orthogonal(k),
        };
        prop_assert_eq!(comm.to_string().parse::<CommGroup>(), Ok(comm));
        if let Ok(parsed) = text.parse::<CommGroup>() {
            prop_assert_eq!(parsed.to_string().parse::<CommGroup>(), Ok(parsed));
        }
    }

    /// `AnchorReturnType`'s text form round-trips for every value with a positive period
    /// (up to `usize::MAX`); `everyn:0` is refused as not positive. Catches a period parsed
    /// through a narrower type than `usize`.
    #[test]
    fn anchor_text_round_trips(p in prop_oneof![0usize..10, any::<usize>()], kind in 0u8..4, text in "(all|final|sum|everyn|EveryN|x)(:[+-]?[0-9]{0,22})?") {
        let anchor = match kind {
            0 => AnchorReturnType::All,
            1 => AnchorReturnType::Final,
            2 => AnchorReturnType::Sum,
            _ => AnchorReturnType::EveryN(p),
        };
        let parsed = anchor.to_string().parse::<AnchorReturnType>();
        if anchor == AnchorReturnType::EveryN(0) {
            prop_assert_eq!(parsed, Err(AnchorError::PeriodNotPositive));
        } else {
            prop_assert_eq!(parsed, Ok(anchor));
        }
        if let Ok(parsed) = text.parse::<AnchorReturnType>() {
            prop_assert_eq!(parsed.to_string().parse::<AnchorReturnType>(), Ok(parsed));
        }
    }
}

/// Every type's name parses back to it, and names are distinct. Catches two types sharing
/// a name (`FromStr` would return the first) and a displayed name `FromStr` does not
/// accept. (That `ALL` holds every type, in wire order, is checked with the golden bytes.)
#[test]
fn data_type_text_round_trips() {
    let mut names = BTreeSet::new();
    for t in DataType::ALL {
        assert_eq!(t.to_string().parse(), Ok(t));
        assert!(names.insert(t.name()), "two types named {t}");
    }
    assert_eq!(names.len(), DataType::ALL.len());
}
