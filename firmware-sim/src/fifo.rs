//! Stream FIFOs: a ring of fixed-size items inside an arena block, filled as a byte stream
//! and emptied by whole items.
//!
//! # Contract
//!
//! - A push appends any number of bytes: a step's worth of samples in one request, or a
//!   sample larger than a frame in several. Items become poppable as they complete. A push
//!   that does not fit the free bytes is refused whole (nothing is written).
//! - A pop takes `n ≥ 1` whole items, all or none, and hands back where they lie in the
//!   arena (one contiguous range, valid until the next push). When a FIFO empties, its ring
//!   restarts at the block's beginning, so a FIFO filled by one step and emptied after it
//!   always pops contiguously; a pop that would wrap the ring's end is refused
//!   ([`ErrorCode::OutOfBounds`]) rather than answered in pieces.
//! - The host moves a FIFO's bytes by ring position ([`Fifos::place`], then
//!   [`Fifos::settle`] once they moved): a write appends where the next byte goes, a read
//!   takes whole items from the oldest, and neither wraps the ring's end — the same rules
//!   whether the bytes came in a frame, beside it, or were written in place by the host.
//! - A FIFO has items of at least one byte and a depth of at least one
//!   ([`ErrorCode::FifoShape`] otherwise).
use core::ops::Range;

use tessera_core::program::lanes::LANE_IDS;
use tessera_core::wire::{ErrorCode, Invariant};

use crate::arena::{saturate, Access, Arena, Block, Owner};
use crate::divisor::Divisor;
use crate::{broken, shift};

/// FIFOs a device can hold: 16 for a device of one lane; 8 more per lane it can run (a
/// program has at most 4 streams and 2 anchors, each a FIFO in every lane).
pub const MAX_FIFOS: usize = 8 + 8 * crate::program::MAX_LANES;

/// One FIFO's bookkeeping; its items live in the arena block of [`Owner::Fifo`].
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

/// The device's FIFOs, in id order, found by their id's lane: a step pops and pushes every
/// lane's FIFOs (hundreds on a device of many lanes), in orders the device does not choose
/// (the host feeds and reads them too), so a lookup goes straight to its lane's few
/// entries and searches only their ids, which lie apart from the entries: a search reads
/// a few bytes of one cache line, not a line of every entry it passes.
#[derive(Debug)]
pub struct Fifos {
    table: heapless::Vec<Fifo, MAX_FIFOS>,
    /// Each entry's id, in the table's order.
    ids: heapless::Vec<u16, MAX_FIFOS>,
    /// Where each lane's entries start in the table (lane `l`'s lie in
    /// `starts[l]..starts[l + 1]`), rebuilt whenever the table changes. The lane of an id
    /// is its place in core's lanes rule (`id / LANE_IDS`); a device of one lane may use
    /// any id, so every id's "lane" has its place.
    starts: [u16; LANES_OF_IDS + 1],
}

/// The lanes ids fall into: every u16 has one. The firmware's one lane needs no index.
const LANES_OF_IDS: usize = if crate::program::MAX_LANES == 1 {
    1
} else {
    (u16::MAX as usize + 1) / LANE_IDS as usize
};

/// The lane `id` falls into (see [`Fifos::starts`]): below [`LANES_OF_IDS`].
fn lane_of(id: u16) -> usize {
    if LANES_OF_IDS == 1 {
        0
    } else {
        usize::from(id / LANE_IDS)
    }
}

impl Default for Fifos {
    fn default() -> Self {
        Self {
            table: heapless::Vec::new(),
            ids: heapless::Vec::new(),
            starts: [0; LANES_OF_IDS + 1],
        }
    }
}

impl Fifos {
    /// Creates FIFO `id` with its storage in `arena`.
    pub fn create(
        &mut self,
        arena: &mut Arena<'_>,
        id: u16,
        item_bytes: u32,
        depth: u16,
    ) -> Result<(), ErrorCode> {
        let Err(at) = self.index(id) else {
            return Err(ErrorCode::IdInUse { id });
        };
        if self.table.is_full() {
            return Err(ErrorCode::TableFull);
        }
        if item_bytes == 0 || depth == 0 {
            let depth = u32::from(depth);
            return Err(ErrorCode::FifoShape { item_bytes, depth });
        }
        let (item_bytes, depth) = (item_bytes as usize, usize::from(depth));
        let bytes = item_bytes
            .checked_mul(depth)
            .ok_or(ErrorCode::OutOfMemory {
                requested: u32::MAX,
                available: saturate(arena.free()),
            })?;
        let block = arena.alloc(Owner::Fifo(id), bytes)?;
        let fifo = Fifo {
            id,
            item_bytes,
            per_item: Divisor::new(item_bytes),
            depth,
            head: 0,
            len: 0,
            partial: 0,
            block,
        };
        // Both have room: the table was not full.
        shift::insert(&mut self.table, at, fifo).map_err(|_| ErrorCode::TableFull)?;
        shift::insert(&mut self.ids, at, id).map_err(|_| ErrorCode::TableFull)?;
        self.index_lanes();
        Ok(())
    }

    /// Works out where each lane's entries start, after the table changed.
    fn index_lanes(&mut self) {
        let mut at = 0;
        for (lane, start) in self.starts.iter_mut().enumerate() {
            while self.ids.get(at).is_some_and(|&id| lane_of(id) < lane) {
                at += 1;
            }
            *start = at as u16; // At most MAX_FIFOS.
        }
    }

    /// Where FIFO `id` is in the table, or where it would go.
    fn index(&self, id: u16) -> Result<usize, usize> {
        let lane = lane_of(id);
        let (start, end) = match (self.starts.get(lane), self.starts.get(lane + 1)) {
            (Some(&start), Some(&end)) => (usize::from(start), usize::from(end)),
            _ => (0, self.ids.len()),
        };
        let ids = self.ids.get(start..end).unwrap_or_default();
        match ids.binary_search(&id) {
            Ok(i) => Ok(start + i),
            Err(i) => Err(start + i),
        }
    }

    /// FIFO `id`'s entry: where it is in the table, and the entry. (Every operation looks
    /// its FIFO up once: a step pops and pushes hundreds of them on a device of many lanes.)
    fn entry(&self, id: u16) -> Result<(usize, &Fifo), ErrorCode> {
        (self.index(id).ok())
            .and_then(|at| Some((at, self.table.get(at)?)))
            .ok_or(ErrorCode::UnknownId { id })
    }

    /// FIFO `id`.
    pub fn get(&self, id: u16) -> Result<Fifo, ErrorCode> {
        self.entry(id).map(|(_, f)| *f)
    }

    /// Appends `data` (see the module's contract): the tests' push (a step pushes from
    /// its scratch, [`Fifos::push_from`]; the host places its bytes).
    #[cfg(test)]
    pub fn push(&mut self, arena: &mut Arena<'_>, id: u16, data: &[u8]) -> Result<(), ErrorCode> {
        let (at, block, start) = self.reserve(id, data.len())?;
        let (first, second) = data.split_at(data.len().min(block.len - start));
        let bytes = arena.bytes_mut(block);
        bytes[start..start + first.len()].copy_from_slice(first);
        bytes[..second.len()].copy_from_slice(second);
        self.commit(at, data.len());
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
        let (at, block, start) = self.reserve(id, len)?;
        let (source, ring) = arena
            .pair_mut(from, block)
            .ok_or(broken(Invariant::BlockPair))?;
        let data = source.get(range).ok_or(broken(Invariant::FifoRing))?;
        let (first, second) = data.split_at(len.min(ring.len() - start));
        ring[start..start + first.len()].copy_from_slice(first);
        ring[..second.len()].copy_from_slice(second);
        self.commit(at, len);
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
        if let Ok(at) = self.index(id) {
            self.settle_at(at, len, access);
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

    /// [`Fifos::whole`] of FIFO `id`, found by a walk over the table in id order that
    /// stands at `walk` (left past the FIFO): a step's whole rings are every lane's FIFOs
    /// in id order, found one after the other in the table instead of looked up one by
    /// one. An id behind the walk, or one it does not meet, is looked up.
    pub fn whole_walking(
        &mut self,
        walk: &mut usize,
        id: u16,
        access: Access,
        settle: bool,
    ) -> Result<(), ErrorCode> {
        let ahead = self.ids.get(*walk..).unwrap_or_default();
        let at = match ahead.iter().position(|&next| next >= id) {
            Some(i) if ahead.get(i) == Some(&id) => *walk + i,
            _ => self.entry(id)?.0,
        };
        *walk = at + 1;
        let fifo = self.table.get(at).ok_or(ErrorCode::UnknownId { id })?;
        // The whole ring: whole items by construction.
        fifo.place_items(0, fifo.item_bytes * fifo.depth, access)?;
        // The whole ring from position 0 was free (a write) or held whole items (a read):
        // settled, it is full from its start, or empty (what `settle` would count, without
        // its divisions: a step settles every lane's FIFOs).
        if let (true, Some(f)) = (settle, self.table.get_mut(at)) {
            match access {
                Access::Write => f.len = f.depth,
                Access::Read => (f.head, f.len) = (0, 0),
            }
        }
        Ok(())
    }

    /// [`Fifos::settle`] for the FIFO at `at` in the table.
    fn settle_at(&mut self, at: usize, len: usize, access: Access) {
        let Some(f) = self.table.get_mut(at) else {
            return;
        };
        match access {
            Access::Write => f.commit(len),
            Access::Read => f.take(f.per_item.divide(len)),
        }
    }

    /// FIFO `id`'s place in the table, its block and the ring offset where `len` more
    /// bytes start, if they fit.
    fn reserve(&self, id: u16, len: usize) -> Result<(usize, Block, usize), ErrorCode> {
        let (at, fifo) = self.entry(id)?;
        let block = fifo.block;
        // `len ≤ depth` and `partial < item_bytes`, and the block holds `depth·item_bytes`
        // (> 0, checked at creation).
        let ring = block.len;
        let used = fifo.len * fifo.item_bytes + fifo.partial;
        if len > ring - used {
            return Err(ErrorCode::FifoFull { fifo: id });
        }
        Ok((at, block, wrap(fifo.head * fifo.item_bytes + used, ring)))
    }

    /// Counts `len` bytes written by a push into the FIFO at `at` in the table.
    fn commit(&mut self, at: usize, len: usize) {
        if let Some(f) = self.table.get_mut(at) {
            f.commit(len);
        }
    }

    /// Forgets FIFO `id` and frees its block.
    pub fn remove(&mut self, arena: &mut Arena<'_>, id: u16) {
        if let Ok(at) = self.index(id) {
            shift::remove(&mut self.table, at);
            shift::remove(&mut self.ids, at);
            self.index_lanes();
        }
        arena.free_block(Owner::Fifo(id));
    }

    /// Removes the `items` oldest items; returns the block and byte range where they still
    /// lie (valid until the next push).
    pub fn pop(&mut self, id: u16, items: usize) -> Result<(Block, Range<usize>), ErrorCode> {
        let (at, _) = self.entry(id)?;
        self.pop_at(at, id, items)
    }

    /// [`Fifos::pop`] when the `items` oldest items lie in one piece before the ring's end
    /// (a pop never wraps it), else `None` and nothing changes: a step pops a
    /// whole pass's items at once where it can, with one lookup.
    pub fn pop_in_one(
        &mut self,
        id: u16,
        items: usize,
    ) -> Result<Option<(Block, Range<usize>)>, ErrorCode> {
        let (at, fifo) = self.entry(id)?;
        if fifo.len.min(fifo.depth - fifo.head) < items {
            return Ok(None);
        }
        self.pop_at(at, id, items).map(Some)
    }

    /// [`Fifos::pop`] of FIFO `id`, found at `at` in the table.
    fn pop_at(
        &mut self,
        at: usize,
        id: u16,
        items: usize,
    ) -> Result<(Block, Range<usize>), ErrorCode> {
        let fifo = self.table.get(at).ok_or(ErrorCode::UnknownId { id })?;
        if items == 0 {
            return Err(ErrorCode::FifoEmpty { fifo: id });
        }
        let oldest = saturate(fifo.head * fifo.item_bytes);
        let len = items.saturating_mul(fifo.item_bytes);
        // Whole items by construction, counted as such: a step pops every lane's FIFOs,
        // and a division per pop is a good part of a pop's cost.
        let (block, range) = fifo.place_items(oldest, len, Access::Read)?;
        if let Some(f) = self.table.get_mut(at) {
            f.take(items);
        }
        Ok((block, range))
    }

    /// Complete items of FIFO `id` that one [`Fifos::pop`] can take: those before the
    /// ring's end (a pop never wraps it). The tests'; a step asks [`Fifos::pop_in_one`].
    #[cfg(test)]
    pub fn poppable(&self, id: u16) -> Result<usize, ErrorCode> {
        let (_, fifo) = self.entry(id)?;
        Ok(fifo.len.min(fifo.depth - fifo.head))
    }

    /// Drops every item of FIFO `id`, complete and partial, keeping the FIFO: its ring
    /// restarts at the block's beginning, as a FIFO that was never pushed to.
    pub fn empty(&mut self, id: u16) -> Result<(), ErrorCode> {
        let (at, _) = self.entry(id)?;
        if let Some(f) = self.table.get_mut(at) {
            f.head = 0;
            f.len = 0;
            f.partial = 0;
        }
        Ok(())
    }

    /// Forgets every FIFO (their blocks go with the arena's): the tests'.
    #[cfg(test)]
    pub fn clear(&mut self) {
        self.table.clear();
        self.ids.clear();
        self.index_lanes();
    }
}

impl Fifo {
    /// [`Fifos::place`]'s rules on this FIFO.
    fn place(
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
    fn commit(&mut self, len: usize) {
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

    /// Catches a lookup that searches the wrong lane's entries: FIFOs created out of id
    /// order, looked up in every order, some removed, are each found by their own id, and
    /// a missing id is unknown (never a neighbour's FIFO).
    #[test]
    fn a_lookup_finds_its_own_fifo_whatever_the_last_one() {
        let mut memory = [0u8; 1024];
        let mut arena = Arena::new(&mut memory);
        let mut fifos = Fifos::default();
        let ids = [0x205u16, 3, 0x201, 1, 0x203, 2];
        for (k, &id) in ids.iter().enumerate() {
            fifos.create(&mut arena, id, 4, 1 + k as u16).unwrap();
        }
        let order = [1u16, 2, 3, 0x201, 0x203, 0x205, 3, 1, 0x205, 0x201, 2];
        for &id in order.iter().chain(order.iter().rev()) {
            assert_eq!(fifos.get(id).map(|f| f.id), Ok(id));
        }
        fifos.remove(&mut arena, 0x201);
        fifos.get(1).unwrap();
        for missing in [0x201, 0x202, 0, 4] {
            assert_eq!(
                fifos.get(missing),
                Err(ErrorCode::UnknownId { id: missing })
            );
        }
        for &id in &[0x203u16, 0x205, 1, 2, 3] {
            assert_eq!(fifos.get(id).map(|f| f.id), Ok(id));
        }
    }

    /// Catches a lane index, or the ids beside the table, left stale by a create, a remove
    /// or a clear: FIFOs of many lanes (ids up to the last u16) created and removed in a
    /// scrambled order are each found where a search of the whole table finds them, and
    /// nothing else is.
    #[cfg(not(feature = "firmware"))]
    #[test]
    fn every_lookup_agrees_with_a_search_of_the_whole_table() {
        let mut memory = [0u8; 4096];
        let mut arena = Arena::new(&mut memory);
        let mut fifos = Fifos::default();
        let mut state = 7u32;
        let mut scrambled = |n: u32| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (state >> 8) % n
        };
        let lanes = [0u16, 1, 2, 5, 63, 64, 127];
        let ids: heapless::Vec<u16, 64> = (0..40)
            .map(|_| {
                let lane = lanes[scrambled(lanes.len() as u32) as usize];
                (lane * LANE_IDS).wrapping_add(scrambled(8) as u16 + 0x1f8 * (scrambled(2) as u16))
            })
            .collect();
        for round in 0..3 {
            for &id in &ids {
                // Twice the same id is refused, as it should be.
                let _ = fifos.create(&mut arena, id, 1, 1);
            }
            for &id in ids.iter().step_by(3 + round) {
                fifos.remove(&mut arena, id);
            }
            for probe in ids
                .iter()
                .flat_map(|&id| [id, id.wrapping_add(1), id.wrapping_sub(1)])
            {
                let whole = fifos.table.iter().find(|f| f.id == probe).map(|f| f.id);
                assert_eq!(fifos.get(probe).ok().map(|f| f.id), whole, "{probe:#x}");
            }
            assert!(fifos.table.windows(2).all(|w| w[0].id < w[1].id));
            assert!(fifos.ids.iter().eq(fifos.table.iter().map(|f| &f.id)));
        }
        fifos.clear();
        assert_eq!(fifos.get(ids[0]), Err(ErrorCode::UnknownId { id: ids[0] }));
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
