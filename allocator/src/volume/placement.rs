//! Where a write goes: a zone placed for it within the device's open and
//! active zone limits, and the zones it filled (or a failed write left
//! behind) retired, finished and, on checksum areas, sealed.

use super::member::Failed;
use super::Volume;
use crate::chooser::{Chooser, DeviceMask, Short, MAX_DEVICES};
use crate::error::{Error, Full, Result};
use crate::table::COPIES_MAX;
use crate::zones::{PlaceError, Retired, Slot, Stamp, ZoneTable, ZoneUse};
use nvme_driver::cmd::zns::ZoneSendAction;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Volume {
    /// The lanes a new extent of `blocks` for `slot` puts its copies in,
    /// into `out`; returns how many (the profile's copies). Each lane in
    /// use must have room for it: else [`Error::NoSpace`] naming a full
    /// device, before anything is written.
    ///
    /// A volume with a lane per copy (a single device, a dup, a mirror of
    /// two) puts a copy in each. A pool with more lanes than copies asks
    /// the chooser (`crate::chooser`, docs/pool.md decision 3) for the
    /// least loaded lanes in use with room: constant work, one pass over
    /// at most 16 lanes. With fewer of those than copies, it takes them
    /// all, and lanes whose device is away for the rest: those copies are
    /// recorded missing, for a resilver to write when the device returns,
    /// as a mirror's are today.
    pub(super) fn choose_lanes(&mut self, blocks: u32, slot: Slot, out: &mut [usize; COPIES_MAX]) -> Result<usize> {
        let copies = self.copies();
        let reserve = self.superblock.reserve_zones as usize;
        // The count of empty zones first: one load, false while any is left.
        let full = |table: &crate::zones::ZoneTable| table.empty_zones() <= reserve && table.would_open(slot, blocks);
        if self.lanes.len() == copies {
            if let Some(lane) = self.lanes.iter().find(|l| self.devices[l.device].is_some() && full(&l.table)) {
                return Err(Error::NoSpace(Full::Data { place: lane.device }));
            }
            for (lane, chosen) in out.iter_mut().enumerate().take(copies) {
                *chosen = lane;
            }
            return Ok(copies);
        }
        // The lanes that changed since the last choice, alone: whether
        // each one's device is away, its free blocks for the chooser, and
        // whether its empty zones are down to the reserve. The others
        // stand as they were.
        let changed = self.lanes_changed.swap(0, Ordering::Relaxed) & lane_bits(self.lanes.len());
        let mut pending = changed;
        while pending != 0 {
            let index = pending.trailing_zeros() as usize;
            pending &= pending - 1;
            let bit = 1u32 << index;
            let lane = &self.lanes[index];
            if self.devices[lane.device].is_none() {
                self.lanes_away |= bit;
                mark_away(&mut self.chooser, &mut self.chooser_seen, index);
                continue;
            }
            self.lanes_away &= !bit;
            match lane.table.empty_zones() <= reserve {
                true => self.lanes_tight |= bit,
                false => self.lanes_tight &= !bit,
            }
            refresh_free(&mut self.chooser, &mut self.chooser_seen, index, &lane.table);
        }
        // Full for this write: a lane down to its reserve whose open zone
        // cannot take it (rare: the only lanes asked at every write).
        let away = self.lanes_away as DeviceMask;
        let (mut exclude, mut full_place) = (away, None);
        let mut tight = self.lanes_tight & !self.lanes_away;
        while tight != 0 {
            let index = tight.trailing_zeros() as usize;
            tight &= tight - 1;
            if self.lanes[index].table.would_open(slot, blocks) {
                exclude |= 1 << index;
                full_place.get_or_insert(self.lanes[index].device);
            }
        }
        #[cfg(debug_assertions)]
        self.check_lane_view(away, exclude, full_place, &full);
        let mut chosen = [0u8; COPIES_MAX];
        let result = self.chooser.choose(blocks, exclude, &mut chosen[..copies]);
        // The chooser charged the lanes it chose: ask their free blocks
        // again next time, whether or not this write takes them.
        for &lane in &chosen[..copies] {
            self.chooser_seen[usize::from(lane)] = Stamp::NONE;
            self.lanes_changed.fetch_or(1 << lane, Ordering::Relaxed);
        }
        let taken = match result {
            Ok(()) => copies,
            Err(Short { available, .. }) if available != 0 => {
                let present = available.count_ones() as usize;
                self.chooser.choose(blocks, exclude, &mut chosen[..present]).expect("as many as available");
                for &lane in &chosen[..present] {
                    self.chooser_seen[usize::from(lane)] = Stamp::NONE;
                    self.lanes_changed.fetch_or(1 << lane, Ordering::Relaxed);
                }
                present
            }
            Err(_) => match full_place {
                Some(place) => return Err(Error::NoSpace(Full::Data { place })),
                None => return Err(Error::NoDevices),
            },
        };
        // The copies no lane in use can take go to lanes whose device is
        // away, recorded missing; a full lane takes none.
        let mut away_lanes = (0..self.lanes.len()).filter(|&lane| away & (1 << lane) != 0);
        for slot in &mut chosen[taken..copies] {
            match away_lanes.next() {
                Some(lane) => *slot = lane as u8,
                None => {
                    let place = full_place.expect("a lane left out is away or full");
                    return Err(Error::NoSpace(Full::Data { place }));
                }
            }
        }
        for (to, &from) in out.iter_mut().zip(&chosen[..copies]) {
            *to = usize::from(from);
        }
        Ok(copies)
    }

    /// The volume, each lane's table telling placement of its changes
    /// (see [`Volume::watch_lanes`]).
    pub(super) fn watching_lanes(mut self) -> Volume {
        self.watch_lanes();
        self
    }

    /// Each lane's table tells `lanes_changed` of its changes from now on
    /// ([`ZoneTable::watch`]), and placement looks at every lane anew at
    /// its next choice: after lanes are made, renumbered, or given new
    /// tables.
    pub(super) fn watch_lanes(&mut self) {
        for lane in 0..self.lanes.len() {
            self.watch_lane(lane);
        }
    }

    /// Lane `lane`'s table (new) tells `lanes_changed` of its changes from
    /// now on, and placement looks at every lane anew at its next choice.
    pub(super) fn watch_lane(&mut self, lane: usize) {
        self.lanes[lane].table.watch(self.lanes_changed.clone(), 1 << lane);
        self.lanes_moved();
    }

    /// Placement looks at every lane anew at its next choice: a device
    /// went or came, or the chooser's counts were dropped.
    pub(super) fn lanes_moved(&self) {
        self.lanes_changed.fetch_or(u32::MAX, Ordering::Relaxed);
    }

    /// Debug builds: the lanes as `choose_lanes` kept them (`away`,
    /// `exclude`, `full_place`) are what a pass over every lane finds, and
    /// the chooser has every lane in use's free blocks as they are now.
    #[cfg(debug_assertions)]
    fn check_lane_view(
        &self,
        away: DeviceMask,
        exclude: DeviceMask,
        full_place: Option<usize>,
        full: &impl Fn(&ZoneTable) -> bool,
    ) {
        let (mut seen_away, mut seen_exclude, mut seen_full) = (0 as DeviceMask, 0 as DeviceMask, None);
        for (index, lane) in self.lanes.iter().enumerate() {
            if self.devices[lane.device].is_none() {
                seen_away |= 1 << index;
            } else {
                assert_eq!(self.chooser_seen[index], lane.table.stamp(), "lane {index}'s free blocks are not current");
                if !full(&lane.table) {
                    continue;
                }
                seen_full.get_or_insert(lane.device);
            }
            seen_exclude |= 1 << index;
        }
        assert_eq!((away, exclude, full_place), (seen_away, seen_exclude, seen_full), "placement's view of the lanes");
    }

    /// One lane in use with room for `blocks` in `slot`, outside
    /// `holding` (the lanes that hold a copy of the extent already), for a
    /// copy that moves off its lane: chosen as a new extent's copies are.
    pub(super) fn choose_lane_for_copy(&mut self, blocks: u32, slot: Slot, holding: DeviceMask) -> Result<usize> {
        let (eligible, full_place) = self.copy_room(blocks, slot, holding);
        for (index, lane) in self.lanes.iter().enumerate() {
            if eligible & (1 << index) != 0 {
                refresh_free(&mut self.chooser, &mut self.chooser_seen, index, &lane.table);
            } else if self.devices[lane.device].is_none() {
                mark_away(&mut self.chooser, &mut self.chooser_seen, index);
            }
        }
        let mut chosen = [0u8; 1];
        match self.chooser.choose(blocks, !eligible, &mut chosen) {
            Ok(()) => {
                self.chooser_seen[usize::from(chosen[0])] = Stamp::NONE;
                Ok(usize::from(chosen[0]))
            }
            Err(_) => Err(no_room(full_place)),
        }
    }

    /// After a write into `zone` failed, the zone's write pointer no longer
    /// stands where the next allocation in it would write: retire it from
    /// `slot` (it is finished once idle, see `process_retiring`), so that
    /// the next write goes to a fresh zone instead of failing with Zone
    /// Invalid Write. What was committed in it stays readable.
    pub(super) fn abandon_zone(&mut self, lane: usize, slot: Slot, zone: u32) {
        if !self.lane_is_zoned(lane) {
            return;
        }
        let table = &mut self.lanes[lane].table;
        if table.open_zone(slot) == Some(zone) {
            if let Some(retired) = table.retire_slot(slot) {
                log::warn!("lane {lane} zone {zone}: a write failed; the zone is retired");
                self.retiring.push((lane, retired.zone));
            }
        }
    }

    /// Allocates `blocks` in `lane` for `slot`, keeping within the
    /// device's open and active zone limits: when a new zone is needed and
    /// the device is at a limit, the slot's old zone is retired first and
    /// its writes drained and finished.
    pub(super) fn place(&mut self, lane: usize, slot: Slot, blocks: u32) -> Result<(u32, u32)> {
        let device = self.lanes[lane].device;
        if self.lanes[lane].table.would_open(slot, blocks) && self.over_limits(device, slot) {
            if let Some(retired) = self.lanes[lane].table.retire_slot(slot) {
                self.retiring.push((lane, retired.zone));
            }
            let deadline = Instant::now() + self.options.timeout;
            loop {
                self.process_retiring()?;
                if !self.over_limits(device, slot) {
                    break;
                }
                if self.retiring.is_empty() {
                    return Err(Error::InvalidConfig(format!(
                        "namespace {}: no zone to retire within its open/active limits",
                        self.dev(device).ns.nsid()
                    )));
                }
                self.poll_devices();
                if Instant::now() > deadline {
                    return Err(Error::Timeout { what: "an active zone to retire" });
                }
            }
        }
        let placement = match self.lanes[lane].table.allocate(slot, blocks) {
            Ok(placement) => placement,
            Err(PlaceError::NoSpace) => return Err(Error::NoSpace(Full::Data { place: device })),
            Err(PlaceError::TooLarge) => {
                return Err(Error::InvalidArgument(format!("{blocks} blocks exceed a zone")));
            }
        };
        // Retired zones are finished once their writes, including the one
        // about to be submitted here, complete (see `poll`). The zone this
        // placement retired waits until that write is in flight (see
        // `release_held_zone`): a poll before it, say for a buffer, would
        // otherwise finish or seal the zone under it.
        for Retired { zone, .. } in placement.retired.into_iter().flatten() {
            if zone == placement.zone {
                debug_assert!(self.held_zone.is_none(), "a zone held from an earlier placement");
                self.held_zone = Some((lane, zone));
            } else {
                self.retiring.push((lane, zone));
            }
        }
        Ok((placement.zone, placement.offset))
    }

    /// The zone the last placement retired goes to the retiring list, once
    /// its write is in flight (or written, or failed).
    pub(super) fn release_held_zone(&mut self) {
        if let Some(held) = self.held_zone.take() {
            self.retiring.push(held);
        }
    }

    /// Whether opening one more zone for `slot` on `device` would pass its
    /// limits. Active: every zone the lanes hold, plus the metadata zone.
    /// Open: the streams' zones plus one for metadata or reclaim, which
    /// take turns (each is closed when its work is done).
    pub(super) fn over_limits(&self, device: usize, slot: Slot) -> bool {
        let Some((open_limit, active_limit)) = self.zone_limits[device] else { return false };
        let lanes = self.lanes.iter().filter(|l| l.device == device);
        let active: u32 = lanes.clone().map(|l| l.table.active_zones()).sum();
        let reclaim_held = lanes.filter(|l| l.table.open_zone(Slot::Reclaim).is_some()).count() as u32;
        let meta = super::meta_copies_on(self.superblock.devices.len(), device);
        let streams_active = active - reclaim_held;
        let open_after = match slot {
            Slot::Stream(_) => streams_active + 1 + 1,
            Slot::Reclaim => streams_active + 1,
        };
        active + meta + 1 > active_limit || open_after > open_limit
    }

    /// Finishes (or just deactivates) retired zones whose writes are done.
    pub(super) fn process_retiring(&mut self) -> Result<()> {
        let mut index = 0;
        while index < self.retiring.len() {
            let (lane, zone) = self.retiring[index];
            let entry = *self.lanes[lane].table.zone(zone);
            // A write whose command here is done may still wait on its
            // other copy, and only a finished write puts its extent's
            // checksums where the zone's area is made from: its seal waits.
            if entry.inflight > 0 || (self.area && self.unfinished_write_in(lane, zone)) {
                index += 1;
                continue;
            }
            self.retiring.swap_remove(index);
            let device = self.lanes[lane].device;
            if self.devices[device].is_none() {
                continue;
            }
            // Sealing writes to the zone: open on the device, whatever the
            // table says (a zone left open before a reopen is not active).
            let mut open_on_device = entry.active;
            if entry.usage == ZoneUse::Full && self.area {
                match self.seal_zone(lane, zone) {
                    Ok(wrote) => open_on_device |= wrote,
                    Err(error) => {
                        if self.absorb(device, Failed::Write, &error) {
                            continue;
                        }
                        open_on_device = true;
                        self.stats.area_writes_failed += 1;
                        log::warn!(
                            "lane {lane} zone {zone}: its checksum area was not written ({error}); its extents keep \
                             their checksums in the map"
                        );
                    }
                }
            }
            let capacity = self.dev(device).zones[zone as usize].capacity_blocks;
            if entry.usage == ZoneUse::Full
                && self.dev(device).is_zoned()
                && open_on_device
                && self.lanes[lane].written[zone as usize] < capacity
            {
                if let Err(error) = self.dev_mut(device).zone_action(zone, ZoneSendAction::Finish) {
                    if self.absorb(device, Failed::Write, &error) {
                        continue;
                    }
                    return Err(error);
                }
                self.stats.zones_finished += 1;
            }
            self.lanes[lane].table.deactivate(zone);
        }
        Ok(())
    }

    /// The lanes in use with room for `blocks` in `slot`, outside
    /// `holding`, one bit each: those [`Volume::choose_lane_for_copy`]
    /// chooses among. None is the same error it returns.
    pub(super) fn lanes_for_copy(&self, blocks: u32, slot: Slot, holding: DeviceMask) -> Result<DeviceMask> {
        match self.copy_room(blocks, slot, holding) {
            (0, full_place) => Err(no_room(full_place)),
            (eligible, _) => Ok(eligible),
        }
    }

    /// The lanes in use with room for `blocks` in `slot`, outside
    /// `holding`, and the first device found full.
    fn copy_room(&self, blocks: u32, slot: Slot, holding: DeviceMask) -> (DeviceMask, Option<usize>) {
        let reserve = self.superblock.reserve_zones as usize;
        let (mut eligible, mut full_place) = (0 as DeviceMask, None);
        for (index, lane) in self.lanes.iter().enumerate() {
            if holding & (1 << index) != 0 || self.devices[lane.device].is_none() {
                continue;
            }
            if lane.table.would_open(slot, blocks) && lane.table.empty_zones() <= reserve {
                full_place.get_or_insert(lane.device);
            } else {
                eligible |= 1 << index;
            }
        }
        (eligible, full_place)
    }

    /// Whether a write not yet finished (a new extent's, or a resilver's
    /// copy) has a copy in zone `zone` of lane `lane`.
    pub(super) fn unfinished_write_in(&self, lane: usize, zone: u32) -> bool {
        self.writes
            .iter()
            .flatten()
            .any(|pending| pending.copy_in(lane).is_some_and(|copy| pending.zones[copy] == zone))
    }
}

/// Tells the chooser lane `index`'s free blocks, unless its table has not
/// changed since it last did (`seen`): a write asks only the lanes that
/// changed, not every lane of the pool.
fn refresh_free(chooser: &mut Chooser, seen: &mut [Stamp; MAX_DEVICES], index: usize, table: &ZoneTable) {
    let stamp = table.stamp();
    if seen[index] != stamp {
        chooser.set_free(index, table.free_blocks());
        seen[index] = stamp;
    }
}

/// Tells the chooser a lane whose device is away has no room, once: it is
/// masked out of every choice anyway, and its last count would otherwise
/// keep it among the roomiest, sending every choice to the pass over the
/// places. When the device is back its table's stamp differs, and the
/// count is asked again.
fn mark_away(chooser: &mut Chooser, seen: &mut [Stamp; MAX_DEVICES], index: usize) {
    if seen[index] != Stamp::AWAY {
        chooser.set_free(index, 0);
        seen[index] = Stamp::AWAY;
    }
}

/// No lane can take a copy: a full device named, else none in use.
fn no_room(full_place: Option<usize>) -> Error {
    match full_place {
        Some(place) => Error::NoSpace(Full::Data { place }),
        None => Error::NoDevices,
    }
}

/// The bits of lanes `0..lanes`.
fn lane_bits(lanes: usize) -> u32 {
    if lanes >= 32 {
        u32::MAX
    } else {
        (1u32 << lanes) - 1
    }
}
