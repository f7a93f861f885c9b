//! Block tags on the simulator: volumes over namespaces formatted with
//! per-block metadata keep each block's checksum, and where it belongs, in
//! that metadata ([`zoned_allocator::tags`]), none in memory; damage of
//! every kind is caught by the tag read with the data; volumes over
//! namespaces without metadata keep checksums in the extent map.

use nvme_testkit::harness as support;

use nvme_driver::dma::DmaPool;
use nvme_driver::sim::SimConfig;
use nvme_driver::IoBuffer;
use nvme_testkit::data::pattern;
use std::time::Duration;
use support::{conventional, zns, Harness, Model};
use zoned_allocator::{ChecksumStore, Error, Profile, ReclaimProgress, Volume, VolumeOptions};

/// The namespaces of `config` formatted with `bytes` of metadata per LBA.
fn with_metadata(mut config: SimConfig, bytes: u16) -> SimConfig {
    for namespace in &mut config.namespaces {
        namespace.metadata_bytes = bytes;
    }
    config
}

/// A namespace without metadata, whatever the suite's setting.
fn plain(config: SimConfig) -> SimConfig {
    with_metadata(config, 0)
}

/// The suite's options with the format choosing where checksums go (these
/// tests are about that choice), whatever `ZONED_TEST_CHECKSUMS` asks of
/// the other suites.
fn volume_options() -> VolumeOptions {
    VolumeOptions { checksums: ChecksumStore::Auto, ..support::volume_options() }
}

fn soft(options: VolumeOptions) -> VolumeOptions {
    VolumeOptions { software_zone_bytes: Some(256 << 10), ..options }
}

fn write_some(volume: &mut Volume, model: &mut Model, count: u64, seed: u64) {
    for i in 0..count {
        let blocks = 1 + (i % 5) as usize;
        let id = volume.write(0, &pattern(seed + i, blocks), seed + i).unwrap();
        model.insert(id, (seed + i, blocks));
    }
}

fn check(volume: &mut Volume, model: &Model) {
    for (&id, &(seed, blocks)) in model {
        let mut back = vec![0u8; blocks * 4096];
        volume.read(id, &mut back).unwrap_or_else(|e| panic!("extent {id}: {e}"));
        assert_eq!(back, pattern(seed, blocks), "extent {id}");
    }
}

#[test]
fn namespaces_with_metadata_carry_the_checksums_and_memory_keeps_none() {
    // 512-byte LBAs: eight LBAs of metadata per 4 KiB block.
    for (config, bytes, options) in [
        (zns(32, 256), 8, volume_options()),
        (conventional(8), 64, soft(volume_options())),
        (zns(32, 256), 16, VolumeOptions { profile: Profile::Dup, ..volume_options() }),
    ] {
        let mut harness = Harness::single(with_metadata(config, bytes));
        let mut volume = harness.format(&options);
        let layout = volume.block_tags().expect("tags on a namespace with metadata");
        assert_eq!(layout.stride, 8 * usize::from(bytes));
        let mut model = Model::new();
        write_some(&mut volume, &mut model, 40, 1);
        volume.commit().unwrap();
        let any = *model.keys().next().unwrap();
        assert_eq!(volume.checksums(any), None, "no checksums in the extent map");
        check(&mut volume, &model);
        drop(volume);
        harness.restart();
        let mut volume = harness.open(&options).unwrap();
        assert_eq!(volume.block_tags(), Some(layout));
        check(&mut volume, &model);
        volume.check_invariants();
    }
}

#[test]
fn without_metadata_checksums_go_to_zone_areas_the_map_on_request_and_tags_can_be_required() {
    let harness = Harness::single(plain(zns(32, 256)));
    let volume = harness.format(&volume_options());
    assert_eq!(volume.checksum_store(), ChecksumStore::Area, "auto, with no metadata");
    drop(volume);

    let map = VolumeOptions { checksums: ChecksumStore::Map, ..volume_options() };
    let mut volume = harness.format(&map);
    assert_eq!(volume.checksum_store(), ChecksumStore::Map);
    let id = volume.write(0, &pattern(1, 2), 1).unwrap();
    assert_eq!(volume.checksums(id).map(<[u32]>::len), Some(2));
    drop(volume);

    let required = VolumeOptions { checksums: ChecksumStore::Tags, ..volume_options() };
    match Volume::format(harness.devices(), &required) {
        Err(Error::InvalidConfig(why)) => assert!(why.contains("namespace 1: none"), "{why}"),
        other => panic!("expected InvalidConfig, got {:?}", other.map(|_| ())),
    }

    let harness = Harness::single(with_metadata(zns(32, 256), 8));
    let mut volume = harness.format(&map);
    assert_eq!(volume.block_tags(), None, "asked for the map");
    let id = volume.write(0, &pattern(2, 3), 1).unwrap();
    assert_eq!(volume.checksums(id).map(<[u32]>::len), Some(3));
    drop(volume);
    let area = VolumeOptions { checksums: ChecksumStore::Area, ..volume_options() };
    assert_eq!(harness.format(&area).checksum_store(), ChecksumStore::Area, "asked for areas");

    // A mirror over one device with metadata and one without must read
    // alike from both: areas.
    let harness = Harness::new(vec![with_metadata(zns(32, 256), 8), plain(zns(32, 256))], vec![(0, 1), (1, 1)]);
    let mirror = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    assert_eq!(harness.format(&mirror).checksum_store(), ChecksumStore::Area);
}

#[test]
fn a_flipped_bit_fails_its_tag_and_the_other_copy_repairs_the_read() {
    let options = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    let harness =
        Harness::new(vec![with_metadata(zns(32, 256), 8), with_metadata(zns(32, 256), 8)], vec![(0, 1), (1, 1)]);
    let mut volume = harness.format(&options);
    let data = pattern(5, 16);
    let id = volume.write(0, &data, 77).unwrap();
    volume.commit().unwrap();
    let lba = volume.lba(0, volume.location(id, 0).unwrap()) + 3 * 8;
    harness.sims[0].corrupt_at_rest(1, lba, 12);
    let mut back = vec![0u8; data.len()];
    let outcome = volume.read(id, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(outcome.repaired, vec![3]);
    assert_eq!((volume.bad_blocks()[0].lane, volume.bad_blocks()[0].block), (0, 3));
    // The repair rewrites the copy with tags, and it reads clean.
    volume.rewrite_copy(id, 0, &back).unwrap();
    volume.commit().unwrap();
    let mut copy = vec![0u8; data.len()];
    assert_eq!(volume.read_copy_checked(id, 0, &mut copy).unwrap(), Vec::<u32>::new());
    assert_eq!(copy, data);
}

/// Copies `lbas` LBAs, data and metadata, from `from` to `to` on the first
/// controller's namespace 1, behind the volume's back: a misdirected or
/// stale write whose blocks are internally consistent.
fn device_copy(harness: &Harness, from: u64, to: u64, lbas: u32) {
    let controller = &harness.controllers[0];
    let ns = controller.namespace(1).unwrap();
    let mut pair = controller.create_queue_pair(4).unwrap();
    let pool = DmaPool::new(controller.transport(), 4096, 1).unwrap();
    let request = ns.copy(to, &[(from, lbas)], IoBuffer::new(pool.get().unwrap()), 1).unwrap();
    pair.execute(request, Duration::from_secs(5)).unwrap();
}

#[test]
fn a_block_holding_another_extents_data_and_tag_fails_where_it_lies() {
    let options = soft(volume_options());
    let harness = Harness::single(with_metadata(conventional(8), 8));
    let mut volume = harness.format(&options);
    let a = volume.write(0, &pattern(1, 4), 1).unwrap();
    let b = volume.write(0, &pattern(2, 4), 2).unwrap();
    volume.commit().unwrap();
    let lba_a = volume.lba(0, volume.location(a, 0).unwrap());
    let lba_b = volume.lba(0, volume.location(b, 0).unwrap());
    // Block 1 of `a`, data and tag, lands on block 1 of `b`; block 2 of
    // `b` gets block 3 of its own extent (a write shifted in place).
    device_copy(&harness, lba_a + 8, lba_b + 8, 8);
    device_copy(&harness, lba_b + 24, lba_b + 16, 8);
    let mut back = vec![0u8; 4 * 4096];
    match volume.read(b, &mut back) {
        Err(Error::Uncorrectable { extent, blocks, .. }) => assert_eq!((extent, blocks), (b, vec![1, 2])),
        other => panic!("expected Uncorrectable, got {other:?}"),
    }
    volume.read(a, &mut back).unwrap();
    assert_eq!(back, pattern(1, 4));
}

#[test]
fn reclaim_moves_tags_with_copy_and_with_read_and_write() {
    for copy in [true, false] {
        let mut config = with_metadata(zns(24, 256), 8);
        if !copy {
            config.oncs.remove(nvme_driver::spec::identify::Oncs::COPY);
        }
        let harness = Harness::single(config);
        let mut volume = harness.format(&volume_options());
        let mut model = Model::new();
        write_some(&mut volume, &mut model, 60, 10);
        volume.commit().unwrap();
        // Free two thirds, then reclaim until nothing is left to do.
        let ids: Vec<u64> = model.keys().copied().collect();
        for (i, id) in ids.into_iter().enumerate() {
            if i % 3 != 0 {
                volume.free(id).unwrap();
                model.remove(&id);
            }
        }
        volume.commit().unwrap();
        let mut moved = 0;
        while let ReclaimProgress::InProgress { moved_blocks, .. } | ReclaimProgress::Reclaimed { moved_blocks, .. } =
            volume.reclaim_step(1 << 20).unwrap()
        {
            moved += moved_blocks;
        }
        volume.commit().unwrap();
        assert!(moved > 0, "copy {copy}: reclaim moved nothing");
        assert_eq!(volume.stats().copy_commands > 0, copy);
        check(&mut volume, &model);
        volume.check_invariants();
    }
}

#[test]
fn a_replacement_without_room_for_tags_is_refused_by_name() {
    let options = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    let harness =
        Harness::new(vec![with_metadata(zns(32, 256), 8), with_metadata(zns(32, 256), 8)], vec![(0, 1), (1, 1)]);
    let mut volume = harness.format(&options);
    volume.write(0, &pattern(1, 2), 1).unwrap();
    volume.commit().unwrap();
    volume.fail_device(1, "pulled by the operator").unwrap();
    let without = Harness::single(plain(zns(32, 256)));
    let device = without.devices().pop().unwrap();
    match volume.replace(1, device, false) {
        Err(Error::Member { device: 1, why }) => assert!(why.contains("block tags"), "{why}"),
        other => panic!("expected a Member error, got {other:?}"),
    }
}

/// A conventional namespace of 4 KiB LBAs with 8 bytes of metadata each
/// (a stride of 8 per block), on the simulator as it introduces itself:
/// QEMU's controller, whose quirk says it moves a metadata transfer of 512
/// bytes or more only when it is a multiple of 512.
fn truncating() -> SimConfig {
    with_metadata(SimConfig::nvm(64 << 8, 4096), 8)
}

/// Software zones of 4 MiB, for extents of up to 128 blocks.
fn large_zones() -> VolumeOptions {
    VolumeOptions { software_zone_bytes: Some(4 << 20), ..volume_options() }
}

#[test]
fn on_a_controller_that_truncates_metadata_extents_it_cannot_tag_keep_the_map() {
    let options = large_zones();
    let mut harness = Harness::single(truncating());
    let mut volume = harness.format(&options);
    assert_eq!(volume.block_tags().and_then(|t| t.granule), Some(512));
    let mut model = Model::new();
    // Tags of 64 blocks are 512 bytes, of 128 blocks 1,024: carried. Of 65
    // or 100 blocks: the controller would move only 8 or 288 of them.
    for (seed, blocks) in [(1, 3), (2, 64), (3, 65), (4, 100), (5, 128)] {
        let id = volume.write(0, &pattern(seed, blocks), seed).unwrap();
        model.insert(id, (seed, blocks));
    }
    volume.commit().unwrap();
    let tagged: Vec<usize> = model.iter().filter(|(&id, _)| volume.tagged(id)).map(|(_, &(_, b))| b).collect();
    assert_eq!(tagged, [3, 64, 128]);
    for (&id, &(_, blocks)) in &model {
        let in_map = volume.checksums(id).map(<[u32]>::len);
        assert_eq!(in_map, (!volume.tagged(id)).then_some(blocks), "extent {id}");
    }
    check(&mut volume, &model);
    // Damage is found in both kinds, after a restart too.
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap();
    check(&mut volume, &model);
    for (&id, &(_, blocks)) in &model {
        let lba = volume.lba(0, volume.location(id, 0).unwrap()) + (blocks as u64 - 1);
        harness.sims[0].corrupt_at_rest(1, lba, 5);
        let mut back = vec![0u8; blocks * 4096];
        match volume.read(id, &mut back) {
            Err(Error::Uncorrectable { blocks: bad, .. }) => assert_eq!(bad, [blocks as u32 - 1], "extent {id}"),
            other => panic!("extent {id}: expected Uncorrectable, got {other:?}"),
        }
    }
}

#[test]
fn a_controller_without_the_quirk_tags_every_extent() {
    let harness = Harness::single(truncating());
    let controller = nvme_driver::Controller::init(
        harness.sims[0].clone(),
        nvme_driver::ControllerOptions {
            quirk_overrides: vec!["1b36:0010:-METADATA_DMA_TRUNCATED".parse().unwrap()],
            ..support::controller_options()
        },
    )
    .unwrap();
    let device = zoned_allocator::Device::open(&controller, 1, support::device_options()).unwrap();
    let mut volume = Volume::format(vec![device], &large_zones()).unwrap();
    assert_eq!(volume.block_tags().map(|t| (t.stride, t.granule)), Some((8, None)));
    let mut model = Model::new();
    for (seed, blocks) in [(1, 65), (2, 100)] {
        let id = volume.write(0, &pattern(seed, blocks), seed).unwrap();
        assert!(volume.tagged(id), "{blocks} blocks");
        model.insert(id, (seed, blocks));
    }
    volume.commit().unwrap();
    check(&mut volume, &model);
}
