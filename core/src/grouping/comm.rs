use core::fmt;

use super::{GroupingError, ReplicaGrouping};

/// The named groupings users write.
///
/// `Consecutive(k)` and `Orthogonal(k)` both make groups of `k` members; consecutive groups
/// are blocks of neighbours, orthogonal groups take every `(N / k)`-th replica.
///
/// # Rules
///
/// As a grouping `(N, stride, group size)` of `N` replicas ([`to_grouping`](Self::to_grouping)):
///
/// - `All` → `(N, 1, N)`: one group;
/// - `Consecutive(k)` → `(N, 1, k)`: groups `{0..k}`, `{k..2k}`, …;
/// - `Orthogonal(k)` → `(N, N/k, k)`: `G = N/k` groups of `k` members spaced `G` apart,
///   group `g` = `{g, g+G, g+2G, …}`;
/// - `None` → `(N, 1, 1)`: every replica alone.
///
/// `k` must divide `N`. Back from a grouping ([`from_grouping`](Self::from_grouping)), the
/// tests run in this order: group size 1 → `None`; group size `N` → `All`; stride `G` →
/// `Orthogonal(k)`; stride 1 → `Consecutive(k)`; any other grouping has no name. So a
/// comm group survives the round trip except that size 1 comes back as `None` and size `N`
/// as `All`.
///
/// The text form ([`Display`](fmt::Display) and [`FromStr`](core::str::FromStr)) is
/// `all`, `none`, `consecutive:K` or `orthogonal:K`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CommGroup {
    /// One group of all replicas.
    All,
    /// Groups of `k` consecutive replicas.
    Consecutive(usize),
    /// `N / k` groups of `k` members spaced `N / k` apart.
    Orthogonal(usize),
    /// Every replica alone.
    None,
}

impl CommGroup {
    /// This comm group as a grouping of `replicas` replicas.
    ///
    /// **tessera:** unlike PopART, a size that does not divide `replicas` is an error
    /// rather than a grouping that silently drops the remaining replicas.
    pub fn to_grouping(self, replicas: usize) -> Result<ReplicaGrouping, GroupingError> {
        if replicas == 0 {
            return Err(GroupingError::ZeroReplicas);
        }
        let checked = |k: usize| {
            if k == 0 || !replicas.is_multiple_of(k) {
                Err(GroupingError::CommGroupSize {
                    group_size: k,
                    replicas,
                })
            } else {
                Ok(k)
            }
        };
        match self {
            Self::All => ReplicaGrouping::all(replicas),
            Self::None => ReplicaGrouping::none(replicas),
            Self::Consecutive(k) => ReplicaGrouping::new(replicas, 1, checked(k)?),
            Self::Orthogonal(k) => ReplicaGrouping::new(replicas, replicas / checked(k)?, k),
        }
    }

    /// The comm group that names `grouping`, if there is one.
    pub fn from_grouping(grouping: &ReplicaGrouping) -> Result<Self, GroupingError> {
        let k = grouping.group_size();
        if k == 1 {
            Ok(Self::None)
        } else if k == grouping.replicas() {
            Ok(Self::All)
        } else if grouping.stride() == grouping.num_groups() {
            Ok(Self::Orthogonal(k))
        } else if grouping.stride() == 1 {
            Ok(Self::Consecutive(k))
        } else {
            Err(GroupingError::NotACommGroup {
                grouping: *grouping,
            })
        }
    }
}

/// The command-line form: `all`, `none`, `consecutive:K`, `orthogonal:K`.
impl fmt::Display for CommGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::None => f.write_str("none"),
            Self::Consecutive(k) => write!(f, "consecutive:{k}"),
            Self::Orthogonal(k) => write!(f, "orthogonal:{k}"),
        }
    }
}

impl core::str::FromStr for CommGroup {
    type Err = CommGroupParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let size = |k: &str| k.parse().map_err(|_| CommGroupParseError);
        match text.split_once(':') {
            None if text == "all" => Ok(Self::All),
            None if text == "none" => Ok(Self::None),
            Some(("consecutive", k)) => Ok(Self::Consecutive(size(k)?)),
            Some(("orthogonal", k)) => Ok(Self::Orthogonal(size(k)?)),
            _ => Err(CommGroupParseError),
        }
    }
}

/// Text that is not `all`, `none`, `consecutive:K` or `orthogonal:K`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[error("a comm group is one of all, none, consecutive:K or orthogonal:K")]
pub struct CommGroupParseError;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_groupings() {
        for comm in [
            CommGroup::All,
            CommGroup::None,
            CommGroup::Consecutive(2),
            CommGroup::Orthogonal(2),
        ] {
            let grouping = comm.to_grouping(8).unwrap();
            assert_eq!(CommGroup::from_grouping(&grouping), Ok(comm));
        }
    }

    #[test]
    fn orthogonal_groups_are_spaced_by_group_count() {
        let grouping = CommGroup::Orthogonal(4).to_grouping(16).unwrap();
        assert_eq!((grouping.stride(), grouping.group_size()), (4, 4));
    }

    #[test]
    fn sizes_that_do_not_divide_are_rejected() {
        let err = CommGroup::Consecutive(3).to_grouping(8).unwrap_err();
        assert_eq!(
            err,
            GroupingError::CommGroupSize {
                group_size: 3,
                replicas: 8
            }
        );
        assert!(CommGroup::Orthogonal(0).to_grouping(8).is_err());
    }

    #[test]
    fn parses_the_command_line_form() {
        assert_eq!("orthogonal:4".parse(), Ok(CommGroup::Orthogonal(4)));
        assert_eq!("all".parse(), Ok(CommGroup::All));
        assert!("consecutive".parse::<CommGroup>().is_err());
        assert!("all:2".parse::<CommGroup>().is_err());
    }
}
