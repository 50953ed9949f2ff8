use core::fmt;

use crate::grouping::GroupingError;
use crate::shard::ShardError;

/// Why a [`WeightLayout`](super::WeightLayout) could not be built or queried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LayoutError {
    /// Elements of zero bytes.
    ZeroElementSize,
    /// An instance window that owns no replica.
    EmptyWindow,
    /// An instance window that reaches past the last replica.
    WindowOutOfRange {
        /// First global replica of the window.
        offset: usize,
        /// Replicas in the window.
        local: usize,
        /// Number of global replicas.
        replicas: usize,
    },
    /// A shard layout built for a different number of elements.
    ShardElements {
        /// Elements the shard layout was built for.
        shard: usize,
        /// Elements of the variable.
        elements: usize,
    },
    /// A shard domain that does not divide the group size.
    DomainNotDividingGroup {
        /// Replicas in the shard domain.
        domain: usize,
        /// Members per group.
        group_size: usize,
    },
    /// A byte size that overflows `usize`.
    TooLarge,
    /// A local replica index at or past the window size.
    LocalOutOfRange {
        /// The index asked for.
        local: usize,
        /// Replicas in the window.
        count: usize,
    },
    /// A grouping query failed.
    Grouping(GroupingError),
    /// A shard query failed.
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

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroElementSize => f.write_str("the element size must be greater than 0"),
            Self::EmptyWindow => f.write_str("an instance must own at least one replica"),
            Self::WindowOutOfRange {
                offset,
                local,
                replicas,
            } => write!(
                f,
                "the instance window [{offset}, {offset}+{local}) must lie inside the \
                 {replicas} replicas"
            ),
            Self::ShardElements { shard, elements } => write!(
                f,
                "the shard layout is for {shard} elements but the variable has {elements}"
            ),
            Self::DomainNotDividingGroup { domain, group_size } => write!(
                f,
                "the shard domain ({domain}) must divide the group size ({group_size})"
            ),
            Self::TooLarge => f.write_str("the buffer size in bytes overflows usize"),
            Self::LocalOutOfRange { local, count } => {
                write!(
                    f,
                    "local replica {local} is outside the instance's {count} replicas"
                )
            }
            Self::Grouping(e) => e.fmt(f),
            Self::Shard(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for LayoutError {}

/// Why a weight transfer failed. `E` is the error of the caller's
/// [`RemoteSlots`](super::RemoteSlots).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TransferError<E> {
    /// A host buffer of the wrong size.
    HostSize {
        /// Bytes the layout needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A remote slot of the wrong size.
    SlotSize {
        /// Global replica owning the slot.
        replica: usize,
        /// Bytes the layout needs.
        expected: usize,
        /// Bytes the slot has.
        actual: usize,
    },
    /// The layout could not place a replica.
    Layout(LayoutError),
    /// The caller's slots failed.
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

impl<E: fmt::Display> fmt::Display for TransferError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HostSize { expected, actual } => write!(
                f,
                "the host buffer has {actual} bytes but the layout needs exactly {expected}"
            ),
            Self::SlotSize {
                replica,
                expected,
                actual,
            } => write!(
                f,
                "the remote slot of replica {replica} has {actual} bytes but the layout \
                 needs exactly {expected}"
            ),
            Self::Layout(e) => e.fmt(f),
            Self::Remote { replica, error } => {
                write!(f, "the remote slot of replica {replica} failed: {error}")
            }
        }
    }
}

impl<E: fmt::Debug + fmt::Display> core::error::Error for TransferError<E> {}
