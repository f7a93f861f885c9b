//! Free and commit: journaling what changed, rotating the metadata
//! segments, and resetting zones whose emptiness is durable.

use super::{CommitInfo, Volume};
use crate::device::zone_worn_out;
use crate::error::{Error, Result};
use crate::journal::log::Journal;
use crate::journal::{self, Checkpoint, ExtentRecord};
use crate::zones::ZoneUse;
use crate::ExtentId;
use nvme_driver::cmd::zns::ZoneSendAction;

impl Volume {
    /// Frees extent `id`. Its space comes back when its zone is reset,
    /// after the next commit, or reclaimed.
    pub fn free(&mut self, id: ExtentId) -> Result<()> {
        self.remove_extent(id, true).map(drop)
    }

    /// Makes everything written and freed so far durable: waits for writes
    /// in flight, flushes data, appends a journal record (or writes a
    /// checkpoint when the segment is full) and flushes it. Then resets
    /// zones with nothing live.
    ///
    /// A device that goes away (or passes its error threshold) during the
    /// commit is given up, and the commit is retried on the others: it
    /// returns once the record is durable on every device still in use.
    pub fn commit(&mut self) -> Result<CommitInfo> {
        for device in self.devices.iter_mut().flatten() {
            device.take_failed();
        }
        loop {
            let in_use = self.devices.iter().flatten().count();
            let error = match self.commit_once() {
                Ok(info) => return Ok(info),
                Err(error) => error,
            };
            if self.devices.iter().flatten().count() < in_use {
                log::warn!("commit failed ({error}) and a device was given up: retrying on the others");
                continue;
            }
            // A flush or metadata write that failed on a mirror member
            // gives it up at once (its copy of the metadata cannot be kept
            // current), and the commit goes on on the other; on the last
            // device in use it is the commit's error.
            if let Some(device) = self.failing_device() {
                let device_error =
                    matches!(error, Error::Command { .. } | Error::Timeout { .. }) || super::write::is_gone(&error);
                if device_error
                    && (self.absorb(device, super::member::Failed::Write, &error)
                        || self.give_up(device, format!("a commit's write failed: {error}")))
                {
                    continue;
                }
            }
            return Err(error);
        }
    }

    /// The device whose last blocking command failed, if one did.
    fn failing_device(&mut self) -> Option<usize> {
        (0..self.devices.len()).find(|&d| self.devices[d].as_mut().is_some_and(|device| device.take_failed()))
    }

    fn commit_once(&mut self) -> Result<CommitInfo> {
        self.check_resets()?;
        self.wait_idle()?;
        self.journal_members();
        let mut info = CommitInfo { seq: self.journal.seq, ..CommitInfo::default() };
        if !self.ops.is_empty() || self.journal.broken {
            self.close_reclaim_zones()?;
            for device in 0..self.devices.len() {
                let Some(d) = self.devices[device].as_mut() else { continue };
                if let Err(error) = d.flush() {
                    if super::write::is_gone(&error) && self.give_up(device, format!("a flush failed: {error}")) {
                        continue;
                    }
                    return Err(error);
                }
            }
            // A reset before the flush finished may have dropped writes it
            // was to make durable: journal nothing then.
            self.check_resets()?;
            let payload = journal::encode_ops(&self.ops);
            if self.journal.must_rotate(&self.devices, Journal::record_blocks(payload.len())) {
                self.rotate()?;
                info.checkpoint = true;
            } else {
                self.journal.append(&mut self.devices, &payload)?;
            }
            // The same for the record itself.
            self.check_resets()?;
            for device in self.devices.iter_mut().flatten() {
                device.durable_generation = device.pair.reset_generation();
            }
            info.ops = self.ops.len();
            info.seq = self.journal.seq;
            self.ops.clear();
            self.members_journaled();
            self.stats.commits += 1;
        }
        info.zones_reset = self.reset_dead_zones()?;
        Ok(info)
    }

    /// Commits, then writes a checkpoint of the whole state and moves the
    /// log to the other metadata segment, as a commit does when its
    /// segment fills: so that the next open replays no log (before a
    /// planned restart), and so that a benchmark can time a checkpoint.
    /// A checkpoint that fails leaves the log broken, like any failed
    /// rotation: the next commit (or checkpoint) writes one anew.
    pub fn checkpoint_now(&mut self) -> Result<CommitInfo> {
        let mut info = self.commit()?;
        // A commit after a failed rotation has just written one.
        if !info.checkpoint {
            self.check_resets()?;
            self.rotate()?;
            info.checkpoint = true;
            info.seq = self.journal.seq;
        }
        Ok(info)
    }

    /// Resets zones whose emptiness is committed.
    pub(super) fn reset_dead_zones(&mut self) -> Result<usize> {
        debug_assert!(self.ops.is_empty(), "only committed emptiness allows a reset");
        let mut count = 0;
        for lane in 0..self.lanes.len() {
            let device = self.lanes[lane].device;
            if self.devices[device].is_none() {
                // Reset when the device is back.
                continue;
            }
            for zone in self.lanes[lane].table.dead_zones() {
                if self.reclaim == Some((lane, zone)) {
                    self.reclaim = None;
                }
                self.retiring.retain(|&r| r != (lane, zone));
                if self.dev(device).is_zoned() {
                    match self.dev_mut(device).zone_action(zone, ZoneSendAction::Reset) {
                        Ok(()) => {}
                        Err(Error::Command { error, .. })
                            if zone_worn_out(&error) || self.dev_mut(device).zone_is_worn(zone) =>
                        {
                            log::warn!("lane {lane} zone {zone} is worn out ({error}): taken out of use");
                            self.lanes[lane].table.wear_out(zone);
                            self.stats.zones_worn += 1;
                            continue;
                        }
                        Err(error) if self.absorb(device, super::member::Failed::Write, &error) => break,
                        Err(error) => return Err(error),
                    }
                }
                self.lanes[lane].zone_emptied(zone);
                self.lanes[lane].table.reset(zone);
                count += 1;
            }
        }
        self.stats.zones_reset += count as u64;
        Ok(count)
    }

    pub(super) fn checkpoint(&self) -> Checkpoint {
        let lanes = self.lanes.len();
        let extents = self
            .table
            .iter()
            .map(|(id, entry)| ExtentRecord {
                id,
                owner: entry.owner,
                blocks: entry.blocks,
                locations: entry.locations[..lanes].to_vec(),
                crcs: self.mapped.get(&id).map_or_else(Vec::new, |crcs| crcs.to_vec()),
            })
            .collect();
        let zone_valid =
            self.lanes.iter().map(|l| (0..l.table.zone_count()).map(|z| l.table.zone(z).valid).collect()).collect();
        Checkpoint { superblock: self.superblock.clone(), free: self.table.used_free().collect(), extents, zone_valid }
    }

    /// Moves the log to the other segment with a checkpoint of the whole
    /// state, on every copy (see [`Journal::rotate`]). When a zone of the
    /// target segment has worn out, the segment moves to empty zones taken
    /// from the data (with a warning and a count); only when none are left
    /// does the volume turn read-only.
    pub(super) fn rotate(&mut self) -> Result<()> {
        // Labels carry the volume's shape as it is now (member states, a
        // replaced device's geometry).
        self.journal.label.superblock = self.superblock.clone();
        loop {
            let payload = journal::encode_checkpoint(&self.checkpoint());
            let error = match self.journal.rotate(&mut self.devices, &payload) {
                Ok(blocks) => {
                    self.stats.checkpoints += 1;
                    self.stats.checkpoint_bytes = blocks * crate::BLOCK_SIZE as u64;
                    return Ok(());
                }
                Err(error) => error,
            };
            let Some((copy, zone)) = self.journal.worn_target(&mut self.devices) else { return Err(error) };
            let device = self.journal.copies[copy].device;
            match self.free_zones_for_metadata(device) {
                Some(first) => {
                    let target = 1 - self.journal.segment;
                    log::warn!(
                        "metadata zone {zone} of device {device} (copy {copy}) is worn out: segment {target} moves \
                         to zones {first}..{}",
                        first + self.journal.g
                    );
                    self.journal.move_segment(copy, target, first);
                    self.superblock.meta_segments = self.journal.label.superblock.meta_segments;
                    self.stats.meta_zones_replaced += 1;
                }
                None => {
                    let why = format!(
                        "metadata zone {zone} of device {device} (copy {copy}) is worn out and no {} empty zone(s) \
                         in a row are left to take its segment",
                        self.journal.g
                    );
                    log::error!("{why}: the volume is read-only");
                    self.read_only = Some(why.clone());
                    return Err(Error::ReadOnly { why });
                }
            }
        }
    }

    /// Takes `g` consecutive empty zones of `device` from its lanes for a
    /// metadata segment, keeping each lane's reclaim reserve. Returns the
    /// first.
    fn free_zones_for_metadata(&mut self, device: usize) -> Option<u32> {
        let g = self.journal.g;
        let lanes: Vec<usize> = (0..self.lanes.len()).filter(|&l| self.lanes[l].device == device).collect();
        let owner = |volume: &Self, zone: u32| {
            lanes.iter().copied().find(|&l| volume.lanes[l].table.zone(zone).usage == ZoneUse::Empty)
        };
        let zones = self.dev(device).zones.len() as u32;
        let mut run = 0;
        let mut first = None;
        // From the end: data fills zones from the front.
        for zone in (0..zones).rev() {
            run = if owner(self, zone).is_some() { run + 1 } else { 0 };
            if run == g {
                first = Some(zone);
                break;
            }
        }
        let first = first?;
        let reserve = self.superblock.reserve_zones as usize;
        for &lane in &lanes {
            let taken = (first..first + g).filter(|&z| self.lanes[lane].table.zone(z).usage == ZoneUse::Empty).count();
            if self.lanes[lane].table.empty_zones() < reserve + taken + 1 {
                return None;
            }
        }
        for zone in first..first + g {
            let lane = owner(self, zone).expect("checked empty");
            self.lanes[lane].table.take_out(zone);
        }
        Some(first)
    }
}
