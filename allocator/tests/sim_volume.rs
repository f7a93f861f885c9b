//! The volume on the simulator: each profile and kind of namespace, zone
//! limits, checksums and repair, free and reclaim, reopening.

use nvme_testkit::harness as support;

use nvme_driver::sim::{Fault, NamespaceConfig, SimConfig};
use nvme_testkit::data::pattern;
use support::{conventional, volume_options, zns, Harness};
use zoned_allocator::{Error, Profile, ReclaimProgress, Volume, VolumeOptions, WriteMode, BLOCK_SIZE};

fn write_read_reopen(harness: &mut Harness, options: &VolumeOptions) {
    let mut volume = harness.format(options);
    let mut written = Vec::new();
    for i in 0..40u64 {
        let blocks = 1 + (i as usize * 7) % 32;
        let data = pattern(i, blocks);
        let id = volume.write((i % u64::from(options.streams)) as u8, &data, i).unwrap();
        written.push((id, data));
    }
    volume.commit().unwrap();
    volume.check_invariants();
    for (id, data) in &written {
        let mut back = vec![0u8; data.len()];
        volume.read(*id, &mut back).unwrap();
        assert_eq!(&back, data, "extent {id}");
    }
    // Uncommitted writes vanish with the process.
    let lost = volume.write(0, &pattern(999, 4), 999).unwrap();
    drop(volume);
    harness.restart();
    let mut volume = harness.open(options).unwrap();
    volume.check_invariants();
    assert!(volume.extent(lost).is_none(), "an uncommitted extent survived");
    assert_eq!(volume.stats().extents, written.len() as u64);
    for (id, data) in &written {
        let mut back = vec![0u8; data.len()];
        volume.read(*id, &mut back).unwrap();
        assert_eq!(&back, data, "extent {id} after reopening");
    }
    // The reopened volume keeps working.
    let more = pattern(1000, 8);
    let id = volume.write(0, &more, 1).unwrap();
    volume.commit().unwrap();
    drop(volume);
    harness.restart();
    let mut volume = harness.open(options).unwrap();
    let mut back = vec![0u8; more.len()];
    volume.read(id, &mut back).unwrap();
    assert_eq!(back, more);
}

#[test]
fn zns_single() {
    write_read_reopen(&mut Harness::single(zns(64, 1024)), &volume_options());
}

#[test]
fn zns_ordered_writes() {
    let options = VolumeOptions { write_mode: WriteMode::Ordered, ..volume_options() };
    write_read_reopen(&mut Harness::single(zns(64, 1024)), &options);
}

#[test]
fn conventional_single_with_streams() {
    let options = VolumeOptions { streams: 3, software_zone_bytes: Some(1 << 20), ..volume_options() };
    write_read_reopen(&mut Harness::single(conventional(64)), &options);
}

#[test]
fn zns_dup() {
    let options = VolumeOptions { profile: Profile::Dup, ..volume_options() };
    write_read_reopen(&mut Harness::single(zns(64, 1024)), &options);
}

#[test]
fn mirror_across_two_controllers_zns_and_conventional() {
    let options = VolumeOptions { profile: Profile::Mirror, software_zone_bytes: Some(1 << 20), ..volume_options() };
    let mut harness = Harness::new(vec![zns(64, 1024), conventional(64)], vec![(0, 1), (1, 1)]);
    write_read_reopen(&mut harness, &options);
}

#[test]
fn zone_capacity_below_size_and_4k_lbas() {
    // 4 KiB LBAs, zones of 1 MiB with 768 KiB usable.
    let config = SimConfig::zoned(64 * 256, 4096, 256, 192);
    let mut harness = Harness::single(config);
    write_read_reopen(&mut harness, &volume_options());
    let volume = harness.open(&volume_options()).unwrap();
    let table = volume.zone_table(0);
    for zone in 0..table.zone_count() {
        assert!(table.zone(zone).allocated <= 192, "zone {zone} used past its capacity");
    }
}

#[test]
fn open_and_active_limits_are_respected() {
    let namespace = NamespaceConfig::zoned(64 * 2048, 512, 2048, 2048).max_open_zones(2).max_active_zones(4);
    let mut harness = Harness::single(SimConfig::empty().with_namespace(namespace));
    write_read_reopen(&mut harness, &volume_options());
    // Two streams need 2 + reclaim + two metadata copies = 5 active zones: refused
    // at format with a clear error, nothing written.
    let options = VolumeOptions { streams: 2, ..volume_options() };
    match Volume::format(harness.devices(), &options) {
        Err(Error::InvalidConfig(why)) => assert!(why.contains("active"), "{why}"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn fills_a_limited_device_to_the_end_then_reports_no_space() {
    let namespace = NamespaceConfig::zoned(32 * 512, 512, 512, 448).max_open_zones(2).max_active_zones(4);
    let harness = Harness::single(SimConfig::empty().with_namespace(namespace));
    let mut volume = harness.format(&volume_options());
    let mut ids = Vec::new();
    let error = loop {
        match volume.submit_write(0, &pattern(ids.len() as u64, 8), 0) {
            Ok(id) => ids.push(id),
            Err(error) => break error,
        }
        while let Some(done) = volume.next_done() {
            done.result.unwrap();
        }
    };
    assert!(matches!(error, Error::NoSpace(_)), "{error:?}");
    volume.commit().unwrap();
    volume.check_invariants();
    let stats = volume.stats();
    // Zones of 56 blocks take 7 extents of 8 blocks, or 6 with a checksum
    // area after them (55 blocks of data).
    let per_zone = if volume.checksum_areas() { 48.0 / 55.0 } else { 1.0 };
    assert!(stats.valid_bytes as f64 / stats.capacity_bytes as f64 >= 0.9 * per_zone, "{stats:?}");
}

#[test]
fn checksum_mismatch_reads_the_mirror_and_records_the_bad_block() {
    let options = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    let harness = Harness::new(vec![zns(64, 1024), zns(64, 1024)], vec![(0, 1), (1, 1)]);
    let mut volume = harness.format(&options);
    let data = pattern(5, 16);
    let id = volume.write(0, &data, 77).unwrap();
    volume.commit().unwrap();
    // Flip a bit of block 3 of the first copy, at rest.
    let location = volume.location(id, 0).unwrap();
    let lba = volume.lba(0, location) + 3 * 8;
    harness.sims[0].corrupt_at_rest(1, lba, 12);
    let mut back = vec![0u8; data.len()];
    let outcome = volume.read(id, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(outcome.repaired, vec![3]);
    assert_eq!(volume.bad_blocks().len(), 1);
    assert_eq!((volume.bad_blocks()[0].lane, volume.bad_blocks()[0].block), (0, 3));
    // Repair: rewrite the bad copy elsewhere (ZNS cannot overwrite).
    let new = volume.rewrite_copy(id, 0, &back).unwrap();
    assert_ne!(new, location);
    volume.commit().unwrap();
    let mut copy = vec![0u8; data.len()];
    volume.read_copy(id, 0, &mut copy).unwrap();
    assert_eq!(copy, data);
}

#[test]
fn media_errors_read_the_dup_copy_and_both_bad_is_uncorrectable() {
    let options = VolumeOptions { profile: Profile::Dup, ..volume_options() };
    let harness = Harness::single(zns(64, 1024));
    let mut volume = harness.format(&options);
    let data = pattern(6, 8);
    let id = volume.write(0, &data, 5).unwrap();
    volume.commit().unwrap();
    let first = volume.lba(0, volume.location(id, 0).unwrap());
    harness.sims[0].inject(Fault::UnrecoveredRead { nsid: 1, slba: first + 8, blocks: 8 });
    let mut back = vec![0u8; data.len()];
    let outcome = volume.read(id, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(outcome.repaired.len(), 8, "the whole unreadable transfer came from the other copy");
    let second = volume.lba(1, volume.location(id, 1).unwrap());
    harness.sims[0].corrupt_at_rest(1, second + 8, 0);
    match volume.read(id, &mut back) {
        Err(Error::Uncorrectable { extent, owner, blocks }) => {
            assert_eq!((extent, owner), (id, Some(5)));
            assert_eq!(blocks, vec![1]);
        }
        other => panic!("expected Uncorrectable, got {other:?}"),
    }
}

#[test]
fn single_copy_mismatch_is_uncorrectable() {
    let harness = Harness::single(conventional(64));
    let mut volume = harness.format(&volume_options());
    let data = pattern(7, 4);
    let id = volume.write(0, &data, 1).unwrap();
    let lba = volume.lba(0, volume.location(id, 0).unwrap());
    harness.sims[0].corrupt_at_rest(1, lba, 100);
    let mut back = vec![0u8; data.len()];
    assert!(matches!(volume.read(id, &mut back), Err(Error::Uncorrectable { .. })));
}

#[test]
fn free_then_reclaim_returns_space_and_keeps_data() {
    for config in [zns(24, 256), conventional(8)] {
        let options = VolumeOptions { software_zone_bytes: Some(256 << 10), ..volume_options() };
        let harness = Harness::single(config);
        let mut volume = harness.format(&options);
        // Fill the volume with 16 KiB extents until it is full.
        let mut live = Vec::new();
        loop {
            let data = pattern(live.len() as u64, 4);
            match volume.write(0, &data, 0) {
                Ok(id) => live.push((id, data)),
                Err(Error::NoSpace(_)) => break,
                Err(error) => panic!("{error:?}"),
            }
        }
        volume.commit().unwrap();
        // Free two of every three: no zone is empty, every one is a third
        // full, so only reclaim brings space back.
        let mut kept = Vec::new();
        for (index, (id, data)) in live.into_iter().enumerate() {
            if index % 3 == 0 {
                kept.push((id, data));
            } else {
                volume.free(id).unwrap();
            }
        }
        volume.commit().unwrap();
        assert!(matches!(volume.write(0, &pattern(1, 4), 0), Err(Error::NoSpace(_))));
        let mut reclaimed = 0;
        for _ in 0..1000 {
            match volume.reclaim_step(16).unwrap() {
                ReclaimProgress::Idle => break,
                ReclaimProgress::InProgress { moved_blocks, .. } => assert!(moved_blocks <= 16 + 4),
                ReclaimProgress::Reclaimed { .. } => reclaimed += 1,
            }
        }
        assert!(reclaimed >= 2, "reclaimed {reclaimed} zones");
        volume.check_invariants();
        // Space is back, and everything kept reads back.
        let id = volume.write(0, &pattern(2, 4), 0).unwrap();
        volume.commit().unwrap();
        for (id, data) in &kept {
            let mut back = vec![0u8; data.len()];
            volume.read(*id, &mut back).unwrap();
            assert_eq!(&back, data);
        }
        assert!(volume.stats().relocated_bytes > 0);
        assert!(volume.extent(id).is_some());
    }
}

#[test]
fn reclaim_uses_copy_where_offered_and_read_write_otherwise() {
    for copy in [true, false] {
        let mut config = zns(24, 256);
        if !copy {
            config.oncs.remove(nvme_driver::spec::identify::Oncs::COPY);
        }
        let harness = Harness::single(config);
        let mut volume = harness.format(&volume_options());
        let mut ids = Vec::new();
        for i in 0..64 {
            ids.push((volume.write(0, &pattern(i, 4), 0).unwrap(), pattern(i, 4)));
        }
        for (id, _) in ids.iter().skip(1).step_by(2) {
            volume.free(*id).unwrap();
        }
        volume.commit().unwrap();
        while volume.reclaim_step(1000).unwrap() != ReclaimProgress::Idle {}
        let stats = volume.stats();
        assert!(stats.relocated_bytes > 0);
        assert_eq!(stats.copy_commands > 0, copy, "{stats:?}");
        for (id, data) in ids.iter().step_by(2) {
            let mut back = vec![0u8; data.len()];
            volume.read(*id, &mut back).unwrap();
            assert_eq!(&back, data);
        }
    }
}

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let harness = Harness::single(zns(64, 1024));
    let mut volume = harness.format(&volume_options());
    assert!(matches!(volume.write(0, &[0u8; 100], 0), Err(Error::InvalidArgument(_))));
    assert!(matches!(volume.write(0, &[], 0), Err(Error::InvalidArgument(_))));
    assert!(matches!(volume.write(5, &[0u8; BLOCK_SIZE], 0), Err(Error::InvalidArgument(_))));
    let too_big = vec![0u8; volume.max_extent_bytes() + BLOCK_SIZE];
    assert!(matches!(volume.write(0, &too_big, 0), Err(Error::InvalidArgument(_))));
    assert!(matches!(volume.free(12345), Err(Error::NoSuchExtent(12345))));
    let mut out = [0u8; BLOCK_SIZE];
    assert!(matches!(volume.read(12345, &mut out), Err(Error::NoSuchExtent(_))));
    assert_eq!(volume.uncommitted_ops(), 0);
    // No volume on a blank device; a mirror's devices in a single volume.
    let blank = Harness::single(zns(64, 1024));
    assert!(matches!(blank.open(&volume_options()), Err(Error::NoVolume)));
    let mirror = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    assert!(matches!(Volume::format(blank.devices(), &mirror), Err(Error::InvalidConfig(_))));
}

#[test]
fn many_writes_in_flight_per_zone_with_zone_append() {
    let harness = Harness::single(zns(64, 1024).with_completion_delay(0, 3).with_reorder(true));
    let mut volume = harness.format(&volume_options());
    let mut expected = std::collections::HashMap::new();
    let mut most_in_flight = 0;
    for i in 0..200u64 {
        let data = pattern(i, 4);
        let id = volume.submit_write(0, &data, i).unwrap();
        expected.insert(id, data);
        most_in_flight = most_in_flight.max(volume.writes_in_flight());
        if i % 24 == 23 {
            volume.poll();
        }
    }
    volume.wait_idle().unwrap();
    let mut done = 0;
    while let Some(d) = volume.next_done() {
        d.result.unwrap();
        done += 1;
    }
    assert_eq!(done, 200);
    assert!(most_in_flight >= 8, "only {most_in_flight} writes were ever in flight");
    volume.commit().unwrap();
    volume.check_invariants();
    for (id, data) in &expected {
        let mut back = vec![0u8; data.len()];
        volume.read(*id, &mut back).unwrap();
        assert_eq!(&back, data);
    }
}

#[test]
fn ordered_writes_in_flight_fill_zones_their_extents_do_not_tile() {
    // Completions a few polls late, so that each ordered write waits for
    // the one before it in its zone; zones of 64 blocks take 9 extents of
    // 7 blocks and are retired with a block left, then finished once their
    // writes are done. Every write lands and reads back after a restart.
    let mut harness = Harness::single(zns(32, 256).with_completion_delay(2, 4));
    let options = VolumeOptions { write_mode: zoned_allocator::WriteMode::Ordered, ..volume_options() };
    let mut volume = harness.format(&options);
    let mut written = std::collections::BTreeMap::new();
    let mut pending = std::collections::BTreeMap::new();
    for seed in 0..120u64 {
        while volume.writes_in_flight() >= 8 {
            volume.poll();
            while let Some(done) = volume.next_done() {
                done.result.unwrap_or_else(|e| panic!("extent {}: {e}", done.id));
                written.insert(done.id, pending.remove(&done.id).unwrap());
            }
        }
        let id = volume.submit_write(0, &pattern(seed, 7), seed).unwrap();
        pending.insert(id, seed);
    }
    volume.wait_idle().unwrap();
    while let Some(done) = volume.next_done() {
        done.result.unwrap_or_else(|e| panic!("extent {}: {e}", done.id));
        written.insert(done.id, pending.remove(&done.id).unwrap());
    }
    assert!(pending.is_empty());
    volume.commit().unwrap();
    if volume.checksum_areas() {
        // 63 blocks of data fit before a block of checksums, rounded down to
        // the volume's data unit: as many extents of 7 as that takes are
        // sealed in each zone.
        let unit = (volume.data_unit_bytes() / 4096) as u32;
        let sealed = (63 - 63 % unit) / 7 * 7;
        let zones = volume.zone_table(0).zone_count();
        assert!((0..zones).any(|zone| volume.sealed_blocks(0, zone) == sealed), "zones were sealed full");
    } else {
        assert!(volume.stats().zones_finished > 0, "zones were retired with room left");
    }
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    for (&id, &seed) in &written {
        let mut back = vec![0u8; 7 * 4096];
        volume.read(id, &mut back).unwrap();
        assert!(back == pattern(seed, 7), "extent {id}");
    }
}

#[test]
fn a_write_that_times_out_never_becomes_an_extent() {
    // Completions a few polls late and a volume that waits for nothing:
    // the blocking write gives up before its completion arrives.
    let mut harness = Harness::single(zns(32, 256).with_completion_delay(3, 3));
    let mut volume = harness.format(&volume_options());
    let kept = volume.write(0, &pattern(1, 2), 1).unwrap();
    volume.commit().unwrap();
    drop(volume);
    harness.restart();
    let impatient = VolumeOptions { timeout: std::time::Duration::ZERO, ..volume_options() };
    let mut volume = harness.open(&impatient).unwrap();
    match volume.write(0, &pattern(2, 3), 2) {
        Err(Error::Timeout { what }) => assert_eq!(what, "a write"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The write completes on the device later; it is abandoned, not an
    // extent, and nothing reports it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while volume.writes_in_flight() > 0 {
        volume.poll();
        assert!(std::time::Instant::now() < deadline, "the abandoned write never completed");
    }
    assert!(volume.next_done().is_none(), "an abandoned write reported");
    assert_eq!(volume.extent_ids().collect::<Vec<_>>(), vec![kept]);
    volume.commit().unwrap();
    volume.check_invariants();
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&volume_options()).unwrap();
    assert_eq!(volume.extent_ids().collect::<Vec<_>>(), vec![kept], "only the committed extent after a restart");
    let mut back = vec![0u8; 2 * 4096];
    volume.read(kept, &mut back).unwrap();
    assert_eq!(back, pattern(1, 2));
}

#[test]
fn a_checkpoint_now_that_fails_loses_nothing_and_the_next_one_lands() {
    let mut harness = Harness::single(zns(32, 256));
    let mut volume = harness.format(&volume_options());
    let ids: Vec<u64> = (0..5).map(|seed| volume.write(0, &pattern(seed, 3), seed).unwrap()).collect();
    // The rotation writes the other segment: zone 1 (copy 0) and zone 3
    // (copy 1) of 512 LBAs each.
    harness.sims[0].inject(Fault::WriteFault { nsid: 1, slba: 512, blocks: 512 });
    match volume.checkpoint_now() {
        Err(Error::Command { what, .. }) => assert_eq!(what, "Write", "the failed command is named"),
        other => panic!("expected the checkpoint's write to fail, got {other:?}"),
    }
    harness.sims[0].clear_faults();
    let before = volume.stats().checkpoints;
    let info = volume.checkpoint_now().unwrap();
    assert!(info.checkpoint && volume.stats().checkpoints == before + 1, "{info:?}");
    assert!(volume.stats().checkpoint_bytes >= 4096);
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&volume_options()).unwrap();
    for (seed, &id) in ids.iter().enumerate() {
        let mut back = vec![0u8; 3 * 4096];
        volume.read(id, &mut back).unwrap();
        assert_eq!(back, pattern(seed as u64, 3), "extent {id}");
    }
}

#[test]
fn the_id_of_a_freed_extent_never_names_a_new_one_even_after_reopening() {
    let mut harness = Harness::new(vec![zns(16, 256)], vec![(0, 1)]);
    let options = volume_options();
    let mut volume = harness.format(&options);
    let ids: Vec<u64> = (0..4).map(|i| volume.write(0, &pattern(i, 1), i).unwrap()).collect();
    volume.commit().unwrap();
    // Freed through the log, and freed before a checkpoint (which then
    // carries the slot's next generation rather than a log record).
    volume.free(ids[1]).unwrap();
    volume.commit().unwrap();
    volume.free(ids[3]).unwrap();
    volume.checkpoint_now().unwrap();
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    let mut fresh = Vec::new();
    for i in 0..8 {
        fresh.push(volume.write(0, &pattern(100 + i, 1), 100 + i).unwrap());
    }
    for dead in [ids[1], ids[3]] {
        assert!(volume.extent(dead).is_none(), "freed extent {dead} is back");
        assert!(!fresh.contains(&dead), "freed extent {dead}'s ID names a new extent");
    }
    assert_eq!(volume.owner(ids[0]).ok(), Some(0));
    assert_eq!(volume.owner(ids[2]).ok(), Some(2));
    volume.check_invariants();
}

#[test]
fn owners_stay_bounded_in_memory_and_come_back_from_the_journal_after_reuse_and_reopening() {
    // Owners are journaled a page at a time; memory keeps only those
    // written since (16 here, `volume_options`). Freed slots are reused,
    // so a page's journaled owners are overridden by newer ones until the
    // page is journaled again.
    let mut harness = Harness::new(vec![zns(64, 256)], vec![(0, 1)]);
    let options = volume_options();
    let bound = options.recent_owners as u64;
    let mut volume = harness.format(&options);
    let mut live = std::collections::BTreeMap::new();
    let mut next = 1u64;
    for round in 0..30u64 {
        for _ in 0..25 {
            let owner = next * 1_000_003;
            live.insert(volume.write(0, &pattern(next, 1), owner).unwrap(), owner);
            next += 1;
        }
        if round % 3 == 2 {
            let doomed: Vec<u64> = live.keys().copied().step_by(3).collect();
            for id in doomed {
                volume.free(id).unwrap();
                live.remove(&id);
            }
        }
        volume.commit().unwrap();
        let stats = volume.stats();
        assert!(stats.extents < 64 * bound, "the bound stays the option's");
        assert!(stats.owners_in_memory <= bound, "round {round}: {} owners in memory", stats.owners_in_memory);
        for (&id, &owner) in &live {
            assert_eq!(volume.owner(id).unwrap(), owner, "round {round}: extent {id}");
        }
        if round % 10 == 9 {
            let stats = volume.stats();
            assert!(stats.owner_pages_written > 0 && stats.owner_pages_read > 0, "round {round}: {stats:?}");
            drop(volume);
            harness.restart();
            volume = harness.open(&options).unwrap();
            volume.check_invariants();
        }
    }
    let mut listed = volume.extent_owners().unwrap();
    listed.sort_unstable();
    assert_eq!(listed, live.iter().map(|(&id, &owner)| (id, owner)).collect::<Vec<_>>());
}

#[test]
fn data_starts_at_a_zone_after_the_metadata() {
    let harness = Harness::single(zns(64, 1024));
    let volume = harness.format(&volume_options());
    let start = volume.data_start_lba(0).expect("a data zone");
    // 1 MiB zones of 512-byte LBAs; the metadata segments come first.
    assert!(start > 0 && start.is_multiple_of(2048), "{start}");
    assert_eq!(volume.data_start_lba(1), None, "one copy, one lane");
}

/// A mirror member whose every read fails (a dying drive): opening the
/// volume names it unreadable, with the read error, never blank, so that
/// nothing points the operator at formatting it. Opened degraded, the
/// volume goes on without it, and every extent reads back from the other.
#[test]
fn a_member_that_fails_every_read_is_unreadable_not_blank() {
    let options = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    let mut harness = Harness::new(vec![zns(64, 256), zns(64, 256)], vec![(0, 1), (1, 1)]);
    let mut volume = harness.format(&options);
    let mut written = Vec::new();
    for i in 0..20u64 {
        let data = pattern(900 + i, 1 + (i % 3) as usize);
        written.push((volume.write(0, &data, i).unwrap(), data));
    }
    volume.commit().unwrap();
    drop(volume);
    harness.restart();
    harness.sims[0].inject(Fault::UnrecoveredRead { nsid: 1, slba: 0, blocks: 64 * 512 });
    match harness.open(&options) {
        Err(Error::Unreadable { device: 0, what }) => assert!(!what.is_empty()),
        Err(other) => panic!("expected Unreadable for device 0, got {other}"),
        Ok(_) => panic!("opened on a member that cannot be read"),
    }
    let degraded = VolumeOptions { degraded: true, ..options };
    let mut volume = harness.open(&degraded).expect("opens degraded without it");
    for (id, data) in &written {
        let mut back = vec![0u8; data.len()];
        volume.read(*id, &mut back).unwrap();
        assert_eq!(&back, data, "extent {id}");
    }
}
