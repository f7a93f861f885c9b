//! A polled I/O queue pair: one submission queue, one completion queue, a
//! fixed tracker table. Owned by one thread (`Send`, not `Sync`); nothing
//! on the submit or poll path allocates, locks or makes a system call.
//!
//! Submissions are queued by [`QueuePair::submit`] and published to the
//! controller with one SQ doorbell update per batch, at the next
//! [`QueuePair::poll`] (or [`QueuePair::ring`]). A poll pass reaps every
//! ready completion and updates the CQ head doorbell once.

use super::doorbell::{Doorbell, ShadowPages, ShadowPolicy};
use super::prp;
use crate::dma::{DmaBuffer, DmaMemory, DmaRegion, PAGE_SIZE};
use crate::error::{Error, Result};
use crate::spec::command::Command;
use crate::spec::completion::{Completion, STATUS_WORD_OFFSET};
use crate::spec::registers::{cq_head_doorbell, sq_tail_doorbell, Csts, CSTS};
use crate::spec::status::Status;
use crate::transport::Transport;
use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SQE_SIZE: usize = std::mem::size_of::<Command>();
const CQE_SIZE: usize = std::mem::size_of::<Completion>();

/// A byte range of a pooled DMA buffer that a command reads or writes. The
/// queue pair owns it from submission until the completion hands it back.
#[derive(Debug)]
pub struct IoBuffer {
    buffer: DmaBuffer,
    offset: usize,
    len: usize,
}

impl IoBuffer {
    /// The whole buffer.
    pub fn new(buffer: DmaBuffer) -> Self {
        let len = buffer.len();
        IoBuffer { buffer, offset: 0, len }
    }

    /// `len` bytes from `offset`. Panics when the range leaves the buffer.
    pub fn range(buffer: DmaBuffer, offset: usize, len: usize) -> Self {
        assert!(offset.checked_add(len).is_some_and(|end| end <= buffer.len()), "range outside the buffer");
        IoBuffer { buffer, offset, len }
    }

    /// The first `len` bytes of this range. Panics if `len` is larger.
    pub fn truncate(self, len: usize) -> Self {
        assert!(len <= self.len, "truncate to {len} of {}", self.len);
        IoBuffer { len, ..self }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn offset(&self) -> usize {
        self.offset
    }

    pub fn iova(&self) -> u64 {
        self.buffer.iova() + self.offset as u64
    }

    /// The underlying buffer, for reading or filling it between I/Os.
    pub fn buffer(&self) -> &DmaBuffer {
        &self.buffer
    }

    pub fn into_buffer(self) -> DmaBuffer {
        self.buffer
    }
}

/// A command ready to submit: the SQE (cid and data pointer are filled by
/// the queue pair), its data buffer, and the caller's token.
#[derive(Debug)]
pub struct Request {
    pub command: Command,
    pub buffer: Option<IoBuffer>,
    /// Returned with the completion, like io_uring's `user_data`.
    pub token: u64,
}

/// A finished command.
#[derive(Debug)]
pub struct IoCompletion {
    pub token: u64,
    /// The command identifier the queue pair gave the command.
    pub cid: u16,
    /// `Err` holds the controller's status.
    pub status: std::result::Result<(), Status>,
    /// Command specific result (e.g. the LBA a Zone Append wrote).
    pub dw0: u32,
    pub dw1: u32,
    /// The buffer given at submission, back to the caller.
    pub buffer: Option<IoBuffer>,
}

impl IoCompletion {
    /// DW0 and DW1 as one 64-bit result (Zone Append's assigned LBA).
    pub fn result_u64(&self) -> u64 {
        u64::from(self.dw1) << 32 | u64::from(self.dw0)
    }
}

/// Why a request was handed back by [`QueuePair::submit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// Every slot is in flight: poll, then submit again.
    QueueFull,
    /// PRPs cannot describe the buffer (misaligned or too large).
    Buffer(prp::PrpError),
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::QueueFull => write!(f, "submission queue full"),
            SubmitError::Buffer(prp::PrpError::Misaligned { iova }) => {
                write!(f, "buffer at {iova:#x} is not 4-byte aligned")
            }
            SubmitError::Buffer(prp::PrpError::TooLarge { len }) => {
                write!(f, "{len} bytes exceed one PRP list page")
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
            SubmitError::Buffer(prp::PrpError::TooLarge { len }) => {
                Error::InvalidRequest(crate::error::RequestError::TooLarge {
                    bytes: len as u64,
                    max_bytes: prp::MAX_TRANSFER_BYTES as u64,
                })
            }
        }
    }
}

/// Counters for one queue pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueueStats {
    pub submitted: u64,
    pub completed: u64,
    pub sq_doorbell_updates: u64,
    pub sq_doorbell_mmio_writes: u64,
    pub cq_doorbell_updates: u64,
    pub cq_doorbell_mmio_writes: u64,
    /// Completions whose command identifier matched no command in flight
    /// (a misbehaving device); ignored.
    pub spurious_completions: u64,
}

#[derive(Debug, Default)]
struct Tracker {
    token: u64,
    busy: bool,
    buffer: Option<IoBuffer>,
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

/// One I/O submission/completion queue pair. Created by
/// [`crate::Controller::create_queue_pair`]; deleted on the controller when
/// dropped.
///
/// Data pointers are PRPs, not SGLs: every controller supports PRPs, and
/// one preallocated list page per slot covers any transfer up to MDTS
/// (capped at 2 MiB), so the I/O path never allocates a descriptor.
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
    dstrd: u8,
    // ManuallyDrop: leaked, not freed, if the controller could not delete
    // the queues (it may still write them).
    sq: ManuallyDrop<DmaRegion>,
    cq: ManuallyDrop<DmaRegion>,
    prp_lists: ManuallyDrop<DmaRegion>,
    sq_tail: u16,
    sq_published: u16,
    cq_head: u16,
    phase: bool,
    sq_doorbell: Doorbell,
    cq_doorbell: Doorbell,
    trackers: Box<[Tracker]>,
    free: Vec<u16>,
    stats: QueueStats,
    transport: Arc<dyn Transport>,
    /// Deletes the queues on the controller; `false` if that failed.
    on_drop: Option<Box<dyn FnOnce(u16) -> bool + Send>>,
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
        let sq_offset = sq_tail_doorbell(qid, doorbells.dstrd);
        let cq_offset = cq_head_doorbell(qid, doorbells.dstrd);
        let shadow = |offset: usize| doorbells.shadow.map(|pages| pages.slot(offset));
        let mut free: Vec<u16> = Vec::with_capacity(slots);
        free.extend((0..slots as u16).rev());
        Ok(QueuePair {
            qid,
            depth,
            dstrd: doorbells.dstrd,
            sq: ManuallyDrop::new(sq),
            cq: ManuallyDrop::new(cq),
            prp_lists: ManuallyDrop::new(prp_lists),
            sq_tail: 0,
            sq_published: 0,
            cq_head: 0,
            phase: true,
            sq_doorbell: Doorbell::new(transport, sq_offset, shadow(sq_offset), doorbells.policy),
            cq_doorbell: Doorbell::new(transport, cq_offset, shadow(cq_offset), doorbells.policy),
            trackers: (0..slots).map(|_| Tracker::default()).collect(),
            free,
            stats: QueueStats::default(),
            transport: Arc::clone(transport),
            on_drop: None,
            _not_sync: PhantomData,
        })
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
        let sq = sq_tail_doorbell(self.qid, self.dstrd);
        let cq = cq_head_doorbell(self.qid, self.dstrd);
        let (sq_stats, cq_stats) = (
            (self.sq_doorbell.updates, self.sq_doorbell.mmio_writes),
            (self.cq_doorbell.updates, self.cq_doorbell.mmio_writes),
        );
        self.sq_doorbell = Doorbell::new(&self.transport, sq, Some(pages.slot(sq)), policy);
        self.cq_doorbell = Doorbell::new(&self.transport, cq, Some(pages.slot(cq)), policy);
        (self.sq_doorbell.updates, self.sq_doorbell.mmio_writes) = sq_stats;
        (self.cq_doorbell.updates, self.cq_doorbell.mmio_writes) = cq_stats;
    }

    pub(crate) fn set_on_drop(&mut self, on_drop: Box<dyn FnOnce(u16) -> bool + Send>) {
        self.on_drop = Some(on_drop);
    }

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

    pub fn in_flight(&self) -> usize {
        self.trackers.len() - self.free.len()
    }

    pub fn stats(&self) -> QueueStats {
        let mut stats = self.stats;
        stats.sq_doorbell_updates = self.sq_doorbell.updates;
        stats.sq_doorbell_mmio_writes = self.sq_doorbell.mmio_writes;
        stats.cq_doorbell_updates = self.cq_doorbell.updates;
        stats.cq_doorbell_mmio_writes = self.cq_doorbell.mmio_writes;
        stats
    }

    /// Queues `request`. Its buffer belongs to the queue pair until the
    /// completion returns it. A full queue, or a buffer PRPs cannot
    /// describe, hands the request back untouched.
    pub fn submit(&mut self, request: Request) -> std::result::Result<(), (SubmitError, Request)> {
        let Some(&slot) = self.free.last() else {
            return Err((SubmitError::QueueFull, request));
        };
        let (iova, len) = request.buffer.as_ref().map_or((0, 0), |b| (b.iova(), b.len()));
        let mut command = request.command;
        if let Err(error) = self.fill_data_pointer(&mut command, slot, iova, len) {
            return Err((error, request));
        }
        self.free.pop();
        let tracker = &mut self.trackers[usize::from(slot)];
        debug_assert!(!tracker.busy, "a free slot is never busy");
        tracker.busy = true;
        tracker.token = request.token;
        tracker.buffer = request.buffer;
        self.push(command, slot);
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
        let Some(&slot) = self.free.last() else {
            return Err(Error::QueueFull);
        };
        self.fill_data_pointer(&mut command, slot, iova, len).map_err(Error::from)?;
        self.free.pop();
        let tracker = &mut self.trackers[usize::from(slot)];
        tracker.busy = true;
        tracker.token = token;
        tracker.buffer = None;
        self.push(command, slot);
        Ok(())
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

    fn push(&mut self, mut command: Command, slot: u16) {
        command.cid = slot;
        self.sq.write(usize::from(self.sq_tail) * SQE_SIZE, command);
        self.sq_tail = if self.sq_tail + 1 == self.depth { 0 } else { self.sq_tail + 1 };
        self.stats.submitted += 1;
    }

    /// Publishes queued submissions with one SQ doorbell update.
    pub fn ring(&mut self) {
        if self.sq_tail != self.sq_published {
            // Every SQE written before must be visible before the
            // controller learns of the new tail.
            fence(Ordering::Release);
            self.sq_doorbell.update(self.sq_published, self.sq_tail);
            self.sq_published = self.sq_tail;
        }
    }

    /// Publishes queued submissions, then reaps every ready completion into
    /// `on_completion`, and updates the CQ head doorbell once. Returns the
    /// number reaped.
    pub fn poll(&mut self, mut on_completion: impl FnMut(IoCompletion)) -> usize {
        self.ring();
        self.transport.tick();
        let old_head = self.cq_head;
        let mut reaped = 0;
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
            match self.trackers.get_mut(slot) {
                Some(tracker) if tracker.busy => {
                    tracker.busy = false;
                    let completion = IoCompletion {
                        token: tracker.token,
                        cid: entry.cid,
                        status: if entry.is_success() { Ok(()) } else { Err(entry.status()) },
                        dw0: entry.dw0,
                        dw1: entry.dw1,
                        buffer: tracker.buffer.take(),
                    };
                    self.free.push(entry.cid);
                    self.stats.completed += 1;
                    reaped += 1;
                    on_completion(completion);
                }
                _ => self.stats.spurious_completions += 1,
            }
        }
        if self.cq_head != old_head {
            self.cq_doorbell.update(old_head, self.cq_head);
        }
        reaped
    }

    /// Submits `request` and polls until it completes or `timeout` passes:
    /// the blocking helper for simple callers and for the admin queue.
    /// Completions of other commands that arrive meanwhile (say, late ones
    /// of an earlier timed-out command) are discarded, so don't mix it with
    /// asynchronous submissions on the same pair. Every few hundred polls
    /// it checks CSTS: all ones is [`Error::DeviceGone`], CFS is
    /// [`Error::ControllerFatal`].
    pub fn execute(&mut self, request: Request, timeout: Duration) -> Result<IoCompletion> {
        let cid = self.free.last().copied().ok_or(Error::QueueFull)?;
        self.submit(request).map_err(|(error, _)| Error::from(error))?;
        self.wait_for(cid, timeout)
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
        let cid = self.free.last().copied().ok_or(Error::QueueFull)?;
        // SAFETY: the caller upholds submit_raw's contract.
        unsafe { self.submit_raw(command, iova, len, 0) }?;
        self.wait_for(cid, timeout)
    }

    /// Runs `command` (data at `iova`/`len`, or none) to completion and
    /// turns an error status into [`Error::Command`].
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
        let opcode = command.opcode;
        // SAFETY: forwarded contract.
        let completion = unsafe { self.execute_raw(command, iova, len, timeout) }?;
        match completion.status {
            Ok(()) => Ok(completion),
            Err(status) => Err(Error::Command { opcode, admin: self.qid == 0, status }),
        }
    }

    fn wait_for(&mut self, cid: u16, timeout: Duration) -> Result<IoCompletion> {
        let started = Instant::now();
        let mut done = None;
        let mut polls = 0u32;
        loop {
            self.poll(|completion| {
                if completion.cid == cid {
                    done = Some(completion);
                }
            });
            if let Some(completion) = done {
                return Ok(completion);
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(256) {
                let csts = self.transport.read32(CSTS);
                if csts == u32::MAX {
                    return Err(Error::DeviceGone);
                }
                if Csts(csts).cfs() {
                    return Err(Error::ControllerFatal);
                }
                if started.elapsed() > timeout {
                    // The command stays in flight: its slot is not reused
                    // until its completion arrives.
                    let what = if self.qid == 0 { "an admin command" } else { "an I/O command" };
                    return Err(Error::Timeout { what, waited_ms: started.elapsed().as_millis() as u64 });
                }
            }
            std::hint::spin_loop();
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // Delete the queues on the controller before their memory goes.
        let deleted = self.on_drop.take().is_none_or(|delete| delete(self.qid));
        if deleted {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.sq) };
            // SAFETY: as above.
            unsafe { ManuallyDrop::drop(&mut self.cq) };
            // SAFETY: as above.
            unsafe { ManuallyDrop::drop(&mut self.prp_lists) };
        }
    }
}
