//! The device's memory: one caller-provided byte arena, carved into blocks for slots,
//! FIFOs, registers and step scratch.
//!
//! The block table is the allocator's only metadata: a new block goes in the first gap
//! large enough, and freeing a block just removes its entry. Blocks start at 8-byte
//! aligned addresses so that f32 views of them are plain (checked) casts.
//!
//! # Memory is lent, access by access
//!
//! The arena keeps the table, not a slice of the bytes: it holds a [`Memory`], which lends
//! its bytes for one access at a time (`bytes`, `bytes_mut`, `pair_mut`), and every view
//! the arena hands out borrows the arena. So no view of the device's bytes outlives the
//! request that made it. That matters when the same bytes are also mapped by someone else —
//! a host that writes a device's memory in place between requests: a slice held across
//! requests would promise Rust that nobody else changes those bytes meanwhile, which such
//! a host does. Plain memory (an array, a `&mut [u8]`) lends itself.

use tessera_core::wire::ErrorCode;

use crate::lent::Lent;
use crate::shift;

/// Objects a device can hold at once, all kinds together: one block for each of the 4096
/// registers a device holds (the registers check at compile time that theirs fit), and 64
/// more for every FIFO, a call's scratch, the step's, slots and variables.
pub const MAX_BLOCKS: usize = 4096 + 64;

const ALIGN: usize = 8;

/// Whether the host's bytes go into the arena or come out of it: a FIFO takes a write
/// and a read differently, and only some registers can be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Bytes into the arena.
    Write,
    /// Bytes out of it.
    Read,
}

/// What a block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// A remote-buffer slot.
    Slot(u16),
    /// An on-device variable.
    Variable(u16),
    /// A stream FIFO.
    Fifo(u16),
    /// A register's tensor or string bytes.
    Register(u16),
    /// The training step's scratch (gradient, masked input).
    StepScratch,
}

/// A range of the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Who holds it.
    pub owner: Owner,
    /// Offset from the arena's aligned start.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

/// The bytes a device computes in, lent one access at a time (module doc).
///
/// Both methods must return the same bytes — same address, same length — at every call:
/// block offsets are remembered between calls. A device's memory is `Send`, so that a host
/// may move a device to the thread that serves it or keep it among its own parts (with
/// `std`, a device may own its memory: `Device::owning`).
pub trait Memory {
    /// The bytes, to read.
    fn view(&self) -> &[u8];
    /// The bytes, to read and write.
    fn lend(&mut self) -> &mut [u8];
}

impl<const N: usize> Memory for [u8; N] {
    fn view(&self) -> &[u8] {
        self
    }
    fn lend(&mut self) -> &mut [u8] {
        self
    }
}

impl Memory for &mut [u8] {
    fn view(&self) -> &[u8] {
        self
    }
    fn lend(&mut self) -> &mut [u8] {
        self
    }
}

#[cfg(feature = "std")]
impl Memory for std::vec::Vec<u8> {
    fn view(&self) -> &[u8] {
        self
    }
    fn lend(&mut self) -> &mut [u8] {
        self
    }
}

/// The arena: its block table, and the memory that lends it bytes.
pub struct Arena<'a> {
    memory: Lent<'a, dyn Memory + Send + 'a>,
    /// Bytes skipped at the start of `memory` to align it: block offsets count from after
    /// them.
    skip: usize,
    /// Bytes after the skipped ones.
    capacity: usize,
    /// Sorted by offset.
    blocks: heapless::Vec<Block, MAX_BLOCKS>,
}

impl core::fmt::Debug for Arena<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Arena")
            .field("skip", &self.skip)
            .field("capacity", &self.capacity)
            .field("blocks", &self.blocks)
            .finish_non_exhaustive()
    }
}

impl<'a> Arena<'a> {
    /// Takes `memory`, skipping the few bytes before its first aligned address.
    pub fn new(memory: &'a mut (dyn Memory + Send)) -> Self {
        Self::on(Lent::Borrowed(memory))
    }

    /// The arena on `memory`, lent or owned.
    pub(crate) fn on(memory: Lent<'a, dyn Memory + Send + 'a>) -> Self {
        let bytes = memory.view();
        let skip = bytes.as_ptr().align_offset(ALIGN).min(bytes.len());
        let capacity = bytes.len() - skip;
        Self {
            memory,
            skip,
            capacity,
            blocks: heapless::Vec::new(),
        }
    }

    /// The aligned bytes, to read.
    fn aligned(&self) -> &[u8] {
        self.memory.view().get(self.skip..).unwrap_or(&[])
    }

    /// The aligned bytes, to write.
    fn aligned_mut(&mut self) -> &mut [u8] {
        self.memory.lend().get_mut(self.skip..).unwrap_or(&mut [])
    }

    /// Where `block` starts in the memory the arena was given (its offset plus the bytes
    /// skipped to align): a host that shares that memory finds the block's bytes there.
    pub fn address(&self, block: Block) -> usize {
        self.skip.saturating_add(block.offset)
    }

    /// Usable bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes not held by any block (possibly fragmented).
    #[inline(never)]
    pub fn free(&self) -> usize {
        self.capacity()
            - self
                .blocks
                .iter()
                .map(|b| b.len.next_multiple_of(ALIGN))
                .sum::<usize>()
    }

    /// Allocates `len` zeroed bytes for `owner`, which must not hold a block already.
    pub fn alloc(&mut self, owner: Owner, len: usize) -> Result<Block, ErrorCode> {
        if self.find(owner).is_some() {
            return Err(ErrorCode::IdInUse {
                id: owner_id(owner),
            });
        }
        let out_of_memory = || ErrorCode::OutOfMemory {
            requested: saturate(len),
            available: saturate(self.free()),
        };
        let rounded = len
            .checked_next_multiple_of(ALIGN)
            .ok_or_else(out_of_memory)?;
        let mut start = 0;
        let mut position = self.blocks.len();
        for (i, block) in self.blocks.iter().enumerate() {
            if block.offset - start >= rounded {
                position = i;
                break;
            }
            start = block.offset + block.len.next_multiple_of(ALIGN);
        }
        if position == self.blocks.len() && self.capacity().saturating_sub(start) < rounded {
            return Err(out_of_memory());
        }
        let block = Block {
            owner,
            offset: start,
            len,
        };
        shift::insert(&mut self.blocks, position, block).map_err(|_| ErrorCode::TableFull)?;
        self.bytes_mut(block).fill(0);
        Ok(block)
    }

    /// Frees `owner`'s block, if any.
    #[inline(never)]
    pub fn free_block(&mut self, owner: Owner) {
        self.blocks.retain(|b| b.owner != owner);
    }

    /// `owner`'s block.
    pub fn find(&self, owner: Owner) -> Option<Block> {
        self.blocks.iter().copied().find(|b| b.owner == owner)
    }

    /// The bytes of a block returned by this arena.
    pub fn bytes(&self, block: Block) -> &[u8] {
        self.aligned()
            .get(block.offset..block.offset + block.len)
            .unwrap_or(&[])
    }

    /// The bytes of a block returned by this arena, writable.
    pub fn bytes_mut(&mut self, block: Block) -> &mut [u8] {
        self.aligned_mut()
            .get_mut(block.offset..block.offset + block.len)
            .unwrap_or(&mut [])
    }

    /// Copies block `from` into block `to`, which must be as long.
    pub fn copy(&mut self, from: Block, to: Block) -> Result<(), ErrorCode> {
        if from.len != to.len {
            return Err(ErrorCode::OutOfBounds {
                offset: 0,
                len: saturate(from.len),
                size: saturate(to.len),
            });
        }
        if let Some((source, destination)) = self.pair_mut(from, to) {
            crate::copy_exact(destination, source);
        }
        Ok(())
    }

    /// Several distinct blocks at once, writable, in the order asked for (`None` if any two
    /// are the same block or one lies outside the arena).
    pub fn blocks_mut<const N: usize>(&mut self, blocks: [Block; N]) -> Option<[&mut [u8]; N]> {
        let ranges = blocks.map(|b| b.offset..b.offset + b.len);
        self.aligned_mut().get_disjoint_mut(ranges).ok()
    }

    /// Two distinct blocks at once, writable: [`Arena::blocks_mut`] of two.
    pub fn pair_mut(&mut self, a: Block, b: Block) -> Option<(&mut [u8], &mut [u8])> {
        let [a, b] = self.blocks_mut([a, b])?;
        Some((a, b))
    }
}

fn owner_id(owner: Owner) -> u16 {
    match owner {
        Owner::Slot(id) | Owner::Variable(id) | Owner::Fifo(id) | Owner::Register(id) => id,
        Owner::StepScratch => 0,
    }
}

/// A byte count for the wire, which carries `u32`.
pub fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_reuses_freed_gaps() {
        let mut memory = [0u8; 128];
        let mut arena = Arena::new(&mut memory);
        let a = arena.alloc(Owner::Slot(1), 20).unwrap();
        let b = arena.alloc(Owner::Slot(2), 8).unwrap();
        assert_eq!((a.offset, b.offset), (0, 24));
        arena.free_block(Owner::Slot(1));
        let c = arena.alloc(Owner::Fifo(1), 16).unwrap();
        assert_eq!(c.offset, 0, "the freed gap is reused");
        assert_eq!(
            arena.alloc(Owner::Slot(2), 1),
            Err(ErrorCode::IdInUse { id: 2 })
        );
        assert!(matches!(
            arena.alloc(Owner::Slot(3), 1000),
            Err(ErrorCode::OutOfMemory { .. })
        ));
        assert!(matches!(
            arena.alloc(Owner::Slot(4), usize::MAX),
            Err(ErrorCode::OutOfMemory { .. })
        ));
    }

    /// A host that maps the device's memory finds a block's bytes at `address`, counted
    /// from the first byte it gave the arena: an address from the aligned start instead
    /// would point the host a few bytes early whenever the memory is not 8-aligned.
    #[test]
    fn addresses_count_from_the_memory_given() {
        let mut memory = [0u8; 72];
        let start = memory.as_ptr().align_offset(ALIGN);
        // A slice starting one byte past an aligned address: the arena skips 7.
        let mut given = &mut memory[start + 1..];
        let mut arena = Arena::new(&mut given);
        arena.alloc(Owner::Slot(1), 8).unwrap();
        let block = arena.alloc(Owner::Register(2), 4).unwrap();
        arena.bytes_mut(block).copy_from_slice(b"tsra");
        let at = arena.address(block);
        assert_eq!(at, 7 + 8);
        // The arena may own its memory on a host (`lent`): it lends it back when dropped.
        drop(arena);
        assert_eq!(&memory[start + 1 + at..][..4], b"tsra");
    }

    #[test]
    fn blocks_are_aligned_and_zeroed() {
        let mut memory = [0xFFu8; 64];
        let mut given = &mut memory[1..];
        let mut arena = Arena::new(&mut given);
        let block = arena.alloc(Owner::Slot(1), 5).unwrap();
        assert_eq!(arena.bytes(block), [0; 5]);
        assert_eq!(arena.bytes(block).as_ptr().align_offset(8), 0);
        let other = arena.alloc(Owner::Slot(2), 5).unwrap();
        let (x, y) = arena.pair_mut(block, other).unwrap();
        x[0] = 1;
        y[0] = 2;
        assert_eq!((arena.bytes(block)[0], arena.bytes(other)[0]), (1, 2));
    }

    /// A step's optimizer updates a variable, its velocity and the scratch block in one
    /// pass: three blocks at once, each where it was asked for, and never one block twice
    /// (two writable views of the same bytes).
    #[test]
    fn several_blocks_at_once_in_the_order_asked_for() {
        let mut memory = [0u8; 96];
        let mut arena = Arena::new(&mut memory);
        let a = arena.alloc(Owner::Variable(1), 8).unwrap();
        let b = arena.alloc(Owner::Variable(2), 8).unwrap();
        let c = arena.alloc(Owner::StepScratch, 8).unwrap();
        let [x, y, z] = arena.blocks_mut([c, a, b]).unwrap();
        (x[0], y[0], z[0]) = (3, 1, 2);
        assert_eq!(
            [a, b, c].map(|block| arena.bytes(block)[0]),
            [1, 2, 3],
            "each view is the block asked for in its place"
        );
        assert!(arena.blocks_mut([a, c, a]).is_none(), "one block twice");
        let outside = Block { offset: 96, ..a };
        assert!(
            arena.blocks_mut([a, outside]).is_none(),
            "a block past the arena"
        );
    }
}
