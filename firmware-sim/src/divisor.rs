//! Division by a number known in advance, as a multiplication.
//!
//! A device of many lanes cuts its pass's regions into the lanes' parts at every lane of
//! every layer (a length divided by the lane count) and counts every lane's FIFO bytes in
//! items (divided by the item's size): hundreds of divisions a step. A hardware
//! division takes tens of cycles; a multiplication by the divisor's reciprocal, rounded up
//! to 64 bits, gives the same quotient:
//!
//! with `c = ⌈2⁶⁴ / d⌉`, `⌊n / d⌋ = ⌊c · n / 2⁶⁴⌋` for every `n` and `d` below 2³². For
//! `c = 2⁶⁴/d + e` with `0 ≤ e < 1`, `c · n / 2⁶⁴` is `n / d` plus `n · e / 2⁶⁴ < 2⁻³²`;
//! the fraction of `n / d` is at most `1 − 1/d`, and `1/d > 2⁻³²`, so the excess never
//! carries the quotient past the next integer. (The bound is Lemire, Kaser and Kurz's,
//! "Faster remainder by direct computation", 2019.)
//!
//! A larger dividend or divisor, and a divisor of 1, divide as `/` does; a divisor of 0 is
//! taken as 1 (never a panic). So does the firmware: a Cortex-M divides in hardware in a
//! few cycles, where a 64-bit multiplication is a library call.

/// `d`, ready to divide by ([`Divisor::divide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Divisor {
    d: usize,
    /// `⌈2⁶⁴ / d⌉`, or 0 where `/` divides instead.
    reciprocal: u64,
}

impl Divisor {
    /// Division by `d` (0 is taken as 1).
    pub const fn new(d: usize) -> Self {
        let d = if d == 0 { 1 } else { d };
        let reciprocal = if cfg!(feature = "firmware") || d == 1 || d > u32::MAX as usize {
            0
        } else {
            // `⌊(2⁶⁴ − 1) / d⌋ + 1` is `⌈2⁶⁴ / d⌉` for every d ≥ 2.
            u64::MAX / d as u64 + 1
        };
        Self { d, reciprocal }
    }

    /// `⌊n / d⌋`.
    pub fn divide(self, n: usize) -> usize {
        if cfg!(feature = "firmware") {
            return n / self.d;
        }
        match u32::try_from(n) {
            Ok(n) if self.reciprocal != 0 => {
                ((u128::from(self.reciprocal) * u128::from(n)) >> 64) as usize
            }
            _ => n / self.d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a reciprocal rounded the wrong way or one bit short: every dividend up to
    /// 4096 and those at the edges of 32 bits (each multiple of `d` and its neighbours
    /// near 2³², where a quotient off by one shows first), for divisors small, odd, powers
    /// of two and near 2³².
    #[test]
    fn every_quotient_is_the_one_a_division_gives() {
        let big = u32::MAX as usize;
        let divisors = (0..=300).chain([
            641,
            1 << 16,
            (1 << 16) + 1,
            6_700_417,
            big / 3,
            (big >> 1) + 1,
            big - 1,
            big,
            big + 1,
        ]);
        for d in divisors {
            let by = Divisor::new(d);
            let d = d.max(1);
            let top = big / d * d;
            let edges = [top.wrapping_sub(1), top, top.wrapping_add(1), big, big - 1];
            for n in (0..=4096).chain(edges).chain([big + 1, usize::MAX]) {
                assert_eq!(by.divide(n), n / d, "{n} / {d}");
            }
        }
    }

    proptest::proptest! {
        /// Any 32-bit dividend and divisor: the multiplication's quotient is the division's.
        #[test]
        fn any_32_bit_quotient_is_the_divisions(n in 0u32.., d in 1u32..) {
            let (n, d) = (n as usize, d as usize);
            proptest::prop_assert_eq!(Divisor::new(d).divide(n), n / d);
        }
    }
}
