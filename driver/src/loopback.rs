//! A loopback device: the queue-pair logic over plain host memory and a
//! doorbell sink, with a device side that completes whatever was submitted.
//! For micro-benchmarks and tests of the I/O path without hardware.
//!
//! DMA addresses are host virtual addresses; doorbell writes land in
//! atomics the device side reads. Completions carry success, or a status
//! the test chose, and echo the command's CDW10 in DW0.

use crate::dma::PAGE_SIZE;
use crate::error::{Error, Result};
use crate::queue::{DoorbellConfig, QueuePair, ShadowPolicy};
use crate::spec::command::Command;
use crate::spec::completion::{Completion, STATUS_WORD_OFFSET};
use crate::spec::registers::{self, sq_tail_doorbell};
use crate::spec::status::Status;
use crate::transport::{PciId, Transport};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Doorbell registers the sink records: queues 0..32.
const DOORBELL_SLOTS: usize = 64;

/// Host memory as DMA memory, and a register file that records doorbells.
#[derive(Debug)]
pub struct LoopbackTransport {
    doorbells: [AtomicU32; DOORBELL_SLOTS],
    doorbell_writes: AtomicU64,
    /// The doorbell register the last write went to, plus one (0: none).
    last_doorbell: AtomicU64,
    mappings: AtomicU64,
}

impl LoopbackTransport {
    /// A loopback transport with every doorbell at zero and no mappings.
    pub fn new() -> Arc<Self> {
        Arc::new(LoopbackTransport {
            doorbells: std::array::from_fn(|_| AtomicU32::new(0)),
            doorbell_writes: AtomicU64::new(0),
            last_doorbell: AtomicU64::new(0),
            mappings: AtomicU64::new(0),
        })
    }

    /// Doorbell register writes so far.
    pub fn doorbell_writes(&self) -> u64 {
        self.doorbell_writes.load(Ordering::Relaxed)
    }

    /// The doorbell register written last: queue `qid`'s SQ tail is
    /// `2 * qid`, its CQ head `2 * qid + 1` (a doorbell stride of 4 bytes).
    pub fn last_doorbell(&self) -> Option<usize> {
        (self.last_doorbell.load(Ordering::Relaxed) as usize).checked_sub(1)
    }

    /// DMA mappings currently made.
    pub fn mappings(&self) -> u64 {
        self.mappings.load(Ordering::Relaxed)
    }

    fn doorbell_slot(offset: usize) -> Option<usize> {
        let index = offset.checked_sub(registers::DOORBELL_BASE)? / 4;
        (index < DOORBELL_SLOTS).then_some(index)
    }
}

impl Transport for LoopbackTransport {
    fn read32(&self, offset: usize) -> u32 {
        match Self::doorbell_slot(offset) {
            Some(slot) => self.doorbells[slot].load(Ordering::Acquire),
            None => 0,
        }
    }

    fn write32(&self, offset: usize, value: u32) {
        if let Some(slot) = Self::doorbell_slot(offset) {
            self.doorbell_writes.fetch_add(1, Ordering::Relaxed);
            self.last_doorbell.store(slot as u64 + 1, Ordering::Relaxed);
            // Release: the queue entries written before the doorbell are
            // visible to whoever reads it with Acquire.
            self.doorbells[slot].store(value, Ordering::Release);
        }
    }

    unsafe fn map_dma(&self, vaddr: NonNull<u8>, _len: usize) -> Result<u64> {
        self.mappings.fetch_add(1, Ordering::Relaxed);
        Ok(vaddr.as_ptr() as u64)
    }

    fn unmap_dma(&self, _iova: u64, _len: usize) -> Result<()> {
        self.mappings.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    fn name(&self) -> &str {
        "loopback"
    }

    fn pci_id(&self) -> PciId {
        PciId { vendor: 0, device: 0, subsystem_vendor: 0, subsystem_device: 0, class: 0 }
    }
}

/// `LoopbackDevice` state shared with the queue pair's drop hook: the
/// device may touch the rings only while it holds `BUSY`.
const IDLE: u8 = 0;
const BUSY: u8 = 1;
const DETACHED: u8 = 2;

/// The device side of one loopback queue pair.
#[derive(Debug)]
pub struct LoopbackDevice {
    transport: Arc<LoopbackTransport>,
    state: Arc<AtomicU8>,
    sq: NonNull<Command>,
    cq: NonNull<Completion>,
    depth: u16,
    sq_tail_offset: usize,
    sq_head: u16,
    cq_tail: u16,
    phase: bool,
    /// The status the next completions carry.
    pub status: Status,
}

// SAFETY: the ring pointers are only dereferenced while `state` is BUSY,
// which the queue pair's drop waits out before freeing the rings.
unsafe impl Send for LoopbackDevice {}

impl LoopbackDevice {
    /// Completes every command the queue pair has published with the SQ
    /// doorbell, in order. Returns how many; 0 once the pair is gone.
    pub fn complete_all(&mut self) -> usize {
        let mut done = 0;
        // Only the two fields a completion needs are read: the host just
        // wrote the entry, and a wider read than its stores would stall on
        // store-to-load forwarding and be counted as the driver's.
        while let Some((cid, cdw10)) = self.fetch_with(|sqe| {
            let field = |offset: usize| sqe.cast::<u8>().wrapping_add(offset);
            let cid = field(std::mem::offset_of!(Command, cid)).cast::<u16>();
            let cdw10 = field(std::mem::offset_of!(Command, cdw10)).cast::<u32>();
            // SAFETY: an aligned field of the live entry `fetch_with` gives.
            let cid = unsafe { cid.read_volatile() };
            // SAFETY: as above.
            let cdw10 = unsafe { cdw10.read_volatile() };
            (cid, cdw10)
        }) {
            if !self.post(cid, self.status, cdw10) {
                break;
            }
            done += 1;
        }
        done
    }

    /// Takes the next published command off the SQ without completing it
    /// (for completing out of order, or never). `None` when the SQ is empty
    /// or the pair is gone.
    pub fn fetch(&mut self) -> Option<Command> {
        // SAFETY: `fetch_with` gives a live entry of the SQ.
        self.fetch_with(|sqe| unsafe { sqe.read_volatile() })
    }

    /// Takes the next published command off the SQ and gives what `read`
    /// reads of it: `read` gets a pointer to the entry, live and not
    /// written by the host while `read` runs.
    fn fetch_with<T>(&mut self, read: impl FnOnce(*const Command) -> T) -> Option<T> {
        if self.state.compare_exchange(IDLE, BUSY, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return None;
        }
        let tail = (self.transport.read32(self.sq_tail_offset) as u16) % self.depth;
        let command = (self.sq_head != tail).then(|| {
            // BUSY holds the rings alive; the index is < depth.
            let sqe = self.sq.as_ptr().wrapping_add(usize::from(self.sq_head));
            self.sq_head = (self.sq_head + 1) % self.depth;
            read(sqe)
        });
        self.state.store(IDLE, Ordering::Release);
        command
    }

    /// Posts a completion for `cid` with `status` and `dw0`: any `cid`, even
    /// one the host never submitted or already saw completed (a misbehaving
    /// device). The caller keeps the CQ from overflowing. `false` once the
    /// pair is gone.
    pub fn post(&mut self, cid: u16, status: Status, dw0: u32) -> bool {
        if self.state.compare_exchange(IDLE, BUSY, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        let status = Completion::status_word(status, self.phase);
        let entry = Completion { dw0, dw1: 0, sq_head: self.sq_head, sq_id: 1, cid, status };
        let slot = self.cq.as_ptr().wrapping_add(usize::from(self.cq_tail)).cast::<u8>();
        // Everything but the phase-carrying status word first, then the
        // status word, so the host never sees a half-written entry.
        let bytes = entry.to_bytes();
        for (i, byte) in bytes[..STATUS_WORD_OFFSET].iter().enumerate() {
            // SAFETY: inside the 16-byte entry at cq_tail < depth, which BUSY
            // keeps alive.
            unsafe { slot.wrapping_add(i).write_volatile(*byte) };
        }
        fence(Ordering::Release);
        let status_word = slot.wrapping_add(STATUS_WORD_OFFSET).cast::<u16>();
        // SAFETY: the status word lies inside the entry, 2-byte aligned.
        unsafe { status_word.write_volatile(entry.status) };
        self.cq_tail += 1;
        if self.cq_tail == self.depth {
            self.cq_tail = 0;
            self.phase = !self.phase;
        }
        self.state.store(IDLE, Ordering::Release);
        true
    }
}

/// A queue pair on a loopback transport, and its device side.
pub fn queue_pair(depth: u16) -> Result<(QueuePair, LoopbackDevice, Arc<LoopbackTransport>)> {
    if usize::from(depth) * std::mem::size_of::<Command>() > 16 * PAGE_SIZE * 64 {
        return Err(Error::InvalidArgument(format!("loopback depth {depth} too large")));
    }
    let transport = LoopbackTransport::new();
    let dyn_transport: Arc<dyn Transport> = transport.clone();
    let qid = 1;
    let mut pair = QueuePair::new(
        &dyn_transport,
        qid,
        depth,
        DoorbellConfig { dstrd: 0, shadow: None, policy: ShadowPolicy::Off },
    )?;
    let sq = NonNull::new(pair.sq_iova() as *mut Command).expect("mapped at a host address");
    let cq = NonNull::new(pair.cq_iova() as *mut Completion).expect("mapped at a host address");
    let state = Arc::new(AtomicU8::new(IDLE));
    let hook_state = Arc::clone(&state);
    pair.set_on_drop(Box::new(move |_| {
        // Wait out a completion pass in progress, then detach for good.
        while hook_state.compare_exchange(IDLE, DETACHED, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::hint::spin_loop();
        }
        true
    }));
    let device = LoopbackDevice {
        transport: Arc::clone(&transport),
        state,
        sq,
        cq,
        depth,
        sq_tail_offset: sq_tail_doorbell(qid, 0),
        sq_head: 0,
        cq_tail: 0,
        phase: true,
        status: Status::SUCCESS,
    };
    Ok((pair, device, transport))
}

/// Namespace `nsid` of `capacity_blocks` blocks of `block_size` bytes, no
/// metadata, on a controller with no limit but its data pointer's (no
/// MDTS, no optional commands): for benchmarks and tests that build
/// requests for the loopback device. Panics unless `block_size` is a
/// power of two from 512 to 64 KiB.
pub fn namespace(nsid: u32, capacity_blocks: u64, block_size: u32) -> crate::Namespace {
    use crate::identity::{ControllerLimits, NamespaceInfo};
    use crate::spec::identify::{IdentifyController, IdentifyNamespace};
    assert!(block_size.is_power_of_two() && (512..=65536).contains(&block_size), "block size {block_size}");
    let page = [0u8; 4096];
    let identify = IdentifyController::parse(&page).expect("an all-zero Identify Controller parses");
    let mut namespace_page = page;
    // LBA format 0: LBADS (byte 130 of the first LBAF descriptor at 128).
    namespace_page[128 + 2] = block_size.trailing_zeros() as u8;
    let limits = ControllerLimits {
        identify: &identify,
        identify_nvm: None,
        identify_zns: None,
        min_page_size: PAGE_SIZE,
        max_transfer_bytes: None,
        data_pointer_max_bytes: crate::queue::prp::MAX_TRANSFER_BYTES,
        quirks: crate::Quirks::empty(),
        cross_namespace_copy: false,
    };
    let info = NamespaceInfo {
        nsid,
        csi: 0,
        block_size,
        capacity_blocks,
        identify: IdentifyNamespace::parse(&namespace_page).expect("an Identify Namespace of one LBA format parses"),
        zoned: None,
    };
    crate::Namespace::new(&limits, &info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::nvm;
    use crate::dma::{DmaMemory, DmaPool};
    use crate::queue::{IoBuffer, Request, SubmitError};
    use crate::spec::status::{GenericStatus, StatusCode};

    fn flush(token: u64) -> Request {
        Request { command: nvm::flush(1), buffer: None, metadata: None, token }
    }

    #[test]
    fn completions_carry_tokens_in_order_and_doorbells_batch() {
        let (mut pair, mut device, transport) = queue_pair(8).unwrap();
        assert_eq!(pair.capacity(), 7);
        for token in 0..5 {
            pair.submit(flush(100 + token)).unwrap();
        }
        assert_eq!(transport.doorbell_writes(), 0, "submit only queues");
        pair.ring();
        assert_eq!(transport.doorbell_writes(), 1, "one SQ doorbell for the batch");
        assert_eq!(device.complete_all(), 5);
        let mut tokens = Vec::new();
        assert_eq!(pair.poll(|c| tokens.push((c.token, c.status))), 5);
        assert_eq!(tokens.iter().map(|t| t.0).collect::<Vec<_>>(), vec![100, 101, 102, 103, 104]);
        assert!(tokens.iter().all(|t| t.1.is_ok()));
        assert_eq!(transport.doorbell_writes(), 2, "one CQ doorbell for the pass");
        assert_eq!(pair.in_flight(), 0);
    }

    #[test]
    fn a_loopback_namespace_checks_requests_and_reads_go_again_in_place() {
        let ns = namespace(3, 1 << 10, 4096);
        assert_eq!((ns.nsid(), ns.block_size(), ns.capacity_blocks(), ns.metadata()), (3, 4096, 1 << 10, None));
        let (mut pair, mut device, transport) = queue_pair(8).unwrap();
        let transport: Arc<dyn Transport> = transport;
        let pool = DmaPool::new(&transport, 8192, 1).unwrap();
        assert!(ns.read(1023, IoBuffer::new(pool.get().unwrap()), 0).is_err(), "two blocks from the last");
        pair.submit(ns.read(1022, IoBuffer::new(pool.get().unwrap()), 0).unwrap()).unwrap();
        for lba in [0, 512, 1022] {
            pair.ring();
            assert_eq!(device.complete_all(), 1);
            // The loopback echoes CDW10 (the LBA's low half) in DW0.
            assert_eq!(pair.poll_in_place(|done| done.read(&ns, lba, lba).unwrap()), 1);
        }
        pair.ring();
        device.complete_all();
        pair.poll_in_place(|done| assert_eq!((done.token(), done.result_u64()), (1022, 1022)));
        assert_eq!(pool.available(), 1);
    }

    #[test]
    fn a_pass_publishes_what_its_callbacks_sent_with_one_doorbell() {
        let ns = namespace(1, 1 << 10, 512);
        let (mut pair, mut device, transport) = queue_pair(8).unwrap();
        let dyn_transport: Arc<dyn Transport> = transport.clone();
        let pool = DmaPool::new(&dyn_transport, 4096, 3).unwrap();
        for token in 0..3 {
            pair.submit(ns.read(8 * token, IoBuffer::new(pool.get().unwrap()), token).unwrap()).unwrap();
        }
        pair.ring();
        assert_eq!(device.complete_all(), 3);
        let before = transport.doorbell_writes();
        // Each completion goes again in place; one more as a new request.
        let sent = pair.poll_in_place(|done| {
            if done.token() == 2 {
                let (completion, mut pair) = done.complete();
                pair.submit(ns.read(64, completion.buffer.unwrap(), 12).unwrap()).unwrap();
            } else {
                let token = done.token() + 10;
                done.read(&ns, 32, token).unwrap();
            }
        });
        assert_eq!(sent, 3);
        // No `ring()`: the pass published all three itself, with one SQ
        // doorbell update; the CQ head went too (3 entries consumed, and a
        // queue of 8 announces them 2 at a time).
        assert_eq!(transport.doorbell_writes() - before, 2, "one SQ and one CQ doorbell update");
        // The CQ head first, the SQ tail last, as SPDK orders them: the
        // write that sets the device to work ends the pass.
        assert_eq!(transport.last_doorbell(), Some(2 * usize::from(pair.qid())), "the SQ tail doorbell last");
        assert_eq!(device.complete_all(), 3, "the device sees every command sent from the callback");
        let mut tokens = Vec::new();
        pair.poll(|c| tokens.push(c.token));
        assert_eq!(tokens, [10, 11, 12]);
        // A pass that finds nothing rings nothing.
        let before = transport.doorbell_writes();
        assert_eq!(pair.poll(|_| unreachable!()), 0);
        assert_eq!(transport.doorbell_writes(), before);
    }

    #[test]
    fn a_full_queue_hands_the_request_back() {
        let (mut pair, mut device, _) = queue_pair(4).unwrap();
        for token in 0..3 {
            pair.submit(flush(token)).unwrap();
        }
        let (error, request) = pair.submit(flush(99)).unwrap_err();
        assert_eq!(error, SubmitError::QueueFull);
        assert_eq!(request.token, 99);
        pair.ring();
        device.complete_all();
        assert_eq!(pair.poll(|_| {}), 3);
        pair.submit(request).unwrap();
    }

    #[test]
    fn wraps_the_rings_many_times_and_flips_phase() {
        let (mut pair, mut device, _) = queue_pair(4).unwrap();
        let mut seen = 0u64;
        for round in 0..1000u64 {
            let n = 1 + round % 3;
            for i in 0..n {
                pair.submit(flush(round * 10 + i)).unwrap();
            }
            pair.ring();
            assert_eq!(device.complete_all() as u64, n);
            pair.poll(|c| {
                assert_eq!(c.token / 10, round);
                seen += 1;
            });
        }
        assert_eq!(seen, (0..1000u64).map(|r| 1 + r % 3).sum::<u64>());
    }

    #[test]
    fn error_status_and_buffers_come_back() {
        let (mut pair, mut device, transport) = queue_pair(8).unwrap();
        let transport: Arc<dyn Transport> = transport;
        let pool = DmaPool::new(&transport, 4096, 2).unwrap();
        let buffer = pool.get().unwrap();
        buffer.write::<u64>(0, 0xfeed);
        let request =
            Request { command: nvm::read(1, 7, 8), buffer: Some(IoBuffer::new(buffer)), metadata: None, token: 1 };
        pair.submit(request).unwrap();
        device.status = Status::from(GenericStatus::LbaOutOfRange).with_dnr();
        pair.ring();
        device.complete_all();
        let mut got = None;
        pair.poll(|c| got = Some(c));
        let completion = got.unwrap();
        let status = completion.device_status().unwrap();
        assert_eq!(status.code(), StatusCode::Generic(GenericStatus::LbaOutOfRange));
        assert!(status.dnr);
        assert_eq!(completion.dw0, 7, "echoes SLBA (CDW10)");
        let buffer = completion.buffer.unwrap();
        assert_eq!(buffer.buffer().read::<u64>(0), 0xfeed);
        assert_eq!(pool.available(), 1);
    }

    #[test]
    fn unrepresentable_buffers_are_refused_without_touching_the_queue() {
        let (mut pair, _device, transport) = queue_pair(8).unwrap();
        let dyn_transport: Arc<dyn Transport> = transport.clone();
        let pool = DmaPool::new(&dyn_transport, 4096, 1).unwrap();
        let misaligned = IoBuffer::range(pool.get().unwrap(), 2, 512);
        let request = Request { command: nvm::read(1, 0, 1), buffer: Some(misaligned), metadata: None, token: 5 };
        let (error, request) = pair.submit(request).unwrap_err();
        assert!(matches!(error, SubmitError::Buffer(_)));
        assert!(request.buffer.is_some(), "the buffer comes back with the request");
        pair.ring();
        assert_eq!(transport.doorbell_writes(), 0);
        assert_eq!(pair.in_flight(), 0);
    }

    #[test]
    fn a_metadata_buffer_rides_in_mptr_and_comes_back() {
        let (mut pair, mut device, transport) = queue_pair(8).unwrap();
        let transport: Arc<dyn Transport> = transport;
        let pool = DmaPool::new(&transport, 4096, 2).unwrap();
        let metadata = IoBuffer::range(pool.get().unwrap(), 64, 64);
        let mptr = metadata.iova();
        let data = Some(IoBuffer::new(pool.get().unwrap()));
        let request = Request { command: nvm::read(1, 0, 8), buffer: data, metadata: Some(metadata), token: 3 };
        pair.submit(request).unwrap();
        pair.ring();
        let command = device.fetch().unwrap();
        assert_eq!(command.mptr, mptr);
        assert_eq!(command.psdt(), 0, "PRPs, MPTR a contiguous buffer");
        assert!(device.post(command.cid, Status::SUCCESS, 0));
        let mut got = None;
        pair.poll(|c| got = Some(c));
        let completion = got.unwrap();
        assert!(completion.status.is_ok());
        assert_eq!(completion.metadata.map(|m| (m.offset(), m.len())), Some((64, 64)));
        assert!(completion.buffer.is_some());

        let misaligned = IoBuffer::range(pool.get().unwrap(), 2, 8);
        let request = Request { command: nvm::read(1, 0, 1), buffer: None, metadata: Some(misaligned), token: 4 };
        let (error, request) = pair.submit(request).unwrap_err();
        assert!(matches!(error, SubmitError::Buffer(crate::queue::prp::PrpError::Misaligned { .. })));
        assert!(request.metadata.is_some(), "the metadata buffer comes back with the request");
        assert_eq!(pair.in_flight(), 0);
    }

    #[test]
    fn dropping_the_pair_detaches_the_device_and_frees_memory() {
        let (pair, mut device, transport) = queue_pair(8).unwrap();
        assert_eq!(transport.mappings(), 1, "one region: SQ, CQ and PRP lists");
        drop(pair);
        assert_eq!(transport.mappings(), 0);
        assert_eq!(device.complete_all(), 0);
    }
}
