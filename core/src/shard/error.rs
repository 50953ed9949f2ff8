//! Why a shard layout could not be built or queried.

use core::fmt;

/// Why a shard layout could not be built or queried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ShardError {
    /// A shard domain of zero replicas.
    ZeroDomain,
    /// A shard index at or past the domain size.
    ShardOutOfRange {
        /// The shard asked for.
        shard: usize,
        /// The domain size.
        domain: usize,
    },
    /// The gathered size (or a sum of interval lengths) overflows `usize`.
    TooLarge,
    /// An explicit interval that is reversed or leaves the gathered buffer.
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
    IntervalsOverlap {
        /// Position of the earlier interval.
        first: usize,
        /// Position of the later one.
        second: usize,
    },
    /// Explicit intervals whose lengths do not add up to the tensor's elements.
    CoverageMismatch {
        /// Sum of the interval lengths.
        covered: usize,
        /// Elements of the tensor.
        elements: usize,
    },
}

impl fmt::Display for ShardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroDomain => f.write_str("the shard domain must hold at least one replica"),
            Self::ShardOutOfRange { shard, domain } => {
                write!(
                    f,
                    "shard {shard} is outside the shard domain of {domain} replicas"
                )
            }
            Self::TooLarge => f.write_str("the gathered buffer size overflows usize"),
            Self::IntervalOutOfBounds {
                index,
                begin,
                end,
                gathered,
            } => write!(
                f,
                "interval {index} [{begin}, {end}) must be ordered and lie inside the \
                 gathered buffer [0, {gathered})"
            ),
            Self::IntervalsOverlap { first, second } => {
                write!(
                    f,
                    "intervals {first} and {second} overlap; intervals must be disjoint"
                )
            }
            Self::CoverageMismatch { covered, elements } => write!(
                f,
                "the intervals cover {covered} elements but the tensor has {elements}"
            ),
        }
    }
}

impl core::error::Error for ShardError {}
