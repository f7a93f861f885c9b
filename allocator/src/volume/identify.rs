//! Which given device is which member: labels read at open place the
//! devices, and what a device holds is told to tools ([`Volume::probe`]).

use super::Volume;
use crate::device::{zone_has_write_pointer, Device};
use crate::error::{Error, Result};
use crate::journal::layout::{placed_copies, read_segment_image, segment_capacity, MetaCopy, SegmentImage, COPIES_MAX};
use crate::journal::recovery::{chain_end, probe, Probe};
use crate::journal::{Label, Superblock};
use crate::Profile;
use nvme_driver::spec::zns::{ZoneDescriptor, ZoneState};
use serde::Serialize;

/// How open places the devices it was given.
pub(super) struct Identified {
    /// The label to open with (the newest).
    pub(super) label: Label,
    /// For each of the volume's places, the index of the given device that
    /// takes it, if any.
    pub(super) order: Vec<Option<usize>>,
    /// Places taken by devices without a label (which must then prove to
    /// hold the volume's data).
    pub(super) unlabelled: Vec<usize>,
    /// Places left empty (allowed only when opening degraded), and why.
    pub(super) absent: Vec<(usize, String)>,
}

/// Places the given devices by their labels. A place no given device can
/// take is absent when `degraded` allows it, or when `refuse_absent` is
/// off (the caller refuses them once it knows the places: open, after the
/// durable metadata said them); [`Error::Degraded`] otherwise. At least
/// one must be taken.
pub(super) fn identify(
    probes: &[Probe],
    devices: &[Device],
    degraded: bool,
    refuse_absent: bool,
) -> Result<Identified> {
    for (device, probe) in probes.iter().enumerate() {
        if let Probe::OtherVersion(version) = probe {
            return Err(Error::UnsupportedVersion { device, version: *version });
        }
    }
    // The newest label (it says where the segments are now); on a tie the
    // first given, so that a device of another volume is the one named.
    let labels = probes.iter().filter_map(|p| if let Probe::Label(l) = p { Some(l) } else { None });
    let newest = labels.fold(None::<&Label>, |best, l| match best {
        Some(b) if b.generation >= l.generation => Some(b),
        _ => Some(l),
    });
    let Some(label) = newest.cloned() else {
        for (device, probe) in probes.iter().enumerate() {
            match probe {
                Probe::Unreadable(what) => return Err(Error::Unreadable { device, what: what.clone() }),
                Probe::Unrecognized => return Err(Error::Unrecognized { device }),
                _ => {}
            }
        }
        return Err(Error::NoVolume);
    };
    let count = label.superblock.devices.len();
    if devices.len() > count {
        return Err(Error::InvalidConfig(format!("the volume spans {count} namespace(s), {} given", devices.len())));
    }
    let mut order: Vec<Option<usize>> = vec![None; count];
    // Each device by its member ID where the newest label knows it (a
    // removal moves the last member into the place it empties, and the
    // device's own label may name its old place until rewritten); then
    // the others, by the place their label names.
    let mut placed = vec![false; probes.len()];
    for (given, probe) in probes.iter().enumerate() {
        let Probe::Label(other) = probe else { continue };
        if other.volume_id != label.volume_id {
            return Err(Error::ForeignDevice { device: given, found: other.volume_id, expected: label.volume_id });
        }
        let id = other.superblock.members.get(usize::from(other.device_index)).map(|m| m.id);
        if let Some(slot) = label.superblock.members.iter().position(|m| Some(m.id) == id) {
            if order[slot].is_none() {
                order[slot] = Some(given);
                placed[given] = true;
            }
        }
    }
    for (given, probe) in probes.iter().enumerate() {
        let Probe::Label(other) = probe else { continue };
        if placed[given] {
            continue;
        }
        let slot = usize::from(other.device_index);
        if slot >= count && other.generation < label.generation {
            return Err(Error::Removed { device: given, place: slot });
        }
        if order.get(slot).is_some_and(Option::is_some) && other.generation < label.generation {
            return Err(Error::Replaced { device: given, place: slot });
        }
        match order.get(slot) {
            Some(None) => order[slot] = Some(given),
            _ => {
                return Err(Error::Corrupt(format!(
                    "device {given} claims place {slot} of a volume of {count} device(s), which is taken"
                )))
            }
        }
    }
    let mut unlabelled_given = (0..probes.len()).filter(|&i| !matches!(probes[i], Probe::Label(_)));
    let mut unlabelled = Vec::new();
    let mut absent = Vec::new();
    for (slot, place) in order.iter_mut().enumerate() {
        if place.is_none() {
            *place = unlabelled_given.next();
            match place {
                Some(_) => unlabelled.push(slot),
                None => absent.push((slot, "not given".to_string())),
            }
        }
    }
    for (slot, place) in order.clone().into_iter().enumerate() {
        let Some(given) = place else { continue };
        let (nsid, lba, capacity, zoned) = label.superblock.devices[slot];
        let device = &devices[given];
        let found = (device.ns.nsid(), device.ns.block_size(), device.ns.capacity_blocks(), device.is_zoned());
        if found == (nsid, lba, capacity, zoned) {
            continue;
        }
        let error = match &probes[given] {
            Probe::Unreadable(what) => Error::Unreadable { device: given, what: what.clone() },
            Probe::Blank => Error::BlankDevice { device: given, volume_id: label.volume_id },
            Probe::Unrecognized => Error::Unrecognized { device: given },
            _ => Error::InvalidConfig(format!(
                "device {given}: the volume expects NSID {nsid}, {lba}-byte LBAs, {capacity} LBAs, zoned {zoned} \
                 in its place {slot}; found {found:?}"
            )),
        };
        // Only a device without a label may be left out: a labelled one
        // that does not fit its place is not the device it claims to be.
        if !degraded || matches!(probes[given], Probe::Label(_)) {
            return Err(error);
        }
        order[slot] = None;
        unlabelled.retain(|&s| s != slot);
        absent.push((slot, error.to_string()));
    }
    if order.iter().all(Option::is_none) {
        return Err(Error::NoDevices);
    }
    if !absent.is_empty() && !degraded && refuse_absent {
        return Err(degraded_error(&absent));
    }
    Ok(Identified { label, order, unlabelled, absent })
}

/// The refusal of a volume with places not taken, when not opened
/// degraded.
pub(super) fn degraded_error(absent: &[(usize, String)]) -> Error {
    let why = absent.iter().map(|(slot, why)| format!("place {slot}: {why}")).collect::<Vec<_>>().join("; ");
    Error::Degraded { missing: absent.iter().map(|&(slot, _)| slot).collect(), why }
}

/// Reads both segments of every metadata copy: what was written of each
/// (up to the write pointers on zoned namespaces, the whole segment on
/// conventional ones). With `every_copy` false, the first copy present is
/// read whole and each other one only where it may hold what the first
/// lacks: its labels, the head of each segment, and, when that head is the
/// first copy's, the blocks past the end of the first copy's chain there
/// (see `read_segment_image`). What an image skipped is its `skipped`.
pub(super) fn read_images(
    devices: &mut [Option<Device>],
    descriptors: &[Vec<ZoneDescriptor>],
    superblock: &Superblock,
    volume_id: u64,
    every_copy: bool,
) -> Vec<Option<[SegmentImage; 2]>> {
    let g = superblock.meta_zones_per_segment;
    let mut images: Vec<Option<[SegmentImage; 2]>> = Vec::with_capacity(COPIES_MAX);
    for copy in placed_copies(superblock) {
        let Some(device) = devices[copy.device].as_mut() else {
            images.push(None);
            continue;
        };
        let first = images.iter().flatten().next().filter(|_| !every_copy);
        let mut read = |segment: u32| {
            let (blocks, ends_full) = written_blocks(device, &descriptors[copy.device], copy, g, segment);
            let beside = first.map(|first| {
                let first = &first[segment as usize];
                (first, chain_end(first, volume_id))
            });
            read_segment_image(device, copy, g, segment, blocks, ends_full, beside)
        };
        let pair = [read(0), read(1)];
        images.push(Some(pair));
    }
    images
}

/// How many blocks of a segment open reads, and whether they end in a
/// full zone (see [`written_extent`]): the whole segment on a conventional
/// namespace.
pub(super) fn written_blocks(
    device: &Device,
    descriptors: &[ZoneDescriptor],
    copy: MetaCopy,
    g: u32,
    segment: u32,
) -> (u64, bool) {
    if !device.is_zoned() {
        return (segment_capacity(device, copy, g, segment), false);
    }
    let zones = copy.segments[segment as usize]..copy.segments[segment as usize] + g;
    let written: Vec<(u64, u64, bool)> = zones
        .map(|zone| {
            let d = &descriptors[zone as usize];
            let capacity = u64::from(device.zones[zone as usize].capacity_blocks);
            let written = match d.state {
                ZoneState::Full => capacity,
                state if zone_has_write_pointer(state) => (d.wp - d.zslba) / device.lbas_per_block,
                _ => 0,
            };
            (written, capacity, d.state == ZoneState::Full)
        })
        .collect();
    written_extent(&written)
}

/// How far a zoned segment is written, from each of its zones' (blocks
/// written, capacity, full): the log runs through full zones and ends in
/// the first that is not. Also whether it ends in a full zone, whose
/// write pointer no longer says where the log ends (a rotation finishes
/// the zone the log leaves): `read_segment_image` then stops at a run of
/// zero blocks.
fn written_extent(zones: &[(u64, u64, bool)]) -> (u64, bool) {
    let (mut blocks, mut ends_full) = (0, false);
    for &(written, capacity, full) in zones {
        if written == 0 {
            break;
        }
        blocks += written;
        ends_full = full;
        if written < capacity {
            break;
        }
    }
    (blocks, ends_full)
}

/// What a device holds, for tools deciding whether it may be formatted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceState {
    /// No label anywhere, and every place a label could be was read.
    Blank,
    /// A member of a volume.
    Member {
        /// The volume ([`Volume::id`]).
        volume_id: u64,
        /// Its place in the volume.
        device_index: u8,
        /// The volume's profile.
        profile: Profile,
    },
    /// No label found, and reads failed: it may hold a volume.
    Unreadable(String),
    /// No label found, and it holds data: not blank.
    Unrecognized,
    /// A volume of another format version.
    OtherVersion(u8),
}

impl Volume {
    /// What `device` holds: blank, a member of some volume, unreadable, or
    /// a volume of another format. Reads only.
    pub fn probe(device: &mut Device) -> DeviceState {
        match probe(device, None) {
            Probe::Label(label) => DeviceState::Member {
                volume_id: label.volume_id,
                device_index: label.device_index,
                profile: label.superblock.profile,
            },
            Probe::Blank => DeviceState::Blank,
            Probe::Unreadable(what) => DeviceState::Unreadable(what),
            Probe::Unrecognized => DeviceState::Unrecognized,
            Probe::OtherVersion(version) => DeviceState::OtherVersion(version),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::written_extent;

    #[test]
    fn a_segment_is_written_through_its_full_zones_to_the_first_that_is_not() {
        let full = (64, 64, true);
        assert_eq!(written_extent(&[(0, 64, false), (0, 64, false)]), (0, false), "empty");
        assert_eq!(written_extent(&[(10, 64, false), (0, 64, false)]), (10, false), "open or closed");
        assert_eq!(written_extent(&[full, (0, 64, false), (0, 64, false)]), (64, true), "finished, then empty");
        assert_eq!(written_extent(&[full, full, (0, 64, false)]), (128, true));
        assert_eq!(written_extent(&[full, (5, 64, false), full]), (69, false), "ends in a closed zone");
        assert_eq!(written_extent(&[full, full]), (128, true), "every zone full");
    }
}
