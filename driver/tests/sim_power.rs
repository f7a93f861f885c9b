//! Power cuts: unflushed cached writes are lost or torn block by block,
//! flushed and FUA writes survive, zones keep a consistent write pointer;
//! then the real bring-up runs again on the same simulator and reads back.

mod sim_support;

use nvme_driver::cmd::zns::ZoneSendAction;
use nvme_driver::dma::DmaPool;
use nvme_driver::sim::{FaultConfig, NamespaceConfig, SimConfig, Simulator};
use nvme_driver::spec::registers::{self, Csts};
use nvme_driver::spec::zns::ZoneState;
use nvme_driver::{Controller, Transport};
use sim_support::{options, pattern, transport, Rig};
use std::sync::Arc;

fn keep(probability: f64) -> FaultConfig {
    FaultConfig { power_cut_keep_probability: probability, ..FaultConfig::default() }
}

#[test]
fn unflushed_writes_are_lost_flushed_and_fua_ones_survive() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512).with_faults(keep(0.0)));
    let (flushed, fua, cached) = (pattern(1, 4096), pattern(2, 4096), pattern(3, 4096));
    rig.write(0, &flushed, false).unwrap();
    rig.flush();
    rig.write(100, &fua, true).unwrap();
    rig.write(200, &cached, false).unwrap();
    // An unflushed overwrite of flushed data falls back to the old data.
    rig.write(0, &pattern(4, 1024), false).unwrap();
    assert_eq!(rig.sim.dirty_blocks(1), 10);
    let sim = rig.finish_without_shutdown();
    let report = sim.power_cut();
    assert_eq!((report.lost_blocks, report.kept_blocks), (10, 0));
    assert!(report.is_lost(1, 0) && report.is_lost(1, 1) && !report.is_lost(1, 2));
    assert!((200..208).all(|lba| report.is_lost(1, lba)));
    assert!(!report.is_lost(1, 100));
    let csts = Csts(sim.read32(registers::CSTS));
    assert!(!csts.rdy() && sim.read32(registers::CC) == 0, "the controller came back reset");
    let mut rig = Rig::on(sim);
    assert_eq!(rig.read(0, 4096).unwrap(), flushed);
    assert_eq!(rig.read(100, 4096).unwrap(), fua);
    assert_eq!(rig.read(200, 4096).unwrap(), vec![0u8; 4096]);
    let smart = rig.controller.smart_log().unwrap();
    assert_eq!((smart.power_cycles, smart.unsafe_shutdowns), (2, 1));
}

#[test]
fn a_cut_with_every_block_kept_loses_nothing() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512).with_faults(keep(1.0)));
    let data = pattern(5, 65536);
    rig.write(1000, &data, false).unwrap();
    let sim = rig.finish_without_shutdown();
    let report = sim.power_cut();
    assert_eq!((report.lost_blocks, report.kept_blocks), (0, 128));
    let mut rig = Rig::on(sim);
    assert_eq!(rig.read(1000, 65536).unwrap(), data);
}

#[test]
fn unflushed_writes_tear_at_block_granularity() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512).with_faults(keep(0.5)).with_seed(77));
    let old = pattern(6, 64 * 512);
    let new = pattern(7, 64 * 512);
    rig.write(0, &old, true).unwrap();
    rig.write(0, &new, false).unwrap();
    let sim = rig.finish_without_shutdown();
    let report = sim.power_cut();
    assert_eq!(report.lost_blocks + report.kept_blocks, 64);
    assert!(report.lost_blocks > 10 && report.kept_blocks > 10, "{report:?}");
    let mut rig = Rig::on(sim);
    let read = rig.read(0, 64 * 512).unwrap();
    for lba in 0..64 {
        let block = lba * 512..(lba + 1) * 512;
        let expected = if report.is_lost(1, lba as u64) { &old[block.clone()] } else { &new[block.clone()] };
        assert_eq!(&read[block], expected, "block {lba}: all old or all new");
    }
}

#[test]
fn completions_in_flight_are_discarded() {
    let sim = Simulator::new(SimConfig::nvm(1 << 16, 512).with_completion_delay(5, 5));
    let controller = Controller::init(transport(&sim), options()).unwrap();
    let ns = controller.namespace(1).unwrap();
    let mut pair = controller.create_queue_pair(16).unwrap();
    let pool = DmaPool::new(controller.transport(), 4096, 8).unwrap();
    for token in 0..8 {
        let request = ns.write(token * 8, nvme_driver::IoBuffer::new(pool.get().unwrap()), false, token).unwrap();
        pair.submit(request).map_err(|(error, _)| error).unwrap();
    }
    // Published and executed, but no tick yet: no completion posted.
    pair.ring();
    let report = sim.power_cut();
    // The eight writes, and the Asynchronous Event Request the driver keeps
    // outstanding.
    assert_eq!(report.completions_discarded, 9);
    assert_eq!(pair.poll(|_| panic!("nothing completes after the cut")), 0);
    // The old controller's queues are gone with the power: leak its handles
    // rather than wait for deletions that cannot complete.
    std::mem::forget(pair);
    std::mem::forget(pool);
    std::mem::forget(controller);
    let mut rig = Rig::on(sim);
    rig.write(0, &[1u8; 512], false).unwrap();
}

const ZONE: u64 = 256;

fn zoned(keep_probability: f64, seed: u64) -> Rig {
    let namespace = NamespaceConfig::zoned(16 * ZONE, 512, ZONE, 192).max_active_zones(8);
    Rig::new(SimConfig::empty().with_namespace(namespace).with_faults(keep(keep_probability)).with_seed(seed))
}

fn zone(sim: &Arc<Simulator>, index: u64) -> (ZoneState, u64) {
    let zones = sim.zones(1);
    (zones[index as usize].state, zones[index as usize].wp)
}

#[test]
fn zone_write_pointers_rewind_to_what_persisted() {
    let mut rig = zoned(0.0, 1);
    let data = pattern(8, 16 * 512);
    // Zone 0: 16 flushed blocks, 16 cached ones.
    rig.write(0, &data, false).unwrap();
    rig.flush();
    rig.write(16, &data, false).unwrap();
    // Zone 1: 8 cached blocks, then 8 FUA ones, which persist the prefix.
    rig.write(ZONE, &data[..4096], false).unwrap();
    rig.write(ZONE + 8, &data[4096..], true).unwrap();
    // Zone 2: explicitly opened, empty. Zone 3: 8 cached blocks.
    let request = rig.ns.zone_send(2 * ZONE, ZoneSendAction::Open, false, 0).unwrap();
    rig.status(request).unwrap();
    rig.write(3 * ZONE, &data[..4096], false).unwrap();
    // Zone 4: filled to its capacity (Full), unflushed. Zone 5: finished.
    for piece in 0..12 {
        rig.write(4 * ZONE + piece * 16, &data, false).unwrap();
    }
    let request = rig.ns.zone_send(5 * ZONE, ZoneSendAction::Finish, false, 0).unwrap();
    rig.status(request).unwrap();
    assert_eq!(zone(&rig.sim, 4).0, ZoneState::Full);
    let sim = rig.finish_without_shutdown();
    let report = sim.power_cut();
    let rewound: Vec<(u64, u64, u64)> =
        report.rewound_zones.iter().map(|zone| (zone.zslba, zone.wp_before, zone.wp_after)).collect();
    assert_eq!(rewound, vec![(0, 32, 16), (3 * ZONE, 3 * ZONE + 8, 3 * ZONE), (4 * ZONE, 4 * ZONE + 192, 4 * ZONE)]);
    assert_eq!(zone(&sim, 0), (ZoneState::Closed, 16));
    assert_eq!(zone(&sim, 1), (ZoneState::Closed, ZONE + 16));
    assert_eq!(zone(&sim, 2), (ZoneState::Empty, 2 * ZONE), "an open zone without data is Empty");
    assert_eq!(zone(&sim, 3), (ZoneState::Empty, 3 * ZONE));
    assert_eq!(zone(&sim, 4), (ZoneState::Empty, 4 * ZONE));
    assert_eq!(zone(&sim, 5).0, ZoneState::Full, "zone states survive the cut");
    // The driver sees the same after a new bring-up, and can write on.
    let mut rig = Rig::on(sim);
    let zones = rig.controller.report_zones(1, 0, 8).unwrap();
    assert_eq!((zones[0].state, zones[0].wp), (ZoneState::Closed, 16));
    assert_eq!(rig.read(0, 16 * 512).unwrap(), data);
    assert_eq!(rig.read(16, 512).unwrap(), vec![0u8; 512]);
    assert_eq!(rig.read(ZONE, 16 * 512).unwrap(), data);
    rig.write(16, &data, false).unwrap();
    assert_eq!(zone(&rig.sim, 0), (ZoneState::ImplicitlyOpened, 32));
}

#[test]
fn torn_zones_keep_a_prefix() {
    for seed in 0..8 {
        let mut rig = zoned(0.97, seed);
        let data = pattern(seed, 64 * 512);
        for index in 0..6 {
            rig.write(index * ZONE, &data, false).unwrap();
            rig.write(index * ZONE + 64, &data, false).unwrap();
        }
        let sim = rig.finish_without_shutdown();
        let report = sim.power_cut();
        let mut rig = Rig::on(sim);
        for index in 0..6 {
            let zslba = index * ZONE;
            let (state, wp) = zone(&rig.sim, index);
            let persisted = wp - zslba;
            assert!(persisted <= 128);
            assert_eq!(state, if persisted == 0 { ZoneState::Empty } else { ZoneState::Closed });
            let lost_in_zone = (zslba..zslba + 128).filter(|lba| report.is_lost(1, *lba)).count() as u64;
            assert_eq!(persisted + lost_in_zone, 128, "seed {seed}, zone {index}: a prefix persisted, the rest lost");
            let read = rig.read(zslba, 128 * 512).unwrap();
            for block in 0..128u64 {
                let bytes = &read[block as usize * 512..(block as usize + 1) * 512];
                if block < persisted {
                    let offset = (block % 64) as usize * 512;
                    assert_eq!(bytes, &data[offset..offset + 512]);
                } else {
                    assert!(bytes.iter().all(|b| *b == 0), "nothing past the write pointer");
                }
            }
        }
    }
}
