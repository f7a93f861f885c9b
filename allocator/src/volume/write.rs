//! The write path: placement within the zone limits, Zone Append or
//! ordered writes, completions, and the waits that bound them.

use super::member::Failed;
use super::{Mode, PendingWrite, Volume, WriteDone, WriteMode};
use crate::checksum::block_crcs;
use crate::device;
use crate::error::{Error, Result};
use crate::table::{Entry, COPIES_MAX};
use crate::tags::TagLayout;
use crate::zones::{Slot, ZoneUse};
use crate::Token;
use crate::{ExtentId, Location, BLOCK_SIZE};

/// Checksum lists kept for reuse at most: more than the writes a volume
/// keeps in flight, so a steady stream of writes allocates none (a tagged
/// write's list comes back when it ends, a mapped extent's when its zone's
/// checksum area makes it durable, or it is freed).
const CRC_POOL_MAX: usize = 1024;

/// A list of checksums done with, back to `pool` (see [`CRC_POOL_MAX`]).
pub(super) fn recycle_crcs(pool: &mut Vec<Vec<u32>>, list: Vec<u32>) {
    if pool.len() < CRC_POOL_MAX {
        pool.push(list);
    }
}
use nvme_driver::dma::{DmaMemory, FillBuffer};
use nvme_driver::{IoBuffer, IoCompletion};
use std::time::Instant;

impl Volume {
    pub(super) fn mode(&self, device: usize) -> Mode {
        let d = self.dev(device);
        if !d.is_zoned() {
            return Mode::Conventional;
        }
        match self.options.write_mode {
            WriteMode::Ordered => Mode::Ordered,
            WriteMode::Append | WriteMode::Auto if d.append_max_bytes >= BLOCK_SIZE => Mode::Append,
            _ => Mode::Ordered,
        }
    }

    /// Queues a write of `data` (a whole number of 4 KiB blocks, at most
    /// [`Volume::max_extent_bytes`]) to stream `stream`, owned by `owner`
    /// (any number the caller chooses: a file, an object). Returns the new
    /// extent's ID; the outcome arrives through [`Volume::poll`] /
    /// [`Volume::next_done`]. Every copy is written; the extent exists
    /// once all succeed.
    pub fn submit_write(&mut self, stream: u8, data: &[u8], owner: u64) -> Result<ExtentId> {
        self.submit_write_inner(stream, Source::Bytes(data), owner, None)
    }

    /// An empty list for a write's checksums, from the volume's pool of
    /// lists: no allocation once the pool is warm, where a new `Vec` per
    /// write costs an allocation and a free (for
    /// [`Volume::submit_write_with_checksums`] and
    /// [`Volume::submit_filled_with_checksums`], which take it back).
    pub fn checksum_list(&mut self) -> Vec<u32> {
        let mut list = self.crc_pool.pop().unwrap_or_default();
        list.clear();
        list
    }

    /// [`Volume::submit_write`] with the blocks' checksums computed by the
    /// caller ([`crate::checksum::block_crcs`]), say on worker threads so
    /// that checksumming overlaps I/O. Wrong checksums are the caller's
    /// bug: reads of the extent will report them as corruption.
    pub fn submit_write_with_checksums(
        &mut self,
        stream: u8,
        data: &[u8],
        owner: u64,
        crcs: Vec<u32>,
    ) -> Result<ExtentId> {
        // `submit_write_inner` checks the checksums' count against the length.
        self.submit_write_inner(stream, Source::Bytes(data), owner, Some(crcs))
    }

    pub(super) fn submit_write_inner(
        &mut self,
        stream: u8,
        source: Source<'_>,
        owner: u64,
        crcs: Option<Vec<u32>>,
    ) -> Result<ExtentId> {
        self.check_resets()?;
        let len = source.len();
        if let Source::Filled(buffer, len) = &source {
            if *len > buffer.len() {
                return Err(Error::InvalidArgument(format!("{len} bytes of a {}-byte buffer", buffer.len())));
            }
        }
        if owner == crate::OWNER_LOST {
            return Err(Error::InvalidArgument(format!("owner {owner} is reserved (a lost owner)")));
        }
        self.check_write_shape(stream, len)?;
        self.check_metadata_room((len / BLOCK_SIZE) as u32)?;
        if crcs.as_ref().is_some_and(|crcs| crcs.len() * BLOCK_SIZE != len) {
            return Err(Error::InvalidArgument(format!("{} checksums for {len} bytes", crcs.map_or(0, |c| c.len()))));
        }
        let blocks = (len / BLOCK_SIZE) as u32;
        let slot = Slot::Stream(stream);
        // Room in every lane it goes to first, so a write never lands in
        // some only.
        let mut lanes = [0; COPIES_MAX];
        let copies = self.choose_lanes(blocks, slot, &mut lanes)?;
        let lanes = &lanes[..copies];
        let crcs = match crcs {
            Some(crcs) => crcs,
            None => {
                let started = Instant::now();
                // A list a tagged write gave back, or a new one.
                let mut crcs = self.crc_pool.pop().unwrap_or_default();
                crcs.clear();
                block_crcs(source.bytes(), &mut crcs);
                self.stats.checksum_ns += started.elapsed().as_nanos() as u64;
                crcs
            }
        };
        // The extent's slot, held until the write ends.
        let id = self.table.reserve();
        // Tags where one command carries them whole; else the map.
        let tagged = !self.area && self.tags.is_some_and(|layout| layout.carries(blocks as usize));
        let pending = PendingWrite { tagged, ..PendingWrite::new(None, id, owner, stream, blocks, crcs, lanes) };
        let index = self.pending_slot(pending);
        // A filled buffer goes, as it is, to the last lane whose device can
        // reach it; every other lane gets a copy of it, made first.
        let lender =
            source.domain().and_then(|domain| lanes.iter().rev().find(|&&l| self.dma_domain(l) == Some(domain)));
        let lender = lender.copied();
        let order = lanes.iter().copied().enumerate().filter(|&(_, l)| Some(l) != lender);
        let order = order.chain(lender.map(|l| (lanes.iter().position(|&x| x == l).expect("a chosen lane"), l)));
        let mut source = Some(source);
        for (copy, lane) in order {
            let device = self.lanes[lane].device;
            let submitted = match self.devices[device] {
                // Written while the device is away: the copy is missing,
                // for a resilver to write.
                None => Err(Error::NoDevices),
                Some(_) if Some(lane) == lender => {
                    let Some(Source::Filled(buffer, len)) = source.take() else { unreachable!("a lender lends") };
                    let io = IoBuffer::range(buffer.into_dma(), 0, len);
                    self.submit_lane_write(index, lane, slot, blocks, Payload::Buffer(io))
                }
                Some(_) => {
                    let bytes = source.as_ref().expect("the source outlives the copies").bytes();
                    self.submit_lane_write(index, lane, slot, blocks, Payload::Bytes(bytes))
                }
            };
            let error = match submitted {
                Ok(()) => continue,
                Err(Error::NoDevices) => None,
                Err(error) if is_gone(&error) && self.give_up(device, format!("a write failed: {error}")) => None,
                Err(error) => Some(error),
            };
            let pending = self.writes[index].as_mut().expect("pending write");
            match error {
                None => pending.locations[copy] = Some(Location::MISSING),
                Some(error) => {
                    pending.reported = true;
                    if pending.remaining == 0 {
                        self.writes[index] = None;
                        self.free_slots.push(index);
                        self.table.release(id);
                    }
                    return Err(error);
                }
            }
        }
        if self.writes[index].as_ref().is_some_and(|p| p.remaining == 0) {
            // Every lane it was to go to was given up during submission.
            self.finish_write(index);
        }
        self.stats.writes += 1;
        self.stats.write_bytes += len as u64;
        Ok(id)
    }

    /// Takes a free slot for a pending write.
    pub(super) fn pending_slot(&mut self, pending: PendingWrite) -> usize {
        match self.free_slots.pop() {
            Some(index) => {
                self.writes[index] = Some(pending);
                index
            }
            None => {
                self.writes.push(Some(pending));
                self.writes.len() - 1
            }
        }
    }

    pub(super) fn submit_lane_write(
        &mut self,
        index: usize,
        lane: usize,
        slot: Slot,
        blocks: u32,
        data: Payload<'_>,
    ) -> Result<()> {
        assert_eq!(data.len(), blocks as usize * BLOCK_SIZE, "a write of {blocks} blocks");
        let (zone, offset) = self.place(lane, slot, blocks)?;
        let submitted = self.submit_placed(index, lane, slot, zone, offset, blocks, data);
        self.release_held_zone();
        submitted
    }

    /// [`Volume::submit_lane_write`] once placed at `offset` in `zone`.
    #[allow(clippy::too_many_arguments)]
    fn submit_placed(
        &mut self,
        index: usize,
        lane: usize,
        slot: Slot,
        zone: u32,
        offset: u32,
        blocks: u32,
        data: Payload<'_>,
    ) -> Result<()> {
        let device = self.lanes[lane].device;
        let mode = self.mode(device);
        // Paired with the check at completion (`appended_offset`): the
        // extent's room is reserved in its zone before the command goes.
        let entry = self.lanes[lane].table.zone(zone);
        assert!(offset + blocks <= entry.allocated && entry.allocated <= entry.capacity, "placed outside its zone");
        if mode == Mode::Ordered {
            self.wait_zone_idle(lane, zone)?;
        }
        let io = match data {
            Payload::Bytes(data) => {
                let buffer = self.take_buffer(device)?;
                buffer.copy_in(0, data);
                self.stats.copied_in_bytes += data.len() as u64;
                IoBuffer::range(buffer, 0, data.len())
            }
            Payload::Buffer(io) => io,
        };
        let tagged = self.writes[index].as_ref().expect("pending write").tagged;
        let tags = match self.tags.filter(|_| tagged) {
            Some(layout) => Some(self.tags_for(index, device, layout)?),
            None => None,
        };
        let token = Token::Write { slot: index, lane }.encode();
        let d = self.dev(device);
        let (zslba, lba) = (d.zones[zone as usize].start_lba, d.lba(zone, offset));
        let request = match (mode, tags) {
            (Mode::Append, None) => d.ns.zone_append(zslba, io, false, token)?,
            (Mode::Append, Some(tags)) => d.ns.zone_append_with_metadata(zslba, io, tags, false, token)?,
            (Mode::Ordered | Mode::Conventional, None) => d.ns.write(lba, io, false, token)?,
            (Mode::Ordered | Mode::Conventional, Some(tags)) => {
                d.ns.write_with_metadata(lba, io, tags, false, token)?
            }
        };
        self.lanes[lane].table.write_submitted(zone);
        let copy = {
            let pending = self.writes[index].as_mut().expect("pending write");
            let copy = pending.copy_in(lane).expect("a write to one of its lanes");
            pending.zones[copy] = zone;
            if mode != Mode::Append {
                pending.locations[copy] = Some(Location { zone, offset });
            }
            pending.remaining += 1;
            pending.in_flight[copy] = true;
            copy
        };
        self.write_started_on(device);
        self.chooser.submitted(lane, blocks);
        if let Err(error) = self.dev_mut(device).submit(request) {
            self.lanes[lane].table.write_completed(zone);
            self.write_ended_on(device);
            self.chooser.completed(lane, blocks);
            let pending = self.writes[index].as_mut().expect("pending write");
            pending.remaining -= 1;
            pending.in_flight[copy] = false;
            pending.locations[copy] = None;
            // The room is reserved but nothing was written there: an
            // ordered write after it would not start at the write pointer.
            if mode == Mode::Ordered {
                self.abandon_zone(lane, slot, zone);
            }
            return Err(error);
        }
        Ok(())
    }

    pub(super) fn take_buffer(&mut self, device: usize) -> Result<nvme_driver::dma::DmaBuffer> {
        let deadline = Instant::now() + self.options.timeout;
        loop {
            if let Some(buffer) = self.dev(device).pool.get() {
                return Ok(buffer);
            }
            self.poll();
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "a free DMA buffer" });
            }
        }
    }

    /// A free metadata buffer for a tagged write to `device`, as
    /// [`Volume::take_buffer`].
    fn take_tag_buffer(&mut self, device: usize) -> Result<nvme_driver::dma::DmaBuffer> {
        let deadline = Instant::now() + self.options.timeout;
        loop {
            match self.dev(device).tag_pool() {
                None => return Err(Error::InvalidArgument("the device carries no block tags".into())),
                Some(pool) => {
                    if let Some(buffer) = pool.get() {
                        return Ok(buffer);
                    }
                }
            }
            self.poll();
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "a free metadata buffer" });
            }
        }
    }

    /// The tags of pending write `index` (all its blocks), in a metadata
    /// buffer of `device`, on a volume with block tags.
    fn tags_for(&mut self, index: usize, device: usize, layout: TagLayout) -> Result<IoBuffer> {
        let buffer = self.take_tag_buffer(device)?;
        let pending = self.writes[index].as_ref().expect("pending write");
        // Built in a scratch buffer the volume keeps, then copied in: no
        // allocation per write.
        let tags = &mut self.tag_scratch;
        tags.resize(layout.bytes(pending.crcs.len()), 0);
        crate::tags::fill(layout, self.volume_id, pending.id, 0, &pending.crcs, tags);
        buffer.copy_in(0, tags);
        Ok(IoBuffer::range(buffer, 0, tags.len()))
    }

    pub(super) fn wait_zone_idle(&mut self, lane: usize, zone: u32) -> Result<()> {
        let deadline = Instant::now() + self.options.timeout;
        while self.lanes[lane].table.zone(zone).inflight > 0 {
            self.poll();
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "a zone's write in flight" });
            }
        }
        Ok(())
    }

    pub(super) fn poll_devices(&mut self) {
        debug_assert_eq!(self.busy, busy_mask(&self.device_writes), "the devices with writes in flight");
        let mut completions = std::mem::take(&mut self.scratch);
        // Only the devices with writes in flight: an engine's reads on the
        // others are reaped by the engine (`LaneReads::poll`), and what a
        // blocking command kept aside on a device is its writes'.
        let mut busy = self.busy;
        while busy != 0 {
            let index = busy.trailing_zeros() as usize;
            busy &= busy - 1;
            let Some(device) = self.devices[index].as_mut().filter(|d| !d.idle()) else { continue };
            completions.extend(device.held.drain(..));
            device.poll(&mut completions);
            // An engine's reads (scrub, resilver) are its own: they go back
            // to the device for `LaneReads::poll` to reap.
            let mut at = 0;
            while at < completions.len() {
                if matches!(Token::decode(completions[at].token), Token::Engine(_)) {
                    device.stash.push_back(completions.swap_remove(at));
                } else {
                    at += 1;
                }
            }
            for completion in completions.drain(..) {
                self.complete(completion);
            }
        }
        self.scratch = completions;
    }

    /// A data write was submitted to device `device`.
    pub(super) fn write_started_on(&mut self, device: usize) {
        self.device_writes[device] += 1;
        self.busy |= 1 << device;
    }

    /// A data write on device `device` ended (completed, or never
    /// submitted, or given up with its device).
    pub(super) fn write_ended_on(&mut self, device: usize) {
        write_ended(&mut self.device_writes, &mut self.busy, device);
    }

    /// Reaps completions on every namespace and finishes the writes they
    /// complete. Returns how many writes finished (see
    /// [`Volume::next_done`]).
    pub fn poll(&mut self) -> usize {
        let before = self.done.len();
        self.poll_devices();
        if !self.retiring.is_empty() {
            if let Err(error) = self.process_retiring() {
                log::warn!("finishing a retired zone: {error}");
            }
        }
        self.done.len() - before
    }

    /// The next finished write, if any.
    pub fn next_done(&mut self) -> Option<WriteDone> {
        self.done.pop_front()
    }

    /// Writes in flight.
    pub fn writes_in_flight(&self) -> usize {
        self.writes.len() - self.free_slots.len()
    }

    pub(super) fn complete(&mut self, completion: IoCompletion) {
        let (index, lane) = match Token::decode(completion.token) {
            Token::Write { slot, lane } => (slot, lane),
            // A blocking command that already timed out: nothing waits.
            // (Engine reads never reach here: see `poll_devices`.)
            Token::Sync(_) | Token::Engine(_) => return,
        };
        if self.devices[self.lanes[lane].device].is_none() {
            // A device given up while this batch of its completions was
            // reaped: its writes already ended (see `give_up`).
            return;
        }
        let pending = self.writes.get_mut(index).and_then(Option::as_mut);
        let Some((pending, copy)) = pending.and_then(|p| p.copy_in(lane).filter(|&c| p.in_flight[c]).map(|c| (p, c)))
        else {
            log::warn!("completion for unknown write token {:#x}", completion.token);
            return;
        };
        pending.in_flight[copy] = false;
        let zone = pending.zones[copy];
        let blocks = pending.blocks;
        let device = self.lanes[lane].device;
        self.lanes[lane].table.write_completed(zone);
        write_ended(&mut self.device_writes, &mut self.busy, device);
        self.chooser.completed(lane, blocks);
        let mut abandon = None;
        let mut worn = false;
        let mut failed = None;
        match device::status(&completion) {
            Ok(()) => {
                self.lanes[lane].written[zone as usize] += blocks;
                if pending.locations[copy].is_none() {
                    // Zone Append: the device chose the LBA. It must lie
                    // within the room reserved in this zone at submission
                    // (`place`), on a 4 KiB block; anything else is a
                    // device fault, never a location to commit.
                    let lba = completion.result_u64();
                    let d = self.devices[device].as_ref().expect("completed on a device in use");
                    let start = d.zones[zone as usize].start_lba;
                    let reserved = self.lanes[lane].table.zone(zone).allocated;
                    let before = self.lanes[lane].written[zone as usize] - blocks;
                    match appended_offset(lba, start, d.lbas_per_block, blocks, reserved) {
                        Some(offset) if self.lanes[lane].claim_appended(zone, offset, blocks, before) => {
                            pending.locations[copy] = Some(Location { zone, offset })
                        }
                        Some(offset) => {
                            pending.error.get_or_insert(Error::BadDeviceResult {
                                what: format!(
                                    "Zone Append of {blocks} blocks to zone {zone} returned offset {offset}, over \
                                     blocks another append was placed in"
                                ),
                            });
                        }
                        None => {
                            pending.error.get_or_insert(Error::BadDeviceResult {
                                what: format!(
                                    "Zone Append of {blocks} blocks to zone {zone} (LBA {start}, {reserved} blocks \
                                     reserved) returned LBA {lba}"
                                ),
                            });
                        }
                    }
                }
            }
            Err(error) => {
                worn = device::zone_worn_out(&error);
                failed = Some(error);
                pending.error.get_or_insert(Error::Command { what: "data write", error });
                abandon = Some(Slot::Stream(pending.stream));
            }
        }
        pending.remaining -= 1;
        if let Some(error) = failed {
            if self.note_failure(device, Failed::Write, &error) {
                // Given up: this copy is missing, and the write stands on
                // the others.
                let pending = self.writes[index].as_mut().expect("pending write");
                pending.locations[copy] = Some(Location::MISSING);
                if matches!(pending.error, Some(Error::Command { what: "data write", .. })) {
                    pending.error = None;
                }
                if pending.remaining == 0 {
                    self.finish_write(index);
                }
                return;
            }
        }
        if let Some(slot) = abandon.filter(|_| self.mode(device) == Mode::Ordered) {
            self.abandon_zone(lane, slot, zone);
        }
        if worn && self.lanes[lane].table.zone(zone).usage != ZoneUse::Worn {
            log::warn!("lane {lane} zone {zone} is worn out: taken out of use");
            self.lanes[lane].table.wear_out(zone);
            self.retiring.retain(|&r| r != (lane, zone));
            self.stats.zones_worn += 1;
        }
        let pending = self.writes[index].as_mut().expect("pending write");
        if pending.remaining > 0 {
            return;
        }
        self.finish_write(index);
    }

    /// Ends a pending write whose commands all finished: the new extent
    /// (or the resilver copy) is recorded, and the outcome queued.
    pub(super) fn finish_write(&mut self, index: usize) {
        let mut pending = self.writes[index].take().expect("pending write");
        assert_eq!(pending.remaining, 0, "finishing write {} with commands in flight", pending.id);
        self.free_slots.push(index);
        // A copy that completed on a device given up since is not durable
        // there: missing, as `give_up` marks the copies it journals.
        let copies = usize::from(pending.copies);
        for copy in 0..copies {
            let lane = usize::from(pending.lanes[copy]);
            if self.devices[self.lanes[lane].device].is_none() && pending.locations[copy].is_some() {
                pending.locations[copy] = Some(Location::MISSING);
            }
        }
        if let Some(lane) = pending.copy_of {
            self.finish_copy(pending, lane);
            return;
        }
        let result = match pending.error {
            Some(error) => Err(error),
            None if pending.reported => {
                Err(Error::InvalidArgument("write abandoned (it failed at submission, or its wait timed out)".into()))
            }
            None if pending.locations[..copies].iter().all(|l| l.is_none_or(Location::is_missing)) => {
                // Every device it went to was given up during the write: on
                // a pool with devices left, the caller may write it again.
                match self.devices.iter().any(Option::is_some) {
                    true => Err(Error::Member {
                        device: self.lanes[usize::from(pending.lanes[0])].device,
                        why: "given up during the write, which wrote nothing: write it again".into(),
                    }),
                    false => Err(Error::NoDevices),
                }
            }
            None => {
                let mut placed = [(0, Location::MISSING); COPIES_MAX];
                for (copy, lane) in pending.copy_lanes() {
                    placed[copy] = (lane, pending.locations[copy].expect("every copy placed"));
                }
                let entry = Entry::new(pending.blocks, &placed[..copies]);
                // A tagged extent's checksums live on the devices, with the
                // data; its list goes back for the next write.
                let crcs = if pending.tagged {
                    recycle_crcs(&mut self.crc_pool, std::mem::take(&mut pending.crcs));
                    Vec::new()
                } else {
                    std::mem::take(&mut pending.crcs)
                };
                self.insert_extent(pending.id, entry, pending.owner, crcs, true)
            }
        };
        if result.is_err() && self.table.get(pending.id).is_none() {
            self.table.release(pending.id);
        }
        if !pending.reported {
            self.done.push_back(WriteDone { id: pending.id, result });
        }
    }

    /// Writes `data` and waits for it: [`Volume::submit_write`], then
    /// polls until this write finishes (other finished writes stay queued
    /// for [`Volume::next_done`]).
    ///
    /// A write that times out is abandoned: should it complete later, its
    /// blocks are garbage and no extent comes of it, so an error returned
    /// here never turns into an extent the caller does not know of.
    pub fn write(&mut self, stream: u8, data: &[u8], owner: u64) -> Result<ExtentId> {
        let id = self.submit_write(stream, data, owner)?;
        let deadline = Instant::now() + self.options.timeout;
        loop {
            if let Some(position) = self.done.iter().position(|d| d.id == id) {
                let done = self.done.remove(position).expect("found");
                return done.result.map(|()| id);
            }
            if Instant::now() > deadline {
                let pending = self.writes.iter_mut().flatten().find(|p| p.id == id && p.copy_of.is_none());
                pending.expect("a write neither done nor pending").reported = true;
                return Err(Error::Timeout { what: "a write" });
            }
            self.poll();
        }
    }

    /// Polls until no write is in flight.
    pub fn wait_idle(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.options.timeout;
        while self.writes_in_flight() > 0 {
            self.poll();
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "writes in flight" });
            }
        }
        self.process_retiring()
    }
}

/// What a write carries: bytes to copy into one of the device's DMA
/// buffers, or a DMA buffer already holding them, mapped in the device's
/// I/O address space (a resilver's read, written as it came).
/// A new extent's bytes: the caller's, or a buffer the volume lent,
/// filled in place, and its length.
pub(super) enum Source<'a> {
    Bytes(&'a [u8]),
    Filled(FillBuffer, usize),
}

impl Source<'_> {
    fn len(&self) -> usize {
        match self {
            Source::Bytes(data) => data.len(),
            Source::Filled(_, len) => *len,
        }
    }

    /// The bytes (a lent buffer is memory the device only reads, so a
    /// slice of it is sound: see `FillBuffer`).
    fn bytes(&self) -> &[u8] {
        match self {
            Source::Bytes(data) => data,
            Source::Filled(buffer, len) => &buffer[..*len],
        }
    }

    /// The I/O address space of a lent buffer.
    fn domain(&self) -> Option<usize> {
        match self {
            Source::Bytes(_) => None,
            Source::Filled(buffer, _) => Some(buffer.dma_domain()),
        }
    }
}

pub(super) enum Payload<'a> {
    Bytes(&'a [u8]),
    Buffer(IoBuffer),
}

impl Payload<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            Payload::Bytes(data) => data.len(),
            Payload::Buffer(io) => io.len(),
        }
    }

    /// The crc32c of each 4 KiB block (a DMA buffer is copied out first:
    /// no reference into memory the device writes).
    pub(super) fn checksums(&self) -> Vec<u32> {
        let mut crcs = Vec::with_capacity(self.len() / BLOCK_SIZE);
        match self {
            Payload::Bytes(data) => block_crcs(data, &mut crcs),
            Payload::Buffer(io) => {
                let mut bytes = vec![0u8; io.len()];
                io.buffer().copy_out(io.offset(), &mut bytes);
                block_crcs(&bytes, &mut crcs);
            }
        }
        crcs
    }
}

/// Whether `error` says the device went away.
pub(super) fn is_gone(error: &Error) -> bool {
    matches!(
        error,
        Error::Driver(nvme_driver::Error::DeviceGone) | Error::Command { error: nvme_driver::IoError::DeviceGone, .. }
    )
}

/// The 4 KiB block offset in its zone of a Zone Append that the device
/// placed at `lba`, when it lies within the `reserved` blocks of the zone
/// starting at `start`; `None` for any other value.
fn appended_offset(lba: u64, start: u64, lbas_per_block: u64, blocks: u32, reserved: u32) -> Option<u32> {
    let lbas = lba.checked_sub(start)?;
    if lbas % lbas_per_block != 0 {
        return None;
    }
    let offset = u32::try_from(lbas / lbas_per_block).ok()?;
    (u64::from(offset) + u64::from(blocks) <= u64::from(reserved)).then_some(offset)
}

/// The bit of each device with writes in flight (`Volume::busy`).
pub(super) fn busy_mask(device_writes: &[usize]) -> u32 {
    device_writes.iter().enumerate().filter(|&(_, &count)| count > 0).fold(0, |mask, (device, _)| mask | 1 << device)
}

/// `Volume::write_ended_on`, on the two fields alone (for callers holding
/// a pending write borrowed).
pub(super) fn write_ended(device_writes: &mut [usize], busy: &mut u32, device: usize) {
    device_writes[device] -= 1;
    if device_writes[device] == 0 {
        *busy &= !(1 << device);
    }
}

#[cfg(test)]
mod tests {
    use super::appended_offset;

    #[test]
    fn an_appended_lba_must_lie_within_the_reserved_room() {
        // A zone at LBA 1000, 512-byte LBAs, 10 blocks reserved.
        assert_eq!(appended_offset(1000, 1000, 8, 2, 10), Some(0));
        assert_eq!(appended_offset(1064, 1000, 8, 2, 10), Some(8));
        assert_eq!(appended_offset(1072, 1000, 8, 2, 10), None, "past the reserved room");
        assert_eq!(appended_offset(999, 1000, 8, 2, 10), None, "before the zone");
        assert_eq!(appended_offset(1004, 1000, 8, 2, 10), None, "inside a 4 KiB block");
        assert_eq!(appended_offset(u64::MAX, 1000, 8, 2, 10), None);
    }
}
