//! What an engine such as scrub reads through: a lane's extents in
//! physical order with their checksums, and reads of the lane's namespace
//! on its queue pair (`LaneReads`), tagged so that their completions never
//! mix with the volume's (see [`crate::Token`]).

use super::{ExtentRef, Volume};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::table::LaneOrder;
use crate::tags::TagLayout;
use crate::{Location, Token, BLOCK_SIZE};
use nvme_driver::{IoBuffer, IoCompletion};

impl Volume {
    /// The copies of `order`'s lane in physical order from `from` (one
    /// search, then a walk), for scrub to take in batches as large as it
    /// likes. `order` is [`Volume::lane_order`], built once for a pass:
    /// copies freed or moved since are skipped, and copies written since
    /// are not in it.
    pub fn extents_in_order<'a>(
        &'a self,
        order: &'a LaneOrder,
        from: Location,
    ) -> impl Iterator<Item = ExtentRef<'a>> + 'a {
        let device = self.devices[self.lanes[order.lane()].device].as_ref();
        order.walk(&self.table, from).map(move |(location, id, entry)| {
            let crcs = self.mapped.get(&id).map_or(&[][..], |crcs| &crcs[..]);
            ExtentRef {
                id,
                location,
                lba: device.map_or(0, |d| d.lba(location.zone, location.offset)),
                blocks: entry.blocks,
                crcs,
                tagged: self.tags.is_some() && crcs.is_empty(),
            }
        })
    }
}

/// Reads of one copy's namespace for an engine, on its queue pair, while
/// the volume writes nothing ([`Volume::lane_reads`]).
#[derive(Debug)]
pub struct LaneReads<'a> {
    device: &'a mut Device,
    /// Reads carry the blocks' tags too (a volume with block tags).
    tags: Option<TagLayout>,
    /// Buffers reads leave free (see [`LaneReads::leaving_room_for_writes`]).
    reserve: usize,
}

impl Volume {
    /// Lends copy `lane`'s namespace for reads. Writes may be in flight on
    /// it (a distributed rebuild's copies go to the lanes it reads): their
    /// completions, should the engine's poll reap them, are held for the
    /// volume's next poll. The engine reads only what is committed, which
    /// no write in flight touches.
    pub fn lane_reads(&mut self, lane: usize) -> Result<LaneReads<'_>> {
        if lane >= self.lanes.len() {
            return Err(Error::InvalidArgument(format!("copy {lane}: the volume has {}", self.lanes.len())));
        }
        let device = self.lanes[lane].device;
        // With checksum areas the tags are not in the device's metadata:
        // the engine asks for them ([`Volume::area_tags_at`]).
        let tags = self.tags.filter(|_| !self.area);
        match self.devices[device].as_mut() {
            Some(device) => Ok(LaneReads { device, tags, reserve: 0 }),
            None => Err(Error::Member { device, why: "not in use".into() }),
        }
    }
}

impl LaneReads<'_> {
    /// Reads that leave [`read_reserve`] of the device's buffers to writes
    /// on it: for an engine that writes to the devices it reads (a
    /// distributed rebuild, a dup's resilver), whose copies take buffers
    /// there that only its own reads' completions could otherwise free.
    pub fn leaving_room_for_writes(mut self) -> Self {
        self.reserve = read_reserve(self.device.pool().capacity());
        self
    }

    /// The largest read: the namespace's transfer limit and the buffer size.
    pub fn max_request_bytes(&self) -> usize {
        self.device.max_transfer_bytes().min(self.device.pool().buffer_len())
    }

    /// Submits a read of `bytes` (whole 4 KiB blocks, at most
    /// [`LaneReads::max_request_bytes`]) at `lba`, tagged `tag` (at most
    /// [`crate::token::TAG_MAX`]). On a volume with block tags the blocks'
    /// metadata comes back too, in the completion's `metadata`.
    /// `Ok(false)` when no buffer or queue slot is free now: poll, then
    /// submit again.
    pub fn submit(&mut self, lba: u64, bytes: usize, tag: u64) -> Result<bool> {
        if bytes == 0 || !bytes.is_multiple_of(BLOCK_SIZE) || bytes > self.max_request_bytes() {
            return Err(Error::InvalidArgument(format!("a read of {bytes} bytes")));
        }
        if self.reserve > 0 && self.device.pool().available() <= self.reserve {
            return Ok(false);
        }
        // Tags come with the read when one command carries them whole (a
        // read of blocks whose tags it cannot carry holds only extents that
        // keep their checksums in the map: see the scrub's plan).
        let carried = self.tags.filter(|layout| layout.carries(bytes / BLOCK_SIZE));
        let tags = match (carried, self.device.tag_pool()) {
            (None, _) => None,
            (Some(layout), Some(pool)) => match pool.get() {
                Some(buffer) => Some(IoBuffer::range(buffer, 0, layout.bytes(bytes / BLOCK_SIZE))),
                None => return Ok(false),
            },
            (Some(_), None) => return Err(Error::InvalidArgument("the device carries no block tags".into())),
        };
        let Some(buffer) = self.device.pool().get() else { return Ok(false) };
        let token = Token::Engine(tag).encode();
        let data = IoBuffer::range(buffer, 0, bytes);
        let ns = self.device.namespace();
        let request = match tags {
            None => ns.read(lba, data, token)?,
            Some(tags) => ns.read_with_metadata(lba, data, tags, token)?,
        };
        match self.device.queue_pair().submit(request) {
            Ok(()) => Ok(true),
            Err((nvme_driver::queue::SubmitError::QueueFull, _)) => Ok(false),
            Err((error, _)) => Err(nvme_driver::Error::from(error).into()),
        }
    }

    /// Reaps this engine's completed reads into `out`, each with its tag as
    /// its token. The volume's writes that complete are held for its next
    /// poll; stale completions of its own (a blocking command that timed
    /// out) are dropped.
    pub fn poll(&mut self, out: &mut Vec<IoCompletion>) {
        let start = out.len();
        self.device.poll(out);
        let mut index = start;
        while index < out.len() {
            match Token::decode(out[index].token) {
                Token::Engine(tag) => {
                    out[index].token = tag;
                    index += 1;
                }
                Token::Write { .. } => self.device.held.push_back(out.swap_remove(index)),
                Token::Sync(_) => {
                    out.swap_remove(index);
                }
            }
        }
    }
}

/// Buffers of a device's pool that an engine's reads leave to writes on
/// it: a quarter, at least two, and never all (a read can always start).
/// An engine whose copies go to the devices it reads (a distributed
/// rebuild, a dup's resilver) writes each copy from a buffer of the target
/// device; were its reads to hold every buffer, the copy would wait for one
/// that only its own reads' completions, which it has yet to take, could
/// free, until the wait timed out (found by the simulator: a distributed
/// rebuild without verification, 32 buffers a device, 64 reads allowed).
pub fn read_reserve(capacity: usize) -> usize {
    (capacity / 4).max(2).min(capacity.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::read_reserve;

    #[test]
    fn reads_leave_a_quarter_and_can_always_start() {
        assert_eq!(read_reserve(72), 18);
        assert_eq!(read_reserve(32), 8);
        assert_eq!(read_reserve(4), 2);
        assert_eq!(read_reserve(2), 1);
        assert_eq!(read_reserve(1), 0);
    }
}
