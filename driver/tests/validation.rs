//! Request validation on the host, without a device: each bad request gets
//! its typed error and nothing reaches a queue.

use nvme_driver::cmd::nvm::CopySourceRangeFormat2;
use nvme_driver::cmd::zns::{ReportFilter, ZoneSendAction};
use nvme_driver::dma::{DmaMemory, DmaPool};
use nvme_driver::loopback::LoopbackTransport;
use nvme_driver::spec::identify::Oncs;
use nvme_driver::{IoBuffer, MetadataFormat, Namespace, RequestError, Transport, ZoneGeometry};
use std::sync::Arc;

const BLOCK: u32 = 512;
const CAPACITY: u64 = 1 << 20; // blocks
const MAX_TRANSFER: u64 = 128 * 1024;

fn conventional(oncs: Oncs) -> Namespace {
    Namespace::from_parts(1, BLOCK, CAPACITY, MAX_TRANSFER, oncs, None)
}

fn zoned() -> Namespace {
    let zones = ZoneGeometry {
        zone_size_blocks: 4096,
        zone_count: CAPACITY / 4096,
        max_open_zones: Some(8),
        max_active_zones: Some(8),
        zone_append_max_bytes: 64 * 1024,
    };
    Namespace::from_parts(2, BLOCK, CAPACITY, MAX_TRANSFER, Oncs::all(), Some(zones))
}

fn pool(buffer_len: usize) -> DmaPool {
    let transport: Arc<dyn Transport> = LoopbackTransport::new();
    DmaPool::new(&transport, buffer_len, 4).unwrap()
}

fn buffer(pool: &DmaPool, offset: usize, len: usize) -> IoBuffer {
    IoBuffer::range(pool.get().unwrap(), offset, len)
}

#[test]
fn good_requests_pass() {
    let ns = conventional(Oncs::all());
    let pool = pool(MAX_TRANSFER as usize);
    let read = ns.read(CAPACITY - 8, buffer(&pool, 0, 4096), 1).unwrap();
    assert_eq!(read.command.cdw12 & 0xffff, 7, "0-based NLB");
    ns.write(0, buffer(&pool, 0, MAX_TRANSFER as usize), true, 2).unwrap();
    // A dword-aligned start inside a page is allowed (PRP1 offset).
    ns.read(0, buffer(&pool, 4, 512), 3).unwrap();
    ns.write_zeroes(0, 65536, true, 4).unwrap();
    ns.verify(0, 8, 5).unwrap();
}

#[test]
fn lba_out_of_range() {
    let ns = conventional(Oncs::all());
    let pool = pool(8192);
    let error = ns.read(CAPACITY - 1, buffer(&pool, 0, 1024), 0).unwrap_err();
    assert_eq!(error, RequestError::LbaOutOfRange { slba: CAPACITY - 1, blocks: 2, capacity_blocks: CAPACITY });
    assert!(matches!(ns.write_zeroes(u64::MAX - 1, 4, false, 0), Err(RequestError::LbaOutOfRange { .. })));
    assert!(matches!(ns.verify(CAPACITY, 1, 0), Err(RequestError::LbaOutOfRange { .. })));
}

#[test]
fn transfer_over_the_max() {
    let ns = conventional(Oncs::all());
    let pool = pool(2 * MAX_TRANSFER as usize);
    let error = ns.write(0, buffer(&pool, 0, MAX_TRANSFER as usize + 512), false, 0).unwrap_err();
    assert_eq!(error, RequestError::TooLarge { bytes: MAX_TRANSFER + 512, max_bytes: MAX_TRANSFER });
    assert!(matches!(ns.write_zeroes(0, 65537, false, 0), Err(RequestError::TooLarge { .. })));
}

#[test]
fn buffers_misaligned_too_small_or_not_whole_blocks() {
    let ns = conventional(Oncs::all());
    let pool = pool(8192);
    let misaligned = buffer(&pool, 2, 512);
    let iova = misaligned.iova();
    assert_eq!(ns.read(0, misaligned, 0).unwrap_err(), RequestError::Misaligned { iova });
    assert_eq!(
        ns.read(0, buffer(&pool, 0, 700), 0).unwrap_err(),
        RequestError::NotBlockMultiple { bytes: 700, block_size: BLOCK }
    );
    assert_eq!(ns.read(0, buffer(&pool, 0, 0), 0).unwrap_err(), RequestError::Empty);
    let small = buffer(&pool, 0, 16);
    assert_eq!(
        ns.deallocate(&[(0, 8), (100, 8)], small, 0).unwrap_err(),
        RequestError::BufferTooSmall { needed: 32, got: 16 }
    );
    let ranges = vec![(0u64, 1u32); 257];
    assert_eq!(
        ns.deallocate(&ranges, buffer(&pool, 0, 8192), 0).unwrap_err(),
        RequestError::TooManyRanges { count: 257, max: 256 }
    );
}

#[test]
fn zone_commands_on_a_conventional_namespace() {
    let ns = conventional(Oncs::all());
    let pool = pool(8192);
    assert_eq!(ns.zone_append(0, buffer(&pool, 0, 512), false, 0).unwrap_err(), RequestError::NotZoned { nsid: 1 });
    assert_eq!(ns.zone_send(0, ZoneSendAction::Reset, true, 0).unwrap_err(), RequestError::NotZoned { nsid: 1 });
    assert_eq!(
        ns.report_zones(0, ReportFilter::All, false, buffer(&pool, 0, 4096), 0).unwrap_err(),
        RequestError::NotZoned { nsid: 1 }
    );
}

#[test]
fn zone_rules() {
    let ns = zoned();
    let pool = pool(128 * 1024);
    ns.zone_append(4096, buffer(&pool, 0, 4096), false, 0).unwrap();
    assert_eq!(
        ns.zone_append(100, buffer(&pool, 0, 512), false, 0).unwrap_err(),
        RequestError::NotZoneStart { slba: 100, zone_size_blocks: 4096 }
    );
    assert_eq!(
        ns.zone_append(0, buffer(&pool, 0, 128 * 1024), false, 0).unwrap_err(),
        RequestError::TooLarge { bytes: 128 * 1024, max_bytes: 64 * 1024 },
        "ZASL bounds appends below MDTS"
    );
    assert!(matches!(ns.zone_send(CAPACITY, ZoneSendAction::Open, false, 0), Err(RequestError::NotZoneStart { .. })));
    ns.zone_send(0, ZoneSendAction::Reset, true, 0).unwrap();
    let report = ns.report_zones(0, ReportFilter::Full, true, buffer(&pool, 0, 4096), 0).unwrap();
    assert_eq!(report.command.cdw13 >> 16 & 1, 1, "partial report bit");
}

#[test]
fn commands_the_controller_lacks() {
    let ns = conventional(Oncs::DATASET_MANAGEMENT);
    let pool = pool(8192);
    assert_eq!(ns.write_zeroes(0, 8, false, 0).unwrap_err(), RequestError::Unsupported { command: "Write Zeroes" });
    assert_eq!(ns.verify(0, 8, 0).unwrap_err(), RequestError::Unsupported { command: "Verify" });
    assert_eq!(ns.compare(0, buffer(&pool, 0, 512), 0).unwrap_err(), RequestError::Unsupported { command: "Compare" });
    assert_eq!(
        ns.copy(0, &[(8, 8)], buffer(&pool, 0, 64), 0).unwrap_err(),
        RequestError::Unsupported { command: "Copy" }
    );
    ns.deallocate(&[(0, 8)], buffer(&pool, 0, 4096), 0).unwrap();
}

#[test]
fn range_limits_the_controller_reports() {
    let limits = nvme_driver::RangeLimits {
        dsm_ranges: 2,
        dsm_range_blocks: 1000,
        dsm_total_blocks: 1500,
        copy_ranges: 2,
        copy_range_blocks: 64,
        copy_total_blocks: 100,
    };
    let ns = conventional(Oncs::all()).with_limits(limits);
    let pool = pool(8192);
    ns.deallocate(&[(0, 1000), (5000, 500)], buffer(&pool, 0, 4096), 0).unwrap();
    assert_eq!(
        ns.deallocate(&[(0, 1001)], buffer(&pool, 0, 4096), 0).unwrap_err(),
        RequestError::RangeTooLong { blocks: 1001, max_blocks: 1000 },
        "DMRSL: QEMU silently skips longer ranges"
    );
    assert_eq!(
        ns.deallocate(&[(0, 1000), (5000, 501)], buffer(&pool, 0, 4096), 0).unwrap_err(),
        RequestError::RangeTooLong { blocks: 1501, max_blocks: 1500 }
    );
    assert_eq!(
        ns.deallocate(&[(0, 1), (2, 1), (4, 1)], buffer(&pool, 0, 4096), 0).unwrap_err(),
        RequestError::TooManyRanges { count: 3, max: 2 }
    );
    ns.copy(10_000, &[(0, 64), (100, 36)], buffer(&pool, 0, 4096), 0).unwrap();
    assert_eq!(
        ns.copy(10_000, &[(0, 65)], buffer(&pool, 0, 4096), 0).unwrap_err(),
        RequestError::RangeTooLong { blocks: 65, max_blocks: 64 }
    );
    assert_eq!(
        ns.copy(10_000, &[(0, 64), (100, 37)], buffer(&pool, 0, 4096), 0).unwrap_err(),
        RequestError::RangeTooLong { blocks: 101, max_blocks: 100 }
    );
}

fn with_metadata(bytes_per_block: u16, extended: bool, protection_type: u8) -> Namespace {
    let format = MetadataFormat { bytes_per_block, extended, protection_type, dma_granule: None };
    conventional(Oncs::all()).with_metadata(Some(format))
}

#[test]
fn copy_across_namespaces_is_checked_like_copy() {
    const COMMAND: &str = "Copy across namespaces";
    let pool = pool(8192);
    let plain = conventional(Oncs::all());
    assert!(!plain.cross_namespace_copy(), "off unless bring-up enabled it");
    assert_eq!(
        plain.copy_from(0, 2, &[(0, 8)], buffer(&pool, 0, 64), 0).unwrap_err(),
        RequestError::Unsupported { command: COMMAND }
    );
    let no_copy = conventional(Oncs::DATASET_MANAGEMENT).with_cross_namespace_copy(true);
    assert_eq!(
        no_copy.copy_from(0, 2, &[(0, 8)], buffer(&pool, 0, 64), 0).unwrap_err(),
        RequestError::Unsupported { command: "Copy" }
    );

    let limits = nvme_driver::RangeLimits {
        copy_ranges: 2,
        copy_range_blocks: 64,
        copy_total_blocks: 100,
        ..nvme_driver::RangeLimits::default()
    };
    let ns = conventional(Oncs::all()).with_limits(limits).with_cross_namespace_copy(true);
    assert!(ns.cross_namespace_copy());
    // Another namespace's ranges may lie past this one's end.
    let request = ns.copy_from(10_000, 7, &[(5, 8), (CAPACITY * 4, 64)], buffer(&pool, 0, 4096), 0).unwrap();
    assert_eq!((request.command.opcode, request.command.nsid), (0x19, 1));
    assert_eq!((request.command.cdw10, request.command.cdw11), (10_000, 0));
    assert_eq!(request.command.cdw12, 0x0000_0201, "Descriptor Format 2h, NR 1");
    let descriptors = request.buffer.unwrap();
    assert_eq!(descriptors.len(), 64);
    let mut bytes = [0u8; 64];
    descriptors.buffer().copy_out(descriptors.offset(), &mut bytes);
    assert_eq!(bytes[..32], CopySourceRangeFormat2::new(7, 5, 8).to_bytes());
    assert_eq!(bytes[32..], CopySourceRangeFormat2::new(7, CAPACITY * 4, 64).to_bytes());
    assert_eq!(bytes[..4], [7, 0, 0, 0], "SNSID in bytes 03:00");

    let refused = |source_nsid: u32, sdlba: u64, sources: &[(u64, u32)]| {
        ns.copy_from(sdlba, source_nsid, sources, buffer(&pool, 0, 4096), 0).unwrap_err()
    };
    // Only wrapping around the LBA space is known to be wrong elsewhere.
    assert_eq!(
        refused(7, 0, &[(u64::MAX - 3, 8)]),
        RequestError::LbaOutOfRange { slba: u64::MAX - 3, blocks: 8, capacity_blocks: u64::MAX }
    );
    // This namespace's own ranges are bounded by it.
    assert_eq!(
        refused(1, 0, &[(CAPACITY - 4, 8)]),
        RequestError::LbaOutOfRange { slba: CAPACITY - 4, blocks: 8, capacity_blocks: CAPACITY }
    );
    // Copy's limits, counts and destination bounds.
    assert_eq!(refused(7, 0, &[(0, 65)]), RequestError::RangeTooLong { blocks: 65, max_blocks: 64 });
    assert_eq!(refused(7, 0, &[(0, 64), (100, 37)]), RequestError::RangeTooLong { blocks: 101, max_blocks: 100 });
    assert_eq!(refused(7, 0, &[(0, 1), (2, 1), (4, 1)]), RequestError::TooManyRanges { count: 3, max: 2 });
    assert_eq!(refused(7, 0, &[]), RequestError::Empty);
    assert_eq!(refused(7, 0, &[(0, 0)]), RequestError::Empty);
    assert_eq!(
        refused(7, CAPACITY - 4, &[(0, 8)]),
        RequestError::LbaOutOfRange { slba: CAPACITY - 4, blocks: 8, capacity_blocks: CAPACITY }
    );
    assert_eq!(
        ns.copy_from(0, 7, &[(0, 8), (9, 8)], buffer(&pool, 0, 48), 0).unwrap_err(),
        RequestError::BufferTooSmall { needed: 64, got: 48 }
    );

    // Protection information is not carried; other metadata is.
    let protected = with_metadata(8, false, 1).with_cross_namespace_copy(true);
    assert_eq!(
        protected.copy_from(0, 2, &[(0, 8)], buffer(&pool, 0, 64), 0).unwrap_err(),
        RequestError::ProtectionInformation { nsid: 1, command: COMMAND }
    );
    with_metadata(16, false, 0)
        .with_cross_namespace_copy(true)
        .copy_from(0, 2, &[(0, 8)], buffer(&pool, 0, 64), 0)
        .unwrap();
}

#[test]
fn metadata_buffers_fit_a_separate_opaque_format_exactly() {
    let pool = pool(8192);
    let ns = with_metadata(8, false, 0);
    let request = ns.write_with_metadata(16, buffer(&pool, 0, 4096), buffer(&pool, 4096, 64), true, 9).unwrap();
    assert_eq!(request.metadata.as_ref().map(IoBuffer::len), Some(64), "8 blocks of 8 bytes");
    assert_eq!((request.command.cdw10, request.token), (16, 9));
    assert!(ns.read_with_metadata(0, buffer(&pool, 0, 512), buffer(&pool, 4096, 8), 0).is_ok());

    assert_eq!(
        ns.read_with_metadata(0, buffer(&pool, 0, 1024), buffer(&pool, 4096, 8), 0).unwrap_err(),
        RequestError::MetadataLength { expected: 16, got: 8 }
    );
    let misaligned = buffer(&pool, 4098, 8);
    let iova = misaligned.iova();
    assert_eq!(
        ns.read_with_metadata(0, buffer(&pool, 0, 512), misaligned, 0).unwrap_err(),
        RequestError::Misaligned { iova }
    );
    // Data checks come first, as for a plain read.
    assert_eq!(
        ns.read_with_metadata(CAPACITY, buffer(&pool, 0, 512), buffer(&pool, 4096, 8), 0).unwrap_err(),
        RequestError::LbaOutOfRange { slba: CAPACITY, blocks: 1, capacity_blocks: CAPACITY }
    );
}

#[test]
fn metadata_on_a_format_without_a_separate_opaque_buffer_is_refused() {
    let pool = pool(8192);
    for ns in [conventional(Oncs::all()), with_metadata(8, true, 0), with_metadata(8, false, 1)] {
        assert_eq!(
            ns.write_with_metadata(0, buffer(&pool, 0, 512), buffer(&pool, 4096, 8), false, 0).unwrap_err(),
            RequestError::NoSeparateMetadata { nsid: 1 }
        );
    }
    let format = MetadataFormat { bytes_per_block: 16, extended: false, protection_type: 0, dma_granule: None };
    let request = zoned().with_metadata(Some(format)).zone_append_with_metadata(
        0,
        buffer(&pool, 0, 1024),
        buffer(&pool, 4096, 32),
        false,
        0,
    );
    assert_eq!(request.unwrap().metadata.map(|m| m.len()), Some(32));
    assert_eq!(
        zoned().zone_append_with_metadata(0, buffer(&pool, 0, 512), buffer(&pool, 4096, 16), false, 0).unwrap_err(),
        RequestError::NoSeparateMetadata { nsid: 2 }
    );
}

#[test]
fn metadata_a_truncating_controller_would_move_in_part_is_refused() {
    let pool = pool(128 * 1024);
    let format = MetadataFormat { bytes_per_block: 8, extended: false, protection_type: 0, dma_granule: Some(512) };
    let ns = conventional(Oncs::all()).with_metadata(Some(format));
    // 512-byte LBAs, 8 bytes each: 63 blocks (504 bytes) and 64 (512) move
    // whole, 65 (520) would land as 8 bytes.
    for (blocks, whole) in [(1, true), (63, true), (64, true), (65, false), (127, false), (128, true), (129, false)] {
        let request =
            ns.write_with_metadata(0, buffer(&pool, 0, blocks * 512), buffer(&pool, 65536, blocks * 8), false, 0);
        match whole {
            true => assert!(request.is_ok(), "{blocks} blocks: {:?}", request.err()),
            false => assert_eq!(
                request.unwrap_err(),
                RequestError::MetadataTruncated { bytes: blocks as u64 * 8, granule: 512 },
                "{blocks} blocks"
            ),
        }
    }
}
