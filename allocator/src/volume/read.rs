//! Reads: every block verified against its checksum, a bad one read
//! from the other copy.

use super::member::Failed;
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
        // The copies that can be read: present, on a device in use.
        let lanes: Vec<usize> =
            (0..self.lanes.len()).filter(|&l| self.lane_online(l) && !extent.locations[l].is_missing()).collect();
        let Some(&first) = lanes.first() else {
            return Err(Error::Uncorrectable { extent: id, owner: extent.owner, blocks: (0..blocks).collect() });
        };
        let (mut bad, unreadable) = match self.read_copy_counted(id, first, out)? {
            true => (mismatches(out, &self.extents[&id].crcs), false),
            false => ((0..blocks).collect(), true),
        };
        if bad.is_empty() {
            return Ok(ReadOutcome::default());
        }
        if !unreadable {
            self.note_checksum_errors(first, bad.len() as u64);
        }
        for &block in &bad {
            self.bad_blocks.push(BadBlock { extent: id, lane: first as u8, block, unreadable });
        }
        let mut repaired = Vec::new();
        let mut other = vec![0u8; out.len()];
        for &lane in &lanes[1..] {
            if bad.is_empty() || !self.read_copy_counted(id, lane, &mut other)? {
                continue;
            }
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
        self.stats.repaired_blocks += repaired.len() as u64;
        if bad.is_empty() {
            Ok(ReadOutcome { repaired })
        } else {
            Err(Error::Uncorrectable { extent: id, owner: self.extents[&id].owner, blocks: bad })
        }
    }

    /// Reads copy `lane` of extent `id`: `Ok(true)` when read, `Ok(false)`
    /// when the read failed (counted against the device, which is given up
    /// if it went away or passed its threshold).
    fn read_copy_counted(&mut self, id: ExtentId, lane: usize, out: &mut [u8]) -> Result<bool> {
        let device = self.lanes[lane].device;
        match self.read_copy(id, lane, out) {
            Ok(()) => Ok(true),
            Err(Error::Command { error, .. }) => {
                self.note_failure(device, Failed::Read, &error);
                Ok(false)
            }
            Err(error) if super::write::is_gone(&error) => {
                self.note_failure(device, Failed::Read, &nvme_driver::IoError::DeviceGone);
                Ok(false)
            }
            Err(Error::Timeout { .. }) => {
                self.note_failure(device, Failed::Read, &nvme_driver::IoError::Timeout);
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// Reads copy `lane` of extent `id` without verifying it.
    pub fn read_copy(&mut self, id: ExtentId, lane: usize, out: &mut [u8]) -> Result<()> {
        let extent = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?;
        let location = *extent.locations.get(lane).ok_or_else(|| Error::InvalidArgument(format!("lane {lane}")))?;
        if location.is_missing() {
            return Err(Error::InvalidArgument(format!("extent {id} has no copy {lane}")));
        }
        let device = self.lanes[lane].device;
        let Some(d) = self.devices[device].as_mut() else {
            return Err(Error::Member { device, why: "not in use".into() });
        };
        let lba = d.lba(location.zone, location.offset);
        d.read_at(lba, out)
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
