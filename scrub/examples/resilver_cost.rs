//! What a resilver costs on the host's CPU, natively, on the simulator:
//! a mirror of two simulated ZNS namespaces filled with 256 KiB extents,
//! then, on the same data: a scrub of one copy without verification (reads
//! only), a resilver without verification and one with it, each rebuilding
//! the whole second copy on a blank simulated namespace. The simulator
//! answers at memory speed, so the rates are the engines' own CPU cost.
//!
//! `cargo run --release -p nvme-scrub --example resilver_cost [MiB]`

use nvme_driver::sim::{SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions};
use nvme_scrub::{resilver, scrub, Control, ResilverOptions, ScrubOptions};
use std::time::Instant;
use zoned_allocator::{Device, DeviceOptions, Profile, Volume, VolumeOptions};

fn main() {
    let mib: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(256);
    let zone_lbas = 8 << 11; // 8 MiB zones of 512-byte LBAs
    let zones = (mib * 2048 / zone_lbas).max(16) * 2; // twice the data
    let sims: Vec<_> =
        (0..4).map(|_| Simulator::new(SimConfig::zoned(zones * zone_lbas, 512, zone_lbas, zone_lbas))).collect();
    let controllers: Vec<Controller> =
        sims.iter().map(|s| Controller::init(s.clone(), ControllerOptions::default()).unwrap()).collect();
    let device = |c: usize| Device::open(&controllers[c], 1, DeviceOptions::default()).unwrap();
    let options = VolumeOptions { profile: Profile::Mirror, ..VolumeOptions::default() };
    let mut volume = Volume::format(vec![device(0), device(1)], &options).unwrap();
    let data: Vec<u8> = (0..256 * 1024).map(|i| (i * 7 + 3) as u8).collect();
    let started = Instant::now();
    for i in 0..mib * 4 {
        volume.submit_write(0, &data, i).unwrap();
        while volume.writes_in_flight() > 32 {
            volume.poll();
            while volume.next_done().is_some() {}
        }
    }
    volume.commit().unwrap();
    let bytes = volume.valid_blocks() * 4096;
    let rate = |started: Instant| bytes as f64 / f64::from(1 << 20) / started.elapsed().as_secs_f64();
    println!("writes of both copies (the fill):   {:8.0} MiB/s", rate(started));

    let started = Instant::now();
    let reads = ScrubOptions { verify: false, repair: false, lanes: Some(vec![0]), ..ScrubOptions::default() };
    scrub(&mut volume, &reads, &Control::new(), None, &mut |_| {}, &mut |_| {}).unwrap();
    println!("scrub of one copy, no verification: {:8.0} MiB/s", rate(started));

    for (spare, verify) in [(2, false), (3, true)] {
        volume.fail_device(1, "measuring").unwrap();
        volume.commit().unwrap();
        volume.replace(1, device(spare), true).unwrap();
        let options = ResilverOptions { verify, verify_after: false, ..ResilverOptions::default() };
        let started = Instant::now();
        let report = resilver(&mut volume, 1, &options, &Control::new(), &mut |_| {}).unwrap();
        assert!(report.complete());
        println!(
            "resilver, verify {verify:5}:            {:8.0} MiB/s (reads in flight {:.1}, copies {:.1})",
            rate(started),
            report.mean_read_queue_depth,
            report.mean_write_queue_depth
        );
    }
}
