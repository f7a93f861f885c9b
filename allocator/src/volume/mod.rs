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
mod fill;
mod member;
mod open;
mod read;
mod reclaim;
mod repair;
mod replace;
mod scan;
mod status;
mod write;

pub use check::{CheckReport, CheckedPlace};
pub use open::DeviceState;
pub use repair::MetadataScrub;
pub use scan::LaneReads;
pub use status::{DeviceErrors, DeviceStatus, MemberState, Redundancy, ResilverStatus, VolumeState, VolumeStatus};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::journal::layout::{meta_copies, meta_zones_on, placed_copies};
use crate::journal::log::Journal;
use crate::journal::recovery::Dropped;
use crate::journal::{ExtentRecord, Label, MemberRecord, Op, Superblock};
use crate::owners::{Owners, OWNER_LOST};
use crate::table::{split, Entry, LaneOrder, LocationBits, Misplaced, Table, PAGE_SLOTS};
use crate::tags::TagLayout;
use crate::zones::{ZoneTable, ZoneUse};
use crate::{ExtentId, Location, Profile, BLOCK_SIZE};
use nvme_driver::spec::identify::Oncs;
use nvme_driver::IoCompletion;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

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

/// Where a volume keeps its blocks' checksums (format only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ChecksumStore {
    /// In every device's per-block metadata when each has room for a tag
    /// ([`crate::tags`]), else in zone checksum areas ([`crate::area`]):
    /// nothing per block in memory either way.
    Auto,
    /// In the extent map: in memory, in the journal and in checkpoints,
    /// 4 bytes per 4 KiB block (formats 7 and earlier kept them so on
    /// namespaces without per-block metadata; now only when asked for).
    Map,
    /// In every device's per-block metadata; format fails on a device
    /// without room for a tag.
    Tags,
    /// In a checksum area after each zone's data ([`crate::area`]), on any
    /// namespace: in memory only for the zones being filled.
    Area,
}

impl ChecksumStore {
    /// Its name in a word, as the tools print it and take it.
    pub fn name(self) -> &'static str {
        match self {
            ChecksumStore::Auto => "auto",
            ChecksumStore::Map => "map",
            ChecksumStore::Tags => "tags",
            ChecksumStore::Area => "area",
        }
    }
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
    /// Where the blocks' checksums live (format only).
    pub checksums: ChecksumStore,
    /// Retire a zone once less than this is left in it (format only);
    /// 0 retires only when the next extent does not fit.
    pub finish_threshold_bytes: u64,
    /// How data reaches a zoned namespace (ignored on conventional ones).
    pub write_mode: WriteMode,
    /// Most pages of a checkpoint one commit writes beside its own record
    /// (a page is 340 extents, about 6.7 KiB). Commits write a checkpoint a
    /// few pages at a time, in proportion to their own size, so that it is
    /// whole before the log reaches half of its segment; this bounds what
    /// any one commit takes on, except when the segment's room demands
    /// more. Lower spreads a checkpoint over more commits (the previous
    /// segment is held longer).
    pub checkpoint_pages_per_commit: u64,
    /// Reclaim zones with at most this fraction live.
    pub reclaim_max_valid_ratio: f64,
    /// The most owners of extents written since their table page's owners
    /// were last journaled that stay in memory (or one per 64 live extents,
    /// when more): past it, commits journal those pages' owners (see
    /// `allocator/METADATA.md`, step 4). Lower keeps less in memory and
    /// journals more.
    pub recent_owners: usize,
    /// Bound on every wait.
    pub timeout: Duration,
    /// Open only: when committed metadata is lost on every copy
    /// ([`Error::MetadataLost`]), open at the last complete state instead
    /// of failing, and report what was dropped
    /// ([`Volume::recovery`]), like `zpool import -F`. Off by default.
    pub rewind: bool,
    /// Open only: a mirror may open with a member missing, blank, failing
    /// or marked failed, on the one left ([`Error::Degraded`] otherwise),
    /// as btrfs's `mount -o degraded`. Off by default.
    pub degraded: bool,
    /// A member whose failed commands (media errors, timeouts, resets)
    /// reach this many since open is given up: marked failed, and the
    /// volume goes on degraded on the other. A device that goes away is
    /// given up at once.
    pub max_device_errors: u64,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            profile: Profile::Single,
            streams: 1,
            software_zone_bytes: None,
            reserve_zones: 1,
            max_extent_bytes: 1 << 20,
            checksums: ChecksumStore::Auto,
            finish_threshold_bytes: 0,
            write_mode: WriteMode::Auto,
            checkpoint_pages_per_commit: 64,
            recent_owners: 4096,
            reclaim_max_valid_ratio: 0.75,
            timeout: Duration::from_secs(30),
            rewind: false,
            degraded: false,
            max_device_errors: 16,
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
    /// Where the commit's time went.
    pub phases: CommitPhases,
}

/// Where a commit's time went, in microseconds (see
/// [`Volume::commit`]): for finding what makes one commit slower than the
/// rest. A commit retried after a device was given up counts its last
/// attempt only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CommitPhases {
    /// Waiting for the writes in flight, and taking in their completions.
    pub waiting_us: u64,
    /// Closing zones for reclaim and flushing the data.
    pub flushing_us: u64,
    /// Encoding the record: the operations, the checkpoint's next pages
    /// and the owner blobs due (with any owner blob read back for them).
    pub encoding_us: u64,
    /// Writing the record on every copy and flushing it (a whole
    /// checkpoint, after a failed one, counts its encoding here too).
    pub writing_us: u64,
    /// Beginning the next checkpoint in the other segment, when this
    /// commit moved the log there.
    pub rotating_us: u64,
    /// Resetting zones with nothing live.
    pub resetting_us: u64,
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
    /// Checkpoints begun (metadata segment rotations, and whole ones
    /// after a failed write or [`Volume::checkpoint_now`]).
    pub checkpoints: u64,
    /// Bytes of the last checkpoint, on one copy: the record of a whole
    /// one, or the pages (about 6.7 KiB each, 340 extents) of
    /// one spread over commits (0 when none began since open).
    pub checkpoint_bytes: u64,
    /// Zones finished on the device (Zone Management Send, action Finish
    /// Zone, ZNS Command Set 1.1 §3.4.3), freeing an active resource.
    pub zones_finished: u64,
    /// Zones reset because nothing in them was live.
    pub zones_reset: u64,
    /// Data zones found worn out (Read Only or Offline on the device) and
    /// taken out of use, at open or since.
    pub zones_worn: u64,
    /// Metadata segments moved to other zones because one of theirs wore
    /// out (since open).
    pub meta_zones_replaced: u64,
    /// Bytes moved by reclaim and repair relocations.
    pub relocated_bytes: u64,
    /// Copy commands issued by relocation (NVM Command Set 1.0 §3.2.2).
    pub copy_commands: u64,
    /// Blocks repaired by reads from another copy.
    pub repaired_blocks: u64,
    /// Time spent computing crc32c on the write path, in nanoseconds (zero
    /// when callers pass their own checksums).
    pub checksum_ns: u64,
    /// Bytes copied from the caller's memory into DMA buffers for writes
    /// (each copy of each extent; a buffer lent by [`Volume::fill_buffer`]
    /// goes to its device without one).
    pub copied_in_bytes: u64,
    /// Owners of extents written since their table page's owners were
    /// last journaled, kept in memory until a commit journals them
    /// (bounded by [`VolumeOptions::recent_owners`]).
    pub owners_in_memory: u64,
    /// Pages of owners journaled without their page, to keep
    /// `owners_in_memory` bounded (since open).
    pub owner_pages_written: u64,
    /// Pages of owners read back from the metadata (since open).
    pub owner_pages_read: u64,
    /// Extents whose owner was lost since open: every copy of their page's
    /// owners failed when a commit rewrote it ([`Error::OwnerLost`]).
    pub owners_lost: u64,
    /// Pages of the checkpoint being written over commits still to write
    /// (0 once it is whole).
    pub checkpoint_pages_pending: u64,
    /// Checksum areas whose write failed since open (on a volume with
    /// zone checksum areas): each leaves its zone unsealed.
    pub area_writes_failed: u64,
    /// Zones that take no more data and hold some, but have no checksum
    /// area (its write failed), so their extents keep their checksums in
    /// memory until reclaim moves them; zones still waiting on their
    /// writes to be sealed are not counted.
    pub unsealed_zones: u64,
}

/// What open found and did about the metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    /// The commits and extents a rewind dropped
    /// ([`VolumeOptions::rewind`]).
    pub dropped: Option<Dropped>,
    /// A metadata copy lacked records or labels the other held; both were
    /// rewritten.
    pub copies_repaired: bool,
    /// Devices given in another order than their labels': open reordered
    /// them. `device_order[i]` is the index in the list given to open of
    /// the volume's device `i`.
    pub device_order: Vec<usize>,
    /// Metadata blocks read, over every copy and segment: what open's
    /// reading cost. One copy is read whole and the other where it may
    /// hold more; both whole when they differ there (`Volume::load`).
    /// Bounded by the table's size and the log kept since its last
    /// checkpoint began (`allocator/METADATA.md`).
    pub metadata_blocks_read: u64,
    /// Extent table pages loaded from the checkpoint.
    pub pages_loaded: u64,
    /// Journal records replayed over them.
    pub records_replayed: u64,
    /// Operations in those records.
    pub ops_replayed: u64,
    /// Where open's time went (before it wrote anything).
    pub phases: OpenPhases,
}

/// Where open's time went, in microseconds of wall time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OpenPhases {
    /// Reading the metadata copies (both reads when the first showed the
    /// copies differ).
    pub reading_us: u64,
    /// Verifying and decoding the records, choosing the state, and
    /// assembling the volume around it.
    pub recovering_us: u64,
    /// Loading the checkpoint's pages and replaying the log over them.
    pub replaying_us: u64,
    /// Checking every extent against its zones and the others, and
    /// planning the zones.
    pub checking_us: u64,
}

/// One copy of an extent, as [`Volume::extents_in_order`] yields it.
#[derive(Clone, Copy, Debug)]
pub struct ExtentRef<'a> {
    /// The extent ([`Volume::owner`] gives its owner).
    pub id: ExtentId,
    /// Where this copy lives on its lane.
    pub location: Location,
    /// First LBA on the lane's namespace.
    pub lba: u64,
    /// Length, in 4 KiB blocks.
    pub blocks: u32,
    /// The crc32c of each 4 KiB block, in order (the extent map's checksums,
    /// to verify reads against); empty on a volume with block tags.
    pub crcs: &'a [u32],
    /// The volume keeps checksums in block tags, read with the data.
    pub tagged: bool,
}

impl ExtentRef<'_> {
    /// What blocks `first..first + blocks` of this copy must hold.
    pub fn expected(&self, first: u32, blocks: u32) -> crate::tags::Expected {
        if self.tagged {
            crate::tags::Expected::Tags { extent: self.id, first, blocks }
        } else {
            crate::tags::Expected::Crcs(self.crcs[first as usize..(first + blocks) as usize].to_vec())
        }
    }
}

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
    appended: HashMap<u32, Vec<u64>>,
}

impl Lane {
    /// Marks `blocks` blocks at `offset` of `zone` as placed by a Zone
    /// Append the device completed; false when some were placed already.
    /// `before` blocks of the zone were written before this one, which are
    /// the zone's head when this is its first append since open.
    fn claim_appended(&mut self, zone: u32, offset: u32, blocks: u32, before: u32) -> bool {
        let capacity = self.table.zone(zone).capacity;
        let map = self.appended.entry(zone).or_insert_with(|| {
            let mut map = vec![0u64; capacity.div_ceil(64) as usize];
            (0..before.min(capacity)).for_each(|block| map[block as usize / 64] |= 1 << (block % 64));
            map
        });
        let range = offset..offset + blocks;
        if range.clone().any(|block| map.get(block as usize / 64).is_none_or(|w| w & (1 << (block % 64)) != 0)) {
            return false;
        }
        range.for_each(|block| map[block as usize / 64] |= 1 << (block % 64));
        let entry = self.table.zone(zone);
        if entry.inflight == 0 && !matches!(entry.usage, ZoneUse::Open(_)) {
            self.appended.remove(&zone);
        }
        true
    }

    /// Zone `zone` holds nothing now (reset, or found so at open).
    fn zone_emptied(&mut self, zone: u32) {
        self.written[zone as usize] = 0;
        self.appended.remove(&zone);
    }

    /// Whether the checksum area of `zone` covers `blocks` blocks at
    /// `offset`.
    fn area_covers(&self, zone: u32, offset: u32, blocks: u32) -> bool {
        self.sealed.get(zone as usize).is_some_and(|&sealed| offset + blocks <= sealed)
    }
}

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
    zones: Vec<u32>,
    locations: Vec<Option<Location>>,
    /// Per lane: a command is in flight there.
    in_flight: Vec<bool>,
    remaining: u8,
    error: Option<Error>,
    /// The submitter already got the error; don't report it again.
    reported: bool,
}

impl PendingWrite {
    /// A write of `blocks` for extent `id` over `copies` lanes, nothing
    /// submitted yet: a new extent (`copy_of: None`) or a resilver's copy
    /// to one lane; its checksums go to the map (see `tagged`).
    fn new(
        copy_of: Option<usize>,
        id: ExtentId,
        owner: u64,
        stream: u8,
        blocks: u32,
        crcs: Vec<u32>,
        copies: usize,
    ) -> Self {
        PendingWrite {
            copy_of,
            id,
            owner,
            stream,
            blocks,
            crcs,
            tagged: false,
            zones: vec![u32::MAX; copies],
            locations: vec![None; copies],
            in_flight: vec![false; copies],
            remaining: 0,
            error: None,
            reported: false,
        }
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
    mapped: HashMap<ExtentId, Box<[u32]>>,
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
        if superblock.checksum_area {
            devices.iter_mut().flatten().for_each(Device::reserve_buffer);
        }
        for (place, device) in devices.iter().enumerate() {
            if let Some(device) = device {
                check_tags(&superblock, place, device)?;
            }
        }
        let volume_id = label.volume_id;
        let g = superblock.meta_zones_per_segment;
        let profile = superblock.profile;
        let lane_devices: &[usize] = match profile {
            Profile::Single => &[0],
            Profile::Dup => &[0, 0],
            Profile::Mirror => &[0, 1],
        };
        let mut lanes = Vec::new();
        for (lane_index, &device) in lane_devices.iter().enumerate() {
            let meta_zones = meta_zones_on(profile, g, device);
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
            lanes.push(Lane { device, table, written, sealed, appended: HashMap::new() });
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
            let needed_active = lanes_here * (streams + 1) + meta_copies_on(profile, index);
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
                check_locations(bits, place, device)?;
            }
        }
        let copy_supported = devices.iter().map(|d| d.as_ref().is_some_and(|d| d.ns.supports(Oncs::COPY))).collect();
        let mut members: Vec<member::Member> =
            superblock.members.iter().map(|&record| member::Member::new(record)).collect();
        members.resize_with(devices.len(), || member::Member::new(MemberRecord::default()));
        let device_writes = vec![0; devices.len()];
        let stats = VolumeStats {
            zones: lanes.iter().map(|l| u64::from(l.table.zone_count())).sum(),
            ..VolumeStats::default()
        };
        Ok(Volume {
            devices,
            gone: Vec::new(),
            members,
            device_writes,
            copies_done: VecDeque::new(),
            lanes,
            journal: Journal::new(label),
            recovery: RecoveryReport::default(),
            tags,
            area: superblock.checksum_area,
            sealed_since_commit: Vec::new(),
            area_cache: vec![None; 2],
            superblock,
            volume_id,
            options,
            table: Table::new(bits),
            owners: Owners::default(),
            mapped: HashMap::new(),
            live_blocks: 0,
            ops: Vec::new(),
            writes: Vec::new(),
            free_slots: Vec::new(),
            done: VecDeque::new(),
            retiring: Vec::new(),
            held_zone: None,
            bad_blocks: Vec::new(),
            zone_limits,
            reclaim_open: vec![false; 2],
            copy_supported,
            reclaim: None,
            reclaim_queue: Vec::new(),
            next_reclaim_lane: 0,
            stats,
            scratch: Vec::new(),
            tag_scratch: Vec::new(),
            loading: false,
            read_only: None,
        })
    }

    /// Makes extent `id` live as `entry`, owned by `owner`, its checksums in
    /// the map unless empty (tagged): a write's reserved ID when `journal`
    /// (and the add is journaled), else a replayed one at open.
    pub(super) fn insert_extent(
        &mut self,
        id: ExtentId,
        entry: Entry,
        owner: u64,
        crcs: Vec<u32>,
        journal: bool,
    ) -> Result<()> {
        let lanes = self.lanes.len();
        if entry.locations[..lanes].iter().all(|l| l.is_missing())
            || entry.locations[lanes..].iter().any(|l| !l.is_missing())
        {
            return Err(Error::Corrupt(format!("extent {id} has no copy, or one past the volume's lanes")));
        }
        let added = if journal { self.table.fill_reserved(id, &entry) } else { self.table.insert_at(id, &entry) };
        added.map_err(|e| Error::Corrupt(format!("extent {id}: {e}")))?;
        for (lane, &location) in entry.locations[..lanes].iter().enumerate() {
            if !location.is_missing() && !self.loading {
                self.lanes[lane].table.add_valid(location.zone, entry.blocks);
            }
        }
        if journal {
            self.ops.push(Op::Add(ExtentRecord::new(id, owner, entry.blocks, &entry.locations[..lanes], crcs.clone())));
        }
        if !crcs.is_empty() {
            self.mapped.insert(id, crcs.into_boxed_slice());
        }
        self.owners.set(split(id).0, owner);
        self.live_blocks += u64::from(entry.blocks);
        Ok(())
    }

    pub(super) fn remove_extent(&mut self, id: ExtentId, journal: bool) -> Result<Entry> {
        let entry = self.table.remove(id).ok_or(Error::NoSuchExtent(id))?;
        self.mapped.remove(&id);
        self.owners.clear(split(id).0);
        self.live_blocks -= u64::from(entry.blocks);
        for (lane, &location) in entry.locations[..self.lanes.len()].iter().enumerate() {
            if !location.is_missing() && !self.loading {
                self.lanes[lane].table.remove_valid(location.zone, entry.blocks);
            }
        }
        if journal {
            self.ops.push(Op::Free(id));
        }
        Ok(entry)
    }

    /// Moves copy `lane_index` of extent `id` to `to`; either may be
    /// [`Location::MISSING`] (a copy lost with its device, or written by a
    /// resilver).
    pub(super) fn move_extent(&mut self, id: ExtentId, lane_index: usize, to: Location, journal: bool) {
        let entry = self.table.get(id).expect("moving a live extent");
        let from = entry.locations[lane_index];
        assert!(
            !to.is_missing() || entry.locations.iter().enumerate().any(|(l, at)| l != lane_index && !at.is_missing()),
            "extent {id} left with no copy"
        );
        assert!(self.table.set_location(id, lane_index, to), "extent {id} is live");
        let lane = &mut self.lanes[lane_index];
        if !from.is_missing() && !self.loading {
            lane.table.remove_valid(from.zone, entry.blocks);
        }
        if !to.is_missing() && !self.loading {
            lane.table.add_valid(to.zone, entry.blocks);
        }
        if journal {
            self.ops.push(Op::Move { id, lane: lane_index as u8, to });
        }
    }

    /// Extent `id`, live.
    pub(super) fn live(&self, id: ExtentId) -> Result<Entry> {
        self.table.get(id).ok_or(Error::NoSuchExtent(id))
    }

    /// Extent `id`'s checksums from the map: empty when it has none there
    /// (tagged, or not live).
    pub(super) fn mapped_crcs(&self, id: ExtentId) -> &[u32] {
        self.mapped.get(&id).map_or(&[][..], |crcs| &crcs[..])
    }

    /// Lane `lane`'s copies in physical order, for a walk over them
    /// ([`Volume::extents_in_order`]): built in one pass over the extent
    /// table, 8 bytes per copy until dropped.
    pub fn lane_order(&self, lane: usize) -> LaneOrder {
        self.table.lane_order(lane, self.lanes[lane].table.zone_count())
    }

    /// The first two copies in lane `lane` that overlap (or one past its
    /// zone's allocation, when `allocation` is checked), if any.
    pub(super) fn overlap(&self, lane: usize, allocation: bool) -> Option<String> {
        let table = &self.lanes[lane].table;
        let allocated = |zone: u32| table.zone(zone).allocated;
        let allocated: Option<&dyn Fn(u32) -> u32> = if allocation { Some(&allocated) } else { None };
        Some(describe_misplaced(self.table.misplaced(lane, table.zone_count(), allocated)?, lane))
    }

    /// Refuses work once a controller was reset since the last commit: its
    /// volatile cache, and with it writes this volume counts on, may be
    /// gone, and the zone state on the device may no longer match ours.
    ///
    /// A mirror member whose controller was reset is given up instead (its
    /// copies since the last commit are marked missing) when another
    /// device is in use: the volume goes on degraded, and the member can
    /// rejoin ([`Volume::rejoin`]).
    pub(super) fn check_resets(&mut self) -> Result<()> {
        if let Some(why) = &self.read_only {
            return Err(Error::ReadOnly { why: why.clone() });
        }
        if self.devices.iter().all(Option::is_none) {
            return Err(Error::NoDevices);
        }
        while let Some(device) = self.devices.iter().position(|d| d.as_ref().is_some_and(Device::reset_since_durable)) {
            let why = "its controller was reset: writes since the last commit may be lost".to_string();
            if !self.give_up(device, why) {
                return Err(Error::ControllerReset { device });
            }
        }
        Ok(())
    }

    /// Extent IDs, in no particular order.
    pub fn extent_ids(&self) -> impl Iterator<Item = ExtentId> + '_ {
        self.table.iter().map(|(id, _)| id)
    }

    /// The extent's length in bytes, when it is live.
    pub fn extent(&self, id: ExtentId) -> Option<usize> {
        self.table.get(id).map(|e| e.blocks as usize * BLOCK_SIZE)
    }

    /// The extent's owner, as given to [`Volume::submit_write`]. Owners are
    /// kept on the device (see `allocator/METADATA.md`, step 4): one may
    /// take a metadata read. Fails with [`Error::NoSuchExtent`], with
    /// [`Error::OwnerLost`] when a commit found every copy of its owners
    /// bad, or with the read's error when neither copy can be read now.
    pub fn owner(&mut self, id: ExtentId) -> Result<u64> {
        self.live(id)?;
        let slot = split(id).0;
        let owner = match self.owners.recent(slot) {
            Some(owner) => owner,
            None => {
                let page = slot / PAGE_SLOTS as u64;
                self.home_owners(page)?[(slot % PAGE_SLOTS as u64) as usize]
            }
        };
        if owner == OWNER_LOST {
            return Err(Error::OwnerLost { extent: id });
        }
        Ok(owner)
    }

    /// Every live extent's owner is somewhere: recent, or in its page's
    /// blob.
    pub(super) fn check_owner_homes(&self) -> Result<()> {
        for page in 0..self.table.pages() {
            if self.owners.home(page).is_none() {
                if let Some(slot) = self.table.live_slots(page).find(|&slot| self.owners.recent(slot).is_none()) {
                    return Err(Error::Corrupt(format!("extent slot {slot}: its owner was never journaled")));
                }
            }
        }
        Ok(())
    }

    /// Every live extent with its owner, in slot order: a metadata read per
    /// page of 340 extents at most. An owner lost with every copy of its
    /// metadata reads as [`crate::OWNER_LOST`]; a page that cannot be read
    /// now fails the listing with the read's error.
    pub fn extent_owners(&mut self) -> Result<Vec<(ExtentId, u64)>> {
        let ids: Vec<ExtentId> = self.table.iter().map(|(id, _)| id).collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let slot = split(id).0;
            let owner = match self.owners.recent(slot) {
                Some(owner) => owner,
                None => self.home_owners(slot / PAGE_SLOTS as u64)?[(slot % PAGE_SLOTS as u64) as usize],
            };
            out.push((id, owner));
        }
        Ok(out)
    }

    /// Page `page`'s owners as its newest blob holds them: kept as read, or
    /// read from the metadata.
    fn home_owners(&mut self, page: u64) -> Result<&[u64]> {
        if self.owners.cached(page).is_none() {
            let Some(home) = self.owners.home(page) else {
                return Err(Error::Corrupt(format!("the owners of extent table page {page} were never journaled")));
            };
            let owners = self.journal.read_owner_blob(&mut self.devices, home, page)?;
            self.stats.owner_pages_read += 1;
            self.owners.keep(page, owners.into_boxed_slice());
        }
        Ok(self.owners.cached(page).expect("kept just now"))
    }

    /// Every owner of page `page` now, for a record to carry: its blob's,
    /// with the recent ones over them (no read when those cover every live
    /// slot). A blob bad on every copy for good loses the owners only it
    /// held: they become [`OWNER_LOST`], loudly, and the commit goes on
    /// (failing it would stop the volume for a word per extent). A read
    /// that failed otherwise (a timeout, a reset) fails the commit, which
    /// is retried.
    pub(super) fn page_owners(&mut self, page: u64) -> Result<Vec<u64>> {
        let live: Vec<u64> = self.table.live_slots(page).collect();
        let first = page * PAGE_SLOTS as u64;
        let mut owners = vec![0u64; PAGE_SLOTS];
        if live.iter().any(|&slot| self.owners.recent(slot).is_none()) {
            match self.home_owners(page) {
                Ok(blob) => {
                    for &slot in &live {
                        owners[(slot - first) as usize] = blob[(slot - first) as usize];
                    }
                }
                Err(error @ Error::Corrupt(_)) => {
                    let lost = live.iter().filter(|&&slot| self.owners.recent(slot).is_none()).count();
                    log::error!("{error}: the owners of {lost} extents on that page are lost");
                    self.stats.owners_lost += lost as u64;
                    for &slot in &live {
                        owners[(slot - first) as usize] = OWNER_LOST;
                    }
                }
                Err(error) => return Err(error),
            }
        }
        self.owners.overlay(page, &mut owners);
        Ok(owners)
    }

    /// The extent's block checksums, from the extent map; `None` when there
    /// is no such extent, or when its checksums live in its blocks' tags
    /// ([`Volume::tagged`]).
    pub fn checksums(&self, id: ExtentId) -> Option<&[u32]> {
        self.mapped.get(&id).map(|crcs| &crcs[..])
    }

    /// How the devices carry each block's checksum in its metadata
    /// ([`crate::tags`]), or, on a volume with zone checksum areas, the
    /// tag format of its areas; `None` when checksums live in the extent
    /// map. [`Volume::checksum_store`] says which.
    pub fn block_tags(&self) -> Option<TagLayout> {
        self.tags
    }

    /// Whether extent `id`'s checksums are in its blocks' tags rather than
    /// the extent map. On a volume with tags, every extent is, except on a
    /// controller that cannot carry an extent's tags in one command
    /// ([`TagLayout::carries`]): such an extent keeps its checksums in the
    /// map.
    pub fn tagged(&self, id: ExtentId) -> bool {
        self.tags.is_some() && !self.mapped.contains_key(&id) && self.table.get(id).is_some()
    }

    /// The volume's ID, which block tags bind each block to.
    pub fn volume_id(&self) -> u64 {
        self.volume_id
    }

    /// Writes into `out` the tags of extent `id`'s blocks holding `data`
    /// (the whole extent), on a volume with block tags.
    pub(super) fn fill_tags(&self, id: ExtentId, data: &[u8], out: &mut [u8]) {
        let layout = self.tags.expect("a volume with block tags");
        let mut crcs = Vec::with_capacity(data.len() / BLOCK_SIZE);
        crate::checksum::block_crcs(data, &mut crcs);
        crate::tags::fill(layout, self.volume_id, id, 0, &crcs, out);
    }

    /// The copy's location.
    pub fn location(&self, id: ExtentId, lane: usize) -> Option<Location> {
        self.table.get(id).filter(|_| lane < self.lanes.len()).map(|e| e.locations[lane])
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

    /// Copies per extent.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
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

    /// Bytes the volume can hold: its first lane's zones, less the reclaim
    /// reserve.
    pub fn capacity_bytes(&self) -> u64 {
        let table = &self.lanes[self.first_online_lane()].table;
        let zones: Vec<u32> = (0..table.zone_count()).filter(|&z| table.zone(z).usage != ZoneUse::NotOwned).collect();
        let reserve: u64 =
            zones.iter().take(self.superblock.reserve_zones as usize).map(|&z| u64::from(table.zone(z).capacity)).sum();
        (table.capacity_blocks() - reserve) * BLOCK_SIZE as u64
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
                let location = entry.locations[lane_index];
                if !location.is_missing() {
                    valid[location.zone as usize] += entry.blocks;
                }
            }
            for (_, entry) in self.table.iter() {
                assert!(entry.locations[self.lanes.len()..].iter().all(|l| l.is_missing()), "a copy past the lanes");
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

/// The blocks of each of `device`'s zones that take data: all of them, or
/// those before the checksum area on a volume with areas.
pub(super) fn data_capacities(device: &Device, superblock: &Superblock) -> Vec<u32> {
    let data = |capacity| if superblock.checksum_area { crate::area::data_blocks(capacity) } else { capacity };
    device.zones.iter().map(|z| data(z.capacity_blocks)).collect()
}

/// A device in place `place` must have zones the extent table can locate:
/// no larger than the split the volume was formatted with allows, and no
/// more of them.
pub(super) fn check_locations(bits: LocationBits, place: usize, device: &Device) -> Result<()> {
    let largest = device.zones.iter().map(|z| z.capacity_blocks).max().unwrap_or(0);
    if bits.fits(largest, device.zones.len() as u32) {
        return Ok(());
    }
    Err(Error::Member {
        device: place,
        why: format!(
            "namespace {} has {} zones of up to {largest} blocks; the volume's extent table locates zones of up to {} \
             blocks",
            device.ns.nsid(),
            device.zones.len(),
            1u64 << bits.offset_bits(),
        ),
    })
}

/// Metadata copies on device `device` (each holds one active zone).
pub(super) fn meta_copies_on(profile: Profile, device: usize) -> u32 {
    meta_copies(profile, 1).iter().filter(|c| c.device == device).count() as u32
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
