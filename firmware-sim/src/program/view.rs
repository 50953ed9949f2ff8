//! Views of a step's memory as the layers use it: a scratch block as `f32`s, disjoint
//! regions of it, and the error for a tensor the scratch layout lacks. Every view is
//! checked (alignment, bounds, overlap) and a failed check is the device's own broken
//! invariant, never a panic: the layout was computed at prepare, so a view that does not
//! fit means the device's bookkeeping is wrong, not the host's request.

use core::ops::Range;

use tessera_core::wire::{ErrorCode, Invariant};

use crate::arena::{Arena, Block};
use crate::broken;

/// A tensor the scratch layout lacks.
pub(super) const MISSING: ErrorCode = broken(Invariant::ScratchLayout);

/// The scratch block as `f32`s.
pub(super) fn floats<'x>(
    arena: &'x mut Arena<'_>,
    block: Block,
) -> Result<&'x mut [f32], ErrorCode> {
    as_floats(arena.bytes_mut(block))
}

/// Disjoint mutable regions of `x`, in the order asked for; an error if any two overlap or
/// one lies outside `x`.
pub(super) fn regions<const N: usize>(
    x: &mut [f32],
    ranges: [Range<usize>; N],
) -> Result<[&mut [f32]; N], ErrorCode> {
    x.get_disjoint_mut(ranges)
        .map_err(|_| broken(Invariant::Regions))
}

/// A block's bytes as `f32`s.
pub(super) fn as_floats(bytes: &mut [u8]) -> Result<&mut [f32], ErrorCode> {
    bytemuck::try_cast_slice_mut(bytes).map_err(|_| broken(Invariant::Alignment))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regions come back in the order asked for, whatever their order in the block; one
    /// that overlaps another, or runs past the block, is a broken layout.
    #[test]
    fn regions_are_disjoint_and_in_the_order_asked_for() {
        let mut x = [0.0f32; 8];
        let [a, b, c] = regions(&mut x, [5..8, 0..2, 2..5]).unwrap();
        a.fill(3.0);
        b.fill(1.0);
        c.fill(2.0);
        assert_eq!(x, [1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0]);
        let broken = Err(broken(Invariant::Regions));
        assert_eq!(regions(&mut x, [0..3, 2..4]).map(|_| ()), broken);
        assert_eq!(regions(&mut x, [0..3, 6..9]).map(|_| ()), broken);
    }

    /// An empty region at the start of another holds none of its elements, in whichever
    /// order the two are asked for. (Regions once came out of a sort by their starts,
    /// which refused the pair in one order and took it in the other.)
    #[test]
    fn an_empty_region_where_another_begins_is_apart_from_it() {
        let mut x = [0.0f32; 4];
        assert!(regions(&mut x, [2..4, 2..2]).is_ok());
        assert!(regions(&mut x, [2..2, 2..4]).is_ok());
    }
}
