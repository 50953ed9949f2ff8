//! The three layout rules: the sizes each one gives, and the interval of the gathered
//! buffer it assigns to each stretch of the reference tensor.

use super::{Interval, LayoutKind, Padding, Pieces, ShardError};

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
        Ok(Pieces::new(*self, shard_range, next, end))
    }

    /// The padding of shard `shard`: ranges of the shard, in shard order, that hold no
    /// reference element.
    pub fn padding(&self, shard: usize) -> Result<Padding<'a>, ShardError> {
        let pieces = self.pieces(shard)?;
        Ok(Padding::new(pieces, self.per_replica))
    }

    fn interval_count(&self) -> usize {
        match self.rule {
            Rule::Balanced { filled } | Rule::PaddedTail { filled } => filled,
            Rule::Explicit(list) => list.len(),
        }
    }

    /// Interval `i` and the reference index of its first element. For explicit layouts
    /// the reference index is not known without a scan; `Pieces` tracks it itself.
    pub(super) fn interval(&self, i: usize) -> Option<(Interval, usize)> {
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
                // ⌊r·n/V⌋ (at most n), in native width: a wider division is a library
                // call, slow on every target and, on a small one, flash it cannot spare.
                // When r·n does not fit: with n = q·V + m (m < V), r·n/V = r·q + r·m/V,
                // and r·q ≤ n.
                let split = |r: usize| match r.checked_mul(self.elements) {
                    Some(product) => product / filled,
                    None => {
                        let (q, m) = (self.elements / filled, self.elements % filled);
                        r * q + mul_div(r, m, filled)
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

/// ⌊a·b/d⌋ for `a ≤ d` and `b < d` (so the quotient is at most `a`), without a wider type:
/// long division over the bits of `a`, keeping `prefix·b = quotient·d + rest` with
/// `rest < d` — every sum is formed as a difference from `d`, so nothing overflows.
fn mul_div(a: usize, b: usize, d: usize) -> usize {
    debug_assert!(a <= d && b < d, "mul_div({a}, {b}, {d}) outside its rule");
    let (mut quotient, mut rest) = (0usize, 0usize);
    for bit in (0..usize::BITS).rev() {
        // Double the prefix: 2·rest may pass d once.
        quotient <<= 1;
        if rest >= d - rest {
            rest -= d - rest;
            quotient += 1;
        } else {
            rest <<= 1;
        }
        if (a >> bit) & 1 == 1 {
            if rest >= d - b {
                rest -= d - b;
                quotient += 1;
            } else {
                rest += b;
            }
        }
    }
    quotient
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a wide product divided wrongly: `mul_div` against 128-bit arithmetic at the
    /// edges of the native width (the balanced layout's fallback when r·n overflows).
    #[test]
    fn mul_div_matches_wide_arithmetic() {
        let max = usize::MAX;
        let cases = [
            (0, 0, 1),
            (1, 0, 1),
            (3, 2, 3),
            (max, max - 1, max),
            (max - 1, max - 2, max),
            (max / 2 + 1, max / 3, max / 2 + 7),
            (12345, 999, 12346),
            (1 << 40, (1 << 40) - 1, (1 << 40) + 5),
        ];
        for (a, b, d) in cases {
            let wide = a as u128 * b as u128 / d as u128;
            assert_eq!(mul_div(a, b, d) as u128, wide, "{a}·{b}/{d}");
        }
    }

    proptest::proptest! {
        /// The same, over the whole rule: any `d`, any `a ≤ d`, any `b < d`.
        #[test]
        fn mul_div_is_exact(d in 1usize.., a_frac in 0.0f64..=1.0, b_frac in 0.0f64..1.0) {
            let (a, b) = ((d as f64 * a_frac) as usize, (d as f64 * b_frac) as usize);
            let (a, b) = (a.min(d), b.min(d - 1));
            let wide = a as u128 * b as u128 / d as u128;
            proptest::prop_assert_eq!(mul_div(a, b, d) as u128, wide);
        }
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
