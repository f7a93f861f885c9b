//! Placement: the zone table of one lane, with O(1) allocation.
//!
//! The btrfs zoned allocator that shaped this crate walked every full
//! block group from a stale hint before it found space, so sequential
//! write slowed from 910 to 420 MiB/s as the disk filled (fixed upstream
//! by taking the hint from the active block groups, commit 02444f2ac26e).
//! Here full zones are never visited when placing: each stream has its one
//! open zone, empty zones wait in a FIFO, and full zones sit in a set
//! ordered by valid blocks that only reclaim reads. An allocation looks at
//! the stream's open zone and, when that has no room, pops one empty zone:
//! constant work however full the volume is.
//!
//! Units are 4 KiB volume blocks; offsets are relative to the zone start.
//! The table is pure bookkeeping: the [`crate::Volume`] performs the device
//! commands its answers call for (finish a retired zone, reset an empty
//! one).

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Who may allocate from an open zone: a write stream (a lifetime class,
/// as ZenFS's write-lifetime hints) or reclaim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// Stream `n`, `0..streams`.
    Stream(u8),
    /// Relocation by reclaim and by scrub repair.
    Reclaim,
}

/// What a zone of this lane holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneUse {
    /// The zone belongs to another lane, or to metadata.
    NotOwned,
    /// Nothing allocated; in the empty FIFO.
    Empty,
    /// A slot's current zone.
    Open(Slot),
    /// No more allocation: filled, or retired with room left below the
    /// finish threshold. A reclaim candidate.
    Full,
    /// Worn out: the device made it Read Only or Offline. Never allocated
    /// from or reset again; its live extents stay where they are (readable
    /// while Read Only) until reclaim moves them off.
    Worn,
}

/// One zone's accounting, in 4 KiB blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneEntry {
    /// Usable blocks (the zone capacity, which may be below the zone size).
    pub capacity: u32,
    /// Blocks handed out by placement.
    pub allocated: u32,
    /// Blocks of live extents.
    pub valid: u32,
    /// Writes submitted and not yet completed.
    pub inflight: u32,
    /// The zone counts against the device's active-zone limit.
    pub active: bool,
    /// Where the zone is in its life (empty, open, full, or not this lane's).
    pub usage: ZoneUse,
}

/// Where an allocation went, and what placement retired to make room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The zone the blocks were placed in.
    pub zone: u32,
    /// First block, from the zone start.
    pub offset: u32,
    /// A zone that stopped taking allocations during this call, with the
    /// blocks it leaves unused (finish it on the device when nonzero and
    /// its writes have completed).
    pub retired: [Option<Retired>; 2],
}

/// A zone placement stopped using.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retired {
    /// The retired zone.
    pub zone: u32,
    /// Blocks of its capacity that will never be written (finish the zone on
    /// the device when nonzero).
    pub unused_blocks: u32,
}

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlaceError {
    /// No empty zone is left (beyond the reclaim reserve, for streams).
    NoSpace,
    /// More blocks than a zone holds.
    TooLarge,
}

/// The zone table of one lane. See the [module documentation](self).
#[derive(Clone, Debug)]
pub struct ZoneTable {
    zones: Vec<ZoneEntry>,
    empty: VecDeque<u32>,
    /// Open zone per stream, then the reclaim slot's.
    open: Vec<Option<u32>>,
    /// Full zones by (valid blocks, zone).
    full: BTreeSet<(u32, u32)>,
    /// Empty zones kept back for reclaim.
    reserve: usize,
    /// Retire an open zone once fewer blocks than this remain.
    finish_threshold: u32,
    active: u32,
    /// Zones worn out (Read Only or Offline on the device).
    worn: Vec<u32>,
    /// Blocks of the empty zones (kept with `empty`).
    empty_blocks: u64,
    /// See [`ZoneTable::stamp`].
    stamp: Own,
    /// See [`ZoneTable::watch`].
    notify: Notify,
    /// Zones kept from taking data ([`ZoneTable::withhold`]): each goes out
    /// of the lane once empty.
    withheld: Vec<u32>,
}

/// Where a table says that it changed ([`ZoneTable::watch`]): a bit in a
/// mask its volume shares. A copy of the table says nothing.
#[derive(Debug, Default)]
struct Notify(Option<(Arc<AtomicU32>, u32)>);

impl Clone for Notify {
    fn clone(&self) -> Notify {
        Notify(None)
    }
}

/// A table's stamp, fresh in every copy of the table.
#[derive(Debug)]
struct Own(Stamp);

impl Clone for Own {
    fn clone(&self) -> Own {
        Own(Stamp::fresh())
    }
}

/// Which table, and how many changes to what [`ZoneTable::free_blocks`]
/// counts it has seen: equal stamps, equal free blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    table: u64,
    changes: u64,
}

impl Stamp {
    /// A stamp no table has.
    pub const NONE: Stamp = Stamp { table: 0, changes: 0 };
    /// Another no table has: placement's mark for a lane whose device is
    /// away (told the chooser as no room).
    pub const AWAY: Stamp = Stamp { table: 0, changes: 1 };

    fn fresh() -> Stamp {
        use std::sync::atomic::{AtomicU64, Ordering};
        static TABLES: AtomicU64 = AtomicU64::new(1);
        Stamp { table: TABLES.fetch_add(1, Ordering::Relaxed), changes: 0 }
    }
}

impl ZoneTable {
    /// A table over `capacities.len()` zones; `owned(zone)` says which
    /// belong to this lane (they start empty). `streams` slots plus the
    /// reclaim slot; `reserve` empty zones are kept for reclaim.
    pub fn new(capacities: &[u32], owned: impl Fn(u32) -> bool, streams: u8, reserve: usize) -> Self {
        let mut zones = Vec::with_capacity(capacities.len());
        let mut empty = VecDeque::with_capacity(capacities.len());
        for (index, &capacity) in capacities.iter().enumerate() {
            let index = index as u32;
            let usage = if owned(index) && capacity > 0 { ZoneUse::Empty } else { ZoneUse::NotOwned };
            if usage == ZoneUse::Empty {
                empty.push_back(index);
            }
            zones.push(ZoneEntry { capacity, allocated: 0, valid: 0, inflight: 0, active: false, usage });
        }
        let empty_blocks = empty.iter().map(|&z| u64::from(zones[z as usize].capacity)).sum();
        ZoneTable {
            empty_blocks,
            zones,
            empty,
            open: vec![None; usize::from(streams) + 1],
            full: BTreeSet::new(),
            reserve,
            finish_threshold: 0,
            active: 0,
            worn: Vec::new(),
            stamp: Own(Stamp::fresh()),
            notify: Notify::default(),
            withheld: Vec::new(),
        }
    }

    /// Changes whenever [`ZoneTable::free_blocks`] may have (and differs
    /// between tables, a copy included once either changes): placement
    /// asks a device's free blocks again only when its stamp moved, so
    /// that a write costs the same whatever the devices it is not on.
    pub fn stamp(&self) -> Stamp {
        self.stamp.0
    }

    /// What `free_blocks` counts changes.
    fn changed(&mut self) {
        self.stamp.0.changes += 1;
        if let Some((mask, bit)) = &self.notify.0 {
            mask.fetch_or(*bit, Ordering::Relaxed);
        }
    }

    /// From now on every change of the stamp ([`ZoneTable::stamp`]) also
    /// sets `bit` in `mask`: so that placement, which keeps each lane's
    /// free blocks and whether it is down to its reserve, looks again at
    /// the lanes that changed alone, not at every lane of a pool at every
    /// write. A copy of the table does not.
    pub fn watch(&mut self, mask: Arc<AtomicU32>, bit: u32) {
        self.notify = Notify(Some((mask, bit)));
    }

    /// Retire a zone as soon as fewer than `blocks` remain in it.
    pub fn set_finish_threshold(&mut self, blocks: u32) {
        self.finish_threshold = blocks;
    }

    /// The accounting of zone `zone`. Panics if `zone` is out of range.
    pub fn zone(&self, zone: u32) -> &ZoneEntry {
        &self.zones[zone as usize]
    }

    /// Zones on the namespace, this lane's or not.
    pub fn zone_count(&self) -> u32 {
        self.zones.len() as u32
    }

    /// Empty zones this lane could open, the reclaim reserve included.
    pub fn empty_zones(&self) -> usize {
        self.empty.len()
    }

    /// Zones counting against the device's active limit.
    pub fn active_zones(&self) -> u32 {
        self.active
    }

    /// Blocks all owned zones can hold.
    pub fn capacity_blocks(&self) -> u64 {
        self.zones.iter().filter(|z| z.usage != ZoneUse::NotOwned).map(|z| u64::from(z.capacity)).sum()
    }

    /// How many allocations of `blocks` for `slot` succeed in a row before
    /// one fails for want of space, with no zone coming back (no free and
    /// reclaim) in between: those the slot's open zone still takes, then
    /// those of each empty zone it may open, in the order it opens them.
    /// O(zones): for reports and checks, never for placement.
    pub fn room(&self, slot: Slot, blocks: u32) -> u64 {
        assert!(blocks > 0, "empty allocation");
        // A zone with `left` blocks takes one allocation if they fit, and
        // one more each time at least `blocks` are left that do not fall
        // below the finish threshold (`allocate` retires it then).
        let fits = |left: u32| {
            let first = u64::from(left >= blocks);
            let keep = blocks.max(self.finish_threshold).max(1);
            first + if left >= keep { u64::from((left - keep) / blocks) } else { 0 }
        };
        let open = self.open_zone(slot).map_or(0, |zone| {
            let entry = &self.zones[zone as usize];
            fits(entry.capacity - entry.allocated)
        });
        let reserve = if slot == Slot::Reclaim { 0 } else { self.reserve };
        let usable = self.empty.len().saturating_sub(reserve);
        // `allocate` fails, rather than skipping, at a zone too small.
        let empty = self.empty.iter().take(usable).map(|&zone| self.zones[zone as usize].capacity);
        open + empty.take_while(|&capacity| capacity >= blocks).map(fits).sum::<u64>()
    }

    /// Blocks the lane holds when full: its zones' capacity, but for the
    /// empty zones placement keeps back for reclaim (the largest, so the
    /// figure is never more than writes find) and for zones worn out
    /// (whose live blocks still count).
    pub fn usable_blocks(&self) -> u64 {
        let mut owned = Vec::new();
        let mut blocks = 0;
        for entry in &self.zones {
            match entry.usage {
                ZoneUse::NotOwned => {}
                ZoneUse::Worn => blocks += u64::from(entry.valid),
                _ => owned.push(entry.capacity),
            }
        }
        owned.sort_unstable();
        let kept = owned.len().saturating_sub(self.reserve);
        blocks + owned[..kept].iter().map(|&c| u64::from(c)).sum::<u64>()
    }

    /// Blocks the streams can still take, about: the empty zones less the
    /// reclaim reserve, and what the streams' open zones have left. O(1)
    /// in the zones: what placement weighs a lane by (`crate::chooser`).
    pub fn free_blocks(&self) -> u64 {
        let largest = self.empty.front().map_or(0, |&z| u64::from(self.zones[z as usize].capacity));
        let empty = self.empty_blocks.saturating_sub(self.reserve as u64 * largest);
        let streams = &self.open[..self.open.len() - 1];
        let open = streams.iter().flatten().map(|&z| {
            let entry = &self.zones[z as usize];
            u64::from(entry.capacity - entry.allocated)
        });
        empty + open.sum::<u64>()
    }

    /// Blocks of live extents.
    pub fn valid_blocks(&self) -> u64 {
        self.zones.iter().map(|z| u64::from(z.valid)).sum()
    }

    /// The slot's open zone.
    pub fn open_zone(&self, slot: Slot) -> Option<u32> {
        self.open[self.slot_index(slot)]
    }

    fn slot_index(&self, slot: Slot) -> usize {
        match slot {
            Slot::Stream(stream) => {
                assert!(usize::from(stream) + 1 < self.open.len(), "stream {stream} out of range");
                usize::from(stream)
            }
            Slot::Reclaim => self.open.len() - 1,
        }
    }

    /// Whether allocating `blocks` for `slot` would open a new zone.
    pub fn would_open(&self, slot: Slot, blocks: u32) -> bool {
        match self.open[self.slot_index(slot)] {
            Some(zone) => {
                let entry = &self.zones[zone as usize];
                entry.capacity - entry.allocated < blocks
            }
            None => true,
        }
    }

    /// Places `blocks` for `slot`: in its open zone when they fit, else in
    /// a fresh empty zone (retiring the old one). Constant work.
    pub fn allocate(&mut self, slot: Slot, blocks: u32) -> Result<Placement, PlaceError> {
        self.changed();
        assert!(blocks > 0, "empty allocation");
        let index = self.slot_index(slot);
        let mut retired = [None, None];
        let zone = match self.open[index] {
            Some(zone) if self.zones[zone as usize].capacity - self.zones[zone as usize].allocated >= blocks => zone,
            current => {
                let reserve = if slot == Slot::Reclaim { 0 } else { self.reserve };
                let Some(&fresh) = self.empty.front() else {
                    return Err(PlaceError::NoSpace);
                };
                if blocks > self.zones[fresh as usize].capacity {
                    return Err(PlaceError::TooLarge);
                }
                if self.empty.len() <= reserve {
                    return Err(PlaceError::NoSpace);
                }
                self.empty.pop_front();
                self.empty_blocks -= u64::from(self.zones[fresh as usize].capacity);
                if let Some(old) = current {
                    retired[0] = Some(self.retire(old));
                }
                let entry = &mut self.zones[fresh as usize];
                debug_assert_eq!(entry.usage, ZoneUse::Empty);
                debug_assert_eq!((entry.allocated, entry.valid, entry.inflight), (0, 0, 0));
                entry.usage = ZoneUse::Open(slot);
                entry.active = true;
                self.active += 1;
                self.open[index] = Some(fresh);
                fresh
            }
        };
        let entry = &mut self.zones[zone as usize];
        let offset = entry.allocated;
        entry.allocated += blocks;
        let left = entry.capacity - entry.allocated;
        if left == 0 || left < self.finish_threshold {
            retired[1] = Some(self.retire(zone));
        }
        Ok(Placement { zone, offset, retired })
    }

    /// Stops allocating from the slot's open zone, if it has one.
    pub fn retire_slot(&mut self, slot: Slot) -> Option<Retired> {
        let zone = self.open[self.slot_index(slot)]?;
        Some(self.retire(zone))
    }

    /// Stops allocating from `zone` (a slot's open zone).
    fn retire(&mut self, zone: u32) -> Retired {
        self.changed();
        let entry = &mut self.zones[zone as usize];
        let ZoneUse::Open(slot) = entry.usage else { panic!("retiring zone {zone} in state {:?}", entry.usage) };
        entry.usage = ZoneUse::Full;
        let unused_blocks = entry.capacity - entry.allocated;
        let valid = entry.valid;
        let index = self.slot_index(slot);
        debug_assert_eq!(self.open[index], Some(zone));
        self.open[index] = None;
        self.full.insert((valid, zone));
        Retired { zone, unused_blocks }
    }

    /// Retires every open zone (at shutdown, or after a reopen found
    /// zones partly written).
    pub fn retire_all(&mut self) -> Vec<Retired> {
        let open: Vec<u32> = self.open.iter().flatten().copied().collect();
        open.into_iter().map(|zone| self.retire(zone)).collect()
    }

    /// A write to `zone` was submitted.
    pub fn write_submitted(&mut self, zone: u32) {
        self.zones[zone as usize].inflight += 1;
    }

    /// A write to `zone` completed (`Ok` or not).
    pub fn write_completed(&mut self, zone: u32) {
        let entry = &mut self.zones[zone as usize];
        assert!(entry.inflight > 0, "completion without a write in flight in zone {zone}");
        entry.inflight -= 1;
    }

    /// The zone no longer counts against the active limit: it was finished
    /// on the device, or every block up to its capacity was written.
    pub fn deactivate(&mut self, zone: u32) {
        let entry = &mut self.zones[zone as usize];
        if entry.active {
            entry.active = false;
            self.active -= 1;
        }
    }

    /// `blocks` of `zone` became live.
    pub fn add_valid(&mut self, zone: u32, blocks: u32) {
        self.change_valid(zone, |valid| valid + blocks);
    }

    /// `blocks` of `zone` stopped being live (freed or relocated).
    pub fn remove_valid(&mut self, zone: u32, blocks: u32) {
        self.change_valid(zone, |valid| {
            assert!(valid >= blocks, "zone {zone}: removing {blocks} of {valid} valid blocks");
            valid - blocks
        });
    }

    fn change_valid(&mut self, zone: u32, change: impl FnOnce(u32) -> u32) {
        let entry = &mut self.zones[zone as usize];
        let old = entry.valid;
        entry.valid = change(old);
        assert!(entry.valid <= entry.allocated, "zone {zone}: {} valid of {} allocated", entry.valid, entry.allocated);
        if entry.usage == ZoneUse::Full {
            let new = entry.valid;
            self.full.remove(&(old, zone));
            self.full.insert((new, zone));
        }
    }

    /// Full zones with nothing live and nothing in flight: reset them (once
    /// the frees and moves that emptied them are committed).
    pub fn dead_zones(&self) -> Vec<u32> {
        self.full
            .range((0, 0)..(1, 0))
            .map(|&(_, zone)| zone)
            .filter(|&zone| self.zones[zone as usize].inflight == 0)
            .collect()
    }

    /// The full zone with the fewest live blocks, if it has some and at
    /// most `max_valid_ratio` of its capacity is live, and no write is in
    /// flight to it: the next zone to reclaim.
    pub fn victim(&self, max_valid_ratio: f64) -> Option<u32> {
        self.full.range((1, 0)..).find_map(|&(valid, zone)| {
            let entry = &self.zones[zone as usize];
            if f64::from(valid) > max_valid_ratio * f64::from(entry.capacity) {
                return Some(None);
            }
            (entry.inflight == 0).then_some(Some(zone))
        })?
    }

    /// Takes `zone` out of use for good: the device made it Read Only or
    /// Offline. Its live count stays, for reclaim to move off.
    pub fn wear_out(&mut self, zone: u32) {
        self.changed();
        let entry = &mut self.zones[zone as usize];
        assert_ne!(entry.usage, ZoneUse::NotOwned, "wearing out zone {zone} of another lane");
        match entry.usage {
            ZoneUse::Full => {
                self.full.remove(&(entry.valid, zone));
            }
            ZoneUse::Empty => self.forget_empty(zone),
            ZoneUse::Open(slot) => {
                let index = self.slot_index(slot);
                self.open[index] = None;
            }
            ZoneUse::Worn | ZoneUse::NotOwned => {}
        }
        let entry = &mut self.zones[zone as usize];
        if entry.active {
            entry.active = false;
            self.active -= 1;
        }
        entry.allocated = entry.capacity.max(entry.allocated);
        if entry.usage != ZoneUse::Worn {
            entry.usage = ZoneUse::Worn;
            self.worn.push(zone);
        }
    }

    /// Takes empty zone `zone` off the empty list.
    fn forget_empty(&mut self, zone: u32) {
        self.changed();
        let before = self.empty.len();
        self.empty.retain(|&z| z != zone);
        if self.empty.len() < before {
            self.empty_blocks -= u64::from(self.zones[zone as usize].capacity);
        }
    }

    /// Zones worn out so far.
    pub fn worn_zones(&self) -> &[u32] {
        &self.worn
    }

    /// Gives an empty zone away for good (to metadata whose zone wore
    /// out): it is no longer this lane's.
    pub fn take_out(&mut self, zone: u32) {
        self.changed();
        let entry = &mut self.zones[zone as usize];
        assert_eq!(entry.usage, ZoneUse::Empty, "taking out zone {zone}");
        entry.usage = ZoneUse::NotOwned;
        self.forget_empty(zone);
    }

    /// Keeps the lane's zones in `zones` from taking any more data, for
    /// another use (a metadata copy handed to this device): the empty ones
    /// leave the lane now, a slot's open zone is retired (returned, for the
    /// caller to finish once idle), and the full ones leave once emptied
    /// and reset ([`ZoneTable::reset`]). Worn-out zones and zones not the
    /// lane's are left alone.
    pub fn withhold(&mut self, zones: std::ops::Range<u32>) -> Vec<Retired> {
        let mut retired = Vec::new();
        for zone in zones.start..zones.end.min(self.zone_count()) {
            match self.zones[zone as usize].usage {
                ZoneUse::Empty => {
                    self.take_out(zone);
                    self.withheld.push(zone);
                }
                ZoneUse::Open(_) => {
                    retired.push(self.retire(zone));
                    self.withheld.push(zone);
                }
                ZoneUse::Full => self.withheld.push(zone),
                ZoneUse::Worn | ZoneUse::NotOwned => {}
            }
        }
        retired
    }

    /// Withheld zones still the lane's (holding data, or not yet reset).
    pub fn withheld_in_use(&self) -> Vec<u32> {
        self.withheld.iter().copied().filter(|&z| self.zones[z as usize].usage != ZoneUse::NotOwned).collect()
    }

    /// Gives the withheld zones that left the lane back to it, empty (the
    /// use they were kept for did not come).
    pub fn release_withheld(&mut self) {
        for zone in std::mem::take(&mut self.withheld) {
            if self.zones[zone as usize].usage == ZoneUse::NotOwned {
                self.take_in(zone);
            }
        }
    }

    /// Makes `zone`, not the lane's, an empty zone of the lane (its other
    /// use ended, and the device reset it).
    pub fn take_in(&mut self, zone: u32) {
        let entry = &mut self.zones[zone as usize];
        assert_eq!(entry.usage, ZoneUse::NotOwned, "taking in zone {zone}");
        if entry.capacity == 0 {
            return;
        }
        entry.usage = ZoneUse::Empty;
        entry.allocated = 0;
        self.empty_blocks += u64::from(entry.capacity);
        self.empty.push_back(zone);
        self.changed();
    }

    /// The withheld zones are no longer the lane's for good: they went to
    /// the use they were kept for.
    pub fn settle_withheld(&mut self) {
        debug_assert!(self.withheld_in_use().is_empty(), "settling withheld zones still in use");
        self.withheld.clear();
    }

    /// A worn-out zone that still holds live blocks, for reclaim to empty.
    pub fn worn_with_data(&self) -> Option<u32> {
        self.worn.iter().copied().find(|&z| {
            let entry = &self.zones[z as usize];
            entry.valid > 0 && entry.inflight == 0
        })
    }

    /// Makes a full zone with nothing live empty again (after the device
    /// reset it).
    pub fn reset(&mut self, zone: u32) {
        self.changed();
        let entry = &mut self.zones[zone as usize];
        assert_eq!(entry.usage, ZoneUse::Full, "resetting zone {zone}");
        assert_eq!((entry.valid, entry.inflight), (0, 0), "resetting zone {zone} with live data");
        self.full.remove(&(0, zone));
        if entry.active {
            entry.active = false;
            self.active -= 1;
        }
        entry.allocated = 0;
        if self.withheld.contains(&zone) {
            entry.usage = ZoneUse::NotOwned;
            return;
        }
        entry.usage = ZoneUse::Empty;
        self.empty_blocks += u64::from(entry.capacity);
        self.empty.push_back(zone);
    }

    /// Rebuilds a zone's state at open: `allocated` blocks used (written,
    /// live or not), `valid` live. A zone with blocks allocated is Full
    /// (reopened volumes do not append to old zones); the caller finishes
    /// it on the device when it is not full there.
    pub fn restore(&mut self, zone: u32, allocated: u32, valid: u32) {
        self.changed();
        let entry = &mut self.zones[zone as usize];
        assert_eq!(entry.usage, ZoneUse::Empty, "restoring zone {zone} twice");
        assert!(valid <= allocated && allocated <= entry.capacity);
        if allocated == 0 {
            return;
        }
        entry.allocated = allocated;
        entry.valid = valid;
        entry.usage = ZoneUse::Full;
        self.full.insert((valid, zone));
        self.forget_empty(zone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(zones: usize, capacity: u32, reserve: usize) -> ZoneTable {
        ZoneTable::new(&vec![capacity; zones], |_| true, 2, reserve)
    }

    #[test]
    fn withheld_zones_take_no_data_and_leave_once_emptied_or_come_back_when_released() {
        let mut t = table(8, 16, 1);
        // Zone 0 full with live data, zone 1 open, the rest empty.
        let first = t.allocate(Slot::Stream(0), 16).expect("zone 0");
        t.add_valid(first.zone, 16);
        let open = t.allocate(Slot::Stream(0), 4).expect("zone 1");
        assert_eq!((first.zone, open.zone), (0, 1));
        t.add_valid(1, 4);
        let free = t.free_blocks();
        let retired = t.withhold(0..4);
        assert_eq!(retired.iter().map(|r| r.zone).collect::<Vec<_>>(), vec![1], "the open zone is retired");
        assert_eq!(t.withheld_in_use(), vec![0, 1], "the zones holding data are still the lane's");
        assert_eq!(t.free_blocks(), free - 2 * 16 - 12, "two empty zones and the open one's rest leave");
        for _ in 0..8 {
            if let Ok(placed) = t.allocate(Slot::Stream(1), 16) {
                assert!(placed.zone >= 4, "zone {} was withheld", placed.zone);
            }
        }
        // Emptied and reset, a withheld zone leaves the lane.
        t.remove_valid(1, 4);
        t.deactivate(1);
        t.reset(1);
        assert_eq!(t.zone(1).usage, ZoneUse::NotOwned);
        assert_eq!(t.withheld_in_use(), vec![0]);
        // Released, the zones that left come back empty; zone 0 stays full.
        t.release_withheld();
        assert_eq!([1, 2, 3].map(|z| t.zone(z).usage), [ZoneUse::Empty; 3]);
        assert_eq!(t.zone(0).usage, ZoneUse::Full);
        t.remove_valid(0, 16);
        t.deactivate(0);
        t.reset(0);
        assert_eq!(t.zone(0).usage, ZoneUse::Empty, "no longer withheld");
    }

    #[test]
    fn free_blocks_change_only_with_the_stamp_and_a_copy_has_its_own() {
        let mut t = table(8, 16, 1);
        let mut state = 0x5eedu64;
        let mut next = |n: u64| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n
        };
        for step in 0..2000 {
            let (stamp, free) = (t.stamp(), t.free_blocks());
            let zone = next(8) as u32;
            match next(9) {
                0..=3 => {
                    let slot = if next(2) == 0 { Slot::Stream(next(2) as u8) } else { Slot::Reclaim };
                    if let Ok(placed) = t.allocate(slot, 1 + next(6) as u32) {
                        t.write_submitted(placed.zone);
                        t.write_completed(placed.zone);
                        t.add_valid(placed.zone, 1);
                    }
                }
                4 => drop(t.retire_slot(Slot::Stream(next(2) as u8))),
                5 if t.zone(zone).usage == ZoneUse::Full && t.zone(zone).inflight == 0 && t.zone(zone).valid == 0 => {
                    t.deactivate(zone);
                    t.reset(zone);
                }
                6 if t.zone(zone).valid > 0 => t.remove_valid(zone, 1),
                7 if t.zone(zone).usage != ZoneUse::NotOwned => t.wear_out(zone),
                _ => {}
            }
            if t.stamp() == stamp {
                assert_eq!(t.free_blocks(), free, "step {step}: free blocks moved under the same stamp");
            }
        }
        let copy = t.clone();
        assert_ne!(copy.stamp(), t.stamp(), "a copy changes on its own");
    }

    #[test]
    fn a_worn_zone_is_never_allocated_or_reset_and_keeps_its_live_count() {
        let mut t = table(4, 10, 0);
        let a = t.allocate(Slot::Stream(0), 4).unwrap();
        t.add_valid(a.zone, 4);
        t.wear_out(a.zone);
        assert_eq!(t.zone(a.zone).usage, ZoneUse::Worn);
        assert_eq!(t.worn_with_data(), Some(a.zone));
        let b = t.allocate(Slot::Stream(0), 4).unwrap();
        assert_ne!(b.zone, a.zone, "a worn zone takes no allocation");
        t.wear_out(3);
        assert_eq!(t.empty_zones(), 1, "an empty zone worn out leaves the FIFO");
        t.remove_valid(a.zone, 4);
        assert!(t.dead_zones().is_empty(), "a worn zone is never reset");
        assert_eq!(t.worn_with_data(), None);
        assert_eq!(t.worn_zones(), &[a.zone, 3]);
    }

    #[test]
    fn a_stream_fills_its_zone_then_takes_an_empty_one() {
        let mut t = table(4, 10, 1);
        let a = t.allocate(Slot::Stream(0), 4).unwrap();
        assert_eq!((a.zone, a.offset), (0, 0));
        let b = t.allocate(Slot::Stream(0), 4).unwrap();
        assert_eq!((b.zone, b.offset), (0, 4));
        // 2 left, 4 needed: zone 0 retires with 2 unused.
        let c = t.allocate(Slot::Stream(0), 4).unwrap();
        assert_eq!((c.zone, c.offset), (1, 0));
        assert_eq!(c.retired[0], Some(Retired { zone: 0, unused_blocks: 2 }));
        assert_eq!(t.zone(0).usage, ZoneUse::Full);
    }

    #[test]
    fn streams_get_separate_zones_and_extents_never_span() {
        let mut t = table(4, 10, 0);
        let a = t.allocate(Slot::Stream(0), 3).unwrap();
        let b = t.allocate(Slot::Stream(1), 3).unwrap();
        assert_ne!(a.zone, b.zone);
        assert_eq!(t.allocate(Slot::Stream(0), 11), Err(PlaceError::TooLarge));
    }

    #[test]
    fn room_is_how_many_allocations_succeed_in_a_row() {
        // Mixed capacities, thresholds, sizes and partly used open zones,
        // against the allocator itself.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % u64::from(n)) as u32
        };
        for _ in 0..2000 {
            let capacities: Vec<u32> = (0..1 + next(6)).map(|_| 1 + next(40)).collect();
            let mut t = ZoneTable::new(&capacities, |z| z != 0, 2, next(3) as usize);
            t.set_finish_threshold(next(12));
            for _ in 0..next(4) {
                let _ = t.allocate(Slot::Stream(next(2) as u8), 1 + next(8));
            }
            let (slot, blocks) = (if next(4) == 0 { Slot::Reclaim } else { Slot::Stream(0) }, 1 + next(12));
            let room = t.room(slot, blocks);
            let mut copy = t.clone();
            let mut done = 0;
            while copy.allocate(slot, blocks).is_ok() {
                done += 1;
            }
            assert_eq!(room, done, "{capacities:?}, {blocks} blocks for {slot:?}: {t:?}");
        }
    }

    #[test]
    fn usable_blocks_leave_out_the_reserve_and_what_worn_zones_cannot_take() {
        let mut t = ZoneTable::new(&[10, 12, 8, 12], |z| z != 0, 1, 1);
        assert_eq!(t.usable_blocks(), 8 + 12, "the largest empty zone kept back");
        let a = t.allocate(Slot::Stream(0), 5).unwrap();
        t.add_valid(a.zone, 3);
        t.wear_out(a.zone);
        assert_eq!(t.usable_blocks(), 3 + 8, "a worn zone's live blocks, and no more");
    }

    #[test]
    fn the_reserve_is_for_reclaim_only() {
        let mut t = table(2, 10, 1);
        t.allocate(Slot::Stream(0), 10).unwrap();
        assert_eq!(t.allocate(Slot::Stream(0), 1), Err(PlaceError::NoSpace));
        assert!(t.allocate(Slot::Reclaim, 1).is_ok());
    }

    #[test]
    fn finish_threshold_retires_early() {
        let mut t = table(3, 10, 0);
        t.set_finish_threshold(3);
        let a = t.allocate(Slot::Stream(0), 8).unwrap();
        assert_eq!(a.retired[1], Some(Retired { zone: 0, unused_blocks: 2 }));
        assert_eq!(t.open_zone(Slot::Stream(0)), None);
    }

    #[test]
    fn valid_counts_pick_victims_and_dead_zones() {
        let mut t = table(4, 10, 0);
        for _ in 0..3 {
            let p = t.allocate(Slot::Stream(0), 10).unwrap();
            t.add_valid(p.zone, 10);
        }
        t.remove_valid(0, 10);
        t.remove_valid(1, 7);
        assert_eq!(t.dead_zones(), vec![0]);
        assert_eq!(t.victim(0.5), Some(1));
        assert_eq!(t.victim(0.2), None);
        t.reset(0);
        assert_eq!(t.zone(0).usage, ZoneUse::Empty);
        assert_eq!(t.empty_zones(), 2);
    }

    #[test]
    fn full_zones_are_never_visited() {
        // Fill 99 of 100 zones, then allocate: the answer comes from the
        // empty FIFO's head, not a search.
        let mut t = table(100, 8, 0);
        for _ in 0..99 * 8 {
            t.allocate(Slot::Stream(0), 1).unwrap();
        }
        let p = t.allocate(Slot::Stream(1), 8).unwrap();
        assert_eq!(p.zone, 99);
        assert_eq!(t.allocate(Slot::Stream(1), 1), Err(PlaceError::NoSpace));
    }

    #[test]
    fn free_blocks_follow_every_change_of_the_empty_zones() {
        // Zones of 100, 60 and 80 blocks, one of 50 not owned; a reserve of
        // one (the largest empty zone at the front is taken as its size).
        let mut table = ZoneTable::new(&[100, 50, 60, 80], |z| z != 1, 1, 1);
        assert_eq!(table.free_blocks(), 240 - 100);
        let placed = table.allocate(Slot::Stream(0), 30).unwrap();
        assert_eq!(placed.zone, 0);
        // 70 left in the open zone; 60 and 80 empty, less a reserve of 60.
        assert_eq!(table.free_blocks(), 70 + 140 - 60);
        table.wear_out(2);
        assert_eq!(table.free_blocks(), 70 + 80 - 80);
        table.add_valid(0, 30);
        let retired = table.retire_slot(Slot::Stream(0)).unwrap();
        assert_eq!(retired.zone, 0);
        assert_eq!(table.free_blocks(), 0, "the reserve alone is empty");
        table.remove_valid(0, 30);
        table.deactivate(0);
        table.reset(0);
        assert_eq!(table.free_blocks(), 180 - 80);
    }
}
