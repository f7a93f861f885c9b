//! Zone checksum areas ([`crate::area`]): sealing a zone that takes no
//! more data, reading its tags back, and the checksums that leave the map
//! once every copy of an extent lies in a sealed zone.

use super::{ChecksumStore, Volume};
use crate::area::{area_blocks, covering, TAG_BYTES};
use crate::error::{Error, Result};
use crate::journal::Op;
use crate::tags::TagLayout;
use crate::zones::ZoneUse;
use crate::{ExtentId, Location, BLOCK_SIZE};

/// The layout of tags in an area.
const AREA: TagLayout = TagLayout { stride: TAG_BYTES, granule: None };

impl Volume {
    /// Writes the checksum area of zone `zone` of `lane`, which takes no
    /// more data and has no write in flight: the tags of every live copy
    /// in it (each from its extent's checksums in the map), right after
    /// its data, and journals the seal. A zone that holds nothing is left
    /// as it is. On failure the zone stays unsealed and its extents keep
    /// their checksums in the map. Returns whether it wrote.
    pub(super) fn seal_zone(&mut self, lane: usize, zone: u32) -> Result<bool> {
        let entry = *self.lanes[lane].table.zone(zone);
        debug_assert_eq!(entry.inflight, 0, "sealing zone {zone} with writes in flight");
        if !self.area || self.lanes[lane].sealed[zone as usize] != 0 || entry.allocated == 0 {
            return Ok(false);
        }
        let covered = entry.allocated;
        let len = area_blocks(covered) as usize * BLOCK_SIZE;
        let device = self.lanes[lane].device;
        let zoned = self.dev(device).is_zoned();
        // The area is built in place in a buffer the device only reads,
        // when one transfer carries it; else in a buffer kept from the
        // last (as long as the largest so far), copied as it is written.
        let mut fill = self.dev_mut(device).own_fill_buffer(len, zoned);
        let mut kept = Vec::new();
        let tags = match fill.as_mut() {
            Some(fill) => &mut fill[..len],
            None => {
                kept = std::mem::take(&mut self.area_buffer);
                if kept.len() < len {
                    kept.resize(len, 0);
                }
                &mut kept[..len]
            }
        };
        self.build_area(tags, lane, zone, entry.valid);
        let sealed = if zoned {
            let write_pointer = self.lanes[lane].written[zone as usize];
            let at = match fill {
                Some(fill) => self.dev_mut(device).append_filled(zone, write_pointer, fill, len)?,
                None => self.dev_mut(device).append_at(zone, write_pointer, &kept[..len])?,
            };
            if at > covered {
                return Err(Error::BadDeviceResult {
                    what: format!("zone {zone}'s checksum area landed at block {at}, past its {covered} allocated"),
                });
            }
            self.lanes[lane].written[zone as usize] = at + (len / BLOCK_SIZE) as u32;
            at
        } else {
            let lba = self.dev(device).lba(zone, covered);
            match fill {
                Some(fill) => self.dev_mut(device).write_filled(lba, fill, len)?,
                None => self.dev_mut(device).write_at(lba, &kept[..len])?,
            }
            covered
        };
        if !kept.is_empty() {
            self.area_buffer = kept;
        }
        if sealed > 0 {
            self.lanes[lane].sealed[zone as usize] = sealed;
            self.ops.push(Op::Sealed { lane: lane as u8, zone, blocks: sealed });
            self.sealed_since_commit.push((lane, zone));
        }
        Ok(true)
    }

    /// Builds in `tags` the checksum area of zone `zone` of `lane`, whose
    /// live blocks are `valid`: from the extents noted as landed there,
    /// when they are every live block, their tags written in block order,
    /// zeroes only in the gaps. Else (after open, or a note missed) the
    /// area is zeroed and every extent in the map is looked at.
    fn build_area(&mut self, tags: &mut [u8], lane: usize, zone: u32, valid: u32) {
        let mut landed = self.lanes[lane].take_landed(zone);
        let noted = landed.as_mut().is_some_and(|ids| {
            ids.sort_unstable();
            ids.dedup();
            ids.sort_by_cached_key(|&id| self.table.get(id).map_or(u32::MAX, |e| e.on(lane).offset));
            let (mut blocks, mut end) = (0, 0);
            for &id in ids.iter() {
                match self.append_area_tags(tags, end, lane, zone, id) {
                    Some((appended, at)) => (blocks, end) = (blocks + appended, at),
                    None => return false,
                }
            }
            tags[end..].fill(0);
            blocks == u64::from(valid)
        });
        if !noted {
            debug_assert!(landed.is_none(), "zone {zone} of lane {lane}: an extent landed there was not noted");
            tags.fill(0);
            for &id in self.mapped.keys() {
                self.fill_area_tags(tags, lane, zone, id);
            }
        }
        if let Some(list) = landed {
            self.lanes[lane].give_back_list(list);
        }
    }

    /// Where extent `id`'s copy in `lane` lies in zone `zone` (its block
    /// offset there) and its checksums, when it lies there and they are in
    /// the map: what a zone's checksum area records of it.
    fn mapped_copy_in(&self, lane: usize, zone: u32, id: ExtentId) -> Option<(u32, &[u32])> {
        let crcs = self.mapped.get(&id)?;
        let at = self.table.get(id)?.on(lane);
        (!at.is_missing() && at.zone == zone).then_some((at.offset, &crcs[..]))
    }

    /// Writes into `tags` (zone `zone`'s area in `lane`, built in block
    /// order, its first `end` bytes done) the tags of extent `id`'s blocks
    /// when its copy there lies in the zone and its checksums are in the
    /// map, zeroes first from `end` up to them: the blocks written and the
    /// new end. `None` when they lie before `end`, or past the area.
    fn append_area_tags(
        &self,
        tags: &mut [u8],
        end: usize,
        lane: usize,
        zone: u32,
        id: ExtentId,
    ) -> Option<(u64, usize)> {
        let Some((offset, crcs)) = self.mapped_copy_in(lane, zone, id) else { return Some((0, end)) };
        let start = offset as usize * TAG_BYTES;
        let stop = start + crcs.len() * TAG_BYTES;
        if start < end || stop > tags.len() {
            return None;
        }
        tags[end..start].fill(0);
        crate::tags::fill(AREA, self.volume_id, id, 0, crcs, &mut tags[start..stop]);
        Some((crcs.len() as u64, stop))
    }

    /// Writes into `tags` (zone `zone`'s area in `lane`) the tags of
    /// extent `id`'s blocks when its copy there lies in the zone and its
    /// checksums are in the map; the blocks written.
    fn fill_area_tags(&self, tags: &mut [u8], lane: usize, zone: u32, id: ExtentId) -> u64 {
        let Some((offset, crcs)) = self.mapped_copy_in(lane, zone, id) else { return 0 };
        let start = offset as usize * TAG_BYTES;
        let out = &mut tags[start..start + crcs.len() * TAG_BYTES];
        crate::tags::fill(AREA, self.volume_id, id, 0, crcs, out);
        crcs.len() as u64
    }

    /// Zone `zone` of `lane` holds nothing any more (reset, or found so at
    /// open): its area, if it had one, is gone, as the journal says next.
    pub(super) fn unseal(&mut self, lane: usize, zone: u32) {
        if let Some(list) = self.lanes[lane].take_landed(zone) {
            self.lanes[lane].give_back_list(list);
        }
        if std::mem::take(&mut self.lanes[lane].sealed[zone as usize]) != 0 {
            self.ops.push(Op::Sealed { lane: lane as u8, zone, blocks: 0 });
        }
        if self.area_cache[lane].as_ref().is_some_and(|(z, _)| *z == zone) {
            self.area_cache[lane] = None;
        }
    }

    /// Every zone's seal, as operations: what a checkpoint's first record
    /// restates, since the log before it is not replayed.
    pub(super) fn seal_ops(&self) -> Vec<Op> {
        let mut ops = Vec::new();
        for (lane, l) in self.lanes.iter().enumerate() {
            for (zone, &blocks) in l.sealed.iter().enumerate().filter(|(_, &b)| b != 0) {
                ops.push(Op::Sealed { lane: lane as u8, zone: zone as u32, blocks });
            }
        }
        ops
    }

    /// After a commit made the seals since the last one durable: the
    /// extents whose every copy now lies in a sealed zone leave the map.
    pub(super) fn seals_committed(&mut self) {
        if !self.sealed_since_commit.is_empty() {
            self.sealed_since_commit.clear();
            self.drop_covered();
        }
    }

    /// Drops from the map the checksums of every extent whose copies all
    /// lie within their zones' areas (a missing copy needs none: a
    /// resilver writes it from another's tags).
    pub(super) fn drop_covered(&mut self) {
        if !self.area {
            return;
        }
        let (table, lanes, pool) = (&self.table, &self.lanes, &mut self.crc_pool);
        self.mapped.retain(|&id, crcs| {
            let Some(entry) = table.get(id) else { return true };
            let keep = !entry
                .copies()
                .all(|(lane, at)| at.is_missing() || lanes[lane].area_covers(at.zone, at.offset, entry.blocks));
            // The list goes back to the pool for the next writes.
            if !keep {
                super::write::recycle_crcs(pool, std::mem::take(crcs).into_vec());
            }
            keep
        });
        // Open's replay fills the map with every extent added since the
        // checkpoint began: its table need not stay that large.
        if self.mapped.capacity() > 4 * self.mapped.len().max(256) {
            self.mapped.shrink_to_fit();
        }
    }

    /// Extent `id`'s checksums are back in the map (journaled), for a copy
    /// of it going to a zone not sealed yet; nothing when they are there.
    pub(super) fn remap(&mut self, id: ExtentId, crcs: Vec<u32>) {
        if !self.area || self.mapped.contains_key(&id) {
            return;
        }
        debug_assert_eq!(Some(crcs.len()), self.table.get(id).map(|e| e.blocks as usize));
        self.ops.push(Op::Crcs { id, crcs: crcs.clone() });
        self.mapped.insert(id, crcs.into_boxed_slice());
    }

    /// The checksums copy `lane` of extent `id` claims: the map's, or its
    /// tags' in its zone's area, unverified (a bad block's tag says what it
    /// should hold). The zone's whole area is read and kept: reclaim, the
    /// caller, moves a zone's copies one after another.
    pub(super) fn claimed_crcs(&mut self, id: ExtentId, lane: usize) -> Result<Vec<u32>> {
        if let Some(crcs) = self.mapped.get(&id) {
            return Ok(crcs.to_vec());
        }
        let entry = self.live(id)?;
        let tags = self.area_tags(lane, entry.on(lane), entry.blocks, true)?;
        Ok(crate::tags::data_crcs(AREA, &tags).collect())
    }

    /// The tags of `blocks` blocks at `at` on lane `lane`, from its zone's
    /// area: from the last area read, else read (the whole area when
    /// `whole`, for a walk over the zone; else only the blocks holding
    /// them).
    pub(super) fn area_tags(&mut self, lane: usize, at: Location, blocks: u32, whole: bool) -> Result<Vec<u8>> {
        let sealed = self.lanes[lane].sealed.get(at.zone as usize).copied().unwrap_or(0);
        if at.is_missing() || at.offset + blocks > sealed {
            return Err(Error::Corrupt(format!(
                "lane {lane}: {blocks} blocks at {at:?} lie outside their zone's checksum area ({sealed} blocks)"
            )));
        }
        let range = at.offset as usize * TAG_BYTES..(at.offset + blocks) as usize * TAG_BYTES;
        if let Some((_, tags)) = self.area_cache[lane].as_ref().filter(|(zone, _)| *zone == at.zone) {
            return Ok(tags[range].to_vec());
        }
        let device = self.lanes[lane].device;
        let Some(d) = self.devices[device].as_mut() else {
            return Err(Error::Member { device, why: "not in use".into() });
        };
        if whole {
            let mut tags = vec![0u8; area_blocks(sealed) as usize * BLOCK_SIZE];
            let lba = d.lba(at.zone, sealed);
            d.read_reserved(lba, &mut tags)?;
            let out = tags[range].to_vec();
            self.area_cache[lane] = Some((at.zone, tags));
            return Ok(out);
        }
        let (area_range, skip) = covering(at.offset, blocks);
        let mut read = vec![0u8; area_range.len() * BLOCK_SIZE];
        let lba = d.lba(at.zone, sealed + area_range.start);
        d.read_reserved(lba, &mut read)?;
        Ok(read[skip..skip + blocks as usize * TAG_BYTES].to_vec())
    }

    /// The tags of a read of `blocks` blocks at `start` on lane `lane`
    /// (within one zone), from the zone's checksum area, read whole and
    /// kept while the walk stays in the zone: for an engine (scrub,
    /// resilver) whose read expects tags, on a volume with checksum areas.
    /// `None` on another volume; an error when they cannot be read (the
    /// engine then counts the blocks bad).
    pub fn area_tags_for(&mut self, lane: usize, start: Location, blocks: u32) -> Option<Result<Vec<u8>>> {
        if !self.area || lane >= self.lanes.len() {
            return None;
        }
        Some(self.area_tags(lane, start, blocks, true))
    }

    /// Rewrites the tags of copy `lane` of extent `id` in its zone's area
    /// from `crcs`, on a conventional namespace (a repair in place): the
    /// area blocks holding them are read, changed and written back. Nothing
    /// when the zone is not sealed (the map holds the checksums).
    pub(super) fn patch_area(&mut self, id: ExtentId, lane: usize, crcs: &[u32]) -> Result<()> {
        let at = self.live(id)?.on(lane);
        let sealed = self.lanes[lane].sealed.get(at.zone as usize).copied().unwrap_or(0);
        if !self.area || at.is_missing() || sealed == 0 {
            return Ok(());
        }
        let (range, skip) = covering(at.offset, crcs.len() as u32);
        let device = self.lanes[lane].device;
        let lba = self.dev(device).lba(at.zone, sealed + range.start);
        let mut blocks = vec![0u8; range.len() * BLOCK_SIZE];
        self.dev_mut(device).read_reserved(lba, &mut blocks)?;
        crate::tags::fill(AREA, self.volume_id, id, 0, crcs, &mut blocks[skip..skip + crcs.len() * TAG_BYTES]);
        self.dev_mut(device).write_at(lba, &blocks)?;
        self.area_cache[lane] = None;
        Ok(())
    }

    /// Whether the volume keeps checksums in zone checksum areas
    /// ([`crate::area`]).
    pub fn checksum_areas(&self) -> bool {
        self.area
    }

    /// Where the volume keeps its blocks' checksums, as format chose:
    /// [`ChecksumStore::Tags`], [`ChecksumStore::Area`] or
    /// [`ChecksumStore::Map`] (never `Auto`).
    pub fn checksum_store(&self) -> ChecksumStore {
        match (self.area, self.tags) {
            (true, _) => ChecksumStore::Area,
            (false, Some(_)) => ChecksumStore::Tags,
            (false, None) => ChecksumStore::Map,
        }
    }

    /// Zones of devices in use that take no more data and hold some, with
    /// no checksum area and none coming ([`VolumeStats::unsealed_zones`]).
    pub(super) fn unsealed_zones(&self) -> u64 {
        if !self.area {
            return 0;
        }
        let mut count = 0;
        for (index, lane) in self.lanes.iter().enumerate() {
            if self.devices[lane.device].is_none() {
                continue;
            }
            for zone in 0..lane.table.zone_count() {
                let entry = lane.table.zone(zone);
                count += u64::from(
                    entry.usage == ZoneUse::Full
                        && entry.allocated > 0
                        && lane.sealed[zone as usize] == 0
                        && !self.retiring.contains(&(index, zone)),
                );
            }
        }
        count
    }

    /// How many of zone `zone`'s first blocks on lane `lane` its checksum
    /// area covers (0: not sealed).
    pub fn sealed_blocks(&self, lane: usize, zone: u32) -> u32 {
        self.lanes.get(lane).and_then(|l| l.sealed.get(zone as usize)).copied().unwrap_or(0)
    }

    /// Extents whose checksums are in the map now (on a volume with
    /// checksum areas: those with a copy in a zone not sealed yet).
    pub fn mapped_extents(&self) -> usize {
        self.mapped.len()
    }

    /// Checks, for [`Volume::check_invariants`], that every live copy of an
    /// extent outside the map lies within its zone's area, and that no
    /// sealed zone takes allocations.
    pub(super) fn check_area_invariants(&self) {
        if !self.area {
            return;
        }
        for (id, entry) in self.table.iter() {
            if self.mapped.contains_key(&id) {
                continue;
            }
            for (lane, at) in entry.copies() {
                assert!(
                    at.is_missing() || self.lanes[lane].area_covers(at.zone, at.offset, entry.blocks),
                    "extent {id} has no checksums in the map and its copy {lane} at {at:?} lies outside its zone's area"
                );
            }
        }
        for (lane, l) in self.lanes.iter().enumerate() {
            for (zone, &sealed) in l.sealed.iter().enumerate() {
                let z = l.table.zone(zone as u32);
                assert!(
                    sealed == 0 || !matches!(z.usage, ZoneUse::Open(_) | ZoneUse::Empty),
                    "lane {lane} zone {zone} is sealed at {sealed} but {:?}",
                    z.usage
                );
            }
        }
    }
}
