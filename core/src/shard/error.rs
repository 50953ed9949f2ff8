//! Why a shard layout could not be built or queried.

/// Why a shard layout could not be built or queried.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error,
)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ShardError {
    /// A shard domain of zero replicas.
    #[error("the shard domain must hold at least one replica")]
    ZeroDomain,
    /// A shard index at or past the domain size.
    #[error("shard {shard} is outside the shard domain of {domain} replicas")]
    ShardOutOfRange {
        /// The shard asked for.
        shard: usize,
        /// The domain size.
        domain: usize,
    },
    /// The gathered size (or a sum of interval lengths) overflows `usize`.
    #[error("the gathered buffer size overflows usize")]
    TooLarge,
    /// An explicit interval that is reversed or leaves the gathered buffer.
    #[error(
        "interval {index} [{begin}, {end}) must be ordered and lie inside the \
         gathered buffer [0, {gathered})"
    )]
    IntervalOutOfBounds {
        /// Position of the interval in the list.
        index: usize,
        /// Its first element.
        begin: usize,
        /// One past its last element.
        end: usize,
        /// Size of the gathered buffer, `D·T`.
        gathered: usize,
    },
    /// Two explicit intervals share elements.
    #[error("intervals {first} and {second} overlap; intervals must be disjoint")]
    IntervalsOverlap {
        /// Position of the earlier interval.
        first: usize,
        /// Position of the later one.
        second: usize,
    },
    /// Explicit intervals whose lengths do not add up to the tensor's elements.
    #[error("the intervals cover {covered} elements but the tensor has {elements}")]
    CoverageMismatch {
        /// Sum of the interval lengths.
        covered: usize,
        /// Elements of the tensor.
        elements: usize,
    },
}
