//! The zone state machine of a zoned namespace (ZNS Command Set 1.1 §2.1.1,
//! "Zone State Machine"), with open and active resource accounting.
//!
//! Every operation checks first and changes state after, so a refused
//! command leaves the zones as they were. The resource counters are kept
//! incrementally and recounted by [`Zones::check_invariants`].

use super::config::{FullZoneWritePointer, ZonedConfig};
use crate::spec::status::{CommandSpecificStatus, GenericStatus, Status};
use crate::spec::zns::{ZoneDescriptor, ZoneState, ZONE_TYPE_SEQUENTIAL_WRITE_REQUIRED};

/// A zone's state, as the simulator keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Condition {
    Empty,
    ImplicitlyOpened,
    ExplicitlyOpened,
    Closed,
    Full,
    ReadOnly,
    Offline,
}

impl Condition {
    /// The ZS field value (ZNS 1.1, Zone Descriptor).
    pub(crate) fn zs(self) -> u8 {
        match self {
            Condition::Empty => 0x1,
            Condition::ImplicitlyOpened => 0x2,
            Condition::ExplicitlyOpened => 0x3,
            Condition::Closed => 0x4,
            Condition::ReadOnly => 0xD,
            Condition::Full => 0xE,
            Condition::Offline => 0xF,
        }
    }

    fn is_open(self) -> bool {
        matches!(self, Condition::ImplicitlyOpened | Condition::ExplicitlyOpened)
    }

    /// Open or Closed: holds an active resource.
    fn is_active(self) -> bool {
        self.is_open() || self == Condition::Closed
    }

    /// Whether the write pointer is valid (not Full, Read Only or Offline).
    fn has_write_pointer(self) -> bool {
        !matches!(self, Condition::Full | Condition::ReadOnly | Condition::Offline)
    }

    /// The Zone Receive Action Specific filter value that selects this state
    /// (ZNS 1.1, Report Zones).
    pub(crate) fn filter(self) -> u8 {
        match self {
            Condition::Empty => 1,
            Condition::ImplicitlyOpened => 2,
            Condition::ExplicitlyOpened => 3,
            Condition::Closed => 4,
            Condition::Full => 5,
            Condition::ReadOnly => 6,
            Condition::Offline => 7,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Zone {
    pub(crate) condition: Condition,
    /// The write pointer. After Finish it is the write boundary (ZSLBA +
    /// ZCAP); it is meaningless in Read Only and Offline zones.
    pub(crate) wp: u64,
}

fn status(code: CommandSpecificStatus) -> Status {
    Status::from(code).with_dnr()
}

fn invalid_field() -> Status {
    Status::from(GenericStatus::InvalidFieldInCommand).with_dnr()
}

/// The Zone Send Actions the simulator implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Close,
    Finish,
    Open,
    Reset,
    Offline,
}

/// What a zone operation did, for the data side to follow up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    None,
    /// The zone's blocks must read as zeroes again (Reset).
    Discard {
        zslba: u64,
        blocks: u64,
    },
}

/// The zones of one namespace.
#[derive(Debug)]
pub(crate) struct Zones {
    pub(crate) zone_size: u64,
    pub(crate) zone_capacity: u64,
    max_open: Option<u32>,
    max_active: Option<u32>,
    pub(crate) read_across_boundaries: bool,
    full_write_pointer: FullZoneWritePointer,
    zones: Vec<Zone>,
    open: u32,
    active: u32,
}

impl Zones {
    pub(crate) fn new(config: &ZonedConfig, capacity_blocks: u64) -> Self {
        let count = capacity_blocks / config.zone_size_blocks;
        let zones = (0..count).map(|i| Zone { condition: Condition::Empty, wp: i * config.zone_size_blocks }).collect();
        Zones {
            zone_size: config.zone_size_blocks,
            zone_capacity: config.zone_capacity_blocks,
            max_open: config.open_limit(),
            max_active: config.max_active_zones,
            read_across_boundaries: config.read_across_zone_boundaries,
            full_write_pointer: config.full_zone_write_pointer,
            zones,
            open: 0,
            active: 0,
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.zones.len()
    }

    pub(crate) fn index(&self, lba: u64) -> usize {
        (lba / self.zone_size) as usize
    }

    pub(crate) fn zslba(&self, index: usize) -> u64 {
        index as u64 * self.zone_size
    }

    /// ZSLBA + ZCAP: the first LBA past the writable part.
    pub(crate) fn write_boundary(&self, index: usize) -> u64 {
        self.zslba(index) + self.zone_capacity
    }

    pub(crate) fn zone(&self, index: usize) -> Zone {
        self.zones[index]
    }

    /// The zone starting at `slba`, or Invalid Field when `slba` starts
    /// none.
    pub(crate) fn start(&self, slba: u64) -> Result<usize, Status> {
        let index = self.index(slba);
        if index >= self.zones.len() || !slba.is_multiple_of(self.zone_size) {
            return Err(invalid_field());
        }
        Ok(index)
    }

    /// Checks a read of `blocks` blocks at `slba` (already within the
    /// namespace): no Offline zone, no zone boundary crossed unless OZCS
    /// allows it.
    pub(crate) fn check_read(&self, slba: u64, blocks: u64) -> Result<(), Status> {
        let first = self.index(slba);
        let last = self.index(slba + blocks - 1);
        if first != last && !self.read_across_boundaries {
            return Err(status(CommandSpecificStatus::ZoneBoundaryError));
        }
        if self.zones[first..=last].iter().any(|zone| zone.condition == Condition::Offline) {
            return Err(status(CommandSpecificStatus::ZoneIsOffline));
        }
        Ok(())
    }

    /// Resources free for `open` more open zones of which `active` are new
    /// active zones: Too Many Active Zones or Too Many Open Zones otherwise
    /// (the order QEMU 7.2 checks them in).
    fn check_resources(&self, active: u32, open: u32) -> Result<(), Status> {
        if self.max_active.is_some_and(|max| self.active + active > max) {
            return Err(status(CommandSpecificStatus::TooManyActiveZones));
        }
        if self.max_open.is_some_and(|max| self.open + open > max) {
            return Err(status(CommandSpecificStatus::TooManyOpenZones));
        }
        Ok(())
    }

    /// Checks a write of `blocks` blocks at `slba` (within the namespace)
    /// against the zone's state, write pointer and write boundary, and the
    /// resources an implicit open needs. Changes nothing.
    ///
    /// A Full zone is Zone Is Full, a write elsewhere than at the write
    /// pointer Zone Invalid Write, one past ZSLBA + ZCAP Zone Boundary
    /// Error (ZNS 1.1, "Zoned Namespace Command Set Specific Status
    /// Values"; the checks in QEMU 7.2's order).
    pub(crate) fn check_write(&self, slba: u64, blocks: u64) -> Result<usize, Status> {
        let index = self.index(slba);
        let zone = self.zones[index];
        match zone.condition {
            Condition::Full => return Err(status(CommandSpecificStatus::ZoneIsFull)),
            Condition::ReadOnly => return Err(status(CommandSpecificStatus::ZoneIsReadOnly)),
            Condition::Offline => return Err(status(CommandSpecificStatus::ZoneIsOffline)),
            _ => {}
        }
        if slba != zone.wp {
            return Err(status(CommandSpecificStatus::ZoneInvalidWrite));
        }
        if slba + blocks > self.write_boundary(index) {
            return Err(status(CommandSpecificStatus::ZoneBoundaryError));
        }
        match zone.condition {
            Condition::Empty => self.check_resources(1, 1)?,
            Condition::Closed => self.check_resources(0, 1)?,
            _ => {}
        }
        Ok(index)
    }

    /// The write pointer of zone `index` for a Zone Append, with the same
    /// checks as a write there.
    pub(crate) fn check_append(&self, index: usize, blocks: u64) -> Result<u64, Status> {
        let zone = self.zones[index];
        match zone.condition {
            // Checked here: a Full zone's boundary may be the next zone's
            // start, which `check_write` would judge instead.
            Condition::Full => return Err(status(CommandSpecificStatus::ZoneIsFull)),
            Condition::ReadOnly => return Err(status(CommandSpecificStatus::ZoneIsReadOnly)),
            Condition::Offline => return Err(status(CommandSpecificStatus::ZoneIsOffline)),
            _ => {}
        }
        self.check_write(zone.wp, blocks).map(|_| zone.wp)
    }

    fn set(&mut self, index: usize, condition: Condition) {
        let old = self.zones[index].condition;
        if old.is_open() {
            self.open -= 1;
        }
        if old.is_active() {
            self.active -= 1;
        }
        if condition.is_open() {
            self.open += 1;
        }
        if condition.is_active() {
            self.active += 1;
        }
        self.zones[index].condition = condition;
    }

    /// Records a write checked by [`Zones::check_write`]: an implicit open,
    /// the write pointer moves, and a zone filled to its capacity is Full.
    pub(crate) fn advance(&mut self, index: usize, blocks: u64) {
        let zone = self.zones[index];
        assert!(zone.condition.has_write_pointer(), "a write to a zone without a write pointer");
        assert!(zone.wp + blocks <= self.write_boundary(index), "a write past the zone's capacity");
        if matches!(zone.condition, Condition::Empty | Condition::Closed) {
            self.set(index, Condition::ImplicitlyOpened);
        }
        self.zones[index].wp += blocks;
        if self.zones[index].wp == self.write_boundary(index) {
            self.set(index, Condition::Full);
        }
    }

    /// Close: an open zone becomes Closed, or Empty when nothing was written
    /// to it (as QEMU 7.2's `nvme_zrm_close` does).
    fn close(&mut self, index: usize) {
        let zone = self.zones[index];
        debug_assert!(zone.condition.is_open());
        let next = if zone.wp == self.zslba(index) { Condition::Empty } else { Condition::Closed };
        self.set(index, next);
    }

    /// One Zone Send Action on one zone (ZNS 1.1 §3.4.3).
    pub(crate) fn apply(&mut self, index: usize, action: Action) -> Result<Effect, Status> {
        use Condition::*;
        let zone = self.zones[index];
        let invalid = || Err(status(CommandSpecificStatus::InvalidZoneStateTransition));
        match action {
            Action::Open => match zone.condition {
                Empty => self.check_resources(1, 1)?,
                Closed => self.check_resources(0, 1)?,
                ImplicitlyOpened | ExplicitlyOpened => {}
                Full | ReadOnly | Offline => return invalid(),
            },
            Action::Close => match zone.condition {
                ImplicitlyOpened | ExplicitlyOpened => {
                    self.close(index);
                    return Ok(Effect::None);
                }
                Closed => return Ok(Effect::None),
                Empty | Full | ReadOnly | Offline => return invalid(),
            },
            Action::Finish => match zone.condition {
                Empty | ImplicitlyOpened | ExplicitlyOpened | Closed => {
                    // The write pointer moves to the write boundary; the
                    // unwritten blocks read as deallocated.
                    self.zones[index].wp = self.write_boundary(index);
                    self.set(index, Full);
                    return Ok(Effect::None);
                }
                Full => return Ok(Effect::None),
                ReadOnly | Offline => return invalid(),
            },
            Action::Reset => match zone.condition {
                ImplicitlyOpened | ExplicitlyOpened | Closed | Full => {
                    self.zones[index].wp = self.zslba(index);
                    self.set(index, Empty);
                    return Ok(Effect::Discard { zslba: self.zslba(index), blocks: self.zone_size });
                }
                Empty => return Ok(Effect::None),
                ReadOnly | Offline => return invalid(),
            },
            Action::Offline => match zone.condition {
                ReadOnly => {
                    self.set(index, Offline);
                    return Ok(Effect::None);
                }
                Offline => return Ok(Effect::None),
                _ => return invalid(),
            },
        }
        // Open, resources checked.
        self.set(index, ExplicitlyOpened);
        Ok(Effect::None)
    }

    /// The zones Select All applies `action` to (ZNS 1.1 §3.4.3: Open: the
    /// Closed zones; Close: the open ones; Finish: the open and Closed ones;
    /// Reset: the open, Closed and Full ones; Offline: the Read Only ones).
    pub(crate) fn selected_by_all(&self, index: usize, action: Action) -> bool {
        use Condition::*;
        let condition = self.zones[index].condition;
        match action {
            Action::Open => condition == Closed,
            Action::Close => condition.is_open(),
            Action::Finish => condition.is_open() || condition == Closed,
            Action::Reset => condition.is_active() || condition == Full,
            Action::Offline => condition == ReadOnly,
        }
    }

    /// Open with Select All needs an open resource for every Closed zone,
    /// all or nothing.
    pub(crate) fn check_open_all(&self) -> Result<(), Status> {
        let closed = self.zones.iter().filter(|zone| zone.condition == Condition::Closed).count() as u32;
        self.check_resources(0, closed)
    }

    /// Puts a zone in Read Only or Offline (fault injection), releasing its
    /// resources.
    pub(crate) fn force(&mut self, index: usize, condition: Condition) {
        assert!(matches!(condition, Condition::ReadOnly | Condition::Offline));
        self.set(index, condition);
    }

    /// What a controller reset does (and a shutdown): open zones close.
    pub(crate) fn close_open_zones(&mut self) {
        for index in 0..self.zones.len() {
            if self.zones[index].condition.is_open() {
                self.close(index);
            }
        }
    }

    /// After a power cut: the write pointer of zone `index` moves back to
    /// `wp` (the end of its persisted prefix). A zone rewound to its start is
    /// Empty; otherwise it is Closed, unless no active resource is free, in
    /// which case the controller finishes it (Full). Read Only and Offline
    /// zones have no write pointer to move: false for them.
    pub(crate) fn rewind(&mut self, index: usize, wp: u64) -> bool {
        let zone = self.zones[index];
        if matches!(zone.condition, Condition::ReadOnly | Condition::Offline) {
            return false;
        }
        assert!(wp >= self.zslba(index) && wp <= zone.wp, "a rewind moves the write pointer back");
        if wp == self.zslba(index) {
            self.zones[index].wp = wp;
            self.set(index, Condition::Empty);
            return true;
        }
        let was_active = zone.condition.is_active();
        if !was_active && self.max_active.is_some_and(|max| self.active >= max) {
            self.zones[index].wp = self.write_boundary(index);
            self.set(index, Condition::Full);
            return true;
        }
        self.zones[index].wp = wp;
        self.set(index, Condition::Closed);
        true
    }

    /// The zone descriptor as Report Zones returns it.
    pub(crate) fn descriptor(&self, index: usize) -> ZoneDescriptor {
        let zone = self.zones[index];
        let wp = if zone.condition.has_write_pointer() {
            zone.wp
        } else {
            match self.full_write_pointer {
                FullZoneWritePointer::AllOnes => u64::MAX,
                FullZoneWritePointer::WriteBoundary => self.write_boundary(index),
            }
        };
        ZoneDescriptor {
            zt: ZONE_TYPE_SEQUENTIAL_WRITE_REQUIRED,
            state: ZoneState::from_raw(zone.condition.zs()),
            za: 0,
            zcap: self.zone_capacity,
            zslba: self.zslba(index),
            wp,
        }
    }

    /// Recounts the resources and checks every zone against its state.
    pub(crate) fn check_invariants(&self) {
        let open = self.zones.iter().filter(|zone| zone.condition.is_open()).count() as u32;
        let active = self.zones.iter().filter(|zone| zone.condition.is_active()).count() as u32;
        assert_eq!((open, active), (self.open, self.active), "zone resource counters drifted");
        assert!(self.max_open.is_none_or(|max| open <= max), "more open zones than MOR allows");
        assert!(self.max_active.is_none_or(|max| active <= max), "more active zones than MAR allows");
        for (index, zone) in self.zones.iter().enumerate() {
            let zslba = self.zslba(index);
            match zone.condition {
                Condition::Empty => assert_eq!(zone.wp, zslba, "an Empty zone's WP is its start"),
                Condition::ImplicitlyOpened | Condition::ExplicitlyOpened | Condition::Closed => {
                    assert!(zone.wp >= zslba && zone.wp < self.write_boundary(index), "WP inside the zone");
                }
                Condition::Full => assert_eq!(zone.wp, self.write_boundary(index), "a Full zone's WP"),
                Condition::ReadOnly | Condition::Offline => {}
            }
            if zone.condition == Condition::Closed {
                assert!(zone.wp > zslba, "a Closed zone holds data");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::status::StatusCode;

    fn zones(max_open: Option<u32>, max_active: Option<u32>) -> Zones {
        let config = ZonedConfig {
            zone_size_blocks: 100,
            zone_capacity_blocks: 80,
            max_open_zones: max_open,
            max_active_zones: max_active,
            read_across_zone_boundaries: false,
            full_zone_write_pointer: FullZoneWritePointer::AllOnes,
        };
        Zones::new(&config, 1000)
    }

    fn code(result: Result<impl std::fmt::Debug, Status>) -> StatusCode {
        result.unwrap_err().code()
    }

    fn write(zones: &mut Zones, slba: u64, blocks: u64) -> Result<(), Status> {
        let index = zones.check_write(slba, blocks)?;
        zones.advance(index, blocks);
        zones.check_invariants();
        Ok(())
    }

    #[test]
    fn writes_follow_the_write_pointer_up_to_the_capacity() {
        let mut z = zones(None, None);
        write(&mut z, 0, 10).unwrap();
        assert_eq!(z.zone(0).condition, Condition::ImplicitlyOpened);
        assert_eq!(code(write(&mut z, 5, 1)), StatusCode::CommandSpecific(CommandSpecificStatus::ZoneInvalidWrite));
        assert_eq!(code(write(&mut z, 10, 71)), StatusCode::CommandSpecific(CommandSpecificStatus::ZoneBoundaryError));
        write(&mut z, 10, 70).unwrap();
        assert_eq!(z.zone(0).condition, Condition::Full);
        assert_eq!(code(write(&mut z, 80, 1)), StatusCode::CommandSpecific(CommandSpecificStatus::ZoneIsFull));
        assert_eq!(z.descriptor(0).wp, u64::MAX, "no valid WP in a Full zone");
        assert_eq!(z.check_append(1, 8), Ok(100));
        assert_eq!(
            z.check_append(0, 8).unwrap_err().code(),
            StatusCode::CommandSpecific(CommandSpecificStatus::ZoneIsFull)
        );
        assert!(z.check_read(95, 10).is_err(), "reads stay inside a zone");
        assert!(z.check_read(0, 100).is_ok(), "reads past the capacity inside the zone are fine");
    }

    #[test]
    fn open_and_active_limits() {
        let mut z = zones(Some(2), Some(3));
        write(&mut z, 0, 1).unwrap();
        write(&mut z, 100, 1).unwrap();
        assert_eq!(code(write(&mut z, 200, 1)), StatusCode::CommandSpecific(CommandSpecificStatus::TooManyOpenZones));
        z.apply(0, Action::Close).unwrap();
        write(&mut z, 200, 1).unwrap();
        assert_eq!(
            code(write(&mut z, 300, 1)),
            StatusCode::CommandSpecific(CommandSpecificStatus::TooManyActiveZones),
            "three active: zones 0 (Closed), 1, 2"
        );
        assert_eq!(
            code(z.apply(0, Action::Open)),
            StatusCode::CommandSpecific(CommandSpecificStatus::TooManyOpenZones)
        );
        z.apply(1, Action::Finish).unwrap();
        z.apply(0, Action::Open).unwrap();
        assert_eq!(z.zone(0).condition, Condition::ExplicitlyOpened);
        z.check_invariants();
    }

    #[test]
    fn zone_actions_follow_the_state_machine() {
        let mut z = zones(None, None);
        let transition = StatusCode::CommandSpecific(CommandSpecificStatus::InvalidZoneStateTransition);
        assert_eq!(code(z.apply(0, Action::Close)), transition, "an Empty zone cannot close");
        z.apply(0, Action::Open).unwrap();
        z.apply(0, Action::Close).unwrap();
        assert_eq!(z.zone(0).condition, Condition::Empty, "closing an unwritten zone empties it");
        z.apply(0, Action::Finish).unwrap();
        assert_eq!((z.zone(0).condition, z.zone(0).wp), (Condition::Full, 80));
        assert_eq!(z.apply(0, Action::Reset), Ok(Effect::Discard { zslba: 0, blocks: 100 }));
        assert_eq!(z.apply(0, Action::Reset), Ok(Effect::None));
        assert_eq!(code(z.apply(0, Action::Offline)), transition);
        z.force(3, Condition::ReadOnly);
        assert_eq!(code(write(&mut z, 300, 1)), StatusCode::CommandSpecific(CommandSpecificStatus::ZoneIsReadOnly));
        assert!(z.selected_by_all(3, Action::Offline));
        z.apply(3, Action::Offline).unwrap();
        assert_eq!(
            z.check_read(300, 1).unwrap_err().code(),
            StatusCode::CommandSpecific(CommandSpecificStatus::ZoneIsOffline)
        );
        assert_eq!(code(z.apply(3, Action::Reset)), transition);
        z.check_invariants();
    }

    #[test]
    fn resets_close_and_power_cuts_rewind() {
        let mut z = zones(None, Some(3));
        write(&mut z, 0, 10).unwrap();
        z.apply(1, Action::Open).unwrap();
        write(&mut z, 200, 80).unwrap();
        assert_eq!(z.zone(2).condition, Condition::Full);
        z.close_open_zones();
        assert_eq!(z.zone(0).condition, Condition::Closed);
        assert_eq!(z.zone(1).condition, Condition::Empty);
        assert!(z.rewind(0, 4));
        assert_eq!((z.zone(0).condition, z.zone(0).wp), (Condition::Closed, 4));
        // Zone 2 is Full (not active); rewinding it needs an active
        // resource, and zones 0, 3 and 4 hold all three.
        write(&mut z, 300, 1).unwrap();
        write(&mut z, 400, 1).unwrap();
        assert!(z.rewind(2, 250));
        assert_eq!(z.zone(2).condition, Condition::Full, "no active resource free: finished instead");
        assert!(z.rewind(0, 0));
        z.force(5, Condition::ReadOnly);
        assert!(!z.rewind(5, 500), "no write pointer to move");
        assert_eq!(z.zone(0).condition, Condition::Empty);
        z.check_invariants();
    }
}
