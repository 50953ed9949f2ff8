use super::ReplicaGrouping;

/// Why a grouping could not be built or queried.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error,
)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GroupingError {
    /// The number of replicas is zero.
    #[error("the number of replicas must be greater than 0")]
    ZeroReplicas,
    /// The stride is zero.
    #[error("the stride must be greater than 0")]
    ZeroStride,
    /// The group size is zero.
    #[error("the group size must be greater than 0")]
    ZeroGroupSize,
    /// `replicas` is not a multiple of `stride × group_size`.
    #[error(
        "the number of replicas ({replicas}) must be divisible by \
         stride × group size ({stride} × {group_size})"
    )]
    NotDivisible {
        /// Number of replicas.
        replicas: usize,
        /// Stride between the members of a group.
        stride: usize,
        /// Members per group.
        group_size: usize,
    },
    /// A replica index at or past the number of replicas.
    #[error(
        "The requested replica index is outside the valid range for '{grouping}'. \
         (replica {replica}, valid 0..{})",
        .grouping.replicas()
    )]
    ReplicaOutOfRange {
        /// The index asked for.
        replica: usize,
        /// The grouping it was asked of.
        grouping: ReplicaGrouping,
    },
    /// A group index at or past the number of groups.
    #[error(
        "group {group} is outside the valid range 0..{} for '{grouping}'",
        .grouping.num_groups()
    )]
    GroupOutOfRange {
        /// The index asked for.
        group: usize,
        /// The grouping it was asked of.
        grouping: ReplicaGrouping,
    },
    /// A member index at or past the group size.
    #[error(
        "member index {member} is outside the valid range 0..{} for '{grouping}'",
        .grouping.group_size()
    )]
    MemberOutOfRange {
        /// The index asked for.
        member: usize,
        /// The grouping it was asked of.
        grouping: ReplicaGrouping,
    },
    /// The transpose of this grouping is not itself a strided grouping.
    #[error(
        "the transpose of '{grouping}' is not a strided grouping \
         (needs stride 1 or stride × group size = replicas)"
    )]
    TransposeNotRepresentable {
        /// The grouping that has no transpose.
        grouping: ReplicaGrouping,
    },
    /// This grouping is none of All, Consecutive, Orthogonal or None.
    #[error("'{grouping}' is not a comm group (all, none, consecutive or orthogonal)")]
    NotACommGroup {
        /// The grouping that has no comm-group name.
        grouping: ReplicaGrouping,
    },
    /// A comm group whose size does not divide the number of replicas (or is zero).
    #[error(
        "comm group size {group_size} must be greater than 0 and divide \
         the number of replicas ({replicas})"
    )]
    CommGroupSize {
        /// The requested group size.
        group_size: usize,
        /// Number of replicas.
        replicas: usize,
    },
}
