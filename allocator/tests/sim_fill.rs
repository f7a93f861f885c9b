//! Writes made in place in a buffer the volume lends (`Volume::fill_buffer`):
//! nothing copied on the way to the device, checksums from the same
//! memory, every profile, and the buffers always come back.

use nvme_testkit::harness as support;

use nvme_testkit::data::pattern;
use std::time::Duration;
use support::{conventional, device_options, volume_options, zns, Harness};
use zoned_allocator::{Device, DeviceOptions, Error, ExtentId, Profile, Volume, VolumeOptions, BLOCK_SIZE};

const FILL_BUFFERS: u32 = 4;

fn devices(harness: &Harness, fill_buffers: u32) -> Vec<Device> {
    let options = DeviceOptions { fill_buffers, ..device_options() };
    harness.layout.iter().map(|&(c, nsid)| Device::open(&harness.controllers[c], nsid, options).unwrap()).collect()
}

/// Writes `count` extents through lent buffers, at most `FILL_BUFFERS` in
/// flight; returns each extent with its bytes.
fn write_filled(volume: &mut Volume, count: u64) -> Vec<(ExtentId, Vec<u8>)> {
    let mut written = Vec::new();
    for i in 0..count {
        let blocks = 1 + (i as usize * 5) % 16;
        let data = pattern(i + 100, blocks);
        let mut buffer = volume.fill_buffer().unwrap();
        assert!(buffer.len() >= volume.max_extent_bytes());
        buffer[..data.len()].copy_from_slice(&data);
        let id = volume.submit_filled(0, buffer, data.len(), i).unwrap();
        written.push((id, data));
    }
    volume.wait_idle().unwrap();
    while let Some(done) = volume.next_done() {
        done.result.unwrap();
    }
    written
}

fn read_back(volume: &mut Volume, written: &[(ExtentId, Vec<u8>)]) {
    for (id, data) in written {
        let mut back = vec![0u8; data.len()];
        volume.read(*id, &mut back).unwrap();
        assert_eq!(&back, data, "extent {id}");
    }
}

/// Writes through lent buffers, checks what was copied, reads back before
/// and after reopening, and checks every buffer came back.
fn scenario(mut harness: Harness, options: &VolumeOptions, copies_made: u64) {
    let mut volume = Volume::format(devices(&harness, FILL_BUFFERS), options).unwrap();
    let before = volume.stats().copied_in_bytes;
    let written = write_filled(&mut volume, 24);
    let bytes: u64 = written.iter().map(|(_, data)| data.len() as u64).sum();
    assert_eq!(volume.stats().copied_in_bytes - before, copies_made * bytes, "bytes copied into DMA memory");
    assert_eq!(volume.stats().write_bytes, bytes);
    volume.commit().unwrap();
    volume.check_invariants();
    read_back(&mut volume, &written);
    // Every buffer is back: all can be held at once, and no more.
    let held: Vec<_> = (0..FILL_BUFFERS).map(|_| volume.try_fill_buffer().unwrap().expect("a free buffer")).collect();
    assert!(volume.try_fill_buffer().unwrap().is_none());
    drop(held);
    drop(volume);
    harness.restart();
    let mut volume = Volume::open(devices(&harness, 0), options).unwrap();
    volume.check_invariants();
    read_back(&mut volume, &written);
}

#[test]
fn single_copy_writes_without_copying() {
    scenario(Harness::single(zns(64, 1024)), &volume_options(), 0);
}

#[test]
fn conventional_namespace_writes_without_copying() {
    let options = VolumeOptions { software_zone_bytes: Some(1 << 20), ..volume_options() };
    scenario(Harness::single(conventional(64)), &options, 0);
}

#[test]
fn dup_copies_once_for_its_second_copy() {
    let options = VolumeOptions { profile: Profile::Dup, ..volume_options() };
    scenario(Harness::single(zns(64, 1024)), &options, 1);
}

#[test]
fn mirror_on_two_controllers_copies_once_for_the_other_device() {
    let options = VolumeOptions { profile: Profile::Mirror, software_zone_bytes: Some(1 << 20), ..volume_options() };
    scenario(Harness::new(vec![zns(64, 1024), conventional(64)], vec![(0, 1), (1, 1)]), &options, 1);
}

#[test]
fn a_failed_write_returns_its_buffer_and_loses_nothing_committed() {
    use nvme_driver::sim::Fault;
    let harness = Harness::single(zns(64, 1024));
    let mut volume = Volume::format(devices(&harness, FILL_BUFFERS), &volume_options()).unwrap();
    let kept = write_filled(&mut volume, 4);
    volume.commit().unwrap();
    // Every write from now on fails on the device.
    harness.sims[0].inject(Fault::WriteFault { nsid: 1, slba: 0, blocks: 64 * 2048 });
    for i in 0..FILL_BUFFERS * 2 {
        let mut buffer = volume.fill_buffer().unwrap();
        buffer[..BLOCK_SIZE].fill(i as u8);
        // Refused at once, or failed at completion: either way reported.
        if volume.submit_filled(0, buffer, BLOCK_SIZE, 1000 + u64::from(i)).is_ok() {
            let _ = volume.wait_idle();
            let done = volume.next_done().expect("the write's outcome");
            assert!(done.result.is_err(), "a write the device failed reported success");
        }
    }
    let held: Vec<_> = (0..FILL_BUFFERS).map(|_| volume.try_fill_buffer().unwrap().expect("returned")).collect();
    drop(held);
    read_back(&mut volume, &kept);
}

#[test]
fn refusals_are_typed() {
    let harness = Harness::single(zns(64, 1024));
    let options = VolumeOptions { timeout: Duration::from_millis(200), ..volume_options() };
    // Devices opened without fill buffers lend none.
    let mut plain = Volume::format(devices(&harness, 0), &options).unwrap();
    assert!(matches!(plain.fill_buffer(), Err(Error::InvalidArgument(_))));
    drop(plain);
    let mut volume = Volume::open(devices(&harness, 2), &options).unwrap();
    let (a, b) = (volume.fill_buffer().unwrap(), volume.fill_buffer().unwrap());
    // All held: the wait is bounded.
    assert!(matches!(volume.fill_buffer(), Err(Error::Timeout { .. })));
    // Longer than the buffer, and not whole blocks: refused, nothing written.
    let len = a.len();
    assert!(matches!(volume.submit_filled(0, a, len + BLOCK_SIZE, 1), Err(Error::InvalidArgument(_))));
    assert!(matches!(volume.submit_filled(0, b, 100, 1), Err(Error::InvalidArgument(_))));
    assert_eq!(volume.stats().writes, 0);
    assert!(volume.try_fill_buffer().unwrap().is_some(), "refused buffers come back");
}
