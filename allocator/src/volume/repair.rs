//! Repair of one copy from good data: in place on conventional
//! namespaces, relocated on zoned ones; and quiescing for scrub.

use super::Volume;
use crate::checksum::mismatches;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::zones::Slot;
use crate::{ExtentId, Location, BLOCK_SIZE};

impl Volume {
    /// Rewrites copy `lane` of extent `id` from `good` data (its checksums
    /// must match) at a new location, journaled at the next commit: how
    /// scrub repairs a copy on a zoned namespace, where overwriting in
    /// place is impossible.
    pub fn rewrite_copy(&mut self, id: ExtentId, lane: usize, good: &[u8]) -> Result<Location> {
        let extent = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?;
        if lane >= extent.locations.len() || good.len() != extent.blocks as usize * BLOCK_SIZE {
            return Err(Error::InvalidArgument(format!("lane {lane}, {} bytes for extent {id}", good.len())));
        }
        if !mismatches(good, &extent.crcs).is_empty() {
            return Err(Error::InvalidArgument(format!("the data given for extent {id} fails its checksums")));
        }
        let blocks = extent.blocks;
        let device = self.lanes[lane].device;
        let (zone, offset) = self.place(lane, Slot::Reclaim, blocks)?;
        let lba = self.devices[device].lba(zone, offset);
        if let Err(error) = self.devices[device].write_at(lba, good) {
            // The reclaim zone's write pointer no longer stands where its
            // next relocation would write.
            self.abandon_zone(lane, Slot::Reclaim, zone);
            return Err(error);
        }
        self.lanes[lane].written[zone as usize] += blocks;
        self.reclaim_open[lane] = true;
        let to = Location { zone, offset };
        self.move_extent(id, lane, to, true);
        Ok(to)
    }

    /// Writes `good` data (its checksums must match) over copy `lane` of
    /// extent `id`, where it lies: how scrub repairs a copy on a
    /// conventional namespace. Refused on zoned namespaces (use
    /// [`Volume::rewrite_copy`]).
    pub fn repair_in_place(&mut self, id: ExtentId, lane: usize, good: &[u8]) -> Result<()> {
        let extent = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?;
        if lane >= extent.locations.len() || good.len() != extent.blocks as usize * BLOCK_SIZE {
            return Err(Error::InvalidArgument(format!("lane {lane}, {} bytes for extent {id}", good.len())));
        }
        if self.lane_is_zoned(lane) {
            return Err(Error::InvalidArgument(format!("lane {lane} is zoned: rewrite the copy elsewhere")));
        }
        if !mismatches(good, &extent.crcs).is_empty() {
            return Err(Error::InvalidArgument(format!("the data given for extent {id} fails its checksums")));
        }
        let location = extent.locations[lane];
        let device = self.lanes[lane].device;
        let lba = self.devices[device].lba(location.zone, location.offset);
        self.devices[device].write_at(lba, good)?;
        self.devices[device].flush()
    }

    /// Waits for writes in flight, then hands out the namespaces for an
    /// engine (scrub) that issues its own commands on their queue pairs.
    /// Completions it reaps whose token has [`crate::device::SYNC_TOKEN`]
    /// set are stale ones of the volume's and can be dropped.
    pub fn quiesce(&mut self) -> Result<&mut [Device]> {
        self.wait_idle()?;
        Ok(&mut self.devices)
    }
}
