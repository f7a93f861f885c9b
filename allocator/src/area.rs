//! Zone checksum areas: each 4 KiB block's checksum kept on the device,
//! after its zone's data, for namespaces whose LBA format has no per-block
//! metadata to carry block tags ([`crate::tags`]).
//!
//! A data zone of `capacity` blocks takes data in at most its first
//! [`data_blocks`]`(capacity)` blocks (the volume rounds that down to a
//! whole number of its data unit: `zone_data_blocks`). When placement stops using it (the
//! zone is full, or retired) and its writes are done, the volume writes
//! its *area* right after the data it holds: the tags of its first
//! `sealed` blocks, 8 bytes each in block order ([`crate::tags`]' format
//! with a stride of 8: the crc32c of the block's data, and of where it
//! belongs), [`area_blocks`]`(sealed)` blocks in all. On a zoned
//! namespace it goes by Zone Append, so it lands at the write pointer
//! whatever a failed write left there; the zone is then finished. The
//! journal records `sealed` per zone (`Op::Sealed`), and the tag of the
//! block at offset `o` lies at byte `8 * o` of the area, which starts at
//! block `sealed`: no index, one read.
//!
//! Until its zone is sealed, an extent keeps its checksums in the extent
//! map (in memory, in the journal and in checkpoints), as on a volume
//! without tags; once every copy's zone is sealed and a commit made it
//! durable, they leave the map. So the map holds the extents of the zones
//! being filled, bounded by the zones open, not by the volume's size.
//!
//! Why an area after the data, rather than interleaved tag blocks
//! (dm-integrity) or a header per extent: the data keeps its alignment and
//! its extents stay contiguous, a 256 KiB write stays one 256 KiB command
//! (a header block per extent halved the VM's throughput, see
//! `allocator/METADATA.md`), and a scrub reads one zone's tags in one
//! command before its data. A zoned namespace can only put them after the
//! data, which is where they go. The cost: a random read of a sealed
//! extent reads one more block (its tags), and the checksums of the zones
//! being filled stay in memory until they are sealed.

use crate::BLOCK_SIZE;

/// Bytes of one block's tag in an area.
pub const TAG_BYTES: usize = crate::tags::TAG_BYTES;

/// Tags per 4 KiB area block.
pub const TAGS_PER_BLOCK: u32 = (BLOCK_SIZE / TAG_BYTES) as u32;

/// The blocks of a zone of `capacity` blocks that take data: the most
/// whose area still fits after them.
pub fn data_blocks(capacity: u32) -> u32 {
    capacity - capacity.div_ceil(TAGS_PER_BLOCK + 1)
}

/// Blocks of the area of `sealed` data blocks.
pub fn area_blocks(sealed: u32) -> u32 {
    sealed.div_ceil(TAGS_PER_BLOCK)
}

/// The area blocks holding the tags of blocks `offset..offset + blocks`
/// (relative to the area's start), and where in the first of them the
/// first tag lies, in bytes.
pub fn covering(offset: u32, blocks: u32) -> (std::ops::Range<u32>, usize) {
    assert!(blocks > 0, "no blocks");
    let first = offset / TAGS_PER_BLOCK;
    let last = (offset + blocks - 1) / TAGS_PER_BLOCK;
    (first..last + 1, (offset % TAGS_PER_BLOCK) as usize * TAG_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_area_of_any_fill_fits_after_it_and_no_block_is_wasted_beyond_one() {
        for capacity in (1..3000).chain([16_384, 65_536, 262_144, 275_712, u32::MAX / 2]) {
            let data = data_blocks(capacity);
            for sealed in [0, 1.min(data), data / 2, data.saturating_sub(1), data] {
                assert!(sealed + area_blocks(sealed) <= capacity, "capacity {capacity}, {sealed} sealed");
            }
            // One more data block would not fit with its area.
            assert!(data + 1 + area_blocks(data + 1) > capacity, "capacity {capacity}: {data} could be more");
        }
        assert_eq!((data_blocks(16_384), area_blocks(16_352)), (16_352, 32), "a 64 MiB zone");
    }

    #[test]
    fn a_run_of_blocks_finds_its_tags() {
        assert_eq!(covering(0, 1), (0..1, 0));
        assert_eq!(covering(511, 1), (0..1, 511 * 8));
        assert_eq!(covering(511, 2), (0..2, 511 * 8), "straddles two area blocks");
        assert_eq!(covering(512, 64), (1..2, 0));
        assert_eq!(covering(1000, 1024), (1..4, (1000 - 512) * 8));
    }
}
