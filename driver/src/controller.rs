//! Controller bring-up (NVMe Base 2.0 §3.5.1, "Memory-based Controller
//! Initialization"), the admin queue, and what Identify reports.

use crate::cmd::admin;
use crate::cmd::zns::{self as zns_cmd, ReportFilter};
use crate::dma::{DmaMemory, DmaRegion, PAGE_SIZE};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::queue::{DoorbellConfig, IoCompletion, QueuePair, ShadowPages, ShadowPolicy};
use crate::quirks::{QuirkOverride, Quirks};
use crate::spec::command::Command;
use crate::spec::identify::{
    self, IdentifyController, IdentifyControllerNvm, IdentifyControllerZns, IdentifyNamespace, IdentifyNamespaceZns,
    Oacs, CSI_NVM, CSI_ZONED, IDENTIFY_DATA_SIZE,
};
use crate::spec::log::{self, ErrorLogEntry, SmartHealthLog};
use crate::spec::registers::{self, Aqa, Cap, CapCss, Cc, Csts, Shn, ShutdownStatus, Vs};
use crate::spec::zns::{parse_report_zones, ZoneDescriptor, REPORT_HEADER_SIZE, ZONE_DESCRIPTOR_SIZE};
use crate::transport::Transport;
use crate::zeroout::{ZeroCapabilities, ZeroState};
use serde::Serialize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Knobs for bring-up, with defaults like Linux's.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Admin queue depth (clamped to CAP.MQES+1 and 4096).
    pub admin_queue_entries: u16,
    /// Deadline for each admin command (Linux's admin_timeout is 60 s).
    pub admin_timeout: Duration,
    /// I/O queue pairs to ask for with Set Features Number of Queues.
    pub io_queue_pairs: u16,
    /// Bound for the shutdown notification on drop (CSTS.SHST).
    pub shutdown_timeout: Duration,
    /// Use shadow doorbells (Doorbell Buffer Config) when offered.
    pub shadow_doorbells: bool,
    /// Quirks to add or remove for matching devices, applied after the
    /// built-in table (like Linux's `quirks=VID:DID:flags`).
    pub quirk_overrides: Vec<QuirkOverride>,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            admin_queue_entries: 32,
            admin_timeout: Duration::from_secs(60),
            io_queue_pairs: 64,
            shutdown_timeout: Duration::from_secs(10),
            shadow_doorbells: true,
            quirk_overrides: Vec::new(),
        }
    }
}

/// A zoned namespace's geometry and limits.
#[derive(Clone, Debug, Serialize)]
pub struct ZonedInfo {
    pub zone_size_blocks: u64,
    /// Max open zones, `None` if unlimited.
    pub max_open_zones: Option<u32>,
    /// Max active zones, `None` if unlimited.
    pub max_active_zones: Option<u32>,
    pub identify: IdentifyNamespaceZns,
}

/// An active namespace as Identify describes it.
#[derive(Clone, Debug, Serialize)]
pub struct NamespaceInfo {
    pub nsid: u32,
    /// Command Set Identifier (0 NVM, 2 Zoned).
    pub csi: u8,
    pub block_size: u32,
    /// NSZE: the namespace size in logical blocks.
    pub capacity_blocks: u64,
    pub identify: IdentifyNamespace,
    pub zoned: Option<ZonedInfo>,
}

impl NamespaceInfo {
    pub fn capacity_bytes(&self) -> u128 {
        u128::from(self.capacity_blocks) * u128::from(self.block_size)
    }
}

/// What the admin lock guards: the admin queue and everything that issues
/// admin commands or hands out queue ids.
#[derive(Debug)]
struct Admin {
    /// Queue 0, driven through the queue pair's blocking helpers.
    queue: QueuePair,
    /// One page-aligned buffer for identify data and log pages.
    scratch: DmaRegion,
    /// `qid_in_use[q]` for q in 1..=granted I/O queues.
    qid_in_use: Vec<bool>,
}

impl Admin {
    /// Runs an admin command without data.
    fn run(&mut self, command: Command, timeout: Duration) -> Result<IoCompletion> {
        // SAFETY: no data pointer.
        unsafe { self.queue.run(command, 0, 0, timeout) }
    }

    /// Runs an admin command that transfers `len` bytes through the scratch
    /// buffer, zeroed first, and copies them out.
    fn run_with_scratch(&mut self, command: Command, len: usize, timeout: Duration) -> Result<(IoCompletion, Vec<u8>)> {
        assert!(len <= SCRATCH_LEN);
        self.scratch.fill(0, len, 0);
        // SAFETY: the scratch region is mapped for this controller, owned by
        // this struct (behind the admin lock) and not touched by the host
        // until the completion has been reaped.
        let completion = unsafe { self.queue.run(command, self.scratch.iova(), len, timeout) }?;
        let mut data = vec![0u8; len];
        self.scratch.copy_out(0, &mut data);
        Ok((completion, data))
    }
}

/// The shadow doorbell and EventIdx pages, kept alive with the controller.
#[derive(Debug)]
struct ShadowBuffers {
    _values: DmaRegion,
    _event_idx: DmaRegion,
    pages: ShadowPages,
}

// SAFETY: the pages are DMA memory owned by this struct and touched only
// through volatile accesses by the one queue that owns each slot.
unsafe impl Send for ShadowBuffers {}
// SAFETY: as above; shared access hands out slot pointers only.
unsafe impl Sync for ShadowBuffers {}

/// State shared by the controller handle and its queue pairs: dropping the
/// last of them shuts the controller down.
#[derive(Debug)]
struct Shared {
    transport: Arc<dyn Transport>,
    options: ControllerOptions,
    cap: Cap,
    admin: Mutex<Admin>,
    shadow: Option<ShadowBuffers>,
}

impl Shared {
    fn admin(&self) -> MutexGuard<'_, Admin> {
        // A panic while holding the lock leaves the queue usable: each
        // command is self-contained.
        self.admin.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    fn command(&self, command: Command) -> Result<IoCompletion> {
        self.admin().run(command, self.options.admin_timeout)
    }

    /// Runs an Identify into the scratch page and copies the page out.
    fn identify_page(&self, command: Command) -> Result<Vec<u8>> {
        Ok(self.admin().run_with_scratch(command, IDENTIFY_DATA_SIZE, self.options.admin_timeout)?.1)
    }

    /// An Identify that a controller may reject as unsupported: `None` then.
    fn optional_identify(&self, command: Command) -> Result<Option<Vec<u8>>> {
        match self.identify_page(command) {
            Ok(page) => Ok(Some(page)),
            Err(Error::Command { status, .. }) if status.dnr => Ok(None),
            Err(other) => Err(other),
        }
    }

    fn shadow_pages(&self) -> Option<ShadowPages> {
        self.shadow.as_ref().map(|s| s.pages)
    }

    fn allocate_qid(admin: &mut Admin) -> Result<u16> {
        let free = admin.qid_in_use.iter().skip(1).position(|used| !used).map(|i| i + 1);
        let qid = free.ok_or_else(|| {
            Error::Unsupported(format!("all {} I/O queue pairs are in use", admin.qid_in_use.len().saturating_sub(1)))
        })?;
        admin.qid_in_use[qid] = true;
        Ok(u16::try_from(qid).expect("qids fit the granted count"))
    }

    /// Deletes an I/O queue pair's queues (SQ first, NVMe Base 2.0 §3.5.?
    /// "Delete I/O Submission Queue" before its CQ) and frees the qid.
    fn delete_queues(&self, qid: u16) -> bool {
        let mut admin = self.admin();
        let timeout = self.options.admin_timeout;
        let deleted = admin.run(admin::delete_io_sq(qid), timeout).is_ok()
            && admin.run(admin::delete_io_cq(qid), timeout).is_ok();
        if let Some(used) = admin.qid_in_use.get_mut(usize::from(qid)) {
            *used = !deleted;
        }
        deleted
    }

    /// A normal shutdown (CC.SHN, then a bounded wait for CSTS.SHST
    /// "complete", NVMe Base 2.0 §3.6.1), then CC.EN = 0 so the controller
    /// touches no host memory after this returns. Queue pairs are gone by
    /// now: each holds this state alive and deletes its queues on drop.
    fn shutdown(&self) -> Result<()> {
        let cc = Cc(self.transport.read32(registers::CC));
        if !cc.enable() {
            return Ok(());
        }
        self.transport.write32(registers::CC, cc.with_shn(Shn::Normal).0);
        let shut = wait_for(&*self.transport, "shutdown (CSTS.SHST)", self.options.shutdown_timeout, |csts| {
            Ok(csts.shst() == ShutdownStatus::Complete)
        });
        let ready_timeout = Duration::from_millis(u64::from(self.cap.timeout_ms()).max(500));
        let disabled = disable(&*self.transport, ready_timeout);
        shut.and(disabled)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// An NVMe controller brought up and identified. Cheap to share: admin
/// commands take an internal lock; queue pairs are created through `&self`
/// and keep the controller alive while they live.
#[derive(Debug)]
pub struct Controller {
    shared: Arc<Shared>,
    vs: Vs,
    css: u8,
    identify: IdentifyController,
    identify_nvm: Option<IdentifyControllerNvm>,
    identify_zns: Option<IdentifyControllerZns>,
    namespaces: Vec<NamespaceInfo>,
    io_queue_pairs: u16,
    quirks: Quirks,
    /// One zero-out state per namespace, shared by all its handles.
    zero_states: Mutex<Vec<(u32, Arc<ZeroState>)>>,
}

/// A queue depth that suits most callers (Linux's io_queue_depth default is
/// 1024; SPDK's io_queue_size default is 256).
pub const DEFAULT_QUEUE_DEPTH: u16 = 256;

/// Scratch size: two pages, so a 4 KiB transfer at any offset fits PRP1+PRP2.
const SCRATCH_LEN: usize = 2 * PAGE_SIZE;

impl Controller {
    /// Resets and enables the controller, identifies it and its active
    /// namespaces, asks for I/O queues and turns on shadow doorbells where
    /// offered.
    pub fn init(transport: Arc<dyn Transport>, options: ControllerOptions) -> Result<Self> {
        let cap = Cap(transport.read64(registers::CAP));
        if cap.0 == u64::MAX {
            return Err(Error::DeviceGone);
        }
        let vs = Vs(transport.read32(registers::VS));
        let css = if cap.css().contains(CapCss::IO_COMMAND_SETS) {
            // All supported I/O command sets, so zoned namespaces answer
            // zone commands (QEMU hw/nvme/ctrl.c nvme_select_iocs_ns).
            registers::CC_CSS_ALL_IO
        } else if cap.css().contains(CapCss::NVM) {
            registers::CC_CSS_NVM
        } else {
            return Err(Error::Unsupported(format!("CAP.CSS {:#x} offers no I/O command set", cap.css().bits())));
        };
        // Host memory is managed in 4 KiB pages: CC.MPS = 0.
        if cap.min_page_size() > PAGE_SIZE {
            return Err(Error::Unsupported(format!("minimum memory page size {} > 4096", cap.min_page_size())));
        }
        let ready_timeout = Duration::from_millis(u64::from(cap.timeout_ms()).max(500));

        disable(&*transport, ready_timeout)?;

        let entries = options.admin_queue_entries.clamp(2, registers::ADMIN_QUEUE_ENTRIES_MAX);
        let entries = u16::try_from(u32::from(entries).min(cap.max_queue_entries())).unwrap_or(entries);
        let doorbells = DoorbellConfig { dstrd: cap.dstrd(), shadow: None, policy: ShadowPolicy::Off };
        let queue = QueuePair::new(&transport, 0, entries, doorbells)?;
        transport.write32(registers::AQA, Aqa::new(entries, entries).0);
        transport.write64(registers::ASQ, queue.sq_iova());
        transport.write64(registers::ACQ, queue.cq_iova());
        let cc = Cc::new()
            .with_css(css)
            .with_mps(0)
            .with_ams(registers::CC_AMS_ROUND_ROBIN)
            .with_iosqes(6) // 64-byte SQEs
            .with_iocqes(4) // 16-byte CQEs
            .with_enable(true);
        transport.write32(registers::CC, cc.0);
        wait_ready(&*transport, true, ready_timeout)?;

        let scratch = DmaRegion::allocate(&transport, SCRATCH_LEN)?;
        let admin = Admin { queue, scratch, qid_in_use: vec![true] };
        let mut shared = Shared { transport, options, cap, admin: Mutex::new(admin), shadow: None };

        let identify = IdentifyController::parse(&shared.identify_page(admin::identify_controller(0))?)?;
        if identify.nn == 0 {
            // NN 0 is outside the spec: there is nothing to talk to.
            return Err(Error::Parse(crate::spec::ParseError::InvalidField {
                what: "Identify Controller",
                field: "NN",
                value: 0,
            }));
        }
        // The I/O-command-set-specific controller structures are optional:
        // a controller that rejects the CNS simply has none.
        let identify_nvm = shared
            .optional_identify(admin::identify_csi_controller(CSI_NVM, 0))?
            .map(|page| IdentifyControllerNvm::parse(&page))
            .transpose()?;
        let identify_zns = if css == registers::CC_CSS_ALL_IO {
            shared
                .optional_identify(admin::identify_csi_controller(CSI_ZONED, 0))?
                .map(|page| IdentifyControllerZns::parse(&page))
                .transpose()?
        } else {
            None
        };
        let active =
            identify::parse_active_namespace_list(&shared.identify_page(admin::identify_active_namespaces(0, 0))?)?;
        let namespaces =
            active.into_iter().map(|nsid| identify_namespace(&shared, nsid)).collect::<Result<Vec<_>>>()?;

        let requested = shared.options.io_queue_pairs.max(1);
        let completion = shared.command(admin::set_number_of_queues(requested, requested))?;
        let (sq_count, cq_count) = admin::NumberOfQueues::from_dw0(completion.dw0);
        let io_queue_pairs = sq_count.min(cq_count);
        shared.admin().qid_in_use = vec![false; usize::from(io_queue_pairs) + 1];
        shared.admin().qid_in_use[0] = true;

        if shared.options.shadow_doorbells && identify.oacs.contains(Oacs::DOORBELL_BUFFER_CONFIG) {
            shared.shadow = enable_shadow_doorbells(&shared, io_queue_pairs)?;
        }
        if let Some(pages) = shared.shadow_pages() {
            // Controllers differ in whether they read queue 0's shadow:
            // write both the shadow and the register for the admin queue.
            shared.admin().queue.use_shadow(pages, ShadowPolicy::Always);
        }

        let pci = shared.transport.pci_id();
        let quirks = crate::quirks::effective(
            pci.vendor,
            pci.device,
            &identify.mn,
            &identify.fr,
            &shared.options.quirk_overrides,
        );
        Ok(Controller {
            shared: Arc::new(shared),
            vs,
            css,
            identify,
            identify_nvm,
            identify_zns,
            namespaces,
            io_queue_pairs,
            quirks,
            zero_states: Mutex::new(Vec::new()),
        })
    }

    /// Runs one admin command and waits (bounded) for its completion.
    pub fn admin_command(&self, command: Command) -> Result<IoCompletion> {
        self.shared.command(command)
    }

    /// Runs Identify with any CNS/NSID/CNTID/CSI and returns the raw 4 KiB
    /// page, for tools that dump or capture identify data.
    pub fn identify_raw(&self, cns: u8, nsid: u32, cntid: u16, csi: u8) -> Result<Vec<u8>> {
        self.shared.identify_page(admin::identify(cns, nsid, cntid, csi, 0))
    }

    /// Get Log Page into the scratch buffer; `len` at most 4 KiB.
    fn log_page(&self, lid: u8, nsid: u32, len: usize) -> Result<Vec<u8>> {
        assert!(len <= PAGE_SIZE && len.is_multiple_of(4));
        let command = admin::get_log_page(lid, nsid, len as u32, 0, 0, 0);
        Ok(self.shared.admin().run_with_scratch(command, len, self.shared.options.admin_timeout)?.1)
    }

    /// The SMART / Health Information log (controller-wide).
    pub fn smart_log(&self) -> Result<SmartHealthLog> {
        let data = self.log_page(log::LOG_SMART_HEALTH, 0xFFFF_FFFF, 512)?;
        Ok(SmartHealthLog::parse(&data)?)
    }

    /// The Error Information log: up to ELPE+1 entries of 64 bytes, at most
    /// one page here.
    pub fn error_log(&self) -> Result<Vec<ErrorLogEntry>> {
        let entries = (usize::from(self.identify.elpe) + 1).min(PAGE_SIZE / 64);
        let data = self.log_page(log::LOG_ERROR_INFORMATION, 0, entries * 64)?;
        Ok(log::parse_error_log(&data)?)
    }

    /// Reports up to `max_zones` zones of a zoned namespace from `slba`,
    /// through a short-lived queue pair. For tools; the I/O path builds
    /// report requests with [`Namespace::report_zones`].
    pub fn report_zones(&self, nsid: u32, slba: u64, max_zones: usize) -> Result<Vec<ZoneDescriptor>> {
        let room = (PAGE_SIZE - REPORT_HEADER_SIZE) / ZONE_DESCRIPTOR_SIZE;
        let len = REPORT_HEADER_SIZE + max_zones.clamp(1, room) * ZONE_DESCRIPTOR_SIZE;
        let mut pair = self.create_queue_pair(2)?;
        let buffer = DmaRegion::allocate(&self.shared.transport, len)?;
        let command = zns_cmd::report_zones(nsid, slba, len as u32, ReportFilter::All, true, 0, 0);
        // SAFETY: `buffer` is mapped for this controller, lives past the
        // wait and is read only after the completion; on a timeout the
        // pair's drop leaks rather than frees memory still in flight.
        unsafe { pair.run(command, buffer.iova(), len, self.shared.options.admin_timeout) }?;
        let mut data = vec![0u8; len];
        buffer.copy_out(0, &mut data);
        Ok(parse_report_zones(&data)?.1)
    }

    /// Creates an I/O queue pair with `depth` entries per ring (at most
    /// CAP.MQES+1; [`DEFAULT_QUEUE_DEPTH`] suits most callers), holding up
    /// to `depth - 1` commands in flight. The pair is `Send`: hand it to the thread that will
    /// own it. Dropping it deletes its queues on the controller.
    pub fn create_queue_pair(&self, depth: u16) -> Result<QueuePair> {
        let max = self.shared.cap.max_queue_entries();
        if depth < 2 || u32::from(depth) > max {
            return Err(Error::InvalidArgument(format!("queue depth {depth}: expected 2..={max} (CAP.MQES+1)")));
        }
        let shared = &self.shared;
        let timeout = shared.options.admin_timeout;
        let mut admin = shared.admin();
        let qid = Shared::allocate_qid(&mut admin)?;
        let doorbells =
            DoorbellConfig { dstrd: shared.cap.dstrd(), shadow: shared.shadow_pages(), policy: ShadowPolicy::EventIdx };
        let release = |admin: &mut Admin| admin.qid_in_use[usize::from(qid)] = false;
        let mut pair = match QueuePair::new(&shared.transport, qid, depth, doorbells) {
            Ok(pair) => pair,
            Err(error) => {
                release(&mut admin);
                return Err(error);
            }
        };
        // Completion queue first: the submission queue names it.
        if let Err(error) = admin.run(admin::create_io_cq(qid, depth, pair.cq_iova(), true, false, 0), timeout) {
            release(&mut admin);
            return Err(error);
        }
        if let Err(error) = admin.run(admin::create_io_sq(qid, depth, pair.sq_iova(), qid, 0), timeout) {
            let _ = admin.run(admin::delete_io_cq(qid), timeout);
            release(&mut admin);
            return Err(error);
        }
        drop(admin);
        let owner = Arc::clone(shared);
        pair.set_on_drop(Box::new(move |qid| owner.delete_queues(qid)));
        Ok(pair)
    }

    /// A handle for I/O on namespace `nsid`: geometry, limits and request
    /// validation.
    pub fn namespace(&self, nsid: u32) -> Result<Namespace> {
        let info = self
            .namespaces
            .iter()
            .find(|ns| ns.nsid == nsid)
            .ok_or_else(|| Error::InvalidArgument(format!("namespace {nsid} is not active on this controller")))?;
        let namespace = Namespace::new(self, info);
        let mut states = self.zero_states.lock().unwrap_or_else(|p| p.into_inner());
        let state = match states.iter().find(|(id, _)| *id == nsid) {
            Some((_, state)) => Arc::clone(state),
            None => {
                let state = Arc::new(ZeroState::new(
                    self.zero_capabilities(info, &namespace),
                    Arc::clone(&self.shared.transport),
                ));
                states.push((nsid, Arc::clone(&state)));
                state
            }
        };
        Ok(namespace.with_zero_state(state))
    }

    /// The effective quirks: the built-in table, then the overrides.
    pub fn quirks(&self) -> Quirks {
        self.quirks
    }

    fn zero_capabilities(&self, info: &NamespaceInfo, namespace: &Namespace) -> ZeroCapabilities {
        let id = &info.identify;
        // NPDG/NPDA are valid only with NSFEAT.OPTPERF (bit 4); 0-based.
        let optperf = id.nsfeat & (1 << 4) != 0;
        let preferred = |value: u16| if optperf { u64::from(value) + 1 } else { 1 };
        ZeroCapabilities {
            block_size: info.block_size,
            capacity_blocks: info.capacity_blocks,
            oncs: self.identify.oncs,
            quirks: self.quirks,
            dlfeat: id.dlfeat,
            write_zeroes_max_bytes: self
                .identify_nvm
                .as_ref()
                .and_then(|nvm| nvm.write_zeroes_size_limit_bytes(self.shared.cap.min_page_size())),
            max_transfer_bytes: namespace.max_transfer_bytes(),
            dsm: *namespace.range_limits(),
            deallocate_granularity_blocks: preferred(id.npdg),
            deallocate_alignment_blocks: preferred(id.npda),
            zone_size_blocks: info.zoned.as_ref().map(|z| z.zone_size_blocks),
        }
    }

    /// Whether queue pairs use shadow doorbells.
    pub fn shadow_doorbells(&self) -> bool {
        self.shared.shadow.is_some()
    }

    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.shared.transport
    }

    pub fn cap(&self) -> Cap {
        self.shared.cap
    }

    pub fn version(&self) -> Vs {
        self.vs
    }

    /// The CC.CSS value in use.
    pub fn command_sets(&self) -> u8 {
        self.css
    }

    pub fn identify(&self) -> &IdentifyController {
        &self.identify
    }

    /// NVM-command-set controller data (WZSL, DMRL, DMRSL, DMSL), if reported.
    pub fn identify_nvm(&self) -> Option<&IdentifyControllerNvm> {
        self.identify_nvm.as_ref()
    }

    /// Zoned-command-set controller data (ZASL), if reported.
    pub fn identify_zns(&self) -> Option<&IdentifyControllerZns> {
        self.identify_zns.as_ref()
    }

    pub fn namespaces(&self) -> &[NamespaceInfo] {
        &self.namespaces
    }

    /// I/O queue pairs granted by Set Features Number of Queues.
    pub fn io_queue_pairs(&self) -> u16 {
        self.io_queue_pairs
    }

    /// MDTS in bytes, `None` if unlimited.
    pub fn max_transfer_bytes(&self) -> Option<u64> {
        self.identify.max_transfer_bytes(self.shared.cap.min_page_size())
    }
}

/// Doorbell Buffer Config (NVMe Base 2.0 §5.8): one page of shadow
/// doorbells and one of EventIdx, when every queue's slots fit one page.
/// A controller that rejects the command just keeps MMIO doorbells.
fn enable_shadow_doorbells(shared: &Shared, io_queue_pairs: u16) -> Result<Option<ShadowBuffers>> {
    let stride = registers::doorbell_stride_bytes(shared.cap.dstrd());
    if (usize::from(io_queue_pairs) + 1) * 2 * stride > PAGE_SIZE {
        return Ok(None);
    }
    let values = DmaRegion::allocate(&shared.transport, PAGE_SIZE)?;
    let event_idx = DmaRegion::allocate(&shared.transport, PAGE_SIZE)?;
    match shared.command(admin::doorbell_buffer_config(values.iova(), event_idx.iova())) {
        Ok(_) => {
            let pages = ShadowPages { values: values.raw_parts().0, event_idx: event_idx.raw_parts().0 };
            Ok(Some(ShadowBuffers { _values: values, _event_idx: event_idx, pages }))
        }
        Err(Error::Command { .. }) => Ok(None),
        Err(other) => Err(other),
    }
}

fn identify_namespace(shared: &Shared, nsid: u32) -> Result<NamespaceInfo> {
    let identify = IdentifyNamespace::parse(&shared.identify_page(admin::identify_namespace(nsid, 0))?)?;
    let block_size = identify.block_size()?;
    let descriptors = match shared.optional_identify(admin::identify_ns_id_descriptors(nsid, 0))? {
        Some(page) => identify::parse_ns_id_descriptors(&page)?,
        None => Vec::new(),
    };
    let csi = identify::command_set(&descriptors).unwrap_or(CSI_NVM);
    let zoned = if csi == CSI_ZONED {
        let page = shared.identify_page(admin::identify_csi_namespace(nsid, CSI_ZONED, 0))?;
        let zns = IdentifyNamespaceZns::parse(&page)?;
        let format = identify.current_lba_format_index();
        let zone_size_blocks = zns.lbafe.get(format).map(|e| e.zsze).unwrap_or(0);
        if zone_size_blocks == 0 || zone_size_blocks > identify.nsze {
            return Err(Error::Parse(crate::spec::ParseError::InvalidField {
                what: "Identify Namespace (ZNS)",
                field: "ZSZE",
                value: zone_size_blocks,
            }));
        }
        Some(ZonedInfo {
            zone_size_blocks,
            max_open_zones: zns.max_open_resources(),
            max_active_zones: zns.max_active_resources(),
            identify: zns,
        })
    } else {
        None
    };
    Ok(NamespaceInfo { nsid, csi, block_size, capacity_blocks: identify.nsze, identify, zoned })
}

/// Clears CC.EN and waits for CSTS.RDY = 0 within CAP.TO.
fn disable(transport: &dyn Transport, timeout: Duration) -> Result<()> {
    let cc = Cc(transport.read32(registers::CC));
    if cc.enable() {
        transport.write32(registers::CC, cc.with_enable(false).0);
    }
    wait_ready(transport, false, timeout)
}

fn wait_ready(transport: &dyn Transport, ready: bool, timeout: Duration) -> Result<()> {
    if ready {
        // A fatal status while enabling will never turn into ready.
        wait_for(transport, "controller ready (CSTS.RDY=1)", timeout, |csts| {
            if csts.cfs() {
                Err(Error::ControllerFatal)
            } else {
                Ok(csts.rdy())
            }
        })
    } else {
        wait_for(transport, "controller disabled (CSTS.RDY=0)", timeout, |csts| Ok(!csts.rdy()))
    }
}

/// Polls CSTS until `done` says so (or fails) or `timeout` passes; all
/// ones means the device is gone.
fn wait_for(
    transport: &dyn Transport,
    what: &'static str,
    timeout: Duration,
    done: impl Fn(Csts) -> Result<bool>,
) -> Result<()> {
    let started = Instant::now();
    loop {
        let raw = transport.read32(registers::CSTS);
        if raw == u32::MAX {
            return Err(Error::DeviceGone);
        }
        if done(Csts(raw))? {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            return Err(Error::Timeout { what, waited_ms: started.elapsed().as_millis() as u64 });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
