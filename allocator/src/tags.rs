//! Block tags: each 4 KiB block's checksum kept on the device, in the
//! per-block metadata of a namespace formatted with it (an LBA format such
//! as 4096+8 or 4096+64, NVM Command Set 1.0 §5.2.2; QEMU's `nvme-ns ms=`),
//! written in the same command as the data and read with it.
//!
//! A volume block's tag sits in the first 8 bytes of its metadata (the
//! metadata of its first LBA when LBAs are smaller than 4 KiB); the rest of
//! its metadata is zero. The tag is two little-endian `u32`s:
//!
//! - the crc32c of the block's 4 KiB of data;
//! - the crc32c of where the block belongs: the volume ID, the extent ID and
//!   the block's index in the extent. A block that holds another extent's
//!   data, or an older write's (a lost or misdirected write, stale data in a
//!   reused zone), fails it even when its data checksum holds, as ZFS's
//!   block pointers and btrfs's tree block headers catch misplaced blocks.
//!
//! A zone reset or Write Zeroes clears the metadata, and a zero tag never
//! matches a block (its home checksum is never zero for a live block:
//! `home` maps a zero checksum to one).
//!
//! Nothing per block stays in memory: a read or a scrub verifies each
//! block against the tag that came with it, with no lookup.

use crate::checksum::{block_crc, crc_append_u32};
use crate::{ExtentId, BLOCK_SIZE};

/// Bytes of the tag proper, at the start of a block's metadata.
pub const TAG_BYTES: usize = 8;

/// How a volume's namespaces carry tags: `stride` bytes of metadata per
/// 4 KiB block (the LBAs per block times the format's metadata size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagLayout {
    /// Metadata bytes per 4 KiB block; at least [`TAG_BYTES`].
    pub stride: usize,
    /// A controller that moves metadata transfers of this many bytes or
    /// more only when they are a multiple of it (QEMU 7.2,
    /// `nvme_driver::Quirks::METADATA_DMA_TRUNCATED`); `None`: any length.
    pub granule: Option<usize>,
}

impl TagLayout {
    /// Metadata bytes for `blocks` blocks.
    pub fn bytes(self, blocks: usize) -> usize {
        blocks * self.stride
    }

    /// Whether one command can carry the tags of `blocks` blocks whole. An
    /// extent whose tags it cannot keeps its checksums in the extent map,
    /// and a read of blocks whose tags it cannot goes without them.
    pub fn carries(self, blocks: usize) -> bool {
        let bytes = self.bytes(blocks);
        self.granule.is_none_or(|granule| bytes < granule || bytes.is_multiple_of(granule))
    }

    /// The longest run of at most `blocks` blocks whose tags one command
    /// carries.
    pub fn carried_within(self, blocks: usize) -> usize {
        match self.granule {
            Some(granule) if !self.carries(blocks) => {
                // Runs whose tags are a multiple of the granule are
                // multiples of `step` blocks; shorter ones fit below it.
                let step = granule / gcd(granule, self.stride);
                (blocks / step * step).max(((granule - 1) / self.stride).min(blocks))
            }
            _ => blocks,
        }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The checksum of where a block belongs. Never zero, so that cleared
/// metadata never passes.
pub fn home(volume_id: u64, extent: ExtentId, block: u32) -> u32 {
    Home::new(volume_id, extent).of(block)
}

/// What an extent decides of its blocks' home checksums: the crc32c of the
/// volume ID and the extent ID. crc32c continues over appended bytes
/// (`crc(a ++ b)` from `crc(a)`), so each block's home then costs one
/// 4-byte step, not a crc of 20 bytes. A zone's checksum area is 64 of
/// them per 256 KiB written.
#[derive(Clone, Copy, Debug)]
pub struct Home(u32);

impl Home {
    /// The part `extent` of volume `volume_id` decides.
    pub fn new(volume_id: u64, extent: ExtentId) -> Home {
        // The 16 little-endian bytes, four at a time.
        let words = [volume_id as u32, (volume_id >> 32) as u32, extent as u32, (extent >> 32) as u32];
        Home(words.into_iter().fold(0, crc_append_u32))
    }

    /// The home checksum of block `block` of the extent.
    #[inline]
    pub fn of(self, block: u32) -> u32 {
        crc_append_u32(self.0, block).max(1)
    }
}

/// Writes the tags of blocks `first..first + crcs.len()` of `extent`, whose
/// data checksums are `crcs`, into `out` (exactly their metadata bytes).
///
/// Each home costs one crc32c step of four bytes: the SSE4.2 `crc32`
/// instruction when the checksums in use are the hardware's (about 5
/// instructions a tag, against about 20 with the table step; a zone's
/// checksum area is 64 tags per 256 KiB written), else the table step.
pub fn fill(layout: TagLayout, volume_id: u64, extent: ExtentId, first: u32, crcs: &[u32], out: &mut [u8]) {
    assert_eq!(out.len(), layout.bytes(crcs.len()), "metadata for {} blocks", crcs.len());
    let home = Home::new(volume_id, extent);
    if layout.stride != TAG_BYTES {
        out.fill(0);
    }
    #[cfg(target_arch = "x86_64")]
    if crate::checksum::implementation() == crate::checksum::Implementation::Hardware
        && std::arch::is_x86_feature_detected!("sse4.2")
    {
        // SAFETY: the CPU has SSE4.2, checked just above.
        unsafe { fill_sse42(home, first, crcs, out, layout.stride) };
        return;
    }
    write_tags(home, first, crcs, out, layout.stride, crc_append_u32);
}

/// [`fill`] with the `crc32` instruction.
///
/// # Safety
/// The CPU must have SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn fill_sse42(home: Home, first: u32, crcs: &[u32], out: &mut [u8], stride: usize) {
    // crc32c's register is the complement of the checksum: the instruction
    // steps the register, `crc_append_u32` the checksum.
    write_tags(home, first, crcs, out, stride, |crc, value| !std::arch::x86_64::_mm_crc32_u32(!crc, value));
}

/// The tags of [`fill`], each `stride` bytes from the last, its home
/// stepped by `step` (a crc32c append of four bytes).
#[inline(always)]
fn write_tags(home: Home, first: u32, crcs: &[u32], out: &mut [u8], stride: usize, step: impl Fn(u32, u32) -> u32) {
    let tag = |index: usize, data_crc: u32| {
        let home = step(home.0, first + index as u32).max(1);
        (u64::from(data_crc) | u64::from(home) << 32).to_le_bytes()
    };
    if stride == TAG_BYTES {
        // Tags back to back (a checksum area): whole 8-byte stores.
        let (tags, _) = out.as_chunks_mut::<TAG_BYTES>();
        for (index, (&data_crc, meta)) in crcs.iter().zip(tags).enumerate() {
            *meta = tag(index, data_crc);
        }
        return;
    }
    for (index, (&data_crc, meta)) in crcs.iter().zip(out.chunks_exact_mut(stride)).enumerate() {
        meta[..TAG_BYTES].copy_from_slice(&tag(index, data_crc));
    }
}

/// The data checksums the tags in `meta` record (one per block), whatever
/// their home: what a copy's tags claim, for copying them elsewhere.
pub fn data_crcs(layout: TagLayout, meta: &[u8]) -> impl Iterator<Item = u32> + '_ {
    meta.chunks_exact(layout.stride).map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]))
}

/// The blocks (indices into `data`, 0-based) of `extent`'s blocks
/// `first..` that fail their tag in `meta`: a data checksum that does not
/// match, or a tag that belongs elsewhere.
pub fn mismatches(
    layout: TagLayout,
    volume_id: u64,
    extent: ExtentId,
    first: u32,
    data: &[u8],
    meta: &[u8],
) -> Vec<u32> {
    let blocks = data.len() / BLOCK_SIZE;
    assert_eq!(data.len(), blocks * BLOCK_SIZE, "whole blocks");
    assert_eq!(meta.len(), layout.bytes(blocks), "metadata for {blocks} blocks");
    let mut bad = Vec::new();
    let home = Home::new(volume_id, extent);
    for (index, (block, m)) in data.chunks_exact(BLOCK_SIZE).zip(meta.chunks_exact(layout.stride)).enumerate() {
        let index = index as u32;
        let data_crc = u32::from_le_bytes([m[0], m[1], m[2], m[3]]);
        let home_crc = u32::from_le_bytes([m[4], m[5], m[6], m[7]]);
        if home_crc != home.of(first + index) || data_crc != block_crc(block) {
            bad.push(index);
        }
    }
    bad
}

/// What a run of an extent's blocks must hold, for an engine (scrub,
/// resilver) to verify a read of them: their checksums from the extent
/// map, or tags read with them that bind them to this extent and place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    /// One checksum per block (a volume without block tags).
    Crcs(Vec<u32>),
    /// Blocks `first..first + blocks` of `extent`, checked against the tags
    /// read with them.
    Tags {
        /// The extent.
        extent: ExtentId,
        /// The run's first block within the extent.
        first: u32,
        /// The run's length, in blocks.
        blocks: u32,
    },
}

/// The tags read with a run of blocks, and what checks them.
#[derive(Clone, Copy, Debug)]
pub struct ReadTags<'a> {
    /// The volume's layout of tags in the metadata.
    pub layout: TagLayout,
    /// The volume's ID ([`crate::Volume::volume_id`]).
    pub volume_id: u64,
    /// The metadata read with the run (its blocks' share only).
    pub meta: &'a [u8],
}

impl Expected {
    /// Length of the run, in blocks.
    pub fn blocks(&self) -> usize {
        match self {
            Expected::Crcs(crcs) => crcs.len(),
            Expected::Tags { blocks, .. } => *blocks as usize,
        }
    }

    /// The run cut after `blocks` blocks: the head and the tail.
    pub fn split_at(self, blocks: usize) -> (Expected, Expected) {
        match self {
            Expected::Crcs(mut crcs) => {
                let tail = crcs.split_off(blocks);
                (Expected::Crcs(crcs), Expected::Crcs(tail))
            }
            Expected::Tags { extent, first, blocks: all } => {
                let head = blocks as u32;
                (
                    Expected::Tags { extent, first, blocks: head },
                    Expected::Tags { extent, first: first + head, blocks: all - head },
                )
            }
        }
    }

    /// Whether the run is checked against tags.
    pub fn is_tags(&self) -> bool {
        matches!(self, Expected::Tags { .. })
    }

    /// The blocks (0-based within the run) of `data` that fail: against
    /// the checksums, or against `tags` (a run that expects tags and was
    /// read without them fails whole).
    pub fn mismatches(&self, data: &[u8], tags: Option<ReadTags<'_>>) -> Vec<u32> {
        match (self, tags) {
            (Expected::Crcs(crcs), _) => crate::checksum::mismatches(data, crcs),
            (Expected::Tags { extent, first, .. }, Some(t)) => {
                mismatches(t.layout, t.volume_id, *extent, *first, data, t.meta)
            }
            (Expected::Tags { blocks, .. }, None) => (0..*blocks).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: TagLayout = TagLayout { stride: 8, granule: None };

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_crc32_instruction_writes_the_tags_the_table_step_writes() {
        if !std::arch::is_x86_feature_detected!("sse4.2") {
            return;
        }
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..200 {
            let (volume, extent) = (next(), next());
            let first = if round % 3 == 0 { u32::MAX - 70 } else { next() as u32 % 4096 };
            let crcs: Vec<u32> = (0..1 + next() % 64).map(|_| next() as u32).collect();
            for stride in [8, 16, 64] {
                let home = Home::new(volume, extent);
                let mut table = vec![0u8; crcs.len() * stride];
                let mut instruction = vec![0xaau8; crcs.len() * stride];
                write_tags(home, first, &crcs, &mut table, stride, crc_append_u32);
                instruction.chunks_exact_mut(stride).for_each(|m| m[TAG_BYTES..].fill(0));
                // SAFETY: SSE4.2 is there, checked above.
                unsafe { fill_sse42(home, first, &crcs, &mut instruction, stride) };
                assert_eq!(table, instruction, "round {round}, stride {stride}");
            }
        }
    }

    fn blocks(n: usize, seed: u8) -> Vec<u8> {
        (0..n * BLOCK_SIZE).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    fn tags_for(data: &[u8], layout: TagLayout, extent: ExtentId, first: u32) -> Vec<u8> {
        let crcs: Vec<u32> = data.chunks_exact(BLOCK_SIZE).map(block_crc).collect();
        let mut meta = vec![0xAA; layout.bytes(crcs.len())];
        fill(layout, 7, extent, first, &crcs, &mut meta);
        meta
    }

    #[test]
    fn a_home_is_the_crc_of_volume_extent_and_block_as_written_before() {
        // The on-media form: crc32c of the volume ID, the extent ID and the
        // block (little-endian), never zero. Tags written by older builds
        // must still verify.
        for (volume_id, extent, block) in [(7, 42, 0), (u64::MAX, 1 << 40, 16_383), (0x5eed, 9, u32::MAX), (0, 0, 0)] {
            let mut bytes = [0u8; 20];
            bytes[..8].copy_from_slice(&u64::to_le_bytes(volume_id));
            bytes[8..16].copy_from_slice(&u64::to_le_bytes(extent));
            bytes[16..].copy_from_slice(&u32::to_le_bytes(block));
            assert_eq!(
                home(volume_id, extent, block),
                crate::checksum::crc(&bytes).max(1),
                "{volume_id} {extent} {block}"
            );
        }
    }

    #[test]
    fn good_blocks_pass_and_each_kind_of_damage_is_caught() {
        let data = blocks(4, 1);
        let meta = tags_for(&data, LAYOUT, 42, 0);
        assert!(mismatches(LAYOUT, 7, 42, 0, &data, &meta).is_empty());

        let mut flipped = data.clone();
        flipped[BLOCK_SIZE * 2 + 100] ^= 1;
        assert_eq!(mismatches(LAYOUT, 7, 42, 0, &flipped, &meta), vec![2], "a bit flip");
        assert_eq!(mismatches(LAYOUT, 7, 43, 0, &data, &meta), vec![0, 1, 2, 3], "another extent's blocks");
        assert_eq!(mismatches(LAYOUT, 8, 42, 0, &data, &meta), vec![0, 1, 2, 3], "another volume's blocks");
        assert_eq!(mismatches(LAYOUT, 7, 42, 1, &data, &meta), vec![0, 1, 2, 3], "blocks shifted in place");
        assert_eq!(mismatches(LAYOUT, 7, 42, 0, &data, &[0; 32]), vec![0, 1, 2, 3], "cleared metadata");
        assert_eq!(mismatches(LAYOUT, 7, 42, 0, &vec![0; 4 * BLOCK_SIZE], &[0; 32]).len(), 4, "a zeroed zone");
    }

    #[test]
    fn a_truncating_controller_carries_short_runs_and_whole_granules() {
        let eight = TagLayout { stride: 8, granule: Some(512) };
        let carried: Vec<usize> = (1..=130).filter(|&n| eight.carries(n)).collect();
        assert_eq!(carried, [(1..=64).collect::<Vec<_>>(), vec![128]].concat());
        assert_eq!((eight.carried_within(65), eight.carried_within(127), eight.carried_within(200)), (64, 64, 192));
        let sixty_four = TagLayout { stride: 64, granule: Some(512) };
        assert!(sixty_four.carries(7) && sixty_four.carries(8) && !sixty_four.carries(9) && sixty_four.carries(16));
        assert_eq!(sixty_four.carried_within(9), 8);
        let odd = TagLayout { stride: 24, granule: Some(512) };
        assert_eq!(odd.carried_within(40), 21, "no multiple of 512 bytes within 40 blocks of 24: the short run");
        assert!(LAYOUT.carries(65) && LAYOUT.carried_within(65) == 65);
    }

    #[test]
    fn a_wider_stride_keeps_the_tag_first_and_zeroes_the_rest() {
        let layout = TagLayout { stride: 64, granule: None };
        let data = blocks(3, 9);
        let meta = tags_for(&data, layout, 5, 10);
        assert!(meta.chunks_exact(64).all(|m| m[TAG_BYTES..].iter().all(|&b| b == 0)));
        assert!(mismatches(layout, 7, 5, 10, &data, &meta).is_empty());
        let crcs: Vec<u32> = data_crcs(layout, &meta).collect();
        assert_eq!(crcs, data.chunks_exact(BLOCK_SIZE).map(block_crc).collect::<Vec<_>>());
        // A range of the extent checks against its own indices.
        assert!(mismatches(layout, 7, 5, 11, &data[BLOCK_SIZE..], &meta[64..]).is_empty());
    }
}
