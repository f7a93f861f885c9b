//! Controller bring-up (NVMe Base 2.0 §3.5.1, "Memory-based Controller
//! Initialization"), the admin queue, and what Identify reports.
//!
//! [`Controller::init`] resets the controller, sets up the admin queue,
//! enables it with the command sets it supports, reads Identify
//! (controller, namespaces, the NVM and ZNS command set data), applies the
//! quirk table, negotiates the number of I/O queues and, where offered,
//! shadow doorbells. After that it hands out [`Namespace`] handles and
//! [`QueuePair`]s; admin commands go through its own queue pair. It also
//! owns recovery: a fatal status or a stuck command leads to a controller
//! reset, after which each queue pair re-creates its queues, and
//! asynchronous events are surfaced by [`Controller::poll_events`].
//!
//! This file holds the controller's state and its API; beside it:
//! - `init`: bring-up, the CC/CSTS handshakes, Identify, shadow doorbells;
//! - `admin_queue`: the admin queue's bounded commands, reset and bring-up
//!   again;
//! - `events`: Asynchronous Event configuration, keeping and decoding;
//! - `host`: the queue pairs' side of the contract (`QueueHost`).

mod admin_queue;
mod events;
mod host;
mod init;

pub use crate::identity::{NamespaceInfo, ZonedInfo};
use events::*;
pub use events::{AsyncEvent, AsyncEventKind};
use init::*;

use crate::clock::{Clock, ClockSource};
use crate::cmd::admin;
use crate::cmd::zns::{self as zns_cmd, ReportFilter};
use crate::dma::{DmaMemory, DmaRegion, PAGE_SIZE};
use crate::error::{Error, Result};
use crate::identity::ControllerLimits;
use crate::namespace::Namespace;
use crate::queue::sgl::SglMode;
use crate::queue::{
    AbortOutcome, Condition, DoorbellConfig, Epoch, Held, IoCompletion, Quarantine, QueueHost, QueuePair, RawQueue,
    ShadowPages, ShadowPolicy,
};
use crate::quirks::{QuirkOverride, Quirks};
use crate::spec::command::Command;
use crate::spec::features::{HostBehaviorSupport, HOST_BEHAVIOR_SUPPORT_SIZE};
use crate::spec::identify::{
    self, CopyFormats, IdentifyController, IdentifyControllerNvm, IdentifyNamespace, Oacs, Oncs, CSI_NVM, CSI_ZONED,
    IDENTIFY_DATA_SIZE,
};
use crate::spec::log::{self, ErrorLogEntry, SmartHealthLog};
use crate::spec::registers::{self, Aqa, Cap, CapCss, Cc, Csts, Shn, ShutdownStatus, Vs};
use crate::spec::zns::{
    parse_report_zones, IdentifyControllerZns, IdentifyNamespaceZns, ZoneDescriptor, REPORT_HEADER_SIZE,
    ZONE_DESCRIPTOR_SIZE,
};
use crate::transport::Transport;
use crate::zeroout::{ZeroCapabilities, ZeroState};
use serde::Serialize;
use std::collections::VecDeque;
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
    /// Deadline of each I/O command on new queue pairs (Linux's io_timeout
    /// is 30 s); `None` for none. [`QueuePair::set_timeout`] changes it per
    /// pair.
    pub io_timeout: Option<Duration>,
    /// Bound for the shutdown notification on drop (CSTS.SHST).
    pub shutdown_timeout: Duration,
    /// Use shadow doorbells (Doorbell Buffer Config) when offered.
    pub shadow_doorbells: bool,
    /// Quirks to add or remove for matching devices, applied after the
    /// built-in table (like Linux's `quirks=VID:DID:flags`).
    pub quirk_overrides: Vec<QuirkOverride>,
    /// When I/O commands describe their data with an SGL instead of PRPs,
    /// on a controller that supports SGLs (Identify Controller SGLS); see
    /// [`SglMode`].
    pub sgl: SglMode,
    /// The clock I/O queue pairs read for deadlines and health checks
    /// ([`crate::clock`]): the TSC where it is invariant, by default.
    pub clock: ClockSource,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            admin_queue_entries: 32,
            admin_timeout: Duration::from_secs(60),
            io_queue_pairs: 64,
            io_timeout: Some(crate::queue::DEFAULT_IO_TIMEOUT),
            shutdown_timeout: Duration::from_secs(10),
            shadow_doorbells: true,
            quirk_overrides: Vec::new(),
            sgl: SglMode::Auto,
            clock: ClockSource::Auto,
        }
    }
}

/// What a controller reset needs to bring the controller back as
/// [`Controller::init`] left it.
#[derive(Debug)]
struct Setup {
    transport: Arc<dyn Transport>,
    /// Bound for CSTS.RDY transitions: CAP.TO (at least 500 ms).
    ready_timeout: Duration,
    admin_timeout: Duration,
    /// Bound for a shutdown notification (CSTS.SHST "complete").
    shutdown_timeout: Duration,
    /// CC.CSS chosen at bring-up.
    css: u8,
    /// Admin queue entries (AQA).
    admin_entries: u16,
    /// I/O queues asked for with Set Features Number of Queues.
    io_queues_requested: u16,
    /// The Asynchronous Event Configuration value set at bring-up, if the
    /// controller took one.
    async_event_config: Option<u32>,
    /// Copy Descriptor Format 2h was enabled at bring-up (Host Behavior
    /// Support CDFE bit 2), so Copy may name a source namespace.
    cross_namespace_copy: bool,
}

/// Asynchronous Event Request completions kept until
/// [`Controller::poll_events`] turns them into events; more are dropped
/// (and counted).
const EVENTS_MAX: usize = 64;
/// The token of the outstanding Asynchronous Event Request.
const AER_TOKEN: u64 = u64::MAX;

/// What the admin lock guards: the admin queue and everything that issues
/// admin commands, hands out queue ids or resets the controller.
#[derive(Debug)]
struct Admin {
    /// Queue 0, driven through the queue pair's blocking helpers.
    queue: QueuePair,
    /// One page-aligned buffer for identify data and log pages.
    scratch: DmaRegion,
    /// `qid_in_use[q]` for q in 1..=granted I/O queues.
    qid_in_use: Vec<bool>,
    /// Shadow doorbell and EventIdx pages, if Doorbell Buffer Config ran.
    shadow: Option<ShadowBuffers>,
    setup: Setup,
    epoch: Arc<Epoch>,
    /// An Asynchronous Event Request is outstanding.
    aer_armed: bool,
    /// Completions of Asynchronous Event Requests (DW0), oldest first.
    aer_completions: VecDeque<u32>,
    events_dropped: u64,
    /// Zoned namespaces, whose Changed Zone List log re-arms a zone notice.
    zoned_nsids: Vec<u32>,
    resets: u64,
    /// Memory the device may still write (see [`crate::queue`]'s
    /// quarantine), until a disable is confirmed.
    quarantine: Quarantine,
}

/// The shadow doorbell and EventIdx pages, kept alive with the controller.
#[derive(Debug)]
struct ShadowBuffers {
    values: DmaRegion,
    event_idx: DmaRegion,
    pages: ShadowPages,
}

// SAFETY: the pages are DMA memory owned by this struct and touched only
// through volatile accesses by the one queue that owns each slot (or by a
// reset, under the admin lock, while the controller is disabled).
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
    epoch: Arc<Epoch>,
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
/// Bound on each admin command of a quiesce for removal
/// ([`Admin::quiesce`]): the host is waiting for the device, and a
/// controller that takes longer to delete a queue is disabled without it.
const QUIESCE_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

impl Controller {
    /// Resets the controller (NVMe Base 2.0 §3.7.2) and brings it back as
    /// [`Controller::init`] left it: every command in flight on every queue
    /// pair completes with [`crate::IoError::ControllerReset`] at the
    /// pair's next poll, and each pair re-creates its queues and goes on.
    /// The driver resets by itself after a fatal status, an admin timeout,
    /// or an I/O command that an Abort did not end; this is for owners that
    /// want one (or to retry after [`Error::ControllerFailed`]).
    pub fn reset(&self) -> Result<()> {
        self.shared.admin().reset()
    }

    /// Controller resets so far (by the driver or [`Controller::reset`]).
    pub fn resets(&self) -> u64 {
        self.shared.admin().resets
    }

    /// Buffers held out of their pools because the device may still write
    /// them: those of commands in flight when a reset's or removal's
    /// disable was not confirmed, or when a pair's queues could not be
    /// deleted. The next confirmed disable (a successful
    /// [`Controller::reset`], or the shutdown when the controller is
    /// dropped) gives them back; otherwise they are never reused.
    pub fn quarantined_buffers(&self) -> usize {
        self.shared.admin().quarantine.buffers()
    }

    /// Whether the device is gone (register reads returned all ones).
    pub fn is_gone(&self) -> bool {
        self.shared.epoch.condition() == Condition::Gone
    }

    /// Asynchronous event completions dropped because 64 were waiting.
    pub fn events_dropped(&self) -> u64 {
        self.shared.admin().events_dropped
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

    /// The most entries an I/O queue may have (CAP.MQES + 1).
    pub fn max_queue_entries(&self) -> u32 {
        self.shared.cap.max_queue_entries()
    }

    /// Creates an I/O queue pair with `depth` entries per ring (at most
    /// CAP.MQES+1; [`DEFAULT_QUEUE_DEPTH`] suits most callers), holding up
    /// to `depth - 1` commands in flight. The pair is `Send`: hand it to the thread that will
    /// own it. Dropping it deletes its queues on the controller.
    pub fn create_queue_pair(&self, depth: u16) -> Result<QueuePair> {
        let shared = &self.shared;
        let (mut pair, _, generation) = shared.open_queue_pair(depth, |qid, doorbells| {
            let pair = QueuePair::new(&shared.transport, qid, depth, doorbells)?;
            let (sq_iova, cq_iova) = (pair.sq_iova(), pair.cq_iova());
            Ok((pair, sq_iova, cq_iova))
        })?;
        let host: Arc<dyn QueueHost> = Arc::clone(shared) as Arc<dyn QueueHost>;
        pair.attach(host, Arc::clone(&shared.epoch), generation);
        pair.set_timeout(shared.options.io_timeout);
        pair.set_clock(Clock::new(shared.options.clock));
        pair.set_sgl_threshold(self.sgl_threshold());
        Ok(pair)
    }

    /// A bare queue pair of `entries` entries per ring, for measuring the
    /// platform's floor (see [`RawQueue`]): no validation, deadlines or
    /// recovery. Its rings and PRP lists share one region on a huge page
    /// where there is one. Dropping it deletes its queues.
    pub fn create_raw_queue(&self, entries: u16) -> Result<RawQueue> {
        let shared = &self.shared;
        let ((memory, doorbells), qid, generation) = shared.open_queue_pair(entries, |qid, config| {
            let layout = RawQueue::layout(entries);
            let memory = DmaRegion::allocate_preferring_huge_pages(&shared.transport, layout.len)?;
            // Shadow slots zeroed before the queues exist.
            let doorbells = QueuePair::make_doorbells(&shared.transport, qid, config);
            let (sq_iova, cq_iova) = (memory.iova() + layout.sq_offset as u64, memory.iova());
            Ok(((memory, doorbells), sq_iova, cq_iova))
        })?;
        let host: Arc<dyn QueueHost> = Arc::clone(shared) as Arc<dyn QueueHost>;
        let ids = (qid, entries, generation);
        Ok(RawQueue::new(&shared.transport, host, ids, memory, doorbells, self.sgl_threshold()))
    }

    /// A handle for I/O on namespace `nsid`: geometry, limits and request
    /// validation.
    pub fn namespace(&self, nsid: u32) -> Result<Namespace> {
        let info = self
            .namespaces
            .iter()
            .find(|ns| ns.nsid == nsid)
            .ok_or_else(|| Error::InvalidArgument(format!("namespace {nsid} is not active on this controller")))?;
        let limits = self.limits();
        let namespace = Namespace::new(&limits, info);
        let mut states = self.zero_states.lock().unwrap_or_else(|p| p.into_inner());
        let state = match states.iter().find(|(id, _)| *id == nsid) {
            Some((_, state)) => Arc::clone(state),
            None => {
                let capabilities =
                    ZeroCapabilities::derive(&limits, info, namespace.max_transfer_bytes(), *namespace.range_limits());
                let state = Arc::new(ZeroState::new(capabilities, Arc::clone(&self.shared.transport)));
                states.push((nsid, Arc::clone(&state)));
                state
            }
        };
        Ok(namespace.with_zero_state(state))
    }

    /// Formats namespace `nsid` (Format NVM, NVMe Base 2.0 §5.23) to the
    /// LBA format with `block_size`-byte blocks and `metadata_bytes` of
    /// metadata per block, in a separate buffer, without protection
    /// information; the best-performing such format (lowest Relative
    /// Performance) where the namespace lists several. Destroys every block
    /// of the namespace. Waits at most [`ControllerOptions::admin_timeout`],
    /// then reads the namespace's identity again, so that
    /// [`Controller::namespace`] describes the new format. A namespace
    /// handle made before stays with the old one: make another.
    ///
    /// Errors: [`Error::Unsupported`] when the controller does not offer
    /// Format NVM (OACS bit 1) or the namespace lists no such format;
    /// [`Error::InvalidArgument`] for a namespace that is not active.
    pub fn format_namespace(&mut self, nsid: u32, block_size: u32, metadata_bytes: u16) -> Result<()> {
        let position = self
            .namespaces
            .iter()
            .position(|ns| ns.nsid == nsid)
            .ok_or_else(|| Error::InvalidArgument(format!("namespace {nsid} is not active on this controller")))?;
        if !self.identify.oacs.contains(Oacs::FORMAT) {
            return Err(Error::Unsupported(format!(
                "{} does not offer Format NVM (OACS bit 1 clear)",
                self.shared.transport.name()
            )));
        }
        let identify = &self.namespaces[position].identify;
        let formats = identify.lbaf.iter().enumerate().take(usize::from(identify.nlbaf) + 1);
        let wanted = |format: &&identify::LbaFormat| {
            format.ms == metadata_bytes && 1u64.checked_shl(u32::from(format.lbads)) == Some(u64::from(block_size))
        };
        let (index, _) =
            formats.filter(|(_, format)| wanted(format)).min_by_key(|(_, format)| format.rp).ok_or_else(|| {
                Error::Unsupported(format!(
                    "namespace {nsid} of {} lists no LBA format of {block_size}-byte blocks with {metadata_bytes} \
                     bytes of metadata",
                    self.shared.transport.name()
                ))
            })?;
        let index = u8::try_from(index).expect("at most 64 LBA formats");
        self.shared.command(admin::format_nvm(nsid, index))?;
        self.namespaces[position] = identify_namespace(&self.shared, nsid)?;
        // Its zero-out capabilities are worked out again for the new format.
        self.zero_states.lock().unwrap_or_else(|p| p.into_inner()).retain(|(id, _)| *id != nsid);
        Ok(())
    }

    /// The effective quirks: the built-in table, then the overrides.
    pub fn quirks(&self) -> Quirks {
        self.quirks
    }

    /// What a namespace handle and its zero-out take from this controller.
    fn limits(&self) -> ControllerLimits<'_> {
        ControllerLimits {
            identify: &self.identify,
            identify_nvm: self.identify_nvm.as_ref(),
            identify_zns: self.identify_zns.as_ref(),
            min_page_size: self.shared.cap.min_page_size(),
            max_transfer_bytes: self.max_transfer_bytes(),
            data_pointer_max_bytes: self.data_pointer_max_bytes(),
            quirks: self.quirks,
            cross_namespace_copy: self.shared.admin().setup.cross_namespace_copy,
        }
    }

    /// Whether queue pairs use shadow doorbells.
    pub fn shadow_doorbells(&self) -> bool {
        self.shared.admin().shadow.is_some()
    }

    /// The transport (register and DMA mapping seam) the controller runs on;
    /// DMA pools for I/O buffers are made from it.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.shared.transport
    }

    /// CAP, the Controller Capabilities register, as read at bring-up.
    pub fn cap(&self) -> Cap {
        self.shared.cap
    }

    /// VS, the Version register (NVMe Base 2.0 §3.1.3.2).
    pub fn version(&self) -> Vs {
        self.vs
    }

    /// The CC.CSS value in use.
    pub fn command_sets(&self) -> u8 {
        self.css
    }

    /// The Identify Controller data (CNS 01h), as read at bring-up.
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

    /// The active namespaces found at bring-up, by NSID order.
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

    /// The span of a transfer's pages (bytes from the start of its first
    /// page) above which I/O commands use an SGL, `None` for PRPs
    /// throughout: [`ControllerOptions::sgl`] where the controller supports
    /// SGLs.
    pub fn sgl_threshold(&self) -> Option<usize> {
        self.shared.options.sgl.threshold(self.identify.sgl_supported())
    }

    /// The largest transfer an I/O command's data pointer describes here:
    /// one PRP list page's worth, or one SGL descriptor's where SGLs are
    /// used (MDTS bounds it too; see [`Namespace::max_transfer_bytes`]).
    pub fn data_pointer_max_bytes(&self) -> usize {
        SglMode::max_transfer_bytes(self.sgl_threshold())
    }
}
