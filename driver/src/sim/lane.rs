//! Queues lent out of the controller's lock, so that two queue pairs on
//! two threads drive the simulator at once (`perf --sim --qpairs 2`).
//!
//! Behind the one mutex of `State`, every command of every queue is
//! fetched, checked and posted in turn: at 4 KiB two threads spent their
//! time handing that lock to each other and never ran faster than one
//! (docs/benchmarks/simulator.md, "Two pairs at 4 KiB on the simulator"). A real
//! controller fetches from its queues in parallel; so does this one when
//! nothing could tell the difference.
//!
//! # Lending
//!
//! At the end of a doorbell the state carried out, an I/O submission queue
//! whose completion queue serves it alone (as the driver's pairs do) is
//! lent, with that completion queue, to its [`Lane`]: a mutex of its own.
//! The state lends only while it is *plain*: processing, no injected fault,
//! no fault probability, no completion delay or reordering, no scheduled
//! power cut, Read and Write not rejected (`State::plain`). Its next
//! doorbells (SQ tail and CQ head) are carried out in the lane, without the
//! state's lock: each Read or Write of a conventional namespace that
//! passes every check the state would make is executed there (the data
//! moves under its namespace's storage lock, as in the state) and posted
//! at once. The first command that is anything else (another opcode, a
//! zoned namespace, a check that fails) is left at the SQ head, the queue
//! is called back, and the state carries out the rest of the doorbell as
//! before. Nothing a lane does draws from the seeded generator, so a run
//! with lanes draws what a run without draws.
//!
//! # Calling back
//!
//! Everything else that takes the state's lock first calls every lent
//! queue back (`Simulator::lock`): each lane's mutex is taken, so a lane
//! part-way through a doorbell finishes it first, and the queue, its
//! counters and its trace go back into the state. So every admin command,
//! reset, power cut, fault injection, DMA (un)mapping, and every reading of
//! stats or trace, sees the queues as if they had never left. Only two
//! things take the lock without calling back: another I/O queue's doorbell
//! (an I/O command reaches its own queue only, and storage through its
//! lock) and reads of registers. The state's lock is always taken before a
//! lane's, and a lane never waits for the state, so calling back cannot
//! deadlock.
//!
//! # What one thread sees
//!
//! The same thing, completion for completion: a lane checks in the state's
//! order, moves the data the state would move, posts with the SQ head the
//! state would report, and counts what the state would count. The trace
//! hash folds each completion queue's completions apart
//! (`State::traces`), so it is equal with lanes and without
//! (`tests/sim_determinism.rs` compares the two).

use super::controller::{fold_trace, CompletionQueue, Entry, Padded, SubmissionQueue, WAITING_COMPLETIONS_MAX};
use super::deferred::ReadJob;
use super::dma::{DmaTable, HostRange};
use super::io::{self, check_into_host, metadata_buffer, resolve_pointer};
use super::namespace;
use super::storage::Storage;
use crate::spec::command::opcode::nvm as op;
use crate::spec::command::{Command, PSDT_PRP, PSDT_SGL_MPTR_CONTIGUOUS, SQE_SIZE};
use crate::spec::status::Status;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

/// What a lane needs of one namespace: a snapshot, taken again after any
/// admin command (the state drops it, `State::lane_namespaces`), read by
/// every lane at every command (hence padded).
#[derive(Debug)]
pub(crate) struct LaneNamespace {
    pub(crate) block_size: u64,
    pub(crate) capacity_blocks: u64,
    pub(crate) metadata_bytes: u64,
    /// Zoned namespaces stay with the state (zone rules change its zones).
    pub(crate) zoned: bool,
    pub(crate) storage: Arc<RwLock<Storage>>,
}

/// Limits and settings a lane checks against, as the state would.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaneLimits {
    /// CNS 0 NN: NSIDs above are Invalid Namespace.
    pub(crate) nn: u32,
    pub(crate) max_transfer_bytes: Option<u64>,
    pub(crate) sgls: bool,
    pub(crate) volatile_write_cache: bool,
    pub(crate) metadata_dma_truncation: bool,
}

/// What a lane counted, added to the state's counters when the queue
/// comes back.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LaneCounters {
    pub(crate) reads: u64,
    pub(crate) writes: u64,
    pub(crate) lbas_read: u64,
    pub(crate) lbas_written: u64,
    pub(crate) read_bytes: u128,
    pub(crate) written_bytes: u128,
    pub(crate) sgl_transfers: u64,
}

/// A submission queue and the completion queue that serves it alone, lent
/// out of the state.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) queues: LaneQueues,
    pub(crate) work: LaneWork,
    pub(crate) namespaces: Arc<[Padded<LaneNamespace>]>,
}

/// The lent queues, and what posting to them counts.
#[derive(Debug)]
pub(crate) struct LaneQueues {
    pub(crate) sqid: u16,
    pub(crate) sq: SubmissionQueue,
    pub(crate) cq: CompletionQueue,
    /// The CQ's trace so far, folded on in the lane.
    pub(crate) trace: u64,
    pub(crate) completions_posted: u64,
    pub(crate) completions_held_cq_full: u64,
}

/// What executing commands needs and counts.
#[derive(Debug)]
pub(crate) struct LaneWork {
    pub(crate) dma: DmaTable,
    pub(crate) limits: LaneLimits,
    pub(crate) counters: LaneCounters,
}

/// The storage lock a lane holds across one doorbell's reads, so that two
/// lanes reading one namespace take its lock once per doorbell, not once
/// per command (each taking writes the lock's word: the line would move
/// between the cores at every read).
enum Held<'a> {
    Nothing,
    Read(usize, RwLockReadGuard<'a, Storage>),
}

/// One I/O queue's lane: the lease while the queue is lent, and scratch
/// kept across leases so that a lane allocates nothing per command.
#[derive(Debug, Default)]
pub(crate) struct Lane {
    pub(crate) lease: Option<Lease>,
    segments: Vec<HostRange>,
    metadata_scratch: Vec<u8>,
}

// SAFETY: the `HostRange`s inside (the rings, the segments of the command
// being carried out) point into memory the driver mapped for the device.
// A lane uses them only with its mutex held; every unmapping first calls
// every lane back, which takes that mutex, so none is in use by then and
// the lease is gone from the lane (`segments` is cleared before the mutex
// is let go). Moving a lane to another thread moves that right with it.
unsafe impl Send for Lane {}

/// Whether the lane carried a doorbell out whole, or left the rest (from
/// the SQ head) to the state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carried {
    Whole,
    ToState,
}

impl Lane {
    /// An SQ tail doorbell: executes every command from the head that the
    /// lane may; stops at the first it may not, which stays at the head.
    pub(crate) fn sq_doorbell(&mut self, value: u32) -> Carried {
        let Some(Lease { queues, work, namespaces }) = &mut self.lease else { return Carried::ToState };
        if value >= queues.sq.size {
            return Carried::ToState;
        }
        queues.sq.tail = value;
        // Acquire: the entries the host wrote before the doorbell are
        // visible from here on (as in the state's `doorbell`).
        fence(Ordering::Acquire);
        let mut held = Held::Nothing;
        let carried = loop {
            let sq = &mut queues.sq;
            if sq.head == sq.tail {
                break Carried::Whole;
            }
            let bytes = sq.ring.read_volatile::<SQE_SIZE>(sq.head as usize * SQE_SIZE);
            let command = Command::from_bytes(&bytes);
            let Some((dw0, dw1)) =
                work.execute(&command, namespaces, &mut held, &mut self.segments, &mut self.metadata_scratch)
            else {
                break Carried::ToState;
            };
            sq.head = (sq.head + 1) % sq.size;
            queues.post(&Entry { sqid: queues.sqid, cid: command.cid, status: Status::SUCCESS, dw0, dw1 });
        };
        drop(held);
        self.segments.clear();
        carried
    }

    /// A CQ head doorbell: the new head, then completions held for room.
    pub(crate) fn cq_doorbell(&mut self, value: u32) -> Carried {
        let Some(Lease { queues, .. }) = &mut self.lease else { return Carried::ToState };
        if !queues.cq.set_head(value) {
            return Carried::ToState;
        }
        while !queues.cq.is_full() {
            let Some(entry) = queues.cq.backlog.pop_front() else { break };
            queues.write(&entry);
        }
        Carried::Whole
    }
}

impl LaneWork {
    /// Executes `command` if it is a Read or Write of a conventional
    /// namespace that passes every check, as `State::io` would: `None`,
    /// with nothing changed, when it is not.
    fn execute<'a>(
        &mut self,
        command: &Command,
        namespaces: &'a [Padded<LaneNamespace>],
        held: &mut Held<'a>,
        segments: &mut Vec<HostRange>,
        metadata_scratch: &mut Vec<u8>,
    ) -> Option<(u32, u32)> {
        let psdt_ok = command.psdt() == PSDT_PRP || (command.psdt() == PSDT_SGL_MPTR_CONTIGUOUS && self.limits.sgls);
        let read = match command.opcode {
            op::READ => true,
            op::WRITE => false,
            _ => return None,
        };
        if !psdt_ok || command.fuse() != 0 || command.nsid == 0 || command.nsid > self.limits.nn {
            return None;
        }
        let index = command.nsid as usize - 1;
        let namespace = namespaces.get(index)?;
        let (slba, blocks) = (io::slba(command), io::blocks(command));
        let bytes = blocks * namespace.block_size;
        let fits = slba.checked_add(blocks).is_some_and(|end| end <= namespace.capacity_blocks);
        if namespace.zoned || !fits || self.limits.max_transfer_bytes.is_some_and(|max| bytes > max) {
            return None;
        }
        resolve_pointer(&mut self.dma, command, bytes as usize, segments).ok()?;
        check_into_host(read, segments).ok()?;
        let truncation = self.limits.metadata_dma_truncation;
        let metadata =
            metadata_buffer(&mut self.dma, command, blocks * namespace.metadata_bytes, read, truncation).ok()?;
        self.counters.sgl_transfers += u64::from(command.psdt() != PSDT_PRP);
        if read {
            let metadata = metadata.map(|buffer| (buffer, buffer.len() as u64 / namespace.metadata_bytes));
            let job = ReadJob { namespace: index, slba, blocks, segments: std::mem::take(segments), metadata };
            if !matches!(held, Held::Read(at, _) if *at == index) {
                *held = Held::Nothing;
                *held = Held::Read(index, namespace::read(&namespace.storage));
            }
            let Held::Read(_, storage) = held else { unreachable!("taken above") };
            job.run(storage);
            *segments = job.segments;
            self.counters.reads += 1;
            self.counters.lbas_read += blocks;
            self.counters.read_bytes += u128::from(bytes);
        } else {
            // Let a held read lock go before taking the write lock.
            *held = Held::Nothing;
            let durable = io::fua(command) || !self.limits.volatile_write_cache;
            let mut storage = namespace::write(&namespace.storage);
            io::store(metadata_scratch, &mut storage, slba, blocks, durable, segments, metadata);
            self.counters.writes += 1;
            self.counters.lbas_written += blocks;
            self.counters.written_bytes += u128::from(bytes);
        }
        Some((0, 0))
    }
}

impl LaneQueues {
    /// Posts at once, or behind completions held for room (as
    /// `State::post`).
    fn post(&mut self, entry: &Entry) {
        if !self.cq.backlog.is_empty() || self.cq.is_full() {
            assert!(self.cq.backlog.len() < WAITING_COMPLETIONS_MAX, "completion backlog overflow");
            self.cq.backlog.push_back(*entry);
            self.completions_held_cq_full += 1;
            return;
        }
        self.write(entry);
    }

    fn write(&mut self, entry: &Entry) {
        self.cq.write(entry, self.sq.head as u16);
        self.completions_posted += 1;
        // A lane's state is plain: completions never wait for a tick, so
        // the tick is not folded (as in `State::write_entry`).
        self.trace = fold_trace(self.trace, 0, entry);
    }
}
