//! The plan: a lane's extents in physical order, merged into reads.
//!
//! Adjacent extents (same zone, one ending where the next starts) share a
//! read up to the request size; each read carries the checksums of the
//! extents it covers, fetched with the extents in one walk of the
//! allocator's index per refill, never one lookup per block. (The btrfs
//! scrub regression in our background went to a checksum search per
//! 64 KiB and lost its merged 352 KB requests.)

use std::collections::VecDeque;
use zoned_allocator::table::LaneOrder;
use zoned_allocator::tags::Expected;
use zoned_allocator::{ExtentId, Location, Volume, BLOCK_SIZE};

/// One extent's share of a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The extent.
    pub id: ExtentId,
    /// Where the piece starts within the read, in blocks.
    pub offset_blocks: u32,
    /// Where the piece starts within its extent (an extent longer than
    /// one request is split), in blocks.
    pub extent_block: u32,
    /// Length of the piece, in 4 KiB blocks.
    pub blocks: u32,
    /// What the piece's blocks must hold: their checksums, or tags read
    /// with them.
    pub expected: Expected,
}

/// One read command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// The copy (lane) read.
    pub lane: usize,
    /// Where the read starts: a zone and a 4 KiB block offset in it.
    pub start: Location,
    /// The first LBA on the lane's namespace (the command's SLBA).
    pub lba: u64,
    /// Length, in 4 KiB blocks; never crosses a zone.
    pub blocks: u32,
    /// The extents the read covers, in order, with their checksums.
    pub pieces: Vec<Piece>,
}

impl Read {
    /// The read cut after `blocks` blocks (`0 < blocks < self.blocks`): the
    /// head, and the tail starting at LBA `tail_lba`. A piece across the
    /// cut is split in two.
    fn split_at(self, blocks: u32, tail_lba: u64) -> (Read, Read) {
        let Read { lane, start, lba, blocks: all, pieces } = self;
        let mut head = Read { lane, start, lba, blocks, pieces: Vec::new() };
        let tail_start = Location { zone: start.zone, offset: start.offset + blocks };
        let mut tail = Read { lane, start: tail_start, lba: tail_lba, blocks: all - blocks, pieces: Vec::new() };
        for piece in pieces {
            let Piece { id, offset_blocks, extent_block, blocks: length, expected } = piece;
            if offset_blocks + length <= blocks {
                head.pieces.push(Piece { id, offset_blocks, extent_block, blocks: length, expected });
            } else if offset_blocks >= blocks {
                let offset_blocks = offset_blocks - blocks;
                tail.pieces.push(Piece { id, offset_blocks, extent_block, blocks: length, expected });
            } else {
                let cut = blocks - offset_blocks;
                let (first, rest) = expected.split_at(cut as usize);
                head.pieces.push(Piece { id, offset_blocks, extent_block, blocks: cut, expected: first });
                let extent_block = extent_block + cut;
                tail.pieces.push(Piece { id, offset_blocks: 0, extent_block, blocks: length - cut, expected: rest });
            }
        }
        (head, tail)
    }

    /// Length, in bytes.
    pub fn bytes(&self) -> usize {
        self.blocks as usize * BLOCK_SIZE
    }

    /// Where the next read would start.
    pub fn end(&self) -> Location {
        Location { zone: self.start.zone, offset: self.start.offset + self.blocks }
    }
}

/// Plans one lane from a position onward.
#[derive(Debug)]
pub struct Planner {
    lane: usize,
    /// The extent to start from (its location), and how many of its
    /// blocks are already planned.
    next: Location,
    skip: u32,
    max_blocks: u32,
    done: bool,
    /// Plan only extents that lack their copy in this lane (a resilver's
    /// work) and that the volume reads from this planner's lane
    /// ([`Volume::copy_source`]), skipping the rest.
    lacking_in: Option<usize>,
    /// Never merge two extents into one read (a resilver that writes each
    /// read's buffer as one extent's copy).
    one_extent_per_read: bool,
    /// Walks of the lane's order so far (one per refill).
    pub lookups: u64,
    /// The lane's copies in physical order, made by the first refill (one
    /// pass over the extent table) and walked by every refill after.
    order: Option<LaneOrder>,
}

impl Planner {
    /// Plans `lane` from the extent at or after `from`, skipping the first
    /// `skip` blocks of the extent that starts exactly at `from`.
    pub fn new(lane: usize, from: Location, skip: u32, max_request_bytes: usize) -> Self {
        let max_blocks = (max_request_bytes / BLOCK_SIZE).clamp(1, u32::MAX as usize) as u32;
        Planner {
            lane,
            next: from,
            skip,
            max_blocks,
            done: false,
            lacking_in: None,
            one_extent_per_read: false,
            lookups: 0,
            order: None,
        }
    }

    /// Sets the largest read (for reads planned from now on).
    pub fn set_max_request(&mut self, max_request_bytes: usize) {
        self.max_blocks = (max_request_bytes / BLOCK_SIZE).clamp(1, u32::MAX as usize) as u32;
    }

    /// Plans reads of one extent each (or of part of one), never merged.
    pub fn one_extent_per_read(mut self, one: bool) -> Self {
        self.one_extent_per_read = one;
        self
    }

    /// Plans only the extents whose copy in lane `target` is missing and
    /// is to be read from this planner's lane ([`Volume::copy_source`]):
    /// one planner per source lane covers each such extent once.
    pub fn lacking_in(mut self, target: usize) -> Self {
        self.lacking_in = Some(target);
        self
    }

    /// Every extent of the lane has been planned.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Where planning stands: the next extent and blocks of it already
    /// planned; past every zone once the lane is planned.
    pub fn position(&self) -> (Location, u32) {
        if self.done {
            (Location { zone: u32::MAX, offset: 0 }, 0)
        } else {
            (self.next, self.skip)
        }
    }

    /// Appends reads to `queue` until it holds `target` reads or the lane
    /// ends: one index walk.
    pub fn refill(&mut self, volume: &Volume, queue: &mut VecDeque<Read>, target: usize) {
        if self.done || queue.len() >= target {
            return;
        }
        self.lookups += 1;
        let mut current: Option<Read> = None;
        let mut walked_to = None;
        let order = self.order.get_or_insert_with(|| volume.lane_order(self.lane));
        'walk: for extent in volume.extents_in_order(order, self.next) {
            if self.lacking_in.is_some_and(|target| volume.copy_source(extent.id, target) != Some(self.lane)) {
                continue;
            }
            // A position may fall inside an extent: skip its planned head.
            let skip = if extent.location == self.next { self.skip } else { 0 };
            let mut block = skip;
            while block < extent.blocks {
                let blocks = (extent.blocks - block).min(self.max_blocks);
                let location = Location { zone: extent.location.zone, offset: extent.location.offset + block };
                let merges = !self.one_extent_per_read
                    && current
                        .as_ref()
                        .is_some_and(|read| read.end() == location && read.blocks + blocks <= self.max_blocks);
                if !merges {
                    if let Some(read) = current.take() {
                        push_read(volume, queue, read);
                        if queue.len() >= target {
                            // Resume here next time.
                            walked_to = Some((extent.location, block));
                            break 'walk;
                        }
                    }
                    current = Some(Read {
                        lane: self.lane,
                        start: location,
                        lba: volume.lba(self.lane, location),
                        blocks: 0,
                        pieces: Vec::new(),
                    });
                }
                let read = current.as_mut().expect("a read is open");
                read.pieces.push(Piece {
                    id: extent.id,
                    offset_blocks: read.blocks,
                    extent_block: block,
                    blocks,
                    expected: extent.expected(block, blocks),
                });
                read.blocks += blocks;
                block += blocks;
            }
        }
        match walked_to {
            Some((location, skip)) => {
                self.next = location;
                self.skip = skip;
            }
            None => {
                if let Some(read) = current.take() {
                    push_read(volume, queue, read);
                }
                self.done = true;
            }
        }
    }
}

/// Queues `read`, cut into reads whose tags one command carries when it
/// checks some of its blocks against tags and the controller cannot carry
/// them all at once ([`zoned_allocator::tags::TagLayout::carries`]; QEMU
/// 7.2 moves a metadata transfer of 512 bytes or more only when it is a
/// multiple of 512). Cuts fall between extents where they can (a whole
/// tagged extent always fits: the volume tags only extents whose tags fit),
/// so that a resilver still reads each extent whole.
fn push_read(volume: &Volume, queue: &mut VecDeque<Read>, read: Read) {
    let Some(layout) = volume.block_tags() else {
        queue.push_back(read);
        return;
    };
    let fits = |read: &Read| layout.carries(read.blocks as usize) || !read.pieces.iter().any(|p| p.expected.is_tags());
    let mut read = read;
    while !fits(&read) {
        // The longest head of whole pieces that fits, else a cut inside
        // the first piece.
        let mut cut = None;
        let mut tagged = false;
        for piece in &read.pieces {
            tagged |= piece.expected.is_tags();
            let end = piece.offset_blocks + piece.blocks;
            if end < read.blocks && (!tagged || layout.carries(end as usize)) {
                cut = Some(end);
            }
        }
        let cut = cut.unwrap_or_else(|| layout.carried_within(read.blocks as usize).max(1) as u32);
        let tail_start = Location { zone: read.start.zone, offset: read.start.offset + cut };
        let tail_lba = volume.lba(read.lane, tail_start);
        let (head, tail) = read.split_at(cut, tail_lba);
        queue.push_back(head);
        read = tail;
    }
    queue.push_back(read);
}
