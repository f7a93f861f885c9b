//! Single faults on the metadata, one test each, from the hostile
//! operator's list: a rotted or unreadable journal block, an unreadable
//! checkpoint, a lost or wiped mirror device, a failed flush retried, a
//! foreign device, devices given out of order, a wrong software zone size.
//! After each, every committed extent reads back exactly, or open fails
//! with a typed error that names what is lost and writes nothing.

use nvme_testkit::harness as support;

use nvme_driver::sim::{Fault, Simulator};
use nvme_testkit::data::pattern;
use std::collections::BTreeMap;
use support::{conventional, volume_options, zns, Harness};
use zoned_allocator::{DeviceState, Error, MemberState, Profile, Volume, VolumeOptions, VolumeState};

/// 512-byte LBAs per 4 KiB block in these simulators.
const LPB: u64 = 8;
/// Zones of 256 KiB in LBAs.
const ZONE_LBAS: u64 = 512;

/// extent → (pattern seed, blocks)
type Model = BTreeMap<u64, (u64, usize)>;

/// A journal record header found on the media.
#[derive(Clone, Copy, Debug)]
struct Record {
    lba: u64,
    checkpoint: bool,
    generation: u64,
    seq: u64,
}

/// The record headers in `zones` of namespace 1 (scanning every 4 KiB
/// block for the magic and the current format version).
fn records(sim: &Simulator, zones: std::ops::Range<u64>) -> Vec<Record> {
    let mut found = Vec::new();
    for lba in (zones.start * ZONE_LBAS..zones.end * ZONE_LBAS).step_by(LPB as usize) {
        let block = sim.read_block(1, lba);
        if &block[..8] == b"ZNVOLLOG" && block[9] == zoned_allocator::FORMAT_VERSION {
            let word = |at: usize| u64::from_le_bytes(block[at..at + 8].try_into().unwrap());
            found.push(Record { lba, checkpoint: block[8] == 1, generation: word(24), seq: word(32) });
        }
    }
    found
}

/// Writes and commits `commits` batches of a few extents each.
fn fill(volume: &mut Volume, model: &mut Model, commits: usize) {
    for commit in 0..commits {
        for k in 0..3 {
            let seed = (commit * 10 + k) as u64 + 1;
            let blocks = 1 + k;
            let id = volume.write(0, &pattern(seed, blocks), seed).unwrap();
            model.insert(id, (seed, blocks));
        }
        volume.commit().unwrap();
    }
}

/// Every extent of `model` reads back, with its seed as its owner (as
/// every writer here gives it).
fn check(volume: &mut Volume, model: &Model) {
    volume.check_invariants();
    let found: Vec<u64> = volume.extent_ids().collect();
    assert_eq!(found.len(), model.len(), "extents after reopening");
    for (&id, &(seed, blocks)) in model {
        let mut back = vec![0u8; blocks * 4096];
        volume.read(id, &mut back).unwrap_or_else(|e| panic!("extent {id}: {e}"));
        assert!(back == pattern(seed, blocks), "extent {id} reads back wrong");
        assert_eq!(volume.owner(id).unwrap_or_else(|e| panic!("extent {id}'s owner: {e}")), seed, "extent {id}");
    }
}

/// Drops `volume`, restarts the simulators (what was flushed stays) and
/// opens the volume again: every extent of `model` reads back with its
/// own bytes and owner ([`check`]). The reopened volume, for more.
fn reopen_and_check(harness: &mut Harness, volume: Volume, options: &VolumeOptions, model: &Model) -> Volume {
    drop(volume);
    harness.restart();
    let mut volume = harness.open(options).expect("reopens");
    check(&mut volume, model);
    volume
}

/// Commands that change a namespace, summed over the simulators.
fn device_writes(harness: &Harness) -> u64 {
    // Write, Write Zeroes, Copy, Zone Management Send, Zone Append.
    harness
        .sims
        .iter()
        .map(|s| [0x01, 0x08, 0x19, 0x79, 0x7d].iter().map(|&o| s.stats().io_commands[o]).sum::<u64>())
        .sum()
}

fn single_zns() -> (Harness, VolumeOptions) {
    (Harness::single(zns(32, 256)), volume_options())
}

fn single_conventional() -> (Harness, VolumeOptions) {
    (Harness::single(conventional(8)), VolumeOptions { software_zone_bytes: Some(256 << 10), ..volume_options() })
}

fn mirror() -> (Harness, VolumeOptions) {
    (
        Harness::new(vec![conventional(8), zns(32, 256)], vec![(0, 1), (1, 1)]),
        VolumeOptions { profile: Profile::Mirror, software_zone_bytes: Some(256 << 10), ..volume_options() },
    )
}

#[test]
fn a_rotted_journal_block_on_one_copy_is_read_from_the_other_and_rewritten() {
    for (mut harness, options) in [single_zns(), single_conventional()] {
        let mut model = Model::new();
        let mut volume = harness.format(&options);
        fill(&mut volume, &mut model, 4);
        drop(volume);
        harness.restart();
        // The second delta on copy 0 (zones 0..2), rotted at rest.
        let copy0 = records(&harness.sims[0], 0..2);
        let delta = copy0.iter().find(|r| !r.checkpoint && r.seq == 3).expect("delta 3 on copy 0");
        harness.sims[0].corrupt_at_rest(1, delta.lba, 100);
        let mut volume = harness.open(&options).expect("opens from the other copy");
        check(&mut volume, &model);
        assert!(volume.recovery().copies_repaired, "the bad copy was rewritten");
        drop(volume);
        harness.restart();
        // Both copies are whole again: the other copy may now fail too.
        let copy1 = records(&harness.sims[0], 2..4);
        let newest = copy1.iter().max_by_key(|r| (r.generation, r.seq)).unwrap();
        harness.sims[0].corrupt_at_rest(1, newest.lba + 1, 7);
        let mut volume = harness.open(&options).expect("opens after the repair");
        check(&mut volume, &model);
    }
}

#[test]
fn a_journal_hole_on_every_copy_fails_the_open_by_name_and_writes_nothing() {
    let (mut harness, options) = single_zns();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    fill(&mut volume, &mut model, 5);
    drop(volume);
    harness.restart();
    // Delta 3 rotted on both copies; deltas 4..6 prove it was committed.
    for record in records(&harness.sims[0], 0..4).iter().filter(|r| !r.checkpoint && r.seq == 3) {
        harness.sims[0].corrupt_at_rest(1, record.lba, 100);
    }
    let before = device_writes(&harness);
    match harness.open(&options) {
        Err(Error::MetadataLost { seq: 3, newest_seq: 6, .. }) => {}
        other => panic!("expected MetadataLost naming commits 3..=6, got {other:?}"),
    }
    assert_eq!(device_writes(&harness), before, "a failed open wrote to the device");
    // Rewinding opens at commit 2 and says exactly what it dropped.
    harness.restart();
    let rewind = VolumeOptions { rewind: true, ..options.clone() };
    let volume = harness.open(&rewind).expect("rewind opens");
    let dropped = volume.recovery().dropped.clone().expect("a rewind reports its drops");
    assert_eq!((dropped.first_seq, dropped.last_seq), (3, 6));
    // Commit 1 (sequence 2) is kept; commit 2's record is the one lost,
    // and commits 3-5 name their extents.
    let kept: Vec<u64> = model.keys().copied().take(3).collect();
    let lost_later: Vec<u64> = model.keys().copied().skip(6).collect();
    for id in &kept {
        assert!(volume.extent(*id).is_some(), "extent {id} of commit 1 kept");
    }
    assert_eq!(volume.extent_ids().count(), 3, "only commit 1's extents");
    assert_eq!(dropped.extents, lost_later, "the extents of the readable later commits are named");
}

#[test]
fn an_unreadable_checkpoint_is_an_error_never_no_volume() {
    let (mut harness, options) = single_conventional();
    let mut volume = harness.format(&options);
    fill(&mut volume, &mut Model::new(), 1);
    drop(volume);
    harness.restart();
    for record in records(&harness.sims[0], 0..4).iter().filter(|r| r.checkpoint) {
        harness.sims[0].inject(Fault::UnrecoveredRead { nsid: 1, slba: record.lba, blocks: LPB });
    }
    match harness.open(&options) {
        Err(Error::MetadataLost { .. }) => {}
        other => panic!("expected MetadataLost, got {other:?}"),
    }
    // Every block unreadable: not blank, and not formattable.
    harness.sims[0].inject(Fault::UnrecoveredRead { nsid: 1, slba: 0, blocks: 8 * 2048 });
    assert!(matches!(harness.open(&options), Err(Error::Unreadable { device: 0, .. })));
    let mut devices = harness.devices();
    assert!(matches!(Volume::probe(&mut devices[0]), DeviceState::Unreadable(_)));
    // A blank namespace is blank.
    let blank = Harness::single(conventional(8));
    assert!(matches!(blank.open(&options), Err(Error::NoVolume)));
    assert_eq!(Volume::probe(&mut blank.devices()[0]), DeviceState::Blank);
}

#[test]
fn a_mirror_opens_from_device_1_when_device_0_metadata_is_garbage() {
    let (mut harness, options) = mirror();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    fill(&mut volume, &mut model, 3);
    drop(volume);
    harness.restart();
    // Every block of device 0's metadata zones (0 and 1) flipped.
    for lba in (0..2 * ZONE_LBAS).step_by(LPB as usize) {
        harness.sims[0].corrupt_at_rest(1, lba, 3);
        harness.sims[0].corrupt_at_rest(1, lba + 1, 5);
    }
    let mut volume = harness.open(&options).expect("opens from device 1's copy");
    check(&mut volume, &model);
    assert!(volume.recovery().copies_repaired);
    drop(volume);
    harness.restart();
    // Device 0's metadata was rewritten: now device 1's may go.
    for lba in (0..2 * ZONE_LBAS).step_by(LPB as usize) {
        harness.sims[1].inject(Fault::UnrecoveredRead { nsid: 1, slba: lba, blocks: LPB });
    }
    let mut volume = harness.open(&options).expect("opens from device 0's repaired copy");
    check(&mut volume, &model);
}

#[test]
fn a_wiped_mirror_device_is_refused_by_name_and_nothing_is_written() {
    let (mut harness, options) = mirror();
    let mut volume = harness.format(&options);
    fill(&mut volume, &mut Model::new(), 2);
    drop(volume);
    // Device 0 replaced by a blank namespace.
    harness.sims[0] = Simulator::new(conventional(8));
    harness.restart();
    let before = device_writes(&harness);
    match harness.open(&options) {
        Err(Error::BlankDevice { device: 0, .. }) => {}
        other => panic!("expected BlankDevice naming device 0, got {other:?}"),
    }
    assert_eq!(device_writes(&harness), before, "a failed open wrote to the device");
}

#[test]
fn a_commit_whose_flush_failed_is_retried_without_a_duplicate_record() {
    for (mut harness, options) in [single_zns(), mirror()] {
        let mut model = Model::new();
        let mut volume = harness.format(&options);
        fill(&mut volume, &mut model, 2);
        let mut rotations = 0;
        // One flush of each commit fails: the data flush or the journal's
        // (the record is then written but maybe not durable), then the
        // retry succeeds; some of these land inside a rotation.
        for round in 0..40u64 {
            let id = volume.write(0, &pattern(1000 + round, 2), 1000 + round).unwrap();
            model.insert(id, (1000 + round, 2));
            let sim = &harness.sims[(round % harness.sims.len() as u64) as usize];
            sim.inject(Fault::FlushFails { after: (round / 2 % 3) as u32 });
            if volume.commit().is_ok() {
                // The commit needed fewer flushes than the fault let through.
                sim.clear_faults();
                continue;
            }
            sim.clear_faults();
            volume.commit().unwrap_or_else(|e| panic!("round {round}: the retry: {e}"));
            if round % 5 == 4 {
                rotations += volume.stats().checkpoints;
                drop(volume);
                harness.restart();
                volume = harness.open(&options).unwrap_or_else(|e| panic!("round {round}: reopening: {e}"));
                check(&mut volume, &model);
            }
        }
        rotations += volume.stats().checkpoints;
        assert!(rotations >= 8, "the retries rotated ({rotations} checkpoints)");
        drop(volume);
        harness.restart();
        let mut volume = harness.open(&options).expect("opens after retried commits");
        check(&mut volume, &model);
    }
}

#[test]
fn conventional_metadata_never_falls_back_to_an_older_checkpoint() {
    // A checkpoint is spread over commits, and the segment before it is
    // kept until it seals. Losing the newest checkpoint's first record on
    // every copy, once commits were journaled after it, must fail open
    // rather than fall back to the kept segment and drop those commits.
    let (mut harness, options) = single_conventional();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    while volume.stats().checkpoints < 3 {
        fill(&mut volume, &mut model, 1);
    }
    fill(&mut volume, &mut model, 1);
    drop(volume);
    harness.restart();
    let all = records(&harness.sims[0], 0..4);
    let newest = all.iter().filter(|r| r.checkpoint).map(|r| r.generation).max().unwrap();
    assert!(all.iter().any(|r| !r.checkpoint && r.generation == newest), "a delta follows the newest checkpoint");
    for record in all.iter().filter(|r| r.checkpoint && r.generation == newest) {
        harness.sims[0].corrupt_at_rest(1, record.lba, 100);
    }
    match harness.open(&options) {
        Err(Error::MetadataLost { .. }) => {}
        other => panic!("expected MetadataLost, got {other:?}"),
    }
}

#[test]
fn losing_a_checkpoint_first_record_that_nothing_follows_loses_no_commit() {
    // The commit that passes half of a segment is journaled there first;
    // the checkpoint's first record in the other segment carries none, so
    // with nothing after it, losing it on every copy loses nothing.
    let (mut harness, options) = single_conventional();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    while volume.stats().checkpoints < 3 {
        fill(&mut volume, &mut model, 1);
    }
    drop(volume);
    harness.restart();
    let all = records(&harness.sims[0], 0..4);
    let newest = all.iter().filter(|r| r.checkpoint).map(|r| r.generation).max().unwrap();
    assert!(!all.iter().any(|r| !r.checkpoint && r.generation == newest), "nothing follows the newest checkpoint");
    for record in all.iter().filter(|r| r.checkpoint && r.generation == newest) {
        harness.sims[0].corrupt_at_rest(1, record.lba, 100);
    }
    let mut volume = harness.open(&options).expect("opens on the segment the lost checkpoint built on");
    check(&mut volume, &model);
    // And goes on: the next commit begins the checkpoint anew.
    fill(&mut volume, &mut model, 3);
    reopen_and_check(&mut harness, volume, &options, &model);
}

#[test]
fn devices_are_found_by_label_in_any_order_and_foreign_ones_are_refused() {
    let (mut harness, options) = mirror();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    fill(&mut volume, &mut model, 2);
    let volume_id = volume.id();
    drop(volume);
    harness.restart();
    harness.layout.reverse();
    let mut volume = harness.open(&options).expect("swapped order opens");
    assert_eq!(volume.id(), volume_id);
    assert_eq!(volume.recovery().device_order, vec![1, 0]);
    check(&mut volume, &model);
    drop(volume);
    // Another volume's device in the second place.
    let (other, _) = mirror();
    let other_volume = other.format(&options);
    let other_id = other_volume.id();
    drop(other_volume);
    harness.layout.reverse();
    let mut devices = harness.devices();
    devices[1] = other.devices().remove(1);
    let before = device_writes(&harness) + device_writes(&other);
    match Volume::open(devices, &options) {
        Err(Error::ForeignDevice { device: 1, found, expected }) => {
            assert_eq!((found, expected), (other_id, volume_id));
        }
        other => panic!("expected ForeignDevice naming device 1, got {other:?}"),
    }
    assert_eq!(device_writes(&harness) + device_writes(&other), before);
}

#[test]
fn the_software_zone_size_comes_from_the_label() {
    let (mut harness, options) = single_conventional();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    fill(&mut volume, &mut model, 2);
    drop(volume);
    for software_zone_bytes in [None, Some(1 << 20), Some(64 << 10)] {
        harness.restart();
        let wrong = VolumeOptions { software_zone_bytes, ..options.clone() };
        let mut volume = harness.open(&wrong).unwrap_or_else(|e| panic!("{software_zone_bytes:?}: {e}"));
        check(&mut volume, &model);
    }
}

#[test]
fn a_zone_append_lba_outside_the_reserved_room_fails_that_extent_only() {
    let (mut harness, options) = single_zns();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    fill(&mut volume, &mut model, 1);
    // Past the zone, before it (wrapping), and back onto the zone's first
    // extent (each failed append took 2 blocks after the 6 of `fill`).
    for (k, skew) in [ZONE_LBAS, u64::MAX - 4 * ZONE_LBAS + 1, 0].into_iter().enumerate() {
        let skew = if k == 2 { 0u64.wrapping_sub((6 + 2 * 2) * LPB) } else { skew };
        harness.sims[0].inject(Fault::MisreportAppendLba { count: 1, skew_lbas: skew });
        match volume.write(0, &pattern(77, 2), 77) {
            Err(Error::BadDeviceResult { what }) => {
                assert!(what.contains("returned LBA") || what.contains("over"), "{what}")
            }
            other => panic!("skew {skew}: expected BadDeviceResult, got {other:?}"),
        }
        volume.check_invariants();
    }
    fill(&mut volume, &mut model, 1);
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).expect("opens after bad completions");
    check(&mut volume, &model);
}

#[test]
fn a_failed_ordered_write_or_relocation_leaves_the_next_one_working() {
    for write_mode in [zoned_allocator::WriteMode::Ordered, zoned_allocator::WriteMode::Append] {
        let (mut harness, options) = single_zns();
        let options = VolumeOptions { write_mode, ..options };
        let mut model = Model::new();
        let mut volume = harness.format(&options);
        fill(&mut volume, &mut model, 2);
        let data_zones = Fault::WriteFault { nsid: 1, slba: 4 * ZONE_LBAS, blocks: 28 * ZONE_LBAS };
        // A data write fails; the next one to the same stream succeeds.
        harness.sims[0].inject(data_zones.clone());
        assert!(matches!(volume.write(0, &pattern(50, 2), 50), Err(Error::Command { .. })), "{write_mode:?}");
        harness.sims[0].clear_faults();
        let id =
            volume.write(0, &pattern(51, 3), 51).unwrap_or_else(|e| panic!("{write_mode:?}: after a failure: {e}"));
        model.insert(id, (51, 3));
        // A relocation write (scrub's repair on a zoned lane) fails; the
        // next relocation succeeds.
        let (&victim, &(seed, blocks)) = model.iter().next().unwrap();
        harness.sims[0].inject(data_zones);
        assert!(volume.rewrite_copy(victim, 0, &pattern(seed, blocks)).is_err());
        harness.sims[0].clear_faults();
        volume.rewrite_copy(victim, 0, &pattern(seed, blocks)).unwrap_or_else(|e| panic!("{write_mode:?}: {e}"));
        fill(&mut volume, &mut model, 1);
        volume.check_invariants();
        reopen_and_check(&mut harness, volume, &options, &model);
    }
}

#[test]
fn a_data_zone_worn_read_only_stays_readable_and_reclaim_moves_its_data_off() {
    for dead_first in [false, true] {
        let (mut harness, options) = single_zns();
        let mut model = Model::new();
        let mut volume = harness.format(&options);
        fill(&mut volume, &mut model, 3);
        let (&first, _) = model.iter().next().unwrap();
        let zone = volume.location(first, 0).unwrap().zone;
        if dead_first {
            // The stream moves on to another zone, then everything in this
            // one is freed: the reset after the commit meets the read-only
            // zone.
            let mut seed = 200;
            while volume.location(*model.keys().last().unwrap(), 0).unwrap().zone == zone {
                seed += 1;
                let id = volume.write(0, &pattern(seed, 8), seed).unwrap();
                model.insert(id, (seed, 8));
            }
            let ids: Vec<u64> =
                model.keys().copied().filter(|&id| volume.location(id, 0).unwrap().zone == zone).collect();
            for id in ids {
                volume.free(id).unwrap();
                model.remove(&id);
            }
        }
        harness.sims[0].inject(Fault::ZoneReadOnly { nsid: 1, zslba: u64::from(zone) * ZONE_LBAS });
        if !dead_first {
            // The stream's zone is the worn one: one write fails, the next
            // goes elsewhere.
            assert!(volume.write(0, &pattern(90, 2), 90).is_err());
        }
        let id = volume.write(0, &pattern(91, 2), 91).expect("writes go on in another zone");
        model.insert(id, (91, 2));
        volume.commit().expect("a commit is not stopped by a worn zone");
        assert_eq!(volume.stats().zones_worn, 1, "dead first: {dead_first}");
        drop(volume);
        harness.restart();
        let mut volume = harness.open(&options).expect("opens with a read-only zone");
        check(&mut volume, &model);
        assert_eq!(volume.stats().zones_worn, 1);
        // Reclaim empties the worn zone first.
        while !matches!(volume.reclaim_step(64).unwrap(), zoned_allocator::ReclaimProgress::Idle) {}
        assert!(model.keys().all(|&id| volume.location(id, 0).unwrap().zone != zone), "data moved off zone {zone}");
        reopen_and_check(&mut harness, volume, &options, &model);
    }
}

#[test]
fn garbage_over_every_label_is_not_blank_and_never_no_volume() {
    let (mut harness, options) = single_conventional();
    let mut volume = harness.format(&options);
    fill(&mut volume, &mut Model::new(), 2);
    drop(volume);
    harness.restart();
    // Every block of both copies' metadata zones (0..4) flipped.
    for lba in (0..4 * ZONE_LBAS).step_by(LPB as usize) {
        harness.sims[0].corrupt_at_rest(1, lba, 9);
    }
    let before = device_writes(&harness);
    match harness.open(&options) {
        Err(Error::Unrecognized { device: 0 }) => {}
        other => panic!("expected Unrecognized, got {other:?}"),
    }
    assert_eq!(device_writes(&harness), before, "a failed open wrote to the device");
    assert_eq!(Volume::probe(&mut harness.devices()[0]), DeviceState::Unrecognized);
}

#[test]
fn scrubbing_metadata_finds_a_bad_copy_and_rewrites_both() {
    for (mut harness, options) in [single_zns(), mirror()] {
        let mut model = Model::new();
        let mut volume = harness.format(&options);
        fill(&mut volume, &mut model, 3);
        let clean = volume.scrub_metadata(true).expect("a clean scrub");
        assert!(clean.bytes_read > 0 && !clean.repaired, "{clean:?}");
        assert!(clean.bad_records.iter().chain(&clean.bad_labels).all(|&n| n == 0), "{clean:?}");
        // One delta of copy 0 rots at rest (device 0's zones 0..2).
        let delta = records(&harness.sims[0], 0..2).into_iter().find(|r| !r.checkpoint && r.seq == 3).unwrap();
        harness.sims[0].corrupt_at_rest(1, delta.lba, 100);
        let seen = volume.scrub_metadata(false).expect("a read-only scrub finds it");
        assert_eq!((seen.bad_records[0], seen.repaired), (1, false), "{seen:?}");
        let found = volume.scrub_metadata(true).expect("scrub finds it");
        assert_eq!(found.bad_records[0], 1, "{found:?}");
        assert!(found.repaired);
        let again = volume.scrub_metadata(true).expect("scrub after the repair");
        assert!(!again.repaired && again.bad_records.iter().all(|&n| n == 0), "{again:?}");
        drop(volume);
        harness.restart();
        let mut volume = harness.open(&options).expect("reopens");
        assert!(!volume.recovery().copies_repaired, "open found nothing left to repair");
        check(&mut volume, &model);
    }
}

#[test]
fn a_metadata_zone_worn_read_only_moves_its_segment_and_commits_go_on() {
    // Single: copy 0's segment 1 is zone 1 of the one device; mirror: copy
    // 1's segment 1 is zone 1 of the ZNS device 1.
    for (mut harness, options, sim) in [(single_zns(), 0), (mirror(), 1)].map(|((h, o), s)| (h, o, s)) {
        let mut model = Model::new();
        let mut volume = harness.format(&options);
        harness.sims[sim].inject(Fault::ZoneReadOnly { nsid: 1, zslba: ZONE_LBAS });
        let mut rounds = 0;
        while volume.stats().checkpoints < 4 {
            fill(&mut volume, &mut model, 1);
            rounds += 1;
            assert!(rounds < 1000, "no rotation happened");
        }
        assert_eq!(volume.stats().meta_zones_replaced, 1, "the worn segment moved once");
        assert!(volume.read_only().is_none());
        drop(volume);
        harness.restart();
        let mut volume = harness.open(&options).expect("opens with the moved segment");
        check(&mut volume, &model);
        // And goes on rotating through the moved segment.
        let rotations = volume.stats().checkpoints;
        while volume.stats().checkpoints < rotations + 3 {
            fill(&mut volume, &mut model, 1);
        }
        let mut volume = reopen_and_check(&mut harness, volume, &options, &model);
        let report = volume.scrub_metadata(false).unwrap();
        assert!(report.bad_records.iter().all(|&n| n == 0), "{report:?}");
    }
}

/// Writes `count` one-block extents, committing every 50: a table of
/// several checkpoint pages (340 extents each).
fn fill_pages(volume: &mut Volume, model: &mut Model, count: u64) {
    for i in 0..count {
        let seed = 10_000 + i;
        let id = volume.write(0, &pattern(seed, 1), seed).unwrap();
        model.insert(id, (seed, 1));
        if i % 50 == 49 {
            volume.commit().unwrap();
        }
    }
    volume.commit().unwrap();
}

/// Commits one more extent at a time until a checkpoint begins.
fn until_a_checkpoint_begins(volume: &mut Volume, model: &mut Model) {
    let begun = volume.stats().checkpoints;
    for seed in 50_000.. {
        let id = volume.write(0, &pattern(seed, 1), seed).unwrap();
        model.insert(id, (seed, 1));
        volume.commit().unwrap();
        if volume.stats().checkpoints > begun {
            return;
        }
        assert!(seed < 60_000, "no checkpoint began");
    }
}

#[test]
fn a_device_replaced_while_a_checkpoint_spreads_gets_its_labels_before_any_cut() {
    // A replacement marks the log broken; with the spread checkpoint not
    // sealed, the next commit writes a whole one in the current segment
    // (the other is still needed), then in the other with every copy's
    // labels. A cut right after must find the new device a member.
    let mut harness = Harness::new(vec![zns(64, 1024), zns(64, 1024), zns(64, 1024)], vec![(0, 1), (1, 1)]);
    let options = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    fill_pages(&mut volume, &mut model, 1700);
    volume.fail_device(1, "test").unwrap();
    // (Giving a member up writes a whole checkpoint; the next spreads.)
    volume.commit().unwrap();
    until_a_checkpoint_begins(&mut volume, &mut model);
    let begun = volume.stats().checkpoints;
    let spare = zoned_allocator::Device::open(&harness.controllers[2], 1, support::device_options()).unwrap();
    volume.replace(1, spare, false).unwrap();
    assert!(volume.stats().checkpoints >= begun + 2, "a whole checkpoint in each segment");
    drop(volume.abandon());
    harness.power_cut();
    harness.layout = vec![(0, 1), (2, 1)];
    let mut volume = harness.open(&options).expect("opens with the replacement, not degraded");
    assert!(volume.recovery().dropped.is_none());
    check(&mut volume, &model);
}

/// Where the owners `a` then `b` (two slots side by side in a page's owner
/// blob, little-endian) lie in zones `zones` of namespace 1: each
/// occurrence's LBA and the bit of its first byte there.
fn find_owner_pair(sim: &Simulator, zones: std::ops::Range<u64>, a: u64, b: u64) -> Vec<(u64, u64)> {
    let first = zones.start * ZONE_LBAS;
    let mut bytes = Vec::new();
    for lba in first..zones.end * ZONE_LBAS {
        bytes.extend(sim.read_block(1, lba));
    }
    let lba_bytes = bytes.len() as u64 / ((zones.end - zones.start) * ZONE_LBAS);
    let pair = [a.to_le_bytes(), b.to_le_bytes()].concat();
    (0..bytes.len().saturating_sub(15))
        .filter(|&at| bytes[at..at + 16] == pair[..])
        .map(|at| (first + at as u64 / lba_bytes, (at as u64 % lba_bytes) * 8))
        .collect()
}

/// A volume of 600 one-block extents (table pages 0 and 1) with a
/// checkpoint, reopened after a restart: no owner is in memory, so each
/// page's owners are read back from its blob.
fn two_pages_checkpointed_and_reopened(harness: &mut Harness, options: &VolumeOptions, model: &mut Model) -> Volume {
    let mut volume = harness.format(options);
    fill_pages(&mut volume, model, 600);
    volume.checkpoint_now().unwrap();
    drop(volume);
    harness.restart();
    harness.open(options).unwrap()
}

#[test]
fn owners_are_read_back_from_either_copy_and_one_lost_on_both_is_a_typed_error() {
    // Owners live in the journal only (one blob per table page). One bad
    // copy of a blob is read from the other; a blob bad on both loses its
    // page's owners only, loudly: a typed error for those extents, a count,
    // and every extent and its data intact, across reopening.
    let (mut harness, options) = single_zns();
    let mut model = Model::new();
    let mut volume = two_pages_checkpointed_and_reopened(&mut harness, &options, &mut model);
    // Slots 10 and 11 (page 0) and 360 and 361 (page 1): fresh slots, so
    // the IDs are the slots and the owners 10,000 more, less one.
    let owner = |slot: u64| 10_000 + slot - 1;
    let (copy0, both) = (0..2, 0..4);
    let page0 = find_owner_pair(&harness.sims[0], copy0, owner(10), owner(11));
    let page1 = find_owner_pair(&harness.sims[0], both.clone(), owner(360), owner(361));
    assert!(!page0.is_empty() && page1.len() >= 2, "the blobs are on both copies");
    assert!(!find_owner_pair(&harness.sims[0], 2..4, owner(10), owner(11)).is_empty(), "and on copy 1");
    for (lba, bit) in page0.into_iter().chain(page1) {
        harness.sims[0].corrupt_at_rest(1, lba, bit);
    }
    let read_before = volume.stats().owner_pages_read;
    assert_eq!(volume.owner(10).unwrap(), owner(10), "read from the other copy");
    assert!(volume.stats().owner_pages_read > read_before);
    match volume.owner(360) {
        Err(Error::Corrupt(why)) => assert!(why.contains("page 1"), "{why}"),
        other => panic!("a blob bad on both copies: {other:?}"),
    }
    let mut back = vec![0u8; 4096];
    volume.read(360, &mut back).unwrap();
    assert!(back == pattern(owner(360), 1), "the data is not the owner's concern");
    // A checkpoint rewrites page 1 without the owners it could not read.
    let on_page1 = model.keys().filter(|&&id| (340..680).contains(&id)).count() as u64;
    volume.checkpoint_now().expect("a lost owner does not stop commits");
    assert_eq!(volume.stats().owners_lost, on_page1);
    assert!(matches!(volume.owner(360), Err(Error::OwnerLost { extent: 360 })));
    assert!(matches!(
        volume.submit_write(0, &[0u8; 4096], zoned_allocator::OWNER_LOST),
        Err(Error::InvalidArgument(_))
    ));
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    volume.check_invariants();
    for (&id, &(seed, blocks)) in &model {
        let mut back = vec![0u8; blocks * 4096];
        volume.read(id, &mut back).unwrap_or_else(|e| panic!("extent {id}: {e}"));
        assert!(back == pattern(seed, blocks), "extent {id} reads back wrong");
        match volume.owner(id) {
            Ok(found) => assert!(found == seed && !(340..680).contains(&id), "extent {id}: owner {found}"),
            Err(Error::OwnerLost { extent }) => assert!(extent == id && (340..680).contains(&id)),
            Err(error) => panic!("extent {id}: {error}"),
        }
    }
}

#[test]
fn an_owner_read_that_times_out_on_every_copy_fails_the_commit_and_loses_no_owner() {
    // An owner blob whose reads hang on both copies (a timeout, not a bad
    // block) fails the commit that rewrites its page, by the read's error:
    // no owner is taken for lost, since a retry may read it. Once the
    // reads answer, the same checkpoint is written, and every extent and
    // owner is intact, across reopening.
    let (mut harness, options) = single_zns();
    let mut model = Model::new();
    let mut volume = two_pages_checkpointed_and_reopened(&mut harness, &options, &mut model);
    let owner = |slot: u64| 10_000 + slot - 1;
    let page1 = find_owner_pair(&harness.sims[0], 0..4, owner(360), owner(361));
    assert!(page1.len() >= 2, "page 1's blob is on both copies");
    for &(lba, _) in &page1 {
        harness.sims[0].inject(Fault::HangReads { nsid: 1, slba: lba, blocks: 1 });
    }
    let hung_before = harness.sims[0].stats().faults.dropped_completions;
    match volume.checkpoint_now() {
        Err(Error::Command { error, .. }) => assert!(error.is_retryable(), "{error}"),
        Err(Error::Timeout { .. }) => {}
        other => panic!("a checkpoint whose owner reads hang: {other:?}"),
    }
    assert!(harness.sims[0].stats().faults.dropped_completions >= hung_before + 2, "both copies were tried");
    assert_eq!(volume.stats().owners_lost, 0, "a timeout loses no owner");
    harness.sims[0].clear_faults();
    volume.checkpoint_now().expect("the reads answer: the checkpoint is written");
    assert_eq!(volume.stats().owners_lost, 0);
    check(&mut volume, &model);
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    check(&mut volume, &model);
}

#[test]
fn open_reads_a_finished_segment_up_to_its_log_not_to_the_zone_end() {
    // A rotation finishes the zone the log leaves (metadata keeps one
    // active zone per copy), so its write pointer no longer says where
    // the log ends; while the next checkpoint spreads, open needs that
    // segment. It reads up to the log's end (and a run of zero blocks past
    // it), not the whole 4 MiB zone.
    let mut harness = Harness::single(zns(64, 4096));
    let options = volume_options();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    fill_pages(&mut volume, &mut model, 700);
    until_a_checkpoint_begins(&mut volume, &mut model);
    drop(volume);
    harness.restart();
    let zone_lbas = 4096 * 1024 / 512;
    let lbas_read = |harness: &Harness| harness.sims[0].stats().lbas_read;
    let before = lbas_read(&harness);
    let mut volume = harness.open(&options).expect("opens");
    let read = lbas_read(&harness) - before;
    assert!(!volume.recovery().copies_repaired);
    // Both copies' finished zones read whole would take this much alone.
    assert!(read < 2 * zone_lbas, "{read} LBAs read at open");
    check(&mut volume, &model);
    // Commits finish the checkpoint from there, and it all holds.
    for seed in 70_000..70_010 {
        let id = volume.write(0, &pattern(seed, 1), seed).unwrap();
        model.insert(id, (seed, 1));
        volume.commit().unwrap();
    }
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).expect("opens again");
    check(&mut volume, &model);
}

#[test]
fn a_spreading_checkpoint_keeps_pace_with_the_commits_so_open_replays_a_fraction_of_the_table() {
    // Each commit carries its operations' bytes four times over in pages,
    // not one page whatever its size: at 80 one-block extents a commit,
    // at least two pages. Open after the seal replays the operations of
    // the spread only, a fraction of the table (one page a commit would
    // replay one commit's worth per page).
    let mut harness = Harness::single(zns(64, 1024));
    let options = VolumeOptions { checkpoint_pages_per_commit: 64, ..volume_options() };
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    fill_pages(&mut volume, &mut model, 6800);
    let mut seed = 100_000;
    let mut commit_80 = |volume: &mut Volume, model: &mut Model| {
        for _ in 0..80 {
            seed += 1;
            let id = volume.write(0, &pattern(seed, 1), seed).unwrap();
            model.insert(id, (seed, 1));
        }
        volume.commit().unwrap();
    };
    // Any checkpoint the fill began ends; then the next begins.
    let mut commits = 0;
    while volume.stats().checkpoint_pages_pending > 0 {
        commit_80(&mut volume, &mut model);
        commits += 1;
    }
    while volume.stats().checkpoint_pages_pending == 0 {
        commit_80(&mut volume, &mut model);
        commits += 1;
        assert!(commits < 500, "no checkpoint began");
    }
    let pages = volume.stats().checkpoint_pages_pending;
    assert!(pages >= 19, "a checkpoint of {pages} pages left to write: the table has 20 and more");
    let mut spread = 0;
    loop {
        let before = volume.stats().checkpoint_pages_pending;
        if before == 0 {
            break;
        }
        commit_80(&mut volume, &mut model);
        spread += 1;
        let after = volume.stats().checkpoint_pages_pending;
        assert!(after == 0 || after + 2 <= before, "a commit of 80 operations wrote {} pages", before - after);
    }
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    let report = volume.recovery().clone();
    assert_eq!(report.records_replayed, spread + 1, "the checkpoint's first record and the spread's deltas");
    if volume.checksum_areas() {
        // And the seals of the zones the spread filled, each zone's once,
        // with every seal restated by the checkpoint's first record.
        let zones = volume.stats().zones;
        assert!((80 * spread..=80 * spread + 2 * zones).contains(&report.ops_replayed), "{report:?}");
    } else {
        assert_eq!(report.ops_replayed, 80 * spread);
    }
    assert!(spread <= pages.div_ceil(2), "{spread} commits to write {pages} pages");
    assert!(report.pages_loaded >= pages, "{} pages loaded", report.pages_loaded);
    assert!(report.metadata_blocks_read > 0);
    check(&mut volume, &model);
}

#[test]
fn open_reads_one_copy_whole_and_the_other_where_it_may_hold_more() {
    for (mut harness, options) in [single_zns(), single_conventional()] {
        let mut model = Model::new();
        let mut volume = harness.format(&options);
        fill(&mut volume, &mut model, 12);
        let every_copy = volume.scrub_metadata(false).expect("a clean scrub").bytes_read / 4096;
        drop(volume);
        harness.restart();
        let mut volume = harness.open(&options).expect("opens");
        let read = volume.recovery().metadata_blocks_read;
        assert!(!volume.recovery().copies_repaired);
        // Copy 1 is read at its segments' heads and past copy 0's log.
        assert!(read * 4 < every_copy * 3, "open read {read} blocks, both copies whole are {every_copy}");
        check(&mut volume, &model);
        drop(volume);
        harness.restart();

        // A delta rotted on copy 1 where copy 0 holds it whole: open does
        // not read it there (the metadata scrub does, and repairs it).
        let delta = records(&harness.sims[0], 2..4).into_iter().find(|r| !r.checkpoint && r.seq == 6).unwrap();
        harness.sims[0].corrupt_at_rest(1, delta.lba, 100);
        let mut volume = harness.open(&options).expect("opens");
        assert!(!volume.recovery().copies_repaired, "the rotted block was not read");
        check(&mut volume, &model);
        let scrub = volume.scrub_metadata(true).expect("scrub");
        assert_eq!((scrub.bad_records[1], scrub.repaired), (1, true), "{scrub:?}");
        drop(volume);
        harness.restart();

        // The newest record rotted on copy 0: open reads copy 1 from where
        // copy 0's log ends, finds it there, and loses no commit.
        let copy0 = records(&harness.sims[0], 0..2);
        let newest = copy0.iter().max_by_key(|r| (r.generation, r.seq)).unwrap();
        harness.sims[0].corrupt_at_rest(1, newest.lba, 100);
        let mut volume = harness.open(&options).expect("opens from copy 1's tail");
        assert!(volume.recovery().copies_repaired, "copy 0 lacked its newest record");
        check(&mut volume, &model);
        fill(&mut volume, &mut model, 3);
        let every_copy = volume.scrub_metadata(false).expect("a clean scrub").bytes_read / 4096;
        drop(volume);
        harness.restart();

        // A delta's payload rotted on copy 0, its header whole: copy 0's
        // chain reads on past it, so the first recovery sees a hole, and
        // open reads every copy whole and finds the delta on copy 1.
        let copy0 = records(&harness.sims[0], 0..2);
        let generation = copy0.iter().map(|r| r.generation).max().unwrap();
        let delta = copy0.iter().filter(|r| !r.checkpoint && r.generation == generation).min_by_key(|r| r.seq).unwrap();
        harness.sims[0].corrupt_at_rest(1, delta.lba, 8 * 100);
        let mut volume = harness.open(&options).expect("opens from both copies");
        assert!(volume.recovery().copies_repaired, "copy 0 lacked a record");
        assert!(volume.recovery().metadata_blocks_read >= every_copy, "every copy was read whole");
        check(&mut volume, &model);
    }
}

/// A record that one mirror member holds with the same numbers (and the
/// same session) as the other's, but other contents, is two histories:
/// open refuses the pair with `Diverged`, writing nothing, where it used
/// to take the first copy's and rewrite the other's as a bad record. Each
/// device still opens alone.
#[test]
fn a_record_two_copies_hold_with_the_same_numbers_but_other_contents_is_refused() {
    let (mut harness, options) = mirror();
    let mut volume = harness.format(&options);
    let mut model = Model::new();
    fill(&mut volume, &mut model, 3);
    drop(volume.close().unwrap());
    harness.restart();
    // The last delta on device 1 whose first operation adds an extent: its
    // extent's owner changed, every checksum made to hold again.
    let sim = &harness.sims[1];
    let forged = records(sim, 0..4).into_iter().rev().find_map(|record| {
        let mut block = sim.read_block(1, record.lba);
        for lba in record.lba + 1..record.lba + LPB {
            block.extend(sim.read_block(1, lba));
        }
        let payload_bytes = u64::from_le_bytes(block[40..48].try_into().unwrap()) as usize;
        // A delta: ops length (u64), count (u32), then the first op's code.
        let add_first = !record.checkpoint && payload_bytes + 64 <= block.len() && block[64 + 12] == 1;
        add_first.then(|| {
            let owner = 64 + 12 + 1 + 8;
            block[owner] ^= 0x5a;
            let payload_crc = zoned_allocator::checksum::crc(&block[64..64 + payload_bytes]);
            block[48..52].copy_from_slice(&payload_crc.to_le_bytes());
            let header_crc = zoned_allocator::checksum::crc(&block[..60]);
            block[60..64].copy_from_slice(&header_crc.to_le_bytes());
            (record.lba, block)
        })
    });
    let (lba, block) = forged.expect("a delta that adds an extent first");
    sim.write_at_rest(1, lba, &block);
    let before = device_writes(&harness);
    match harness.open(&options) {
        Err(Error::Diverged { sides }) => assert_eq!(sides.len(), 2),
        other => panic!("expected Diverged, got {:?}", other.map(|v| v.recovery().clone())),
    }
    assert_eq!(device_writes(&harness), before, "the refused open wrote");
    harness.restart();
    let degraded = VolumeOptions { degraded: true, ..options };
    let mut volume = Volume::open(vec![harness.devices().remove(0)], &degraded).expect("device 0 alone");
    check(&mut volume, &model);
}

#[test]
fn a_volume_of_the_format_before_lanes_per_copy_is_refused_naming_its_version() {
    // Format 11 records each copy's lane; a format-10 volume (its labels
    // say 10, their checksums hold) is refused, named, and left alone.
    for (mut harness, options) in [single_conventional(), mirror()] {
        let mut volume = harness.format(&options);
        fill(&mut volume, &mut Model::new(), 2);
        drop(volume);
        harness.restart();
        let mut relabelled = 0;
        for sim in &harness.sims {
            for lba in (0..4 * ZONE_LBAS).step_by(LPB as usize) {
                let mut block: Vec<u8> = (lba..lba + LPB).flat_map(|l| sim.read_block(1, l)).collect();
                if &block[..8] != b"ZNVLABEL" || block[8] != zoned_allocator::FORMAT_VERSION {
                    continue;
                }
                block[8] = 10;
                let crc = zoned_allocator::checksum::crc(&block[..4092]);
                block[4092..].copy_from_slice(&crc.to_le_bytes());
                sim.write_at_rest(1, lba, &block);
                relabelled += 1;
            }
        }
        assert!(relabelled >= 4, "labels found: {relabelled}");
        let before = device_writes(&harness);
        let error = harness.open(&options).expect_err("a format-10 volume opens");
        assert!(matches!(error, Error::UnsupportedVersion { version: 10, .. }), "{error:?}");
        let said = error.to_string();
        assert!(said.contains("format version 10") && said.contains("the build that wrote it"), "{said}");
        assert_eq!(device_writes(&harness), before, "a refused open wrote to a device");
        assert_eq!(Volume::probe(&mut harness.devices()[0]), DeviceState::OtherVersion(10));
    }
}

/// Frees the first extent of `model`.
fn free_first(volume: &mut Volume, model: &mut Model) {
    let (&id, _) = model.iter().next().unwrap();
    volume.free(id).unwrap();
    model.remove(&id);
}

/// Frees one extent, and the commit that journals it fails on a write
/// fault over all of `sim`'s namespace 1; then the next commit, of one
/// more freed, must succeed.
fn fail_one_commit(volume: &mut Volume, model: &mut Model, sim: &Simulator, context: &str) {
    free_first(volume, model);
    sim.inject(Fault::WriteFault { nsid: 1, slba: 0, blocks: 64 << 11 });
    let failed = volume.commit();
    assert!(matches!(failed, Err(Error::Command { .. })), "{context}: {failed:?}");
    sim.clear_faults();
    free_first(volume, model);
    volume.commit().unwrap_or_else(|e| panic!("{context}: the commit after a failed journal write: {e}"));
}

/// A conventional namespace of 64 MiB in zones of 64 KiB, every checksum
/// in the map: segments of a few zones, which one-block extents fill.
fn small_segments() -> (Harness, VolumeOptions) {
    let options = VolumeOptions {
        software_zone_bytes: Some(64 << 10),
        checksums: zoned_allocator::ChecksumStore::Map,
        ..volume_options()
    };
    (Harness::single(conventional(64)), options)
}

#[test]
fn a_failed_metadata_write_at_any_checkpoint_size_is_retried_by_the_next_commit() {
    // A conventional namespace of 64 MiB in zones of 64 KiB, every checksum
    // in the map: one-block extents fill its checkpoint up to 7/8 of a
    // segment (its share), as a volume of extents far smaller than its data
    // unit does.
    let (mut harness, options) = small_segments();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    let mut seed = 0;
    let mut fill = |volume: &mut Volume, model: &mut Model, most: usize| loop {
        seed += 1;
        match volume.write(0, &pattern(seed, 1), seed) {
            Ok(id) => {
                model.insert(id, (seed, 1));
            }
            Err(error) => break Some(error),
        }
        if seed % 512 == 0 {
            volume.commit().expect("commit");
        }
        if model.len() >= most {
            break None;
        }
    };
    // A checkpoint of about a fifth of a segment spreads over commits: a
    // journal write fails at its first delta, then halfway through. The
    // retry writes a whole checkpoint beside the spread, in its segment.
    assert!(fill(&mut volume, &mut model, 3000).is_none());
    volume.commit().expect("commit");
    for halfway in [false, true] {
        let context = format!("spreading, halfway {halfway}");
        let mut commits = 0;
        while volume.stats().checkpoint_pages_pending == 0 {
            free_first(&mut volume, &mut model);
            volume.commit().expect("commit");
            commits += 1;
            assert!(commits < 4000, "{context}: no checkpoint began");
        }
        let pages = volume.stats().checkpoint_pages_pending;
        if halfway {
            while volume.stats().checkpoint_pages_pending > pages / 2 {
                free_first(&mut volume, &mut model);
                volume.commit().expect("commit");
            }
        }
        assert!(volume.stats().checkpoint_pages_pending > 0, "{context}: the checkpoint still spreads");
        fail_one_commit(&mut volume, &mut model, &harness.sims[0], &context);
    }
    // Filled: the checkpoint is past half a segment. It is written whole
    // when the log moves on, never spread, and not at every commit (it
    // began at every other commit when it spread).
    let error = fill(&mut volume, &mut model, usize::MAX).expect("full");
    assert!(matches!(error, Error::NoSpace(_)), "{error:?}");
    volume.commit().expect("the commit after the fill");
    let before = volume.stats().checkpoints;
    for _ in 0..100 {
        free_first(&mut volume, &mut model);
        volume.commit().expect("commit");
        assert_eq!(volume.stats().checkpoint_pages_pending, 0, "the largest checkpoint is written whole");
    }
    let begun = volume.stats().checkpoints - before;
    assert!(begun <= 10, "{begun} checkpoints in 100 commits of one operation each");
    // A journal write fails at a commit in the log, and at one that
    // begins a checkpoint (those that follow a failure do).
    for round in 0..12 {
        for _ in 0..round % 4 {
            free_first(&mut volume, &mut model);
            volume.commit().expect("commit");
        }
        fail_one_commit(&mut volume, &mut model, &harness.sims[0], &format!("filled, round {round}"));
    }
    volume.check_invariants();
    reopen_and_check(&mut harness, volume, &options, &model);
}

#[test]
fn a_large_commit_at_any_place_in_the_log_of_a_whole_checkpoint_commits() {
    // A volume of one-block extents filled to three fifths: its checkpoint
    // is past 3/8 of a segment, so it is written whole when the log moves
    // on, and the log runs to the segment's end. Then the rest of the
    // volume in one commit (a quarter of a segment of operations), at every
    // place in the log: where the log has no room for it, the commit goes
    // in a whole checkpoint in the other segment, beside every page. It
    // must commit there, and so must the commits after it.
    let fill = |volume: &mut Volume, model: &mut Model, seed: &mut u64, most: usize, commit_every: u64| loop {
        if model.len() >= most {
            break;
        }
        *seed += 1;
        match volume.write(0, &pattern(*seed, 1), *seed) {
            Ok(id) => {
                model.insert(id, (*seed, 1));
            }
            Err(Error::NoSpace(_)) => break,
            Err(error) => panic!("filling: {error}"),
        }
        if (*seed).is_multiple_of(commit_every) {
            volume.commit().expect("commit");
        }
    };
    let full = {
        let (harness, options) = small_segments();
        let mut volume = harness.format(&options);
        let mut model = Model::new();
        fill(&mut volume, &mut model, &mut 0, usize::MAX, 512);
        model.len()
    };
    // Four small commits more each time move the large one along the log.
    for small in 0..32 {
        let (mut harness, options) = small_segments();
        let mut model = Model::new();
        let mut volume = harness.format(&options);
        let mut seed = 0;
        fill(&mut volume, &mut model, &mut seed, full * 3 / 5, 512);
        volume.commit().expect("the commit at three fifths");
        for _ in 0..small * 4 {
            free_first(&mut volume, &mut model);
            volume.commit().expect("a small commit");
        }
        fill(&mut volume, &mut model, &mut seed, usize::MAX, u64::MAX);
        let context = format!("after {} small commits", small * 4);
        volume.commit().unwrap_or_else(|e| panic!("{context}: the commit to the end: {e}"));
        for round in 0..20 {
            free_first(&mut volume, &mut model);
            volume.commit().unwrap_or_else(|e| panic!("{context}: commit {round} after: {e}"));
        }
        volume.check_invariants();
        reopen_and_check(&mut harness, volume, &options, &model);
    }
}

#[test]
fn an_extent_freed_before_the_commit_that_journals_it_reopens() {
    // A write's checksums are journaled from the volume's map at the
    // commit: one freed before it still journals its own (with the map
    // store, open refuses an addition without them).
    let setups = [single_zns, single_conventional, mirror];
    for (setup, store) in setups.iter().flat_map(|&s| {
        [zoned_allocator::ChecksumStore::Map, zoned_allocator::ChecksumStore::Area].map(move |store| (s, store))
    }) {
        let (mut harness, options) = setup();
        let options = VolumeOptions { checksums: store, ..options };
        let mut model = Model::new();
        let mut volume = harness.format(&options);
        fill(&mut volume, &mut model, 1);
        let mut ids = Vec::new();
        for seed in 100..104u64 {
            let blocks = 1 + seed as usize % 3;
            let id = volume.write(0, &pattern(seed, blocks), seed).unwrap();
            model.insert(id, (seed, blocks));
            ids.push(id);
        }
        // Freed before any commit: one written now, one written before.
        for id in [ids[1], *model.keys().next().unwrap()] {
            volume.free(id).unwrap();
            model.remove(&id);
        }
        volume.commit().unwrap();
        reopen_and_check(&mut harness, volume, &options, &model);
    }
}

#[test]
fn a_failed_metadata_write_under_large_commits_is_retried_by_the_next_commit() {
    // Commits of 2,000 one-block writes and as many frees: each commit's
    // operations are about a tenth of a segment, and the checkpoint a third.
    // A checkpoint spread under such commits is written at once by the
    // first of them; a journal write failing then found no room for the
    // whole checkpoint that supersedes it (beside the spread, with two
    // commits' operations), and every commit after failed. It is written
    // whole now.
    let (mut harness, options) = small_segments();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    let mut seed = 0u64;
    let mut big_commit = |volume: &mut Volume, model: &mut Model, fail: Option<&Simulator>| {
        for _ in 0..2000 {
            seed += 1;
            let id = volume.write(0, &pattern(seed, 1), seed).expect("write");
            model.insert(id, (seed, 1));
        }
        while model.len() > 6000 {
            free_first(volume, model);
        }
        match fail {
            None => volume.commit().map(drop),
            Some(sim) => {
                sim.inject(Fault::WriteFault { nsid: 1, slba: 0, blocks: 64 << 11 });
                let failed = volume.commit();
                sim.clear_faults();
                assert!(matches!(failed, Err(Error::Command { .. })), "{failed:?}");
                Ok(())
            }
        }
    };
    for _ in 0..5 {
        big_commit(&mut volume, &mut model, None).expect("commit");
    }
    // The journal write fails at the first commit after a checkpoint
    // began (spread, or written whole: the room decides), then the second,
    // and so on; the commit after each must succeed.
    for k in 0..4 {
        let begun = volume.stats().checkpoints;
        let mut commits = 0;
        while volume.stats().checkpoints == begun {
            big_commit(&mut volume, &mut model, None).expect("commit");
            commits += 1;
            assert!(commits < 50, "no checkpoint began");
        }
        for _ in 0..k {
            big_commit(&mut volume, &mut model, None).expect("commit");
        }
        big_commit(&mut volume, &mut model, Some(&harness.sims[0])).unwrap();
        big_commit(&mut volume, &mut model, None)
            .unwrap_or_else(|e| panic!("failure at commit {k} after a checkpoint began: the commit after it: {e}"));
    }
    volume.check_invariants();
    reopen_and_check(&mut harness, volume, &options, &model);
}

#[test]
fn a_record_shared_by_devices_of_one_controller_and_failing_on_one_of_them_is_retried() {
    // Three namespaces of one controller: one I/O address space, so the
    // three metadata copies take a record from one copy into DMA memory.
    // The second device's write of it fails: that member is given up,
    // named with why, and the commit stands on the other two; every commit
    // after it too, and every extent reads back after a reopen without it.
    let namespace = nvme_driver::sim::NamespaceConfig::nvm(64 << 11, 512);
    let config = (0..3).fold(nvme_driver::sim::SimConfig::empty(), |c, _| c.with_namespace(namespace.clone()));
    let mut harness = Harness::new(vec![config], (1..=3).map(|nsid| (0, nsid)).collect());
    let options = VolumeOptions { profile: Profile::Mirror, software_zone_bytes: Some(1 << 20), ..volume_options() };
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    fill(&mut volume, &mut model, 3);
    free_first(&mut volume, &mut model);
    harness.sims[0].inject(Fault::WriteFault { nsid: 2, slba: 0, blocks: 64 << 11 });
    let committed = volume.commit();
    harness.sims[0].clear_faults();
    committed.expect("the commit stands on the other two metadata copies");
    let status = volume.status();
    assert_eq!((status.state, status.devices[1].state), (VolumeState::Degraded, MemberState::Failed), "{status:?}");
    let why = status.devices[1].why.as_deref().unwrap_or_default();
    assert!(why.contains("a commit's write failed") && why.contains("Write Fault"), "{why}");
    assert_eq!(status.devices[0].state, MemberState::Online);
    for round in 0..4u64 {
        free_first(&mut volume, &mut model);
        volume.commit().unwrap_or_else(|e| panic!("round {round}: a commit after the failed journal write: {e}"));
    }
    volume.check_invariants();
    drop(volume);
    harness.restart();
    let degraded = VolumeOptions { degraded: true, ..options.clone() };
    let mut volume = harness.open(&degraded).expect("reopens");
    check(&mut volume, &model);
}

#[test]
fn a_record_written_to_one_copy_and_failing_on_the_other_of_one_namespace_is_retried() {
    // Both metadata copies of a volume of one namespace take a record from
    // one copy into DMA memory, one after the other. The second copy's
    // write fails (its segments are zones 2 and 3): the commit fails with
    // a typed error, the next commit supersedes the record, and every
    // extent reads back after a reopen.
    let (mut harness, options) = single_zns();
    let mut model = Model::new();
    let mut volume = harness.format(&options);
    fill(&mut volume, &mut model, 2);
    for round in 0..6u64 {
        let id = volume.write(0, &pattern(2000 + round, 2), 2000 + round).unwrap();
        model.insert(id, (2000 + round, 2));
        harness.sims[0].inject(Fault::WriteFault { nsid: 1, slba: 2 * ZONE_LBAS, blocks: 2 * ZONE_LBAS });
        let failed = volume.commit();
        harness.sims[0].clear_faults();
        assert!(matches!(failed, Err(Error::Command { .. })), "round {round}: {failed:?}");
        // The first copy took the record; the second did not.
        let newest = |zones| records(&harness.sims[0], zones).iter().map(|r| (r.generation, r.seq)).max();
        assert!(newest(0..2) > newest(2..4), "round {round}: copy 0 {:?}, copy 1 {:?}", newest(0..2), newest(2..4));
        volume.commit().unwrap_or_else(|e| panic!("round {round}: the commit after: {e}"));
    }
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).expect("reopens");
    assert!(volume.recovery().dropped.is_none());
    check(&mut volume, &model);
}
