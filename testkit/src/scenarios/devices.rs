//! The devices a scenario opens, and what their namespaces offer.

use super::{Check, Scenario, MIB, SOFTWARE_ZONE_BYTES};
use nvme_driver::spec::identify::Oncs;
use nvme_driver::Controller;
use zoned_allocator::{ChecksumStore, Device, DeviceOptions, Profile, VolumeOptions, BLOCK_SIZE};

pub fn device_options() -> DeviceOptions {
    DeviceOptions { queue_depth: 128, buffers: 32, ..DeviceOptions::default() }
}

pub fn volume_options(profile: Profile, streams: u8) -> VolumeOptions {
    VolumeOptions { profile, streams, software_zone_bytes: Some(SOFTWARE_ZONE_BYTES), ..VolumeOptions::default() }
}

/// [`volume_options`] for `scenario`: zone checksum areas for the area
/// scenarios, the format's choice otherwise.
pub fn scenario_options(scenario: Scenario, profile: Profile, streams: u8) -> VolumeOptions {
    let checksums = match scenario {
        Scenario::Area | Scenario::AreaRepair => ChecksumStore::Area,
        _ => ChecksumStore::Auto,
    };
    VolumeOptions { checksums, ..volume_options(profile, streams) }
}

/// Namespace 1 of each controller, in order.
pub fn open_devices(controllers: &[Controller]) -> Result<Vec<Device>, String> {
    controllers
        .iter()
        .map(|c| {
            Device::open(c, 1, device_options()).map_err(|e| format!("{}: open namespace 1: {e}", c.transport().name()))
        })
        .collect()
}

/// What a namespace offers, as the checks need it.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    pub lba_bytes: u32,
    pub capacity_lbas: u64,
    /// Zone size in LBAs: hardware zones, or the software zones we ask for.
    pub zone_lbas: u64,
    pub zoned: bool,
    pub max_open: Option<u32>,
    pub max_active: Option<u32>,
    pub copy: bool,
}

impl Geometry {
    pub fn of(device: &Device) -> Geometry {
        let ns = device.namespace();
        let lba_bytes = ns.block_size();
        let zones = ns.zones();
        Geometry {
            lba_bytes,
            capacity_lbas: ns.capacity_blocks(),
            zone_lbas: zones.map_or(SOFTWARE_ZONE_BYTES / u64::from(lba_bytes), |z| z.zone_size_blocks),
            zoned: zones.is_some(),
            max_open: zones.and_then(|z| z.max_open_zones),
            max_active: zones.and_then(|z| z.max_active_zones),
            copy: ns.supports(Oncs::COPY),
        }
    }

    pub fn lbas_per_block(&self) -> u64 {
        BLOCK_SIZE as u64 / u64::from(self.lba_bytes)
    }

    pub fn describe(&self) -> String {
        let bytes = self.capacity_lbas * u64::from(self.lba_bytes);
        let zone_bytes = self.zone_lbas * u64::from(self.lba_bytes);
        let kind = if self.zoned { "ZNS" } else { "conventional" };
        let zones = if self.zoned { "zones" } else { "software zones" };
        let limit = |l: Option<u32>| l.map_or("no limit".to_string(), |n| n.to_string());
        let mut text = format!(
            "{kind}, {}-byte LBAs, {} MiB, {} {zones} of {} MiB",
            self.lba_bytes,
            bytes / MIB,
            bytes / zone_bytes,
            zone_bytes / MIB
        );
        if self.zoned {
            text += &format!(", max open {}, max active {}", limit(self.max_open), limit(self.max_active));
        }
        text += if self.copy { ", Copy" } else { ", no Copy" };
        text
    }
}

/// The namespaces' geometry, reported as a check; `missing` names what
/// the scenario needs and they lack (the test configures the controllers,
/// so a mismatch is a test bug, said clearly).
pub fn check_geometry(
    check: &Check,
    devices: &[Device],
    missing: impl FnOnce(&[Geometry]) -> Option<&'static str>,
) -> Result<Vec<Geometry>, String> {
    let geometry: Vec<Geometry> = devices.iter().map(Geometry::of).collect();
    if let Some(what) = missing(&geometry) {
        return Err(format!("the scenario needs {what}; found {}", geometry[0].describe()));
    }
    let text: Vec<String> = geometry.iter().map(Geometry::describe).collect();
    check.ok("geometry", text.join("; "));
    Ok(geometry)
}
