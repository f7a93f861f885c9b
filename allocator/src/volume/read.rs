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
        let extent = self.live(id)?;
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
            (0..self.lanes.len()).filter(|&l| self.lane_online(l) && !extent.on(l).is_missing()).collect();
        let Some(&first) = lanes.first() else {
            let owner = self.owner(id).ok();
            return Err(Error::Uncorrectable { extent: id, owner, blocks: (0..blocks).collect() });
        };
        let (mut bad, unreadable) = match self.read_checked(id, first, out)? {
            Some(bad) => (bad, false),
            None => ((0..blocks).collect(), true),
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
            if bad.is_empty() {
                break;
            }
            let Some(other_bad) = self.read_checked(id, lane, &mut other)? else { continue };
            bad.retain(|&block| {
                if other_bad.binary_search(&block).is_ok() {
                    return true;
                }
                let range = block as usize * BLOCK_SIZE..(block as usize + 1) * BLOCK_SIZE;
                out[range.clone()].copy_from_slice(&other[range]);
                repaired.push(block);
                false
            });
        }
        self.stats.repaired_blocks += repaired.len() as u64;
        if bad.is_empty() {
            Ok(ReadOutcome { repaired })
        } else {
            Err(Error::Uncorrectable { extent: id, owner: self.owner(id).ok(), blocks: bad })
        }
    }

    /// Reads copy `lane` of extent `id` and checks it: `Ok(Some(bad))`
    /// with the blocks (ascending) that fail their checksum or tag,
    /// `Ok(None)` when the read failed (counted against the device, which
    /// is given up if it went away or passed its threshold).
    fn read_checked(&mut self, id: ExtentId, lane: usize, out: &mut [u8]) -> Result<Option<Vec<u32>>> {
        let mut bad = Vec::new();
        let read = self.read_copy_counted(lane, |volume| {
            bad = volume.read_copy_checked(id, lane, out)?;
            Ok(())
        })?;
        Ok(read.then_some(bad))
    }

    /// Reads copy `lane` of extent `id` into `out` and returns the blocks
    /// (ascending) that fail their checksum (from the extent map) or their
    /// tag (read with them), with no error counted against the device and
    /// nothing repaired.
    pub fn read_copy_checked(&mut self, id: ExtentId, lane: usize, out: &mut [u8]) -> Result<Vec<u32>> {
        if self.area && self.tagged(id) {
            // Its tags are in its zone's checksum area.
            self.read_copy(id, lane, out)?;
            let entry = self.live(id)?;
            let tags = self.area_tags(lane, entry.on(lane), entry.blocks, false)?;
            let layout = self.tags.expect("a volume with checksum areas reads tags");
            return Ok(crate::tags::mismatches(layout, self.volume_id, id, 0, out, &tags));
        }
        match self.tags.filter(|_| self.tagged(id)) {
            None => {
                self.read_copy(id, lane, out)?;
                Ok(mismatches(out, self.mapped_crcs(id)))
            }
            Some(layout) => {
                let mut tags = vec![0u8; layout.bytes(out.len() / BLOCK_SIZE)];
                self.read_copy_tagged(id, lane, out, &mut tags)?;
                Ok(crate::tags::mismatches(layout, self.volume_id, id, 0, out, &tags))
            }
        }
    }

    /// Runs `read`, of a copy on lane `lane`: `Ok(true)` when it read,
    /// `Ok(false)` when it failed (counted against the device, which is
    /// given up if it went away or passed its threshold).
    fn read_copy_counted(&mut self, lane: usize, read: impl FnOnce(&mut Self) -> Result<()>) -> Result<bool> {
        let device = self.lanes[lane].device;
        match read(self) {
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
        let (device, lba) = self.copy_lba(id, lane)?;
        self.dev_mut(device).read_at(lba, out)
    }

    /// Reads copy `lane` of extent `id` and its blocks' tags (on a volume
    /// with block tags, [`crate::tags`]) without verifying them.
    pub fn read_copy_tagged(&mut self, id: ExtentId, lane: usize, out: &mut [u8], tags: &mut [u8]) -> Result<()> {
        let (device, lba) = self.copy_lba(id, lane)?;
        self.dev_mut(device).read_tagged_at(lba, out, tags)
    }

    /// The device and first LBA of copy `lane` of extent `id`, if present
    /// on a device in use.
    fn copy_lba(&self, id: ExtentId, lane: usize) -> Result<(usize, u64)> {
        let extent = self.live(id)?;
        if lane >= self.lanes.len() {
            return Err(Error::InvalidArgument(format!("lane {lane}")));
        }
        let location = extent.on(lane);
        if location.is_missing() {
            return Err(Error::InvalidArgument(format!("extent {id} has no copy {lane}")));
        }
        let device = self.lanes[lane].device;
        let Some(d) = self.devices[device].as_ref() else {
            return Err(Error::Member { device, why: "not in use".into() });
        };
        Ok((device, d.lba(location.zone, location.offset)))
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
