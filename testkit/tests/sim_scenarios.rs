//! The zoned allocator's shared scenarios (`nvme_testkit::scenarios`) on
//! the simulator, on the same geometry as their QEMU runs
//! (`examples/tests/qemu_volume.rs`): the same bodies, so a behaviour one
//! device model shows and the other does not is a failure of one of them.
//!
//! Each scenario must pass every check its QEMU run requires, named the
//! same way; the simulator's host corrupts the media directly.

use nvme_driver::sim::{NamespaceConfig, SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions};
use nvme_testkit::scenarios::{self, Check, Host, Scenario, MIB};
use std::sync::Arc;

/// 512-byte LBAs, 16 MiB zones, as the QEMU tests configure.
const ZONE_BYTES: u64 = 16 * MIB;

fn zns(bytes: u64, lba: u32) -> NamespaceConfig {
    let lba = u64::from(lba);
    NamespaceConfig::zoned(bytes / lba, lba as u32, ZONE_BYTES / lba, ZONE_BYTES / lba)
}

fn conventional(bytes: u64, lba: u32) -> NamespaceConfig {
    NamespaceConfig::nvm(bytes / u64::from(lba), lba)
}

/// A bring-up of a simulated controller with one namespace.
fn controller(sim: &Arc<Simulator>) -> Controller {
    Controller::init(sim.clone(), ControllerOptions::default()).expect("bring-up over the simulator")
}

fn simulators(namespaces: Vec<NamespaceConfig>) -> Vec<Arc<Simulator>> {
    namespaces.into_iter().map(|ns| Simulator::new(SimConfig::empty().with_namespace(ns))).collect()
}

/// The simulator's host: flips every bit of the bytes asked for, on the
/// media of the first controller's namespace 1.
#[derive(Debug)]
struct SimHost {
    sim: Arc<Simulator>,
    lba_bytes: u64,
    corrupted: usize,
}

impl Host for SimHost {
    fn corrupt(&mut self, offset: u64, len: usize) -> Result<(), String> {
        for byte in offset..offset + len as u64 {
            let (lba, in_block) = (byte / self.lba_bytes, byte % self.lba_bytes);
            for bit in 0..8 {
                self.sim.corrupt_at_rest(1, lba, in_block * 8 + bit);
            }
        }
        self.corrupted += len;
        Ok(())
    }
}

/// Runs `scenario` on new bring-ups of `sims`; requires every check the
/// scenario names, in order, as its QEMU run does.
fn run(scenario: Scenario, sims: &[Arc<Simulator>], lba_bytes: u32) -> SimHost {
    let controllers: Vec<Controller> = sims.iter().map(controller).collect();
    let check = Check::new("sim-scenarios", scenario.label(), 1);
    let mut host = SimHost { sim: sims[0].clone(), lba_bytes: u64::from(lba_bytes), corrupted: 0 };
    if let Err(why) = scenarios::run(&check, scenario, &controllers, &mut host) {
        panic!("{}: {why}", scenario.label());
    }
    assert_eq!(check.passed(), scenario.checks(), "{}: the checks passed", scenario.label());
    host
}

#[test]
fn zns_conventional_zone_capacity_and_4k_lbas() {
    run(Scenario::Zns, &simulators(vec![zns(512 * MIB, 512)]), 512);
    run(Scenario::Conventional, &simulators(vec![conventional(512 * MIB, 512)]), 512);
    let lba = 512u64;
    let zcap = NamespaceConfig::zoned(256 * MIB / lba, 512, ZONE_BYTES / lba, 12 * MIB / lba);
    run(Scenario::Zcap, &simulators(vec![zcap]), 512);
    run(Scenario::FourK, &simulators(vec![zns(256 * MIB, 4096)]), 4096);
}

#[test]
fn zone_limits_and_reopening_after_a_new_bring_up() {
    let limited = zns(256 * MIB, 512).max_open_zones(2).max_active_zones(4);
    run(Scenario::Limits, &simulators(vec![limited]), 512);
    // The write phase abandons its volume; the verify phase brings the
    // same controller up again, as a new process would.
    let sims = simulators(vec![zns(256 * MIB, 512)]);
    run(Scenario::ReopenWrite, &sims, 512);
    run(Scenario::ReopenVerify, &sims, 512);
}

#[test]
fn mirror_across_controllers_and_repair_after_media_corruption() {
    run(Scenario::Mirror, &simulators(vec![zns(256 * MIB, 512), zns(256 * MIB, 512)]), 512);
    let host = run(Scenario::Repair, &simulators(vec![zns(256 * MIB, 512), conventional(256 * MIB, 512)]), 512);
    assert_eq!(host.corrupted, scenarios::CORRUPT_BYTES, "the scenario asked for one range");
}

#[test]
fn block_tags_on_namespaces_with_metadata_and_repair() {
    run(Scenario::Tags, &simulators(vec![zns(256 * MIB, 4096).metadata_bytes(16)]), 4096);
    let sims =
        simulators(vec![zns(256 * MIB, 4096).metadata_bytes(8), conventional(256 * MIB, 4096).metadata_bytes(8)]);
    run(Scenario::TagsRepair, &sims, 4096);
}

#[test]
fn zone_checksum_areas_and_repair_in_a_sealed_zone() {
    run(Scenario::Area, &simulators(vec![zns(256 * MIB, 4096)]), 4096);
    run(Scenario::AreaRepair, &simulators(vec![zns(256 * MIB, 4096), zns(256 * MIB, 4096)]), 4096);
}
