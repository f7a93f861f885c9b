//! The volume's write path allocates nothing per write once warm: submit,
//! placement, the device commands, completion and the outcome, counted by
//! a global allocator. What a write adds to the volume's state lives in
//! structures sized by what the volume holds (the extent table's slots,
//! the uncommitted operations), which the warm-up grows and frees and
//! commits leave in place. Commits, frees and reclaim are not the write
//! path and are not counted. On a volume whose checksums live in the
//! extent map, the map keeps each extent's checksums: one allocation per
//! extent it holds, by design; this test's volume keeps them in block
//! tags. (One test in this binary, so no other test allocates
//! concurrently.)

use nvme_driver::sim::SimConfig;
use nvme_testkit::alloc::{allocations_during, Counting};
use nvme_testkit::data::pattern;
use nvme_testkit::harness::{self as support, Harness};
use zoned_allocator::{ChecksumStore, ExtentId, ReclaimProgress, Volume, VolumeOptions, BLOCK_SIZE};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Extents written per cycle, many in flight.
const EXTENTS: usize = 48;
/// Blocks per extent.
const BLOCKS: usize = 8;

/// One cycle: write [`EXTENTS`] extents with up to 16 in flight and reap
/// every outcome, counting the allocations of that alone; then free them
/// all, commit and reclaim. Returns the allocations counted.
fn cycle(volume: &mut Volume, data: &[u8], ids: &mut Vec<ExtentId>) -> u64 {
    let allocations = allocations_during(|| write_all(volume, data, ids));
    volume.commit().expect("commit");
    for &id in ids.iter() {
        volume.free(id).expect("free");
    }
    volume.commit().expect("commit frees");
    for _ in 0..1000 {
        if volume.reclaim_step(1 << 20).expect("reclaim") == ReclaimProgress::Idle {
            return allocations;
        }
    }
    panic!("reclaim still busy after 1000 steps");
}

/// Writes [`EXTENTS`] extents of `data` with up to 16 in flight, and
/// reaps every outcome; their IDs go to `ids`.
fn write_all(volume: &mut Volume, data: &[u8], ids: &mut Vec<ExtentId>) {
    ids.clear();
    let mut done = 0;
    for owner in 0..EXTENTS as u64 {
        ids.push(volume.submit_write(0, data, owner).expect("submit"));
        while volume.writes_in_flight() >= 16 {
            volume.poll();
        }
        while let Some(outcome) = volume.next_done() {
            outcome.result.expect("write");
            done += 1;
        }
    }
    volume.wait_idle().expect("idle");
    while let Some(outcome) = volume.next_done() {
        outcome.result.expect("write");
        done += 1;
    }
    assert_eq!(done, EXTENTS, "every write finished");
}

#[test]
fn the_write_path_allocates_nothing_once_warm() {
    // 64 zones of 1 MiB, 4 KiB LBAs with 8 bytes of metadata: checksums
    // in block tags.
    let mut config = SimConfig::zoned(64 * 256, 4096, 256, 256);
    config.namespaces[0] = config.namespaces[0].clone().metadata_bytes(8);
    let harness = Harness::single(config);
    let options = VolumeOptions { checksums: ChecksumStore::Tags, ..support::volume_options() };
    let mut volume = harness.format(&options);
    assert!(volume.block_tags().is_some(), "the volume keeps its checksums in block tags");
    let data = pattern(1, BLOCKS);
    assert_eq!(data.len(), BLOCKS * BLOCK_SIZE);
    let mut ids = Vec::with_capacity(EXTENTS);
    // Warm up: slots, operation lists, queues and zones reach their
    // working size.
    let warm_up: Vec<u64> = (0..8).map(|_| cycle(&mut volume, &data, &mut ids)).collect();
    assert!(warm_up[0] > 0, "the first writes grow the volume's structures");
    let allocations: u64 = (0..8).map(|_| cycle(&mut volume, &data, &mut ids)).sum();
    assert_eq!(allocations, 0, "allocations in {} writes (warm-up: {warm_up:?})", 8 * EXTENTS);
}
