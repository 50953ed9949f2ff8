//! Running one call: resolve the arguments, ask the function what it returns, then (for a
//! result with bytes) compute it in scratch and store it.
//!
//! A function reads its arguments' bytes while it writes its result's, and the arena lends
//! one block at a time. So a call with a result of `len` bytes takes one scratch block
//! (owner `Register(0)`, never a host register): its first `len` bytes are the result
//! (zeroed, or a copy of the argument an in-place function updates), the rest copies of
//! the argument registers' bytes. Literals are read from the request and never copied.
//! Once the function succeeds the result moves into `out` (or back into the in-place
//! argument); the scratch is freed on every path. The price is memory: a call needs room
//! for its result twice plus its register arguments once more.

use tessera_core::wire::{Arg, ErrorCode, MAX_CALL_ARGS};

use super::{Args, Fill, Function, Output};
use crate::arena::{saturate, Arena, Block, Owner};
use crate::registers::{array_bytes, copy_exact, free_block, parse, Registers, Stored};

const BAD: ErrorCode = ErrorCode::BadArguments;

/// The engine's scratch, alive for one call.
const SCRATCH: Owner = Owner::Register(0);

/// What a call works on.
struct Call<'c, 'a, 'r> {
    regs: &'c mut Registers,
    arena: &'c mut Arena<'a>,
    args: &'c [Arg<'r>],
    replica: u32,
}

/// Runs `function` on `args` for replica `replica`, storing its result in register `out`
/// (0: discard).
pub(crate) fn run(
    regs: &mut Registers,
    arena: &mut Arena<'_>,
    function: Function,
    args: &[Arg<'_>],
    out: u16,
    replica: u32,
) -> Result<(), ErrorCode> {
    let output = function(&resolve(regs, arena, args, replica)?)?;
    let inline = match output {
        Output::Int(v) => Stored::Int(v),
        Output::Float(v) => Stored::Float(v),
        Output::Shape(dims) => Stored::Shape(dims),
        _ => {
            let call = Call {
                regs,
                arena,
                args,
                replica,
            };
            return produce(call, out, output);
        }
    };
    regs.set_inline(arena, out, inline)
}

/// An allocation too large to count.
#[cold]
#[inline(never)]
fn out_of_memory(arena: &Arena<'_>) -> ErrorCode {
    ErrorCode::OutOfMemory {
        requested: u32::MAX,
        available: saturate(arena.free()),
    }
}

/// The arguments as values borrowing from the registers and the request; literals are
/// checked like register values.
#[inline(never)]
fn resolve<'x>(
    regs: &'x Registers,
    arena: &'x Arena<'_>,
    args: &[Arg<'x>],
    replica: u32,
) -> Result<Args<'x>, ErrorCode> {
    let mut resolved = Args::empty(replica);
    for arg in args {
        let value = match arg {
            Arg::Register(id) => regs.get(arena, *id)?,
            Arg::Value(value) => {
                parse(value)?;
                value.clone()
            }
        };
        resolved.push(value)?;
    }
    Ok(resolved)
}

/// Where the function finds an argument's bytes.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// A literal, or a register without bytes.
    Given,
    /// Copied into scratch, at this offset past the result.
    Copied { at: usize, len: usize },
    /// The in-place argument: its bytes are the function's `out`.
    Target,
}

/// Where a call's bytes go in its scratch.
#[derive(Debug)]
struct Layout {
    places: [Place; MAX_CALL_ARGS],
    /// Blocks copied into scratch, with their offsets in it.
    copies: heapless::Vec<(Block, usize), MAX_CALL_ARGS>,
    /// Bytes of scratch: the result, then the copies.
    total: usize,
}

/// Lays out a result of `len` bytes and the register arguments' copies; an in-place
/// `target` (argument index and block) is copied into the result's place.
#[inline(never)]
fn layout(
    call: &Call<'_, '_, '_>,
    len: usize,
    target: Option<(usize, Block)>,
) -> Result<Layout, ErrorCode> {
    let mut layout = Layout {
        places: [Place::Given; MAX_CALL_ARGS],
        copies: heapless::Vec::new(),
        total: len,
    };
    for (i, arg) in call.args.iter().enumerate() {
        if let Arg::Register(id) = *arg {
            place(call, &mut layout, i, id, len, target)?;
        }
    }
    Ok(layout)
}

/// Places argument `i`, register `id`.
#[inline(never)]
fn place(
    call: &Call<'_, '_, '_>,
    layout: &mut Layout,
    i: usize,
    id: u16,
    len: usize,
    target: Option<(usize, Block)>,
) -> Result<(), ErrorCode> {
    let (block, at, place) = match target {
        Some((t, block)) if t == i => (block, 0, Place::Target),
        _ => {
            let Some(block) = call.regs.block(call.arena, id)? else {
                return Ok(());
            };
            let at = layout.total;
            // Checked: a sum past usize is certainly more than the arena holds.
            layout.total = at
                .checked_add(block.len)
                .ok_or_else(|| out_of_memory(call.arena))?;
            // `at` started at `len` and only grows, so the offset past the result is exact.
            let place = Place::Copied {
                at: at - len,
                len: block.len,
            };
            (block, at, place)
        }
    };
    *layout.places.get_mut(i).ok_or(BAD)? = place;
    layout.copies.push((block, at)).map_err(|_| BAD)
}

/// The arguments again, their bytes now read from `copies` (the scratch past the result).
#[inline(never)]
fn rebuild<'x>(
    regs: &'x Registers,
    args: &[Arg<'x>],
    places: &[Place],
    copies: &'x [u8],
    replica: u32,
) -> Result<Args<'x>, ErrorCode> {
    let mut resolved = Args::empty(replica);
    for (arg, place) in args.iter().zip(places) {
        let value = match (arg, *place) {
            (Arg::Value(value), _) => value.clone(),
            (Arg::Register(id), place) => {
                let data = match place {
                    Place::Given | Place::Target => &[],
                    Place::Copied { at, len } => {
                        let end = at.checked_add(len).ok_or(BAD)?;
                        copies.get(at..end).ok_or(BAD)?
                    }
                };
                regs.stored(*id)?.view(data)?
            }
        };
        resolved.push(value)?;
    }
    Ok(resolved)
}

/// Computes a string, array or in-place result and stores it.
#[inline(never)]
fn produce(mut call: Call<'_, '_, '_>, out: u16, output: Output) -> Result<(), ErrorCode> {
    let (result, fill, target) = match output {
        Output::Str { len, fill } => (Some((Stored::Str, len)), fill, None),
        Output::Array { dtype, shape, fill } => {
            let len = array_bytes(dtype, &shape).ok_or_else(|| out_of_memory(call.arena))?;
            (Some((Stored::Array { dtype, shape }, len)), fill, None)
        }
        Output::InPlace { arg, fill } => (None, fill, Some((arg, in_place_target(&call, arg)?))),
        Output::Int(_) | Output::Float(_) | Output::Shape(_) => return Err(BAD),
    };
    if result.is_some() && out != 0 && !call.regs.has_room(out) {
        return Err(ErrorCode::TableFull);
    }
    let len = match (&result, target) {
        (Some((_, len)), _) => *len,
        (None, Some((_, block))) => block.len,
        (None, None) => 0,
    };
    let layout = layout(&call, len, target)?;
    let scratch = call.arena.alloc(SCRATCH, layout.total)?;
    let is_str = matches!(result, Some((Stored::Str, _)));
    let outcome = compute(&mut call, &layout, scratch, len, fill, is_str).and_then(|()| {
        match (result, target) {
            (Some((stored, len)), _) => settle(&mut call, scratch, len, out, stored),
            (None, Some((_, block))) => copy_out(call.arena, scratch, block, len),
            (None, None) => Ok(()),
        }
    });
    free_block(call.arena, SCRATCH);
    outcome
}

/// The block of in-place argument `arg`, which must be an array register.
fn in_place_target(call: &Call<'_, '_, '_>, arg: usize) -> Result<Block, ErrorCode> {
    let Some(&Arg::Register(id)) = call.args.get(arg) else {
        return Err(BAD);
    };
    if !matches!(call.regs.stored(id)?, Stored::Array { .. }) {
        return Err(BAD);
    }
    call.regs.block(call.arena, id)?.ok_or(BAD)
}

/// Fills `scratch` with the copies, then runs `fill` on its first `len` bytes.
#[inline(never)]
fn compute(
    call: &mut Call<'_, '_, '_>,
    layout: &Layout,
    scratch: Block,
    len: usize,
    fill: Fill,
    is_str: bool,
) -> Result<(), ErrorCode> {
    for &(block, at) in &layout.copies {
        if block.len > 0 {
            // Both blocks are non-empty, so the arena can lend them together.
            let (dst, src) = call.arena.pair_mut(scratch, block).ok_or(BAD)?;
            let end = at.checked_add(block.len).ok_or(BAD)?;
            copy_exact(dst.get_mut(at..end).ok_or(BAD)?, src)?;
        }
    }
    let bytes = call.arena.bytes_mut(scratch);
    let (result, copies) = bytes.split_at_mut_checked(len).ok_or(BAD)?;
    let args = rebuild(call.regs, call.args, &layout.places, copies, call.replica)?;
    fill(&args, result)?;
    if is_str {
        tessera_core::panic_free::utf8(result).ok_or(BAD)?;
    }
    Ok(())
}

/// Copies the first `len` bytes of `scratch` into `block`, which is that long.
fn copy_out(
    arena: &mut Arena<'_>,
    scratch: Block,
    block: Block,
    len: usize,
) -> Result<(), ErrorCode> {
    if len == 0 {
        return Ok(());
    }
    let (dst, src) = arena.pair_mut(block, scratch).ok_or(BAD)?;
    copy_exact(dst, src.get(..len).ok_or(BAD)?)
}

/// Moves the result (the first `len` bytes of `scratch`) into register `out`, replacing
/// what it held; 0 discards it.
#[inline(never)]
fn settle(
    call: &mut Call<'_, '_, '_>,
    scratch: Block,
    len: usize,
    out: u16,
    stored: Stored,
) -> Result<(), ErrorCode> {
    if out == 0 {
        return Ok(());
    }
    call.regs.free(call.arena, out);
    let block = call.arena.alloc(Owner::Register(out), len)?;
    if let Err(code) = copy_out(call.arena, scratch, block, len) {
        free_block(call.arena, Owner::Register(out));
        return Err(code);
    }
    call.regs.adopt(call.arena, out, stored)
}
