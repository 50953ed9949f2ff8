use core::fmt;

use super::ReplicaGrouping;

/// Why a grouping could not be built or queried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GroupingError {
    /// The number of replicas is zero.
    ZeroReplicas,
    /// The stride is zero.
    ZeroStride,
    /// The group size is zero.
    ZeroGroupSize,
    /// `replicas` is not a multiple of `stride × group_size`.
    NotDivisible {
        /// Number of replicas.
        replicas: usize,
        /// Stride between the members of a group.
        stride: usize,
        /// Members per group.
        group_size: usize,
    },
    /// A replica index at or past the number of replicas.
    ReplicaOutOfRange {
        /// The index asked for.
        replica: usize,
        /// The grouping it was asked of.
        grouping: ReplicaGrouping,
    },
    /// A group index at or past the number of groups.
    GroupOutOfRange {
        /// The index asked for.
        group: usize,
        /// The grouping it was asked of.
        grouping: ReplicaGrouping,
    },
    /// A member index at or past the group size.
    MemberOutOfRange {
        /// The index asked for.
        member: usize,
        /// The grouping it was asked of.
        grouping: ReplicaGrouping,
    },
    /// The transpose of this grouping is not itself a strided grouping.
    TransposeNotRepresentable {
        /// The grouping that has no transpose.
        grouping: ReplicaGrouping,
    },
    /// This grouping is none of All, Consecutive, Orthogonal or None.
    NotACommGroup {
        /// The grouping that has no comm-group name.
        grouping: ReplicaGrouping,
    },
    /// A comm group whose size does not divide the number of replicas (or is zero).
    CommGroupSize {
        /// The requested group size.
        group_size: usize,
        /// Number of replicas.
        replicas: usize,
    },
}

impl fmt::Display for GroupingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroReplicas => f.write_str("the number of replicas must be greater than 0"),
            Self::ZeroStride => f.write_str("the stride must be greater than 0"),
            Self::ZeroGroupSize => f.write_str("the group size must be greater than 0"),
            Self::NotDivisible {
                replicas,
                stride,
                group_size,
            } => write!(
                f,
                "the number of replicas ({replicas}) must be divisible by \
                 stride × group size ({stride} × {group_size})"
            ),
            Self::ReplicaOutOfRange { replica, grouping } => write!(
                f,
                "The requested replica index is outside the valid range for '{grouping}'. \
                 (replica {replica}, valid 0..{})",
                grouping.replicas()
            ),
            Self::GroupOutOfRange { group, grouping } => write!(
                f,
                "group {group} is outside the valid range 0..{} for '{grouping}'",
                grouping.num_groups()
            ),
            Self::MemberOutOfRange { member, grouping } => write!(
                f,
                "member index {member} is outside the valid range 0..{} for '{grouping}'",
                grouping.group_size()
            ),
            Self::TransposeNotRepresentable { grouping } => write!(
                f,
                "the transpose of '{grouping}' is not a strided grouping \
                 (needs stride 1 or stride × group size = replicas)"
            ),
            Self::NotACommGroup { grouping } => write!(
                f,
                "'{grouping}' is not a comm group (all, none, consecutive or orthogonal)"
            ),
            Self::CommGroupSize {
                group_size,
                replicas,
            } => write!(
                f,
                "comm group size {group_size} must be greater than 0 and divide \
                 the number of replicas ({replicas})"
            ),
        }
    }
}

impl core::error::Error for GroupingError {}
