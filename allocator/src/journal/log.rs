//! Writing the journal: every record goes to both metadata copies, and a
//! commit is durable only when both are flushed.
//!
//! A failure anywhere in an append or a rotation marks the log broken: the
//! record may or may not have reached the media, so appending after it
//! could journal the same operations twice (or leave a gap). The next
//! commit therefore rotates: it writes a checkpoint of the whole state,
//! under a generation never used before, to the other segment. A retry
//! never duplicates a record, and a failed rotation is retried the same
//! way (TigerBeetle's superblock takes the same stance: a write that may
//! have failed is superseded, never repeated in place).

use super::layout::{placed_copies, segment_capacity, segment_position, write_segment, MetaCopy, COPIES, LABEL_BLOCKS};
use super::{encode_label, encode_record, Kind, Label};
use crate::device::Device;
use crate::error::Result;
use crate::BLOCK_SIZE;
use nvme_driver::cmd::zns::ZoneSendAction;

/// The journal's position and its rule for retries. See the [module
/// documentation](self).
#[derive(Debug)]
pub(crate) struct Journal {
    pub volume_id: u64,
    /// Zones per segment.
    pub g: u32,
    pub copies: [MetaCopy; COPIES],
    /// What every label of the volume says (copy and segment are set per
    /// label written).
    pub label: Label,
    /// The segment the log is in.
    pub segment: u32,
    /// Next free block in the segment, on every copy.
    pub offset: u64,
    /// Where the segment's checkpoint ends.
    pub checkpoint_end: u64,
    /// The segment's generation, and the last durable sequence number.
    pub generation: u64,
    pub seq: u64,
    /// Above every generation any record was ever written with.
    pub next_generation: u64,
    /// The last append or rotation failed: the next commit rotates.
    pub broken: bool,
}

impl Journal {
    /// A journal over `label`'s geometry, positioned nowhere yet.
    pub fn new(label: Label) -> Journal {
        let g = label.superblock.meta_zones_per_segment;
        Journal {
            volume_id: label.volume_id,
            g,
            copies: placed_copies(&label.superblock),
            label,
            segment: 0,
            offset: 0,
            checkpoint_end: 0,
            generation: 0,
            seq: 0,
            next_generation: 1,
            broken: false,
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
    fn present(&self, devices: &[Option<Device>]) -> Result<Vec<MetaCopy>> {
        let copies: Vec<MetaCopy> = self.copies.into_iter().filter(|c| devices[c.device].is_some()).collect();
        if copies.is_empty() {
            return Err(crate::Error::NoDevices);
        }
        Ok(copies)
    }

    /// Blocks the delta record of a payload of `payload_bytes` takes.
    pub fn record_blocks(payload_bytes: usize) -> u64 {
        (super::HEADER_BYTES + payload_bytes).div_ceil(BLOCK_SIZE) as u64
    }

    /// Whether a delta of `blocks` must go to a new segment instead: the
    /// segment is full, or its log passed half of it (so that the next
    /// checkpoint, at most as large as the log it replaces, always fits).
    pub fn must_rotate(&self, devices: &[Option<Device>], blocks: u64) -> bool {
        let capacity = self.segment_blocks(devices);
        let log_blocks = self.offset - self.checkpoint_end;
        self.broken || self.offset + blocks > capacity || log_blocks + blocks > capacity / 2
    }

    /// Appends a delta to both copies and flushes them. On failure the log
    /// is broken (see the [module documentation](self)).
    pub fn append(&mut self, devices: &mut [Option<Device>], payload: &[u8]) -> Result<()> {
        assert!(!self.broken, "appending after a failed write");
        let record = encode_record(Kind::Delta, self.volume_id, self.generation, self.seq + 1, payload);
        let blocks = (record.len() / BLOCK_SIZE) as u64;
        assert!(self.offset + blocks <= self.segment_blocks(devices), "a delta past its segment");
        self.broken = true;
        for copy in self.present(devices)? {
            self.write_copy(devices, copy, self.segment, self.offset, &record)?;
        }
        self.flush(devices)?;
        self.broken = false;
        self.offset += blocks;
        self.seq += 1;
        Ok(())
    }

    /// Moves the log to the other segment with a checkpoint of the whole
    /// state (`payload`), on both copies, under a new generation; then
    /// retires the old segment. Returns the blocks the checkpoint took.
    pub fn rotate(&mut self, devices: &mut [Option<Device>], payload: &[u8]) -> Result<u64> {
        let old = self.segment;
        let target = 1 - old;
        let generation = self.next_generation;
        self.next_generation += 1;
        self.broken = true;
        let blocks = self.write_checkpoint(devices, target, generation, self.seq + 1, payload)?;
        self.broken = false;
        self.segment = target;
        self.offset = LABEL_BLOCKS + blocks;
        self.checkpoint_end = self.offset;
        self.generation = generation;
        self.seq += 1;
        if let Err(error) = self.retire(devices, old) {
            // The new checkpoint is durable and newer; the old one only
            // wastes room until the next rotation resets it.
            log::warn!("retiring metadata segment {old}: {error}");
        }
        Ok(blocks)
    }

    /// The first checkpoint of a new volume, in segment 0 of both copies.
    /// On conventional namespaces segment 1 gets labels and its checkpoint
    /// slot is cleared, so no older volume's checkpoint survives there.
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
        let blocks = self.write_checkpoint(devices, 0, generation, 1, payload)?;
        self.segment = 0;
        self.offset = LABEL_BLOCKS + blocks;
        self.checkpoint_end = self.offset;
        self.generation = generation;
        self.seq = 1;
        Ok(())
    }

    /// Labels and a checkpoint at the head of `segment` on both copies,
    /// flushed. Zoned segments are reset first; the old segment's open
    /// zone is finished, so metadata holds one active zone per copy.
    fn write_checkpoint(
        &mut self,
        devices: &mut [Option<Device>],
        segment: u32,
        generation: u64,
        seq: u64,
        payload: &[u8],
    ) -> Result<u64> {
        let record = encode_record(Kind::Checkpoint, self.volume_id, generation, seq, payload);
        let blocks = (record.len() / BLOCK_SIZE) as u64;
        if LABEL_BLOCKS + blocks > self.segment_blocks(devices) {
            return Err(crate::Error::NoSpace);
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
        for (index, copy) in self.copies.into_iter().enumerate() {
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

    /// The two label blocks that head `segment` of `copy`.
    fn labels(&self, copy: MetaCopy, segment: u32) -> Vec<u8> {
        let index = self.copies.iter().position(|&c| c == copy).expect("one of ours");
        let label =
            Label { device_index: copy.device as u8, copy: index as u8, segment: segment as u8, ..self.label.clone() };
        let block = encode_label(&label);
        [block.clone(), block].concat()
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
        if device.is_zoned() {
            let end = offset + (data.len() / BLOCK_SIZE) as u64;
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
