//! The real bring-up (`Controller::init`) over the simulator: identity,
//! limits and geometry read back as configured, for conventional and zoned
//! namespaces; logs; shutdown and a second bring-up on the same device.

mod sim_support;

use nvme_driver::cmd::admin;
use nvme_driver::sim::{FaultConfig, NamespaceConfig, SimConfig, Simulator};
use nvme_driver::spec::identify::{Oncs, CSI_NVM, CSI_ZONED};
use nvme_driver::spec::registers::{self, Csts, ShutdownStatus, Vs};
use nvme_driver::spec::status::{CommandSpecificStatus, GenericStatus, StatusCode};
use nvme_driver::{Error, Transport};
use sim_support::{init, Rig};

#[test]
fn default_controller_resembles_qemu_and_reads_back_as_configured() {
    let sim = Simulator::new(SimConfig::default());
    let controller = init(&sim);
    let id = controller.identify();
    assert_eq!((id.vid, id.ssvid), (0x1B36, 0x1AF4));
    assert_eq!((sim.pci_id().vendor, sim.pci_id().device), (0x1B36, 0x0010));
    assert_eq!(id.mn, "QEMU NVMe Ctrl");
    assert_eq!(id.mdts, 7);
    assert_eq!(controller.max_transfer_bytes(), Some(512 * 1024));
    assert_eq!(id.oncs.bits(), 0x15D | Oncs::VERIFY.bits());
    assert!(id.volatile_write_cache_present());
    assert!(!id.oacs.contains(nvme_driver::spec::identify::Oacs::DOORBELL_BUFFER_CONFIG));
    assert!(!controller.shadow_doorbells());
    assert_eq!(id.nn, 256);
    assert_eq!(controller.version(), Vs::V1_4);
    assert_eq!(controller.cap().max_queue_entries(), 2048);
    assert!(controller.cap().cqr());
    assert_eq!(controller.command_sets(), registers::CC_CSS_ALL_IO);
    assert_eq!(controller.io_queue_pairs(), 8, "as many as asked for, up to the configured 64");
    let namespaces = controller.namespaces();
    assert_eq!(namespaces.len(), 1);
    let ns = &namespaces[0];
    assert_eq!((ns.nsid, ns.csi, ns.block_size, ns.capacity_blocks), (1, CSI_NVM, 512, 2 * 1024 * 1024));
    assert_eq!(ns.identify.dlfeat, 0x01);
    assert_eq!((ns.identify.msrc, ns.identify.mssrl, ns.identify.mcl), (127, 128, 128));
    let nvm = controller.identify_nvm().unwrap();
    assert_eq!((nvm.vsl, nvm.wzsl, nvm.dmrl, nvm.dmrsl, nvm.dmsl), (7, 0, 0, 0x7FFFF, 0));
}

#[test]
fn a_namespace_reporting_no_copy_length_has_no_usable_copy() {
    // MSSRL and MCL 0 (as QEMU reports for the namespace of a controller
    // given a drive directly): Copy is in ONCS, yet moves no block; the
    // driver says so and refuses a Copy before the device fails it.
    let config = SimConfig::empty().with_namespace(NamespaceConfig::nvm(1 << 20, 512).copy_limits(0, 0, 0));
    let sim = Simulator::new(config);
    let controller = init(&sim);
    assert!(controller.identify().oncs.contains(Oncs::COPY));
    let ns = controller.namespace(1).unwrap();
    assert!(!ns.copy_usable());
    let pool = nvme_driver::dma::DmaPool::new(controller.transport(), 4096, 1).unwrap();
    let buffer = pool.get().unwrap();
    assert!(ns.copy(100, &[(0, 8)], nvme_driver::IoBuffer::new(buffer), 0).is_err());
    // The default limits take blocks.
    let sim = Simulator::new(SimConfig::empty().with_namespace(NamespaceConfig::nvm(1 << 20, 512)));
    assert!(init(&sim).namespace(1).unwrap().copy_usable());
}

#[test]
fn every_identify_knob_reads_back() {
    let mut config = SimConfig::empty()
        .with_namespace(NamespaceConfig::nvm(1 << 20, 4096).deallocate_keeps_data().copy_limits(15, 64, 256));
    config.pci_id.vendor = 0x8086;
    config.pci_id.device = 0x0A54;
    config.model = "Simulated Drive".into();
    config.serial = "S1234".into();
    config.firmware = "1.0".into();
    config.version = Vs::V2_0;
    config.mqes = 255;
    config.mdts = 5;
    config.oncs = Oncs::DATASET_MANAGEMENT | Oncs::WRITE_ZEROES;
    config.volatile_write_cache = false;
    config.nn = 16;
    config.max_io_queue_pairs = 4;
    config.wzsl = 3;
    config.vsl = 2;
    config.dmrl = 32;
    config.dmrsl = 4096;
    config.dmsl = 1 << 20;
    config.namespaces[0].dlfeat = 0x08;
    let sim = Simulator::new(config);
    let controller = init(&sim);
    let id = controller.identify();
    assert_eq!((id.vid, id.mn.as_str(), id.sn.as_str(), id.fr.as_str()), (0x8086, "Simulated Drive", "S1234", "1.0"));
    assert_eq!(sim.pci_id().device, 0x0A54);
    assert_eq!(controller.version(), Vs::V2_0);
    assert_eq!(controller.cap().mqes(), 255);
    assert_eq!(controller.max_transfer_bytes(), Some(128 * 1024));
    assert_eq!(id.oncs, Oncs::DATASET_MANAGEMENT | Oncs::WRITE_ZEROES);
    assert_eq!(id.ocfs, 0, "no Copy, no copy formats");
    assert!(!id.volatile_write_cache_present());
    assert_eq!(id.nn, 16);
    assert_eq!(controller.io_queue_pairs(), 4, "capped at the configured 4");
    let nvm = controller.identify_nvm().unwrap();
    assert_eq!((nvm.vsl, nvm.wzsl, nvm.dmrl, nvm.dmrsl, nvm.dmsl), (2, 3, 32, 4096, 1 << 20));
    let ns = &controller.namespaces()[0];
    assert_eq!((ns.block_size, ns.capacity_blocks), (4096, 1 << 20));
    assert_eq!(ns.identify.dlfeat, 0x08, "DLFEAT as configured");
    assert_eq!((ns.identify.msrc, ns.identify.mssrl, ns.identify.mcl), (15, 64, 256));
    let limits = controller.namespace(1).unwrap();
    let limits = limits.range_limits();
    assert_eq!((limits.dsm_ranges, limits.dsm_range_blocks, limits.dsm_total_blocks), (32, 4096, 1 << 20));
    assert_eq!((limits.copy_ranges, limits.copy_range_blocks, limits.copy_total_blocks), (16, 64, 256));
    // Queues deeper than MQES + 1 are refused by the driver.
    assert!(controller.create_queue_pair(512).is_err());
    assert!(controller.create_queue_pair(256).is_ok());
}

#[test]
fn zoned_bring_up_reports_zone_geometry() {
    let mut config = SimConfig::zoned(1 << 20, 512, 1 << 16, 3 << 14);
    config.namespaces[0] = config.namespaces[0].clone().max_open_zones(4).max_active_zones(6);
    config.zasl = 4;
    let sim = Simulator::new(config);
    let controller = init(&sim);
    let info = &controller.namespaces()[0];
    assert_eq!(info.csi, CSI_ZONED);
    let zoned = info.zoned.as_ref().unwrap();
    assert_eq!(zoned.zone_size_blocks, 1 << 16);
    assert_eq!((zoned.max_open_zones, zoned.max_active_zones), (Some(4), Some(6)));
    assert!(!zoned.identify.read_across_zone_boundaries());
    assert_eq!(controller.identify_zns().unwrap().zasl, 4);
    let ns = controller.namespace(1).unwrap();
    let geometry = ns.zones().unwrap();
    assert_eq!((geometry.zone_count, geometry.zone_append_max_bytes), (16, 64 * 1024));
    let zones = controller.report_zones(1, 0, 64).unwrap();
    assert_eq!(zones.len(), 16);
    assert!(zones.iter().all(|zone| zone.zcap == 3 << 14 && zone.wp == zone.zslba));
    assert_eq!(zones[3].zslba, 3 << 16);
}

#[test]
fn conventional_and_zoned_namespaces_side_by_side() {
    let config = SimConfig::empty()
        .with_namespace(NamespaceConfig::nvm(1 << 16, 512))
        .with_namespace(NamespaceConfig::zoned(1 << 16, 4096, 1 << 12, 1 << 12).read_across_zone_boundaries());
    let sim = Simulator::new(config);
    let controller = init(&sim);
    let namespaces = controller.namespaces();
    assert_eq!(namespaces.iter().map(|ns| (ns.nsid, ns.csi)).collect::<Vec<_>>(), vec![(1, CSI_NVM), (2, CSI_ZONED)]);
    assert!(namespaces[1].zoned.as_ref().unwrap().identify.read_across_zone_boundaries());
    assert_eq!(namespaces[1].zoned.as_ref().unwrap().max_open_zones, None, "no limit reported");
    // Identify for an NSID past NN is refused; an inactive one reads zeroes.
    assert!(controller.identify_raw(0x00, 3, 0, 0).unwrap().iter().all(|byte| *byte == 0));
    let error = controller.identify_raw(0x00, 257, 0, 0).unwrap_err();
    assert!(
        matches!(error, Error::Command { status, .. } if status.code() == StatusCode::Generic(GenericStatus::InvalidNamespaceOrFormat))
    );
}

#[test]
fn logs_count_what_happened() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    rig.write(0, &[7u8; 4096], false).unwrap();
    rig.read(0, 4096).unwrap();
    // A command the controller refuses lands in the error log.
    let mut bad = rig.ns.read(0, rig.buffer(512), 0).unwrap();
    bad.command.cdw10 = (1 << 16) as u32; // LBA 65536: past the end
    let status = rig.status(bad).unwrap_err();
    assert_eq!(status.code(), StatusCode::Generic(GenericStatus::LbaOutOfRange));
    assert!(status.dnr);
    let smart = rig.controller.smart_log().unwrap();
    assert_eq!((smart.host_write_commands, smart.host_read_commands), (1, 1));
    assert_eq!((smart.data_units_written, smart.data_units_read), (1, 1), "thousands of 512-byte units, rounded up");
    assert_eq!(smart.power_cycles, 1);
    assert_eq!(smart.error_log_entries, 1);
    let errors = rig.controller.error_log().unwrap();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].status.code(), StatusCode::Generic(GenericStatus::LbaOutOfRange));
    assert_eq!((errors[0].sqid, errors[0].nsid, errors[0].opcode, errors[0].lba), (1, 1, 0x02, 1 << 16));
    // Unknown log pages and admin opcodes.
    let error = rig.controller.admin_command(admin::get_log_page(0x7F, 0, 512, 0, 0, 0)).unwrap_err();
    assert!(
        matches!(error, Error::Command { status, .. } if status.code() == StatusCode::CommandSpecific(CommandSpecificStatus::InvalidLogPage))
    );
    let unknown = nvme_driver::spec::command::Command::new(0x3F);
    let error = rig.controller.admin_command(unknown).unwrap_err();
    assert!(
        matches!(error, Error::Command { status, admin: true, .. } if status.code() == StatusCode::Generic(GenericStatus::InvalidCommandOpcode) && status.dnr)
    );
    // Doorbell Buffer Config is not offered.
    let error = rig.controller.admin_command(admin::doorbell_buffer_config(0, 0)).unwrap_err();
    assert!(
        matches!(error, Error::Command { status, .. } if status.code() == StatusCode::Generic(GenericStatus::InvalidCommandOpcode))
    );
    // Features: the write cache, and one that is not saveable.
    let vwc = rig.controller.admin_command(admin::get_features(admin::FID_VOLATILE_WRITE_CACHE, 0, 0)).unwrap();
    assert_eq!(vwc.dw0, 1);
    let error = rig.controller.admin_command(admin::set_features(admin::FID_ARBITRATION, 0, true)).unwrap_err();
    assert!(
        matches!(error, Error::Command { status, .. } if status.code() == StatusCode::CommandSpecific(CommandSpecificStatus::FeatureIdentifierNotSaveable))
    );
    // Abort answers "not aborted".
    assert_eq!(rig.controller.admin_command(admin::abort(1, 3)).unwrap().dw0 & 1, 1);
    let stats = rig.sim.stats();
    assert_eq!(stats.io(0x01), 1);
    assert_eq!(stats.io(0x02), 2);
    assert!(stats.admin(0x06) >= 4, "identify pages at bring-up");
    assert_eq!(stats.admin(0x05), 1, "one I/O CQ");
}

#[test]
fn shutdown_then_a_second_bring_up_on_the_same_device() {
    let mut rig = Rig::new(
        SimConfig::nvm(1 << 16, 512)
            .with_faults(FaultConfig { power_cut_keep_probability: 0.0, ..FaultConfig::default() }),
    );
    rig.write(8, &[0x5A; 1024], false).unwrap();
    let sim = rig.finish();
    // A normal shutdown wrote the cache back and left the controller disabled.
    let csts = Csts(sim.read32(registers::CSTS));
    assert_eq!(csts.shst(), ShutdownStatus::Complete);
    assert!(!csts.rdy());
    assert_eq!(sim.dirty_blocks(1), 0);
    assert_eq!(sim.durable_block(1, 9), vec![0x5A; 512]);
    let mut rig = Rig::on(sim);
    assert_eq!(rig.read(8, 1024).unwrap(), vec![0x5A; 1024]);
    assert_eq!(Csts(rig.sim.read32(registers::CSTS)).shst(), ShutdownStatus::Normal);
}

/// Format NVM on a controller that does not offer it (the simulator's OACS
/// is 0), or to a format its namespace does not list, or of a namespace that
/// is not there: a typed refusal before any command is sent, and the
/// namespace is untouched.
#[test]
fn a_format_the_controller_cannot_do_is_refused_with_a_typed_error() {
    let sim = Simulator::new(SimConfig::nvm(1 << 16, 512));
    let mut controller = init(&sim);
    let formats_before = sim.stats().admin_commands[usize::from(nvme_driver::spec::command::opcode::admin::FORMAT_NVM)];
    let error = controller.format_namespace(1, 512, 8).unwrap_err();
    assert!(matches!(&error, Error::Unsupported(why) if why.contains("Format NVM")), "{error}");
    let error = controller.format_namespace(9, 512, 8).unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error}");
    assert_eq!(
        sim.stats().admin_commands[usize::from(nvme_driver::spec::command::opcode::admin::FORMAT_NVM)],
        formats_before
    );
    assert_eq!(controller.namespace(1).unwrap().block_size(), 512);
}
