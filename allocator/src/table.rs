//! The extent table: every extent as one fixed-size record of 12 bytes, in
//! pages, indexed by slot. Owners are not here: they live on the device
//! (see [`crate::owners`]). Nothing is
//! allocated per extent and nothing is kept per 4 KiB block: checksums are
//! in the blocks' tags on the device (see [`crate::tags`]), or, for an
//! extent whose tags cannot be carried, in the volume's side map. No index
//! by position is kept: a walk in physical order builds one for its pass
//! ([`LaneOrder`]). See `allocator/METADATA.md`, step 2.
//!
//! A record holds each copy's location packed into 36 bits (zone and
//! offset, split where [`LocationBits`] says; all ones is a missing
//! copy), the extent's data blocks (1 to [`MAX_BLOCKS`]; 0 marks a slot
//! that holds no extent) and the slot's generation (12 bits). An extent's
//! ID is its slot and that generation, so an ID kept after its extent was
//! freed names no extent even once the slot is reused, until the
//! generation comes round again (after 4,096 reuses of that one slot).
//! Slot 0 is never used, so the first extents of a volume are 1, 2, 3...
//!
//! A slot with no extent is free, linked into the free list through its
//! lane-0 location and reused first, or reserved for a write in flight
//! ([`Table::reserve`]), marked by a missing lane-1 location. Pages are
//! [`PAGE_SLOTS`] records (4,080 bytes).

use crate::journal::PageImage;
use crate::{ExtentId, Location};

/// Records per page.
pub const PAGE_SLOTS: usize = 340;

/// Bits of a packed location.
const LOCATION_BITS: u32 = 36;
/// The packed form of [`Location::MISSING`].
const MISSING: u64 = (1 << LOCATION_BITS) - 1;
/// Bits of the slot in an extent ID, below the generation.
const SLOT_BITS: u32 = 36;
const GENERATION_BITS: u32 = 12;
const BLOCKS_BITS: u32 = 12;
/// The largest extent a record holds, in data blocks.
pub const MAX_BLOCKS: u32 = (1 << BLOCKS_BITS) - 1;

/// How a volume's locations pack into 36 bits: the offset in the low
/// `offset_bits`, the zone above. Chosen at format from the largest zone
/// and kept in the superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocationBits {
    offset_bits: u32,
}

impl LocationBits {
    /// Room for offsets within zones of `zone_blocks` and for `zones`
    /// zones (per device); `None` when 36 bits cannot hold both.
    pub fn new(zone_blocks: u32, zones: u32) -> Option<LocationBits> {
        // Offsets run below the zone's blocks.
        let offset_bits = 32 - zone_blocks.max(2).saturating_sub(1).leading_zeros();
        let bits = LocationBits { offset_bits };
        bits.fits(zone_blocks, zones).then_some(bits)
    }

    /// The split a superblock records; `None` when out of range.
    pub fn from_offset_bits(offset_bits: u8) -> Option<LocationBits> {
        (1..=32).contains(&offset_bits).then_some(LocationBits { offset_bits: u32::from(offset_bits) })
    }

    /// Offset bits, as the superblock records them.
    pub fn offset_bits(self) -> u8 {
        self.offset_bits as u8
    }

    /// Whether a device of `zones` zones of up to `zone_blocks` blocks
    /// fits this split.
    pub fn fits(self, zone_blocks: u32, zones: u32) -> bool {
        let zone_bits = LOCATION_BITS - self.offset_bits;
        // The all-ones zone would collide with the missing marker.
        u64::from(zone_blocks) <= 1 << self.offset_bits && u64::from(zones) < 1 << zone_bits
    }

    fn pack(self, location: Location) -> u64 {
        if location.is_missing() {
            return MISSING;
        }
        self.pack_checked(location).unwrap_or_else(|| panic!("{location:?} outside the packed range"))
    }

    /// [`LocationBits::pack`] of a location that may not fit: `None` then.
    fn pack_checked(self, location: Location) -> Option<u64> {
        if u64::from(location.offset) >= 1 << self.offset_bits
            || u64::from(location.zone) >= 1 << (LOCATION_BITS - self.offset_bits)
        {
            return None;
        }
        let packed = (u64::from(location.zone) << self.offset_bits) | u64::from(location.offset);
        (packed < MISSING).then_some(packed)
    }

    fn unpack(self, packed: u64) -> Location {
        if packed == MISSING {
            return Location::MISSING;
        }
        Location { zone: (packed >> self.offset_bits) as u32, offset: (packed & ((1 << self.offset_bits) - 1)) as u32 }
    }
}

/// One extent as the table holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Data blocks.
    pub blocks: u32,
    /// Each copy's location (lane 1 is [`Location::MISSING`] in a
    /// single-copy volume).
    pub locations: [Location; 2],
}

impl Entry {
    /// An entry from per-lane locations (one or two).
    pub fn new(blocks: u32, locations: &[Location]) -> Entry {
        assert!((1..=2).contains(&locations.len()), "{} copies", locations.len());
        Entry { blocks, locations: [locations[0], locations.get(1).copied().unwrap_or(Location::MISSING)] }
    }
}

/// Three words: each lane's packed location (low 32 bits), then both
/// locations' high 4 bits, the blocks and the generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
struct Record([u32; 3]);

const _: () = assert!(size_of::<Record>() == 12);
const _: () = assert!(size_of::<[Record; PAGE_SLOTS]>() == 4080);

impl Record {
    fn location(self, lane: usize) -> u64 {
        u64::from(self.0[lane]) | (u64::from((self.0[2] >> (4 * lane)) & 0xF) << 32)
    }

    fn set_location(&mut self, lane: usize, packed: u64) {
        debug_assert!(packed <= MISSING);
        self.0[lane] = packed as u32;
        let shift = 4 * lane;
        self.0[2] = (self.0[2] & !(0xF << shift)) | (((packed >> 32) as u32) << shift);
    }

    fn blocks(self) -> u32 {
        (self.0[2] >> 8) & MAX_BLOCKS
    }

    fn set_blocks(&mut self, blocks: u32) {
        debug_assert!(blocks <= MAX_BLOCKS);
        self.0[2] = (self.0[2] & !(MAX_BLOCKS << 8)) | (blocks << 8);
    }

    fn generation(self) -> u32 {
        self.0[2] >> 20
    }

    fn set_generation(&mut self, generation: u32) {
        self.0[2] = (self.0[2] & 0x000F_FFFF) | ((generation & ((1 << GENERATION_BITS) - 1)) << 20);
    }

    fn is_reserved(self) -> bool {
        self.blocks() == 0 && self.location(1) == MISSING
    }
}

/// The slot of `id` and its generation.
pub fn split(id: ExtentId) -> (u64, u32) {
    (id & ((1 << SLOT_BITS) - 1), (id >> SLOT_BITS) as u32)
}

fn join(slot: u64, generation: u32) -> ExtentId {
    slot | (u64::from(generation) << SLOT_BITS)
}

/// Why an entry cannot go where it is asked to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableError {
    /// The ID's generation or slot is out of range, or slot 0.
    BadId(ExtentId),
    /// The slot holds a live extent already.
    Taken(ExtentId),
    /// Blocks outside 1..=[`MAX_BLOCKS`].
    Blocks(u32),
    /// A location that does not pack.
    Location(Location),
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::BadId(id) => write!(f, "extent ID {id:#x} names no slot"),
            TableError::Taken(id) => write!(f, "extent {id:#x}'s slot holds another extent"),
            TableError::Blocks(blocks) => write!(f, "an extent of {blocks} blocks (1 to {MAX_BLOCKS})"),
            TableError::Location(location) => write!(f, "location {location:?} outside the volume's zones"),
        }
    }
}

type Page = [Record; PAGE_SLOTS];

/// The extent table. See the [module documentation](self).
#[derive(Debug)]
pub struct Table {
    bits: LocationBits,
    /// Boxed pages, so that growing the table moves pointers, never the
    /// records, and its slack is one page rather than a doubled vector.
    #[allow(clippy::vec_box)]
    pages: Vec<Box<Page>>,
    /// Slots handed out at least once: `1..end`.
    end: u64,
    /// The first free slot below `end`, if any; each free record holds the
    /// next in its lane-0 location (0 ends the list).
    free: u64,
    live: u64,
}

impl Table {
    /// An empty table for locations packed as `bits`.
    pub fn new(bits: LocationBits) -> Table {
        Table { bits, pages: Vec::new(), end: 1, free: 0, live: 0 }
    }

    /// Live extents.
    pub fn len(&self) -> u64 {
        self.live
    }

    /// Whether no extent is live.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Host bytes the pages take.
    pub fn memory_bytes(&self) -> usize {
        self.pages.len() * size_of::<Page>() + self.pages.capacity() * size_of::<usize>()
    }

    fn record(&self, slot: u64) -> Option<Record> {
        let page = self.pages.get((slot / PAGE_SLOTS as u64) as usize)?;
        Some(page[(slot % PAGE_SLOTS as u64) as usize])
    }

    fn record_mut(&mut self, slot: u64) -> &mut Record {
        let page = (slot / PAGE_SLOTS as u64) as usize;
        while self.pages.len() <= page {
            self.pages.push(Box::new([Record::default(); PAGE_SLOTS]));
        }
        &mut self.pages[page][(slot % PAGE_SLOTS as u64) as usize]
    }

    /// Whether `entry` can be held: its blocks in range and its locations
    /// packable.
    pub fn check(&self, entry: &Entry) -> Result<(), TableError> {
        if entry.blocks == 0 || entry.blocks > MAX_BLOCKS {
            return Err(TableError::Blocks(entry.blocks));
        }
        match entry.locations.iter().find(|l| !l.is_missing() && self.bits.pack_checked(**l).is_none()) {
            Some(&location) => Err(TableError::Location(location)),
            None => Ok(()),
        }
    }

    /// Whether `location` packs.
    pub fn fits(&self, location: Location) -> bool {
        location.is_missing() || self.bits.pack_checked(location).is_some()
    }

    fn fill(&mut self, slot: u64, entry: &Entry) {
        let bits = self.bits;
        let record = self.record_mut(slot);
        record.set_blocks(entry.blocks);
        for (lane, &location) in entry.locations.iter().enumerate() {
            record.set_location(lane, bits.pack(location));
        }
    }

    /// Takes a free slot (a freed one first) for an extent whose write is
    /// in flight, and returns the ID it will have: [`Table::fill_reserved`]
    /// makes it live, [`Table::release`] frees it.
    pub fn reserve(&mut self) -> ExtentId {
        // A free slot holds the generation its next extent takes.
        let slot = if self.free != 0 {
            let slot = self.free;
            self.free = self.record(slot).expect("a free slot below the end").location(0);
            slot
        } else {
            let slot = self.end;
            assert!(slot < 1 << SLOT_BITS, "the table is full");
            self.end += 1;
            slot
        };
        let record = self.record_mut(slot);
        debug_assert_eq!(record.blocks(), 0, "slot {slot} is free");
        record.set_location(0, 0);
        record.set_location(1, MISSING);
        join(slot, record.generation())
    }

    fn reserved_slot(&self, id: ExtentId) -> u64 {
        let (slot, generation) = split(id);
        let record = self.record(slot).filter(|_| slot != 0 && slot < self.end);
        assert!(
            record.is_some_and(|r| r.is_reserved() && r.generation() == generation),
            "extent {id:#x} is not reserved"
        );
        slot
    }

    /// Makes the reserved `id` live as `entry`.
    pub fn fill_reserved(&mut self, id: ExtentId, entry: &Entry) -> Result<(), TableError> {
        self.check(entry)?;
        let slot = self.reserved_slot(id);
        self.fill(slot, entry);
        self.live += 1;
        Ok(())
    }

    /// Frees the reserved `id`: its write failed.
    pub fn release(&mut self, id: ExtentId) {
        let slot = self.reserved_slot(id);
        self.retire(slot);
    }

    /// Frees used slot `slot`, moving its generation on, so that the IDs of
    /// its earlier extents stay dead.
    fn retire(&mut self, slot: u64) {
        let record = self.record_mut(slot);
        let next = record.generation() + 1;
        record.set_generation(next);
        self.push_free(slot);
    }

    fn push_free(&mut self, slot: u64) {
        let next = self.free;
        let record = self.record_mut(slot);
        record.set_blocks(0);
        record.set_location(0, next);
        record.set_location(1, 0);
        self.free = slot;
    }

    /// Adds `entry` in a free slot (a freed one first) and returns its ID.
    pub fn insert(&mut self, entry: &Entry) -> Result<ExtentId, TableError> {
        self.check(entry)?;
        let id = self.reserve();
        self.fill_reserved(id, entry)?;
        Ok(id)
    }

    /// Puts `entry` under `id` (its slot free, or never used): how a
    /// journal's records are replayed. Slots skipped on the way are free.
    /// Call [`Table::rebuild_free_list`] once the replay is done.
    pub fn insert_at(&mut self, id: ExtentId, entry: &Entry) -> Result<(), TableError> {
        self.check(entry)?;
        let slot = self.free_slot_at(id)?;
        self.record_mut(slot).set_generation(split(id).1);
        self.fill(slot, entry);
        self.live += 1;
        Ok(())
    }

    /// Marks `id`'s slot free, its next extent to take `id`, as a
    /// checkpoint records a slot used before (see [`Table::used_free`]).
    pub fn restore_free(&mut self, id: ExtentId) -> Result<(), TableError> {
        let slot = self.free_slot_at(id)?;
        self.record_mut(slot).set_generation(split(id).1);
        Ok(())
    }

    fn free_slot_at(&mut self, id: ExtentId) -> Result<u64, TableError> {
        let (slot, generation) = split(id);
        if slot == 0 || generation >= 1 << GENERATION_BITS {
            return Err(TableError::BadId(id));
        }
        if self.record(slot).is_some_and(|r| r.blocks() != 0) {
            return Err(TableError::Taken(id));
        }
        self.end = self.end.max(slot + 1);
        Ok(slot)
    }

    /// Links every free slot below the end into the free list (after
    /// [`Table::insert_at`]s, which leave it unordered).
    pub fn rebuild_free_list(&mut self) {
        self.free = 0;
        for slot in (1..self.end).rev() {
            if self.record(slot).is_none_or(|r| r.blocks() == 0) {
                self.push_free(slot);
            }
        }
    }

    /// The live extent `id`.
    pub fn get(&self, id: ExtentId) -> Option<Entry> {
        let (slot, generation) = split(id);
        let record = self.record(slot).filter(|_| slot != 0 && slot < self.end)?;
        if record.blocks() == 0 || record.generation() != generation {
            return None;
        }
        Some(self.entry(record))
    }

    fn entry(&self, record: Record) -> Entry {
        Entry {
            blocks: record.blocks(),
            locations: [self.bits.unpack(record.location(0)), self.bits.unpack(record.location(1))],
        }
    }

    /// Frees extent `id`, returning what it was; its slot goes to the
    /// free list under the next generation.
    pub fn remove(&mut self, id: ExtentId) -> Option<Entry> {
        let entry = self.get(id)?;
        self.retire(split(id).0);
        self.live -= 1;
        Some(entry)
    }

    /// Moves copy `lane` of extent `id` to `to` (either may be missing).
    /// False when `id` is not live.
    pub fn set_location(&mut self, id: ExtentId, lane: usize, to: Location) -> bool {
        if self.get(id).is_none() {
            return false;
        }
        let packed = self.bits.pack(to);
        self.record_mut(split(id).0).set_location(lane, packed);
        true
    }

    /// The slots of page `index` that hold a live extent.
    pub fn live_slots(&self, index: u64) -> impl Iterator<Item = u64> + '_ {
        let first = index * PAGE_SLOTS as u64;
        (first..first + PAGE_SLOTS as u64)
            .filter(move |&slot| slot < self.end && self.record(slot).is_some_and(|r| r.blocks() != 0))
    }

    /// Pages a checkpoint writes: every one holding a slot handed out.
    pub fn pages(&self) -> u64 {
        self.end.div_ceil(PAGE_SLOTS as u64)
    }

    /// Page `index` as a checkpoint writes it: free and reserved slots
    /// keep only their generation (an extent in flight is not one yet).
    /// `mapped` gives a live extent's checksums when the map keeps them.
    pub(crate) fn page_image<'a>(&self, index: u64, mapped: impl Fn(ExtentId) -> Option<&'a [u32]>) -> PageImage {
        let mut image = PageImage {
            index,
            records: vec![[0; 3]; PAGE_SLOTS],
            owners: Vec::new(),
            mapped: Vec::new(),
            owners_at: 0,
        };
        for at in 0..PAGE_SLOTS {
            let slot = index * PAGE_SLOTS as u64 + at as u64;
            let Some(record) = self.record(slot).filter(|_| slot < self.end) else { continue };
            if record.blocks() == 0 {
                image.records[at] = [0, 0, record.generation() << 20];
                continue;
            }
            image.records[at] = record.0;
            if let Some(crcs) = mapped(join(slot, record.generation())) {
                image.mapped.push((at as u16, crcs.to_vec()));
            }
        }
        image
    }

    /// Puts a checkpoint's page in place, whatever the page held (at open,
    /// before the log since the checkpoint began is replayed over it).
    /// Returns the IDs of the live extents on it whose checksums it
    /// carries. Call [`Table::finish_load`] once every page and operation
    /// is in.
    pub(crate) fn load_page(&mut self, image: &PageImage) -> Result<Vec<(ExtentId, Vec<u32>)>, TableError> {
        if image.records.len() != PAGE_SLOTS {
            return Err(TableError::BadId(image.index * PAGE_SLOTS as u64));
        }
        let first = image.index.checked_mul(PAGE_SLOTS as u64).filter(|f| *f < 1 << SLOT_BITS);
        let first = first.ok_or(TableError::BadId(image.index))?;
        for (at, &words) in image.records.iter().enumerate() {
            let slot = first + at as u64;
            let mut record = Record(words);
            if record.blocks() == 0 {
                // Free: its generation only; the free list is rebuilt.
                record = Record([0, 0, record.generation() << 20]);
            } else if slot == 0 {
                return Err(TableError::BadId(0));
            }
            let was_live = self.record(slot).is_some_and(|r| r.blocks() != 0);
            *self.record_mut(slot) = record;
            match (was_live, record.blocks() != 0) {
                (false, true) => self.live += 1,
                (true, false) => self.live -= 1,
                _ => {}
            }
        }
        self.end = self.end.max(first + PAGE_SLOTS as u64);
        let mut mapped = Vec::with_capacity(image.mapped.len());
        for (at, crcs) in &image.mapped {
            let slot = first + u64::from(*at);
            let record = self.record(slot).filter(|r| r.blocks() as usize == crcs.len());
            let record = record.ok_or(TableError::Blocks(crcs.len() as u32))?;
            mapped.push((join(slot, record.generation()), crcs.clone()));
        }
        Ok(mapped)
    }

    /// Puts `entry` under `id`, whatever its slot held: how an addition is
    /// replayed over a checkpoint's pages, which may hold the slot's
    /// state from before or after it.
    pub fn put(&mut self, id: ExtentId, entry: &Entry) -> Result<(), TableError> {
        self.check(entry)?;
        let (slot, generation) = split(id);
        if slot == 0 || generation >= 1 << GENERATION_BITS {
            return Err(TableError::BadId(id));
        }
        if self.record(slot).is_none_or(|r| r.blocks() == 0) {
            self.live += 1;
        }
        self.end = self.end.max(slot + 1);
        self.record_mut(slot).set_generation(generation);
        self.fill(slot, entry);
        Ok(())
    }

    /// After loading pages and replaying the log: the end of the slots
    /// handed out and the free list, from what the records say.
    pub fn finish_load(&mut self) {
        let mut end = 1;
        for slot in 1..self.end {
            if self.record(slot).is_some_and(|r| r.blocks() != 0 || r.generation() != 0) {
                end = slot + 1;
            }
        }
        self.end = end;
        self.rebuild_free_list();
    }

    /// Every live extent, by slot.
    pub fn iter(&self) -> impl Iterator<Item = (ExtentId, Entry)> + '_ {
        self.pages.iter().enumerate().flat_map(move |(page, records)| {
            records.iter().enumerate().filter_map(move |(index, &record)| {
                let slot = (page * PAGE_SLOTS + index) as u64;
                (record.blocks() != 0).then(|| (join(slot, record.generation()), self.entry(record)))
            })
        })
    }

    /// The slots with no extent that were used before (a generation past
    /// 0), as the IDs their next extents take: what a checkpoint keeps so
    /// that IDs of freed extents stay dead across an open.
    pub fn used_free(&self) -> impl Iterator<Item = ExtentId> + '_ {
        (1..self.end).filter_map(move |slot| {
            let record = self.record(slot)?;
            (record.blocks() == 0 && record.generation() != 0).then(|| join(slot, record.generation()))
        })
    }

    /// The copies in lane `lane` in physical order, for a walk that
    /// visits them by position: a counting sort by zone over the table,
    /// then a sort by offset within each zone. Takes 8 bytes per copy
    /// until dropped. `zones` bounds the lane's zone numbers.
    pub fn lane_order(&self, lane: usize, zones: u32) -> LaneOrder {
        let census = self.census(lane, zones);
        let (starts, keys) = self.by_zone(lane, &census.copies, |slot, location, _| {
            assert!(slot <= u64::from(u32::MAX), "slot {slot} past a lane order's 32 bits");
            (u64::from(location.offset) << 32) | slot
        });
        LaneOrder { lane, starts, keys }
    }

    /// The census of lane `lane`'s copies in zones below `zones`.
    pub fn census(&self, lane: usize, zones: u32) -> ZoneCensus {
        let mut census = ZoneCensus::new(zones);
        for (_, entry) in self.iter() {
            let location = entry.locations[lane];
            if !location.is_missing() && location.zone < zones {
                census.add(location, entry.blocks);
            }
        }
        census
    }

    /// Lane `lane`'s copies in zones below `copies.len()` (each zone's
    /// count, from a census of this table as it is), sorted by zone, then
    /// by `key(slot, location, blocks)` within each: a counting sort over
    /// the table. Returns where each zone's keys begin (and one more at
    /// the end), and the keys.
    fn by_zone<K: Copy + Ord + Default>(
        &self,
        lane: usize,
        copies: &[usize],
        key: impl Fn(u64, Location, u32) -> K,
    ) -> (Vec<usize>, Vec<K>) {
        let zones = copies.len();
        let mut starts = vec![0usize; zones + 1];
        for zone in 0..zones {
            starts[zone + 1] = starts[zone] + copies[zone];
        }
        let mut next = starts.clone();
        let mut keys = vec![K::default(); starts[zones]];
        for (id, entry) in self.iter() {
            let location = entry.locations[lane];
            let zone = location.zone as usize;
            if location.is_missing() || zone >= zones {
                continue;
            }
            assert!(next[zone] < starts[zone + 1], "zone {zone} of lane {lane} holds more copies than its census");
            keys[next[zone]] = key(split(id).0, location, entry.blocks);
            next[zone] += 1;
        }
        for zone in 0..zones {
            keys[starts[zone]..starts[zone + 1]].sort_unstable();
        }
        (starts, keys)
    }

    /// The live extent at `location` of lane `lane` in slot `slot`, if it
    /// is still there.
    fn at(&self, slot: u64, lane: usize, location: Location) -> Option<(ExtentId, Entry)> {
        let record = self.record(slot).filter(|r| r.blocks() != 0)?;
        (self.bits.unpack(record.location(lane)) == location)
            .then(|| (join(slot, record.generation()), self.entry(record)))
    }

    /// The first two live copies in lane `lane` that overlap, or (given
    /// `allocated`, each zone's allocated blocks) one that lies past its
    /// zone's allocation. The copies are sorted by zone (counting), then
    /// by offset within each, as 8 bytes each (offset and length: no
    /// lookup per copy); the extents are named by a search once one is
    /// found. Copies in zones past `zones` are not looked at.
    pub fn misplaced(&self, lane: usize, zones: u32, allocated: Option<&dyn Fn(u32) -> u32>) -> Option<Misplaced> {
        self.misplaced_counted(lane, &self.census(lane, zones), allocated)
    }

    /// [`Table::misplaced`] given the lane's census of this table as it
    /// is (which open counts along with its other checks).
    pub fn misplaced_counted(
        &self,
        lane: usize,
        census: &ZoneCensus,
        allocated: Option<&dyn Fn(u32) -> u32>,
    ) -> Option<Misplaced> {
        if self.bits.offset_bits + BLOCKS_BITS <= 32 {
            // 4 bytes per copy where offsets take at most 20 bits (zones
            // of up to 4 GiB): half the memory to fill and sort.
            let key = |_, location: Location, blocks| (location.offset << BLOCKS_BITS) | blocks;
            self.misplaced_by(lane, census, allocated, key, |key: u32| (key >> BLOCKS_BITS, key & MAX_BLOCKS))
        } else {
            let key = |_, location: Location, blocks| (u64::from(location.offset) << 32) | u64::from(blocks);
            self.misplaced_by(lane, census, allocated, key, |key: u64| ((key >> 32) as u32, key as u32))
        }
    }

    /// [`Table::misplaced_counted`] with keys of type `K` made by `key`
    /// from a copy's slot, location and blocks, which `parts` splits back
    /// into offset and blocks; keys sort by offset.
    fn misplaced_by<K: Copy + Ord + Default>(
        &self,
        lane: usize,
        census: &ZoneCensus,
        allocated: Option<&dyn Fn(u32) -> u32>,
        key: impl Fn(u64, Location, u32) -> K,
        parts: impl Fn(K) -> (u32, u32),
    ) -> Option<Misplaced> {
        let (starts, keys) = self.by_zone(lane, &census.copies, key);
        let offset = |key: K| parts(key).0;
        let end = |key: K| {
            let (offset, blocks) = parts(key);
            u64::from(offset) + u64::from(blocks)
        };
        // The extent with a copy at `location`, other than `not`.
        let id_at = |location: Location, not: ExtentId| {
            let mut found = self.iter().filter(|(id, entry)| entry.locations[lane] == location && *id != not);
            found.next().map_or(0, |(id, _)| id)
        };
        for zone in 0..census.copies.len() {
            let keys = &keys[starts[zone]..starts[zone + 1]];
            let at = |key: K| Location { zone: zone as u32, offset: offset(key) };
            if let Some(pair) = keys.windows(2).find(|pair| end(pair[0]) > u64::from(offset(pair[1]))) {
                let first = id_at(at(pair[0]), 0);
                return Some(Misplaced::Overlap(first, id_at(at(pair[1]), first), at(pair[1])));
            }
            if let Some(allocated) = allocated {
                let limit = u64::from(allocated(zone as u32));
                if let Some(&key) = keys.iter().find(|&&key| end(key) > limit) {
                    return Some(Misplaced::PastAllocation(id_at(at(key), 0)));
                }
            }
        }
        None
    }
}

/// Per zone of one lane: its live copies, the end of the furthest one and
/// the blocks they hold. Open counts it once, with its other checks of
/// every extent, and plans the zones and checks for overlaps from it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneCensus {
    /// Live copies per zone.
    pub copies: Vec<usize>,
    /// Per zone, the end of its furthest live copy, in blocks.
    pub live_end: Vec<u32>,
    /// Per zone, the blocks its live copies hold.
    pub valid: Vec<u32>,
}

impl ZoneCensus {
    /// An empty census of `zones` zones.
    pub fn new(zones: u32) -> ZoneCensus {
        let zones = zones as usize;
        ZoneCensus { copies: vec![0; zones], live_end: vec![0; zones], valid: vec![0; zones] }
    }

    /// Counts a copy of `blocks` blocks at `location` (a zone the census
    /// has).
    pub fn add(&mut self, location: Location, blocks: u32) {
        let zone = location.zone as usize;
        self.copies[zone] += 1;
        self.live_end[zone] = self.live_end[zone].max(location.offset + blocks);
        self.valid[zone] += blocks;
    }
}

/// What [`Table::misplaced`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misplaced {
    /// Two extents' copies overlap; the second begins at this location.
    Overlap(ExtentId, ExtentId, Location),
    /// An extent's copy lies past what its zone allocated.
    PastAllocation(ExtentId),
}

/// One lane's copies in physical order, as [`Table::lane_order`] found
/// them: a snapshot that a walk checks against the table as it goes, so
/// that a copy freed or moved since is skipped, never misread.
#[derive(Clone, Debug)]
pub struct LaneOrder {
    lane: usize,
    /// Per zone, its first key; one more at the end.
    starts: Vec<usize>,
    /// Offset in the high 32 bits, slot in the low.
    keys: Vec<u64>,
}

impl LaneOrder {
    /// The lane ordered.
    pub fn lane(&self) -> usize {
        self.lane
    }

    /// Copies in the snapshot.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the snapshot holds no copy.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Host bytes the snapshot takes.
    pub fn memory_bytes(&self) -> usize {
        self.keys.capacity() * 8 + self.starts.capacity() * size_of::<usize>()
    }

    /// The index of the first copy at or after `from`.
    fn position(&self, from: Location) -> usize {
        let zones = self.starts.len() - 1;
        if from.zone as usize >= zones {
            return self.keys.len();
        }
        let zone = &self.keys[self.starts[from.zone as usize]..self.starts[from.zone as usize + 1]];
        self.starts[from.zone as usize] + zone.partition_point(|&key| ((key >> 32) as u32) < from.offset)
    }

    /// The copies at or after `from`, in physical order, that are still
    /// where the snapshot found them: their location, ID and entry.
    pub fn walk<'a>(
        &'a self,
        table: &'a Table,
        from: Location,
    ) -> impl Iterator<Item = (Location, ExtentId, Entry)> + 'a {
        let first = self.position(from);
        let mut zone = 0usize;
        (first..self.keys.len()).filter_map(move |index| {
            while self.starts[zone + 1] <= index {
                zone += 1;
            }
            let key = self.keys[index];
            let location = Location { zone: zone as u32, offset: (key >> 32) as u32 };
            table.at(key & u64::from(u32::MAX), self.lane, location).map(|(id, entry)| (location, id, entry))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(zone: u32, offset: u32) -> Location {
        Location { zone, offset }
    }

    fn entry(blocks: u32, a: Location, b: Location) -> Entry {
        Entry { blocks, locations: [a, b] }
    }

    #[test]
    fn locations_pack_within_their_bits() {
        let bits = LocationBits::new(65536, 4096).unwrap();
        for location in [at(0, 0), at(4095, 65535), at(17, 3), Location::MISSING] {
            assert_eq!(bits.unpack(bits.pack(location)), location);
        }
        assert_eq!(bits.pack_checked(at(0, 65536)), None);
        // 2^19-block zones (2 GiB) leave 17 bits: 131,071 zones.
        assert!(LocationBits::new(1 << 19, 131_071).is_some());
        assert!(LocationBits::new(1 << 19, 131_072).is_none());
    }

    #[test]
    fn ids_name_one_use_of_a_slot() {
        let mut table = Table::new(LocationBits::new(1024, 64).unwrap());
        let a = table.insert(&entry(3, at(1, 0), at(2, 0))).unwrap();
        let b = table.insert(&entry(5, at(1, 3), Location::MISSING)).unwrap();
        assert_eq!((a, b), (1, 2), "the first extents are 1, 2, ...");
        assert_eq!(table.get(b), Some(entry(5, at(1, 3), Location::MISSING)));
        assert_eq!(table.remove(a), Some(entry(3, at(1, 0), at(2, 0))));
        assert_eq!(table.get(a), None);
        // The slot is reused under a new generation: the old ID stays dead.
        let c = table.insert(&entry(7, at(3, 9), at(4, 9))).unwrap();
        assert_eq!(split(c), (1, 1));
        assert_eq!(table.get(a), None);
        assert_eq!(table.get(c).unwrap().blocks, 7);
        assert!(table.set_location(c, 1, Location::MISSING));
        assert_eq!(table.get(c).unwrap().locations[1], Location::MISSING);
        assert!(!table.set_location(a, 0, at(0, 0)));
        assert_eq!(table.len(), 2);
        let live: Vec<ExtentId> = table.iter().map(|(id, _)| id).collect();
        assert_eq!(live, vec![c, b]);
        assert_eq!(table.insert(&entry(0, at(0, 0), at(0, 0))), Err(TableError::Blocks(0)));
        assert_eq!(table.insert(&entry(1, at(0, 1024), at(0, 0))), Err(TableError::Location(at(0, 1024))));
    }

    #[test]
    fn misplaced_copies_are_found_and_named_in_each_lane() {
        // Zones of 1,024 blocks sort 4-byte keys; zones of 2^24 blocks
        // 8-byte keys, here with offsets past what 4 bytes hold.
        for (zone_blocks, base) in [(1024, 0), (1 << 24, 1 << 22)] {
            let mut table = Table::new(LocationBits::new(zone_blocks, 64).unwrap());
            let at = |zone, offset| at(zone, base + offset);
            // Lane 0: zone 1 holds [0, 3) and [3, 8), zone 2 [10, 12);
            // lane 1 one copy in zone 4 of an extent whose lane 0 copy is
            // in zone 2.
            let a = table.insert(&entry(3, at(1, 0), Location::MISSING)).unwrap();
            let b = table.insert(&entry(5, at(1, 3), Location::MISSING)).unwrap();
            let c = table.insert(&entry(2, at(2, 10), at(4, 0))).unwrap();
            assert_eq!(table.misplaced(0, 8, None), None, "touching is not overlapping");
            assert_eq!(table.misplaced(1, 8, None), None);
            let allocated = |zone: u32| base + [0, 8, 12, 0, 2][zone as usize];
            assert_eq!(table.misplaced(0, 5, Some(&allocated)), None, "each copy within its zone's allocation");
            let short = |zone: u32| base + [0, 7, 12, 0, 2][zone as usize];
            assert_eq!(table.misplaced(0, 5, Some(&short)), Some(Misplaced::PastAllocation(b)));
            // An extent written over the end of another, and one at the
            // same place as another, in slot order after them.
            let d = table.insert(&entry(1, at(1, 2), Location::MISSING)).unwrap();
            assert_eq!(table.misplaced(0, 8, None), Some(Misplaced::Overlap(a, d, at(1, 2))));
            table.remove(d);
            let e = table.insert(&entry(4, at(4, 1), at(4, 0))).unwrap();
            assert_eq!(table.misplaced(0, 8, None), None);
            assert_eq!(table.misplaced(1, 8, None), Some(Misplaced::Overlap(c, e, at(4, 0))), "same offset, lane 1");
            // Zones past the count given are not looked at.
            assert_eq!(table.misplaced(1, 4, None), None);
        }
    }

    #[test]
    fn a_replayed_table_matches_and_reuses_its_holes() {
        let mut table = Table::new(LocationBits::new(1024, 64).unwrap());
        let far = join(1000, 3);
        table.insert_at(far, &entry(2, at(5, 5), Location::MISSING)).unwrap();
        table.insert_at(join(2, 0), &entry(1, at(6, 0), Location::MISSING)).unwrap();
        assert_eq!(table.insert_at(far, &entry(1, at(0, 0), at(0, 0))), Err(TableError::Taken(far)));
        assert_eq!(table.insert_at(0, &entry(1, at(0, 0), at(0, 0))), Err(TableError::BadId(0)));
        table.rebuild_free_list();
        assert_eq!(table.get(far).unwrap().blocks, 2);
        // Holes below the highest slot are reused, lowest first.
        assert_eq!(split(table.insert(&entry(1, at(0, 0), at(0, 0))).unwrap()).0, 1);
        assert_eq!(split(table.insert(&entry(1, at(0, 1), at(0, 1))).unwrap()).0, 3);
        assert_eq!(table.len(), 4);
        assert!(table.memory_bytes() >= 3 * 4080, "slot 1000 lies on the third page");
    }

    #[test]
    fn reserved_slots_are_neither_live_nor_free_until_filled_or_released() {
        let mut table = Table::new(LocationBits::new(1024, 64).unwrap());
        let a = table.reserve();
        let b = table.reserve();
        assert_eq!((a, b), (1, 2));
        assert_eq!(table.get(a), None, "a reservation is not an extent");
        assert_eq!(table.iter().count(), 0);
        table.fill_reserved(b, &entry(4, at(1, 0), Location::MISSING)).unwrap();
        table.release(a);
        assert_eq!(table.len(), 1);
        // The released slot comes back under its next generation.
        let c = table.reserve();
        assert_eq!(split(c), (1, 1), "first reserved at generation 0, reused at 1");
        table.release(c);
        // A checkpoint keeps the used free slots, and a table restored from
        // it hands out the same next IDs.
        let used: Vec<ExtentId> = table.used_free().collect();
        assert_eq!(used, vec![join(1, 2)]);
        let mut restored = Table::new(LocationBits::new(1024, 64).unwrap());
        restored.insert_at(b, &table.get(b).unwrap()).unwrap();
        for id in used {
            restored.restore_free(id).unwrap();
        }
        restored.rebuild_free_list();
        assert_eq!(restored.reserve(), table.reserve());
        // A slot used once at generation 0 and freed is kept too.
        let mut table = Table::new(LocationBits::new(1024, 64).unwrap());
        let first = table.insert(&entry(1, at(0, 0), Location::MISSING)).unwrap();
        table.remove(first);
        assert_eq!(table.used_free().collect::<Vec<_>>(), vec![join(1, 1)]);
    }

    #[test]
    fn a_lane_order_walks_by_position_and_skips_what_moved() {
        let mut table = Table::new(LocationBits::new(1024, 64).unwrap());
        let c = table.insert(&entry(2, at(3, 8), at(0, 0))).unwrap();
        let a = table.insert(&entry(2, at(1, 4), at(0, 2))).unwrap();
        let b = table.insert(&entry(4, at(1, 0), Location::MISSING)).unwrap();
        let d = table.insert(&entry(1, at(3, 2), at(0, 4))).unwrap();
        let order = table.lane_order(0, 8);
        assert_eq!(order.len(), 4);
        let walked: Vec<(Location, ExtentId)> = order.walk(&table, at(0, 0)).map(|(l, id, _)| (l, id)).collect();
        assert_eq!(walked, vec![(at(1, 0), b), (at(1, 4), a), (at(3, 2), d), (at(3, 8), c)]);
        let from: Vec<ExtentId> = order.walk(&table, at(1, 1)).map(|(_, id, _)| id).collect();
        assert_eq!(from, vec![a, d, c]);
        assert_eq!(order.walk(&table, at(8, 0)).count(), 0);
        // Freed, reused elsewhere and moved copies are skipped.
        table.remove(a);
        let e = table.insert(&entry(1, at(5, 0), Location::MISSING)).unwrap();
        assert_eq!(split(e).0, split(a).0);
        assert!(table.set_location(d, 0, at(6, 0)));
        let walked: Vec<ExtentId> = order.walk(&table, at(0, 0)).map(|(_, id, _)| id).collect();
        assert_eq!(walked, vec![b, c]);
        // Lane 1 holds three copies, all in zone 0.
        let order = table.lane_order(1, 8);
        let walked: Vec<ExtentId> = order.walk(&table, at(0, 0)).map(|(_, id, _)| id).collect();
        assert_eq!(walked, vec![c, d]);
    }
}
