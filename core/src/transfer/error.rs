use crate::grouping::GroupingError;
use crate::shard::ShardError;

/// Why a [`WeightLayout`](super::WeightLayout) could not be built or queried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LayoutError {
    /// Elements of zero bytes.
    #[error("the element size must be greater than 0")]
    ZeroElementSize,
    /// An instance window that owns no replica.
    #[error("an instance must own at least one replica")]
    EmptyWindow,
    /// An instance window that reaches past the last replica.
    #[error(
        "the instance window [{offset}, {offset}+{local}) must lie inside the \
         {replicas} replicas"
    )]
    WindowOutOfRange {
        /// First global replica of the window.
        offset: usize,
        /// Replicas in the window.
        local: usize,
        /// Number of global replicas.
        replicas: usize,
    },
    /// A shard layout built for a different number of elements.
    #[error("the shard layout is for {shard} elements but the variable has {elements}")]
    ShardElements {
        /// Elements the shard layout was built for.
        shard: usize,
        /// Elements of the variable.
        elements: usize,
    },
    /// A shard domain that does not divide the group size.
    #[error("the shard domain ({domain}) must divide the group size ({group_size})")]
    DomainNotDividingGroup {
        /// Replicas in the shard domain.
        domain: usize,
        /// Members per group.
        group_size: usize,
    },
    /// A byte size that overflows `usize`.
    #[error("the buffer size in bytes overflows usize")]
    TooLarge,
    /// A local replica index at or past the window size.
    #[error("local replica {local} is outside the instance's {count} replicas")]
    LocalOutOfRange {
        /// The index asked for.
        local: usize,
        /// Replicas in the window.
        count: usize,
    },
    /// A grouping query failed.
    #[error("{0}")]
    Grouping(GroupingError),
    /// A shard query failed.
    #[error("{0}")]
    Shard(ShardError),
}

impl From<GroupingError> for LayoutError {
    fn from(e: GroupingError) -> Self {
        Self::Grouping(e)
    }
}

impl From<ShardError> for LayoutError {
    fn from(e: ShardError) -> Self {
        Self::Shard(e)
    }
}

/// Why a weight transfer failed. `E` is the error of the caller's
/// [`RemoteSlots`](super::RemoteSlots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TransferError<E> {
    /// A host buffer of the wrong size.
    #[error("the host buffer has {actual} bytes but the layout needs exactly {expected}")]
    HostSize {
        /// Bytes the layout needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A remote slot of the wrong size.
    #[error(
        "the remote slot of replica {replica} has {actual} bytes but the layout \
         needs exactly {expected}"
    )]
    SlotSize {
        /// Global replica owning the slot.
        replica: usize,
        /// Bytes the layout needs.
        expected: usize,
        /// Bytes the slot has.
        actual: usize,
    },
    /// The layout could not place a replica.
    #[error("{0}")]
    Layout(LayoutError),
    /// The caller's slots failed.
    #[error("the remote slot of replica {replica} failed: {error}")]
    Remote {
        /// Global replica whose slot failed.
        replica: usize,
        /// What the slots reported.
        error: E,
    },
}

impl<E> From<LayoutError> for TransferError<E> {
    fn from(e: LayoutError) -> Self {
        Self::Layout(e)
    }
}
