//! The simulated controller's state machine: registers (NVMe Base 2.0
//! §3.1.3), queues, command fetch, completion posting, the clock, resets
//! and power cuts. Admin and I/O command execution live in `admin.rs` and
//! `io.rs`; host memory is reached only through `dma.rs`.

use super::config::{FaultConfig, SimConfig};
use super::deferred::{Deferred, DmaGate};
use super::dma::{DmaTable, HostRange, PAGE_SIZE};
use super::fault::{PowerCutReport, RangeFaults, RangeKind, SimStats, ZoneRewind};
use super::lane::{LaneCounters, LaneLimits, LaneNamespace, LaneQueues, LaneWork, Lease};
use super::namespace::Namespace;
use crate::prng::{mix, Prng};
use crate::spec::command::{Command, SQE_SIZE};
use crate::spec::completion::{Completion, CQE_SIZE, STATUS_WORD_OFFSET};
use crate::spec::features::HostBehaviorSupport;
use crate::spec::registers::{self as reg, Aqa, Cc, Shn, CC_CSS_ALL_IO, CC_CSS_NVM};
use crate::spec::status::Status;
use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

mod registers;

/// CSTS bits (NVMe Base 2.0 §3.1.3.6).
const CSTS_RDY: u32 = 1 << 0;
const CSTS_CFS: u32 = 1 << 1;
const CSTS_SHST_SHIFT: u32 = 2;
const SHST_COMPLETE: u32 = 0b10;
/// CAP.CSS bits 37 (NVM) and 43 (I/O command sets).
const CAP_CSS_NVM: u64 = 1 << 37;
const CAP_CSS_IO_COMMAND_SETS: u64 = 1 << 43;
const CAP_CQR: u64 = 1 << 16;
/// Error log entries kept (ELPE + 1).
pub(crate) const ERROR_LOG_ENTRIES: usize = 64;
/// Most Asynchronous Event Requests outstanding (AERL + 1).
pub(crate) const AER_MAX: usize = 4;
/// Bound on completions waiting (delayed or for room in their CQ): a
/// backstop against a host that floods queues it never reaps.
pub(crate) const WAITING_COMPLETIONS_MAX: usize = 1 << 22;

/// A completion on its way to a completion queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) sqid: u16,
    pub(crate) cid: u16,
    pub(crate) status: Status,
    pub(crate) dw0: u32,
    pub(crate) dw1: u32,
}

/// A completion waiting for its tick.
#[derive(Clone, Copy, Debug)]
struct Pending {
    due: u64,
    seq: u64,
    cqid: u16,
    entry: Entry,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    /// Reversed, so the max-heap pops the earliest (due, seq) first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

#[derive(Debug)]
pub(crate) struct SubmissionQueue {
    pub(crate) ring: HostRange,
    pub(crate) mapping: u64,
    pub(crate) size: u32,
    pub(crate) head: u32,
    pub(crate) tail: u32,
    pub(crate) cqid: u16,
}

#[derive(Debug)]
pub(crate) struct CompletionQueue {
    pub(crate) ring: HostRange,
    pub(crate) mapping: u64,
    pub(crate) size: u32,
    pub(crate) head: u32,
    pub(crate) tail: u32,
    pub(crate) phase: bool,
    /// Completions waiting for room (the host has not consumed enough).
    pub(crate) backlog: VecDeque<Entry>,
    /// Submission queues completing here.
    pub(crate) sqs: u32,
}

impl CompletionQueue {
    pub(crate) fn is_full(&self) -> bool {
        (self.tail + 1) % self.size == self.head
    }

    /// A CQ head doorbell: the new head, unless it would pass entries not
    /// yet posted.
    pub(crate) fn set_head(&mut self, value: u32) -> bool {
        let valid = value < self.size
            && (value + self.size - self.head) % self.size <= (self.tail + self.size - self.head) % self.size;
        if valid {
            self.head = value;
        }
        valid
    }

    /// Writes `entry`, which carries `sq_head`, at the tail (not full).
    pub(crate) fn write(&mut self, entry: &Entry, sq_head: u16) {
        debug_assert!(!self.is_full());
        let at = self.tail as usize * CQE_SIZE;
        let slot = self.ring.sub(at, CQE_SIZE);
        // Everything but the status word first, then (Release) the status
        // word with the phase tag: the host never sees a new phase tag
        // before the rest of the entry.
        slot.write_u32(0, entry.dw0);
        slot.write_u32(4, entry.dw1);
        slot.write_u16(8, sq_head);
        slot.write_u16(10, entry.sqid);
        slot.write_u16(12, entry.cid);
        fence(Ordering::Release);
        slot.write_u16(STATUS_WORD_OFFSET, status_word_for(entry, self.phase));
        self.tail += 1;
        if self.tail == self.size {
            self.tail = 0;
            self.phase = !self.phase;
        }
    }
}

/// `trace` with a posted completion folded in (see
/// [`super::Simulator::trace_hash`]), and the tick it was posted at where
/// completions may wait for ticks (0 where they may not).
pub(crate) fn fold_trace(trace: u64, now: u64, entry: &Entry) -> u64 {
    [
        now,
        u64::from(entry.sqid),
        u64::from(entry.cid),
        u64::from(entry.status.to_field()),
        u64::from(entry.dw0),
        u64::from(entry.dw1),
    ]
    .into_iter()
    .fold(trace, mix)
}

/// Feature values (Set/Get Features) that a reset restores.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Features {
    /// I/O queues granted (Number of Queues), 1-based.
    pub(crate) sq_count: u16,
    pub(crate) cq_count: u16,
    pub(crate) volatile_write_cache: bool,
    pub(crate) arbitration: u32,
    pub(crate) power_management: u32,
    pub(crate) temperature_threshold: u32,
    pub(crate) interrupt_coalescing: u32,
    pub(crate) async_event_config: u32,
    /// Host Behavior Support as the host last set it (all zeroes at
    /// start and after a reset, NVMe Base 2.1 §5.1.25.1.14).
    pub(crate) host_behavior: HostBehaviorSupport,
}

impl Features {
    pub(crate) fn new(config: &SimConfig) -> Self {
        Features {
            sq_count: config.max_io_queue_pairs,
            cq_count: config.max_io_queue_pairs,
            volatile_write_cache: config.volatile_write_cache,
            arbitration: 0,
            power_management: 0,
            // 343 K, like WCTEMP.
            temperature_threshold: 343,
            interrupt_coalescing: 0,
            async_event_config: 0,
            host_behavior: HostBehaviorSupport::default(),
        }
    }
}

/// One Error Information log entry, as recorded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ErrorEntry {
    pub(crate) count: u64,
    pub(crate) sqid: u16,
    pub(crate) cid: u16,
    pub(crate) status: Status,
    pub(crate) nsid: u32,
    pub(crate) lba: u64,
    pub(crate) opcode: u8,
    pub(crate) csi: u8,
}

/// SMART / Health counters.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Smart {
    pub(crate) read_bytes: u128,
    pub(crate) written_bytes: u128,
    pub(crate) host_reads: u128,
    pub(crate) host_writes: u128,
    pub(crate) power_cycles: u128,
    pub(crate) unsafe_shutdowns: u128,
    pub(crate) media_errors: u128,
}

/// What executing a command produced.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Outcome {
    Complete {
        status: Status,
        dw0: u32,
        dw1: u32,
    },
    /// No completion until something happens (an Asynchronous Event
    /// Request).
    Held,
}

impl Outcome {
    pub(crate) fn from_result(result: Result<(u32, u32), Status>) -> Self {
        match result {
            Ok((dw0, dw1)) => Outcome::Complete { status: Status::SUCCESS, dw0, dw1 },
            Err(status) => Outcome::Complete { status, dw0: 0, dw1: 0 },
        }
    }
}

/// Tick counters, one per group of threads: more than the cores a run
/// uses, so that two polling threads rarely share one.
const CLOCK_SHARDS: usize = 8;

/// Simulated time: ticks, one per queue-pair poll pass, counted outside the
/// lock so that a pass with nothing due takes no lock.
///
/// Each thread counts its passes in a shard of its own (its line written by
/// it alone: a counter every polling thread wrote would move between the
/// cores at every pass, which cost two pairs on two threads about a sixth
/// of their rate, docs/benchmarks/simulator.md), and the time is their sum. With one
/// thread that is exactly the passes so far; with several, a reader may
/// miss passes other threads are making at that moment, as it would with
/// any clock they race to advance.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    shards: [Padded<AtomicU64>; CLOCK_SHARDS],
    /// Whether completions wait for a later tick (kept by the state, under
    /// its lock; read at every pass, written rarely).
    pending: Padded<AtomicBool>,
}

/// The clock shard of the calling thread: threads numbered as they first
/// tick, any simulator.
fn clock_shard() -> usize {
    static THREADS: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = THREADS.fetch_add(1, Ordering::Relaxed) % CLOCK_SHARDS;
    }
    SHARD.with(|shard| *shard)
}

impl Clock {
    pub(crate) fn now(&self) -> u64 {
        self.shards.iter().map(|shard| shard.load(Ordering::Acquire)).sum()
    }

    /// One tick; whether completions may be due.
    pub(crate) fn advance(&self) -> bool {
        self.shards[clock_shard()].fetch_add(1, Ordering::AcqRel);
        self.pending.load(Ordering::Acquire)
    }

    pub(crate) fn set_pending(&self, pending: bool) {
        self.pending.store(pending, Ordering::Release);
    }
}

/// Two cache lines (the unit adjacent-line prefetchers pull in), for
/// what threads on different cores read or write on every pass or
/// command: nothing else may share its lines, or the lines move between
/// the cores.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Padded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// Everything behind the simulator's lock.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) config: SimConfig,
    pub(crate) rng: Prng,
    pub(crate) clock: Arc<Clock>,
    /// A write's metadata on its way to storage (see `io::store`), kept so
    /// that writes allocate nothing.
    pub(crate) metadata_scratch: Vec<u8>,
    // Registers.
    cc: u32,
    aqa: u32,
    asq: u64,
    acq: u64,
    intms: u32,
    ready: bool,
    pub(crate) fatal: bool,
    shst: u32,
    pub(crate) removed: bool,
    /// The host asked for the device back ([`super::Fault::RemovalRequested`]).
    pub(crate) removal_requested: bool,
    /// CC.EN 1 → 0 is ignored, and maybe a function-level reset too
    /// ([`super::Fault::WontDisable`]).
    pub(crate) wont_disable: bool,
    pub(crate) wont_function_reset: bool,
    // Queues.
    pub(crate) dma: DmaTable,
    pub(crate) sqs: Vec<Option<SubmissionQueue>>,
    pub(crate) cqs: Vec<Option<CompletionQueue>>,
    pending: BinaryHeap<Pending>,
    due: Vec<Pending>,
    seq: u64,
    pub(crate) aers: Vec<u16>,
    /// Events waiting for an Asynchronous Event Request: (type,
    /// information, log page).
    pub(crate) aer_queue: VecDeque<(u8, u8, u8)>,
    /// Event types reported and not yet cleared by reading their log page.
    pub(crate) aer_masked: u8,
    /// The SMART / Health Critical Warning.
    pub(crate) critical_warning: u8,
    /// Commands executed whose completions a fault dropped: they hang until
    /// an Abort or a reset.
    pub(crate) hung: Vec<Entry>,
    // Media and features.
    pub(crate) namespaces: Vec<Namespace>,
    pub(crate) features: Features,
    // Faults.
    pub(crate) faults: RangeFaults,
    pub(crate) fault_config: FaultConfig,
    pub(crate) drop_io: u32,
    /// I/O commands left before a scheduled power cut.
    pub(crate) power_cut_after: Option<u64>,
    /// Flushes to let through before one fails ([`super::Fault::FlushFails`]).
    pub(crate) flush_fails_after: Option<u32>,
    /// Zone Appends left to misreport, and by how much ([`super::Fault::MisreportAppendLba`]).
    pub(crate) misreport_append: (u32, u64),
    pub(crate) scheduled_power_cut: Option<PowerCutReport>,
    pub(crate) drop_admin: u32,
    /// Abort answers "not aborted" for everything.
    pub(crate) decline_aborts: bool,
    /// I/O opcodes answered with Invalid Command Opcode ([`crate::sim::Fault::RejectOpcode`]).
    pub(crate) rejected_opcodes: [bool; 256],
    // Logs and counters.
    pub(crate) error_log: VecDeque<ErrorEntry>,
    pub(crate) error_count: u64,
    pub(crate) smart: Smart,
    pub(crate) stats: SimStats,
    /// Per completion queue, a hash of every completion posted to it (see
    /// [`super::Simulator::trace_hash`]): apart, so that a queue lent to a
    /// lane folds on its own (`sim/lane.rs`).
    pub(crate) traces: Vec<u64>,
    // Queues lent to lanes (`sim/lane.rs`).
    /// The submission queues lent out now.
    pub(crate) lent: Vec<u16>,
    /// Per queue ID, whether it is lent out now (`lent`, looked up in
    /// constant work at every doorbell whatever the number of queues).
    pub(crate) is_lent: Vec<bool>,
    /// What lanes need of the namespaces, taken when first lent to and
    /// dropped by every admin command and fault injection.
    pub(crate) lane_namespaces: Option<Arc<[Padded<LaneNamespace>]>>,
    // Reads moved outside the lock (`sim/deferred.rs`).
    /// Set while `Simulator::write32` carries out a doorbell.
    pub(crate) defer_reads: bool,
    pub(crate) deferred: Deferred,
    /// Empty lists for the next batches while some move.
    pub(crate) spare_deferred: Vec<Deferred>,
    /// Range lists of finished reads, for the next ones.
    pub(crate) segment_pool: Vec<Vec<HostRange>>,
    pub(crate) gate: Arc<DmaGate>,
    // Scratch, reused by every command.
    pub(crate) segments: Vec<HostRange>,
    pub(crate) buffer: Vec<u8>,
    /// The data of a Copy, between reading its sources and writing.
    pub(crate) copy_data: Vec<u8>,
    /// The metadata of a Copy's sources, likewise.
    pub(crate) copy_metadata: Vec<u8>,
}

// SAFETY: the raw pointers inside (`HostRange`s of queue rings and
// deferred reads, the DMA table's host addresses) point into memory the
// driver mapped for the device and keeps allocated until `unmap_dma`.
// They are used with the state's mutex held, except by a deferred read's
// copy (`sim/deferred.rs`), and `unmap_dma` waits, with the mutex held so
// that no other batch starts, until no deferred batch is in flight; so
// moving the state to another thread, and with it the right to use them,
// is sound.
unsafe impl Send for State {}

fn status_word_for(entry: &Entry, phase: bool) -> u16 {
    Completion::status_word(entry.status, phase)
}

impl State {
    pub(crate) fn new(config: SimConfig) -> Self {
        config.validate();
        let namespaces = config
            .namespaces
            .iter()
            .enumerate()
            .map(|(index, ns)| Namespace::new(index as u32 + 1, ns, config.memory_limit_bytes))
            .collect();
        let queues = usize::from(config.max_io_queue_pairs) + 1;
        State {
            rng: Prng::new(config.seed),
            clock: Arc::default(),
            metadata_scratch: Vec::new(),
            cc: 0,
            aqa: 0,
            asq: 0,
            acq: 0,
            intms: 0,
            ready: false,
            fatal: false,
            shst: 0,
            removed: false,
            removal_requested: false,
            wont_disable: false,
            wont_function_reset: false,
            dma: DmaTable::new(),
            sqs: (0..queues).map(|_| None).collect(),
            cqs: (0..queues).map(|_| None).collect(),
            pending: BinaryHeap::with_capacity(1024),
            due: Vec::with_capacity(1024),
            seq: 0,
            aers: Vec::with_capacity(AER_MAX),
            aer_queue: VecDeque::new(),
            aer_masked: 0,
            critical_warning: 0,
            hung: Vec::new(),
            namespaces,
            features: Features::new(&config),
            faults: RangeFaults::default(),
            fault_config: config.faults.clone(),
            drop_io: 0,
            power_cut_after: None,
            flush_fails_after: None,
            misreport_append: (0, 0),
            scheduled_power_cut: None,
            drop_admin: 0,
            decline_aborts: false,
            rejected_opcodes: [false; 256],
            error_log: VecDeque::with_capacity(ERROR_LOG_ENTRIES),
            error_count: 0,
            smart: Smart { power_cycles: 1, ..Smart::default() },
            stats: SimStats::default(),
            traces: vec![0; queues],
            lent: Vec::with_capacity(queues),
            is_lent: vec![false; queues],
            lane_namespaces: None,
            defer_reads: false,
            deferred: Deferred::default(),
            spare_deferred: Vec::new(),
            segment_pool: Vec::new(),
            gate: Arc::new(DmaGate::new(queues)),
            segments: Vec::with_capacity(PAGE_SIZE / 8 + 2),
            buffer: Vec::with_capacity(2 * PAGE_SIZE),
            copy_data: Vec::new(),
            copy_metadata: Vec::new(),
            config,
        }
    }

    /// Commands are fetched and completions posted only while this holds.
    pub(crate) fn processing(&self) -> bool {
        self.ready && !self.fatal && !self.removed
    }

    pub(crate) fn css(&self) -> u8 {
        Cc(self.cc).css()
    }

    // ---- doorbells and command fetch ----

    fn doorbell(&mut self, offset: usize, value: u32) {
        if !self.processing() {
            return;
        }
        let index = (offset - reg::DOORBELL_BASE) / 4;
        if !offset.is_multiple_of(4) || index / 2 >= self.sqs.len() {
            self.stats.doorbell_errors += 1;
            return;
        }
        let qid = index / 2;
        // Acquire: the queue entries the host wrote before the doorbell
        // (behind its Release fence) are visible from here on.
        fence(Ordering::Acquire);
        if index.is_multiple_of(2) {
            match &mut self.sqs[qid] {
                Some(sq) if value < sq.size => sq.tail = value,
                _ => {
                    self.stats.doorbell_errors += 1;
                    return;
                }
            }
            self.process(qid);
        } else {
            let valid = self.cqs[qid].as_mut().is_some_and(|cq| cq.set_head(value));
            if valid {
                self.drain_backlog(qid);
            } else {
                self.stats.doorbell_errors += 1;
            }
        }
    }

    /// Fetches and executes every command between the SQ's head and tail,
    /// in order.
    fn process(&mut self, qid: usize) {
        loop {
            if !self.processing() {
                return;
            }
            let Some(sq) = &mut self.sqs[qid] else { return };
            if sq.head == sq.tail {
                return;
            }
            if qid != 0 {
                match self.power_cut_after {
                    Some(0) => {
                        self.power_cut_after = None;
                        let report = self.power_cut();
                        self.scheduled_power_cut = Some(report);
                        return;
                    }
                    Some(left) => self.power_cut_after = Some(left - 1),
                    None => {}
                }
            }
            let Some(sq) = &mut self.sqs[qid] else { return };
            let bytes = sq.ring.read_volatile::<SQE_SIZE>(sq.head as usize * SQE_SIZE);
            sq.head = (sq.head + 1) % sq.size;
            let command = Command::from_bytes(&bytes);
            let sqid = qid as u16;
            self.deferred.sq = qid;
            // Reads deferred so far move before anything that might change
            // what they read.
            if !self.deferred.reads.is_empty()
                && (qid == 0 || command.opcode != crate::spec::command::opcode::nvm::READ)
            {
                self.run_deferred();
            }
            let outcome = if qid == 0 { self.admin(&command) } else { self.io(&command) };
            if let Outcome::Complete { status, dw0, dw1 } = outcome {
                self.complete(sqid, &command, Entry { sqid, cid: command.cid, status, dw0, dw1 });
            }
        }
    }

    /// Routes a finished command's completion: recorded in the error log if
    /// it failed, dropped if a fault says so, posted now or queued for a
    /// later tick.
    pub(crate) fn complete(&mut self, sqid: u16, command: &Command, entry: Entry) {
        if !entry.status.is_success() {
            self.stats.errors += 1;
            self.log_error(sqid, command, entry.status);
        }
        let dropped = if sqid == 0 {
            let drop = self.drop_admin > 0;
            self.drop_admin = self.drop_admin.saturating_sub(1);
            drop
        } else if self.drop_io > 0 {
            self.drop_io -= 1;
            true
        } else if self.hangs(command) {
            true
        } else {
            self.rng.chance(self.fault_config.dropped_completion_probability)
        };
        if dropped {
            self.stats.completions_dropped += 1;
            self.stats.faults.dropped_completions += 1;
            assert!(self.hung.len() < WAITING_COMPLETIONS_MAX, "more than {WAITING_COMPLETIONS_MAX} commands hung");
            self.hung.push(entry);
            return;
        }
        let cqid = self.sqs[usize::from(sqid)].as_ref().map_or(0, |sq| sq.cqid);
        let (min, max) = self.config.completion_delay_ticks;
        let delay = self.rng.between(u64::from(min), u64::from(max));
        if delay == 0 && !self.config.reorder {
            if self.deferred.reads.is_empty() {
                self.post(cqid, entry);
            } else {
                // After the reads before it (`sim/deferred.rs`).
                let sq_head = self.sqs[usize::from(sqid)].as_ref().map_or(0, |sq| sq.head as u16);
                self.deferred.posts.push((cqid, entry, sq_head));
            }
            return;
        }
        assert!(
            self.pending.len() < WAITING_COMPLETIONS_MAX,
            "more than {WAITING_COMPLETIONS_MAX} completions waiting"
        );
        self.seq += 1;
        self.pending.push(Pending { due: self.clock.now() + delay, seq: self.seq, cqid, entry });
        self.clock.set_pending(true);
    }

    /// Whether `command`, an I/O command, is a read that a
    /// [`super::Fault::HangReads`] range holds.
    fn hangs(&self, command: &Command) -> bool {
        if self.faults.is_empty() || command.opcode != crate::spec::command::opcode::nvm::READ {
            return false;
        }
        let (slba, blocks) = (super::io::slba(command), super::io::blocks(command));
        self.faults.first_hit(RangeKind::HangRead, command.nsid, slba, blocks).is_some()
    }

    fn log_error(&mut self, sqid: u16, command: &Command, status: Status) {
        self.error_count += 1;
        let namespace = command.nsid.checked_sub(1).and_then(|index| self.namespaces.get(index as usize));
        if self.error_log.len() == ERROR_LOG_ENTRIES {
            self.error_log.pop_back();
        }
        self.error_log.push_front(ErrorEntry {
            count: self.error_count,
            sqid,
            cid: command.cid,
            status,
            nsid: command.nsid,
            lba: if sqid == 0 { 0 } else { super::io::slba(command) },
            opcode: command.opcode,
            csi: namespace.map_or(0, Namespace::csi),
        });
        if status.is_media_error() {
            self.smart.media_errors += 1;
        }
    }

    /// Writes a completion to its CQ, or queues it behind earlier ones when
    /// the CQ is full (a full CQ is never overwritten).
    pub(crate) fn post(&mut self, cqid: u16, entry: Entry) {
        self.post_with_head(cqid, entry, None);
    }

    /// [`State::post`], the entry carrying `sq_head` (what its SQ's head
    /// was when it completed) rather than the head now.
    pub(crate) fn post_with_head(&mut self, cqid: u16, entry: Entry, sq_head: Option<u16>) {
        let Some(cq) = &mut self.cqs[usize::from(cqid)] else {
            // Its queue was deleted: the completion has nowhere to go.
            return;
        };
        if !cq.backlog.is_empty() || cq.is_full() {
            assert!(cq.backlog.len() < WAITING_COMPLETIONS_MAX, "completion backlog overflow");
            cq.backlog.push_back(entry);
            self.stats.completions_held_cq_full += 1;
            return;
        }
        self.write_entry(usize::from(cqid), entry, sq_head);
    }

    fn write_entry(&mut self, cqid: usize, entry: Entry, sq_head: Option<u16>) {
        let head_now = || self.sqs[usize::from(entry.sqid)].as_ref().map_or(0, |sq| sq.head as u16);
        let sq_head = sq_head.unwrap_or_else(head_now);
        self.cqs[cqid].as_mut().expect("posting to a live CQ").write(&entry, sq_head);
        self.stats.completions_posted += 1;
        // The tick, where completions may wait for one (else a completion
        // is posted by the doorbell that fetched it, or by the host's CQ
        // head: which tick that falls on is the host's doing).
        let now = if self.config.completions_wait() { self.clock.now() } else { 0 };
        self.traces[cqid] = fold_trace(self.traces[cqid], now, &entry);
    }

    fn drain_backlog(&mut self, cqid: usize) {
        loop {
            let Some(cq) = &mut self.cqs[cqid] else { return };
            if cq.is_full() {
                return;
            }
            let Some(entry) = cq.backlog.pop_front() else { return };
            self.write_entry(cqid, entry, None);
        }
    }

    /// After a tick of the clock ([`Clock::advance`]): every completion due
    /// by now is posted (in a seeded random order with `reorder`).
    pub(crate) fn post_due(&mut self) {
        self.clock.set_pending(!self.pending.is_empty());
        if !self.processing() || self.pending.is_empty() {
            return;
        }
        let now = self.clock.now();
        let mut due = std::mem::take(&mut self.due);
        while self.pending.peek().is_some_and(|pending| pending.due <= now) {
            due.push(self.pending.pop().expect("peeked"));
        }
        if self.config.reorder {
            self.rng.shuffle(&mut due);
        }
        for pending in due.drain(..) {
            self.post(pending.cqid, pending.entry);
        }
        self.due = due;
    }

    // ---- queues lent to lanes (`sim/lane.rs`) ----

    /// Whether a lane could tell nothing apart from the state: processing,
    /// and nothing that fails, drops, delays, reorders or draws.
    pub(crate) fn plain(&self) -> bool {
        let faults = &self.fault_config;
        self.config.lanes
            && self.processing()
            && self.faults.is_empty()
            && self.drop_io == 0
            && self.power_cut_after.is_none()
            && self.pending.is_empty()
            && !self.config.completions_wait()
            && !self.rejected_opcodes[usize::from(crate::spec::command::opcode::nvm::READ)]
            && !self.rejected_opcodes[usize::from(crate::spec::command::opcode::nvm::WRITE)]
            && faults.unrecovered_read_probability <= 0.0
            && faults.read_bit_flip_probability <= 0.0
            && faults.write_fault_probability <= 0.0
            && faults.dropped_completion_probability <= 0.0
    }

    /// Lends I/O submission queue `qid`, with the completion queue that
    /// serves it alone, when the state is plain; `None` (lending nothing)
    /// otherwise. Nothing is allocated but the namespaces' snapshot, once
    /// per admin command.
    pub(crate) fn lend(&mut self, qid: u16) -> Option<Lease> {
        let index = usize::from(qid);
        let sq = self.sqs.get(index)?.as_ref()?;
        let cq = self.cqs.get(usize::from(sq.cqid))?.as_ref()?;
        if qid == 0 || sq.cqid != qid || cq.sqs != 1 || !self.plain() {
            return None;
        }
        let namespaces = match &self.lane_namespaces {
            Some(namespaces) => Arc::clone(namespaces),
            None => {
                let namespaces: Arc<[Padded<LaneNamespace>]> = self
                    .namespaces
                    .iter()
                    .map(|namespace| {
                        Padded(LaneNamespace {
                            block_size: namespace.block_size,
                            capacity_blocks: namespace.capacity_blocks,
                            metadata_bytes: u64::from(namespace.config.metadata_bytes),
                            zoned: namespace.zones.is_some(),
                            storage: Arc::clone(&namespace.storage),
                        })
                    })
                    .collect();
                self.lane_namespaces = Some(Arc::clone(&namespaces));
                namespaces
            }
        };
        let limits = LaneLimits {
            nn: self.config.nn,
            max_transfer_bytes: self.config.max_transfer_bytes(),
            sgls: self.config.sgls & 0b11 != 0,
            volatile_write_cache: self.features.volatile_write_cache,
            metadata_dma_truncation: self.config.metadata_dma_truncation,
        };
        self.lent.push(qid);
        self.is_lent[index] = true;
        let queues = LaneQueues {
            sqid: qid,
            sq: self.sqs[index].take().expect("checked"),
            cq: self.cqs[index].take().expect("checked"),
            trace: self.traces[index],
            completions_posted: 0,
            completions_held_cq_full: 0,
        };
        let work = LaneWork { dma: self.dma.share(), limits, counters: LaneCounters::default() };
        Some(Lease { queues, work, namespaces })
    }

    /// Takes a lent queue back, with what its lane counted.
    pub(crate) fn take_back(&mut self, lease: Lease) {
        let Lease { queues, work, .. } = lease;
        let index = usize::from(queues.sqid);
        let at = self.lent.iter().position(|&qid| qid == queues.sqid).expect("a queue lent out");
        self.lent.swap_remove(at);
        self.is_lent[index] = false;
        debug_assert!(self.sqs[index].is_none() && self.cqs[index].is_none());
        self.sqs[index] = Some(queues.sq);
        self.cqs[index] = Some(queues.cq);
        self.traces[index] = queues.trace;
        self.stats.completions_posted += queues.completions_posted;
        self.stats.completions_held_cq_full += queues.completions_held_cq_full;
        let counted = work.counters;
        self.stats.io_commands[usize::from(crate::spec::command::opcode::nvm::READ)] += counted.reads;
        self.stats.io_commands[usize::from(crate::spec::command::opcode::nvm::WRITE)] += counted.writes;
        self.stats.lbas_read += counted.lbas_read;
        self.stats.lbas_written += counted.lbas_written;
        self.stats.sgl_transfers += counted.sgl_transfers;
        self.stats.lane_commands += counted.reads + counted.writes;
        self.smart.host_reads += u128::from(counted.reads);
        self.smart.host_writes += u128::from(counted.writes);
        self.smart.read_bytes += counted.read_bytes;
        self.smart.written_bytes += counted.written_bytes;
    }

    /// Creates an I/O queue's bookkeeping (the admin command checked the
    /// request).
    pub(crate) fn add_cq(&mut self, qid: u16, ring: HostRange, mapping: u64, size: u32) {
        self.cqs[usize::from(qid)] = Some(CompletionQueue {
            ring,
            mapping,
            size,
            head: 0,
            tail: 0,
            phase: true,
            backlog: VecDeque::new(),
            sqs: 0,
        });
    }

    pub(crate) fn add_sq(&mut self, qid: u16, ring: HostRange, mapping: u64, size: u32, cqid: u16) {
        self.cqs[usize::from(cqid)].as_mut().expect("checked").sqs += 1;
        self.sqs[usize::from(qid)] = Some(SubmissionQueue { ring, mapping, size, head: 0, tail: 0, cqid });
    }

    /// Deletes an I/O SQ: completions still waiting for it are posted now
    /// with Command Aborted due to SQ Deletion (NVMe Base 2.0, "Delete I/O
    /// Submission Queue command").
    pub(crate) fn delete_sq(&mut self, qid: u16) {
        // Its reads in flight outside the lock finish first.
        self.gate.end_dma(Some(usize::from(qid)));
        let sq = self.sqs[usize::from(qid)].take().expect("checked");

        let mut aborted = Vec::new();
        self.pending.retain(|pending| {
            let keep = pending.entry.sqid != qid;
            if !keep {
                aborted.push(*pending);
            }
            keep
        });
        aborted.sort_by_key(|pending| pending.seq);
        let status = Status::from(crate::spec::status::GenericStatus::AbortedSqDeletion);
        for pending in aborted {
            self.post(pending.cqid, Entry { status, dw0: 0, dw1: 0, ..pending.entry });
        }
        // Commands hung on it end the same way.
        let mut index = 0;
        while index < self.hung.len() {
            if self.hung[index].sqid == qid {
                let hung = self.hung.remove(index);
                self.post(sq.cqid, Entry { status, dw0: 0, dw1: 0, ..hung });
            } else {
                index += 1;
            }
        }
        if let Some(cq) = &mut self.cqs[usize::from(sq.cqid)] {
            cq.sqs -= 1;
        }
    }

    pub(crate) fn delete_cq(&mut self, qid: u16) {
        let cq = self.cqs[usize::from(qid)].take().expect("checked");
        debug_assert_eq!(cq.sqs, 0);
        self.pending.retain(|pending| pending.cqid != qid);
    }

    /// The driver unmapped memory: a queue whose ring lived there can never
    /// be touched again. That is a driver bug (queues are deleted before
    /// their memory goes), so the controller also reports a fatal status.
    pub(crate) fn unmapped(&mut self, mapping: u64) {
        let mut broken = false;
        for qid in 0..self.sqs.len() {
            if self.sqs[qid].as_ref().is_some_and(|sq| sq.mapping == mapping) {
                self.sqs[qid] = None;
                broken = true;
            }
            if self.cqs[qid].as_ref().is_some_and(|cq| cq.mapping == mapping) {
                self.cqs[qid] = None;
                broken = true;
            }
        }
        // A removed device has stopped anyway; the driver freeing its
        // memory then is expected.
        if broken && !self.removed {
            self.fatal = true;
            self.stats.faults.controller_fatal += 1;
        }
    }

    // ---- power ----

    /// Power loss: the controller resets and forgets its registers, unflushed
    /// cached blocks persist or are lost one by one (seeded), and zone write
    /// pointers move back to the end of what persisted.
    ///
    /// Zones: within a zone the cached blocks lie past the durable ones
    /// (writes go to the write pointer; Flush and FUA persist prefixes), and
    /// each is kept with probability `power_cut_keep_probability` until the
    /// first one lost; every later block of that zone is lost too. The write
    /// pointer becomes the first lost block, so a zone never reads data past
    /// its write pointer. Open zones become Closed (Empty at their start);
    /// a Full zone that lost data becomes Closed, or stays Full (finished by
    /// the controller) if no active resource is free.
    pub(crate) fn power_cut(&mut self) -> PowerCutReport {
        let mut report = PowerCutReport { completions_discarded: self.drop_queues(), ..PowerCutReport::default() };
        let keep_probability = self.fault_config.power_cut_keep_probability;
        let rng = &mut self.rng;
        for namespace in &mut self.namespaces {
            let nsid = namespace.nsid;
            let mut first_lost: Vec<(usize, u64)> = Vec::new();
            match &namespace.zones {
                None => namespace.storage_mut().power_loss(|lba| {
                    let keep = rng.chance(keep_probability);
                    if keep {
                        report.kept_blocks += 1;
                    } else {
                        report.record_lost(nsid, lba);
                    }
                    keep
                }),
                Some(zones) => {
                    let mut zone_losing: Option<usize> = None;
                    namespace.storage_mut().power_loss(|lba| {
                        let index = zones.index(lba);
                        let keep = zone_losing != Some(index) && rng.chance(keep_probability);
                        if keep {
                            report.kept_blocks += 1;
                        } else {
                            if zone_losing != Some(index) {
                                zone_losing = Some(index);
                                first_lost.push((index, lba));
                            }
                            report.record_lost(nsid, lba);
                        }
                        keep
                    });
                }
            }
            if let Some(zones) = &mut namespace.zones {
                zones.close_open_zones();
                for (index, lost_lba) in first_lost {
                    let before = zones.zone(index).wp;
                    if !zones.rewind(index, lost_lba) {
                        // Read Only or Offline: the blocks are simply gone.
                        continue;
                    }
                    report.rewound_zones.push(ZoneRewind {
                        nsid,
                        zslba: zones.zslba(index),
                        wp_before: before,
                        wp_after: zones.zone(index).wp,
                    });
                    // Nothing from the first lost block on may read as
                    // written (in a zone finished for lack of an active
                    // resource, the blocks up to its boundary neither).
                    let boundary = zones.write_boundary(index);
                    super::namespace::write(&namespace.storage).zero(lost_lba, boundary - lost_lba, true);
                }
                zones.check_invariants();
            }
        }
        self.cc = 0;
        self.aqa = 0;
        self.asq = 0;
        self.acq = 0;
        self.intms = 0;
        self.ready = false;
        self.fatal = false;
        self.shst = 0;
        self.removed = false;
        self.removal_requested = false;
        self.features = Features::new(&self.config);
        self.smart.power_cycles += 1;
        self.smart.unsafe_shutdowns += 1;
        self.stats.power_cuts += 1;
        report
    }
}
