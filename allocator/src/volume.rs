//! The volume: placement, the write path, reads with repair, the journal,
//! free and reclaim. See the [crate documentation](crate).

use crate::checksum::{block_crcs, crc, mismatches};
use crate::device::{self, zone_has_write_pointer, Device, SYNC_TOKEN};
use crate::error::{Error, Result};
use crate::journal::{self, Checkpoint, ExtentRecord, Header, Kind, Op, Superblock, HEADER_BYTES};
use crate::zones::{PlaceError, Retired, Slot, ZoneTable, ZoneUse};
use crate::{ExtentId, Location, Profile, BLOCK_SIZE};
use nvme_driver::cmd::zns::ZoneSendAction;
use nvme_driver::dma::DmaMemory;
use nvme_driver::spec::identify::Oncs;
use nvme_driver::spec::status::{GenericStatus, StatusCode};
use nvme_driver::spec::zns::{ZoneDescriptor, ZoneState};
use nvme_driver::{IoBuffer, IoCompletion};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How data reaches a zoned namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum WriteMode {
    /// Zone Append where the device has it (every ZNS device must), else
    /// ordered writes.
    Auto,
    /// Zone Append: many appends in flight per zone; the device assigns
    /// each one's LBA. Extents are bounded by ZASL.
    Append,
    /// Writes at the write pointer, one in flight per zone; parallelism
    /// comes from streams writing different zones.
    Ordered,
}

/// Format and open options.
#[derive(Clone, Debug)]
pub struct VolumeOptions {
    /// Copies and namespaces (format only).
    pub profile: Profile,
    /// Write streams (lifetime classes), each with its own open zone
    /// (format only).
    pub streams: u8,
    /// Software zone size on conventional namespaces; `None` picks one
    /// from the capacity. Must be given again at open if it was at format.
    pub software_zone_bytes: Option<u64>,
    /// Empty zones per lane kept back for reclaim (format only).
    pub reserve_zones: u32,
    /// Largest extent (format only; also bounded by MDTS and ZASL).
    pub max_extent_bytes: usize,
    /// Retire a zone once less than this is left in it (format only);
    /// 0 retires only when the next extent does not fit.
    pub finish_threshold_bytes: u64,
    /// How data reaches a zoned namespace (ignored on conventional ones).
    pub write_mode: WriteMode,
    /// Reclaim zones with at most this fraction live.
    pub reclaim_max_valid_ratio: f64,
    /// Bound on every wait.
    pub timeout: Duration,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            profile: Profile::Single,
            streams: 1,
            software_zone_bytes: None,
            reserve_zones: 1,
            max_extent_bytes: 1 << 20,
            finish_threshold_bytes: 0,
            write_mode: WriteMode::Auto,
            reclaim_max_valid_ratio: 0.75,
            timeout: Duration::from_secs(30),
        }
    }
}

/// The outcome of an asynchronous write.
#[derive(Debug)]
pub struct WriteDone {
    /// The extent the write created (as [`Volume::submit_write`] returned).
    pub id: ExtentId,
    /// `Ok`: the extent is readable and will be journaled at the next
    /// commit.
    pub result: Result<()>,
}

/// A block whose copy failed its checksum or could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BadBlock {
    /// The extent holding the block.
    pub extent: ExtentId,
    /// The copy (lane) that was bad; the other lanes may hold good data.
    pub lane: u8,
    /// Block index within the extent.
    pub block: u32,
    /// The copy could not be read at all (a media error), rather than read
    /// with a wrong checksum.
    pub unreadable: bool,
}

/// What a read found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadOutcome {
    /// Blocks repaired from the other copy (they are in
    /// [`Volume::bad_blocks`] too).
    pub repaired: Vec<u32>,
}

/// What one commit did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CommitInfo {
    /// The journal sequence number now durable.
    pub seq: u64,
    /// Operations journaled.
    pub ops: usize,
    /// A checkpoint was written (the metadata segment rotated).
    pub checkpoint: bool,
    /// Zones reset because nothing in them is live.
    pub zones_reset: usize,
}

/// Progress of reclaim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ReclaimProgress {
    /// No zone is below the live ratio.
    Idle,
    /// Some blocks moved; the zone still holds live data.
    InProgress {
        /// The lane (copy) being reclaimed.
        lane: u8,
        /// The zone being emptied.
        zone: u32,
        /// 4 KiB blocks relocated by this step.
        moved_blocks: u64,
    },
    /// The zone was emptied, the moves committed and the zone reset.
    Reclaimed {
        /// The lane (copy) reclaimed.
        lane: u8,
        /// The zone reset.
        zone: u32,
        /// 4 KiB blocks relocated by this step.
        moved_blocks: u64,
    },
}

/// Counters and gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct VolumeStats {
    /// Bytes the volume can hold ([`Volume::capacity_bytes`]).
    pub capacity_bytes: u64,
    /// Bytes of live data in one copy.
    pub valid_bytes: u64,
    /// Live extents.
    pub extents: u64,
    /// Empty zones, summed over the lanes.
    pub empty_zones: u64,
    /// Zones on the volume's namespaces, summed over the lanes (metadata and
    /// other lanes' zones included).
    pub zones: u64,
    /// Writes submitted since open (one per extent, whatever the copies).
    pub writes: u64,
    /// Bytes of those writes, counted once per extent.
    pub write_bytes: u64,
    /// Commits that journaled something.
    pub commits: u64,
    /// Checkpoints written (metadata segment rotations).
    pub checkpoints: u64,
    /// Zones finished on the device (Zone Management Send, action Finish
    /// Zone, ZNS Command Set 1.1 §3.4.3), freeing an active resource.
    pub zones_finished: u64,
    /// Zones reset because nothing in them was live.
    pub zones_reset: u64,
    /// Bytes moved by reclaim and repair relocations.
    pub relocated_bytes: u64,
    /// Copy commands issued by relocation (NVM Command Set 1.0 §3.2.2).
    pub copy_commands: u64,
    /// Blocks repaired by reads from another copy.
    pub repaired_blocks: u64,
    /// Time spent computing crc32c on the write path, in nanoseconds (zero
    /// when callers pass their own checksums).
    pub checksum_ns: u64,
}

/// One copy of an extent, as [`Volume::extents_from`] yields it.
#[derive(Clone, Copy, Debug)]
pub struct ExtentRef<'a> {
    /// The extent.
    pub id: ExtentId,
    /// Its owner, as given to [`Volume::submit_write`].
    pub owner: u64,
    /// Where this copy lives on its lane.
    pub location: Location,
    /// First LBA on the lane's namespace.
    pub lba: u64,
    /// Length, in 4 KiB blocks.
    pub blocks: u32,
    /// The crc32c of each 4 KiB block, in order (the extent map's checksums,
    /// to verify reads against).
    pub crcs: &'a [u32],
}

#[derive(Debug)]
struct Extent {
    owner: u64,
    stream: u8,
    blocks: u32,
    locations: Vec<Location>,
    crcs: Box<[u32]>,
}

#[derive(Debug)]
struct Lane {
    device: usize,
    table: ZoneTable,
    /// Live extents by position.
    index: BTreeMap<Location, ExtentId>,
    /// Blocks written successfully, per zone.
    written: Vec<u32>,
}

#[derive(Debug)]
struct PendingWrite {
    id: ExtentId,
    owner: u64,
    stream: u8,
    blocks: u32,
    crcs: Vec<u32>,
    zones: Vec<u32>,
    locations: Vec<Option<Location>>,
    remaining: u8,
    error: Option<Error>,
    /// The submitter already got the error; don't report it again.
    reported: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Append,
    Ordered,
    Conventional,
}

#[derive(Debug)]
struct MetaLog {
    zones_per_segment: u32,
    segment: u32,
    /// Next free block in the segment.
    offset: u64,
    /// Blocks the segment's checkpoint takes.
    checkpoint_blocks: u64,
    generation: u64,
    seq: u64,
}

/// A volume over one or two namespaces. See the [crate documentation](crate).
#[derive(Debug)]
pub struct Volume {
    devices: Vec<Device>,
    lanes: Vec<Lane>,
    superblock: Superblock,
    volume_id: u64,
    options: VolumeOptions,
    extents: HashMap<ExtentId, Extent>,
    next_id: ExtentId,
    ops: Vec<Op>,
    log: MetaLog,
    writes: Vec<Option<PendingWrite>>,
    free_slots: Vec<usize>,
    done: VecDeque<WriteDone>,
    /// Zones retired with writes possibly in flight: finish (or just
    /// deactivate) them once idle.
    retiring: Vec<(usize, u32)>,
    bad_blocks: Vec<BadBlock>,
    /// Per device: (open, active) zone limits, if it has any.
    zone_limits: Vec<Option<(u32, u32)>>,
    /// Per lane: its reclaim zone is open on the device (not closed).
    reclaim_open: Vec<bool>,
    copy_supported: Vec<bool>,
    reclaim: Option<(usize, u32)>,
    next_reclaim_lane: usize,
    stats: VolumeStats,
    scratch: Vec<IoCompletion>,
    /// Replaying the journal at open: zone tables are rebuilt afterwards.
    loading: bool,
}

const LANE_BITS: u32 = 8;

/// Metadata bytes a checkpoint may need for `blocks` of data: every extent
/// as small as a block, with two copies.
fn worst_checkpoint_bytes(blocks: u64, zones: u64) -> u64 {
    HEADER_BYTES as u64 + 4096 + blocks * journal::extent_record_bytes(2, 1) as u64 + 2 * zones * 4 + 64
}

/// Default software zone size for a conventional namespace of `bytes`.
fn default_software_zone_bytes(bytes: u64) -> u64 {
    (bytes / 512).next_power_of_two().clamp(1 << 20, 256 << 20)
}

impl Volume {
    // ---------------------------------------------------------------
    // format and open
    // ---------------------------------------------------------------

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

    /// The in-memory volume around loaded devices, with empty zone tables.
    fn assemble(devices: Vec<Device>, superblock: Superblock, volume_id: u64, options: VolumeOptions) -> Result<Self> {
        let g = superblock.meta_zones_per_segment;
        let meta_zones = 2 * g;
        let profile = superblock.profile;
        let lane_devices: &[usize] = match profile {
            Profile::Single => &[0],
            Profile::Dup => &[0, 0],
            Profile::Mirror => &[0, 1],
        };
        let mut lanes = Vec::new();
        for (lane_index, &device) in lane_devices.iter().enumerate() {
            let owned = |zone| lane_owns(profile, lane_index, meta_zones, zone);
            let capacities: Vec<u32> = devices[device].zones.iter().map(|z| z.capacity_blocks).collect();
            let mut table = ZoneTable::new(&capacities, owned, superblock.streams, superblock.reserve_zones as usize);
            table.set_finish_threshold(superblock.finish_threshold_blocks);
            let data_zones = (0..table.zone_count()).filter(|&z| table.zone(z).usage == ZoneUse::Empty).count();
            let needed = superblock.reserve_zones as usize + usize::from(superblock.streams) + 1;
            if data_zones < needed {
                return Err(Error::InvalidConfig(format!(
                    "lane {} has {data_zones} data zones; {} streams, reclaim and a reserve of {} need {needed}",
                    lanes.len(),
                    superblock.streams,
                    superblock.reserve_zones
                )));
            }
            let written = vec![0; capacities.len()];
            lanes.push(Lane { device, table, index: BTreeMap::new(), written });
        }
        // Zone budget per device. Active: every stream's zone and
        // reclaim's in each of its lanes, plus the metadata zone on the
        // first. Open: the streams' zones, plus one that metadata and
        // reclaim take turns at.
        let mut zone_limits = Vec::new();
        for (index, device) in devices.iter().enumerate() {
            let limits = device.ns.zones().and_then(|z| {
                if z.max_open_zones.is_none() && z.max_active_zones.is_none() {
                    return None;
                }
                let active = z.max_active_zones.unwrap_or(u32::MAX);
                Some((z.max_open_zones.unwrap_or(active).min(active), active))
            });
            let lanes_here = lanes.iter().filter(|l| l.device == index).count() as u32;
            let streams = u32::from(superblock.streams);
            let needed_active = lanes_here * (streams + 1) + u32::from(index == 0);
            let needed_open = lanes_here * streams + 1;
            if let Some((open, active)) = limits {
                if needed_active > active || needed_open > open {
                    return Err(Error::InvalidConfig(format!(
                        "namespace {} allows {open} open and {active} active zones; {streams} stream(s) and reclaim \
                         in {lanes_here} lane(s) plus metadata need {needed_open} open and {needed_active} active",
                        device.ns.nsid(),
                    )));
                }
            }
            zone_limits.push(limits);
        }
        let copy_supported = devices.iter().map(|d| d.ns.supports(Oncs::COPY)).collect();
        let stats = VolumeStats {
            zones: lanes.iter().map(|l| u64::from(l.table.zone_count())).sum(),
            ..VolumeStats::default()
        };
        Ok(Volume {
            devices,
            lanes,
            log: MetaLog {
                zones_per_segment: superblock.meta_zones_per_segment,
                segment: 0,
                offset: 0,
                checkpoint_blocks: 0,
                generation: 0,
                seq: 0,
            },
            superblock,
            volume_id,
            options,
            extents: HashMap::new(),
            next_id: 1,
            ops: Vec::new(),
            writes: Vec::new(),
            free_slots: Vec::new(),
            done: VecDeque::new(),
            retiring: Vec::new(),
            bad_blocks: Vec::new(),
            zone_limits,
            reclaim_open: vec![false; 2],
            copy_supported,
            reclaim: None,
            next_reclaim_lane: 0,
            stats,
            scratch: Vec::new(),
            loading: false,
        })
    }

    fn load_checkpoint(&mut self, checkpoint: Checkpoint) -> Result<()> {
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
    fn replay(&mut self) -> Result<()> {
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
    fn apply(&mut self, op: Op) -> Result<()> {
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

    fn check_location(&self, lane: usize, location: Location, blocks: u32) -> Result<()> {
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
    fn restore_zones(&mut self, descriptors: &[Vec<ZoneDescriptor>]) -> Result<bool> {
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

    // ---------------------------------------------------------------
    // geometry helpers
    // ---------------------------------------------------------------

    fn segment_blocks(&self) -> u64 {
        let g = self.log.zones_per_segment as usize;
        self.devices[0].zones[..g].iter().map(|z| u64::from(z.capacity_blocks)).sum()
    }

    /// The LBA of block `offset` of metadata segment `segment`.
    fn meta_lba(&self, segment: u32, offset: u64) -> u64 {
        let g = self.log.zones_per_segment.max(self.superblock.meta_zones_per_segment);
        meta_lba(&self.devices[0], g, segment, offset)
    }

    fn read_segment(&mut self, segment: u32, offset: u64, blocks: u64) -> Result<Vec<u8>> {
        let g = self.log.zones_per_segment;
        read_segment(&mut self.devices[0], g, segment, offset, blocks)
    }

    /// Writes whole blocks at `offset` of `segment`, split at zone ends.
    fn write_segment(&mut self, segment: u32, offset: u64, data: &[u8]) -> Result<()> {
        let g = self.log.zones_per_segment;
        let mut done = 0usize;
        while done < data.len() {
            let block = offset + (done / BLOCK_SIZE) as u64;
            let (zone, in_zone) = segment_position(&self.devices[0], g, segment, block);
            let room = (u64::from(self.devices[0].zones[zone as usize].capacity_blocks) - in_zone) as usize;
            let len = (room * BLOCK_SIZE).min(data.len() - done);
            let lba = self.devices[0].lba(zone, in_zone as u32);
            self.devices[0].write_at(lba, &data[done..done + len])?;
            done += len;
        }
        Ok(())
    }

    fn mode(&self, device: usize) -> Mode {
        let d = &self.devices[device];
        if !d.is_zoned() {
            return Mode::Conventional;
        }
        match self.options.write_mode {
            WriteMode::Ordered => Mode::Ordered,
            WriteMode::Append | WriteMode::Auto if d.append_max_bytes >= BLOCK_SIZE => Mode::Append,
            _ => Mode::Ordered,
        }
    }

    // ---------------------------------------------------------------
    // the extent map
    // ---------------------------------------------------------------

    fn insert_extent(&mut self, id: ExtentId, extent: Extent, journal: bool) -> Result<()> {
        if self.extents.contains_key(&id) {
            return Err(Error::Corrupt(format!("extent {id} added twice")));
        }
        for (lane, &location) in extent.locations.iter().enumerate() {
            let lane = &mut self.lanes[lane];
            if let Some(other) = lane.index.insert(location, id) {
                return Err(Error::Corrupt(format!("extents {other} and {id} both at {location:?}")));
            }
            if !self.loading {
                lane.table.add_valid(location.zone, extent.blocks);
            }
        }
        if journal {
            self.ops.push(Op::Add(ExtentRecord {
                id,
                owner: extent.owner,
                stream: extent.stream,
                blocks: extent.blocks,
                locations: extent.locations.clone(),
                crcs: extent.crcs.to_vec(),
            }));
        }
        self.extents.insert(id, extent);
        Ok(())
    }

    fn remove_extent(&mut self, id: ExtentId, journal: bool) -> Result<Extent> {
        let extent = self.extents.remove(&id).ok_or(Error::NoSuchExtent(id))?;
        for (lane, &location) in extent.locations.iter().enumerate() {
            let lane = &mut self.lanes[lane];
            lane.index.remove(&location);
            if !self.loading {
                lane.table.remove_valid(location.zone, extent.blocks);
            }
        }
        if journal {
            self.ops.push(Op::Free(id));
        }
        Ok(extent)
    }

    fn move_extent(&mut self, id: ExtentId, lane_index: usize, to: Location, journal: bool) {
        let extent = self.extents.get_mut(&id).expect("moving a live extent");
        let from = extent.locations[lane_index];
        extent.locations[lane_index] = to;
        let blocks = extent.blocks;
        let lane = &mut self.lanes[lane_index];
        lane.index.remove(&from);
        lane.index.insert(to, id);
        if !self.loading {
            lane.table.remove_valid(from.zone, blocks);
            lane.table.add_valid(to.zone, blocks);
        }
        if journal {
            self.ops.push(Op::Move { id, lane: lane_index as u8, to });
        }
    }

    // ---------------------------------------------------------------
    // the write path
    // ---------------------------------------------------------------

    /// Queues a write of `data` (a whole number of 4 KiB blocks, at most
    /// [`Volume::max_extent_bytes`]) to stream `stream`, owned by `owner`
    /// (any number the caller chooses: a file, an object). Returns the new
    /// extent's ID; the outcome arrives through [`Volume::poll`] /
    /// [`Volume::next_done`]. Every copy is written; the extent exists
    /// once all succeed.
    pub fn submit_write(&mut self, stream: u8, data: &[u8], owner: u64) -> Result<ExtentId> {
        self.submit_write_inner(stream, data, owner, None)
    }

    /// [`Volume::submit_write`] with the blocks' checksums computed by the
    /// caller ([`crate::checksum::block_crcs`]), say on worker threads so
    /// that checksumming overlaps I/O. Wrong checksums are the caller's
    /// bug: reads of the extent will report them as corruption.
    pub fn submit_write_with_checksums(
        &mut self,
        stream: u8,
        data: &[u8],
        owner: u64,
        crcs: Vec<u32>,
    ) -> Result<ExtentId> {
        if crcs.len() * BLOCK_SIZE != data.len() {
            return Err(Error::InvalidArgument(format!("{} checksums for {} bytes", crcs.len(), data.len())));
        }
        self.submit_write_inner(stream, data, owner, Some(crcs))
    }

    fn submit_write_inner(&mut self, stream: u8, data: &[u8], owner: u64, crcs: Option<Vec<u32>>) -> Result<ExtentId> {
        self.check_resets()?;
        if stream >= self.superblock.streams {
            return Err(Error::InvalidArgument(format!(
                "stream {stream}: the volume has {} stream(s)",
                self.superblock.streams
            )));
        }
        if data.is_empty() || !data.len().is_multiple_of(BLOCK_SIZE) || data.len() > self.max_extent_bytes() {
            return Err(Error::InvalidArgument(format!(
                "a write of {} bytes: expected a nonzero multiple of 4096 up to {}",
                data.len(),
                self.max_extent_bytes()
            )));
        }
        let blocks = (data.len() / BLOCK_SIZE) as u32;
        let slot = Slot::Stream(stream);
        // Room in every lane first, so a write never lands in one only.
        for lane in &self.lanes {
            let table = &lane.table;
            if table.would_open(slot, blocks) && table.empty_zones() <= self.superblock.reserve_zones as usize {
                return Err(Error::NoSpace);
            }
        }
        let crcs = match crcs {
            Some(crcs) => crcs,
            None => {
                let started = Instant::now();
                let mut crcs = Vec::with_capacity(blocks as usize);
                block_crcs(data, &mut crcs);
                self.stats.checksum_ns += started.elapsed().as_nanos() as u64;
                crcs
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        let copies = self.lanes.len();
        let pending = PendingWrite {
            id,
            owner,
            stream,
            blocks,
            crcs,
            zones: vec![u32::MAX; copies],
            locations: vec![None; copies],
            remaining: 0,
            error: None,
            reported: false,
        };
        let index = match self.free_slots.pop() {
            Some(index) => {
                self.writes[index] = Some(pending);
                index
            }
            None => {
                self.writes.push(Some(pending));
                self.writes.len() - 1
            }
        };
        for lane in 0..copies {
            if let Err(error) = self.submit_lane_write(index, lane, slot, blocks, data) {
                let pending = self.writes[index].as_mut().expect("pending write");
                pending.reported = true;
                if pending.remaining == 0 {
                    self.writes[index] = None;
                    self.free_slots.push(index);
                }
                return Err(error);
            }
        }
        self.stats.writes += 1;
        self.stats.write_bytes += data.len() as u64;
        Ok(id)
    }

    fn submit_lane_write(&mut self, index: usize, lane: usize, slot: Slot, blocks: u32, data: &[u8]) -> Result<()> {
        let device = self.lanes[lane].device;
        let mode = self.mode(device);
        let (zone, offset) = self.place(lane, slot, blocks)?;
        if mode == Mode::Ordered {
            self.wait_zone_idle(lane, zone)?;
        }
        let buffer = self.take_buffer(device)?;
        buffer.copy_in(0, data);
        let io = IoBuffer::range(buffer, 0, data.len());
        let token = (index as u64) << LANE_BITS | lane as u64;
        let d = &self.devices[device];
        let request = match mode {
            Mode::Append => d.ns.zone_append(d.zones[zone as usize].start_lba, io, false, token)?,
            Mode::Ordered | Mode::Conventional => d.ns.write(d.lba(zone, offset), io, false, token)?,
        };
        self.lanes[lane].table.write_submitted(zone);
        {
            let pending = self.writes[index].as_mut().expect("pending write");
            pending.zones[lane] = zone;
            if mode != Mode::Append {
                pending.locations[lane] = Some(Location { zone, offset });
            }
            pending.remaining += 1;
        }
        if let Err(error) = self.devices[device].submit(request) {
            self.lanes[lane].table.write_completed(zone);
            let pending = self.writes[index].as_mut().expect("pending write");
            pending.remaining -= 1;
            return Err(error);
        }
        Ok(())
    }

    /// Allocates `blocks` in `lane` for `slot`, keeping within the
    /// device's open and active zone limits: when a new zone is needed and
    /// the device is at a limit, the slot's old zone is retired first and
    /// its writes drained and finished.
    fn place(&mut self, lane: usize, slot: Slot, blocks: u32) -> Result<(u32, u32)> {
        let device = self.lanes[lane].device;
        if self.lanes[lane].table.would_open(slot, blocks) && self.over_limits(device, slot) {
            if let Some(retired) = self.lanes[lane].table.retire_slot(slot) {
                self.retiring.push((lane, retired.zone));
            }
            let deadline = Instant::now() + self.options.timeout;
            loop {
                self.process_retiring()?;
                if !self.over_limits(device, slot) {
                    break;
                }
                if self.retiring.is_empty() {
                    return Err(Error::InvalidConfig(format!(
                        "namespace {}: no zone to retire within its open/active limits",
                        self.devices[device].ns.nsid()
                    )));
                }
                self.poll_devices();
                if Instant::now() > deadline {
                    return Err(Error::Timeout { what: "an active zone to retire" });
                }
            }
        }
        let placement = match self.lanes[lane].table.allocate(slot, blocks) {
            Ok(placement) => placement,
            Err(PlaceError::NoSpace) => return Err(Error::NoSpace),
            Err(PlaceError::TooLarge) => {
                return Err(Error::InvalidArgument(format!("{blocks} blocks exceed a zone")));
            }
        };
        // Retired zones are finished once their writes, including the one
        // about to be submitted here, complete (see `poll`).
        for Retired { zone, .. } in placement.retired.into_iter().flatten() {
            self.retiring.push((lane, zone));
        }
        Ok((placement.zone, placement.offset))
    }

    /// Refuses work once a controller was reset since the last commit: its
    /// volatile cache, and with it writes this volume counts on, may be
    /// gone, and the zone state on the device may no longer match ours.
    fn check_resets(&self) -> Result<()> {
        match self.devices.iter().position(Device::reset_since_durable) {
            Some(device) => Err(Error::ControllerReset { device }),
            None => Ok(()),
        }
    }

    /// Whether opening one more zone for `slot` on `device` would pass its
    /// limits. Active: every zone the lanes hold, plus the metadata zone.
    /// Open: the streams' zones plus one for metadata or reclaim, which
    /// take turns (each is closed when its work is done).
    fn over_limits(&self, device: usize, slot: Slot) -> bool {
        let Some((open_limit, active_limit)) = self.zone_limits[device] else { return false };
        let lanes = self.lanes.iter().filter(|l| l.device == device);
        let active: u32 = lanes.clone().map(|l| l.table.active_zones()).sum();
        let reclaim_held = lanes.filter(|l| l.table.open_zone(Slot::Reclaim).is_some()).count() as u32;
        let meta = u32::from(device == 0);
        let streams_active = active - reclaim_held;
        let open_after = match slot {
            Slot::Stream(_) => streams_active + 1 + 1,
            Slot::Reclaim => streams_active + 1,
        };
        active + meta + 1 > active_limit || open_after > open_limit
    }

    /// Finishes (or just deactivates) retired zones whose writes are done.
    fn process_retiring(&mut self) -> Result<()> {
        let mut index = 0;
        while index < self.retiring.len() {
            let (lane, zone) = self.retiring[index];
            let entry = *self.lanes[lane].table.zone(zone);
            if entry.inflight > 0 {
                index += 1;
                continue;
            }
            self.retiring.swap_remove(index);
            let device = self.lanes[lane].device;
            if entry.usage == ZoneUse::Full
                && self.devices[device].is_zoned()
                && entry.active
                && self.lanes[lane].written[zone as usize] < entry.capacity
            {
                self.devices[device].zone_action(zone, ZoneSendAction::Finish)?;
                self.stats.zones_finished += 1;
            }
            self.lanes[lane].table.deactivate(zone);
        }
        Ok(())
    }

    fn take_buffer(&mut self, device: usize) -> Result<nvme_driver::dma::DmaBuffer> {
        let deadline = Instant::now() + self.options.timeout;
        loop {
            if let Some(buffer) = self.devices[device].pool.get() {
                return Ok(buffer);
            }
            self.poll();
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "a free DMA buffer" });
            }
        }
    }

    fn wait_zone_idle(&mut self, lane: usize, zone: u32) -> Result<()> {
        let deadline = Instant::now() + self.options.timeout;
        while self.lanes[lane].table.zone(zone).inflight > 0 {
            self.poll();
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "a zone's write in flight" });
            }
        }
        Ok(())
    }

    fn poll_devices(&mut self) {
        let mut completions = std::mem::take(&mut self.scratch);
        for device in &mut self.devices {
            device.poll(&mut completions);
        }
        for completion in completions.drain(..) {
            self.complete(completion);
        }
        self.scratch = completions;
    }

    /// Reaps completions on every namespace and finishes the writes they
    /// complete. Returns how many writes finished (see
    /// [`Volume::next_done`]).
    pub fn poll(&mut self) -> usize {
        let before = self.done.len();
        self.poll_devices();
        if !self.retiring.is_empty() {
            if let Err(error) = self.process_retiring() {
                log::warn!("finishing a retired zone: {error}");
            }
        }
        self.done.len() - before
    }

    /// The next finished write, if any.
    pub fn next_done(&mut self) -> Option<WriteDone> {
        self.done.pop_front()
    }

    /// Writes in flight.
    pub fn writes_in_flight(&self) -> usize {
        self.writes.len() - self.free_slots.len()
    }

    fn complete(&mut self, completion: IoCompletion) {
        if completion.token & SYNC_TOKEN != 0 {
            // A blocking command that already timed out; nothing waits.
            return;
        }
        let index = (completion.token >> LANE_BITS) as usize;
        let lane = (completion.token & ((1 << LANE_BITS) - 1)) as usize;
        let Some(pending) = self.writes.get_mut(index).and_then(Option::as_mut) else {
            log::warn!("completion for unknown write token {:#x}", completion.token);
            return;
        };
        let zone = pending.zones[lane];
        let blocks = pending.blocks;
        let device = self.lanes[lane].device;
        self.lanes[lane].table.write_completed(zone);
        match device::status(&completion) {
            Ok(()) => {
                self.lanes[lane].written[zone as usize] += blocks;
                if pending.locations[lane].is_none() {
                    let d = &self.devices[device];
                    let start = d.zones[zone as usize].start_lba;
                    let offset = (completion.result_u64() - start) / d.lbas_per_block;
                    pending.locations[lane] = Some(Location { zone, offset: offset as u32 });
                }
            }
            Err(error) => {
                pending.error.get_or_insert(Error::Command { what: "data write", error });
            }
        }
        pending.remaining -= 1;
        if pending.remaining > 0 {
            return;
        }
        let pending = self.writes[index].take().expect("pending write");
        self.free_slots.push(index);
        let result = match pending.error {
            Some(error) => Err(error),
            None if pending.reported => Err(Error::InvalidArgument("write abandoned at submission".into())),
            None => {
                let extent = Extent {
                    owner: pending.owner,
                    stream: pending.stream,
                    blocks: pending.blocks,
                    locations: pending.locations.iter().map(|l| l.expect("every copy placed")).collect(),
                    crcs: pending.crcs.into_boxed_slice(),
                };
                self.insert_extent(pending.id, extent, true)
            }
        };
        if !pending.reported {
            self.done.push_back(WriteDone { id: pending.id, result });
        }
    }

    /// Writes `data` and waits for it: [`Volume::submit_write`], then
    /// polls until this write finishes (other finished writes stay queued
    /// for [`Volume::next_done`]).
    pub fn write(&mut self, stream: u8, data: &[u8], owner: u64) -> Result<ExtentId> {
        let id = self.submit_write(stream, data, owner)?;
        let deadline = Instant::now() + self.options.timeout;
        loop {
            if let Some(position) = self.done.iter().position(|d| d.id == id) {
                let done = self.done.remove(position).expect("found");
                return done.result.map(|()| id);
            }
            self.poll();
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "a write" });
            }
        }
    }

    /// Polls until no write is in flight.
    pub fn wait_idle(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.options.timeout;
        while self.writes_in_flight() > 0 {
            self.poll();
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "writes in flight" });
            }
        }
        self.process_retiring()
    }

    // ---------------------------------------------------------------
    // reads
    // ---------------------------------------------------------------

    /// Reads extent `id` into `out` (exactly its length), verifying every
    /// block's checksum. A bad block is read from the other copy and
    /// recorded in [`Volume::bad_blocks`]; with no good copy the read fails
    /// with [`Error::Uncorrectable`].
    pub fn read(&mut self, id: ExtentId, out: &mut [u8]) -> Result<ReadOutcome> {
        let extent = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?;
        let blocks = extent.blocks;
        if out.len() != blocks as usize * BLOCK_SIZE {
            return Err(Error::InvalidArgument(format!(
                "extent {id} is {} bytes, the buffer {}",
                blocks as usize * BLOCK_SIZE,
                out.len()
            )));
        }
        let first = self.read_copy(id, 0, out);
        let (mut bad, unreadable) = match first {
            Ok(()) => (mismatches(out, &self.extents[&id].crcs), false),
            Err(Error::Command { .. }) => ((0..blocks).collect(), true),
            Err(error) => return Err(error),
        };
        if bad.is_empty() {
            return Ok(ReadOutcome::default());
        }
        for &block in &bad {
            self.bad_blocks.push(BadBlock { extent: id, lane: 0, block, unreadable });
        }
        let mut repaired = Vec::new();
        if self.lanes.len() > 1 {
            let mut other = vec![0u8; out.len()];
            if self.read_copy(id, 1, &mut other).is_ok() {
                let crcs = &self.extents[&id].crcs;
                bad.retain(|&block| {
                    let range = block as usize * BLOCK_SIZE..(block as usize + 1) * BLOCK_SIZE;
                    if crate::checksum::block_crc(&other[range.clone()]) == crcs[block as usize] {
                        out[range.clone()].copy_from_slice(&other[range]);
                        repaired.push(block);
                        false
                    } else {
                        true
                    }
                });
            }
        }
        self.stats.repaired_blocks += repaired.len() as u64;
        if bad.is_empty() {
            Ok(ReadOutcome { repaired })
        } else {
            Err(Error::Uncorrectable { extent: id, owner: self.extents[&id].owner, blocks: bad })
        }
    }

    /// Reads copy `lane` of extent `id` without verifying it.
    pub fn read_copy(&mut self, id: ExtentId, lane: usize, out: &mut [u8]) -> Result<()> {
        let extent = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?;
        let location = *extent.locations.get(lane).ok_or_else(|| Error::InvalidArgument(format!("lane {lane}")))?;
        let device = self.lanes[lane].device;
        let lba = self.devices[device].lba(location.zone, location.offset);
        self.devices[device].read_at(lba, out)
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

    // ---------------------------------------------------------------
    // free, commit, reclaim
    // ---------------------------------------------------------------

    /// Frees extent `id`. Its space comes back when its zone is reset,
    /// after the next commit, or reclaimed.
    pub fn free(&mut self, id: ExtentId) -> Result<()> {
        self.remove_extent(id, true).map(drop)
    }

    /// Makes everything written and freed so far durable: waits for writes
    /// in flight, flushes data, appends a journal record (or writes a
    /// checkpoint when the segment is full) and flushes it. Then resets
    /// zones with nothing live.
    pub fn commit(&mut self) -> Result<CommitInfo> {
        self.check_resets()?;
        self.wait_idle()?;
        let mut info = CommitInfo { seq: self.log.seq, ..CommitInfo::default() };
        if !self.ops.is_empty() {
            self.close_reclaim_zones()?;
            for device in &mut self.devices {
                device.flush()?;
            }
            // A reset before the flush finished may have dropped writes it
            // was to make durable: journal nothing then.
            self.check_resets()?;
            let payload = journal::encode_ops(&self.ops);
            let record =
                journal::encode_record(Kind::Delta, self.volume_id, self.log.generation, self.log.seq + 1, &payload);
            let blocks = (record.len() / BLOCK_SIZE) as u64;
            let capacity = self.segment_blocks();
            let log_blocks = self.log.offset - self.log.checkpoint_blocks;
            if self.log.offset + blocks > capacity || log_blocks + blocks > capacity / 2 {
                self.rotate()?;
                info.checkpoint = true;
            } else {
                let (segment, offset) = (self.log.segment, self.log.offset);
                self.write_segment(segment, offset, &record)?;
                self.log.offset += blocks;
                self.log.seq += 1;
            }
            self.devices[0].flush()?;
            // The same for the record itself.
            self.check_resets()?;
            self.close_meta_zone()?;
            for device in &mut self.devices {
                device.durable_generation = device.pair.reset_generation();
            }
            info.ops = self.ops.len();
            info.seq = self.log.seq;
            self.ops.clear();
            self.stats.commits += 1;
        }
        info.zones_reset = self.reset_dead_zones()?;
        Ok(info)
    }

    /// Closes the metadata log's zone when partly written, so it holds no
    /// open resource between commits (it stays active).
    fn close_meta_zone(&mut self) -> Result<()> {
        if !self.devices[0].is_zoned() || self.log.offset >= self.segment_blocks() {
            return Ok(());
        }
        let (zone, in_zone) =
            segment_position(&self.devices[0], self.log.zones_per_segment, self.log.segment, self.log.offset);
        if in_zone > 0 {
            self.devices[0].zone_action(zone, ZoneSendAction::Close)?;
        }
        Ok(())
    }

    /// Closes each lane's reclaim zone that relocation left open.
    fn close_reclaim_zones(&mut self) -> Result<()> {
        for lane in 0..self.lanes.len() {
            if !self.reclaim_open[lane] {
                continue;
            }
            self.reclaim_open[lane] = false;
            let device = self.lanes[lane].device;
            if let Some(zone) = self.lanes[lane].table.open_zone(Slot::Reclaim) {
                if self.devices[device].is_zoned() {
                    self.devices[device].zone_action(zone, ZoneSendAction::Close)?;
                }
            }
        }
        Ok(())
    }

    /// Resets zones whose emptiness is committed.
    fn reset_dead_zones(&mut self) -> Result<usize> {
        debug_assert!(self.ops.is_empty(), "only committed emptiness allows a reset");
        let mut count = 0;
        for lane in 0..self.lanes.len() {
            let device = self.lanes[lane].device;
            for zone in self.lanes[lane].table.dead_zones() {
                if self.reclaim == Some((lane, zone)) {
                    self.reclaim = None;
                }
                self.retiring.retain(|&r| r != (lane, zone));
                if self.devices[device].is_zoned() {
                    self.devices[device].zone_action(zone, ZoneSendAction::Reset)?;
                }
                self.lanes[lane].written[zone as usize] = 0;
                self.lanes[lane].table.reset(zone);
                count += 1;
            }
        }
        self.stats.zones_reset += count as u64;
        Ok(count)
    }

    fn checkpoint(&self) -> Checkpoint {
        let mut ids: Vec<ExtentId> = self.extents.keys().copied().collect();
        ids.sort_unstable();
        let extents = ids
            .into_iter()
            .map(|id| {
                let e = &self.extents[&id];
                ExtentRecord {
                    id,
                    owner: e.owner,
                    stream: e.stream,
                    blocks: e.blocks,
                    locations: e.locations.clone(),
                    crcs: e.crcs.to_vec(),
                }
            })
            .collect();
        let zone_valid =
            self.lanes.iter().map(|l| (0..l.table.zone_count()).map(|z| l.table.zone(z).valid).collect()).collect();
        Checkpoint { superblock: self.superblock.clone(), next_id: self.next_id, extents, zone_valid }
    }

    /// Writes a checkpoint at the start of `segment`.
    fn write_checkpoint(&mut self, segment: u32, generation: u64, seq: u64) -> Result<()> {
        let payload = journal::encode_checkpoint(&self.checkpoint());
        let record = journal::encode_record(Kind::Checkpoint, self.volume_id, generation, seq, &payload);
        let blocks = (record.len() / BLOCK_SIZE) as u64;
        if blocks > self.segment_blocks() {
            return Err(Error::NoSpace);
        }
        self.write_segment(segment, 0, &record)?;
        self.log.segment = segment;
        self.log.offset = blocks;
        self.log.checkpoint_blocks = blocks;
        self.log.generation = generation;
        self.log.seq = seq;
        self.stats.checkpoints += 1;
        Ok(())
    }

    /// Moves the log to the other segment with a checkpoint of the whole
    /// state, then resets the old segment. The caller flushes.
    fn rotate(&mut self) -> Result<()> {
        let old = self.log.segment;
        let target = 1 - old;
        let g = self.log.zones_per_segment;
        let zoned = self.devices[0].is_zoned();
        if zoned {
            // The target may hold a torn or stale checkpoint; the old
            // segment's open zone is finished so that metadata never holds
            // two active zones.
            for zone in target * g..(target + 1) * g {
                self.devices[0].zone_action(zone, ZoneSendAction::Reset)?;
            }
            let (zone, in_zone) =
                segment_position(&self.devices[0], g, old, self.log.offset.min(self.segment_blocks()));
            if in_zone > 0 && self.log.offset < self.segment_blocks() {
                self.devices[0].zone_action(zone, ZoneSendAction::Finish)?;
            }
        }
        let (generation, seq) = (self.log.generation + 1, self.log.seq + 1);
        self.write_checkpoint(target, generation, seq)?;
        self.devices[0].flush()?;
        if zoned {
            for zone in old * g..(old + 1) * g {
                self.devices[0].zone_action(zone, ZoneSendAction::Reset)?;
            }
        }
        Ok(())
    }

    /// Relocates up to about `max_blocks` of live data out of the zone
    /// being reclaimed (choosing one when none is: the full zone with the
    /// fewest live blocks, below [`VolumeOptions::reclaim_max_valid_ratio`]).
    /// When the zone is empty the moves are committed and it is reset.
    pub fn reclaim_step(&mut self, max_blocks: u64) -> Result<ReclaimProgress> {
        self.check_resets()?;
        self.wait_idle()?;
        let (lane, zone) = match self.reclaim {
            Some(victim) => victim,
            None => {
                let lanes = self.lanes.len();
                let ratio = self.options.reclaim_max_valid_ratio;
                let found = (0..lanes).map(|i| (self.next_reclaim_lane + i) % lanes).find_map(|lane| {
                    let table = &self.lanes[lane].table;
                    table.dead_zones().first().map(|&z| (lane, z)).or_else(|| table.victim(ratio).map(|z| (lane, z)))
                });
                let Some(victim) = found else {
                    return Ok(ReclaimProgress::Idle);
                };
                self.next_reclaim_lane = (victim.0 + 1) % lanes;
                self.reclaim = Some(victim);
                victim
            }
        };
        let mut moved = 0u64;
        loop {
            let start = Location { zone, offset: 0 };
            let end = Location { zone: zone + 1, offset: 0 };
            let next = self.lanes[lane].index.range(start..end).next().map(|(_, &id)| id);
            let Some(id) = next else {
                self.reclaim = None;
                self.commit()?;
                return Ok(ReclaimProgress::Reclaimed { lane: lane as u8, zone, moved_blocks: moved });
            };
            if moved >= max_blocks {
                return Ok(ReclaimProgress::InProgress { lane: lane as u8, zone, moved_blocks: moved });
            }
            moved += u64::from(self.relocate(id, lane)?);
        }
    }

    /// Moves copy `lane` of extent `id` to the lane's reclaim zone: NVMe
    /// Copy when the device offers it, else a verified read (repaired from
    /// the other copy when needed) and a write. Journaled at next commit.
    fn relocate(&mut self, id: ExtentId, lane: usize) -> Result<u32> {
        let extent = &self.extents[&id];
        let blocks = extent.blocks;
        let from = extent.locations[lane];
        let device = self.lanes[lane].device;
        let (zone, offset) = self.place(lane, Slot::Reclaim, blocks)?;
        let to = Location { zone, offset };
        let mut copied = false;
        if self.copy_supported[device] {
            match self.copy_blocks(device, from, to, blocks) {
                Ok(()) => copied = true,
                Err(Error::Command { error, .. })
                    if matches!(
                        error.device_status().map(|status| status.code()),
                        Some(StatusCode::Generic(
                            GenericStatus::InvalidCommandOpcode | GenericStatus::InvalidFieldInCommand
                        ))
                    ) && self.lanes[lane].table.zone(zone).allocated == offset + blocks =>
                {
                    log::info!("namespace {}: Copy refused ({error}); relocating by read and write", device);
                    self.copy_supported[device] = false;
                }
                Err(error) => return Err(error),
            }
        }
        if !copied {
            let mut data = vec![0u8; blocks as usize * BLOCK_SIZE];
            match self.read(id, &mut data) {
                Ok(_) => {}
                // Move the bad data as it is; scrub reports it.
                Err(Error::Uncorrectable { .. }) => self.read_copy(id, lane, &mut data)?,
                Err(error) => return Err(error),
            }
            let lba = self.devices[device].lba(zone, offset);
            self.devices[device].write_at(lba, &data)?;
        }
        self.lanes[lane].written[zone as usize] += blocks;
        self.reclaim_open[lane] = true;
        self.move_extent(id, lane, to, true);
        self.stats.relocated_bytes += u64::from(blocks) * BLOCK_SIZE as u64;
        Ok(blocks)
    }

    /// Copies `blocks` from `from` to `to` on one namespace with Copy
    /// commands, each within the device's MSSRL/MCL/MDTS limits.
    fn copy_blocks(&mut self, device: usize, from: Location, to: Location, blocks: u32) -> Result<()> {
        let d = &self.devices[device];
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
            let d = &self.devices[device];
            let request = d.ns.copy(destination + done, &[(source + done, n as u32)], IoBuffer::new(buffer), 0)?;
            self.devices[device].run(request, "Copy")?;
            self.stats.copy_commands += 1;
            done += n;
        }
        Ok(())
    }

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
        self.devices[device].write_at(lba, good)?;
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

    // ---------------------------------------------------------------
    // inspection
    // ---------------------------------------------------------------

    /// Copy `lane`'s extents in physical order from `from`: one map lookup,
    /// then a walk, for scrub to take in batches as large as it likes.
    pub fn extents_from(&self, lane: usize, from: Location) -> impl Iterator<Item = ExtentRef<'_>> + '_ {
        let device = &self.devices[self.lanes[lane].device];
        self.lanes[lane].index.range(from..).map(move |(&location, id)| {
            let extent = &self.extents[id];
            ExtentRef {
                id: *id,
                owner: extent.owner,
                location,
                lba: device.lba(location.zone, location.offset),
                blocks: extent.blocks,
                crcs: &extent.crcs,
            }
        })
    }

    /// Extent IDs, in no particular order.
    pub fn extent_ids(&self) -> impl Iterator<Item = ExtentId> + '_ {
        self.extents.keys().copied()
    }

    /// The extent's length in bytes and its owner.
    pub fn extent(&self, id: ExtentId) -> Option<(usize, u64)> {
        self.extents.get(&id).map(|e| (e.blocks as usize * BLOCK_SIZE, e.owner))
    }

    /// The extent's block checksums.
    pub fn checksums(&self, id: ExtentId) -> Option<&[u32]> {
        self.extents.get(&id).map(|e| &e.crcs[..])
    }

    /// The copy's location.
    pub fn location(&self, id: ExtentId, lane: usize) -> Option<Location> {
        self.extents.get(&id).and_then(|e| e.locations.get(lane).copied())
    }

    /// The first LBA of `location` on lane `lane`'s namespace.
    pub fn lba(&self, lane: usize, location: Location) -> u64 {
        self.devices[self.lanes[lane].device].lba(location.zone, location.offset)
    }

    /// The volume's identity (chosen at format), to tie saved state such as
    /// a scrub checkpoint to this volume.
    pub fn id(&self) -> u64 {
        self.volume_id
    }

    /// Whether lane `lane` lies on a zoned namespace (where a copy cannot
    /// be rewritten in place).
    pub fn lane_is_zoned(&self, lane: usize) -> bool {
        self.devices[self.lanes[lane].device].is_zoned()
    }

    /// Blocks of live data in each copy.
    pub fn valid_blocks(&self) -> u64 {
        self.lanes[0].table.valid_blocks()
    }

    /// Copies and namespaces, as chosen at format.
    pub fn profile(&self) -> Profile {
        self.superblock.profile
    }

    /// Copies per extent.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Which device (index into the list given at open) holds `lane`.
    pub fn lane_device(&self, lane: usize) -> usize {
        self.lanes[lane].device
    }

    /// The volume's devices, in the order given at format or open; for tools
    /// that need the namespace or its queue pair (say, to inject faults).
    pub fn devices_mut(&mut self) -> &mut [Device] {
        &mut self.devices
    }

    /// Write streams (lifetime classes), as chosen at format.
    pub fn streams(&self) -> u8 {
        self.superblock.streams
    }

    /// The largest write.
    pub fn max_extent_bytes(&self) -> usize {
        self.superblock.max_extent_blocks as usize * BLOCK_SIZE
    }

    /// Bytes the volume can hold: its first lane's zones, less the reclaim
    /// reserve.
    pub fn capacity_bytes(&self) -> u64 {
        let table = &self.lanes[0].table;
        let zones: Vec<u32> = (0..table.zone_count()).filter(|&z| table.zone(z).usage != ZoneUse::NotOwned).collect();
        let reserve: u64 =
            zones.iter().take(self.superblock.reserve_zones as usize).map(|&z| u64::from(table.zone(z).capacity)).sum();
        (table.capacity_blocks() - reserve) * BLOCK_SIZE as u64
    }

    /// The journal sequence number of the last commit.
    pub fn committed_seq(&self) -> u64 {
        self.log.seq
    }

    /// Operations not yet committed.
    pub fn uncommitted_ops(&self) -> usize {
        self.ops.len()
    }

    /// The counters, with the gauges (capacity, live bytes, extents, empty
    /// zones) computed now.
    pub fn stats(&self) -> VolumeStats {
        let mut stats = self.stats;
        stats.capacity_bytes = self.capacity_bytes();
        stats.valid_bytes = self.lanes[0].table.valid_blocks() * BLOCK_SIZE as u64;
        stats.extents = self.extents.len() as u64;
        stats.empty_zones = self.lanes.iter().map(|l| l.table.empty_zones() as u64).sum();
        stats
    }

    /// The zone table of `lane`.
    pub fn zone_table(&self, lane: usize) -> &ZoneTable {
        &self.lanes[lane].table
    }

    /// Waits for writes, commits, and hands back the devices.
    pub fn close(mut self) -> Result<Vec<Device>> {
        self.commit()?;
        Ok(std::mem::take(&mut self.devices))
    }

    /// Hands back the devices without committing: what a crash leaves.
    pub fn abandon(mut self) -> Vec<Device> {
        std::mem::take(&mut self.devices)
    }

    /// Checks every invariant between the extent map, the per-lane indexes
    /// and the zone tables; for tests. Panics on a violation.
    pub fn check_invariants(&self) {
        for (lane_index, lane) in self.lanes.iter().enumerate() {
            let mut valid = vec![0u32; lane.table.zone_count() as usize];
            let mut last_end: Option<Location> = None;
            for (&location, id) in &lane.index {
                let extent = &self.extents[id];
                assert_eq!(extent.locations[lane_index], location, "extent {id} index");
                if let Some(end) = last_end {
                    assert!(location >= end, "extents overlap at {location:?} in lane {lane_index}");
                }
                let entry = lane.table.zone(location.zone);
                assert!(location.offset + extent.blocks <= entry.allocated, "extent {id} beyond allocation");
                last_end = Some(Location { zone: location.zone, offset: location.offset + extent.blocks });
                valid[location.zone as usize] += extent.blocks;
            }
            for (zone, &v) in valid.iter().enumerate() {
                assert_eq!(lane.table.zone(zone as u32).valid, v, "lane {lane_index} zone {zone} valid count");
            }
            assert_eq!(lane.index.len(), self.extents.len(), "lane {lane_index} index size");
        }
    }
}

// -------------------------------------------------------------------
// metadata layout, shared by format and open
// -------------------------------------------------------------------

/// Whether `zone` of its device belongs to `lane`: every zone past the
/// metadata segments, split even/odd between the two lanes of a dup.
fn lane_owns(profile: Profile, lane: usize, meta_zones: u32, zone: u32) -> bool {
    zone >= meta_zones && (profile != Profile::Dup || (zone - meta_zones) % 2 == lane as u32)
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

/// Zones per metadata segment: room for the largest checkpoint the first
/// namespace's capacity allows (every extent a single block), plus a few
/// deltas. Real volumes hold larger extents, so checkpoints are far
/// smaller and a segment takes many deltas between rotations.
fn meta_zones_per_segment(device: &Device) -> Result<u32> {
    let zones = &device.zones;
    let total_blocks: u64 = zones.iter().map(|z| u64::from(z.capacity_blocks)).sum();
    let needed = worst_checkpoint_bytes(total_blocks, zones.len() as u64).div_ceil(BLOCK_SIZE as u64) + 16;
    let mut sum = 0u64;
    for (index, zone) in zones.iter().enumerate() {
        sum += u64::from(zone.capacity_blocks);
        if sum >= needed {
            let g = index as u32 + 1;
            if 2 * g as usize >= zones.len() {
                break;
            }
            return Ok(g);
        }
    }
    Err(Error::InvalidConfig(format!(
        "namespace {}: {} zones cannot hold two metadata segments of {} blocks and data",
        device.ns.nsid(),
        zones.len(),
        needed
    )))
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

/// The zone and block within it of block `offset` of `segment`.
fn segment_position(device: &Device, g: u32, segment: u32, offset: u64) -> (u32, u64) {
    let mut left = offset;
    let first = segment * g;
    for zone in first..first + g {
        let capacity = u64::from(device.zones[zone as usize].capacity_blocks);
        if left < capacity || zone == first + g - 1 {
            return (zone, left);
        }
        left -= capacity;
    }
    unreachable!("segments have zones")
}

fn meta_lba(device: &Device, g: u32, segment: u32, offset: u64) -> u64 {
    let (zone, in_zone) = segment_position(device, g, segment, offset);
    device.zones[zone as usize].start_lba + in_zone * device.lbas_per_block
}

fn read_meta(device: &mut Device, lba: u64, out: &mut [u8]) -> Result<()> {
    device.read_at(lba, out)
}

fn read_segment(device: &mut Device, g: u32, segment: u32, offset: u64, blocks: u64) -> Result<Vec<u8>> {
    let mut data = vec![0u8; blocks as usize * BLOCK_SIZE];
    let mut done = 0usize;
    while done < data.len() {
        let block = offset + (done / BLOCK_SIZE) as u64;
        let (zone, in_zone) = segment_position(device, g, segment, block);
        let room = (u64::from(device.zones[zone as usize].capacity_blocks).saturating_sub(in_zone)) as usize;
        if room == 0 {
            return Err(Error::Corrupt("metadata record runs past its segment".into()));
        }
        let len = (room * BLOCK_SIZE).min(data.len() - done);
        let lba = device.zones[zone as usize].start_lba + in_zone * device.lbas_per_block;
        device.read_at(lba, &mut data[done..done + len])?;
        done += len;
    }
    Ok(data)
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
