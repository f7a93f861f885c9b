//! Reclaim: relocating the live data of the emptiest zones (Copy, or a
//! verified read and write), then resetting them once committed.

use super::member::Failed;
use super::{ReclaimProgress, Volume};
use crate::error::{Error, Result};
use crate::zones::Slot;
use crate::{ExtentId, Location, BLOCK_SIZE};
use nvme_driver::cmd::zns::ZoneSendAction;
use nvme_driver::spec::status::{GenericStatus, StatusCode};
use nvme_driver::IoBuffer;

impl Volume {
    /// Closes each lane's reclaim zone that relocation left open.
    pub(super) fn close_reclaim_zones(&mut self) -> Result<()> {
        for lane in 0..self.lanes.len() {
            if !self.reclaim_open[lane] {
                continue;
            }
            self.reclaim_open[lane] = false;
            let device = self.lanes[lane].device;
            if let Some(zone) = self.lanes[lane].table.open_zone(Slot::Reclaim) {
                if let Some(d) = self.devices[device].as_mut().filter(|d| d.is_zoned()) {
                    d.zone_action(zone, ZoneSendAction::Close)?;
                }
            }
        }
        Ok(())
    }

    /// Relocates up to about `max_blocks` of live data out of the zone
    /// being reclaimed (choosing one when none is: the full zone with the
    /// fewest live blocks, below [`crate::VolumeOptions::reclaim_max_valid_ratio`]).
    /// When the zone is empty the moves are committed and it is reset.
    pub fn reclaim_step(&mut self, max_blocks: u64) -> Result<ReclaimProgress> {
        self.check_resets()?;
        self.wait_idle()?;
        let (lane, zone) = match self.reclaim {
            Some(victim) => victim,
            None => {
                let lanes = self.lanes.len();
                let ratio = self.options.reclaim_max_valid_ratio;
                // Worn-out zones first: their data has one way off.
                let online: Vec<bool> = (0..lanes).map(|lane| self.lane_online(lane)).collect();
                let worn = (0..lanes)
                    .filter(|&lane| online[lane])
                    .find_map(|lane| self.lanes[lane].table.worn_with_data().map(|z| (lane, z)));
                // Zones with nothing live cost nothing to reclaim: any
                // device's, in turn. Else the emptiest full zone of the
                // whole pool, the fewest live blocks per block it holds,
                // whatever its device (one pass over the devices, each
                // table keeping its zones by live count).
                let dead = || {
                    (0..lanes)
                        .map(|i| (self.next_reclaim_lane + i) % lanes)
                        .filter(|&l| online[l])
                        .find_map(|lane| self.lanes[lane].table.dead_zones().first().map(|&z| (lane, z)))
                };
                let emptiest = || {
                    (0..lanes)
                        .filter(|&l| online[l])
                        .filter_map(|lane| {
                            let table = &self.lanes[lane].table;
                            let zone = table.victim(ratio)?;
                            let entry = table.zone(zone);
                            Some((lane, zone, u64::from(entry.valid), u64::from(entry.capacity.max(1))))
                        })
                        .min_by(|a, b| (a.2 * b.3).cmp(&(b.2 * a.3)))
                        .map(|(lane, zone, ..)| (lane, zone))
                };
                let found = worn.or_else(dead).or_else(emptiest);
                let Some(victim) = found else {
                    return Ok(ReclaimProgress::Idle);
                };
                self.next_reclaim_lane = (victim.0 + 1) % lanes;
                self.reclaim = Some(victim);
                self.reclaim_queue.clear();
                victim
            }
        };
        let mut moved = 0u64;
        loop {
            let Some(id) = self.next_to_reclaim(lane, zone) else {
                self.reclaim = None;
                self.commit()?;
                return Ok(ReclaimProgress::Reclaimed { lane: lane as u8, zone, moved_blocks: moved });
            };
            if moved >= max_blocks {
                return Ok(ReclaimProgress::InProgress { lane: lane as u8, zone, moved_blocks: moved });
            }
            match self.relocate(id, lane) {
                Ok(blocks) => moved += u64::from(blocks),
                Err(error) if self.absorb(self.lanes[lane].device, Failed::Write, &error) => {
                    // The lane's device was given up: nothing to reclaim
                    // there until it is back.
                    self.reclaim = None;
                    return Ok(ReclaimProgress::Idle);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The next live copy in `zone` of `lane`, lowest offset first, from a
    /// list of the zone's copies made by one pass over the extent table
    /// (no index by position is kept), checked against the table as it is
    /// taken and made again should the zone still hold live blocks when it
    /// runs out.
    fn next_to_reclaim(&mut self, lane: usize, zone: u32) -> Option<ExtentId> {
        loop {
            while let Some(id) = self.reclaim_queue.pop() {
                let location = self.table.get(id).map(|e| e.on(lane));
                if location.is_some_and(|l| !l.is_missing() && l.zone == zone) {
                    return Some(id);
                }
            }
            if self.lanes[lane].table.zone(zone).valid == 0 {
                return None;
            }
            let mut found: Vec<(u32, ExtentId)> = self
                .table
                .iter()
                .filter(|(_, e)| !e.on(lane).is_missing() && e.on(lane).zone == zone)
                .map(|(id, e)| (e.on(lane).offset, id))
                .collect();
            if found.is_empty() {
                debug_assert!(false, "lane {lane} zone {zone} counts live blocks but holds no extent");
                return None;
            }
            // Popped from the end: lowest offset first.
            found.sort_unstable_by(|a, b| b.cmp(a));
            self.reclaim_queue.extend(found.into_iter().map(|(_, id)| id));
        }
    }

    /// Moves copy `lane` of extent `id` to the lane's reclaim zone: NVMe
    /// Copy when the device offers it, else a verified read (repaired from
    /// the other copy when needed) and a write. Journaled at next commit.
    pub(super) fn relocate(&mut self, id: ExtentId, lane: usize) -> Result<u32> {
        let extent = self.live(id)?;
        let blocks = extent.blocks;
        let from = extent.on(lane);
        let (zone, offset) = self.place(lane, Slot::Reclaim, blocks)?;
        let to = Location { zone, offset };
        let result = self.relocate_placed(id, lane, from, to);
        self.release_held_zone();
        result
    }

    /// [`Volume::relocate`] once placed at `to`.
    fn relocate_placed(&mut self, id: ExtentId, lane: usize, from: Location, to: Location) -> Result<u32> {
        let Location { zone, .. } = to;
        let blocks = self.live(id)?.blocks;
        // With checksum areas, what the copy claims goes with it, to the map
        // until its new zone is sealed (a verified read replaces it below).
        let mut claimed = if self.area { Some(self.claimed_crcs(id, lane)) } else { None };
        match self.copy_or_write(id, lane, from, to, blocks) {
            Ok(Some(verified)) => claimed = Some(Ok(verified)),
            Ok(None) => {}
            Err(error) => {
                // Nothing, or part, was written in the reserved room: the
                // reclaim zone must not take the next relocation.
                self.abandon_zone(lane, Slot::Reclaim, zone);
                return Err(error);
            }
        }
        self.lanes[lane].written[zone as usize] += blocks;
        self.reclaim_open[lane] = true;
        match claimed {
            Some(Ok(crcs)) => self.remap(id, crcs),
            // Its tags could not be read: its data was, verified (a Copy
            // reads neither, so it is read now).
            Some(Err(error)) => {
                log::warn!("extent {id}: the tags of copy {lane} could not be read ({error}); checksums from a read");
                let mut data = vec![0u8; blocks as usize * BLOCK_SIZE];
                self.read(id, &mut data)?;
                let mut crcs = Vec::with_capacity(blocks as usize);
                crate::checksum::block_crcs(&data, &mut crcs);
                self.remap(id, crcs);
            }
            None => {}
        }
        self.move_extent(id, lane, to, true);
        self.stats.relocated_bytes += u64::from(blocks) * BLOCK_SIZE as u64;
        Ok(blocks)
    }

    /// Puts copy `lane` of extent `id` at `to`: Copy, or a verified read
    /// and a write. With checksum areas, a verified read's checksums come
    /// back, for the map.
    fn copy_or_write(
        &mut self,
        id: ExtentId,
        lane: usize,
        from: Location,
        to: Location,
        blocks: u32,
    ) -> Result<Option<Vec<u32>>> {
        let device = self.lanes[lane].device;
        let Location { zone, offset } = to;
        let mut copied = false;
        let mut verified = None;
        if self.copy_supported[device] {
            match self.copy_blocks(device, from, to, blocks) {
                Ok(()) => copied = true,
                Err(Error::Command { error, .. })
                    if copy_refused(&error) && self.lanes[lane].table.zone(zone).allocated == offset + blocks =>
                {
                    log::info!("namespace {}: Copy refused ({error}); relocating by read and write", device);
                    self.copy_supported[device] = false;
                }
                Err(error) => return Err(error),
            }
        }
        if !copied {
            let mut data = vec![0u8; blocks as usize * BLOCK_SIZE];
            let on_device = self.tags.filter(|_| !self.area && self.tagged(id));
            let mut tags = on_device.map(|layout| vec![0u8; layout.bytes(blocks as usize)]);
            match self.read(id, &mut data) {
                Ok(_) => {
                    if let Some(tags) = &mut tags {
                        self.fill_tags(id, &data, tags);
                    }
                    if self.area {
                        let mut crcs = Vec::with_capacity(blocks as usize);
                        crate::checksum::block_crcs(&data, &mut crcs);
                        verified = Some(crcs);
                    }
                }
                // Move the bad data as it is, tags and all; scrub reports it.
                Err(Error::Uncorrectable { .. }) => match &mut tags {
                    None => self.read_copy(id, lane, &mut data)?,
                    Some(tags) => self.read_copy_tagged(id, lane, &mut data, tags)?,
                },
                Err(error) => return Err(error),
            }
            let lba = self.dev(device).lba(zone, offset);
            match &tags {
                None => self.dev_mut(device).write_at(lba, &data)?,
                Some(tags) => self.dev_mut(device).write_tagged_at(lba, &data, tags)?,
            }
        }
        Ok(verified)
    }

    /// Copies `blocks` from `from` to `to` on one namespace with Copy
    /// commands, each within the device's MSSRL/MCL/MDTS limits.
    pub(super) fn copy_blocks(&mut self, device: usize, from: Location, to: Location, blocks: u32) -> Result<()> {
        let d = self.dev(device);
        let lpb = d.lbas_per_block;
        let limits = *d.ns.range_limits();
        let per_command = limits.copy_range_blocks.min(limits.copy_total_blocks).min(u64::from(u16::MAX) + 1);
        let total = u64::from(blocks) * lpb;
        let source = d.lba(from.zone, from.offset);
        let destination = d.lba(to.zone, to.offset);
        let mut done = 0u64;
        while done < total {
            let n = per_command.min(total - done);
            let buffer = self.take_buffer(device)?;
            let d = self.dev(device);
            let request = d.ns.copy(destination + done, &[(source + done, n as u32)], IoBuffer::new(buffer), 0)?;
            self.dev_mut(device).run(request, "Copy")?;
            self.stats.copy_commands += 1;
            done += n;
        }
        Ok(())
    }
}

/// Whether a Copy failed because the controller does not take it as sent
/// (the opcode, a field, or the namespaces' formats), not for the data:
/// the same move then goes by read and write.
pub(super) fn copy_refused(error: &nvme_driver::IoError) -> bool {
    use nvme_driver::spec::status::CommandSpecificStatus;
    matches!(
        error.device_status().map(|status| status.code()),
        Some(
            StatusCode::Generic(
                GenericStatus::InvalidCommandOpcode
                    | GenericStatus::InvalidFieldInCommand
                    | GenericStatus::InvalidNamespaceOrFormat
            ) | StatusCode::CommandSpecific(CommandSpecificStatus::IncompatibleNamespaceOrFormat)
        )
    )
}
