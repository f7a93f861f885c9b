//! Status views to test the formatting with: a degraded mirror, its
//! devices and a controller's health.

use crate::health::Health;
use zoned_allocator::{
    CopiesLeft, DeviceErrors, DeviceStatus, MemberState, Profile, Redundancy, ScrubRecord, VolumeState, VolumeStatus,
};

/// Device place `place` in `state`, at `pci` (empty: absent).
pub fn device(place: usize, state: MemberState, pci: &str) -> DeviceStatus {
    DeviceStatus {
        place,
        role: format!("mirror copy {place}"),
        state,
        why: None,
        nsid: 1,
        zoned: true,
        pci: pci.to_string(),
        model: if pci.is_empty() { String::new() } else { "Model \"Z\"".into() },
        serial: if pci.is_empty() { String::new() } else { format!("SN{place}") },
        errors: DeviceErrors { read: 3, write: 0, checksum: 7, timeouts: 1, resets: 0 },
        zones_empty: 10,
        zones_open: 1,
        zones_full: 4,
        zones_worn: 0,
        used_bytes: 1 << 20,
        capacity_bytes: 1 << 30,
        missing_bytes: 0,
        metadata_bytes: 2 << 20,
        sole_extents: 0,
        sole_bytes: 0,
    }
}

/// A mirror whose place 1 went away, with a clean last scrub.
pub fn degraded() -> VolumeStatus {
    let mut gone = device(1, MemberState::Failed, "");
    gone.why = Some("the device went away".into());
    gone.missing_bytes = 8192;
    gone.zones_empty = 0;
    gone.zones_open = 0;
    gone.zones_full = 0;
    // Every extent's one copy left is on place 0.
    let mut online = device(0, MemberState::Online, "0000:01:00.0");
    (online.sole_extents, online.sole_bytes) = (258, (1 << 20) + 8192);
    VolumeStatus {
        volume_id: 0xABCD,
        state: VolumeState::Degraded,
        profile: Profile::Mirror,
        block_tag_bytes: None,
        checksum_areas: false,
        unsealed_zones: 0,
        devices: vec![online, gone],
        redundancy: Redundancy {
            copies: 2,
            bytes_full: 0,
            bytes_at_risk: (1 << 20) + 8192,
            extents_at_risk: 258,
            by_copies_left: vec![CopiesLeft { copies: 1, extents: 258, bytes: (1 << 20) + 8192 }],
            bytes_missing: 8192,
            extents_missing: 2,
            ..Redundancy::default()
        },
        resilver: Vec::new(),
        last_scrub: Some(ScrubRecord {
            finished_unix_s: 1_700_000_000,
            bytes_verified: 1 << 21,
            bad_blocks: 1,
            repaired_blocks: 1,
            uncorrectable_blocks: 0,
            clean: true,
        }),
        capacity_bytes: 1 << 30,
        used_bytes: (1 << 20) + 8192,
        committed_seq: 42,
    }
}

/// A cool controller with a few media errors.
pub fn health() -> Health {
    Health {
        critical_warning: 0,
        critical_warnings: Vec::new(),
        composite_temperature_kelvin: 310,
        composite_temperature_celsius: 37,
        available_spare_percent: 100,
        available_spare_threshold_percent: 10,
        percentage_used: 3,
        media_errors: 5,
        error_log_entries: 0,
        power_on_hours: 100,
        unsafe_shutdowns: 0,
    }
}
