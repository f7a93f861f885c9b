//! Zone checksum areas on the simulator ([`zoned_allocator::area`]): a
//! volume over namespaces without per-block metadata keeps its checksums
//! after each zone's data, so the map holds only the zones being filled;
//! a damaged area fails its copy, which the other repairs. (Every other
//! allocator and scrub suite runs on areas too, `ZONED_TEST_CHECKSUMS=area`.)

use nvme_testkit::harness as support;

use nvme_driver::sim::SimConfig;
use nvme_testkit::data::pattern;
use support::{conventional, volume_options, zns, Harness, Model};
use zoned_allocator::{ChecksumStore, Location, Profile, Volume, VolumeOptions};

/// The namespaces of `config` without per-block metadata, whatever the
/// suite's setting.
fn plain(mut config: SimConfig) -> SimConfig {
    for namespace in &mut config.namespaces {
        namespace.metadata_bytes = 0;
    }
    config
}

fn areas(options: VolumeOptions) -> VolumeOptions {
    VolumeOptions { checksums: ChecksumStore::Area, ..options }
}

/// `count` extents of 8 blocks.
fn write_some(volume: &mut Volume, model: &mut Model, count: u64, seed: u64) {
    for i in 0..count {
        let id = volume.write(0, &pattern(seed + i, 8), seed + i).unwrap();
        model.insert(id, (seed + i, 8));
    }
}

fn check(volume: &mut Volume, model: &Model) {
    for (&id, &(seed, blocks)) in model {
        let mut back = vec![0u8; blocks * 4096];
        volume.read(id, &mut back).unwrap_or_else(|e| panic!("extent {id}: {e}"));
        assert_eq!(back, pattern(seed, blocks), "extent {id}");
    }
}

/// Zones of lane `lane` whose areas are written.
fn sealed_zones(volume: &Volume, lane: usize) -> Vec<u32> {
    (0..volume.zone_table(lane).zone_count()).filter(|&zone| volume.sealed_blocks(lane, zone) > 0).collect()
}

#[test]
fn checksums_leave_memory_once_their_zone_is_sealed_and_are_read_from_its_area() {
    // Zones of 64 blocks: 63 of data, so 7 extents of 8 blocks, then the
    // zone is retired and its area (one block) written after the 56.
    let soft = VolumeOptions { software_zone_bytes: Some(256 << 10), ..volume_options() };
    for (config, options) in [(zns(32, 256), volume_options()), (conventional(8), soft)] {
        let mut harness = Harness::single(plain(config));
        let options = areas(options);
        let mut volume = harness.format(&options);
        assert!(volume.checksum_areas() && volume.block_tags().is_some());
        let mut model = Model::new();
        write_some(&mut volume, &mut model, 40, 1);
        volume.commit().unwrap();
        volume.check_invariants();
        let sealed = sealed_zones(&volume, 0);
        assert_eq!(sealed.len(), 5, "40 extents fill five zones of 7 and begin a sixth: {sealed:?}");
        assert!(sealed.iter().all(|&zone| volume.sealed_blocks(0, zone) == 56));
        // Only the open zone's extents keep their checksums in memory.
        assert_eq!(volume.mapped_extents(), 5, "the sixth zone's 5 extents");
        check(&mut volume, &model);
        // Across a restart: the seals come back from the journal, the
        // open zone's checksums too, and it is sealed at once (reopened
        // volumes do not append to old zones).
        drop(volume);
        harness.restart();
        let mut volume = harness.open(&options).unwrap();
        volume.check_invariants();
        assert_eq!(sealed_zones(&volume, 0).len(), 6, "the zone left open is sealed at open");
        check(&mut volume, &model);
        volume.commit().unwrap();
        assert_eq!(volume.mapped_extents(), 0, "every zone is sealed once a commit made it durable");
        // And after a checkpoint, which restates every seal.
        volume.checkpoint_now().unwrap();
        write_some(&mut volume, &mut model, 3, 100);
        volume.close().unwrap();
        harness.restart();
        let mut volume = harness.open(&options).unwrap();
        volume.check_invariants();
        check(&mut volume, &model);
    }
}

#[test]
fn a_damaged_area_fails_its_copy_and_the_other_copy_repairs_the_read() {
    let options = areas(VolumeOptions { profile: Profile::Mirror, ..volume_options() });
    let harness = Harness::new(vec![plain(zns(32, 256)), plain(zns(32, 256))], vec![(0, 1), (1, 1)]);
    let mut volume = harness.format(&options);
    let mut model = Model::new();
    write_some(&mut volume, &mut model, 20, 7);
    volume.commit().unwrap();
    let zone = sealed_zones(&volume, 0)[0];
    let victims: Vec<u64> =
        volume.extent_ids().filter(|&id| volume.location(id, 0).is_some_and(|l| l.zone == zone)).collect();
    assert_eq!(victims.len(), 7);
    // A bit of the area's block flipped on copy 0: the data is intact, but
    // the tags of the zone's blocks no longer vouch for it.
    let area = volume.lba(0, Location { zone, offset: volume.sealed_blocks(0, zone) });
    harness.sims[0].corrupt_at_rest(1, area, 3);
    for &id in &victims {
        let mut back = vec![0u8; 8 * 4096];
        let outcome = volume.read(id, &mut back).unwrap();
        assert_eq!(back, pattern(model[&id].0, 8), "extent {id}");
        if !outcome.repaired.is_empty() {
            assert!(volume.bad_blocks().iter().all(|b| b.lane == 0 && !b.unreadable));
        }
    }
    // Bit 3 of the first byte: the data checksum of the zone's first block.
    assert_eq!(volume.bad_blocks().len(), 1, "{:?}", volume.bad_blocks());
    // The copy is rewritten from the good one elsewhere, its checksums in
    // the map until that zone is sealed.
    let bad = volume.bad_blocks()[0];
    let good = {
        let mut data = vec![0u8; 8 * 4096];
        volume.read(bad.extent, &mut data).unwrap();
        data
    };
    let to = volume.rewrite_copy(bad.extent, 0, &good).unwrap();
    assert_ne!(to.zone, zone);
    volume.commit().unwrap();
    volume.check_invariants();
    let mut back = vec![0u8; 8 * 4096];
    assert!(volume.read_copy_checked(bad.extent, 0, &mut back).unwrap().is_empty(), "the rewritten copy verifies");
    check(&mut volume, &model);
}

#[test]
fn a_volume_with_areas_refuses_nothing_it_can_hold_and_its_format_is_recorded() {
    // Areas on a namespace with per-block metadata too, when asked: the
    // format says so, and open needs no option to know.
    let mut config = zns(32, 256);
    config.namespaces[0].metadata_bytes = 8;
    let mut harness = Harness::single(config);
    let options = areas(volume_options());
    let mut volume = harness.format(&options);
    let mut model = Model::new();
    write_some(&mut volume, &mut model, 10, 3);
    volume.close().unwrap();
    harness.restart();
    let mut volume = harness.open(&volume_options()).unwrap();
    assert!(volume.checksum_areas());
    check(&mut volume, &model);
    volume.check_invariants();
}

#[test]
fn a_seal_a_power_cut_kept_from_the_journal_is_written_again_at_open() {
    let mut harness = Harness::single(plain(zns(32, 256)));
    let options = areas(volume_options());
    let mut volume = harness.format(&options);
    let mut model = Model::new();
    // Seven extents fill the first zone's 63 data blocks as far as 8-block
    // extents go; committed, unsealed: their checksums are in the journal.
    write_some(&mut volume, &mut model, 7, 1);
    volume.commit().unwrap();
    assert!(sealed_zones(&volume, 0).is_empty());
    // The eighth retires the zone, which is sealed once idle; the power
    // goes before a commit journals the seal.
    let id = volume.write(0, &pattern(99, 8), 99).unwrap();
    volume.wait_idle().unwrap();
    let zone = volume.location(model.keys().copied().next().unwrap(), 0).unwrap().zone;
    assert_eq!(volume.sealed_blocks(0, zone), 56);
    assert_ne!(volume.location(id, 0).unwrap().zone, zone);
    drop(volume);
    harness.power_cut();
    let mut volume = harness.open(&options).unwrap();
    volume.check_invariants();
    // Open found the zone unsealed and sealed it again, after whatever the
    // device kept of the first area.
    let sealed = volume.sealed_blocks(0, zone);
    assert!((56..=57).contains(&sealed), "sealed at {sealed}");
    volume.commit().unwrap();
    assert_eq!(volume.mapped_extents(), 0);
    check(&mut volume, &model);
}

#[test]
fn copies_moved_by_reclaim_bring_their_checksums_back_to_the_map_and_the_journal() {
    let mut harness = Harness::single(plain(zns(32, 256)));
    let options = areas(VolumeOptions { reclaim_max_valid_ratio: 0.5, ..volume_options() });
    let mut volume = harness.format(&options);
    let mut model = Model::new();
    write_some(&mut volume, &mut model, 22, 1);
    volume.commit().unwrap();
    assert_eq!(sealed_zones(&volume, 0).len(), 3);
    // A checkpoint, so that open replays no addition of these extents:
    // only what the journal says after it.
    volume.checkpoint_now().unwrap();
    // Five of the first zone's seven freed: two live copies to move, whose
    // checksums are only in the zone's area.
    let first = volume.location(*model.keys().next().unwrap(), 0).unwrap().zone;
    let in_first: Vec<u64> =
        model.keys().copied().filter(|&id| volume.location(id, 0).is_some_and(|l| l.zone == first)).collect();
    for &id in &in_first[..5] {
        volume.free(id).unwrap();
        model.remove(&id);
    }
    volume.commit().unwrap();
    assert_eq!(volume.mapped_extents(), 1, "the open zone's one extent");
    loop {
        match volume.reclaim_step(1 << 20).unwrap() {
            zoned_allocator::ReclaimProgress::Reclaimed { zone, .. } if zone == first => break,
            zoned_allocator::ReclaimProgress::Idle => panic!("the first zone was not reclaimed"),
            _ => {}
        }
    }
    assert_eq!(volume.mapped_extents(), 3, "the two moved copies are back in the map");
    volume.check_invariants();
    // Across a power cut: the journal brought them back, or open would
    // find copies with no checksums outside any area.
    drop(volume);
    harness.power_cut();
    let mut volume = harness.open(&options).unwrap();
    volume.check_invariants();
    check(&mut volume, &model);
}

#[test]
fn an_area_that_cannot_be_written_leaves_its_zone_unsealed_and_loses_nothing() {
    let mut harness = Harness::single(plain(zns(32, 256)));
    let options = areas(volume_options());
    let mut volume = harness.format(&options);
    let mut model = Model::new();
    write_some(&mut volume, &mut model, 1, 1);
    let zone = volume.location(*model.keys().next().unwrap(), 0).unwrap().zone;
    // The blocks the zone's area would take, after its 56 of data.
    let area = volume.lba(0, Location { zone, offset: 56 });
    harness.sims[0].inject(nvme_driver::sim::Fault::WriteFault { nsid: 1, slba: area, blocks: 64 });
    write_some(&mut volume, &mut model, 7, 2);
    volume.commit().unwrap();
    volume.check_invariants();
    assert_eq!(volume.sealed_blocks(0, zone), 0, "the area's write failed");
    assert!(volume.mapped_extents() >= 7, "the zone's extents keep their checksums in the map");
    let stats = volume.stats();
    assert_eq!((stats.area_writes_failed, stats.unsealed_zones), (1, 1), "the failed seal is counted");
    check(&mut volume, &model);
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    volume.check_invariants();
    assert_eq!(volume.sealed_blocks(0, zone), 0);
    // The zone was finished after the failed write: no area can follow
    // its data now, and it stays counted until reclaim empties it.
    let stats = volume.stats();
    assert_eq!((stats.area_writes_failed, stats.unsealed_zones), (0, 1));
    check(&mut volume, &model);
}

#[test]
fn an_unreadable_area_fails_its_copy_with_a_typed_error_and_the_mirror_serves_the_read() {
    for profile in [Profile::Mirror, Profile::Single] {
        let copies = if profile == Profile::Mirror { 2 } else { 1 };
        let configs = (0..copies).map(|_| plain(zns(32, 256))).collect();
        let harness = Harness::new(configs, (0..copies).map(|c| (c, 1)).collect());
        let options = areas(VolumeOptions { profile, ..volume_options() });
        let mut volume = harness.format(&options);
        let mut model = Model::new();
        write_some(&mut volume, &mut model, 8, 5);
        volume.commit().unwrap();
        let id = *model.keys().next().unwrap();
        let zone = volume.location(id, 0).unwrap().zone;
        assert!(volume.checksums(id).is_none(), "its checksums are in the area only");
        let area = volume.lba(0, Location { zone, offset: volume.sealed_blocks(0, zone) });
        harness.sims[0].inject(nvme_driver::sim::Fault::UnrecoveredRead { nsid: 1, slba: area, blocks: 8 });
        let mut back = vec![0u8; 8 * 4096];
        match profile {
            Profile::Mirror => {
                volume.read(id, &mut back).unwrap();
                assert_eq!(back, pattern(model[&id].0, 8));
                assert!(volume.bad_blocks().iter().all(|b| b.extent == id && b.lane == 0 && b.unreadable));
                assert_eq!(volume.bad_blocks().len(), 8, "every block of the copy whose tags could not be read");
            }
            _ => match volume.read(id, &mut back) {
                Err(zoned_allocator::Error::Uncorrectable { extent, blocks, .. }) => {
                    assert_eq!((extent, blocks.len()), (id, 8));
                }
                other => panic!("expected Uncorrectable naming extent {id}, got {other:?}"),
            },
        }
        volume.check_invariants();
    }
}

#[test]
fn a_zone_is_sealed_only_once_every_write_to_it_has_finished_on_every_copy() {
    // A mirror whose second device completes 20 ticks late: the first
    // copy of each write lands well before the second, and the zones it
    // fills retire with writes still unfinished on the other device. Each
    // area must still hold the tags of every extent in its zone, so every
    // copy reads clean on its own.
    for profile in [Profile::Mirror, Profile::Dup] {
        let slow = plain(zns(32, 256)).with_completion_delay(20, 20);
        let (configs, layout) = match profile {
            Profile::Mirror => (vec![plain(zns(32, 256)), slow], vec![(0, 1), (1, 1)]),
            _ => (vec![plain(zns(32, 256)).with_completion_delay(0, 20)], vec![(0, 1)]),
        };
        let harness = Harness::new(configs, layout);
        let options = areas(VolumeOptions { profile, ..volume_options() });
        let mut volume = harness.format(&options);
        let mut model = Model::new();
        for i in 0..30u64 {
            let id = volume.submit_write(0, &pattern(500 + i, 8), 500 + i).unwrap();
            model.insert(id, (500 + i, 8));
        }
        volume.wait_idle().unwrap();
        while let Some(done) = volume.next_done() {
            done.result.unwrap_or_else(|e| panic!("{profile:?}: extent {}: {e}", done.id));
        }
        volume.commit().unwrap();
        volume.check_invariants();
        assert!(!sealed_zones(&volume, 0).is_empty() && !sealed_zones(&volume, 1).is_empty(), "{profile:?}");
        for (&id, &(seed, blocks)) in &model {
            for lane in 0..2 {
                let mut back = vec![0u8; blocks * 4096];
                let bad = volume.read_copy_checked(id, lane, &mut back).unwrap();
                assert!(bad.is_empty(), "{profile:?}: extent {id} copy {lane}: blocks {bad:?} fail their area's tags");
                assert_eq!(back, pattern(seed, blocks));
            }
        }
    }
}

#[test]
fn areas_a_member_wrote_before_it_was_given_up_are_not_taken_as_durable_when_it_rejoins() {
    // A mirror fills a zone on both devices and seals it; the first
    // device goes away before any commit flushed that area, the volume
    // commits degraded, and the power fails. The device comes back
    // without the area (its cache lost), so the journal must not call the
    // zone sealed there: its extents keep their checksums, and each copy
    // still reads clean on its own once the member rejoins.
    let forget = nvme_driver::sim::FaultConfig { power_cut_keep_probability: 0.0, ..Default::default() };
    for zoned in [true, false] {
        let config = || {
            let config = if zoned { zns(32, 256) } else { conventional(8) };
            plain(config).with_faults(forget.clone())
        };
        let mut harness = Harness::new(vec![config(), config()], vec![(0, 1), (1, 1)]);
        let soft = VolumeOptions { software_zone_bytes: Some(256 << 10), ..volume_options() };
        let options = areas(VolumeOptions { profile: Profile::Mirror, ..soft });
        let mut volume = harness.format(&options);
        let mut model = Model::new();
        write_some(&mut volume, &mut model, 6, 700);
        volume.commit().unwrap();
        let zone = volume.location(*model.keys().next().unwrap(), 0).unwrap().zone;
        // The seventh fills the zone's 56 blocks, the eighth goes elsewhere
        // and the zone is sealed on both devices, uncommitted.
        write_some(&mut volume, &mut model, 2, 800);
        assert!(volume.sealed_blocks(0, zone) > 0 && volume.sealed_blocks(1, zone) > 0, "zoned {zoned}");
        harness.sims[0].inject(nvme_driver::sim::Fault::SurpriseRemoval);
        write_some(&mut volume, &mut model, 1, 900);
        volume.commit().unwrap();
        assert_eq!(volume.sealed_blocks(0, zone), 0, "zoned {zoned}: the gone device's seal is not committed");
        drop(volume.abandon());
        harness.sims[0].clear_faults();
        harness.power_cut();
        let mut volume = harness.open(&options).unwrap();
        volume.check_invariants();
        for (&id, &(seed, blocks)) in &model {
            for lane in 0..2 {
                if volume.location(id, lane).is_none_or(|at| at.is_missing()) {
                    continue;
                }
                let mut back = vec![0u8; blocks * 4096];
                let bad = volume.read_copy_checked(id, lane, &mut back).unwrap();
                assert!(bad.is_empty(), "zoned {zoned}: extent {id} copy {lane}: blocks {bad:?} fail their checks");
                assert_eq!(back, pattern(seed, blocks), "zoned {zoned}: extent {id} copy {lane}");
            }
        }
        check(&mut volume, &model);
    }
}
