//! A polled I/O queue pair: one submission queue, one completion queue, a
//! fixed tracker table. Owned by one thread (`Send`, not `Sync`); nothing
//! on the submit or poll path allocates, locks or makes a system call.
//!
//! Submissions are queued by [`QueuePair::submit`] and published to the
//! controller with one SQ doorbell update per batch, at the next
//! [`QueuePair::poll`] (or [`QueuePair::ring`]). A poll pass reaps every
//! ready completion and updates the CQ head doorbell once.
//!
//! This file holds the pair's state, its construction and its settings;
//! the paths through it live beside it, each an `impl QueuePair` of its
//! own:
//! - `submission`: checks, the data pointer, the SQE, the SQ doorbell;
//! - `completion`: reaping by phase tag and announcing the CQ head;
//! - `in_place`: completions handled in their slots, and sent again;
//! - `recovery`: deadlines, Abort, resets, removal, drop, quarantine;
//! - `blocking`: `execute` and the admin queue's bounded waits.
//!
//! What callers pass and get back is in `super::request`; what the pair
//! asks of its controller, in `super::host`.

mod blocking;
mod completion;
mod in_place;

pub use in_place::{Finished, Submitter};
mod recovery;
mod submission;

use super::doorbell::{Doorbell, ShadowPages, ShadowPolicy};
use super::host::{AbortOutcome, Condition, DoorbellConfig, Epoch, QueueHost};
use super::profile::{PhaseTicks, Profiler};
use super::quarantine::Held;
use super::request::{IoBuffer, IoCompletion, Request, SubmitError};
use super::{prp, sgl, RingLayout};
use crate::clock::Clock;
use crate::dma::{DmaMemory, DmaRegion, PAGE_SIZE};
use crate::error::{Error, IoError, Result};
use crate::spec::command::{Command, FLAGS_FUSE_MASK, FLAGS_PSDT_SHIFT, PSDT_SGL_MPTR_CONTIGUOUS};
use crate::spec::completion::{Completion, STATUS_WORD_OFFSET};
use crate::spec::registers::{cq_head_doorbell, sq_tail_doorbell, Csts, CSTS};
use crate::spec::status::{GenericStatus, Status, StatusCode};
use crate::transport::Transport;
use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SQE_SIZE: usize = std::mem::size_of::<Command>();
const CQE_SIZE: usize = std::mem::size_of::<Completion>();

/// Counters for one queue pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueueStats {
    /// Commands submitted.
    pub submitted: u64,
    /// Commands completed, with success or an error.
    pub completed: u64,
    /// Submission queue tail doorbell updates: one per batch of submissions
    /// published by [`QueuePair::ring`] or a poll.
    pub sq_doorbell_updates: u64,
    /// Of those, the ones that wrote the register; the rest only wrote the
    /// shadow doorbell, as its EventIdx allowed (NVMe Base 2.0 §5.8).
    pub sq_doorbell_mmio_writes: u64,
    /// Completion queue head doorbell updates (one per poll that consumed
    /// completions).
    pub cq_doorbell_updates: u64,
    /// Of those, the ones that wrote the register.
    pub cq_doorbell_mmio_writes: u64,
    /// Completions whose command identifier matched no command in flight
    /// (a misbehaving device); ignored.
    pub spurious_completions: u64,
    /// Commands whose deadline passed.
    pub timeouts: u64,
    /// Abort commands sent for them.
    pub aborts_sent: u64,
    /// Controller resets this pair asked for: an abort that failed or did
    /// not end its command, a fatal status, a controller no longer ready.
    pub resets_requested: u64,
    /// Controller resets this pair came back from, its queues re-created.
    pub recoveries: u64,
}

#[derive(Debug, Default)]
struct Tracker {
    token: u64,
    busy: bool,
    /// Its deadline passed; the slot stays reserved until the device
    /// completes the command or a reset ends it.
    timed_out: bool,
    /// When the command times out (or, once timed out, when the abort is
    /// given up on), in the pair's clock's ticks. `None` until the first
    /// deadline check after submission starts the clock.
    deadline: Option<u64>,
    buffer: Option<IoBuffer>,
    metadata: Option<IoBuffer>,
    /// The command as submitted (its data pointer and identifier
    /// included): `push` copies it into the SQ from here, and `in_place`
    /// sends it again from the same slot.
    command: Command,
}

/// Polls between two deadline checks while completions keep coming: a
/// clock read (a TSC read, or an `Instant::now()` of about 20 ns where the
/// vDSO serves it, see [`crate::clock`]) every 64 polls costs well under
/// 1 ns a poll. Where the OS clock is slow and the TSC unvouched for (a VM
/// on the HPET), deadlines still read the OS clock, here only.
const DEADLINE_CHECK_POLLS: u32 = 64;
/// Polls between two deadline checks while polls find nothing: an idle
/// spinning owner notices sooner.
const IDLE_DEADLINE_CHECK_POLLS: u32 = 8;
/// At most one CSTS read per this interval, at a deadline check with
/// commands in flight: an MMIO read costs a PCIe round trip (or a VM exit).
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_millis(10);
/// The default deadline of an I/O command (Linux's io_timeout).
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(30);

/// One I/O submission/completion queue pair. Created by
/// [`crate::Controller::create_queue_pair`]; deleted on the controller when
/// dropped.
///
/// Data pointers are PRPs, with one preallocated list page per slot that
/// covers any transfer up to MDTS (capped at 2 MiB), or, on controllers
/// that support SGLs and above a size ([`sgl::SglMode`]), one SGL Data
/// Block descriptor: the I/O path never allocates a descriptor.
///
/// # Deadlines, resets and removal
///
/// Every command completes exactly once, through [`QueuePair::poll`], with
/// success or an [`IoError`]:
/// - Each command has a deadline, [`DEFAULT_IO_TIMEOUT`] after submission
///   unless [`QueuePair::set_timeout`] says otherwise. There is no timer
///   thread: `poll` checks deadlines every 64 passes (every 8 when it finds
///   nothing), so a deadline is noticed within that many polls after it
///   passes, and the clock of a command starts at the first check after its
///   submission. Poll often.
/// - When a deadline passes, the pair sends Abort (NVMe Base 2.0 §5.1) for
///   the command through the controller's admin queue (the only time the
///   poll path takes a lock) and keeps its slot reserved: a late completion
///   cannot land in a reused slot. The command completes when the device
///   answers it (with [`IoError::Timeout`] if that answer is Command Abort
///   Requested, else with the device's own result). If the Abort fails, or
///   the command has not completed another timeout later, the pair resets
///   the controller.
/// - At most every 10 ms, at a deadline check with commands in flight, the
///   pair reads CSTS: all ones (or the host asking for the device back,
///   [`Transport::removal_requested`]) means the device is gone; CSTS.CFS,
///   or RDY clear, means the controller needs a reset.
/// - A controller reset (from any pair, the admin path, or
///   [`crate::Controller::reset`]) ends every command in flight on every
///   pair: each pair notices at its next poll, completes them with
///   [`IoError::ControllerReset`] ([`IoError::Timeout`] for those already
///   timed out), re-creates its queues on the same memory and goes on;
///   the owner resubmits what it needs. If the controller could not be
///   brought back, or the device is gone, in-flight commands complete
///   with [`IoError::ControllerReset`] or [`IoError::DeviceGone`] and
///   [`QueuePair::submit`] hands requests back with
///   [`SubmitError::ControllerFailed`] or [`SubmitError::DeviceGone`].
///
/// A pair belongs to one thread at a time: it is `Send` but not `Sync`.
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<nvme_driver::QueuePair>();
/// ```
/// ```
/// fn movable<T: Send>() {}
/// movable::<nvme_driver::QueuePair>();
/// ```
pub struct QueuePair {
    qid: u16,
    depth: u16,
    doorbells: DoorbellConfig,
    /// The SQ, the CQ and a PRP list page per slot, laid out by
    /// [`RingLayout`]. ManuallyDrop: quarantined, not freed, if the
    /// controller could not delete the queues (it may still write them).
    rings: ManuallyDrop<DmaRegion>,
    /// A `u32`: added to an SQ index, it cannot overflow, and the write's
    /// bounds check needs no overflow check (4 instructions fewer per
    /// command than with a `usize`, hack/io-instructions).
    sq_offset: u32,
    lists_offset: usize,
    /// Transfers whose pages, counted from the start of the first, span
    /// more than this many bytes are described by an SGL descriptor
    /// instead of PRPs (see [`sgl::SglMode`]); `None`: PRPs throughout.
    sgl_above: Option<usize>,
    sq_tail: u16,
    sq_published: u16,
    cq_head: u16,
    /// The CQ head the controller was last told: entries between it and
    /// `cq_head` are consumed but not yet announced (see `poll`).
    cq_announced: u16,
    phase: bool,
    sq_doorbell: Doorbell,
    cq_doorbell: Doorbell,
    trackers: Box<[Tracker]>,
    free: Vec<u16>,
    stats: QueueStats,
    transport: Arc<dyn Transport>,
    /// The transport's I/O address space: buffers from another are refused.
    dma_domain: usize,
    /// The deadline of each command; `None` for none (the admin queue,
    /// whose blocking helpers bound their own waits).
    timeout: Option<Duration>,
    /// Poll passes, for spacing deadline checks.
    polls: u32,
    /// The controller's reset generation and condition, the generation
    /// this pair last caught up with, and the one its queues were last
    /// created in (older when the controller failed or is gone: the pair
    /// has no queues since).
    epoch: Arc<Epoch>,
    generation: u64,
    queues_generation: u64,
    /// The owner's clock, for its stamps and the phase timings
    /// ([`crate::clock`]).
    clock: Clock,
    /// What deadlines and health checks read: `clock`, or the OS clock when
    /// `clock` is a TSC nobody vouched for ([`Clock::for_deadlines`]).
    deadline_clock: Clock,
    /// `timeout` and [`HEALTH_CHECK_INTERVAL`] in `deadline_clock`'s ticks, worked
    /// out when either is set rather than at every deadline check (a
    /// 128-bit division each).
    timeout_ticks: u64,
    health_interval_ticks: u64,
    /// When CSTS was last read, in `deadline_clock`'s ticks.
    health_checked: u64,
    /// Why submissions are refused, once the device is gone or the
    /// controller failed.
    dead: Option<SubmitError>,
    /// Whether a blocking wait of a pair without a host (the admin queue)
    /// ends at the host's request for the device; cleared while the
    /// controller quiesces for that very request.
    waits_end_on_removal_request: bool,
    /// Aborts, resets, queue re-creation and deletion on the controller.
    host: Option<Arc<dyn QueueHost>>,
    /// Runs instead of `host` on drop (the loopback device's detach);
    /// `false` if the memory must leak.
    on_drop: Option<Box<dyn FnOnce(u16) -> bool + Send>>,
    /// Phase timings, when the owner asked for them.
    profiler: Option<Box<Profiler>>,
    /// Commands the pair ended itself during a poll pass, for
    /// `poll_in_place` to hand over after it: a slot's capacity each.
    ended: Vec<IoCompletion>,
    /// One owner at a time: `Send`, never `Sync`.
    _not_sync: PhantomData<Cell<()>>,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qid", &self.qid)
            .field("depth", &self.depth)
            .field("in_flight", &self.in_flight())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The error of a command the controller completed with `status`.
#[cold]
fn failure(status: Status, timed_out: bool) -> IoError {
    let aborted = matches!(
        status.code(),
        StatusCode::Generic(GenericStatus::CommandAbortRequested | GenericStatus::AbortedSqDeletion)
    );
    match (aborted, timed_out) {
        (true, true) => IoError::Timeout,
        (true, false) => IoError::Aborted,
        (false, _) => IoError::Device(status),
    }
}

impl QueuePair {
    /// Allocates rings, trackers and PRP list pages for queue `qid` with
    /// `depth` entries. The caller creates the queues on the controller.
    pub(crate) fn new(transport: &Arc<dyn Transport>, qid: u16, depth: u16, doorbells: DoorbellConfig) -> Result<Self> {
        if depth < 2 {
            return Err(Error::InvalidArgument(format!("queue depth {depth}: at least 2")));
        }
        // An SQ of N entries holds N-1 commands: one tracker (and one PRP
        // list page) each.
        let slots = usize::from(depth) - 1;
        let layout = RingLayout::new(depth, slots);
        let rings = DmaRegion::allocate_preferring_huge_pages(transport, layout.len)?;
        let mut free: Vec<u16> = Vec::with_capacity(slots);
        free.extend((0..slots as u16).rev());
        let (sq_doorbell, cq_doorbell) = Self::make_doorbells(transport, qid, doorbells);
        let mut pair = QueuePair {
            qid,
            depth,
            doorbells,
            rings: ManuallyDrop::new(rings),
            sq_offset: u32::try_from(layout.sq_offset).expect("an SQ of at most 64 Ki entries"),
            lists_offset: layout.lists_offset,
            sgl_above: None,
            sq_tail: 0,
            sq_published: 0,
            cq_head: 0,
            cq_announced: 0,
            phase: true,
            sq_doorbell,
            cq_doorbell,
            trackers: (0..slots).map(|_| Tracker::default()).collect(),
            free,
            stats: QueueStats::default(),
            dma_domain: transport.dma_domain(),
            transport: Arc::clone(transport),
            timeout: (qid != 0).then_some(DEFAULT_IO_TIMEOUT),
            polls: 0,
            epoch: Arc::new(Epoch::default()),
            generation: 0,
            queues_generation: 0,
            clock: Clock::os(),
            deadline_clock: Clock::os(),
            timeout_ticks: 0,
            health_interval_ticks: 0,
            health_checked: 0,
            dead: None,
            waits_end_on_removal_request: true,
            host: None,
            on_drop: None,
            profiler: None,
            ended: Vec::with_capacity(slots),
            _not_sync: PhantomData,
        };
        pair.clock_changed();
        Ok(pair)
    }

    /// The SQ tail and CQ head doorbells of queue pair `qid`, with their
    /// shadow slots zeroed: a queue ID is reused after its pair is dropped,
    /// and the shadow and EventIdx slots keep the old queue's values. A new
    /// queue starts at 0 on both sides, or the first EventIdx check
    /// compares against a stale index and the doorbell is never written.
    pub(crate) fn make_doorbells(
        transport: &Arc<dyn Transport>,
        qid: u16,
        config: DoorbellConfig,
    ) -> (Doorbell, Doorbell) {
        let sq_offset = sq_tail_doorbell(qid, config.dstrd);
        let cq_offset = cq_head_doorbell(qid, config.dstrd);
        let shadow = |offset: usize| config.shadow.map(|pages| pages.slot(offset));
        let doorbells = (
            Doorbell::new(transport, sq_offset, shadow(sq_offset), config.policy),
            Doorbell::new(transport, cq_offset, shadow(cq_offset), config.policy),
        );
        doorbells.0.clear_shadow();
        doorbells.1.clear_shadow();
        doorbells
    }

    /// The controller's reset generation: it changes whenever the
    /// controller is reset. Writes that completed but were not yet flushed
    /// before a reset may be lost (a reset need not preserve a volatile
    /// write cache), so owners that track durability compare it before
    /// and after their flush.
    pub fn reset_generation(&self) -> u64 {
        self.epoch.generation()
    }

    pub(crate) fn sq_iova(&self) -> u64 {
        self.rings.iova() + u64::from(self.sq_offset)
    }

    pub(crate) fn cq_iova(&self) -> u64 {
        self.rings.iova()
    }

    /// Whether the rings and PRP lists sit on a 2 MiB huge page.
    pub fn is_hugepage_backed(&self) -> bool {
        self.rings.is_hugepage_backed()
    }

    /// Switches to shadow doorbells after Doorbell Buffer Config, keeping
    /// the published values.
    pub(crate) fn use_shadow(&mut self, pages: ShadowPages, policy: ShadowPolicy) {
        self.doorbells.shadow = Some(pages);
        self.doorbells.policy = policy;
        self.rebuild_doorbells();
    }

    /// New doorbells from `self.doorbells`, keeping the counters.
    fn rebuild_doorbells(&mut self) {
        let (sq_stats, cq_stats) = (
            (self.sq_doorbell.updates, self.sq_doorbell.mmio_writes),
            (self.cq_doorbell.updates, self.cq_doorbell.mmio_writes),
        );
        (self.sq_doorbell, self.cq_doorbell) = Self::make_doorbells(&self.transport, self.qid, self.doorbells);
        (self.sq_doorbell.updates, self.sq_doorbell.mmio_writes) = sq_stats;
        (self.cq_doorbell.updates, self.cq_doorbell.mmio_writes) = cq_stats;
    }

    pub(crate) fn set_on_drop(&mut self, on_drop: Box<dyn FnOnce(u16) -> bool + Send>) {
        self.on_drop = Some(on_drop);
    }

    /// Hands the rare paths (abort, reset, re-creation, deletion) to the
    /// controller whose queues these are, in reset generation `generation`.
    pub(crate) fn attach(&mut self, host: Arc<dyn QueueHost>, epoch: Arc<Epoch>, generation: u64) {
        self.host = Some(host);
        self.epoch = epoch;
        self.generation = generation;
        self.queues_generation = generation;
    }

    /// Queue identifier (QID): 0 for the admin queue, 1 and up for I/O
    /// queues.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Entries in each ring.
    pub fn depth(&self) -> u16 {
        self.depth
    }

    /// Commands that can be in flight at once (depth - 1).
    pub fn capacity(&self) -> usize {
        self.trackers.len()
    }

    /// Commands submitted and not yet completed, including timed-out ones
    /// whose slots stay reserved.
    pub fn in_flight(&self) -> usize {
        self.trackers.len() - self.free.len()
    }

    /// Whether blocking waits on this pair (the admin queue's) end with
    /// [`Error::DeviceGone`](crate::Error::DeviceGone) when the host asks
    /// for the device back; they always do when it reads all ones. The
    /// controller clears it while it quiesces for removal.
    pub(crate) fn set_waits_end_on_removal_request(&mut self, end: bool) {
        self.waits_end_on_removal_request = end;
    }

    /// Sets the deadline of commands, counted from the first deadline check
    /// after their submission (see the [type documentation](Self)); `None`
    /// for no deadline. Applies to commands already in flight whose clock
    /// has not started yet.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
        self.clock_changed();
    }

    /// Works out the intervals deadline checks compare in ticks.
    fn clock_changed(&mut self) {
        self.timeout_ticks = self.timeout.map_or(u64::MAX, |timeout| self.deadline_clock.ticks(timeout));
        self.health_interval_ticks = self.deadline_clock.ticks(HEALTH_CHECK_INTERVAL);
    }

    /// Describes transfers whose pages span more than `threshold` bytes
    /// (from the start of the first page) with one SGL Data Block
    /// descriptor instead of PRPs (`None`: PRPs throughout). Only for I/O
    /// queues of a controller that supports SGLs: the controller sets it
    /// from [`sgl::SglMode`] when it creates the pair, and namespaces size
    /// their transfers from the same mode.
    pub(crate) fn set_sgl_threshold(&mut self, threshold: Option<usize>) {
        assert!(self.qid != 0 || threshold.is_none(), "admin commands use PRPs");
        self.sgl_above = threshold;
    }

    /// Sets the pair's clock (the controller gives its own,
    /// [`crate::ControllerOptions::clock`]); deadlines and health checks
    /// read it too where it is trusted with them, else the OS clock
    /// ([`Clock::for_deadlines`]). Deadlines already started are started
    /// again.
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
        self.deadline_clock = clock.for_deadlines();
        self.clock_changed();
        self.health_checked = self.deadline_clock.now();
        for tracker in self.trackers.iter_mut() {
            tracker.deadline = None;
        }
    }

    /// Turns phase timings on or off ([`PhaseTicks`], in ticks of
    /// [`QueuePair::clock`]); turning them on starts them from zero. For
    /// finding where the time goes: on, each command costs a few more
    /// clock reads.
    pub fn set_profiling(&mut self, on: bool) {
        self.profiler = on.then(|| Box::new(Profiler::new(self.trackers.len())));
    }

    /// The phase timings so far, if profiling is on.
    pub fn profile(&self) -> Option<PhaseTicks> {
        self.profiler.as_ref().map(|profiler| profiler.ticks)
    }

    /// The clock when profiling (`PROFILE`, chosen once per call of
    /// `submit`, `ring` or `poll`); else 0 without reading it.
    #[inline(always)]
    fn stamp<const PROFILE: bool>(&self) -> u64 {
        if PROFILE {
            self.clock.now()
        } else {
            0
        }
    }

    /// The clock if profiling is on, else 0.
    fn clock_if_profiling(&self) -> u64 {
        if self.profiler.is_some() {
            self.clock.now()
        } else {
            0
        }
    }

    /// The pair's clock: what its owner stamps with, and what deadlines
    /// read where it is trusted with them ([`Clock::for_deadlines`]).
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The deadline of commands, if any (see [`QueuePair::set_timeout`]).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Why submissions are refused, if they are: the device is gone or the
    /// controller failed.
    pub fn unavailable(&self) -> Option<SubmitError> {
        self.dead
    }

    /// The counters, with the doorbell counts as of now.
    pub fn stats(&self) -> QueueStats {
        let mut stats = self.stats;
        stats.sq_doorbell_updates = self.sq_doorbell.updates;
        stats.sq_doorbell_mmio_writes = self.sq_doorbell.mmio_writes;
        stats.cq_doorbell_updates = self.cq_doorbell.updates;
        stats.cq_doorbell_mmio_writes = self.cq_doorbell.mmio_writes;
        stats
    }
}
