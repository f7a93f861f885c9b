//! Free and commit: journaling what changed, rotating the metadata
//! segments, and resetting zones whose emptiness is durable.

use super::{CommitInfo, Volume};
use crate::error::{Error, Result};
use crate::journal::layout::{meta_lba, read_segment, segment_position};
use crate::journal::{self, Checkpoint, ExtentRecord, Kind};
use crate::{ExtentId, BLOCK_SIZE};
use nvme_driver::cmd::zns::ZoneSendAction;

impl Volume {
    pub(super) fn segment_blocks(&self) -> u64 {
        let g = self.log.zones_per_segment as usize;
        self.devices[0].zones[..g].iter().map(|z| u64::from(z.capacity_blocks)).sum()
    }

    /// The LBA of block `offset` of metadata segment `segment`.
    pub(super) fn meta_lba(&self, segment: u32, offset: u64) -> u64 {
        let g = self.log.zones_per_segment.max(self.superblock.meta_zones_per_segment);
        meta_lba(&self.devices[0], g, segment, offset)
    }

    pub(super) fn read_segment(&mut self, segment: u32, offset: u64, blocks: u64) -> Result<Vec<u8>> {
        let g = self.log.zones_per_segment;
        read_segment(&mut self.devices[0], g, segment, offset, blocks)
    }

    /// Writes whole blocks at `offset` of `segment`, split at zone ends.
    pub(super) fn write_segment(&mut self, segment: u32, offset: u64, data: &[u8]) -> Result<()> {
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
    pub(super) fn close_meta_zone(&mut self) -> Result<()> {
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

    /// Resets zones whose emptiness is committed.
    pub(super) fn reset_dead_zones(&mut self) -> Result<usize> {
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

    pub(super) fn checkpoint(&self) -> Checkpoint {
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
    pub(super) fn write_checkpoint(&mut self, segment: u32, generation: u64, seq: u64) -> Result<()> {
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
    pub(super) fn rotate(&mut self) -> Result<()> {
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
}
