//! Data that describes itself, so that a simulated namespace of terabytes
//! need not keep its bytes.
//!
//! A *synthetic block* begins with a 16-byte stamp, [`MAGIC`] and a 64-bit
//! seed, and the rest of it is a fixed pattern. A namespace configured with
//! [`super::NamespaceConfig::synthetic_data`] checks every block written:
//! a synthetic one is kept as its seed, in runs of consecutive seeds at
//! consecutive LBAs (one run per sequential stream of writes, whatever its
//! length), and anything else (metadata, labels, user data) is stored in
//! full as on any namespace. A read regenerates the same bytes, so
//! checksums over them verify, and a scale benchmark can fill a 1 TiB
//! volume in a few hundred megabytes of host memory.
//!
//! A block is taken as synthetic only when its stamp *and* its whole body
//! match, so nothing else is ever mistaken for one: the worst a foreign
//! block starting with the magic can do is be stored in full.

use std::collections::BTreeMap;

/// The first eight bytes of every synthetic block.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SIMSYNTH");
/// The stamp: [`MAGIC`], then the seed, both little-endian.
pub const STAMP_BYTES: usize = 16;
/// The largest block the pattern covers (the simulator's largest LBA).
const PATTERN_BYTES: usize = 4096;

/// The body of every synthetic block: bytes that no zero fill, no repeated
/// byte and no small counter produce.
static PATTERN: [u8; PATTERN_BYTES] = pattern();

const fn pattern() -> [u8; PATTERN_BYTES] {
    let mut bytes = [0u8; PATTERN_BYTES];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut i = 0;
    while i < PATTERN_BYTES {
        // xorshift64: a fixed, well-spread sequence.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes[i] = state as u8;
        i += 1;
    }
    bytes
}

/// Writes the synthetic block of `seed` into `block` (16 to 4096 bytes).
pub fn fill(block: &mut [u8], seed: u64) {
    assert!((STAMP_BYTES..=PATTERN_BYTES).contains(&block.len()), "a block of {} bytes", block.len());
    let len = block.len();
    block[STAMP_BYTES..].copy_from_slice(&PATTERN[STAMP_BYTES..len]);
    stamp(block, seed);
}

/// Rewrites only the stamp of `block`, whose body already holds the
/// pattern (it was filled once): how a benchmark makes each block unique
/// at the cost of 16 bytes.
pub fn stamp(block: &mut [u8], seed: u64) {
    block[..8].copy_from_slice(&MAGIC.to_le_bytes());
    block[8..STAMP_BYTES].copy_from_slice(&seed.to_le_bytes());
}

/// The seed of `block` when it is a synthetic block, stamp and body.
pub fn seed_of(block: &[u8]) -> Option<u64> {
    if block.len() < STAMP_BYTES || block.len() > PATTERN_BYTES {
        return None;
    }
    let magic = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
    if magic != MAGIC || block[STAMP_BYTES..] != PATTERN[STAMP_BYTES..block.len()] {
        return None;
    }
    Some(u64::from_le_bytes(block[8..STAMP_BYTES].try_into().expect("8 bytes")))
}

/// A run of synthetic blocks: `blocks` LBAs from its start, holding the
/// seeds `seed`, `seed + 1`, ...
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SeedRun {
    pub blocks: u64,
    pub seed: u64,
}

/// The synthetic blocks of a namespace, as runs keyed by first LBA; runs
/// never overlap.
#[derive(Debug, Default)]
pub(crate) struct SeedRuns {
    runs: BTreeMap<u64, SeedRun>,
}

/// Host bytes one run costs (a B-tree entry and its share of a node), for
/// memory accounting.
pub(crate) const RUN_BYTES: usize = 48;

impl SeedRuns {
    /// Runs held.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// The runs that cover any of `blocks` LBAs from `lba`, clipped to
    /// that range, in LBA order: (first LBA, blocks, seed of the first).
    pub fn covering(&self, lba: u64, blocks: u64) -> Vec<(u64, u64, u64)> {
        let end = lba + blocks;
        let mut found = Vec::new();
        if self.runs.is_empty() {
            return found;
        }
        let before = self.runs.range(..lba).next_back().map(|(&start, &run)| (start, run));
        let after = self.runs.range(lba..end).map(|(&start, &run)| (start, run));
        for (start, run) in before.into_iter().chain(after) {
            let first = start.max(lba);
            let last = (start + run.blocks).min(end);
            if first < last {
                found.push((first, last - first, run.seed + (first - start)));
            }
        }
        found
    }

    /// Forgets the synthetic blocks among `blocks` LBAs from `lba` (they
    /// are overwritten or zeroed), keeping the rest of any run they split.
    pub fn remove(&mut self, lba: u64, blocks: u64) {
        let end = lba + blocks;
        for (first, count, _) in self.covering(lba, blocks) {
            // `first` lies in a run that starts at or before it.
            let (&start, &run) = self.runs.range(..=first).next_back().expect("a covering run");
            debug_assert!(first + count <= start + run.blocks);
            self.runs.remove(&start);
            if start < lba {
                self.runs.insert(start, SeedRun { blocks: lba - start, seed: run.seed });
            }
            let run_end = start + run.blocks;
            if run_end > end {
                self.runs.insert(end, SeedRun { blocks: run_end - end, seed: run.seed + (end - start) });
            }
        }
    }

    /// Records `blocks` synthetic blocks from `lba` with seeds from `seed`,
    /// replacing whatever runs covered them and joining the runs before and
    /// after when the seeds follow on.
    pub fn insert(&mut self, lba: u64, blocks: u64, seed: u64) {
        debug_assert!(blocks > 0);
        self.remove(lba, blocks);
        let (mut start, mut run) = (lba, SeedRun { blocks, seed });
        if let Some((&before, &previous)) = self.runs.range(..lba).next_back() {
            if before + previous.blocks == lba && previous.seed.wrapping_add(previous.blocks) == seed {
                self.runs.remove(&before);
                start = before;
                run = SeedRun { blocks: previous.blocks + blocks, seed: previous.seed };
            }
        }
        let end = lba + blocks;
        if let Some(next) = self.runs.get(&end).copied() {
            if seed.wrapping_add(blocks) == next.seed {
                self.runs.remove(&end);
                run.blocks += next.blocks;
            }
        }
        self.runs.insert(start, run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_nothing_else_passes_for_one() {
        for size in [512, 4096] {
            let mut block = vec![0u8; size];
            fill(&mut block, 77);
            assert_eq!(seed_of(&block), Some(77));
            stamp(&mut block, u64::MAX);
            assert_eq!(seed_of(&block), Some(u64::MAX));
            // One flipped bit anywhere in the body makes it ordinary data.
            for byte in [STAMP_BYTES, size / 2, size - 1] {
                let mut flipped = block.clone();
                flipped[byte] ^= 1;
                assert_eq!(seed_of(&flipped), None, "byte {byte}");
            }
            let mut other = block.clone();
            other[0] ^= 1;
            assert_eq!(seed_of(&other), None);
        }
        assert_eq!(seed_of(&[0u8; 4096]), None);
        assert_eq!(seed_of(&[0xFFu8; 4096]), None);
    }

    #[test]
    fn runs_join_split_and_clip() {
        let mut runs = SeedRuns::default();
        runs.insert(100, 10, 1000);
        runs.insert(110, 5, 1010);
        assert_eq!(runs.len(), 1, "consecutive seeds at consecutive LBAs join");
        assert_eq!(runs.covering(0, 1000), vec![(100, 15, 1000)]);
        runs.insert(90, 10, 5);
        assert_eq!(runs.len(), 2, "seeds that do not follow on stay apart");
        runs.remove(104, 2);
        assert_eq!(runs.covering(100, 15), vec![(100, 4, 1000), (106, 9, 1006)]);
        assert_eq!(runs.covering(103, 5), vec![(103, 1, 1003), (106, 2, 1006)]);
        // A write over the middle of a run with other seeds.
        runs.insert(107, 2, 50);
        assert_eq!(runs.covering(106, 4), vec![(106, 1, 1006), (107, 2, 50), (109, 1, 1009)]);
        // Filling the hole with the right seeds joins nothing across the
        // foreign run, but joins with its neighbour before.
        runs.insert(104, 2, 1004);
        assert_eq!(runs.covering(100, 7), vec![(100, 7, 1000)]);
        runs.remove(0, 1000);
        assert_eq!(runs.len(), 0);
    }
}
