//! The replicas' random number generator and the seed-derivation rule.
//!
//! Each replica runs xoshiro128++ (four 32-bit words of state: what "RNG state to host"
//! returns). The host sends one 64-bit seed to every replica; replica `r` seeds its
//! generator with SplitMix64 from `seed ^ (r · 0xA0761D6478BD642F)` (wrapping), so replicas
//! draw different streams from one seed. The host's reference computation uses this same
//! code, which is why it can reproduce every dropout mask a replica draws.

/// A xoshiro128++ generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rng {
    state: [u32; 4],
}

impl Rng {
    /// The generator a seed starts; the same seed always gives the same stream.
    pub fn from_seed(seed: u64) -> Self {
        // SplitMix64's next word. Out of line: on a 32-bit device each 64-bit multiply is
        // a run of instructions, and one copy serves both words and every caller.
        #[inline(never)]
        fn next(sm: &mut u64) -> u64 {
            *sm = sm.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = *sm;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        let mut sm = seed;
        let (a, b) = (next(&mut sm), next(&mut sm));
        // Truncating casts split each 64-bit word into its halves.
        Self::from_state([a as u32, (a >> 32) as u32, b as u32, (b >> 32) as u32])
    }

    /// Replica `replica`'s generator for `seed`: every replica gets the same seed, and its
    /// own stream.
    pub fn for_replica(seed: u64, replica: u32) -> Self {
        Self::from_seed(seed ^ u64::from(replica).wrapping_mul(0xA076_1D64_78BD_642F))
    }

    /// A generator with this exact state (an all-zero state, which would only ever
    /// produce zeros, is replaced by a fixed non-zero one).
    pub fn from_state(state: [u32; 4]) -> Self {
        let state = if state == [0; 4] { [1, 0, 0, 0] } else { state };
        Self { state }
    }

    /// The state words.
    pub fn state(&self) -> [u32; 4] {
        self.state
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        let s = &mut self.state;
        let result = s[0].wrapping_add(s[3]).rotate_left(7).wrapping_add(s[0]);
        let t = s[1] << 9;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(11);
        result
    }

    /// A uniform float in `[0, 1)`.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_state_round_trip() {
        let mut a = Rng::from_seed(42);
        let mut b = Rng::from_seed(42);
        assert_eq!(a.next_u32(), b.next_u32());
        let mut c = Rng::from_state(a.state());
        assert_eq!(a.next_u32(), c.next_u32());
        assert_ne!(Rng::from_seed(1).next_u32(), Rng::from_seed(2).next_u32());
        let f = a.next_f32();
        assert!((0.0..1.0).contains(&f));
    }
}
