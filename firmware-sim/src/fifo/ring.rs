//! One FIFO: its items in a ring, the arena block of [`Owner::Fifo`](crate::arena::Owner),
//! and every check of a move against them.
//!
//! # Rules
//!
//! - The ring holds `depth` items of `item_bytes` bytes: complete items from the oldest
//!   (`head`), then the bytes of the next item already written. Positions past the ring's
//!   end wrap to its start.
//! - A write goes where the next byte goes and fits the free bytes ([`ErrorCode::FifoFull`]
//!   otherwise); a read starts at the oldest item and takes whole, complete items
//!   ([`ErrorCode::FifoEmpty`], [`ErrorCode::ItemSize`]); a move that starts elsewhere is
//!   [`ErrorCode::FifoPosition`], and one that would run past the ring's end
//!   [`ErrorCode::OutOfBounds`]. A check changes nothing: bytes written count once they
//!   moved (items as they complete), items read leave the ring.
//! - When the ring holds nothing, complete or partial, it restarts at the block's
//!   beginning.

use core::ops::Range;

use tessera_core::wire::ErrorCode;

use crate::arena::{saturate, Access, Block};
use crate::divisor::Divisor;

/// One FIFO's bookkeeping; its items live in the arena block of [`Owner::Fifo`](crate::arena::Owner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fifo {
    /// FIFO id.
    pub id: u16,
    /// Bytes per item.
    pub item_bytes: usize,
    /// Division by `item_bytes`: a step counts every lane's pushes in items.
    per_item: Divisor,
    /// Items it holds.
    pub depth: usize,
    /// Index of the oldest item.
    head: usize,
    /// Complete items held.
    len: usize,
    /// Bytes of the next item already written.
    partial: usize,
    /// Its ring: the arena's block for it, found once (a block never moves while it is
    /// allocated, and this one is freed only with the FIFO).
    block: Block,
}

impl Fifo {
    /// FIFO `id`, empty, of `depth` items of `item_bytes` in `block`.
    pub(super) fn new(id: u16, item_bytes: usize, depth: usize, block: Block) -> Self {
        Self {
            id,
            item_bytes,
            per_item: Divisor::new(item_bytes),
            depth,
            head: 0,
            len: 0,
            partial: 0,
            block,
        }
    }

    /// [`Fifos::place`](super::Fifos::place)'s rules on this FIFO.
    pub(super) fn place(
        &self,
        offset: u32,
        len: usize,
        access: Access,
    ) -> Result<(Block, Range<usize>), ErrorCode> {
        if access == Access::Read && self.per_item.divide(len) * self.item_bytes != len {
            return Err(ErrorCode::ItemSize {
                expected: saturate(self.item_bytes),
                actual: saturate(len),
            });
        }
        self.place_items(offset, len, access)
    }

    /// [`Fifo::place`] for a move of whole items (the caller counted them): every rule
    /// but that one.
    fn place_items(
        &self,
        offset: u32,
        len: usize,
        access: Access,
    ) -> Result<(Block, Range<usize>), ErrorCode> {
        let id = self.id;
        let ring = self.block.len;
        let used = self.len * self.item_bytes + self.partial;
        let position = match access {
            Access::Write => wrap(self.head * self.item_bytes + used, ring),
            Access::Read => self.head * self.item_bytes,
        };
        if offset as usize != position {
            return Err(ErrorCode::FifoPosition {
                fifo: id,
                expected: saturate(position),
                offset,
            });
        }
        match access {
            Access::Write if len > ring - used => return Err(ErrorCode::FifoFull { fifo: id }),
            Access::Read if len > self.len * self.item_bytes => {
                return Err(ErrorCode::FifoEmpty { fifo: id })
            }
            _ => {}
        }
        if position + len > ring {
            return Err(ErrorCode::OutOfBounds {
                offset,
                len: saturate(len),
                size: saturate(ring),
            });
        }
        Ok((self.block, position..position + len))
    }

    /// Checks a move of the whole ring from its start by [`Fifo::place`]'s rules (the host
    /// wrote a step's items into the empty FIFO, or read every item of a full one), and
    /// counts it when `settle`.
    pub(super) fn whole(&mut self, access: Access, settle: bool) -> Result<(), ErrorCode> {
        // The whole ring: whole items by construction.
        self.place_items(0, self.item_bytes * self.depth, access)?;
        // The whole ring from position 0 was free (a write) or held whole items (a read):
        // settled, it is full from its start, or empty (what `settle` would count, without
        // its divisions: a step settles every lane's FIFOs).
        if settle {
            match access {
                Access::Write => self.len = self.depth,
                Access::Read => (self.head, self.len) = (0, 0),
            }
        }
        Ok(())
    }

    /// Counts `len` bytes placed by [`Fifo::place`] as moved: written ones become the
    /// FIFO's (items as they complete), read ones leave it.
    pub(super) fn settle(&mut self, len: usize, access: Access) {
        match access {
            Access::Write => self.commit(len),
            Access::Read => self.take(self.per_item.divide(len)),
        }
    }

    /// The block and the ring offset where `len` more bytes start, if they fit.
    pub(super) fn reserve(&self, len: usize) -> Result<(Block, usize), ErrorCode> {
        let block = self.block;
        // `len ≤ depth` and `partial < item_bytes`, and the block holds `depth·item_bytes`
        // (> 0, checked at creation).
        let ring = block.len;
        let used = self.len * self.item_bytes + self.partial;
        if len > ring - used {
            return Err(ErrorCode::FifoFull { fifo: self.id });
        }
        Ok((block, wrap(self.head * self.item_bytes + used, ring)))
    }

    /// Complete items that one pop can take: those before the ring's end (a pop never
    /// wraps it).
    pub(super) fn poppable(&self) -> usize {
        self.len.min(self.depth - self.head)
    }

    /// Removes the `items` oldest items; returns the block and byte range where they still
    /// lie (valid until the next push).
    pub(super) fn pop(&mut self, items: usize) -> Result<(Block, Range<usize>), ErrorCode> {
        if items == 0 {
            return Err(ErrorCode::FifoEmpty { fifo: self.id });
        }
        let oldest = saturate(self.head * self.item_bytes);
        let len = items.saturating_mul(self.item_bytes);
        // Whole items by construction, counted as such: a step pops every lane's FIFOs,
        // and a division per pop is a good part of a pop's cost.
        let range = self.place_items(oldest, len, Access::Read)?;
        self.take(items);
        Ok(range)
    }

    /// Drops every item, complete and partial: the ring restarts at the block's
    /// beginning, as a FIFO that was never pushed to.
    pub(super) fn empty(&mut self) {
        self.head = 0;
        self.len = 0;
        self.partial = 0;
    }

    /// Counts `items` items read: they leave the ring. A read placed by `place` takes at
    /// most the items held: within one turn of the ring (`wrap` is exact for any count,
    /// should a caller settle more).
    fn take(&mut self, items: usize) {
        self.head = wrap(self.head.saturating_add(items), self.depth);
        self.len -= items.min(self.len);
        if self.len == 0 && self.partial == 0 {
            self.head = 0;
        }
    }

    /// Counts `len` bytes written: items as they complete.
    pub(super) fn commit(&mut self, len: usize) {
        let written = self.partial + len;
        let items = self.per_item.divide(written);
        self.len += items;
        self.partial = written - items * self.item_bytes;
    }
}

/// `at` within a ring of `ring` (items or bytes, at least one): a position past the end
/// starts again from the beginning. Positions come within two turns of the ring, where a
/// comparison does what a division's remainder does.
fn wrap(at: usize, ring: usize) -> usize {
    match at.checked_sub(ring) {
        None => at,
        Some(past) if past < ring => past,
        Some(_) => at % ring.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a wrap that differs from the remainder it stands for: every position of up
    /// to three turns of rings of 1 to 9.
    #[test]
    fn wrap_is_the_remainder() {
        for ring in 1..10 {
            for at in 0..3 * ring {
                assert_eq!(wrap(at, ring), at % ring, "{at} in {ring}");
            }
        }
    }
}
