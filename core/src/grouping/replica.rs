use core::fmt;

use super::GroupingError;

/// Which replicas share a value: `N` replicas in groups of `k` members spaced `s` apart
/// (`N` = `replicas`, `s` = `stride`, `k` = `group_size`).
///
/// # Rules
///
/// - **Valid** iff `N > 0`, `s > 0`, `k > 0` and `N` is a multiple of `s·k`. A group size
///   of 1 stores stride 1, and equality compares the stored triple, so (4, 2, 1) ==
///   (4, 1, 1).
/// - The replicas form blocks of `s·k` consecutive replicas, each holding `s` interleaved
///   groups; there are `G = N / k` groups.
/// - [`group_of`](Self::group_of)`(r) = r % s + s·⌊r / (s·k)⌋`, for `r < N`.
/// - [`replica_at`](Self::replica_at)`(g, i) = ⌊g / s⌋·s·k + g % s + i·s`, for `g < G` and
///   `i < k`.
/// - [`index_in_group`](Self::index_in_group)`(r) = (r − replica_at(group_of(r), 0)) / s`,
///   so that `replica_at(group_of(r), index_in_group(r)) == r`.
/// - [`members`](Self::members)`(g)` is `replica_at(g, i)` for `i` in `0..k`;
///   [`assignment`](Self::assignment) is `group_of(r)` for `r` in `0..N`.
/// - [`transpose`](Self::transpose) makes groups that take one member from each group of
///   this one: `(N, k, G)` when `s == 1`, `(N, 1, s)` when `s·k == N` (a single block),
///   otherwise an error. The result is validated and normalised again, so transposing
///   twice gives the grouping back.
/// - The text form ([`Display`](fmt::Display)) is
///   `ReplicaGrouping(numReplicas=N, stride=s, groupSize=k)`, with the stored stride.
///
/// Queries outside these ranges are errors.
///
/// # Examples
///
/// ```
/// use tessera_core::grouping::ReplicaGrouping;
///
/// // 8 replicas, stride 2, groups of 4: groups [0, 2, 4, 6] and [1, 3, 5, 7].
/// let grouping = ReplicaGrouping::new(8, 2, 4)?;
/// assert_eq!(grouping.assignment().collect::<Vec<_>>(), [0, 1, 0, 1, 0, 1, 0, 1]);
/// assert_eq!(grouping.index_in_group(5)?, 2);
/// assert_eq!(grouping.replica_at(1, 2)?, 5);
/// assert_eq!(grouping.transpose()?, ReplicaGrouping::new(8, 1, 2)?);
/// // (12, 3, 2) has two blocks of three interleaved groups: no strided transpose.
/// assert!(ReplicaGrouping::new(12, 3, 2)?.transpose().is_err());
/// # Ok::<(), tessera_core::grouping::GroupingError>(())
/// ```
// It travels inside errors on the wire; a decoded one is rebuilt through `new`, so no
// bytes can make a grouping with a zero group size (which `num_groups` divides by).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "GroupingParts", into = "GroupingParts")]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ReplicaGrouping {
    replicas: usize,
    stride: usize,
    group_size: usize,
}

/// A [`ReplicaGrouping`]'s fields as they travel, checked by [`ReplicaGrouping::new`] when
/// decoded.
#[derive(serde::Serialize, serde::Deserialize)]
struct GroupingParts {
    replicas: usize,
    stride: usize,
    group_size: usize,
}

impl TryFrom<GroupingParts> for ReplicaGrouping {
    type Error = GroupingError;

    fn try_from(p: GroupingParts) -> Result<Self, GroupingError> {
        Self::new(p.replicas, p.stride, p.group_size)
    }
}

impl From<ReplicaGrouping> for GroupingParts {
    fn from(g: ReplicaGrouping) -> Self {
        Self {
            replicas: g.replicas,
            stride: g.stride,
            group_size: g.group_size,
        }
    }
}

impl ReplicaGrouping {
    /// Validates and normalises a grouping.
    ///
    /// ```
    /// use tessera_core::grouping::{GroupingError, ReplicaGrouping};
    ///
    /// // A group of one has no spacing: (4, 2, 1) is stored, and compares, as (4, 1, 1).
    /// let singles = ReplicaGrouping::new(4, 2, 1)?;
    /// assert_eq!((singles.stride(), singles.num_groups()), (1, 4));
    /// assert_eq!(singles, ReplicaGrouping::new(4, 1, 1)?);
    /// // 6 replicas do not form whole blocks of 2·2.
    /// assert!(matches!(ReplicaGrouping::new(6, 2, 2), Err(GroupingError::NotDivisible { .. })));
    /// # Ok::<(), GroupingError>(())
    /// ```
    pub fn new(replicas: usize, stride: usize, group_size: usize) -> Result<Self, GroupingError> {
        if replicas == 0 {
            return Err(GroupingError::ZeroReplicas);
        }
        if stride == 0 {
            return Err(GroupingError::ZeroStride);
        }
        if group_size == 0 {
            return Err(GroupingError::ZeroGroupSize);
        }
        // An overflowing block size is certainly larger than `replicas`: not divisible.
        let divides = stride
            .checked_mul(group_size)
            .is_some_and(|block| replicas.is_multiple_of(block));
        if !divides {
            return Err(GroupingError::NotDivisible {
                replicas,
                stride,
                group_size,
            });
        }
        let stride = if group_size == 1 { 1 } else { stride };
        Ok(Self {
            replicas,
            stride,
            group_size,
        })
    }

    /// One group holding every replica.
    pub fn all(replicas: usize) -> Result<Self, GroupingError> {
        Self::new(replicas, 1, replicas)
    }

    /// Every replica in a group of its own.
    pub fn none(replicas: usize) -> Result<Self, GroupingError> {
        Self::new(replicas, 1, 1)
    }

    /// Number of replicas.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Distance between consecutive members of a group (stored, normalised form).
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Members per group.
    pub fn group_size(&self) -> usize {
        self.group_size
    }

    /// Number of groups, `replicas / group_size`.
    pub fn num_groups(&self) -> usize {
        self.replicas / self.group_size
    }

    /// The group that replica `replica` belongs to.
    pub fn group_of(&self, replica: usize) -> Result<usize, GroupingError> {
        if replica >= self.replicas {
            return Err(GroupingError::ReplicaOutOfRange {
                replica,
                grouping: *self,
            });
        }
        Ok(replica % self.stride + self.stride * (replica / self.block()))
    }

    /// The replica that is member `member` of group `group`.
    pub fn replica_at(&self, group: usize, member: usize) -> Result<usize, GroupingError> {
        if group >= self.num_groups() {
            return Err(GroupingError::GroupOutOfRange {
                group,
                grouping: *self,
            });
        }
        if member >= self.group_size {
            return Err(GroupingError::MemberOutOfRange {
                member,
                grouping: *self,
            });
        }
        Ok((group / self.stride) * self.block() + group % self.stride + member * self.stride)
    }

    /// The position of replica `replica` within its group.
    pub fn index_in_group(&self, replica: usize) -> Result<usize, GroupingError> {
        let first = self.replica_at(self.group_of(replica)?, 0)?;
        Ok((replica - first) / self.stride)
    }

    /// The members of group `group`, in member order.
    pub fn members(&self, group: usize) -> Result<Members, GroupingError> {
        let first = self.replica_at(group, 0)?;
        Ok(Members {
            next: first,
            stride: self.stride,
            left: self.group_size,
        })
    }

    /// The group of every replica, in replica order.
    pub fn assignment(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        (0..self.replicas).map(|r| r % self.stride + self.stride * (r / self.block()))
    }

    /// The grouping whose groups take one member from each group of this one.
    ///
    /// Only defined where the result is itself a strided grouping: stride 1, or one block
    /// spanning all replicas.
    pub fn transpose(&self) -> Result<Self, GroupingError> {
        if self.stride == 1 {
            Self::new(self.replicas, self.group_size, self.num_groups())
        } else if self.block() == self.replicas {
            Self::new(self.replicas, 1, self.stride)
        } else {
            Err(GroupingError::TransposeNotRepresentable { grouping: *self })
        }
    }

    /// Replicas per block of interleaved groups; never overflows once validated.
    fn block(&self) -> usize {
        self.stride * self.group_size
    }
}

impl fmt::Display for ReplicaGrouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ReplicaGrouping(numReplicas={}, stride={}, groupSize={})",
            self.replicas, self.stride, self.group_size
        )
    }
}

/// Iterator over the members of one group; see [`ReplicaGrouping::members`].
#[derive(Debug, Clone)]
pub struct Members {
    next: usize,
    stride: usize,
    left: usize,
}

impl Iterator for Members {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let member = self.next;
        // The last member plus a stride may pass `usize::MAX` for huge groupings; it is
        // never returned, so saturate instead of overflowing.
        self.next = self.next.saturating_add(self.stride);
        Some(member)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Members {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn g(n: usize, s: usize, k: usize) -> ReplicaGrouping {
        ReplicaGrouping::new(n, s, k).unwrap()
    }

    #[test]
    fn groups_of_interleaved_grouping() {
        let grouping = g(4, 2, 2);
        let groups: Vec<Vec<usize>> = (0..2)
            .map(|x| grouping.members(x).unwrap().collect())
            .collect();
        assert_eq!(groups, [[0, 2], [1, 3]]);
    }

    #[test]
    fn assignment_and_index_in_group() {
        let grouping = g(8, 2, 4);
        assert_eq!(
            grouping.assignment().collect::<Vec<_>>(),
            [0, 1, 0, 1, 0, 1, 0, 1]
        );
        let index: Vec<usize> = (0..8)
            .map(|r| grouping.index_in_group(r).unwrap())
            .collect();
        assert_eq!(index, [0, 0, 1, 1, 2, 2, 3, 3]);
    }

    #[test]
    fn group_size_one_normalises_stride() {
        assert_eq!(g(4, 2, 1), g(4, 1, 1));
        assert_eq!(g(4, 4, 1).stride(), 1);
    }

    #[test]
    fn transpose_examples() {
        assert_eq!(g(16, 1, 4).transpose(), Ok(g(16, 4, 4)));
        assert_eq!(g(16, 1, 16).transpose(), Ok(g(16, 1, 1)));
        assert!(matches!(
            g(12, 3, 2).transpose(),
            Err(GroupingError::TransposeNotRepresentable { .. })
        ));
    }

    #[test]
    fn overflowing_block_is_not_divisible() {
        assert!(matches!(
            ReplicaGrouping::new(4, usize::MAX, 2),
            Err(GroupingError::NotDivisible { .. })
        ));
    }

    #[test]
    fn out_of_range_queries_are_errors() {
        let grouping = g(4, 1, 2);
        assert!(grouping.group_of(4).is_err());
        assert!(grouping.replica_at(2, 0).is_err());
        assert!(grouping.replica_at(0, 2).is_err());
        assert!(grouping.members(2).is_err());
    }

    #[test]
    fn members_of_the_last_group_do_not_overflow() {
        let n = usize::MAX - usize::MAX % 2;
        let grouping = g(n, n / 2, 2);
        let last: Vec<usize> = grouping.members(n / 2 - 1).unwrap().collect();
        assert_eq!(last, [n / 2 - 1, n - 1]);
    }
}
