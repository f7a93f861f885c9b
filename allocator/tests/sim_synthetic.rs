//! A volume on a simulated namespace that keeps synthetic data as seeds
//! (what the scale benchmark fills terabytes with): every extent reads back
//! whole and verifies, across a reopen, while the simulator holds only the
//! metadata's bytes.

use nvme_driver::sim::{synthetic, SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions};
use std::sync::Arc;
use zoned_allocator::{Device, DeviceOptions, Volume, VolumeOptions, BLOCK_SIZE};

fn device(sim: &Arc<Simulator>) -> Device {
    let controller = Controller::init(sim.clone(), ControllerOptions::default()).expect("bring-up");
    Device::open(&controller, 1, DeviceOptions::default()).expect("a device")
}

#[test]
fn synthetic_extents_read_back_and_verify_across_a_reopen() {
    // 1 GiB, 16 MiB zones, 4 KiB LBAs, no write cache.
    let mut config = SimConfig::zoned(1 << 18, 4096, 1 << 12, 1 << 12);
    config.namespaces[0] = config.namespaces[0].clone().synthetic_data();
    config.volatile_write_cache = false;
    let sim = Simulator::new(config);
    let options = VolumeOptions::default();
    let mut volume = Volume::format(vec![device(&sim)], &options).unwrap();
    let mut seed = 1;
    let mut written = Vec::new();
    for index in 0..300u64 {
        let blocks = 1 + (index as usize * 7) % 64;
        let mut data = vec![0u8; blocks * BLOCK_SIZE];
        for block in data.chunks_exact_mut(BLOCK_SIZE) {
            synthetic::fill(block, seed);
            seed += 1;
        }
        let id = volume.write(0, &data, index).unwrap();
        written.push((id, data));
        if index % 50 == 49 {
            volume.commit().unwrap();
        }
    }
    volume.commit().unwrap();
    let data_bytes: usize = written.iter().map(|(_, d)| d.len()).sum();
    let stored = sim.storage_bytes(1);
    assert!(stored < data_bytes as u64 / 4, "{stored} bytes stored for {data_bytes} of data");
    let devices = volume.close().unwrap();
    let mut volume = Volume::open(devices, &options).unwrap();
    for (id, data) in &written {
        let mut back = vec![0u8; data.len()];
        let outcome = volume.read(*id, &mut back).unwrap();
        assert!(outcome.repaired.is_empty(), "extent {id} failed its checksums");
        assert_eq!(&back, data, "extent {id}");
    }
}
