//! Controller bring-up (NVMe Base 2.0 §3.5.1, "Memory-based Controller
//! Initialization"), the admin queue, and what Identify reports.

use crate::cmd::admin;
use crate::cmd::zns::{self as zns_cmd, ReportFilter};
use crate::dma::{DmaMemory, DmaRegion, PAGE_SIZE};
use crate::error::{Error, Result};
use crate::queue::SyncQueue;
use crate::spec::command::Command;
use crate::spec::completion::Completion;
use crate::spec::identify::{
    self, IdentifyController, IdentifyControllerNvm, IdentifyControllerZns, IdentifyNamespace,
    IdentifyNamespaceZns, CSI_NVM, CSI_ZONED, IDENTIFY_DATA_SIZE,
};
use crate::spec::log::{self, ErrorLogEntry, SmartHealthLog};
use crate::spec::registers::{self, Aqa, Cap, CapCss, Cc, Csts, Shn, ShutdownStatus, Vs};
use crate::spec::zns::{
    parse_report_zones, ZoneDescriptor, REPORT_HEADER_SIZE, ZONE_DESCRIPTOR_SIZE,
};
use crate::transport::Transport;
use serde::Serialize;
use std::sync::Arc;
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
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            admin_queue_entries: 32,
            admin_timeout: Duration::from_secs(60),
            io_queue_pairs: 64,
            shutdown_timeout: Duration::from_secs(10),
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

/// An NVMe controller brought up and identified.
#[derive(Debug)]
pub struct Controller {
    transport: Arc<dyn Transport>,
    options: ControllerOptions,
    cap: Cap,
    vs: Vs,
    css: u8,
    admin: SyncQueue,
    /// One page-aligned buffer for identify data and log pages.
    scratch: DmaRegion,
    identify: IdentifyController,
    identify_nvm: Option<IdentifyControllerNvm>,
    identify_zns: Option<IdentifyControllerZns>,
    namespaces: Vec<NamespaceInfo>,
    io_queue_pairs: u16,
    /// A one-command I/O queue for bring-up-time I/O (zone reports).
    sync_io: Option<SyncQueue>,
}

/// Scratch size: two pages, so a 4 KiB transfer at any offset fits PRP1+PRP2.
const SCRATCH_LEN: usize = 2 * PAGE_SIZE;

/// The queue id of the bring-up I/O queue.
const SYNC_IO_QID: u16 = 1;

impl Controller {
    /// Resets and enables the controller, then identifies it and its active
    /// namespaces.
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
            return Err(Error::Unsupported(format!(
                "CAP.CSS {:#x} offers no I/O command set",
                cap.css().bits()
            )));
        };
        // Host memory is managed in 4 KiB pages: CC.MPS = 0.
        if cap.min_page_size() > PAGE_SIZE {
            return Err(Error::Unsupported(format!(
                "minimum memory page size {} > 4096",
                cap.min_page_size()
            )));
        }
        let ready_timeout = Duration::from_millis(u64::from(cap.timeout_ms()).max(500));

        disable(&*transport, ready_timeout)?;

        let entries = options
            .admin_queue_entries
            .clamp(2, registers::ADMIN_QUEUE_ENTRIES_MAX);
        let entries =
            u16::try_from(u32::from(entries).min(cap.max_queue_entries())).unwrap_or(entries);
        let admin = SyncQueue::new(&transport, 0, entries, cap.dstrd())?;
        transport.write32(registers::AQA, Aqa::new(entries, entries).0);
        transport.write64(registers::ASQ, admin.sq_iova());
        transport.write64(registers::ACQ, admin.cq_iova());
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
        let mut controller = Controller {
            transport,
            options,
            cap,
            vs,
            css,
            admin,
            scratch,
            // Placeholders until identify_all fills them; init returns only
            // after it has.
            identify: IdentifyController::parse(&[0u8; IDENTIFY_DATA_SIZE])?,
            identify_nvm: None,
            identify_zns: None,
            namespaces: Vec::new(),
            io_queue_pairs: 0,
            sync_io: None,
        };
        controller.identify_all()?;
        Ok(controller)
    }

    fn identify_all(&mut self) -> Result<()> {
        self.identify =
            IdentifyController::parse(&self.identify_page(admin::identify_controller(0))?)?;
        if self.identify.nn == 0 {
            // NN 0 is outside the spec: there is nothing to talk to.
            return Err(Error::Parse(crate::spec::ParseError::InvalidField {
                what: "Identify Controller",
                field: "NN",
                value: 0,
            }));
        }
        // The I/O-command-set-specific controller structures are optional:
        // a controller that rejects the CNS simply has none.
        self.identify_nvm = self
            .optional_identify(admin::identify_csi_controller(CSI_NVM, 0))?
            .map(|page| IdentifyControllerNvm::parse(&page))
            .transpose()?;
        if self.css == registers::CC_CSS_ALL_IO {
            self.identify_zns = self
                .optional_identify(admin::identify_csi_controller(CSI_ZONED, 0))?
                .map(|page| IdentifyControllerZns::parse(&page))
                .transpose()?;
        }

        let active = identify::parse_active_namespace_list(
            &self.identify_page(admin::identify_active_namespaces(0, 0))?,
        )?;
        let mut namespaces = Vec::with_capacity(active.len());
        for nsid in active {
            namespaces.push(self.identify_namespace(nsid)?);
        }
        self.namespaces = namespaces;

        let requested = self.options.io_queue_pairs.max(1);
        let completion = self.admin_command(admin::set_number_of_queues(requested, requested))?;
        let (sq_count, cq_count) = admin::NumberOfQueues::from_dw0(completion.dw0);
        self.io_queue_pairs = sq_count.min(cq_count);
        Ok(())
    }

    fn identify_namespace(&mut self, nsid: u32) -> Result<NamespaceInfo> {
        let identify =
            IdentifyNamespace::parse(&self.identify_page(admin::identify_namespace(nsid, 0))?)?;
        let block_size = identify.block_size()?;
        let descriptors =
            match self.optional_identify(admin::identify_ns_id_descriptors(nsid, 0))? {
                Some(page) => identify::parse_ns_id_descriptors(&page)?,
                None => Vec::new(),
            };
        let csi = identify::command_set(&descriptors).unwrap_or(CSI_NVM);
        let zoned = if csi == CSI_ZONED {
            let page = self.identify_page(admin::identify_csi_namespace(nsid, CSI_ZONED, 0))?;
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
        Ok(NamespaceInfo {
            nsid,
            csi,
            block_size,
            capacity_blocks: identify.nsze,
            identify,
            zoned,
        })
    }

    /// Runs an Identify into the scratch page and copies the page out.
    fn identify_page(&mut self, mut command: Command) -> Result<Vec<u8>> {
        self.scratch.fill(0, IDENTIFY_DATA_SIZE, 0);
        command.prp1 = self.scratch.iova();
        self.admin_command(command)?;
        let mut page = vec![0u8; IDENTIFY_DATA_SIZE];
        self.scratch.copy_out(0, &mut page);
        Ok(page)
    }

    /// Runs Identify with any CNS/NSID/CNTID/CSI and returns the raw 4 KiB
    /// page, for tools that dump or capture identify data.
    pub fn identify_raw(&mut self, cns: u8, nsid: u32, cntid: u16, csi: u8) -> Result<Vec<u8>> {
        self.identify_page(admin::identify(cns, nsid, cntid, csi, 0))
    }

    /// An Identify that a controller may reject as unsupported (Invalid
    /// Field in Command): `None` then.
    fn optional_identify(&mut self, command: Command) -> Result<Option<Vec<u8>>> {
        match self.identify_page(command) {
            Ok(page) => Ok(Some(page)),
            Err(Error::Command { status, .. }) if !status.is_success() && status.dnr => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// Runs one admin command and waits (bounded) for its completion.
    pub fn admin_command(&mut self, command: Command) -> Result<Completion> {
        self.admin.execute(command, self.options.admin_timeout)
    }

    /// Get Log Page into the scratch buffer; `len` at most 4 KiB.
    fn log_page(&mut self, lid: u8, nsid: u32, len: usize) -> Result<Vec<u8>> {
        assert!(len <= PAGE_SIZE && len.is_multiple_of(4));
        self.scratch.fill(0, len, 0);
        let command = admin::get_log_page(lid, nsid, len as u32, 0, self.scratch.iova(), 0);
        self.admin_command(command)?;
        let mut data = vec![0u8; len];
        self.scratch.copy_out(0, &mut data);
        Ok(data)
    }

    /// The SMART / Health Information log (controller-wide).
    pub fn smart_log(&mut self) -> Result<SmartHealthLog> {
        let data = self.log_page(log::LOG_SMART_HEALTH, 0xFFFF_FFFF, 512)?;
        Ok(SmartHealthLog::parse(&data)?)
    }

    /// The Error Information log: up to ELPE+1 entries of 64 bytes, at most
    /// one page here.
    pub fn error_log(&mut self) -> Result<Vec<ErrorLogEntry>> {
        let entries = (usize::from(self.identify.elpe) + 1).min(PAGE_SIZE / 64);
        let data = self.log_page(log::LOG_ERROR_INFORMATION, 0, entries * 64)?;
        Ok(log::parse_error_log(&data)?)
    }

    /// Reports up to `max_zones` zones of a zoned namespace from `slba`,
    /// through a one-command I/O queue created on first use.
    pub fn report_zones(
        &mut self,
        nsid: u32,
        slba: u64,
        max_zones: usize,
    ) -> Result<Vec<ZoneDescriptor>> {
        let room = (PAGE_SIZE - REPORT_HEADER_SIZE) / ZONE_DESCRIPTOR_SIZE;
        let len = REPORT_HEADER_SIZE + max_zones.clamp(1, room) * ZONE_DESCRIPTOR_SIZE;
        self.scratch.fill(0, len, 0);
        let command = zns_cmd::report_zones(
            nsid,
            slba,
            len as u32,
            ReportFilter::All,
            true,
            self.scratch.iova(),
            0,
        );
        let timeout = self.options.admin_timeout;
        self.sync_io_queue()?.execute(command, timeout)?;
        let mut data = vec![0u8; len];
        self.scratch.copy_out(0, &mut data);
        Ok(parse_report_zones(&data)?.1)
    }

    fn sync_io_queue(&mut self) -> Result<&mut SyncQueue> {
        if self.sync_io.is_none() {
            if self.io_queue_pairs == 0 {
                return Err(Error::Unsupported(
                    "the controller granted no I/O queues".into(),
                ));
            }
            let queue = SyncQueue::new(&self.transport, SYNC_IO_QID, 16, self.cap.dstrd())?;
            self.admin_command(admin::create_io_cq(
                SYNC_IO_QID,
                queue.entries(),
                queue.cq_iova(),
                true,
                false,
                0,
            ))?;
            if let Err(error) = self.admin_command(admin::create_io_sq(
                SYNC_IO_QID,
                queue.entries(),
                queue.sq_iova(),
                SYNC_IO_QID,
                0,
            )) {
                let _ = self.admin_command(admin::delete_io_cq(SYNC_IO_QID));
                return Err(error);
            }
            self.sync_io = Some(queue);
        }
        Ok(self.sync_io.as_mut().expect("created above"))
    }

    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    pub fn cap(&self) -> Cap {
        self.cap
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
        self.identify.max_transfer_bytes(self.cap.min_page_size())
    }

    /// Deletes I/O queues, then a normal shutdown: CC.SHN, and a bounded
    /// wait for CSTS.SHST "complete" (NVMe Base 2.0 §3.6.1).
    pub fn shutdown(&mut self) -> Result<()> {
        if self.sync_io.take().is_some() {
            let _ = self.admin_command(admin::delete_io_sq(SYNC_IO_QID));
            let _ = self.admin_command(admin::delete_io_cq(SYNC_IO_QID));
        }
        let cc = Cc(self.transport.read32(registers::CC));
        if !cc.enable() {
            return Ok(());
        }
        self.transport
            .write32(registers::CC, cc.with_shn(Shn::Normal).0);
        let timeout = self.options.shutdown_timeout;
        wait_for(&*self.transport, "shutdown (CSTS.SHST)", timeout, |csts| {
            Ok(csts.shst() == ShutdownStatus::Complete)
        })
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
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
        wait_for(
            transport,
            "controller ready (CSTS.RDY=1)",
            timeout,
            |csts| {
                if csts.cfs() {
                    Err(Error::ControllerFatal)
                } else {
                    Ok(csts.rdy())
                }
            },
        )
    } else {
        wait_for(
            transport,
            "controller disabled (CSTS.RDY=0)",
            timeout,
            |csts| Ok(!csts.rdy()),
        )
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
            return Err(Error::Timeout {
                what,
                waited_ms: started.elapsed().as_millis() as u64,
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
