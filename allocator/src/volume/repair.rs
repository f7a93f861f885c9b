//! Repair of one copy from good data: in place on conventional
//! namespaces, relocated on zoned ones; the metadata's own scrub; and
//! quiescing for scrub.

use super::identify::read_images;
use super::Volume;
use crate::checksum::mismatches;
use crate::error::{Error, Result};
use crate::journal::recovery::recover;
use crate::zones::Slot;
use crate::{ExtentId, Location, BLOCK_SIZE};
use serde::Serialize;

/// What a scrub of the metadata found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MetadataScrub {
    /// Bytes of metadata read, over both copies and both segments.
    pub bytes_read: u64,
    /// Per metadata copy: records of the committed state (its checkpoint
    /// and deltas) that do not verify there.
    pub bad_records: Vec<u64>,
    /// Per metadata copy: label blocks at the head of its current segment
    /// that are missing or damaged.
    pub bad_labels: Vec<u64>,
    /// Both copies were rewritten whole (a commit that writes a checkpoint
    /// to every copy), repairing what was bad.
    pub repaired: bool,
}

impl Volume {
    /// Reads every metadata copy (labels, checkpoints, journal records),
    /// checks each against the committed state, and, with `repair`, when
    /// one lacks what the other holds rewrites both whole: a commit that
    /// writes a checkpoint to every copy (uncommitted work is committed
    /// with it). Fails with [`Error::MetadataLost`] when no copy holds the
    /// committed state.
    pub fn scrub_metadata(&mut self, repair: bool) -> Result<MetadataScrub> {
        self.check_resets()?;
        self.wait_idle()?;
        let mut descriptors = Vec::with_capacity(self.devices.len());
        for device in &mut self.devices {
            descriptors.push(match device {
                Some(device) if device.is_zoned() => device.report_zones()?,
                _ => Vec::new(),
            });
        }
        let images = read_images(&mut self.devices, &descriptors, &self.superblock, self.volume_id, true);
        let bytes_read =
            images.iter().flatten().flat_map(|segments| segments.iter()).map(|i| i.blocks() * BLOCK_SIZE as u64).sum();
        let recovered = recover(&images, self.volume_id, false)?;
        if recovered.conflict {
            // Equal numbers, other contents: not a bad copy to rewrite.
            return Err(Error::Corrupt(
                "the metadata copies hold a record with the same numbers but other contents (two histories): \
                 neither was rewritten"
                    .into(),
            ));
        }
        // The committed state is what open would find (after a failed
        // commit, the devices may hold one more).
        let found = (recovered.generation, recovered.seq);
        let committed = (self.journal.generation, self.journal.seq);
        if found < committed || (found > committed && !self.journal.broken) {
            return Err(Error::Corrupt(format!(
                "the metadata on the devices ends at generation {} commit {}, the volume committed generation {} \
                 commit {}",
                found.0, found.1, committed.0, committed.1
            )));
        }
        let mut report = MetadataScrub {
            bytes_read,
            bad_records: recovered.bad_records,
            bad_labels: recovered.bad_labels,
            repaired: false,
        };
        if recovered.copies_differ && repair {
            log::warn!("metadata copies differ ({report:?}): rewriting both");
            self.journal.broken = true;
            self.commit()?;
            report.repaired = true;
        }
        Ok(report)
    }

    /// Rewrites copy `lane` of extent `id` from `good` data (its checksums
    /// must match) at a new location, journaled at the next commit: how
    /// scrub repairs a copy on a zoned namespace, where overwriting in
    /// place is impossible. On a volume with block tags there are no
    /// checksums in memory to match: `good` must be data the caller
    /// verified (say, the other copy read with its tags), and the new
    /// copy's tags are made from it.
    pub fn rewrite_copy(&mut self, id: ExtentId, lane: usize, good: &[u8]) -> Result<Location> {
        let extent = self.live(id)?;
        if lane >= self.lanes.len() || good.len() != extent.blocks as usize * BLOCK_SIZE {
            return Err(Error::InvalidArgument(format!("lane {lane}, {} bytes for extent {id}", good.len())));
        }
        if !extent.has_lane(lane) {
            return Err(Error::InvalidArgument(format!("extent {id} has no copy in lane {lane}")));
        }
        let crcs = self.mapped_crcs(id);
        if !crcs.is_empty() && !mismatches(good, crcs).is_empty() {
            return Err(Error::InvalidArgument(format!("the data given for extent {id} fails its checksums")));
        }
        let blocks = extent.blocks;
        let device = self.lanes[lane].device;
        let (zone, offset) = self.place(lane, Slot::Reclaim, blocks)?;
        let lba = self.dev(device).lba(zone, offset);
        let written = self.write_copy_at(id, device, lba, good);
        self.release_held_zone();
        if let Err(error) = written {
            // The reclaim zone's write pointer no longer stands where its
            // next relocation would write.
            self.abandon_zone(lane, Slot::Reclaim, zone);
            return Err(error);
        }
        self.lanes[lane].written[zone as usize] += blocks;
        self.reclaim_open[lane] = true;
        let to = Location { zone, offset };
        if self.area {
            // To the map until the new zone is sealed.
            let mut crcs = Vec::with_capacity(blocks as usize);
            crate::checksum::block_crcs(good, &mut crcs);
            self.remap(id, crcs);
        }
        self.move_extent(id, lane, to, true);
        Ok(to)
    }

    /// Writes `good` data (its checksums must match) over copy `lane` of
    /// extent `id`, where it lies: how scrub repairs a copy on a
    /// conventional namespace. Refused on zoned namespaces (use
    /// [`Volume::rewrite_copy`]). With block tags, as
    /// [`Volume::rewrite_copy`].
    pub fn repair_in_place(&mut self, id: ExtentId, lane: usize, good: &[u8]) -> Result<()> {
        let extent = self.live(id)?;
        if lane >= self.lanes.len() || good.len() != extent.blocks as usize * BLOCK_SIZE {
            return Err(Error::InvalidArgument(format!("lane {lane}, {} bytes for extent {id}", good.len())));
        }
        if extent.on(lane).is_missing() {
            return Err(Error::InvalidArgument(format!("extent {id} has no copy in lane {lane} to repair")));
        }
        if self.lane_is_zoned(lane) {
            return Err(Error::InvalidArgument(format!("lane {lane} is zoned: rewrite the copy elsewhere")));
        }
        let crcs = self.mapped_crcs(id);
        if !crcs.is_empty() && !mismatches(good, crcs).is_empty() {
            return Err(Error::InvalidArgument(format!("the data given for extent {id} fails its checksums")));
        }
        let location = extent.on(lane);
        let device = self.lanes[lane].device;
        let lba = self.dev(device).lba(location.zone, location.offset);
        self.write_copy_at(id, device, lba, good)?;
        if self.area {
            // The tags in its zone's area may be what was bad.
            let mut crcs = Vec::with_capacity(good.len() / BLOCK_SIZE);
            crate::checksum::block_crcs(good, &mut crcs);
            self.patch_area(id, lane, &crcs)?;
        }
        self.dev_mut(device).flush()
    }

    /// Writes `data`, extent `id`'s contents, at `lba` of `device`, with
    /// its tags on a volume with block tags.
    fn write_copy_at(&mut self, id: ExtentId, device: usize, lba: u64, data: &[u8]) -> Result<()> {
        match self.tags.filter(|_| !self.area && self.tagged(id)) {
            None => self.dev_mut(device).write_at(lba, data),
            Some(layout) => {
                let mut tags = vec![0u8; layout.bytes(data.len() / BLOCK_SIZE)];
                self.fill_tags(id, data, &mut tags);
                self.dev_mut(device).write_tagged_at(lba, data, &tags)
            }
        }
    }

    /// Waits for writes in flight, so that an engine (scrub) can read
    /// through [`Volume::lane_reads`].
    pub fn quiesce(&mut self) -> Result<()> {
        self.wait_idle()
    }
}
