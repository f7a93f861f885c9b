//! A member back in its place ([`Volume::rejoin`]) or a new device in a
//! failed member's place ([`Volume::replace`]): checked, its zones set up,
//! the metadata rewritten on every copy; what it lacks is for a resilver.

use super::identify::read_images;
use super::member::Member;
use super::zone_plan::ZoneAction;
use super::Volume;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::journal::recovery::{probe, tips, Probe};
use crate::journal::{MemberRecord, Op};
use crate::zones::{Slot, ZoneTable};
use crate::{ExtentId, Location, BLOCK_SIZE};
use nvme_driver::cmd::zns::ZoneSendAction;

impl Volume {
    /// Brings back device `device` (its label names its place): a member
    /// that went away and returned (pulled and re-seated, a controller
    /// reset). Its zones are checked against the copies recorded there;
    /// only the copies written while it was away are missing, for a
    /// resilver to write. Commits, rewriting the metadata on every copy.
    /// Returns the place.
    pub fn rejoin(&mut self, mut device: Device) -> Result<usize> {
        self.commit()?;
        let label = match probe(&mut device, None) {
            Probe::Label(label) if label.volume_id == self.volume_id => label,
            Probe::Label(label) => {
                return Err(Error::ForeignDevice { device: 0, found: label.volume_id, expected: self.volume_id })
            }
            other => {
                return Err(Error::Member { device: 0, why: format!("no label of this volume on it ({other:?})") })
            }
        };
        // Its place is where its member ID is now (a removal may have moved
        // it), else the one its label names.
        let own = usize::from(label.device_index);
        let id = label.superblock.members.get(own).map(|m| m.id);
        let place = self.members.iter().position(|m| Some(m.record.id) == id).unwrap_or(own);
        if place >= self.devices.len() {
            return Err(Error::Removed { device: 0, place });
        }
        if self.devices[place].is_some() {
            return Err(Error::Member { device: place, why: "the place is in use".into() });
        }
        if id != Some(self.members[place].record.id) {
            return Err(Error::Replaced { device: 0, place });
        }
        let found = (device.ns.nsid(), device.ns.block_size(), device.ns.capacity_blocks(), device.is_zoned());
        if found != self.superblock.devices[place] {
            return Err(Error::Member {
                device: place,
                why: format!("the device is {found:?}, the place holds {:?}", self.superblock.devices[place]),
            });
        }
        super::check_tags(&self.superblock, place, &device)?;
        let blocks = if device.is_zoned() { 0 } else { self.superblock.software_zone_blocks };
        let descriptors = device.load_zones(blocks)?;
        let mut all = vec![Vec::new(); self.devices.len()];
        all[place] = descriptors;
        // A member that went on alone since (opened degraded elsewhere)
        // holds a history of its own: its newest records name a session
        // this volume never went through (see `fork`).
        let mut alone: Vec<Option<Device>> = (0..self.devices.len()).map(|_| None).collect();
        alone[place] = Some(device);
        let images = read_images(&mut alone, &all, &self.superblock, self.volume_id, true);
        let device = alone[place].take().expect("given back");
        let newest = tips(&images, self.volume_id).into_iter().flatten().max_by_key(|t| (t.generation, t.seq));
        if let Some(tip) = newest.filter(|t| !self.superblock.sessions.iter().any(|s| s.id == t.session)) {
            return Err(Error::Member {
                device: place,
                why: format!(
                    "it went on alone since it was given up (its last commit, {} of generation {}, is of session \
                     {:#x}, which this volume never went through): the members went on apart; close the volume \
                     and keep one side (`Volume::resolve`, `volume resolve`)",
                    tip.seq, tip.generation, tip.session
                ),
            });
        }
        let mut device = device;
        device.reserve_buffer();
        self.devices[place] = Some(device);
        // A device new to the volume: look at every device's resets again.
        self.resets_seen = u64::MAX;
        self.lanes_moved();
        self.tags = super::volume_tags(&self.superblock, &self.devices);
        let mut actions = Vec::new();
        for lane in 0..self.lanes.len() {
            if self.lanes[lane].device == place {
                match self.plan_lane(lane, &all, true, None) {
                    Ok(lane_actions) => actions.extend(lane_actions),
                    Err(error) => {
                        self.devices[place] = None;
                        self.lanes_moved();
                        return Err(error);
                    }
                }
            }
        }
        self.take_zone_actions(actions)?;
        self.bring_online(place);
        self.commit()?;
        log::info!("device place {place} rejoined: {} blocks to resilver", self.missing_on(place));
        Ok(place)
    }

    /// Puts `device`, a new namespace (blank unless `force`), in the place
    /// of failed device `place`: it is reset and labelled into the role,
    /// every copy it should hold is missing, and a resilver writes them.
    /// It must be at least as large (capacity, zone sizes, transfer and
    /// append limits). Commits, writing the metadata to every copy.
    pub fn replace(&mut self, place: usize, mut device: Device, force: bool) -> Result<()> {
        if place >= self.devices.len() {
            return Err(Error::Member { device: place, why: format!("the volume has {} places", self.devices.len()) });
        }
        if self.devices[place].is_some() {
            return Err(Error::Member { device: place, why: "in use: only a failed device is replaced".into() });
        }
        if !force {
            match probe(&mut device, None) {
                Probe::Blank => {}
                other => {
                    let holds = describe_probe(&other, self.volume_id);
                    return Err(Error::Member {
                        device: place,
                        why: format!(
                            "the new device is not blank (it holds {holds}); replace with force to overwrite it"
                        ),
                    });
                }
            }
        }
        self.commit()?;
        self.check_replacement(place, &mut device)?;
        // Every copy on the place is missing from now on.
        let lanes: Vec<usize> = (0..self.lanes.len()).filter(|&l| self.lanes[l].device == place).collect();
        let copies: Vec<(ExtentId, usize)> = self
            .table
            .iter()
            .flat_map(|(id, entry)| lanes.iter().filter(move |&&l| !entry.on(l).is_missing()).map(move |&l| (id, l)))
            .collect();
        for (id, lane) in copies {
            self.move_extent(id, lane, Location::MISSING, false);
        }
        if device.is_zoned() {
            let request = device.ns.zone_send(0, ZoneSendAction::Reset, true, 0)?;
            device.run(request, "Zone Reset (all)")?;
        }
        self.superblock.devices[place] =
            (device.ns.nsid(), device.ns.block_size(), device.ns.capacity_blocks(), device.is_zoned());
        self.copy_supported[place] = device.ns.copy_usable();
        self.zone_limits[place] = device.ns.zones().and_then(|z| {
            let active = z.max_active_zones?;
            Some((z.max_open_zones.unwrap_or(active).min(active), active))
        });
        device.reserve_buffer();
        self.devices[place] = Some(device);
        // A device new to the volume: look at every device's resets again.
        self.resets_seen = u64::MAX;
        self.lanes_moved();
        self.tags = super::volume_tags(&self.superblock, &self.devices);
        for &lane in &lanes {
            self.lanes[lane].table = self.fresh_table(lane);
            self.watch_lane(lane);
            self.lanes[lane].written = vec![0; self.lanes[lane].table.zone_count() as usize];
            self.lanes[lane].appended.clear();
            for zone in 0..self.lanes[lane].sealed.len() as u32 {
                self.unseal(lane, zone);
            }
            // The new device may have more or fewer zones than the old.
            self.lanes[lane].sealed = vec![0; self.lanes[lane].table.zone_count() as usize];
        }
        // The metadata copies on the place go back where format puts them.
        let g = self.journal.g;
        for (index, copy) in super::meta_copies(self.superblock.devices.len(), g).into_iter().enumerate() {
            if copy.device == place {
                self.journal.copies[index].segments = copy.segments;
                self.superblock.meta_segments[index] = copy.segments;
            }
        }
        // A new member: the device the place was taken from is no longer it.
        let id = crate::journal::random_u64();
        self.members[place] = Member::new(MemberRecord { id, failed: true, ..MemberRecord::default() });
        self.journal.label.generation += 1;
        self.bring_online(place);
        self.commit()?;
        self.label_member(place)?;
        log::info!("device place {place} replaced: {} blocks to resilver", self.missing_on(place));
        Ok(())
    }

    /// Sets up the zones of `device`, new to place `place` (a replacement
    /// or an addition), and checks what every member must have: the
    /// volume's block tags, transfers, Zone Append and zones that take its
    /// largest extent. Returns its software zone size (0 on a zoned
    /// namespace).
    pub(super) fn load_new_device(&self, place: usize, device: &mut Device) -> Result<u32> {
        let refuse = |why: String| Err(Error::Member { device: place, why });
        super::check_tags(&self.superblock, place, device)?;
        let bytes = device.ns.capacity_blocks() * u64::from(device.ns.block_size());
        let blocks = match (device.is_zoned(), self.superblock.software_zone_blocks) {
            (true, _) => 0,
            (false, 0) => self.software_zones_for_replacement(bytes),
            (false, blocks) => blocks,
        };
        device.load_zones(blocks)?;
        let max_extent = self.superblock.max_extent_blocks as usize * BLOCK_SIZE;
        if device.max_transfer_bytes < max_extent {
            return refuse(format!("transfers of {} bytes, extents are up to {max_extent}", device.max_transfer_bytes));
        }
        if device.is_zoned()
            && device.append_max_bytes < max_extent
            && self.options.write_mode != super::WriteMode::Ordered
        {
            return refuse(format!(
                "Zone Append of up to {} bytes, extents are up to {max_extent} (open with ordered writes)",
                device.append_max_bytes
            ));
        }
        let smallest = super::data_capacities(device, &self.superblock).into_iter().min().unwrap_or(0);
        if smallest < self.superblock.max_extent_blocks {
            return refuse(format!(
                "zones of {smallest} blocks, extents are up to {}",
                self.superblock.max_extent_blocks
            ));
        }
        Ok(blocks)
    }

    /// Checks that `device` can take place `place`, and sets up its zones.
    fn check_replacement(&mut self, place: usize, device: &mut Device) -> Result<()> {
        let too_small = |why: String| Err(Error::Member { device: place, why });
        let (_, lba_size, capacity, _) = self.superblock.devices[place];
        let old_bytes = capacity * u64::from(lba_size);
        let new_bytes = device.ns.capacity_blocks() * u64::from(device.ns.block_size());
        if new_bytes < old_bytes {
            return too_small(format!("{new_bytes} bytes, the place held {old_bytes}"));
        }
        let blocks = self.load_new_device(place, device)?;
        let g = self.journal.g;
        let meta_zones = super::meta_zones_on(self.superblock.devices.len(), g, place) as usize;
        if device.zones.len() < meta_zones + 4 {
            return too_small(format!("{} zones", device.zones.len()));
        }
        // Its metadata segments must hold what the others hold.
        let needed = self.superblock.meta_segment_blocks;
        for copy in super::meta_copies(self.superblock.devices.len(), g).into_iter().filter(|c| c.device == place) {
            for segment in 0..2 {
                let have = crate::journal::layout::segment_capacity(device, copy, g, segment);
                if have < needed {
                    return too_small(format!(
                        "metadata segments of {have} blocks, the volume's take {needed} (on a conventional \
                         namespace, give larger software zones)"
                    ));
                }
            }
        }
        super::check_locations(&self.superblock, place, device)?;
        self.check_room_for_copies(place, device)?;
        if !device.is_zoned() {
            // The first conventional member: its software zones are the
            // volume's from now on (the labels say so).
            self.superblock.software_zone_blocks = blocks;
            self.journal.label.superblock.software_zone_blocks = blocks;
        }
        Ok(())
    }

    /// Checks that `device`, its zones loaded, can hold every copy place
    /// `place` must receive, by placing them in a table of its zones as the
    /// resilver will: in the physical order of the copy it reads from, each
    /// into stream 0's zones, whole extents only. Bytes alone do not tell:
    /// zones that take fewer whole extents hold less than their size.
    fn check_room_for_copies(&self, place: usize, device: &Device) -> Result<()> {
        let source = (0..self.lanes.len()).find(|&l| self.lanes[l].device != place && self.lane_online(l));
        for lane in (0..self.lanes.len()).filter(|&l| self.lanes[l].device == place) {
            let mut table = self.table_on(lane, device);
            let mut copies: Vec<(Location, u32)> = self
                .table
                .iter()
                .filter_map(|(_, entry)| {
                    let at = entry.on(source?);
                    (!at.is_missing()).then_some((at, entry.blocks))
                })
                .collect();
            copies.sort_unstable_by_key(|&(at, _)| (at.zone, at.offset));
            let needed: u64 = copies.iter().map(|&(_, blocks)| u64::from(blocks)).sum();
            if let Some(placed) =
                copies.iter().position(|&(_, blocks)| table.allocate(Slot::Stream(0), blocks).is_err())
            {
                let block = BLOCK_SIZE as u64;
                return Err(Error::Member {
                    device: place,
                    why: format!(
                        "the new device cannot hold the copies it must receive: {} extents ({} bytes), and its data \
                         zones ({} bytes, beyond its metadata and the zones kept for reclaim) take only the first \
                         {placed} of them, whole",
                        copies.len(),
                        needed * block,
                        table.usable_blocks() * block,
                    ),
                });
            }
        }
        Ok(())
    }

    /// Software zones for a conventional device taking the place of a ZNS
    /// one, on a volume with no conventional member yet: the size asked at
    /// open ([`crate::VolumeOptions::software_zone_bytes`]), else the
    /// default for its capacity, but never so small that its metadata
    /// segments would hold less than the volume's or a zone less than the
    /// largest extent (with the checksum area after, on a volume with
    /// areas).
    pub(super) fn software_zones_for_replacement(&self, capacity_bytes: u64) -> u32 {
        use crate::journal::layout::{default_software_zone_bytes, with_area};
        let block = BLOCK_SIZE as u64;
        if let Some(bytes) = self.options.software_zone_bytes {
            return (bytes / block) as u32;
        }
        let segment = self.superblock.meta_segment_blocks.div_ceil(u64::from(self.journal.g));
        let data = (default_software_zone_bytes(capacity_bytes, false) / block)
            .max(segment)
            .max(u64::from(self.superblock.max_extent_blocks));
        let bytes = if self.superblock.checksum_area { with_area(data * block) } else { data * block };
        (bytes / block) as u32
    }

    /// An empty zone table for lane `lane` over its device's zones.
    pub(super) fn fresh_table(&self, lane: usize) -> ZoneTable {
        self.table_on(lane, self.dev(self.lanes[lane].device))
    }

    /// An empty zone table for lane `lane` over the zones of `device`, which
    /// is (or is to be) at the lane's place.
    fn table_on(&self, lane: usize, device: &Device) -> ZoneTable {
        let profile = self.superblock.profile;
        let meta_zones = super::meta_zones_on(self.superblock.devices.len(), self.journal.g, self.lanes[lane].device);
        let capacities = super::data_capacities(device, &self.superblock);
        let mut table = ZoneTable::new(
            &capacities,
            |zone| super::lane_owns(profile, lane, meta_zones, zone),
            self.superblock.streams,
            self.superblock.reserve_zones as usize,
        );
        table.set_finish_threshold(self.superblock.finish_threshold_blocks);
        table
    }

    /// Marks place `place` in use again; the next commit rewrites the
    /// metadata on every copy and records it.
    fn bring_online(&mut self, place: usize) {
        let member = &mut self.members[place];
        member.record.failed = false;
        member.why = None;
        member.failures = 0;
        self.superblock.members[place] = member.record;
        self.journal.broken = true;
        self.journal.label.generation += 1;
        // Make sure the change is journaled even if nothing else is.
        self.ops.push(Op::Member { device: place as u8, record: member.record });
        member.journaled = member.record;
    }

    /// Labels place `place` when it holds no metadata copy (a pool's third
    /// device on), so that open knows its device by the label: at format,
    /// and when a new device takes the place.
    pub(super) fn label_member(&mut self, place: usize) -> Result<()> {
        if super::meta_copies_on(self.devices.len(), place) > 0 {
            return Ok(());
        }
        match self.devices[place].as_mut() {
            Some(device) => self.journal.write_member_label(device, place, &self.superblock),
            None => Ok(()),
        }
    }

    pub(super) fn take_zone_actions(&mut self, actions: Vec<ZoneAction>) -> Result<()> {
        for (device, zone, action) in actions {
            self.dev_mut(device).zone_action(zone, action)?;
        }
        Ok(())
    }

    /// Blocks of copies place `place` lacks, over its lanes.
    fn missing_on(&self, place: usize) -> u64 {
        (0..self.lanes.len()).filter(|&l| self.lanes[l].device == place).map(|l| self.missing_blocks(l)).sum()
    }
}

/// What a device that is not blank holds, as a probe found it.
pub(super) fn describe_probe(probe: &Probe, volume_id: u64) -> String {
    match probe {
        Probe::Label(label) if label.volume_id == volume_id => format!("place {} of this volume", label.device_index),
        Probe::Label(label) => format!("a member of volume {:#x}", label.volume_id),
        Probe::Unreadable(what) => format!("unreadable places ({what})"),
        Probe::Unrecognized => "data that is not a volume's".into(),
        Probe::OtherVersion(version) => format!("a volume of format version {version}"),
        Probe::Blank => "nothing".into(),
    }
}
