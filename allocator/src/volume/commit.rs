//! Free and commit: journaling what changed, rotating the metadata
//! segments, and resetting zones whose emptiness is durable.

use super::{CommitInfo, Volume};
use crate::device::zone_worn_out;
use crate::error::{Error, Result};
use crate::journal::log::Journal;
use crate::journal::{self, encode_begin, encode_owner_pages, encode_pages, Encoded, PAGE_BYTES};
use crate::zones::ZoneUse;
use crate::ExtentId;
use nvme_driver::cmd::zns::ZoneSendAction;
use std::time::Instant;

/// While a checkpoint spreads, each commit carries at least this many
/// times its operations' bytes in pages: the operations journaled during
/// a spread, all of which open may replay, are then at most an eighth of
/// the table's size, where one page per commit let them reach 1.2 times
/// it at 1 TiB (open 1.6 s per TiB against 0.75 s after a checkpoint),
/// and four times a quarter. A commit's bytes stay in proportion to its
/// operations.
const SPREAD_RATIO: u64 = 8;

/// Microseconds between laps, for [`CommitPhases`](super::CommitPhases).
struct PhaseClock(Instant);

impl PhaseClock {
    fn start() -> PhaseClock {
        PhaseClock(Instant::now())
    }

    /// Microseconds since the last lap (or the start).
    fn lap(&mut self) -> u64 {
        let now = Instant::now();
        let us = now.duration_since(self.0).as_micros() as u64;
        self.0 = now;
        us
    }
}

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
        let mut clock = PhaseClock::start();
        self.check_resets()?;
        self.wait_idle()?;
        self.journal_members();
        let mut info = CommitInfo { seq: self.journal.seq, ..CommitInfo::default() };
        info.phases.waiting_us = clock.lap();
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
            info.phases.flushing_us = clock.lap();
            // The operations go straight into the delta's record.
            let (mapped, freed) = (&self.mapped, &self.freed_crcs);
            let body =
                journal::DeltaBody::new(&self.ops, |id| mapped.get(&id).or_else(|| freed.get(&id)).map(|c| &c[..]));
            let ops_bytes = body.ops().len();
            let ops_blocks = Journal::record_blocks(ops_bytes);
            self.recent_ops_blocks = ops_blocks.max(self.recent_ops_blocks - self.recent_ops_blocks / 8);
            let mut rotate = false;
            if self.journal.broken {
                self.write_whole_checkpoint(body.ops())?;
                info.checkpoint = true;
                info.phases.writing_us = clock.lap();
            } else if !self.journal.sealed() {
                // The current checkpoint's next pages go with the delta.
                let left = self.journal.pages_total - self.journal.pages_written;
                let count = self.pages_due(self.journal.offset, left, ops_bytes);
                let pages = self.page_chunk(self.journal.pages_written, count)?;
                let owners = self.owner_chunk()?;
                info.phases.encoding_us = clock.lap();
                self.append_delta(body, &pages, &owners, count)?;
                info.phases.writing_us = clock.lap();
            } else {
                let owners = self.owner_chunk()?;
                let none = encode_pages(&[], self.volume_id, self.journal.seq + 1);
                let blocks = Journal::record_blocks(8 + ops_bytes + none.bytes.len() + owners.bytes.len());
                if self.journal.offset + blocks > self.journal.segment_blocks(&self.devices) {
                    // No room left here (after a restart late in the
                    // segment): the commit goes in a whole checkpoint in the
                    // other one.
                    info.phases.encoding_us = clock.lap();
                    self.begin_checkpoint(body.ops(), true)?;
                    info.checkpoint = true;
                    info.phases.writing_us = clock.lap();
                } else {
                    // Past half of the segment (when checkpoints spread),
                    // the next checkpoint begins in the other one once this
                    // commit is durable here: its first record carries no
                    // operation, so that losing it loses no commit (the
                    // segment it builds on is kept until it seals).
                    let table_blocks = (self.table.pages() * PAGE_BYTES as u64).div_ceil(crate::BLOCK_SIZE as u64);
                    rotate = self.journal.must_rotate(&self.devices, blocks, table_blocks, self.checkpoint_spreads());
                    info.phases.encoding_us = clock.lap();
                    self.append_delta(body, &none, &owners, 0)?;
                    info.phases.writing_us = clock.lap();
                }
            }
            // The same for the record itself.
            self.check_resets()?;
            for device in self.devices.iter_mut().flatten() {
                device.durable_generation = device.pair.reset_generation();
            }
            info.ops = self.ops.len();
            info.seq = self.journal.seq;
            self.ops.clear();
            for (_, crcs) in self.freed_crcs.drain() {
                super::write::recycle_crcs(&mut self.crc_pool, crcs.into_vec());
            }
            self.members_journaled();
            self.seals_committed();
            self.stats.commits += 1;
            if rotate {
                // The commit stands whatever happens here; a checkpoint
                // that fails to begin leaves the log broken, and the next
                // commit writes a whole one.
                let whole = !self.checkpoint_spreads();
                match self.begin_checkpoint(&journal::encode_ops(&[]), whole) {
                    Ok(()) => info.checkpoint = true,
                    Err(error) => log::warn!("beginning a checkpoint: {error}; the next commit writes a whole one"),
                }
                info.phases.rotating_us = clock.lap();
            }
        }
        clock.lap();
        info.zones_reset = self.reset_dead_zones()?;
        info.phases.resetting_us = clock.lap();
        Ok(info)
    }

    /// Commits, then writes a whole checkpoint, every page at once, and
    /// moves the log to the other metadata segment: so that the next open
    /// replays no log (before a planned restart), and so that a benchmark
    /// can time a whole checkpoint. (Commits write checkpoints a few pages
    /// at a time, never pausing on one.) A checkpoint being written is
    /// finished first. One that fails leaves the log broken, like any
    /// failed checkpoint: the next commit (or checkpoint) writes one anew.
    pub fn checkpoint_now(&mut self) -> Result<CommitInfo> {
        let mut info = self.commit()?;
        // A commit after a failed checkpoint has just written a whole one.
        if !(info.checkpoint && self.journal.sealed()) {
            self.check_resets()?;
            if !self.journal.sealed() {
                let count = self.journal.pages_total - self.journal.pages_written;
                let pages = self.page_chunk(self.journal.pages_written, count)?;
                let owners = encode_owner_pages(&[], self.volume_id, self.journal.seq + 1);
                self.append_delta(journal::DeltaBody::new(&[], |_| None), &pages, &owners, count)?;
            }
            self.begin_checkpoint(&journal::encode_ops(&[]), true)?;
            info.checkpoint = true;
            info.seq = self.journal.seq;
        }
        Ok(info)
    }

    /// Whether the next checkpoint spreads over commits: a whole one now
    /// takes at most [`SPREAD_SHARE`] of a segment, and the segment holds
    /// it twice beside three commits of the size of the largest lately
    /// (the spread, which large commits may write at once, the record that
    /// fails, and the whole checkpoint with the operations of that commit
    /// and the next). Else it is written whole, so that a failed write
    /// while it spreads never needs a second one beside it in the same
    /// segment (see [`SPREAD_SHARE`]).
    ///
    /// [`SPREAD_SHARE`]: crate::journal::layout::SPREAD_SHARE
    fn checkpoint_spreads(&self) -> bool {
        let segment = self.journal.segment_blocks(&self.devices);
        let estimate = self.checkpoint_estimate();
        let blocks = estimate.div_ceil(crate::BLOCK_SIZE as u64);
        let beside = 2 * blocks + 3 * self.recent_ops_blocks + crate::journal::layout::LABEL_BLOCKS + 16;
        estimate <= crate::journal::layout::spread_room(segment) && beside <= segment
    }

    /// Pages `first..first + count` of the extent table with their
    /// owners, as the next record carries them.
    pub(super) fn page_chunk(&mut self, first: u64, count: u64) -> Result<Encoded> {
        let mut pages = Vec::with_capacity(count as usize);
        for index in first..first + count {
            let mut image = self.table.page_image(index, |id| self.mapped.get(&id).map(|crcs| &crcs[..]));
            image.owners = self.page_owners(index)?;
            pages.push(image);
        }
        Ok(encode_pages(&pages, self.volume_id, self.journal.seq + 1))
    }

    /// The owner blobs the next delta carries: none while the recent
    /// owners are within their bound ([`VolumeOptions::recent_owners`], or
    /// one per 64 live extents); past it, those of the pages holding them,
    /// round robin, until back within it (a few pages per commit, not a
    /// batch that grows with the bound, so that no commit's bytes grow
    /// with the volume), as many pages at most as the larger of the
    /// commit's operations and
    /// [`VolumeOptions::checkpoint_pages_per_commit`] (so that they drain
    /// at least as fast as writes add them).
    ///
    /// [`VolumeOptions::recent_owners`]: super::VolumeOptions::recent_owners
    /// [`VolumeOptions::checkpoint_pages_per_commit`]: super::VolumeOptions::checkpoint_pages_per_commit
    fn owner_chunk(&mut self) -> Result<Encoded> {
        let limit = self.options.recent_owners.max((self.table.len() / 64) as usize);
        let mut pages = Vec::new();
        if self.owners.recent_count() > limit {
            let most = (self.options.checkpoint_pages_per_commit.max(1) as usize).max(self.ops.len());
            for page in self.owners.pages_to_write(limit, most) {
                pages.push((page, self.page_owners(page)?));
            }
            self.stats.owner_pages_written += pages.len() as u64;
        }
        Ok(encode_owner_pages(&pages, self.volume_id, self.journal.seq + 1))
    }

    /// Appends a delta of the operations in `body`, `pages` of the current
    /// checkpoint (`count` of them) and `owners`' blobs; once durable,
    /// their pages' owners are found there.
    fn append_delta(&mut self, body: journal::DeltaBody, pages: &Encoded, owners: &Encoded, count: u64) -> Result<()> {
        let pages_at = 8 + body.ops().len();
        self.journal.append(&mut self.devices, body.finish(&pages.bytes, &owners.bytes), count)?;
        self.owners_written(pages, pages_at);
        self.owners_written(owners, pages_at + pages.bytes.len());
        Ok(())
    }

    /// The blobs of `encoded`, which begins `at` bytes into the payload of
    /// the record just written, are their pages' owners now.
    pub(super) fn owners_written(&mut self, encoded: &Encoded, at: usize) {
        for &(page, offset) in &encoded.blobs {
            let home = self.journal.home_in_last(at + offset);
            self.owners.written(page, home);
        }
    }

    /// The first record of a checkpoint of every page in use now: the
    /// shape, the commit's operations `ops`, and the first pages `pages`.
    pub(super) fn begin_payload(&self, ops: &[u8], pages: &[u8]) -> Vec<u8> {
        let lane_zones: Vec<u32> = self.lanes.iter().map(|l| l.table.zone_count()).collect();
        // Every seal restated first: open replays no log before this record.
        let ops = journal::concat_ops(&journal::encode_ops(&self.seal_ops()), ops);
        encode_begin(&self.superblock, &lane_zones, self.table.pages(), &ops, pages)
    }

    /// How many of the current checkpoint's pages a delta of `ops_bytes`
    /// carries: [`SPREAD_RATIO`] times its bytes in pages, so that the
    /// operations journaled while a checkpoint spreads, which open replays,
    /// stay within a fraction of the table's size whatever the volume's
    /// size; more when needed for the last page to be written before the
    /// log reaches half of the segment (the rate is then set by the room
    /// left before the half, less what the pages left will take); at least
    /// one, so that every commit moves it on; and at most
    /// [`VolumeOptions::checkpoint_pages_per_commit`] unless the room, or
    /// the commit's own operations, demand more. Held to the cap, a run of
    /// large commits left the checkpoint behind, growing with them until
    /// it sealed past the half, and a journal write failing then found no
    /// room for the whole checkpoint that supersedes it (see
    /// [`SPREAD_SHARE`](crate::journal::layout::SPREAD_SHARE)). `left`
    /// pages remain, and the delta goes at block `offset`.
    ///
    /// [`VolumeOptions::checkpoint_pages_per_commit`]: super::VolumeOptions::checkpoint_pages_per_commit
    fn pages_due(&self, offset: u64, left: u64, ops_bytes: usize) -> u64 {
        if left == 0 {
            return 0;
        }
        // The map's share of a page: all of it without tags, the zones
        // being filled with checksum areas, none with block tags.
        let mapped_blocks = self.live_blocks * self.mapped.len() as u64 / self.table.len().max(1);
        let mapped_bytes = 4 * mapped_blocks / self.table.pages().max(1);
        let page_bytes = PAGE_BYTES as u64 + mapped_bytes;
        let page_blocks = page_bytes.div_ceil(crate::BLOCK_SIZE as u64);
        let delta_blocks = Journal::record_blocks(ops_bytes);
        let half = self.journal.segment_blocks(&self.devices) / 2;
        let room = half.saturating_sub(offset + left * page_blocks);
        if room <= 2 * delta_blocks {
            return left;
        }
        let for_room = (left * delta_blocks).div_ceil(room);
        let for_replay = (SPREAD_RATIO * ops_bytes as u64).div_ceil(page_bytes);
        for_room.clamp(1, self.options.checkpoint_pages_per_commit.max(1)).max(for_replay).min(left)
    }

    /// After a failed write: a whole checkpoint, every page in one record
    /// (see [`Journal::restart`] for where it goes while the current one is
    /// not sealed).
    fn write_whole_checkpoint(&mut self, ops: &[u8]) -> Result<()> {
        if self.journal.sealed() {
            return self.begin_checkpoint(ops, true);
        }
        self.journal.label.superblock = self.superblock.clone();
        let pages = self.page_chunk(0, self.table.pages())?;
        let payload = self.begin_payload(ops, &pages.bytes);
        let blocks = self.journal.restart(&mut self.devices, &payload)?;
        self.owners_written(&pages, payload.len() - pages.bytes.len());
        self.stats.checkpoints += 1;
        self.stats.checkpoint_bytes = blocks * crate::BLOCK_SIZE as u64;
        // The restart freed the other segment; a whole checkpoint there
        // writes the labels on every copy, as the callers of a broken log
        // expect (a replaced or rejoined device, a repaired copy). The
        // restart stands if this fails (the commit is durable in it): the
        // log is broken again, and the next commit tries anew.
        if let Err(error) = self.begin_checkpoint(&journal::encode_ops(&[]), true) {
            log::warn!("writing the labels after a restarted checkpoint: {error}; the next commit tries again");
        }
        Ok(())
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
                self.unseal(lane, zone);
                count += 1;
            }
        }
        self.stats.zones_reset += count as u64;
        Ok(count)
    }

    /// Moves the log to the other segment with a checkpoint's first
    /// record, on every copy (see [`Journal::begin`]), carrying the
    /// commit's operations `ops` and every page when `whole`, else the
    /// first few. When a zone of the target segment has worn out, the
    /// segment moves to empty zones taken from the data (with a warning and
    /// a count); only when none are left does the volume turn read-only.
    pub(super) fn begin_checkpoint(&mut self, ops: &[u8], whole: bool) -> Result<()> {
        // Labels carry the volume's shape as it is now (member states, a
        // replaced device's geometry).
        self.journal.label.superblock = self.superblock.clone();
        let total = self.table.pages();
        loop {
            // A checkpoint spread over commits begins with no page: its
            // pages go with the deltas from the next commit on.
            let count = if whole { total } else { 0 };
            let pages = self.page_chunk(0, count)?;
            let payload = self.begin_payload(ops, &pages.bytes);
            let error = match self.journal.begin(&mut self.devices, &payload, total, count) {
                Ok(blocks) => {
                    self.owners_written(&pages, payload.len() - pages.bytes.len());
                    self.stats.checkpoints += 1;
                    self.stats.checkpoint_bytes =
                        if count == total { blocks * crate::BLOCK_SIZE as u64 } else { total * PAGE_BYTES as u64 };
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
                    self.superblock.meta_segments = self.journal.label.superblock.meta_segments.clone();
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
