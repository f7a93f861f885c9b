//! A hasher for the volume's own integer keys (slot numbers, extent IDs,
//! zone numbers): one multiplication (Fibonacci hashing), where the
//! standard SipHash costs several times that on every write. The keys are
//! the volume's own numbers, not an adversary's, so SipHash's resistance to
//! chosen keys buys nothing here.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by the volume's own integers.
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// See the module's documentation.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, key: u32) {
        self.write_u64(u64::from(key));
    }

    fn write_u64(&mut self, key: u64) {
        // The high bits vary most after the multiplication; hashbrown
        // takes its control bits from the top and its index from the
        // bottom, so fold them together.
        let product = (self.0 ^ key).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = product ^ (product >> 32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_keys_spread_over_the_low_and_the_high_bits() {
        let hash = |key: u64| {
            let mut h = IdHasher::default();
            h.write_u64(key);
            h.finish()
        };
        // hashbrown indexes by the low bits and tags by the top 7.
        let low: std::collections::HashSet<u64> = (0..1024).map(|k| hash(k) & 1023).collect();
        let top: std::collections::HashSet<u64> = (0..1024).map(|k| hash(k) >> 57).collect();
        assert!(low.len() > 600, "{} distinct low 10 bits of 1024", low.len());
        assert_eq!(top.len(), 128, "every top-7-bit tag used");
    }
}
