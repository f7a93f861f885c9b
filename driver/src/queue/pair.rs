//! A polled I/O queue pair: one submission queue, one completion queue, a
//! fixed tracker table. Owned by one thread (`Send`, not `Sync`); nothing
//! on the submit or poll path allocates, locks or makes a system call.
//!
//! Submissions are queued by [`QueuePair::submit`] and published to the
//! controller with one SQ doorbell update per batch, at the next
//! [`QueuePair::poll`] (or [`QueuePair::ring`]). A poll pass reaps every
//! ready completion and updates the CQ head doorbell once.

use super::doorbell::{Doorbell, ShadowPages, ShadowPolicy};
use super::profile::{PhaseTicks, Profiler};
use super::quarantine::Held;
use super::{prp, sgl};
use crate::clock::Clock;
use crate::dma::{DmaBuffer, DmaMemory, DmaRegion, PAGE_SIZE};
use crate::error::{Error, IoError, Result};
use crate::spec::command::{Command, FLAGS_FUSE_MASK, FLAGS_PSDT_SHIFT, PSDT_SGL_MPTR_CONTIGUOUS};
use crate::spec::completion::{Completion, STATUS_WORD_OFFSET};
use crate::spec::registers::{cq_head_doorbell, sq_tail_doorbell, Csts, CSTS};
use crate::spec::status::{GenericStatus, Status, StatusCode};
use crate::transport::Transport;
use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SQE_SIZE: usize = std::mem::size_of::<Command>();
const CQE_SIZE: usize = std::mem::size_of::<Completion>();

/// A byte range of a pooled DMA buffer that a command reads or writes. The
/// queue pair owns it from submission until the completion hands it back.
///
/// Offset and length are 32-bit: no command moves 4 GiB (NLB is 16 bits),
/// and the smaller range keeps a [`Request`] under 128 bytes, which the
/// compiler moves inline instead of calling memcpy (measured: two memcpy
/// calls, some 60 instructions, per I/O in `perf`).
#[derive(Debug)]
pub struct IoBuffer {
    buffer: DmaBuffer,
    offset: u32,
    len: u32,
}

/// A range's offset or length as stored: panics past 4 GiB.
fn narrow(bytes: usize) -> u32 {
    u32::try_from(bytes).unwrap_or_else(|_| panic!("an I/O buffer range of {bytes} bytes: at most 4 GiB - 1"))
}

impl IoBuffer {
    /// The whole buffer. Panics on a buffer of 4 GiB or more.
    pub fn new(buffer: DmaBuffer) -> Self {
        let len = narrow(buffer.len());
        IoBuffer { buffer, offset: 0, len }
    }

    /// `len` bytes from `offset`. Panics when the range leaves the buffer
    /// (or reaches past 4 GiB).
    pub fn range(buffer: DmaBuffer, offset: usize, len: usize) -> Self {
        assert!(offset.checked_add(len).is_some_and(|end| end <= buffer.len()), "range outside the buffer");
        IoBuffer { buffer, offset: narrow(offset), len: narrow(len) }
    }

    /// The first `len` bytes of this range. Panics if `len` is larger.
    pub fn truncate(self, len: usize) -> Self {
        assert!(len <= self.len(), "truncate to {len} of {}", self.len);
        IoBuffer { len: len as u32, ..self }
    }

    /// Length of the range, in bytes: the command's transfer.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the range starts in its buffer, in bytes.
    pub fn offset(&self) -> usize {
        self.offset as usize
    }

    /// The I/O virtual address of the range's start, as PRP1 carries it.
    pub fn iova(&self) -> u64 {
        self.buffer.iova() + u64::from(self.offset)
    }

    /// The underlying buffer, for reading or filling it between I/Os.
    pub fn buffer(&self) -> &DmaBuffer {
        &self.buffer
    }

    /// Gives the whole buffer back (say, to reuse it for another range).
    pub fn into_buffer(self) -> DmaBuffer {
        self.buffer
    }
}

/// A command ready to submit: the SQE (cid and data pointer are filled by
/// the queue pair), its data buffer, and the caller's token.
#[derive(Debug)]
pub struct Request {
    /// The submission queue entry; the queue pair fills in CID and PRP1/PRP2.
    pub command: Command,
    /// The data buffer, owned by the queue pair until the completion hands it
    /// back; `None` for commands without data.
    pub buffer: Option<IoBuffer>,
    /// The separate metadata buffer (MPTR) of a namespace formatted with
    /// per-block metadata, owned like `buffer`; `None` for no metadata.
    /// [`crate::Namespace`]'s `*_with_metadata` requests size it.
    pub metadata: Option<IoBuffer>,
    /// Returned with the completion, like io_uring's `user_data`.
    pub token: u64,
}

/// A finished command.
#[derive(Debug)]
pub struct IoCompletion {
    /// The caller's token, as given in the [`Request`].
    pub token: u64,
    /// The command identifier the queue pair gave the command.
    pub cid: u16,
    /// `Ok` on success; else why not: the controller's status, a timeout,
    /// a reset, removal ([`IoError`]).
    pub status: std::result::Result<(), IoError>,
    /// Command specific result (e.g. the LBA a Zone Append wrote); 0 when
    /// the controller did not complete the command itself.
    pub dw0: u32,
    /// DW1 of the completion queue entry (command specific; 0 when the
    /// controller did not complete the command itself).
    pub dw1: u32,
    /// The buffer given at submission, back to the caller: the device no
    /// longer touches it.
    pub buffer: Option<IoBuffer>,
    /// The metadata buffer given at submission, back likewise.
    pub metadata: Option<IoBuffer>,
}

impl IoCompletion {
    /// DW0 and DW1 as one 64-bit result (Zone Append's assigned LBA).
    pub fn result_u64(&self) -> u64 {
        u64::from(self.dw1) << 32 | u64::from(self.dw0)
    }

    /// The controller's error status, if it completed the command with one.
    pub fn device_status(&self) -> Option<Status> {
        self.status.err().and_then(|error| error.device_status())
    }
}

/// Why a request was handed back by [`QueuePair::submit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// Every slot is in flight: poll, then submit again.
    QueueFull,
    /// PRPs or an SGL cannot describe the buffer (misaligned or too
    /// large).
    Buffer(prp::PrpError),
    /// The device is gone; nothing more can be submitted.
    DeviceGone,
    /// A controller reset failed to bring the controller back; nothing more
    /// can be submitted.
    ControllerFailed,
    /// The buffer is mapped in another I/O address space than this
    /// controller's ([`crate::Transport::dma_domain`]): its addresses mean
    /// nothing (or other memory) to this device.
    ForeignBuffer,
    /// The command transfers data to the host, into a buffer the device
    /// may only read ([`crate::dma::DmaPool::new_device_reads`]): the IOMMU
    /// would fault the transfer.
    DeviceReadOnly,
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::QueueFull => write!(f, "submission queue full"),
            SubmitError::Buffer(prp::PrpError::Misaligned { iova }) => {
                write!(f, "buffer at {iova:#x} is not 4-byte aligned")
            }
            SubmitError::Buffer(prp::PrpError::TooLarge { len, max }) => {
                write!(f, "{len} bytes exceed the {max} one command's data pointer describes")
            }
            SubmitError::DeviceGone => write!(f, "device gone"),
            SubmitError::ControllerFailed => write!(f, "controller failed and could not be reset"),
            SubmitError::ForeignBuffer => write!(f, "the buffer is mapped for another device's address space"),
            SubmitError::DeviceReadOnly => {
                write!(f, "the command transfers data to the host, into a buffer the device may only read")
            }
        }
    }
}

impl std::error::Error for SubmitError {}

impl From<SubmitError> for Error {
    fn from(error: SubmitError) -> Self {
        match error {
            SubmitError::QueueFull => Error::QueueFull,
            SubmitError::Buffer(prp::PrpError::Misaligned { iova }) => {
                Error::InvalidRequest(crate::error::RequestError::Misaligned { iova })
            }
            SubmitError::Buffer(prp::PrpError::TooLarge { len, max }) => {
                Error::InvalidRequest(crate::error::RequestError::TooLarge { bytes: len as u64, max_bytes: max as u64 })
            }
            SubmitError::DeviceGone => Error::DeviceGone,
            SubmitError::ControllerFailed => Error::ControllerFailed,
            SubmitError::ForeignBuffer | SubmitError::DeviceReadOnly => Error::InvalidArgument(error.to_string()),
        }
    }
}

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
}

/// Where the doorbells of a new queue pair point.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DoorbellConfig {
    pub(crate) dstrd: u8,
    /// Shadow doorbell and EventIdx pages, if Doorbell Buffer Config ran.
    pub(crate) shadow: Option<ShadowPages>,
    /// How the shadow is used (ignored without one).
    pub(crate) policy: ShadowPolicy,
}

/// A controller's condition, as its queue pairs see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Condition {
    Live,
    /// Register reads return all ones. Final.
    Gone,
    /// A reset did not bring the controller back; another reset may.
    Failed,
}

/// What a controller tells its queue pairs without a lock: a generation
/// that every controller reset advances (queues of an older generation no
/// longer exist on the controller), and its condition. The poll path reads
/// the generation once per pass: one load of a line that is written only
/// by a reset.
#[derive(Debug, Default)]
pub(crate) struct Epoch {
    generation: AtomicU64,
    condition: AtomicU8,
    /// Queues of every generation below this one are known to be stopped:
    /// a disable was confirmed (CSTS.RDY read back 0) after they were
    /// created, so the device no longer touches their memory or their
    /// commands' buffers.
    stopped_below: AtomicU64,
}

const LIVE: u8 = 0;
const GONE: u8 = 1;
const FAILED: u8 = 2;

impl Epoch {
    pub(crate) fn generation(&self) -> u64 {
        // Acquire: the reset's writes are visible once its generation is seen.
        self.generation.load(Ordering::Acquire)
    }

    /// A reset begins: every queue of the earlier generation is gone.
    pub(crate) fn advance(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// A disable was confirmed: the device's DMA for every queue so far has
    /// ended. Called before the generation advances, so a pair that sees
    /// the new generation sees this too.
    pub(crate) fn confirm_stopped(&self) {
        // Release: pairs read it after an Acquire of the generation.
        self.stopped_below.fetch_max(self.generation() + 1, Ordering::AcqRel);
    }

    /// Whether the device's DMA for queues of `generation` is known to have
    /// ended (see [`super::quarantine`]).
    pub(crate) fn stopped_since(&self, generation: u64) -> bool {
        self.stopped_below.load(Ordering::Acquire) > generation
    }

    pub(crate) fn condition(&self) -> Condition {
        match self.condition.load(Ordering::Acquire) {
            LIVE => Condition::Live,
            GONE => Condition::Gone,
            _ => Condition::Failed,
        }
    }

    /// Records `condition`; a device once gone stays gone.
    pub(crate) fn set_condition(&self, condition: Condition) {
        let value = match condition {
            Condition::Live => LIVE,
            Condition::Gone => GONE,
            Condition::Failed => FAILED,
        };
        let _ = self.condition.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| (old != GONE).then_some(value));
    }
}

/// How an Abort command went (NVMe Base 2.0 §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AbortOutcome {
    /// DW0 bit 0 clear: the command is aborted; its own completion (with
    /// Command Abort Requested) follows, or already came.
    Aborted,
    /// DW0 bit 0 set: not aborted (it may have completed meanwhile, or the
    /// controller declined, as QEMU always does).
    NotAborted,
    /// The Abort failed or did not complete in time.
    Failed,
    /// The device is gone.
    Gone,
}

/// What an I/O queue pair asks of its controller on the rare paths:
/// timeouts, resets, removal and drop. Each call may take the controller's
/// admin lock and wait (bounded); the submit path never calls it, and the
/// poll path only when a deadline passed, the controller's status says so,
/// or a reset happened.
pub(crate) trait QueueHost: Send + Sync + std::fmt::Debug {
    /// Sends Abort for command `cid` of queue `qid` and waits for its
    /// completion (within the admin timeout).
    fn abort(&self, qid: u16, cid: u16) -> AbortOutcome;
    /// Resets the controller, unless a reset already began after
    /// `generation`.
    fn reset(&self, generation: u64);
    /// Register reads returned all ones.
    fn device_gone(&self);
    /// Creates queue pair `qid` again after a reset, on the same memory:
    /// the generation the new queues belong to.
    fn recreate_queues(&self, qid: u16, depth: u16, sq_iova: u64, cq_iova: u64) -> Result<u64>;
    /// Deletes queue pair `qid` (created in `generation`) and frees the qid.
    /// `false` if the controller may still use the memory.
    fn delete_queues(&self, qid: u16, generation: u64) -> bool;
    /// Keeps `memory`, which the device may still write, out of use until
    /// a disable is confirmed (see [`super::quarantine`]).
    fn quarantine(&self, memory: Held);
}

/// Polls between two deadline checks while completions keep coming: a
/// clock read (a TSC read, or an `Instant::now()` of about 20 ns where the
/// vDSO serves it, see [`crate::clock`]) every 64 polls costs well under
/// 1 ns a poll.
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
    // ManuallyDrop: leaked, not freed, if the controller could not delete
    // the queues (it may still write them).
    sq: ManuallyDrop<DmaRegion>,
    cq: ManuallyDrop<DmaRegion>,
    prp_lists: ManuallyDrop<DmaRegion>,
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
    /// What deadlines and health checks read ([`crate::clock`]).
    clock: Clock,
    /// When CSTS was last read, in `clock`'s ticks.
    health_checked: u64,
    /// Why submissions are refused, once the device is gone or the
    /// controller failed.
    dead: Option<SubmitError>,
    /// Aborts, resets, queue re-creation and deletion on the controller.
    host: Option<Arc<dyn QueueHost>>,
    /// Runs instead of `host` on drop (the loopback device's detach);
    /// `false` if the memory must leak.
    on_drop: Option<Box<dyn FnOnce(u16) -> bool + Send>>,
    /// Phase timings, when the owner asked for them.
    profiler: Option<Box<Profiler>>,
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
        let sq = DmaRegion::allocate(transport, usize::from(depth) * SQE_SIZE)?;
        let cq = DmaRegion::allocate(transport, usize::from(depth) * CQE_SIZE)?;
        // An SQ of N entries holds N-1 commands: one tracker (and one PRP
        // list page) each.
        let slots = usize::from(depth) - 1;
        let prp_lists = DmaRegion::allocate(transport, slots * PAGE_SIZE)?;
        let mut free: Vec<u16> = Vec::with_capacity(slots);
        free.extend((0..slots as u16).rev());
        let (sq_doorbell, cq_doorbell) = Self::make_doorbells(transport, qid, doorbells);
        Ok(QueuePair {
            qid,
            depth,
            doorbells,
            sq: ManuallyDrop::new(sq),
            cq: ManuallyDrop::new(cq),
            prp_lists: ManuallyDrop::new(prp_lists),
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
            health_checked: 0,
            dead: None,
            host: None,
            on_drop: None,
            profiler: None,
            _not_sync: PhantomData,
        })
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
        self.sq.iova()
    }

    pub(crate) fn cq_iova(&self) -> u64 {
        self.cq.iova()
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

    /// Sets the deadline of commands, counted from the first deadline check
    /// after their submission (see the [type documentation](Self)); `None`
    /// for no deadline. Applies to commands already in flight whose clock
    /// has not started yet.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
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

    /// Sets the clock deadlines and health checks read (the controller
    /// gives its own, [`crate::ControllerOptions::clock`]). Deadlines
    /// already started are started again.
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
        self.health_checked = clock.now();
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

    /// The clock deadlines and health checks read.
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

    /// Queues `request`. Its buffer belongs to the queue pair until the
    /// completion returns it. A full queue, a buffer PRPs cannot describe,
    /// or a device gone or failed hands the request back untouched.
    #[allow(clippy::result_large_err, reason = "the request comes back by value: no heap allocation on the I/O path")]
    pub fn submit(&mut self, request: Request) -> std::result::Result<(), (SubmitError, Request)> {
        if self.profiler.is_some() {
            self.submit_profiled(request)
        } else {
            self.submit_as::<false>(request)
        }
    }

    /// `submit` with phase timings, out of the way of the one without.
    #[cold]
    #[inline(never)]
    #[allow(clippy::result_large_err, reason = "as submit")]
    fn submit_profiled(&mut self, request: Request) -> std::result::Result<(), (SubmitError, Request)> {
        self.submit_as::<true>(request)
    }

    #[allow(clippy::result_large_err, reason = "as submit")]
    #[inline(always)]
    fn submit_as<const PROFILE: bool>(&mut self, request: Request) -> std::result::Result<(), (SubmitError, Request)> {
        let start = self.stamp::<PROFILE>();
        self.catch_up_if_idle();
        if let Some(error) = self.dead {
            return Err((error, request));
        }
        let Some(&slot) = self.free.last() else {
            return Err((SubmitError::QueueFull, request));
        };
        let foreign = |b: &Option<IoBuffer>| b.as_ref().is_some_and(|b| b.buffer().dma_domain() != self.dma_domain);
        if foreign(&request.buffer) || foreign(&request.metadata) {
            return Err((SubmitError::ForeignBuffer, request));
        }
        // Opcode bits 1:0 give the data direction; 1xb moves data to the
        // host (NVMe Base 2.0 §3.3.3.1, Figure 89).
        if request.command.opcode & 0b10 != 0 {
            let read_only = |b: &Option<IoBuffer>| b.as_ref().is_some_and(|b| !b.buffer().device_writes());
            if read_only(&request.buffer) || read_only(&request.metadata) {
                return Err((SubmitError::DeviceReadOnly, request));
            }
        }
        let checked = self.stamp::<PROFILE>();
        let (iova, len) = request.buffer.as_ref().map_or((0, 0), |b| (b.iova(), b.len()));
        let mut command = request.command;
        if let Err(error) = self.fill_data_pointer(&mut command, slot, iova, len) {
            return Err((error, request));
        }
        if let Some(metadata) = &request.metadata {
            // PSDT 00b: MPTR is the address of one contiguous buffer, dword
            // aligned (NVMe Base 2.0 §4.1.2, Figure 92).
            if !metadata.iova().is_multiple_of(4) {
                return Err((SubmitError::Buffer(prp::PrpError::Misaligned { iova: metadata.iova() }), request));
            }
            command.mptr = metadata.iova();
        }
        let pointed = self.stamp::<PROFILE>();
        self.free.pop();
        let tracker = &mut self.trackers[usize::from(slot)];
        debug_assert!(!tracker.busy, "a free slot is never busy");
        tracker.busy = true;
        tracker.timed_out = false;
        tracker.deadline = None;
        tracker.token = request.token;
        tracker.buffer = request.buffer;
        tracker.metadata = request.metadata;
        self.push(command, slot);
        if PROFILE {
            if let Some(profiler) = self.profiler.as_deref_mut() {
                profiler.submitted(slot, [start, checked, pointed, self.clock.now()]);
            }
        }
        Ok(())
    }

    /// Queues a command whose data lies at `iova` (`len` bytes), outside
    /// the queue pair's ownership.
    ///
    /// # Safety
    /// `[iova, iova + len)` must be DMA-mapped memory of this controller
    /// that stays mapped, and is neither read nor written by the host in a
    /// way that races with the device, until this command's completion has
    /// been returned by [`QueuePair::poll`].
    pub unsafe fn submit_raw(&mut self, mut command: Command, iova: u64, len: usize, token: u64) -> Result<()> {
        self.catch_up_if_idle();
        if let Some(error) = self.dead {
            return Err(error.into());
        }
        let Some(&slot) = self.free.last() else {
            return Err(Error::QueueFull);
        };
        self.fill_data_pointer(&mut command, slot, iova, len).map_err(Error::from)?;
        self.free.pop();
        let tracker = &mut self.trackers[usize::from(slot)];
        tracker.busy = true;
        tracker.timed_out = false;
        tracker.deadline = None;
        tracker.token = token;
        tracker.buffer = None;
        tracker.metadata = None;
        self.push(command, slot);
        Ok(())
    }

    /// After a reset, with nothing in flight there is nothing to report:
    /// the queues are re-created before the submission instead of failing
    /// it at the next poll. (With commands in flight, `poll` ends them and
    /// then this submission too.)
    #[inline]
    fn catch_up_if_idle(&mut self) {
        if self.epoch.generation() != self.generation && self.free.len() == self.trackers.len() {
            self.recover(&mut |_| unreachable!("nothing in flight"));
        }
    }

    fn fill_data_pointer(
        &mut self,
        command: &mut Command,
        slot: u16,
        iova: u64,
        len: usize,
    ) -> std::result::Result<(), SubmitError> {
        if len == 0 {
            return Ok(());
        }
        // The bytes from the start of the buffer's first page to its end:
        // past two pages, PRPs need a list. An odd length goes by PRPs,
        // which a controller that wants dword granularity for SGLs (SGLS
        // 10b) would refuse in an SGL.
        let span = (iova % PAGE_SIZE as u64) as usize + len;
        if self.sgl_above.is_some_and(|threshold| span > threshold) && len.is_multiple_of(4) {
            let (dptr1, dptr2) = sgl::data_block(iova, len).map_err(SubmitError::Buffer)?;
            command.flags = (command.flags & FLAGS_FUSE_MASK) | (PSDT_SGL_MPTR_CONTIGUOUS << FLAGS_PSDT_SHIFT);
            command.prp1 = dptr1;
            command.prp2 = dptr2;
            return Ok(());
        }
        let list_offset = usize::from(slot) * PAGE_SIZE;
        let list_iova = self.prp_lists.iova() + list_offset as u64;
        let prp_lists = &self.prp_lists;
        let (prp1, prp2) = prp::build(iova, len, list_iova, |index, address| {
            prp_lists.write::<u64>(list_offset + index * 8, address.to_le());
        })
        .map_err(SubmitError::Buffer)?;
        command.prp1 = prp1;
        command.prp2 = prp2;
        Ok(())
    }

    /// Completion queue entries consumed but not announced.
    #[inline]
    fn cq_unannounced(&self) -> usize {
        super::ring_distance(self.cq_announced, self.cq_head, self.depth)
    }

    /// Consumed entries an I/O queue announces at once: a quarter of it.
    #[inline]
    fn cq_batch(&self) -> usize {
        (usize::from(self.depth) / 4).max(1)
    }

    fn announce_cq_head(&mut self) {
        self.cq_doorbell.update(self.cq_announced, self.cq_head);
        self.cq_announced = self.cq_head;
    }

    /// As a command takes its slot: the controller must always have room
    /// in the CQ for every command in flight. It counts as occupied both
    /// the entries not yet reaped (whose trackers are still busy) and
    /// those reaped but not announced, and a CQ of `depth` entries holds
    /// `depth - 1`, the trackers' number: so the busy trackers, this
    /// command's included, and the unannounced entries must fit in it.
    #[inline]
    fn make_room(&mut self) {
        let busy = self.trackers.len() - self.free.len();
        if busy + self.cq_unannounced() > self.trackers.len() {
            self.announce_cq_head();
        }
    }

    fn push(&mut self, mut command: Command, slot: u16) {
        self.make_room();
        command.cid = slot;
        self.sq.write(usize::from(self.sq_tail) * SQE_SIZE, command);
        self.sq_tail = if self.sq_tail + 1 == self.depth { 0 } else { self.sq_tail + 1 };
        self.stats.submitted += 1;
    }

    /// Publishes queued submissions with one SQ doorbell update.
    pub fn ring(&mut self) {
        if self.profiler.is_some() {
            self.ring_profiled();
        } else {
            self.ring_as::<false>();
        }
    }

    #[cold]
    #[inline(never)]
    fn ring_profiled(&mut self) {
        self.ring_as::<true>();
    }

    #[inline(always)]
    fn ring_as<const PROFILE: bool>(&mut self) {
        if self.sq_tail != self.sq_published {
            let start = self.stamp::<PROFILE>();
            // Every SQE written before must be visible before the
            // controller learns of the new tail.
            fence(Ordering::Release);
            self.sq_doorbell.update(self.sq_published, self.sq_tail);
            self.sq_published = self.sq_tail;
            if PROFILE {
                if let Some(profiler) = self.profiler.as_deref_mut() {
                    profiler.rung(start, self.clock.now());
                }
            }
        }
    }

    /// Publishes queued submissions, then reaps every ready completion into
    /// `on_completion`, and updates the CQ head doorbell once. Returns the
    /// number of commands completed. Now and then it also checks deadlines
    /// and the controller's status, and after a controller reset it ends
    /// the commands in flight and re-creates the queues (see the [type
    /// documentation](Self)).
    pub fn poll(&mut self, on_completion: impl FnMut(IoCompletion)) -> usize {
        if self.profiler.is_some() {
            self.poll_profiled(on_completion)
        } else {
            self.poll_as::<false>(on_completion)
        }
    }

    #[cold]
    #[inline(never)]
    fn poll_profiled(&mut self, on_completion: impl FnMut(IoCompletion)) -> usize {
        self.poll_as::<true>(on_completion)
    }

    #[inline(always)]
    fn poll_as<const PROFILE: bool>(&mut self, mut on_completion: impl FnMut(IoCompletion)) -> usize {
        let mut reaped = 0;
        if self.epoch.generation() != self.generation {
            reaped += self.recover(&mut on_completion);
        }
        self.ring_as::<PROFILE>();
        let start = self.stamp::<PROFILE>();
        let mut found_at = 0;
        let mut callback = 0;
        self.transport.tick();
        let old_head = self.cq_head;
        loop {
            let offset = usize::from(self.cq_head) * CQE_SIZE;
            let status_word: u16 = self.cq.read(offset + STATUS_WORD_OFFSET);
            if (status_word & 1 == 1) != self.phase {
                break;
            }
            // Read the rest of the entry only after its phase tag says it
            // is new.
            fence(Ordering::Acquire);
            let entry: Completion = self.cq.read(offset);
            self.cq_head += 1;
            if self.cq_head == self.depth {
                self.cq_head = 0;
                self.phase = !self.phase;
            }
            let slot = usize::from(entry.cid);
            if PROFILE {
                if let Some(profiler) = self.profiler.as_deref_mut() {
                    if found_at == 0 {
                        found_at = self.clock.now();
                    }
                    if self.trackers.get(slot).is_some_and(|tracker| tracker.busy) {
                        profiler.found(slot, found_at);
                    }
                }
            }
            match self.trackers.get_mut(slot) {
                Some(tracker) if tracker.busy => {
                    tracker.busy = false;
                    let completion = IoCompletion {
                        token: tracker.token,
                        cid: entry.cid,
                        status: if entry.is_success() {
                            Ok(())
                        } else {
                            Err(failure(entry.status(), tracker.timed_out))
                        },
                        dw0: entry.dw0,
                        dw1: entry.dw1,
                        buffer: tracker.buffer.take(),
                        metadata: tracker.metadata.take(),
                    };
                    self.free.push(entry.cid);
                    self.stats.completed += 1;
                    reaped += 1;
                    let called = self.stamp::<PROFILE>();
                    on_completion(completion);
                    callback += self.stamp::<PROFILE>() - called;
                }
                _ => self.stats.spurious_completions += 1,
            }
        }
        // The CQ head doorbell only tells the controller which entries it
        // may reuse. An I/O queue announces consumed entries a quarter of
        // the queue at a time (submissions announce them sooner when the
        // queue could otherwise fill: `make_room`), not every pass: a
        // doorbell write per pass is an MMIO write per I/O at QD1, and
        // with shadow doorbells one per batch the controller posted. The
        // admin queue announces every pass.
        if self.cq_head != old_head && (self.qid == 0 || self.cq_unannounced() >= self.cq_batch()) {
            self.announce_cq_head();
        }
        self.polls = self.polls.wrapping_add(1);
        let due = self.polls.is_multiple_of(DEADLINE_CHECK_POLLS)
            || (reaped == 0 && self.polls.is_multiple_of(IDLE_DEADLINE_CHECK_POLLS));
        if due && self.timeout.is_some() && self.free.len() < self.trackers.len() {
            reaped += self.check_deadlines(&mut on_completion);
        }
        if PROFILE {
            if let Some(profiler) = self.profiler.as_deref_mut() {
                profiler.polled(start, self.clock.now(), reaped, callback);
            }
        }
        reaped
    }

    /// Ends the command in `slot` with `error`, without a completion from
    /// the device. Its buffers go back with it only if `device_stopped`
    /// (the device's DMA is known to have ended since its submission);
    /// else the controller's quarantine keeps them.
    fn complete_with(
        &mut self,
        slot: usize,
        error: IoError,
        device_stopped: bool,
        on_completion: &mut impl FnMut(IoCompletion),
    ) {
        let tracker = &mut self.trackers[slot];
        debug_assert!(tracker.busy);
        tracker.busy = false;
        let error = if tracker.timed_out && error == IoError::ControllerReset { IoError::Timeout } else { error };
        let (mut buffer, mut metadata) = (tracker.buffer.take(), tracker.metadata.take());
        let token = tracker.token;
        if !device_stopped {
            for held in [buffer.take(), metadata.take()].into_iter().flatten() {
                self.hold(Held::Buffer(held));
            }
        }
        let completion = IoCompletion { token, cid: slot as u16, status: Err(error), dw0: 0, dw1: 0, buffer, metadata };
        self.free.push(slot as u16);
        self.stats.completed += 1;
        on_completion(completion);
    }

    /// Memory the device may still write: to the controller's quarantine,
    /// or leaked when there is no controller to confirm a disable.
    fn hold(&self, memory: Held) {
        match &self.host {
            Some(host) => host.quarantine(memory),
            None => std::mem::forget(memory),
        }
    }

    /// Ends every command in flight with `error` (see `complete_with`) and
    /// empties the rings, which the controller no longer knows. Returns how
    /// many it ended.
    fn end_in_flight(
        &mut self,
        error: IoError,
        device_stopped: bool,
        on_completion: &mut impl FnMut(IoCompletion),
    ) -> usize {
        let mut ended = 0;
        for slot in 0..self.trackers.len() {
            if self.trackers[slot].busy {
                self.complete_with(slot, error, device_stopped, on_completion);
                ended += 1;
            }
        }
        debug_assert_eq!(self.free.len(), self.trackers.len());
        self.sq_tail = 0;
        self.sq_published = 0;
        self.cq_head = 0;
        self.cq_announced = 0;
        self.phase = true;
        self.cq.fill(0, usize::from(self.depth) * CQE_SIZE, 0);
        self.sq_doorbell.clear_shadow();
        self.cq_doorbell.clear_shadow();
        ended
    }

    /// Starts the clock of new commands, reads CSTS now and then, and acts
    /// on passed deadlines: abort first, reset when that does not end the
    /// command. Returns the commands it completed.
    #[cold]
    #[inline(never)]
    fn check_deadlines(&mut self, on_completion: &mut impl FnMut(IoCompletion)) -> usize {
        let Some(timeout) = self.timeout else { return 0 };
        let now = self.clock.now();
        let timeout = self.clock.ticks(timeout);
        if let Some(host) = self.host.clone() {
            if now.saturating_sub(self.health_checked) >= self.clock.ticks(HEALTH_CHECK_INTERVAL) {
                self.health_checked = now;
                let raw = self.transport.read32(CSTS);
                if raw == u32::MAX || self.transport.removal_requested() {
                    host.device_gone();
                    return self.recover(on_completion);
                }
                let csts = Csts(raw);
                if (csts.cfs() || !csts.rdy()) && self.epoch.generation() == self.generation {
                    // NVMe Base 2.0 §9.5: a fatal status needs a reset;
                    // RDY clear means the controller reset without us.
                    self.stats.resets_requested += 1;
                    host.reset(self.generation);
                    return self.recover(on_completion);
                }
            }
        }
        let mut expired = false;
        // Slots are taken lowest first (`free` pops from its end): the
        // busy ones cluster at the start, and the scan stops at the last.
        let mut busy = self.trackers.len() - self.free.len();
        for tracker in self.trackers.iter_mut() {
            if busy == 0 {
                break;
            }
            if !tracker.busy {
                continue;
            }
            busy -= 1;
            match tracker.deadline {
                None => tracker.deadline = Some(now.saturating_add(timeout)),
                Some(deadline) => expired |= now >= deadline,
            }
        }
        if expired {
            self.expire(now, timeout, on_completion)
        } else {
            0
        }
    }

    /// Acts on every command whose deadline passed.
    fn expire(&mut self, now: u64, timeout: u64, on_completion: &mut impl FnMut(IoCompletion)) -> usize {
        for slot in 0..self.trackers.len() {
            let tracker = &mut self.trackers[slot];
            if !tracker.busy || tracker.deadline.is_none_or(|deadline| now < deadline) {
                continue;
            }
            let Some(host) = self.host.clone() else {
                // No controller to abort through (a loopback pair): count
                // the timeout once; the command stays in flight.
                if !tracker.timed_out {
                    tracker.timed_out = true;
                    self.stats.timeouts += 1;
                }
                tracker.deadline = Some(now.saturating_add(timeout));
                continue;
            };
            if tracker.timed_out {
                // Aborted a timeout ago and still not back: reset.
                self.stats.resets_requested += 1;
                host.reset(self.generation);
                return self.recover(on_completion);
            }
            tracker.timed_out = true;
            tracker.deadline = Some(now.saturating_add(timeout));
            self.stats.timeouts += 1;
            self.stats.aborts_sent += 1;
            match host.abort(self.qid, slot as u16) {
                // Its completion follows (or is already in the CQ); if it
                // does not come within another timeout, the next check
                // resets.
                AbortOutcome::Aborted | AbortOutcome::NotAborted => {}
                AbortOutcome::Failed => {
                    self.stats.resets_requested += 1;
                    host.reset(self.generation);
                    return self.recover(on_completion);
                }
                AbortOutcome::Gone => {
                    host.device_gone();
                    return self.recover(on_completion);
                }
            }
        }
        0
    }

    /// After a controller reset (or removal): completes every command in
    /// flight with [`IoError::ControllerReset`] ([`IoError::Timeout`] if
    /// timed out) or [`IoError::DeviceGone`], empties the rings and
    /// re-creates the queues on the controller. Returns the commands it
    /// completed.
    #[cold]
    #[inline(never)]
    fn recover(&mut self, on_completion: &mut impl FnMut(IoCompletion)) -> usize {
        let Some(host) = self.host.clone() else {
            self.generation = self.epoch.generation();
            return 0;
        };
        let gone = self.epoch.condition() == Condition::Gone;
        let error = if gone { IoError::DeviceGone } else { IoError::ControllerReset };
        // The controller forgot these queues, so the rings start over. Only
        // a confirmed disable ended its DMA (NVMe Base 2.0 §3.7.2): after a
        // disable that timed out, or removal, the buffers stay quarantined.
        let device_stopped = self.epoch.stopped_since(self.queues_generation);
        let ended = self.end_in_flight(error, device_stopped, on_completion);
        self.rebuild_doorbells();
        self.dead = match self.epoch.condition() {
            Condition::Gone => Some(SubmitError::DeviceGone),
            Condition::Failed => Some(SubmitError::ControllerFailed),
            Condition::Live => None,
        };
        if self.dead.is_some() {
            self.generation = self.epoch.generation();
            return ended;
        }
        match host.recreate_queues(self.qid, self.depth, self.sq.iova(), self.cq.iova()) {
            Ok(generation) => {
                self.generation = generation;
                self.queues_generation = generation;
                self.stats.recoveries += 1;
            }
            Err(error) => {
                self.generation = self.epoch.generation();
                self.dead = Some(match error {
                    Error::DeviceGone => SubmitError::DeviceGone,
                    _ => SubmitError::ControllerFailed,
                });
            }
        }
        self.health_checked = self.clock.now();
        ended
    }

    /// Submits `request` and polls until it completes or `timeout` passes:
    /// the blocking helper for simple callers and for the admin queue.
    /// Completions of other commands that arrive meanwhile (say, late ones
    /// of an earlier timed-out command) are discarded, so don't mix it with
    /// asynchronous submissions on the same pair. Every few hundred polls
    /// the admin queue checks CSTS: all ones is [`Error::DeviceGone`], CFS
    /// is [`Error::ControllerFatal`] (I/O queue pairs check it in `poll`).
    pub fn execute(&mut self, request: Request, timeout: Duration) -> Result<IoCompletion> {
        let cid = self.free.last().copied().ok_or(Error::QueueFull)?;
        self.submit(request).map_err(|(error, _)| Error::from(error))?;
        self.wait_for(cid, timeout, |_| {})
    }

    /// [`QueuePair::execute`] for a command whose data lies at `iova`.
    ///
    /// # Safety
    /// As [`QueuePair::submit_raw`]; on a timeout the command is still in
    /// flight and the memory must stay mapped and untouched until the
    /// controller is reset.
    pub unsafe fn execute_raw(
        &mut self,
        command: Command,
        iova: u64,
        len: usize,
        timeout: Duration,
    ) -> Result<IoCompletion> {
        // SAFETY: forwarded contract.
        unsafe { self.execute_raw_routing(command, iova, len, timeout, |_| {}) }
    }

    /// [`QueuePair::execute_raw`], handing completions of other commands
    /// to `other` instead of discarding them (the admin queue's
    /// Asynchronous Event Requests).
    ///
    /// # Safety
    /// As [`QueuePair::execute_raw`].
    pub(crate) unsafe fn execute_raw_routing(
        &mut self,
        command: Command,
        iova: u64,
        len: usize,
        timeout: Duration,
        other: impl FnMut(IoCompletion),
    ) -> Result<IoCompletion> {
        let cid = self.free.last().copied().ok_or(Error::QueueFull)?;
        // SAFETY: the caller upholds submit_raw's contract.
        unsafe { self.submit_raw(command, iova, len, 0) }?;
        self.wait_for(cid, timeout, other)
    }

    /// Runs `command` (data at `iova`/`len`, or none) to completion and
    /// turns an error status into [`Error::Command`], any other failure
    /// into [`Error::Io`].
    ///
    /// # Safety
    /// As [`QueuePair::execute_raw`].
    pub(crate) unsafe fn run(
        &mut self,
        command: Command,
        iova: u64,
        len: usize,
        timeout: Duration,
    ) -> Result<IoCompletion> {
        // SAFETY: forwarded contract.
        unsafe { self.run_routing(command, iova, len, timeout, |_| {}) }
    }

    /// [`QueuePair::run`] with completions of other commands handed to
    /// `other`.
    ///
    /// # Safety
    /// As [`QueuePair::execute_raw`].
    pub(crate) unsafe fn run_routing(
        &mut self,
        command: Command,
        iova: u64,
        len: usize,
        timeout: Duration,
        other: impl FnMut(IoCompletion),
    ) -> Result<IoCompletion> {
        let opcode = command.opcode;
        let admin = self.qid == 0;
        // SAFETY: forwarded contract.
        let completion = unsafe { self.execute_raw_routing(command, iova, len, timeout, other) }?;
        match completion.status {
            Ok(()) => Ok(completion),
            Err(IoError::Device(status)) => Err(Error::Command { opcode, admin, status }),
            Err(error) => Err(Error::NotCompleted { opcode, admin, error }),
        }
    }

    fn wait_for(&mut self, cid: u16, timeout: Duration, mut other: impl FnMut(IoCompletion)) -> Result<IoCompletion> {
        let started = Instant::now();
        let mut done = None;
        let mut polls = 0u32;
        loop {
            self.poll(|completion| {
                if completion.cid == cid && done.is_none() {
                    done = Some(completion);
                } else {
                    other(completion);
                }
            });
            if let Some(completion) = done {
                return Ok(completion);
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(256) {
                if self.host.is_none() {
                    let csts = self.transport.read32(CSTS);
                    if csts == u32::MAX || self.transport.removal_requested() {
                        return Err(Error::DeviceGone);
                    }
                    if Csts(csts).cfs() {
                        return Err(Error::ControllerFatal);
                    }
                }
                if started.elapsed() > timeout {
                    // The command stays in flight: its slot is not reused
                    // until its completion arrives or a reset ends it.
                    let what = if self.qid == 0 { "an admin command" } else { "an I/O command" };
                    return Err(Error::Timeout { what, waited_ms: started.elapsed().as_millis() as u64 });
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Forgets every command in flight and empties the rings, for a
    /// controller reset of the admin queue (the controller's disable was
    /// confirmed: nothing in flight will complete or touch memory). Returns
    /// how many were in flight.
    pub(crate) fn reset_after_disable(&mut self) -> usize {
        self.end_in_flight(IoError::ControllerReset, true, &mut |_| {})
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // Delete the queues on the controller before their memory goes.
        let deleted = match (&self.host, self.on_drop.take()) {
            (Some(host), _) => host.delete_queues(self.qid, self.queues_generation),
            (None, Some(delete)) => delete(self.qid),
            (None, None) => true,
        };
        if deleted {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.sq) };
            // SAFETY: as above.
            unsafe { ManuallyDrop::drop(&mut self.cq) };
            // SAFETY: as above.
            unsafe { ManuallyDrop::drop(&mut self.prp_lists) };
            return;
        }
        // The controller may still own these queues and the commands in
        // them: the rings, and the buffers of the commands in flight, go to
        // the quarantine, never back to a pool while the device can write
        // them.
        log::warn!("queue {}: not deleted; its rings and buffers in flight are quarantined", self.qid);
        // SAFETY: each is taken once, here, and never used again.
        let sq = unsafe { ManuallyDrop::take(&mut self.sq) };
        // SAFETY: as above.
        let cq = unsafe { ManuallyDrop::take(&mut self.cq) };
        // SAFETY: as above.
        let prp_lists = unsafe { ManuallyDrop::take(&mut self.prp_lists) };
        for ring in [sq, cq, prp_lists] {
            self.hold(Held::Region(ring));
        }
        for slot in 0..self.trackers.len() {
            let tracker = &mut self.trackers[slot];
            for buffer in [tracker.buffer.take(), tracker.metadata.take()].into_iter().flatten() {
                self.hold(Held::Buffer(buffer));
            }
        }
    }
}
