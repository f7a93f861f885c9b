//! The project's one seeded PRNG: xoshiro256** seeded through SplitMix64
//! (both public domain algorithms by Blackman and Vigna).
//!
//! The simulator draws every random choice from one [`Prng`], so a seed and
//! a sequence of driver actions determine everything. The tests, the fault
//! campaigns, the conformance scenarios, the QEMU guest checks and `perf`'s
//! random offsets draw from it too, so a seed printed by any of them
//! replays the same way everywhere. It is not a cryptographic generator.

/// xoshiro256**: fast, 256 bits of state, good enough statistics for fault
/// injection and shuffles.
#[derive(Clone, Debug)]
pub struct Prng {
    state: [u64; 4],
}

/// One SplitMix64 step: advances `seed` and returns the mixed output.
fn splitmix64(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Folds `value` into `hash`: a SplitMix64 step over the running hash.
/// The simulator's completion trace uses it, and so do callers that need a
/// seed per item (`mix(seed, index)`) without a generator.
pub fn mix(hash: u64, value: u64) -> u64 {
    let mut state = hash ^ value;
    splitmix64(&mut state)
}

impl Prng {
    /// A generator for `seed`. Every seed is valid, 0 included.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let state = [splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm)];
        // SplitMix64 never yields four zero words in a row, the one state
        // xoshiro cannot leave.
        debug_assert!(state.iter().any(|word| *word != 0));
        Prng { state }
    }

    /// One of independent streams from one seed: `stream` names the
    /// stream (a job, a thread, an owner), so each draws its own sequence
    /// and adding a stream never perturbs another.
    pub fn with_stream(seed: u64, stream: u64) -> Self {
        Prng::new(mix(seed, stream.wrapping_mul(0xD6E8_FEB8_6659_FD93)))
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..bound` (Lemire's multiply-shift; the bias is below
    /// 2^-64 per draw, irrelevant here). `bound` must not be 0.
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "an empty range has no values");
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// Uniform in `min..=max`.
    pub fn between(&mut self, min: u64, max: u64) -> u64 {
        assert!(min <= max);
        if min == max {
            return min;
        }
        match (max - min).checked_add(1) {
            Some(span) => min + self.below(span),
            None => self.next_u64(),
        }
    }

    /// True with probability `p`. Draws nothing for `p <= 0` or `p >= 1`,
    /// so a knob left at 0 does not perturb the stream of other choices.
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        // 53 random bits as a float in [0, 1).
        let unit = (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        unit < p
    }

    /// Fisher-Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// Fills `bytes` with random bytes, eight at a time in little-endian
    /// order (a short tail takes the low bytes of one more draw).
    pub fn fill(&mut self, bytes: &mut [u8]) {
        // Arrays, not slices: unoptimized builds (the simulator tests)
        // check every slice an iterator of chunks makes, and those checks
        // were a fifth of the allocator's model test.
        let (words, tail) = bytes.as_chunks_mut::<8>();
        for word in words {
            *word = self.next_u64().to_le_bytes();
        }
        if !tail.is_empty() {
            let last = self.next_u64().to_le_bytes();
            tail.copy_from_slice(&last[..tail.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let mut a = Prng::new(42);
        let mut b = Prng::new(42);
        let mut c = Prng::new(43);
        let first: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let second: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        let third: Vec<u64> = (0..16).map(|_| c.next_u64()).collect();
        assert_eq!(first, second);
        assert_ne!(first, third);
        // Seed 0 is a valid seed.
        assert_ne!(Prng::new(0).next_u64(), 0);
    }

    #[test]
    fn ranges_and_chances_stay_in_bounds() {
        let mut rng = Prng::new(7);
        for _ in 0..10_000 {
            assert!(rng.below(10) < 10);
            let v = rng.between(5, 8);
            assert!((5..=8).contains(&v));
        }
        assert_eq!(rng.between(3, 3), 3);
        let _ = rng.between(0, u64::MAX);
        let hits = (0..100_000).filter(|_| rng.chance(0.25)).count();
        assert!((23_000..27_000).contains(&hits), "{hits}");
        let mut quiet = rng.clone();
        assert!(!rng.chance(0.0) && rng.chance(1.0));
        assert_eq!(rng.next_u64(), quiet.next_u64(), "certain outcomes draw nothing");
    }

    #[test]
    fn streams_differ_and_fill_covers_every_byte() {
        let mut a = Prng::with_stream(9, 1);
        let mut b = Prng::with_stream(9, 2);
        assert_ne!(a.next_u64(), b.next_u64());
        assert_eq!(Prng::with_stream(9, 1).next_u64(), Prng::with_stream(9, 1).next_u64());
        for len in [0usize, 1, 7, 8, 13, 4096] {
            let mut bytes = vec![0u8; len];
            let mut rng = Prng::new(len as u64);
            rng.fill(&mut bytes);
            let mut again = vec![0u8; len];
            Prng::new(len as u64).fill(&mut again);
            assert_eq!(bytes, again);
            if len >= 8 {
                assert!(bytes[len - 8..].iter().any(|b| *b != 0), "the tail is filled");
            }
        }
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut rng = Prng::new(1);
        let mut items: Vec<u32> = (0..100).collect();
        rng.shuffle(&mut items);
        assert_ne!(items, (0..100).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..100).collect::<Vec<_>>());
    }
}
