//! The register file for SPMD calls: values the host names by id.
//!
//! # Contract
//!
//! - **Ids.** The host names registers 1 and up. Id 0 is never stored: as a call's result
//!   register it means "discard the result", and the function engine
//!   ([`functions`](crate::functions)) borrows the arena owner `Register(0)` for its scratch
//!   during one call.
//! - **Where values live.** Integers, floats and shapes are held inline; strings and arrays
//!   (any [`DataType`], with their shape) keep their bytes in one arena block owned by
//!   `Owner::Register(id)`. A register holds a block exactly when it holds one of those
//!   two, so freeing a register always frees its bytes.
//! - **What is checked.** An array's byte length must equal `product(shape) × element size`,
//!   computed with checked arithmetic ([`array_bytes`]).
//!   Every move of a register's bytes is placed by [`Registers::range`], which checks it
//!   against the register's bytes with an overflow-checked end and lets only an array be
//!   written. Every refusal is an [`ErrorCode`].
//! - **A refused value changes nothing.** A value is checked before the register's old value
//!   is dropped. The one exception is memory: the old value's bytes are freed before the new
//!   ones are allocated (so a value of the same size or smaller always fits), and a larger
//!   value the arena cannot hold leaves the register empty.
//! - Nothing here panics or touches arena bytes outside the register's own block.

use tessera_core::dtype::DataType;
use tessera_core::wire::{Array, ErrorCode, Response, Value, ValueKind, MAX_SHAPE_RANK};

use crate::arena::{saturate, Access, Arena, Block, Owner};

/// Registers a device can hold, ids 1 to `MAX_REGISTERS`. A session's controller hands out
/// no id above it, so a worker's table never fills under a session; a loaded checkpoint
/// takes one register per tensor, and real ones have hundreds. Every placement runs this
/// crate (the QEMU firmware too), so the host reads the capacity from here rather than
/// from the wire. The table costs about 48 bytes a register on the firmware (192 KiB),
/// beside its 3 MiB arena.
pub const MAX_REGISTERS: usize = 4096;

// Every register's bytes are one arena block, beside the 64 blocks the arena keeps for
// FIFOs, scratch, slots and variables.
const _: () = assert!(crate::arena::MAX_BLOCKS >= MAX_REGISTERS + 64);

/// A shape as registers hold it.
pub type Dims = heapless::Vec<u32, MAX_SHAPE_RANK>;

/// A register's value as stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A shape.
    Shape(Dims),
    /// A string; its UTF-8 bytes are the register's arena block.
    Str,
    /// An array; its bytes (`product(shape)` elements of `dtype`, little-endian) are the
    /// register's arena block.
    Array {
        /// Element type.
        dtype: DataType,
        /// Dimensions, row-major.
        shape: Dims,
    },
}

impl Stored {
    /// True for the kinds whose bytes live in the arena.
    pub fn has_bytes(&self) -> bool {
        matches!(self, Self::Str | Self::Array { .. })
    }

    /// This value as a wire value whose bytes (for strings and arrays) are `data`.
    pub fn view<'x>(&self, data: &'x [u8]) -> Result<Value<'x>, ErrorCode> {
        Ok(match self {
            Self::Int(v) => Value::Int(*v),
            Self::Float(v) => Value::Float(*v),
            Self::Shape(dims) => Value::Shape(dims.clone()),
            Self::Str => {
                Value::Str(tessera_core::panic_free::utf8(data).ok_or(ErrorCode::BadArguments)?)
            }
            Self::Array { dtype, shape } => Value::Array(Array {
                dtype: *dtype,
                shape: shape.clone(),
                data,
            }),
        })
    }
}

/// Bytes an array of `shape` elements of `dtype` takes, or `None` if that overflows `usize`
/// (checked: an overflowing size is certainly larger than any arena).
pub fn array_bytes(dtype: DataType, shape: &[u32]) -> Option<usize> {
    shape.iter().try_fold(dtype.size(), |n, &d| {
        n.checked_mul(usize::try_from(d).ok()?)
    })
}

/// Checks `value` and splits it into its stored form and its bytes (for strings and
/// arrays): an array's must match its shape.
pub fn parse<'v>(value: &Value<'v>) -> Result<(Stored, Option<&'v [u8]>), ErrorCode> {
    Ok(match value {
        Value::Int(v) => (Stored::Int(*v), None),
        Value::Float(v) => (Stored::Float(*v), None),
        Value::Shape(dims) => (Stored::Shape(dims.clone()), None),
        Value::Str(text) => (Stored::Str, Some(text.as_bytes())),
        Value::Array(array) => {
            if array_bytes(array.dtype, &array.shape) != Some(array.data.len()) {
                return Err(ErrorCode::BadArguments);
            }
            let stored = Stored::Array {
                dtype: array.dtype,
                shape: array.shape.clone(),
            };
            (stored, Some(array.data))
        }
    })
}

/// Frees `owner`'s block, out of line (one copy of the arena's loop, not one per caller).
#[inline(never)]
pub(crate) fn free_block(arena: &mut Arena<'_>, owner: Owner) {
    arena.free_block(owner);
}

/// Copies `src` into `dst`, which must be as long (never panics).
pub(crate) fn copy_exact(dst: &mut [u8], src: &[u8]) -> Result<(), ErrorCode> {
    if dst.len() != src.len() {
        return Err(ErrorCode::OutOfBounds {
            offset: 0,
            len: saturate(src.len()),
            size: saturate(dst.len()),
        });
    }
    crate::copy_exact(dst, src);
    Ok(())
}

/// The device's registers.
#[derive(Debug, Default)]
pub struct Registers {
    table: heapless::Vec<(u16, Stored), MAX_REGISTERS>,
}

impl Registers {
    /// Stores `value` in register `id`, replacing (and freeing) what it held.
    pub fn set(
        &mut self,
        arena: &mut Arena<'_>,
        id: u16,
        value: &Value<'_>,
    ) -> Result<(), ErrorCode> {
        let (stored, bytes) = parse(value)?;
        self.replace(arena, id, stored, bytes.map_or(0, <[u8]>::len))?;
        if let (Some(bytes), Some(block)) = (bytes, arena.find(Owner::Register(id))) {
            copy_exact(arena.bytes_mut(block), bytes)?;
        }
        Ok(())
    }

    /// Makes register `id` a zeroed array of `shape` elements of `dtype`.
    pub fn alloc_array(
        &mut self,
        arena: &mut Arena<'_>,
        id: u16,
        dtype: DataType,
        shape: &[u32],
    ) -> Result<(), ErrorCode> {
        let bytes = array_bytes(dtype, shape).ok_or_else(|| ErrorCode::OutOfMemory {
            requested: u32::MAX,
            available: saturate(arena.free()),
        })?;
        let shape = Dims::from_slice(shape).map_err(|_| ErrorCode::BadArguments)?;
        self.replace(arena, id, Stored::Array { dtype, shape }, bytes)
    }

    /// Replaces register `id` with `stored`, giving it a zeroed block of `bytes` bytes when
    /// the kind has bytes. Nothing changes on a refusal, except as the module doc says.
    fn replace(
        &mut self,
        arena: &mut Arena<'_>,
        id: u16,
        stored: Stored,
        bytes: usize,
    ) -> Result<(), ErrorCode> {
        if id == 0 {
            return Err(ErrorCode::UnknownId { id });
        }
        if !self.has_room(id) {
            return Err(ErrorCode::TableFull);
        }
        self.free(arena, id);
        if stored.has_bytes() {
            arena.alloc(Owner::Register(id), bytes)?;
        }
        self.adopt(arena, id, stored)
    }

    /// Records `stored` for register `id`, whose block (if its kind has bytes) is already
    /// allocated and filled. The caller has freed `id`'s old value; on a full table the
    /// block is freed too, so nothing leaks.
    pub(crate) fn adopt(
        &mut self,
        arena: &mut Arena<'_>,
        id: u16,
        stored: Stored,
    ) -> Result<(), ErrorCode> {
        self.table.push((id, stored)).map_err(|_| {
            free_block(arena, Owner::Register(id));
            ErrorCode::TableFull
        })
    }

    /// Where bytes `[offset, offset + len)` of register `id` lie: in its block, checked.
    /// Only an array is written (a string is read-only, and other kinds have no bytes).
    pub fn range(
        &self,
        arena: &Arena<'_>,
        id: u16,
        offset: u32,
        len: u32,
        access: Access,
    ) -> Result<(Block, core::ops::Range<usize>), ErrorCode> {
        let array = matches!(self.stored(id)?, Stored::Array { .. });
        if access == Access::Write && !array {
            return Err(ErrorCode::BadArguments);
        }
        let block = self.block(arena, id)?.ok_or(ErrorCode::BadArguments)?;
        Ok((block, chunk(block, offset, len)?))
    }

    /// What register `id` holds, without its bytes.
    pub fn describe(&self, arena: &Arena<'_>, id: u16) -> Result<Response<'static>, ErrorCode> {
        let block = self.block(arena, id)?;
        let bytes = block.map_or(0, |b| saturate(b.len));
        let at = block.map_or(0, |b| saturate(arena.address(b)));
        let (kind, dtype, shape) = match self.stored(id)? {
            Stored::Int(_) => (ValueKind::Int, None, Dims::new()),
            Stored::Float(_) => (ValueKind::Float, None, Dims::new()),
            Stored::Shape(dims) => (ValueKind::Shape, None, dims.clone()),
            Stored::Str => (ValueKind::Str, None, Dims::new()),
            Stored::Array { dtype, shape } => (ValueKind::Array, Some(*dtype), shape.clone()),
        };
        Ok(Response::Described {
            kind,
            dtype,
            shape,
            bytes,
            at,
        })
    }

    /// Register `id`'s stored form.
    #[inline(never)]
    pub fn stored(&self, id: u16) -> Result<&Stored, ErrorCode> {
        self.table
            .iter()
            .find(|(r, _)| *r == id)
            .map(|(_, v)| v)
            .ok_or(ErrorCode::UnknownId { id })
    }

    /// True if register `id` holds a value.
    #[inline(never)]
    pub fn is_stored(&self, id: u16) -> bool {
        self.table.iter().any(|(r, _)| *r == id)
    }

    /// True if register `id` can take a value: it holds one already, or the table has room.
    pub fn has_room(&self, id: u16) -> bool {
        self.is_stored(id) || !self.table.is_full()
    }

    /// Register `id`'s arena block: `None` for inline kinds.
    #[inline(never)]
    pub fn block(&self, arena: &Arena<'_>, id: u16) -> Result<Option<Block>, ErrorCode> {
        if !self.stored(id)?.has_bytes() {
            return Ok(None);
        }
        // A register of a kind with bytes always has its block (see the module doc).
        arena
            .find(Owner::Register(id))
            .map(Some)
            .ok_or(ErrorCode::UnknownId { id })
    }

    /// Register `id` as a wire value borrowing from `arena`.
    #[inline(never)]
    pub fn get<'s>(&'s self, arena: &'s Arena<'_>, id: u16) -> Result<Value<'s>, ErrorCode> {
        let data = match self.block(arena, id)? {
            Some(block) => arena.bytes(block),
            None => &[],
        };
        self.stored(id)?.view(data)
    }

    /// Frees register `id` (nothing if it is empty).
    #[inline(never)]
    pub fn free(&mut self, arena: &mut Arena<'_>, id: u16) {
        self.table.retain(|(r, _)| *r != id);
        free_block(arena, Owner::Register(id));
    }

    /// Stores an inline value (not a string or array) in register `id`; 0 discards
    /// it.
    pub fn set_inline(
        &mut self,
        arena: &mut Arena<'_>,
        id: u16,
        value: Stored,
    ) -> Result<(), ErrorCode> {
        if id == 0 {
            return Ok(());
        }
        if value.has_bytes() {
            return Err(ErrorCode::BadArguments);
        }
        self.replace(arena, id, value, 0)
    }
}

/// The byte range `[offset, offset + len)` of `block`, checked (the end with overflow
/// checked: an end past `usize` is certainly outside the block).
fn chunk(block: Block, offset: u32, len: u32) -> Result<core::ops::Range<usize>, ErrorCode> {
    let start = offset as usize;
    usize::try_from(len)
        .ok()
        .and_then(|len| start.checked_add(len))
        .filter(|&end| end <= block.len)
        .map(|end| start..end)
        .ok_or(ErrorCode::OutOfBounds {
            offset,
            len,
            size: saturate(block.len),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shape whose element count overflows must be refused, not wrapped into a small
    /// allocation that later writes would overrun.
    #[test]
    fn array_sizes_are_checked() {
        assert_eq!(array_bytes(DataType::F32, &[2, 3]), Some(24));
        assert_eq!(array_bytes(DataType::U8, &[]), Some(1));
        assert_eq!(array_bytes(DataType::F64, &[0, 7]), Some(0));
        let huge = [u32::MAX; 8];
        assert_eq!(array_bytes(DataType::I64, &huge), None);
        let mut memory = [0u8; 256];
        let mut arena = Arena::new(&mut memory);
        let mut regs = Registers::default();
        assert!(matches!(
            regs.alloc_array(&mut arena, 1, DataType::I64, &huge),
            Err(ErrorCode::OutOfMemory { .. })
        ));
        assert!(!regs.is_stored(1));
    }

    /// A value refused for its size must leave the old value in place (a set that freed
    /// first would lose it).
    #[test]
    fn a_refused_value_keeps_the_old_one() {
        let mut memory = [0u8; 256];
        let mut arena = Arena::new(&mut memory);
        let mut regs = Registers::default();
        regs.set(&mut arena, 1, &Value::Str("kept")).unwrap();
        let bad = Value::Array(Array {
            dtype: DataType::I32,
            shape: Dims::from_slice(&[3]).unwrap(),
            data: &[0; 8],
        });
        assert_eq!(regs.set(&mut arena, 1, &bad), Err(ErrorCode::BadArguments));
        assert_eq!(regs.get(&arena, 1), Ok(Value::Str("kept")));
    }

    /// Chunks past the end, or whose end overflows, are refused.
    #[test]
    fn chunks_are_bounds_checked() {
        let block = Block {
            owner: Owner::Register(1),
            offset: 0,
            len: 8,
        };
        assert_eq!(chunk(block, 2, 6), Ok(2..8));
        assert!(chunk(block, 2, 7).is_err());
        assert!(chunk(block, u32::MAX, u32::MAX).is_err());
        assert_eq!(chunk(block, 8, 0), Ok(8..8));
    }
}
