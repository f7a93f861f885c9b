//! The extent header: the block (or two) that heads every copy of an
//! extent, written in the same command as its data, holding a crc32c per
//! data block and what the extent is. A copy on the device is
//! `[header][data]`, and its location is the header's.
//!
//! Checksums live here rather than in memory (see `allocator/METADATA.md`):
//! a read of a copy carries its own checksums, so a scrub's merged read
//! needs no lookup per block, and the data describes itself, so a copy
//! holding another extent's bytes (a misdirected or lost write, stale data
//! in a reused zone) fails the header check even when its blocks are
//! internally consistent.
//!
//! Layout, little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic `ZNEX` |
//! | 4 | version (1) |
//! | 5 | header blocks |
//! | 6..8 | zero |
//! | 8..16 | volume ID |
//! | 16..24 | extent ID |
//! | 24..32 | owner |
//! | 32..36 | data blocks |
//! | 36 | stream |
//! | 37..48 | zero |
//! | 48.. | a crc32c per data block |
//! | then 4 | crc32c of every byte before it |
//!
//! then zeroes to the end of the last header block. No field names the
//! copy or its place, so the copies of an extent have identical headers
//! and a resilver writes a copy as it read the other.

use crate::checksum::{block_crc, crc};
use crate::{ExtentId, BLOCK_SIZE};

const MAGIC: u32 = u32::from_le_bytes(*b"ZNEX");
const VERSION: u8 = 1;
/// Bytes before the checksums.
const FIXED_BYTES: usize = 48;
/// The header's own checksum.
const CRC_BYTES: usize = 4;

/// Header blocks for an extent of `data_blocks` blocks: one up to 1,011
/// data blocks (just under 4 MiB).
pub fn header_blocks(data_blocks: u32) -> u32 {
    (FIXED_BYTES + 4 * data_blocks as usize + CRC_BYTES).div_ceil(BLOCK_SIZE) as u32
}

/// Blocks a copy of an extent of `data_blocks` takes on the device: its
/// header and its data.
pub fn copy_blocks(data_blocks: u32) -> u32 {
    header_blocks(data_blocks) + data_blocks
}

/// The largest extent whose copy fits `blocks` blocks.
pub fn data_blocks_within(blocks: u32) -> u32 {
    let mut data = blocks.saturating_sub(1);
    while data > 0 && copy_blocks(data) > blocks {
        data -= 1;
    }
    data
}

/// What a header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The volume the copy belongs to.
    pub volume_id: u64,
    /// The extent.
    pub id: ExtentId,
    /// The owner given to the write.
    pub owner: u64,
    /// The stream it was written to.
    pub stream: u8,
    /// A crc32c per data block (their number is the extent's length).
    pub crcs: Vec<u32>,
}

/// What a copy must be to belong where it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    /// This volume.
    pub volume_id: u64,
    /// The extent the copy is read as.
    pub id: ExtentId,
    /// Its data blocks.
    pub blocks: u32,
}

/// Why a header does not vouch for a copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// No header there: zeroes, data, garbage, or a damaged header.
    Unrecognized,
    /// A header of another volume.
    ForeignVolume(u64),
    /// A header of another extent, or of another length.
    OtherExtent {
        /// The extent it names.
        id: ExtentId,
        /// Its data blocks.
        blocks: u32,
    },
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Unrecognized => write!(f, "no valid extent header"),
            HeaderError::ForeignVolume(id) => write!(f, "the header of volume {id:#x}"),
            HeaderError::OtherExtent { id, blocks } => write!(f, "the header of extent {id} ({blocks} blocks)"),
        }
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

impl Header {
    /// Data blocks.
    pub fn blocks(&self) -> u32 {
        self.crcs.len() as u32
    }

    /// The header blocks, ready to write before the data.
    pub fn encode(&self) -> Vec<u8> {
        let blocks = self.blocks();
        assert!(blocks > 0, "an extent of no blocks");
        let mut bytes = vec![0u8; header_blocks(blocks) as usize * BLOCK_SIZE];
        bytes[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        bytes[4] = VERSION;
        bytes[5] = header_blocks(blocks) as u8;
        bytes[8..16].copy_from_slice(&self.volume_id.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.id.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.owner.to_le_bytes());
        bytes[32..36].copy_from_slice(&blocks.to_le_bytes());
        bytes[36] = self.stream;
        let end = FIXED_BYTES + 4 * blocks as usize;
        for (slot, crc) in bytes[FIXED_BYTES..end].chunks_exact_mut(4).zip(&self.crcs) {
            slot.copy_from_slice(&crc.to_le_bytes());
        }
        let own = crc(&bytes[..end]);
        bytes[end..end + CRC_BYTES].copy_from_slice(&own.to_le_bytes());
        bytes
    }

    /// The header at the start of `copy`, when it is one whose checksum
    /// holds.
    pub fn decode(copy: &[u8]) -> Result<Header, HeaderError> {
        let view = View::new(copy)?;
        Ok(Header {
            volume_id: view.volume_id(),
            id: view.id(),
            owner: u64_at(view.bytes, 24),
            stream: view.bytes[36],
            crcs: (0..view.blocks).map(|block| view.crc(block)).collect(),
        })
    }
}

/// A header in place, checked: its fields read without copying the
/// checksums out.
struct View<'a> {
    bytes: &'a [u8],
    blocks: u32,
}

impl<'a> View<'a> {
    fn new(copy: &'a [u8]) -> Result<View<'a>, HeaderError> {
        if copy.len() < BLOCK_SIZE || u32_at(copy, 0) != MAGIC || copy[4] != VERSION {
            return Err(HeaderError::Unrecognized);
        }
        let blocks = u32_at(copy, 32);
        let header = header_blocks(blocks) as usize;
        if blocks == 0 || usize::from(copy[5]) != header || copy.len() < header * BLOCK_SIZE {
            return Err(HeaderError::Unrecognized);
        }
        let end = FIXED_BYTES + 4 * blocks as usize;
        if u32_at(copy, end) != crc(&copy[..end]) {
            return Err(HeaderError::Unrecognized);
        }
        Ok(View { bytes: copy, blocks })
    }

    fn volume_id(&self) -> u64 {
        u64_at(self.bytes, 8)
    }

    fn id(&self) -> ExtentId {
        u64_at(self.bytes, 16)
    }

    fn crc(&self, block: u32) -> u32 {
        u32_at(self.bytes, FIXED_BYTES + 4 * block as usize)
    }

    fn check(&self, expected: &Expected) -> Result<(), HeaderError> {
        if self.volume_id() != expected.volume_id {
            return Err(HeaderError::ForeignVolume(self.volume_id()));
        }
        if self.id() != expected.id || self.blocks != expected.blocks {
            return Err(HeaderError::OtherExtent { id: self.id(), blocks: self.blocks });
        }
        Ok(())
    }
}

/// Checks the header at the start of `copy` against what it must be.
pub fn check_header(copy: &[u8], expected: &Expected) -> Result<(), HeaderError> {
    View::new(copy)?.check(expected)
}

/// The data blocks of `copy` (`[header][data]`, read as extent
/// `expected`) that cannot be trusted: those whose checksum differs from
/// the header's, or every one when the header itself fails.
pub fn verify_copy(copy: &[u8], expected: &Expected) -> Vec<u32> {
    let header = header_blocks(expected.blocks) as usize;
    assert_eq!(copy.len(), (header + expected.blocks as usize) * BLOCK_SIZE, "a whole copy of extent {}", expected.id);
    let view = match View::new(copy).and_then(|view| view.check(expected).map(|()| view)) {
        Ok(view) => view,
        Err(_) => return (0..expected.blocks).collect(),
    };
    copy[header * BLOCK_SIZE..]
        .chunks_exact(BLOCK_SIZE)
        .enumerate()
        .filter(|&(block, data)| block_crc(data) != view.crc(block as u32))
        .map(|(block, _)| block as u32)
        .collect()
}

/// The crc32c of every data block of `copy` as its header gives them, when
/// the header is valid and names `expected`: for rebuilding a copy block
/// by block from several.
pub fn header_crcs(copy: &[u8], expected: &Expected) -> Result<Vec<u32>, HeaderError> {
    let view = View::new(copy)?;
    view.check(expected)?;
    Ok((0..view.blocks).map(|block| view.crc(block)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy_of(data: &[u8], id: ExtentId) -> (Vec<u8>, Expected) {
        let mut crcs = Vec::new();
        crate::checksum::block_crcs(data, &mut crcs);
        let header = Header { volume_id: 0xAB, id, owner: 77, stream: 3, crcs };
        let mut copy = header.encode();
        copy.extend_from_slice(data);
        (copy, Expected { volume_id: 0xAB, id, blocks: (data.len() / BLOCK_SIZE) as u32 })
    }

    #[test]
    fn sizes_grow_a_block_past_1011_data_blocks() {
        assert_eq!(header_blocks(1), 1);
        assert_eq!(header_blocks(1011), 1);
        assert_eq!(header_blocks(1012), 2);
        assert_eq!(copy_blocks(64), 65);
        assert_eq!(data_blocks_within(65), 64);
        assert_eq!(data_blocks_within(1012), 1011);
        assert_eq!(data_blocks_within(1014), 1012);
        assert_eq!(data_blocks_within(1), 0);
        for blocks in 2..3000 {
            let data = data_blocks_within(blocks);
            assert!(copy_blocks(data) <= blocks && copy_blocks(data + 1) > blocks, "{blocks}");
        }
    }

    #[test]
    fn a_copy_verifies_and_names_its_bad_blocks() {
        let data: Vec<u8> = (0..3 * BLOCK_SIZE).map(|i| (i % 251) as u8).collect();
        let (mut copy, expected) = copy_of(&data, 9);
        assert_eq!(verify_copy(&copy, &expected), Vec::<u32>::new());
        let header = Header::decode(&copy).unwrap();
        assert_eq!((header.id, header.owner, header.stream, header.blocks()), (9, 77, 3, 3));
        copy[BLOCK_SIZE + BLOCK_SIZE + 9] ^= 1;
        assert_eq!(verify_copy(&copy, &expected), vec![1]);
    }

    #[test]
    fn a_bad_or_foreign_header_fails_every_block() {
        let data = vec![5u8; 2 * BLOCK_SIZE];
        let (copy, expected) = copy_of(&data, 4);
        for byte in [0, 5, 17, 33, 48, 52, 56] {
            let mut damaged = copy.clone();
            damaged[byte] ^= 0x10;
            assert_eq!(verify_copy(&damaged, &expected), vec![0, 1], "byte {byte}");
        }
        // Another extent's copy, consistent in itself, read as extent 4.
        let (other, _) = copy_of(&data, 5);
        assert_eq!(verify_copy(&other, &expected), vec![0, 1]);
        assert_eq!(check_header(&other, &expected), Err(HeaderError::OtherExtent { id: 5, blocks: 2 }));
        let foreign = Expected { volume_id: 1, ..expected };
        assert_eq!(check_header(&copy, &foreign), Err(HeaderError::ForeignVolume(0xAB)));
        assert_eq!(check_header(&vec![0u8; 3 * BLOCK_SIZE], &expected), Err(HeaderError::Unrecognized));
    }

    #[test]
    fn long_extents_take_two_header_blocks() {
        let data = vec![1u8; 1200 * BLOCK_SIZE];
        let (copy, expected) = copy_of(&data, 1);
        assert_eq!(copy.len(), 1202 * BLOCK_SIZE);
        assert!(verify_copy(&copy, &expected).is_empty());
        assert_eq!(header_crcs(&copy, &expected).unwrap().len(), 1200);
    }
}
