//! Zone states rebuilt at open: each lane's zone table from its device's
//! zones and the committed extents, and the metadata segments' write
//! pointers checked against where the log ends. Plans only; open takes the
//! actions once every check passed.

use super::Volume;
use crate::device::zone_has_write_pointer;
use crate::error::{Error, Result};
use crate::table::{Entry, ZoneCensus};
use crate::zones::{ZoneTable, ZoneUse};
use crate::{ExtentId, Location};
use nvme_driver::cmd::zns::ZoneSendAction;
use nvme_driver::spec::zns::{ZoneDescriptor, ZoneState};

impl Volume {
    /// Rebuilds zone states from the device and the extents, checking that
    /// every committed extent lies within what its zone holds. Writes
    /// nothing: returns the zone actions to take once every check passed,
    /// and whether the metadata log must move to a fresh segment.
    pub(super) fn plan_zones(
        &mut self,
        descriptors: &[Vec<ZoneDescriptor>],
        census: &[ZoneCensus],
    ) -> Result<(Vec<ZoneAction>, bool)> {
        let mut actions = Vec::new();
        for lane_index in 0..self.lanes.len() {
            actions.extend(self.plan_lane(lane_index, descriptors, false, census.get(lane_index))?);
        }
        // A label zone a cut left open between its label's write and its
        // finish holds an active resource no table counts: finished.
        let places = self.devices.len();
        for (place, device) in self.devices.iter().enumerate() {
            let Some(device) = device.as_ref() else { continue };
            if !device.is_zoned() || super::meta_copies_on(places, place) > 0 {
                continue;
            }
            for zone in 0..crate::journal::layout::LABEL_ZONES {
                let state = descriptors[place][zone as usize].state;
                if zone_has_write_pointer(state) && state != ZoneState::Empty {
                    actions.push((place, zone, ZoneSendAction::Finish));
                }
            }
        }
        // The metadata segments: on every zoned copy, the write pointers
        // must stand where the log ends, and the other segment is reset
        // unless the current checkpoint, not yet sealed, builds on it. A
        // copy on a device away is left as it is.
        let g = self.journal.g;
        let current = self.journal.segment;
        let mut rotate = false;
        for copy in self.journal.copies.clone() {
            let Some(device) = self.devices[copy.device].as_ref() else { continue };
            if !device.is_zoned() {
                continue;
            }
            let lpb = device.lbas_per_block;
            let mut expected_left = self.journal.offset;
            for segment in 0..2 {
                for zone in copy.segments[segment as usize]..copy.segments[segment as usize] + g {
                    let d = descriptors[copy.device][zone as usize];
                    if segment != current {
                        if !self.journal.other_needed && d.state != ZoneState::Empty && !unwritable(d.state) {
                            // An older checkpoint, or a torn rotation.
                            actions.push((copy.device, zone, ZoneSendAction::Reset));
                        }
                        continue;
                    }
                    let capacity = u64::from(device.zones[zone as usize].capacity_blocks);
                    let expected = expected_left.min(capacity);
                    expected_left -= expected;
                    // In LBAs: a power cut can leave the write pointer
                    // inside a 4 KiB block, and the next record must start
                    // at a block.
                    let written_lbas = match d.state {
                        ZoneState::Empty => 0,
                        ZoneState::Full => capacity * lpb,
                        state if zone_has_write_pointer(state) => d.wp - d.zslba,
                        _ => u64::MAX,
                    };
                    if written_lbas != expected * lpb {
                        rotate = true;
                    }
                }
            }
        }
        Ok((actions, rotate))
    }
    /// Rebuilds lane `lane_index`'s zone table from its device's zones
    /// (`descriptors`, by device place) and the extents. Returns the zone
    /// actions to take. A committed copy beyond what its zone holds is
    /// corruption, except on a device that was away (`returning`, or
    /// recorded failed): its copy is then missing, for a resilver.
    pub(super) fn plan_lane(
        &mut self,
        lane_index: usize,
        descriptors: &[Vec<ZoneDescriptor>],
        returning: bool,
        census: Option<&ZoneCensus>,
    ) -> Result<Vec<ZoneAction>> {
        let device_index = self.lanes[lane_index].device;
        let returning = returning || self.members[device_index].record.failed;
        let present = self.devices[device_index].is_some();
        let zoned = self.lane_is_zoned(lane_index);
        let zone_count = self.lanes[lane_index].table.zone_count() as usize;
        let capacities: Vec<u32> = match &self.devices[device_index] {
            Some(device) => super::data_capacities(device, &self.superblock),
            None => vec![super::member::UNKNOWN_CAPACITY; zone_count],
        };
        if present && capacities.len() != zone_count {
            return Err(Error::Corrupt(format!(
                "lane {lane_index}: {zone_count} zones recorded, the device has {}",
                capacities.len()
            )));
        }
        let allocated_on_device = |volume: &Self, zone: usize| -> (u32, bool) {
            let capacity = capacities[zone];
            if !present || !zoned {
                return (0, false);
            }
            let d = &descriptors[device_index][zone];
            let lpb = volume.dev(device_index).lbas_per_block;
            match d.state {
                ZoneState::Empty => (0, false),
                ZoneState::Full | ZoneState::ReadOnly | ZoneState::Offline => (capacity, false),
                // Rounded up: a power cut can leave the write pointer
                // inside a 4 KiB block, and that block is used (the next
                // Zone Append would land after it).
                _ => ((d.wp.saturating_sub(d.zslba)).div_ceil(lpb).min(u64::from(capacity)) as u32, true),
            }
        };
        // A copy on a returning device beyond what its zone holds (or
        // outside its zones) never reached it: missing.
        let mut moved = false;
        if present && returning {
            let stale: Vec<(Location, ExtentId, Entry)> = self
                .table
                .iter()
                .filter_map(|(id, entry)| {
                    let location = entry.on(lane_index);
                    if location.is_missing() {
                        return None;
                    }
                    let zone = location.zone as usize;
                    let end = location.offset + entry.blocks;
                    let gone = zone >= capacities.len()
                        || end > capacities[zone]
                        || (zoned && end > allocated_on_device(self, zone).0);
                    gone.then_some((location, id, entry))
                })
                .collect();
            moved = !stale.is_empty();
            for (location, id, entry) in stale {
                log::warn!("lane {lane_index}: extent {id}'s copy at {location:?} is not on the device: missing");
                if entry.copies().all(|(l, at)| l == lane_index || at.is_missing()) {
                    return Err(Error::Corrupt(format!("extent {id}'s only copy is not on the returning device")));
                }
                self.move_extent(id, lane_index, Location::MISSING, true);
            }
        }
        // Per zone: the end of its furthest live extent, and live blocks
        // (counted again when copies were just marked missing).
        let counted;
        let census = match census {
            Some(census) if !moved => census,
            _ => {
                counted = self.table.census(lane_index, zone_count as u32);
                &counted
            }
        };
        let (live_end, valid) = (&census.live_end, &census.valid);
        // Start over from empty tables; `apply` filled valid counts.
        let old = &self.lanes[lane_index].table;
        let owned: Vec<bool> = (0..old.zone_count()).map(|z| old.zone(z).usage != ZoneUse::NotOwned).collect();
        let mut table = ZoneTable::new(
            &capacities,
            |z| owned[z as usize],
            self.superblock.streams,
            self.superblock.reserve_zones as usize,
        );
        table.set_finish_threshold(self.superblock.finish_threshold_blocks);
        let mut actions = Vec::new();
        for zone in 0..zone_count as u32 {
            if !owned[zone as usize] {
                continue;
            }
            let z = zone as usize;
            let (allocated, needs_finish) =
                if present && zoned { allocated_on_device(self, z) } else { (live_end[z], false) };
            if live_end[z] > allocated {
                return Err(Error::Corrupt(format!(
                    "lane {lane_index} zone {zone}: committed data reaches block {} but the zone holds {allocated}",
                    live_end[z]
                )));
            }
            table.restore(zone, allocated, valid[z]);
            self.lanes[lane_index].written[z] = allocated;
            if allocated == 0 || valid[z] == 0 {
                // A seal of the zone's last use, whose reset a power cut
                // kept from the journal (or that nothing lives in now).
                self.unseal(lane_index, zone);
            }
            if !present {
                // Away: nothing is done to its zones until it is back.
                continue;
            }
            let unsealed =
                self.area && self.lanes[lane_index].sealed[z] == 0 && valid[z] > 0 && (!zoned || needs_finish);
            if zoned && unwritable(descriptors[device_index][z].state) {
                // Worn out on the device: nothing is reset, finished or
                // written there again; reclaim moves its live data off.
                log::warn!("lane {lane_index} zone {zone} is {:?}", descriptors[device_index][z].state);
                table.wear_out(zone);
                self.stats.zones_worn += 1;
            } else if allocated > 0 && valid[z] == 0 {
                // Nothing committed lives here: uncommitted writes or a
                // reset that a power cut interrupted.
                if zoned {
                    actions.push((device_index, zone, ZoneSendAction::Reset));
                }
                self.lanes[lane_index].zone_emptied(zone);
                table.reset(zone);
                self.stats.zones_reset += 1;
            } else if unsealed {
                // Reopened volumes do not append to old zones: its checksum
                // area goes after its data, and it is finished, once open
                // has written its first commit (`process_retiring`).
                self.retiring.push((lane_index, zone));
            } else if needs_finish && allocated > 0 {
                // Reopened volumes do not append to old zones: finish it,
                // releasing its active resource.
                actions.push((device_index, zone, ZoneSendAction::Finish));
                self.stats.zones_finished += 1;
            }
        }
        if !present {
            // Its tables hold no zone open or active while away.
            table.retire_all();
            for zone in 0..table.zone_count() {
                table.deactivate(zone);
            }
        }
        self.lanes[lane_index].table = table;
        self.watch_lane(lane_index);
        self.lanes[lane_index].appended.clear();
        Ok(actions)
    }
}

/// A zone action open takes once the state is known whole.
pub(super) type ZoneAction = (usize, u32, ZoneSendAction);

/// Zones that take no write, reset or finish (ZNS Command Set 1.1 §2.1.1:
/// Read Only and Offline are reached only by the device).
pub(super) fn unwritable(state: ZoneState) -> bool {
    matches!(state, ZoneState::ReadOnly | ZoneState::Offline)
}
