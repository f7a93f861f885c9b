//! Admin commands (NVMe Base 2.0 §5): Identify, Get Log Page, Set and Get
//! Features, queue creation and deletion, Abort and Asynchronous Event
//! Request. Identify pages are built at the offsets the driver's parsers
//! read (`spec::identify::*_offsets`), so the driver reads back exactly
//! what the configuration says.

use super::controller::{ErrorEntry, Outcome, State, AER_MAX, ERROR_LOG_ENTRIES};
use super::dma::{resolve_prps, Transfer, PAGE_SIZE};
use crate::cmd::admin::{
    FID_ARBITRATION, FID_ASYNC_EVENT_CONFIG, FID_HOST_BEHAVIOR_SUPPORT, FID_INTERRUPT_COALESCING, FID_NUMBER_OF_QUEUES,
    FID_POWER_MANAGEMENT, FID_TEMPERATURE_THRESHOLD, FID_VOLATILE_WRITE_CACHE, SEL_CURRENT, SEL_SUPPORTED_CAPABILITIES,
};
use crate::spec::command::opcode::admin as op;
use crate::spec::command::{Command, SQE_SIZE};
use crate::spec::completion::CQE_SIZE;
use crate::spec::features::{HostBehaviorSupport, HOST_BEHAVIOR_SUPPORT_SIZE};
use crate::spec::identify::{
    controller_offsets as ctrl, namespace_offsets as ns_off, nvm_controller_offsets as nvm_off, CopyFormats,
    CNS_ACTIVE_NAMESPACES, CNS_CONTROLLER, CNS_CSI_CONTROLLER, CNS_CSI_NAMESPACE, CNS_NAMESPACE, CNS_NS_ID_DESCRIPTORS,
    CSI_NVM, CSI_ZONED, IDENTIFY_DATA_SIZE, LBA_FORMAT_SIZE, NIDL_CSI, NIDT_CSI, NSID_BROADCAST, VWC_PRESENT,
};
use crate::spec::log::{
    error_entry_offsets as err_off, smart_offsets as smart_off, DATA_UNIT_BYTES, ERROR_LOG_ENTRY_SIZE,
    LOG_ERROR_INFORMATION, LOG_FIRMWARE_SLOT, LOG_SMART_HEALTH, SMART_HEALTH_LOG_SIZE,
};
use crate::spec::status::{CommandSpecificStatus, GenericStatus, Status};
use crate::spec::zns::{
    zns_namespace_offsets as zns_off, ZNS_CONTROLLER_ZASL_OFFSET, ZNS_LBAFE_SIZE, ZNS_RESOURCES_UNLIMITED,
};

/// The LBA formats every namespace lists, as (LBADS, MS): QEMU 7.2's table
/// (hw/nvme/ns.c, `nvme_ns_init`), 512 and 4096 bytes each with 0, 8, 16
/// and 64 bytes of metadata. FLBAS selects the configured one.
const LBA_FORMATS: [(u8, u16); 8] = [(9, 0), (9, 8), (9, 16), (9, 64), (12, 0), (12, 8), (12, 16), (12, 64)];
// FLBAS bits 3:0 index them all: no need for bits 6:5.
const _: () = assert!(LBA_FORMATS.len() <= 16);
/// MC bit 1: metadata may be transferred in a separate buffer (NVM Command
/// Set 1.0, Identify Namespace). Bit 0 (extended LBAs) stays clear: the
/// simulator moves metadata only through MPTR. QEMU 7.2 sets both.
const MC_SEPARATE_BUFFER: u8 = 1 << 1;
/// Bytes of a Get Log Page or report transfer when MDTS sets no limit.
pub(crate) const TRANSFER_BYTES_MAX: u64 = 2 << 20;
/// VWC bits 2:1 = 11b: Flush with the broadcast NSID is supported.
const VWC_FLUSH_BROADCAST: u8 = 0b110;
/// Get Log Page CDW10 bit 15: Retain Asynchronous Event.
const CDW10_RAE: u32 = 1 << 15;
/// Asynchronous Event Types (NVMe Base 2.0 Figure 146).
const AER_TYPE_ERROR: u8 = 0;
const AER_TYPE_SMART: u8 = 1;
/// SMART / Health status information (Figure 148).
const AER_INFO_SMART_RELIABILITY: u8 = 0x00;
const AER_INFO_SMART_TEMPERATURE: u8 = 0x01;
const AER_INFO_SMART_SPARE: u8 = 0x02;
/// Critical Warning bits (Figure 207): spare below threshold, temperature.
const CRITICAL_WARNING_SPARE: u8 = 1 << 0;
const CRITICAL_WARNING_TEMPERATURE: u8 = 1 << 1;
/// Events kept while no request is outstanding (QEMU's aer_max_queued).
const AER_QUEUED_MAX: usize = 64;
/// Composite temperature reported, kelvin (50 °C).
const TEMPERATURE_KELVIN: u16 = 323;

pub(crate) fn invalid_field() -> Status {
    Status::from(GenericStatus::InvalidFieldInCommand).with_dnr()
}

pub(crate) fn invalid_opcode() -> Status {
    Status::from(GenericStatus::InvalidCommandOpcode).with_dnr()
}

pub(crate) fn invalid_namespace() -> Status {
    Status::from(GenericStatus::InvalidNamespaceOrFormat).with_dnr()
}

fn specific(code: CommandSpecificStatus) -> Status {
    Status::from(code).with_dnr()
}

/// The index of the LBA format of `block_size` data bytes and
/// `metadata_bytes` of metadata (FLBAS bits 3:0).
fn lba_format_index(block_size: u64, metadata_bytes: u16) -> u8 {
    let lbads = block_size.trailing_zeros();
    let index = LBA_FORMATS
        .iter()
        .position(|&(format_lbads, ms)| u32::from(format_lbads) == lbads && ms == metadata_bytes)
        .expect("the configuration's validation admits listed formats only");
    index as u8
}

fn put(page: &mut [u8], offset: usize, bytes: &[u8]) {
    page[offset..offset + bytes.len()].copy_from_slice(bytes);
}

/// An ASCII field, space padded on the right.
fn put_ascii(page: &mut [u8], offset: usize, len: usize, text: &str) {
    let field = &mut page[offset..offset + len];
    field.fill(b' ');
    let text = text.as_bytes();
    field[..text.len().min(len)].copy_from_slice(&text[..text.len().min(len)]);
}

impl State {
    /// Executes one admin command.
    pub(crate) fn admin(&mut self, command: &Command) -> Outcome {
        // A namespace's geometry may change: lanes take it again.
        self.lane_namespaces = None;
        self.stats.admin_commands[usize::from(command.opcode)] += 1;
        if command.psdt() != 0 || command.fuse() != 0 {
            // Admin commands describe data with PRPs (over PCIe they must);
            // no fused operations (FUSES = 0).
            return Outcome::from_result(Err(invalid_field()));
        }
        let result = match command.opcode {
            op::IDENTIFY => self.identify(command),
            op::GET_LOG_PAGE => self.get_log_page(command),
            op::SET_FEATURES => self.set_features(command),
            op::GET_FEATURES => self.get_features(command),
            op::CREATE_IO_CQ => self.create_cq(command),
            op::CREATE_IO_SQ => self.create_sq(command),
            op::DELETE_IO_SQ => self.delete_io_sq(command),
            op::DELETE_IO_CQ => self.delete_io_cq(command),
            op::ABORT => self.abort(command),
            op::ASYNC_EVENT_REQUEST => {
                if self.aers.len() >= AER_MAX {
                    Err(specific(CommandSpecificStatus::AsyncEventRequestLimitExceeded))
                } else {
                    self.aers.push(command.cid);
                    // Complete it at once if an event was waiting for one.
                    self.deliver_events();
                    return Outcome::Held;
                }
            }
            // Doorbell Buffer Config, Format NVM, Namespace Management,
            // firmware, ... are not offered (OACS = 0).
            _ => Err(invalid_opcode()),
        };
        Outcome::from_result(result)
    }

    /// Copies `len` bytes of `self.buffer` to the host through PRP1/PRP2.
    fn send_buffer(&mut self, command: &Command, len: usize) -> Result<(), Status> {
        let mut segments = std::mem::take(&mut self.segments);
        let resolved = resolve_prps(&mut self.dma, command.prp1, command.prp2, len, &mut segments);
        if resolved.is_ok() {
            Transfer::new(&segments).put(&self.buffer[..len]);
        } else {
            self.stats.dma_errors += 1;
        }
        self.segments = segments;
        resolved
    }

    /// Copies `len` bytes from the host through PRP1/PRP2 into
    /// `self.buffer`.
    fn receive_buffer(&mut self, command: &Command, len: usize) -> Result<(), Status> {
        self.clear_buffer(len);
        let mut segments = std::mem::take(&mut self.segments);
        let resolved = resolve_prps(&mut self.dma, command.prp1, command.prp2, len, &mut segments);
        if resolved.is_ok() {
            Transfer::new(&segments).take(&mut self.buffer[..len]);
        } else {
            self.stats.dma_errors += 1;
        }
        self.segments = segments;
        resolved
    }

    fn clear_buffer(&mut self, len: usize) {
        super::zeroed(&mut self.buffer, len);
    }

    fn active_namespace(&self, nsid: u32) -> Option<usize> {
        let index = nsid.checked_sub(1)? as usize;
        (index < self.namespaces.len()).then_some(index)
    }

    // ---- Identify ----

    fn identify(&mut self, command: &Command) -> Result<(u32, u32), Status> {
        let cns = command.cdw10 as u8;
        let csi = (command.cdw11 >> 24) as u8;
        let nsid = command.nsid;
        self.clear_buffer(IDENTIFY_DATA_SIZE);
        match cns {
            CNS_CONTROLLER => self.identify_controller(),
            CNS_NAMESPACE => {
                if nsid == 0 || (nsid > self.config.nn && nsid != NSID_BROADCAST) {
                    return Err(invalid_namespace());
                }
                // An inactive NSID (or the broadcast one) gets a zeroed page.
                if let Some(index) = self.active_namespace(nsid) {
                    self.identify_namespace(index);
                }
            }
            CNS_ACTIVE_NAMESPACES => {
                if nsid >= NSID_BROADCAST - 1 {
                    return Err(invalid_namespace());
                }
                let ids = self.namespaces.iter().map(|ns| ns.nsid).filter(|id| *id > nsid);
                for (i, id) in ids.take(IDENTIFY_DATA_SIZE / 4).enumerate() {
                    put(&mut self.buffer, i * 4, &id.to_le_bytes());
                }
            }
            CNS_NS_ID_DESCRIPTORS => {
                let index = self.active_namespace(nsid).ok_or_else(invalid_namespace)?;
                let descriptor = [NIDT_CSI, NIDL_CSI, 0, 0, self.namespaces[index].csi()];
                put(&mut self.buffer, 0, &descriptor);
            }
            CNS_CSI_NAMESPACE => {
                let index = self.active_namespace(nsid).ok_or_else(invalid_namespace)?;
                match (csi, self.namespaces[index].zones.is_some()) {
                    // The NVM Command Set specific namespace structure:
                    // nothing this controller reports (zeroes, as QEMU).
                    (CSI_NVM, _) => {}
                    (CSI_ZONED, true) => self.identify_namespace_zns(index),
                    _ => return Err(invalid_field()),
                }
            }
            CNS_CSI_CONTROLLER => match csi {
                CSI_NVM => self.identify_controller_nvm(),
                CSI_ZONED => self.buffer[ZNS_CONTROLLER_ZASL_OFFSET] = self.config.zasl,
                _ => return Err(invalid_field()),
            },
            _ => return Err(invalid_field()),
        }
        self.send_buffer(command, IDENTIFY_DATA_SIZE)?;
        Ok((0, 0))
    }

    fn identify_controller(&mut self) {
        let config = &self.config;
        let page = &mut self.buffer;
        put(page, ctrl::VID, &config.pci_id.vendor.to_le_bytes());
        put(page, ctrl::SSVID, &config.pci_id.subsystem_vendor.to_le_bytes());
        put_ascii(page, ctrl::SN, 20, &config.serial);
        put_ascii(page, ctrl::MN, 40, &config.model);
        put_ascii(page, ctrl::FR, 8, &config.firmware);
        page[ctrl::RAB] = 6;
        put(page, ctrl::IEEE, &[0x00, 0x54, 0x52]);
        page[ctrl::MDTS] = config.mdts;
        put(page, ctrl::SGLS, &config.sgls.to_le_bytes());
        put(page, ctrl::VER, &config.version.0.to_le_bytes());
        page[ctrl::CNTRLTYPE] = 1; // I/O controller
                                   // OACS 0: no Doorbell Buffer Config, Format, Namespace Management.
        page[ctrl::ACL] = 3;
        page[ctrl::AERL] = (AER_MAX - 1) as u8;
        page[ctrl::ELPE] = (ERROR_LOG_ENTRIES - 1) as u8;
        put(page, ctrl::WCTEMP, &343u16.to_le_bytes());
        put(page, ctrl::CCTEMP, &373u16.to_le_bytes());
        let total: u128 =
            self.namespaces.iter().map(|ns| u128::from(ns.capacity_blocks) * u128::from(ns.block_size)).sum();
        put(page, ctrl::TNVMCAP, &total.to_le_bytes());
        page[ctrl::SQES] = 0x66;
        page[ctrl::CQES] = 0x44;
        put(page, ctrl::NN, &config.nn.to_le_bytes());
        put(page, ctrl::ONCS, &config.oncs.bits().to_le_bytes());
        page[ctrl::VWC] = if config.volatile_write_cache { VWC_PRESENT | VWC_FLUSH_BROADCAST } else { 0 };
        put(page, ctrl::OCFS, &config.ocfs().bits().to_le_bytes());
        let subnqn = format!("nqn.2019-08.org.qemu:{}", config.serial);
        put(page, ctrl::SUBNQN, subnqn.as_bytes());
    }

    fn identify_controller_nvm(&mut self) {
        let config = &self.config;
        let page = &mut self.buffer;
        page[nvm_off::VSL] = config.vsl;
        page[nvm_off::WZSL] = config.wzsl;
        page[nvm_off::DMRL] = config.dmrl;
        put(page, nvm_off::DMRSL, &config.dmrsl.to_le_bytes());
        put(page, nvm_off::DMSL, &config.dmsl.to_le_bytes());
    }

    fn identify_namespace(&mut self, index: usize) {
        let ns = &self.namespaces[index];
        let page = &mut self.buffer;
        let blocks = ns.capacity_blocks.to_le_bytes();
        put(page, ns_off::NSZE, &blocks);
        put(page, ns_off::NCAP, &blocks);
        put(page, ns_off::NUSE, &blocks);
        // NSFEAT bit 4: NPWG, NPWA, NPDG, NPDA and NOWS are valid.
        page[ns_off::NSFEAT] = 0x10;
        page[ns_off::NLBAF] = (LBA_FORMATS.len() - 1) as u8;
        // FLBAS bit 4 (metadata at the end of each block) stays clear, and
        // DPC and DPS stay 0: no protection information.
        page[ns_off::FLBAS] = lba_format_index(ns.block_size, ns.config.metadata_bytes);
        page[ns_off::MC] = MC_SEPARATE_BUFFER;
        page[ns_off::DLFEAT] = ns.config.dlfeat;
        let bytes = u128::from(ns.capacity_blocks) * u128::from(ns.block_size);
        put(page, ns_off::NVMCAP, &bytes.to_le_bytes());
        // Preferred write granularity and optimal write size: 4 KiB, 0-based.
        let per_page = (PAGE_SIZE as u64 / ns.block_size).saturating_sub(1) as u16;
        put(page, ns_off::NPWG, &per_page.to_le_bytes());
        put(page, ns_off::NOWS, &per_page.to_le_bytes());
        put(page, ns_off::MSSRL, &ns.config.mssrl.to_le_bytes());
        put(page, ns_off::MCL, &ns.config.mcl.to_le_bytes());
        page[ns_off::MSRC] = ns.config.msrc;
        for (i, (lbads, ms)) in LBA_FORMATS.iter().enumerate() {
            // MS bits 15:0, LBADS bits 23:16, RP 0 (best performance).
            let format = u32::from(*lbads) << 16 | u32::from(*ms);
            put(page, ns_off::LBAF + i * LBA_FORMAT_SIZE, &format.to_le_bytes());
        }
    }

    fn identify_namespace_zns(&mut self, index: usize) {
        let ns = &self.namespaces[index];
        let zoned = ns.config.zoned.as_ref().expect("a zoned namespace");
        let page = &mut self.buffer;
        let ozcs: u16 = u16::from(zoned.read_across_zone_boundaries);
        put(page, zns_off::OZCS, &ozcs.to_le_bytes());
        let limit = |zones: Option<u32>| zones.map_or(ZNS_RESOURCES_UNLIMITED, |n| n - 1);
        put(page, zns_off::MAR, &limit(zoned.max_active_zones).to_le_bytes());
        put(page, zns_off::MOR, &limit(zoned.open_limit()).to_le_bytes());
        let zone_bytes = zoned.zone_size_blocks * ns.block_size;
        for (i, (lbads, _)) in LBA_FORMATS.iter().enumerate() {
            // The zone size of each LBA format, in its own blocks.
            let zsze = zone_bytes >> lbads;
            put(page, zns_off::LBAFE + i * ZNS_LBAFE_SIZE, &zsze.to_le_bytes());
        }
    }

    // ---- Get Log Page ----

    fn get_log_page(&mut self, command: &Command) -> Result<(u32, u32), Status> {
        let lid = command.cdw10 as u8;
        let numd = u64::from(command.cdw10 >> 16) | u64::from(command.cdw11 & 0xFFFF) << 16;
        let len = (numd + 1) * 4;
        let offset = u64::from(command.cdw12) | u64::from(command.cdw13) << 32;
        let limit = self.config.max_transfer_bytes().unwrap_or(TRANSFER_BYTES_MAX);
        if len > limit || offset % 4 != 0 {
            return Err(invalid_field());
        }
        let size = match lid {
            LOG_ERROR_INFORMATION => ERROR_LOG_ENTRIES * ERROR_LOG_ENTRY_SIZE,
            LOG_SMART_HEALTH | LOG_FIRMWARE_SLOT => SMART_HEALTH_LOG_SIZE,
            _ => return Err(specific(CommandSpecificStatus::InvalidLogPage)),
        };
        if offset > size as u64 {
            return Err(invalid_field());
        }
        let len = len as usize;
        let offset = offset as usize;
        // The log at its offset, zeroes past its end.
        self.clear_buffer(size.max(offset + len));
        match lid {
            LOG_ERROR_INFORMATION => self.error_log_page(),
            LOG_SMART_HEALTH => self.smart_log_page(),
            _ => {
                // Firmware Slot Information: slot 1 active, its revision.
                self.buffer[0] = 1;
                put_ascii(&mut self.buffer, 8, 8, &self.config.firmware);
            }
        }
        self.buffer.copy_within(offset..offset + len, 0);
        self.send_buffer(command, len)?;
        // Reading a log page with Retain Asynchronous Event clear (CDW10
        // bit 15) unmasks the event type it belongs to (NVMe Base 2.0
        // §5.16, §5.2), as QEMU does.
        if command.cdw10 & CDW10_RAE == 0 {
            let event_type = match lid {
                LOG_ERROR_INFORMATION => Some(AER_TYPE_ERROR),
                LOG_SMART_HEALTH => Some(AER_TYPE_SMART),
                _ => None,
            };
            if let Some(event_type) = event_type {
                self.aer_masked &= !(1 << event_type);
                self.deliver_events();
            }
        }
        Ok((0, 0))
    }

    fn error_log_page(&mut self) {
        let entries: Vec<ErrorEntry> = self.error_log.iter().copied().collect();
        for (i, entry) in entries.iter().enumerate() {
            let page = &mut self.buffer[i * ERROR_LOG_ENTRY_SIZE..(i + 1) * ERROR_LOG_ENTRY_SIZE];
            put(page, err_off::ERROR_COUNT, &entry.count.to_le_bytes());
            put(page, err_off::SQID, &entry.sqid.to_le_bytes());
            put(page, err_off::CID, &entry.cid.to_le_bytes());
            put(page, err_off::STATUS, &(entry.status.to_field() << 1).to_le_bytes());
            put(page, err_off::PARAMETER_ERROR_LOCATION, &0xFFFFu16.to_le_bytes());
            put(page, err_off::LBA, &entry.lba.to_le_bytes());
            put(page, err_off::NSID, &entry.nsid.to_le_bytes());
            page[err_off::CSI] = entry.csi;
            page[err_off::OPCODE] = entry.opcode;
            page[err_off::LOG_PAGE_VERSION] = 1;
        }
    }

    fn smart_log_page(&mut self) {
        let smart = self.smart;
        let units = |bytes: u128| (bytes / 512).div_ceil(DATA_UNIT_BYTES / 512);
        let page = &mut self.buffer;
        page[smart_off::CRITICAL_WARNING] = self.critical_warning;
        put(page, smart_off::COMPOSITE_TEMPERATURE, &TEMPERATURE_KELVIN.to_le_bytes());
        page[smart_off::AVAILABLE_SPARE] = 100;
        page[smart_off::AVAILABLE_SPARE_THRESHOLD] = 10;
        put(page, smart_off::DATA_UNITS_READ, &units(smart.read_bytes).to_le_bytes());
        put(page, smart_off::DATA_UNITS_WRITTEN, &units(smart.written_bytes).to_le_bytes());
        put(page, smart_off::HOST_READ_COMMANDS, &smart.host_reads.to_le_bytes());
        put(page, smart_off::HOST_WRITE_COMMANDS, &smart.host_writes.to_le_bytes());
        put(page, smart_off::POWER_CYCLES, &smart.power_cycles.to_le_bytes());
        put(page, smart_off::UNSAFE_SHUTDOWNS, &smart.unsafe_shutdowns.to_le_bytes());
        put(page, smart_off::MEDIA_ERRORS, &smart.media_errors.to_le_bytes());
        put(page, smart_off::ERROR_LOG_ENTRIES, &u128::from(self.error_count).to_le_bytes());
        put(page, smart_off::TEMPERATURE_SENSORS, &TEMPERATURE_KELVIN.to_le_bytes());
    }

    // ---- Features ----

    fn set_features(&mut self, command: &Command) -> Result<(u32, u32), Status> {
        let fid = command.cdw10 as u8;
        let save = command.cdw10 >> 31 != 0;
        let value = command.cdw11;
        let known = matches!(
            fid,
            FID_ARBITRATION
                | FID_POWER_MANAGEMENT
                | FID_TEMPERATURE_THRESHOLD
                | FID_VOLATILE_WRITE_CACHE
                | FID_NUMBER_OF_QUEUES
                | FID_INTERRUPT_COALESCING
                | FID_ASYNC_EVENT_CONFIG
                | FID_HOST_BEHAVIOR_SUPPORT
        );
        if !known {
            return Err(invalid_field());
        }
        if save {
            return Err(specific(CommandSpecificStatus::FeatureIdentifierNotSaveable));
        }
        let features = &mut self.features;
        match fid {
            FID_ARBITRATION => features.arbitration = value,
            FID_POWER_MANAGEMENT => features.power_management = value,
            FID_TEMPERATURE_THRESHOLD => features.temperature_threshold = value,
            FID_INTERRUPT_COALESCING => features.interrupt_coalescing = value,
            FID_ASYNC_EVENT_CONFIG => features.async_event_config = value,
            FID_HOST_BEHAVIOR_SUPPORT => return self.set_host_behavior(command),
            FID_VOLATILE_WRITE_CACHE => {
                if !self.config.volatile_write_cache {
                    return Err(invalid_field());
                }
                let enable = value & 1 != 0;
                if !enable {
                    // Turning the cache off writes it back first.
                    for namespace in &mut self.namespaces {
                        namespace.storage_mut().flush();
                    }
                }
                self.features.volatile_write_cache = enable;
            }
            _ => {
                // Number of Queues: 0-based counts; 65535 is reserved.
                let sq_requested = value & 0xFFFF;
                let cq_requested = value >> 16;
                if sq_requested == 0xFFFF || cq_requested == 0xFFFF {
                    return Err(invalid_field());
                }
                let max = u32::from(self.config.max_io_queue_pairs);
                features.sq_count = (sq_requested + 1).min(max) as u16;
                features.cq_count = (cq_requested + 1).min(max) as u16;
                return Ok((self.number_of_queues(), 0));
            }
        }
        Ok((0, 0))
    }

    /// Set Features – Host Behavior Support (NVMe Base 2.1
    /// §5.1.25.1.14): the 512-byte structure from the host replaces the
    /// one kept. CDFE may enable only the formats that need an enable
    /// (2h, 3h) and that OCFS offers; any other bit is Invalid Field in
    /// Command, and nothing changes. The other fields are kept as sent:
    /// nothing in the simulator depends on them.
    fn set_host_behavior(&mut self, command: &Command) -> Result<(u32, u32), Status> {
        self.receive_buffer(command, HOST_BEHAVIOR_SUPPORT_SIZE)?;
        let wanted = HostBehaviorSupport::parse(&self.buffer[..HOST_BEHAVIOR_SUPPORT_SIZE]).expect("sized");
        let enabled_here = self.config.ocfs() & (CopyFormats::FORMAT_2 | CopyFormats::FORMAT_3);
        if !enabled_here.contains(wanted.cdfe()) {
            return Err(invalid_field());
        }
        self.features.host_behavior = wanted;
        Ok((0, 0))
    }

    /// Whether a Copy may use Descriptor Format `format`: OCFS offers it
    /// and, for 2h and 3h, Host Behavior Support enabled it (NVM Command
    /// Set 1.1 §3.3.2: a format not enabled is processed as one not
    /// supported).
    pub(crate) fn copy_format_enabled(&self, format: u8) -> bool {
        let Some(bit) = 1u16.checked_shl(u32::from(format)) else {
            return false;
        };
        let format = CopyFormats::from_bits_retain(bit);
        let needs_enable = CopyFormats::FORMAT_2 | CopyFormats::FORMAT_3;
        self.config.ocfs().contains(format)
            && (!needs_enable.contains(format) || self.features.host_behavior.cdfe().contains(format))
    }

    fn number_of_queues(&self) -> u32 {
        u32::from(self.features.cq_count - 1) << 16 | u32::from(self.features.sq_count - 1)
    }

    fn get_features(&mut self, command: &Command) -> Result<(u32, u32), Status> {
        let fid = command.cdw10 as u8;
        let select = (command.cdw10 >> 8) as u8 & 0b111;
        let defaults = super::controller::Features::new(&self.config);
        let current = if select == SEL_CURRENT { self.features } else { defaults };
        if fid == FID_HOST_BEHAVIOR_SUPPORT && select < SEL_SUPPORTED_CAPABILITIES {
            // The structure goes to the host's buffer; DW0 carries nothing.
            // Not saveable: the saved value is the default, all zeroes.
            self.clear_buffer(HOST_BEHAVIOR_SUPPORT_SIZE);
            put(&mut self.buffer, 0, &current.host_behavior.to_bytes());
            self.send_buffer(command, HOST_BEHAVIOR_SUPPORT_SIZE)?;
            return Ok((0, 0));
        }
        let value = match fid {
            FID_ARBITRATION => current.arbitration,
            FID_POWER_MANAGEMENT => current.power_management,
            FID_TEMPERATURE_THRESHOLD => current.temperature_threshold,
            FID_INTERRUPT_COALESCING => current.interrupt_coalescing,
            FID_ASYNC_EVENT_CONFIG => current.async_event_config,
            FID_VOLATILE_WRITE_CACHE if self.config.volatile_write_cache => u32::from(current.volatile_write_cache),
            FID_NUMBER_OF_QUEUES => u32::from(current.cq_count - 1) << 16 | u32::from(current.sq_count - 1),
            FID_HOST_BEHAVIOR_SUPPORT => 0,
            _ => return Err(invalid_field()),
        };
        if select == SEL_SUPPORTED_CAPABILITIES {
            // Changeable, not saveable, not namespace specific.
            return Ok((0b100, 0));
        }
        if select > SEL_SUPPORTED_CAPABILITIES {
            return Err(invalid_field());
        }
        Ok((value, 0))
    }

    // ---- queues ----

    /// The host memory of a new I/O queue of `bytes` at PRP1: page aligned
    /// and inside one mapping (physically contiguous, CAP.CQR = 1).
    fn queue_memory(&mut self, command: &Command, bytes: usize) -> Result<(super::dma::HostRange, u64), Status> {
        if command.cdw11 & 1 == 0 {
            return Err(invalid_field());
        }
        if command.prp1 == 0 {
            return Err(invalid_field());
        }
        if !command.prp1.is_multiple_of(PAGE_SIZE as u64) {
            return Err(Status::from(GenericStatus::PrpOffsetInvalid).with_dnr());
        }
        self.dma.translate(command.prp1, bytes).ok_or_else(|| {
            self.stats.dma_errors += 1;
            Status::from(GenericStatus::DataTransferError)
        })
    }

    fn create_cq(&mut self, command: &Command) -> Result<(u32, u32), Status> {
        let qid = command.cdw10 as u16;
        let qsize = command.cdw10 >> 16;
        if qid == 0 || qid > self.features.cq_count || self.cqs[usize::from(qid)].is_some() {
            return Err(specific(CommandSpecificStatus::InvalidQueueIdentifier));
        }
        if qsize == 0 || qsize > u32::from(self.config.mqes) {
            return Err(specific(CommandSpecificStatus::InvalidQueueSize));
        }
        let interrupts = command.cdw11 & 0b10 != 0;
        if interrupts && command.cdw11 >> 16 != 0 {
            // One interrupt vector, and nobody to deliver it to.
            return Err(specific(CommandSpecificStatus::InvalidInterruptVector));
        }
        let size = qsize + 1;
        let (ring, mapping) = self.queue_memory(command, size as usize * CQE_SIZE)?;
        self.add_cq(qid, ring, mapping, size);
        Ok((0, 0))
    }

    fn create_sq(&mut self, command: &Command) -> Result<(u32, u32), Status> {
        let qid = command.cdw10 as u16;
        let qsize = command.cdw10 >> 16;
        let cqid = (command.cdw11 >> 16) as u16;
        if qid == 0 || qid > self.features.sq_count || self.sqs[usize::from(qid)].is_some() {
            return Err(specific(CommandSpecificStatus::InvalidQueueIdentifier));
        }
        if qsize == 0 || qsize > u32::from(self.config.mqes) {
            return Err(specific(CommandSpecificStatus::InvalidQueueSize));
        }
        if cqid == 0 || self.cqs.get(usize::from(cqid)).is_none_or(Option::is_none) {
            return Err(specific(CommandSpecificStatus::CompletionQueueInvalid));
        }
        let size = qsize + 1;
        let (ring, mapping) = self.queue_memory(command, size as usize * SQE_SIZE)?;
        self.add_sq(qid, ring, mapping, size, cqid);
        Ok((0, 0))
    }

    fn delete_io_sq(&mut self, command: &Command) -> Result<(u32, u32), Status> {
        let qid = command.cdw10 as u16;
        if qid == 0 || self.sqs.get(usize::from(qid)).is_none_or(Option::is_none) {
            return Err(specific(CommandSpecificStatus::InvalidQueueIdentifier));
        }
        self.delete_sq(qid);
        Ok((0, 0))
    }

    fn delete_io_cq(&mut self, command: &Command) -> Result<(u32, u32), Status> {
        let qid = command.cdw10 as u16;
        let Some(Some(cq)) = self.cqs.get(usize::from(qid)) else {
            return Err(specific(CommandSpecificStatus::InvalidQueueIdentifier));
        };
        if qid == 0 {
            return Err(specific(CommandSpecificStatus::InvalidQueueIdentifier));
        }
        if cq.sqs > 0 {
            return Err(specific(CommandSpecificStatus::InvalidQueueDeletion));
        }
        self.delete_cq(qid);
        Ok((0, 0))
    }

    /// Abort (NVMe Base 2.0 §5.1): CDW10 bits 15:0 name the SQ, bits 31:16
    /// the command. A command hung inside the controller (its completion
    /// dropped by a fault) is aborted: it completes on its CQ with Command
    /// Abort Requested and the Abort's DW0 bit 0 is clear. Every other
    /// command has already executed here (commands execute when fetched;
    /// a read on another thread may still be moving its data,
    /// `sim/deferred.rs`), so the answer is "not aborted", DW0 bit 0 set,
    /// as it is for every
    /// command under [`crate::sim::Fault::DeclineAborts`]. A queue that
    /// does not exist is Invalid Field in Command (QEMU answers the same).
    fn abort(&mut self, command: &Command) -> Result<(u32, u32), Status> {
        let sqid = command.cdw10 as u16;
        let cid = (command.cdw10 >> 16) as u16;
        if self.sqs.get(usize::from(sqid)).is_none_or(Option::is_none) {
            return Err(invalid_field());
        }
        if self.decline_aborts {
            return Ok((1, 0));
        }
        let Some(index) = self.hung.iter().position(|hung| hung.sqid == sqid && hung.cid == cid) else {
            return Ok((1, 0));
        };
        let hung = self.hung.swap_remove(index);
        let cqid = self.sqs[usize::from(sqid)].as_ref().map_or(0, |sq| sq.cqid);
        let status = Status::from(GenericStatus::CommandAbortRequested);
        self.stats.faults.aborted_commands += 1;
        self.stats.errors += 1;
        self.post(cqid, super::controller::Entry { status, dw0: 0, dw1: 0, ..hung });
        Ok((0, 0))
    }

    /// Sets the SMART Critical Warning and queues a SMART event for each
    /// newly set bit that Asynchronous Event Configuration enables (as
    /// QEMU's `nvme_smart_event`; information per NVMe Base 2.0 Figure 148).
    pub(crate) fn set_critical_warning(&mut self, value: u8) {
        let new = value & !self.critical_warning;
        self.critical_warning = value;
        for bit in 0..8 {
            let warning = 1u8 << bit;
            if new & warning == 0 || self.features.async_event_config & u32::from(warning) == 0 {
                continue;
            }
            let information = match warning {
                CRITICAL_WARNING_SPARE => AER_INFO_SMART_SPARE,
                CRITICAL_WARNING_TEMPERATURE => AER_INFO_SMART_TEMPERATURE,
                _ => AER_INFO_SMART_RELIABILITY,
            };
            if self.aer_queue.len() < AER_QUEUED_MAX {
                self.aer_queue.push_back((AER_TYPE_SMART, information, LOG_SMART_HEALTH));
            }
        }
        self.deliver_events();
    }

    /// Completes held Asynchronous Event Requests with queued events whose
    /// type is not masked, masking each type as it is reported until the
    /// host reads its log page.
    pub(crate) fn deliver_events(&mut self) {
        while !self.aers.is_empty() && self.processing() {
            let Some(index) =
                self.aer_queue.iter().position(|(event_type, _, _)| self.aer_masked & (1 << event_type) == 0)
            else {
                return;
            };
            let (event_type, information, log_page) = self.aer_queue.remove(index).expect("found");
            self.aer_masked |= 1 << event_type;
            self.async_event(event_type, information, log_page);
        }
    }

    /// Completes one held Asynchronous Event Request, if any: DW0 = event
    /// type | information << 8 | log page << 16.
    pub(crate) fn async_event(&mut self, event_type: u8, information: u8, log_page: u8) -> bool {
        if self.aers.is_empty() || !self.processing() {
            return false;
        }
        let cid = self.aers.remove(0);
        let dw0 = u32::from(event_type & 0b111) | u32::from(information) << 8 | u32::from(log_page) << 16;
        let command = Command { cid, ..Command::new(op::ASYNC_EVENT_REQUEST) };
        let entry = super::controller::Entry { sqid: 0, cid, status: Status::SUCCESS, dw0, dw1: 0 };
        self.complete(0, &command, entry);
        true
    }
}
