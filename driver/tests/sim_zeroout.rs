//! Zero-out on the simulator: a device that advertises Write Zeroes but
//! rejects it downgrades once, still zeroes the data, and gets no more
//! Write Zeroes; the deallocate-zeroes quirk is used only with DSM.

mod sim_support;

use nvme_driver::quirks::QuirkOverride;
use nvme_driver::sim::{Fault, SimConfig, Simulator};
use nvme_driver::spec::command::opcode::nvm as op;
use nvme_driver::spec::identify::Oncs;
use nvme_driver::zeroout::ZeroStrategy;
use nvme_driver::Controller;
use sim_support::{options, pattern, transport, Rig};

const BLOCKS: u64 = 4096; // 2 MiB of 512-byte blocks

fn fill(rig: &mut Rig, slba: u64, blocks: u64) {
    for i in 0..blocks / 256 {
        let data = pattern(slba + i * 256, 256 * 512);
        rig.write(slba + i * 256, &data, false).unwrap();
    }
}

fn assert_zero(rig: &mut Rig, slba: u64, blocks: u64) {
    for i in 0..blocks / 256 {
        let data = rig.read(slba + i * 256, 256 * 512).unwrap();
        assert!(data.iter().all(|&b| b == 0), "blocks {}.. not zero", slba + i * 256);
    }
}

#[test]
fn a_rejected_write_zeroes_downgrades_once_and_still_zeroes() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 20, 512).with_seed(3));
    assert_eq!(rig.ns.zero_strategy(), Some(ZeroStrategy::WriteZeroes));
    fill(&mut rig, 0, 2 * BLOCKS);
    // Firmware that advertises Write Zeroes but rejects it.
    rig.sim.inject(Fault::RejectOpcode { opcode: op::WRITE_ZEROES });

    rig.ns.zeroout(&mut rig.pair, 0, BLOCKS, false).unwrap();
    assert_zero(&mut rig, 0, BLOCKS);
    let stats = rig.ns.zero_stats().unwrap();
    assert_eq!(stats.strategy, ZeroStrategy::ZeroBuffer);
    assert_eq!(stats.per_strategy[ZeroStrategy::WriteZeroes.index()].downgrades, 1);
    assert_eq!(stats.per_strategy[ZeroStrategy::WriteZeroes.index()].commands, 0);
    assert_eq!(stats.per_strategy[ZeroStrategy::ZeroBuffer.index()].bytes, BLOCKS * 512);
    let rejected = rig.sim.stats().io(op::WRITE_ZEROES);
    assert!(rejected >= 1);

    // Later zero-outs, from this handle or a new one, go straight to the
    // zero buffer: not one more Write Zeroes.
    let other = rig.controller.namespace(1).unwrap();
    assert_eq!(other.zero_strategy(), Some(ZeroStrategy::ZeroBuffer));
    other.zeroout(&mut rig.pair, BLOCKS, BLOCKS, true).unwrap();
    assert_zero(&mut rig, BLOCKS, BLOCKS);
    assert_eq!(rig.sim.stats().io(op::WRITE_ZEROES), rejected, "no Write Zeroes after the downgrade");
    assert_eq!(rig.ns.zero_stats().unwrap().per_strategy[ZeroStrategy::WriteZeroes.index()].downgrades, 1);
}

#[test]
fn write_zeroes_when_it_works() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 20, 512).with_seed(4));
    fill(&mut rig, 100, 1024);
    rig.ns.zeroout(&mut rig.pair, 100, 1024, false).unwrap();
    assert_zero(&mut rig, 100, 1024);
    assert_eq!(rig.sim.stats().io(op::WRITE), 4, "only the fill wrote data");
    let stats = rig.ns.zero_stats().unwrap();
    assert_eq!(stats.per_strategy[ZeroStrategy::WriteZeroes.index()].bytes, 1024 * 512);
}

#[test]
fn the_deallocate_quirk_needs_dsm() {
    // The quirk, forced onto the simulator's PCI ID, with Write Zeroes off.
    let quirk: QuirkOverride = "1b36:0010:+DEALLOCATE_ZEROES,+DISABLE_WRITE_ZEROES".parse().unwrap();
    let with_dsm = Simulator::new(SimConfig::nvm(1 << 20, 512));
    let controller = Controller::init(
        transport(&with_dsm),
        nvme_driver::ControllerOptions { quirk_overrides: vec![quirk], ..options() },
    )
    .unwrap();
    let mut rig = Rig::on_controller(with_dsm, controller);
    assert_eq!(rig.ns.zero_strategy(), Some(ZeroStrategy::DeallocateAsZeroes));
    fill(&mut rig, 0, 1024);
    rig.ns.zeroout(&mut rig.pair, 3, 1000, true).unwrap();
    let mut data = Vec::new();
    for i in 0..4 {
        data.extend(rig.read(i * 256, 256 * 512).unwrap());
    }
    assert!(data[3 * 512..1003 * 512].iter().all(|&b| b == 0));
    assert_eq!(&data[..3 * 512], &pattern(0, 256 * 512)[..3 * 512], "before the range untouched");
    assert_eq!(&data[1003 * 512..], &pattern(768, 256 * 512)[235 * 512..], "after the range untouched");
    assert!(rig.sim.stats().io(op::DATASET_MANAGEMENT) >= 1);

    // The same quirk on firmware without DSM (the Linux 6.12 case): never DSM.
    let mut config = SimConfig::nvm(1 << 20, 512);
    config.oncs.remove(Oncs::DATASET_MANAGEMENT);
    let without_dsm = Simulator::new(config);
    let controller = Controller::init(
        transport(&without_dsm),
        nvme_driver::ControllerOptions { quirk_overrides: vec![quirk], ..options() },
    )
    .unwrap();
    let mut rig = Rig::on_controller(without_dsm, controller);
    assert_eq!(rig.ns.zero_strategy(), Some(ZeroStrategy::ZeroBuffer));
    fill(&mut rig, 0, 1024);
    rig.ns.zeroout(&mut rig.pair, 0, 1024, true).unwrap();
    assert_zero(&mut rig, 0, 1024);
    assert_eq!(rig.sim.stats().io(op::DATASET_MANAGEMENT), 0);
}

#[test]
fn deallocate_range_splits_by_the_device_limits() {
    let config = SimConfig { dmrl: 2, dmrsl: 100, ..SimConfig::nvm(1 << 20, 512) };
    let mut rig = Rig::new(config);
    fill(&mut rig, 0, 1024);
    rig.ns.deallocate_range(&mut rig.pair, 0, 1000).unwrap();
    // 10 ranges of 100 blocks, 2 per command.
    assert_eq!(rig.sim.stats().io(op::DATASET_MANAGEMENT), 5);
    assert_zero(&mut rig, 0, 768);
    let mut config = SimConfig::nvm(1 << 20, 512);
    config.oncs.remove(Oncs::DATASET_MANAGEMENT);
    let mut rig = Rig::new(config);
    assert!(rig.ns.deallocate_range(&mut rig.pair, 0, 8).is_err());
}
