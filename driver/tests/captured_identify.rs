//! Identify parsing on pages captured from QEMU 7.2's emulated controllers,
//! and on malformed variants of them.
//!
//! Captured with:
//!   hack/vm --nvme 1G,lba=4096,mdts=5 \
//!           --zns 2G,zone=64M,cap=48M,max-open=8,max-active=12,zasl=4 -- identify --dump-pages
//! and each `page BDF NAME HEX` line saved as `data/qemu-7.2/{nvme,zns}-NAME.bin`.

use nvme_driver::spec::identify::{
    command_set, parse_active_namespace_list, parse_ns_id_descriptors, DeallocateReadBehavior, IdentifyController,
    IdentifyControllerNvm, IdentifyNamespace, Oncs, CSI_NVM, CSI_ZONED,
};
use nvme_driver::spec::zns::{IdentifyControllerZns, IdentifyNamespaceZns};
use nvme_driver::spec::ParseError;

fn page(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/qemu-7.2/{name}.bin", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn controller_page() {
    let id = IdentifyController::parse(&page("nvme-controller")).unwrap();
    assert_eq!(id.vid, 0x1b36);
    assert_eq!(id.ssvid, 0x1af4);
    assert_eq!(id.mn, "QEMU NVMe Ctrl");
    assert_eq!(id.sn, "rig0");
    assert_eq!(id.mdts, 5);
    assert_eq!(id.max_transfer_bytes(4096), Some(128 * 1024));
    assert_eq!(id.oncs.bits(), 0x15d);
    assert!(id.oncs.contains(Oncs::DATASET_MANAGEMENT | Oncs::WRITE_ZEROES | Oncs::COPY | Oncs::COMPARE));
    assert!(!id.oncs.contains(Oncs::VERIFY));
    assert!(id.volatile_write_cache_present());
    assert!(id.nn >= 1);
    assert_eq!(id.sqes_required(), 6);
    assert_eq!(id.cqes_required(), 4);
    let zns = IdentifyController::parse(&page("zns-controller")).unwrap();
    assert_eq!(zns.sn, "rig1");
    assert_eq!(zns.mdts, 7);
}

#[test]
fn command_set_specific_controller_pages() {
    let nvm = IdentifyControllerNvm::parse(&page("nvme-controller-nvm")).unwrap();
    assert_eq!(nvm.wzsl, 0, "QEMU reports no Write Zeroes size limit");
    let zns = IdentifyControllerZns::parse(&page("zns-controller-zns")).unwrap();
    assert_eq!(zns.zasl, 4);
    assert_eq!(zns.zone_append_size_limit_bytes(4096, Some(512 * 1024)), Some(64 * 1024));
}

#[test]
fn namespace_pages() {
    assert_eq!(parse_active_namespace_list(&page("nvme-active-namespaces")).unwrap(), vec![1]);

    let ns = IdentifyNamespace::parse(&page("nvme-ns1")).unwrap();
    assert_eq!(ns.block_size().unwrap(), 4096);
    assert_eq!(ns.nsze, (1 << 30) / 4096);
    assert_eq!(ns.deallocate_features().read_behavior(), DeallocateReadBehavior::Zeroes);
    assert!(!ns.deallocate_features().write_zeroes_deac_supported());
    assert_eq!(command_set(&parse_ns_id_descriptors(&page("nvme-ns1-descriptors")).unwrap()), Some(CSI_NVM));

    let zoned = IdentifyNamespace::parse(&page("zns-ns1")).unwrap();
    assert_eq!(zoned.block_size().unwrap(), 512);
    assert_eq!(zoned.nsze, (2 << 30) / 512);
    assert_eq!(command_set(&parse_ns_id_descriptors(&page("zns-ns1-descriptors")).unwrap()), Some(CSI_ZONED));
    let zns = IdentifyNamespaceZns::parse(&page("zns-ns1-zns")).unwrap();
    assert_eq!(zns.zone_size_blocks(zoned.current_lba_format_index()).unwrap(), (64 << 20) / 512);
    assert_eq!(zns.max_open_resources(), Some(8));
    assert_eq!(zns.max_active_resources(), Some(12));
}

/// Captured pages bent out of the spec: each gives a typed error or a safe
/// value, never a panic.
#[test]
fn malformed_variants_of_captured_pages() {
    for name in ["nvme-controller", "nvme-ns1", "zns-ns1-zns", "nvme-ns1-descriptors", "nvme-active-namespaces"] {
        let full = page(name);
        for len in [0, 1, 63, 64, 383, 1023, 2815, 4095] {
            // Truncated pages parse to an error or to a value; never panic.
            let _ = IdentifyController::parse(&full[..len]);
            let _ = IdentifyNamespace::parse(&full[..len]);
            let _ = IdentifyNamespaceZns::parse(&full[..len]);
            let _ = parse_ns_id_descriptors(&full[..len]);
            let _ = parse_active_namespace_list(&full[..len]);
        }
    }
    assert!(matches!(IdentifyController::parse(&page("nvme-controller")[..100]), Err(ParseError::TooShort { .. })));

    // LBA data size 0 in the format in use.
    let mut ns = page("nvme-ns1");
    let format = IdentifyNamespace::parse(&ns).unwrap().current_lba_format_index();
    ns[128 + format * 4 + 2] = 0;
    let parsed = IdentifyNamespace::parse(&ns).unwrap();
    assert!(matches!(parsed.block_size(), Err(ParseError::InvalidField { .. })), "{:?}", parsed.block_size());

    // FLBAS pointing past NLBAF.
    let mut ns = page("nvme-ns1");
    ns[25] = 0; // NLBAF: one format
    ns[26] = 3; // FLBAS: format 3
    let parsed = IdentifyNamespace::parse(&ns).unwrap();
    assert!(parsed.current_lba_format().is_err());
    assert!(parsed.block_size().is_err());

    // An absurd MDTS clamps instead of overflowing.
    let mut ctrl = page("nvme-controller");
    ctrl[77] = 0xff;
    let parsed = IdentifyController::parse(&ctrl).unwrap();
    assert_eq!(parsed.max_transfer_bytes(4096), Some(u64::MAX));

    // A zone size of zero in the format in use.
    let mut zns = page("zns-ns1-zns");
    zns[2816..2824].fill(0);
    let parsed = IdentifyNamespaceZns::parse(&zns).unwrap();
    assert!(parsed.zone_size_blocks(0).is_err());

    // A namespace descriptor whose length runs past the page.
    let mut desc = page("nvme-ns1-descriptors");
    desc[0] = 0x04;
    desc[1] = 0xff;
    assert!(parse_ns_id_descriptors(&desc[..64]).is_err());
}
