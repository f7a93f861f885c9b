//! A pool grows online: [`Volume::add`] puts a blank namespace in a new
//! place, writable at once (ZFS's `zpool add`, btrfs's `device add`).

use super::member::Member;
use super::{Lane, Volume};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::journal::recovery::{probe, Probe};
use crate::journal::{MemberRecord, Op};
use crate::{ExtentId, Profile, BLOCK_SIZE};
use nvme_driver::cmd::zns::ZoneSendAction;
use nvme_driver::spec::identify::Oncs;

impl Volume {
    /// Puts `device`, a blank namespace (anything, with `force`), into the
    /// pool as a new place, and returns the place. Its zones are reset and
    /// it holds no copy yet; new extents use it at once (placement takes
    /// the devices with the most room first). Commits, writing the
    /// metadata with the new member on every copy, then labels it.
    ///
    /// A cut before the commit leaves the volume as it was (the device, if
    /// reset, blank again); one after leaves the place the volume's, and
    /// open takes the device into it, labelled or not (it holds nothing
    /// yet). Growing a volume of fewer than three namespaces would move its
    /// metadata (each of them holds a copy, and a third device would take
    /// one): refused, as is a dup (one namespace by definition) and a
    /// pool of [`crate::chooser::MAX_DEVICES`].
    pub fn add(&mut self, mut device: Device, force: bool) -> Result<usize> {
        let place = self.devices.len();
        let refuse = |why: String| Err(Error::Member { device: place, why });
        if self.superblock.profile == Profile::Dup {
            return Err(Error::InvalidConfig("a dup volume spans one namespace: it takes no other".into()));
        }
        if place < crate::journal::layout::COPIES_MAX {
            return Err(Error::InvalidConfig(format!(
                "the volume spans {place} namespace(s), each holding a metadata copy; adding one would move the \
                 metadata (a third copy), which is not done yet: pools of three or more grow"
            )));
        }
        if place >= crate::chooser::MAX_DEVICES {
            return Err(Error::InvalidConfig(format!("the volume spans {place} namespaces, the most a pool takes")));
        }
        if let Some(away) = (0..place).find(|&p| self.devices[p].is_none()) {
            return refuse(format!(
                "place {away} is away: bring it back or replace it first, so that every metadata copy records the \
                 new member"
            ));
        }
        if !force {
            match probe(&mut device, None) {
                Probe::Blank => {}
                Probe::Label(label) if label.volume_id == self.volume_id => {
                    return refuse(format!(
                        "the device is place {} of this volume already (bring it back with rejoin)",
                        label.device_index
                    ))
                }
                other => {
                    return refuse(format!(
                        "the device is not blank ({}); add with force to overwrite it",
                        super::replace::describe_probe(&other, self.volume_id)
                    ))
                }
            }
        }
        self.commit()?;
        let software_zones = self.check_addition(place, &mut device)?;
        if device.is_zoned() {
            let request = device.ns.zone_send(0, ZoneSendAction::Reset, true, 0)?;
            device.run(request, "Zone Reset (all)")?;
        }
        if let Some(blocks) = software_zones {
            // The first conventional member: its software zones are the
            // volume's from now on (the labels say so).
            self.superblock.software_zone_blocks = blocks;
            self.journal.label.superblock.software_zone_blocks = blocks;
        }
        // Every per-place and per-lane vector grows by one; the pending
        // writes' slab by what the device's buffers let fly.
        let more_writes = device.pool.capacity() + device.fill_pool.as_ref().map_or(0, |p| p.capacity());
        self.writes.reserve(more_writes);
        self.free_slots.reserve(more_writes);
        self.done.reserve(more_writes);
        device.reserve_buffer();
        let record = MemberRecord { id: crate::journal::random_u64(), ..MemberRecord::default() };
        self.superblock.devices.push((
            device.ns.nsid(),
            device.ns.block_size(),
            device.ns.capacity_blocks(),
            device.is_zoned(),
        ));
        self.superblock.members.push(record);
        self.members.push(Member::new(record));
        self.device_writes.push(0);
        self.copy_supported.push(device.ns.supports(Oncs::COPY));
        self.zone_limits.push(device.ns.zones().and_then(|z| {
            let active = z.max_active_zones?;
            Some((z.max_open_zones.unwrap_or(active).min(active), active))
        }));
        self.devices.push(Some(device));
        // A device new to the volume: look at every device's resets again.
        self.resets_seen = u64::MAX;
        let lane = self.lanes.len();
        self.lanes.push(Lane { device: place, ..Lane::empty() });
        let table = self.fresh_table(lane);
        let zones = table.zone_count() as usize;
        self.lanes[lane].table = table;
        self.watch_lanes();
        self.lanes[lane].written = vec![0; zones];
        self.lanes[lane].sealed = vec![0; zones];
        self.area_cache.push(None);
        self.reclaim_open.push(false);
        self.table.set_lanes(self.lanes.len());
        self.chooser.add(lane, self.lanes[lane].table.free_blocks());
        self.stats.zones += zones as u64;
        self.tags = super::volume_tags(&self.superblock, &self.devices);
        self.journal.label.superblock = self.superblock.clone();
        self.journal.label.generation += 1;
        self.journal.broken = true;
        self.ops.push(Op::Member { device: place as u8, record });
        self.members[place].journaled = record;
        self.commit()?;
        self.label_member(place)?;
        log::info!("device place {place} added");
        Ok(place)
    }

    /// Checks that `device` can join as place `place`, and sets up its
    /// zones: its transfers and zones take the volume's largest extent, it
    /// has zones for its label and data, its tags (if the volume keeps
    /// them) are alike, the extent table can locate its zones, and its
    /// zone limits take the volume's streams. Returns the software zone
    /// size the volume takes from it when it is the first conventional
    /// member (set once it joins).
    fn check_addition(&mut self, place: usize, device: &mut Device) -> Result<Option<u32>> {
        let refuse = |why: String| Err(Error::Member { device: place, why });
        let blocks = self.load_new_device(place, device)?;
        let streams = u32::from(self.superblock.streams);
        let needed = crate::journal::layout::LABEL_ZONES as usize
            + self.superblock.reserve_zones as usize
            + streams as usize
            + 1;
        if device.zones.len() < needed {
            return refuse(format!(
                "{} zones; its label, {streams} stream(s), reclaim and a reserve of {} need {needed}",
                device.zones.len(),
                self.superblock.reserve_zones
            ));
        }
        if let Some(z) = device.ns.zones() {
            let active = z.max_active_zones.unwrap_or(u32::MAX);
            let open = z.max_open_zones.unwrap_or(active).min(active);
            if streams + 1 > active || streams + 1 > open {
                return refuse(format!(
                    "it allows {open} open and {active} active zones; {streams} stream(s) and reclaim need {}",
                    streams + 1
                ));
            }
        }
        super::check_locations(&self.superblock, place, device)?;
        Ok((!device.is_zoned() && self.superblock.software_zone_blocks == 0).then_some(blocks))
    }
}

/// What [`Volume::remove`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Removal {
    /// The place emptied and dropped.
    pub place: usize,
    /// Copies moved off it.
    pub extents_moved: u64,
    /// Their bytes.
    pub bytes_moved: u64,
    /// The place left the volume: every copy moved, and the last place
    /// (if another) took its number. False when stopped early: what moved
    /// is committed, and running it again goes on.
    pub complete: bool,
}

/// Copies moved between the commits of a removal.
const REMOVAL_COMMIT_EVERY: u64 = 64;

impl Volume {
    /// Removes place `place` from the pool (ZFS's device removal, btrfs's
    /// `device remove`): checks first that the others can take every copy
    /// it holds (placement's dry run), then moves each copy to the lane
    /// placement chooses among those without one of its extent, read from
    /// the place itself (or, where that fails its checksums, from another
    /// copy), committing as it goes; then drops the place, the last place
    /// taking its number, and blanks the device's label. `on_progress`
    /// gets the bytes moved and to move, and stops the removal when it
    /// returns false.
    ///
    /// Crash-safe at every step and resumable: a cut (or a stop) leaves
    /// every committed copy where a commit put it, the place still in the
    /// volume, and running it again moves what is left. New extents avoid
    /// the place while it runs; a zone being reclaimed is finished first.
    /// A member away is removed once it holds no copy (after the
    /// distributed rebuild of its copies onto the others). Refused, before anything moves, when the
    /// others lack room (naming how much), when fewer devices than copies
    /// would be left, when a device is away, and for a member holding a
    /// metadata copy (moving metadata off a member is not done yet).
    ///
    /// One copy at a time for now: the engine's parallel evacuation (and
    /// NVMe Copy within a controller) are not done yet.
    pub fn remove(&mut self, place: usize, on_progress: &mut dyn FnMut(u64, u64) -> bool) -> Result<Removal> {
        let count = self.devices.len();
        if place >= count {
            return Err(Error::Member { device: place, why: format!("the volume has {count} places") });
        }
        if self.superblock.profile == Profile::Dup {
            return Err(Error::InvalidConfig("a dup volume spans one namespace: it cannot lose it".into()));
        }
        if super::meta_copies_on(count, place) > 0 {
            return Err(Error::Member {
                device: place,
                why: "it holds a metadata copy, and moving metadata off a member is not done yet: remove a place \
                      from the fourth on"
                    .into(),
            });
        }
        if count - 1 < self.copies() {
            return Err(Error::Member {
                device: place,
                why: format!("{} devices would be left for {} copies of each extent", count - 1, self.copies()),
            });
        }
        // Every other member must be present; the one leaving may be away
        // once it holds no copy (a distributed rebuild moved them).
        if let Some(away) = (0..count).find(|&p| p != place && self.devices[p].is_none()) {
            return Err(Error::Member {
                device: place,
                why: format!("place {away} is away: bring it back or replace it first"),
            });
        }
        let lane_of_place = (0..self.lanes.len()).find(|&l| self.lanes[l].device == place).expect("a lane");
        if self.devices[place].is_none() && self.table.iter().any(|(_, e)| e.has_lane(lane_of_place)) {
            return Err(Error::Member {
                device: place,
                why: "it is away and still holds copies: rebuild them on the others first (the distributed \
                      rebuild), or bring it back"
                    .into(),
            });
        }
        // A zone being reclaimed is finished first (its lane may be the one
        // leaving, or renumbered).
        while self.reclaim.is_some() {
            self.reclaim_step(u64::MAX)?;
        }
        self.wait_idle()?;
        let lane = (0..self.lanes.len()).find(|&l| self.lanes[l].device == place).expect("a lane per place");
        // Its copies, and those recorded missing there (written while it was
        // away, not yet resilvered): each goes elsewhere, read from a copy
        // that is there.
        let copies: Vec<(ExtentId, u32)> =
            self.table.iter().filter(|(_, e)| e.has_lane(lane)).map(|(id, e)| (id, e.blocks)).collect();
        self.check_room_elsewhere(place, lane, &copies)?;
        self.commit()?;
        let total: u64 = copies.iter().map(|&(_, blocks)| u64::from(blocks) * BLOCK_SIZE as u64).sum();
        let mut report = Removal { place, ..Removal::default() };
        // New extents go elsewhere from now on.
        self.chooser.remove(lane);
        let mut data = Vec::new();
        for (id, blocks) in copies {
            if !on_progress(report.bytes_moved, total) {
                self.commit()?;
                self.restore_chooser();
                return Ok(report);
            }
            if self.table.get(id).is_none_or(|e| !e.has_lane(lane)) {
                continue;
            }
            data.resize(blocks as usize * BLOCK_SIZE, 0);
            if let Err(error) = self.move_copy_off(id, lane, &mut data) {
                // What moved is committed; the lane takes new extents again.
                self.restore_chooser();
                self.commit()?;
                return Err(error);
            }
            report.extents_moved += 1;
            report.bytes_moved += data.len() as u64;
            if report.extents_moved.is_multiple_of(REMOVAL_COMMIT_EVERY) {
                self.commit()?;
            }
        }
        self.commit()?;
        let left = self.table.iter().find(|(_, e)| e.has_lane(lane)).map(|(id, _)| id);
        if let Some(id) = left {
            self.restore_chooser();
            log::warn!("device place {place}: extent {id} still has a copy on it after the moves");
            return Err(Error::Member { device: place, why: format!("extent {id} still has a copy on it") });
        }
        on_progress(report.bytes_moved, total);
        self.drop_place(place, lane)?;
        report.complete = true;
        log::info!("device place {place} removed: {} copies moved", report.extents_moved);
        Ok(report)
    }

    /// Moves extent `id`'s copy in lane `lane` (or the copy recorded missing
    /// there) to the lane placement chooses, read into `data` from the
    /// copy itself, or where its checksums fail, from another.
    fn move_copy_off(&mut self, id: ExtentId, lane: usize, data: &mut [u8]) -> Result<()> {
        let here = !self.table.get(id).is_some_and(|e| e.on(lane).is_missing());
        let good = here && matches!(self.read_copy_checked(id, lane, data), Ok(bad) if bad.is_empty());
        if !good {
            self.read(id, data)?;
        }
        let target = self.relocation_lane(id, lane)?;
        // The new copy's zone has no checksum area yet: its checksums go to
        // the map until it is sealed (the source's came from its own
        // zone's area, or its tags).
        let mut crcs = Vec::with_capacity(data.len() / BLOCK_SIZE);
        crate::checksum::block_crcs(data, &mut crcs);
        self.submit_relocation(id, lane, target, data, Some(crcs))?;
        self.wait_idle()?;
        while let Some(done) = self.next_copy_done() {
            done.result?;
        }
        Ok(())
    }

    /// A distributed rebuild's dry run for lane `lane` (its device away or
    /// given up): every copy there that is not available
    /// ([`Volume::lacks_available_copy`]) finds room on the lanes in use
    /// that hold no copy of its extent, as [`Volume::remove`] checks before
    /// it moves anything. Else [`Error::Member`] naming how much would find
    /// no place. Changes nothing.
    pub fn check_rebuild_room(&self, lane: usize) -> Result<()> {
        let place = self
            .lanes
            .get(lane)
            .map(|l| l.device)
            .ok_or_else(|| Error::Member { device: lane, why: format!("the volume has {} lanes", self.lanes.len()) })?;
        let copies: Vec<(ExtentId, u32)> = self
            .table
            .iter()
            .filter(|&(id, _)| self.lacks_available_copy(id, lane))
            .map(|(id, e)| (id, e.blocks))
            .collect();
        self.check_room_elsewhere(place, lane, &copies)
    }

    /// Placement's dry run: every copy in lane `lane` (`copies`) finds a
    /// lane with room among those in use that hold no copy of its extent,
    /// each taken as placement would (most room first), in tables of their
    /// zones as they are now. Else how much is missing, by name.
    fn check_room_elsewhere(&self, place: usize, lane: usize, copies: &[(ExtentId, u32)]) -> Result<()> {
        let mut tables: Vec<Option<crate::zones::ZoneTable>> = (0..self.lanes.len())
            .map(|l| (l != lane && self.lane_online(l)).then(|| self.lanes[l].table.clone()))
            .collect();
        let mut missing = 0u64;
        for &(id, blocks) in copies {
            let entry = self.table.get(id).expect("listed live");
            let mut candidates: Vec<usize> =
                (0..tables.len()).filter(|&l| tables[l].is_some() && !entry.has_lane(l)).collect();
            candidates.sort_by_key(|&l| std::cmp::Reverse(tables[l].as_ref().map_or(0, |t| t.free_blocks())));
            let placed = candidates.into_iter().any(|l| {
                let table = tables[l].as_mut().expect("a candidate");
                table.allocate(crate::zones::Slot::Stream(0), blocks).is_ok()
            });
            if !placed {
                missing += u64::from(blocks);
            }
        }
        if missing > 0 {
            let block = BLOCK_SIZE as u64;
            let total: u64 = copies.iter().map(|&(_, b)| u64::from(b)).sum();
            return Err(Error::Member {
                device: place,
                why: format!(
                    "the other devices lack room for its copies: {} of its {} bytes would find no place (free \
                     extents, or add a device first)",
                    missing * block,
                    total * block
                ),
            });
        }
        Ok(())
    }

    /// Every lane in use takes new extents again (a removal stopped).
    fn restore_chooser(&mut self) {
        for lane in 0..self.lanes.len() {
            if self.lane_online(lane) {
                self.chooser.add(lane, self.lanes[lane].table.free_blocks());
            }
        }
    }

    /// Drops place `place` (lane `lane`), which holds no copy: the last
    /// place takes its number (every copy in the last lane is renamed
    /// into `lane`, where it lies on the same device), and a whole
    /// checkpoint records the volume so on every metadata copy. Then the
    /// moved device is labelled with its new place and the removed one's
    /// label blanked. A cut before the checkpoint leaves the place in the
    /// volume, empty; one after leaves it out, and open finds the moved
    /// device by its member ID whatever its label says.
    fn drop_place(&mut self, place: usize, lane: usize) -> Result<()> {
        let last = self.devices.len() - 1;
        let last_lane = self.lanes.len() - 1;
        debug_assert_eq!(self.lanes[last_lane].device, last);
        // The renumbering goes in a checkpoint that begins a segment, its
        // labels and record written together: a checkpoint still spreading
        // over commits is first made whole (a commit then restarts it in
        // its segment, and the labels saying the new shape would come only
        // after, in another write).
        self.journal.broken = true;
        self.commit()?;
        if !self.journal.sealed() {
            return Err(Error::Member {
                device: place,
                why: "the metadata checkpoint could not be made whole before the place is dropped: run the removal \
                      again"
                    .into(),
            });
        }
        // Operations since the last commit (a zone the moves emptied, its
        // seal undone) go in the checkpoint below, numbered anew; its
        // pages and seals hold their effect whatever they say of the
        // removed lane.
        let (gone, from) = (lane as u8, last_lane as u8);
        let renamed = |l: u8| if l == from { lane as u8 } else { l };
        self.ops.retain_mut(|op| match op {
            Op::Sealed { lane, .. } | Op::Move { lane, .. } => {
                let keep = *lane != gone;
                *lane = renamed(*lane);
                keep
            }
            Op::Relane { from: source, lane, .. } => {
                let keep = *source != gone && *lane != gone;
                (*source, *lane) = (renamed(*source), renamed(*lane));
                keep
            }
            Op::Member { device, .. } => {
                let keep = usize::from(*device) != place;
                if usize::from(*device) == last {
                    *device = place as u8;
                }
                keep
            }
            Op::Add(_) => panic!("an extent added during a removal's last step"),
            _ => true,
        });
        if lane != last_lane {
            let moved: Vec<(ExtentId, crate::Location)> =
                self.table.iter().filter(|(_, e)| e.has_lane(last_lane)).map(|(id, e)| (id, e.on(last_lane))).collect();
            for (id, at) in moved {
                assert!(self.table.relane(id, last_lane, lane, at), "extent {id}: renamed into an empty lane");
            }
        }
        let removed = self.devices.swap_remove(place);
        self.superblock.devices.swap_remove(place);
        self.superblock.members.swap_remove(place);
        self.members.swap_remove(place);
        self.device_writes.swap_remove(place);
        self.busy = super::write::busy_mask(&self.device_writes);
        self.copy_supported.swap_remove(place);
        self.zone_limits.swap_remove(place);
        self.lanes.swap_remove(lane);
        self.area_cache.swap_remove(lane);
        self.reclaim_open.swap_remove(lane);
        if lane < self.lanes.len() {
            self.lanes[lane].device = place;
        }
        let rename = |l: &mut usize| {
            if *l == last_lane {
                *l = lane;
            }
        };
        // The removed lane's zones are no longer the volume's to seal.
        self.sealed_since_commit.retain(|&(l, _)| l != lane);
        self.retiring.retain(|&(l, _)| l != lane);
        self.held_zone = self.held_zone.filter(|&(l, _)| l != lane);
        for (l, _) in self.sealed_since_commit.iter_mut().chain(self.retiring.iter_mut()) {
            rename(l);
        }
        if let Some((l, _)) = self.held_zone.as_mut() {
            rename(l);
        }
        self.bad_blocks.retain(|b| usize::from(b.lane) != lane);
        for bad in &mut self.bad_blocks {
            if usize::from(bad.lane) == last_lane {
                bad.lane = lane as u8;
            }
        }
        self.next_reclaim_lane = 0;
        self.table.set_lanes(self.lanes.len());
        self.chooser = crate::chooser::Chooser::new();
        self.chooser_seen = [crate::zones::Stamp::NONE; crate::chooser::MAX_DEVICES];
        self.chooser
            .set_queue_target(super::QUEUE_TARGET_EXTENTS * u64::from(self.superblock.max_extent_blocks.max(1)));
        self.restore_chooser();
        // Lanes renumbered: each table tells its new bit.
        self.watch_lanes();
        self.stats.zones = self.lanes.iter().map(|l| u64::from(l.table.zone_count())).sum();
        self.tags = super::volume_tags(&self.superblock, &self.devices);
        self.journal.label.superblock = self.superblock.clone();
        self.journal.label.generation += 1;
        self.journal.broken = true;
        self.commit()?;
        if place < self.devices.len() {
            self.label_member(place)?;
        }
        // The removed device holds nothing of the volume: its label goes,
        // so that it is not taken for a member.
        if let Some(mut removed) = removed {
            if let Err(error) = blank_label(&mut removed) {
                log::warn!("the removed device's label could not be blanked: {error}");
            }
        }
        Ok(())
    }
}

/// Blanks the label of a device that left the volume: its zones reset on
/// a zoned namespace, the label blocks zeroed on a conventional one.
fn blank_label(device: &mut Device) -> Result<()> {
    if device.is_zoned() {
        let request = device.ns.zone_send(0, ZoneSendAction::Reset, true, 0)?;
        device.run(request, "Zone Reset (all)")?;
    } else {
        let blocks = crate::journal::layout::LABEL_BLOCKS as usize;
        device.write_at(0, &vec![0u8; blocks * BLOCK_SIZE])?;
        device.flush()?;
    }
    Ok(())
}
