//! The status view: [`Volume::status`], what `zpool status` shows.

use super::Volume;
use crate::journal::ScrubRecord;
use crate::zones::ZoneUse;
use crate::{Profile, BLOCK_SIZE};
use serde::Serialize;

/// A device's standing, as [`Volume::status`] shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberState {
    /// In use, and holds every copy it should.
    Online,
    /// In use, but some copies it should hold are missing: a resilver
    /// writes them.
    Resilvering,
    /// Not in use: it went away, failed too often, or is not present.
    Failed,
}

/// The volume's standing, as `zpool status` sums it up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeState {
    /// Every device in use, every extent with all its copies.
    Online,
    /// Every device in use, some extents lack a copy: a resilver is due
    /// or running.
    Resilvering,
    /// A device is not in use: extents written now have one copy fewer.
    Degraded,
    /// Every device in use, but some extents have no copy left (lost with
    /// a device that held their only copy): they read as uncorrectable
    /// until freed ([`Volume::lost_extents`]).
    Damaged,
    /// No device is left.
    Failed,
}

/// Per-device error counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceErrors {
    /// Reads that failed (persisted).
    pub read: u64,
    /// Writes that failed (persisted).
    pub write: u64,
    /// Blocks whose checksum did not match (persisted).
    pub checksum: u64,
    /// Commands that timed out, since open.
    pub timeouts: u64,
    /// Commands ended by a controller reset, since open.
    pub resets: u64,
}

/// One device place, as [`Volume::status`] shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceStatus {
    /// The device's place in the volume.
    pub place: usize,
    /// What it holds, in words ("mirror copy 1", "copies 0 and 1").
    pub role: String,
    /// Its standing.
    pub state: MemberState,
    /// Why it is not in use, when it is not.
    pub why: Option<String>,
    /// Namespace ID.
    pub nsid: u32,
    /// Hardware zones (ZNS) or software zones on a conventional namespace.
    pub zoned: bool,
    /// Where it is (a PCI address), model and serial, as the caller set
    /// them on the device ([`crate::Device::set_identity`]); empty when unknown.
    pub pci: String,
    /// Model number.
    pub model: String,
    /// Serial number.
    pub serial: String,
    /// Error counters.
    pub errors: DeviceErrors,
    /// Data zones by state, summed over its lanes.
    pub zones_empty: u64,
    /// Zones being written.
    pub zones_open: u64,
    /// Zones filled or retired.
    pub zones_full: u64,
    /// Zones worn out (Read Only or Offline).
    pub zones_worn: u64,
    /// Bytes of live copies it holds.
    pub used_bytes: u64,
    /// Bytes its lanes hold when full ([`crate::zones::ZoneTable::usable_blocks`]:
    /// data zones, less the zones kept for reclaim).
    pub capacity_bytes: u64,
    /// Bytes of copies it should hold but lacks.
    pub missing_bytes: u64,
    /// Bytes of it the metadata takes: its segments (two per metadata copy
    /// on it), or the zone of its label on a member with no copy.
    pub metadata_bytes: u64,
    /// Extents whose only copy available is on it: lost if it went too
    /// (ZFS's "one more device" question, asked of each device).
    pub sole_extents: u64,
    /// Their bytes.
    pub sole_bytes: u64,
}

/// How much of the data has every copy. A copy is available when its
/// bytes are on a device in use: not missing (to be written by a
/// resilver), and not on a device away or given up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Redundancy {
    /// Copies each extent should have.
    pub copies: usize,
    /// Bytes (counted once per extent) with every copy available.
    pub bytes_full: u64,
    /// Bytes with fewer copies available than asked (at least one).
    pub bytes_at_risk: u64,
    /// Extents with fewer copies available than asked (at least one).
    pub extents_at_risk: u64,
    /// The extents at risk by how many copies they have left, from one
    /// up: with one left, the next fault on its device loses them.
    pub by_copies_left: Vec<CopiesLeft>,
    /// Bytes of the extents with a copy missing from its device, for a
    /// resilver to write (written while the device was away, or on a
    /// device put in a place since). A copy on a device that is away but
    /// holds it is not missing: it counts again when the device rejoins.
    pub bytes_missing: u64,
    /// Extents with a copy missing.
    pub extents_missing: u64,
    /// Bytes with no copy on a device in use: lost with the device that
    /// held their only copy (counted in neither figure above). They read
    /// as uncorrectable until freed ([`Volume::lost_extents`] names them).
    pub bytes_lost: u64,
    /// Extents lost so.
    pub extents_lost: u64,
}

/// Extents with `copies` copies available, fewer than asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CopiesLeft {
    /// Copies available.
    pub copies: usize,
    /// Extents with that many.
    pub extents: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A resilver's progress: what remains to be copied to a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ResilverStatus {
    /// The device place being brought up to date.
    pub place: usize,
    /// Bytes still to copy there.
    pub bytes_left: u64,
}

/// What [`Volume::status`] reports: the `zpool status` view.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VolumeStatus {
    /// The volume's identity.
    pub volume_id: u64,
    /// Its standing.
    pub state: VolumeState,
    /// Copies and devices.
    pub profile: Profile,
    /// Metadata bytes per 4 KiB block that carry each block's checksum on
    /// the devices (block tags); `None` when the checksums live in the
    /// extent map or in checksum areas.
    pub block_tag_bytes: Option<usize>,
    /// The checksums live in an area after each zone's data
    /// ([`crate::area`]), and in the map for the zones being filled.
    pub checksum_areas: bool,
    /// Zones whose checksum area could not be written
    /// ([`crate::VolumeStats::unsealed_zones`]): their extents keep their
    /// checksums in memory until reclaim moves them.
    pub unsealed_zones: u64,
    /// Every device place.
    pub devices: Vec<DeviceStatus>,
    /// How much of the data has every copy.
    pub redundancy: Redundancy,
    /// What remains to resilver, per place that is in use but lacks copies.
    pub resilver: Vec<ResilverStatus>,
    /// The last scrub pass recorded in the metadata.
    pub last_scrub: Option<ScrubRecord>,
    /// Bytes the volume can hold, and bytes live.
    pub capacity_bytes: u64,
    /// Bytes of live data (one copy).
    pub used_bytes: u64,
    /// The last committed journal sequence number.
    pub committed_seq: u64,
}

impl Volume {
    /// The volume's standing, device by device: the `zpool status` view.
    pub fn status(&self) -> VolumeStatus {
        let copies = self.copies();
        let mut by_copies_left = vec![CopiesLeft::default(); copies];
        let mut redundancy = Redundancy { copies, ..Redundancy::default() };
        let mut missing_per_lane = vec![0u64; self.lanes.len()];
        let mut sole_per_device = vec![(0u64, 0u64); self.devices.len()];
        for (_, extent) in self.table.iter() {
            let bytes = u64::from(extent.blocks) * BLOCK_SIZE as u64;
            let mut available = 0;
            let mut last_place = 0;
            if extent.copies().any(|(_, location)| location.is_missing()) {
                redundancy.bytes_missing += bytes;
                redundancy.extents_missing += 1;
            }
            for (lane, location) in extent.copies() {
                if location.is_missing() {
                    missing_per_lane[lane] += bytes;
                } else if self.lane_online(lane) {
                    available += 1;
                    last_place = self.lanes[lane].device;
                }
            }
            match available {
                0 => {
                    redundancy.bytes_lost += bytes;
                    redundancy.extents_lost += 1;
                }
                left if left < copies => {
                    redundancy.bytes_at_risk += bytes;
                    redundancy.extents_at_risk += 1;
                    by_copies_left[left].extents += 1;
                    by_copies_left[left].bytes += bytes;
                }
                _ => redundancy.bytes_full += bytes,
            }
            // A dup's two copies are on one device: it is the sole holder
            // of both.
            let one_device = extent
                .copies()
                .filter(|&(l, at)| !at.is_missing() && self.lane_online(l))
                .all(|(l, _)| self.lanes[l].device == last_place);
            if available > 0 && one_device {
                sole_per_device[last_place].0 += 1;
                sole_per_device[last_place].1 += bytes;
            }
        }
        redundancy.by_copies_left = (1..copies)
            .map(|left| CopiesLeft { copies: left, ..by_copies_left[left] })
            .filter(|c| c.extents > 0)
            .collect();
        let mut devices = Vec::new();
        let mut resilver = Vec::new();
        for (place, member) in self.members.iter().enumerate() {
            let lanes: Vec<usize> = (0..self.lanes.len()).filter(|&l| self.lanes[l].device == place).collect();
            let missing_bytes: u64 = lanes.iter().map(|&l| missing_per_lane[l]).sum();
            let present = self.devices[place].as_ref();
            let state = match present {
                None => MemberState::Failed,
                Some(_) if missing_bytes > 0 => MemberState::Resilvering,
                Some(_) => MemberState::Online,
            };
            if state == MemberState::Resilvering {
                resilver.push(ResilverStatus { place, bytes_left: missing_bytes });
            }
            let mut status = DeviceStatus {
                place,
                role: role(self.superblock.profile, self.devices.len(), &lanes),
                state,
                why: member.why.clone(),
                nsid: self.superblock.devices[place].0,
                zoned: self.superblock.devices[place].3,
                pci: String::new(),
                model: String::new(),
                serial: String::new(),
                errors: DeviceErrors {
                    read: member.record.read_errors,
                    write: member.record.write_errors,
                    checksum: member.record.checksum_errors,
                    timeouts: member.timeouts,
                    resets: member.resets,
                },
                zones_empty: 0,
                zones_open: 0,
                zones_full: 0,
                zones_worn: 0,
                used_bytes: 0,
                capacity_bytes: 0,
                missing_bytes,
                metadata_bytes: 0,
                sole_extents: sole_per_device[place].0,
                sole_bytes: sole_per_device[place].1,
            };
            (status.pci, status.model, status.serial) = member.identity.clone();
            if let Some(device) = present {
                (status.pci, status.model, status.serial) = device.identity.clone();
                let g = self.journal.g;
                let blocks: u64 = match self.journal.copies.iter().filter(|c| c.device == place).count() {
                    0 => (0..crate::journal::layout::LABEL_ZONES as usize)
                        .map(|z| device.zones.get(z).map_or(0, |z| u64::from(z.capacity_blocks)))
                        .sum(),
                    _ => self
                        .journal
                        .copies
                        .iter()
                        .filter(|c| c.device == place)
                        .flat_map(|&copy| (0..2).map(move |s| (copy, s)))
                        .map(|(copy, s)| crate::journal::layout::segment_capacity(device, copy, g, s))
                        .sum(),
                };
                status.metadata_bytes = blocks * BLOCK_SIZE as u64;
                for &lane in &lanes {
                    let table = &self.lanes[lane].table;
                    for zone in 0..table.zone_count() {
                        match table.zone(zone).usage {
                            ZoneUse::NotOwned => {}
                            ZoneUse::Empty => status.zones_empty += 1,
                            ZoneUse::Open(_) => status.zones_open += 1,
                            ZoneUse::Full => status.zones_full += 1,
                            ZoneUse::Worn => status.zones_worn += 1,
                        }
                    }
                    status.used_bytes += table.valid_blocks() * BLOCK_SIZE as u64;
                    status.capacity_bytes += table.usable_blocks() * BLOCK_SIZE as u64;
                }
            }
            devices.push(status);
        }
        let state = if self.devices.iter().all(Option::is_none) {
            VolumeState::Failed
        } else if self.devices.iter().any(Option::is_none) {
            VolumeState::Degraded
        } else if redundancy.extents_lost > 0 {
            VolumeState::Damaged
        } else if redundancy.extents_at_risk > 0 {
            VolumeState::Resilvering
        } else {
            VolumeState::Online
        };
        VolumeStatus {
            volume_id: self.volume_id,
            state,
            profile: self.superblock.profile,
            block_tag_bytes: self.tags.filter(|_| !self.area).map(|layout| layout.stride),
            checksum_areas: self.area,
            unsealed_zones: self.unsealed_zones(),
            devices,
            redundancy,
            resilver,
            last_scrub: self.superblock.last_scrub,
            capacity_bytes: self.capacity_bytes(),
            used_bytes: self.valid_blocks() * BLOCK_SIZE as u64,
            committed_seq: self.journal.seq,
        }
    }
}

/// A place's role in a volume of `devices` places, in words.
fn role(profile: Profile, devices: usize, lanes: &[usize]) -> String {
    match (profile, lanes) {
        (Profile::Dup, _) => "both copies (dup)".into(),
        (Profile::Single, _) if devices == 1 => "the only copy".into(),
        (Profile::Single, _) => "the only copy of the extents placed on it".into(),
        (Profile::Mirror, [lane]) if devices == 2 => format!("mirror copy {lane}"),
        _ => format!("one of the {} copies of the extents placed on it", profile.copies()),
    }
}
