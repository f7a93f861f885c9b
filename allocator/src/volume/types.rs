//! The volume's public types: how it is opened and written
//! ([`VolumeOptions`], [`WriteMode`], [`ChecksumStore`]), and what it
//! reports (writes done, reads, commits, reclaim, statistics, recovery,
//! the phases of open, and extents in physical order).

#[allow(unused_imports, reason = "the intra-doc links name it")]
use super::Volume;
use crate::error::Result;
use crate::journal::recovery::Dropped;
use crate::{ExtentId, Location, Profile};
use serde::Serialize;
use std::time::Duration;

/// How data reaches a zoned namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
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
#[serde(rename_all = "snake_case")]
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
    /// more, or the commit's own operations do (pages at eight times their
    /// bytes, so that the checkpoint keeps pace with large commits). Lower
    /// spreads a checkpoint over more commits (the previous segment is
    /// held longer).
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
    /// Format only: the new volume's ID ([`Volume::id`]) instead of a
    /// random one, as `mkfs -U` takes a UUID: to make a known volume again
    /// (the tools' simulated volumes, so that a checkpoint taken on one run
    /// resumes on the next). Nonzero. Two volumes an appliance holds
    /// together must never share one.
    pub volume_id: Option<u64>,
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
            volume_id: None,
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
#[serde(rename_all = "snake_case")]
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
    /// Bytes a removal moved between namespaces of one controller by Copy
    /// (descriptor format 2h), no byte passing through the host.
    pub copied_across_bytes: u64,
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
