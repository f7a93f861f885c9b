//! Missing copies, and how a resilver writes them: [`Volume::submit_copy`]
//! queues the write of one extent's missing copy, placed in its stream
//! and journaled at the next commit (see `member` for how copies come to
//! be missing).

use super::write::Payload;
use super::{PendingWrite, Volume, WriteDone};
use crate::error::{Error, Full, Result};
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
        let entry = self.table.get(id).filter(|e| e.missing_in(target))?;
        let holds =
            |&(lane, at): &(usize, crate::Location)| lane != target && !at.is_missing() && self.lane_online(lane);
        let count = entry.copies().filter(holds).count();
        let pick = (crate::table::split(id).0 % count.max(1) as u64) as usize;
        entry.copies().filter(holds).nth(pick).map(|(lane, _)| lane)
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

    fn submit_copy_payload(
        &mut self,
        id: ExtentId,
        lane: usize,
        data: Payload<'_>,
        crcs: Option<Vec<u32>>,
    ) -> Result<()> {
        self.check_resets()?;
        let extent = self.live(id)?;
        if lane >= self.lanes.len() || !extent.missing_in(lane) {
            return Err(Error::InvalidArgument(format!("extent {id} does not lack copy {lane}")));
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
        let pending =
            PendingWrite { tagged, ..PendingWrite::new(Some(lane), id, owner, stream, blocks, crcs, &[lane]) };
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
                if to.is_missing() {
                    Err(Error::Member { device: self.lanes[lane].device, why: "given up during the copy".into() })
                } else if self.lacks_copy(pending.id, lane) {
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
