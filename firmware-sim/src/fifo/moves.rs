//! Bytes moving in and out of the device's FIFOs: a step's pushes (from its scratch) and
//! pops, the host's moves by ring position, and whole rings.
//!
//! # Rules
//!
//! - Every move looks its FIFO up once (a step moves every lane's FIFOs, hundreds on a
//!   device of many lanes) and is checked by the FIFO's ring ([`Fifo`](super::Fifo)'s
//!   rules) before a byte moves: a refused move changes nothing.
//! - A push writes where the next byte goes, across the ring's end if it must, and counts
//!   its bytes at once; a pop takes whole items from the oldest and never wraps the ring's
//!   end.
//! - The host's moves are placed first ([`Fifos::place`]) and counted only once the bytes
//!   moved ([`Fifos::settle`]); a whole ring, placed and counted at once, is what a step
//!   fed or read in place moves.

use core::ops::Range;

use tessera_core::wire::{ErrorCode, Invariant};

use super::Fifos;
use crate::arena::{Access, Arena, Block};
use crate::broken;

impl Fifos {
    /// Appends `data` (see the module's contract): the tests' push (a step pushes from
    /// its scratch, [`Fifos::push_from`]; the host places its bytes).
    #[cfg(test)]
    pub fn push(&mut self, arena: &mut Arena<'_>, id: u16, data: &[u8]) -> Result<(), ErrorCode> {
        let fifo = self.entry_mut(id)?;
        let (block, start) = fifo.reserve(data.len())?;
        let (first, second) = data.split_at(data.len().min(block.len - start));
        let bytes = arena.bytes_mut(block);
        bytes[start..start + first.len()].copy_from_slice(first);
        bytes[..second.len()].copy_from_slice(second);
        fifo.commit(data.len());
        Ok(())
    }

    /// Appends bytes `range` of arena block `from` (a model tensor in the step's scratch).
    pub fn push_from(
        &mut self,
        arena: &mut Arena<'_>,
        id: u16,
        from: Block,
        range: Range<usize>,
    ) -> Result<(), ErrorCode> {
        let len = range.len();
        let fifo = self.entry_mut(id)?;
        let (block, start) = fifo.reserve(len)?;
        let (source, ring) = arena
            .pair_mut(from, block)
            .ok_or(broken(Invariant::BlockPair))?;
        let data = source.get(range).ok_or(broken(Invariant::FifoRing))?;
        // `reserve` placed `len` bytes from `start`, wrapping once: the checks below cannot
        // fail, and leave no panic path.
        let room = ring
            .len()
            .checked_sub(start)
            .ok_or(broken(Invariant::FifoRing))?;
        let (first, second) = data.split_at(len.min(room));
        let (head, tail) = ring.split_at_mut(start);
        let copied = (tail.get_mut(..first.len()))
            .is_some_and(|tail| crate::copy_exact(tail, first))
            && (head.get_mut(..second.len())).is_some_and(|head| crate::copy_exact(head, second));
        if !copied {
            return Err(broken(Invariant::FifoRing));
        }
        fifo.commit(len);
        Ok(())
    }

    /// Where the host's `len` bytes at ring position `offset` of FIFO `id` lie, checked by
    /// the stream rules of [`Target`](tessera_core::wire::Target): a write must start where
    /// the next byte goes and fit the free bytes, a read must start at the oldest item and
    /// take whole, complete items, and neither may run past the ring's end. Nothing
    /// changes until [`Fifos::settle`].
    pub fn place(
        &self,
        id: u16,
        offset: u32,
        len: usize,
        access: Access,
    ) -> Result<(Block, Range<usize>), ErrorCode> {
        let (_, fifo) = self.entry(id)?;
        fifo.place(offset, len, access)
    }

    /// Counts `len` bytes placed by [`Fifos::place`] as moved: written ones become the
    /// FIFO's (items as they complete), read ones leave it.
    pub fn settle(&mut self, id: u16, len: usize, access: Access) {
        if let Ok(fifo) = self.entry_mut(id) {
            fifo.settle(len, access);
        }
    }

    /// Checks a move of FIFO `id`'s whole ring from its start by [`Fifos::place`]'s rules
    /// (the host wrote a step's items into the empty FIFO, or read every item of a full
    /// one), and counts it when `settle`: the tests' lookup to compare a walk with.
    #[cfg(test)]
    pub fn whole(&mut self, id: u16, access: Access, settle: bool) -> Result<(), ErrorCode> {
        let mut walk = self.entry(id)?.0;
        self.whole_walking(&mut walk, id, access, settle)
    }

    /// A whole-ring move of FIFO `id` (as the tests' `whole`), the FIFO found by a walk
    /// over the table in id order that stands at `walk` (left past the FIFO): a step's
    /// whole rings are every lane's FIFOs in id order, found one after the other in the
    /// table instead of looked up one by one. An id behind the walk, or one it does not
    /// meet, is looked up.
    pub fn whole_walking(
        &mut self,
        walk: &mut usize,
        id: u16,
        access: Access,
        settle: bool,
    ) -> Result<(), ErrorCode> {
        self.walk_to(walk, id)?.whole(access, settle)
    }

    /// Removes the `items` oldest items; returns the block and byte range where they still
    /// lie (valid until the next push).
    pub fn pop(&mut self, id: u16, items: usize) -> Result<(Block, Range<usize>), ErrorCode> {
        self.entry_mut(id)?.pop(items)
    }

    /// [`Fifos::pop`] when the `items` oldest items lie in one piece before the ring's end
    /// (a pop never wraps it), else `None` and nothing changes: a step pops a whole pass's
    /// items at once where it can, with one lookup.
    pub fn pop_in_one(
        &mut self,
        id: u16,
        items: usize,
    ) -> Result<Option<(Block, Range<usize>)>, ErrorCode> {
        let fifo = self.entry_mut(id)?;
        if fifo.poppable() < items {
            return Ok(None);
        }
        fifo.pop(items).map(Some)
    }

    /// Complete items of FIFO `id` that one [`Fifos::pop`] can take: those before the
    /// ring's end (a pop never wraps it). The tests'; a step asks [`Fifos::pop_in_one`].
    #[cfg(test)]
    pub fn poppable(&self, id: u16) -> Result<usize, ErrorCode> {
        let (_, fifo) = self.entry(id)?;
        Ok(fifo.poppable())
    }

    /// Drops every item of FIFO `id`, complete and partial, keeping the FIFO: its ring
    /// restarts at the block's beginning, as a FIFO that was never pushed to.
    pub fn empty(&mut self, id: u16) -> Result<(), ErrorCode> {
        self.entry_mut(id)?.empty();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO left with a partial item (a failed step's inputs cut short) would start the
    /// next step's items at the wrong offset; emptying must forget partial bytes too.
    #[test]
    fn empty_forgets_complete_and_partial_items() {
        let mut memory = [0u8; 256];
        let mut arena = Arena::new(&mut memory);
        let mut fifos = Fifos::default();
        fifos.create(&mut arena, 7, 4, 3).unwrap();
        fifos.push(&mut arena, 7, &[1, 2, 3, 4, 5, 6]).unwrap();
        fifos.empty(7).unwrap();
        assert_eq!(fifos.pop(7, 1), Err(ErrorCode::FifoEmpty { fifo: 7 }));
        // The whole depth fits again, and items start at the first byte.
        fifos.push(&mut arena, 7, &[9; 12]).unwrap();
        let (block, range) = fifos.pop(7, 3).unwrap();
        assert_eq!(range, 0..12);
        assert_eq!(&arena.bytes(block)[range], &[9; 12]);
        assert_eq!(fifos.empty(8), Err(ErrorCode::UnknownId { id: 8 }));
    }

    /// A step pops a pass's items at once only when one pop can take them all: items
    /// that wrap the ring's end are poppable only up to it.
    #[test]
    fn poppable_items_stop_at_the_rings_end() {
        let mut memory = [0u8; 256];
        let mut arena = Arena::new(&mut memory);
        let mut fifos = Fifos::default();
        fifos.create(&mut arena, 7, 4, 4).unwrap();
        assert_eq!(fifos.poppable(7), Ok(0));
        fifos.push(&mut arena, 7, &[1; 12]).unwrap();
        assert_eq!(fifos.poppable(7), Ok(3));
        fifos.pop(7, 2).unwrap();
        // Three more: one before the ring's end, two from its start.
        fifos.push(&mut arena, 7, &[2; 12]).unwrap();
        assert_eq!(fifos.poppable(7), Ok(2));
        assert!(fifos.pop(7, 3).is_err(), "three would wrap the end");
        fifos.pop(7, 2).unwrap();
        assert_eq!(fifos.poppable(7), Ok(2));
        assert_eq!(fifos.poppable(8), Err(ErrorCode::UnknownId { id: 8 }));
    }

    /// Catches a walk that settles another FIFO than the one named, or skips one: ids in
    /// order, with gaps, out of order and missing, walked, each ring counted as a lookup
    /// would count it.
    #[test]
    fn a_walk_finds_what_a_lookup_finds() {
        let (mut one, mut other) = ([0u8; 512], [0u8; 512]);
        let (mut walked, mut looked) = (Fifos::default(), Fifos::default());
        let ids = [1u16, 2, 5, 7, 0x201, 0x202, 0x205];
        for (fifos, memory) in [(&mut walked, &mut one), (&mut looked, &mut other)] {
            let mut arena = Arena::new(memory);
            for &id in &ids {
                fifos.create(&mut arena, id, 4, 2).unwrap();
            }
        }
        let mut walk = 0;
        for id in [1u16, 5, 0x201, 2, 0x205, 0x205, 3] {
            let got = walked.whole_walking(&mut walk, id, Access::Write, true);
            assert_eq!(got, looked.whole(id, Access::Write, true), "{id:#x}");
        }
        for &id in &ids {
            assert_eq!(walked.get(id), looked.get(id), "{id:#x}");
        }
    }

    /// Catches a whole ring settled otherwise than its bytes moved by position would be: a
    /// whole write and a whole read leave each FIFO as `place` then `settle` do.
    #[test]
    fn a_whole_ring_settles_as_its_bytes_would() {
        let (mut one, mut other) = ([0u8; 64], [0u8; 64]);
        let (mut whole, mut moved) = (Fifos::default(), Fifos::default());
        for (fifos, memory) in [(&mut whole, &mut one), (&mut moved, &mut other)] {
            fifos.create(&mut Arena::new(memory), 9, 4, 3).unwrap();
        }
        for access in [Access::Write, Access::Read] {
            whole.whole(9, access, true).unwrap();
            let (_, range) = moved.place(9, 0, 12, access).unwrap();
            moved.settle(9, range.len(), access);
            assert_eq!(whole.get(9), moved.get(9), "{access:?}");
        }
        assert_eq!(whole.poppable(9), Ok(0));
    }
}
