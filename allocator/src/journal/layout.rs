//! Where the metadata lies: two copies, each of two segments of whole
//! zones, and block I/O within them.
//!
//! A mirror keeps one copy at the start of each of its two namespaces;
//! single and dup keep both copies on their one namespace, in different
//! zones (btrfs's DUP metadata). Every segment begins with
//! [`LABEL_BLOCKS`] label blocks, then a checkpoint record, then delta
//! records. Both copies hold the same records at the same offsets, so a
//! block bad on one copy is read from the other.

use super::HEADER_BYTES;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::BLOCK_SIZE;
use std::ops::Range;

/// Label blocks at the head of every segment (two, so that one bad block
/// does not take a segment's label).
pub(crate) const LABEL_BLOCKS: u64 = 2;

/// Metadata copies a volume keeps at most: one on each of its first three
/// devices (as btrfs's RAID1C3 metadata), so that a 3-copy mirror loses
/// none of it with any two devices gone.
pub(crate) const COPIES_MAX: usize = 3;

/// One copy of the metadata: which device holds it, and the first zone of
/// each of its two segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MetaCopy {
    pub device: usize,
    pub segments: [u32; 2],
}

/// Zones at the start of a member that holds no metadata copy, for its
/// labels (`Journal::write_member_label`): every member carries labels, so
/// that open knows it by them.
pub(crate) const LABEL_ZONES: u32 = 1;

/// Where format puts the metadata copies on a volume of `devices`
/// namespaces, for segments of `g` zones: each copy's two segments side by
/// side; two copies on a volume of one namespace (btrfs's DUP metadata),
/// else one on each of the first `min(devices, COPIES_MAX)`.
pub(crate) fn meta_copies(devices: usize, g: u32) -> Vec<MetaCopy> {
    if devices <= 1 {
        vec![MetaCopy { device: 0, segments: [0, g] }, MetaCopy { device: 0, segments: [2 * g, 3 * g] }]
    } else {
        (0..devices.min(COPIES_MAX)).map(|device| MetaCopy { device, segments: [0, g] }).collect()
    }
}

/// The copies as a superblock places them (after any move).
pub(crate) fn placed_copies(superblock: &super::Superblock) -> Vec<MetaCopy> {
    let mut copies = meta_copies(superblock.devices.len(), superblock.meta_zones_per_segment);
    for (copy, &segments) in copies.iter_mut().zip(&superblock.meta_segments) {
        copy.segments = segments;
    }
    copies
}

/// Zones at the start of `device` of a volume of `devices` namespaces that
/// format gave to metadata (a segment moved elsewhere leaves its old zones
/// unused): two segments per copy on it, or the label zones of a member
/// with none.
pub(crate) fn meta_zones_on(devices: usize, g: u32, device: usize) -> u32 {
    match meta_copies(devices, g).iter().filter(|c| c.device == device).count() as u32 {
        0 => LABEL_ZONES,
        copies => copies * 2 * g,
    }
}

/// Default software zone size for a conventional namespace of `bytes`: a
/// power of two for the data, and after it, on a volume with checksum
/// areas, the area that data needs.
pub(crate) fn default_software_zone_bytes(bytes: u64, area: bool) -> u64 {
    let data = (bytes / 512).next_power_of_two().clamp(1 << 20, 256 << 20);
    if area {
        with_area(data)
    } else {
        data
    }
}

/// A zone of `data` bytes, and the checksum area after it.
pub(crate) fn with_area(data: u64) -> u64 {
    let blocks = (data / BLOCK_SIZE as u64).min(u64::from(u32::MAX)) as u32;
    data + u64::from(crate::area::area_blocks(blocks)) * BLOCK_SIZE as u64
}

/// Bytes a checkpoint's records take (labels aside) for a table of
/// `slots` extent slots with `mapped_extents` extents' checksums in the
/// map, `mapped_blocks` of them, on volumes of `zones` zones over every
/// lane: the superblock and zone counts (with room for the members and
/// sessions), every page of the table whole, and each mapped extent's slot,
/// count and checksums (`encode_begin`, `encode_pages`). What format sizes
/// the segments by, and what a write is checked against
/// (`Volume::check_metadata_room`).
pub(crate) fn checkpoint_bytes(slots: u64, mapped_extents: u64, mapped_blocks: u64, zones: u64) -> u64 {
    let pages = slots.div_ceil(crate::table::PAGE_SLOTS as u64);
    HEADER_BYTES as u64
        + 4096
        + 8 * zones
        + pages * super::format::PAGE_BYTES as u64
        + 6 * mapped_extents
        + 4 * mapped_blocks
}

/// A checkpoint may take at most this fraction of a segment (7/8, labels
/// and a few blocks aside); the rest is the log's. The segments are sized
/// so that the volume's worst checkpoint fits at this share, as before
/// pools (every extent a single block), unless [`SEGMENT_SHARE`] binds.
///
/// A checkpoint up to [`SPREAD_SHARE`] is spread over commits and sealed
/// within the first half of its segment; a larger one is written whole
/// (see there).
pub(crate) const CHECKPOINT_SHARE: (u64, u64) = (7, 8);

/// The checkpoint bytes a segment of `blocks` takes ([`CHECKPOINT_SHARE`]
/// of it, labels aside).
pub(crate) fn checkpoint_room(segment_blocks: u64) -> u64 {
    let (part, whole) = CHECKPOINT_SHARE;
    segment_blocks.saturating_sub(LABEL_BLOCKS) * BLOCK_SIZE as u64 * part / whole
}

/// A checkpoint is spread over commits only while it takes at most this
/// fraction of a segment (3/8, labels aside), and the segment holds it
/// twice beside three of the largest recent commits' operations
/// (`Volume::checkpoint_spreads`); else it is written whole, sealed at
/// once, when the log moves to the other segment.
///
/// A spread checkpoint keeps the other segment (the last sealed one)
/// until its last page is written, by the first half of its own segment.
/// A journal write that fails meanwhile is superseded by a whole
/// checkpoint written past it in the same segment (`Journal::restart`),
/// so the segment must hold the spread, the failed record and a whole
/// checkpoint beside them. At 3/8 it does, with an eighth to spare for
/// the checkpoint's growth during the spread (its pages are written at
/// eight times the log's bytes, `Volume::pages_due`, whatever the cap on
/// pages per commit) and the commits' operations, while commits are
/// small; large ones (a tenth of a segment) write the spread at once, and
/// the restart then needs the checkpoint twice and their operations
/// thrice, which the second condition checks. A whole checkpoint needs no
/// such room: the segment it leaves holds the last sealed one until it is
/// durable, and a failed write is retried whole in the other segment
/// again.
///
/// Before this, every checkpoint spread: one past half a segment (a
/// volume near [`CHECKPOINT_SHARE`], extents far smaller than its data
/// unit) could leave no room for the restart after a failed write, and
/// then every commit failed with `NoSpace(Full::Metadata)`; and it sealed
/// past the half, so the next began at once, at every other commit.
pub(crate) const SPREAD_SHARE: (u64, u64) = (3, 8);

/// The checkpoint bytes a segment of `blocks` spreads at most
/// ([`SPREAD_SHARE`] of it, labels aside).
pub(crate) fn spread_room(segment_blocks: u64) -> u64 {
    let (part, whole) = SPREAD_SHARE;
    segment_blocks.saturating_sub(LABEL_BLOCKS) * BLOCK_SIZE as u64 * part / whole
}

/// A segment takes at most this fraction of its device's blocks (1/32),
/// or one zone when that is more, unless the volume's capacity at its
/// data unit needs more: two segments per metadata copy, so 1/16 (6.25%)
/// of each of a pool's metadata devices, 1/8 of a volume of one namespace
/// (its two copies on it), rounded up to whole zones. With a map of
/// checksums ([`crate::ChecksumStore::Map`]) the segment holds every data
/// block's too, beyond this. Below the share, the segment is what the
/// worst checkpoint needs (every extent a single block): about 2% of the
/// pool's data per segment, so the share binds from about four devices'
/// worth of data per copy (a single pool of four, a mirror of eight).
pub(crate) const SEGMENT_SHARE: u64 = 32;

/// Zones per metadata segment, alike on every metadata device: room for
/// the labels and, at [`CHECKPOINT_SHARE`], the largest checkpoint a volume
/// of `data_blocks` allows (every extent a single block, every checksum in
/// the map; the first device's capacity when not given), but no more than
/// [`SEGMENT_SHARE`] of the smallest metadata device (with `map_store`,
/// plus what the map's checksums of every data block take): a pool's
/// metadata does not grow with its number of devices. And never less than
/// the checkpoint of the volume filled with extents of its data unit
/// (`unit_blocks`), every checksum in the map: the capacity is always
/// held at the data unit. Every device's segments hold that many blocks,
/// whatever its zone size. Where the share binds, writes of extents
/// smaller on average than the data unit may end in
/// [`crate::Error::NoSpace`] naming the metadata before the data is full;
/// each write is checked first (`Volume::check_metadata_room`). `devices`
/// are the metadata devices, each with how many segments it holds (2 per
/// copy on it).
pub(crate) fn meta_zones_per_segment(
    devices: &[(&Device, u32)],
    data_blocks: Option<u64>,
    unit_blocks: u32,
    map_store: bool,
) -> Result<u32> {
    let own = |device: &Device| device.zones.iter().map(|z| u64::from(z.capacity_blocks)).sum::<u64>();
    let total_blocks = data_blocks.unwrap_or_else(|| devices.first().map_or(0, |&(d, _)| own(d)));
    let zones = devices.iter().map(|&(d, _)| d.zones.len() as u64).max().unwrap_or(0);
    let (part, whole) = CHECKPOINT_SHARE;
    let block = BLOCK_SIZE as u64;
    // A page more than the extents fill, for the one a write may open.
    let page = crate::table::PAGE_SLOTS as u64;
    let in_blocks = |bytes: u64| (bytes * whole).div_ceil(part * block);
    let worst = in_blocks(checkpoint_bytes(total_blocks + page, total_blocks, total_blocks, 2 * zones));
    let unit_extents = total_blocks / u64::from(unit_blocks.max(1));
    let floor = in_blocks(checkpoint_bytes(unit_extents + page, unit_extents, total_blocks, 2 * zones));
    let map_blocks = if map_store { in_blocks(4 * total_blocks) } else { 0 };
    let share = devices.iter().map(|&(d, _)| own(d) / SEGMENT_SHARE).min().unwrap_or(0);
    let needed = worst.min(share + map_blocks).max(floor) + LABEL_BLOCKS + 16;
    let mut g = 1;
    for &(device, segments_here) in devices {
        let mut sum = 0u64;
        let reached = device.zones.iter().position(|zone| {
            sum += u64::from(zone.capacity_blocks);
            sum >= needed
        });
        let here = match reached {
            Some(index) if (segments_here as usize) * (index + 1) < device.zones.len() => index as u32 + 1,
            _ => {
                return Err(Error::InvalidConfig(format!(
                    "namespace {}: {} zones cannot hold {segments_here} metadata segments of {needed} blocks and data",
                    device.ns.nsid(),
                    device.zones.len(),
                )))
            }
        };
        g = g.max(here);
    }
    for &(device, segments_here) in devices {
        if (segments_here * g) as usize >= device.zones.len() {
            return Err(Error::InvalidConfig(format!(
                "namespace {}: {} zones cannot hold {segments_here} metadata segments of {g} zones and data",
                device.ns.nsid(),
                device.zones.len(),
            )));
        }
    }
    Ok(g)
}

/// The zone and block within it of block `offset` of `segment` of `copy`.
pub(crate) fn segment_position(device: &Device, copy: MetaCopy, g: u32, segment: u32, offset: u64) -> (u32, u64) {
    let mut left = offset;
    let first = copy.segments[segment as usize];
    for zone in first..first + g {
        let capacity = u64::from(device.zones[zone as usize].capacity_blocks);
        if left < capacity || zone == first + g - 1 {
            return (zone, left);
        }
        left -= capacity;
    }
    unreachable!("segments have zones")
}

/// Blocks a segment of `copy` holds.
pub(crate) fn segment_capacity(device: &Device, copy: MetaCopy, g: u32, segment: u32) -> u64 {
    let first = copy.segments[segment as usize] as usize;
    device.zones[first..first + g as usize].iter().map(|z| u64::from(z.capacity_blocks)).sum()
}

/// The pieces of `bytes` bytes from block `offset` of a segment, split at
/// zone ends: each one's first LBA and its byte range. `None` when they
/// run past the segment.
fn pieces(
    device: &Device,
    copy: MetaCopy,
    g: u32,
    segment: u32,
    offset: u64,
    bytes: usize,
) -> Option<Vec<(u64, std::ops::Range<usize>)>> {
    let mut pieces = Vec::new();
    let mut done = 0usize;
    while done < bytes {
        let block = offset + (done / BLOCK_SIZE) as u64;
        let (zone, in_zone) = segment_position(device, copy, g, segment, block);
        let room = u64::from(device.zones[zone as usize].capacity_blocks).saturating_sub(in_zone) as usize;
        if room == 0 {
            return None;
        }
        let len = (room * BLOCK_SIZE).min(bytes - done);
        pieces.push((device.lba(zone, in_zone as u32), done..done + len));
        done += len;
    }
    Some(pieces)
}

/// Writes whole blocks at `offset` of a segment, split at zone ends.
pub(crate) fn write_segment(
    device: &mut Device,
    copy: MetaCopy,
    g: u32,
    segment: u32,
    offset: u64,
    data: &[u8],
) -> Result<()> {
    let pieces = pieces(device, copy, g, segment, offset, data.len()).expect("a metadata write within its segment");
    for (lba, range) in pieces {
        device.write_at(lba, &data[range])?;
    }
    Ok(())
}

/// Where a metadata write of `bytes` at `offset` of a segment goes when
/// it lies in one zone: its first LBA (else `None`: it is split).
pub(crate) fn single_piece(
    device: &Device,
    copy: MetaCopy,
    g: u32,
    segment: u32,
    offset: u64,
    bytes: usize,
) -> Option<u64> {
    match pieces(device, copy, g, segment, offset, bytes)?.as_slice() {
        [(lba, _)] => Some(*lba),
        _ => None,
    }
}

/// Reads whole blocks at `offset` of a segment into `buf`, split at zone
/// ends.
pub(crate) fn read_segment(
    device: &mut Device,
    copy: MetaCopy,
    g: u32,
    segment: u32,
    offset: u64,
    buf: &mut [u8],
) -> Result<()> {
    let Some(pieces) = pieces(device, copy, g, segment, offset, buf.len()) else {
        return Err(crate::Error::Corrupt(format!("a metadata read past segment {segment}")));
    };
    for (lba, range) in pieces {
        device.read_at(lba, &mut buf[range])?;
    }
    Ok(())
}

/// A segment as read at open: its bytes, which blocks could not be read
/// (media errors), which hold nothing for recovery, and which were not
/// read at all (`skipped`: a second copy's blocks that the first holds
/// whole; see `Volume::load`).
#[derive(Debug, Default)]
pub(crate) struct SegmentImage {
    pub data: Vec<u8>,
    pub unreadable: Vec<bool>,
    pub skipped: Range<u64>,
}

impl SegmentImage {
    /// An image of `blocks` blocks, none read yet. The zeroed buffer is
    /// not touched until read into, so blocks skipped cost no memory.
    fn new(blocks: u64) -> SegmentImage {
        let data = vec![0u8; blocks as usize * BLOCK_SIZE];
        // Read into fresh memory at open: at 2 TiB, 300 MiB of images.
        nvme_driver::dma::advise_huge_pages(&data);
        SegmentImage { data, unreadable: vec![false; blocks as usize], skipped: 0..0 }
    }

    /// Blocks in the image.
    pub fn blocks(&self) -> u64 {
        self.unreadable.len() as u64
    }

    /// Blocks read from the device (or tried).
    pub fn blocks_read(&self) -> u64 {
        self.blocks() - (self.skipped.end.min(self.blocks()) - self.skipped.start.min(self.blocks()))
    }

    /// Whether any of `[offset, offset + blocks)` was skipped: what the
    /// image says of it proves nothing about this copy.
    pub fn skips(&self, offset: u64, blocks: u64) -> bool {
        !self.skipped.is_empty() && offset < self.skipped.end && offset.saturating_add(blocks) > self.skipped.start
    }

    /// Blocks `[offset, offset + blocks)`, when all were read.
    pub fn range(&self, offset: u64, blocks: u64) -> Option<&[u8]> {
        let end = offset.checked_add(blocks)?;
        if end > self.blocks()
            || self.skips(offset, blocks)
            || self.unreadable[offset as usize..end as usize].iter().any(|&bad| bad)
        {
            return None;
        }
        Some(&self.data[offset as usize * BLOCK_SIZE..end as usize * BLOCK_SIZE])
    }
}

/// Zero blocks in a row past which a segment whose end is unknown is
/// taken to end: no journal record holds 256 KiB of zeros (a record's
/// header is never zero, and no payload has that much), and a finished
/// zone's unwritten blocks read as zeros on a drive that returns zeros for
/// unwritten blocks (one that does not, or that fails such reads, is read
/// to the end of the segment, as before).
pub(crate) const ZERO_RUN_BLOCKS: u64 = 64;

/// Reads the first `blocks` of a segment, in large reads; a read that
/// fails is retried block by block so that one bad block costs only
/// itself. With `stop_at_zeros` (a segment ending in a finished zone,
/// whose write pointer no longer says where the log ends), the image ends
/// before the first [`ZERO_RUN_BLOCKS`] zero blocks in a row. Stopping
/// early can only hide a record past such a run on this copy: recovery
/// sees it on the other copy unless both have the same run (a double
/// fault), and a later record that stands proves a hole (see `recovery`).
///
/// With `beside`, the image of the same segment on a first copy and where
/// that copy's chain of records there ends and its last record begins
/// (see `recovery::chain_end`), this is a second copy and is read only
/// where it may hold what the first lacks, or hold otherwise: its labels
/// and the block of its first record, then, when that block is the first
/// copy's, the blocks from the chain's last record on, up to a run of zero
/// blocks; or nothing more when the first copy's head holds no record (a
/// retired segment). The blocks between are `skipped`. When the heads
/// differ, or the last records do (a record with the same numbers but
/// other contents: two histories, see `Volume::load`), it is read whole.
///
/// Both copies take the same records at the same offsets, a segment's
/// chain beginning at its head: a second copy differs where a write to
/// the first failed or rotted, which ends the first's chain there, or
/// where the first's device was away, which shows as another head or a
/// longer chain. A record the first copy lacks in the skipped blocks
/// leaves a later one of its chain standing, which recovery takes for a
/// hole: open then reads every copy whole (see `Volume::load`).
pub(crate) fn read_segment_image(
    device: &mut Device,
    copy: MetaCopy,
    g: u32,
    segment: u32,
    blocks: u64,
    stop_at_zeros: bool,
    beside: Option<(&SegmentImage, Option<(u64, u64)>)>,
) -> SegmentImage {
    let mut image = SegmentImage::new(blocks);
    let Some((first, first_chain)) = beside else {
        read_into(device, copy, g, segment, &mut image, 0..blocks, stop_at_zeros);
        return image;
    };
    let head = (LABEL_BLOCKS + 1).min(blocks);
    read_into(device, copy, g, segment, &mut image, 0..head, false);
    let record = image.range(LABEL_BLOCKS, 1);
    let same_head = record.is_some() && record == first.range(LABEL_BLOCKS, 1);
    match first_chain {
        _ if !same_head => read_into(device, copy, g, segment, &mut image, head..blocks, stop_at_zeros),
        None => image.skipped = head..blocks,
        Some((tip, end)) => {
            let from = tip.clamp(head, blocks);
            image.skipped = head..from;
            // Past the first copy's chain only a continuation of it
            // matters, which no run of zero blocks interrupts.
            read_into(device, copy, g, segment, &mut image, from..blocks, true);
            let (tip, end) = (tip.clamp(LABEL_BLOCKS, blocks), end.clamp(LABEL_BLOCKS, blocks));
            let tips = |image: &SegmentImage| image.range(tip, end - tip).map(<[u8]>::to_vec);
            if tips(&image) != tips(first) {
                image.skipped = 0..0;
                read_into(device, copy, g, segment, &mut image, head..from, false);
            }
        }
    }
    image
}

/// Reads blocks `span` of the segment into `image`; see
/// [`read_segment_image`].
fn read_into(
    device: &mut Device,
    copy: MetaCopy,
    g: u32,
    segment: u32,
    image: &mut SegmentImage,
    span: Range<u64>,
    stop_at_zeros: bool,
) {
    let (mut offset, blocks) = (span.start, span.end.min(image.blocks()));
    let step = (device.max_transfer_bytes / BLOCK_SIZE) as u64;
    let mut zeros = 0u64;
    while offset < blocks {
        let (zone, in_zone) = segment_position(device, copy, g, segment, offset);
        let room = u64::from(device.zones[zone as usize].capacity_blocks).saturating_sub(in_zone);
        let n = step.min(room).min(blocks - offset).max(1);
        let lba = device.lba(zone, in_zone as u32);
        let range = offset as usize * BLOCK_SIZE..(offset + n) as usize * BLOCK_SIZE;
        if device.read_at(lba, &mut image.data[range]).is_err() {
            for block in offset..offset + n {
                let (zone, in_zone) = segment_position(device, copy, g, segment, block);
                let lba = device.lba(zone, in_zone as u32);
                let range = block as usize * BLOCK_SIZE..(block as usize + 1) * BLOCK_SIZE;
                if device.read_at(lba, &mut image.data[range.clone()]).is_err() {
                    image.data[range].fill(0);
                    image.unreadable[block as usize] = true;
                }
            }
        }
        if stop_at_zeros {
            // Zero blocks in a row up to here, counted over the new ones.
            for block in offset..offset + n {
                let bytes = &image.data[block as usize * BLOCK_SIZE..(block as usize + 1) * BLOCK_SIZE];
                zeros = if !image.unreadable[block as usize] && bytes.iter().all(|&b| b == 0) { zeros + 1 } else { 0 };
                if zeros == ZERO_RUN_BLOCKS {
                    let end = (block + 1 - ZERO_RUN_BLOCKS) as usize;
                    image.data.truncate(end * BLOCK_SIZE);
                    image.unreadable.truncate(end);
                    return;
                }
            }
        }
        offset += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DeviceOptions;
    use nvme_driver::sim::{SimConfig, Simulator};
    use nvme_driver::{Controller, ControllerOptions};
    use std::sync::Arc;
    use std::time::Duration;

    /// A device on a fresh simulator with `config`, in zones of
    /// `zone_blocks` 4 KiB blocks (software zones on a conventional
    /// namespace).
    fn device(config: SimConfig, zone_blocks: u32) -> (Arc<Simulator>, Device) {
        let sim = Simulator::new(config);
        let bound = Duration::from_millis(200);
        let options = ControllerOptions { admin_timeout: bound, shutdown_timeout: bound, ..Default::default() };
        let controller = Controller::init(sim.clone(), options).expect("bring-up");
        let mut device =
            Device::open(&controller, 1, DeviceOptions { timeout: bound, ..Default::default() }).expect("the device");
        device.load_zones(zone_blocks).expect("zones");
        (sim, device)
    }

    #[test]
    fn a_read_past_its_segment_is_refused_by_name_before_any_io() {
        // Zones of 16 blocks; copy 0's segment 0 is zones 0 and 1.
        let (sim, mut device) = device(SimConfig::zoned(64 * 16, 4096, 16, 16), 16);
        let copy = MetaCopy { device: 0, segments: [0, 2] };
        let reads = || sim.stats().io_commands[usize::from(nvme_driver::spec::command::opcode::nvm::READ)];
        let mut buf = vec![0u8; 2 * BLOCK_SIZE];
        let before = reads();
        match read_segment(&mut device, copy, 2, 0, 31, &mut buf) {
            Err(Error::Corrupt(why)) => assert!(why.contains("past segment 0"), "{why}"),
            other => panic!("a read over the segment's end: {other:?}"),
        }
        assert_eq!(reads(), before, "nothing was read");
        // Its last block alone, and a read across its two zones.
        read_segment(&mut device, copy, 2, 0, 31, &mut buf[..BLOCK_SIZE]).unwrap();
        read_segment(&mut device, copy, 2, 0, 15, &mut buf).unwrap();
        assert_eq!(reads(), before + 3, "the last read in one piece per zone");
    }

    #[test]
    fn an_image_ends_before_a_run_of_zero_blocks_and_nothing_shorter_or_non_zero_ends_it() {
        // A conventional namespace in zones of ZERO_RUN_BLOCKS, four per
        // segment; segment 0 is written from its start with
        // `byte(block)` for `blocks` blocks, then imaged.
        let zone = ZERO_RUN_BLOCKS;
        let segment_blocks = 4 * zone;
        let image = |blocks: u64, byte: &dyn Fn(u64) -> u8| {
            let (_sim, mut device) = device(SimConfig::nvm(16 * zone * 8, 512), zone as u32);
            let copy = MetaCopy { device: 0, segments: [0, 4] };
            let data: Vec<u8> = (0..blocks).flat_map(|b| vec![byte(b); BLOCK_SIZE]).collect();
            write_segment(&mut device, copy, 4, 0, 0, &data).unwrap();
            read_segment_image(&mut device, copy, 4, 0, segment_blocks, true, None)
        };
        // Five blocks of records, then what the device returns for the
        // rest: zeros (a drive whose unwritten blocks read as zeros).
        assert_eq!(image(5, &|_| 0xA5).blocks(), 5, "the image ends at the run of zeros");
        // A run one block short of the rule, then more records: read on.
        let short = ZERO_RUN_BLOCKS - 1;
        let shorter = image(5 + short + 3, &|b| if (5..5 + short).contains(&b) { 0 } else { 0xA5 });
        assert_eq!(shorter.blocks(), 5 + short + 3, "a shorter run does not end it");
        assert!(shorter.range(5 + short, 3).unwrap().iter().all(|&b| b == 0xA5));
        // A drive whose unwritten blocks read as ones (DLFEAT 010b), here
        // written so: no run of zeros, so the whole segment is read.
        let ones = image(segment_blocks, &|b| if b < 5 { 0xA5 } else { 0xFF });
        assert_eq!((ones.blocks(), ones.blocks_read()), (segment_blocks, segment_blocks), "read to the end");
    }
}
