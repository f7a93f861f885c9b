//! Reads: every block verified against the checksum its copy's header
//! holds, a bad one (or a bad header) read from the other copy.

use super::member::Failed;
use super::{BadBlock, ReadOutcome, Volume};
use crate::checksum::block_crc;
use crate::error::{Error, Result};
use crate::header;
use crate::{ExtentId, BLOCK_SIZE};

impl Volume {
    /// Reads extent `id`'s data into `out` (exactly its length), verifying
    /// every block against the checksums in its copy's header. A bad block
    /// is read from the other copy and recorded in [`Volume::bad_blocks`];
    /// with no good copy the read fails with [`Error::Uncorrectable`].
    pub fn read(&mut self, id: ExtentId, out: &mut [u8]) -> Result<ReadOutcome> {
        let expected = self.expected(id).ok_or(Error::NoSuchExtent(id))?;
        let bytes = expected.blocks as usize * BLOCK_SIZE;
        if out.len() != bytes {
            return Err(Error::InvalidArgument(format!("extent {id} is {bytes} bytes, the buffer {}", out.len())));
        }
        let mut copy = vec![0u8; header::copy_blocks(expected.blocks) as usize * BLOCK_SIZE];
        let outcome = self.read_verified_copy(id, &mut copy)?;
        out.copy_from_slice(&copy[copy.len() - bytes..]);
        Ok(outcome)
    }

    /// Reads a good copy of extent `id`, its header and data
    /// ([`Volume::copy_bytes`] long), into `copy`: the first copy, with any
    /// block that fails (or a header that does) taken from another copy
    /// that verifies. What was bad is recorded in [`Volume::bad_blocks`];
    /// with no good copy of some block the read fails with
    /// [`Error::Uncorrectable`] naming the blocks.
    pub fn read_verified_copy(&mut self, id: ExtentId, copy: &mut [u8]) -> Result<ReadOutcome> {
        let extent = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?;
        let expected = self.expected(id).expect("a live extent");
        let blocks = expected.blocks;
        let header_len = header::header_blocks(blocks) as usize * BLOCK_SIZE;
        if copy.len() != header_len + blocks as usize * BLOCK_SIZE {
            return Err(Error::InvalidArgument(format!("{} bytes for a copy of extent {id}", copy.len())));
        }
        // The copies that can be read: present, on a device in use.
        let lanes: Vec<usize> =
            (0..self.lanes.len()).filter(|&l| self.lane_online(l) && !extent.locations[l].is_missing()).collect();
        let owner = extent.owner;
        let Some(&first) = lanes.first() else {
            return Err(Error::Uncorrectable { extent: id, owner, blocks: (0..blocks).collect() });
        };
        let readable = self.read_copy_counted(id, first, copy)?;
        let bad = if readable { header::verify_copy(copy, &expected) } else { (0..blocks).collect() };
        if bad.is_empty() {
            return Ok(ReadOutcome::default());
        }
        if readable {
            self.note_checksum_errors(first, bad.len() as u64);
        }
        for &block in &bad {
            self.bad_blocks.push(BadBlock { extent: id, lane: first as u8, block, unreadable: !readable });
        }
        let data =
            |block: u32| header_len + block as usize * BLOCK_SIZE..header_len + (block as usize + 1) * BLOCK_SIZE;
        // The checksums come from whichever copy's header is good.
        let mut crcs = if readable { header::header_crcs(copy, &expected).ok() } else { None };
        let mut missing = bad.clone();
        let mut other = vec![0u8; copy.len()];
        for &lane in &lanes[1..] {
            if missing.is_empty() && crcs.is_some() {
                break;
            }
            if !self.read_copy_counted(id, lane, &mut other)? {
                continue;
            }
            if crcs.is_none() {
                let Ok(found) = header::header_crcs(&other, &expected) else { continue };
                copy[..header_len].copy_from_slice(&other[..header_len]);
                if readable {
                    // The first copy's header failed, not necessarily its
                    // blocks: those that match keep.
                    missing.retain(|&block| block_crc(&copy[data(block)]) != found[block as usize]);
                }
                crcs = Some(found);
            }
            let crcs = crcs.as_ref().expect("a good header");
            missing.retain(|&block| {
                let range = data(block);
                if block_crc(&other[range.clone()]) == crcs[block as usize] {
                    copy[range.clone()].copy_from_slice(&other[range]);
                    false
                } else {
                    true
                }
            });
        }
        if crcs.is_none() {
            // No header vouches for any block.
            missing = (0..blocks).collect();
        }
        let repaired: Vec<u32> = bad.iter().copied().filter(|block| !missing.contains(block)).collect();
        self.stats.repaired_blocks += repaired.len() as u64;
        if missing.is_empty() {
            Ok(ReadOutcome { repaired })
        } else {
            Err(Error::Uncorrectable { extent: id, owner, blocks: missing })
        }
    }

    /// Reads copy `lane` of extent `id`: `Ok(true)` when read, `Ok(false)`
    /// when the read failed (counted against the device, which is given up
    /// if it went away or passed its threshold).
    fn read_copy_counted(&mut self, id: ExtentId, lane: usize, out: &mut [u8]) -> Result<bool> {
        let device = self.lanes[lane].device;
        match self.read_whole_copy(id, lane, out) {
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

    /// Reads the data of copy `lane` of extent `id` into `out` (exactly
    /// the extent's length) without verifying it.
    pub fn read_copy(&mut self, id: ExtentId, lane: usize, out: &mut [u8]) -> Result<()> {
        let expected = self.expected(id).ok_or(Error::NoSuchExtent(id))?;
        let bytes = expected.blocks as usize * BLOCK_SIZE;
        if out.len() != bytes {
            return Err(Error::InvalidArgument(format!("extent {id} is {bytes} bytes, the buffer {}", out.len())));
        }
        let mut copy = vec![0u8; header::copy_blocks(expected.blocks) as usize * BLOCK_SIZE];
        self.read_whole_copy(id, lane, &mut copy)?;
        out.copy_from_slice(&copy[copy.len() - bytes..]);
        Ok(())
    }

    /// Reads copy `lane` of extent `id` whole, its header and data
    /// ([`Volume::copy_bytes`] long), without verifying it (see
    /// [`Volume::copy_mismatches`]).
    pub fn read_whole_copy(&mut self, id: ExtentId, lane: usize, out: &mut [u8]) -> Result<()> {
        let extent = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?;
        let location = *extent.locations.get(lane).ok_or_else(|| Error::InvalidArgument(format!("lane {lane}")))?;
        if location.is_missing() {
            return Err(Error::InvalidArgument(format!("extent {id} has no copy {lane}")));
        }
        if out.len() != extent.copy_blocks() as usize * BLOCK_SIZE {
            return Err(Error::InvalidArgument(format!("{} bytes for a copy of extent {id}", out.len())));
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
