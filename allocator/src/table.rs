//! The extent table: every extent as one fixed-size record of 24 bytes, in
//! pages, indexed by slot. Owners are not here: they live on the device
//! (see [`crate::owners`]). Nothing is
//! allocated per extent and nothing is kept per 4 KiB block: checksums are
//! in the blocks' tags on the device (see [`crate::tags`]), or, for an
//! extent whose tags cannot be carried, in the volume's side map. No index
//! by position is kept: a walk in physical order builds one for its pass
//! ([`LaneOrder`]). See `allocator/METADATA.md`, step 2.
//!
//! A record holds up to [`COPIES_MAX`] copies, each as the lane it lies
//! in (5 bits: which device's zones, see `docs/pool.md`, decision 1) and
//! its location packed into 36 bits (zone and offset, split where
//! [`LocationBits`] says; all ones is a copy whose bytes are missing, to
//! be written by a resilver), the extent's data blocks (1 to
//! [`MAX_BLOCKS`]; 0 marks a slot that holds no extent) and the slot's
//! generation (12 bits). Each copy records its own lane, as the
//! raid-stripe-tree of btrfs records each stripe's device: placement over
//! many devices, and Zone Append, choose where a copy goes per extent.
//! An extent's ID is its slot and that generation, so an ID kept after its
//! extent was freed names no extent even once the slot is reused, until
//! the generation comes round again (after 4,096 reuses of that one slot).
//! Slot 0 is never used, so the first extents of a volume are 1, 2, 3...
//!
//! A slot with no extent is free, linked into the free list through its
//! first copy's location and reused first, or reserved for a write in
//! flight ([`Table::reserve`]), marked by a missing second location. Pages
//! are [`PAGE_SLOTS`] records (8,160 bytes).

use crate::journal::PageImage;
use crate::{ExtentId, Location};

/// Records per page.
pub const PAGE_SLOTS: usize = 340;

/// Copies an extent has at most: a 3-copy mirror's.
pub const COPIES_MAX: usize = 3;

/// Lanes a record can name (5 bits, all ones marking no copy).
pub const LANES_MAX: usize = 31;

/// Bits of a packed location.
const LOCATION_BITS: u32 = 36;
/// The packed form of [`Location::MISSING`].
const MISSING: u64 = (1 << LOCATION_BITS) - 1;
/// Bits of a copy's lane, above its location.
const LANE_BITS: u32 = 5;
/// The lane of a copy slot that holds no copy.
const NO_LANE: u8 = (1 << LANE_BITS) - 1;
/// Where a word's upper field (blocks in the first, the generation in the
/// second) begins.
const UPPER_SHIFT: u32 = 52;
/// Bits of the slot in an extent ID, below the generation.
const SLOT_BITS: u32 = 36;
const GENERATION_BITS: u32 = 12;
const BLOCKS_BITS: u32 = 12;
/// The largest extent a record holds, in data blocks.
pub const MAX_BLOCKS: u32 = (1 << BLOCKS_BITS) - 1;

const _: () = assert!(LANES_MAX == NO_LANE as usize);
const _: () = assert!(LOCATION_BITS + LANE_BITS <= UPPER_SHIFT);
const _: () = assert!(UPPER_SHIFT + BLOCKS_BITS <= 64 && UPPER_SHIFT + GENERATION_BITS <= 64);

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

/// One extent as the table holds it: its blocks and up to
/// [`COPIES_MAX`] copies, each in its own lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Data blocks.
    pub blocks: u32,
    /// Per copy slot: its lane, or [`NO_LANE`] when the slot holds no
    /// copy. Copies fill the first slots.
    lanes: [u8; COPIES_MAX],
    /// Per copy slot: where the copy lies ([`Location::MISSING`] while its
    /// bytes are missing from its lane).
    locations: [Location; COPIES_MAX],
}

impl Entry {
    /// An entry of `blocks` with a copy at each (lane, location) of
    /// `copies`: one to [`COPIES_MAX`], each in its own lane.
    pub fn new(blocks: u32, copies: &[(usize, Location)]) -> Entry {
        assert!((1..=COPIES_MAX).contains(&copies.len()), "{} copies", copies.len());
        let mut entry = Entry { blocks, lanes: [NO_LANE; COPIES_MAX], locations: [Location::MISSING; COPIES_MAX] };
        for (index, &(lane, location)) in copies.iter().enumerate() {
            assert!(lane < LANES_MAX, "lane {lane}");
            assert!(copies[..index].iter().all(|&(other, _)| other != lane), "two copies in lane {lane}");
            entry.lanes[index] = lane as u8;
            entry.locations[index] = location;
        }
        entry
    }

    /// An entry whose copy `i` lies in lane `i`, at `locations[i]`.
    pub fn on_lanes(blocks: u32, locations: &[Location]) -> Entry {
        let mut copies = [(0, Location::MISSING); COPIES_MAX];
        for (lane, &location) in locations.iter().enumerate().take(COPIES_MAX) {
            copies[lane] = (lane, location);
        }
        Entry::new(blocks, &copies[..locations.len()])
    }

    /// Where the copy in lane `lane` lies: [`Location::MISSING`] when its
    /// bytes are missing, or when the extent has no copy there.
    pub fn on(&self, lane: usize) -> Location {
        self.slot_of(lane).map_or(Location::MISSING, |index| self.locations[index])
    }

    /// Whether the extent has a copy in lane `lane` whose bytes are
    /// missing (for a resilver to write).
    pub fn missing_in(&self, lane: usize) -> bool {
        self.slot_of(lane).is_some_and(|index| self.locations[index].is_missing())
    }

    /// Whether the extent has a copy (present or missing) in lane `lane`.
    pub fn has_lane(&self, lane: usize) -> bool {
        self.slot_of(lane).is_some()
    }

    fn slot_of(&self, lane: usize) -> Option<usize> {
        (lane < LANES_MAX).then(|| self.lanes.iter().position(|&l| usize::from(l) == lane)).flatten()
    }

    /// Each copy, present or missing: its lane and location.
    pub fn copies(self) -> impl Iterator<Item = (usize, Location)> {
        let count = self.copy_count();
        (0..count).map(move |index| (usize::from(self.lanes[index]), self.locations[index]))
    }

    /// Copies the extent has, present or missing.
    pub fn copy_count(&self) -> usize {
        self.lanes.iter().take_while(|&&lane| lane != NO_LANE).count()
    }

    /// Whether every copy's bytes are missing: the extent is lost.
    pub fn is_lost(&self) -> bool {
        self.copies().all(|(_, location)| location.is_missing())
    }

    /// Whether every copy lies in a lane below `lanes`, each in its own,
    /// and the slots past the copies are empty: the shape a volume of
    /// `lanes` lanes holds.
    pub fn within(&self, lanes: usize) -> bool {
        let count = self.copy_count();
        let copies = &self.lanes[..count];
        count > 0
            && copies.iter().all(|&lane| usize::from(lane) < lanes)
            && (1..count).all(|index| !copies[..index].contains(&copies[index]))
            && self.locations[count..].iter().all(|location| location.is_missing())
    }

    /// Moves the copy in lane `from` to lane `lane`, at `to`. False when
    /// it has no copy in `from`, or has one in `lane` already.
    pub fn relane(&mut self, from: usize, lane: usize, to: Location) -> bool {
        let Some(index) = self.slot_of(from).filter(|_| lane < LANES_MAX && !self.has_lane(lane)) else {
            return false;
        };
        self.lanes[index] = lane as u8;
        self.locations[index] = to;
        true
    }

    /// Moves the copy in lane `lane` to `to`. False when the extent has no
    /// copy there: a move never adds a copy (replayed over a checkpoint
    /// page that already holds a later state, a move of a copy since
    /// moved to another lane must do nothing).
    pub fn set(&mut self, lane: usize, to: Location) -> bool {
        let Some(index) = self.slot_of(lane) else { return false };
        self.locations[index] = to;
        true
    }
}

/// Three words, one per copy slot: the copy's packed location in the low
/// 36 bits and its lane in the 5 above; the blocks in the first word's top
/// 12 bits, the generation in the second's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
struct Record([u64; COPIES_MAX]);

const _: () = assert!(size_of::<Record>() == 24);
const _: () = assert!(size_of::<[Record; PAGE_SLOTS]>() == 8160);

impl Record {
    /// Copy slot `index`'s packed location.
    fn location(self, index: usize) -> u64 {
        self.0[index] & MISSING
    }

    fn set_location(&mut self, index: usize, packed: u64) {
        debug_assert!(packed <= MISSING);
        self.0[index] = (self.0[index] & !MISSING) | packed;
    }

    /// Copy slot `index`'s lane ([`NO_LANE`]: no copy).
    fn lane(self, index: usize) -> u8 {
        ((self.0[index] >> LOCATION_BITS) & u64::from(NO_LANE)) as u8
    }

    fn set_lane(&mut self, index: usize, lane: u8) {
        debug_assert!(lane <= NO_LANE);
        let mask = u64::from(NO_LANE) << LOCATION_BITS;
        self.0[index] = (self.0[index] & !mask) | (u64::from(lane) << LOCATION_BITS);
    }

    fn blocks(self) -> u32 {
        (self.0[0] >> UPPER_SHIFT) as u32 & MAX_BLOCKS
    }

    fn set_blocks(&mut self, blocks: u32) {
        debug_assert!(blocks <= MAX_BLOCKS);
        let mask = u64::from(MAX_BLOCKS) << UPPER_SHIFT;
        self.0[0] = (self.0[0] & !mask) | (u64::from(blocks) << UPPER_SHIFT);
    }

    fn generation(self) -> u32 {
        (self.0[1] >> UPPER_SHIFT) as u32 & ((1 << GENERATION_BITS) - 1)
    }

    fn set_generation(&mut self, generation: u32) {
        let mask = ((1u64 << GENERATION_BITS) - 1) << UPPER_SHIFT;
        let generation = u64::from(generation & ((1 << GENERATION_BITS) - 1));
        self.0[1] = (self.0[1] & !mask) | (generation << UPPER_SHIFT);
    }

    /// A free slot's record as a checkpoint keeps it: its generation only.
    fn free(generation: u32) -> Record {
        let mut record = Record::default();
        record.set_generation(generation);
        record
    }

    fn is_reserved(self) -> bool {
        self.blocks() == 0 && self.location(1) == MISSING
    }

    /// Whether the bits outside the fields are clear, as every record
    /// written holds them.
    fn spare_bits_clear(self) -> bool {
        let used = (1u64 << (LOCATION_BITS + LANE_BITS)) - 1;
        let upper = |bits: u32| ((1u64 << bits) - 1) << UPPER_SHIFT;
        self.0[0] & !(used | upper(BLOCKS_BITS)) == 0
            && self.0[1] & !(used | upper(GENERATION_BITS)) == 0
            && self.0[2] & !used == 0
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
    /// A stored record whose copies are not one per lane, or whose spare
    /// bits are set: slot.
    Malformed(u64),
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::BadId(id) => write!(f, "extent ID {id:#x} names no slot"),
            TableError::Taken(id) => write!(f, "extent {id:#x}'s slot holds another extent"),
            TableError::Blocks(blocks) => write!(f, "an extent of {blocks} blocks (1 to {MAX_BLOCKS})"),
            TableError::Location(location) => write!(f, "location {location:?} outside the volume's zones"),
            TableError::Malformed(slot) => write!(f, "slot {slot}'s record is malformed"),
        }
    }
}

type Page = [Record; PAGE_SLOTS];

/// The extent table. See the [module documentation](self).
#[derive(Debug)]
pub struct Table {
    bits: LocationBits,
    /// Lanes a loaded record may name (the volume's).
    lanes: usize,
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
        Table::with_lanes(bits, LANES_MAX)
    }

    /// An empty table whose loaded records may name lanes below `lanes`
    /// only: a checkpoint page naming another is malformed, refused at
    /// load before anything indexes a lane by it.
    pub fn with_lanes(bits: LocationBits, lanes: usize) -> Table {
        Table { bits, lanes: lanes.min(LANES_MAX), pages: Vec::new(), end: 1, free: 0, live: 0 }
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
        match entry.copies().find(|(_, l)| !l.is_missing() && self.bits.pack_checked(*l).is_none()) {
            Some((_, location)) => Err(TableError::Location(location)),
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
        for index in 0..COPIES_MAX {
            record.set_lane(index, entry.lanes[index]);
            record.set_location(index, bits.pack(entry.locations[index]));
        }
    }

    /// Lets records name lanes below `lanes` (a pool that grew).
    pub fn set_lanes(&mut self, lanes: usize) {
        self.lanes = lanes.min(LANES_MAX);
    }

    /// The slots the table spans once [`Table::reserve`] took one more:
    /// a freed one first, else one past the end.
    pub fn slots_after_reserve(&self) -> u64 {
        if self.free != 0 {
            self.end
        } else {
            self.end + 1
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
        *record = Record::free(record.generation());
        record.set_location(0, next);
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
        let mut entry =
            Entry { blocks: record.blocks(), lanes: [NO_LANE; COPIES_MAX], locations: [Location::MISSING; COPIES_MAX] };
        for index in 0..COPIES_MAX {
            entry.lanes[index] = record.lane(index);
            entry.locations[index] = self.bits.unpack(record.location(index));
        }
        entry
    }

    /// Frees extent `id`, returning what it was; its slot goes to the
    /// free list under the next generation.
    pub fn remove(&mut self, id: ExtentId) -> Option<Entry> {
        let entry = self.get(id)?;
        self.retire(split(id).0);
        self.live -= 1;
        Some(entry)
    }

    /// Moves the copy of extent `id` in lane `lane` to `to` (either may
    /// be missing). False when `id` is not live or has no copy there.
    pub fn set_location(&mut self, id: ExtentId, lane: usize, to: Location) -> bool {
        let Some(mut entry) = self.get(id) else { return false };
        if !entry.set(lane, to) {
            return false;
        }
        self.fill(split(id).0, &entry);
        true
    }

    /// Moves extent `id`'s copy in lane `from` to lane `lane`, at `to`.
    /// False when `id` is not live, has no copy in `from`, or has one in
    /// `lane`.
    pub fn relane(&mut self, id: ExtentId, from: usize, lane: usize, to: Location) -> bool {
        let Some(mut entry) = self.get(id) else { return false };
        if !entry.relane(from, lane, to) {
            return false;
        }
        self.fill(split(id).0, &entry);
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
            records: vec![[0; COPIES_MAX]; PAGE_SLOTS],
            owners: Vec::new(),
            mapped: Vec::new(),
            owners_at: 0,
        };
        for at in 0..PAGE_SLOTS {
            let slot = index * PAGE_SLOTS as u64 + at as u64;
            let Some(record) = self.record(slot).filter(|_| slot < self.end) else { continue };
            if record.blocks() == 0 {
                image.records[at] = Record::free(record.generation()).0;
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
                record = Record::free(record.generation());
            } else if slot == 0 {
                return Err(TableError::BadId(0));
            } else if !record.spare_bits_clear() || !self.entry(record).within(self.lanes) {
                return Err(TableError::Malformed(first + at as u64));
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
            let location = entry.on(lane);
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
            let location = entry.on(lane);
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
        let entry = self.entry(record);
        (entry.on(lane) == location).then(|| (join(slot, record.generation()), entry))
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
            let mut found = self.iter().filter(|(id, entry)| entry.on(lane) == location && *id != not);
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
        Entry::on_lanes(blocks, &[a, b])
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
        assert_eq!(table.get(c).unwrap().on(1), Location::MISSING);
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
        assert!(table.memory_bytes() >= 3 * 8160, "slot 1000 lies on the third page");
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

    #[test]
    fn a_record_packs_each_copy_with_its_lane_byte_for_byte() {
        let bits = LocationBits::new(1024, 64).unwrap();
        let mut table = Table::new(bits);
        // Copies in lanes 7, 2 and 30, the second missing; 9 blocks.
        let entry = Entry::new(9, &[(7, at(5, 3)), (2, Location::MISSING), (30, at(63, 1023))]);
        let id = table.insert(&entry).unwrap();
        let freed = table.insert(&Entry::new(1, &[(0, at(0, 0))])).unwrap();
        table.remove(freed);
        let again = table.insert(&entry).unwrap();
        assert_eq!(split(again), (2, 1));
        let image = table.page_image(0, |_| None);
        // Zones of 1,024 blocks: the offset in 10 bits, the zone above.
        let copy = |lane: u64, zone: u64, offset: u64| (lane << 36) | (zone << 10) | offset;
        assert_eq!(
            image.records[1],
            [copy(7, 5, 3) | (9 << 52), copy(2, 0x3FF_FFFF, 0x3FF), copy(30, 63, 1023)],
            "slot 1: lanes above locations, blocks and generation in the top bits"
        );
        assert_eq!(image.records[2][1] >> 52, 1, "slot 2's generation");
        assert_eq!(image.records[0], [0; 3], "slot 0 is never used");
        assert_eq!(table.get(id), Some(entry));
        assert_eq!(entry.copies().collect::<Vec<_>>(), vec![(7, at(5, 3)), (2, Location::MISSING), (30, at(63, 1023))]);
        assert_eq!((entry.on(30), entry.on(2), entry.on(3)), (at(63, 1023), Location::MISSING, Location::MISSING));
        assert!(entry.has_lane(2) && !entry.has_lane(3) && !entry.is_lost());
        // A loaded page gives back the same entries.
        let mut loaded = Table::new(bits);
        loaded.load_page(&image).unwrap();
        loaded.finish_load();
        assert_eq!(loaded.get(id), Some(entry));
        assert_eq!(loaded.get(again), Some(entry));
    }

    #[test]
    fn malformed_records_are_refused_at_load() {
        let bits = LocationBits::new(1024, 64).unwrap();
        let mut table = Table::new(bits);
        table.insert(&Entry::new(4, &[(0, at(1, 0)), (1, at(2, 0))])).unwrap();
        let good = table.page_image(0, |_| None);
        type Break = fn(&mut [u64; 3]);
        let cases: [(&str, Break); 4] = [
            ("two copies in one lane: lane 0 again", |w| w[1] &= !(31 << 36)),
            ("no copy at all", |w| {
                w[0] |= 31 << 36;
                w[1] |= 31 << 36;
            }),
            ("a location in an empty copy slot", |w| w[2] = (31 << 36) | 5),
            ("spare bits", |w| w[2] |= 1 << 45),
        ];
        for (what, break_it) in cases {
            let mut image = good.clone();
            break_it(&mut image.records[1]);
            let mut loaded = Table::new(bits);
            assert_eq!(loaded.load_page(&image), Err(TableError::Malformed(1)), "{what}");
        }
        assert!(Table::new(bits).load_page(&good).is_ok());
        // A lane past the volume's: a volume of two lanes refuses a copy
        // in lane 2, before anything indexes its lanes by it.
        let mut image = good.clone();
        image.records[1][1] = (image.records[1][1] & !(31 << 36)) | (2 << 36);
        assert!(Table::with_lanes(bits, 3).load_page(&image).is_ok());
        assert_eq!(Table::with_lanes(bits, 2).load_page(&image), Err(TableError::Malformed(1)));
    }

    #[test]
    fn a_copy_moves_within_its_lane_or_to_another_and_a_move_never_adds_one() {
        let mut table = Table::new(LocationBits::new(1024, 64).unwrap());
        let id = table.insert(&Entry::new(2, &[(3, at(1, 0)), (5, at(2, 0)), (0, at(3, 0))])).unwrap();
        assert!(table.set_location(id, 3, at(4, 4)), "moved within lane 3");
        assert!(table.set_location(id, 5, Location::MISSING), "lane 5's copy missing");
        assert!(table.set_location(id, 0, at(2, 2)));
        assert_eq!(
            table.get(id).unwrap().copies().collect::<Vec<_>>(),
            vec![(3, at(4, 4)), (5, Location::MISSING), (0, at(2, 2))]
        );
        // A move never adds a copy: replayed over a page that holds a later
        // state (the copy moved to another lane since), it does nothing.
        let two = table.insert(&Entry::new(1, &[(1, at(5, 0)), (2, at(6, 0))])).unwrap();
        assert!(!table.set_location(two, 4, at(7, 0)), "no copy in lane 4");
        assert_eq!(table.get(two).unwrap().copy_count(), 2);
        // A copy moved to another lane keeps its slot.
        assert!(!table.relane(id, 5, 0, at(1, 1)), "lane 0 holds a copy already");
        assert!(!table.relane(id, 7, 6, at(1, 1)), "no copy in lane 7");
        assert!(table.relane(id, 5, 6, at(1, 1)));
        let moved: Vec<_> = table.get(id).unwrap().copies().collect();
        assert_eq!(moved, vec![(3, at(4, 4)), (6, at(1, 1)), (0, at(2, 2))]);
        assert!(table.relane(id, 6, 5, Location::MISSING), "and back");
        assert!(table.get(id).unwrap().within(6) && !table.get(id).unwrap().within(5));
    }
}
