//! The volume: placement, the write path, reads with repair, the journal,
//! free and reclaim. See the [crate documentation](crate).
//!
//! One file per concern: [`open`] (format and open), [`write`], [`read`],
//! [`commit`] (free and commit), [`reclaim`], [`repair`] and [`scan`]
//! (scrub's walk). This file holds the types they share, the extent map
//! and inspection.

mod area;
mod check;
mod commit;
mod copy;
mod extents;
mod fill;
mod fork;
mod grow;
mod identify;
mod member;
mod open;
mod placement;
mod read;
mod reclaim;
mod repair;
mod replace;
mod scan;
mod status;
mod types;
mod write;
mod zone_plan;

pub use check::{CheckReport, CheckedPlace};
pub use fork::DivergedSide;
pub use grow::Removal;
pub use identify::DeviceState;
pub use repair::MetadataScrub;
pub use scan::LaneReads;
pub use status::{
    CopiesLeft, DeviceErrors, DeviceStatus, MemberState, Redundancy, ResilverStatus, VolumeState, VolumeStatus,
};
pub use types::*;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::hash::IdMap;
use crate::journal::layout::{meta_copies, meta_zones_on, placed_copies};
use crate::journal::log::Journal;
use crate::journal::{ExtentRecord, Label, MemberRecord, Op, Superblock};
use crate::owners::{Owners, OWNER_LOST};
use crate::table::{split, Entry, LaneOrder, LocationBits, Misplaced, Table, PAGE_SLOTS};
use crate::tags::TagLayout;
use crate::zones::{Stamp, ZoneTable, ZoneUse};
use crate::{ExtentId, Location, Profile, BLOCK_SIZE};
use nvme_driver::dma::DmaPool;
use nvme_driver::IoCompletion;
use std::collections::VecDeque;

#[derive(Debug)]
struct Lane {
    device: usize,
    table: ZoneTable,
    /// Blocks written successfully, per zone.
    written: Vec<u32>,
    /// Per zone: how many of its first blocks its checksum area covers
    /// (0: none written), on a volume with checksum areas.
    sealed: Vec<u32>,
    /// Per zone taking Zone Appends: a bit per block the device has
    /// placed an append in, so that an append placed over another is
    /// caught (the device chose the LBA). Dropped once the zone takes no
    /// more, so its size is bounded by the zones open.
    appended: IdMap<u32, Vec<u64>>,
    /// Maps of zones done with appends, for the next zones' (see
    /// `claim_appended`): a zone's first append allocates nothing.
    spare_maps: Vec<Vec<u64>>,
    /// On a volume with checksum areas: per zone not sealed yet, the
    /// extents whose copies landed in it since open, so that sealing it
    /// builds its area from those, not from a pass over every extent in
    /// the map (see `Volume::seal_zone`). Bounded by the zones open.
    landed: Vec<(u32, Vec<ExtentId>)>,
    /// Lists of zones sealed, for the next zones' (no allocation once
    /// warm).
    spare_lists: Vec<Vec<ExtentId>>,
}

/// The words of a bitmap that bits `start..end` touch, each with the mask
/// of those bits in it: a 256 KiB extent's blocks are one or two words, not
/// 64 bits one at a time.
fn word_masks(start: u32, end: u32) -> impl Iterator<Item = (usize, u64)> {
    (start / 64..end.div_ceil(64)).map(move |word| {
        let base = word * 64;
        // Every word of the range starts below `end`: no overflow near u32::MAX.
        let (low, high) = (start.max(base) - base, (end - base).min(64));
        let width = high.saturating_sub(low);
        let mask = if width == 64 { u64::MAX } else { ((1u64 << width) - 1) << low };
        (word as usize, mask)
    })
}

impl Lane {
    /// A lane with no zones yet, on device 0.
    fn empty() -> Lane {
        Lane {
            device: 0,
            table: ZoneTable::new(&[], |_| false, 1, 0),
            written: Vec::new(),
            sealed: Vec::new(),
            appended: IdMap::default(),
            spare_maps: Vec::new(),
            landed: Vec::new(),
            spare_lists: Vec::new(),
        }
    }

    /// Extent `id`'s copy here landed in `zone` (a volume with checksum
    /// areas: see [`Lane::landed`]). A list begins only with a zone that
    /// held nothing live (`fresh`), so that a list, when there is one,
    /// names every live extent of its zone.
    fn note_landed(&mut self, zone: u32, id: ExtentId, fresh: bool) {
        match self.landed.iter_mut().find(|(z, _)| *z == zone) {
            Some((_, list)) => {
                if fresh {
                    list.clear();
                }
                list.push(id);
            }
            None if fresh => {
                let mut list = self.spare_lists.pop().unwrap_or_default();
                list.push(id);
                self.landed.push((zone, list));
            }
            None => {}
        }
    }

    /// The extents noted as landed in `zone`, taken (none noted: `None`).
    fn take_landed(&mut self, zone: u32) -> Option<Vec<ExtentId>> {
        let at = self.landed.iter().position(|(z, _)| *z == zone)?;
        Some(self.landed.swap_remove(at).1)
    }

    /// A list [`Lane::take_landed`] gave, back for reuse.
    fn give_back_list(&mut self, mut list: Vec<ExtentId>) {
        list.clear();
        if self.spare_lists.len() < 4 {
            self.spare_lists.push(list);
        }
    }

    /// Marks `blocks` blocks at `offset` of `zone` as placed by a Zone
    /// Append the device completed; false when some were placed already.
    /// `before` blocks of the zone were written before this one, which are
    /// the zone's head when this is its first append since open.
    fn claim_appended(&mut self, zone: u32, offset: u32, blocks: u32, before: u32) -> bool {
        let capacity = self.table.zone(zone).capacity;
        let spare = &mut self.spare_maps;
        let map = self.appended.entry(zone).or_insert_with(|| {
            // A map a finished zone gave back, or a new one.
            let mut map = spare.pop().unwrap_or_default();
            map.clear();
            map.resize(capacity.div_ceil(64) as usize, 0);
            word_masks(0, before.min(capacity)).for_each(|(word, mask)| map[word] |= mask);
            map
        });
        let end = offset.saturating_add(blocks);
        if word_masks(offset, end).any(|(word, mask)| map.get(word).is_none_or(|w| w & mask != 0)) {
            return false;
        }
        word_masks(offset, end).for_each(|(word, mask)| map[word] |= mask);
        let entry = self.table.zone(zone);
        if entry.inflight == 0 && !matches!(entry.usage, ZoneUse::Open(_)) {
            self.forget_appends(zone);
        }
        true
    }

    /// Zone `zone` holds nothing now (reset, or found so at open).
    fn zone_emptied(&mut self, zone: u32) {
        self.written[zone as usize] = 0;
        self.forget_appends(zone);
    }

    /// Drops zone `zone`'s map of appended blocks, kept for the next zone.
    fn forget_appends(&mut self, zone: u32) {
        if let Some(map) = self.appended.remove(&zone) {
            if self.spare_maps.len() < SPARE_MAPS_MAX {
                self.spare_maps.push(map);
            }
        }
    }

    /// Whether the checksum area of `zone` covers `blocks` blocks at
    /// `offset`.
    fn area_covers(&self, zone: u32, offset: u32, blocks: u32) -> bool {
        self.sealed.get(zone as usize).is_some_and(|&sealed| offset + blocks <= sealed)
    }
}

use crate::chooser::{pool_rounds, Chooser, MAX_DEVICES};
use crate::table::COPIES_MAX;

/// Extents in flight on a lane at which placement passes it over while
/// others can take the copy (see [`Chooser::set_queue_target`]).
const QUEUE_TARGET_EXTENTS: u64 = 4;

/// Spare maps of appended blocks a lane keeps at most (one per zone it
/// may have open at once is enough).
const SPARE_MAPS_MAX: usize = 8;

#[derive(Debug)]
struct PendingWrite {
    /// A resilver's copy of an existing extent to the one lane whose copy
    /// is missing, rather than a new extent.
    copy_of: Option<usize>,
    id: ExtentId,
    owner: u64,
    stream: u8,
    blocks: u32,
    crcs: Vec<u32>,
    /// Its blocks' tags go with the data, its checksums to no map (see
    /// [`Volume::tagged`]).
    tagged: bool,
    /// Copies, the first `copies` of each array below: fixed arrays, so
    /// that a write allocates nothing for them.
    copies: u8,
    /// Each copy's lane (distinct).
    lanes: [u8; COPIES_MAX],
    zones: [u32; COPIES_MAX],
    locations: [Option<Location>; COPIES_MAX],
    /// Per copy: its command is in flight.
    in_flight: [bool; COPIES_MAX],
    remaining: u8,
    error: Option<Error>,
    /// The submitter already got the error; don't report it again.
    reported: bool,
    /// A copy that takes the place of the extent's copy in this lane (a
    /// distributed rebuild's), rather than a missing one.
    relocates_from: Option<usize>,
}

impl PendingWrite {
    /// A write of `blocks` for extent `id`, a copy in each of `lanes`,
    /// nothing submitted yet: a new extent (`copy_of: None`) or a
    /// resilver's copy to one lane; its checksums go to the map (see
    /// `tagged`).
    fn new(
        copy_of: Option<usize>,
        id: ExtentId,
        owner: u64,
        stream: u8,
        blocks: u32,
        crcs: Vec<u32>,
        lanes: &[usize],
    ) -> Self {
        let copies = lanes.len();
        assert!((1..=COPIES_MAX).contains(&copies), "a write of {copies} copies");
        let mut lane_of = [u8::MAX; COPIES_MAX];
        for (at, &lane) in lanes.iter().enumerate() {
            assert!(!lanes[..at].contains(&lane), "two copies in lane {lane}");
            lane_of[at] = lane as u8;
        }
        PendingWrite {
            copy_of,
            id,
            owner,
            stream,
            blocks,
            crcs,
            tagged: false,
            copies: copies as u8,
            lanes: lane_of,
            zones: [u32::MAX; COPIES_MAX],
            locations: [None; COPIES_MAX],
            in_flight: [false; COPIES_MAX],
            remaining: 0,
            error: None,
            reported: false,
            relocates_from: None,
        }
    }

    /// Which of its copies lies in lane `lane`, if any.
    fn copy_in(&self, lane: usize) -> Option<usize> {
        self.lanes[..usize::from(self.copies)].iter().position(|&l| usize::from(l) == lane)
    }

    /// Each copy's index and lane.
    fn copy_lanes(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.lanes[..usize::from(self.copies)].iter().enumerate().map(|(copy, &lane)| (copy, usize::from(lane)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Append,
    Ordered,
    Conventional,
}

/// A volume over one or two namespaces. See the [crate documentation](crate).
#[derive(Debug)]
pub struct Volume {
    /// Per device place: the device, or `None` when it is away (missing at
    /// open, or given up since: see `members`).
    devices: Vec<Option<Device>>,
    /// Devices given up while open, kept (not dropped) so that their queue
    /// pairs outlive any command they may still hold; handed back at close.
    gone: Vec<Device>,
    /// Per device place: its standing and error counters.
    members: Vec<member::Member>,
    /// Per device: data writes in flight there.
    device_writes: Vec<usize>,
    /// A bit per device whose `device_writes` is above zero: the devices
    /// the poll looks at, so that a poll costs the same however many
    /// devices sit idle (see `poll_devices`).
    busy: u32,
    /// Resilver copies finished since the last [`Volume::next_copy_done`].
    copies_done: VecDeque<WriteDone>,
    lanes: Vec<Lane>,
    superblock: Superblock,
    /// How block tags come with reads; `None` when checksums live in the
    /// extent map (see [`crate::tags`]). On a volume with checksum areas
    /// (`area`), the volume reads them from the zones' areas.
    tags: Option<TagLayout>,
    /// Checksums live in each zone's checksum area ([`crate::area`]) once
    /// it is sealed, in the map until then.
    area: bool,
    /// Zones sealed since the last commit, whose extents leave the map
    /// once a commit made the seal durable.
    sealed_since_commit: Vec<(usize, u32)>,
    /// The last checksum area read, per lane: (zone, its tags).
    area_cache: Vec<Option<(u32, Vec<u8>)>>,
    volume_id: u64,
    options: VolumeOptions,
    /// Every extent: its blocks and its copies' locations.
    table: Table,
    /// Where every extent's owner is (see [`crate::owners`]).
    owners: Owners,
    /// The checksums of extents that keep them in memory (a volume without
    /// block tags, or an extent whose tags its controller cannot carry);
    /// an extent of a volume with tags is tagged exactly when it has no
    /// entry here.
    mapped: IdMap<ExtentId, Box<[u32]>>,
    /// The checksums of extents freed since the last commit, out of the
    /// map: an addition journaled by the same commit takes them from here
    /// (operations carry none; see `journal::DeltaBody::new`).
    freed_crcs: IdMap<ExtentId, Box<[u32]>>,
    /// The blocks of the operations of recent commits, the largest lately
    /// (it decays by an eighth a commit): how much room a checkpoint that
    /// spreads must leave beside it (`Volume::checkpoint_spreads`).
    recent_ops_blocks: u64,
    /// The checksum area being built by `seal_zone`, kept for the next
    /// (no allocation per zone sealed).
    area_buffer: Vec<u8>,
    /// [`nvme_driver::resets_begun`] when `check_resets` last found no
    /// device reset since its last commit (`u64::MAX`: not yet looked): a
    /// write looks at every device only when some controller was reset
    /// since.
    resets_seen: u64,
    /// Blocks of the live extents, one copy each (kept with `table`).
    live_blocks: u64,
    ops: Vec<Op>,
    journal: Journal,
    /// What open found and did: a rewind's drops, copies repaired.
    recovery: RecoveryReport,
    writes: Vec<Option<PendingWrite>>,
    free_slots: Vec<usize>,
    done: VecDeque<WriteDone>,
    /// Zones retired with writes possibly in flight: finish (or just
    /// deactivate) them once idle.
    retiring: Vec<(usize, u32)>,
    /// A zone the last placement retired, held off `retiring` until the
    /// write placed in it is in flight.
    held_zone: Option<(usize, u32)>,
    bad_blocks: Vec<BadBlock>,
    /// Per device: (open, active) zone limits, if it has any.
    zone_limits: Vec<Option<(u32, u32)>>,
    /// Per lane: its reclaim zone is open on the device (not closed).
    reclaim_open: Vec<bool>,
    copy_supported: Vec<bool>,
    reclaim: Option<(usize, u32)>,
    /// Extents left to move out of the zone being reclaimed (see
    /// `reclaim::next_to_reclaim`).
    reclaim_queue: Vec<ExtentId>,
    next_reclaim_lane: usize,
    stats: VolumeStats,
    scratch: Vec<IoCompletion>,
    /// A write's tags, built before they are copied to its metadata buffer.
    tag_scratch: Vec<u8>,
    /// Checksum lists of finished writes that kept none (their checksums
    /// went to block tags), for the next writes: no allocation per write.
    crc_pool: Vec<Vec<u32>>,
    /// Which lanes a new extent's copies go to, when a pool has more
    /// lanes than copies (see `placement::choose_lanes`).
    chooser: Chooser,
    /// Per place, the stamp of the lane's zone table when the chooser was
    /// last told its free blocks ([`Stamp::NONE`]: ask again).
    chooser_seen: [Stamp; MAX_DEVICES],
    /// A bit per lane whose zone table changed ([`ZoneTable::watch`]), or
    /// whose device went or came, since placement last looked: it looks
    /// at those lanes alone (see `choose_lanes`).
    lanes_changed: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// Placement's view of the lanes, as of their last change: a bit per
    /// lane whose device is away, and per lane whose empty zones are down
    /// to the reclaim reserve (only those can be full for a write).
    lanes_away: u32,
    lanes_tight: u32,
    /// Replaying the journal at open: zone tables are rebuilt afterwards.
    loading: bool,
    /// No zone can take the metadata: why (see [`Error::ReadOnly`]).
    read_only: Option<String>,
}

/// A device in place `place` must carry block tags as the volume does: a
/// volume with tags cannot read or check its blocks on a device without.
pub(super) fn check_tags(superblock: &Superblock, place: usize, device: &Device) -> Result<()> {
    let stride = superblock.tag_stride as usize;
    match device.tag_layout() {
        _ if stride == 0 => Ok(()),
        Some(layout) if layout.stride == stride => Ok(()),
        found => Err(Error::Member {
            device: place,
            why: format!(
                "the volume keeps block tags in {stride} bytes of metadata per 4 KiB block; namespace {} has {}",
                device.ns.nsid(),
                found.map_or("no room for them".to_string(), |l| format!("{} bytes", l.stride)),
            ),
        }),
    }
}

/// How the volume's blocks carry tags: the superblock's stride, and the
/// coarsest granule of the devices present (a controller that moves some
/// metadata transfers only in part).
pub(super) fn volume_tags(superblock: &Superblock, devices: &[Option<Device>]) -> Option<TagLayout> {
    if superblock.checksum_area {
        return Some(TagLayout { stride: crate::area::TAG_BYTES, granule: None });
    }
    let granule = devices.iter().flatten().filter_map(|d| d.tag_layout().and_then(|t| t.granule)).max();
    (superblock.tag_stride != 0).then_some(TagLayout { stride: superblock.tag_stride as usize, granule })
}

impl Volume {
    /// The in-memory volume around loaded devices, with empty zone tables.
    /// An absent device's lanes get a table of `absent_zones[device]`
    /// zones of unknown capacity, to keep its copies' places until it
    /// rejoins (`member::rebuild_lane` then sizes it from the device).
    pub(super) fn assemble(
        devices: Vec<Option<Device>>,
        label: Label,
        options: VolumeOptions,
        absent_zones: &[usize],
    ) -> Result<Self> {
        let superblock = label.superblock.clone();
        let tags = volume_tags(&superblock, &devices);
        let mut devices = devices;
        devices.iter_mut().flatten().for_each(Device::reserve_buffer);
        for (place, device) in devices.iter().enumerate() {
            if let Some(device) = device {
                check_tags(&superblock, place, device)?;
            }
        }
        let volume_id = label.volume_id;
        let g = superblock.meta_zones_per_segment;
        let profile = superblock.profile;
        let mut lanes = Vec::new();
        for (lane_index, device) in lane_devices(profile, devices.len()).into_iter().enumerate() {
            let meta_zones = meta_zones_on(devices.len(), g, device);
            // Segments moved out of the format's area (a zone wore out).
            let moved: Vec<u32> = placed_copies(&superblock)
                .iter()
                .filter(|c| c.device == device)
                .flat_map(|c| c.segments.iter().flat_map(move |&first| first..first + g))
                .filter(|&zone| zone >= meta_zones)
                .collect();
            let owned = |zone| lane_owns(profile, lane_index, meta_zones, zone) && !moved.contains(&zone);
            let capacities: Vec<u32> = match &devices[device] {
                Some(d) => data_capacities(d, &superblock),
                None => vec![member::UNKNOWN_CAPACITY; absent_zones.get(device).copied().unwrap_or(0)],
            };
            let mut table = ZoneTable::new(&capacities, owned, superblock.streams, superblock.reserve_zones as usize);
            table.set_finish_threshold(superblock.finish_threshold_blocks);
            let data_zones = (0..table.zone_count()).filter(|&z| table.zone(z).usage == ZoneUse::Empty).count();
            let needed = superblock.reserve_zones as usize + usize::from(superblock.streams) + 1;
            if data_zones < needed && devices[device].is_some() {
                return Err(Error::InvalidConfig(format!(
                    "lane {} has {data_zones} data zones; {} streams, reclaim and a reserve of {} need {needed}",
                    lanes.len(),
                    superblock.streams,
                    superblock.reserve_zones
                )));
            }
            let written = vec![0; capacities.len()];
            let sealed = vec![0; capacities.len()];
            lanes.push(Lane { device, table, written, sealed, ..Lane::empty() });
        }
        // Zone budget per device. Active: every stream's zone and
        // reclaim's in each of its lanes, plus one per metadata copy on the
        // device. Open: the streams' zones, plus one that metadata and
        // reclaim take turns at (each copy's zone is closed once written).
        let mut zone_limits = Vec::new();
        for (index, device) in devices.iter().enumerate() {
            let Some(device) = device else {
                zone_limits.push(None);
                continue;
            };
            let limits = device.ns.zones().and_then(|z| {
                if z.max_open_zones.is_none() && z.max_active_zones.is_none() {
                    return None;
                }
                let active = z.max_active_zones.unwrap_or(u32::MAX);
                Some((z.max_open_zones.unwrap_or(active).min(active), active))
            });
            let lanes_here = lanes.iter().filter(|l| l.device == index).count() as u32;
            let streams = u32::from(superblock.streams);
            let needed_active = lanes_here * (streams + 1) + meta_copies_on(devices.len(), index);
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
        let bits = LocationBits::from_offset_bits(superblock.location_offset_bits)
            .ok_or_else(|| Error::Corrupt(format!("{} offset bits", superblock.location_offset_bits)))?;
        for (place, device) in devices.iter().enumerate() {
            if let Some(device) = device {
                check_locations(&superblock, place, device)?;
            }
        }
        let copy_supported = devices.iter().map(|d| d.as_ref().is_some_and(|d| d.ns.copy_usable())).collect();
        let mut members: Vec<member::Member> =
            superblock.members.iter().map(|&record| member::Member::new(record)).collect();
        members.resize_with(devices.len(), || member::Member::new(MemberRecord::default()));
        let device_writes = vec![0; devices.len()];
        // Writes in flight at most: each holds a DMA buffer (its own, or
        // one the volume lent) on every device it writes. The pending
        // writes' slab and the queues of their outcomes are sized for
        // them here, so that no write grows them.
        let writes_max: usize = devices
            .iter()
            .flatten()
            .map(|d| d.pool.capacity() + d.fill_pool.as_ref().map_or(0, DmaPool::capacity))
            .sum();
        let stats = VolumeStats {
            zones: lanes.iter().map(|l| u64::from(l.table.zone_count())).sum(),
            ..VolumeStats::default()
        };
        if lanes.len() > MAX_DEVICES {
            return Err(Error::InvalidConfig(format!("{} lanes: a volume has at most {MAX_DEVICES}", lanes.len())));
        }
        let lane_count = lanes.len();
        let mut chooser = Chooser::new();
        for (index, lane) in lanes.iter().enumerate() {
            chooser.add(index, lane.table.free_blocks());
        }
        // A lane with this many blocks of writes in flight is passed over
        // while others with room are below it, so that a slow device takes
        // writes at the rate it completes them (OpenZFS's queue target).
        chooser.set_queue_target(QUEUE_TARGET_EXTENTS * u64::from(superblock.max_extent_blocks.max(1)));
        Ok(Volume {
            devices,
            gone: Vec::new(),
            members,
            device_writes,
            busy: 0,
            copies_done: VecDeque::new(),
            lanes,
            journal: Journal::new(label),
            recovery: RecoveryReport::default(),
            tags,
            area: superblock.checksum_area,
            sealed_since_commit: Vec::new(),
            area_cache: vec![None; lane_count],
            superblock,
            volume_id,
            options,
            table: Table::with_lanes(bits, lane_count),
            owners: Owners::default(),
            mapped: IdMap::default(),
            freed_crcs: IdMap::default(),
            area_buffer: Vec::new(),
            resets_seen: u64::MAX,
            recent_ops_blocks: 0,
            live_blocks: 0,
            ops: Vec::new(),
            writes: Vec::with_capacity(writes_max),
            free_slots: Vec::with_capacity(writes_max),
            done: VecDeque::with_capacity(writes_max),
            retiring: Vec::new(),
            held_zone: None,
            bad_blocks: Vec::new(),
            zone_limits,
            reclaim_open: vec![false; lane_count],
            copy_supported,
            reclaim: None,
            reclaim_queue: Vec::new(),
            next_reclaim_lane: 0,
            stats,
            scratch: Vec::new(),
            tag_scratch: Vec::new(),
            crc_pool: Vec::new(),
            chooser,
            chooser_seen: [Stamp::NONE; MAX_DEVICES],
            lanes_changed: Default::default(),
            lanes_away: 0,
            lanes_tight: 0,
            loading: false,
            read_only: None,
        }
        .watching_lanes())
    }

    /// The copy's location.
    pub fn location(&self, id: ExtentId, lane: usize) -> Option<Location> {
        self.table.get(id).filter(|_| lane < self.lanes.len()).map(|e| e.on(lane))
    }

    /// The first LBA of `location` on lane `lane`'s namespace (0 while the
    /// lane's device is away).
    pub fn lba(&self, lane: usize, location: Location) -> u64 {
        self.devices[self.lanes[lane].device].as_ref().map_or(0, |d| d.lba(location.zone, location.offset))
    }

    /// The first LBA of lane `lane`'s namespace that holds data: the start
    /// of its first zone the volume owns, after the metadata segments.
    /// `None` when the lane's device is away or owns no zone.
    pub fn data_start_lba(&self, lane: usize) -> Option<u64> {
        let table = &self.lanes.get(lane)?.table;
        let zone = (0..table.zone_count()).find(|&z| table.zone(z).usage != ZoneUse::NotOwned)?;
        let device = self.devices[self.lanes[lane].device].as_ref()?;
        Some(device.lba(zone, 0))
    }

    /// The volume's identity (chosen at format), to tie saved state such as
    /// a scrub checkpoint to this volume.
    pub fn id(&self) -> u64 {
        self.volume_id
    }

    /// Whether lane `lane` lies on a zoned namespace (where a copy cannot
    /// be rewritten in place).
    pub fn lane_is_zoned(&self, lane: usize) -> bool {
        let device = self.lanes[lane].device;
        match &self.devices[device] {
            Some(d) => d.is_zoned(),
            None => self.superblock.devices[device].3,
        }
    }

    /// Whether lane `lane`'s device is present and in use (not away or
    /// given up).
    pub fn lane_online(&self, lane: usize) -> bool {
        self.devices[self.lanes[lane].device].is_some()
    }

    /// The device at place `device`, when present and in use.
    pub(super) fn dev(&self, device: usize) -> &Device {
        self.devices[device].as_ref().expect("a device in use")
    }

    /// The device at place `device`, when present and in use.
    pub(super) fn dev_mut(&mut self, device: usize) -> &mut Device {
        self.devices[device].as_mut().expect("a device in use")
    }

    /// The first lane whose device is in use.
    pub(super) fn first_online_lane(&self) -> usize {
        (0..self.lanes.len()).find(|&l| self.lane_online(l)).unwrap_or(0)
    }

    /// Blocks of live data (one copy of each extent).
    pub fn valid_blocks(&self) -> u64 {
        self.live_blocks
    }

    /// Copies and namespaces, as chosen at format.
    pub fn profile(&self) -> Profile {
        self.superblock.profile
    }

    /// Lanes: one per device place, or two on the one device of a dup
    /// volume. Each extent has its copies in [`Volume::copies`] of them.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Copies of each extent, each in a lane of its own, as the profile
    /// asks.
    pub fn copies(&self) -> usize {
        self.superblock.profile.copies()
    }

    /// Blocks of the copies that lane `lane` holds.
    pub fn lane_valid_blocks(&self, lane: usize) -> u64 {
        self.lanes.get(lane).map_or(0, |l| l.table.valid_blocks())
    }

    /// Which device (index into the list given at open) holds `lane`.
    pub fn lane_device(&self, lane: usize) -> usize {
        self.lanes[lane].device
    }

    /// The volume's device at each place (`None` when away or given up);
    /// for tools that need the namespace or its queue pair (say, to inject
    /// faults).
    pub fn devices_mut(&mut self) -> &mut [Option<Device>] {
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

    /// Each data zone takes a whole number of these bytes, so extents of
    /// any power-of-two size up to it fill [`Volume::capacity_bytes`]
    /// exactly: the largest extent, unless the zones cannot hold a whole
    /// number of them at a cost of at most 1/256 of each
    /// ([`zone_data_blocks`]); [`Volume::room`] counts any other size.
    pub fn data_unit_bytes(&self) -> usize {
        self.superblock.data_unit_blocks as usize * BLOCK_SIZE
    }

    /// Bytes of data the volume holds when full, one copy counted. Each
    /// lane in use can take its data zones, with the metadata zones, the
    /// checksum areas and the zones kept for reclaim taken out
    /// ([`ZoneTable::usable_blocks`]), in whole data units; with each
    /// extent's copies in distinct lanes, the volume holds as many units
    /// as [`pool_rounds`] finds (with a lane per copy, what the smallest
    /// lane holds; a pool of equal lanes, their sum over the copies).
    /// Copies that no lane in use can take (too few of them) are not
    /// counted: they wait for a resilver. Extents of any power-of-two size
    /// up to the volume's data unit fill exactly this much
    /// ([`zone_data_blocks`]); [`Volume::room`] says what writes of any
    /// size still fit.
    pub fn capacity_bytes(&self) -> u64 {
        let unit = u64::from(self.superblock.data_unit_blocks.max(1));
        let units: Vec<u64> = (0..self.lanes.len())
            .filter(|&lane| self.lane_online(lane))
            .map(|lane| self.lanes[lane].table.usable_blocks() / unit)
            .collect();
        let copies = self.copies().min(units.len());
        // The metadata segments hold this many extents of the data unit
        // (`meta_zones_per_segment`'s floor).
        pool_rounds(&units, copies) * unit * BLOCK_SIZE as u64
    }

    /// Zones over every lane.
    fn zones_over_lanes(&self) -> u64 {
        self.lanes.iter().map(|l| u64::from(l.table.zone_count())).sum()
    }

    /// A new extent of `blocks` keeps the checkpoint within its share of
    /// the metadata segments ([`crate::journal::layout::CHECKPOINT_SHARE`]),
    /// counted as commits will write it: the table's pages, with the slot
    /// this extent takes, and the checksums in the map (those of the extents there,
    /// at their average size, and this one's). Else
    /// [`Error::NoSpace`]`(`[`Full::Metadata`]`)`, before anything is
    /// written: a pool whose segments are bounded ([`SEGMENT_SHARE`])
    /// refuses extents past what they hold, rather than fail a commit.
    ///
    /// [`SEGMENT_SHARE`]: crate::journal::layout::SEGMENT_SHARE
    pub(super) fn check_metadata_room(&self, blocks: u32) -> Result<()> {
        use crate::journal::layout::{checkpoint_bytes, checkpoint_room};
        let live = self.table.len().max(1);
        let mapped = self.mapped.len() as u64;
        let mapped_blocks = self.live_blocks * mapped / live;
        let slots = self.table.slots_after_reserve();
        let bytes = checkpoint_bytes(slots, mapped + 1, mapped_blocks + u64::from(blocks), self.zones_over_lanes());
        if bytes > checkpoint_room(self.journal.segment_blocks(&self.devices)) {
            return Err(Error::NoSpace(crate::error::Full::Metadata));
        }
        Ok(())
    }

    /// A write of `len` bytes to `stream` is one the volume takes: a
    /// stream it has, and a nonzero multiple of 4 KiB up to the largest
    /// extent.
    pub(super) fn check_write_shape(&self, stream: u8, len: usize) -> Result<()> {
        if stream >= self.superblock.streams {
            return Err(Error::InvalidArgument(format!(
                "stream {stream}: the volume has {} stream(s)",
                self.superblock.streams
            )));
        }
        if len == 0 || !len.is_multiple_of(BLOCK_SIZE) || len > self.max_extent_bytes() {
            return Err(Error::InvalidArgument(format!(
                "a write of {len} bytes: expected a nonzero multiple of 4096 up to {}",
                self.max_extent_bytes()
            )));
        }
        Ok(())
    }

    /// Bytes that writes of `extent_bytes` each to `stream` can still
    /// add, one after another, before one fails with [`Error::NoSpace`]:
    /// in each lane in use, the stream's open zone and each empty zone
    /// but those kept for reclaim, counting only whole extents per zone,
    /// and over the lanes as many extents as their copies fit in distinct
    /// lanes ([`pool_rounds`]). Frees count once committed and reclaimed.
    /// O(zones): for tools that check a size before they write.
    pub fn room(&self, stream: u8, extent_bytes: usize) -> Result<u64> {
        self.check_write_shape(stream, extent_bytes)?;
        let blocks = (extent_bytes / BLOCK_SIZE) as u32;
        let extents: Vec<u64> = (0..self.lanes.len())
            .filter(|&lane| self.lane_online(lane))
            .map(|lane| self.lanes[lane].table.room(crate::zones::Slot::Stream(stream), blocks))
            .collect();
        let copies = self.copies().min(extents.len());
        let data = pool_rounds(&extents, copies);
        Ok(data.min(self.metadata_extents_left(blocks)) * extent_bytes as u64)
    }

    /// How many more extents of `blocks` the checkpoint holds within its
    /// share of the metadata segments (as [`Volume::check_metadata_room`]
    /// counts, each new extent mapped when the map keeps checksums; to
    /// within a page of the table, 340 extents, where it binds).
    fn metadata_extents_left(&self, blocks: u32) -> u64 {
        use crate::journal::layout::checkpoint_room;
        let now = self.checkpoint_estimate();
        let map = u64::from(self.tags.is_none() && !self.area);
        // Per page of extents: the page, and with a map their checksums.
        let per_page = crate::journal::PAGE_BYTES as u64 + PAGE_SLOTS as u64 * map * (6 + 4 * u64::from(blocks));
        let left = checkpoint_room(self.journal.segment_blocks(&self.devices)).saturating_sub(now);
        left * PAGE_SLOTS as u64 / per_page
    }

    /// The bytes of a whole checkpoint now, as
    /// [`Volume::check_metadata_room`] counts them: the table's pages,
    /// and the checksums in the map at the mapped extents' average size.
    pub(super) fn checkpoint_estimate(&self) -> u64 {
        let live = self.table.len().max(1);
        let mapped = self.mapped.len() as u64;
        let mapped_blocks = self.live_blocks * mapped / live;
        let slots = self.table.pages() * PAGE_SLOTS as u64;
        crate::journal::layout::checkpoint_bytes(slots, mapped, mapped_blocks, self.zones_over_lanes())
    }

    /// The journal sequence number of the last commit.
    pub fn committed_seq(&self) -> u64 {
        self.journal.seq
    }

    /// Operations not yet committed.
    pub fn uncommitted_ops(&self) -> usize {
        self.ops.len()
    }

    /// Why the volume is read-only, if it is: no zone can take its
    /// metadata ([`Error::ReadOnly`]).
    pub fn read_only(&self) -> Option<&str> {
        self.read_only.as_deref()
    }

    /// What open found and did about the metadata.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The counters, with the gauges (capacity, live bytes, extents, empty
    /// zones) computed now.
    pub fn stats(&self) -> VolumeStats {
        let mut stats = self.stats;
        stats.capacity_bytes = self.capacity_bytes();
        stats.valid_bytes = self.valid_blocks() * BLOCK_SIZE as u64;
        stats.extents = self.table.len();
        stats.empty_zones = self.lanes.iter().map(|l| l.table.empty_zones() as u64).sum();
        stats.owners_in_memory = self.owners.recent_count() as u64;
        stats.checkpoint_pages_pending = self.journal.pages_total.saturating_sub(self.journal.pages_written);
        stats.unsealed_zones = self.unsealed_zones();
        stats
    }

    /// The zone table of `lane`.
    pub fn zone_table(&self, lane: usize) -> &ZoneTable {
        &self.lanes[lane].table
    }

    /// Waits for writes, commits, and hands back the devices: those in use
    /// by place, then any given up while open.
    pub fn close(mut self) -> Result<Vec<Device>> {
        self.commit()?;
        Ok(self.take_devices())
    }

    /// Hands back the devices without committing: what a crash leaves.
    pub fn abandon(mut self) -> Vec<Device> {
        self.take_devices()
    }

    fn take_devices(&mut self) -> Vec<Device> {
        let mut devices: Vec<Device> = self.devices.iter_mut().filter_map(Option::take).collect();
        devices.append(&mut self.gone);
        devices
    }

    /// Checks every invariant between the extent table, the checksum map
    /// and the zone tables; for tests. Panics on a violation.
    pub fn check_invariants(&self) {
        let live: u64 = self.table.iter().map(|(_, e)| u64::from(e.blocks)).sum();
        assert_eq!(self.live_blocks, live, "live block count");
        assert_eq!(self.table.iter().count() as u64, self.table.len(), "live extent count");
        for (&id, crcs) in &self.mapped {
            let entry = self.table.get(id).unwrap_or_else(|| panic!("checksums of extent {id}, which is not live"));
            assert_eq!(crcs.len(), entry.blocks as usize, "extent {id}'s checksums");
        }
        if self.tags.is_none() {
            assert_eq!(self.mapped.len() as u64, self.table.len(), "every extent's checksums in the map");
        }
        if let Err(error) = self.check_owner_homes() {
            panic!("{error}");
        }
        self.check_area_invariants();
        for (lane_index, lane) in self.lanes.iter().enumerate() {
            let mut valid = vec![0u32; lane.table.zone_count() as usize];
            for (_, entry) in self.table.iter() {
                let location = entry.on(lane_index);
                if !location.is_missing() {
                    valid[location.zone as usize] += entry.blocks;
                }
            }
            for (_, entry) in self.table.iter() {
                assert!(entry.within(self.lanes.len()), "a copy past the lanes");
            }
            if let Some(why) = self.overlap(lane_index, true) {
                panic!("{why}");
            }
            for (zone, &v) in valid.iter().enumerate() {
                assert_eq!(lane.table.zone(zone as u32).valid, v, "lane {lane_index} zone {zone} valid count");
            }
            if !self.lane_online(lane_index) {
                assert_eq!(lane.table.active_zones(), 0, "lane {lane_index} is away but holds active zones");
            }
        }
    }
}

/// The blocks of each of `device`'s zones that take data on a volume of
/// `superblock`'s shape ([`zone_data_blocks`]).
pub(super) fn data_capacities(device: &Device, superblock: &Superblock) -> Vec<u32> {
    let (area, unit) = (superblock.checksum_area, superblock.data_unit_blocks);
    device.zones.iter().map(|z| zone_data_blocks(z.capacity_blocks, area, unit)).collect()
}

/// The blocks of a zone of `capacity` blocks that take data: all of them,
/// or those before its checksum area on a volume with areas
/// ([`crate::area::data_blocks`]), rounded down to a multiple of `unit`
/// blocks. Extents are never split across zones, so a zone whose data is
/// not a whole number of extents leaves its tail unused when filled with
/// them: rounding the data to a whole number of the largest power-of-two
/// extent makes the capacity a volume reports exactly what extents of any
/// power-of-two size up to that unit fill (`tests/sim_capacity.rs`).
pub(crate) fn zone_data_blocks(capacity: u32, checksum_area: bool, unit: u32) -> u32 {
    let data = if checksum_area { crate::area::data_blocks(capacity) } else { capacity };
    data - data % unit.max(1)
}

/// The data unit of a new volume ([`Superblock::data_unit_blocks`]): the
/// largest power of two up to `largest` blocks (the largest extent the
/// devices take in one command) of which every zone's data holds a whole
/// number at a cost of at most 1/256 of it, so that the rounding never
/// costs what it saves. ZNS zones without checksum areas whose capacity
/// is a multiple of the largest extent, and software zones (sized for it,
/// `software_zone_blocks_for`), lose nothing and take the largest extent
/// as their unit; a 64 MiB ZNS zone with a checksum area has 16,352 blocks
/// of data: its unit is 256 KiB (32 blocks given up, 0.2%, which 256 KiB
/// extents could not fill anyway), and extents of 1 MiB leave 192 more.
pub(super) fn data_unit_blocks(devices: &[Device], checksum_area: bool, largest: u32) -> u32 {
    let mut unit = if largest == 0 { 1 } else { 1 << (31 - largest.leading_zeros()) };
    let datas: Vec<u32> = devices
        .iter()
        .flat_map(|d| d.zones.iter().map(|z| zone_data_blocks(z.capacity_blocks, checksum_area, 1)))
        .collect();
    while unit > 1 && datas.iter().any(|&data| data % unit > data / 256) {
        unit /= 2;
    }
    unit
}

/// A device in place `place` must have zones the extent table can locate:
/// their data ([`data_capacities`]; nothing else in a zone is located by
/// the table) no larger than the split the volume was formatted with
/// allows, and no more of them.
pub(super) fn check_locations(superblock: &Superblock, place: usize, device: &Device) -> Result<()> {
    let bits = LocationBits::from_offset_bits(superblock.location_offset_bits)
        .ok_or_else(|| Error::Corrupt(format!("{} offset bits", superblock.location_offset_bits)))?;
    let largest = data_capacities(device, superblock).into_iter().max().unwrap_or(0);
    if bits.fits(largest, device.zones.len() as u32) {
        return Ok(());
    }
    Err(Error::Member {
        device: place,
        why: format!(
            "namespace {} has {} zones of up to {largest} blocks of data; the volume's extent table locates zones of \
             up to {} blocks",
            device.ns.nsid(),
            device.zones.len(),
            1u64 << bits.offset_bits(),
        ),
    })
}

/// Metadata copies on device `device` of a volume of `devices` namespaces
/// (each holds one active zone).
pub(super) fn meta_copies_on(devices: usize, device: usize) -> u32 {
    meta_copies(devices, 1).iter().filter(|c| c.device == device).count() as u32
}

/// The device place of each lane of a volume of `devices` namespaces: a
/// lane per namespace, or the two of a dup on its one.
pub(super) fn lane_devices(profile: Profile, devices: usize) -> Vec<usize> {
    match profile {
        Profile::Dup => vec![0, 0],
        Profile::Single | Profile::Mirror | Profile::Mirror3 => (0..devices).collect(),
    }
}

/// Whether `zone` of its device belongs to `lane`: every zone past the
/// metadata segments, split even/odd between the two lanes of a dup.
pub(super) fn lane_owns(profile: Profile, lane: usize, meta_zones: u32, zone: u32) -> bool {
    zone >= meta_zones && (profile != Profile::Dup || (zone - meta_zones) % 2 == lane as u32)
}

/// What [`Table::misplaced`](crate::table::Table::misplaced) found in
/// lane `lane`, in words.
pub(super) fn describe_misplaced(found: Misplaced, lane: usize) -> String {
    match found {
        Misplaced::Overlap(a, b, at) => format!("extents {a} and {b} overlap at {at:?} in lane {lane}"),
        Misplaced::PastAllocation(id) => format!("extent {id} lies beyond its zone's allocation in lane {lane}"),
    }
}

#[cfg(test)]
mod tests {
    use super::word_masks;

    #[test]
    fn word_masks_reach_the_last_block_number() {
        let masks: Vec<(usize, u64)> = word_masks(u32::MAX - 3, u32::MAX).collect();
        assert_eq!(masks, vec![((u32::MAX / 64) as usize, 0b111 << 60)]);
    }

    #[test]
    fn word_masks_cover_exactly_the_bits_of_the_range() {
        for start in 0..200u32 {
            for end in start..start + 140 {
                let mut words = [0u64; 6];
                word_masks(start, end).for_each(|(word, mask)| {
                    assert_eq!(words[word] & mask, 0, "{start}..{end}: word {word} twice");
                    words[word] |= mask;
                });
                let mut bits = [0u64; 6];
                (start..end).for_each(|bit| bits[bit as usize / 64] |= 1 << (bit % 64));
                assert_eq!(words, bits, "{start}..{end}");
            }
        }
    }
}
