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
//! Each block's metadata (a namespace formatted with MS > 0) lives in the
//! same chunk as its data, after the chunk's data: a chunk of `n` blocks is
//! `n` blocks of data, then `n` blocks' metadata. The dirty bitmap, Flush,
//! FUA, the power-loss decision and freeing all work on chunks and blocks,
//! so a block's data and metadata are always in the same place and are
//! kept or lost together. Namespaces without metadata have chunks of data
//! only, as before.
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

/// Data bytes per chunk (its blocks' metadata follows).
pub(crate) const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks per slab (32 MiB of data).
const SLAB_CHUNKS: usize = 512;
/// The huge page size slabs are aligned to.
const HUGE_PAGE_BYTES: usize = crate::dma::HUGE_PAGE_SIZE;

/// A chunk of the arena.
type ChunkId = u32;

/// Chunk memory: slabs carved into chunks of `chunk_bytes`, with a free
/// list. Slabs are plain zeroed `Vec`s (calloc: untouched pages cost
/// nothing) with room to align a 2 MiB-aligned window inside.
#[derive(Debug)]
struct Arena {
    /// Bytes per chunk: its data and its blocks' metadata.
    chunk_bytes: usize,
    slabs: Vec<Vec<u8>>,
    /// Where each slab's aligned window starts.
    starts: Vec<usize>,
    free: Vec<ChunkId>,
    /// Chunks never handed out in the newest slab start here.
    next: usize,
    allocated: usize,
}

impl Arena {
    fn new(chunk_bytes: usize) -> Self {
        assert!(chunk_bytes >= CHUNK_BYTES, "a chunk holds at least its data");
        Arena { chunk_bytes, slabs: Vec::new(), starts: Vec::new(), free: Vec::new(), next: 0, allocated: 0 }
    }

    fn slab_bytes(&self) -> usize {
        SLAB_CHUNKS * self.chunk_bytes
    }

    fn add_slab(&mut self) {
        let slab_bytes = self.slab_bytes();
        let slab = vec![0u8; slab_bytes + HUGE_PAGE_BYTES];
        let start = slab.as_ptr().align_offset(HUGE_PAGE_BYTES);
        assert!(start < HUGE_PAGE_BYTES, "a byte buffer aligns anywhere");
        crate::dma::advise_huge_pages(&slab[start..start + slab_bytes]);
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
        let start = self.starts[slab] + (id as usize % SLAB_CHUNKS) * self.chunk_bytes;
        (slab, start..start + self.chunk_bytes)
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

/// A piece of the data (or metadata) a read returns, in order.
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

/// Where a write's metadata comes from, on a namespace with metadata.
pub(crate) enum MetadataSource<'a> {
    /// The blocks keep the metadata reads see now: a Write or Zone Append
    /// without MPTR (QEMU 7.2's `nvme_rw_cb` transfers no metadata then,
    /// and the old metadata stays), or any write on a namespace without
    /// metadata.
    Keep,
    /// The function writes the new metadata, in order, into the slices it
    /// is given (one per chunk the write touches).
    Fill(&'a mut dyn FnMut(&mut [u8])),
}

impl std::fmt::Debug for MetadataSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MetadataSource::Keep => "Keep",
            MetadataSource::Fill(_) => "Fill",
        })
    }
}

/// The two things a block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Data,
    Metadata,
}

#[derive(Debug)]
struct CachedChunk {
    /// The chunk's data and metadata.
    data: ChunkId,
    /// Bit b: block b of the chunk is in the cache (newer than the media).
    dirty: u128,
}

/// The blocks of one namespace.
#[derive(Debug)]
pub(crate) struct Storage {
    block_size: usize,
    /// MS: metadata bytes per block (0: none).
    metadata_bytes: usize,
    blocks_per_chunk: u64,
    durable: ChunkMap<ChunkId>,
    cache: ChunkMap<CachedChunk>,
    arena: Arena,
    chunks_max: usize,
    /// Chunk numbers being retired (Flush, power loss), kept to reuse.
    retiring: Vec<u64>,
    /// With synthetic data, every block is there, not in chunks.
    synthetic: Option<SyntheticStorage>,
    /// The metadata a write without any keeps, between reading and writing
    /// it back.
    kept_metadata: Vec<u8>,
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
    /// Storage for blocks of `block_size` bytes and `metadata_bytes` of
    /// metadata each, holding at most `memory_limit_bytes`; with
    /// `synthetic`, synthetic blocks are kept as seeds and others trimmed of
    /// their trailing zeroes.
    pub(crate) fn new(block_size: u32, metadata_bytes: u16, memory_limit_bytes: u64, synthetic: bool) -> Self {
        let synthetic = synthetic.then(|| SyntheticStorage::new(block_size, metadata_bytes, memory_limit_bytes));
        let block_size = block_size as usize;
        let metadata_bytes = usize::from(metadata_bytes);
        assert!(block_size.is_power_of_two() && (512..=CHUNK_BYTES).contains(&block_size));
        let blocks_per_chunk = (CHUNK_BYTES / block_size) as u64;
        assert!(blocks_per_chunk <= 128, "the dirty bitmap holds 128 blocks");
        let arena = Arena::new(CHUNK_BYTES + blocks_per_chunk as usize * metadata_bytes);
        let chunks_max = usize::try_from(memory_limit_bytes / arena.chunk_bytes as u64).unwrap_or(usize::MAX);
        Storage {
            block_size,
            metadata_bytes,
            blocks_per_chunk,
            durable: ChunkMap::default(),
            cache: ChunkMap::default(),
            arena,
            chunks_max,
            retiring: Vec::new(),
            synthetic,
            kept_metadata: Vec::new(),
        }
    }

    /// Host memory the stored data and metadata take.
    pub(crate) fn host_bytes(&self) -> u64 {
        match &self.synthetic {
            Some(synthetic) => synthetic.host_bytes(),
            None => (self.arena.allocated * self.arena.chunk_bytes) as u64,
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
            "simulated storage exceeds its memory limit ({} chunks of {} bytes)",
            self.chunks_max,
            self.arena.chunk_bytes
        );
        self.arena.allocate(zeroed)
    }

    /// The (chunk, first block, block count) pieces of `blocks` blocks from
    /// `lba`, in order.
    fn pieces(&self, lba: u64, blocks: u64) -> Pieces {
        Pieces { lba, left: blocks, blocks_per_chunk: self.blocks_per_chunk }
    }

    /// Bytes of `part` per block.
    fn unit(&self, part: Part) -> usize {
        match part {
            Part::Data => self.block_size,
            Part::Metadata => self.metadata_bytes,
        }
    }

    /// Where a chunk keeps `part` of its blocks `first..first + count`: the
    /// data from its start, the metadata after all of the data.
    fn span(&self, part: Part, first: usize, count: usize) -> std::ops::Range<usize> {
        let base = match part {
            Part::Data => 0,
            Part::Metadata => CHUNK_BYTES,
        };
        let unit = self.unit(part);
        base + first * unit..base + (first + count) * unit
    }

    /// Hands the data of `blocks` blocks from `lba` to `sink`, in order, as
    /// reads see it (cache first, then media, zeroes where neither holds it).
    pub(crate) fn read(&self, lba: u64, blocks: u64, sink: impl FnMut(Run<'_>)) {
        match &self.synthetic {
            Some(synthetic) => synthetic.read(lba, blocks, sink),
            None => self.runs(Part::Data, lba, blocks, sink),
        }
    }

    /// Hands the metadata of `blocks` blocks from `lba` to `sink`, in order,
    /// as reads see it; nothing without metadata.
    pub(crate) fn read_metadata(&self, lba: u64, blocks: u64, sink: impl FnMut(Run<'_>)) {
        if self.metadata_bytes == 0 {
            return;
        }
        match &self.synthetic {
            Some(synthetic) => synthetic.read_metadata(lba, blocks, sink),
            None => self.runs(Part::Metadata, lba, blocks, sink),
        }
    }

    /// `part` of `blocks` blocks from `lba`, as runs: one per chunk, or per
    /// stretch of blocks the cache does or does not hold.
    fn runs(&self, part: Part, lba: u64, blocks: u64, mut sink: impl FnMut(Run<'_>)) {
        for (chunk, first, count) in self.pieces(lba, blocks) {
            let durable = self.durable.get(&chunk).map(|id| self.arena.get(*id));
            let emit_durable = |sink: &mut dyn FnMut(Run<'_>), first: usize, count: usize| match durable {
                Some(bytes) => sink(Run::Data(&bytes[self.span(part, first, count)])),
                None => sink(Run::Zeroes(count * self.unit(part))),
            };
            let cached = if self.cache.is_empty() { None } else { self.cache.get(&chunk) };
            match cached {
                Some(cached) if cached.dirty & mask(first, count) != 0 => {
                    let bytes = self.arena.get(cached.data);
                    let end = first + count;
                    let mut block = first;
                    while block < end {
                        let dirty = bit(cached.dirty, block);
                        let mut run_end = block + 1;
                        while run_end < end && bit(cached.dirty, run_end) == dirty {
                            run_end += 1;
                        }
                        if dirty {
                            sink(Run::Data(&bytes[self.span(part, block, run_end - block)]));
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
    /// overwritten entirely, data and metadata) if it does not exist.
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
    /// the data, in order, into the slice it is given, and `metadata` says
    /// what becomes of their metadata. With `durable` both go to the media
    /// (FUA, or no write cache); otherwise both go to the cache.
    pub(crate) fn write(
        &mut self,
        lba: u64,
        blocks: u64,
        durable: bool,
        mut fill: impl FnMut(&mut [u8]),
        metadata: MetadataSource<'_>,
    ) {
        assert!(
            self.metadata_bytes > 0 || matches!(metadata, MetadataSource::Keep),
            "metadata written to a namespace without any"
        );
        if let Some(synthetic) = &mut self.synthetic {
            assert!(durable, "synthetic data on a namespace with a write cache");
            return synthetic.write(lba, blocks, fill, metadata);
        }
        match metadata {
            MetadataSource::Fill(fill_metadata) => self.write_chunks(lba, blocks, durable, &mut fill, fill_metadata),
            MetadataSource::Keep if self.metadata_bytes == 0 => {
                self.write_chunks(lba, blocks, durable, &mut fill, &mut |_| {});
            }
            MetadataSource::Keep => {
                // The chunks the blocks land in may be new (stale bytes) or
                // the media's while the cache holds newer metadata: write
                // back what reads see now. Metadata is small, and this is
                // only for writes that bring none.
                let mut kept = std::mem::take(&mut self.kept_metadata);
                kept.clear();
                self.read_metadata(lba, blocks, |run| run.append_to(&mut kept));
                assert_eq!(kept.len(), blocks as usize * self.metadata_bytes, "every block's metadata read");
                let mut at = 0;
                self.write_chunks(lba, blocks, durable, &mut fill, &mut |destination| {
                    destination.copy_from_slice(&kept[at..at + destination.len()]);
                    at += destination.len();
                });
                assert_eq!(at, kept.len(), "every block's metadata written back");
                self.kept_metadata = kept;
            }
        }
    }

    /// Writes data and metadata chunk by chunk, each chunk's part of both
    /// into the same place (media or cache).
    fn write_chunks(
        &mut self,
        lba: u64,
        blocks: u64,
        durable: bool,
        fill: &mut impl FnMut(&mut [u8]),
        fill_metadata: &mut dyn FnMut(&mut [u8]),
    ) {
        for (chunk, first, count) in self.pieces(lba, blocks) {
            let data = self.span(Part::Data, first, count);
            let metadata = self.span(Part::Metadata, first, count);
            let bits = mask(first, count);
            let id = if durable {
                self.media_chunk(chunk, count as u64 == self.blocks_per_chunk)
            } else {
                let cached = self.cache_chunk(chunk);
                cached.dirty |= bits;
                cached.data
            };
            let bytes = self.arena.get_mut(id);
            fill(&mut bytes[data]);
            if !metadata.is_empty() {
                fill_metadata(&mut bytes[metadata]);
            }
            if durable {
                self.drop_cached(chunk, bits);
            }
        }
    }

    /// Zeroes the data and metadata of blocks `first..first + count` of
    /// chunk `id`.
    fn clear(&mut self, id: ChunkId, first: usize, count: usize) {
        let (data, metadata) = (self.span(Part::Data, first, count), self.span(Part::Metadata, first, count));
        let bytes = self.arena.get_mut(id);
        bytes[data].fill(0);
        bytes[metadata].fill(0);
    }

    /// Makes `blocks` blocks at `lba` read as zeroes, data and metadata
    /// (Write Zeroes, deallocate, zone reset), through the cache unless
    /// `durable`. Whole chunks are freed.
    pub(crate) fn zero(&mut self, lba: u64, blocks: u64, durable: bool) {
        if let Some(synthetic) = &mut self.synthetic {
            return synthetic.zero(lba, blocks);
        }
        for (chunk, first, count) in self.pieces(lba, blocks) {
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
                        self.clear(id, first, count);
                    }
                }
                self.drop_cached(chunk, bits);
            } else {
                let cached = self.cache_chunk(chunk);
                cached.dirty |= bits;
                let id = cached.data;
                self.clear(id, first, count);
            }
        }
    }

    /// Copies the blocks `bits` names, data and metadata, from cached chunk
    /// `data` to the media chunk `chunk`.
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
            self.arena.copy(data, media, self.span(Part::Data, block, end - block));
            if self.metadata_bytes > 0 {
                self.arena.copy(data, media, self.span(Part::Metadata, block, end - block));
            }
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
    /// `keep(lba)` says so and is lost otherwise, its data and metadata
    /// together (one call per block). The cache is empty after.
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

    /// One block's data as reads see it, or as the media holds it
    /// (`media_only`).
    pub(crate) fn block(&self, lba: u64, media_only: bool) -> Vec<u8> {
        match &self.synthetic {
            Some(synthetic) => synthetic.block(lba),
            None => self.stored(Part::Data, lba, media_only),
        }
    }

    /// One block's metadata (empty without metadata) as reads see it, or
    /// as the media holds it (`media_only`).
    pub(crate) fn metadata(&self, lba: u64, media_only: bool) -> Vec<u8> {
        match &self.synthetic {
            Some(synthetic) => synthetic.metadata(lba),
            None => self.stored(Part::Metadata, lba, media_only),
        }
    }

    /// `part` of block `lba`, from the cache (unless `media_only`) or the
    /// media.
    fn stored(&self, part: Part, lba: u64, media_only: bool) -> Vec<u8> {
        let chunk = lba / self.blocks_per_chunk;
        let index = (lba % self.blocks_per_chunk) as usize;
        let bytes = self.span(part, index, 1);
        if !media_only {
            if let Some(cached) = self.cache.get(&chunk) {
                if bit(cached.dirty, index) {
                    return self.arena.get(cached.data)[bytes].to_vec();
                }
            }
        }
        match self.durable.get(&chunk) {
            Some(id) => self.arena.get(*id)[bytes].to_vec(),
            None => vec![0u8; self.unit(part)],
        }
    }

    /// Flips bit `bit` of block `lba`'s data (never its metadata) where
    /// reads find it: in the cache if the block is dirty there, else on the
    /// media.
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
        storage.write(lba, blocks, durable, |slice| slice.fill(byte), MetadataSource::Keep);
    }

    /// Writes `byte` over the data and `metadata_byte` over the metadata.
    fn write_both(storage: &mut Storage, lba: u64, blocks: u64, (byte, metadata_byte): (u8, u8), durable: bool) {
        let mut fill_metadata = |slice: &mut [u8]| slice.fill(metadata_byte);
        storage.write(lba, blocks, durable, |slice| slice.fill(byte), MetadataSource::Fill(&mut fill_metadata));
    }

    fn read_metadata(storage: &Storage, lba: u64, blocks: u64) -> Vec<u8> {
        let mut out = Vec::new();
        storage.read_metadata(lba, blocks, |run| run.append_to(&mut out));
        out
    }

    /// Block `lba`'s data and metadata as reads see them (or the media
    /// holds them), each as its one repeated byte.
    fn both(storage: &Storage, lba: u64, media_only: bool) -> (u8, u8) {
        let (data, metadata) = (storage.block(lba, media_only), storage.metadata(lba, media_only));
        assert!(data.iter().all(|byte| *byte == data[0]) && metadata.iter().all(|byte| *byte == metadata[0]));
        (data[0], metadata[0])
    }

    #[test]
    fn metadata_reads_back_beside_its_data_across_chunks() {
        let mut storage = Storage::new(512, 8, 1 << 30, false);
        assert_eq!(read_metadata(&storage, 1 << 40, 4), vec![0; 32], "never written: zeroes");
        // Across a chunk boundary (128 blocks per chunk), one block cached.
        write_both(&mut storage, 126, 4, (0xAB, 0xCD), true);
        write_both(&mut storage, 128, 1, (0x11, 0x22), false);
        let metadata = read_metadata(&storage, 125, 6);
        assert_eq!(metadata.len(), 48);
        assert_eq!(&metadata[..8], &[0; 8]);
        assert_eq!(&metadata[8..24], &[0xCD; 16]);
        assert_eq!(&metadata[24..32], &[0x22; 8]);
        assert_eq!(&metadata[32..40], &[0xCD; 8]);
        assert_eq!(&metadata[40..], &[0; 8]);
        assert_eq!(read_all(&storage, 128, 1), vec![0x11; 512], "the data is where it was");
        // A chunk holds its blocks' metadata too.
        assert_eq!(storage.host_bytes(), 3 * (CHUNK_BYTES as u64 + 128 * 8));
    }

    #[test]
    fn a_write_without_metadata_keeps_what_reads_saw() {
        let mut storage = Storage::new(4096, 16, 1 << 30, false);
        write_both(&mut storage, 0, 16, (1, 0xA1), true);
        write_both(&mut storage, 4, 4, (2, 0xB2), false);
        // Cached over cached, cached over media, FUA over cached: each keeps
        // the metadata reads saw, including the cache's.
        write_pattern(&mut storage, 5, 1, 3, false);
        write_pattern(&mut storage, 9, 1, 3, false);
        write_pattern(&mut storage, 6, 1, 4, true);
        assert_eq!(both(&storage, 5, false), (3, 0xB2));
        assert_eq!(both(&storage, 9, false), (3, 0xA1));
        assert_eq!(both(&storage, 6, true), (4, 0xB2), "the cached metadata went to the media with the data");
        // Freed chunks come back with stale bytes: a write over a zeroed
        // range keeps zeroes, not the chunk's old metadata.
        storage.flush();
        storage.zero(0, 16, true);
        write_pattern(&mut storage, 0, 16, 5, true);
        write_pattern(&mut storage, 20, 1, 5, false);
        assert_eq!(both(&storage, 0, false), (5, 0));
        assert_eq!(both(&storage, 20, false), (5, 0));
    }

    #[test]
    fn metadata_shares_its_blocks_durability() {
        let mut storage = Storage::new(512, 64, 1 << 30, false);
        write_both(&mut storage, 0, 256, (1, 0x10), true);
        write_both(&mut storage, 10, 4, (2, 0x20), false);
        write_both(&mut storage, 128, 128, (3, 0x30), false);
        assert_eq!(both(&storage, 10, true), (1, 0x10), "the media has the old pair");
        // FUA and persist move both; power loss keeps or drops both, block
        // by block.
        storage.persist(10, 1);
        assert_eq!(both(&storage, 10, true), (2, 0x20));
        storage.power_loss(|lba| lba == 12 || lba >= 128);
        assert_eq!(both(&storage, 11, false), (1, 0x10));
        assert_eq!(both(&storage, 12, false), (2, 0x20));
        assert_eq!(both(&storage, 13, false), (1, 0x10));
        assert_eq!(both(&storage, 200, true), (3, 0x30), "a whole cached chunk became the media's");
        write_both(&mut storage, 50, 2, (4, 0x40), false);
        storage.flush();
        assert_eq!(both(&storage, 51, true), (4, 0x40));
        // Zeroes clear both, through the cache or not.
        storage.zero(50, 1, false);
        storage.zero(0, 10, true);
        assert_eq!(both(&storage, 50, false), (0, 0));
        assert_eq!(both(&storage, 50, true), (4, 0x40), "a cached zero is not durable yet");
        assert_eq!(both(&storage, 9, true), (0, 0));
        // Bit flips stay in the data.
        storage.flip_bit(12, 0);
        assert_eq!(storage.block(12, false)[0], 3);
        assert_eq!(storage.metadata(12, false), vec![0x20; 64]);
    }

    #[test]
    fn unwritten_blocks_read_zeroes_and_writes_read_back() {
        let mut storage = Storage::new(512, 0, 1 << 30, false);
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
        let mut storage = Storage::new(4096, 0, 1 << 30, false);
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
        let mut storage = Storage::new(512, 0, 1 << 30, false);
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
        let mut storage = Storage::new(512, 0, 1 << 30, false);
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
        let mut storage = Storage::new(512, 0, 1 << 30, false);
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
        let mut storage = Storage::new(512, 0, 2 * CHUNK_BYTES as u64, false);
        write_pattern(&mut storage, 0, 3 * 128, 1, true);
    }
}
