//! Shard layouts for replicated weight sharding.
//!
//! A sharded variable of `n` elements is spread over a *shard domain* of `D` replicas. Each
//! replica holds a shard of `T` elements, padding included; the *gathered* buffer is the
//! `D` shards one after another (`D·T` elements). A layout is the list of intervals of the
//! gathered buffer that, concatenated in order, reproduce the tensor; positions outside
//! every interval are padding and hold zeros.
//!
//! # Layouts
//!
//! - **Balanced** ([`ShardLayout::balanced`], PopART's layout for a tensor in one region):
//!   `T = ⌈n/D⌉` and `V = ⌈n/T⌉` shards hold data. Shard `r < V` holds reference elements
//!   `[⌊r·n/V⌋, ⌊(r+1)·n/V⌋)` at its start, padding after them; shards `r ≥ V` are all
//!   padding. For `n = 30`, `D = 4`: `T = 8` and the shards hold 7, 8, 7 and 8 elements.
//! - **Padded tail** ([`ShardLayout::padded_tail`], FSDP and DeepSpeed): `T = ⌈n/D⌉`;
//!   shard `r` holds `[r·T, min((r+1)·T, n))`, so only the tail is padding.
//! - **Explicit** ([`ShardLayout::explicit`]): `D`, `T` and the intervals as loaded from a
//!   saved executable. The intervals must lie inside `[0, D·T)`, be disjoint, and have
//!   lengths adding up to `n`.
//!
//! All layouts answer the same two questions through one code path: which [`Piece`]s of the
//! reference tensor shard `m` holds ([`ShardLayout::pieces`]), and which parts of it are
//! padding ([`ShardLayout::padding`]).
//!
//! # Panics
//!
//! Nothing here panics. Explicit interval lists are validated when the layout is built, and
//! every size is computed with checked arithmetic.
//!
//! # Files
//!
//! - `layout`: the three rules and the interval list each makes ([`ShardLayout`]).
//! - `pieces`: what one shard holds and where its padding is ([`Pieces`], [`Padding`]).
//! - `error`: [`ShardError`], the rule a layout or a query breaks.

mod error;
mod layout;
mod pieces;

pub use error::ShardError;
pub use layout::ShardLayout;
pub use pieces::{Padding, Pieces};

use core::fmt;

/// A half-open range `[begin, end)` of the gathered buffer, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Interval {
    /// First element.
    pub begin: usize,
    /// One past the last element.
    pub end: usize,
}

impl Interval {
    /// Number of elements (0 for an empty or reversed interval).
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.begin)
    }

    /// True when the interval holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Part of the reference tensor held by one shard: elements `[src_begin, src_end)` of the
/// tensor sit at element `dst_offset` of the shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Piece {
    /// First reference element.
    pub src_begin: usize,
    /// One past the last reference element.
    pub src_end: usize,
    /// Where the first element lands in the shard.
    pub dst_offset: usize,
}

impl Piece {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.src_end.saturating_sub(self.src_begin)
    }

    /// True when the piece holds no element (never returned by [`Pieces`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which rule places the tensor in the gathered buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LayoutKind {
    /// PopART's collective layout: elements spread evenly over the first `⌈n/T⌉` shards.
    Balanced,
    /// FSDP/DeepSpeed: every shard full but the last, which is padded at its tail.
    PaddedTail,
    /// An interval list loaded from elsewhere.
    Explicit,
}

impl fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Balanced => "balanced",
            Self::PaddedTail => "padded-tail",
            Self::Explicit => "explicit",
        })
    }
}
