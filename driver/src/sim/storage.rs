//! Sparse block storage for one namespace: durable media plus a volatile
//! write cache, both in 64 KiB chunks so bulk data moves with one copy per
//! chunk and one hash lookup per chunk (never per block).
//!
//! - *Durable* chunks are what survives a power cut. A chunk that was never
//!   written does not exist and reads as zeroes.
//! - *Cached* chunks hold data written without FUA while the volatile write
//!   cache is on, with a bitmap of the blocks they hold (dirty blocks).
//!   Reads see a dirty block in the cache before the media. Flush moves
//!   every dirty block to the media; a power cut moves each one or drops it,
//!   as the caller decides, block by block.
//!
//! A namespace with synthetic data keeps its blocks in a
//! [`SyntheticStorage`] instead (see [`super::synthetic`]): it has no
//! write cache (the configuration insists), so every write is durable
//! when it completes.
//!
//! Chunks live in slabs of 32 MiB, aligned to 2 MiB and advised for
//! transparent huge pages: random reads over hundreds of megabytes would
//! otherwise miss the TLB on every command, which under a hypervisor's
//! nested paging costs about as much as the 4 KiB copy itself.

use super::synthetic::SyntheticStorage;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Bytes per chunk.
pub(crate) const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks per slab (32 MiB).
const SLAB_CHUNKS: usize = 512;
const SLAB_BYTES: usize = SLAB_CHUNKS * CHUNK_BYTES;
/// The huge page size slabs are aligned to.
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// A chunk of the arena.
type ChunkId = u32;

/// Chunk memory: slabs carved into chunks, with a free list. Slabs are
/// plain zeroed `Vec`s (calloc: untouched pages cost nothing) with room to
/// align a 2 MiB-aligned window inside.
#[derive(Debug, Default)]
struct Arena {
    slabs: Vec<Vec<u8>>,
    /// Where each slab's aligned window starts.
    starts: Vec<usize>,
    free: Vec<ChunkId>,
    /// Chunks never handed out in the newest slab start here.
    next: usize,
    allocated: usize,
}

impl Arena {
    fn add_slab(&mut self) {
        let slab = vec![0u8; SLAB_BYTES + HUGE_PAGE_BYTES];
        let start = slab.as_ptr().align_offset(HUGE_PAGE_BYTES);
        assert!(start < HUGE_PAGE_BYTES, "a byte buffer aligns anywhere");
        let window = slab[start..start + SLAB_BYTES].as_ptr();
        // SAFETY: madvise only advises the kernel about the pages of this
        // live allocation (our own Vec, not yet touched); it neither reads
        // nor writes memory, and a failure (no THP support) is harmless.
        unsafe { libc::madvise(window.cast_mut().cast(), SLAB_BYTES, libc::MADV_HUGEPAGE) };
        self.slabs.push(slab);
        self.starts.push(start);
        self.next = 0;
    }

    /// A chunk, zeroed when `zeroed` (else with stale contents).
    fn allocate(&mut self, zeroed: bool) -> ChunkId {
        self.allocated += 1;
        if let Some(id) = self.free.pop() {
            if zeroed {
                self.get_mut(id).fill(0);
            }
            return id;
        }
        if self.slabs.is_empty() || self.next == SLAB_CHUNKS {
            self.add_slab();
        }
        let id = ((self.slabs.len() - 1) * SLAB_CHUNKS + self.next) as ChunkId;
        self.next += 1;
        // Never handed out before: still zero.
        id
    }

    fn release(&mut self, id: ChunkId) {
        debug_assert!(self.allocated > 0);
        self.allocated -= 1;
        self.free.push(id);
    }

    fn range(&self, id: ChunkId) -> (usize, std::ops::Range<usize>) {
        let slab = id as usize / SLAB_CHUNKS;
        let start = self.starts[slab] + (id as usize % SLAB_CHUNKS) * CHUNK_BYTES;
        (slab, start..start + CHUNK_BYTES)
    }

    fn get(&self, id: ChunkId) -> &[u8] {
        let (slab, range) = self.range(id);
        &self.slabs[slab][range]
    }

    fn get_mut(&mut self, id: ChunkId) -> &mut [u8] {
        let (slab, range) = self.range(id);
        &mut self.slabs[slab][range]
    }

    /// Copies `bytes` (offsets within a chunk) from chunk `from` to chunk
    /// `to`.
    fn copy(&mut self, from: ChunkId, to: ChunkId, bytes: std::ops::Range<usize>) {
        let (from_slab, from_range) = self.range(from);
        let (to_slab, to_range) = self.range(to);
        let source = from_range.start + bytes.start..from_range.start + bytes.end;
        let destination = to_range.start + bytes.start;
        if from_slab == to_slab {
            self.slabs[from_slab].copy_within(source, destination);
        } else {
            let (low, high) = self.slabs.split_at_mut(from_slab.max(to_slab));
            let (from_buffer, to_buffer) =
                if from_slab < to_slab { (&low[from_slab], &mut high[0]) } else { (&high[0], &mut low[to_slab]) };
            to_buffer[destination..destination + source.len()].copy_from_slice(&from_buffer[source]);
        }
    }
}

/// A multiply-rotate hash of chunk numbers (FxHash's step). Fixed, so maps
/// behave identically in every run.
#[derive(Default)]
pub(crate) struct ChunkHasher(u64);

impl Hasher for ChunkHasher {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.write_u64(u64::from(*byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type ChunkMap<V> = HashMap<u64, V, BuildHasherDefault<ChunkHasher>>;

/// A piece of the data a read returns, in order.
#[derive(Debug)]
pub(crate) enum Run<'a> {
    /// Stored bytes.
    Data(&'a [u8]),
    /// This many bytes of zeroes (never written, or deallocated).
    Zeroes(usize),
}

impl Run<'_> {
    /// Appends the bytes the run stands for to `out`.
    pub(crate) fn append_to(&self, out: &mut Vec<u8>) {
        match *self {
            Run::Data(bytes) => out.extend_from_slice(bytes),
            Run::Zeroes(count) => out.resize(out.len() + count, 0),
        }
    }
}

#[derive(Debug)]
struct CachedChunk {
    data: ChunkId,
    /// Bit b: block b of the chunk is in the cache (newer than the media).
    dirty: u128,
}

/// The blocks of one namespace.
#[derive(Debug)]
pub(crate) struct Storage {
    block_size: usize,
    blocks_per_chunk: u64,
    durable: ChunkMap<ChunkId>,
    cache: ChunkMap<CachedChunk>,
    arena: Arena,
    chunks_max: usize,
    /// Chunk numbers being retired (Flush, power loss), kept to reuse.
    retiring: Vec<u64>,
    /// With synthetic data, every block is there, not in chunks.
    synthetic: Option<SyntheticStorage>,
}

/// Bits `first..first + count` of a chunk bitmap.
fn mask(first: usize, count: usize) -> u128 {
    debug_assert!(first + count <= 128 && count > 0);
    if count == 128 {
        u128::MAX
    } else {
        ((1u128 << count) - 1) << first
    }
}

fn bit(map: u128, index: usize) -> bool {
    map & (1 << index) != 0
}

/// Iterator over the chunk pieces of a block range.
struct Pieces {
    lba: u64,
    left: u64,
    blocks_per_chunk: u64,
}

impl Iterator for Pieces {
    /// (chunk, first block in the chunk, blocks)
    type Item = (u64, usize, usize);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let chunk = self.lba / self.blocks_per_chunk;
        let first = (self.lba % self.blocks_per_chunk) as usize;
        let count = self.left.min(self.blocks_per_chunk - first as u64) as usize;
        self.lba += count as u64;
        self.left -= count as u64;
        Some((chunk, first, count))
    }
}

impl Storage {
    /// Storage for blocks of `block_size` bytes, holding at most
    /// `memory_limit_bytes`; with `synthetic`, synthetic blocks are kept as
    /// seeds and others trimmed of their trailing zeroes.
    pub(crate) fn new(block_size: u32, memory_limit_bytes: u64, synthetic: bool) -> Self {
        let block_size = block_size as usize;
        assert!(block_size.is_power_of_two() && (512..=CHUNK_BYTES).contains(&block_size));
        let blocks_per_chunk = (CHUNK_BYTES / block_size) as u64;
        assert!(blocks_per_chunk <= 128, "the dirty bitmap holds 128 blocks");
        let chunks_max = usize::try_from(memory_limit_bytes / CHUNK_BYTES as u64).unwrap_or(usize::MAX);
        Storage {
            block_size,
            blocks_per_chunk,
            durable: ChunkMap::default(),
            cache: ChunkMap::default(),
            arena: Arena::default(),
            chunks_max,
            retiring: Vec::new(),
            synthetic: synthetic.then(|| SyntheticStorage::new(block_size as u32, memory_limit_bytes)),
        }
    }

    /// Host memory the stored data takes.
    pub(crate) fn host_bytes(&self) -> u64 {
        match &self.synthetic {
            Some(synthetic) => synthetic.host_bytes(),
            None => (self.arena.allocated * CHUNK_BYTES) as u64,
        }
    }

    /// Chunks in use (durable and cached).
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        debug_assert_eq!(self.arena.allocated, self.durable.len() + self.cache.len());
        self.arena.allocated
    }

    /// Blocks in the write cache, not yet durable.
    pub(crate) fn dirty_blocks(&self) -> u64 {
        self.cache.values().map(|chunk| u64::from(chunk.dirty.count_ones())).sum()
    }

    /// A chunk, zeroed when `zeroed` (else its contents are stale), within
    /// the memory limit.
    fn allocate(&mut self, zeroed: bool) -> ChunkId {
        assert!(
            self.arena.allocated < self.chunks_max,
            "simulated storage exceeds its memory limit ({} chunks of {CHUNK_BYTES} bytes)",
            self.chunks_max
        );
        self.arena.allocate(zeroed)
    }

    /// The (chunk, first block, block count) pieces of `blocks` blocks from
    /// `lba`, in order.
    fn pieces(&self, lba: u64, blocks: u64) -> Pieces {
        Pieces { lba, left: blocks, blocks_per_chunk: self.blocks_per_chunk }
    }

    fn bytes(&self, first: usize, count: usize) -> std::ops::Range<usize> {
        first * self.block_size..(first + count) * self.block_size
    }

    /// Hands the data of `blocks` blocks from `lba` to `sink`, in order, as
    /// reads see it (cache first, then media, zeroes where neither holds it).
    pub(crate) fn read(&self, lba: u64, blocks: u64, mut sink: impl FnMut(Run<'_>)) {
        if let Some(synthetic) = &self.synthetic {
            return synthetic.read(lba, blocks, sink);
        }
        for (chunk, first, count) in self.pieces(lba, blocks) {
            let durable = self.durable.get(&chunk).map(|id| self.arena.get(*id));
            let emit_durable = |sink: &mut dyn FnMut(Run<'_>), first: usize, count: usize| match durable {
                Some(data) => sink(Run::Data(&data[self.bytes(first, count)])),
                None => sink(Run::Zeroes(count * self.block_size)),
            };
            let cached = if self.cache.is_empty() { None } else { self.cache.get(&chunk) };
            match cached {
                Some(cached) if cached.dirty & mask(first, count) != 0 => {
                    let data = self.arena.get(cached.data);
                    let end = first + count;
                    let mut block = first;
                    while block < end {
                        let dirty = bit(cached.dirty, block);
                        let mut run_end = block + 1;
                        while run_end < end && bit(cached.dirty, run_end) == dirty {
                            run_end += 1;
                        }
                        if dirty {
                            sink(Run::Data(&data[self.bytes(block, run_end - block)]));
                        } else {
                            emit_durable(&mut sink, block, run_end - block);
                        }
                        block = run_end;
                    }
                }
                _ => emit_durable(&mut sink, first, count),
            }
        }
    }

    /// Clears the cache's dirty bits in `bits` of `chunk`, freeing the
    /// cached chunk when nothing dirty is left.
    fn drop_cached(&mut self, chunk: u64, bits: u128) {
        if let Some(cached) = self.cache.get_mut(&chunk) {
            cached.dirty &= !bits;
            if cached.dirty == 0 {
                let cached = self.cache.remove(&chunk).expect("present");
                self.arena.release(cached.data);
            }
        }
    }

    /// The media chunk `chunk`, allocated (zeroed unless `whole`: about to be
    /// overwritten entirely) if it does not exist.
    fn media_chunk(&mut self, chunk: u64, whole: bool) -> ChunkId {
        if let Some(id) = self.durable.get(&chunk) {
            return *id;
        }
        let id = self.allocate(!whole);
        self.durable.insert(chunk, id);
        id
    }

    /// The cached chunk `chunk`, allocated with no dirty block if absent.
    fn cache_chunk(&mut self, chunk: u64) -> &mut CachedChunk {
        if !self.cache.contains_key(&chunk) {
            let data = self.allocate(false);
            self.cache.insert(chunk, CachedChunk { data, dirty: 0 });
        }
        self.cache.get_mut(&chunk).expect("inserted")
    }

    /// Writes `blocks` blocks at `lba`; `fill` writes each chunk's part of
    /// the data, in order, into the slice it is given. With `durable` the
    /// data goes to the media (FUA, or no write cache); otherwise to the
    /// cache.
    pub(crate) fn write(&mut self, lba: u64, blocks: u64, durable: bool, mut fill: impl FnMut(&mut [u8])) {
        if let Some(synthetic) = &mut self.synthetic {
            assert!(durable, "synthetic data on a namespace with a write cache");
            return synthetic.write(lba, blocks, fill);
        }
        for (chunk, first, count) in self.pieces(lba, blocks) {
            let bytes = self.bytes(first, count);
            let bits = mask(first, count);
            if durable {
                let id = self.media_chunk(chunk, count as u64 == self.blocks_per_chunk);
                fill(&mut self.arena.get_mut(id)[bytes]);
                self.drop_cached(chunk, bits);
            } else {
                let cached = self.cache_chunk(chunk);
                cached.dirty |= bits;
                let id = cached.data;
                fill(&mut self.arena.get_mut(id)[bytes]);
            }
        }
    }

    /// Makes `blocks` blocks at `lba` read as zeroes (Write Zeroes,
    /// deallocate, zone reset), through the cache unless `durable`. Whole
    /// chunks are freed.
    pub(crate) fn zero(&mut self, lba: u64, blocks: u64, durable: bool) {
        if let Some(synthetic) = &mut self.synthetic {
            return synthetic.zero(lba, blocks);
        }
        for (chunk, first, count) in self.pieces(lba, blocks) {
            let bytes = self.bytes(first, count);
            let bits = mask(first, count);
            let on_media = self.durable.get(&chunk).copied();
            if durable || on_media.is_none() {
                // Without media data the blocks already read as zeroes once
                // the cache lets go of them, lost or not.
                if let Some(id) = on_media {
                    if count as u64 == self.blocks_per_chunk {
                        self.durable.remove(&chunk);
                        self.arena.release(id);
                    } else {
                        self.arena.get_mut(id)[bytes].fill(0);
                    }
                }
                self.drop_cached(chunk, bits);
            } else {
                let cached = self.cache_chunk(chunk);
                cached.dirty |= bits;
                let id = cached.data;
                self.arena.get_mut(id)[bytes].fill(0);
            }
        }
    }

    /// Copies the blocks `bits` names from cached chunk `data` to the media
    /// chunk `chunk`.
    fn copy_to_media(&mut self, chunk: u64, data: ChunkId, bits: u128) {
        if bits == 0 {
            return;
        }
        let media = self.media_chunk(chunk, false);
        let mut block = 0;
        while block < self.blocks_per_chunk as usize {
            if !bit(bits, block) {
                block += 1;
                continue;
            }
            let mut end = block + 1;
            while end < self.blocks_per_chunk as usize && bit(bits, end) {
                end += 1;
            }
            self.arena.copy(data, media, block * self.block_size..end * self.block_size);
            block = end;
        }
    }

    /// Moves the `kept` blocks of a cached chunk (taken out of the cache)
    /// to the media and frees its buffer.
    fn retire(&mut self, chunk: u64, cached: CachedChunk, kept: u128) {
        debug_assert!(kept & !cached.dirty == 0, "only dirty blocks move");
        if kept == mask(0, self.blocks_per_chunk as usize) {
            // Every block is newer: the cached chunk becomes the media's.
            if let Some(old) = self.durable.insert(chunk, cached.data) {
                self.arena.release(old);
            }
            return;
        }
        self.copy_to_media(chunk, cached.data, kept);
        self.arena.release(cached.data);
    }

    /// Flush: every cached block becomes durable.
    pub(crate) fn flush(&mut self) {
        if self.cache.is_empty() {
            return;
        }
        let mut chunks = std::mem::take(&mut self.retiring);
        chunks.extend(self.cache.keys().copied());
        for chunk in chunks.drain(..) {
            let cached = self.cache.remove(&chunk).expect("listed");
            let dirty = cached.dirty;
            self.retire(chunk, cached, dirty);
        }
        self.retiring = chunks;
        debug_assert!(self.cache.is_empty());
    }

    /// Makes the cached blocks among `blocks` at `lba` durable.
    pub(crate) fn persist(&mut self, lba: u64, blocks: u64) {
        if self.cache.is_empty() {
            return;
        }
        for (chunk, first, count) in self.pieces(lba, blocks) {
            let Some(cached) = self.cache.get_mut(&chunk) else { continue };
            let moving = cached.dirty & mask(first, count);
            cached.dirty &= !moving;
            let (data, remaining) = (cached.data, cached.dirty);
            self.copy_to_media(chunk, data, moving);
            if remaining == 0 {
                self.cache.remove(&chunk);
                self.arena.release(data);
            }
        }
    }

    /// A power cut: each cached block, in LBA order, persists if
    /// `keep(lba)` says so and is lost otherwise. The cache is empty after.
    pub(crate) fn power_loss(&mut self, mut keep: impl FnMut(u64) -> bool) {
        let mut chunks = std::mem::take(&mut self.retiring);
        chunks.extend(self.cache.keys().copied());
        // LBA order, so the PRNG draws do not depend on hash map order.
        chunks.sort_unstable();
        for chunk in chunks.drain(..) {
            let cached = self.cache.remove(&chunk).expect("listed");
            let mut kept = 0u128;
            for block in 0..self.blocks_per_chunk as usize {
                if bit(cached.dirty, block) && keep(chunk * self.blocks_per_chunk + block as u64) {
                    kept |= 1 << block;
                }
            }
            self.retire(chunk, cached, kept);
        }
        self.retiring = chunks;
        debug_assert!(self.cache.is_empty());
    }

    /// One block as reads see it, or as the media holds it (`media_only`).
    pub(crate) fn block(&self, lba: u64, media_only: bool) -> Vec<u8> {
        if let Some(synthetic) = &self.synthetic {
            return synthetic.block(lba);
        }
        let chunk = lba / self.blocks_per_chunk;
        let index = (lba % self.blocks_per_chunk) as usize;
        let bytes = self.bytes(index, 1);
        if !media_only {
            if let Some(cached) = self.cache.get(&chunk) {
                if bit(cached.dirty, index) {
                    return self.arena.get(cached.data)[bytes].to_vec();
                }
            }
        }
        match self.durable.get(&chunk) {
            Some(id) => self.arena.get(*id)[bytes].to_vec(),
            None => vec![0u8; self.block_size],
        }
    }

    /// Flips bit `bit` of block `lba` where reads find it: in the cache if
    /// the block is dirty there, else on the media.
    pub(crate) fn flip_bit(&mut self, lba: u64, bit_index: u64) {
        assert!(bit_index < self.block_size as u64 * 8, "bit {bit_index} outside a {}-byte block", self.block_size);
        if let Some(synthetic) = &mut self.synthetic {
            return synthetic.flip_bit(lba, bit_index);
        }
        let chunk = lba / self.blocks_per_chunk;
        let index = (lba % self.blocks_per_chunk) as usize;
        let byte = index * self.block_size + (bit_index / 8) as usize;
        let flip = 1u8 << (bit_index % 8);
        let cached = self.cache.get(&chunk).filter(|cached| bit(cached.dirty, index)).map(|cached| cached.data);
        let id = match cached {
            Some(id) => id,
            None => self.media_chunk(chunk, false),
        };
        self.arena.get_mut(id)[byte] ^= flip;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(storage: &Storage, lba: u64, blocks: u64) -> Vec<u8> {
        let mut out = Vec::new();
        storage.read(lba, blocks, |run| run.append_to(&mut out));
        out
    }

    fn write_pattern(storage: &mut Storage, lba: u64, blocks: u64, byte: u8, durable: bool) {
        storage.write(lba, blocks, durable, |slice| slice.fill(byte));
    }

    #[test]
    fn unwritten_blocks_read_zeroes_and_writes_read_back() {
        let mut storage = Storage::new(512, 1 << 30, false);
        assert_eq!(read_all(&storage, 1 << 40, 4), vec![0; 2048]);
        // Across a chunk boundary (128 blocks per chunk).
        write_pattern(&mut storage, 126, 4, 0xAB, true);
        let data = read_all(&storage, 125, 6);
        assert_eq!(&data[..512], &[0; 512][..]);
        assert!(data[512..2560].iter().all(|b| *b == 0xAB));
        assert_eq!(&data[2560..], &[0; 512][..]);
        assert_eq!(storage.chunks(), 2);
    }

    #[test]
    fn cache_shadows_media_until_flush_and_power_loss_tears_by_block() {
        let mut storage = Storage::new(4096, 1 << 30, false);
        write_pattern(&mut storage, 0, 16, 1, true);
        write_pattern(&mut storage, 4, 4, 2, false);
        assert_eq!(storage.dirty_blocks(), 4);
        assert_eq!(storage.block(5, false), vec![2; 4096]);
        assert_eq!(storage.block(5, true), vec![1; 4096]);
        // FUA over a dirty block makes the media newer than the cache.
        write_pattern(&mut storage, 7, 1, 3, true);
        assert_eq!(storage.dirty_blocks(), 3);
        assert_eq!(storage.block(7, false), vec![3; 4096]);
        // Keep block 4, lose 5 and 6.
        storage.power_loss(|lba| lba == 4);
        assert_eq!(storage.dirty_blocks(), 0);
        assert_eq!(storage.block(4, true), vec![2; 4096]);
        assert_eq!(storage.block(5, true), vec![1; 4096]);
        assert_eq!(storage.block(6, false), vec![1; 4096]);
        write_pattern(&mut storage, 100, 20, 9, false);
        storage.flush();
        assert_eq!(storage.block(119, true), vec![9; 4096]);
    }

    #[test]
    fn zeroing_frees_whole_chunks_and_goes_through_the_cache() {
        let mut storage = Storage::new(512, 1 << 30, false);
        write_pattern(&mut storage, 0, 256, 5, true);
        assert_eq!(storage.chunks(), 2);
        storage.zero(0, 128, true);
        assert_eq!(storage.durable.len(), 1, "a whole chunk is freed");
        assert_eq!(storage.chunks(), 1);
        // A cached zero over media data is itself lost at a power cut.
        storage.zero(130, 2, false);
        assert_eq!(storage.block(130, false), vec![0; 512]);
        storage.power_loss(|_| false);
        assert_eq!(storage.block(130, false), vec![5; 512]);
        // A cached zero over nothing needs no cache entry.
        storage.zero(1000, 8, false);
        assert_eq!(storage.dirty_blocks(), 0);
    }

    #[test]
    fn persist_moves_only_its_range() {
        let mut storage = Storage::new(512, 1 << 30, false);
        write_pattern(&mut storage, 0, 10, 4, false);
        storage.persist(0, 5);
        assert_eq!(storage.dirty_blocks(), 5);
        assert_eq!(storage.block(4, true), vec![4; 512]);
        assert_eq!(storage.block(5, true), vec![0; 512]);
        storage.power_loss(|_| false);
        assert_eq!(storage.block(4, false), vec![4; 512]);
        assert_eq!(storage.block(5, false), vec![0; 512]);
    }

    #[test]
    fn bit_flips_land_where_reads_look() {
        let mut storage = Storage::new(512, 1 << 30, false);
        storage.flip_bit(3, 9);
        assert_eq!(storage.block(3, true)[1], 2);
        write_pattern(&mut storage, 3, 1, 0, false);
        storage.flip_bit(3, 0);
        assert_eq!(storage.block(3, false)[0], 1);
        assert_eq!(storage.block(3, true)[1], 2, "the media copy is untouched");
    }

    #[test]
    #[should_panic(expected = "memory limit")]
    fn the_memory_limit_holds() {
        let mut storage = Storage::new(512, 2 * CHUNK_BYTES as u64, false);
        write_pattern(&mut storage, 0, 3 * 128, 1, true);
    }
}
