//! The device's FIFOs, [`Fifos`]: a table in id order, and finding an entry by its id.
//!
//! # Rules
//!
//! - A FIFO is created under an id the host chooses (one in use is
//!   [`ErrorCode::IdInUse`]), while the table has room ([`ErrorCode::TableFull`]), with
//!   items of at least one byte and a depth of at least one ([`ErrorCode::FifoShape`]),
//!   its ring allocated in the arena ([`ErrorCode::OutOfMemory`]). A refused create
//!   changes nothing.
//! - Removing a FIFO forgets it and frees its block; an id the table does not hold is
//!   [`ErrorCode::UnknownId`] to every lookup.
//! - A lookup searches only the entries of its id's lane (core's lanes rule,
//!   `id / LANE_IDS`); the lane index is rebuilt whenever the table changes.

use tessera_core::program::lanes::LANE_IDS;
use tessera_core::wire::ErrorCode;

use super::{Fifo, MAX_FIFOS};
use crate::arena::{saturate, Arena, Owner};
use crate::shift;

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
        let fifo = Fifo::new(id, item_bytes, depth, block);
        // Both have room: the table was not full.
        shift::insert(&mut self.table, at, fifo).map_err(|_| ErrorCode::TableFull)?;
        shift::insert(&mut self.ids, at, id).map_err(|_| ErrorCode::TableFull)?;
        self.index_lanes();
        Ok(())
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

    /// Forgets every FIFO (their blocks go with the arena's): the tests'.
    #[cfg(test)]
    pub fn clear(&mut self) {
        self.table.clear();
        self.ids.clear();
        self.index_lanes();
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
    pub(super) fn entry(&self, id: u16) -> Result<(usize, &Fifo), ErrorCode> {
        (self.index(id).ok())
            .and_then(|at| Some((at, self.table.get(at)?)))
            .ok_or(ErrorCode::UnknownId { id })
    }

    /// FIFO `id`'s entry, to change.
    #[inline(never)]
    pub(super) fn entry_mut(&mut self, id: u16) -> Result<&mut Fifo, ErrorCode> {
        (self.index(id).ok())
            .and_then(|at| self.table.get_mut(at))
            .ok_or(ErrorCode::UnknownId { id })
    }

    /// FIFO `id`, found by a walk over the table in id order that stands at `walk` (left
    /// past the FIFO): a step's whole rings are every lane's FIFOs in id order, found one
    /// after the other in the table instead of looked up one by one. An id behind the
    /// walk, or one it does not meet, is looked up.
    pub(super) fn walk_to(&mut self, walk: &mut usize, id: u16) -> Result<&mut Fifo, ErrorCode> {
        let ahead = self.ids.get(*walk..).unwrap_or_default();
        let at = match ahead.iter().position(|&next| next >= id) {
            Some(i) if ahead.get(i) == Some(&id) => *walk + i,
            _ => self.entry(id)?.0,
        };
        *walk = at + 1;
        self.table.get_mut(at).ok_or(ErrorCode::UnknownId { id })
    }

    /// FIFO `id`.
    pub fn get(&self, id: u16) -> Result<Fifo, ErrorCode> {
        self.entry(id).map(|(_, f)| *f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
