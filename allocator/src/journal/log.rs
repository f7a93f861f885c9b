//! Writing the journal: every record goes to both metadata copies, and a
//! commit is durable only when both are flushed.
//!
//! A checkpoint is written a few pages per commit ([`Journal::begin`],
//! then [`Journal::append`]): the segment it begins in holds its first
//! record, the pages follow with the deltas, and the record with the last
//! page seals it. Until then the other segment, which holds the last
//! sealed checkpoint and the log up to this one's beginning, is kept; it is
//! retired by the append that seals. Open replays the log from the sealed
//! checkpoint's beginning over its pages (see `recovery`).
//!
//! A failure anywhere in an append or a checkpoint marks the log broken:
//! the record may or may not have reached the media, so appending after it
//! could journal the same operations twice (or leave a gap). The next
//! commit therefore writes a whole checkpoint, every page in one record,
//! under a generation never used before: in the other segment when the
//! current checkpoint is sealed, and otherwise (the other segment is still
//! needed) in this one, past everything the failed write may have touched
//! ([`Journal::restart`]). A retry never duplicates a record, and a failed
//! checkpoint is retried the same way (TigerBeetle's superblock takes the
//! same stance: a write that may have failed is superseded, never repeated
//! in place).

use super::layout::{
    placed_copies, segment_capacity, segment_position, single_piece, write_segment, MetaCopy, LABEL_BLOCKS,
};
use super::{encode_label, encode_record, seal_record, Kind, Label, Stamp, NO_COPY};
use crate::device::Device;
use crate::error::Result;
use crate::BLOCK_SIZE;
use nvme_driver::cmd::zns::ZoneSendAction;
use nvme_driver::spec::zns::ZoneState;

/// The least log (4 MiB) after which a checkpoint begins whatever the
/// table's size, so that a small table is not rewritten every few commits:
/// at 256 KiB extents 4 MiB of log is about 8 GiB of data written, and
/// what a rotation costs the metadata zones is what it writes there (the
/// table, two labels per copy). It is also the most log open replays on a
/// small volume: at 16 MiB, a 64 GiB volume replayed its whole log since
/// format (224,000 operations, 0.10 s).
pub(crate) const MIN_LOG_BLOCKS: u64 = 1024;

/// A checkpoint begins once the log since the last one became whole
/// passes the table's size over this (or [`MIN_LOG_BLOCKS`]). Open
/// replays this, the operations while the last checkpoint spread and
/// those while the next one spreads so far, each an eighth of the table
/// (see `Volume::pages_due`'s `SPREAD_RATIO`): at most three eighths of
/// the table's size in operations. At a quarter each (three quarters in
/// all), a 2 TiB volume caught at the end of a spread replayed 1.48
/// million operations and opened in 1.04 to 1.09 s per TiB of data, 0.45
/// after a checkpoint; each operation costs open several times its share
/// of a loaded page (reading and checking its record, decoding it,
/// applying it, its owner). An eighth takes open's worst case at 1 TiB
/// to 0.83 s per TiB and writes more checkpoints: 0.10% of the data
/// written at 256 KiB extents and 2 TiB, against 0.07% at a quarter.
pub(crate) const ROTATE_AT_TABLE_FRACTION: u64 = 8;

/// The journal's position and its rule for retries. See the [module
/// documentation](self).
#[derive(Debug)]
pub(crate) struct Journal {
    pub volume_id: u64,
    /// Zones per segment.
    pub g: u32,
    pub copies: Vec<MetaCopy>,
    /// What every label of the volume says (copy and segment are set per
    /// label written).
    pub label: Label,
    /// The segment the log is in.
    pub segment: u32,
    /// Next free block in the segment, on every copy.
    pub offset: u64,
    /// Pages the current checkpoint writes, and how many it has written:
    /// it is sealed once they are equal.
    pub pages_total: u64,
    pub pages_written: u64,
    /// Where the current checkpoint became whole: the log since then is
    /// what open replays over its pages.
    pub sealed_at: u64,
    /// The other segment holds what the current checkpoint builds on:
    /// retired once it seals.
    pub other_needed: bool,
    /// Blocks of the record whose write failed (what a restart must step
    /// past on a conventional namespace).
    pub failed_blocks: u64,
    /// The segment's generation, and the last durable sequence number.
    pub generation: u64,
    pub seq: u64,
    /// Above every generation any record was ever written with.
    pub next_generation: u64,
    /// The last append or rotation failed: the next commit rotates.
    pub broken: bool,
    /// The segment, first block and sequence number of the last record
    /// written.
    pub last: (u32, u64, u64),
    /// The session every record is written under (see
    /// [`super::SessionRecord`]): the label's newest.
    pub session: u64,
}

impl Journal {
    /// A journal over `label`'s geometry, positioned nowhere yet.
    pub fn new(label: Label) -> Journal {
        let g = label.superblock.meta_zones_per_segment;
        let session = label.superblock.sessions.last().map_or(0, |s| s.id);
        Journal {
            volume_id: label.volume_id,
            g,
            copies: placed_copies(&label.superblock),
            label,
            segment: 0,
            offset: 0,
            pages_total: 0,
            pages_written: 0,
            sealed_at: 0,
            other_needed: false,
            failed_blocks: 0,
            generation: 0,
            seq: 0,
            next_generation: 1,
            broken: false,
            last: (0, 0, 0),
            session,
        }
    }

    /// Blocks of a segment, on every copy: fixed at format (the smallest
    /// over the copies and segments then), so that every copy holds each
    /// record at the same offset, whichever copies are present.
    pub fn segment_blocks(&self, _devices: &[Option<Device>]) -> u64 {
        self.label.superblock.meta_segment_blocks
    }

    /// Blocks of the smallest segment of the copies present, over both
    /// segments (what format fixes, and what open and a replacement are
    /// checked against).
    pub fn present_segment_blocks(&self, devices: &[Option<Device>]) -> u64 {
        self.copies
            .iter()
            .filter_map(|&copy| devices[copy.device].as_ref().map(|device| (copy, device)))
            .flat_map(|(copy, device)| (0..2).map(move |segment| (copy, device, segment)))
            .map(|(copy, device, segment)| segment_capacity(device, copy, self.g, segment))
            .min()
            .unwrap_or(0)
    }

    /// The copies whose device is in use: the journal writes those only.
    /// A copy on a device given up is left as it was, and outranked by the
    /// next checkpoint's generation.
    pub(super) fn present(&self, devices: &[Option<Device>]) -> Result<Vec<MetaCopy>> {
        let copies: Vec<MetaCopy> = self.copies.iter().copied().filter(|c| devices[c.device].is_some()).collect();
        if copies.is_empty() {
            return Err(crate::Error::NoDevices);
        }
        Ok(copies)
    }

    /// Blocks the delta record of a payload of `payload_bytes` takes.
    pub fn record_blocks(payload_bytes: usize) -> u64 {
        (super::HEADER_BYTES + payload_bytes).div_ceil(BLOCK_SIZE) as u64
    }

    /// Whether the current checkpoint has written all its pages.
    pub fn sealed(&self) -> bool {
        self.pages_written >= self.pages_total
    }

    /// Whether the next commit must begin a checkpoint in the other
    /// segment (the current one sealed): with checkpoints that `spread`,
    /// its record of `blocks` would end past half of the segment, so the
    /// next checkpoint, paced to seal within the first half of its own
    /// segment, always has the room (a checkpoint written whole moves on
    /// when the log fills the segment: see
    /// [`SPREAD_SHARE`](super::layout::SPREAD_SHARE)); or
    /// the log since the last checkpoint became whole passed an eighth of
    /// the table's size (`table_blocks`; at least [`MIN_LOG_BLOCKS`]; see
    /// [`ROTATE_AT_TABLE_FRACTION`]), so that open replays little log
    /// beside the pages it loads. (The metadata written, checkpoints and
    /// log, one copy, is then 0.04 to 0.10% of the data written at 256 KiB
    /// extents, from 64 GiB to 2 TiB, measured by the scale bench; 0.04 to
    /// 0.07% at a quarter.)
    pub fn must_rotate(&self, devices: &[Option<Device>], blocks: u64, table_blocks: u64, spread: bool) -> bool {
        let log = self.offset.saturating_sub(self.sealed_at) + blocks;
        self.sealed()
            && ((spread && self.offset + blocks > self.segment_blocks(devices) / 2)
                || log > (table_blocks / ROTATE_AT_TABLE_FRACTION).max(MIN_LOG_BLOCKS))
    }

    /// Appends a delta carrying `pages` checkpoint pages to both copies and
    /// flushes them; the record that writes the current checkpoint's last
    /// page seals it, and the other segment is retired. `body` is the
    /// record's payload after room for its header (see
    /// [`seal_record`](super::seal_record)). On failure the log is broken
    /// (see the [module documentation](self)).
    pub fn append(&mut self, devices: &mut [Option<Device>], body: Vec<u8>, pages: u64) -> Result<()> {
        assert!(!self.broken, "appending after a failed write");
        let seals = !self.sealed() && self.pages_written + pages >= self.pages_total;
        let stamp = Stamp {
            kind: Kind::Delta,
            generation: self.generation,
            seq: self.seq + 1,
            sealed: seals,
            session: self.session,
        };
        let record = seal_record(stamp, self.volume_id, body);
        let blocks = (record.len() / BLOCK_SIZE) as u64;
        if self.offset + blocks > self.segment_blocks(devices) {
            return Err(crate::Error::NoSpace(crate::error::Full::Metadata));
        }
        self.broken = true;
        self.failed_blocks = blocks;
        self.write_copies(devices, self.segment, self.offset, &record)?;
        self.flush(devices)?;
        self.broken = false;
        self.failed_blocks = 0;
        self.last = (self.segment, self.offset, self.seq + 1);
        self.offset += blocks;
        self.seq += 1;
        self.pages_written += pages;
        if seals {
            self.sealed_at = self.offset;
            self.retire_other(devices);
        }
        Ok(())
    }

    /// Begins a checkpoint of `pages_total` pages in the other segment, the
    /// current one's being sealed: labels, then the record `payload`
    /// carrying the commit's operations and the first `pages` pages, under
    /// a new generation, on both copies. When that is every page it is
    /// sealed at once and the old segment retired; otherwise the old
    /// segment is kept until it seals. Returns the blocks of the record.
    pub fn begin(
        &mut self,
        devices: &mut [Option<Device>],
        payload: &[u8],
        pages_total: u64,
        pages: u64,
    ) -> Result<u64> {
        assert!(self.sealed(), "a checkpoint begins only once the last one sealed");
        let old = self.segment;
        let target = 1 - old;
        let generation = self.next_generation;
        self.next_generation += 1;
        self.broken = true;
        let sealed = pages >= pages_total;
        let stamp = Stamp { kind: Kind::Checkpoint, generation, seq: self.seq + 1, sealed, session: self.session };
        let blocks = self.write_checkpoint(devices, target, stamp, payload)?;
        self.broken = false;
        self.failed_blocks = 0;
        self.segment = target;
        self.offset = LABEL_BLOCKS + blocks;
        self.generation = generation;
        self.seq += 1;
        self.last = (target, LABEL_BLOCKS, self.seq);
        self.pages_total = pages_total;
        self.pages_written = pages;
        self.other_needed = true;
        if sealed {
            self.sealed_at = self.offset;
            self.retire_other(devices);
        }
        Ok(blocks)
    }

    /// After a failed write while the current checkpoint is not sealed
    /// (the other segment is still needed): writes a whole checkpoint,
    /// `payload` with all its pages, sealed, under a new generation, in the
    /// current segment past everything the failed write may have touched:
    /// the next empty zone on zoned namespaces (the partly written ones
    /// finished), past the failed record on conventional ones. Then the
    /// other segment is retired. Fails with [`crate::Error::NoSpace`] when
    /// the segment has no room left, or when the copies' zones offer no
    /// common place (mirror members with different zone sizes): the
    /// volume holds its committed state, and open recovers it.
    pub fn restart(&mut self, devices: &mut [Option<Device>], payload: &[u8]) -> Result<u64> {
        let at = self.clean_position(devices)?;
        let generation = self.next_generation;
        self.next_generation += 1;
        let stamp =
            Stamp { kind: Kind::Checkpoint, generation, seq: self.seq + 1, sealed: true, session: self.session };
        let record = encode_record(stamp, self.volume_id, payload);
        let blocks = (record.len() / BLOCK_SIZE) as u64;
        if at + blocks > self.segment_blocks(devices) {
            return Err(crate::Error::NoSpace(crate::error::Full::Metadata));
        }
        self.failed_blocks = (at - self.offset) + blocks;
        for copy in self.present(devices)? {
            self.write_copy(devices, copy, self.segment, at, &record)?;
        }
        self.flush(devices)?;
        self.broken = false;
        self.failed_blocks = 0;
        self.offset = at + blocks;
        self.generation = generation;
        self.seq += 1;
        self.last = (self.segment, at, self.seq);
        self.pages_total = 0;
        self.pages_written = 0;
        self.sealed_at = self.offset;
        self.retire_other(devices);
        Ok(blocks)
    }

    /// Where a restart may write in the current segment, on every copy:
    /// past the failed record, and on zoned namespaces at the write
    /// pointer, brought to a block boundary; copies whose pointer stands
    /// lower are padded with zero blocks (which no reader takes for a
    /// record) up to the common place.
    fn clean_position(&self, devices: &mut [Option<Device>]) -> Result<u64> {
        let mut at = self.offset + self.failed_blocks;
        let copies = self.present(devices)?;
        let mut frontiers = Vec::new();
        for &copy in &copies {
            let device = devices[copy.device].as_mut().expect("present");
            if device.is_zoned() {
                let frontier = self.frontier(device, copy)?;
                at = at.max(frontier);
                frontiers.push((copy, frontier));
            }
        }
        if at >= self.segment_blocks(devices) {
            return Err(crate::Error::NoSpace(crate::error::Full::Metadata));
        }
        for (copy, frontier) in frontiers {
            if frontier < at {
                // A copy with nothing here yet (a new device) gets its
                // labels where they belong.
                let mut padding = vec![0u8; (at - frontier) as usize * BLOCK_SIZE];
                if frontier < LABEL_BLOCKS {
                    let labels = self.labels(copy, self.segment);
                    let head = (LABEL_BLOCKS - frontier) as usize * BLOCK_SIZE;
                    padding[..head].copy_from_slice(&labels[frontier as usize * BLOCK_SIZE..]);
                }
                let device = devices[copy.device].as_mut().expect("present");
                write_segment(device, copy, self.g, self.segment, frontier, &padding)?;
            }
        }
        Ok(at)
    }

    /// The first block of the current segment of zoned `copy` past its
    /// write pointer: a pointer left inside a block (a cut mid-write) is
    /// brought to the block's end with zeroes.
    fn frontier(&self, device: &mut Device, copy: MetaCopy) -> Result<u64> {
        let descriptors = device.report_zones()?;
        let lpb = device.lbas_per_block;
        let mut start = 0u64;
        let first = copy.segments[self.segment as usize];
        for zone in first..first + self.g {
            let d = descriptors[zone as usize];
            let capacity = u64::from(device.zones[zone as usize].capacity_blocks);
            match d.state {
                ZoneState::Empty => return Ok(start),
                state if crate::device::zone_has_write_pointer(state) => {
                    let lbas = d.wp - d.zslba;
                    if lbas % lpb != 0 {
                        device.pad_lbas(d.wp, lpb - lbas % lpb)?;
                    }
                    let written = lbas.div_ceil(lpb);
                    if written < capacity {
                        return Ok(start + written);
                    }
                }
                // Full, or worn out: nothing more is written there.
                _ => {}
            }
            start += capacity;
        }
        Ok(start)
    }

    /// Retires the other segment once nothing needs it (see
    /// [`Journal::retire`]); a failure only wastes room until the next
    /// checkpoint resets it.
    fn retire_other(&mut self, devices: &mut [Option<Device>]) {
        if !self.other_needed {
            return;
        }
        self.other_needed = false;
        let other = 1 - self.segment;
        if let Err(error) = self.retire(devices, other) {
            log::warn!("retiring metadata segment {other}: {error}");
        }
    }

    /// The first checkpoint of a new volume, sealed, in segment 0 of both
    /// copies. On conventional namespaces segment 1 gets labels and its
    /// checkpoint slot is cleared, so no older volume's checkpoint survives
    /// there.
    pub fn format(&mut self, devices: &mut [Option<Device>], payload: &[u8]) -> Result<()> {
        for copy in self.present(devices)? {
            let device = devices[copy.device].as_mut().expect("present");
            if !device.is_zoned() {
                let mut head = self.labels(copy, 1);
                head.resize(head.len() + BLOCK_SIZE, 0);
                write_segment(device, copy, self.g, 1, 0, &head)?;
            }
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        let stamp = Stamp { kind: Kind::Checkpoint, generation, seq: 1, sealed: true, session: self.session };
        let blocks = self.write_checkpoint(devices, 0, stamp, payload)?;
        self.segment = 0;
        self.offset = LABEL_BLOCKS + blocks;
        self.sealed_at = self.offset;
        self.generation = generation;
        self.seq = 1;
        self.last = (0, LABEL_BLOCKS, 1);
        Ok(())
    }

    /// Labels and a checkpoint's first record at the head of `segment` on
    /// both copies, flushed. Zoned segments are reset first; the old
    /// segment's open zone is finished, so metadata holds one active zone
    /// per copy.
    fn write_checkpoint(
        &mut self,
        devices: &mut [Option<Device>],
        segment: u32,
        stamp: Stamp,
        payload: &[u8],
    ) -> Result<u64> {
        let record = encode_record(stamp, self.volume_id, payload);
        let blocks = (record.len() / BLOCK_SIZE) as u64;
        if LABEL_BLOCKS + blocks > self.segment_blocks(devices) {
            return Err(crate::Error::NoSpace(crate::error::Full::Metadata));
        }
        for copy in self.present(devices)? {
            let device = devices[copy.device].as_mut().expect("present");
            if device.is_zoned() {
                self.reset_segment(device, copy, segment)?;
                self.finish_open_zone(device, copy)?;
            }
            let mut head = self.labels(copy, segment);
            head.extend_from_slice(&record);
            self.write_copy(devices, copy, segment, 0, &head)?;
        }
        self.flush(devices)?;
        Ok(blocks)
    }

    /// After a failed rotation: the copy and first zone of the segment it
    /// targeted that the device reports worn out (Read Only or Offline).
    pub fn worn_target(&self, devices: &mut [Option<Device>]) -> Option<(usize, u32)> {
        let target = 1 - self.segment;
        for (index, copy) in self.copies.iter().copied().enumerate() {
            let Some(device) = devices[copy.device].as_mut() else { continue };
            if !device.is_zoned() {
                continue;
            }
            let first = copy.segments[target as usize];
            for zone in first..first + self.g {
                if device.zone_is_worn(zone) {
                    return Some((index, zone));
                }
            }
        }
        None
    }

    /// Moves segment `segment` of copy `copy` to the `g` zones from
    /// `first`; the labels say so from the next rotation on, under a new
    /// label generation.
    pub fn move_segment(&mut self, copy: usize, segment: u32, first: u32) {
        assert_ne!(segment, self.segment, "moving the segment the log is in");
        self.copies[copy].segments[segment as usize] = first;
        self.label.superblock.meta_segments[copy][segment as usize] = first;
        self.label.generation += 1;
    }

    /// Makes `segment` hold no checkpoint: reset on zoned namespaces, its
    /// checkpoint block cleared on conventional ones (its labels stay).
    fn retire(&mut self, devices: &mut [Option<Device>], segment: u32) -> Result<()> {
        for copy in self.present(devices)? {
            let device = devices[copy.device].as_mut().expect("present");
            if device.is_zoned() {
                self.reset_segment(device, copy, segment)?;
            } else {
                write_segment(device, copy, self.g, segment, LABEL_BLOCKS, &[0u8; BLOCK_SIZE])?;
            }
        }
        self.flush(devices)
    }

    fn reset_segment(&self, device: &mut Device, copy: MetaCopy, segment: u32) -> Result<()> {
        let first = copy.segments[segment as usize];
        for zone in first..first + self.g {
            device.zone_action(zone, ZoneSendAction::Reset)?;
        }
        Ok(())
    }

    /// Finishes the zone the log is writing in when it is partly written.
    fn finish_open_zone(&self, device: &mut Device, copy: MetaCopy) -> Result<()> {
        if self.offset == 0 || self.offset >= segment_capacity(device, copy, self.g, self.segment) {
            return Ok(());
        }
        let (zone, in_zone) = segment_position(device, copy, self.g, self.segment, self.offset);
        if in_zone > 0 {
            if let Err(error) = device.zone_action(zone, ZoneSendAction::Finish) {
                // A worn-out zone needs no finishing: it takes no writes.
                if !device.zone_is_worn(zone) {
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Labels a member that holds no metadata copy (a pool's third device
    /// on), at the head of its label zone ([`super::layout::LABEL_ZONES`]),
    /// flushed: the volume, its place and `superblock` (the volume's now),
    /// so that open knows it. A zoned label zone is reset first and
    /// finished after, so that it holds no open or active resource.
    pub fn write_member_label(&self, device: &mut Device, place: usize, superblock: &super::Superblock) -> Result<()> {
        let label = Label {
            device_index: place as u8,
            copy: NO_COPY,
            segment: 0,
            superblock: superblock.clone(),
            ..self.label.clone()
        };
        let block = encode_label(&label);
        if device.is_zoned() {
            device.zone_action(0, ZoneSendAction::Reset)?;
        }
        device.write_at(device.lba(0, 0), &[block.clone(), block].concat())?;
        if device.is_zoned() {
            device.zone_action(0, ZoneSendAction::Finish)?;
        }
        device.flush()
    }

    /// The two label blocks that head `segment` of `copy`.
    fn labels(&self, copy: MetaCopy, segment: u32) -> Vec<u8> {
        let index = self.copies.iter().position(|&c| c == copy).expect("one of ours");
        let label =
            Label { device_index: copy.device as u8, copy: index as u8, segment: segment as u8, ..self.label.clone() };
        let block = encode_label(&label);
        [block.clone(), block].concat()
    }

    /// Writes `data` at `offset` of segment `segment` on every copy in
    /// use, in order. The copies that one transfer carries, on devices of
    /// one I/O address space (the two copies of a volume of one device, and
    /// devices of one controller or one IOMMU container), share one copy
    /// into DMA memory; the others are written as [`write_segment`] does.
    fn write_copies(&self, devices: &mut [Option<Device>], segment: u32, offset: u64, data: &[u8]) -> Result<()> {
        let copies = self.present(devices)?;
        let mut shared = None;
        for &copy in &copies {
            let device = devices[copy.device].as_mut().expect("a copy in use");
            let lba = single_piece(device, copy, self.g, segment, offset, data.len());
            if shared.is_none() && lba.is_some() {
                shared = device.buffer_holding(data)?.map(|(buffer, kept)| (copy.device, buffer, kept));
            }
            match (lba, shared.take()) {
                (Some(lba), Some((owner, buffer, kept))) if buffer.dma_domain() == device.dma_domain() => {
                    let buffer = device.write_buffer(lba, buffer, data.len())?;
                    shared = Some((owner, buffer, kept));
                    self.close_after(device, copy, segment, offset, data.len())?;
                }
                (_, kept) => {
                    shared = kept;
                    self.write_copy(devices, copy, segment, offset, data)?;
                }
            }
        }
        if let Some((owner, buffer, kept)) = shared {
            if let Some(device) = devices[owner].as_mut() {
                device.give_back_buffer(buffer, kept);
            }
        }
        Ok(())
    }

    /// Writes `data` at `offset` of `segment` of one copy, then closes the
    /// zone it ends in when partly written, so that metadata holds no open
    /// resource between commits (and the two copies on one namespace are
    /// never open at once).
    fn write_copy(
        &self,
        devices: &mut [Option<Device>],
        copy: MetaCopy,
        segment: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let device = devices[copy.device].as_mut().expect("a copy in use");
        write_segment(device, copy, self.g, segment, offset, data)?;
        self.close_after(device, copy, segment, offset, data.len())
    }

    /// After a write of `bytes` at `offset` of a zoned copy's segment: the
    /// zone it ended in is closed when it ended inside it.
    fn close_after(&self, device: &mut Device, copy: MetaCopy, segment: u32, offset: u64, bytes: usize) -> Result<()> {
        if device.is_zoned() {
            let end = offset + (bytes / BLOCK_SIZE) as u64;
            if end < segment_capacity(device, copy, self.g, segment) {
                let (zone, in_zone) = segment_position(device, copy, self.g, segment, end);
                if in_zone > 0 {
                    device.zone_action(zone, ZoneSendAction::Close)?;
                }
            }
        }
        Ok(())
    }

    /// Flushes every namespace in use holding a copy.
    fn flush(&self, devices: &mut [Option<Device>]) -> Result<()> {
        let mut flushed = Vec::new();
        for copy in self.present(devices)? {
            if !flushed.contains(&copy.device) {
                devices[copy.device].as_mut().expect("present").flush()?;
                flushed.push(copy.device);
            }
        }
        Ok(())
    }
}
