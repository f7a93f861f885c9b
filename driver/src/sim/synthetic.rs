//! Data that describes itself, so that a simulated namespace of terabytes
//! need not keep its bytes.
//!
//! A *synthetic block* begins with a 16-byte stamp, [`MAGIC`] and a 64-bit
//! seed, and the rest of it is a fixed pattern. A namespace configured with
//! [`super::NamespaceConfig::synthetic_data`] checks every block written:
//! a synthetic one is kept as its seed, in runs of consecutive seeds at
//! consecutive LBAs (one run per sequential stream of writes, whatever its
//! length), and anything else (metadata, labels, extent headers, user
//! data) is kept block by block, less its trailing zeroes. A read
//! regenerates the same bytes, so checksums over them verify, and a scale
//! benchmark can fill a terabyte volume in a few gigabytes of host memory
//! (what it keeps is what is not synthetic).
//!
//! A block is taken as synthetic only when its stamp *and* its whole body
//! match, so nothing else is ever mistaken for one: the worst a foreign
//! block starting with the magic can do is be stored in full.

use super::storage::{MetadataSource, Run};
use crate::prng::Prng;
use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

/// The first eight bytes of every synthetic block.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SIMSYNTH");
/// The stamp: [`MAGIC`], then the seed, both little-endian.
pub const STAMP_BYTES: usize = 16;
/// The largest block the pattern covers (the simulator's largest LBA).
const PATTERN_BYTES: usize = 4096;

/// The body of every synthetic block: bytes that no zero fill, no repeated
/// byte and no small counter produce, drawn once from the project's PRNG
/// with a fixed seed.
static PATTERN: LazyLock<[u8; PATTERN_BYTES]> = LazyLock::new(|| {
    let mut bytes = [0u8; PATTERN_BYTES];
    Prng::new(0x5359_4E54_4845_5449).fill(&mut bytes);
    bytes
});

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

/// Host bytes a stored block costs beyond its bytes (a B-tree entry and
/// the allocation's header), for memory accounting.
const STORED_BLOCK_OVERHEAD_BYTES: u64 = 64;

/// Blocks per group of stored blocks: a zone reset or a large zeroing
/// detaches whole groups at once.
const STORED_GROUP_BLOCKS: u64 = 4096;

/// Stored blocks past which detached groups are freed on a thread of their
/// own: a reset's cost on the command path is then a few map operations, as
/// on a device, not the host's work of freeing what the zone held.
const FREE_ELSEWHERE_BLOCKS: usize = 1024;

/// Blocks per chunk of [`DenseMetadata`].
const METADATA_CHUNK_BLOCKS: u64 = 4096;

/// Every block's metadata, dense, in chunks of [`METADATA_CHUNK_BLOCKS`]
/// blocks allocated at their first write: a volume that tags every block
/// (8 bytes per 4 KiB) costs 2 GiB per TiB here, where one map entry per
/// block would cost ten times that.
#[derive(Debug, Default)]
struct DenseMetadata {
    /// Bytes per block.
    bytes: usize,
    chunks: HashMap<u64, Box<[u8]>>,
}

impl DenseMetadata {
    fn chunk_bytes(&self) -> usize {
        METADATA_CHUNK_BLOCKS as usize * self.bytes
    }

    /// The chunks over `[lba, lba + blocks)`: (chunk, first byte in it,
    /// bytes), in order.
    fn spans(&self, lba: u64, blocks: u64) -> impl Iterator<Item = (u64, usize, usize)> + '_ {
        let end = lba + blocks;
        let mut at = lba;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let chunk = at / METADATA_CHUNK_BLOCKS;
            let upto = end.min((chunk + 1) * METADATA_CHUNK_BLOCKS);
            let span = (chunk, (at % METADATA_CHUNK_BLOCKS) as usize * self.bytes, (upto - at) as usize * self.bytes);
            at = upto;
            Some(span)
        })
    }

    fn write(&mut self, lba: u64, metadata: &[u8]) {
        let mut from = 0;
        for (chunk, start, len) in self.spans(lba, (metadata.len() / self.bytes) as u64).collect::<Vec<_>>() {
            let chunk_bytes = self.chunk_bytes();
            let stored = self.chunks.entry(chunk).or_insert_with(|| vec![0u8; chunk_bytes].into_boxed_slice());
            stored[start..start + len].copy_from_slice(&metadata[from..from + len]);
            from += len;
        }
    }

    fn read(&self, lba: u64, blocks: u64, mut sink: impl FnMut(Run<'_>)) {
        for (chunk, start, len) in self.spans(lba, blocks) {
            match self.chunks.get(&chunk) {
                Some(stored) => sink(Run::Data(&stored[start..start + len])),
                None => sink(Run::Zeroes(len)),
            }
        }
    }

    fn zero(&mut self, lba: u64, blocks: u64) {
        for (chunk, start, len) in self.spans(lba, blocks).collect::<Vec<_>>() {
            if let Some(stored) = self.chunks.get_mut(&chunk) {
                stored[start..start + len].fill(0);
                if len == stored.len() {
                    self.chunks.remove(&chunk);
                }
            }
        }
    }

    fn host_bytes(&self) -> u64 {
        (self.chunks.len() * self.chunk_bytes()) as u64
    }
}

/// The blocks of a namespace with synthetic data: runs of seeds, and the
/// other blocks trimmed of their trailing zeroes, and each block's metadata
/// that is not all zeroes, exactly (it is small). Writes are durable when
/// they complete (there is no write cache).
#[derive(Debug)]
pub(crate) struct SyntheticStorage {
    block_size: usize,
    /// MS: metadata bytes per block (0: none).
    metadata_bytes: usize,
    seeds: SeedRuns,
    /// Blocks that are not synthetic, each up to its last nonzero byte, in
    /// groups of [`STORED_GROUP_BLOCKS`] by LBA; a block absent from both
    /// reads as zeroes.
    stored: BTreeMap<u64, BTreeMap<u64, Box<[u8]>>>,
    stored_bytes: u64,
    stored_blocks: u64,
    /// Each block's metadata.
    metadata: DenseMetadata,
    memory_limit_bytes: u64,
    /// One write's bytes, to classify.
    scratch: Vec<u8>,
    /// One write's metadata.
    metadata_scratch: Vec<u8>,
}

impl SyntheticStorage {
    pub(crate) fn new(block_size: u32, metadata_bytes: u16, memory_limit_bytes: u64) -> Self {
        SyntheticStorage {
            block_size: block_size as usize,
            metadata_bytes: usize::from(metadata_bytes),
            seeds: SeedRuns::default(),
            stored: BTreeMap::new(),
            stored_bytes: 0,
            stored_blocks: 0,
            metadata: DenseMetadata { bytes: usize::from(metadata_bytes), chunks: HashMap::new() },
            memory_limit_bytes,
            scratch: Vec::new(),
            metadata_scratch: Vec::new(),
        }
    }

    /// Host memory the blocks and their metadata take.
    pub(crate) fn host_bytes(&self) -> u64 {
        self.stored_bytes
            + self.stored_blocks * STORED_BLOCK_OVERHEAD_BYTES
            + self.metadata.host_bytes()
            + (self.seeds.len() * RUN_BYTES) as u64
    }

    fn check_memory_limit(&self) {
        assert!(
            self.host_bytes() <= self.memory_limit_bytes,
            "simulated storage exceeds its memory limit ({} bytes)",
            self.memory_limit_bytes
        );
    }

    /// Hands `blocks` blocks from `lba` to `sink`, in order.
    pub(crate) fn read(&self, lba: u64, blocks: u64, mut sink: impl FnMut(Run<'_>)) {
        let end = lba + blocks;
        let mut runs = self.seeds.covering(lba, blocks).into_iter().peekable();
        let mut stored = self.stored_range(lba, end).peekable();
        let mut block = vec![0u8; self.block_size];
        let mut zeroes = 0usize;
        for at in lba..end {
            let seed = match runs.peek() {
                Some(&(first, count, seed)) if at >= first => {
                    if at + 1 == first + count {
                        runs.next();
                    }
                    Some(seed + (at - first))
                }
                _ => None,
            };
            let bytes = match stored.peek() {
                Some(&(&stored_lba, bytes)) if stored_lba == at => {
                    stored.next();
                    Some(bytes)
                }
                _ => None,
            };
            match (seed, bytes) {
                (Some(seed), _) => fill(&mut block, seed),
                (None, Some(bytes)) => {
                    block[..bytes.len()].copy_from_slice(bytes);
                    block[bytes.len()..].fill(0);
                }
                (None, None) => {
                    zeroes += self.block_size;
                    continue;
                }
            }
            if zeroes > 0 {
                sink(Run::Zeroes(zeroes));
                zeroes = 0;
            }
            sink(Run::Data(&block));
        }
        if zeroes > 0 {
            sink(Run::Zeroes(zeroes));
        }
    }

    /// Writes `blocks` blocks at `lba`; `fill` writes the data, in order,
    /// into the slices it is given, and `metadata` says what becomes of
    /// their metadata.
    pub(crate) fn write(&mut self, lba: u64, blocks: u64, fill: impl FnMut(&mut [u8]), metadata: MetadataSource<'_>) {
        self.write_data(lba, blocks, fill);
        if let MetadataSource::Fill(fill_metadata) = metadata {
            self.write_metadata(lba, blocks, fill_metadata);
        }
    }

    /// Keeps each block's metadata.
    fn write_metadata(&mut self, lba: u64, blocks: u64, fill_metadata: &mut dyn FnMut(&mut [u8])) {
        assert!(self.metadata_bytes > 0, "metadata written to a namespace without any");
        let mut scratch = std::mem::take(&mut self.metadata_scratch);
        scratch.clear();
        scratch.resize(blocks as usize * self.metadata_bytes, 0);
        fill_metadata(&mut scratch);
        self.metadata.write(lba, &scratch);
        self.metadata_scratch = scratch;
        self.check_memory_limit();
    }

    /// Hands the metadata of `blocks` blocks from `lba` to `sink`, in order.
    pub(crate) fn read_metadata(&self, lba: u64, blocks: u64, sink: impl FnMut(Run<'_>)) {
        if self.metadata_bytes == 0 {
            return;
        }
        self.metadata.read(lba, blocks, sink);
    }

    /// One block's metadata (empty without metadata).
    pub(crate) fn metadata(&self, lba: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.metadata_bytes);
        self.read_metadata(lba, 1, |run| run.append_to(&mut out));
        out
    }

    /// Keeps the synthetic blocks among the data as seeds, the others
    /// trimmed.
    fn write_data(&mut self, lba: u64, blocks: u64, mut fill: impl FnMut(&mut [u8])) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.resize(blocks as usize * self.block_size, 0);
        fill(&mut scratch);
        let seeds: Vec<Option<u64>> = scratch.chunks_exact(self.block_size).map(seed_of).collect();
        let mut block = 0;
        while block < seeds.len() {
            let at = lba + block as u64;
            let Some(first_seed) = seeds[block] else {
                self.seeds.remove(at, 1);
                self.store(at, &scratch[block * self.block_size..(block + 1) * self.block_size]);
                block += 1;
                continue;
            };
            // Synthetic blocks whose seeds follow on: one run.
            let mut end = block + 1;
            while end < seeds.len() && seeds[end] == Some(first_seed.wrapping_add((end - block) as u64)) {
                end += 1;
            }
            let count = (end - block) as u64;
            self.unstore(at, count);
            self.seeds.insert(at, count, first_seed);
            block = end;
        }
        self.scratch = scratch;
    }

    /// Keeps `bytes` as block `lba`, less its trailing zeroes.
    fn store(&mut self, lba: u64, bytes: &[u8]) {
        self.unstore(lba, 1);
        let used = bytes.iter().rposition(|&byte| byte != 0).map_or(0, |last| last + 1);
        if used == 0 {
            return;
        }
        self.stored_bytes += used as u64;
        self.stored_blocks += 1;
        self.check_memory_limit();
        self.stored.entry(lba / STORED_GROUP_BLOCKS).or_default().insert(lba, bytes[..used].into());
    }

    /// The stored blocks from `lba` up to `end`, in order.
    fn stored_range(&self, lba: u64, end: u64) -> impl Iterator<Item = (&u64, &Box<[u8]>)> + '_ {
        let groups = lba / STORED_GROUP_BLOCKS..end.div_ceil(STORED_GROUP_BLOCKS);
        self.stored.range(groups).flat_map(move |(_, group)| group.range(lba..end))
    }

    /// Forgets the stored blocks among `blocks` from `lba`. Whole groups
    /// are detached at once, and freed on another thread when they hold
    /// many blocks (see [`FREE_ELSEWHERE_BLOCKS`]).
    fn unstore(&mut self, lba: u64, blocks: u64) {
        let end = lba + blocks;
        let mut detached = Vec::new();
        let mut detached_blocks = 0;
        let groups: Vec<u64> = self
            .stored
            .range(lba / STORED_GROUP_BLOCKS..end.div_ceil(STORED_GROUP_BLOCKS))
            .map(|(&group, _)| group)
            .collect();
        for group in groups {
            let first = group * STORED_GROUP_BLOCKS;
            if lba <= first && first + STORED_GROUP_BLOCKS <= end {
                let whole = self.stored.remove(&group).expect("listed");
                self.stored_bytes -= whole.values().map(|b| b.len() as u64).sum::<u64>();
                self.stored_blocks -= whole.len() as u64;
                detached_blocks += whole.len();
                detached.push(whole);
                continue;
            }
            let entries = self.stored.get_mut(&group).expect("listed");
            let doomed: Vec<u64> = entries.range(lba..end).map(|(&at, _)| at).collect();
            for at in doomed {
                let old = entries.remove(&at).expect("listed");
                self.stored_bytes -= old.len() as u64;
                self.stored_blocks -= 1;
            }
            if entries.is_empty() {
                self.stored.remove(&group);
            }
        }
        if detached_blocks >= FREE_ELSEWHERE_BLOCKS {
            std::thread::spawn(move || drop(detached));
        }
    }

    /// Makes `blocks` blocks at `lba` read as zeroes, data and metadata.
    pub(crate) fn zero(&mut self, lba: u64, blocks: u64) {
        self.seeds.remove(lba, blocks);
        self.unstore(lba, blocks);
        if self.metadata_bytes > 0 {
            self.metadata.zero(lba, blocks);
        }
    }

    /// One block as reads see it.
    pub(crate) fn block(&self, lba: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.block_size);
        self.read(lba, 1, |run| run.append_to(&mut out));
        out
    }

    /// Flips bit `bit_index` of block `lba`'s data (a synthetic block
    /// becomes an ordinary one); its metadata stays.
    pub(crate) fn flip_bit(&mut self, lba: u64, bit_index: u64) {
        let mut block = self.block(lba);
        block[(bit_index / 8) as usize] ^= 1 << (bit_index % 8);
        self.seeds.remove(lba, 1);
        self.store(lba, &block);
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

    fn read_all(storage: &SyntheticStorage, lba: u64, blocks: u64) -> Vec<u8> {
        let mut out = Vec::new();
        storage.read(lba, blocks, |run| run.append_to(&mut out));
        out
    }

    #[test]
    fn synthetic_blocks_are_kept_as_seeds_and_others_trimmed() {
        let mut storage = SyntheticStorage::new(4096, 0, 1 << 30);
        // Synthetic blocks, seeds 1000.., with a header-like block (a few
        // bytes, then zeroes) at 32 and a synthetic one out of sequence at
        // 33.
        let mut data = vec![0u8; 40 * 4096];
        for (index, block) in data.chunks_exact_mut(4096).enumerate() {
            fill(block, 1000 + index as u64);
        }
        data[32 * 4096..33 * 4096].fill(0);
        data[32 * 4096..32 * 4096 + 300].fill(0x77);
        stamp(&mut data[33 * 4096..34 * 4096], 5);
        let mut at = 0;
        let fill = |destination: &mut [u8]| {
            destination.copy_from_slice(&data[at..at + destination.len()]);
            at += destination.len();
        };
        storage.write(0, 40, fill, MetadataSource::Keep);
        assert_eq!(storage.seeds.len(), 3);
        assert_eq!(storage.stored_bytes, 300, "the stored block without its zeroes");
        assert_eq!(read_all(&storage, 0, 40), data);
        assert_eq!(read_all(&storage, 30, 5), data[30 * 4096..35 * 4096]);
        // Never written: zeroes.
        assert_eq!(read_all(&storage, 100, 2), vec![0u8; 8192]);
        // Stored bytes over a run, zeroes, and a flipped bit end it where
        // they land; zeroes over a stored block free it.
        let mut ordinary = vec![0u8; 4096];
        ordinary[0] = 0xAB;
        storage.write(10, 1, |destination| destination.copy_from_slice(&ordinary), MetadataSource::Keep);
        storage.zero(12, 2);
        storage.zero(32, 1);
        storage.flip_bit(20, 800);
        assert_eq!(storage.stored_bytes, 1 + 4096, "block 10 to its last nonzero byte, and block 20 whole");
        let back = read_all(&storage, 0, 40);
        assert_eq!(&back[10 * 4096..11 * 4096], &ordinary[..]);
        assert_eq!(&back[12 * 4096..14 * 4096], &[0u8; 8192][..]);
        assert_eq!(&back[32 * 4096..33 * 4096], &[0u8; 4096][..]);
        let mut flipped = data[20 * 4096..21 * 4096].to_vec();
        flipped[100] ^= 1;
        assert_eq!(&back[20 * 4096..21 * 4096], &flipped[..]);
        assert_eq!(seed_of(&back[11 * 4096..12 * 4096]), Some(1011));
        assert_eq!(seed_of(&back[21 * 4096..22 * 4096]), Some(1021));
        assert_eq!(storage.block(21), data[21 * 4096..22 * 4096]);
    }

    fn read_metadata(storage: &SyntheticStorage, lba: u64, blocks: u64) -> Vec<u8> {
        let mut out = Vec::new();
        storage.read_metadata(lba, blocks, |run| run.append_to(&mut out));
        out
    }

    #[test]
    fn metadata_is_kept_exactly_beside_seeds_and_stored_blocks() {
        let mut storage = SyntheticStorage::new(512, 16, 1 << 30);
        // Ten synthetic blocks, each with its own metadata; block 3's is
        // all zeroes.
        let mut data = vec![0u8; 10 * 512];
        for (index, block) in data.chunks_exact_mut(512).enumerate() {
            fill(block, 500 + index as u64);
        }
        let mut metadata: Vec<u8> = (0..160).map(|byte| byte as u8 | 0x80).collect();
        metadata[48..64].fill(0);
        let (mut at, mut metadata_at) = (0, 0);
        let mut fill_metadata = |destination: &mut [u8]| {
            destination.copy_from_slice(&metadata[metadata_at..metadata_at + destination.len()]);
            metadata_at += destination.len();
        };
        let fill_data = |destination: &mut [u8]| {
            destination.copy_from_slice(&data[at..at + destination.len()]);
            at += destination.len();
        };
        storage.write(0, 10, fill_data, MetadataSource::Fill(&mut fill_metadata));
        assert_eq!(storage.seeds.len(), 1, "the data is still one run of seeds");
        assert_eq!(read_all(&storage, 0, 10), data);
        assert_eq!(read_metadata(&storage, 0, 10), metadata);
        assert_eq!(read_metadata(&storage, 8, 4), [&metadata[128..], &[0u8; 32][..]].concat());
        // One dense chunk of metadata, and one run of seeds.
        assert_eq!(storage.host_bytes(), METADATA_CHUNK_BLOCKS * 16 + RUN_BYTES as u64);
        // A write without metadata keeps it; bit flips leave it; zeroes
        // clear it.
        storage.write(4, 1, |destination| destination.fill(7), MetadataSource::Keep);
        storage.flip_bit(5, 3);
        storage.zero(6, 2);
        assert_eq!(storage.metadata(4), metadata[64..80]);
        assert_eq!(storage.metadata(5), metadata[80..96]);
        assert_eq!(storage.metadata(6), vec![0; 16]);
        assert_eq!(read_metadata(&storage, 0, 10)[96..128], [0u8; 32]);
    }

    #[test]
    #[should_panic(expected = "memory limit")]
    fn the_memory_limit_holds() {
        let mut storage = SyntheticStorage::new(4096, 0, 8192);
        storage.write(0, 3, |destination| destination.fill(1), MetadataSource::Keep);
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
