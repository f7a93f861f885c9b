//! Format and open: a new volume on blank devices, or the committed state
//! rebuilt from the journal and the devices' zones.

use super::{Extent, MetaLog, Volume, VolumeOptions, WriteMode};
use crate::checksum::crc;
use crate::device::{zone_has_write_pointer, Device};
use crate::error::{Error, Result};
use crate::journal::layout::{meta_lba, meta_zones_per_segment, read_meta, read_segment};
use crate::journal::{self, Checkpoint, Header, Kind, Op, Superblock, HEADER_BYTES};
use crate::zones::{ZoneTable, ZoneUse};
use crate::{Location, BLOCK_SIZE};
use nvme_driver::cmd::zns::ZoneSendAction;
use nvme_driver::spec::zns::{ZoneDescriptor, ZoneState};

impl Volume {
    /// Creates a new volume on `devices` (one, or two for a mirror),
    /// destroying what they held, and commits it.
    pub fn format(mut devices: Vec<Device>, options: &VolumeOptions) -> Result<Volume> {
        let profile = options.profile;
        if devices.len() != profile.devices() {
            return Err(Error::InvalidConfig(format!(
                "profile {profile:?} takes {} namespace(s), got {}",
                profile.devices(),
                devices.len()
            )));
        }
        if options.streams == 0 || options.streams > 64 {
            return Err(Error::InvalidConfig(format!("{} streams: expected 1..=64", options.streams)));
        }
        let mut descriptors = Vec::new();
        let mut software_zone_blocks = 0;
        for device in &mut devices {
            let blocks = software_zone_blocks_for(device, options)?;
            if !device.is_zoned() {
                software_zone_blocks = blocks;
            }
            descriptors.push(device.load_zones(blocks)?);
        }
        // Format destroys: every zone of every zoned namespace is reset.
        for device in &mut devices {
            if device.is_zoned() {
                let request = device.ns.zone_send(0, ZoneSendAction::Reset, true, 0)?;
                device.run(request, "Zone Reset (all)")?;
            }
        }
        let zones_per_segment = meta_zones_per_segment(&devices[0])?;
        let max_extent_blocks = max_extent_blocks(&devices, options);
        let superblock = Superblock {
            profile,
            streams: options.streams,
            software_zone_blocks,
            meta_zones_per_segment: zones_per_segment,
            reserve_zones: options.reserve_zones,
            max_extent_blocks,
            finish_threshold_blocks: (options.finish_threshold_bytes / BLOCK_SIZE as u64).min(u64::from(u32::MAX))
                as u32,
            devices: devices
                .iter()
                .map(|d| (d.ns.nsid(), d.ns.block_size(), d.ns.capacity_blocks(), d.is_zoned()))
                .collect(),
        };
        let volume_id = new_volume_id();
        let mut volume = Volume::assemble(devices, superblock, volume_id, options.clone())?;
        for _ in &descriptors {}
        // Invalidate segment 1's head (a conventional namespace may hold
        // an older volume's checkpoint there); segment 0 gets the new one.
        if !volume.devices[0].is_zoned() {
            let lba = volume.meta_lba(1, 0);
            volume.devices[0].write_at(lba, &[0u8; BLOCK_SIZE])?;
        }
        volume.write_checkpoint(0, 1, 1)?;
        volume.devices[0].flush()?;
        volume.close_meta_zone()?;
        Ok(volume)
    }

    /// Opens the volume on `devices`, in the order they were formatted,
    /// rebuilding exactly the committed state.
    pub fn open(mut devices: Vec<Device>, options: &VolumeOptions) -> Result<Volume> {
        if devices.is_empty() {
            return Err(Error::InvalidArgument("no devices".into()));
        }
        let blocks = software_zone_blocks_for(&devices[0], options)?;
        let first_descriptors = devices[0].load_zones(blocks)?;
        let zones_per_segment = meta_zones_per_segment(&devices[0])?;
        // The newest whole checkpoint of the two segments.
        let mut best: Option<(u32, Header, Checkpoint)> = None;
        for segment in 0..2 {
            if let Some((header, checkpoint)) = read_checkpoint(&mut devices[0], zones_per_segment, segment)? {
                if best.as_ref().is_none_or(|(_, h, _)| header.generation > h.generation) {
                    best = Some((segment, header, checkpoint));
                }
            }
        }
        let Some((segment, header, checkpoint)) = best else {
            return Err(Error::NoVolume);
        };
        let superblock = checkpoint.superblock.clone();
        check_devices(&superblock, &devices, zones_per_segment)?;
        let mut descriptors = vec![first_descriptors];
        for device in devices.iter_mut().skip(1) {
            let blocks = if device.is_zoned() { 0 } else { superblock.software_zone_blocks };
            descriptors.push(device.load_zones(blocks)?);
        }
        let mut volume = Volume::assemble(devices, superblock, header.volume_id, options.clone())?;
        volume.log = MetaLog {
            zones_per_segment,
            segment,
            offset: header.record_blocks(),
            checkpoint_blocks: header.record_blocks(),
            generation: header.generation,
            seq: header.seq,
        };
        volume.loading = true;
        volume.load_checkpoint(checkpoint)?;
        volume.replay()?;
        volume.loading = false;
        let rotate = volume.restore_zones(&descriptors)?;
        if rotate {
            volume.rotate()?;
            volume.devices[0].flush()?;
            volume.close_meta_zone()?;
        }
        Ok(volume)
    }

    pub(super) fn load_checkpoint(&mut self, checkpoint: Checkpoint) -> Result<()> {
        self.next_id = checkpoint.next_id;
        for record in checkpoint.extents {
            self.apply(Op::Add(record))?;
        }
        // The checkpoint's zone table must agree with its extents.
        if checkpoint.zone_valid.len() != self.lanes.len() {
            return Err(Error::Corrupt(format!("zone table for {} lanes", checkpoint.zone_valid.len())));
        }
        for (lane_index, (lane, stored)) in self.lanes.iter().zip(&checkpoint.zone_valid).enumerate() {
            if stored.len() != lane.table.zone_count() as usize {
                return Err(Error::Corrupt(format!("lane {lane_index}: zone table of {} zones", stored.len())));
            }
            let mut derived_valid = vec![0u32; stored.len()];
            for (location, id) in &lane.index {
                derived_valid[location.zone as usize] += self.extents[id].blocks;
            }
            for (zone, &valid) in stored.iter().enumerate() {
                let derived = derived_valid[zone];
                if derived != valid {
                    return Err(Error::Corrupt(format!(
                        "lane {lane_index} zone {zone}: checkpoint says {valid} valid blocks, extents say {derived}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Replays the deltas after the checkpoint, up to the first record
    /// that fails a check.
    pub(super) fn replay(&mut self) -> Result<()> {
        let capacity = self.segment_blocks();
        let mut block = vec![0u8; BLOCK_SIZE];
        loop {
            if self.log.offset >= capacity {
                break;
            }
            let lba = self.meta_lba(self.log.segment, self.log.offset);
            if read_meta(&mut self.devices[0], lba, &mut block).is_err() {
                break;
            }
            let Some(header) = Header::decode(&block) else { break };
            if header.kind != Kind::Delta
                || header.volume_id != self.volume_id
                || header.generation != self.log.generation
                || header.seq != self.log.seq + 1
                || self.log.offset + header.record_blocks() > capacity
            {
                break;
            }
            let Ok(record) = self.read_segment(self.log.segment, self.log.offset, header.record_blocks()) else {
                break;
            };
            let payload = &record[HEADER_BYTES..HEADER_BYTES + header.payload_bytes as usize];
            if crc(payload) != header.payload_crc {
                break;
            }
            for op in journal::decode_ops(payload)? {
                self.apply(op)?;
            }
            self.log.offset += header.record_blocks();
            self.log.seq = header.seq;
        }
        Ok(())
    }

    /// Applies a journaled operation to the in-memory state (at open).
    pub(super) fn apply(&mut self, op: Op) -> Result<()> {
        match op {
            Op::Add(record) => {
                if record.locations.len() != self.lanes.len() || record.crcs.len() != record.blocks as usize {
                    return Err(Error::Corrupt(format!("extent {}: wrong shape", record.id)));
                }
                for (lane, &location) in record.locations.iter().enumerate() {
                    self.check_location(lane, location, record.blocks)?;
                }
                self.next_id = self.next_id.max(record.id + 1);
                let extent = Extent {
                    owner: record.owner,
                    stream: record.stream,
                    blocks: record.blocks,
                    locations: record.locations,
                    crcs: record.crcs.into_boxed_slice(),
                };
                self.insert_extent(record.id, extent, false)
            }
            Op::Free(id) => self.remove_extent(id, false).map(drop),
            Op::Move { id, lane, to } => {
                let lane = usize::from(lane);
                let blocks = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?.blocks;
                if lane >= self.lanes.len() {
                    return Err(Error::Corrupt(format!("move of extent {id} to lane {lane}")));
                }
                self.check_location(lane, to, blocks)?;
                self.move_extent(id, lane, to, false);
                Ok(())
            }
        }
    }

    pub(super) fn check_location(&self, lane: usize, location: Location, blocks: u32) -> Result<()> {
        let table = &self.lanes[lane].table;
        let ok = location.zone < table.zone_count() && {
            let zone = table.zone(location.zone);
            zone.usage != ZoneUse::NotOwned
                && u64::from(location.offset) + u64::from(blocks) <= u64::from(zone.capacity)
        };
        if ok {
            Ok(())
        } else {
            Err(Error::Corrupt(format!("lane {lane}: {blocks} blocks at {location:?} lie outside its zones")))
        }
    }

    /// Rebuilds zone states from the device and the extents. Returns
    /// whether the metadata log must move to a fresh segment.
    pub(super) fn restore_zones(&mut self, descriptors: &[Vec<ZoneDescriptor>]) -> Result<bool> {
        for lane_index in 0..self.lanes.len() {
            let device_index = self.lanes[lane_index].device;
            let zoned = self.devices[device_index].is_zoned();
            // Per zone: the end of its furthest live extent, and live blocks.
            let zone_count = self.lanes[lane_index].table.zone_count() as usize;
            let mut live_end = vec![0u32; zone_count];
            let mut valid = vec![0u32; zone_count];
            for (&location, id) in &self.lanes[lane_index].index {
                let blocks = self.extents[id].blocks;
                let zone = location.zone as usize;
                live_end[zone] = live_end[zone].max(location.offset + blocks);
                valid[zone] += blocks;
            }
            // Start over from empty tables; `apply` filled valid counts.
            let capacities: Vec<u32> = self.devices[device_index].zones.iter().map(|z| z.capacity_blocks).collect();
            let old = &self.lanes[lane_index].table;
            let owned: Vec<bool> = (0..old.zone_count()).map(|z| old.zone(z).usage != ZoneUse::NotOwned).collect();
            let mut table = ZoneTable::new(
                &capacities,
                |z| owned[z as usize],
                self.superblock.streams,
                self.superblock.reserve_zones as usize,
            );
            table.set_finish_threshold(self.superblock.finish_threshold_blocks);
            for zone in 0..zone_count as u32 {
                if !owned[zone as usize] {
                    continue;
                }
                let z = zone as usize;
                let capacity = capacities[z];
                let (allocated, needs_finish) = if zoned {
                    let d = &descriptors[device_index][z];
                    let lpb = self.devices[device_index].lbas_per_block;
                    match d.state {
                        ZoneState::Empty => (0, false),
                        ZoneState::Full | ZoneState::ReadOnly | ZoneState::Offline => (capacity, false),
                        _ => (((d.wp.saturating_sub(d.zslba)) / lpb).min(u64::from(capacity)) as u32, true),
                    }
                } else {
                    (live_end[z], false)
                };
                if live_end[z] > allocated {
                    return Err(Error::Corrupt(format!(
                        "lane {lane_index} zone {zone}: committed data reaches block {} but the zone holds {allocated}",
                        live_end[z]
                    )));
                }
                table.restore(zone, allocated, valid[z]);
                self.lanes[lane_index].written[z] = allocated;
                if allocated > 0 && valid[z] == 0 {
                    // Nothing committed lives here: uncommitted writes or a
                    // reset that a power cut interrupted.
                    if zoned {
                        self.devices[device_index].zone_action(zone, ZoneSendAction::Reset)?;
                    }
                    self.lanes[lane_index].written[z] = 0;
                    table.reset(zone);
                    self.stats.zones_reset += 1;
                } else if needs_finish && zoned && allocated > 0 {
                    // Reopened volumes do not append to old zones: finish
                    // it, releasing its active resource.
                    self.devices[device_index].zone_action(zone, ZoneSendAction::Finish)?;
                    self.stats.zones_finished += 1;
                }
            }
            self.lanes[lane_index].table = table;
        }
        // The metadata segments.
        if !self.devices[0].is_zoned() {
            return Ok(false);
        }
        let g = self.log.zones_per_segment;
        let current = self.log.segment;
        let mut rotate = false;
        let mut expected_left = self.log.offset;
        for zone in 0..2 * g {
            let d = descriptors[0][zone as usize];
            let segment = zone / g;
            if segment != current {
                if d.state != ZoneState::Empty {
                    // The other segment: an older checkpoint or a torn one.
                    self.devices[0].zone_action(zone, ZoneSendAction::Reset)?;
                }
                continue;
            }
            let capacity = u64::from(self.devices[0].zones[zone as usize].capacity_blocks);
            let expected = expected_left.min(capacity);
            expected_left -= expected;
            // In LBAs: a power cut can leave the write pointer inside a
            // 4 KiB block, and the next record must start at a block.
            let lpb = self.devices[0].lbas_per_block;
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
        Ok(rotate)
    }
}

fn software_zone_blocks_for(device: &Device, options: &VolumeOptions) -> Result<u32> {
    if device.is_zoned() {
        return Ok(0);
    }
    let capacity = device.ns.capacity_blocks() * u64::from(device.ns.block_size());
    let bytes = options.software_zone_bytes.unwrap_or_else(|| default_software_zone_bytes(capacity));
    if bytes < BLOCK_SIZE as u64 || !bytes.is_multiple_of(BLOCK_SIZE as u64) || bytes > u64::from(u32::MAX) * 4096 {
        return Err(Error::InvalidConfig(format!("software zones of {bytes} bytes: expected a multiple of 4096")));
    }
    Ok((bytes / BLOCK_SIZE as u64) as u32)
}

fn max_extent_blocks(devices: &[Device], options: &VolumeOptions) -> u32 {
    let mut bytes = options.max_extent_bytes.max(BLOCK_SIZE);
    for d in devices {
        bytes = bytes.min(d.max_transfer_bytes);
        if d.is_zoned() && options.write_mode != WriteMode::Ordered && d.append_max_bytes >= BLOCK_SIZE {
            bytes = bytes.min(d.append_max_bytes);
        }
        let smallest_zone = d.zones.iter().map(|z| z.capacity_blocks as usize * BLOCK_SIZE).min().unwrap_or(0);
        bytes = bytes.min(smallest_zone);
    }
    (bytes / BLOCK_SIZE) as u32
}

fn check_devices(superblock: &Superblock, devices: &[Device], zones_per_segment: u32) -> Result<()> {
    if superblock.devices.len() != devices.len() {
        return Err(Error::InvalidConfig(format!(
            "the volume spans {} namespace(s), {} given",
            superblock.devices.len(),
            devices.len()
        )));
    }
    for (index, (&(nsid, lba, capacity, zoned), device)) in superblock.devices.iter().zip(devices).enumerate() {
        let found = (device.ns.nsid(), device.ns.block_size(), device.ns.capacity_blocks(), device.is_zoned());
        if found != (nsid, lba, capacity, zoned) {
            return Err(Error::InvalidConfig(format!(
                "device {index}: the volume expects NSID {nsid}, {lba}-byte LBAs, {capacity} LBAs, zoned {zoned}; \
                 found {found:?}"
            )));
        }
    }
    if superblock.meta_zones_per_segment != zones_per_segment {
        return Err(Error::Corrupt(format!(
            "metadata segments of {} zones recorded, {zones_per_segment} computed",
            superblock.meta_zones_per_segment
        )));
    }
    Ok(())
}

/// The checkpoint at the start of `segment`, if whole.
fn read_checkpoint(device: &mut Device, g: u32, segment: u32) -> Result<Option<(Header, Checkpoint)>> {
    let mut block = vec![0u8; BLOCK_SIZE];
    if read_meta(device, meta_lba(device, g, segment, 0), &mut block).is_err() {
        return Ok(None);
    }
    let Some(header) = Header::decode(&block) else { return Ok(None) };
    if header.kind != Kind::Checkpoint {
        return Ok(None);
    }
    let segment_blocks: u64 = device.zones[(segment * g) as usize..((segment + 1) * g) as usize]
        .iter()
        .map(|z| u64::from(z.capacity_blocks))
        .sum();
    if header.record_blocks() > segment_blocks {
        return Ok(None);
    }
    let Ok(record) = read_segment(device, g, segment, 0, header.record_blocks()) else { return Ok(None) };
    let payload = &record[HEADER_BYTES..HEADER_BYTES + header.payload_bytes as usize];
    if crc(payload) != header.payload_crc {
        return Ok(None);
    }
    Ok(Some((header, journal::decode_checkpoint(payload)?)))
}

fn new_volume_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.write_u32(std::process::id());
    hasher.finish() | 1
}

/// Default software zone size for a conventional namespace of `bytes`.
fn default_software_zone_bytes(bytes: u64) -> u64 {
    (bytes / 512).next_power_of_two().clamp(1 << 20, 256 << 20)
}
