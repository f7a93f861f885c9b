//! Members of a mirror: giving up a device that went away or keeps
//! failing (the volume goes on degraded), a device that comes back
//! (`rejoin`) or a new one in a failed device's place (`replace`), the
//! copies they lack and how a resilver writes them, and the status view.
//!
//! What lacks a copy is recorded where the copy would be: an extent's
//! location on that lane is [`Location::MISSING`], journaled like any
//! other location. So the metadata itself is the dirty log ZFS keeps per
//! vdev (its DTL): a device that comes back lacks exactly the extents
//! written, or not yet durable, while it was away, and a resilver that
//! restarts resumes from what is still missing, with no progress file.
//!
//! The policy for acknowledged writes: a write is acknowledged once it is
//! on every copy whose device is in use. When a device is given up, every
//! copy on it not yet made durable by a commit is marked missing (its
//! flush never came), so nothing acknowledged depends on it; what the
//! survivor holds is flushed at the next commit, which the caller makes
//! before relying on the data, as always.

use super::open::ZoneAction;
use super::{PendingWrite, Volume, WriteDone};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::journal::recovery::{probe, Probe};
use crate::journal::{MemberRecord, Op, ScrubRecord};
use crate::zones::{Slot, ZoneTable, ZoneUse};
use crate::{ExtentId, Location, Profile, BLOCK_SIZE};
use nvme_driver::cmd::zns::ZoneSendAction;
use nvme_driver::IoError;
use serde::Serialize;

/// Zone capacity in the table of a lane whose device is away: unknown
/// until it rejoins, and large enough to hold any recorded copy.
pub(super) const UNKNOWN_CAPACITY: u32 = u32::MAX / 4;

/// One device place's standing, in memory.
#[derive(Debug)]
pub(super) struct Member {
    /// What the metadata keeps.
    pub record: MemberRecord,
    /// `record` as last journaled.
    pub journaled: MemberRecord,
    /// Why the device is not in use, when it is not.
    pub why: Option<String>,
    /// Failed commands since open (counted toward the threshold).
    pub failures: u64,
    pub timeouts: u64,
    pub resets: u64,
    /// Where the device was, model and serial, kept when it is given up
    /// so that status still names the device that was lost.
    pub identity: (String, String, String),
}

impl Member {
    pub fn new(record: MemberRecord) -> Member {
        let why = record.failed.then(|| "marked failed in the volume's metadata".to_string());
        Member { record, journaled: record, why, failures: 0, timeouts: 0, resets: 0, identity: Default::default() }
    }
}

/// What failed, for the error counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Failed {
    Read,
    Write,
}

/// A device's standing, as [`Volume::status`] shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberState {
    /// In use, and holds every copy it should.
    Online,
    /// In use, but some copies it should hold are missing: a resilver
    /// writes them.
    Resilvering,
    /// Not in use: it went away, failed too often, or is not present.
    Failed,
}

/// The volume's standing, as `zpool status` sums it up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeState {
    /// Every device in use, every extent with all its copies.
    Online,
    /// Every device in use, some extents lack a copy: a resilver is due
    /// or running.
    Resilvering,
    /// A device is not in use: extents written now have one copy fewer.
    Degraded,
    /// No device is left.
    Failed,
}

/// Per-device error counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceErrors {
    /// Reads that failed (persisted).
    pub read: u64,
    /// Writes that failed (persisted).
    pub write: u64,
    /// Blocks whose checksum did not match (persisted).
    pub checksum: u64,
    /// Commands that timed out, since open.
    pub timeouts: u64,
    /// Commands ended by a controller reset, since open.
    pub resets: u64,
}

/// One device place, as [`Volume::status`] shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceStatus {
    /// The device's place in the volume.
    pub place: usize,
    /// What it holds, in words ("mirror copy 1", "copies 0 and 1").
    pub role: String,
    /// Its standing.
    pub state: MemberState,
    /// Why it is not in use, when it is not.
    pub why: Option<String>,
    /// Namespace ID.
    pub nsid: u32,
    /// Hardware zones (ZNS) or software zones on a conventional namespace.
    pub zoned: bool,
    /// Where it is (a PCI address), model and serial, as the caller set
    /// them on the device ([`Device::set_identity`]); empty when unknown.
    pub pci: String,
    /// Model number.
    pub model: String,
    /// Serial number.
    pub serial: String,
    /// Error counters.
    pub errors: DeviceErrors,
    /// Data zones by state, summed over its lanes.
    pub zones_empty: u64,
    /// Zones being written.
    pub zones_open: u64,
    /// Zones filled or retired.
    pub zones_full: u64,
    /// Zones worn out (Read Only or Offline).
    pub zones_worn: u64,
    /// Bytes of live copies it holds.
    pub used_bytes: u64,
    /// Bytes its lanes can hold.
    pub capacity_bytes: u64,
    /// Bytes of copies it should hold but lacks.
    pub missing_bytes: u64,
}

/// How much of the data has every copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Redundancy {
    /// Copies each extent should have.
    pub copies: usize,
    /// Bytes (counted once per extent) with every copy present.
    pub bytes_full: u64,
    /// Bytes with at least one copy missing: one more fault loses them.
    pub bytes_at_risk: u64,
    /// Extents with at least one copy missing.
    pub extents_at_risk: u64,
}

/// A resilver's progress: what remains to be copied to a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ResilverStatus {
    /// The device place being brought up to date.
    pub place: usize,
    /// Bytes still to copy there.
    pub bytes_left: u64,
}

/// What [`Volume::status`] reports: the `zpool status` view.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VolumeStatus {
    /// The volume's identity.
    pub volume_id: u64,
    /// Its standing.
    pub state: VolumeState,
    /// Copies and devices.
    pub profile: Profile,
    /// Every device place.
    pub devices: Vec<DeviceStatus>,
    /// How much of the data has every copy.
    pub redundancy: Redundancy,
    /// What remains to resilver, per place that is in use but lacks copies.
    pub resilver: Vec<ResilverStatus>,
    /// The last scrub pass recorded in the metadata.
    pub last_scrub: Option<ScrubRecord>,
    /// Bytes the volume can hold, and bytes live.
    pub capacity_bytes: u64,
    /// Bytes of live data (one copy).
    pub used_bytes: u64,
    /// The last committed journal sequence number.
    pub committed_seq: u64,
}

impl Volume {
    /// Notes a failed command on device `device`, and gives the device up
    /// when it went away, or when its failures since open reach
    /// [`crate::VolumeOptions::max_device_errors`] and another device is
    /// in use. Returns whether the device was given up.
    pub(super) fn note_failure(&mut self, device: usize, failed: Failed, error: &IoError) -> bool {
        let member = &mut self.members[device];
        match failed {
            Failed::Read => member.record.read_errors += 1,
            Failed::Write => member.record.write_errors += 1,
        }
        match error {
            IoError::Timeout => member.timeouts += 1,
            IoError::ControllerReset => member.resets += 1,
            _ => {}
        }
        member.failures += 1;
        if matches!(error, IoError::DeviceGone) {
            return self.give_up(device, "the device went away".into());
        }
        if member.failures >= self.options.max_device_errors {
            let why = format!("{} failed commands since open (the last: {error})", member.failures);
            return self.give_up(device, why);
        }
        false
    }

    /// Takes in `error`, from a command on device `device`: counts it, and
    /// gives the device up when it went away or passed its threshold.
    /// Returns whether the device was given up (the caller then goes on
    /// without it rather than failing).
    pub(super) fn absorb(&mut self, device: usize, failed: Failed, error: &Error) -> bool {
        if self.devices[device].is_none() {
            return true;
        }
        let io = match error {
            Error::Command { error, .. } => *error,
            Error::Timeout { .. } => IoError::Timeout,
            _ if super::write::is_gone(error) => IoError::DeviceGone,
            _ => return false,
        };
        self.note_failure(device, failed, &io)
    }

    /// Counts `blocks` read from copy `lane` that failed their checksum.
    pub(super) fn note_checksum_errors(&mut self, lane: usize, blocks: u64) {
        let device = self.lanes[lane].device;
        self.members[device].record.checksum_errors += blocks;
    }

    /// Adds errors an engine (scrub, resilver) found reading copy `lane`
    /// to its device's counters: `failed_reads` reads that failed and
    /// `checksum_blocks` blocks whose checksum did not match. Persisted at
    /// the next commit.
    pub fn record_read_errors(&mut self, lane: usize, failed_reads: u64, checksum_blocks: u64) {
        let device = self.lanes[lane].device;
        let record = &mut self.members[device].record;
        record.read_errors += failed_reads;
        record.checksum_errors += checksum_blocks;
    }

    /// Records a scrub pass in the metadata (at the next commit), for
    /// [`Volume::status`].
    pub fn record_scrub(&mut self, record: ScrubRecord) {
        self.superblock.last_scrub = Some(record);
        self.ops.push(Op::Scrubbed(record));
    }

    /// Gives up device `device` now, as if it had failed: the volume goes
    /// on degraded on the others (for an operator taking a device out, and
    /// for tests). Refused for the last device in use.
    pub fn fail_device(&mut self, device: usize, why: &str) -> Result<()> {
        if device >= self.devices.len() || self.devices[device].is_none() {
            return Err(Error::Member { device, why: "not in use".into() });
        }
        if !self.give_up(device, why.to_string()) {
            return Err(Error::Member { device, why: "the last device in use cannot be given up".into() });
        }
        Ok(())
    }

    /// Stops using device `device`: in-flight writes to it end (their
    /// copies missing), copies on it not yet durable are marked missing,
    /// its lanes hold no zone open, and the next commit writes the
    /// metadata to the other devices only, recording the failure. Never
    /// gives up the last device in use (returns `false`).
    pub(super) fn give_up(&mut self, device: usize, why: String) -> bool {
        let others = (0..self.devices.len()).filter(|&d| d != device && self.devices[d].is_some()).count();
        if self.devices[device].is_none() || others == 0 {
            return false;
        }
        log::error!("device {device} is given up ({why}): the volume goes on degraded");
        let lanes: Vec<usize> = (0..self.lanes.len()).filter(|&l| self.lanes[l].device == device).collect();
        // Writes in flight there end now: nothing more is polled on it.
        for index in 0..self.writes.len() {
            let Some(pending) = self.writes[index].as_mut() else { continue };
            let mut ended = false;
            for &lane in &lanes {
                if pending.in_flight[lane] {
                    pending.in_flight[lane] = false;
                    pending.remaining -= 1;
                    pending.locations[lane] = Some(Location::MISSING);
                    self.lanes[lane].table.write_completed(pending.zones[lane]);
                    self.device_writes[device] -= 1;
                    ended = true;
                }
            }
            if ended && self.writes[index].as_ref().is_some_and(|p| p.remaining == 0) {
                self.finish_write(index);
            }
        }
        // Copies on it that no commit made durable.
        let mut not_durable = Vec::new();
        for op in &mut self.ops {
            match op {
                Op::Add(record) => {
                    for &lane in &lanes {
                        if !record.locations[lane].is_missing() {
                            record.locations[lane] = Location::MISSING;
                            not_durable.push((record.id, lane));
                        }
                    }
                }
                Op::Move { id, lane, to } if lanes.contains(&usize::from(*lane)) && !to.is_missing() => {
                    *to = Location::MISSING;
                    not_durable.push((*id, usize::from(*lane)));
                }
                _ => {}
            }
        }
        for (id, lane) in not_durable {
            if self.extents.get(&id).is_some_and(|e| !e.locations[lane].is_missing()) {
                self.move_extent(id, lane, Location::MISSING, false);
            }
        }
        for &lane in &lanes {
            let table = &mut self.lanes[lane].table;
            table.retire_all();
            for zone in 0..table.zone_count() {
                table.deactivate(zone);
            }
            self.retiring.retain(|&(l, _)| l != lane);
            self.reclaim_open[lane] = false;
            if self.reclaim.is_some_and(|(l, _)| l == lane) {
                self.reclaim = None;
            }
        }
        let gone = self.devices[device].take().expect("in use");
        let member = &mut self.members[device];
        member.identity = gone.identity.clone();
        self.gone.push(gone);
        member.record.failed = true;
        member.why = Some(why);
        self.superblock.members[device] = member.record;
        // The next commit writes a checkpoint under new labels, so the
        // metadata left on the device given up is outranked.
        self.journal.broken = true;
        self.journal.label.generation += 1;
        true
    }

    /// Journals member records that changed since the last commit.
    pub(super) fn journal_members(&mut self) {
        for (device, member) in self.members.iter_mut().enumerate() {
            if member.record != member.journaled {
                self.superblock.members[device] = member.record;
                self.ops.push(Op::Member { device: device as u8, record: member.record });
            }
        }
    }

    /// After a commit made them durable.
    pub(super) fn members_journaled(&mut self) {
        for member in &mut self.members {
            member.journaled = member.record;
        }
    }

    /// Applies a journaled member record (at open).
    pub(super) fn apply_member(&mut self, device: u8, record: MemberRecord) -> Result<()> {
        let device = usize::from(device);
        if device >= self.members.len() {
            return Err(Error::Corrupt(format!("a member record for device place {device}")));
        }
        self.members[device] = Member::new(record);
        self.superblock.members[device] = record;
        Ok(())
    }

    /// Whether copy `lane` of extent `id` is missing.
    pub fn lacks_copy(&self, id: ExtentId, lane: usize) -> bool {
        self.extents.get(&id).is_some_and(|e| e.locations.get(lane).is_some_and(|l| l.is_missing()))
    }

    /// Blocks of the copies lane `lane` lacks.
    pub fn missing_blocks(&self, lane: usize) -> u64 {
        self.extents.values().filter(|e| e.locations[lane].is_missing()).map(|e| u64::from(e.blocks)).sum()
    }

    /// Queues a write of `data`, extent `id`'s contents, as its missing
    /// copy `lane`: how a resilver restores redundancy. The caller
    /// verified `data` against the extent's checksums (or chose not to).
    /// The copy is placed in the extent's stream and journaled at the next
    /// commit; the outcome arrives through [`Volume::next_copy_done`]. If
    /// the extent is freed meanwhile, the copy is dropped.
    pub fn submit_copy(&mut self, id: ExtentId, lane: usize, data: &[u8]) -> Result<()> {
        self.check_resets()?;
        let extent = self.extents.get(&id).ok_or(Error::NoSuchExtent(id))?;
        if lane >= self.lanes.len() || !extent.locations[lane].is_missing() {
            return Err(Error::InvalidArgument(format!("extent {id} does not lack copy {lane}")));
        }
        if !self.lane_online(lane) {
            return Err(Error::Member { device: self.lanes[lane].device, why: "not in use".into() });
        }
        if data.len() != extent.blocks as usize * BLOCK_SIZE {
            return Err(Error::InvalidArgument(format!("{} bytes for extent {id}", data.len())));
        }
        let (blocks, stream, owner) = (extent.blocks, extent.stream, extent.owner);
        let slot = Slot::Stream(stream);
        let table = &self.lanes[lane].table;
        if table.would_open(slot, blocks) && table.empty_zones() <= self.superblock.reserve_zones as usize {
            return Err(Error::NoSpace);
        }
        let copies = self.lanes.len();
        let pending = PendingWrite {
            copy_of: Some(lane),
            id,
            owner,
            stream,
            blocks,
            crcs: Vec::new(),
            zones: vec![u32::MAX; copies],
            locations: vec![None; copies],
            in_flight: vec![false; copies],
            remaining: 0,
            error: None,
            reported: false,
        };
        let index = self.pending_slot(pending);
        if let Err(error) = self.submit_lane_write(index, lane, slot, blocks, data) {
            self.writes[index] = None;
            self.free_slots.push(index);
            return Err(error);
        }
        Ok(())
    }

    /// The next finished resilver copy ([`Volume::submit_copy`]), if any.
    pub fn next_copy_done(&mut self) -> Option<WriteDone> {
        self.copies_done.pop_front()
    }

    /// Ends a resilver copy whose write finished.
    pub(super) fn finish_copy(&mut self, pending: PendingWrite, lane: usize) {
        let result = match pending.error {
            Some(error) => Err(error),
            None => {
                let to = pending.locations[lane].expect("the copy was placed");
                if to.is_missing() {
                    Err(Error::Member { device: self.lanes[lane].device, why: "given up during the copy".into() })
                } else if self.lacks_copy(pending.id, lane) {
                    match self.overlapping(lane, to, pending.blocks) {
                        Some(other) => Err(Error::BadDeviceResult {
                            what: format!("copy {lane} of extent {} was placed over extent {other}", pending.id),
                        }),
                        None => {
                            self.move_extent(pending.id, lane, to, true);
                            Ok(())
                        }
                    }
                } else {
                    // Freed (or copied) meanwhile: the blocks are garbage.
                    Ok(())
                }
            }
        };
        self.copies_done.push_back(WriteDone { id: pending.id, result });
    }

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
        let place = usize::from(label.device_index);
        if place >= self.devices.len() || self.devices[place].is_some() {
            return Err(Error::Member { device: place, why: "the place is in use".into() });
        }
        let found = (device.ns.nsid(), device.ns.block_size(), device.ns.capacity_blocks(), device.is_zoned());
        if found != self.superblock.devices[place] {
            return Err(Error::Member {
                device: place,
                why: format!("the device is {found:?}, the place holds {:?}", self.superblock.devices[place]),
            });
        }
        let blocks = if device.is_zoned() { 0 } else { self.superblock.software_zone_blocks };
        let descriptors = device.load_zones(blocks)?;
        let mut all = vec![Vec::new(); self.devices.len()];
        all[place] = descriptors;
        self.devices[place] = Some(device);
        let mut actions = Vec::new();
        for lane in 0..self.lanes.len() {
            if self.lanes[lane].device == place {
                match self.plan_lane(lane, &all, true) {
                    Ok(lane_actions) => actions.extend(lane_actions),
                    Err(error) => {
                        self.devices[place] = None;
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
                    let holds = match other {
                        Probe::Label(label) if label.volume_id == self.volume_id => {
                            format!("place {} of this volume", label.device_index)
                        }
                        Probe::Label(label) => format!("a member of volume {:#x}", label.volume_id),
                        Probe::Unreadable(what) => format!("unreadable places ({what})"),
                        Probe::Unrecognized => "data that is not a volume's".into(),
                        Probe::OtherVersion(version) => format!("a volume of format version {version}"),
                        Probe::Blank => unreachable!("handled above"),
                    };
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
        let ids: Vec<ExtentId> = self.extents.keys().copied().collect();
        for id in ids {
            for &lane in &lanes {
                if !self.extents[&id].locations[lane].is_missing() {
                    self.move_extent(id, lane, Location::MISSING, false);
                }
            }
        }
        if device.is_zoned() {
            let request = device.ns.zone_send(0, ZoneSendAction::Reset, true, 0)?;
            device.run(request, "Zone Reset (all)")?;
        }
        self.superblock.devices[place] =
            (device.ns.nsid(), device.ns.block_size(), device.ns.capacity_blocks(), device.is_zoned());
        self.copy_supported[place] = device.ns.supports(nvme_driver::spec::identify::Oncs::COPY);
        self.zone_limits[place] = device.ns.zones().and_then(|z| {
            let active = z.max_active_zones?;
            Some((z.max_open_zones.unwrap_or(active).min(active), active))
        });
        self.devices[place] = Some(device);
        for &lane in &lanes {
            self.lanes[lane].table = self.fresh_table(lane);
            self.lanes[lane].written = vec![0; self.lanes[lane].table.zone_count() as usize];
        }
        // The metadata copies on the place go back where format puts them.
        let g = self.journal.g;
        for (index, copy) in super::meta_copies(self.superblock.profile, g).into_iter().enumerate() {
            if copy.device == place {
                self.journal.copies[index].segments = copy.segments;
                self.superblock.meta_segments[index] = copy.segments;
            }
        }
        self.members[place] = Member::new(MemberRecord { failed: true, ..MemberRecord::default() });
        self.journal.label.generation += 1;
        self.bring_online(place);
        self.commit()?;
        log::info!("device place {place} replaced: {} blocks to resilver", self.missing_on(place));
        Ok(())
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
        if !device.is_zoned() && self.superblock.software_zone_blocks == 0 {
            let bytes = crate::journal::layout::default_software_zone_bytes(new_bytes);
            self.superblock.software_zone_blocks = (bytes / BLOCK_SIZE as u64) as u32;
            self.journal.label.superblock.software_zone_blocks = self.superblock.software_zone_blocks;
        }
        let blocks = if device.is_zoned() { 0 } else { self.superblock.software_zone_blocks };
        device.load_zones(blocks)?;
        let max_extent = self.superblock.max_extent_blocks as usize * BLOCK_SIZE;
        if device.max_transfer_bytes < max_extent {
            return too_small(format!(
                "transfers of {} bytes, extents are up to {max_extent}",
                device.max_transfer_bytes
            ));
        }
        if device.is_zoned()
            && device.append_max_bytes < max_extent
            && self.options.write_mode != super::WriteMode::Ordered
        {
            return too_small(format!(
                "Zone Append of up to {} bytes, extents are up to {max_extent} (open with ordered writes)",
                device.append_max_bytes
            ));
        }
        let smallest = device.zones.iter().map(|z| z.capacity_blocks).min().unwrap_or(0);
        if (smallest as usize) < self.superblock.max_extent_blocks as usize {
            return too_small(format!(
                "zones of {smallest} blocks, extents are up to {}",
                self.superblock.max_extent_blocks
            ));
        }
        let g = self.journal.g;
        let meta_zones = super::meta_zones_on(self.superblock.profile, g, place) as usize;
        if device.zones.len() < meta_zones + 4 {
            return too_small(format!("{} zones", device.zones.len()));
        }
        // Its metadata segments must hold what the others hold.
        let needed = self.superblock.meta_segment_blocks;
        for copy in super::meta_copies(self.superblock.profile, g).into_iter().filter(|c| c.device == place) {
            for segment in 0..2 {
                let have = crate::journal::layout::segment_capacity(device, copy, g, segment);
                if have < needed {
                    return too_small(format!("metadata segments of {have} blocks, the volume's take {needed}"));
                }
            }
        }
        Ok(())
    }

    /// An empty zone table for lane `lane` over its device's zones.
    fn fresh_table(&self, lane: usize) -> ZoneTable {
        let device = self.lanes[lane].device;
        let profile = self.superblock.profile;
        let g = self.journal.g;
        let meta_zones = super::meta_zones_on(profile, g, device);
        let capacities: Vec<u32> = self.dev(device).zones.iter().map(|z| z.capacity_blocks).collect();
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

    /// The volume's standing, device by device: the `zpool status` view.
    pub fn status(&self) -> VolumeStatus {
        let copies = self.lanes.len();
        let mut redundancy = Redundancy { copies, ..Redundancy::default() };
        let mut missing_per_lane = vec![0u64; copies];
        for extent in self.extents.values() {
            let bytes = u64::from(extent.blocks) * BLOCK_SIZE as u64;
            let mut lacks = false;
            for (lane, location) in extent.locations.iter().enumerate() {
                if location.is_missing() {
                    missing_per_lane[lane] += bytes;
                    lacks = true;
                }
            }
            if lacks {
                redundancy.bytes_at_risk += bytes;
                redundancy.extents_at_risk += 1;
            } else {
                redundancy.bytes_full += bytes;
            }
        }
        let mut devices = Vec::new();
        let mut resilver = Vec::new();
        for (place, member) in self.members.iter().enumerate() {
            let lanes: Vec<usize> = (0..copies).filter(|&l| self.lanes[l].device == place).collect();
            let missing_bytes: u64 = lanes.iter().map(|&l| missing_per_lane[l]).sum();
            let present = self.devices[place].as_ref();
            let state = match present {
                None => MemberState::Failed,
                Some(_) if missing_bytes > 0 => MemberState::Resilvering,
                Some(_) => MemberState::Online,
            };
            if state == MemberState::Resilvering {
                resilver.push(ResilverStatus { place, bytes_left: missing_bytes });
            }
            let mut status = DeviceStatus {
                place,
                role: role(self.superblock.profile, &lanes),
                state,
                why: member.why.clone(),
                nsid: self.superblock.devices[place].0,
                zoned: self.superblock.devices[place].3,
                pci: String::new(),
                model: String::new(),
                serial: String::new(),
                errors: DeviceErrors {
                    read: member.record.read_errors,
                    write: member.record.write_errors,
                    checksum: member.record.checksum_errors,
                    timeouts: member.timeouts,
                    resets: member.resets,
                },
                zones_empty: 0,
                zones_open: 0,
                zones_full: 0,
                zones_worn: 0,
                used_bytes: 0,
                capacity_bytes: 0,
                missing_bytes,
            };
            (status.pci, status.model, status.serial) = member.identity.clone();
            if let Some(device) = present {
                (status.pci, status.model, status.serial) = device.identity.clone();
                for &lane in &lanes {
                    let table = &self.lanes[lane].table;
                    for zone in 0..table.zone_count() {
                        match table.zone(zone).usage {
                            ZoneUse::NotOwned => {}
                            ZoneUse::Empty => status.zones_empty += 1,
                            ZoneUse::Open(_) => status.zones_open += 1,
                            ZoneUse::Full => status.zones_full += 1,
                            ZoneUse::Worn => status.zones_worn += 1,
                        }
                    }
                    status.used_bytes += table.valid_blocks() * BLOCK_SIZE as u64;
                    status.capacity_bytes += table.capacity_blocks() * BLOCK_SIZE as u64;
                }
            }
            devices.push(status);
        }
        let state = if self.devices.iter().all(Option::is_none) {
            VolumeState::Failed
        } else if self.devices.iter().any(Option::is_none) {
            VolumeState::Degraded
        } else if redundancy.extents_at_risk > 0 {
            VolumeState::Resilvering
        } else {
            VolumeState::Online
        };
        VolumeStatus {
            volume_id: self.volume_id,
            state,
            profile: self.superblock.profile,
            devices,
            redundancy,
            resilver,
            last_scrub: self.superblock.last_scrub,
            capacity_bytes: self.capacity_bytes(),
            used_bytes: self.valid_blocks() * BLOCK_SIZE as u64,
            committed_seq: self.journal.seq,
        }
    }
}

/// A place's role, in words.
fn role(profile: Profile, lanes: &[usize]) -> String {
    match (profile, lanes) {
        (Profile::Mirror, [lane]) => format!("mirror copy {lane}"),
        (Profile::Dup, _) => "both copies (dup)".into(),
        _ => "the only copy".into(),
    }
}
