//! Named device functions, called on registers by [`Request::Call`](tessera_core::wire::Request).
//!
//! Each function reads its argument registers and returns a value for the result register.
//! Tensors are f32; `scale` works in place on its tensor argument, as a device would.

use tessera_core::wire::{ErrorCode, Value};

use crate::arena::{Arena, Owner};
use crate::registers::{Registers, Stored};

/// What a function returns: a value to store, or nothing (it worked in place).
#[derive(Debug)]
pub enum Returned {
    /// Store this in the result register.
    Value(Stored),
    /// The function changed its arguments in place.
    InPlace,
}

type Function = fn(&mut Registers, &mut Arena<'_>, &[u16], u32) -> Result<Returned, ErrorCode>;

/// The function table, by name.
pub const FUNCTIONS: &[(&str, Function)] = &[
    ("replica_id", replica_id),
    ("add", add),
    ("sum", sum),
    ("scale", scale),
    ("elements", elements),
];

/// The function called `name`.
pub fn lookup(name: &str) -> Result<Function, ErrorCode> {
    FUNCTIONS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .ok_or(ErrorCode::UnknownFunction)
}

fn replica_id(
    _: &mut Registers,
    _: &mut Arena<'_>,
    args: &[u16],
    replica: u32,
) -> Result<Returned, ErrorCode> {
    match args {
        [] => Ok(Returned::Value(Stored::Int(i64::from(replica)))),
        _ => Err(ErrorCode::BadArguments),
    }
}

/// Integer or float addition.
fn add(
    regs: &mut Registers,
    _: &mut Arena<'_>,
    args: &[u16],
    _: u32,
) -> Result<Returned, ErrorCode> {
    let [a, b] = args else {
        return Err(ErrorCode::BadArguments);
    };
    let value = match (regs.stored(*a)?, regs.stored(*b)?) {
        (Stored::Int(x), Stored::Int(y)) => {
            Stored::Int(x.checked_add(*y).ok_or(ErrorCode::BadArguments)?)
        }
        (Stored::Float(x), Stored::Float(y)) => Stored::Float(x + y),
        _ => return Err(ErrorCode::BadArguments),
    };
    Ok(Returned::Value(value))
}

/// Sum of a tensor's elements.
fn sum(
    regs: &mut Registers,
    arena: &mut Arena<'_>,
    args: &[u16],
    _: u32,
) -> Result<Returned, ErrorCode> {
    let [t] = args else {
        return Err(ErrorCode::BadArguments);
    };
    let Value::Tensor(bytes) = regs.get(arena, *t)? else {
        return Err(ErrorCode::BadArguments);
    };
    let total: f64 = bytes
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .sum();
    Ok(Returned::Value(Stored::Float(total)))
}

/// Multiplies a tensor by a float, in place.
fn scale(
    regs: &mut Registers,
    arena: &mut Arena<'_>,
    args: &[u16],
    _: u32,
) -> Result<Returned, ErrorCode> {
    let [t, factor] = args else {
        return Err(ErrorCode::BadArguments);
    };
    let (Stored::Tensor, Stored::Float(factor)) = (regs.stored(*t)?, regs.stored(*factor)?) else {
        return Err(ErrorCode::BadArguments);
    };
    let factor = *factor as f32;
    let block = arena
        .find(Owner::Register(*t))
        .ok_or(ErrorCode::UnknownId { id: *t })?;
    for c in arena.bytes_mut(block).chunks_exact_mut(4) {
        let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * factor;
        c.copy_from_slice(&v.to_le_bytes());
    }
    Ok(Returned::InPlace)
}

/// Number of elements of a shape.
fn elements(
    regs: &mut Registers,
    _: &mut Arena<'_>,
    args: &[u16],
    _: u32,
) -> Result<Returned, ErrorCode> {
    let [s] = args else {
        return Err(ErrorCode::BadArguments);
    };
    let Stored::Shape(dims) = regs.stored(*s)? else {
        return Err(ErrorCode::BadArguments);
    };
    let n = dims
        .iter()
        .try_fold(1i64, |n, &d| n.checked_mul(i64::from(d)))
        .ok_or(ErrorCode::BadArguments)?;
    Ok(Returned::Value(Stored::Int(n)))
}
