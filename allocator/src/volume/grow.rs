//! A pool grows online: [`Volume::add`] puts a blank namespace in a new
//! place, writable at once (ZFS's `zpool add`, btrfs's `device add`).

use super::member::Member;
use super::{Lane, Volume};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::journal::recovery::{probe, Probe};
use crate::journal::{MemberRecord, Op};
use crate::{Profile, BLOCK_SIZE};
use nvme_driver::cmd::zns::ZoneSendAction;
use nvme_driver::spec::identify::Oncs;
use std::collections::HashMap;

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
        self.check_addition(place, &mut device)?;
        if device.is_zoned() {
            let request = device.ns.zone_send(0, ZoneSendAction::Reset, true, 0)?;
            device.run(request, "Zone Reset (all)")?;
        }
        // Every per-place and per-lane vector grows by one; the pending
        // writes' slab by what the device's buffers let fly.
        let more_writes = device.pool.capacity() + device.fill_pool.as_ref().map_or(0, |p| p.capacity());
        self.writes.reserve(more_writes);
        self.free_slots.reserve(more_writes);
        self.done.reserve(more_writes);
        if self.area {
            device.reserve_buffer();
        }
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
        let lane = self.lanes.len();
        self.lanes.push(Lane {
            device: place,
            table: crate::zones::ZoneTable::new(&[], |_| false, 1, 0),
            written: Vec::new(),
            sealed: Vec::new(),
            appended: HashMap::new(),
            spare_maps: Vec::new(),
        });
        let table = self.fresh_table(lane);
        let zones = table.zone_count() as usize;
        self.lanes[lane].table = table;
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
    /// zone limits take the volume's streams.
    fn check_addition(&mut self, place: usize, device: &mut Device) -> Result<()> {
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
        if !device.is_zoned() && self.superblock.software_zone_blocks == 0 {
            // The first conventional member: its software zones are the
            // volume's from now on (the labels say so).
            self.superblock.software_zone_blocks = blocks;
            self.journal.label.superblock.software_zone_blocks = blocks;
        }
        Ok(())
    }
}
