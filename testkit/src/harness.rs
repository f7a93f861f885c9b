//! Volumes on the simulator: controllers with short bounds, devices,
//! restarts and power cuts, and the reference model a reopened volume is
//! checked against. The allocator's and the scrub engine's simulator
//! suites share it.

use nvme_driver::sim::{SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions};
use std::sync::Arc;
use std::time::Duration;
use zoned_allocator::{Device, DeviceOptions, Volume, VolumeOptions};

/// Bounds short enough that a dead device costs milliseconds: the
/// simulator answers at once, so a wait only ever waits for a device that
/// lost power.
pub const TIMEOUT: Duration = Duration::from_millis(200);

/// For crash tests, where every power cut costs a few timed-out waits.
pub const CRASH_TIMEOUT: Duration = Duration::from_millis(15);

thread_local! {
    static BOUND: std::cell::Cell<Duration> = const { std::cell::Cell::new(TIMEOUT) };
}

/// Sets the bound the helpers use on this thread.
pub fn set_timeout(timeout: Duration) {
    BOUND.with(|b| b.set(timeout));
}

fn bound() -> Duration {
    BOUND.with(std::cell::Cell::get)
}

pub fn controller_options() -> ControllerOptions {
    ControllerOptions {
        admin_timeout: bound(),
        shutdown_timeout: bound(),
        io_queue_pairs: 4,
        ..ControllerOptions::default()
    }
}

pub fn device_options() -> DeviceOptions {
    DeviceOptions { queue_depth: 64, buffers: 32, timeout: bound(), ..DeviceOptions::default() }
}

pub fn volume_options() -> VolumeOptions {
    // One checkpoint page per commit: every checkpoint the tests write
    // spans commits, so each cut, fault and reopen meets one half written.
    // Few owners in memory: commits journal owner pages (and read their
    // blobs back) in every suite, not only at scale.
    VolumeOptions {
        timeout: bound(),
        checkpoint_pages_per_commit: 1,
        recent_owners: 16,
        checksums: suite_checksums(),
        ..VolumeOptions::default()
    }
}

/// `ZONED_TEST_CHECKSUMS=area` formats every volume the suites make with
/// zone checksum areas (`zoned_allocator::area`), so that the whole
/// allocator and scrub suites, fault campaigns included, run again on
/// volumes that keep checksums after each zone's data (`hack/test` runs
/// them so too); unset, the format chooses (`ChecksumStore::Auto`).
pub fn suite_checksums() -> zoned_allocator::ChecksumStore {
    match std::env::var("ZONED_TEST_CHECKSUMS").as_deref() {
        Err(_) | Ok("auto") => zoned_allocator::ChecksumStore::Auto,
        Ok("area") => zoned_allocator::ChecksumStore::Area,
        Ok("map") => zoned_allocator::ChecksumStore::Map,
        Ok(other) => panic!("ZONED_TEST_CHECKSUMS={other}: expected auto, area or map"),
    }
}

/// Simulated controllers and the namespaces a volume uses.
#[derive(Debug)]
pub struct Harness {
    pub sims: Vec<Arc<Simulator>>,
    pub controllers: Vec<Controller>,
    /// (controller, NSID) per volume device.
    pub layout: Vec<(usize, u32)>,
}

impl Harness {
    /// One controller with `config`'s namespaces; the volume uses NSID 1.
    pub fn single(config: SimConfig) -> Self {
        Self::new(vec![config], vec![(0, 1)])
    }

    pub fn new(configs: Vec<SimConfig>, layout: Vec<(usize, u32)>) -> Self {
        let sims: Vec<Arc<Simulator>> = configs.into_iter().map(Simulator::new).collect();
        let controllers = sims.iter().map(init).collect();
        Harness { sims, controllers, layout }
    }

    pub fn devices(&self) -> Vec<Device> {
        self.layout
            .iter()
            .map(|&(c, nsid)| Device::open(&self.controllers[c], nsid, device_options()).expect("open the device"))
            .collect()
    }

    pub fn format(&self, options: &VolumeOptions) -> Volume {
        Volume::format(self.devices(), options).expect("format")
    }

    pub fn open(&self, options: &VolumeOptions) -> zoned_allocator::Result<Volume> {
        Volume::open(self.devices(), options)
    }

    /// Per simulator, how many commands that write it received (Write,
    /// Write Zeroes, Dataset Management, Zone Management Send, Zone
    /// Append) and the LBAs written: what an operation that must write
    /// nothing leaves unchanged.
    pub fn writes(&self) -> Vec<(Vec<u64>, u64)> {
        let commands =
            |s: &nvme_driver::sim::SimStats| [0x01, 0x08, 0x09, 0x79, 0x7d].map(|op| s.io_commands[op]).to_vec();
        self.sims.iter().map(|sim| sim.stats()).map(|s| (commands(&s), s.lbas_written)).collect()
    }

    /// A new process: the old one's controllers shut down cleanly (the
    /// volume must have been dropped), then bring-up again.
    pub fn restart(&mut self) {
        self.controllers.clear();
        self.controllers = self.sims.iter().map(init).collect();
    }

    /// A power cut now (unless one already happened), then a new process.
    /// The volume must have been dropped.
    pub fn power_cut(&mut self) {
        for sim in &self.sims {
            if sim.take_power_cut().is_none() {
                sim.power_cut();
            }
        }
        // The controllers are disabled: dropping them has nothing to shut
        // down.
        self.controllers.clear();
        self.controllers = self.sims.iter().map(init).collect();
    }
}

fn init(sim: &Arc<Simulator>) -> Controller {
    Controller::init(sim.clone(), controller_options()).expect("bring-up over the simulator")
}

/// A ZNS namespace of `zones` zones of `zone_kib` KiB (512-byte LBAs).
pub fn zns(zones: u64, zone_kib: u64) -> SimConfig {
    let zone_lbas = zone_kib * 2;
    suite_metadata(SimConfig::zoned(zones * zone_lbas, 512, zone_lbas, zone_lbas))
}

/// A conventional namespace of `mib` MiB (512-byte LBAs).
pub fn conventional(mib: u64) -> SimConfig {
    suite_metadata(SimConfig::nvm(mib * 2048, 512))
}

/// `ZONED_TEST_METADATA_BYTES=N` formats every namespace the suites make
/// with `N` bytes of metadata per LBA, so that the whole allocator and
/// scrub suites, fault campaigns included, run again on volumes that keep
/// their checksums in block tags (`hack/test` runs both).
fn suite_metadata(mut config: SimConfig) -> SimConfig {
    let Ok(value) = std::env::var("ZONED_TEST_METADATA_BYTES") else { return config };
    let bytes: u16 = value.parse().unwrap_or_else(|_| panic!("ZONED_TEST_METADATA_BYTES={value}: not a number"));
    for namespace in &mut config.namespaces {
        namespace.metadata_bytes = bytes;
    }
    config
}

/// Extents as a test knows them: ID → (pattern seed, 4 KiB blocks).
pub type Model = std::collections::BTreeMap<u64, (u64, usize)>;

/// The state a volume reopened after a fault must hold: exactly the
/// committed one, or, when the fault fell inside a commit, exactly the one
/// that commit was making durable. Panics naming `context` and what is
/// missing or unexpected otherwise. The crash test and the fault campaign
/// share it.
pub fn expected_state<'a>(
    volume: &zoned_allocator::Volume,
    committed: &'a Model,
    current: &'a Model,
    inside_commit: bool,
    context: &str,
) -> &'a Model {
    use std::collections::BTreeSet;
    let found: BTreeSet<u64> = volume.extent_ids().collect();
    let old: BTreeSet<u64> = committed.keys().copied().collect();
    let new: BTreeSet<u64> = current.keys().copied().collect();
    if found == old {
        committed
    } else if inside_commit && found == new {
        current
    } else {
        panic!(
            "{context}: the volume holds {} extents, {} committed (inside a commit: {inside_commit}, {} pending); \
             missing {:?}, unexpected {:?}",
            found.len(),
            old.len(),
            new.len(),
            old.difference(&found).take(5).collect::<Vec<_>>(),
            found.difference(&old).take(5).collect::<Vec<_>>(),
        )
    }
}
