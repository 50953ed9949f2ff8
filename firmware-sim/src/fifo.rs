//! Stream FIFOs: fixed-size items in a ring inside an arena block.

use tessera_core::wire::ErrorCode;

use crate::arena::{saturate, Arena, Block, Owner};

/// FIFOs a device can hold.
pub const MAX_FIFOS: usize = 16;

/// One FIFO's bookkeeping; its items live in the arena block of [`Owner::Fifo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fifo {
    /// FIFO id.
    pub id: u16,
    /// Bytes per item.
    pub item_bytes: usize,
    /// Items it holds.
    pub depth: usize,
    head: usize,
    len: usize,
}

/// The device's FIFOs.
#[derive(Debug, Default)]
pub struct Fifos {
    table: heapless::Vec<Fifo, MAX_FIFOS>,
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
        if self.get(id).is_ok() {
            return Err(ErrorCode::IdInUse { id });
        }
        if self.table.is_full() {
            return Err(ErrorCode::TableFull);
        }
        let (item_bytes, depth) = (item_bytes as usize, usize::from(depth));
        let bytes = item_bytes
            .checked_mul(depth)
            .ok_or(ErrorCode::OutOfMemory {
                requested: u32::MAX,
                available: saturate(arena.free()),
            })?;
        arena.alloc(Owner::Fifo(id), bytes)?;
        let fifo = Fifo {
            id,
            item_bytes,
            depth,
            head: 0,
            len: 0,
        };
        self.table.push(fifo).map_err(|_| ErrorCode::TableFull)
    }

    /// FIFO `id`.
    pub fn get(&self, id: u16) -> Result<Fifo, ErrorCode> {
        self.table
            .iter()
            .copied()
            .find(|f| f.id == id)
            .ok_or(ErrorCode::UnknownId { id })
    }

    /// Appends one item.
    pub fn push(&mut self, arena: &mut Arena<'_>, id: u16, item: &[u8]) -> Result<(), ErrorCode> {
        let (fifo, block) = self.slot(arena, id)?;
        if item.len() != fifo.item_bytes {
            return Err(ErrorCode::ItemSize {
                expected: saturate(fifo.item_bytes),
                actual: saturate(item.len()),
            });
        }
        if fifo.len == fifo.depth {
            return Err(ErrorCode::FifoFull { fifo: id });
        }
        let at = (fifo.head + fifo.len) % fifo.depth * fifo.item_bytes;
        arena
            .bytes_mut(block)
            .get_mut(at..at + item.len())
            .ok_or(ErrorCode::FifoFull { fifo: id })?
            .copy_from_slice(item);
        self.update(id, |f| f.len += 1);
        Ok(())
    }

    /// Removes the oldest item; returns the block and byte range where it still lies (valid
    /// until the next push).
    pub fn pop(
        &mut self,
        arena: &Arena<'_>,
        id: u16,
    ) -> Result<(Block, core::ops::Range<usize>), ErrorCode> {
        let (fifo, block) = self.slot(arena, id)?;
        if fifo.len == 0 {
            return Err(ErrorCode::FifoEmpty { fifo: id });
        }
        let at = fifo.head * fifo.item_bytes;
        self.update(id, |f| {
            f.head = (f.head + 1) % f.depth;
            f.len -= 1;
        });
        Ok((block, at..at + fifo.item_bytes))
    }

    /// Forgets every FIFO (their blocks go with the arena's).
    pub fn clear(&mut self) {
        self.table.clear();
    }

    fn slot(&self, arena: &Arena<'_>, id: u16) -> Result<(Fifo, Block), ErrorCode> {
        let fifo = self.get(id)?;
        let block = arena
            .find(Owner::Fifo(id))
            .ok_or(ErrorCode::UnknownId { id })?;
        Ok((fifo, block))
    }

    fn update(&mut self, id: u16, change: impl FnOnce(&mut Fifo)) {
        if let Some(f) = self.table.iter_mut().find(|f| f.id == id) {
            change(f);
        }
    }
}
