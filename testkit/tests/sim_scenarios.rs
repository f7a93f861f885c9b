//! The zoned allocator's shared scenarios (`nvme_testkit::scenarios`) on
//! the simulator, on the same geometry as their QEMU runs
//! (`examples/tests/qemu_volume.rs`): the same bodies, so a behaviour one
//! device model shows and the other does not is a failure of one of them.
//!
//! Each scenario must pass every check its QEMU run requires, named the
//! same way; the simulator's host corrupts the media directly.

use nvme_driver::sim::{Fault, NamespaceConfig, SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions};
use nvme_examples::device::open_for_writing;
use nvme_testkit::scenarios::{
    self, garbage, Check, Host, MediaRange, MembersPhase, MetadataPhase, SavedRanges, Scenario, MIB,
};
use std::sync::Arc;
use zoned_allocator::{Profile, VolumeOptions};

/// 512-byte LBAs, 16 MiB zones, as the QEMU tests configure.
const ZONE_BYTES: u64 = 16 * MIB;

fn zns(bytes: u64, lba: u32) -> NamespaceConfig {
    let lba = u64::from(lba);
    NamespaceConfig::zoned(bytes / lba, lba as u32, ZONE_BYTES / lba, ZONE_BYTES / lba)
}

fn conventional(bytes: u64, lba: u32) -> NamespaceConfig {
    NamespaceConfig::nvm(bytes / u64::from(lba), lba)
}

fn simulators(namespaces: Vec<NamespaceConfig>) -> Vec<Arc<Simulator>> {
    namespaces.into_iter().map(|ns| Simulator::new(SimConfig::empty().with_namespace(ns))).collect()
}

/// The simulator's host: it flips and overwrites bytes on the media of
/// the phase's simulators, pulls them out, and brings their controllers
/// up anew, as a new process would.
#[derive(Debug)]
struct SimHost {
    /// The phase's simulators, in the phase's order, with their names.
    sims: Vec<(&'static str, Arc<Simulator>)>,
    /// Bytes flipped by `corrupt`.
    corrupted: usize,
    /// What the overwrites replaced, per device.
    saved: SavedRanges<usize>,
    /// Per simulator, its commands that change media at the last
    /// overwrite: none may follow until the restore.
    mutations: Option<Vec<u64>>,
    /// The requests carried out, in order.
    done: Vec<&'static str>,
    /// A simulator an earlier phase pulled out.
    pulled: Option<Arc<Simulator>>,
}

/// I/O commands that change what the media holds: Write, Write Zeroes,
/// Dataset Management, Copy, Zone Management Send, Zone Append.
const MEDIA_OPCODES: [usize; 6] = [0x01, 0x08, 0x09, 0x19, 0x79, 0x7d];

impl SimHost {
    fn new(sims: &[(&'static str, Arc<Simulator>)]) -> SimHost {
        SimHost {
            sims: sims.to_vec(),
            corrupted: 0,
            saved: SavedRanges::default(),
            mutations: None,
            done: Vec::new(),
            pulled: None,
        }
    }

    fn sim(&self, device: usize) -> Result<&Arc<Simulator>, String> {
        self.sims.get(device).map(|(_, sim)| sim).ok_or_else(|| format!("no device {device} in this phase"))
    }

    fn mutations(&self) -> Vec<u64> {
        let count = |sim: &Simulator| MEDIA_OPCODES.iter().map(|&op| sim.stats().io_commands[op]).sum();
        self.sims.iter().map(|(_, sim)| count(sim)).collect()
    }

    /// The LBA size of namespace 1, and `range` in whole LBAs.
    fn blocks(&self, range: &MediaRange) -> Result<(u64, u64, u64), String> {
        let lba_bytes = self.sim(range.device)?.read_block(1, 0).len() as u64;
        if !range.offset.is_multiple_of(lba_bytes) || !range.len.is_multiple_of(lba_bytes) {
            return Err(format!("{range:?} is not whole {lba_bytes}-byte blocks"));
        }
        Ok((lba_bytes, range.offset / lba_bytes, range.len / lba_bytes))
    }

    /// Writes `bytes` over `range`, from its last block to its first.
    fn write_back_to_front(&self, range: &MediaRange, bytes: &[u8]) -> Result<(), String> {
        let (lba_bytes, first, _) = self.blocks(range)?;
        let sim = self.sim(range.device)?;
        for (index, block) in bytes.chunks(lba_bytes as usize).enumerate().rev() {
            sim.write_at_rest(1, first + index as u64, block);
        }
        Ok(())
    }
}

impl Host for SimHost {
    fn corrupt(&mut self, offset: u64, len: usize) -> Result<(), String> {
        let lba_bytes = self.sim(0)?.read_block(1, 0).len() as u64;
        for byte in offset..offset + len as u64 {
            let (lba, in_block) = (byte / lba_bytes, byte % lba_bytes);
            for bit in 0..8 {
                self.sim(0)?.corrupt_at_rest(1, lba, in_block * 8 + bit);
            }
        }
        self.corrupted += len;
        Ok(())
    }

    fn controllers(&mut self) -> Result<Vec<Controller>, String> {
        let bring_up = |(name, sim): &(&str, Arc<Simulator>)| {
            Controller::init(sim.clone(), ControllerOptions::default()).map_err(|e| format!("{name}: bring-up: {e}"))
        };
        self.sims.iter().map(bring_up).collect()
    }

    fn address(&self, device: usize) -> String {
        self.sims.get(device).map(|(name, _)| name.to_string()).unwrap_or_default()
    }

    fn overwrite(&mut self, ranges: &[MediaRange]) -> Result<(), String> {
        for range in ranges {
            let (_, first, count) = self.blocks(range)?;
            let sim = self.sim(range.device)?;
            let held: Vec<u8> = (first..first + count).flat_map(|lba| sim.read_block(1, lba)).collect();
            self.write_back_to_front(range, &garbage(range.offset, range.len as usize))?;
            self.saved.keep(range.device, range.offset, held);
        }
        self.mutations = Some(self.mutations());
        self.done.push("overwrite");
        Ok(())
    }

    fn restore(&mut self, ranges: &[MediaRange]) -> Result<(), String> {
        let now = self.mutations();
        if self.mutations.take().is_some_and(|then| then != now) {
            return Err("the devices were written to after the overwrite".into());
        }
        for range in ranges {
            let held = self.saved.held(&range.device, range.offset, range.len);
            self.write_back_to_front(range, held.ok_or_else(|| format!("nothing saved for {range:?}"))?)?;
        }
        self.done.push("restore");
        Ok(())
    }

    /// The decision the `seqwrite` tool opens its volume with, without
    /// `--format`, on new bring-ups of the phase's controllers.
    fn seqwrite_refusal(&mut self) -> Result<String, String> {
        let controllers = self.controllers()?;
        let options = VolumeOptions { profile: Profile::Mirror, ..VolumeOptions::default() };
        match open_for_writing(scenarios::open_devices(&controllers)?, &options) {
            Err(refusal) => Ok(format!("seqwrite's open refused: {refusal}")),
            Ok(Some(_)) => Err("seqwrite would have written to the damaged volume".into()),
            Ok(None) => Err("seqwrite would have formatted the damaged volume".into()),
        }
    }

    fn unplug(&mut self, device: usize) -> Result<(), String> {
        self.sim(device)?.inject(Fault::SurpriseRemoval);
        self.done.push("unplug");
        Ok(())
    }

    /// The simulator pulled out stays gone: a bring-up fails.
    fn wait_removed(&mut self) -> Result<String, String> {
        let pulled = self.pulled.as_ref().ok_or("no device was pulled")?;
        match Controller::init(pulled.clone(), ControllerOptions::default()) {
            Err(error) => Ok(format!("the pulled simulator is gone: bring-up fails ({error})")),
            Ok(_) => Err("the pulled simulator still comes up".into()),
        }
    }
}

/// Runs `scenario` on new bring-ups of `sims`; requires every check the
/// scenario names, in order, as its QEMU run does.
fn run(scenario: Scenario, sims: &[Arc<Simulator>]) -> SimHost {
    const NAMES: [&str; 3] = ["sim0", "sim1", "sim2"];
    let named: Vec<(&'static str, Arc<Simulator>)> = NAMES.into_iter().zip(sims.iter().cloned()).collect();
    let mut host = SimHost::new(&named);
    let controllers = host.controllers().expect("bring-up over the simulator");
    let check = Check::new("sim-scenarios", scenario.label(), 1);
    if let Err(why) = scenarios::run(&check, scenario, &controllers, &mut host) {
        panic!("{}: {why}", scenario.label());
    }
    assert_eq!(check.passed(), scenario.checks(), "{}: the checks passed", scenario.label());
    host
}

/// Runs one phase on `host`'s simulators, requiring its checks as the
/// QEMU run does; returns what it reported.
fn run_phase(
    label: &'static str,
    checks: Vec<&'static str>,
    host: &mut SimHost,
    body: impl FnOnce(&Check, &mut SimHost) -> Result<(), String>,
) -> Check {
    let check = Check::new("sim-scenarios", label, 1);
    if let Err(why) = body(&check, host) {
        panic!("{label}: {why}");
    }
    assert_eq!(check.passed(), checks, "{label}: the checks passed");
    check
}

#[test]
fn zns_conventional_zone_capacity_and_4k_lbas() {
    run(Scenario::Zns, &simulators(vec![zns(512 * MIB, 512)]));
    run(Scenario::Conventional, &simulators(vec![conventional(512 * MIB, 512)]));
    let lba = 512u64;
    let zcap = NamespaceConfig::zoned(256 * MIB / lba, 512, ZONE_BYTES / lba, 12 * MIB / lba);
    run(Scenario::Zcap, &simulators(vec![zcap]));
    run(Scenario::FourK, &simulators(vec![zns(256 * MIB, 4096)]));
}

#[test]
fn zone_limits_and_reopening_after_a_new_bring_up() {
    let limited = zns(256 * MIB, 512).max_open_zones(2).max_active_zones(4);
    run(Scenario::Limits, &simulators(vec![limited]));
    // The write phase abandons its volume; the verify phase brings the
    // same controller up again, as a new process would.
    let sims = simulators(vec![zns(256 * MIB, 512)]);
    run(Scenario::ReopenWrite, &sims);
    run(Scenario::ReopenVerify, &sims);
}

#[test]
fn mirror_across_controllers_and_repair_after_media_corruption() {
    run(Scenario::Mirror, &simulators(vec![zns(256 * MIB, 512), zns(256 * MIB, 512)]));
    let host = run(Scenario::Repair, &simulators(vec![zns(256 * MIB, 512), conventional(256 * MIB, 512)]));
    assert_eq!(host.corrupted, scenarios::CORRUPT_BYTES, "the scenario asked for one range");
}

#[test]
fn block_tags_on_namespaces_with_metadata_and_repair() {
    run(Scenario::Tags, &simulators(vec![zns(256 * MIB, 4096).metadata_bytes(16)]));
    let sims =
        simulators(vec![zns(256 * MIB, 4096).metadata_bytes(8), conventional(256 * MIB, 4096).metadata_bytes(8)]);
    run(Scenario::TagsRepair, &sims);
}

#[test]
fn zone_checksum_areas_and_repair_in_a_sealed_zone() {
    run(Scenario::Area, &simulators(vec![zns(256 * MIB, 4096)]));
    run(Scenario::AreaRepair, &simulators(vec![zns(256 * MIB, 4096), zns(256 * MIB, 4096)]));
}

/// Format 2's metadata phases, in one chain on the QEMU geometry: a
/// conventional namespace (device 0) and a ZNS one in a mirror, a third
/// (ZNS) for the foreign volume. The host overwrites device 0's metadata
/// zones, then device 0's journal records and device 1's whole metadata,
/// and restores device 0's records.
#[test]
fn mirror_metadata_survives_garbage_swaps_and_foreign_devices_and_seqwrite_refuses_damage() {
    let sims = simulators(vec![conventional(256 * MIB, 512), zns(256 * MIB, 512), zns(256 * MIB, 512)]);
    let named = |order: &[usize]| -> Vec<(&'static str, Arc<Simulator>)> {
        order.iter().map(|&i| (["sim0", "sim1", "sim2"][i], sims[i].clone())).collect()
    };
    for phase in MetadataPhase::ALL {
        let order: &[usize] = match phase {
            MetadataPhase::Swapped => &[1, 0],
            MetadataPhase::Foreign => &[0, 1, 2],
            _ => &[0, 1],
        };
        let mut host = SimHost::new(&named(order));
        run_phase(phase.label(), phase.checks(), &mut host, |check, host| scenarios::run_metadata(check, phase, host));
        let expected: &[&str] = match phase {
            MetadataPhase::Format => &["overwrite"],
            MetadataPhase::Damage => &["overwrite", "restore"],
            _ => &[],
        };
        assert_eq!(host.done, expected, "{}: the host's part", phase.label());
    }
    // The overwrites landed on the media, in whole blocks.
    assert!(sims[0].stats().faults.overwritten_at_rest_blocks > 0);
    assert!(sims[1].stats().faults.overwritten_at_rest_blocks > 0);
}

/// A mirror's members through their life, in one chain on the QEMU
/// geometry: a conventional namespace pulled mid-write (device 0), a ZNS
/// one (device 1), a blank conventional one for the replacement.
#[test]
fn a_mirror_loses_a_device_mid_write_is_rebuilt_on_a_new_one_and_takes_back_one_that_returns() {
    let sims = simulators(vec![conventional(256 * MIB, 512), zns(256 * MIB, 512), conventional(256 * MIB, 512)]);
    let named = |order: &[usize]| -> Vec<(&'static str, Arc<Simulator>)> {
        order.iter().map(|&i| (["sim0", "sim1", "sim2"][i], sims[i].clone())).collect()
    };
    for phase in MembersPhase::ALL {
        let order: &[usize] = match phase {
            MembersPhase::Unplug => &[0, 1],
            MembersPhase::Degraded => &[1],
            MembersPhase::Replace => &[1, 2],
            MembersPhase::Rejoin | MembersPhase::Final => &[2, 1],
        };
        let mut host = SimHost::new(&named(order));
        host.pulled = Some(sims[0].clone());
        run_phase(phase.label(), phase.checks(), &mut host, |check, host| scenarios::run_members(check, phase, host));
        let expected: &[&str] = if phase == MembersPhase::Unplug { &["unplug"] } else { &[] };
        assert_eq!(host.done, expected, "{}: the host's part", phase.label());
    }
}
