//! Free and commit: journaling what changed, rotating the metadata
//! segments, and resetting zones whose emptiness is durable.

use super::{CommitInfo, Volume};
use crate::device::zone_worn_out;
use crate::error::{Error, Result};
use crate::journal::log::Journal;
use crate::journal::{self, Checkpoint, ExtentRecord};
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
    pub fn commit(&mut self) -> Result<CommitInfo> {
        self.check_resets()?;
        self.wait_idle()?;
        let mut info = CommitInfo { seq: self.journal.seq, ..CommitInfo::default() };
        if !self.ops.is_empty() || self.journal.broken {
            self.close_reclaim_zones()?;
            for device in &mut self.devices {
                device.flush()?;
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
            for device in &mut self.devices {
                device.durable_generation = device.pair.reset_generation();
            }
            info.ops = self.ops.len();
            info.seq = self.journal.seq;
            self.ops.clear();
            self.stats.commits += 1;
        }
        info.zones_reset = self.reset_dead_zones()?;
        Ok(info)
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
                    match self.devices[device].zone_action(zone, ZoneSendAction::Reset) {
                        Ok(()) => {}
                        Err(Error::Command { error, .. })
                            if zone_worn_out(&error) || self.devices[device].zone_is_worn(zone) =>
                        {
                            log::warn!("lane {lane} zone {zone} is worn out ({error}): taken out of use");
                            self.lanes[lane].table.wear_out(zone);
                            self.stats.zones_worn += 1;
                            continue;
                        }
                        Err(error) => return Err(error),
                    }
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

    /// Moves the log to the other segment with a checkpoint of the whole
    /// state, on every copy (see [`Journal::rotate`]).
    pub(super) fn rotate(&mut self) -> Result<()> {
        let payload = journal::encode_checkpoint(&self.checkpoint());
        match self.journal.rotate(&mut self.devices, &payload) {
            Ok(_) => {
                self.stats.checkpoints += 1;
                Ok(())
            }
            Err(error) => {
                if let Some(why) = self.journal.worn_target(&mut self.devices) {
                    log::error!("{why}: the volume is read-only");
                    self.read_only = Some(why.clone());
                    return Err(Error::ReadOnly { why });
                }
                Err(error)
            }
        }
    }
}
