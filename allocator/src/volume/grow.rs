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
    /// yet).
    ///
    /// On a volume of one or two namespaces the new device takes a
    /// metadata copy at its head (the second, which a volume of one kept
    /// on its one namespace, or the third), written by the commit: a cut
    /// before that checkpoint is durable leaves the copies on the others
    /// as they were, and the device holding nothing of the volume (open
    /// leaves it out, and it is added again as if blank). The zones a
    /// volume of one gave its second copy go to its data. Refused for a
    /// dup (one namespace by definition) and a pool of
    /// [`crate::chooser::MAX_DEVICES`].
    pub fn add(&mut self, mut device: Device, force: bool) -> Result<usize> {
        use crate::journal::layout::COPIES_MAX;
        let place = self.devices.len();
        let refuse = |why: String| Err(Error::Member { device: place, why });
        if self.superblock.profile == Profile::Dup {
            return Err(Error::InvalidConfig("a dup volume spans one namespace: it takes no other".into()));
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
                // Labelled by an add of this volume cut before its commit
                // was durable: it holds nothing of the volume.
                Probe::Label(label) if label.volume_id == self.volume_id && !self.holds_member(&label) => {}
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
        let takes_metadata = place < COPIES_MAX;
        if takes_metadata {
            // The checkpoint that writes the new copy begins segment 1 on
            // every copy, its labels and record written together (see
            // `drop_place`): the log is first made whole in segment 0, so
            // that the new device's first zone keeps the label written
            // below until that checkpoint is durable.
            for _ in 0..2 {
                if self.journal.sealed() && self.journal.segment == 0 {
                    break;
                }
                self.journal.broken = true;
                self.commit()?;
            }
            if !self.journal.sealed() || self.journal.segment != 0 {
                return refuse(
                    "the metadata checkpoint could not be made whole before the device takes a copy: add it again"
                        .into(),
                );
            }
        }
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
        self.copy_supported.push(device.ns.copy_usable());
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
        // The zones a volume of one kept its second copy in, once that copy
        // is on the new device.
        let mut given_back = Vec::new();
        if takes_metadata {
            let g = self.journal.g;
            let old = self.journal.copies.clone();
            let mut copies = super::meta_copies(place + 1, g);
            for (index, copy) in copies.iter_mut().enumerate() {
                match old.get(index) {
                    Some(was) if was.device == copy.device => copy.segments = was.segments,
                    Some(was) => given_back.extend(was.segments.iter().flat_map(|&first| first..first + g)),
                    None => {}
                }
            }
            self.superblock.meta_segments = copies.iter().map(|c| c.segments).collect();
            self.journal.copies = copies;
            // Labelled first, at the head of its segment 0, as a member of
            // the volume it joins (under the labels' generation now): a cut
            // before the checkpoint is durable leaves a device open knows
            // for an add's (it leaves it out), never one that looks like
            // someone's data.
            let device = self.devices[place].as_mut().expect("just added");
            self.journal.write_member_label(device, place, &self.superblock)?;
        }
        self.journal.label.superblock = self.superblock.clone();
        self.journal.label.generation += 1;
        self.journal.broken = true;
        self.ops.push(Op::Member { device: place as u8, record });
        self.members[place].journaled = record;
        self.commit()?;
        self.label_member(place)?;
        if !given_back.is_empty() {
            self.give_zones_to_data(0, &given_back)?;
        }
        log::info!("device place {place} added");
        Ok(place)
    }

    /// Why `device`, at place `place`, cannot hold a metadata copy at its
    /// head, if it cannot: its first zones make two segments of the
    /// volume's size, with zones left for its data. (The add's and the
    /// removal's heir's check.)
    fn metadata_head_shortfall(&self, device: &Device, place: usize) -> Option<String> {
        use crate::journal::layout::{segment_capacity, MetaCopy};
        let g = self.journal.g;
        let streams = u32::from(self.superblock.streams);
        let needed_zones = (2 * g + self.superblock.reserve_zones + streams + 1) as usize;
        if device.zones.len() < needed_zones {
            return Some(format!(
                "it has {} zones; two metadata segments of {g}, {streams} stream(s), reclaim and a reserve of {} \
                 need {needed_zones}",
                device.zones.len(),
                self.superblock.reserve_zones
            ));
        }
        let copy = MetaCopy { device: place, segments: [0, g] };
        let needed = self.superblock.meta_segment_blocks;
        (0..2).map(|segment| segment_capacity(device, copy, g, segment)).find(|&have| have < needed).map(|have| {
            format!(
                "its first zones make metadata segments of {have} blocks, the volume's take {needed} (on a \
                 conventional namespace, give larger software zones)"
            )
        })
    }

    /// Checks that `device`, to be place `place`, can hold a metadata copy
    /// at its head: its first zones make two segments of the volume's
    /// size, with zones left for its data, and its zone limits take a
    /// metadata zone beside its streams.
    fn check_metadata_head(&self, place: usize, device: &Device) -> Result<()> {
        let refuse =
            |why: String| Err(Error::Member { device: place, why: format!("it takes a metadata copy, and {why}") });
        if let Some(why) = self.metadata_head_shortfall(device, place) {
            return refuse(why);
        }
        let streams = u32::from(self.superblock.streams);
        if let Some(z) = device.ns.zones() {
            let active = z.max_active_zones.unwrap_or(u32::MAX);
            if streams + 2 > active {
                return refuse(format!(
                    "it allows {active} active zones; {streams} stream(s), reclaim and a metadata zone need {}",
                    streams + 2
                ));
            }
        }
        Ok(())
    }

    /// Whether `label` names a member of the volume as it is now.
    fn holds_member(&self, label: &crate::journal::Label) -> bool {
        let id = label.superblock.members.get(usize::from(label.device_index)).map(|m| m.id);
        self.members.iter().any(|m| Some(m.record.id) == id)
    }

    /// Gives `zones` of place `place`, which held a metadata copy no
    /// longer there, to its lane's data: reset on a zoned namespace, their
    /// heads' labels zeroed on a conventional one (so that no old label is
    /// found there), then empty in its table. Nothing while the device is
    /// away.
    fn give_zones_to_data(&mut self, place: usize, zones: &[u32]) -> Result<()> {
        let lane = (0..self.lanes.len()).find(|&l| self.lanes[l].device == place).expect("a lane per place");
        if self.devices[place].is_none() {
            // Given up meanwhile: open plans its zones anew when it is back
            // (the format's layout gives them to its data, and the zone
            // plan resets what holds nothing committed).
            return Ok(());
        }
        let blocks = crate::journal::layout::LABEL_BLOCKS as usize + 1;
        for &zone in zones {
            let device = self.dev_mut(place);
            if device.is_zoned() {
                device.zone_action(zone, ZoneSendAction::Reset)?;
            } else {
                let lba = device.zones[zone as usize].start_lba;
                device.write_at(lba, &vec![0u8; blocks * BLOCK_SIZE])?;
            }
        }
        if !self.dev(place).is_zoned() {
            self.dev_mut(place).flush()?;
        }
        for &zone in zones {
            self.lanes[lane].table.take_in(zone);
        }
        Ok(())
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
        if place < crate::journal::layout::COPIES_MAX {
            self.check_metadata_head(place, device)?;
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
    /// Copies the last member moved within itself, out of the zones it
    /// gave the metadata copy it took over (a member holding one left).
    pub heir_extents_moved: u64,
    /// Their bytes.
    pub heir_bytes_moved: u64,
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
    /// distributed rebuild of its copies onto the others).
    ///
    /// A member holding a metadata copy hands it to the last member, which
    /// takes its place: on a pool of four or more, that member's first
    /// zones (its label's, and as many after it as the segments take) are
    /// emptied with the copies leaving, and become the copy's segments in
    /// the checkpoint that drops the place; on a pool of three, the last
    /// member already holds the third copy, which takes the number of the
    /// one leaving. Refused, before anything moves, when the others lack
    /// room (naming how much), when fewer devices than copies would be
    /// left, when a device is away, when the last member's first zones
    /// cannot hold a metadata copy, and for a member of a pool of two (the
    /// one left would hold both copies).
    ///
    /// Between namespaces of one controller that takes Copy across them,
    /// each copy moves by Copy (no byte through the host); else by a
    /// verified read and a write. One copy at a time: the engine's
    /// parallel evacuation is not done yet.
    pub fn remove(&mut self, place: usize, on_progress: &mut dyn FnMut(u64, u64) -> bool) -> Result<Removal> {
        let count = self.devices.len();
        if place >= count {
            return Err(Error::Member { device: place, why: format!("the volume has {count} places") });
        }
        if self.superblock.profile == Profile::Dup {
            return Err(Error::InvalidConfig("a dup volume spans one namespace: it cannot lose it".into()));
        }
        let holds_metadata = super::meta_copies_on(count, place) > 0;
        if holds_metadata && count <= 2 {
            return Err(Error::Member {
                device: place,
                why: "each of the volume's two members holds a metadata copy, and the one left would have to hold \
                      both (as a volume of one namespace does), which is not done: add a member first"
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
        // The member that takes over its metadata copy, and the zones it
        // gives the copy's segments (none when it holds the copy already).
        let heir = if holds_metadata && count > crate::journal::layout::COPIES_MAX {
            let heir = count - 1;
            let heir_lane = (0..self.lanes.len()).find(|&l| self.lanes[l].device == heir).expect("a lane per place");
            Some((heir_lane, self.check_heir(place, heir, heir_lane)?))
        } else {
            None
        };
        let in_front = |e: &crate::table::Entry, heir: &Option<(usize, std::ops::Range<u32>)>| {
            heir.as_ref().is_some_and(|(l, front)| !e.on(*l).is_missing() && front.contains(&e.on(*l).zone))
        };
        // The heir's copies in the zones it gives up, moved within it; then
        // the place's copies, and those recorded missing there (written
        // while it was away, not yet resilvered): each goes elsewhere, read
        // from a copy that is there.
        let mut copies: Vec<(ExtentId, u32, usize)> = match heir {
            Some((heir_lane, _)) => {
                self.table.iter().filter(|(_, e)| in_front(e, &heir)).map(|(id, e)| (id, e.blocks, heir_lane)).collect()
            }
            None => Vec::new(),
        };
        copies.extend(self.table.iter().filter(|(_, e)| e.has_lane(lane)).map(|(id, e)| (id, e.blocks, lane)));
        self.check_room_elsewhere(place, lane, &copies, heir.clone())?;
        self.commit()?;
        let total: u64 = copies.iter().map(|&(_, blocks, _)| u64::from(blocks) * BLOCK_SIZE as u64).sum();
        let mut report = Removal { place, ..Removal::default() };
        // New extents go elsewhere from now on, and none to the zones the
        // heir gives up.
        self.chooser.remove(lane);
        if let Some((heir_lane, front)) = heir.clone() {
            let retired = self.lanes[heir_lane].table.withhold(front);
            self.retiring.extend(retired.into_iter().map(|r| (heir_lane, r.zone)));
        }
        let heir_lane = heir.as_ref().map(|&(l, _)| l);
        let mut data = Vec::new();
        for (id, blocks, from) in copies {
            if !on_progress(report.bytes_moved + report.heir_bytes_moved, total) {
                self.commit()?;
                self.stop_removal(heir_lane);
                return Ok(report);
            }
            let still =
                self.table.get(id).is_some_and(|e| if from == lane { e.has_lane(lane) } else { in_front(&e, &heir) });
            if !still {
                continue;
            }
            data.resize(blocks as usize * BLOCK_SIZE, 0);
            // The heir's own copies move within it (an extent may have a
            // copy on every other member), the leaving member's to another.
            let moved = if from == lane {
                self.move_copy_off(id, from, &mut data)
            } else {
                self.relocate(id, from).map(|_| ())
            };
            if let Err(error) = moved {
                // What moved is committed; the lane takes new extents again.
                self.stop_removal(heir_lane);
                self.commit()?;
                return Err(error);
            }
            if from == lane {
                report.extents_moved += 1;
                report.bytes_moved += data.len() as u64;
            } else {
                report.heir_extents_moved += 1;
                report.heir_bytes_moved += data.len() as u64;
            }
            if (report.extents_moved + report.heir_extents_moved).is_multiple_of(REMOVAL_COMMIT_EVERY) {
                self.commit()?;
            }
        }
        self.commit()?;
        let left = self.table.iter().find(|(_, e)| e.has_lane(lane) || in_front(e, &heir)).map(|(id, _)| id);
        if let Some(id) = left {
            self.stop_removal(heir_lane);
            log::warn!("device place {place}: extent {id} still has a copy on it (or on the heir's first zones) after the moves");
            return Err(Error::Member { device: place, why: format!("extent {id} still has a copy on it") });
        }
        if let Some((heir_lane, _)) = heir {
            let in_use = self.lanes[heir_lane].table.withheld_in_use();
            if !in_use.is_empty() {
                self.stop_removal(Some(heir_lane));
                return Err(Error::Member {
                    device: place,
                    why: format!(
                        "zones {in_use:?} of place {}, which take its metadata copy, were not emptied: run the \
                         removal again",
                        count - 1
                    ),
                });
            }
        }
        on_progress(report.bytes_moved + report.heir_bytes_moved, total);
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
        let target = self.relocation_lane(id, lane)?;
        // Between namespaces of one controller the device moves it.
        if here && self.copies_across(lane, target) {
            return self.copy_across(id, lane, target, data);
        }
        let good = here && matches!(self.read_copy_checked(id, lane, data), Ok(bad) if bad.is_empty());
        if !good {
            self.read(id, data)?;
        }
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

    /// Checks that place `heir` (the last, in lane `heir_lane`) can take
    /// over the metadata copy of place `place` when it takes that place:
    /// its first zones make segments of the volume's size, none of them
    /// worn out, with zones left for its data, and its zone limits take a
    /// metadata zone beside its streams. Returns the zones it gives up to
    /// the copy (past its label's).
    fn check_heir(&self, place: usize, heir: usize, heir_lane: usize) -> Result<std::ops::Range<u32>> {
        use crate::journal::layout::LABEL_ZONES;
        let refuse = |why: String| {
            Err(Error::Member {
                device: place,
                why: format!(
                    "it holds a metadata copy, which goes to the last member (place {heir}) as that member takes its \
                     place, and {why}"
                ),
            })
        };
        let g = self.journal.g;
        let streams = u32::from(self.superblock.streams);
        if let Some(why) = self.metadata_head_shortfall(self.dev(heir), heir) {
            return refuse(why);
        }
        let front = LABEL_ZONES..2 * g;
        let table = &self.lanes[heir_lane].table;
        if let Some(worn) = front.clone().find(|&z| table.zone(z).usage == crate::zones::ZoneUse::Worn) {
            return refuse(format!("its zone {worn}, which the copy's segments would take, is worn out"));
        }
        if let Some((open, active)) = self.zone_limits[heir] {
            if streams + 2 > active || streams + 1 > open {
                return refuse(format!(
                    "it allows {open} open and {active} active zones; {streams} stream(s), reclaim and a metadata zone \
                     need {} active",
                    streams + 2
                ));
            }
        }
        Ok(front)
    }

    /// A removal stopped (or failed) part way: every lane in use takes new
    /// extents again, and the heir's zones kept for the metadata copy go
    /// back to its data.
    fn stop_removal(&mut self, heir_lane: Option<usize>) {
        self.restore_chooser();
        if let Some(heir_lane) = heir_lane {
            self.lanes[heir_lane].table.release_withheld();
        }
    }

    /// Whether a copy in lane `from` can move to lane `to` by Copy: their
    /// namespaces are distinct ones of one controller that takes Copy
    /// across namespaces (descriptor format 2h, enabled at bring-up), of
    /// one LBA size, and the volume keeps no checksums in per-block
    /// metadata (which a Copy would carry as they are).
    fn copies_across(&self, from: usize, to: usize) -> bool {
        let (a, b) = (self.lanes[from].device, self.lanes[to].device);
        let (Some(source), Some(target)) = (self.devices[a].as_ref(), self.devices[b].as_ref()) else { return false };
        a != b
            && source.controller == target.controller
            && target.copy_across
            && source.lbas_per_block == target.lbas_per_block
            && self.superblock.tag_stride == 0
    }

    /// Moves extent `id`'s copy in lane `from` to lane `to` with Copy
    /// commands that read it on one namespace and write it on another of
    /// the same controller (NVMe 2.1 NVM Command Set, Copy with
    /// descriptor format 2h): the removal's move with no byte through
    /// the host, as reclaim moves copies within a namespace. Not verified
    /// on the way, as reclaim's Copy is not: the copy keeps the checksums
    /// it claims, and a read of it checks them. A controller that refuses
    /// the command (its formats, or the namespaces' formats, do not
    /// match) is not asked again, and this move is a verified read and a
    /// write into `data` at the place taken.
    fn copy_across(&mut self, id: ExtentId, from: usize, to: usize, data: &mut [u8]) -> Result<()> {
        let extent = self.live(id)?;
        let (blocks, source) = (extent.blocks, extent.on(from));
        let slot = crate::zones::Slot::Stream(0);
        let table = &self.lanes[to].table;
        if table.would_open(slot, blocks) && table.empty_zones() <= self.superblock.reserve_zones as usize {
            return Err(Error::NoSpace(crate::error::Full::Data { place: self.lanes[to].device }));
        }
        // With checksum areas, what the copy claims goes with it, to the map
        // until its new zone is sealed.
        let claimed = if self.area { Some(self.claimed_crcs(id, from)) } else { None };
        let (zone, offset) = self.place(to, slot, blocks)?;
        let at = crate::Location { zone, offset };
        let (a, b) = (self.lanes[from].device, self.lanes[to].device);
        let result = match self.copy_between(a, source, b, at, blocks) {
            Err(Error::Command { error, .. }) if super::reclaim::copy_refused(&error) => {
                log::info!("namespace {}: Copy across namespaces refused ({error}); moving by read and write", b);
                self.dev_mut(b).copy_across = false;
                self.read(id, data).and_then(|_| {
                    let lba = self.dev(b).lba(zone, offset);
                    self.dev_mut(b).write_at(lba, data)
                })
            }
            Ok(()) => {
                self.stats.copied_across_bytes += u64::from(blocks) * BLOCK_SIZE as u64;
                Ok(())
            }
            Err(error) => Err(error),
        };
        if let Err(error) = result {
            // Nothing, or part, was written in the room taken: the zone
            // takes no more.
            self.abandon_zone(to, slot, zone);
            self.release_held_zone();
            return Err(error);
        }
        self.release_held_zone();
        self.lanes[to].written[zone as usize] += blocks;
        match claimed {
            Some(Ok(crcs)) => self.remap(id, crcs),
            Some(Err(error)) => {
                log::warn!("extent {id}: the checksums of copy {from} could not be read ({error}); from a read");
                self.read(id, data)?;
                let mut crcs = Vec::with_capacity(blocks as usize);
                crate::checksum::block_crcs(data, &mut crcs);
                self.remap(id, crcs);
            }
            None => {}
        }
        self.relane_extent(id, from, to, at, true);
        self.stats.relocated_bytes += u64::from(blocks) * BLOCK_SIZE as u64;
        Ok(())
    }

    /// Copies `blocks` from `from` on place `source` to `to` on place
    /// `target`, namespaces of one controller, with Copy commands in
    /// descriptor format 2h, each within the target's MSSRL/MCL limits.
    fn copy_between(
        &mut self,
        source: usize,
        from: crate::Location,
        target: usize,
        to: crate::Location,
        blocks: u32,
    ) -> Result<()> {
        let (snsid, first) = {
            let d = self.dev(source);
            (d.ns.nsid(), d.lba(from.zone, from.offset))
        };
        let d = self.dev(target);
        let limits = *d.ns.range_limits();
        let per_command = limits.copy_range_blocks.min(limits.copy_total_blocks).min(u64::from(u16::MAX) + 1);
        let total = u64::from(blocks) * d.lbas_per_block;
        let destination = d.lba(to.zone, to.offset);
        let mut done = 0u64;
        while done < total {
            let n = per_command.min(total - done);
            let buffer = self.take_buffer(target)?;
            let d = self.dev(target);
            let request = d.ns.copy_from(
                destination + done,
                snsid,
                &[(first + done, n as u32)],
                nvme_driver::IoBuffer::new(buffer),
                0,
            )?;
            self.dev_mut(target).run(request, "Copy across namespaces")?;
            self.stats.copy_commands += 1;
            done += n;
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
        let copies: Vec<(ExtentId, u32, usize)> = self
            .table
            .iter()
            .filter(|&(id, _)| self.lacks_available_copy(id, lane))
            .map(|(id, e)| (id, e.blocks, lane))
            .collect();
        self.check_room_elsewhere(place, lane, &copies, None)
    }

    /// Placement's dry run: every copy (`copies`: extent, blocks, the lane
    /// it leaves) finds a lane with room among those in use but `lane`
    /// that hold no copy of its extent, each taken as placement would (most
    /// room first), in tables of their zones as they are now, less the
    /// zones `withheld` names (a lane's, kept for metadata). Else how much
    /// is missing, by name.
    fn check_room_elsewhere(
        &self,
        place: usize,
        lane: usize,
        copies: &[(ExtentId, u32, usize)],
        withheld: Option<(usize, std::ops::Range<u32>)>,
    ) -> Result<()> {
        let mut tables: Vec<Option<crate::zones::ZoneTable>> = (0..self.lanes.len())
            .map(|l| (l != lane && self.lane_online(l)).then(|| self.lanes[l].table.clone()))
            .collect();
        if let Some((l, zones)) = withheld {
            if let Some(table) = tables[l].as_mut() {
                table.withhold(zones);
            }
        }
        let mut missing = 0u64;
        for &(id, blocks, from) in copies {
            if from != lane {
                // A copy the heir moves within itself, out of the zones it
                // gives up (reclaim's move).
                let table = tables[from].as_mut().expect("the heir is in use");
                if table.allocate(crate::zones::Slot::Reclaim, blocks).is_err() {
                    missing += u64::from(blocks);
                }
                continue;
            }
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
            let total: u64 = copies.iter().map(|&(_, b, _)| u64::from(b)).sum();
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
    ///
    /// A metadata copy on the place goes with the number to the member
    /// taking it: into the segments it already holds (the third copy, on a
    /// pool of three), else into its first zones, which the removal
    /// emptied. The checkpoint is written on that member too, so that it
    /// holds the copy once the checkpoint is durable; before, the copies
    /// on the others (and on the place itself) hold the volume as it was.
    fn drop_place(&mut self, place: usize, lane: usize) -> Result<()> {
        let count = self.devices.len();
        let last = count - 1;
        let last_lane = self.lanes.len() - 1;
        let handover = super::meta_copies_on(count, place) > 0;
        let old_segments = self.superblock.meta_segments.clone();
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
        if handover {
            use crate::journal::layout::COPIES_MAX;
            let g = self.journal.g;
            let inherited = if count > COPIES_MAX { [0, g] } else { old_segments[last] };
            let mut copies = super::meta_copies(self.devices.len(), g);
            for (index, copy) in copies.iter_mut().enumerate() {
                copy.segments = if index == place { inherited } else { old_segments[index] };
            }
            self.superblock.meta_segments = copies.iter().map(|c| c.segments).collect();
            self.journal.copies = copies;
            if count > COPIES_MAX && lane < self.lanes.len() {
                self.lanes[lane].table.settle_withheld();
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
            let heads: Vec<u32> = if handover { old_segments[place].to_vec() } else { Vec::new() };
            if let Err(error) = blank_label(&mut removed, &heads) {
                log::warn!("the removed device's label could not be blanked: {error}");
            }
        }
        Ok(())
    }
}

/// Blanks the labels of a device that left the volume: its zones reset on
/// a zoned namespace; on a conventional one, the label blocks zeroed at its
/// start and at the head of each zone in `heads` (its metadata segments,
/// with their checkpoint slot).
fn blank_label(device: &mut Device, heads: &[u32]) -> Result<()> {
    if device.is_zoned() {
        let request = device.ns.zone_send(0, ZoneSendAction::Reset, true, 0)?;
        device.run(request, "Zone Reset (all)")?;
    } else {
        let blocks = crate::journal::layout::LABEL_BLOCKS as usize + 1;
        let zeroes = vec![0u8; blocks * BLOCK_SIZE];
        device.write_at(0, &zeroes)?;
        let starts: Vec<u64> =
            heads.iter().filter_map(|&z| device.zones.get(z as usize).map(|z| z.start_lba)).collect();
        for lba in starts.into_iter().filter(|&lba| lba > 0) {
            device.write_at(lba, &zeroes)?;
        }
        device.flush()?;
    }
    Ok(())
}
