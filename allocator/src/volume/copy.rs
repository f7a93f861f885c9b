//! Missing copies, and how a resilver writes them: [`Volume::submit_copy`]
//! queues the write of one extent's missing copy, placed in its stream
//! and journaled at the next commit (see `member` for how copies come to
//! be missing).

use super::write::Payload;
use super::{PendingWrite, Volume, WriteDone};
use crate::error::{Error, Full, Result};
use crate::journal::Op;
use crate::zones::Slot;
use crate::{ExtentId, BLOCK_SIZE};
use nvme_driver::IoBuffer;

impl Volume {
    /// Whether copy `lane` of extent `id` is missing.
    pub fn lacks_copy(&self, id: ExtentId, lane: usize) -> bool {
        lane < self.lanes.len() && self.table.get(id).is_some_and(|e| e.missing_in(lane))
    }

    /// The lane a resilver reads extent `id`'s missing copy in lane
    /// `target` from: one of the lanes in use that hold a copy, the same
    /// for the extent each time it is asked, and spread over them by the
    /// extent's ID, so that a rebuild reads every survivor at once rather
    /// than the first. `None` when the extent lacks no copy there, or no
    /// copy of it is in use.
    pub fn copy_source(&self, id: ExtentId, target: usize) -> Option<usize> {
        let online = target < self.lanes.len() && self.lane_online(target);
        let entry = self.table.get(id).filter(|e| e.missing_in(target) || (e.has_lane(target) && !online))?;
        let holds =
            |&(lane, at): &(usize, crate::Location)| lane != target && !at.is_missing() && self.lane_online(lane);
        let count = entry.copies().filter(holds).count();
        let pick = (crate::table::split(id).0 % count.max(1) as u64) as usize;
        entry.copies().filter(holds).nth(pick).map(|(lane, _)| lane)
    }

    /// Per lane, the blocks a resilver of the copies lane `target` lacks
    /// reads from it ([`Volume::copy_source`]): what each survivor will
    /// read, known before the first read, for a rebuild that balances its
    /// writes against it. One pass over the extents.
    pub fn copy_source_blocks(&self, target: usize) -> Vec<u64> {
        let mut blocks = vec![0u64; self.lanes.len()];
        for (id, entry) in self.table.iter() {
            if let Some(lane) = self.copy_source(id, target) {
                blocks[lane] += u64::from(entry.blocks);
            }
        }
        blocks
    }

    /// Blocks of journal that a distributed rebuild of the copies lane
    /// `target` cannot serve writes on each metadata copy, at the least:
    /// each copy's operations (where it moved, and its checksums, which go
    /// back into the map while its new zone has no area yet), encoded as
    /// the journal encodes them. Owner pages and the checkpoint the log
    /// may move to come on top. For a rebuild that plans its writes
    /// against the metadata devices' own ([`Volume::metadata_copies_on`]).
    pub fn relocation_journal_blocks(&self, target: usize) -> u64 {
        // The bytes depend on the extent's length alone: encoded once per
        // length met, not once per extent.
        let mut per_length: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        let mut bytes = 0;
        for (id, entry) in self.table.iter() {
            if self.copy_source(id, target).is_some() {
                bytes += *per_length.entry(entry.blocks).or_insert_with(|| {
                    let ops = [
                        Op::Relane {
                            id,
                            from: target as u8,
                            lane: target as u8,
                            to: crate::Location { zone: 0, offset: 0 },
                        },
                        Op::Crcs { id, crcs: vec![0; entry.blocks as usize] },
                    ];
                    crate::journal::encode_ops(&ops).len() as u64
                });
            }
        }
        bytes.div_ceil(BLOCK_SIZE as u64)
    }

    /// How many of the journal's copies lie on lane `lane`'s device.
    pub fn metadata_copies_on(&self, lane: usize) -> usize {
        let device = self.lanes.get(lane).map(|l| l.device);
        self.journal.copies.iter().filter(|c| Some(c.device) == device).count()
    }

    /// Whether extent `id` has a copy in lane `lane` that is not available:
    /// missing, or on a device away or given up. What a distributed
    /// rebuild writes elsewhere.
    pub fn lacks_available_copy(&self, id: ExtentId, lane: usize) -> bool {
        let online = lane < self.lanes.len() && self.lane_online(lane);
        self.table.get(id).is_some_and(|e| e.missing_in(lane) || (e.has_lane(lane) && !online))
    }

    /// Blocks of the copies in lane `lane` that are not available
    /// ([`Volume::lacks_available_copy`]).
    pub fn unavailable_blocks(&self, lane: usize) -> u64 {
        let online = lane < self.lanes.len() && self.lane_online(lane);
        let unavailable = |e: &crate::table::Entry| e.missing_in(lane) || (e.has_lane(lane) && !online);
        self.table.iter().filter(|(_, e)| unavailable(e)).map(|(_, e)| u64::from(e.blocks)).sum()
    }

    /// Blocks of the copies lane `lane` lacks.
    pub fn missing_blocks(&self, lane: usize) -> u64 {
        self.table.iter().filter(|(_, e)| e.missing_in(lane)).map(|(_, e)| u64::from(e.blocks)).sum()
    }

    /// Queues a write of `data`, extent `id`'s contents, as its missing
    /// copy `lane`: how a resilver restores redundancy. The caller
    /// verified `data` against the extent's checksums (or chose not to).
    /// The copy is placed in the extent's stream and journaled at the next
    /// commit; the outcome arrives through [`Volume::next_copy_done`]. If
    /// the extent is freed meanwhile, the copy is dropped.
    ///
    /// On a volume with block tags ([`crate::tags`]) the copy's tags are
    /// made from `data`'s checksums: use
    /// [`Volume::submit_copy_buffer_with_checksums`] to carry the source
    /// copy's own instead.
    pub fn submit_copy(&mut self, id: ExtentId, lane: usize, data: &[u8]) -> Result<()> {
        self.submit_copy_payload(id, lane, Payload::Bytes(data), None)
    }

    /// [`Volume::submit_copy`] from a DMA buffer holding exactly the
    /// extent (a read of the other copy), written as it is, with no copy
    /// through the host: the buffer must be mapped in the I/O address
    /// space of lane `lane`'s device ([`Volume::dma_domain`]).
    pub fn submit_copy_buffer(&mut self, id: ExtentId, lane: usize, data: IoBuffer) -> Result<()> {
        if self.dma_domain(lane) != Some(data.buffer().dma_domain()) {
            return Err(Error::InvalidArgument(format!("the buffer is not mapped for copy {lane}'s device")));
        }
        self.submit_copy_payload(id, lane, Payload::Buffer(data), None)
    }

    /// [`Volume::submit_copy`] with the blocks' checksums as the source
    /// copy's tags record them: see
    /// [`Volume::submit_copy_buffer_with_checksums`].
    pub fn submit_copy_with_checksums(&mut self, id: ExtentId, lane: usize, data: &[u8], crcs: Vec<u32>) -> Result<()> {
        if crcs.len() * BLOCK_SIZE != data.len() {
            return Err(Error::InvalidArgument(format!("{} checksums for {} bytes", crcs.len(), data.len())));
        }
        self.submit_copy_payload(id, lane, Payload::Bytes(data), Some(crcs))
    }

    /// [`Volume::submit_copy_buffer`] with the blocks' checksums as the
    /// source copy's tags record them ([`crate::tags::data_crcs`]), so that
    /// the new copy's tags are the extent's, not a reading of what was
    /// read: a block that went bad unnoticed stays bad in the copy, for the
    /// next read or scrub to find. Ignored on a volume without tags.
    pub fn submit_copy_buffer_with_checksums(
        &mut self,
        id: ExtentId,
        lane: usize,
        data: IoBuffer,
        crcs: Vec<u32>,
    ) -> Result<()> {
        if crcs.len() * BLOCK_SIZE != data.len() {
            return Err(Error::InvalidArgument(format!("{} checksums for {} bytes", crcs.len(), data.len())));
        }
        if self.dma_domain(lane) != Some(data.buffer().dma_domain()) {
            return Err(Error::InvalidArgument(format!("the buffer is not mapped for copy {lane}'s device")));
        }
        self.submit_copy_payload(id, lane, Payload::Buffer(data), Some(crcs))
    }

    /// The I/O address space of lane `lane`'s device, when in use: a DMA
    /// buffer of another device in the same space (two controllers in one
    /// VFIO container) can be written to it directly
    /// ([`Volume::submit_copy_buffer`]).
    pub fn dma_domain(&self, lane: usize) -> Option<usize> {
        self.devices[self.lanes.get(lane)?.device].as_ref().map(|d| d.pool.dma_domain())
    }

    /// The lane a distributed rebuild (or an evacuation) writes extent
    /// `id`'s copy in lane `from` to: chosen by placement, as a new
    /// extent's copies are, among the lanes in use with room that hold no
    /// copy of it. [`Error::NoSpace`] naming a full device when none can
    /// take it.
    pub fn relocation_lane(&mut self, id: ExtentId, from: usize) -> Result<usize> {
        let (blocks, holding) = self.relocating(id, from)?;
        self.choose_lane_for_copy(blocks, Slot::Stream(0), holding)
    }

    /// Every lane that could take extent `id`'s copy in lane `from` now
    /// (in use, with room, holding no copy of it), one bit each, for an
    /// engine that weighs them itself (a distributed rebuild evening out
    /// each survivor's reads and writes). The same errors as
    /// [`Volume::relocation_lane`] when none can.
    pub fn relocation_lanes(&self, id: ExtentId, from: usize) -> Result<crate::chooser::DeviceMask> {
        let (blocks, holding) = self.relocating(id, from)?;
        self.lanes_for_copy(blocks, Slot::Stream(0), holding)
    }

    /// Extent `id`'s blocks and the lanes holding a copy of it, one of
    /// them `from`.
    fn relocating(&self, id: ExtentId, from: usize) -> Result<(u32, crate::chooser::DeviceMask)> {
        let extent = self.live(id)?;
        if !extent.has_lane(from) {
            return Err(Error::InvalidArgument(format!("extent {id} has no copy in lane {from}")));
        }
        let holding = extent.copies().fold(0 as crate::chooser::DeviceMask, |mask, (lane, _)| mask | 1 << lane);
        Ok((extent.blocks, holding))
    }

    /// Queues a write of `data`, extent `id`'s contents, as its copy in
    /// lane `lane` ([`Volume::relocation_lane`]) in place of its copy in
    /// lane `from` (on a device lost, or being emptied): a distributed
    /// rebuild's step, dRAID's spare done by placement. Once written, the
    /// copy in `from` is no longer the extent's (journaled at the next
    /// commit); the outcome arrives through [`Volume::next_copy_done`].
    /// `crcs` are the source's block checksums, as with
    /// [`Volume::submit_copy_with_checksums`] (`None`: made from `data`).
    pub fn submit_relocation(
        &mut self,
        id: ExtentId,
        from: usize,
        lane: usize,
        data: &[u8],
        crcs: Option<Vec<u32>>,
    ) -> Result<()> {
        if crcs.as_ref().is_some_and(|crcs| crcs.len() * BLOCK_SIZE != data.len()) {
            return Err(Error::InvalidArgument(format!("checksums for {} bytes", data.len())));
        }
        self.submit_copy_into(id, lane, Some(from), Payload::Bytes(data), crcs)
    }

    /// [`Volume::submit_relocation`] from a DMA buffer holding exactly the
    /// extent, written as it is: it must be mapped in the I/O address
    /// space of lane `lane`'s device ([`Volume::dma_domain`]).
    pub fn submit_relocation_buffer(
        &mut self,
        id: ExtentId,
        from: usize,
        lane: usize,
        data: IoBuffer,
        crcs: Option<Vec<u32>>,
    ) -> Result<()> {
        if crcs.as_ref().is_some_and(|crcs| crcs.len() * BLOCK_SIZE != data.len()) {
            return Err(Error::InvalidArgument(format!("checksums for {} bytes", data.len())));
        }
        if self.dma_domain(lane) != Some(data.buffer().dma_domain()) {
            return Err(Error::InvalidArgument(format!("the buffer is not mapped for copy {lane}'s device")));
        }
        self.submit_copy_into(id, lane, Some(from), Payload::Buffer(data), crcs)
    }

    fn submit_copy_payload(
        &mut self,
        id: ExtentId,
        lane: usize,
        data: Payload<'_>,
        crcs: Option<Vec<u32>>,
    ) -> Result<()> {
        self.submit_copy_into(id, lane, None, data, crcs)
    }

    /// A copy of extent `id` into lane `lane`: its missing copy there, or,
    /// with `from`, the copy that takes the place of the one in lane `from`.
    fn submit_copy_into(
        &mut self,
        id: ExtentId,
        lane: usize,
        from: Option<usize>,
        data: Payload<'_>,
        crcs: Option<Vec<u32>>,
    ) -> Result<()> {
        self.check_resets()?;
        let extent = self.live(id)?;
        let wanted = match from {
            None => lane < self.lanes.len() && extent.missing_in(lane),
            Some(from) => lane < self.lanes.len() && extent.has_lane(from) && !extent.has_lane(lane),
        };
        if !wanted {
            return Err(Error::InvalidArgument(match from {
                None => format!("extent {id} does not lack copy {lane}"),
                Some(from) => format!("extent {id}: no copy in lane {from} to move to lane {lane}"),
            }));
        }
        if !self.lane_online(lane) {
            return Err(Error::Member { device: self.lanes[lane].device, why: "not in use".into() });
        }
        if data.len() != extent.blocks as usize * BLOCK_SIZE {
            return Err(Error::InvalidArgument(format!("{} bytes for extent {id}", data.len())));
        }
        // The volume keeps no stream per extent: missing copies go to the
        // first stream's zones.
        // A copy keeps its extent's slot, and so its owner: none is needed.
        let (blocks, stream, owner) = (extent.blocks, 0, 0);
        let slot = Slot::Stream(stream);
        let table = &self.lanes[lane].table;
        if table.would_open(slot, blocks) && table.empty_zones() <= self.superblock.reserve_zones as usize {
            return Err(Error::NoSpace(Full::Data { place: self.lanes[lane].device }));
        }
        // A copy is tagged as its extent is, its tags written from the
        // checksums the pending write holds.
        let tagged = self.tagged(id);
        let crcs = match (tagged, crcs) {
            (false, _) => Vec::new(),
            (true, Some(crcs)) => crcs,
            (true, None) => data.checksums(),
        };
        // With checksum areas the checksums go to the map when the copy is
        // done (until its zone is sealed), not with the data.
        let tagged = tagged && !self.area;
        let pending = PendingWrite {
            tagged,
            relocates_from: from,
            ..PendingWrite::new(Some(lane), id, owner, stream, blocks, crcs, &[lane])
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
                let to = pending.locations[0].expect("the copy was placed");
                let relocates = pending
                    .relocates_from
                    .filter(|&from| self.table.get(pending.id).is_some_and(|e| e.has_lane(from) && !e.has_lane(lane)));
                if to.is_missing() {
                    Err(Error::Member { device: self.lanes[lane].device, why: "given up during the copy".into() })
                } else if let Some(from) = relocates {
                    if !pending.crcs.is_empty() {
                        self.remap(pending.id, pending.crcs);
                    }
                    self.relane_extent(pending.id, from, lane, to, true);
                    Ok(())
                } else if pending.relocates_from.is_none() && self.lacks_copy(pending.id, lane) {
                    if !pending.crcs.is_empty() {
                        self.remap(pending.id, pending.crcs);
                    }
                    self.move_extent(pending.id, lane, to, true);
                    Ok(())
                } else {
                    // Freed (or copied) meanwhile: the blocks are garbage.
                    Ok(())
                }
            }
        };
        self.copies_done.push_back(WriteDone { id: pending.id, result });
    }
}
