//! Members of a mirror: giving up a device that went away or keeps
//! failing (the volume goes on degraded), and the per-device error
//! counters. A device that comes back or a new one in a failed device's
//! place is `replace`; the copies they lack, and how a resilver writes
//! them, `copy`; the status view, `status`.
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

use super::Volume;
use crate::error::{Error, Result};
use crate::journal::{push_session, MemberRecord, Op, ScrubRecord, SessionRecord};
use crate::Location;
use nvme_driver::IoError;

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
        if matches!(error, IoError::ControllerReset) {
            // Its volatile cache, and with it writes since the last commit,
            // may be gone: on a mirror, the member is given up (and may
            // rejoin); on a lone device, the volume refuses work until
            // reopened (`check_resets`).
            return self.give_up(device, "its controller was reset: writes since the last commit may be lost".into());
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
    /// for tests). Refused for the last device in use, and, with
    /// [`Error::LastCopy`], while it holds the only copy in use of any
    /// committed extent (another member resilvering or missing), as
    /// `zpool offline` refuses with "no valid replicas". A device that
    /// really went away is given up regardless, by the volume itself.
    pub fn fail_device(&mut self, device: usize, why: &str) -> Result<()> {
        if device >= self.devices.len() || self.devices[device].is_none() {
            return Err(Error::Member { device, why: "not in use".into() });
        }
        let (extents, bytes) = self.sole_copies_on(device);
        if extents > 0 && (0..self.devices.len()).any(|d| d != device && self.devices[d].is_some()) {
            return Err(Error::LastCopy { device, extents, bytes });
        }
        if !self.give_up(device, why.to_string()) {
            return Err(Error::Member { device, why: "the last device in use cannot be given up".into() });
        }
        Ok(())
    }

    /// Committed extents whose copies in use are all on device `device`,
    /// and their bytes.
    fn sole_copies_on(&self, device: usize) -> (u64, u64) {
        let mut sole = (0u64, 0u64);
        for (_, entry) in self.table.iter() {
            // The devices holding a copy of it, in use or not.
            let holders = || {
                let copies = entry.copies().filter(|(_, at)| !at.is_missing());
                copies.map(|(lane, _)| self.lanes[lane].device)
            };
            let on_device = holders().any(|d| d == device);
            let elsewhere = holders().any(|d| d != device && self.devices[d].is_some());
            if on_device && !elsewhere {
                sole.0 += 1;
                sole.1 += u64::from(entry.blocks) * crate::BLOCK_SIZE as u64;
            }
        }
        sole
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
        // Named by its address, where its owner gave one (`Device::set_identity`).
        let address = self.devices[device].as_ref().map_or("", |d| d.identity.0.as_str());
        let named = if address.is_empty() { String::new() } else { format!(" ({address})") };
        log::error!("device {device}{named} is given up ({why}): the volume goes on degraded");
        let lanes: Vec<usize> = (0..self.lanes.len()).filter(|&l| self.lanes[l].device == device).collect();
        // Writes in flight there end now: nothing more is polled on it.
        for index in 0..self.writes.len() {
            let Some(pending) = self.writes[index].as_mut() else { continue };
            let mut ended = false;
            for &lane in &lanes {
                let Some(copy) = pending.copy_in(lane) else { continue };
                if pending.in_flight[copy] {
                    pending.in_flight[copy] = false;
                    pending.remaining -= 1;
                    pending.locations[copy] = Some(Location::MISSING);
                    self.lanes[lane].table.write_completed(pending.zones[copy]);
                    self.chooser.completed(lane, pending.blocks);
                    super::write::write_ended(&mut self.device_writes, &mut self.busy, device);
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
                        if !record.entry.on(lane).is_missing() {
                            record.entry.set(lane, Location::MISSING);
                            not_durable.push((record.id, lane));
                        }
                    }
                }
                Op::Move { id, lane, to } | Op::Relane { id, lane, to, .. }
                    if lanes.contains(&usize::from(*lane)) && !to.is_missing() =>
                {
                    *to = Location::MISSING;
                    not_durable.push((*id, usize::from(*lane)));
                }
                _ => {}
            }
        }
        for (id, lane) in not_durable {
            if self.table.get(id).is_some_and(|e| !e.on(lane).is_missing()) {
                self.move_extent(id, lane, Location::MISSING, false);
            }
        }
        // Checksum areas written there that no commit's flush made durable:
        // the device may come back without them (a rejoin after a power
        // cut), so the journal must not say those zones are sealed. Their
        // extents' checksums are still in the map (they leave it only
        // after a commit), where they stay.
        let mut unsealed = Vec::new();
        self.ops.retain(|op| match *op {
            Op::Sealed { lane, zone, blocks } if blocks != 0 && lanes.contains(&usize::from(lane)) => {
                unsealed.push((usize::from(lane), zone));
                false
            }
            _ => true,
        });
        for (lane, zone) in unsealed {
            self.lanes[lane].sealed[zone as usize] = 0;
            self.sealed_since_commit.retain(|&sealed| sealed != (lane, zone));
            if self.area_cache[lane].as_ref().is_some_and(|(z, _)| *z == zone) {
                self.area_cache[lane] = None;
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
        self.lanes_moved();
        let member = &mut self.members[device];
        member.identity = gone.identity.clone();
        self.gone.push(gone);
        member.record.failed = true;
        member.why = Some(why);
        self.superblock.members[device] = member.record;
        self.begin_session();
        // A device that really went while it held the only copy in use of
        // some extents (the other member resilvering): they are named lost,
        // never silently.
        let lost = self.lost_extents();
        if !lost.is_empty() {
            let bytes: u64 = lost.iter().map(|&(_, blocks)| u64::from(blocks) * crate::BLOCK_SIZE as u64).sum();
            let ids: Vec<String> = lost.iter().take(8).map(|(id, _)| id.to_string()).collect();
            log::error!(
                "device {device}{named} held the only copy in use of {} extent(s) ({bytes} bytes): they are \
                 lost unless it comes back (extents {}{})",
                lost.len(),
                ids.join(", "),
                if lost.len() > ids.len() { ", ..." } else { "" },
            );
        }
        // The next commit writes a checkpoint under new labels, so the
        // metadata left on the device given up is outranked.
        self.journal.broken = true;
        self.journal.label.generation += 1;
        true
    }

    /// Begins a new session (see [`SessionRecord`]): the volume goes on
    /// without a member, on the devices in use. Every record from the next
    /// commit on carries its ID, and the metadata keeps it, so that the
    /// member left behind, were it to go on alone too, is told apart at
    /// open rather than merged.
    pub(super) fn begin_session(&mut self) {
        let place = self.devices.iter().position(Option::is_some).unwrap_or(0);
        let record = SessionRecord::new(place as u8, self.journal.session, self.journal.generation, self.journal.seq);
        push_session(&mut self.superblock.sessions, record);
        self.ops.push(Op::Session(record));
        self.journal.session = record.id;
        log::info!("session {:#x} begins on device place {place}, from {:#x}", record.id, record.parent);
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
}
