//! What a replica holds of each variable, moved at every batch: made whole in the step's
//! scratch block before the layers read it, and updated by the optimizer after the
//! gradient exchanges. Both walk the pieces worked out at prepare ([`Held`]): a sharded
//! variable's shard fills its share of the whole (the rest zeroed, for the gather exchange
//! to complete), and the optimizer changes only those elements (padding stays zero).
//!
//! On a device of several lanes every lane holds its own copy; a variable held whole is
//! equal on every lane (they share its group: [`lanes`](tessera_core::program::lanes)), so
//! it is made whole from lane 0's copy and updated there once, batch after batch, and lane
//! 0's is copied to the other lanes when the step's last batch is updated
//! ([`share_wholes`]: the same bits an update on each would give, for a copy's cost, once
//! a step). Nothing reads the other lanes' copies during a step; a step that fails after
//! one of its batches but before its last leaves them behind lane 0's, as it may leave any
//! replica behind another, and the host's recovery rule has every variable loaded again
//! then.
//!
//! A piece that does not fit the blocks it is moved between is a broken layout
//! ([`Invariant::Piece`]), answered instead of a panic.
//!
//! [`Held`]: super::Held

use core::ops::Range;

use tessera_core::program::Sharding;
use tessera_core::shard::Piece;
use tessera_core::wire::{ErrorCode, Invariant};

use super::view::as_floats;
use super::Prepared;
use crate::arena::{Arena, Block};
use crate::broken;

/// The pieces of variable `index` lane `lane`'s replica holds: the first lane's worked out
/// at prepare ([`Held`]), and every lane's of a variable held whole; another lane's shard
/// kept at prepare when it is one piece, else worked out here.
///
/// [`Held`]: super::Held
fn held_pieces(
    prepared: &Prepared,
    lane: usize,
    index: u8,
    mut each: impl FnMut(Piece),
) -> Result<(), ErrorCode> {
    let i = usize::from(index);
    let sharded = (prepared.program.variables.get(i)).is_some_and(|v| v.sharding != Sharding::None);
    if super::MAX_LANES > 1 && lane > 0 && sharded {
        let one = prepared
            .shards
            .get(lane)
            .and_then(|s| s.get(i))
            .copied()
            .flatten();
        if let Some(piece) = one {
            each(piece);
            return Ok(());
        }
        let replica = (prepared.replicas, prepared.replica + lane);
        return super::holdings::shard_pieces(&prepared.program, replica, i, each);
    }
    let held = prepared.held.get(i).ok_or(broken(Invariant::Sharding))?;
    held.iter().copied().for_each(&mut each);
    Ok(())
}

/// Lane `lane`'s blocks of variable `index` and of its velocity (when the optimizer has
/// one), as they were placed.
#[inline]
fn placed(
    prepared: &Prepared,
    lane: usize,
    index: u8,
) -> Result<(Block, Option<Block>), ErrorCode> {
    (prepared.placed.per_lane.get(lane))
        .and_then(|v| v.get(usize::from(index)))
        .copied()
        .ok_or(broken(Invariant::Variable))
}

/// Variable `index` from what lane `lane`'s replica holds into `full` (the rest zeroed).
pub(super) fn load_whole(
    arena: &mut Arena<'_>,
    prepared: &Prepared,
    block: Block,
    (lane, index): (usize, u8),
    full: Range<usize>,
) -> Result<(), ErrorCode> {
    let (held, _) = placed(prepared, lane, index)?;
    let (w, x) = arena
        .pair_mut(held, block)
        .ok_or(broken(Invariant::BlockPair))?;
    let w: &[f32] = bytemuck::try_cast_slice(w).map_err(|_| broken(Invariant::Alignment))?;
    let x: &mut [f32] =
        bytemuck::try_cast_slice_mut(x).map_err(|_| broken(Invariant::Alignment))?;
    let full = x.get_mut(full).ok_or(broken(Invariant::Regions))?;
    full.fill(0.0);
    let mut fits = true;
    held_pieces(prepared, lane, index, |piece| {
        match (
            full.get_mut(piece.src_begin..piece.src_end),
            w.get(piece.dst_offset..piece.dst_offset + piece.len()),
        ) {
            (Some(to), Some(from)) => fits &= crate::copy_exact(to, from),
            _ => fits = false,
        }
    })?;
    fits.then_some(()).ok_or(broken(Invariant::Piece))
}

/// The optimizer on what every lane holds of variable `index`; returns the work one
/// replica counts.
pub(super) fn update(
    arena: &mut Arena<'_>,
    prepared: &Prepared,
    block: Block,
    index: u8,
    optimizer: (f32, f32),
) -> Result<u64, ErrorCode> {
    let grad = prepared
        .scratch
        .grad(index)
        .ok_or(broken(Invariant::ScratchLayout))?;
    update_lane(arena, prepared, block, (0, index), grad.clone(), optimizer)?;
    // Held whole, equal on every lane: lane 0's update is copied at the step's end
    // (module doc).
    if !held_whole(prepared, index) {
        for lane in 1..prepared.lanes() {
            update_lane(
                arena,
                prepared,
                block,
                (lane, index),
                grad.clone(),
                optimizer,
            )?;
        }
    }
    Ok(grad.len() as u64)
}

/// Whether every lane holds variable `index` whole.
fn held_whole(prepared: &Prepared, index: u8) -> bool {
    (prepared.program.variables.get(usize::from(index)))
        .is_some_and(|v| v.sharding == Sharding::None)
}

/// Lane 0's copy of every trained variable held whole, and its velocity, copied to the
/// other lanes: after the step's last batch is updated (module doc).
pub(super) fn share_wholes(arena: &mut Arena<'_>, prepared: &Prepared) -> Result<(), ErrorCode> {
    for (i, _) in prepared.program.variables.iter().enumerate() {
        let index = i as u8; // At most MAX_VARIABLES.
        if prepared.scratch.grad(index).is_none() || !held_whole(prepared, index) {
            continue;
        }
        for lane in 1..prepared.lanes() {
            copy_lane_0(arena, prepared, lane, index)?;
        }
    }
    Ok(())
}

/// Lane 0's variable `index`, and its velocity, copied to lane `lane`.
fn copy_lane_0(
    arena: &mut Arena<'_>,
    prepared: &Prepared,
    lane: usize,
    index: u8,
) -> Result<(), ErrorCode> {
    let (weights, velocity) = placed(prepared, 0, index)?;
    let (w, v) = placed(prepared, lane, index)?;
    for (from, to) in [(Some(weights), Some(w)), (velocity, v)] {
        if let (Some(from), Some(to)) = (from, to) {
            let [from, to] = (arena.blocks_mut([from, to])).ok_or(broken(Invariant::BlockPair))?;
            if !crate::copy_exact(to, from) {
                return Err(broken(Invariant::BlockPair));
            }
        }
    }
    Ok(())
}

/// The optimizer on what lane `lane`'s replica holds of variable `index`, from the
/// combined gradient at `grad`.
///
/// One pass over each piece it holds: with momentum `v ← μ·v + g` then `w ← w − lr·v`
/// element by element, else `w ← w − lr·g`. (Two passes, the velocity's first, cost a
/// lookup, a borrow and a walk of the pieces more per variable, which a step on many
/// replicas of a small model pays once per replica per batch.)
fn update_lane(
    arena: &mut Arena<'_>,
    prepared: &Prepared,
    block: Block,
    (lane, index): (usize, u8),
    grad: Range<usize>,
    (lr, momentum): (f32, f32),
) -> Result<(), ErrorCode> {
    let (weights, velocity) = placed(prepared, lane, index)?;
    let mut fits = true;
    match velocity {
        Some(velocity) => {
            let [w, x, v] = arena
                .blocks_mut([weights, block, velocity])
                .ok_or(broken(Invariant::BlockPair))?;
            let (w, g, v) = (as_floats(w)?, as_floats(x)?, as_floats(v)?);
            let g = g.get(grad.clone()).ok_or(broken(Invariant::Regions))?;
            held_pieces(prepared, lane, index, |piece| {
                let at = piece.dst_offset..piece.dst_offset + piece.len();
                match (
                    w.get_mut(at.clone()),
                    v.get_mut(at),
                    g.get(piece.src_begin..piece.src_end),
                ) {
                    (Some(w), Some(v), Some(g)) if w.len() == g.len() => {
                        for ((w, v), g) in w.iter_mut().zip(v.iter_mut()).zip(g) {
                            *v = momentum * *v + *g;
                            *w -= lr * *v;
                        }
                    }
                    _ => fits = false,
                }
            })?;
        }
        None => {
            let [w, x] = arena
                .blocks_mut([weights, block])
                .ok_or(broken(Invariant::BlockPair))?;
            let (w, g) = (as_floats(w)?, as_floats(x)?);
            let g = g.get(grad.clone()).ok_or(broken(Invariant::Regions))?;
            held_pieces(prepared, lane, index, |piece| {
                match (
                    w.get_mut(piece.dst_offset..piece.dst_offset + piece.len()),
                    g.get(piece.src_begin..piece.src_end),
                ) {
                    (Some(w), Some(g)) if w.len() == g.len() => {
                        for (w, g) in w.iter_mut().zip(g) {
                            *w -= lr * *g;
                        }
                    }
                    _ => fits = false,
                }
            })?;
        }
    }
    fits.then_some(()).ok_or(broken(Invariant::Piece))
}
