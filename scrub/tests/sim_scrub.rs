//! The scrub engine on the simulator: clean volumes, corruption and media
//! errors in one copy or both, repair in place and by relocation, repair
//! writes that fail, read-only runs, resume after a restart or a power cut
//! with what was found before it, coverage and the outcome of a pass, the
//! ablation, and thousands of seeded fault patterns with exactly predicted
//! reports.

use nvme_testkit::harness as support;

use nvme_driver::sim::Fault;
use nvme_scrub::{scrub, Checkpoint, Control, Outcome, RepairError, Report, ScrubOptions};
use nvme_testkit::{data::pattern, Prng};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use support::{conventional, volume_options, zns, Harness};
use zoned_allocator::zones::ZoneUse;
use zoned_allocator::{Location, Profile, Volume, VolumeOptions};

fn run(volume: &mut Volume, options: &ScrubOptions) -> Report {
    scrub(volume, options, &Control::new(), None, &mut |_| {}, &mut |_| {}).expect("scrub")
}

/// Writes `count` extents of 1..=`max_blocks` blocks; returns id → data.
fn fill(volume: &mut Volume, count: u64, max_blocks: u64, seed: u64) -> BTreeMap<u64, Vec<u8>> {
    let mut rng = Prng::new(seed);
    let mut extents = BTreeMap::new();
    for i in 0..count {
        let data = pattern(seed * 1000 + i, 1 + rng.below(max_blocks) as usize);
        let id = volume.write(0, &data, i).unwrap();
        extents.insert(id, data);
    }
    volume.commit().unwrap();
    extents
}

fn check_all(volume: &mut Volume, extents: &BTreeMap<u64, Vec<u8>>) {
    for (&id, data) in extents {
        let mut back = vec![0u8; data.len()];
        volume.read(id, &mut back).unwrap_or_else(|e| panic!("extent {id}: {e}"));
        assert!(&back == data, "extent {id} reads back wrong");
    }
}

/// Flips `bit` of the first block of copy `lane` of extent `id`, at rest.
fn corrupt(harness: &Harness, volume: &Volume, id: u64, lane: usize, bit: u64) {
    let location = volume.location(id, lane).unwrap();
    let sim = if harness.sims.len() > 1 { lane } else { 0 };
    harness.sims[sim].corrupt_at_rest(1, volume.lba(lane, location), bit);
}

/// Makes every write to `lane`'s empty zones (where a relocation goes)
/// fail with Write Fault, on a volume with one lane per simulator.
fn fail_writes_to_empty_zones(harness: &Harness, volume: &Volume, lane: usize) {
    let table = volume.zone_table(lane);
    for zone in 0..table.zone_count() {
        let entry = table.zone(zone);
        if entry.usage == ZoneUse::Empty {
            let slba = volume.lba(lane, Location { zone, offset: 0 });
            harness.sims[lane].inject(Fault::WriteFault { nsid: 1, slba, blocks: u64::from(entry.capacity) * 8 });
        }
    }
}

fn mirror_zns() -> (Harness, VolumeOptions) {
    (
        Harness::new(vec![zns(64, 1024), zns(64, 1024)], vec![(0, 1), (1, 1)]),
        VolumeOptions { profile: Profile::Mirror, ..volume_options() },
    )
}

#[test]
fn a_clean_volume_reads_everything_in_merged_requests() {
    let (harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 300, 8, 1);
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!(report.errors.total_blocks(), 0, "{report}");
    assert_eq!(report.bytes_read, report.bytes_total);
    assert_eq!(report.bytes_verified, report.bytes_total);
    let bytes: usize = extents.values().map(Vec::len).sum();
    assert_eq!(report.bytes_total, 2 * bytes as u64);
    // Extents of up to 32 KiB, merged into requests many times larger.
    let mean_extent = bytes as f64 / extents.len() as f64;
    assert!(report.mean_request_bytes > 4.0 * mean_extent, "{report}");
    // One index walk per refill of the plan, not one per extent or block.
    assert!(report.plan_lookups * 20 < extents.len() as u64, "{report}");
    assert_eq!(report.corrected_blocks, 0);
}

#[test]
fn flipped_bytes_in_one_copy_are_repaired_by_relocation_on_zns() {
    let (harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 100, 8, 2);
    let victims: Vec<u64> = extents.keys().copied().step_by(10).collect();
    let mut before = BTreeMap::new();
    for &id in &victims {
        let location = volume.location(id, 0).unwrap();
        before.insert(id, location);
        harness.sims[0].corrupt_at_rest(1, volume.lba(0, location), 7);
    }
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!(report.errors.checksum, victims.len() as u64, "{report}");
    assert_eq!(report.corrected_blocks, victims.len() as u64, "{report}");
    assert!(report.uncorrectable.is_empty());
    for &id in &victims {
        assert_ne!(volume.location(id, 0), Some(before[&id]), "extent {id} was repaired in place on ZNS");
    }
    let again = run(&mut volume, &ScrubOptions::default());
    assert_eq!(again.errors.total_blocks(), 0, "second scrub: {again}");
    check_all(&mut volume, &extents);
    // The relocations are committed: they survive a restart.
    drop(volume);
    let mut harness = harness;
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    assert_eq!(run(&mut volume, &ScrubOptions::default()).errors.total_blocks(), 0);
}

#[test]
fn conventional_copies_are_repaired_in_place() {
    let harness = Harness::single(conventional(64));
    let options = VolumeOptions { profile: Profile::Dup, software_zone_bytes: Some(1 << 20), ..volume_options() };
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 50, 8, 3);
    let id = *extents.keys().nth(7).unwrap();
    let location = volume.location(id, 1).unwrap();
    harness.sims[0].corrupt_at_rest(1, volume.lba(1, location) + 8, 3);
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!((report.errors.checksum, report.corrected_blocks), (1, 1), "{report}");
    assert_eq!(volume.location(id, 1), Some(location), "repaired in place");
    assert_eq!(run(&mut volume, &ScrubOptions::default()).errors.total_blocks(), 0);
    check_all(&mut volume, &extents);
}

#[test]
fn media_errors_are_typed_narrowed_and_repaired() {
    let (harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 60, 8, 4);
    let id = *extents.keys().nth(20).unwrap();
    let lba = volume.lba(1, volume.location(id, 1).unwrap());
    harness.sims[1].inject(Fault::UnrecoveredRead { nsid: 1, slba: lba, blocks: 8 });
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!(report.errors.failed_reads, 1, "{report}");
    let blocks = extents[&id].len() as u64 / 4096;
    assert_eq!(report.errors.media.get("Unrecovered Read Error"), Some(&blocks), "{report}");
    assert_eq!(report.corrected_blocks, blocks, "{report}");
    assert_eq!(run(&mut volume, &ScrubOptions::default()).errors.total_blocks(), 0);
    check_all(&mut volume, &extents);
}

#[test]
fn both_copies_bad_is_uncorrectable_and_changes_nothing() {
    let (harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 40, 4, 5);
    let id = *extents.keys().nth(5).unwrap();
    let (a, b) = (volume.location(id, 0).unwrap(), volume.location(id, 1).unwrap());
    harness.sims[0].corrupt_at_rest(1, volume.lba(0, a), 1);
    harness.sims[1].corrupt_at_rest(1, volume.lba(1, b), 2);
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!(report.corrected_blocks, 0, "{report}");
    let lanes: BTreeSet<usize> = report.uncorrectable.iter().map(|u| u.lane).collect();
    assert_eq!(lanes, BTreeSet::from([0, 1]), "{report}");
    for u in &report.uncorrectable {
        assert_eq!((u.extent, u.owner, u.blocks.clone()), (id, Some(5), vec![0]));
    }
    assert_eq!((volume.location(id, 0), volume.location(id, 1)), (Some(a), Some(b)), "nothing moved");
    assert_eq!(volume.uncommitted_ops(), 0);
}

#[test]
fn read_only_detects_and_changes_nothing() {
    let (harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 40, 4, 6);
    let id = *extents.keys().next().unwrap();
    let location = volume.location(id, 0).unwrap();
    harness.sims[0].corrupt_at_rest(1, volume.lba(0, location), 9);
    let read_only = ScrubOptions { repair: false, ..ScrubOptions::default() };
    let report = run(&mut volume, &read_only);
    assert_eq!((report.errors.checksum, report.corrected_blocks), (1, 0), "{report}");
    assert_eq!(volume.location(id, 0), Some(location));
    assert_eq!(run(&mut volume, &read_only).errors.checksum, 1, "still there");
}

#[test]
fn cancel_and_resume_after_a_restart_rereads_nothing() {
    let (mut harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 400, 16, 7);
    let total: u64 = 2 * extents.values().map(|d| d.len() as u64).sum::<u64>();
    let control = Control::new();
    let scrub_options =
        ScrubOptions { checkpoint_every_bytes: 1 << 20, max_request_bytes: Some(128 << 10), ..ScrubOptions::default() };
    let mut saved: Option<Checkpoint> = None;
    let first = scrub(&mut volume, &scrub_options, &control, None, &mut |_| {}, &mut |c| {
        if c.bytes_done >= total / 3 {
            control.cancel();
        }
        saved = Some(c.clone());
    })
    .unwrap();
    assert!(first.cancelled, "{first}");
    let checkpoint = saved.expect("a checkpoint");
    assert!(!checkpoint.finished);
    assert!(first.bytes_read < total, "{first}");
    // Persisted as JSON, read back by a new process.
    let text = serde_json::to_string(&checkpoint).unwrap();
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    let checkpoint: Checkpoint = serde_json::from_str(&text).unwrap();
    let second =
        scrub(&mut volume, &scrub_options, &Control::new(), Some(&checkpoint), &mut |_| {}, &mut |_| {}).unwrap();
    assert!(!second.cancelled && second.resumed);
    assert_eq!(first.bytes_read + second.bytes_read, total, "first {first}\nsecond {second}");
    // A checkpoint of another volume is refused.
    let other = Checkpoint { volume_id: checkpoint.volume_id ^ 1, ..checkpoint };
    assert!(scrub(&mut volume, &scrub_options, &Control::new(), Some(&other), &mut |_| {}, &mut |_| {}).is_err());
}

/// Every extent reads back, save those with a block no copy holds.
fn check_all_but(volume: &mut Volume, damage: &Damage) {
    let lost: BTreeSet<u64> = damage.uncorrectable.iter().map(|&(id, _)| id).collect();
    let extents = damage.extents.iter().filter(|(id, _)| !lost.contains(id)).map(|(&id, d)| (id, d.clone())).collect();
    check_all(volume, &extents);
}

#[test]
fn the_queue_stays_deep_and_the_ablation_does_not() {
    let (harness, options) = {
        let configs = vec![zns(64, 1024).with_completion_delay(2, 6), zns(64, 1024).with_completion_delay(2, 6)];
        (Harness::new(configs, vec![(0, 1), (1, 1)]), VolumeOptions { profile: Profile::Mirror, ..volume_options() })
    };
    let mut volume = harness.format(&options);
    fill(&mut volume, 600, 32, 8);
    let deep = run(&mut volume, &ScrubOptions { verify: false, ..ScrubOptions::default() });
    let ablation = run(
        &mut volume,
        &ScrubOptions {
            verify: false,
            submit_and_wait: true,
            max_request_bytes: Some(64 << 10),
            ..ScrubOptions::default()
        },
    );
    assert!(deep.mean_queue_depth > 16.0, "{deep}");
    assert!(ablation.mean_queue_depth <= 1.01, "{ablation}");
    assert!(ablation.mean_request_bytes <= 65536.0, "{ablation}");
    assert_eq!(deep.bytes_read, ablation.bytes_read);
}

#[test]
fn the_rate_limit_is_not_exceeded() {
    let (harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    fill(&mut volume, 200, 32, 9);
    let limit = 100.0;
    let report = run(&mut volume, &ScrubOptions { rate_limit_mib_s: Some(limit), ..ScrubOptions::default() });
    // Time on a shared machine only ever slows the scrub: the ceiling is
    // the property.
    assert!(report.rate_mib_s <= limit * 1.1, "{report}");
    assert!(report.rate_mib_s >= limit * 0.5, "{report}");
}

/// The report names exactly one failed repair: block 0 of copy `lane` of
/// extent `id`, whose write failed with Write Fault.
fn assert_write_fault(report: &Report, id: u64, lane: usize) {
    let [failed] = report.repair_failed.as_slice() else { panic!("one failed repair expected: {report}") };
    assert_eq!(
        (failed.extent, failed.owner, failed.lane, failed.blocks.clone()),
        (id, Some(id - 1), lane, vec![0]),
        "{report}"
    );
    let write_fault = RepairError::Status { command: "Write".into(), sct: 2, sc: 0x80, name: "Write Fault".into() };
    assert_eq!(failed.error, write_fault, "{report}");
    assert!(report.to_string().contains("Write failed: Write Fault"), "{report}");
}

#[test]
fn a_failed_relocation_write_is_reported_and_the_other_repairs_are_committed() {
    let (mut harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 100, 8, 10);
    let ids: Vec<u64> = extents.keys().copied().collect();
    // Copy 0 of one extent, whose relocation will fail; copy 1 of three
    // others, repaired after that failure.
    let (stuck, healed) = (ids[10], [ids[30], ids[50], ids[70]]);
    corrupt(&harness, &volume, stuck, 0, 5);
    for &id in &healed {
        corrupt(&harness, &volume, id, 1, 6);
    }
    let before: Vec<Location> = healed.iter().map(|&id| volume.location(id, 1).unwrap()).collect();
    fail_writes_to_empty_zones(&harness, &volume, 0);
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!((report.errors.checksum, report.corrected_blocks), (4, 3), "{report}");
    assert!(report.uncorrectable.is_empty(), "{report}");
    assert_write_fault(&report, stuck, 0);
    let after: Vec<Location> = healed.iter().map(|&id| volume.location(id, 1).unwrap()).collect();
    for (i, &id) in healed.iter().enumerate() {
        assert_ne!(after[i], before[i], "extent {id} was not relocated");
    }
    check_all(&mut volume, &extents);
    // A new process: the relocations were committed, and nothing was lost.
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    check_all(&mut volume, &extents);
    for (i, &id) in healed.iter().enumerate() {
        assert_eq!(volume.location(id, 1), Some(after[i]), "extent {id}: the relocation was not committed");
    }
    let read_only = run(&mut volume, &ScrubOptions { repair: false, ..ScrubOptions::default() });
    assert_eq!(read_only.errors.checksum, 1, "only the copy whose repair failed is still bad: {read_only}");
    // Once writes work again, the next scrub repairs it.
    harness.sims[0].clear_faults();
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!((report.errors.checksum, report.corrected_blocks), (1, 1), "{report}");
    assert_eq!(run(&mut volume, &ScrubOptions::default()).errors.total_blocks(), 0);
    check_all(&mut volume, &extents);
}

#[test]
fn a_failed_repair_write_in_place_is_reported_and_the_scrub_goes_on() {
    let mut harness = Harness::single(conventional(64));
    let options = VolumeOptions { profile: Profile::Dup, software_zone_bytes: Some(1 << 20), ..volume_options() };
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 50, 8, 11);
    let ids: Vec<u64> = extents.keys().copied().collect();
    // Copy 1 of `stuck` cannot be written; the others are repaired, in
    // copy 1 after the failure too.
    let stuck = ids[5];
    for (id, lane) in [(ids[2], 0), (stuck, 1), (ids[20], 1), (ids[40], 0)] {
        corrupt(&harness, &volume, id, lane, 1);
    }
    let slba = volume.lba(1, volume.location(stuck, 1).unwrap());
    harness.sims[0].inject(Fault::WriteFault { nsid: 1, slba, blocks: extents[&stuck].len() as u64 / 512 });
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!((report.errors.checksum, report.corrected_blocks), (4, 3), "{report}");
    assert!(report.uncorrectable.is_empty(), "{report}");
    assert_write_fault(&report, stuck, 1);
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    check_all(&mut volume, &extents);
    let read_only = run(&mut volume, &ScrubOptions { repair: false, ..ScrubOptions::default() });
    assert_eq!(read_only.errors.checksum, 1, "only the copy whose repair failed is still bad: {read_only}");
}

/// Damage spread over a mirrored volume of 400 extents, and what a whole
/// scrub of it must report.
struct Damage {
    extents: BTreeMap<u64, Vec<u8>>,
    checksum: u64,
    media: u64,
    corrected: u64,
    /// (extent, copy) with no good copy.
    uncorrectable: BTreeSet<(u64, usize)>,
}

fn damage(harness: &Harness, volume: &mut Volume) -> Damage {
    let extents = fill(volume, 400, 16, 12);
    let ids: Vec<u64> = extents.keys().copied().collect();
    let (mut checksum, mut corrected) = (0, 0);
    // One block of copy 0 in every 25th extent, of copy 1 in every 40th
    // (never the same extent).
    for (lane, first, step) in [(0, 3, 25), (1, 15, 40)] {
        for &id in ids.iter().skip(first).step_by(step) {
            corrupt(harness, volume, id, lane, 100 + id);
            checksum += 1;
            corrected += 1;
        }
    }
    // Early in copy 0: an extent bad in both copies, and one unreadable.
    let both = ids[9];
    corrupt(harness, volume, both, 0, 7);
    corrupt(harness, volume, both, 1, 7);
    checksum += 2;
    let unreadable = ids[17];
    let slba = volume.lba(0, volume.location(unreadable, 0).unwrap());
    harness.sims[0].inject(Fault::UnrecoveredRead { nsid: 1, slba, blocks: 1 });
    let media = extents[&unreadable].len() as u64 / 4096;
    corrected += media;
    Damage { extents, checksum, media, corrected, uncorrectable: BTreeSet::from([(both, 0), (both, 1)]) }
}

fn assert_reports_all(report: &Report, expected: &Damage) {
    assert_eq!(report.errors.checksum, expected.checksum, "{report}");
    assert_eq!(report.errors.media.get("Unrecovered Read Error"), Some(&expected.media), "{report}");
    assert_eq!(report.corrected_blocks, expected.corrected, "{report}");
    let uncorrectable: BTreeSet<(u64, usize)> = report.uncorrectable.iter().map(|u| (u.extent, u.lane)).collect();
    assert_eq!(uncorrectable, expected.uncorrectable, "{report}");
}

#[test]
fn errors_found_before_a_cancel_are_reported_after_the_resume() {
    let (mut harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let expected = damage(&harness, &mut volume);
    let total = volume.valid_blocks() * 2 * 4096;
    let scrub_options =
        ScrubOptions { checkpoint_every_bytes: 1 << 20, max_request_bytes: Some(128 << 10), ..ScrubOptions::default() };
    let control = Control::new();
    let mut saved: Option<Checkpoint> = None;
    let first = scrub(&mut volume, &scrub_options, &control, None, &mut |_| {}, &mut |c| {
        if c.bytes_done >= total / 3 {
            control.cancel();
        }
        saved = Some(c.clone());
    })
    .unwrap();
    assert!(first.cancelled, "{first}");
    assert!(first.errors.checksum > 0 && first.errors.checksum < expected.checksum, "{first}");
    let text = serde_json::to_string(&saved.expect("a checkpoint")).unwrap();
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    let checkpoint: Checkpoint = serde_json::from_str(&text).unwrap();
    let mut last: Option<Checkpoint> = None;
    let second = scrub(&mut volume, &scrub_options, &Control::new(), Some(&checkpoint), &mut |_| {}, &mut |c| {
        last = Some(c.clone())
    })
    .unwrap();
    assert!(second.resumed && !second.cancelled, "{second}");
    // The copies repaired by the first run may have moved past the
    // checkpoint, where the second reads them again.
    assert!(first.bytes_read + second.bytes_read >= total, "first {first}\nsecond {second}");
    assert_reports_all(&second, &expected);
    // The last checkpoint holds it all too, every suspect resolved.
    let last = last.expect("a checkpoint");
    assert!(last.finished && last.findings.suspects.is_empty(), "{last:?}");
    assert_eq!((last.findings.errors, last.findings.corrected_blocks), (second.errors.clone(), expected.corrected));
    // Everything but the blocks with no good copy was repaired.
    check_all_but(&mut volume, &expected);
    let again = run(&mut volume, &ScrubOptions::default());
    assert_eq!((again.errors.checksum, again.corrected_blocks), (2, 0), "{again}");
}

#[test]
fn errors_in_a_checkpoint_are_repaired_after_a_power_cut() {
    let (mut harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let expected = damage(&harness, &mut volume);
    let total = volume.valid_blocks() * 2 * 4096;
    let scrub_options = ScrubOptions {
        checkpoint_every_bytes: 1 << 20,
        max_request_bytes: Some(128 << 10),
        timeout: Duration::from_millis(200),
        ..ScrubOptions::default()
    };
    // The power fails right after a checkpoint a third of the way in,
    // before the scrub repaired anything.
    let mut saved: Option<String> = None;
    let first = scrub(&mut volume, &scrub_options, &Control::new(), None, &mut |_| {}, &mut |c| {
        if saved.is_none() && c.bytes_done >= total / 3 {
            saved = Some(serde_json::to_string(c).unwrap());
            for sim in &harness.sims {
                sim.power_cut();
            }
        }
    });
    assert!(first.is_err(), "the scrub went on without power");
    drop(volume);
    harness.power_cut();
    let mut volume = harness.open(&options).unwrap();
    let checkpoint: Checkpoint = serde_json::from_str(&saved.expect("a checkpoint")).unwrap();
    // Found before the cut, not yet repaired.
    assert!(checkpoint.findings.errors.checksum > 0, "{checkpoint:?}");
    assert!(!checkpoint.findings.suspects.is_empty(), "{checkpoint:?}");
    assert_eq!(checkpoint.findings.corrected_blocks, 0, "{checkpoint:?}");
    let second =
        scrub(&mut volume, &scrub_options, &Control::new(), Some(&checkpoint), &mut |_| {}, &mut |_| {}).unwrap();
    assert!(second.resumed && !second.cancelled, "{second}");
    assert_reports_all(&second, &expected);
    check_all_but(&mut volume, &expected);
}

#[test]
fn a_finished_checkpoint_starts_a_fresh_pass() {
    let (harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 100, 8, 13);
    let mut last: Option<Checkpoint> = None;
    let first = scrub(&mut volume, &ScrubOptions::default(), &Control::new(), None, &mut |_| {}, &mut |c| {
        last = Some(c.clone())
    })
    .unwrap();
    assert_eq!(first.bytes_read, first.bytes_total);
    let finished = last.expect("a checkpoint");
    assert!(finished.finished);
    let id = *extents.keys().nth(40).unwrap();
    corrupt(&harness, &volume, id, 1, 3);
    let second =
        scrub(&mut volume, &ScrubOptions::default(), &Control::new(), Some(&finished), &mut |_| {}, &mut |_| {})
            .unwrap();
    assert_eq!(second.bytes_read, second.bytes_total, "{second}");
    assert_eq!((second.errors.checksum, second.corrected_blocks), (1, 1), "{second}");
    assert!(!second.resumed, "a new pass: {second}");
    assert_eq!((second.pass_bytes_verified, second.outcome), (second.bytes_total, Outcome::Clean), "{second}");
}

/// Cancels a scrub once a third of `total` is read; returns its report and
/// last checkpoint.
fn scrub_a_third(volume: &mut Volume, options: &ScrubOptions, total: u64) -> (Report, Checkpoint) {
    let control = Control::new();
    let mut saved = None;
    let report = scrub(volume, options, &control, None, &mut |_| {}, &mut |c| {
        if c.bytes_done >= total / 3 {
            control.cancel();
        }
        saved = Some(c.clone());
    })
    .unwrap();
    assert!(report.cancelled, "{report}");
    (report, saved.expect("a checkpoint"))
}

#[test]
fn a_report_says_clean_only_when_its_pass_read_and_verified_every_byte() {
    let (harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 300, 8, 15);
    let total = volume.valid_blocks() * 2 * 4096;
    let scrub_options = ScrubOptions {
        checkpoint_every_bytes: 256 << 10,
        max_request_bytes: Some(64 << 10),
        ..ScrubOptions::default()
    };
    let resume = |volume: &mut Volume, options: &ScrubOptions, checkpoint: &Checkpoint| {
        scrub(volume, options, &Control::new(), Some(checkpoint), &mut |_| {}, &mut |_| {})
    };

    // Cancelled a third of the way: incomplete, and the text says so.
    let (first, checkpoint) = scrub_a_third(&mut volume, &scrub_options, total);
    assert_eq!(first.outcome, Outcome::Incomplete, "{first}");
    assert_eq!((first.pass_bytes_read, first.pass_bytes_verified), (first.bytes_read, first.bytes_read));
    assert!(first.pass_bytes_read < total, "{first}");
    let text = first.to_string();
    assert!(text.contains("result: incomplete (cancelled)") && !text.contains("clean"), "{text}");
    let json = serde_json::to_value(&first).unwrap();
    assert_eq!((&json["outcome"], &json["pass_bytes_read"]), (&"incomplete".into(), &first.pass_bytes_read.into()));
    // Resumed to the end: the pass read and verified every byte.
    let second = resume(&mut volume, &scrub_options, &checkpoint).unwrap();
    assert_eq!(second.outcome, Outcome::Clean, "{second}");
    assert_eq!((second.pass_bytes_read, second.pass_bytes_verified), (total, total), "{second}");
    assert!(second.to_string().contains("result: clean"), "{second}");
    // A resume that would scrub other copies than the pass did is refused.
    let one_copy = ScrubOptions { lanes: Some(vec![1]), ..scrub_options.clone() };
    let refused = resume(&mut volume, &one_copy, &checkpoint).unwrap_err();
    assert!(refused.to_string().contains("copies [0, 1]"), "{refused}");

    // Without verification nothing is called clean, nor is a pass that
    // began without it.
    let unverified = ScrubOptions { verify: false, ..scrub_options.clone() };
    let report = run(&mut volume, &unverified);
    assert_eq!((report.outcome, report.pass_bytes_read, report.pass_bytes_verified), (Outcome::Incomplete, total, 0));
    assert!(report.to_string().contains("result: incomplete (verification off)"), "{report}");
    let (_, checkpoint) = scrub_a_third(&mut volume, &unverified, total);
    let report = resume(&mut volume, &scrub_options, &checkpoint).unwrap();
    assert_eq!(report.outcome, Outcome::Incomplete, "{report}");
    assert!(report.pass_bytes_verified < report.pass_bytes_read, "{report}");
    // Nor after a checkpoint of the first format, which does not say (it
    // named one copy's position, the copies scrubbed one after another:
    // made here from a pass over copy 0 alone).
    let copy_0 = ScrubOptions { lanes: Some(vec![0]), ..scrub_options.clone() };
    let (_, checkpoint) = scrub_a_third(&mut volume, &copy_0, total / 2);
    let first_format = serde_json::json!({
        "volume_id": checkpoint.volume_id, "lane": checkpoint.lane, "zone": checkpoint.zone,
        "offset": checkpoint.offset, "skip_blocks": checkpoint.skip_blocks,
        "bytes_done": checkpoint.bytes_done, "finished": false,
    });
    let checkpoint = Checkpoint::from_json(&first_format.to_string()).unwrap();
    let report = resume(&mut volume, &scrub_options, &checkpoint).unwrap();
    assert!(report.resumed && report.outcome == Outcome::Incomplete, "{report}");
    assert_eq!(report.pass_bytes_read, total, "{report}");

    // Damage left in place (read-only) is damage, whatever the coverage.
    let id = *extents.keys().nth(100).unwrap();
    corrupt(&harness, &volume, id, 0, 4);
    let report = run(&mut volume, &ScrubOptions { repair: false, ..ScrubOptions::default() });
    assert_eq!((report.outcome, report.unrepaired_blocks), (Outcome::Damaged, 1), "{report}");
    assert!(report.to_string().contains("result: damaged"), "{report}");
}

/// A relocation into a copy's reclaim zone after one that failed there.
#[test]
fn a_relocation_after_a_failed_one_in_the_same_copy_succeeds() {
    let (harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 100, 8, 14);
    let blocks = |id: u64| extents[&id].len() as u32 / 4096;
    // Two damaged copies in copy 0, repaired in this order, the first
    // longer than the second.
    let ids: Vec<u64> = extents.keys().copied().skip(10).collect();
    let (first, second) = ids
        .iter()
        .flat_map(|&a| ids.iter().map(move |&b| (a, b)))
        .find(|&(a, b)| a < b && blocks(a) > blocks(b))
        .unwrap();
    corrupt(&harness, &volume, first, 0, 2);
    corrupt(&harness, &volume, second, 0, 2);
    // The first relocation goes to the start of the first empty zone: its
    // write fails past the blocks the second one needs, wherever the
    // second goes.
    let table = volume.zone_table(0);
    let zone = (0..table.zone_count()).find(|&z| table.zone(z).usage == ZoneUse::Empty).unwrap();
    let slba = volume.lba(0, Location { zone, offset: blocks(second) });
    harness.sims[0].inject(Fault::WriteFault { nsid: 1, slba, blocks: u64::from(blocks(first) - blocks(second)) * 8 });
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!((report.errors.checksum, report.corrected_blocks), (2, 1), "{report}");
    assert_write_fault(&report, first, 0);
    check_all(&mut volume, &extents);
}

/// Random corruption across both copies, and in a third of the patterns
/// repair writes that fail (to a copy's reclaim zones on ZNS, over one
/// copy of one extent on a conventional namespace); the report must be
/// exactly what they predict, and no good data may change.
fn fault_pattern(seed: u64) {
    let mut rng = Prng::new(seed);
    let zoned = seed.is_multiple_of(2);
    let (harness, options) = if zoned {
        (
            Harness::new(vec![zns(32, 512), zns(32, 512)], vec![(0, 1), (1, 1)]),
            VolumeOptions { profile: Profile::Mirror, ..volume_options() },
        )
    } else {
        (
            Harness::single(conventional(16)),
            VolumeOptions { profile: Profile::Dup, software_zone_bytes: Some(512 << 10), ..volume_options() },
        )
    };
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 12, 3, seed);
    // Bad blocks per (extent, lane).
    let mut bad: BTreeMap<(u64, usize), BTreeSet<u32>> = BTreeMap::new();
    for _ in 0..rng.below(20) {
        let id = *extents.keys().nth(rng.below(extents.len() as u64) as usize).unwrap();
        let lane = rng.below(2) as usize;
        let blocks = (extents[&id].len() / 4096) as u32;
        let block = rng.below(u64::from(blocks)) as u32;
        let lba = volume.lba(lane, volume.location(id, lane).unwrap()) + u64::from(block) * 8;
        let sim = &harness.sims[if zoned { lane } else { 0 }];
        if bad.entry((id, lane)).or_default().insert(block) {
            sim.corrupt_at_rest(1, lba + rng.below(8), rng.below(4096));
        }
    }
    // Copies whose repair write fails, drawn apart so the patterns above
    // stay those of earlier versions: (extent, lane) of a correctable copy.
    let correctable = |id: u64, lane: usize| {
        let other = bad.get(&(id, 1 - lane));
        bad[&(id, lane)].iter().all(|b| !other.is_some_and(|o| o.contains(b)))
    };
    let mut write_rng = Prng::new(seed ^ 0x5752_4954_4546_4c54);
    let mut fails: BTreeSet<(u64, usize)> = BTreeSet::new();
    if write_rng.below(3) == 0 {
        if zoned {
            let lane = write_rng.below(2) as usize;
            fail_writes_to_empty_zones(&harness, &volume, lane);
            fails.extend(bad.keys().filter(|&&(id, l)| l == lane && correctable(id, l)));
        } else if let Some(&(id, lane)) = bad.keys().find(|&&(id, l)| correctable(id, l)) {
            let slba = volume.lba(lane, volume.location(id, lane).unwrap());
            harness.sims[0].inject(Fault::WriteFault { nsid: 1, slba, blocks: extents[&id].len() as u64 / 512 });
            fails.insert((id, lane));
        }
    }
    let report =
        run(&mut volume, &ScrubOptions { max_in_flight: 1 + rng.below(64) as usize, ..ScrubOptions::default() });
    let mut expected_corrected = 0;
    let mut expected_uncorrectable = BTreeSet::new();
    let mut expected_failed = BTreeSet::new();
    for (&(id, lane), blocks) in &bad {
        let other = bad.get(&(id, 1 - lane));
        for &block in blocks {
            if other.is_some_and(|o| o.contains(&block)) {
                expected_uncorrectable.insert((id, lane, block));
            } else if fails.contains(&(id, lane)) {
                expected_failed.insert((id, lane, block));
            } else {
                expected_corrected += 1;
            }
        }
    }
    let total_bad: usize = bad.values().map(BTreeSet::len).sum();
    assert_eq!(report.errors.checksum, total_bad as u64, "seed {seed}: {report}");
    let found: BTreeSet<(u64, usize, u32)> =
        report.uncorrectable.iter().flat_map(|u| u.blocks.iter().map(move |&b| (u.extent, u.lane, b))).collect();
    // An extent with an uncorrectable block keeps all its blocks as they
    // are: its correctable ones in that copy are not counted as corrected.
    let held_back: u64 = bad
        .iter()
        .filter(|((id, lane), _)| found.iter().any(|&(e, l, _)| e == *id && l == *lane))
        .map(|((id, lane), blocks)| {
            let other = bad.get(&(*id, 1 - lane));
            blocks.iter().filter(|b| !other.is_some_and(|o| o.contains(b))).count() as u64
        })
        .sum();
    assert_eq!(found, expected_uncorrectable, "seed {seed}: {report}");
    assert_eq!(report.corrected_blocks, expected_corrected - held_back, "seed {seed}: {report}");
    assert_eq!(report.unrepaired_blocks, held_back, "seed {seed}: {report}");
    let failed: BTreeSet<(u64, usize, u32)> =
        report.repair_failed.iter().flat_map(|r| r.blocks.iter().map(move |&b| (r.extent, r.lane, b))).collect();
    assert_eq!(failed, expected_failed, "seed {seed}: {report}");
    // Everything was read and verified: clean unless a block is left bad.
    let outcome = if found.is_empty() && failed.is_empty() { Outcome::Clean } else { Outcome::Damaged };
    assert_eq!(report.outcome, outcome, "seed {seed}: {report}");
    assert_eq!((report.pass_bytes_read, report.pass_bytes_verified), (report.bytes_total, report.bytes_total));
    // Good data is intact: every extent without an uncorrectable block
    // reads back exactly.
    for (&id, data) in &extents {
        if found.iter().any(|&(e, _, _)| e == id) {
            continue;
        }
        let mut back = vec![0u8; data.len()];
        volume.read(id, &mut back).unwrap_or_else(|e| panic!("seed {seed}: extent {id}: {e}"));
        assert!(&back == data, "seed {seed}: extent {id}");
    }
    // What failed is still bad, and only that.
    if found.is_empty() {
        let again = run(&mut volume, &ScrubOptions::default());
        assert_eq!(again.errors.total_blocks(), failed.len() as u64, "seed {seed}: second scrub {again}");
    }
}

#[test]
fn seeded_fault_patterns_give_exactly_the_expected_report() {
    if let Some(seed) = std::env::var("SCRUB_SEED").ok().and_then(|s| s.parse().ok()) {
        fault_pattern(seed);
        return;
    }
    let seeds: u64 = std::env::var("SCRUB_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    for seed in 0..seeds {
        fault_pattern(seed);
    }
}

/// The LBAs of journal records (4 KiB blocks that begin with the record
/// magic) in the first `lbas` of namespace 1 of `sim`.
fn journal_records(sim: &nvme_driver::sim::Simulator, lbas: u64) -> Vec<u64> {
    (0..lbas).step_by(8).filter(|&lba| &sim.read_block(1, lba)[..8] == b"ZNVOLLOG").collect()
}

#[test]
fn rotted_metadata_on_one_copy_is_found_and_rewritten() {
    let (harness, options) = mirror_zns();
    let mut volume = harness.format(&options);
    let extents = fill(&mut volume, 40, 8, 5);
    let clean = run(&mut volume, &ScrubOptions::default());
    let metadata = clean.metadata.clone().expect("the metadata is scrubbed");
    assert!(metadata.bytes_read > 0 && !metadata.repaired, "{clean}");
    assert_eq!(clean.outcome, Outcome::Clean, "{clean}");
    // A record of device 1's copy (its first two 1 MiB zones) rots.
    let records = journal_records(&harness.sims[1], 2 * 2048);
    let last = *records.last().expect("records on device 1");
    harness.sims[1].corrupt_at_rest(1, last, 77);
    let readonly = run(&mut volume, &ScrubOptions { repair: false, ..ScrubOptions::default() });
    let seen = readonly.metadata.clone().unwrap();
    assert_eq!((seen.bad_records[1], seen.repaired), (1, false), "{readonly}");
    assert_eq!(readonly.outcome, Outcome::Damaged, "{readonly}");
    let repaired = run(&mut volume, &ScrubOptions::default());
    let fixed = repaired.metadata.clone().unwrap();
    assert!(fixed.repaired && fixed.bad_records[1] == 1, "{repaired}");
    assert_eq!(repaired.outcome, Outcome::Clean, "{repaired}");
    // Counted: in the report's errors, its repairs, its text, and the
    // scrub the volume records (a clean pass that repaired one record).
    assert_eq!((repaired.errors.metadata, repaired.metadata_repaired), (1, 1), "{repaired}");
    assert!(repaired.to_string().contains("1 metadata record(s) or label(s), repaired"), "{repaired}");
    let recorded = volume.status().last_scrub.expect("the pass is recorded");
    assert_eq!((recorded.bad_blocks, recorded.repaired_blocks, recorded.clean), (1, 1, true), "{recorded:?}");
    assert_eq!((readonly.errors.metadata, readonly.metadata_repaired), (1, 0), "{readonly}");
    let after = run(&mut volume, &ScrubOptions::default());
    assert!(after.metadata.unwrap().bad_records.iter().all(|&n| n == 0));
    check_all(&mut volume, &extents);
}

/// On a controller that moves a metadata transfer of 512 bytes or more
/// only in multiples of 512 (QEMU's quirk, which the simulator shares by
/// its identity), extents of 4 KiB LBAs with 8 bytes of metadata are tagged
/// when their tags fit one command (up to 64 blocks, or 128) and keep the
/// map otherwise; merged reads that would carry tags the controller cannot
/// move whole are cut, between extents where they can be. Every block is
/// verified, and damage in either kind is found and repaired.
#[test]
fn merged_reads_over_tagged_and_mapped_extents_are_cut_where_the_controller_needs() {
    let namespace = || {
        let mut config = nvme_driver::sim::SimConfig::nvm(128 << 8, 4096);
        config.namespaces[0].metadata_bytes = 8;
        config
    };
    let harness = Harness::new(vec![namespace(), namespace()], vec![(0, 1), (1, 1)]);
    // Block tags, whatever `ZONED_TEST_CHECKSUMS` asks of the suite.
    let options = VolumeOptions {
        profile: Profile::Mirror,
        software_zone_bytes: Some(8 << 20),
        checksums: zoned_allocator::ChecksumStore::Auto,
        ..volume_options()
    };
    let mut volume = harness.format(&options);
    let mut extents = BTreeMap::new();
    for (i, blocks) in [30, 65, 64, 3, 100, 40, 128, 1, 70].into_iter().enumerate() {
        let data = pattern(9000 + i as u64, blocks);
        extents.insert(volume.write(0, &data, i as u64).unwrap(), data);
    }
    volume.commit().unwrap();
    let tagged = extents.keys().filter(|&&id| volume.tagged(id)).count();
    assert_eq!(tagged, 6, "30, 64, 3, 40, 128 and 1 blocks are tagged; 65, 100 and 70 are not");
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!(report.errors.total_blocks(), 0, "{report}");
    assert_eq!(report.bytes_verified, report.bytes_total);
    // One block of a tagged extent and one of a mapped one, in copy 0.
    let ids: Vec<u64> = extents.keys().copied().collect();
    for id in [ids[2], ids[4]] {
        corrupt(&harness, &volume, id, 0, 3);
    }
    let report = run(&mut volume, &ScrubOptions::default());
    assert_eq!((report.errors.checksum, report.corrected_blocks), (2, 2), "{report}");
    assert_eq!(run(&mut volume, &ScrubOptions::default()).errors.total_blocks(), 0);
    check_all(&mut volume, &extents);
}
