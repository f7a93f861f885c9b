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

use crate::clock::{Clock, ClockSource};
use crate::cmd::admin;
use crate::cmd::zns::{self as zns_cmd, ReportFilter};
use crate::dma::{DmaMemory, DmaRegion, PAGE_SIZE};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::queue::sgl::SglMode;
use crate::queue::{
    AbortOutcome, Condition, DoorbellConfig, Epoch, Held, IoCompletion, Quarantine, QueueHost, QueuePair, RawQueue,
    ShadowPages, ShadowPolicy,
};
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

/// A zoned namespace's geometry and limits.
#[derive(Clone, Debug, Serialize)]
pub struct ZonedInfo {
    /// Zone size, in logical blocks (ZSZE of the LBA format in use); the zone
    /// capacity may be smaller, per zone.
    pub zone_size_blocks: u64,
    /// Max open zones, `None` if unlimited.
    pub max_open_zones: Option<u32>,
    /// Max active zones, `None` if unlimited.
    pub max_active_zones: Option<u32>,
    /// The Identify Namespace data for the Zoned Namespace Command Set (CNS
    /// 05h, CSI 02h), as read.
    pub identify: IdentifyNamespaceZns,
}

/// An active namespace as Identify describes it.
#[derive(Clone, Debug, Serialize)]
pub struct NamespaceInfo {
    /// Namespace ID.
    pub nsid: u32,
    /// Command Set Identifier (0 NVM, 2 Zoned).
    pub csi: u8,
    /// Logical block size, in bytes (LBADS of the LBA format in use).
    pub block_size: u32,
    /// NSZE: the namespace size in logical blocks.
    pub capacity_blocks: u64,
    /// The Identify Namespace data (CNS 00h), as read.
    pub identify: IdentifyNamespace,
    /// Zone geometry and limits; `None` for a namespace that is not zoned.
    pub zoned: Option<ZonedInfo>,
}

impl NamespaceInfo {
    /// The namespace size, in bytes (NSZE times the block size); `u128` so no
    /// namespace size overflows.
    pub fn capacity_bytes(&self) -> u128 {
        u128::from(self.capacity_blocks) * u128::from(self.block_size)
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
    /// CC.CSS chosen at bring-up.
    css: u8,
    /// Admin queue entries (AQA).
    admin_entries: u16,
    /// I/O queues asked for with Set Features Number of Queues.
    io_queues_requested: u16,
    /// The Asynchronous Event Configuration value set at bring-up, if the
    /// controller took one.
    async_event_config: Option<u32>,
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

impl Admin {
    /// Runs an admin command without data. A timeout or a fatal status
    /// resets the controller (as Linux does after an admin timeout); the
    /// error is still returned.
    fn run(&mut self, command: Command, timeout: Duration) -> Result<IoCompletion> {
        // SAFETY: no data pointer.
        let result = unsafe { self.run_raw(command, 0, 0, timeout) };
        self.settle(&result);
        result
    }

    /// Runs an admin command that transfers `len` bytes through the scratch
    /// buffer, zeroed first, and copies them out.
    fn run_with_scratch(&mut self, command: Command, len: usize, timeout: Duration) -> Result<(IoCompletion, Vec<u8>)> {
        assert!(len <= SCRATCH_LEN);
        self.scratch.fill(0, len, 0);
        let iova = self.scratch.iova();
        // SAFETY: the scratch region is mapped for this controller, owned by
        // this struct (behind the admin lock) and not touched by the host
        // until the completion has been reaped (or a reset ended it).
        let result = unsafe { self.run_raw(command, iova, len, timeout) };
        self.settle(&result);
        let completion = result?;
        let mut data = vec![0u8; len];
        self.scratch.copy_out(0, &mut data);
        Ok((completion, data))
    }

    /// Runs one command; completions of Asynchronous Event Requests that
    /// arrive meanwhile are kept, late ones of abandoned commands dropped.
    ///
    /// # Safety
    /// As [`QueuePair::execute_raw`].
    unsafe fn run_raw(&mut self, command: Command, iova: u64, len: usize, timeout: Duration) -> Result<IoCompletion> {
        let Admin { queue, aer_completions, aer_armed, events_dropped, .. } = self;
        let route = |completion: IoCompletion| route_aer(completion, aer_completions, aer_armed, events_dropped);
        // SAFETY: forwarded contract.
        unsafe { queue.run_routing(command, iova, len, timeout, route) }
    }

    /// After an admin command: removal is recorded; a timeout or a fatal
    /// status resets the controller; the event request is re-armed.
    fn settle<T>(&mut self, result: &Result<T>) {
        match result {
            Err(Error::DeviceGone) => self.device_gone(),
            Err(Error::ControllerFatal | Error::Timeout { .. }) => {
                let _ = self.reset();
            }
            _ => {}
        }
        if !self.aer_armed && self.epoch.condition() == Condition::Live {
            self.arm_aer();
        }
    }

    /// The device is gone, or the host wants it back: a best-effort,
    /// bounded disable first, so a device still there stops its DMA before
    /// the pairs hand buffers back (a gone one reads all ones and returns at
    /// once). Unless that disable is confirmed, the pairs quarantine the
    /// buffers of their commands in flight.
    fn device_gone(&mut self) {
        if self.epoch.condition() == Condition::Gone {
            return;
        }
        let _ = self.disable();
        // Condition first: a pair that sees the new generation must find
        // the device gone.
        self.epoch.set_condition(Condition::Gone);
        self.epoch.advance();
    }

    /// Clears CC.EN and waits (bounded) for CSTS.RDY = 0; if the controller
    /// stays ready, a function-level reset, where the transport has one.
    /// Once RDY = 0 is read back the device's DMA has ended (NVMe Base 2.0
    /// §3.7.2): queues of every generation so far are known stopped and the
    /// quarantine is released. A device reading all ones counts as stopped
    /// too: it is off the bus, or its link is down, which resets it (PCIe
    /// Base 6.0 §6.6.1: DL_Down is a hot reset of the device below). A
    /// disable that timed out, with no reset to follow it, confirms nothing:
    /// the pairs then quarantine the buffers of their commands in flight.
    fn disable(&mut self) -> Result<()> {
        let transport = Arc::clone(&self.setup.transport);
        let result = stop(&*transport, self.setup.ready_timeout);
        match &result {
            Ok(()) | Err(Error::DeviceGone) => {
                self.epoch.confirm_stopped();
                self.quarantine.release();
            }
            Err(error) => ::log::warn!(
                "{}: disable not confirmed ({error}); memory of commands in flight stays quarantined",
                transport.name()
            ),
        }
        result
    }

    /// Keeps one Asynchronous Event Request outstanding (NVMe Base 2.0
    /// §5.2): it completes only when the controller has an event.
    fn arm_aer(&mut self) {
        // SAFETY: no data pointer.
        if unsafe { self.queue.submit_raw(admin::async_event_request(), 0, 0, AER_TOKEN) }.is_ok() {
            self.queue.ring();
            self.aer_armed = true;
        }
    }

    /// Reaps whatever the admin queue holds without waiting.
    fn poll(&mut self) {
        let Admin { queue, aer_completions, aer_armed, events_dropped, .. } = self;
        queue.poll(|completion| route_aer(completion, aer_completions, aer_armed, events_dropped));
    }

    /// A controller reset (NVMe Base 2.0 §3.7.2, Controller Level Reset):
    /// the controller is disabled (which ends all its DMA once confirmed),
    /// every queue pair learns of the reset through the epoch, and the
    /// controller is brought up again with the admin queue, Number of
    /// Queues, shadow doorbells, event configuration and an Asynchronous
    /// Event Request. I/O queue pairs re-create their own queues at their
    /// next poll. The disable comes before the epoch advances, so no pair
    /// hands back a buffer while the disable is still in progress.
    fn reset(&mut self) -> Result<()> {
        if self.epoch.condition() == Condition::Gone {
            return Err(Error::DeviceGone);
        }
        self.resets += 1;
        let disabled = self.disable();
        self.epoch.advance();
        let result = disabled.and_then(|()| self.bring_up());
        self.epoch.set_condition(match &result {
            Ok(()) => Condition::Live,
            Err(Error::DeviceGone) => Condition::Gone,
            Err(_) => Condition::Failed,
        });
        result
    }

    /// Brings a controller whose disable was confirmed back up.
    fn bring_up(&mut self) -> Result<()> {
        let transport = Arc::clone(&self.setup.transport);
        let ready_timeout = self.setup.ready_timeout;
        // Disabled: nothing in flight on the admin queue will complete.
        self.queue.reset_after_disable();
        self.aer_armed = false;
        self.aer_completions.clear();
        enable(&*transport, &self.queue, self.setup.admin_entries, self.setup.css, ready_timeout)?;
        let timeout = self.setup.admin_timeout;
        let requested = self.setup.io_queues_requested;
        // SAFETY: no data pointer.
        unsafe { self.run_raw(admin::set_number_of_queues(requested, requested), 0, 0, timeout) }?;
        if let Some(shadow) = &self.shadow {
            // Zeroed pages: every queue starts at 0 again.
            shadow.values.fill(0, PAGE_SIZE, 0);
            shadow.event_idx.fill(0, PAGE_SIZE, 0);
            let (values, event_idx, pages) = (shadow.values.iova(), shadow.event_idx.iova(), shadow.pages);
            // SAFETY: no data pointer (the pages are named in PRP1/PRP2 and
            // live with the controller).
            unsafe { self.run_raw(admin::doorbell_buffer_config(values, event_idx), 0, 0, timeout) }?;
            self.queue.use_shadow(pages, ShadowPolicy::Always);
        }
        if let Some(config) = self.setup.async_event_config {
            let command = admin::set_features(admin::FID_ASYNC_EVENT_CONFIG, config, false);
            // SAFETY: no data pointer.
            unsafe { self.run_raw(command, 0, 0, timeout) }?;
        }
        self.arm_aer();
        Ok(())
    }
}

/// Keeps an Asynchronous Event Request's completion for
/// [`Controller::poll_events`]; anything else arriving outside a wait is a
/// late completion of an abandoned command, and dropped.
fn route_aer(completion: IoCompletion, kept: &mut VecDeque<u32>, armed: &mut bool, dropped: &mut u64) {
    if completion.token != AER_TOKEN {
        return;
    }
    *armed = false;
    // An error status (Abort, a reset ending it) is no event.
    if completion.status.is_ok() {
        if kept.len() == EVENTS_MAX {
            kept.pop_front();
            *dropped += 1;
        }
        kept.push_back(completion.dw0);
    }
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

    fn allocate_qid(admin: &mut Admin) -> Result<u16> {
        let free = admin.qid_in_use.iter().skip(1).position(|used| !used).map(|i| i + 1);
        let qid = free.ok_or_else(|| {
            Error::Unsupported(format!("all {} I/O queue pairs are in use", admin.qid_in_use.len().saturating_sub(1)))
        })?;
        admin.qid_in_use[qid] = true;
        Ok(u16::try_from(qid).expect("qids fit the granted count"))
    }

    /// Creates I/O queue pair `qid` on the controller: the completion queue
    /// first, since the submission queue names it (NVMe Base 2.0 §5.4,
    /// §5.5).
    /// Whether new queues can be made: the device there, the controller up.
    fn live(&self) -> Result<()> {
        match self.epoch.condition() {
            Condition::Live => Ok(()),
            Condition::Gone => Err(Error::DeviceGone),
            Condition::Failed => Err(Error::ControllerFailed),
        }
    }

    /// A new I/O queue pair of `depth` entries, for [`QueuePair`] and
    /// [`RawQueue`] alike: under the admin lock, with the controller live,
    /// takes a free queue id, lets `build` make the host side for it (given
    /// the id and its doorbells' configuration; it returns that side and
    /// its SQ and CQ addresses) and creates the queues there. The id goes
    /// back if anything fails. Returns the host side, the id and the reset
    /// generation the queues belong to.
    fn open_queue_pair<T>(
        &self,
        depth: u16,
        build: impl FnOnce(u16, DoorbellConfig) -> Result<(T, u64, u64)>,
    ) -> Result<(T, u16, u64)> {
        let max = self.cap.max_queue_entries();
        if depth < 2 || u32::from(depth) > max {
            return Err(Error::InvalidArgument(format!("queue depth {depth}: expected 2..={max} (CAP.MQES+1)")));
        }
        let mut admin = self.admin();
        self.live()?;
        let qid = Self::allocate_qid(&mut admin)?;
        let shadow = admin.shadow.as_ref().map(|shadow| shadow.pages);
        let doorbells = DoorbellConfig { dstrd: self.cap.dstrd(), shadow, policy: ShadowPolicy::EventIdx };
        let generation = self.epoch.generation();
        let opened = build(qid, doorbells).and_then(|(side, sq_iova, cq_iova)| {
            self.create_queues(&mut admin, qid, depth, sq_iova, cq_iova)?;
            Ok(side)
        });
        match opened {
            Ok(side) => Ok((side, qid, generation)),
            Err(error) => {
                admin.qid_in_use[usize::from(qid)] = false;
                Err(error)
            }
        }
    }

    fn create_queues(&self, admin: &mut Admin, qid: u16, depth: u16, sq_iova: u64, cq_iova: u64) -> Result<()> {
        let timeout = self.options.admin_timeout;
        admin.run(admin::create_io_cq(qid, depth, cq_iova, true, false, 0), timeout)?;
        if let Err(error) = admin.run(admin::create_io_sq(qid, depth, sq_iova, qid, 0), timeout) {
            let _ = admin.run(admin::delete_io_cq(qid), timeout);
            return Err(error);
        }
        Ok(())
    }

    /// A normal shutdown (CC.SHN, then a bounded wait for CSTS.SHST
    /// "complete", NVMe Base 2.0 §3.6.1), then CC.EN = 0 so the controller
    /// touches no host memory after this returns. Queue pairs are gone by
    /// now: each holds this state alive and deletes its queues on drop.
    /// Returns whether the disable was confirmed (CSTS.RDY = 0).
    fn shutdown(&self) -> bool {
        if self.epoch.condition() == Condition::Gone {
            return false;
        }
        let cc = Cc(self.transport.read32(registers::CC));
        if cc.0 == u32::MAX {
            return false;
        }
        if cc.enable() {
            self.transport.write32(registers::CC, cc.with_shn(Shn::Normal).0);
            let shut = wait_for(&*self.transport, "shutdown (CSTS.SHST)", self.options.shutdown_timeout, |csts| {
                Ok(csts.shst() == ShutdownStatus::Complete)
            });
            if let Err(error) = shut {
                ::log::warn!("{}: {error}; disabling without it", self.transport.name());
            }
        }
        // Even when CC.EN is already clear: an earlier disable may have
        // timed out with RDY still set.
        let ready_timeout = Duration::from_millis(u64::from(self.cap.timeout_ms()).max(500));
        stop(&*self.transport, ready_timeout).is_ok()
    }
}

impl QueueHost for Shared {
    fn abort(&self, qid: u16, cid: u16) -> AbortOutcome {
        let mut admin = self.admin();
        match self.epoch.condition() {
            Condition::Live => {}
            Condition::Gone => return AbortOutcome::Gone,
            Condition::Failed => return AbortOutcome::Failed,
        }
        // NVMe Base 2.0 §5.1: DW0 bit 0 clear means the command was
        // aborted (and completes with Command Abort Requested).
        match admin.run(admin::abort(qid, cid), self.options.admin_timeout) {
            Ok(completion) if completion.dw0 & 1 == 0 => AbortOutcome::Aborted,
            Ok(_) => AbortOutcome::NotAborted,
            Err(Error::DeviceGone) => AbortOutcome::Gone,
            Err(_) => AbortOutcome::Failed,
        }
    }

    fn reset(&self, generation: u64) {
        let mut admin = self.admin();
        // Someone else reset it since the caller looked: once is enough.
        if self.epoch.generation() == generation {
            let _ = admin.reset();
        }
    }

    fn device_gone(&self) {
        self.admin().device_gone();
    }

    fn recreate_queues(&self, qid: u16, depth: u16, sq_iova: u64, cq_iova: u64) -> Result<u64> {
        let mut admin = self.admin();
        self.live()?;
        // Under the admin lock, which resets also hold: the queues belong to
        // this generation.
        let generation = self.epoch.generation();
        self.create_queues(&mut admin, qid, depth, sq_iova, cq_iova)?;
        Ok(generation)
    }

    /// Deletes the SQ before its CQ (NVMe Base 2.0 §5.6, §5.7). Queues of
    /// an older generation died with a reset or removal: nothing to delete,
    /// and their memory is free once a disable was confirmed since.
    fn delete_queues(&self, qid: u16, generation: u64) -> bool {
        let mut admin = self.admin();
        let deleted = match self.epoch.condition() {
            Condition::Live if self.epoch.generation() == generation => {
                let timeout = self.options.admin_timeout;
                let deleted = admin.run(admin::delete_io_sq(qid), timeout).is_ok()
                    && admin.run(admin::delete_io_cq(qid), timeout).is_ok();
                // A delete that timed out reset the controller: its
                // confirmed disable stopped the queues as well.
                deleted || self.epoch.stopped_since(generation)
            }
            Condition::Live | Condition::Gone | Condition::Failed => self.epoch.stopped_since(generation),
        };
        if let Some(used) = admin.qid_in_use.get_mut(usize::from(qid)) {
            *used = !deleted;
        }
        deleted
    }

    fn quarantine(&self, memory: Held) {
        self.admin().quarantine.hold(memory);
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let stopped = self.shutdown();
        // Disabled for good: quarantined memory may go (else it leaks with
        // the quarantine).
        if stopped {
            self.admin.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).quarantine.release();
        }
    }
}

/// What an Asynchronous Event Request reported (NVMe Base 2.0 §5.2,
/// Figures 146 to 151).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AsyncEvent {
    /// Asynchronous Event Type (DW0 bits 2:0): 0h error, 1h SMART / health,
    /// 2h notice, 6h I/O command set specific, 7h vendor specific.
    pub event_type: u8,
    /// Asynchronous Event Information (DW0 bits 15:8).
    pub information: u8,
    /// The log page that clears the event (DW0 bits 23:16).
    pub log_page: u8,
    /// The event, decoded where the driver knows it.
    pub kind: AsyncEventKind,
}

/// The events the driver names; the raw fields are in [`AsyncEvent`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum AsyncEventKind {
    /// SMART / Health status (type 1h): information 00h reliability, 01h
    /// temperature threshold, 02h spare below threshold. The critical
    /// warning comes from the SMART / Health log, read to re-arm the event.
    Smart {
        /// Critical Warning (byte 0 of the SMART / Health Information log,
        /// NVMe Base 2.0 §5.16.1.3).
        critical_warning: crate::spec::log::CriticalWarning,
    },
    /// Zone Descriptor Changed notice (type 2h, information EFh; NVMe ZNS
    /// 1.1 §5.5): report zones again. The driver reads each zoned
    /// namespace's Changed Zone List log (BFh) to re-arm it.
    ZoneDescriptorChanged,
    /// Namespace Attribute Changed notice (type 2h, information 00h).
    NamespaceAttributeChanged,
    /// An error status event (type 0h).
    Error,
    /// Anything else; see the raw fields.
    Other,
}

/// Asynchronous Event Type values (NVMe Base 2.0 §5.2, Figure 146).
const AER_TYPE_ERROR: u8 = 0;
const AER_TYPE_SMART: u8 = 1;
const AER_TYPE_NOTICE: u8 = 2;
/// Notice information: Namespace Attribute Changed, Zone Descriptor Changed.
const AER_NOTICE_NS_ATTRIBUTE: u8 = 0x00;
const AER_NOTICE_ZONE_DESCRIPTOR_CHANGED: u8 = 0xEF;
/// Changed Zone List log (NVMe ZNS 1.1 §5.5.1).
const LOG_CHANGED_ZONE_LIST: u8 = 0xBF;
/// Asynchronous Event Configuration (NVMe Base 2.0 §5.27.1.7): SMART /
/// health critical warnings (bits 7:0), Namespace Attribute Notices (8),
/// Firmware Activation Notices (9) and, in ZNS, Zone Descriptor Changed
/// Notices (27); the notices only where OAES offers them.
const AEC_SMART_WARNINGS: u32 = 0xFF;
const AEC_NOTICES: u32 = 1 << 8 | 1 << 9 | 1 << 27;

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
        enable(&*transport, &queue, entries, css, ready_timeout)?;

        let scratch = DmaRegion::allocate(&transport, SCRATCH_LEN)?;
        let epoch = Arc::new(Epoch::default());
        let setup = Setup {
            transport: Arc::clone(&transport),
            ready_timeout,
            admin_timeout: options.admin_timeout,
            css,
            admin_entries: entries,
            io_queues_requested: options.io_queue_pairs.max(1),
            async_event_config: None,
        };
        let admin = Admin {
            queue,
            scratch,
            qid_in_use: vec![true],
            shadow: None,
            setup,
            epoch: Arc::clone(&epoch),
            // Armed at the end of bring-up.
            aer_armed: true,
            aer_completions: VecDeque::new(),
            events_dropped: 0,
            zoned_nsids: Vec::new(),
            resets: 0,
            quarantine: Quarantine::default(),
        };
        let shared = Shared { transport, options, cap, admin: Mutex::new(admin), epoch };

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
            let shadow = enable_shadow_doorbells(&shared, io_queue_pairs)?;
            let mut admin = shared.admin();
            if let Some(shadow) = &shadow {
                // Controllers differ in whether they read queue 0's shadow:
                // write both the shadow and the register for the admin queue.
                admin.queue.use_shadow(shadow.pages, ShadowPolicy::Always);
            }
            admin.shadow = shadow;
        }
        configure_events(&shared, &identify, &namespaces)?;

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

    /// Events the controller reported through Asynchronous Event Requests
    /// since the last call, oldest first (NVMe Base 2.0 §5.2). The driver
    /// keeps one request outstanding; the admin queue is polled here and
    /// at every admin command, so call this now and then (say, once a
    /// second). For each event the driver reads the log page that re-arms
    /// it (the SMART / Health log for a SMART event, whose critical warning
    /// the event carries). At most 64 events wait; older ones are dropped
    /// ([`Controller::events_dropped`]).
    pub fn poll_events(&self) -> Result<Vec<AsyncEvent>> {
        let mut admin = self.shared.admin();
        admin.poll();
        let timeout = self.shared.options.admin_timeout;
        let mut events = Vec::new();
        while let Some(dw0) = admin.aer_completions.pop_front() {
            let event_type = (dw0 & 0b111) as u8;
            let information = (dw0 >> 8) as u8;
            let log_page = (dw0 >> 16) as u8;
            let kind = match (event_type, information) {
                (AER_TYPE_SMART, _) => {
                    // Reading the log with RAE clear re-arms SMART events.
                    let command = admin::get_log_page(log::LOG_SMART_HEALTH, 0xFFFF_FFFF, 512, 0, 0, 0);
                    let (_, data) = admin.run_with_scratch(command, 512, timeout)?;
                    AsyncEventKind::Smart { critical_warning: SmartHealthLog::parse(&data)?.critical_warning }
                }
                (AER_TYPE_NOTICE, AER_NOTICE_ZONE_DESCRIPTOR_CHANGED) => {
                    for nsid in admin.zoned_nsids.clone() {
                        let command = admin::get_log_page(LOG_CHANGED_ZONE_LIST, nsid, 4096, 0, 0, 0);
                        // A controller without the log has nothing to re-arm.
                        let _ = admin.run_with_scratch(command, 4096, timeout);
                    }
                    AsyncEventKind::ZoneDescriptorChanged
                }
                (AER_TYPE_NOTICE, AER_NOTICE_NS_ATTRIBUTE) => {
                    let command = admin::get_log_page(log::LOG_CHANGED_NAMESPACES, 0xFFFF_FFFF, 4096, 0, 0, 0);
                    let _ = admin.run_with_scratch(command, 4096, timeout);
                    AsyncEventKind::NamespaceAttributeChanged
                }
                (AER_TYPE_ERROR, _) => {
                    let command = admin::get_log_page(log::LOG_ERROR_INFORMATION, 0, 64, 0, 0, 0);
                    let _ = admin.run_with_scratch(command, 64, timeout);
                    AsyncEventKind::Error
                }
                _ => AsyncEventKind::Other,
            };
            events.push(AsyncEvent { event_type, information, log_page, kind });
        }
        if !admin.aer_armed && self.shared.epoch.condition() == Condition::Live {
            admin.arm_aer();
        }
        Ok(events)
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
            let (len, cq_offset, _) = crate::queue::raw_layout(entries);
            let memory = DmaRegion::allocate(&shared.transport, len)?;
            // Shadow slots zeroed before the queues exist.
            let doorbells = QueuePair::make_doorbells(&shared.transport, qid, config);
            let (sq_iova, cq_iova) = (memory.iova(), memory.iova() + cq_offset as u64);
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
            Ok(Some(ShadowBuffers { values, event_idx, pages }))
        }
        Err(Error::Command { .. }) => Ok(None),
        Err(other) => Err(other),
    }
}

/// Asynchronous Event Configuration: SMART critical warnings, and the
/// notices OAES offers (NVMe Base 2.0 §5.27.1.7; QEMU raises a SMART event
/// only for warning bits enabled here). A controller that refuses the
/// value gets the SMART bits alone, and one that refuses those none. Then
/// the first Asynchronous Event Request goes out.
fn configure_events(shared: &Shared, identify: &IdentifyController, namespaces: &[NamespaceInfo]) -> Result<()> {
    let mut admin = shared.admin();
    admin.zoned_nsids = namespaces.iter().filter(|ns| ns.zoned.is_some()).map(|ns| ns.nsid).collect();
    let timeout = shared.options.admin_timeout;
    let wanted = AEC_SMART_WARNINGS | identify.oaes & AEC_NOTICES;
    for config in [wanted, AEC_SMART_WARNINGS] {
        match admin.run(admin::set_features(admin::FID_ASYNC_EVENT_CONFIG, config, false), timeout) {
            Ok(_) => {
                admin.setup.async_event_config = Some(config);
                break;
            }
            Err(Error::Command { .. }) => continue,
            Err(other) => return Err(other),
        }
    }
    admin.aer_armed = false;
    admin.arm_aer();
    Ok(())
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

/// Points the controller at the admin queue (AQA, ASQ, ACQ), enables it
/// (NVMe Base 2.0 §3.5.1 steps 4 to 7) and waits for CSTS.RDY within
/// CAP.TO.
fn enable(transport: &dyn Transport, queue: &QueuePair, entries: u16, css: u8, timeout: Duration) -> Result<()> {
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
    wait_ready(transport, true, timeout)
}

/// [`disable`], and a function-level reset if the controller stays ready.
fn stop(transport: &dyn Transport, timeout: Duration) -> Result<()> {
    let result = disable(transport, timeout);
    if !matches!(result, Err(Error::Timeout { .. })) {
        return result;
    }
    match transport.function_reset() {
        Ok(()) => {
            ::log::warn!("{}: the controller stayed ready; function-level reset", transport.name());
            wait_ready(transport, false, timeout)
        }
        Err(error) => {
            ::log::warn!("{}: the controller stayed ready and has no function-level reset ({error})", transport.name());
            result
        }
    }
}

/// Clears CC.EN and waits for CSTS.RDY = 0 within CAP.TO. CC.EN is
/// written again while RDY is still set, as after a disable that timed out.
fn disable(transport: &dyn Transport, timeout: Duration) -> Result<()> {
    let cc = Cc(transport.read32(registers::CC));
    if cc.enable() || Csts(transport.read32(registers::CSTS)).rdy() {
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
