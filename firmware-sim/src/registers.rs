//! The register file for SPMD calls: values the host names by id. Integers, floats and
//! shapes are held inline; strings and tensors live in the arena.

use tessera_core::wire::{ErrorCode, Value, MAX_SHAPE_RANK};

use crate::arena::{Arena, Owner};

/// Registers a device can hold.
pub const MAX_REGISTERS: usize = 32;

/// A register's value as stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A shape.
    Shape(heapless::Vec<u32, MAX_SHAPE_RANK>),
    /// A string; its bytes are the register's arena block.
    Str,
    /// f32 elements; its bytes are the register's arena block.
    Tensor,
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
        if id == 0 {
            return Err(ErrorCode::UnknownId { id });
        }
        if !self.table.iter().any(|(r, _)| *r == id) && self.table.is_full() {
            return Err(ErrorCode::TableFull);
        }
        self.free(arena, id);
        let stored = match value {
            Value::Int(v) => Stored::Int(*v),
            Value::Float(v) => Stored::Float(*v),
            Value::Shape(dims) => Stored::Shape(dims.clone()),
            Value::Str(text) => {
                let block = arena.alloc(Owner::Register(id), text.len())?;
                arena.bytes_mut(block).copy_from_slice(text.as_bytes());
                Stored::Str
            }
            Value::Tensor(bytes) => {
                if bytes.len() % 4 != 0 {
                    return Err(ErrorCode::BadArguments);
                }
                let block = arena.alloc(Owner::Register(id), bytes.len())?;
                arena.bytes_mut(block).copy_from_slice(bytes);
                Stored::Tensor
            }
        };
        self.table
            .push((id, stored))
            .map_err(|_| ErrorCode::TableFull)
    }

    /// Register `id`'s stored form.
    pub fn stored(&self, id: u16) -> Result<&Stored, ErrorCode> {
        self.table
            .iter()
            .find(|(r, _)| *r == id)
            .map(|(_, v)| v)
            .ok_or(ErrorCode::UnknownId { id })
    }

    /// Register `id` as a wire value borrowing from `arena`.
    pub fn get<'s>(&'s self, arena: &'s Arena<'_>, id: u16) -> Result<Value<'s>, ErrorCode> {
        let bytes = || {
            arena
                .find(Owner::Register(id))
                .map(|b| arena.bytes(b))
                .unwrap_or(&[])
        };
        Ok(match self.stored(id)? {
            Stored::Int(v) => Value::Int(*v),
            Stored::Float(v) => Value::Float(*v),
            Stored::Shape(dims) => Value::Shape(dims.clone()),
            Stored::Str => {
                Value::Str(core::str::from_utf8(bytes()).map_err(|_| ErrorCode::BadArguments)?)
            }
            Stored::Tensor => Value::Tensor(bytes()),
        })
    }

    /// Frees register `id` (nothing if it is empty).
    pub fn free(&mut self, arena: &mut Arena<'_>, id: u16) {
        self.table.retain(|(r, _)| *r != id);
        arena.free_block(Owner::Register(id));
    }

    /// Forgets every register (their blocks go with the arena's).
    pub fn clear(&mut self) {
        self.table.clear();
    }
}

impl Registers {
    /// Stores an inline value (not a string or tensor) in register `id`; 0 discards it.
    pub fn set_inline(
        &mut self,
        arena: &mut Arena<'_>,
        id: u16,
        value: Stored,
    ) -> Result<(), ErrorCode> {
        if id == 0 {
            return Ok(());
        }
        if matches!(value, Stored::Str | Stored::Tensor) {
            return Err(ErrorCode::BadArguments);
        }
        if !self.table.iter().any(|(r, _)| *r == id) && self.table.is_full() {
            return Err(ErrorCode::TableFull);
        }
        self.free(arena, id);
        self.table
            .push((id, value))
            .map_err(|_| ErrorCode::TableFull)
    }
}
