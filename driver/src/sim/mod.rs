//! A deterministic simulated NVMe controller, with conventional (NVM
//! Command Set) and zoned (ZNS Command Set 1.1) namespaces, behind the
//! same [`Transport`] seam as real hardware: the real
//! [`crate::Controller::init`] brings it up and real
//! [`crate::QueuePair`]s drive it.
//!
//! In the manner of TigerBeetle's simulated storage: one seed
//! ([`SimConfig::seed`]) drives one PRNG behind every random choice
//! (completion delays and order, fault draws, which unflushed blocks a
//! power cut keeps), time is a tick counter advanced by
//! [`Transport::tick`] (once per queue-pair poll pass, counted per thread
//! and summed), everything has a
//! limit, and invariants are asserted.
//!
//! # Determinism and threads
//!
//! Registers, queues and the commands' checks sit behind one mutex, and
//! each namespace's media behind a lock of its own, so the driver may use
//! the simulator from several threads (each queue pair on its own). While
//! nothing could tell the difference (no fault, delay or reordering), each
//! I/O queue pair is lent to a lane of its own, where its Reads and Writes
//! run without the mutex, so queues on two threads run at once
//! (`sim/lane.rs`); otherwise a read's data moves after the mutex is let
//! go (`sim/deferred.rs`). The results are then correct but depend on how
//! the threads interleave. With one thread, the same seed, configuration
//! and sequence of driver calls give bit-identical results, lanes or not:
//! [`Simulator::trace_hash`] folds every completion posted (SQ, CID,
//! status, DW0, DW1, and the tick where completions may wait for ticks),
//! each completion queue's apart, into one number to compare runs by.
//!
//! # What the device does
//!
//! - **Registers**: CAP (MQES configurable, CQR = 1, TO, DSTRD = 0, CSS =
//!   NVM and I/O command sets, MPSMIN = MPSMAX = 0), VS, CC, CSTS (RDY
//!   follows CC.EN; SHST reports complete after CC.SHN; CFS after a fault
//!   or an enable it cannot honour), AQA, ASQ, ACQ, doorbells at `1000h +
//!   8 * qid` (SQ tail) and `+ 4` (CQ head).
//! - **Commands** are fetched and executed, in order, when the host writes
//!   an SQ tail doorbell. Each completion is posted at once, or after
//!   [`SimConfig::completion_delay_ticks`] ticks (in a seeded random order
//!   within a tick with [`SimConfig::reorder`]). A full CQ is never
//!   overwritten: completions wait for the host to move its head.
//! - **DMA**: [`Transport::map_dma`] returns IOVAs the simulator chooses
//!   ([`IOVA_BASE`] upward, a guard page between mappings), never host
//!   addresses. Every PRP is translated through that table; one outside it
//!   fails the command with Data Transfer Error (SCT 0h / SC 04h).
//!   Unmapping a live queue's memory is a driver bug the simulator answers
//!   with CSTS.CFS.
//! - **Media**: sparse 64 KiB chunks (gigabytes of virtual capacity cost
//!   nothing until written; unwritten blocks read zeroes) behind a volatile
//!   write cache (VWC = 1 by default): writes land in the cache unless FUA,
//!   reads see the cache, Flush makes everything durable.
//! - **Metadata**: a namespace may be formatted with 8, 16 or 64 bytes of
//!   metadata per block ([`NamespaceConfig::metadata_bytes`]) in a
//!   separate buffer, as QEMU 7.2's `nvme-ns` with `ms=N,mset=0,pi=0`:
//!   Identify lists QEMU's eight LBA formats, Read, Write and Zone Append
//!   move metadata through MPTR (none when MPTR is 0: a write then keeps
//!   the old metadata), Copy copies it, zeroing clears it. Each block's
//!   metadata is stored with its data and shares its fate in the cache,
//!   at Flush and at a power cut (details in `sim/io.rs`).
//!
//! # Zones (ZNS 1.1)
//!
//! Writes must start at the write pointer (else Zone Invalid Write, BCh)
//! and end by ZSLBA + ZCAP (else Zone Boundary Error, B8h); a Full zone
//! answers Zone Is Full (B9h). A write to an Empty or Closed zone opens it
//! implicitly, within the open and active limits (else Too Many Open
//! Zones, BEh, or Too Many Active Zones, BDh, as QEMU 7.2: no implicit
//! close of another zone). Finish moves the write pointer to ZSLBA + ZCAP
//! internally. Report Zones gives the Write Pointer of a Full, Read Only
//! or Offline zone as all ones: ZNS 1.1 says the field is not valid in
//! those states, and all ones is also what QEMU reports
//! ([`FullZoneWritePointer`] lets a test report another value to prove
//! the driver ignores it). Closing a zone with nothing written makes it
//! Empty (as QEMU). A controller reset or shutdown closes open zones.
//!
//! # Power cuts
//!
//! [`Simulator::power_cut`] resets the controller (queues gone, CSTS.RDY =
//! 0, CC = 0) and decides, block by block and in LBA order, whether each
//! unflushed cached block persists (probability
//! [`FaultConfig::power_cut_keep_probability`]) or is lost, its data and
//! metadata together (one draw per block); durable data stays. In a zone, blocks persist only as a prefix: the first lost block
//! loses every later one of that zone, and the write pointer moves back to
//! it (FUA writes and Flush persist the zone's whole prefix, so durable
//! data is always one). Open zones become Closed (Empty when at their
//! start); a Full zone that lost data becomes Closed again, or stays Full
//! when no active resource is free. Zone states survive the cut because the
//! simulator object does (unlike QEMU, whose zone states are not
//! persistent). The controller then waits, disabled, for the driver's next
//! bring-up.

mod admin;
mod config;
mod controller;
mod deferred;
mod dma;
mod fault;
mod io;
mod lane;
mod namespace;
mod storage;
pub mod synthetic;
mod zones;

pub use config::{
    DeallocateBehavior, FaultConfig, FullZoneWritePointer, NamespaceConfig, SimConfig, ZonedConfig,
    COMPLETION_DELAY_TICKS_MAX, COPY_BYTES_MAX, DLFEAT_READ_ZEROES, IO_QUEUE_PAIRS_MAX, METADATA_BYTES_ALLOWED,
    NAMESPACES_MAX, NAMESPACE_BYTES_MAX, ZONES_MAX,
};
pub use dma::IOVA_BASE;
pub use fault::{Fault, FaultStats, LostRange, PowerCutReport, SimStats, ZoneRewind};

use crate::error::{Error, Result};
use crate::spec::registers as reg;
use crate::spec::zns::ZoneDescriptor;
use crate::transport::{PciId, Transport};
use controller::{Clock, Padded, State};
use deferred::DmaGate;
use fault::RangeKind;
use lane::{Carried, Lane};
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use storage::Storage;
use zones::Condition;

/// A simulated NVMe controller. See the [module documentation](self).
pub struct Simulator {
    state: Mutex<State>,
    /// Per queue ID, the lane an I/O queue pair is lent to while the
    /// state is plain (`sim/lane.rs`); always locked after `state`.
    lanes: Box<[Padded<Mutex<Lane>>]>,
    /// Each namespace's storage, and what ends DMA: the state's own, for
    /// reads that move data outside its lock (`sim/deferred.rs`).
    storages: Vec<Arc<RwLock<Storage>>>,
    gate: Arc<DmaGate>,
    clock: Arc<Clock>,
    seed: u64,
    pci_id: PciId,
}

impl fmt::Debug for Simulator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Simulator")
            .field("seed", &self.seed)
            .field("pci_id", &self.pci_id)
            .field("tick", &state.clock.now())
            .field("namespaces", &state.namespaces.len())
            .finish_non_exhaustive()
    }
}

impl Simulator {
    /// A powered-on controller, disabled (CC.EN = 0) until the driver
    /// enables it. Panics on a configuration outside the simulator's limits
    /// ([`NAMESPACES_MAX`], [`ZONES_MAX`], ...) or the spec's.
    pub fn new(config: SimConfig) -> Arc<Self> {
        let seed = config.seed;
        let pci_id = config.pci_id;
        let state = State::new(config);
        let storages = state.namespaces.iter().map(|namespace| Arc::clone(&namespace.storage)).collect();
        let gate = Arc::clone(&state.gate);
        let clock = Arc::clone(&state.clock);
        let lanes = (0..state.sqs.len()).map(|_| Padded::default()).collect();
        Arc::new(Simulator { state: Mutex::new(state), lanes, storages, gate, clock, seed, pci_id })
    }

    /// The state, every queue lent to a lane called back first
    /// (`sim/lane.rs`): what everything but I/O doorbells and register
    /// reads takes.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut state = self.lock_state();
        while let Some(&qid) = state.lent.last() {
            self.call_back(&mut state, qid);
        }
        state
    }

    /// The state alone, lent queues left where they are.
    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic under the lock (a failed assertion) already failed the
        // test; keep the state reachable for its report.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lane(&self, qid: usize) -> MutexGuard<'_, Lane> {
        self.lanes[qid].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes queue `qid` back from its lane, once the lane is done with
    /// any doorbell it is carrying out.
    fn call_back(&self, state: &mut State, qid: u16) {
        let lease = self.lane(usize::from(qid)).lease.take().expect("a lent queue is in its lane");
        state.take_back(lease);
    }

    /// Calls I/O queue `qid` back if it is lent.
    fn call_back_if_lent(&self, state: &mut State, qid: usize) {
        if state.is_lent.get(qid).copied().unwrap_or(false) {
            debug_assert!(state.lent.iter().any(|&lent| usize::from(lent) == qid));
            self.call_back(state, qid as u16);
        }
    }

    /// Lends queue `qid` to its lane if the state allows it.
    fn lend(&self, state: &mut State, qid: usize) {
        let Ok(qid) = u16::try_from(qid) else { return };
        if let Some(lease) = state.lend(qid) {
            self.lane(usize::from(qid)).lease = Some(lease);
        }
    }

    /// The I/O queue and whether SQ tail (else CQ head) that a doorbell
    /// write at `offset` names, if any.
    fn io_doorbell(&self, offset: usize) -> Option<(usize, bool)> {
        let index = offset.checked_sub(reg::DOORBELL_BASE)?;
        let qid = index / 8;
        (index.is_multiple_of(4) && qid > 0 && qid < self.lanes.len()).then_some((qid, index % 8 == 0))
    }

    /// The seed of every random choice.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Ticks so far.
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// A hash of every completion posted so far (SQ, CID, status, DW0, DW1,
    /// and the tick where completions may wait for ticks; in posting order
    /// per completion queue): equal for equal runs.
    pub fn trace_hash(&self) -> u64 {
        // Each completion queue's own hash, in queue order: the same
        // whichever thread or lane posted (`sim/lane.rs`).
        let state = self.lock();
        let queues = state.traces.iter().enumerate().filter(|&(_, &trace)| trace != 0);
        queues.fold(0, |hash, (qid, &trace)| crate::prng::mix(crate::prng::mix(hash, qid as u64), trace))
    }

    /// Counters of what the simulator did so far (commands, faults injected,
    /// power cuts), for tests to check against.
    pub fn stats(&self) -> SimStats {
        let state = self.lock();
        SimStats { ticks: state.clock.now(), ..state.stats.clone() }
    }

    /// DMA mappings currently made.
    pub fn mappings(&self) -> usize {
        self.lock().dma.len()
    }

    /// Injects a fault. Panics when it names a namespace, block or zone that
    /// does not exist.
    pub fn inject(&self, fault: Fault) {
        let mut state = self.lock();
        let state = &mut *state;
        state.lane_namespaces = None;
        let check_range = |state: &State, nsid: u32, slba: u64, blocks: u64| {
            let namespace = state.namespaces.get((nsid as usize).wrapping_sub(1)).expect("no such namespace");
            assert!(namespace.check_range(slba, blocks).is_ok() && blocks > 0, "fault outside namespace {nsid}");
        };
        match fault {
            Fault::UnrecoveredRead { nsid, slba, blocks } => {
                check_range(state, nsid, slba, blocks);
                state.faults.add(RangeKind::UnrecoveredRead, nsid, slba, blocks);
            }
            Fault::ReadBitFlip { nsid, slba, blocks } => {
                check_range(state, nsid, slba, blocks);
                state.faults.add(RangeKind::ReadBitFlip, nsid, slba, blocks);
            }
            Fault::WriteFault { nsid, slba, blocks } => {
                check_range(state, nsid, slba, blocks);
                state.faults.add(RangeKind::WriteFault, nsid, slba, blocks);
            }
            Fault::HangReads { nsid, slba, blocks } => {
                check_range(state, nsid, slba, blocks);
                state.faults.add(RangeKind::HangRead, nsid, slba, blocks);
            }
            Fault::DropCompletions { count } => state.drop_io = state.drop_io.saturating_add(count),
            Fault::DropAdminCompletions { count } => state.drop_admin = state.drop_admin.saturating_add(count),
            Fault::ControllerFatal => {
                state.fatal = true;
                state.stats.faults.controller_fatal += 1;
            }
            Fault::SurpriseRemoval => {
                state.gate.end_dma(None);
                state.removed = true;
                state.stats.faults.surprise_removals += 1;
            }
            Fault::DeclineAborts => state.decline_aborts = true,
            Fault::RemovalRequested => state.removal_requested = true,
            Fault::WontDisable { function_reset_too } => {
                state.wont_disable = true;
                state.wont_function_reset = function_reset_too;
            }
            Fault::RejectOpcode { opcode } => state.rejected_opcodes[usize::from(opcode)] = true,
            Fault::PowerCutAfter { io_commands } => state.power_cut_after = Some(io_commands),
            Fault::FlushFails { after } => state.flush_fails_after = Some(after),
            Fault::MisreportAppendLba { count, skew_lbas } => state.misreport_append = (count, skew_lbas),
            Fault::ZoneReadOnly { nsid, zslba } | Fault::ZoneOffline { nsid, zslba } => {
                let condition =
                    if matches!(fault, Fault::ZoneReadOnly { .. }) { Condition::ReadOnly } else { Condition::Offline };
                let namespace = state.namespaces.get_mut((nsid as usize).wrapping_sub(1)).expect("no such namespace");
                let zones = namespace.zones.as_mut().expect("a zone fault on a namespace without zones");
                let index = zones.start(zslba).expect("ZSLBA does not start a zone");
                zones.force(index, condition);
                zones.check_invariants();
            }
        }
    }

    /// Removes every range fault, rejected opcode and pending dropped
    /// completion, and honours aborts and disables again.
    pub fn clear_faults(&self) {
        let mut state = self.lock();
        state.faults.clear();
        state.rejected_opcodes.fill(false);
        state.flush_fails_after = None;
        state.misreport_append = (0, 0);
        state.drop_io = 0;
        state.drop_admin = 0;
        state.power_cut_after = None;
        state.decline_aborts = false;
        state.wont_disable = false;
        state.wont_function_reset = false;
    }

    /// Sets the SMART / Health log's Critical Warning (NVMe Base 2.0
    /// §5.16.1.3) and, like QEMU's `smart_critical_warning` property, raises
    /// a SMART / Health asynchronous event for each newly set bit that the
    /// host enabled in Asynchronous Event Configuration (bits 7:0): the
    /// information is 02h for spare, 01h for temperature, 00h otherwise
    /// (Figure 148). Events wait for an Asynchronous Event Request; the
    /// SMART type is masked until the host reads the SMART / Health log.
    pub fn set_smart_critical_warning(&self, value: u8) {
        self.lock().set_critical_warning(value);
    }

    /// Commands hung inside the controller (executed, completion dropped).
    pub fn hung_commands(&self) -> usize {
        self.lock().hung.len()
    }

    /// Replaces the fault probabilities (say, after a clean bring-up).
    pub fn set_fault_config(&self, faults: FaultConfig) {
        let mut state = self.lock();
        let mut config = state.config.clone();
        config.faults = faults.clone();
        config.validate();
        state.fault_config = faults;
    }

    /// Flips bit `bit` (0 = the least significant bit of the block's first
    /// byte) of block `lba` where reads find it: the cached copy if the
    /// block is dirty, else the media. Silent corruption at rest.
    pub fn corrupt_at_rest(&self, nsid: u32, lba: u64, bit: u64) {
        let mut state = self.lock();
        let namespace = state.namespaces.get_mut((nsid as usize).wrapping_sub(1)).expect("no such namespace");
        assert!(lba < namespace.capacity_blocks, "LBA {lba} outside namespace {nsid}");
        namespace.storage_mut().flip_bit(lba, bit);
        state.stats.faults.corrupted_at_rest += 1;
    }

    /// Overwrites whole blocks from `lba` with `data`, on the media, with no
    /// cached copy left over them, and keeps their metadata: what a host
    /// writing a controller's backing image does (a test's "someone
    /// overwrote the disk"). Zone state is untouched. Panics outside the
    /// namespace or on a partial block.
    pub fn write_at_rest(&self, nsid: u32, lba: u64, data: &[u8]) {
        let mut state = self.lock();
        let namespace = state.namespaces.get_mut((nsid as usize).wrapping_sub(1)).expect("no such namespace");
        let block = namespace.block_size as usize;
        assert!(data.len().is_multiple_of(block), "{} bytes are not whole {block}-byte blocks", data.len());
        let blocks = (data.len() / block) as u64;
        assert!(
            lba.checked_add(blocks).is_some_and(|end| end <= namespace.capacity_blocks),
            "{blocks} blocks at LBA {lba} outside namespace {nsid}"
        );
        let mut at = 0;
        let fill = |destination: &mut [u8]| {
            destination.copy_from_slice(&data[at..at + destination.len()]);
            at += destination.len();
        };
        namespace.storage_mut().write(lba, blocks, true, fill, storage::MetadataSource::Keep);
        state.stats.faults.overwritten_at_rest_blocks += blocks;
    }

    /// Cuts the power and turns it back on: see the [module
    /// documentation](self#power-cuts). The surprise removal and fatal
    /// status of the old power cycle are gone too.
    pub fn power_cut(&self) -> PowerCutReport {
        self.lock().power_cut()
    }

    /// The report of the power cut a [`Fault::PowerCutAfter`] caused, once
    /// it has happened.
    pub fn take_power_cut(&self) -> Option<PowerCutReport> {
        self.lock().scheduled_power_cut.take()
    }

    /// Completes one held Asynchronous Event Request with DW0 = `event_type`
    /// (bits 2:0) | `information` << 8 | `log_page` << 16. False when none
    /// is outstanding.
    pub fn async_event(&self, event_type: u8, information: u8, log_page: u8) -> bool {
        self.lock().async_event(event_type, information, log_page)
    }

    /// The zones of `nsid` as Report Zones describes them.
    pub fn zones(&self, nsid: u32) -> Vec<ZoneDescriptor> {
        let state = self.lock();
        let namespace = state.namespaces.get((nsid as usize).wrapping_sub(1)).expect("no such namespace");
        let zones = namespace.zones.as_ref().expect("a namespace without zones");
        (0..zones.count()).map(|index| zones.descriptor(index)).collect()
    }

    /// Block `lba` of `nsid` as a read would return it (no faults applied).
    pub fn read_block(&self, nsid: u32, lba: u64) -> Vec<u8> {
        self.block(nsid, lba, false)
    }

    /// Block `lba` of `nsid` as the media holds it: what a power cut that
    /// loses every cached block would leave.
    pub fn durable_block(&self, nsid: u32, lba: u64) -> Vec<u8> {
        self.block(nsid, lba, true)
    }

    fn block(&self, nsid: u32, lba: u64, media_only: bool) -> Vec<u8> {
        let state = self.lock();
        let namespace = state.namespaces.get((nsid as usize).wrapping_sub(1)).expect("no such namespace");
        assert!(lba < namespace.capacity_blocks, "LBA {lba} outside namespace {nsid}");
        let block = namespace.storage().block(lba, media_only);
        block
    }

    /// Block `lba`'s metadata (MS bytes; none on a namespace without
    /// metadata) as a Read with MPTR would return it.
    pub fn read_metadata(&self, nsid: u32, lba: u64) -> Vec<u8> {
        self.metadata(nsid, lba, false)
    }

    /// Block `lba`'s metadata as the media holds it: what a power cut that
    /// loses every cached block would leave.
    pub fn durable_metadata(&self, nsid: u32, lba: u64) -> Vec<u8> {
        self.metadata(nsid, lba, true)
    }

    fn metadata(&self, nsid: u32, lba: u64, media_only: bool) -> Vec<u8> {
        let state = self.lock();
        let namespace = state.namespaces.get((nsid as usize).wrapping_sub(1)).expect("no such namespace");
        assert!(lba < namespace.capacity_blocks, "LBA {lba} outside namespace {nsid}");
        let metadata = namespace.storage().metadata(lba, media_only);
        metadata
    }

    /// Host memory `nsid`'s stored data takes (chunks of bytes, and runs of
    /// synthetic blocks): what a benchmark subtracts as the simulator's own.
    pub fn storage_bytes(&self, nsid: u32) -> u64 {
        let state = self.lock();
        let bytes =
            state.namespaces.get((nsid as usize).wrapping_sub(1)).expect("no such namespace").storage().host_bytes();
        bytes
    }

    /// Blocks of `nsid` in the write cache, not yet durable.
    pub fn dirty_blocks(&self, nsid: u32) -> u64 {
        let state = self.lock();
        let blocks =
            state.namespaces.get((nsid as usize).wrapping_sub(1)).expect("no such namespace").storage().dirty_blocks();
        blocks
    }
}

impl Transport for Simulator {
    fn read32(&self, offset: usize) -> u32 {
        // Registers only: nothing a lane holds.
        self.lock_state().read_register(offset)
    }

    /// An I/O queue's doorbell is carried out in its lane when the queue is
    /// lent (`sim/lane.rs`), else under the lock. There, a doorbell's
    /// deferred reads then move their data with the lock let go, their
    /// completions are posted under it again (`sim/deferred.rs`), and the
    /// queue is lent if the state allows.
    fn write32(&self, offset: usize, value: u32) {
        let Some((qid, sq)) = self.io_doorbell(offset) else {
            self.lock().write_register(offset, value);
            return;
        };
        {
            let mut lane = self.lane(qid);
            let carried = if sq { lane.sq_doorbell(value) } else { lane.cq_doorbell(value) };
            if carried == Carried::Whole {
                return;
            }
        }
        let mut state = self.lock_state();
        self.call_back_if_lent(&mut state, qid);
        state.defer_reads = true;
        state.write_register(offset, value);
        state.defer_reads = false;
        if !state.deferred.is_empty() {
            let batch = state.take_deferred();
            drop(state);
            let moved = self.gate.moving(&batch, || {
                // One storage lock for each run of reads of one namespace.
                for run in batch.reads.chunk_by(|a, b| a.namespace == b.namespace) {
                    let storage = namespace::read(&self.storages[run[0].namespace]);
                    run.iter().for_each(|job| job.run(&storage));
                }
            });
            state = self.lock_state();
            // Another thread ringing this queue meanwhile may have had it
            // lent: its completions go back where the batch's will.
            self.call_back_if_lent(&mut state, qid);
            state.finish_deferred(batch, moved);
        }
        self.lend(&mut state, qid);
    }

    /// A pass with no completion waiting for a tick takes no lock.
    fn tick(&self) {
        if self.clock.advance() {
            self.lock().post_due();
        }
    }

    fn removal_requested(&self) -> bool {
        self.lock_state().removal_requested
    }

    fn function_reset(&self) -> Result<()> {
        let mut state = self.lock();
        if state.removed {
            return Err(Error::DeviceGone);
        }
        state.function_reset().map_err(|why| Error::Unsupported(format!("function-level reset: {why}")))
    }

    unsafe fn map_dma(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64> {
        self.lock().dma.map(vaddr, len, true).map_err(Error::Dma)
    }

    unsafe fn map_dma_device_reads(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64> {
        self.lock().dma.map(vaddr, len, false).map_err(Error::Dma)
    }

    fn unmap_dma(&self, iova: u64, len: usize) -> Result<()> {
        // No read may be moving into the memory (`sim/deferred.rs`): the
        // lock held, none starts; those in flight finish in a copy's time.
        let mut state = self.lock();
        self.gate.unmapping();
        while !self.gate.idle() {
            drop(state);
            std::thread::yield_now();
            state = self.lock();
        }
        let unmapped = state.dma.unmap(iova, len).map_err(Error::Dma);
        self.gate.unmapped();
        state.unmapped(unmapped?);
        Ok(())
    }

    fn name(&self) -> &str {
        "sim"
    }

    fn pci_id(&self) -> PciId {
        self.pci_id
    }
}

/// `buffer` as `len` zero bytes, grown as `resize` would grow it. `fill`
/// and `extend_from_slice` are memset and memcpy even in unoptimized
/// builds, which the simulator tests are; `resize` there writes byte by
/// byte, and a zone report's buffer zeroed that way was 15% of the
/// allocator's model test.
fn zeroed(buffer: &mut Vec<u8>, len: usize) {
    static ZEROES: [u8; 4096] = [0; 4096];
    buffer.truncate(len);
    buffer.fill(0);
    while buffer.len() < len {
        let more = (len - buffer.len()).min(ZEROES.len());
        buffer.extend_from_slice(&ZEROES[..more]);
    }
}

#[cfg(test)]
mod tests;
