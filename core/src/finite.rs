//! Which `f32` values may enter training, and the first one of a buffer that may not.
//!
//! # Rule
//!
//! A value the host hands a training program — a weight, optimizer state, a step's input —
//! must be finite and of magnitude below 2^64 ([`LIMIT`]). Every layer multiplies two
//! values (a weight by an input, an error by itself), and below 2^64 each such product is
//! finite in `f32` (2^128 is the first power of two `f32` cannot hold); a NaN, an
//! infinity or a larger value turns a step's sums into NaN or infinity, and the run fails
//! later, far from the value that caused it. So such a value is refused where it enters,
//! naming its place ([`first_unfit`] gives the first one), not discovered by the reference
//! check after a step.
//!
//! The rule bounds single values; it cannot bound what a run computes from them (many
//! values near the limit still sum past it), which the reference check catches.
//!
//! Buffers are little-endian bytes of any alignment: an aligned buffer is read as `f32`s in
//! place, an unaligned one value by value.
//!
//! # Panics
//!
//! Nothing here panics.

/// The smallest magnitude refused: 2^64.
pub const LIMIT: f32 = 18_446_744_073_709_551_616.0;

/// True when `value` may enter training (module rule): finite, magnitude below [`LIMIT`].
/// NaN compares false, so it is refused with the rest.
pub fn fits(value: f32) -> bool {
    value.abs() < LIMIT
}

/// Values looked at together before the first misfit is searched for: a block is one
/// comparison per value folded with `&`, which compiles to vector instructions.
const BLOCK: usize = 64;

/// The first value of `bytes` (little-endian `f32`s; a trailing partial value is ignored)
/// that may not enter training, with its element index.
pub fn first_unfit(bytes: &[u8]) -> Option<(usize, f32)> {
    match bytemuck::try_cast_slice::<u8, f32>(&bytes[..bytes.len() / 4 * 4]) {
        Ok(values) => {
            for (b, block) in values.chunks(BLOCK).enumerate() {
                if !block.iter().fold(true, |all, v| all & fits(*v)) {
                    let at = block.iter().position(|v| !fits(*v))?;
                    return Some((b * BLOCK + at, block[at]));
                }
            }
            None
        }
        Err(_) => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .enumerate()
            .find(|(_, v)| !fits(*v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(values: &[f32]) -> std::vec::Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// The bound: the largest value below it squares to a finite `f32`, the bound does not.
    #[test]
    fn the_limit_is_where_a_square_stops_being_finite() {
        let below = f32::from_bits(LIMIT.to_bits() - 1);
        assert!(fits(below) && (below * below).is_finite());
        assert!(!fits(LIMIT) && !(LIMIT * LIMIT).is_finite());
        assert!(!fits(f32::NAN) && !fits(f32::INFINITY) && !fits(-3e38));
        assert!(fits(-1e19) && fits(0.0) && fits(f32::MIN_POSITIVE));
    }

    /// Finds the first misfit at every position of several blocks, aligned or not: a block
    /// search that skipped a block's tail, or an index off by the block, would show.
    #[test]
    fn the_first_misfit_is_found_at_every_index() {
        let n = 3 * BLOCK + 5;
        for at in 0..n {
            for bad in [f32::NAN, f32::NEG_INFINITY, 3e38] {
                let mut values = std::vec![1.5f32; n];
                values[at] = bad;
                if at + 1 < n {
                    values[n - 1] = f32::NAN;
                }
                let b = bytes(&values);
                let found = first_unfit(&b).map(|(i, v)| (i, v.to_bits()));
                assert_eq!(found, Some((at, bad.to_bits())), "aligned, at {at}");
                let mut shifted = std::vec![0u8; 1];
                shifted.extend_from_slice(&b);
                let found = first_unfit(&shifted[1..]).map(|(i, v)| (i, v.to_bits()));
                assert_eq!(found, Some((at, bad.to_bits())), "unaligned, at {at}");
            }
        }
        assert_eq!(first_unfit(&bytes(&[1.0; 200])), None);
        assert_eq!(first_unfit(&[0xff; 3]), None, "no whole value");
    }
}
