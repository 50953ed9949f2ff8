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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule<'a> {
    /// `filled` = number of shards that hold data, `⌈n/T⌉`.
    Balanced {
        filled: usize,
    },
    PaddedTail {
        filled: usize,
    },
    Explicit(&'a [Interval]),
}

/// How `elements` elements are split over `domain` shards of `per_replica` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardLayout<'a> {
    elements: usize,
    domain: usize,
    per_replica: usize,
    rule: Rule<'a>,
}

impl<'a> ShardLayout<'a> {
    /// PopART's layout: `T = ⌈n/D⌉`, `V = ⌈n/T⌉`; shard `r < V` holds reference elements
    /// `[⌊r·n/V⌋, ⌊(r+1)·n/V⌋)` at its start, shards `r ≥ V` are all padding.
    ///
    /// ```
    /// use tessera_core::shard::{Piece, ShardLayout};
    ///
    /// // 30 elements over 4 shards of 8: the shards hold 7, 8, 7 and 8 of them.
    /// let layout = ShardLayout::balanced(30, 4)?;
    /// assert_eq!((layout.per_replica(), layout.gathered_len()), (8, 32));
    /// for (shard, held) in [7, 8, 7, 8].into_iter().enumerate() {
    ///     assert_eq!(layout.pieces(shard)?.map(|p| p.len()).sum::<usize>(), held);
    /// }
    /// // Shard 1 holds reference elements 7..15 at its start.
    /// let first = layout.pieces(1)?.next();
    /// assert_eq!(first, Some(Piece { src_begin: 7, src_end: 15, dst_offset: 0 }));
    /// # Ok::<(), tessera_core::shard::ShardError>(())
    /// ```
    pub fn balanced(elements: usize, domain: usize) -> Result<Self, ShardError> {
        let (per_replica, filled) = Self::regular_sizes(elements, domain)?;
        Ok(Self {
            elements,
            domain,
            per_replica,
            rule: Rule::Balanced { filled },
        })
    }

    /// `T = ⌈n/D⌉`; shard `r` holds `[r·T, min((r+1)·T, n))`.
    pub fn padded_tail(elements: usize, domain: usize) -> Result<Self, ShardError> {
        let (per_replica, filled) = Self::regular_sizes(elements, domain)?;
        Ok(Self {
            elements,
            domain,
            per_replica,
            rule: Rule::PaddedTail { filled },
        })
    }

    /// A layout given as intervals of the gathered buffer, in reference order.
    ///
    /// The intervals must lie inside `[0, domain·per_replica)`, must not overlap, and their
    /// lengths must add up to `elements`. Empty intervals are allowed and ignored.
    pub fn explicit(
        elements: usize,
        domain: usize,
        per_replica: usize,
        intervals: &'a [Interval],
    ) -> Result<Self, ShardError> {
        if domain == 0 {
            return Err(ShardError::ZeroDomain);
        }
        let gathered = domain
            .checked_mul(per_replica)
            .ok_or(ShardError::TooLarge)?;
        let mut covered = 0usize;
        for (index, iv) in intervals.iter().enumerate() {
            if iv.begin > iv.end || iv.end > gathered {
                let (begin, end) = (iv.begin, iv.end);
                return Err(ShardError::IntervalOutOfBounds {
                    index,
                    begin,
                    end,
                    gathered,
                });
            }
            let overlap = intervals[..index]
                .iter()
                .position(|other| iv.begin < other.end && other.begin < iv.end);
            if let Some(first) = overlap {
                return Err(ShardError::IntervalsOverlap {
                    first,
                    second: index,
                });
            }
            covered = covered.checked_add(iv.len()).ok_or(ShardError::TooLarge)?;
        }
        if covered != elements {
            return Err(ShardError::CoverageMismatch { covered, elements });
        }
        Ok(Self {
            elements,
            domain,
            per_replica,
            rule: Rule::Explicit(intervals),
        })
    }

    /// `(T, V)` for the balanced and padded-tail rules; also checks `D·T` fits.
    fn regular_sizes(elements: usize, domain: usize) -> Result<(usize, usize), ShardError> {
        if domain == 0 {
            return Err(ShardError::ZeroDomain);
        }
        let per_replica = elements.div_ceil(domain);
        domain
            .checked_mul(per_replica)
            .ok_or(ShardError::TooLarge)?;
        let filled = if per_replica == 0 {
            0
        } else {
            elements.div_ceil(per_replica)
        };
        Ok((per_replica, filled))
    }

    /// Number of elements of the reference tensor.
    pub fn elements(&self) -> usize {
        self.elements
    }

    /// Number of shards, `D`.
    pub fn domain(&self) -> usize {
        self.domain
    }

    /// Elements per shard, padding included, `T`.
    pub fn per_replica(&self) -> usize {
        self.per_replica
    }

    /// Elements of the gathered buffer, `D·T` (checked when the layout was built).
    pub fn gathered_len(&self) -> usize {
        // Cannot overflow: checked by every constructor.
        self.domain * self.per_replica
    }

    /// Which rule this layout follows.
    pub fn kind(&self) -> LayoutKind {
        match self.rule {
            Rule::Balanced { .. } => LayoutKind::Balanced,
            Rule::PaddedTail { .. } => LayoutKind::PaddedTail,
            Rule::Explicit(_) => LayoutKind::Explicit,
        }
    }

    /// The layout's intervals of the gathered buffer, in reference order.
    pub fn intervals(&self) -> impl Iterator<Item = Interval> + 'a {
        let this = *self;
        (0..this.interval_count()).filter_map(move |i| this.interval(i).map(|(iv, _)| iv))
    }

    /// The reference elements held by shard `shard`, in reference order.
    pub fn pieces(&self, shard: usize) -> Result<Pieces<'a>, ShardError> {
        if shard >= self.domain {
            return Err(ShardError::ShardOutOfRange {
                shard,
                domain: self.domain,
            });
        }
        // A regular layout's interval `i` lies inside shard `i`, so only one can match.
        let (next, end) = match self.rule {
            Rule::Explicit(list) => (0, list.len()),
            Rule::Balanced { filled } | Rule::PaddedTail { filled } => {
                (shard.min(filled), (shard + 1).min(filled))
            }
        };
        // Cannot overflow: `shard < D`, so the shard ends by `D·T`, checked at build.
        let first = shard * self.per_replica;
        let shard_range = Interval {
            begin: first,
            end: first + self.per_replica,
        };
        Ok(Pieces {
            layout: *self,
            shard: shard_range,
            next,
            end,
            reference: 0,
        })
    }

    /// The padding of shard `shard`: ranges of the shard, in shard order, that hold no
    /// reference element.
    pub fn padding(&self, shard: usize) -> Result<Padding<'a>, ShardError> {
        let pieces = self.pieces(shard)?;
        Ok(Padding {
            pieces,
            cursor: 0,
            per_replica: self.per_replica,
        })
    }

    fn interval_count(&self) -> usize {
        match self.rule {
            Rule::Balanced { filled } | Rule::PaddedTail { filled } => filled,
            Rule::Explicit(list) => list.len(),
        }
    }

    /// Interval `i` and the reference index of its first element. For explicit layouts
    /// the reference index is not known without a scan; `Pieces` tracks it itself.
    fn interval(&self, i: usize) -> Option<(Interval, usize)> {
        let t = self.per_replica;
        match self.rule {
            Rule::Explicit(list) => list.get(i).map(|iv| (*iv, 0)),
            Rule::PaddedTail { filled } => {
                // `i < filled` implies `i·T < n`, so neither product overflows.
                (i < filled).then(|| {
                    let begin = i * t;
                    let len = t.min(self.elements - begin);
                    (
                        Interval {
                            begin,
                            end: begin + len,
                        },
                        begin,
                    )
                })
            }
            Rule::Balanced { filled } => (i < filled).then(|| {
                // ⌊r·n/V⌋ (at most n). Native width when r·n fits: a 128-bit division
                // is a slow library call on every target.
                let split = |r: usize| match r.checked_mul(self.elements) {
                    Some(product) => product / filled,
                    None => {
                        let wide = r as u128 * self.elements as u128 / filled as u128;
                        usize::try_from(wide).unwrap_or(self.elements)
                    }
                };
                let (from, to) = (split(i), split(i + 1));
                // Cannot overflow: `i < V ≤ D`, and `D·T` was checked at build.
                let begin = i * t;
                (
                    Interval {
                        begin,
                        end: begin + (to - from),
                    },
                    from,
                )
            }),
        }
    }
}

/// Iterator over the pieces of one shard; see [`ShardLayout::pieces`].
#[derive(Debug, Clone)]
pub struct Pieces<'a> {
    layout: ShardLayout<'a>,
    shard: Interval,
    next: usize,
    end: usize,
    /// Reference index of interval `next` (explicit layouts only).
    reference: usize,
}

impl Iterator for Pieces<'_> {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        while self.next < self.end {
            let (iv, regular_start) = self.layout.interval(self.next)?;
            self.next += 1;
            let start = match self.layout.rule {
                Rule::Explicit(_) => {
                    let start = self.reference;
                    self.reference += iv.len();
                    start
                }
                _ => regular_start,
            };
            let lo = iv.begin.max(self.shard.begin);
            let hi = iv.end.min(self.shard.end);
            if lo < hi {
                let src_begin = start + (lo - iv.begin);
                return Some(Piece {
                    src_begin,
                    src_end: src_begin + (hi - lo),
                    dst_offset: lo - self.shard.begin,
                });
            }
        }
        None
    }
}

/// Iterator over the padding of one shard; see [`ShardLayout::padding`].
#[derive(Debug, Clone)]
pub struct Padding<'a> {
    pieces: Pieces<'a>,
    cursor: usize,
    per_replica: usize,
}

impl Iterator for Padding<'_> {
    type Item = Interval;

    fn next(&mut self) -> Option<Interval> {
        // Pieces of one shard are disjoint but, in explicit layouts, in any order: walk the
        // shard from the cursor, skipping the piece that covers it or stopping at the next.
        while self.cursor < self.per_replica {
            let mut next_start = self.per_replica;
            let mut covering_end = None;
            for piece in self.pieces.clone() {
                let piece_end = piece.dst_offset + piece.len();
                if piece.dst_offset <= self.cursor && self.cursor < piece_end {
                    covering_end = Some(piece_end);
                    break;
                }
                if piece.dst_offset > self.cursor {
                    next_start = next_start.min(piece.dst_offset);
                }
            }
            match covering_end {
                Some(end) => self.cursor = end,
                None => {
                    let gap = Interval {
                        begin: self.cursor,
                        end: next_start,
                    };
                    self.cursor = next_start;
                    return Some(gap);
                }
            }
        }
        None
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn pieces(layout: &ShardLayout<'_>, shard: usize) -> Vec<(usize, usize, usize)> {
        let pieces = layout.pieces(shard).unwrap();
        pieces
            .map(|p| (p.src_begin, p.src_end, p.dst_offset))
            .collect()
    }

    fn padding(layout: &ShardLayout<'_>, shard: usize) -> Vec<(usize, usize)> {
        layout
            .padding(shard)
            .unwrap()
            .map(|iv| (iv.begin, iv.end))
            .collect()
    }

    #[test]
    fn balanced_thirty_over_four() {
        let layout = ShardLayout::balanced(30, 4).unwrap();
        assert_eq!(layout.per_replica(), 8);
        let held: Vec<usize> = (0..4)
            .map(|m| pieces(&layout, m)[0].1 - pieces(&layout, m)[0].0)
            .collect();
        assert_eq!(held, [7, 8, 7, 8]);
        assert_eq!(pieces(&layout, 1), [(7, 15, 0)]);
        assert_eq!(padding(&layout, 0), [(7, 8)]);
        assert_eq!(padding(&layout, 1), []);
    }

    #[test]
    fn balanced_leaves_trailing_shards_empty() {
        // n = 5, D = 4: T = 2, V = 3; shard 3 is all padding.
        let layout = ShardLayout::balanced(5, 4).unwrap();
        assert_eq!(pieces(&layout, 3), []);
        assert_eq!(padding(&layout, 3), [(0, 2)]);
    }

    #[test]
    fn padded_tail_pads_the_last_shard() {
        let layout = ShardLayout::padded_tail(30, 4).unwrap();
        assert_eq!(pieces(&layout, 3), [(24, 30, 0)]);
        assert_eq!(padding(&layout, 3), [(6, 8)]);
        let layout = ShardLayout::padded_tail(5, 4).unwrap();
        assert_eq!(pieces(&layout, 2), [(4, 5, 0)]);
        assert_eq!(pieces(&layout, 3), []);
    }

    #[test]
    fn explicit_intervals_may_cross_shards_in_any_order() {
        // Gathered buffer of 2 shards × 4: the tensor's first 3 elements at [5, 8), the
        // next 3 at [1, 4) (crossing no boundary), so shard 0 has padding at 0 and 3.
        let list = [Interval { begin: 5, end: 8 }, Interval { begin: 1, end: 4 }];
        let layout = ShardLayout::explicit(6, 2, 4, &list).unwrap();
        assert_eq!(pieces(&layout, 0), [(3, 6, 1)]);
        assert_eq!(pieces(&layout, 1), [(0, 3, 1)]);
        assert_eq!(padding(&layout, 0), [(0, 1)]);
        assert_eq!(padding(&layout, 1), [(0, 1)]);
        let crossing = [Interval { begin: 2, end: 6 }];
        let layout = ShardLayout::explicit(4, 2, 4, &crossing).unwrap();
        assert_eq!(pieces(&layout, 0), [(0, 2, 2)]);
        assert_eq!(pieces(&layout, 1), [(2, 4, 0)]);
    }

    #[test]
    fn explicit_validation() {
        let out = [Interval { begin: 0, end: 9 }];
        assert!(matches!(
            ShardLayout::explicit(9, 2, 4, &out),
            Err(ShardError::IntervalOutOfBounds {
                index: 0,
                gathered: 8,
                ..
            })
        ));
        let overlap = [Interval { begin: 0, end: 3 }, Interval { begin: 2, end: 4 }];
        assert_eq!(
            ShardLayout::explicit(5, 2, 4, &overlap),
            Err(ShardError::IntervalsOverlap {
                first: 0,
                second: 1
            })
        );
        let short = [Interval { begin: 0, end: 3 }];
        assert_eq!(
            ShardLayout::explicit(4, 2, 4, &short),
            Err(ShardError::CoverageMismatch {
                covered: 3,
                elements: 4
            })
        );
        assert_eq!(
            ShardLayout::explicit(0, 0, 4, &[]),
            Err(ShardError::ZeroDomain)
        );
    }

    #[test]
    fn empty_tensor_has_empty_shards() {
        let layout = ShardLayout::balanced(0, 4).unwrap();
        assert_eq!(layout.per_replica(), 0);
        assert_eq!(pieces(&layout, 0), []);
        assert_eq!(padding(&layout, 0), []);
    }

    #[test]
    fn huge_sizes_do_not_overflow() {
        let layout = ShardLayout::balanced(usize::MAX, 3).unwrap();
        let total: usize = (0..3)
            .map(|m| layout.pieces(m).unwrap().map(|p| p.len()).sum::<usize>())
            .sum();
        assert_eq!(total, usize::MAX);
        assert_eq!(
            ShardLayout::balanced(usize::MAX, usize::MAX - 1),
            Err(ShardError::TooLarge)
        );
    }
}
