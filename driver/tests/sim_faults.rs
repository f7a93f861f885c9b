//! Every fault the simulator injects, observed through the driver with the
//! typed status (or error) a real device would produce.

mod sim_support;

use nvme_driver::cmd::admin;
use nvme_driver::sim::{Fault, FaultConfig, SimConfig, Simulator};
use nvme_driver::spec::registers::{self, Csts};
use nvme_driver::spec::status::{MediaStatus, StatusCode};
use nvme_driver::{Controller, Error, Transport};
use sim_support::{code, init, options, pattern, transport, Rig};

fn media(code: MediaStatus) -> StatusCode {
    StatusCode::Media(code)
}

fn bits_differing(a: &[u8], b: &[u8]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

#[test]
fn unrecovered_read_errors_on_a_range_until_rewritten() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    let data = pattern(1, 8192);
    rig.write(96, &data, false).unwrap();
    rig.sim.inject(Fault::UnrecoveredRead { nsid: 1, slba: 100, blocks: 4 });
    let status = rig.read(96, 8192).unwrap_err();
    assert_eq!(status.code(), media(MediaStatus::UnrecoveredReadError));
    assert!(status.is_media_error() && !status.dnr);
    assert_eq!(rig.read(96, 2048).unwrap(), data[..2048], "blocks before the range read fine");
    let verify = rig.ns.verify(98, 4, 0).unwrap();
    assert_eq!(code(rig.status(verify)), media(MediaStatus::UnrecoveredReadError), "Verify reads the media too");
    let compare = rig.ns.compare(100, rig.buffer_with(&data[2048..2560]), 0).unwrap();
    assert_eq!(code(rig.status(compare)), media(MediaStatus::UnrecoveredReadError));
    // Rewriting two of the four blocks remaps them; the other two stay bad.
    rig.write(100, &data[2048..3072], false).unwrap();
    assert_eq!(rig.read(100, 1024).unwrap(), data[2048..3072]);
    assert!(rig.read(102, 512).is_err());
    assert_eq!(rig.sim.stats().faults.unrecovered_reads, 4);
    rig.sim.clear_faults();
    assert_eq!(rig.read(96, 8192).unwrap(), data);
    assert_eq!(rig.controller.smart_log().unwrap().media_errors, 4);
}

#[test]
fn unrecovered_read_errors_by_probability() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512).with_seed(5));
    rig.sim.set_fault_config(FaultConfig { unrecovered_read_probability: 0.5, ..FaultConfig::default() });
    let failures = (0..200).filter(|i| rig.read(i * 8, 4096).is_err()).count();
    assert!((60..140).contains(&failures), "{failures} of 200 reads failed at p = 0.5");
    rig.sim.set_fault_config(FaultConfig { unrecovered_read_probability: 1.0, ..FaultConfig::default() });
    assert_eq!(code(rig.read(0, 512).map(|_| ())), media(MediaStatus::UnrecoveredReadError));
}

#[test]
fn silent_bit_flips_on_read_and_at_rest() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 4096));
    let data = pattern(2, 16384);
    rig.write(10, &data, true).unwrap();
    rig.sim.inject(Fault::ReadBitFlip { nsid: 1, slba: 12, blocks: 1 });
    let read = rig.read(10, 16384).unwrap();
    assert_eq!(bits_differing(&read, &data), 1, "one bit flipped, success status");
    let flipped = read.iter().zip(&data).position(|(a, b)| a != b).unwrap();
    assert_eq!(flipped / 4096, 2, "inside block 12");
    assert_eq!(rig.sim.read_block(1, 12), data[8192..12288], "the stored data is intact");
    rig.sim.clear_faults();
    assert_eq!(rig.read(10, 16384).unwrap(), data);
    // At rest: the stored bit itself.
    rig.sim.corrupt_at_rest(1, 11, 8 * 100 + 3);
    let read = rig.read(11, 4096).unwrap();
    assert_eq!(read[100], data[4096 + 100] ^ 0b1000);
    assert_eq!(bits_differing(&read, &data[4096..8192]), 1);
    // By probability.
    rig.sim.set_fault_config(FaultConfig { read_bit_flip_probability: 1.0, ..FaultConfig::default() });
    assert_eq!(bits_differing(&rig.read(13, 4096).unwrap(), &data[12288..]), 1);
    let stats = rig.sim.stats().faults;
    assert_eq!((stats.read_bit_flips, stats.corrupted_at_rest), (2, 1));
}

#[test]
fn an_overwrite_at_rest_is_what_reads_and_the_media_hold_after_it() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 4096));
    let data = pattern(3, 4 * 4096);
    // Cached, not yet durable: the overwrite must not leave the cached
    // copy over it.
    rig.write(20, &data, false).unwrap();
    let garbage = pattern(4, 2 * 4096);
    rig.sim.write_at_rest(1, 21, &garbage);
    let read = rig.read(20, 4 * 4096).unwrap();
    assert_eq!(read[..4096], data[..4096], "block 20 as written");
    assert_eq!(read[4096..3 * 4096], garbage[..], "blocks 21 and 22 as overwritten");
    assert_eq!(read[3 * 4096..], data[3 * 4096..], "block 23 as written");
    assert_eq!(rig.sim.durable_block(1, 22), garbage[4096..], "on the media");
    assert_eq!(rig.sim.stats().faults.overwritten_at_rest_blocks, 2);
}

#[test]
fn write_faults_write_nothing() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    rig.write(0, &[1u8; 4096], true).unwrap();
    rig.sim.inject(Fault::WriteFault { nsid: 1, slba: 6, blocks: 10 });
    let status = rig.write(0, &[2u8; 4096], false).unwrap_err();
    assert_eq!(status.code(), media(MediaStatus::WriteFault));
    assert_eq!(rig.read(0, 4096).unwrap(), vec![1u8; 4096], "nothing written");
    let zeroes = rig.ns.write_zeroes(8, 1, false, 0).unwrap();
    assert_eq!(code(rig.status(zeroes)), media(MediaStatus::WriteFault));
    rig.write(16, &[3u8; 512], false).unwrap();
    rig.sim.clear_faults();
    rig.sim.set_fault_config(FaultConfig { write_fault_probability: 1.0, ..FaultConfig::default() });
    assert_eq!(code(rig.write(100, &[3u8; 512], false)), media(MediaStatus::WriteFault));
    assert_eq!(rig.sim.stats().faults.write_faults, 3);
}

/// Submits `count` flushes and polls a bounded number of times; returns
/// the tokens that came back.
fn flushes(rig: &mut Rig, count: u64) -> Vec<u64> {
    for token in 0..count {
        let request = rig.ns.flush(token);
        rig.pair.submit(request).map_err(|(error, _)| error).unwrap();
    }
    let mut done = Vec::new();
    for _ in 0..1000 {
        rig.pair.poll(|completion| done.push(completion.token));
    }
    done
}

#[test]
fn dropped_completions_never_arrive() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    rig.sim.inject(Fault::DropCompletions { count: 2 });
    let done = flushes(&mut rig, 5);
    assert_eq!(done, vec![2, 3, 4], "the first two executed but never completed");
    assert_eq!(rig.pair.in_flight(), 2);
    assert_eq!(rig.sim.stats().io(0x00), 5, "all five were executed");
    assert_eq!(rig.sim.stats().completions_dropped, 2);
    // By probability: roughly half of 40 more.
    rig.sim.set_fault_config(FaultConfig { dropped_completion_probability: 0.5, ..FaultConfig::default() });
    let mut pair = rig.controller.create_queue_pair(64).unwrap();
    for token in 0..40 {
        pair.submit(rig.ns.flush(token)).map_err(|(error, _)| error).unwrap();
    }
    let mut arrived = 0;
    for _ in 0..100 {
        pair.poll(|_| arrived += 1);
    }
    assert!((8..32).contains(&arrived), "{arrived} of 40 arrived at p = 0.5");
    // An admin command whose completion is dropped times out.
    rig.sim.inject(Fault::DropAdminCompletions { count: 1 });
    let error = rig.controller.admin_command(admin::get_features(admin::FID_ARBITRATION, 0, 0)).unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
    drop(pair);
}

#[test]
fn controller_fatal_status_fails_the_command_and_the_driver_resets() {
    let sim = Simulator::new(SimConfig::nvm(1 << 16, 512));
    let controller = init(&sim);
    sim.inject(Fault::ControllerFatal);
    assert!(Csts(sim.read32(registers::CSTS)).cfs());
    let error = controller.admin_command(admin::get_features(admin::FID_ARBITRATION, 0, 0)).unwrap_err();
    assert!(matches!(error, Error::ControllerFatal), "{error}");
    // The driver reset the controller on seeing the fatal status.
    assert!(!Csts(sim.read32(registers::CSTS)).cfs());
    assert_eq!(controller.resets(), 1);
    let mut rig = Rig::on_controller(sim, controller);
    rig.write(0, &[1u8; 512], false).unwrap();
    assert_eq!(rig.sim.stats().faults.controller_fatal, 1);
}

#[test]
fn surprise_removal_reads_all_ones() {
    let sim = Simulator::new(SimConfig::nvm(1 << 16, 512));
    let controller = init(&sim);
    sim.inject(Fault::SurpriseRemoval);
    for offset in [registers::CAP, registers::VS, registers::CC, registers::CSTS, 0x1000] {
        assert_eq!(sim.read32(offset), u32::MAX);
    }
    let error = controller.admin_command(admin::get_features(admin::FID_ARBITRATION, 0, 0)).unwrap_err();
    assert!(matches!(error, Error::DeviceGone), "{error}");
    assert!(matches!(Controller::init(transport(&sim), options()).unwrap_err(), Error::DeviceGone));
    drop(controller);
    // A power cycle brings the device back.
    sim.power_cut();
    let mut rig = Rig::on(sim);
    rig.write(0, &[1u8; 512], false).unwrap();
}
