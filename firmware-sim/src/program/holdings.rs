//! What each lane's replica holds of each variable: the pieces of its shard (core's
//! [`ShardLayout`] rule for its group), or the whole variable, worked out at prepare.
//! (`held` moves them at every batch.)
//!
//! # Rules
//!
//! - A variable that is not sharded is held whole, as one piece at offset 0; a sharded
//!   one, as the pieces of the shard its replica's place in the group names.
//! - The first lane's pieces of every variable are kept ([`Held`]); another lane's shard
//!   is kept only when it is one piece (an empty piece for a shard of only padding), and
//!   one of several pieces is worked out as it is moved. The firmware runs one lane, and
//!   keeps no other.
//! - The program is checked before: a shard that cannot be worked out is a broken
//!   invariant ([`Invariant::Sharding`]), not a bad program.
//!
//! [`ShardLayout`]: tessera_core::shard::ShardLayout

use tessera_core::program::{elements, Program, Sharding, MAX_VARIABLES};
use tessera_core::shard::Piece;
use tessera_core::wire::{ErrorCode, Invariant};

use super::{Held, Holdings, Shards, MAX_LANES};
use crate::broken;

/// Each variable's [`Held`] pieces on replica `replica` of `replicas` (the program is
/// checked: a failure here is a broken invariant, not a bad program).
pub(super) fn holdings(
    program: &Program,
    replicas: usize,
    replica: usize,
) -> Result<Holdings, ErrorCode> {
    let mut all = Holdings::new();
    let fault = broken(Invariant::Sharding);
    for i in 0..program.variables.len() {
        let mut held = Held::new();
        let mut fits = true;
        shard_pieces(program, (replicas, replica), i, |piece| {
            fits &= held.push(piece).is_ok();
        })?;
        // A shard's pieces are its share of the layout's intervals: at most as many.
        if !fits {
            return Err(fault);
        }
        all.push(held).map_err(|_| fault)?;
    }
    Ok(all)
}

/// `each` on every piece of variable `index` replica `replica` of `replicas` holds: its
/// shard's (core's layout for its group), or the whole variable at offset 0 when it is not
/// sharded.
pub(super) fn shard_pieces(
    program: &Program,
    (replicas, replica): (usize, usize),
    index: usize,
    mut each: impl FnMut(Piece),
) -> Result<(), ErrorCode> {
    let fault = broken(Invariant::Sharding);
    let v = program.variables.get(index).ok_or(fault)?;
    if v.sharding == Sharding::None {
        let n = elements(&v.shape).ok_or(fault)?;
        each(Piece {
            src_begin: 0,
            src_end: n,
            dst_offset: 0,
        });
        return Ok(());
    }
    let layout = program
        .shard_layout(index, replicas)
        .ok()
        .flatten()
        .ok_or(fault)?;
    let settings = program.settings(index, replicas).map_err(|_| fault)?;
    let shard = settings
        .grouping()
        .index_in_group(replica)
        .map_err(|_| fault)?;
    layout.pieces(shard).map_err(|_| fault)?.for_each(each);
    Ok(())
}

/// Each lane's shard of each variable when it is one piece, lane by lane, for
/// [`Prepared::shards`](super::Prepared::shards): `lanes` lanes from replica `replica` of
/// `replicas`. None in the firmware, whose one lane's pieces [`holdings`] has.
pub(super) fn lane_shards(
    program: &Program,
    replicas: usize,
    replica: usize,
    lanes: usize,
) -> Result<Shards, ErrorCode> {
    let mut shards = Shards::new();
    // The firmware runs one lane, whose pieces `held` has.
    if MAX_LANES > 1 {
        for lane in 0..lanes {
            let mut pieces = [None; MAX_VARIABLES];
            for (i, one) in pieces.iter_mut().enumerate().take(program.variables.len()) {
                *one = one_piece(program, (replicas, replica + lane), i)?;
            }
            shards
                .push(pieces)
                .map_err(|_| broken(Invariant::Placement))?;
        }
    }
    Ok(shards)
}

/// The one piece of variable `index` replica `replica` of `replicas` holds, if its shard
/// is one piece or none; `None` for a shard of several.
fn one_piece(
    program: &Program,
    (replicas, replica): (usize, usize),
    index: usize,
) -> Result<Option<Piece>, ErrorCode> {
    let (mut one, mut count) = (None, 0);
    shard_pieces(program, (replicas, replica), index, |piece| {
        one = Some(piece);
        count += 1;
    })?;
    Ok(match count {
        1 => one,
        // A shard of only padding (more replicas than elements) moves nothing: an empty
        // piece says so, where working it out again at every batch would cost a layout.
        0 => Some(Piece {
            src_begin: 0,
            src_end: 0,
            dst_offset: 0,
        }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use tessera_core::grouping::{CommGroup, GroupingSpec, RetrievalMode};
    use tessera_core::program::{Optimizer, Program, Sharding};
    use tessera_core::shard::Piece;

    use super::holdings;

    fn piece(src: core::ops::Range<usize>) -> Piece {
        Piece {
            src_begin: src.start,
            src_end: src.end,
            dst_offset: 0,
        }
    }

    /// Catches held pieces worked out for the wrong shard: under an orthogonal grouping of
    /// 4 replicas into groups {0, 2} and {1, 3}, replica 2 holds its group's second shard
    /// (not shard 2, nor replica 0's), and an unsharded variable is held whole everywhere.
    #[test]
    fn each_replica_holds_its_shard_within_its_group() {
        let mut p = Program::new(1, 1, Optimizer::Sgd { learning_rate: 0.1 });
        let orthogonal = GroupingSpec::Comm(CommGroup::Orthogonal(2));
        let one = RetrievalMode::OnePerGroup;
        p.add_variable("w", &[5], orthogonal, one, Sharding::Balanced)
            .unwrap();
        p.add_variable("b", &[3], orthogonal, one, Sharding::None)
            .unwrap();
        // Five elements over two shards of three: [0, 2) and [2, 5) (core's balanced rule).
        let first = [piece(0..2)];
        let second = [piece(2..5)];
        for (replica, w) in [(0, &first), (1, &first), (2, &second), (3, &second)] {
            let held = holdings(&p, 4, replica).unwrap();
            assert_eq!(held.len(), 2);
            assert_eq!(held[0].as_slice(), w.as_slice(), "replica {replica}'s w");
            assert_eq!(held[1].as_slice(), [piece(0..3)], "replica {replica}'s b");
        }
    }
}
