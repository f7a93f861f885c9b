//! The allocator's one error type.

use crate::ExtentId;
use nvme_driver::IoError;
use std::fmt;

/// Everything a volume reports, typed so callers can act on it.
#[derive(Debug)]
pub enum Error {
    /// The driver failed (bring-up, a refused request, a timeout).
    Driver(nvme_driver::Error),
    /// A command failed: an error status from the device, a timeout, a
    /// controller reset or the device gone.
    Command {
        /// The operation that failed, in words ("zone append", "flush").
        what: &'static str,
        /// How it failed, as the driver reported it.
        error: IoError,
    },
    /// The devices do not fit the requested volume (too small, limits too
    /// tight for the streams asked for, an LBA size that does not divide
    /// 4 KiB, ...). Nothing was written.
    InvalidConfig(String),
    /// A caller argument is out of range (unknown stream, bad length).
    InvalidArgument(String),
    /// No extent with this ID.
    NoSuchExtent(ExtentId),
    /// No room for the write: what is full is named. For data, free
    /// extents, commit and reclaim, then retry; nothing was written.
    NoSpace(Full),
    /// Every device given is blank: no label anywhere, and every place a
    /// label could be was read. Only then may a tool offer to format.
    NoVolume,
    /// Device `device` (its place in the list given to open) holds no label
    /// and none of this volume's data, where the volume expects a member.
    BlankDevice {
        /// Index in the list given to open.
        device: usize,
        /// The volume's identity ([`crate::Volume::id`]).
        volume_id: u64,
    },
    /// Device `device` belongs to another volume.
    ForeignDevice {
        /// Index in the list given to open.
        device: usize,
        /// The volume its label names.
        found: u64,
        /// The volume being opened.
        expected: u64,
    },
    /// No label could be found on device `device`, and reads of it failed:
    /// it may hold a volume, so nothing may treat it as blank.
    Unreadable {
        /// Index in the list given to open.
        device: usize,
        /// The first read that failed.
        what: String,
    },
    /// No label was found on device `device`, but what its label places
    /// hold is not blank (garbage over the labels, or another owner's data):
    /// nothing may treat it as blank.
    Unrecognized {
        /// Index in the list given to open.
        device: usize,
    },
    /// Device `device` holds a volume of another format version than
    /// [`crate::FORMAT_VERSION`].
    UnsupportedVersion {
        /// Index in the list given to open.
        device: usize,
        /// The version found.
        version: u8,
    },
    /// Committed metadata is lost on every copy, and a later record proves
    /// it existed: opening would silently drop commits. Nothing was
    /// written. [`crate::VolumeOptions::rewind`] opens at the last complete
    /// state instead and reports what it drops.
    MetadataLost {
        /// The generation of the checkpoint the lost commit follows.
        generation: u64,
        /// The first commit (journal sequence number) that no copy holds; 0
        /// when no checkpoint verifies at all (a rewind cannot help then).
        seq: u64,
        /// The newest commit a readable record proves.
        newest_seq: u64,
        /// What is missing, in words.
        what: String,
    },
    /// The metadata on disk contradicts itself or the device.
    Corrupt(String),
    /// The extent's owner was lost: every copy of the metadata block that
    /// held it failed when a commit rewrote its page (the extent and its
    /// data are intact; the volume logged the failure, and counts it in
    /// [`crate::VolumeStats::owners_lost`]).
    OwnerLost {
        /// The extent whose owner is lost.
        extent: ExtentId,
    },
    /// Every copy of these blocks failed its checksum or could not be read.
    Uncorrectable {
        /// The extent the blocks belong to.
        extent: ExtentId,
        /// The extent's owner, as given to [`crate::Volume::submit_write`];
        /// `None` when it could not be read back either
        /// ([`Error::OwnerLost`]).
        owner: Option<u64>,
        /// Indexes of the bad 4 KiB blocks within the extent.
        blocks: Vec<u32>,
    },
    /// The device returned a result its command does not allow: a Zone
    /// Append LBA outside the room reserved for the extent. The write
    /// fails and nothing of it is committed.
    BadDeviceResult {
        /// What was wrong, in words.
        what: String,
    },
    /// No zone can take the metadata: a metadata zone wore out (Read Only
    /// or Offline) where the journal must write next, and no empty zones
    /// are left to move its segment to. The volume is read-only: what is
    /// committed stays readable; writes, frees and commits are refused.
    ReadOnly {
        /// Why, in words (the zone and its state).
        why: String,
    },
    /// A wait exceeded its bound.
    Timeout {
        /// What was waited for, in words ("a free DMA buffer").
        what: &'static str,
    },
    /// A controller of the volume was reset since the last commit: writes
    /// completed since then may not have survived it, so the volume stops
    /// accepting work. Reopen it ([`crate::Volume::open`]) to continue from
    /// the committed state.
    ControllerReset {
        /// Index of the device, in the list given at format or open.
        device: usize,
    },
    /// A mirror member is missing, blank, failing, or marked failed in the
    /// metadata: the volume can open degraded, on the devices that are
    /// left, when the caller allows it ([`crate::VolumeOptions::degraded`],
    /// as `mount -o degraded` does). Nothing was written.
    Degraded {
        /// The volume's devices (places) that cannot be used.
        missing: Vec<usize>,
        /// Why, in words.
        why: String,
    },
    /// No member device is left to read or write: every one failed.
    NoDevices,
    /// Device place `device` cannot take the role asked of it (replace or
    /// rejoin): it is online, the new device is too small, or its label
    /// names another place or volume.
    Member {
        /// The volume's device place.
        device: usize,
        /// Why, in words.
        why: String,
    },
    /// Device place `device` holds the only copy in use of `extents`
    /// committed extents (`bytes` bytes): giving it up would leave them
    /// with no readable copy (another member is resilvering, or missing).
    /// Nothing was changed.
    LastCopy {
        /// The volume's device place.
        device: usize,
        /// Extents with no other copy in use.
        extents: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// Device `device` was place `place` of this volume and was removed
    /// from it since ([`crate::Volume::remove`]): the volume holds no copy
    /// on it. Nothing was written.
    Removed {
        /// Index in the list given to open.
        device: usize,
        /// The place its label names, which the volume no longer has.
        place: usize,
    },
    /// Device `device` was the member in place `place` of this volume, but
    /// the place was given to another device since (a replace): it holds
    /// an old copy of the volume, and is not its member. Nothing was
    /// written.
    Replaced {
        /// Index in the list given to open.
        device: usize,
        /// The place its label names.
        place: usize,
    },
    /// The mirror's members went on apart: each was opened or kept
    /// running without the other, and each committed since. Their
    /// histories cannot both be kept, and merging them would return one
    /// extent's bytes for another's. Nothing was written to either.
    /// Either side opens alone (degraded); [`crate::Volume::resolve`]
    /// keeps one and rebuilds the other from it.
    Diverged {
        /// Each side: what it committed, and what it holds that the other
        /// does not.
        sides: Vec<crate::DivergedSide>,
    },
}

/// What ran out of room ([`Error::NoSpace`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// Every empty data zone of the device at `place` is taken, but for
    /// those kept for reclaim ([`crate::VolumeOptions::reserve_zones`]).
    Data {
        /// The volume's device place.
        place: usize,
    },
    /// The metadata segment being written has no room for the record.
    Metadata,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Driver(error) => write!(f, "driver: {error}"),
            Error::Command { what, error } => write!(f, "{what} failed: {error}"),
            Error::InvalidConfig(why) => write!(f, "invalid volume configuration: {why}"),
            Error::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            Error::NoSuchExtent(id) => write!(f, "no extent {id}"),
            Error::NoSpace(Full::Data { place }) => write!(
                f,
                "no space left on the volume: the data zones of place {place} are full, but for those kept for \
                 reclaim (free extents, commit and reclaim, then retry)"
            ),
            Error::NoSpace(Full::Metadata) => write!(
                f,
                "no space left in the metadata: its segments hold no more extents' records (free extents, or write \
                 larger ones: the volume holds its capacity in extents of its data unit)"
            ),
            Error::NoVolume => write!(f, "no volume found on these devices: every one is blank"),
            Error::BlankDevice { device, volume_id } => write!(
                f,
                "device {device} holds no label and none of volume {volume_id:#x}'s data where the volume expects a \
                 member"
            ),
            Error::ForeignDevice { device, found, expected } => {
                write!(f, "device {device} belongs to volume {found:#x}, not to volume {expected:#x}")
            }
            Error::Unreadable { device, what } => {
                write!(f, "device {device}: no label found and reads failed ({what}); it may hold a volume")
            }
            Error::Unrecognized { device } => write!(
                f,
                "device {device}: no label found, but it holds data (not blank); format it explicitly to reuse it"
            ),
            Error::UnsupportedVersion { device, version } if *version < crate::FORMAT_VERSION => write!(
                f,
                "device {device} holds a volume of format version {version}; this build reads version {} only: to \
                 move its data, read it with the build that wrote it and write it to a volume this build formats \
                 (docs/allocator.md, \"Formats\")",
                crate::FORMAT_VERSION
            ),
            Error::UnsupportedVersion { device, version } => write!(
                f,
                "device {device} holds a volume of format version {version}, newer than this build's {}: open it with \
                 the build that wrote it",
                crate::FORMAT_VERSION
            ),
            Error::MetadataLost { seq: 0, what, .. } => write!(f, "committed metadata lost on every copy: {what}"),
            Error::MetadataLost { generation, seq, newest_seq, what } => write!(
                f,
                "committed metadata lost on every copy: {what}; commits {seq}..={newest_seq} (after generation \
                 {generation}'s checkpoint) are at stake (open with rewind to drop them)"
            ),
            Error::Corrupt(why) => write!(f, "volume metadata is corrupt: {why}"),
            Error::Uncorrectable { extent, owner: Some(owner), blocks } => {
                write!(f, "extent {extent} (owner {owner}): blocks {blocks:?} have no good copy")
            }
            Error::Uncorrectable { extent, owner: None, blocks } => {
                write!(f, "extent {extent} (owner unknown): blocks {blocks:?} have no good copy")
            }
            Error::OwnerLost { extent } => {
                write!(f, "the owner of extent {extent} was lost with every copy of its metadata block")
            }
            Error::Timeout { what } => write!(f, "timed out waiting for {what}"),
            Error::ReadOnly { why } => write!(f, "the volume is read-only: {why}"),
            Error::BadDeviceResult { what } => write!(f, "the device returned a bad result: {what}"),
            Error::ControllerReset { device } => write!(
                f,
                "the controller of device {device} was reset since the last commit; reopen the volume to continue \
                 from the committed state"
            ),
            Error::Degraded { missing, why } => write!(
                f,
                "device place(s) {missing:?} cannot be used ({why}); the volume can open degraded on the others \
                 (allow it with the degraded option)"
            ),
            Error::NoDevices => write!(f, "every device of the volume failed: nothing is left to read or write"),
            Error::Member { device, why } => write!(f, "device place {device}: {why}"),
            Error::LastCopy { device, extents, bytes } => write!(
                f,
                "device place {device} holds the only copy in use of {extents} extent(s) ({bytes} bytes): giving it \
                 up would lose them; finish the resilver of the other member, or replace it, first (nothing was \
                 changed)"
            ),
            Error::Removed { device, place } => write!(
                f,
                "device {device} was place {place} of this volume and was removed from it since: the volume holds \
                 nothing on it (leave it out; `volume add --force` takes it as a new device). Nothing was written"
            ),
            Error::Replaced { device, place } => write!(
                f,
                "device {device} was place {place} of this volume, but another device has taken that place since: \
                 it holds an old copy of the volume and is not its member (give the place's device, or open \
                 degraded without it; `volume replace --force` can take it back as a new device). Nothing was \
                 written"
            ),
            Error::Diverged { sides } => {
                write!(f, "the mirror's members went on apart, each without the other: ")?;
                for (index, side) in sides.iter().enumerate() {
                    if index > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{side}")?;
                }
                write!(
                    f,
                    ". Nothing was written to either. Open one alone (degraded) to read it, or keep one and rebuild \
                     the other from it (`volume resolve --keep`), losing what only the other holds"
                )
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Driver(error) => Some(error),
            _ => None,
        }
    }
}

impl From<nvme_driver::Error> for Error {
    fn from(error: nvme_driver::Error) -> Self {
        Error::Driver(error)
    }
}

impl From<nvme_driver::RequestError> for Error {
    fn from(error: nvme_driver::RequestError) -> Self {
        Error::Driver(nvme_driver::Error::InvalidRequest(error))
    }
}

/// The allocator's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
