//! A read-only consistency check, like `btrfs check`: everything open
//! verifies (labels, both metadata copies, the journal chain, the extent
//! map against the zones on every copy), reported, with what open would
//! repair or change, and nothing written.

use super::zone_plan::ZoneAction;
use super::Volume;
use crate::device::Device;
use crate::error::Result;
use crate::BLOCK_SIZE;
use nvme_driver::cmd::zns::ZoneSendAction;
use serde::Serialize;

/// What [`Volume::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// The volume.
    pub volume_id: u64,
    /// The committed journal sequence number and its segment's generation.
    pub committed_seq: u64,
    /// The generation of the checkpoint the state was rebuilt from.
    pub generation: u64,
    /// Per device place: the index of the device given that takes it, if
    /// any, and why a place is empty.
    pub places: Vec<CheckedPlace>,
    /// Per metadata copy: records of the committed state that do not
    /// verify there (0 for a copy whose device is absent).
    pub bad_records: Vec<u64>,
    /// Per metadata copy: damaged or missing labels of its current segment.
    pub bad_labels: Vec<u64>,
    /// Live extents, and their bytes (one copy).
    pub extents: u64,
    /// Bytes of live data, one copy.
    pub bytes: u64,
    /// Per copy (lane): blocks of copies recorded missing.
    pub missing_blocks: Vec<u64>,
    /// What open would do to the zones: reset zones holding nothing
    /// committed, finish partly written ones.
    pub zone_actions: Vec<String>,
    /// The metadata log's write pointers do not stand where the log ends:
    /// open would move it to a fresh segment.
    pub log_mismatch: bool,
    /// Open would rewrite the metadata (a copy differs, a device has no
    /// label, or a member came or went).
    pub metadata_rewrite: bool,
    /// Nothing to repair: every place present, both metadata copies whole
    /// and current, no copy of data missing. (Zone actions are routine:
    /// uncommitted or freed data is reset, partly written zones finished.)
    pub clean: bool,
}

/// One device place, as [`Volume::check`] found it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CheckedPlace {
    /// The place.
    pub place: usize,
    /// Index in the list given of the device that takes it.
    pub given: Option<usize>,
    /// It carried no label (its data was checked instead).
    pub unlabelled: bool,
    /// Why it is empty.
    pub absent: Option<String>,
}

impl Volume {
    /// Checks the volume on `devices` as open would (with `options`: say
    /// `degraded` to check a mirror missing a member) and reports, writing
    /// nothing. A problem open would refuse is an error, as from open.
    /// Hands the devices back.
    pub fn check(devices: Vec<Device>, options: &super::VolumeOptions) -> Result<(CheckReport, Vec<Device>)> {
        let loaded = Volume::load(devices, options, true)?;
        let volume = &loaded.volume;
        let places = (0..volume.devices.len())
            .map(|place| CheckedPlace {
                place,
                given: loaded.order[place].filter(|_| volume.devices[place].is_some()),
                unlabelled: loaded.unlabelled.contains(&place),
                absent: loaded.absent.iter().find(|(p, _)| *p == place).map(|(_, why)| why.clone()),
            })
            .collect::<Vec<_>>();
        let missing_blocks: Vec<u64> = (0..volume.lanes.len()).map(|lane| volume.missing_blocks(lane)).collect();
        let zone_actions: Vec<String> = loaded.actions.iter().map(describe).collect();
        let metadata_rewrite = loaded.copies_differ
            || !loaded.unlabelled.is_empty()
            || !loaded.absent.is_empty()
            || volume.members.iter().enumerate().any(|(p, m)| m.record.failed && volume.devices[p].is_some());
        let report = CheckReport {
            volume_id: volume.volume_id,
            committed_seq: volume.journal.seq,
            generation: volume.journal.generation,
            places,
            bad_records: loaded.bad_records.clone(),
            bad_labels: loaded.bad_labels.clone(),
            extents: volume.table.len(),
            bytes: volume.valid_blocks() * BLOCK_SIZE as u64,
            clean: !metadata_rewrite
                && !loaded.log_mismatch
                && missing_blocks.iter().all(|&m| m == 0)
                && loaded.dropped.is_none(),
            missing_blocks,
            zone_actions,
            log_mismatch: loaded.log_mismatch,
            metadata_rewrite,
        };
        Ok((report, loaded.volume.abandon()))
    }
}

fn describe(&(device, zone, action): &ZoneAction) -> String {
    match action {
        ZoneSendAction::Reset => format!("device {device} zone {zone}: reset (holds nothing committed)"),
        ZoneSendAction::Finish => format!("device {device} zone {zone}: finish (partly written)"),
        other => format!("device {device} zone {zone}: {other:?}"),
    }
}
