//! What one shard holds: the pieces of the reference tensor in it, and the padding
//! between them.

use super::{Interval, LayoutKind, Piece, ShardLayout};

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

impl<'a> Pieces<'a> {
    /// The pieces of `layout` inside `shard` (a range of the gathered buffer), from its
    /// intervals `next..end`: those that can reach into the shard.
    pub(super) fn new(layout: ShardLayout<'a>, shard: Interval, next: usize, end: usize) -> Self {
        Self {
            layout,
            shard,
            next,
            end,
            reference: 0,
        }
    }
}

impl Iterator for Pieces<'_> {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        while self.next < self.end {
            let (iv, regular_start) = self.layout.interval(self.next)?;
            self.next += 1;
            let start = match self.layout.kind() {
                LayoutKind::Explicit => {
                    let start = self.reference;
                    self.reference += iv.len();
                    start
                }
                LayoutKind::Balanced | LayoutKind::PaddedTail => regular_start,
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

impl<'a> Padding<'a> {
    /// The padding around `pieces`, in a shard of `per_replica` elements.
    pub(super) fn new(pieces: Pieces<'a>, per_replica: usize) -> Self {
        Self {
            pieces,
            cursor: 0,
            per_replica,
        }
    }
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
    fn empty_tensor_has_empty_shards() {
        let layout = ShardLayout::balanced(0, 4).unwrap();
        assert_eq!(layout.per_replica(), 0);
        assert_eq!(pieces(&layout, 0), []);
        assert_eq!(padding(&layout, 0), []);
    }
}
