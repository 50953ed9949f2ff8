//! f64 arithmetic and conversions from the bits, for boards without a double-precision FPU.
//!
//! On such a board (the Cortex-M3, the Cortex-M4F, whose FPU is single precision, and
//! RV32IMAC) every f64 operation is a call into compiler-builtins' soft-float routines, which
//! are built for speed: on RISC-V they took some 3.5 KB of the firmware's flash. The
//! kernels need only a few of them (an addition, the conversions between f32, f64 and i64,
//! a sign test), so these are written here for size.
//!
//! # Contract
//!
//! - Each function gives the same bits as the operation it stands for (`a + b`, `as`,
//!   `f64::from`, `< 0.0`), rounding to nearest with ties to even; NaNs follow
//!   compiler-builtins' rules (stated on each function).
//! - Nothing here panics or reads memory: integer operations on the operands' bits only.
//! - The unit tests below hold each function to the host FPU's answer over special values,
//!   subnormals, ties and millions of random operands.

/// The f64 bits of a negative number: the sign set, above −0 and up to −∞ (not a NaN).
const NEGATIVE: core::ops::RangeInclusive<u64> = 0x8000_0000_0000_0001..=0xFFF0_0000_0000_0000;

/// `v < 0.0`, from `v`'s bits. On a board without an FPU every f64 comparison is a library
/// call; this one is integer compares (on RISC-V, `__ltdf2` was 142 bytes of flash).
pub fn is_negative(v: f64) -> bool {
    NEGATIVE.contains(&v.to_bits())
}

/// `v` as an `i64` if it is a whole number in `i64`'s range (−2⁶³ is, 2⁶³ is not), else
/// `None` (fractions, NaN, infinities): what `v as i64` then `as f64` back to `v` tells,
/// from `v`'s bits. The cast and the comparisons are library calls on a board without an
/// FPU (on RISC-V `__fixdfdi`, `__gtdf2`, `__gedf2`, `__nedf2` and `__unorddf2`, some 650
/// bytes of flash); this is integer shifts and masks.
pub fn whole_i64(v: f64) -> Option<i64> {
    const FRACTION: u64 = (1 << 52) - 1;
    let bits = v.to_bits();
    let negative = bits >> 63 != 0;
    // The unbiased exponent: v's magnitude is in [2^exponent, 2^(exponent + 1)).
    let exponent = i64::try_from((bits >> 52) & 0x7FF).ok()? - 1023;
    let fraction = bits & FRACTION;
    match exponent {
        // ±0 is 0; anything else below 1 in magnitude (subnormals too) is a fraction. The
        // test is on the halves: on all 64 bits LLVM sees `v == 0.0`, a library call again.
        ..0 => ((bits >> 32) as u32 & 0x7FFF_FFFF | bits as u32 == 0).then_some(0),
        0..=62 => {
            let significand = fraction | (FRACTION + 1);
            let magnitude = if exponent >= 52 {
                significand << (exponent - 52)
            } else {
                let shift = 52 - exponent;
                if significand & ((1 << shift) - 1) != 0 {
                    return None;
                }
                significand >> shift
            };
            // Below 2^63: fits, and so does its negation.
            let magnitude = i64::try_from(magnitude).ok()?;
            Some(if negative { -magnitude } else { magnitude })
        }
        63 => (negative && fraction == 0).then_some(i64::MIN),
        // 2^64 and up, infinities and NaNs.
        _ => None,
    }
}

/// `v as f64` (the nearest f64, ties to even) from integer operations: the conversion is a
/// library call on a board without an FPU (on RISC-V `__floatdidf`, 332 bytes of flash).
pub fn i64_to_f64(v: i64) -> f64 {
    let magnitude = v.unsigned_abs();
    if magnitude == 0 {
        return 0.0;
    }
    let zeros = magnitude.leading_zeros();
    // The leading 1 at bit 63: bits 62..11 are the fraction, bits 10..0 are rounded off.
    let normal = magnitude << zeros;
    let exponent = u64::from(63 - zeros) + 1023;
    let mut bits = (exponent << 52) + ((normal >> 11) & ((1 << 52) - 1));
    let dropped = normal & 0x7FF;
    // Round to nearest, ties to even; a carry out of the fraction steps the exponent, as it
    // should.
    if dropped > 0x400 || (dropped == 0x400 && bits & 1 != 0) {
        bits += 1;
    }
    f64::from_bits(bits | (u64::from(v < 0) << 63))
}

/// `a + b` in f64 (round to nearest, ties to even), the same bits as compiler-builtins'
/// `__adddf3` gives, NaNs included (a NaN operand comes back quiet, without its sign; ∞ − ∞
/// is the positive quiet NaN). On a board without an FPU `a + b` calls that routine, which
/// takes 1,628 bytes of RISC-V flash; this one, built for size, far fewer. Its algorithm is
/// that routine's: operands aligned with three guard bits and a sticky bit, one rounding.
#[inline(never)]
pub fn add_f64(a: f64, b: f64) -> f64 {
    const SIGN: u64 = 1 << 63;
    const INF: u64 = 0x7FF << 52;
    const QUIET: u64 = 1 << 51;
    const FRACTION: u64 = (1 << 52) - 1;
    // The leading 1 of a significand shifted left by the three guard bits.
    const LEADING: u64 = 1 << 55;
    let (mut a, mut b) = (a.to_bits(), b.to_bits());
    let (a_abs, b_abs) = (a & !SIGN, b & !SIGN);
    // Zeros, infinities and NaNs.
    if a_abs.wrapping_sub(1) >= INF - 1 || b_abs.wrapping_sub(1) >= INF - 1 {
        let bits = if a_abs > INF {
            a_abs | QUIET
        } else if b_abs > INF {
            b_abs | QUIET
        } else if a_abs == INF {
            if a ^ b == SIGN {
                INF | QUIET
            } else {
                a
            }
        } else if b_abs == INF {
            b
        } else if a_abs == 0 {
            // −0 only for −0 + −0.
            if b_abs == 0 {
                a & b
            } else {
                b
            }
        } else {
            a
        };
        return f64::from_bits(bits);
    }
    if b_abs > a_abs {
        core::mem::swap(&mut a, &mut b);
    }
    let (a_exponent, a_significand) = unpack(a);
    let (b_exponent, b_significand) = unpack(b);
    let (mut exponent, mut significand) = (a_exponent, a_significand << 3);
    // b's, aligned to a's exponent; bits shifted out leave a sticky 1.
    let align = a_exponent - b_exponent;
    let b_significand = b_significand << 3;
    let b_significand = if align == 0 {
        b_significand
    } else if align < 64 {
        b_significand >> align | u64::from(b_significand << (64 - align) != 0)
    } else {
        1
    };
    if (a ^ b) & SIGN != 0 {
        significand -= b_significand;
        if significand == 0 {
            return 0.0;
        }
        if significand < LEADING {
            let shift = significand.leading_zeros() as i32 - LEADING.leading_zeros() as i32;
            significand <<= shift;
            exponent -= shift;
        }
    } else {
        significand += b_significand;
        if significand & (LEADING << 1) != 0 {
            significand = significand >> 1 | (significand & 1);
            exponent += 1;
        }
    }
    let sign = a & SIGN;
    if exponent >= 0x7FF {
        return f64::from_bits(INF | sign);
    }
    if exponent <= 0 {
        // A subnormal result: shifted to exponent 1, stored with the exponent field 0.
        let shift = 1 - exponent;
        significand = significand >> shift | u64::from(significand << (64 - shift) != 0);
        exponent = 0;
    }
    let dropped = significand & 7;
    let mut bits = sign | u64::from(exponent.unsigned_abs()) << 52 | (significand >> 3 & FRACTION);
    // Round to nearest, ties to even; a carry steps the exponent (up to ∞), as it should.
    if dropped > 4 || (dropped == 4 && bits & 1 != 0) {
        bits += 1;
    }
    f64::from_bits(bits)
}

/// A finite nonzero f64's exponent field and significand with its leading 1, a subnormal's
/// normalised (its exponent then 0 or below). Out of line: inlined twice into `add_f64`, it
/// cost RISC-V flash.
#[inline(never)]
fn unpack(bits: u64) -> (i32, u64) {
    const FRACTION: u64 = (1 << 52) - 1;
    let exponent = (bits >> 52 & 0x7FF) as i32;
    let fraction = bits & FRACTION;
    if exponent == 0 {
        let shift = fraction.leading_zeros() as i32 - 11;
        (1 - shift, fraction << shift)
    } else {
        (exponent, fraction | (FRACTION + 1))
    }
}

/// `f64::from(v)` (exact; a NaN comes back quiet, its sign and payload kept) from `v`'s
/// bits: the conversion is a library call on a board without an FPU (on RISC-V
/// `__extendsfdf2`, 262 bytes of flash).
pub fn f32_to_f64(v: f32) -> f64 {
    let bits = v.to_bits();
    let sign = u64::from(bits >> 31) << 63;
    let exponent = bits >> 23 & 0xFF;
    let fraction = bits & 0x7F_FFFF;
    let abs = match exponent {
        0 if fraction == 0 => 0,
        // A subnormal: fraction · 2^−149, normalised to its leading 1 at bit 23.
        0 => {
            let shift = fraction.leading_zeros() - 8;
            u64::from(897 - shift) << 52 | u64::from(fraction << shift & 0x7F_FFFF) << 29
        }
        // ∞, or a NaN made quiet.
        0xFF => 0x7FF0_0000_0000_0000 | u64::from(fraction) << 29 | u64::from(fraction != 0) << 51,
        _ => u64::from(exponent + (1023 - 127)) << 52 | u64::from(fraction) << 29,
    };
    f64::from_bits(sign | abs)
}

/// `v as f32` (round to nearest, ties to even; a NaN comes back quiet, its sign and the top
/// of its payload kept) from `v`'s bits: the conversion is a library call on a board without
/// an FPU (on RISC-V `__truncdfsf2`, 354 bytes of flash).
pub fn f64_to_f32(v: f64) -> f32 {
    const FRACTION: u64 = (1 << 52) - 1;
    let bits = v.to_bits();
    let sign = u32::from(bits >> 63 != 0) << 31;
    let abs = bits & !(1 << 63);
    // f32's biased exponent: f64's less 1023 − 127 (negative below f32's normal range).
    let exponent = i64::try_from(abs >> 52).unwrap_or(0) - (1023 - 127);
    let out = if abs > 0x7FF0_0000_0000_0000 {
        0x7FC0_0000 | (abs >> 29 & 0x3F_FFFF) as u32
    } else if exponent >= 0xFF {
        0x7F80_0000
    } else {
        let significand = (abs & FRACTION) | (FRACTION + 1);
        // Bits dropped: 29 for a normal result; more for a subnormal one, whose exponent
        // field is 0; everything (rounding to 0) below half the smallest subnormal. The
        // significand's leading 1, kept, adds 1 to the exponent field: `base` is one less.
        let (base, shift) = if exponent >= 1 {
            (exponent - 1, 29)
        } else {
            (0, 30 - exponent)
        };
        if shift > 54 {
            0
        } else {
            let kept = (u64::try_from(base).unwrap_or(0) << 23) + (significand >> shift);
            let dropped = significand & ((1 << shift) - 1);
            let half = 1 << (shift - 1);
            // Round to nearest, ties to even; a carry steps the exponent, up to ∞.
            let up = dropped > half || (dropped == half && kept & 1 != 0);
            (kept + u64::from(up)) as u32
        }
    };
    f32::from_bits(sign | out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the integer-only helpers stand for, by the casts and comparisons they replace.
    fn whole_by_casts(v: f64) -> Option<i64> {
        let whole = v as i64;
        (whole != i64::MAX && whole as f64 == v).then_some(whole)
    }

    /// `add_f64` against the FPU's `+` (every finite and infinite case is IEEE 754's one
    /// answer) and against compiler-builtins' NaN rules: special values, subnormals, near
    /// cancellations, and random pairs of every exponent distance.
    #[test]
    fn add_f64_matches_ieee() {
        let same = |a: f64, b: f64| {
            let got = add_f64(a, b).to_bits();
            let want = if a.is_nan() {
                a.to_bits() & !(1 << 63) | 1 << 51
            } else if b.is_nan() {
                b.to_bits() & !(1 << 63) | 1 << 51
            } else if a.is_infinite() && b == -a {
                0x7FF8_0000_0000_0000
            } else {
                (a + b).to_bits()
            };
            assert_eq!(
                got,
                want,
                "{a:e} + {b:e} ({:#x} + {:#x})",
                a.to_bits(),
                b.to_bits()
            );
        };
        let special = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.1,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            5e-324,
            -5e-324,
            f64::from_bits(0x000F_FFFF_FFFF_FFFF),
            f64::MAX,
            f64::MIN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7FF0_0000_0000_0001),
            f64::from_bits(0xFFF0_0000_0000_0001),
            9_007_199_254_740_993.0,
            1.000_000_000_000_000_2,
        ];
        for a in special {
            for b in special {
                same(a, b);
            }
        }
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for i in 0..500_000u64 {
            let a = next();
            let b = next();
            same(f64::from_bits(a), f64::from_bits(b));
            // Exponents close together (cancellation, carries, subnormal results).
            let near = (a & !(0x7FF << 52)) | ((b >> 52 & 0x7FF) ^ (i % 8)) << 52;
            same(f64::from_bits(near), f64::from_bits(b));
            same(f64::from_bits(near), -f64::from_bits(b));
            // Tiny numbers: subnormals and the smallest normals.
            same(
                f64::from_bits(a >> 11 ^ a & 1 << 63),
                f64::from_bits(b >> 11),
            );
            // Exact halves: ties.
            same(
                f64::from_bits(a),
                f64::from_bits(a) * 2f64.powi(-53 - (i % 3) as i32),
            );
        }
    }

    /// The f32/f64 conversions against the FPU's casts (x86's NaN rules are
    /// compiler-builtins': quiet, sign kept, payload shifted): special values, subnormals,
    /// ties, overflow to ∞, and random patterns of every exponent.
    #[test]
    fn f32_f64_conversions_match_the_casts() {
        let narrow = |v: f64| {
            let want = (v as f32).to_bits();
            assert_eq!(f64_to_f32(v).to_bits(), want, "{v:e} ({:#x})", v.to_bits());
        };
        let wide = |v: f32| {
            let want = f64::from(v).to_bits();
            assert_eq!(f32_to_f64(v).to_bits(), want, "{v:e} ({:#x})", v.to_bits());
        };
        for v in [
            0.0,
            -0.0,
            1.0,
            f64::MAX,
            f64::INFINITY,
            -f64::INFINITY,
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7FF0_0000_2000_0001),
            f64::from(f32::MAX),
            3.402_823_567_797_337e38,
            3.402_823_567_797_338e38,
            f64::from(f32::MIN_POSITIVE),
            1e-45,
            7e-46,
            7.006_492_321_624_085e-46,
            7.006_492_321_624_086e-46,
            1.401_298_464_324_817e-45,
            5e-324,
        ] {
            narrow(v);
            narrow(-v);
        }
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..500_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            narrow(f64::from_bits(state));
            // f32's exponent range and around it (subnormal results, ∞).
            let exponent = 1023 - 160 + (i % 320);
            narrow(f64::from_bits(state & !(0x7FF << 52) | exponent << 52));
            // Ties: 29 dropped bits exactly half.
            narrow(f64::from_bits(
                state & !(0x7FF << 52) & !((1 << 29) - 1) | exponent << 52 | 1 << 28,
            ));
            wide(f32::from_bits(state as u32));
            wide(f32::from_bits((state >> 32) as u32 & 0x807F_FFFF));
        }
        for v in [
            0.0,
            f32::MIN_POSITIVE,
            1e-45,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
        ] {
            wide(v);
            wide(-v);
        }
    }

    /// Edge cases and a sweep of bit patterns (every exponent, random fractions and
    /// integers of every width): the helpers agree with the casts and `< 0.0` bit for bit.
    #[test]
    fn integer_float_helpers_match_the_casts() {
        let floats = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            1.5,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            5e-324,
            -5e-324,
            f64::MAX,
            f64::MIN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            9_223_372_036_854_775_808.0,
            -9_223_372_036_854_775_808.0,
            9_223_372_036_854_774_784.0,
            -9_223_372_036_854_774_784.0,
            4_503_599_627_370_496.5,
            4_503_599_627_370_497.0,
            18_446_744_073_709_551_616.0,
        ];
        let ints = [0, 1, -1, i64::MAX, i64::MIN, i64::MIN + 1, (1 << 53) + 1];
        let float = |v: f64| {
            assert_eq!(
                whole_i64(v),
                whole_by_casts(v),
                "{v:e} ({:#x})",
                v.to_bits()
            );
            assert_eq!(is_negative(v), v < 0.0, "{v:e} ({:#x})", v.to_bits());
        };
        let int = |v: i64| assert_eq!(i64_to_f64(v).to_bits(), (v as f64).to_bits(), "{v}");
        floats.into_iter().for_each(float);
        ints.into_iter().for_each(int);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..200_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            float(f64::from_bits(state));
            // Every exponent, with random fractions: integers, fractions, the range's ends.
            float(f64::from_bits(
                (state & !(0x7FF << 52)) | ((i % 2048) << 52),
            ));
            int((state >> (i % 64)) as i64);
            int(-((state >> (i % 64)) as i64));
        }
    }
}
