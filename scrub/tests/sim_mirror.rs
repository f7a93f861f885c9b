//! A mirror that lives through a lost drive, on the simulator: degraded
//! open only when allowed, a device pulled with writes in flight, a device
//! given up after too many errors, replace and resilver, a device that
//! comes back and gets only what it missed, and a resilver cut by a power
//! loss that resumes from the volume's own metadata.

use nvme_testkit::harness as support;

use nvme_driver::sim::Fault;
use nvme_scrub::{resilver, Control, Outcome, Resilver, ResilverOptions, ResilverPhase, ResilverReport};
use nvme_testkit::data::pattern;
use std::collections::BTreeMap;
use support::{device_options, volume_options, zns, Harness};
use zoned_allocator::{Device, Error, MemberState, Profile, Volume, VolumeOptions, VolumeState};

/// extent → data
type Data = BTreeMap<u64, Vec<u8>>;

/// Two ZNS controllers in the volume and a third, blank, for replacing.
fn mirror() -> (Harness, VolumeOptions) {
    (
        Harness::new(vec![zns(64, 256), zns(64, 256), zns(64, 256)], vec![(0, 1), (1, 1)]),
        VolumeOptions { profile: Profile::Mirror, ..volume_options() },
    )
}

fn device(harness: &Harness, controller: usize) -> Device {
    Device::open(&harness.controllers[controller], 1, device_options()).expect("open the device")
}

fn write(volume: &mut Volume, data: &mut Data, count: u64, seed: u64) {
    for i in 0..count {
        let bytes = pattern(seed * 1000 + i, 1 + (i % 4) as usize);
        let id = volume.write(0, &bytes, seed * 1000 + i).expect("write");
        data.insert(id, bytes);
    }
}

/// Every extent reads back exactly, and, when `copies` is set, from each
/// copy on its own.
fn check(volume: &mut Volume, data: &Data, copies: bool) {
    volume.check_invariants();
    assert_eq!(volume.extent_ids().count(), data.len(), "extents");
    for (&id, bytes) in data {
        let mut back = vec![0u8; bytes.len()];
        volume.read(id, &mut back).unwrap_or_else(|e| panic!("extent {id}: {e}"));
        assert!(&back == bytes, "extent {id} reads back wrong");
        if copies {
            for lane in 0..volume.lanes() {
                volume.read_copy(id, lane, &mut back).unwrap_or_else(|e| panic!("extent {id} copy {lane}: {e}"));
                assert!(&back == bytes, "extent {id} copy {lane} is wrong");
            }
        }
    }
}

/// Takes in every write acknowledged so far: each must have succeeded (on
/// every copy in use), and its bytes join `data`.
fn take_acknowledged(volume: &mut Volume, pending: &mut Data, data: &mut Data) {
    while let Some(done) = volume.next_done() {
        done.result.unwrap_or_else(|e| panic!("write {}: {e}", done.id));
        data.insert(done.id, pending.remove(&done.id).expect("one of ours"));
    }
}

/// A mirror of `options` with `extents` committed, device 1 then given up
/// by the operator, and the blank controller 2 put in its place: place 1
/// lacks every copy, and place 0 holds the only ones.
fn replaced_mirror(harness: &Harness, options: &VolumeOptions, extents: u64) -> (Volume, Data) {
    let mut volume = harness.format(options);
    let mut data = Data::new();
    write(&mut volume, &mut data, extents, 1);
    volume.commit().unwrap();
    volume.fail_device(1, "pulled by the operator").unwrap();
    volume.replace(1, device(harness, 2), false).expect("replace with the blank device");
    (volume, data)
}

fn resilver_all(volume: &mut Volume, place: usize) -> ResilverReport {
    let report = resilver(volume, place, &ResilverOptions::default(), &Control::new(), &mut |_| {}).expect("resilver");
    assert!(report.complete(), "{report:?}");
    report
}

#[test]
fn a_mirror_missing_a_device_opens_only_when_allowed_then_serves_reads_and_writes() {
    let (mut harness, options) = mirror();
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 20, 1);
    volume.commit().unwrap();
    drop(volume);
    harness.restart();
    let only_first = |harness: &Harness| vec![device(harness, 0)];
    match Volume::open(only_first(&harness), &options) {
        Err(Error::Degraded { missing, .. }) => assert_eq!(missing, vec![1]),
        other => panic!("expected Degraded, got {other:?}"),
    }
    let degraded = VolumeOptions { degraded: true, ..options.clone() };
    let mut volume = Volume::open(only_first(&harness), &degraded).expect("opens degraded");
    check(&mut volume, &data, false);
    let status = volume.status();
    assert_eq!(status.state, VolumeState::Degraded);
    assert_eq!(status.devices[1].state, MemberState::Failed);
    assert_eq!(status.redundancy.bytes_missing, 0, "nothing written yet lacks a copy");
    let all = data.len() as u64;
    assert_eq!(status.redundancy.extents_at_risk, all, "every extent has one copy available");
    write(&mut volume, &mut data, 10, 2);
    volume.commit().unwrap();
    let missing = volume.status().redundancy.extents_missing;
    assert_eq!(missing, 10, "the extents written degraded lack their second copy");
    drop(volume);
    harness.restart();
    // The missing copies are in the metadata: a second degraded open
    // knows them, and so does one with both devices.
    let mut volume = Volume::open(only_first(&harness), &degraded).expect("opens degraded again");
    assert_eq!(volume.status().redundancy.extents_missing, 10);
    check(&mut volume, &data, false);
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).expect("both devices: the second rejoins");
    let status = volume.status();
    assert_eq!(status.state, VolumeState::Resilvering, "{status:?}");
    assert_eq!(status.devices[1].state, MemberState::Resilvering);
    let report = resilver_all(&mut volume, 1);
    assert_eq!(report.extents_copied, 10, "only what it missed is copied");
    assert_eq!(volume.status().state, VolumeState::Online);
    check(&mut volume, &data, true);
}

#[test]
fn a_device_pulled_with_writes_in_flight_loses_nothing_acknowledged() {
    let (mut harness, options) = mirror();
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 10, 1);
    volume.commit().unwrap();
    // Writes in flight when the second device goes.
    let mut pending = Data::new();
    for i in 0..16u64 {
        let bytes = pattern(5000 + i, 2);
        let id = volume.submit_write(0, &bytes, i).expect("submit");
        pending.insert(id, bytes);
        if i == 7 {
            harness.sims[1].inject(Fault::SurpriseRemoval);
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while volume.writes_in_flight() > 0 {
        volume.poll();
        assert!(std::time::Instant::now() < deadline, "writes in flight never ended");
    }
    // Acknowledged once on every copy in use: the survivor's.
    take_acknowledged(&mut volume, &mut pending, &mut data);
    volume.commit().expect("the commit goes on without the device");
    assert_eq!(volume.status().state, VolumeState::Degraded);
    check(&mut volume, &data, false);
    drop(volume.abandon());
    harness.sims[1].power_cut();
    harness.sims[0].power_cut();
    harness.restart();
    let degraded = VolumeOptions { degraded: true, ..options.clone() };
    let mut volume = Volume::open(vec![device(&harness, 0)], &degraded).expect("opens degraded");
    check(&mut volume, &data, false);
}

#[test]
fn a_device_failing_too_often_is_given_up_and_its_counters_persist() {
    let (mut harness, options) = mirror();
    let options = VolumeOptions { max_device_errors: 3, ..options };
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 5, 1);
    volume.commit().unwrap();
    // Every write to the second device fails from now on.
    harness.sims[1].inject(Fault::WriteFault { nsid: 1, slba: 0, blocks: 64 * 512 });
    let mut failed = 0;
    for i in 0..10u64 {
        let bytes = pattern(700 + i, 1);
        match volume.write(0, &bytes, i) {
            Ok(id) => {
                data.insert(id, bytes);
            }
            Err(Error::Command { .. }) => failed += 1,
            Err(other) => panic!("write {i}: {other}"),
        }
    }
    assert_eq!(failed, 2, "the writes before the threshold fail; from the third the device is given up");
    volume.commit().unwrap();
    let status = volume.status();
    assert_eq!(status.state, VolumeState::Degraded);
    assert_eq!(status.devices[1].errors.write, 3);
    assert_eq!(status.devices[1].serial, "sim0", "status still names the device given up");
    check(&mut volume, &data, false);
    drop(volume);
    harness.sims[1].clear_faults();
    harness.restart();
    let degraded = VolumeOptions { degraded: true, ..options.clone() };
    let volume = Volume::open(vec![device(&harness, 0)], &degraded).expect("opens degraded");
    assert_eq!(volume.status().devices[1].errors.write, 3, "the counters are in the metadata");
}

#[test]
fn a_new_device_replaces_a_lost_one_and_a_resilver_restores_every_copy() {
    let (mut harness, options) = mirror();
    // Extents (and so reads) of at most 16 KiB: the resilver takes steps.
    let options = VolumeOptions { max_extent_bytes: 16 << 10, ..options };
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 40, 1);
    volume.commit().unwrap();
    volume.fail_device(1, "pulled by the operator").unwrap();
    write(&mut volume, &mut data, 10, 2);
    volume.commit().unwrap();
    // A device that is not blank is refused without force.
    assert!(matches!(volume.replace(1, device(&harness, 0), false), Err(Error::Member { device: 1, .. })));
    volume.replace(1, device(&harness, 2), false).expect("replace with the blank device");
    let status = volume.status();
    assert_eq!(status.devices[1].state, MemberState::Resilvering);
    assert_eq!(status.redundancy.extents_at_risk, 50, "the new device holds nothing yet");
    // Writes during the resilver go to both copies.
    let small_reads = ResilverOptions { max_request_bytes: Some(16 << 10), ..ResilverOptions::default() };
    let mut engine = Resilver::new(&volume, 1, &small_reads).unwrap();
    let mut steps = 0;
    while !engine.step(&mut volume, 64 << 10).unwrap() {
        write(&mut volume, &mut data, 1, 100 + steps);
        steps += 1;
    }
    let report = engine.finish(&mut volume).unwrap();
    assert!(steps > 1, "the resilver ran in steps");
    assert_eq!(report.extents_copied, 50);
    assert_eq!(report.bytes_read, report.bytes_total, "each extent read once");
    assert_eq!(report.bytes_left, 0);
    assert_eq!(volume.status().state, VolumeState::Online);
    check(&mut volume, &data, true);
    // The replacement is a member: the volume opens on it.
    drop(volume);
    harness.restart();
    let devices = vec![device(&harness, 2), device(&harness, 0)];
    let mut volume = Volume::open(devices, &options).expect("opens on the replacement");
    check(&mut volume, &data, true);
}

#[test]
fn a_device_that_comes_back_gets_only_what_it_missed() {
    let conventional = (
        Harness::new(vec![support::conventional(16), support::conventional(16)], vec![(0, 1), (1, 1)]),
        VolumeOptions { profile: Profile::Mirror, software_zone_bytes: Some(256 << 10), ..volume_options() },
    );
    for (harness, options) in [mirror(), conventional] {
        comes_back(harness, options);
    }
}

fn comes_back(mut harness: Harness, options: VolumeOptions) {
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 30, 1);
    volume.commit().unwrap();
    let before = data.len();
    // Written to both, but not yet made durable by a commit when the
    // device goes: its copies of these are lost with its volatile cache.
    write(&mut volume, &mut data, 5, 3);
    harness.sims[1].inject(Fault::SurpriseRemoval);
    write(&mut volume, &mut data, 12, 2);
    volume.commit().unwrap();
    assert_eq!(volume.status().state, VolumeState::Degraded);
    // Re-seated: it answers again (its volatile cache lost).
    harness.sims[1].power_cut();
    harness.controllers[1] = nvme_driver::Controller::init(harness.sims[1].clone(), support::controller_options())
        .expect("bring-up after re-seating");
    let place = volume.rejoin(device(&harness, 1)).expect("rejoins");
    assert_eq!(place, 1);
    let missed: u64 = data.iter().skip(before).map(|(_, d)| d.len() as u64).sum();
    assert_eq!(volume.missing_blocks(1) * 4096, missed, "only the writes made while it was away are missing");
    let report = resilver_all(&mut volume, 1);
    assert_eq!(report.bytes_copied, missed, "only those are copied");
    assert_eq!(report.verify.as_ref().map(|v| v.outcome), Some(Outcome::Clean));
    check(&mut volume, &data, true);
}

#[test]
fn a_resilver_cut_by_power_loss_resumes_from_the_metadata() {
    let (mut harness, options) = mirror();
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 60, 1);
    volume.commit().unwrap();
    volume.fail_device(1, "test").unwrap();
    volume.commit().unwrap();
    volume.replace(1, device(&harness, 2), false).unwrap();
    let total = volume.missing_blocks(1);
    let small = ResilverOptions {
        commit_every_bytes: 64 << 10,
        max_request_bytes: Some(16 << 10),
        max_in_flight: 2,
        ..ResilverOptions::default()
    };
    let mut engine = Resilver::new(&volume, 1, &small).unwrap();
    while volume.missing_blocks(1) * 2 > total {
        assert!(!engine.step(&mut volume, 16 << 10).unwrap(), "the cut comes mid-resilver");
    }
    let copied_before_cut = total - volume.missing_blocks(1);
    assert!(copied_before_cut > 0, "some copies were made before the cut");
    drop(engine);
    drop(volume.abandon());
    harness.power_cut();
    let devices = vec![device(&harness, 0), device(&harness, 2)];
    let mut volume = Volume::open(devices, &options).expect("reopens after the cut");
    let left = volume.missing_blocks(1);
    assert!(left > 0 && left < total, "progress survived in the metadata ({left} of {total} blocks left)");
    // Place 0 still holds the only copies of what is left: after the cut,
    // as before it, it is not given up.
    let at_risk = volume.status().redundancy.extents_at_risk;
    match volume.fail_device(0, "taken out by the operator") {
        Err(Error::LastCopy { device: 0, extents, .. }) => assert_eq!(extents, at_risk),
        other => panic!("expected LastCopy after the cut, got {other:?}"),
    }
    assert_eq!(volume.missing_blocks(1), left, "nothing changed");
    let report = resilver_all(&mut volume, 1);
    assert_eq!(report.bytes_copied, left * 4096, "the resumed resilver copies only what is left");
    check(&mut volume, &data, true);
}

#[test]
fn members_with_different_zone_sizes_keep_the_formats_segments_while_degraded() {
    // A conventional member of 256 KiB software zones and a ZNS one of
    // 1 MiB zones: the metadata segments differ in size, and the journal
    // keeps to the smaller even while that member is away, so that it can
    // come back, and a device like it can replace it.
    let harness =
        Harness::new(vec![support::conventional(16), zns(16, 1024), support::conventional(16)], vec![(0, 1), (1, 1)]);
    let options = VolumeOptions { profile: Profile::Mirror, software_zone_bytes: Some(256 << 10), ..volume_options() };
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 10, 1);
    volume.commit().unwrap();
    volume.fail_device(0, "test").unwrap();
    // Many small commits: the log grows past what the small segments
    // hold unless it rotates by their size.
    for round in 0..200 {
        write(&mut volume, &mut data, 1, 10 + round);
        volume.commit().unwrap();
    }
    volume.replace(0, device(&harness, 2), false).expect("a device like the lost one replaces it");
    resilver_all(&mut volume, 0);
    check(&mut volume, &data, true);
    drop(volume.close().unwrap());
    let mut volume = Volume::open(vec![device(&harness, 1), device(&harness, 2)], &options).expect("reopens");
    check(&mut volume, &data, true);
}

#[test]
fn a_conventional_device_replaces_a_zns_member_with_larger_zones() {
    // Two ZNS members of 1 MiB zones; the replacement for the first is
    // conventional, on a volume with no software zones yet: they are
    // chosen large enough for the volume's metadata segments.
    let harness = Harness::new(vec![zns(16, 1024), zns(16, 1024), support::conventional(16)], vec![(0, 1), (1, 1)]);
    let options = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 20, 1);
    volume.commit().unwrap();
    volume.fail_device(0, "test").unwrap();
    volume.replace(0, device(&harness, 2), false).expect("the conventional device takes place 0");
    resilver_all(&mut volume, 0);
    check(&mut volume, &data, true);
    drop(volume.close().unwrap());
    // Open takes the software zone size from the labels.
    let mut volume = Volume::open(vec![device(&harness, 2), device(&harness, 1)], &options).expect("reopens");
    assert_eq!(volume.status().state, VolumeState::Online);
    check(&mut volume, &data, true);
}

#[test]
fn a_controller_reset_gives_a_mirror_member_up_and_it_rejoins() {
    let (harness, options) = mirror();
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 10, 1);
    volume.commit().unwrap();
    // Written to both, not committed: the reset may have dropped device
    // 1's copies with its cache.
    let before = data.len();
    write(&mut volume, &mut data, 4, 2);
    harness.controllers[1].reset().expect("reset");
    write(&mut volume, &mut data, 3, 3);
    volume.commit().expect("the volume goes on without the member");
    let status = volume.status();
    assert_eq!(status.state, VolumeState::Degraded);
    assert!(status.devices[1].why.as_deref().is_some_and(|why| why.contains("reset")), "{status:?}");
    let missed: u64 = data.iter().skip(before).map(|(_, d)| d.len() as u64).sum();
    assert_eq!(volume.missing_blocks(1) * 4096, missed, "the uncommitted copies and those written since");
    volume.rejoin(device(&harness, 1)).expect("the same controller, a new queue pair");
    let report = resilver_all(&mut volume, 1);
    assert_eq!(report.bytes_copied, missed);
    check(&mut volume, &data, true);
}

#[test]
fn a_replacement_too_small_or_a_blank_rejoin_is_refused_by_name_and_changes_nothing() {
    let harness = Harness::new(vec![zns(64, 256), zns(64, 256), zns(32, 256)], vec![(0, 1), (1, 1)]);
    let options = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 10, 1);
    volume.commit().unwrap();
    volume.fail_device(1, "test").unwrap();
    volume.commit().unwrap();
    let seq = volume.committed_seq();
    match volume.replace(1, device(&harness, 2), false) {
        Err(Error::Member { device: 1, why }) => assert!(why.contains("bytes, the place held"), "{why}"),
        other => panic!("expected Member, got {other:?}"),
    }
    match volume.rejoin(device(&harness, 2)) {
        Err(Error::Member { why, .. }) => assert!(why.contains("no label of this volume"), "{why}"),
        other => panic!("expected Member, got {other:?}"),
    }
    assert_eq!(volume.committed_seq(), seq, "nothing was committed");
    assert_eq!(volume.status().state, VolumeState::Degraded);
    assert_eq!(volume.missing_blocks(1), 0, "no copy was marked missing");
    check(&mut volume, &data, false);
}

/// A blank conventional device as large as the lost member (128 MiB),
/// cut into software zones of 16 MiB and 32 KiB (asked at open, room for
/// a checksum area):
/// 7 zones where the member has 8, two of them for metadata either way.
/// Its bytes are enough; its data zones hold 4 zones of extents where the
/// volume holds 5, and it is 90% full. Before, it was taken, and the
/// resilver ended with copies still missing, one "no space" per extent;
/// now it is refused before anything changes, with what it would hold
/// beside what it must.
#[test]
fn a_replacement_whose_zones_cannot_hold_every_copy_is_refused_before_anything_changes() {
    let configs = vec![zns(8, 16 << 10), zns(8, 16 << 10), support::conventional(128), support::conventional(160)];
    let harness = Harness::new(configs, vec![(0, 1), (1, 1)]);
    let zone = (16 << 20) + (32 << 10);
    let options = VolumeOptions { profile: Profile::Mirror, software_zone_bytes: Some(zone), ..volume_options() };
    let mut volume = harness.format(&options);
    let extent = volume.max_extent_bytes();
    assert_eq!(extent, 512 << 10, "the test's geometry assumes 512 KiB extents");
    let mut data = Data::new();
    for i in 0..volume.capacity_bytes() * 9 / 10 / extent as u64 {
        let bytes = pattern(i, extent / 4096);
        data.insert(volume.write(0, &bytes, i).unwrap(), bytes);
    }
    volume.fail_device(1, "test").unwrap();
    volume.commit().unwrap();
    let (seq, writes, missing) = (volume.committed_seq(), harness.writes(), volume.missing_blocks(1));
    match volume.replace(1, device(&harness, 2), false) {
        Err(Error::Member { device: 1, why }) => assert!(why.contains("cannot hold the copies"), "{why}"),
        other => panic!("expected Member, got {other:?}"),
    }
    assert_eq!(harness.writes(), writes, "nothing was written to any device");
    assert_eq!(volume.committed_seq(), seq, "nothing was committed");
    assert_eq!(volume.status().state, VolumeState::Degraded);
    assert_eq!(volume.missing_blocks(1), missing, "no copy changed");
    check(&mut volume, &data, false);
    // A device with two more zones takes the place, and every copy.
    volume.replace(1, device(&harness, 3), false).expect("a larger device holds every copy");
    resilver_all(&mut volume, 1);
    check(&mut volume, &data, true);
}

/// The host asks for device 1 back while writes are in flight on it (an
/// orderly removal: the driver quiesces the controller and gives the device
/// up), and the replacement arrives only afterwards, on a controller that
/// did not exist when the volume opened, as a drive slid into an empty
/// slot. Every write acknowledged, before the removal or after it, reads
/// back; the new device takes the place, the resilver restores every copy
/// on it, the status names it, and the volume opens on it.
#[test]
fn a_device_plugged_in_after_a_requested_removal_replaces_it_and_nothing_acknowledged_is_lost() {
    // Device 1's completions wait a little, so that writes are in flight
    // when its pair's health check (every 10 ms) sees the request.
    let harness = Harness::new(vec![zns(64, 256), zns(64, 256).with_completion_delay(200, 200)], vec![(0, 1), (1, 1)]);
    let options = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    let mut devices = harness.devices();
    devices[0].set_identity("slot-0");
    devices[1].set_identity("slot-1");
    let mut volume = Volume::format(devices, &options).expect("format");
    let mut data = Data::new();
    write(&mut volume, &mut data, 20, 1);
    volume.commit().unwrap();
    harness.sims[1].inject(Fault::RemovalRequested);
    // Writes go on, 8 in flight, until the volume gives device 1 up.
    let mut pending = Data::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut next = 0u64;
    while volume.status().state != VolumeState::Degraded || volume.writes_in_flight() > 0 {
        assert!(std::time::Instant::now() < deadline, "the removal was never noticed");
        if volume.status().state != VolumeState::Degraded && volume.writes_in_flight() < 8 {
            let bytes = pattern(7000 + next, 2);
            let id = volume.submit_write(0, &bytes, next).expect("submit");
            pending.insert(id, bytes);
            next += 1;
        }
        volume.poll();
        take_acknowledged(&mut volume, &mut pending, &mut data);
    }
    write(&mut volume, &mut data, 10, 2);
    volume.commit().expect("the commit goes on without the device");
    // Typed, and named: the member's state, why, and its address.
    let status = volume.status();
    assert_eq!(status.state, VolumeState::Degraded);
    assert_ne!(status.devices[1].state, MemberState::Online);
    assert_eq!(status.devices[1].why.as_deref(), Some("the device went away"), "{:?}", status.devices[1]);
    assert_eq!(status.devices[1].pci, "slot-1", "the status names the device given up");
    assert!(harness.controllers[1].is_gone(), "the removal gave the controller up");
    // The new drive: its own controller, made now.
    let arrived = Harness::single(zns(64, 256));
    let mut new_device = Device::open(&arrived.controllers[0], 1, device_options()).expect("open the new device");
    new_device.set_identity("slot-2");
    volume.replace(1, new_device, false).expect("the new device takes place 1");
    let report = resilver_all(&mut volume, 1);
    assert_eq!(report.extents_copied, data.len() as u64);
    let status = volume.status();
    assert_eq!(status.state, VolumeState::Online);
    assert_eq!(status.devices[1].pci, "slot-2", "the status names the new device");
    check(&mut volume, &data, true);
    drop(volume);
    let devices = vec![device(&harness, 0), Device::open(&arrived.controllers[0], 1, device_options()).unwrap()];
    let mut volume = Volume::open(devices, &options).expect("opens on the new device");
    check(&mut volume, &data, true);
}

/// While place 1 is resilvering, place 0 holds the only copy of what place
/// 1 still lacks: giving place 0 up is refused with a typed error that
/// counts those extents and their bytes, and nothing changes: both places
/// stay in use, every extent reads back, and the resilver then finishes.
#[test]
fn giving_up_the_member_holding_the_only_copies_is_refused_during_a_resilver() {
    let (harness, options) = mirror();
    let options = VolumeOptions { max_extent_bytes: 16 << 10, ..options };
    let (mut volume, data) = replaced_mirror(&harness, &options, 40);
    let small_reads = ResilverOptions { max_request_bytes: Some(16 << 10), ..ResilverOptions::default() };
    let mut engine = Resilver::new(&volume, 1, &small_reads).unwrap();
    assert!(!engine.step(&mut volume, 64 << 10).unwrap(), "the resilver is under way");
    let lacking = volume.status().redundancy.extents_at_risk;
    assert!(lacking > 0);
    match volume.fail_device(0, "taken out by the operator") {
        Err(Error::LastCopy { device: 0, extents, bytes }) => {
            assert_eq!(extents, lacking);
            assert!(bytes > 0);
        }
        other => panic!("expected LastCopy, got {other:?}"),
    }
    let status = volume.status();
    assert_eq!(status.devices[0].state, MemberState::Online, "place 0 stays in use");
    assert_eq!(status.redundancy.extents_at_risk, lacking, "nothing changed");
    check(&mut volume, &data, false);
    while !engine.step(&mut volume, 64 << 10).unwrap() {}
    engine.finish(&mut volume).unwrap();
    assert_eq!(volume.status().state, VolumeState::Online);
    check(&mut volume, &data, true);
}

/// The verify pass after a resilver keeps the resilver's rate limit and
/// reports its progress as a phase of its own: with a ceiling of 8 MiB/s,
/// the pass over the new copy (about 2.5 MiB here) takes at least a fifth
/// of a second, where unlimited it takes a few milliseconds on the
/// simulator, and the last progress reported is the verify pass's, whole.
#[test]
fn the_verify_pass_after_a_resilver_keeps_its_rate_limit_and_reports_progress() {
    let (harness, options) = mirror();
    let (mut volume, _) = replaced_mirror(&harness, &options, 300);
    let limited = ResilverOptions { rate_limit_mib_s: Some(8.0), ..ResilverOptions::default() };
    let mut phases = Vec::new();
    let report = resilver(&mut volume, 1, &limited, &Control::new(), &mut |p| {
        phases.push((p.phase, p.bytes_done, p.bytes_total))
    })
    .expect("resilver");
    assert!(report.complete(), "{report:?}");
    let verify = report.verify.as_ref().expect("a verify pass");
    let verified_mib = verify.bytes_read as f64 / f64::from(1 << 20);
    assert!(verified_mib > 2.0, "{verified_mib} MiB verified");
    assert!(verify.duration_s >= verified_mib / 8.0 * 0.9, "{} s for {verified_mib} MiB at 8 MiB/s", verify.duration_s);
    let last = *phases.last().expect("progress reported");
    assert_eq!(last.0, ResilverPhase::Verify, "{phases:?}");
    assert_eq!(last.1, last.2, "the verify pass reported to its end: {phases:?}");
    assert!(phases.iter().any(|p| p.0 == ResilverPhase::Copy), "{phases:?}");
}

/// What a refused open must leave alone, per device: the zones (state and
/// write pointer), and no command that writes.
fn fingerprint(harness: &Harness) -> (Vec<String>, Vec<(Vec<u64>, u64)>) {
    (harness.sims.iter().map(|sim| format!("{:?}", sim.zones(1))).collect(), harness.writes())
}

fn open_alone(harness: &Harness, options: &VolumeOptions, controller: usize) -> Volume {
    let degraded = VolumeOptions { degraded: true, ..options.clone() };
    Volume::open(vec![device(harness, controller)], &degraded).expect("each side opens alone")
}

/// The cable fault: a mirror with `a` committed; device 1 opened alone
/// and written (`b`, `b2`); then device 0 alone (`c`). Returns what each
/// side holds: (place 0's, place 1's).
fn went_on_apart(harness: &mut Harness, options: &VolumeOptions) -> (Data, Data) {
    let mut volume = harness.format(options);
    let mut common = Data::new();
    write(&mut volume, &mut common, 1, 1);
    volume.commit().unwrap();
    drop(volume);
    harness.restart();
    let mut one = common.clone();
    let mut volume = open_alone(harness, options, 1);
    write(&mut volume, &mut one, 2, 2);
    volume.commit().unwrap();
    drop(volume);
    harness.restart();
    let mut zero = common;
    let mut volume = open_alone(harness, options, 0);
    write(&mut volume, &mut zero, 1, 3);
    volume.commit().unwrap();
    drop(volume);
    harness.restart();
    (zero, one)
}

/// Opening both sides of a mirror that went on apart, in `order`, is
/// refused by name, and writes nothing to either device.
fn refused(harness: &Harness, options: &VolumeOptions, order: [usize; 2], zero: &Data, one: &Data) {
    let before = fingerprint(harness);
    let devices = order.iter().map(|&c| device(harness, c)).collect();
    let sides = match Volume::open(devices, options) {
        Err(Error::Diverged { sides }) => sides,
        other => panic!("order {order:?}: expected Diverged, got {:?}", other.map(|v| v.status().state)),
    };
    assert_eq!(fingerprint(harness), before, "order {order:?}: a refused open changed a device");
    assert_eq!(sides.len(), 2);
    for side in &sides {
        let (holds, only) = if side.place == 0 { (zero, 1) } else { (one, 2) };
        assert_eq!(side.device, order.iter().position(|&c| c == side.place).unwrap(), "{side}");
        assert_eq!(side.extents, holds.len() as u64, "order {order:?}: {side}");
        assert_eq!(side.extents_only_here, only, "order {order:?}: {side}");
        assert!(side.last_seq > 0 && side.last_commit_unix_s > 0, "{side}");
    }
    assert_ne!(sides[0].session, sides[1].session);
}

#[test]
fn members_that_went_on_apart_are_refused_together_in_either_order_and_each_opens_alone() {
    let (mut harness, options) = mirror();
    let (zero, one) = went_on_apart(&mut harness, &options);
    for order in [[0, 1], [1, 0]] {
        refused(&harness, &options, order, &zero, &one);
        harness.restart();
    }
    for (controller, data) in [(0, &zero), (1, &one)] {
        let mut volume = open_alone(&harness, &options, controller);
        check(&mut volume, data, false);
        drop(volume);
        harness.restart();
    }
    // Opening a side alone changed nothing of the divergence.
    refused(&harness, &options, [1, 0], &zero, &one);
}

#[test]
fn resolving_keeps_the_chosen_side_and_rebuilds_the_other_from_it() {
    for keep in [0, 1] {
        let (mut harness, options) = mirror();
        let (zero, one) = went_on_apart(&mut harness, &options);
        let kept = if keep == 0 { &zero } else { &one };
        let devices = vec![device(&harness, 0), device(&harness, 1)];
        let mut volume = Volume::resolve(devices, keep, &options).expect("resolve");
        assert_eq!(volume.status().state, VolumeState::Resilvering);
        resilver_all(&mut volume, 1 - keep);
        assert_eq!(volume.status().state, VolumeState::Online);
        check(&mut volume, kept, true);
        drop(volume);
        harness.restart();
        let mut volume = harness.open(&options).expect("one history again");
        assert_eq!(volume.status().state, VolumeState::Online);
        check(&mut volume, kept, true);
    }
}

#[test]
fn a_pulled_member_opened_alone_and_written_is_refused_at_the_reunion() {
    let (mut harness, options) = mirror();
    let mut volume = harness.format(&options);
    let mut zero = Data::new();
    write(&mut volume, &mut zero, 10, 1);
    volume.commit().unwrap();
    harness.sims[1].inject(Fault::SurpriseRemoval);
    let mut one = zero.clone();
    write(&mut volume, &mut zero, 5, 2);
    volume.commit().expect("the commit goes on without the device");
    assert_eq!(volume.status().state, VolumeState::Degraded);
    drop(volume);
    // Re-seated (its volatile cache lost), then opened alone elsewhere.
    harness.sims[1].power_cut();
    harness.restart();
    let mut volume = open_alone(&harness, &options, 1);
    check(&mut volume, &one, false);
    write(&mut volume, &mut one, 3, 3);
    volume.commit().unwrap();
    drop(volume);
    harness.restart();
    let before = fingerprint(&harness);
    match harness.open(&options) {
        Err(Error::Diverged { sides }) => {
            let only: Vec<u64> = sides.iter().map(|s| s.extents_only_here).collect();
            assert_eq!(only, vec![5, 3], "{sides:?}");
        }
        other => panic!("expected Diverged, got {:?}", other.map(|v| v.status().state)),
    }
    assert_eq!(fingerprint(&harness), before);
}

/// The device holding the only copies of some extents really goes while
/// the other member is resilvering: the volume goes on with the other, and
/// names the extents lost (status, reads, a scrub) rather than losing them
/// silently; a replace in its place and a resilver never panic on them,
/// write every copy that has a source, and report the lost ones; the
/// metadata keeps them lost across a reopen.
#[test]
fn a_sole_holder_that_really_goes_leaves_its_extents_named_lost_and_replace_goes_on() {
    let harness = Harness::new(vec![zns(64, 256), zns(64, 256), zns(64, 256), zns(64, 256)], vec![(0, 1), (1, 1)]);
    let options = VolumeOptions { profile: Profile::Mirror, max_extent_bytes: 16 << 10, ..volume_options() };
    let (mut volume, data) = replaced_mirror(&harness, &options, 40);
    let small_reads = ResilverOptions { max_request_bytes: Some(16 << 10), ..ResilverOptions::default() };
    let mut engine = Resilver::new(&volume, 1, &small_reads).unwrap();
    assert!(!engine.step(&mut volume, 64 << 10).unwrap(), "the resilver is under way");
    drop(engine);
    volume.commit().unwrap();
    let lacking = volume.status().redundancy.extents_at_risk;
    assert!(lacking > 0 && lacking < 40);
    harness.sims[0].inject(Fault::SurpriseRemoval);
    // The next read of device 0 finds it gone: it is given up.
    let (&first, bytes) = data.iter().next().unwrap();
    let _ = volume.read(first, &mut vec![0u8; bytes.len()]);
    volume.commit().expect("the commit goes on without the device");
    let status = volume.status();
    assert_eq!(status.state, VolumeState::Degraded);
    assert_eq!(status.redundancy.extents_lost, lacking, "{:?}", status.redundancy);
    let lost: Vec<u64> = volume.lost_extents().iter().map(|&(id, _)| id).collect();
    assert_eq!(lost.len() as u64, lacking);
    for (&id, bytes) in &data {
        let mut back = vec![0u8; bytes.len()];
        match volume.read(id, &mut back) {
            Ok(_) => assert!(!lost.contains(&id) && &back == bytes, "extent {id}"),
            Err(Error::Uncorrectable { extent, .. }) => assert!(extent == id && lost.contains(&id)),
            Err(e) => panic!("extent {id}: {e}"),
        }
    }
    // A new device in place 0: no panic, and the lost stay lost.
    volume.replace(0, device(&harness, 3), false).expect("replace");
    assert_eq!(volume.status().redundancy.extents_lost, lacking);
    let report = resilver(&mut volume, 0, &ResilverOptions::default(), &Control::new(), &mut |_| {}).unwrap();
    assert!(!report.complete(), "{report:?}");
    assert_eq!(volume.status().state, VolumeState::Damaged);
    let scrubbed =
        nvme_scrub::scrub(&mut volume, &Default::default(), &Control::new(), None, &mut |_| {}, &mut |_| {}).unwrap();
    let named: Vec<u64> = scrubbed.uncorrectable.iter().map(|u| u.extent).collect();
    assert_eq!(named, lost, "the scrub names every lost extent");
    let devices = volume.close().unwrap();
    drop(devices);
    // Place 1 is controller 2 since replaced_mirror; place 0 controller 3.
    let devices = vec![device(&harness, 3), device(&harness, 2)];
    let mut volume = Volume::open(devices, &options).expect("reopens with its lost extents");
    assert_eq!(volume.lost_extents().iter().map(|&(id, _)| id).collect::<Vec<_>>(), lost);
    let kept: Data = data.into_iter().filter(|(id, _)| !lost.contains(id)).collect();
    for id in &lost {
        volume.free(*id).expect("a lost extent can be freed");
    }
    volume.commit().unwrap();
    assert_eq!(volume.status().state, VolumeState::Online);
    check(&mut volume, &kept, true);
}

/// A device given up and replaced is no longer the member of its place:
/// given back in its place's stead, it is refused by name (its label still
/// names the place) and nothing is written; opened degraded, it is left
/// out; the place's real device still rejoins, and every copy reads back.
#[test]
fn the_old_device_of_a_replaced_place_is_refused_not_taken_for_the_member() {
    let (mut harness, options) = mirror();
    let (mut volume, data) = replaced_mirror(&harness, &options, 20);
    resilver_all(&mut volume, 1);
    drop(volume.close().unwrap());
    harness.restart();
    let old_pair = |harness: &Harness| vec![device(harness, 0), device(harness, 1)];
    let before = fingerprint(&harness);
    match Volume::open(old_pair(&harness), &options) {
        Err(Error::Replaced { device: 1, place: 1 }) => {}
        other => panic!("expected Replaced, got {:?}", other.map(|v| v.status().state)),
    }
    assert_eq!(fingerprint(&harness), before, "a refused open wrote");
    harness.restart();
    let degraded = VolumeOptions { degraded: true, ..options.clone() };
    let mut volume = Volume::open(old_pair(&harness), &degraded).expect("degraded, without the old device");
    assert_eq!(volume.status().devices[1].state, MemberState::Failed);
    check(&mut volume, &data, false);
    drop(volume.close().unwrap());
    harness.restart();
    let mut volume = Volume::open(vec![device(&harness, 2), device(&harness, 0)], &options).expect("the members");
    resilver_all(&mut volume, 1);
    check(&mut volume, &data, true);
}

/// A running volume does not take back a member that went on alone: the
/// device pulled, then opened alone elsewhere and written, is refused by
/// `rejoin` (its copies may have moved or been overwritten in its own
/// history), and the volume goes on as it was.
#[test]
fn a_member_that_went_on_alone_is_not_taken_back_by_a_running_volume() {
    let (mut harness, options) = mirror();
    let mut volume = harness.format(&options);
    let mut data = Data::new();
    write(&mut volume, &mut data, 20, 1);
    volume.commit().unwrap();
    harness.sims[1].inject(Fault::SurpriseRemoval);
    write(&mut volume, &mut data, 5, 2);
    volume.commit().unwrap();
    assert_eq!(volume.status().state, VolumeState::Degraded);
    // Re-seated, opened alone by another process, and written there.
    harness.sims[1].power_cut();
    harness.controllers[1] = nvme_driver::Controller::init(harness.sims[1].clone(), support::controller_options())
        .expect("bring-up after re-seating");
    let mut other = open_alone(&harness, &options, 1);
    let mut elsewhere = Data::new();
    write(&mut other, &mut elsewhere, 4, 3);
    other.commit().unwrap();
    drop(other.close().unwrap());
    match volume.rejoin(device(&harness, 1)) {
        Err(Error::Member { device: 1, why }) => assert!(why.contains("went on alone"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(volume.status().state, VolumeState::Degraded);
    check(&mut volume, &data, false);
}
