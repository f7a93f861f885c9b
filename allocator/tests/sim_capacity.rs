//! Capacity that tells the truth: what `Volume::capacity_bytes` reports is
//! what the volume holds, with the profile, the metadata, the checksum
//! areas and the reclaim reserve taken out, for every profile and checksum
//! store on zoned and conventional namespaces. Filled with extents of any
//! power-of-two size up to its data unit (the largest extent, unless zones
//! are too small for a whole number of them), it takes exactly that many bytes,
//! and the next extent fails with a typed "no space" that names what is
//! full. `Volume::room` says what writes of any other size still fit.

use nvme_testkit::harness as support;

use nvme_driver::sim::SimConfig;
use nvme_testkit::data::pattern;
use support::{conventional, volume_options, zns, Harness};
use zoned_allocator::{ChecksumStore, Error, ExtentId, Full, Profile, Volume, VolumeOptions, BLOCK_SIZE};

/// `config` with `bytes` of metadata per LBA on each namespace.
fn with_metadata(mut config: SimConfig, bytes: u16) -> SimConfig {
    for namespace in &mut config.namespaces {
        namespace.metadata_bytes = bytes;
    }
    config
}

/// The namespaces a volume of `profile` takes, each like `config`.
fn harness(profile: Profile, config: &SimConfig) -> Harness {
    match profile {
        Profile::Single | Profile::Dup => Harness::single(config.clone()),
        Profile::Mirror => Harness::new(vec![config.clone(), config.clone()], vec![(0, 1), (1, 1)]),
        Profile::Mirror3 => Harness::new(vec![config.clone(); 3], vec![(0, 1), (1, 1), (2, 1)]),
    }
}

/// Writes extents of `bytes` to stream 0 until the volume says it is full;
/// the bytes it took. Any other error fails the test.
fn fill(volume: &mut Volume, bytes: usize, context: &str) -> (u64, Error) {
    let (written, error, _) = fill_keeping(volume, bytes, context);
    (written, error)
}

/// [`fill`], and each extent written with the seed of its bytes.
fn fill_keeping(volume: &mut Volume, bytes: usize, context: &str) -> (u64, Error, Vec<(ExtentId, u64)>) {
    let mut written = 0u64;
    let mut extents = Vec::new();
    for i in 0u64.. {
        match volume.write(0, &pattern(i, bytes / BLOCK_SIZE), i) {
            Ok(id) => {
                written += bytes as u64;
                extents.push((id, i));
            }
            Err(error @ Error::NoSpace(_)) => return (written, error, extents),
            Err(error) => panic!("{context}: write {i} after {written} bytes: {error}"),
        }
        if i % 256 == 255 {
            volume.commit().unwrap_or_else(|e| panic!("{context}: commit: {e}"));
        }
    }
    unreachable!()
}

/// Every profile and checksum store, on a zoned namespace (whose checksum
/// areas leave zones that no extent size divides) and on a conventional
/// one cut into the default software zones.
fn cases() -> Vec<(String, Harness, VolumeOptions)> {
    let mut cases = Vec::new();
    // Zones of 16 MiB and 32 KiB: room for a checksum area after 16 MiB
    // of data, as software zones are sized.
    let geometries =
        [("zoned", zns(16, (16 << 10) + 32)), ("small zones", zns(16, 4096)), ("conventional", conventional(64))];
    for (geometry, config) in geometries {
        for store in [ChecksumStore::Area, ChecksumStore::Map, ChecksumStore::Tags] {
            let metadata = if store == ChecksumStore::Tags { 8 } else { 0 };
            let config = with_metadata(config.clone(), metadata);
            // A 3-copy mirror (three devices) with one store: the others
            // change nothing that the mirror of two does not cover.
            let mirror3 = (store == ChecksumStore::Area).then_some(Profile::Mirror3);
            for profile in [Profile::Single, Profile::Dup, Profile::Mirror].into_iter().chain(mirror3) {
                let options = VolumeOptions { profile, checksums: store, ..volume_options() };
                cases.push((format!("{geometry} {profile:?} {store:?}"), harness(profile, &config), options));
            }
        }
    }
    // A mirror of a zoned and a conventional member holds what its smaller
    // member holds.
    let options = VolumeOptions { profile: Profile::Mirror, checksums: ChecksumStore::Area, ..volume_options() };
    let mixed = Harness::new(vec![zns(16, (16 << 10) + 32), conventional(48)], vec![(0, 1), (1, 1)]);
    cases.push(("mixed Mirror Area".into(), mixed, options));
    cases
}

#[test]
fn every_profile_and_checksum_store_holds_exactly_its_capacity() {
    for (context, mut harness, options) in cases() {
        let mut volume = harness.format(&options);
        let capacity = volume.capacity_bytes();
        assert!(capacity > 0, "{context}");
        // Zones of 4 MiB with checksum areas hold no whole number of the
        // largest extents (512 KiB) without giving up more than 1/256: the
        // unit is smaller there, and everywhere else the largest extent.
        let unit = volume.data_unit_bytes();
        if context.starts_with("small zones") && options.checksums == ChecksumStore::Area {
            assert!(unit < volume.max_extent_bytes(), "{context}: {unit}");
        } else {
            assert_eq!(unit, volume.max_extent_bytes(), "{context}");
        }
        for bytes in [unit, unit / 2, BLOCK_SIZE] {
            assert_eq!(volume.room(0, bytes).unwrap(), capacity, "{context}: room for writes of {bytes}");
        }
        let (written, full, extents) = fill_keeping(&mut volume, unit, &context);
        assert_eq!(written, capacity, "{context}: bytes written before no space, of the capacity reported");
        // Not even one block more: the figure is not a lower bound.
        let error = volume.write(0, &pattern(1, 1), 1).unwrap_err();
        assert!(matches!(error, Error::NoSpace(Full::Data { .. })), "{context}: {error:?}");
        assert!(full.to_string().contains("place"), "{context}: {full}");
        assert_eq!(volume.room(0, BLOCK_SIZE).unwrap(), 0, "{context}");
        assert_eq!(volume.stats().valid_bytes, capacity, "{context}");
        volume.commit().unwrap();
        volume.check_invariants();
        // Nothing the refusals met is lost or changed, across a reopen.
        drop(volume);
        harness.restart();
        let mut volume = harness.open(&options).unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
        assert_eq!(volume.stats().extents, extents.len() as u64, "{context}");
        let mut back = vec![0u8; unit];
        for &(id, seed) in &extents {
            volume.read(id, &mut back).unwrap_or_else(|e| panic!("{context}: extent {id}: {e}"));
            assert!(back == pattern(seed, unit / BLOCK_SIZE), "{context}: extent {id} reads back other bytes");
        }
    }
}

#[test]
fn room_counts_writes_of_a_size_no_zone_divides() {
    for (context, harness, options) in cases() {
        let mut volume = harness.format(&options);
        // Some space used first, by extents of another size.
        for i in 0..7 {
            volume.write(0, &pattern(i, 5), i).unwrap();
        }
        let odd = 3 * BLOCK_SIZE;
        let room = volume.room(0, odd).unwrap();
        assert!(room <= volume.capacity_bytes() - 7 * 5 * BLOCK_SIZE as u64, "{context}");
        let (written, _) = fill(&mut volume, odd, &context);
        assert_eq!(written, room, "{context}: writes of 12 KiB that fit, of what room() said");
    }
}

#[test]
fn room_refuses_a_size_no_write_can_have() {
    let harness = Harness::single(zns(16, 4096));
    let volume = harness.format(&volume_options());
    for bytes in [0, 100, BLOCK_SIZE + 1, volume.max_extent_bytes() + BLOCK_SIZE] {
        assert!(matches!(volume.room(0, bytes), Err(Error::InvalidArgument(_))), "{bytes}");
    }
    assert!(matches!(volume.room(1, BLOCK_SIZE), Err(Error::InvalidArgument(_))), "stream 1 of 1");
}

/// A mirror of a conventional and a ZNS namespace (the seed's mixed pair:
/// 1 GiB each, 64 MiB zones). Before, the metadata segments were sized in
/// zones of the first member: with the conventional one first (2 MiB
/// software zones, 6 a segment), the ZNS member gave 12 of its 16 zones to
/// metadata and the pair held 191 MiB. The conventional member now takes
/// software zones as large as the ZNS member's, and the pair holds what a
/// ZNS pair holds, in either order.
#[test]
fn a_mixed_mirror_wastes_no_more_than_a_zns_pair() {
    let options = VolumeOptions { profile: Profile::Mirror, ..volume_options() };
    let pair = Harness::new(vec![zns(16, 64 << 10), zns(16, 64 << 10)], vec![(0, 1), (1, 1)]);
    let zns_pair = pair.format(&options).capacity_bytes();
    for order in [[0, 1], [1, 0]] {
        let configs = [conventional(1024), zns(16, 64 << 10)];
        let configs = order.iter().map(|&i| configs[i].clone()).collect();
        let harness = Harness::new(configs, vec![(0, 1), (1, 1)]);
        let mut volume = harness.format(&options);
        let capacity = volume.capacity_bytes();
        assert!(capacity * 100 >= zns_pair * 99, "order {order:?}: {capacity} of a ZNS pair's {zns_pair}");
        // And it holds it.
        let unit = volume.data_unit_bytes();
        let (written, _) = fill(&mut volume, unit, &format!("order {order:?}"));
        assert_eq!(written, capacity, "order {order:?}");
    }
}
