//! Reads whose data moves outside the controller's lock, so that queues
//! on other threads go on meanwhile (`perf --sim --qpairs N`).
//!
//! A doorbell that [`Simulator`](super::Simulator)'s `write32` carries
//! out fetches and checks every command under the lock as before. A Read
//! that passes its checks, on a controller with no fault, delay or
//! reordering that a later draw could change, is not moved there: its
//! job (namespace, blocks, host ranges) joins [`Deferred::reads`], and its
//! completion, and every completion after it in that doorbell, joins
//! [`Deferred::posts`], in order. Any other command first moves the
//! reads before it, under the lock ([`State::run_deferred`]), so that
//! nothing it changes shows in them. After the doorbell, `write32` takes
//! the batch, lets the lock go, moves the data under the namespaces'
//! storage locks only, and takes the lock again to post the completions,
//! in order, each with the SQ head it would have carried: one thread sees
//! exactly what it saw before, completion for completion (the trace hash
//! is unchanged), and two threads copy at once.
//!
//! The host's memory stays the device's to write only while the driver
//! says so. Every change that ends the device's DMA (a disable or reset, a
//! power cut, a deleted queue, a removal) first waits, at
//! [`DmaGate::end_dma`], for batches moving data, and a batch of a stopped
//! queue that had not started by then moves nothing and posts nothing:
//! its commands end with their queue, uncounted, as a disabled
//! controller's do (a deleted queue's other commands complete as aborted;
//! the driver deletes a pair's queues from the pair's own thread, so none
//! of its batches is then in flight). An unmapping stops new batches and
//! waits until none is in flight ([`DmaGate::idle`]).
//!
//! Within one doorbell a Read does not flush the reads before it, so a
//! later Read whose PRP list or SGL sits in an earlier Read's buffer sees
//! that memory as it was (the spec leaves such a host undefined). Two
//! commands in flight whose buffers overlap are a host error the simulator
//! does not detect.

use super::controller::{Entry, State};
use super::dma::{HostRange, Transfer};
use super::storage::{Run, Storage};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};

/// The smallest read whose data moves outside the lock. Deferring costs
/// about 380 instructions per doorbell (the batch handed over, the lock
/// taken again, the gate), which a 4 KiB copy does not repay: one pair at
/// 4 KiB QD1 would run 6% more instructions per I/O (hack/io-instructions),
/// and two pairs at 4 KiB gain nothing from it (docs/benchmarks/simulator.md). From 16
/// KiB the copy is most of a read's cost.
pub(crate) const DEFER_READ_BYTES_MIN: u64 = 16 * 1024;

/// One Read's data, to move from its namespace's storage to the host.
#[derive(Debug)]
pub(crate) struct ReadJob {
    pub(crate) namespace: usize,
    pub(crate) slba: u64,
    pub(crate) blocks: u64,
    pub(crate) segments: Vec<HostRange>,
    /// The metadata buffer, and the blocks whose metadata it takes.
    pub(crate) metadata: Option<(HostRange, u64)>,
}

impl ReadJob {
    /// Copies the blocks (and their metadata) into the host's ranges.
    pub(crate) fn run(&self, storage: &Storage) {
        let mut transfer = Transfer::new(&self.segments);
        storage.read(self.slba, self.blocks, |run| put_run(&mut transfer, run));
        if let Some((buffer, blocks)) = self.metadata {
            let mut transfer = Transfer::new(std::slice::from_ref(&buffer));
            storage.read_metadata(self.slba, blocks, |run| put_run(&mut transfer, run));
        }
    }
}

/// Copies a run of stored data (or metadata) to the host.
pub(crate) fn put_run(transfer: &mut Transfer<'_>, run: Run<'_>) {
    match run {
        Run::Data(bytes) => transfer.put(bytes),
        Run::Zeroes(count) => transfer.put_zeroes(count),
    }
}

/// The reads of one doorbell not yet moved, and the completions waiting
/// for them, in order.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    pub(crate) reads: Vec<ReadJob>,
    /// (CQ, entry, the SQ head when it completed), in the order they are
    /// posted.
    pub(crate) posts: Vec<(u16, Entry, u16)>,
    /// The submission queue the doorbell rang for, and its
    /// [`DmaGate`] generation when the batch was taken.
    pub(crate) sq: usize,
    pub(crate) generation: u64,
}

impl Deferred {
    pub(crate) fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.posts.is_empty()
    }
}

/// What lets the device write host memory outside the controller's lock,
/// and what ends it: see the [module documentation](self).
#[derive(Debug)]
pub(crate) struct DmaGate {
    /// Held shared while a batch moves data.
    moving: RwLock<()>,
    /// Per submission queue, advanced when its commands end (the queue is
    /// deleted, or every queue goes at a reset).
    generations: Box<[AtomicU64]>,
    /// Batches taken and not yet moved.
    in_flight: AtomicUsize,
    /// Unmappings waiting for [`DmaGate::idle`]: no read is deferred
    /// meanwhile, so the wait ends within one batch's copy.
    unmapping: AtomicUsize,
}

impl DmaGate {
    pub(crate) fn new(queues: usize) -> DmaGate {
        DmaGate {
            moving: RwLock::new(()),
            generations: (0..queues).map(|_| AtomicU64::new(0)).collect(),
            in_flight: AtomicUsize::new(0),
            unmapping: AtomicUsize::new(0),
        }
    }

    fn generation(&self, sq: usize) -> u64 {
        self.generations[sq].load(Ordering::Acquire)
    }

    /// Ends the DMA of submission queue `sq`'s commands, or of every
    /// queue's: batches moving data finish first, and batches taken before
    /// this call neither move data nor post.
    pub(crate) fn end_dma(&self, sq: Option<usize>) {
        match sq {
            Some(sq) => _ = self.generations[sq].fetch_add(1, Ordering::AcqRel),
            None => self.generations.iter().for_each(|g| _ = g.fetch_add(1, Ordering::AcqRel)),
        }
        drop(self.moving.write().unwrap_or_else(PoisonError::into_inner));
    }

    /// Whether no batch is between [`State::take_deferred`] and the end of
    /// its copy: with the controller's lock held, none can start, so host
    /// memory may be unmapped.
    pub(crate) fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// An unmapping begins (under the controller's lock): reads are moved
    /// under the lock until [`DmaGate::unmapped`].
    pub(crate) fn unmapping(&self) {
        self.unmapping.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn unmapped(&self) {
        self.unmapping.fetch_sub(1, Ordering::AcqRel);
    }

    /// Runs `move_data` unless `batch`'s queue stopped since it was taken;
    /// whether it ran. The batch is no longer in flight afterwards, even if
    /// the copy panics (a failed assertion), so an unmapping never waits
    /// for it.
    pub(crate) fn moving(&self, batch: &Deferred, move_data: impl FnOnce()) -> bool {
        struct Landed<'a>(&'a AtomicUsize);
        impl Drop for Landed<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _landed = Landed(&self.in_flight);
        let _moving = self.moving.read().unwrap_or_else(PoisonError::into_inner);
        if self.generation(batch.sq) != batch.generation {
            return false;
        }
        move_data();
        true
    }
}

impl State {
    /// Whether a Read of `bytes` that passed its checks may move its data
    /// after the lock is let go: at least [`DEFER_READ_BYTES_MIN`], in a
    /// doorbell `write32` carries out, with nothing that draws or changes
    /// state between its execution and its completion (faults, drops,
    /// delays, reordering, a scheduled power cut).
    pub(crate) fn may_defer_read(&self, bytes: u64) -> bool {
        bytes >= DEFER_READ_BYTES_MIN
            && self.defer_reads
            && !self.config.reads_under_lock
            && self.gate.unmapping.load(Ordering::Acquire) == 0
            && self.faults.is_empty()
            && self.drop_io == 0
            && self.power_cut_after.is_none()
            && self.fault_config.read_bit_flip_probability <= 0.0
            && self.fault_config.dropped_completion_probability <= 0.0
            && !self.config.completions_wait()
    }

    /// Moves the deferred reads and posts their completions now, under the
    /// lock: before a command that might change what they read.
    pub(crate) fn run_deferred(&mut self) {
        for job in &self.deferred.reads {
            job.run(&self.namespaces[job.namespace].storage());
        }
        let mut batch = std::mem::take(&mut self.deferred);
        self.post_deferred(&mut batch);
        self.deferred = batch;
    }

    /// The deferred batch, to move outside the lock; the state keeps empty
    /// lists for the next.
    pub(crate) fn take_deferred(&mut self) -> Deferred {
        let spare = self.spare_deferred.pop().unwrap_or_default();
        let mut batch = std::mem::replace(&mut self.deferred, spare);
        batch.generation = self.gate.generation(batch.sq);
        self.gate.in_flight.fetch_add(1, Ordering::AcqRel);
        batch
    }

    /// Posts the batch's completions, in order, unless its queue stopped
    /// since it was taken (the queue is gone, or a new one took its ID);
    /// keeps its lists and ranges for later batches.
    pub(crate) fn finish_deferred(&mut self, mut batch: Deferred, moved: bool) {
        if moved && self.gate.generation(batch.sq) == batch.generation && self.processing() {
            self.post_deferred(&mut batch);
        }
        self.recycle(&mut batch);
        // One spare per thread with a batch out at once, at most.
        self.spare_deferred.push(batch);
    }

    fn post_deferred(&mut self, batch: &mut Deferred) {
        for (cqid, entry, sq_head) in batch.posts.drain(..) {
            self.post_with_head(cqid, entry, Some(sq_head));
        }
        self.recycle(batch);
    }

    /// Empties `batch`, keeping its jobs' range lists for later reads.
    fn recycle(&mut self, batch: &mut Deferred) {
        batch.posts.clear();
        for mut job in batch.reads.drain(..) {
            job.segments.clear();
            self.segment_pool.push(job.segments);
        }
    }
}
