//! Reads: every block verified against its checksum, a bad one read
//! from the other copy.

use super::{BadBlock, ReadOutcome, Volume};
use crate::checksum::mismatches;
use crate::error::{Error, Result};
use crate::{ExtentId, BLOCK_SIZE};

impl Volume {
    /// Reads extent `id` into `out` (exactly its length), verifying every
    /// block's checksum. A bad block is read from the other copy and
    /// recorded in [`Volume::bad_blocks`]; with no good copy the read fails
    /// with [`Error::Uncorrectable`].
    pub fn read(&mut self, id: ExtentId, out: &mut [u8]) -> Result<ReadOutcome> {
        let extent = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?;
        let blocks = extent.blocks;
        if out.len() != blocks as usize * BLOCK_SIZE {
            return Err(Error::InvalidArgument(format!(
                "extent {id} is {} bytes, the buffer {}",
                blocks as usize * BLOCK_SIZE,
                out.len()
            )));
        }
        let first = self.read_copy(id, 0, out);
        let (mut bad, unreadable) = match first {
            Ok(()) => (mismatches(out, &self.extents[&id].crcs), false),
            Err(Error::Command { .. }) => ((0..blocks).collect(), true),
            Err(error) => return Err(error),
        };
        if bad.is_empty() {
            return Ok(ReadOutcome::default());
        }
        for &block in &bad {
            self.bad_blocks.push(BadBlock { extent: id, lane: 0, block, unreadable });
        }
        let mut repaired = Vec::new();
        if self.lanes.len() > 1 {
            let mut other = vec![0u8; out.len()];
            if self.read_copy(id, 1, &mut other).is_ok() {
                let crcs = &self.extents[&id].crcs;
                bad.retain(|&block| {
                    let range = block as usize * BLOCK_SIZE..(block as usize + 1) * BLOCK_SIZE;
                    if crate::checksum::block_crc(&other[range.clone()]) == crcs[block as usize] {
                        out[range.clone()].copy_from_slice(&other[range]);
                        repaired.push(block);
                        false
                    } else {
                        true
                    }
                });
            }
        }
        self.stats.repaired_blocks += repaired.len() as u64;
        if bad.is_empty() {
            Ok(ReadOutcome { repaired })
        } else {
            Err(Error::Uncorrectable { extent: id, owner: self.extents[&id].owner, blocks: bad })
        }
    }

    /// Reads copy `lane` of extent `id` without verifying it.
    pub fn read_copy(&mut self, id: ExtentId, lane: usize, out: &mut [u8]) -> Result<()> {
        let extent = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?;
        let location = *extent.locations.get(lane).ok_or_else(|| Error::InvalidArgument(format!("lane {lane}")))?;
        let device = self.lanes[lane].device;
        let lba = self.devices[device].lba(location.zone, location.offset);
        self.devices[device].read_at(lba, out)
    }

    /// Blocks found bad by reads since the last [`Volume::take_bad_blocks`].
    pub fn bad_blocks(&self) -> &[BadBlock] {
        &self.bad_blocks
    }

    /// Takes the blocks found bad so far, leaving the list empty (so a
    /// caller such as the scrub report counts each once).
    pub fn take_bad_blocks(&mut self) -> Vec<BadBlock> {
        std::mem::take(&mut self.bad_blocks)
    }
}
