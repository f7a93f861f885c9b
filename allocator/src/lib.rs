//! A zoned allocator over NVMe namespaces: ZNS namespaces, or conventional
//! namespaces split into software zones; a pool of 1 to 16 of them with one
//! copy of each extent ("single"), two or three on distinct namespaces
//! ("mirror", "mirror3"), or two copies on one namespace ("dup"). See
//! `docs/pool.md`.
//!
//! # Architecture
//!
//! - [`zones`]: placement. Each lane (one copy's zones) keeps its empty
//!   zones in a FIFO, one open zone per stream and per reclaim, and full
//!   zones in a set ordered by live blocks that only reclaim looks at.
//!   Allocation is O(1) however full the volume is; extents never span
//!   zones; a zone with less room left than the finish threshold is
//!   retired and finished on the device, freeing an active resource.
//! - [`device`]: one namespace, its polled queue pair and DMA buffers.
//! - The write path ([`Volume::submit_write`], [`Volume::poll`]): on ZNS,
//!   Zone Append with many appends in flight per zone (the device picks
//!   the LBA, so ordering needs no lock, and ZASL bounds the extent); with
//!   [`WriteMode::Ordered`], writes at the write pointer with one in flight
//!   per zone, for devices without Zone Append. On conventional
//!   namespaces, plain writes at the allocated offset, any number in
//!   flight.
//! - Integrity: a crc32c per 4 KiB block ([`checksum`]), kept in the
//!   extent map; [`Volume::read`] verifies it and, on a mismatch or a media
//!   error, reads the other copy, returns good data and records the bad
//!   block ([`Volume::bad_blocks`]).
//! - Durable metadata ([`journal`]): one copy on each of a pool's first
//!   three namespaces (two in different zones of a volume of one), each of
//!   two segments of whole zones that begin with the device's label; every
//!   other member carries its label in a zone of its own.
//!   [`Volume::commit`] flushes data, writes a checksummed, sequenced delta
//!   record to both copies and flushes both. When a segment fills (or its
//!   log passes half of it), a checkpoint of the whole state goes to the
//!   other segment under a new generation, and only then is the old one
//!   retired. Opening finds devices by label, reads each record from
//!   whichever copy holds it whole, and fails with [`Error::MetadataLost`]
//!   when a later record proves an earlier one lost on every copy; only a
//!   torn tail (never acknowledged) is dropped.
//! - Mirror members: a device that goes away or keeps failing is given up
//!   and the volume goes on degraded ([`VolumeOptions::degraded`] to open
//!   one); what lacks a copy is recorded as [`Location::MISSING`] in the
//!   metadata; [`Volume::replace`] puts a new device in a failed place,
//!   [`Volume::rejoin`] brings one back, and a resilver writes the missing
//!   copies ([`Volume::submit_copy`]); [`Volume::status`] says what is at
//!   risk, and [`Volume::check`] checks without writing.
//! - Free and reclaim: [`Volume::free`] lowers a zone's live count; a zone
//!   with nothing live is reset once the frees are committed;
//!   [`Volume::reclaim_step`] relocates a bounded amount of the emptiest
//!   zone's live data (NVMe Copy when the device has it, read and write
//!   otherwise), commits the moves, then resets the zone.
//! - For scrub: [`Volume::lane_order`] sorts a lane's extents by position
//!   once per pass, and [`Volume::extents_in_order`] walks them from any
//!   position with their checksums, one search per batch.
//!
//! # Crash safety
//!
//! Only committed state survives. Data is flushed before the journal
//! record that names it, and a zone is reset only after the frees or moves
//! that emptied it are committed, so a power cut at any point leaves the
//! last committed state (or, for a commit in progress, the new one) whole.
//! On a ZNS device whose metadata zone holds a torn record, opening writes
//! a fresh checkpoint elsewhere rather than appending after garbage. A
//! commit that failed is retried by writing a whole checkpoint under a new
//! generation, never by appending the same operations again.
//!
//! ```
//! use nvme_driver::sim::{SimConfig, Simulator};
//! use nvme_driver::{Controller, ControllerOptions};
//! use zoned_allocator::{Device, DeviceOptions, Volume, VolumeOptions};
//!
//! // A simulated ZNS namespace: 64 MiB, 1 MiB zones (512-byte LBAs).
//! let sim = Simulator::new(SimConfig::zoned(131072, 512, 2048, 2048));
//! let controller = Controller::init(sim, ControllerOptions::default()).unwrap();
//! let device = Device::open(&controller, 1, DeviceOptions::default()).unwrap();
//! let mut volume = Volume::format(vec![device], &VolumeOptions::default()).unwrap();
//!
//! let data = vec![0xA5u8; 64 * 1024];
//! let extent = volume.write(0, &data, 7).unwrap();
//! volume.commit().unwrap();
//! let mut back = vec![0u8; data.len()];
//! volume.read(extent, &mut back).unwrap();
//! assert_eq!(back, data);
//! ```
#![deny(missing_docs)]

pub mod area;
pub mod checksum;
pub mod chooser;
pub mod device;
mod error;
#[doc(hidden)]
pub mod fuzz;
mod hash;
pub mod journal;
mod owners;
pub mod table;
pub mod tags;
pub mod token;
mod volume;
pub mod zones;

pub use device::{Device, DeviceOptions};
pub use error::{Error, Full, Result};
pub use journal::format::{MemberRecord, ScrubRecord, SessionRecord, FORMAT_VERSION};
pub use journal::recovery::Dropped;
pub use owners::OWNER_LOST;
pub use token::Token;
pub use volume::{
    BadBlock, CheckReport, CheckedPlace, ChecksumStore, CommitInfo, CommitPhases, CopiesLeft, DeviceErrors,
    DeviceState, DeviceStatus, DivergedSide, ExtentRef, LaneReads, MemberState, MetadataScrub, OpenPhases, ReadOutcome,
    ReclaimProgress, RecoveryReport, Redundancy, Removal, ResilverStatus, Volume, VolumeOptions, VolumeState,
    VolumeStats, VolumeStatus, WriteDone, WriteMode,
};

/// The volume's block: the unit of checksums and placement.
pub const BLOCK_SIZE: usize = 4096;

/// An extent's identifier, unique within a volume.
pub type ExtentId = u64;

/// Where one copy of an extent lives: a zone and the 4 KiB block offset in
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Location {
    /// The zone's index on its lane's namespace (software zones count from
    /// the start of a conventional namespace).
    pub zone: u32,
    /// The first 4 KiB block of the copy, counted from the zone start.
    pub offset: u32,
}

impl Location {
    /// Where a copy that does not exist lies: the extent was written while
    /// the copy's device was away, or the copy was lost with it. The
    /// metadata records it as such, and a resilver writes the copy.
    pub const MISSING: Location = Location { zone: u32::MAX, offset: u32::MAX };

    /// Whether this is [`Location::MISSING`].
    pub fn is_missing(self) -> bool {
        self == Location::MISSING
    }
}

/// How many copies, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// One copy of each extent, on any one of the volume's namespaces.
    Single = 0,
    /// Two copies on one namespace, in different zones.
    Dup = 1,
    /// Two copies of each extent on two distinct namespaces of the two or
    /// more the volume spans (possibly on several controllers).
    Mirror = 2,
    /// Three copies of each extent on three distinct namespaces of the
    /// three or more the volume spans (btrfs's RAID1C3): any two devices
    /// may go with nothing lost, data or metadata.
    Mirror3 = 3,
}

impl Profile {
    /// Copies of each extent.
    pub fn copies(self) -> usize {
        match self {
            Profile::Single => 1,
            Profile::Dup | Profile::Mirror => 2,
            Profile::Mirror3 => 3,
        }
    }

    /// The fewest namespaces a volume of this profile spans.
    pub fn min_devices(self) -> usize {
        match self {
            Profile::Single | Profile::Dup => 1,
            Profile::Mirror => 2,
            Profile::Mirror3 => 3,
        }
    }

    /// The most namespaces a volume of this profile spans: a dup's one,
    /// else a pool's [`chooser::MAX_DEVICES`].
    pub fn max_devices(self) -> usize {
        match self {
            Profile::Dup => 1,
            Profile::Single | Profile::Mirror | Profile::Mirror3 => chooser::MAX_DEVICES,
        }
    }

    /// Whether a volume of this profile can span `devices` namespaces.
    pub fn spans(self, devices: usize) -> bool {
        (self.min_devices()..=self.max_devices()).contains(&devices)
    }
}
