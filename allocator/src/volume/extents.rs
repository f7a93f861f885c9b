//! The extent map as the rest of the volume uses it: extents made live,
//! removed and moved (journaled, or replayed at open), their checksums and
//! block tags, and their owners, read back from the owner pages when not
//! in memory.

use super::*;

impl Volume {
    /// Makes extent `id` live as `entry`, owned by `owner`, its checksums in
    /// the map unless empty (tagged): a write's reserved ID when `journal`
    /// (and the add is journaled), else a replayed one at open.
    pub(super) fn insert_extent(
        &mut self,
        id: ExtentId,
        entry: Entry,
        owner: u64,
        crcs: Vec<u32>,
        journal: bool,
    ) -> Result<()> {
        let lanes = self.lanes.len();
        if entry.is_lost() || !entry.within(lanes) {
            return Err(Error::Corrupt(format!("extent {id} has no copy, or one past the volume's lanes")));
        }
        let added = if journal { self.table.fill_reserved(id, &entry) } else { self.table.insert_at(id, &entry) };
        added.map_err(|e| Error::Corrupt(format!("extent {id}: {e}")))?;
        for (lane, location) in entry.copies() {
            if !location.is_missing() && !self.loading {
                self.copy_landed(lane, location.zone, id, entry.blocks);
            }
        }
        if journal {
            // Its checksums are journaled from the map (see
            // `journal::DeltaBody::new`), not copied into the operation.
            let record = ExtentRecord::new(id, owner, entry, Vec::new());
            self.ops.push(Op::Add(record));
        }
        if !crcs.is_empty() {
            self.mapped.insert(id, crcs.into_boxed_slice());
        }
        self.owners.set(split(id).0, owner);
        self.live_blocks += u64::from(entry.blocks);
        Ok(())
    }

    /// Extent `id`'s copy in `lane` (of `blocks`) is live in `zone` now:
    /// the zone's valid blocks, and with checksum areas the extents its
    /// seal takes (see `Lane::landed`).
    fn copy_landed(&mut self, lane: usize, zone: u32, id: ExtentId, blocks: u32) {
        let lane = &mut self.lanes[lane];
        let fresh = lane.table.zone(zone).valid == 0;
        lane.table.add_valid(zone, blocks);
        if self.area && lane.sealed[zone as usize] == 0 {
            lane.note_landed(zone, id, fresh);
        }
    }

    pub(super) fn remove_extent(&mut self, id: ExtentId, journal: bool) -> Result<Entry> {
        let entry = self.table.remove(id).ok_or(Error::NoSuchExtent(id))?;
        let crcs = self.mapped.remove(&id);
        if let Some(crcs) = crcs.filter(|_| journal) {
            // An addition of it not journaled yet takes them from here.
            self.freed_crcs.insert(id, crcs);
        }
        self.owners.clear(split(id).0);
        self.live_blocks -= u64::from(entry.blocks);
        for (lane, location) in entry.copies() {
            if !location.is_missing() && !self.loading {
                self.lanes[lane].table.remove_valid(location.zone, entry.blocks);
            }
        }
        if journal {
            self.ops.push(Op::Free(id));
        }
        Ok(entry)
    }

    /// Moves copy `lane_index` of extent `id` to `to`; either may be
    /// [`Location::MISSING`] (a copy lost with its device, or written by a
    /// resilver). An extent left with no copy at all is lost: it stays,
    /// named, and reads as uncorrectable (see [`Volume::lost_extents`]).
    pub(super) fn move_extent(&mut self, id: ExtentId, lane_index: usize, to: Location, journal: bool) {
        let entry = self.table.get(id).expect("moving a live extent");
        let from = entry.on(lane_index);
        if to.is_missing() && !from.is_missing() && entry.copies().all(|(l, at)| l == lane_index || at.is_missing()) {
            log::error!("extent {id}: its last copy is gone; it is lost (it reads as uncorrectable until freed)");
        }
        assert!(self.table.set_location(id, lane_index, to), "extent {id} is live");
        if !from.is_missing() && !self.loading {
            self.lanes[lane_index].table.remove_valid(from.zone, entry.blocks);
        }
        if !to.is_missing() && !self.loading {
            self.copy_landed(lane_index, to.zone, id, entry.blocks);
        }
        if journal {
            self.ops.push(Op::Move { id, lane: lane_index as u8, to });
        }
    }

    /// Moves extent `id`'s copy in lane `from` to lane `lane`, at `to` (a
    /// distributed rebuild's copy, or an evacuation's).
    pub(super) fn relane_extent(&mut self, id: ExtentId, from: usize, lane: usize, to: Location, journal: bool) {
        let entry = self.table.get(id).expect("moving a live extent");
        let old = entry.on(from);
        assert!(self.table.relane(id, from, lane, to), "extent {id}: a copy in lane {from}, none in {lane}");
        if !self.loading {
            if !old.is_missing() {
                self.lanes[from].table.remove_valid(old.zone, entry.blocks);
            }
            if !to.is_missing() {
                self.copy_landed(lane, to.zone, id, entry.blocks);
            }
        }
        if journal {
            self.ops.push(Op::Relane { id, from: from as u8, lane: lane as u8, to });
        }
    }

    /// Extents with no copy on a device in use, and their blocks: lost
    /// with the device that held their only copy (or with every copy).
    /// They stay in the volume, named, and read as
    /// [`Error::Uncorrectable`] until freed.
    pub fn lost_extents(&self) -> Vec<(ExtentId, u32)> {
        let lanes = self.lanes.len();
        self.table
            .iter()
            .filter(|(_, e)| (0..lanes).all(|l| e.on(l).is_missing() || !self.lane_online(l)))
            .map(|(id, e)| (id, e.blocks))
            .collect()
    }

    /// Extent `id`, live.
    pub(super) fn live(&self, id: ExtentId) -> Result<Entry> {
        self.table.get(id).ok_or(Error::NoSuchExtent(id))
    }

    /// Extent `id`'s checksums from the map: empty when it has none there
    /// (tagged, or not live).
    pub(super) fn mapped_crcs(&self, id: ExtentId) -> &[u32] {
        self.mapped.get(&id).map_or(&[][..], |crcs| &crcs[..])
    }

    /// Lane `lane`'s copies in physical order, for a walk over them
    /// ([`Volume::extents_in_order`]): built in one pass over the extent
    /// table, 8 bytes per copy until dropped.
    pub fn lane_order(&self, lane: usize) -> LaneOrder {
        self.table.lane_order(lane, self.lanes[lane].table.zone_count())
    }

    /// The first two copies in lane `lane` that overlap (or one past its
    /// zone's allocation, when `allocation` is checked), if any.
    pub(super) fn overlap(&self, lane: usize, allocation: bool) -> Option<String> {
        let table = &self.lanes[lane].table;
        let allocated = |zone: u32| table.zone(zone).allocated;
        let allocated: Option<&dyn Fn(u32) -> u32> = if allocation { Some(&allocated) } else { None };
        Some(describe_misplaced(self.table.misplaced(lane, table.zone_count(), allocated)?, lane))
    }

    /// Refuses work once a controller was reset since the last commit: its
    /// volatile cache, and with it writes this volume counts on, may be
    /// gone, and the zone state on the device may no longer match ours.
    ///
    /// A mirror member whose controller was reset is given up instead (its
    /// copies since the last commit are marked missing) when another
    /// device is in use: the volume goes on degraded, and the member can
    /// rejoin ([`Volume::rejoin`]).
    pub(super) fn check_resets(&mut self) -> Result<()> {
        if let Some(why) = &self.read_only {
            return Err(Error::ReadOnly { why: why.clone() });
        }
        if self.devices.iter().all(Option::is_none) {
            return Err(Error::NoDevices);
        }
        // Read before looking: a reset that begins meanwhile moves it again.
        let resets = nvme_driver::resets_begun();
        if resets == self.resets_seen {
            return Ok(());
        }
        while let Some(device) = self.devices.iter().position(|d| d.as_ref().is_some_and(Device::reset_since_durable)) {
            let why = "its controller was reset: writes since the last commit may be lost".to_string();
            if !self.give_up(device, why) {
                return Err(Error::ControllerReset { device });
            }
        }
        self.resets_seen = resets;
        Ok(())
    }

    /// Extent IDs, in no particular order.
    pub fn extent_ids(&self) -> impl Iterator<Item = ExtentId> + '_ {
        self.table.iter().map(|(id, _)| id)
    }

    /// The extent's length in bytes, when it is live.
    pub fn extent(&self, id: ExtentId) -> Option<usize> {
        self.table.get(id).map(|e| e.blocks as usize * BLOCK_SIZE)
    }

    /// The extent's owner, as given to [`Volume::submit_write`]. Owners are
    /// kept on the device (see `allocator/METADATA.md`, step 4): one may
    /// take a metadata read. Fails with [`Error::NoSuchExtent`], with
    /// [`Error::OwnerLost`] when a commit found every copy of its owners
    /// bad, or with the read's error when neither copy can be read now.
    pub fn owner(&mut self, id: ExtentId) -> Result<u64> {
        self.live(id)?;
        let slot = split(id).0;
        let owner = match self.owners.recent(slot) {
            Some(owner) => owner,
            None => {
                let page = slot / PAGE_SLOTS as u64;
                self.home_owners(page)?[(slot % PAGE_SLOTS as u64) as usize]
            }
        };
        if owner == OWNER_LOST {
            return Err(Error::OwnerLost { extent: id });
        }
        Ok(owner)
    }

    /// Every live extent's owner is somewhere: recent, or in its page's
    /// blob.
    pub(super) fn check_owner_homes(&self) -> Result<()> {
        for page in 0..self.table.pages() {
            if self.owners.home(page).is_none() {
                if let Some(slot) = self.table.live_slots(page).find(|&slot| self.owners.recent(slot).is_none()) {
                    return Err(Error::Corrupt(format!("extent slot {slot}: its owner was never journaled")));
                }
            }
        }
        Ok(())
    }

    /// Every live extent with its owner, in slot order: a metadata read per
    /// page of 340 extents at most. An owner lost with every copy of its
    /// metadata reads as [`crate::OWNER_LOST`]; a page that cannot be read
    /// now fails the listing with the read's error.
    pub fn extent_owners(&mut self) -> Result<Vec<(ExtentId, u64)>> {
        let ids: Vec<ExtentId> = self.table.iter().map(|(id, _)| id).collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let slot = split(id).0;
            let owner = match self.owners.recent(slot) {
                Some(owner) => owner,
                None => self.home_owners(slot / PAGE_SLOTS as u64)?[(slot % PAGE_SLOTS as u64) as usize],
            };
            out.push((id, owner));
        }
        Ok(out)
    }

    /// Page `page`'s owners as its newest blob holds them: kept as read, or
    /// read from the metadata.
    pub(super) fn home_owners(&mut self, page: u64) -> Result<&[u64]> {
        if self.owners.cached(page).is_none() {
            let Some(home) = self.owners.home(page) else {
                return Err(Error::Corrupt(format!("the owners of extent table page {page} were never journaled")));
            };
            let owners = self.journal.read_owner_blob(&mut self.devices, home, page)?;
            self.stats.owner_pages_read += 1;
            self.owners.keep(page, owners.into_boxed_slice());
        }
        Ok(self.owners.cached(page).expect("kept just now"))
    }

    /// Every owner of page `page` now, for a record to carry: its blob's,
    /// with the recent ones over them (no read when those cover every live
    /// slot). A blob bad on every copy for good loses the owners only it
    /// held: they become [`OWNER_LOST`], loudly, and the commit goes on
    /// (failing it would stop the volume for a word per extent). A read
    /// that failed otherwise (a timeout, a reset) fails the commit, which
    /// is retried.
    pub(super) fn page_owners(&mut self, page: u64) -> Result<Vec<u64>> {
        let live: Vec<u64> = self.table.live_slots(page).collect();
        let first = page * PAGE_SLOTS as u64;
        let mut owners = vec![0u64; PAGE_SLOTS];
        if live.iter().any(|&slot| self.owners.recent(slot).is_none()) {
            match self.home_owners(page) {
                Ok(blob) => {
                    for &slot in &live {
                        owners[(slot - first) as usize] = blob[(slot - first) as usize];
                    }
                }
                Err(error @ Error::Corrupt(_)) => {
                    let lost = live.iter().filter(|&&slot| self.owners.recent(slot).is_none()).count();
                    log::error!("{error}: the owners of {lost} extents on that page are lost");
                    self.stats.owners_lost += lost as u64;
                    for &slot in &live {
                        owners[(slot - first) as usize] = OWNER_LOST;
                    }
                }
                Err(error) => return Err(error),
            }
        }
        self.owners.overlay(page, &mut owners);
        Ok(owners)
    }

    /// The extent's block checksums, from the extent map; `None` when there
    /// is no such extent, or when its checksums live in its blocks' tags
    /// ([`Volume::tagged`]).
    pub fn checksums(&self, id: ExtentId) -> Option<&[u32]> {
        self.mapped.get(&id).map(|crcs| &crcs[..])
    }

    /// How the devices carry each block's checksum in its metadata
    /// ([`crate::tags`]), or, on a volume with zone checksum areas, the
    /// tag format of its areas; `None` when checksums live in the extent
    /// map. [`Volume::checksum_store`] says which.
    pub fn block_tags(&self) -> Option<TagLayout> {
        self.tags
    }

    /// Whether extent `id`'s checksums are in its blocks' tags rather than
    /// the extent map. On a volume with tags, every extent is, except on a
    /// controller that cannot carry an extent's tags in one command
    /// ([`TagLayout::carries`]): such an extent keeps its checksums in the
    /// map.
    pub fn tagged(&self, id: ExtentId) -> bool {
        self.tags.is_some() && !self.mapped.contains_key(&id) && self.table.get(id).is_some()
    }

    /// The volume's ID, which block tags bind each block to.
    pub fn volume_id(&self) -> u64 {
        self.volume_id
    }

    /// Writes into `out` the tags of extent `id`'s blocks holding `data`
    /// (the whole extent), on a volume with block tags.
    pub(super) fn fill_tags(&self, id: ExtentId, data: &[u8], out: &mut [u8]) {
        let layout = self.tags.expect("a volume with block tags");
        let mut crcs = Vec::with_capacity(data.len() / BLOCK_SIZE);
        crate::checksum::block_crcs(data, &mut crcs);
        crate::tags::fill(layout, self.volume_id, id, 0, &crcs, out);
    }
}
