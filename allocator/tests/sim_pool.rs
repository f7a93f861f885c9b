//! Pools: one volume over N namespaces, ZNS and conventional mixed, each
//! extent's copies on distinct devices chosen per extent
//! (`docs/pool.md`). Every committed extent reads back with its own bytes,
//! from every copy it has, across reopening with the devices given in any
//! order; the copies spread over every device; the capacity reported is
//! what the pool takes.

use nvme_testkit::harness as support;

use nvme_driver::sim::SimConfig;
use nvme_testkit::data::pattern;
use support::{conventional, volume_options, zns, Harness, Model};
use zoned_allocator::{Error, Full, Profile, Volume, VolumeOptions, BLOCK_SIZE};

/// One controller per config, the volume on each one's namespace 1.
fn pool(configs: Vec<SimConfig>) -> Harness {
    let layout = (0..configs.len()).map(|c| (c, 1)).collect();
    Harness::new(configs, layout)
}

/// Two ZNS namespaces of 64 zones of 1 MiB and two conventional ones of
/// 64 MiB, in that order unless `conventional_first`.
fn mixed_four(conventional_first: bool) -> Harness {
    let (a, b) = (zns(64, 1024), conventional(64));
    if conventional_first {
        pool(vec![b.clone(), a.clone(), b, a])
    } else {
        pool(vec![a.clone(), a, b.clone(), b])
    }
}

fn options(profile: Profile) -> VolumeOptions {
    VolumeOptions { profile, software_zone_bytes: Some(1 << 20), ..volume_options() }
}

/// Writes `count` extents of 1 to 16 blocks, committing every 16; the
/// model of what was written.
fn write(volume: &mut Volume, model: &mut Model, count: u64, first_seed: u64) {
    for seed in first_seed..first_seed + count {
        let blocks = 1 + (seed % 16) as usize;
        let id = volume.write(0, &pattern(seed, blocks), seed).unwrap_or_else(|e| panic!("write {seed}: {e}"));
        model.insert(id, (seed, blocks));
        if seed % 16 == 15 {
            volume.commit().expect("commit");
        }
    }
    volume.commit().expect("commit");
}

/// Every extent of `model` reads back, and so does each copy it has: as
/// many as the profile asks, in distinct lanes. Returns the blocks per
/// lane.
fn check(volume: &mut Volume, model: &Model) -> Vec<u64> {
    volume.check_invariants();
    assert_eq!(volume.extent_ids().count(), model.len(), "extents");
    let mut per_lane = vec![0u64; volume.lanes()];
    for (&id, &(seed, blocks)) in model {
        let mut back = vec![0u8; blocks * BLOCK_SIZE];
        volume.read(id, &mut back).unwrap_or_else(|e| panic!("extent {id}: {e}"));
        assert!(back == pattern(seed, blocks), "extent {id} reads back wrong");
        let lanes: Vec<usize> =
            (0..volume.lanes()).filter(|&l| volume.location(id, l).is_some_and(|at| !at.is_missing())).collect();
        assert_eq!(lanes.len(), volume.copies(), "extent {id}'s copies: {lanes:?}");
        for lane in lanes {
            back.fill(0);
            let bad = volume.read_copy_checked(id, lane, &mut back).unwrap_or_else(|e| panic!("{id} in {lane}: {e}"));
            assert!(bad.is_empty() && back == pattern(seed, blocks), "extent {id}'s copy in lane {lane}");
            per_lane[lane] += blocks as u64;
        }
    }
    per_lane
}

#[test]
fn a_pool_of_four_spreads_its_copies_and_reopens_from_devices_in_any_order() {
    for (profile, conventional_first) in [(Profile::Single, false), (Profile::Mirror, true), (Profile::Mirror, false)] {
        let context = format!("{profile:?}, conventional first: {conventional_first}");
        let mut harness = mixed_four(conventional_first);
        let options = options(profile);
        let mut volume = harness.format(&options);
        assert_eq!((volume.lanes(), volume.copies()), (4, profile.copies()), "{context}");
        let mut model = Model::new();
        let free = |volume: &Volume| (0..4).map(|l| volume.zone_table(l).free_blocks()).collect::<Vec<u64>>();
        let before = free(&volume);
        write(&mut volume, &mut model, 1200, 1);
        let per_lane = check(&mut volume, &model);
        // The roomiest lanes take the copies until all have the same room
        // (the first two hold the metadata): then all take turns.
        let after = free(&volume);
        let spread = after.iter().max().unwrap() - after.iter().min().unwrap();
        assert!(spread <= 2 * 16, "{context}: room {before:?}, then {after:?}, after writing {per_lane:?}");
        assert!(per_lane.iter().all(|&blocks| blocks > 0), "{context}: {per_lane:?}");
        drop(volume);
        harness.restart();
        // Given in reverse: each is placed by its label.
        let mut devices = harness.devices();
        devices.reverse();
        let mut volume = Volume::open(devices, &options).unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
        assert_eq!(volume.recovery().device_order, vec![3, 2, 1, 0], "{context}");
        assert_eq!(check(&mut volume, &model), per_lane, "{context}: the copies stayed where they were");
        // And it takes writes again, on every device.
        write(&mut volume, &mut model, 100, 1000);
        check(&mut volume, &model);
    }
}

#[test]
fn a_pool_takes_exactly_the_capacity_it_reports() {
    // Equal devices, and one as large as the other two together: with two
    // copies, the large one takes one of every extent and no more.
    let cases = [
        (Profile::Single, vec![zns(48, 1024), zns(32, 1024), conventional(40)]),
        (Profile::Mirror, vec![zns(32, 1024), zns(32, 1024), zns(32, 1024)]),
        (Profile::Mirror, vec![zns(24, 1024), zns(24, 1024), zns(48, 1024)]),
        (Profile::Mirror, vec![conventional(24), zns(24, 1024), conventional(40), zns(24, 1024)]),
    ];
    for (profile, configs) in cases {
        let context = format!("{profile:?} over {} devices", configs.len());
        let harness = pool(configs);
        let mut volume = harness.format(&options(profile));
        let capacity = volume.capacity_bytes();
        let unit = volume.data_unit_bytes();
        assert_eq!(volume.room(0, unit).unwrap(), capacity, "{context}: room at the data unit");
        let mut written = 0u64;
        let error = loop {
            match volume.write(0, &pattern(written, unit / BLOCK_SIZE), written) {
                Ok(_) => written += unit as u64,
                Err(error) => break error,
            }
        };
        assert!(matches!(error, Error::NoSpace(Full::Data { .. })), "{context}: {error:?}");
        assert_eq!(written, capacity, "{context}: filled {written} of {capacity} reported");
        assert_eq!(volume.room(0, unit).unwrap(), 0, "{context}");
        volume.commit().expect("commit");
        volume.check_invariants();
    }
}

#[test]
fn the_number_of_devices_is_checked_at_format() {
    let harness = pool(vec![zns(16, 1024); 3]);
    let refused = |profile, devices: Vec<zoned_allocator::Device>| match Volume::format(devices, &options(profile)) {
        Err(Error::InvalidConfig(why)) => why,
        other => panic!("{profile:?}: {other:?}"),
    };
    let why = refused(Profile::Dup, harness.devices());
    assert!(why.contains("spans 1 to 1"), "{why}");
    let why = refused(Profile::Mirror, harness.devices().into_iter().take(1).collect());
    assert!(why.contains("spans 2 to 16"), "{why}");
}
