//! Unit tests of the simulator through raw queues: what the driver never
//! does (a CQ smaller than its SQ, chained PRP lists, bad queue requests,
//! unmapping a live ring) but a device must still handle. Namespaces with
//! metadata have their own file, `tests/metadata.rs`.

mod metadata;

use super::dma::tests::TestMemory;
use super::dma::PAGE_SIZE;
use super::*;
use crate::cmd::{admin, nvm};
use crate::spec::command::{opcode, Command};
use crate::spec::completion::Completion;
use crate::spec::registers::{self as reg, Aqa, Cap, Cc, Csts, CC_CSS_ALL_IO};
use crate::spec::status::{CommandSpecificStatus, GenericStatus, Status, StatusCode};

const PAGE: u64 = PAGE_SIZE as u64;

/// A host with `pages` pages of DMA memory mapped at `iova`, and the
/// simulator's admin queue in pages 0 (SQ) and 1 (CQ).
struct Host {
    sim: Arc<Simulator>,
    memory: TestMemory,
    iova: u64,
    pages: usize,
    admin_sq: RawSq,
    admin_cq: RawCq,
}

struct RawSq {
    qid: u16,
    page: usize,
    size: u16,
    tail: u16,
}

struct RawCq {
    qid: u16,
    page: usize,
    size: u16,
    head: u16,
    phase: bool,
}

const ADMIN_ENTRIES: u16 = 16;

impl Host {
    fn new(config: SimConfig, pages: usize) -> Self {
        let sim = Simulator::new(config);
        let memory = TestMemory::new(pages);
        // SAFETY: `memory` stays allocated until `Host` drops, which unmaps
        // it first; the test reaches it only through raw pointers.
        let iova = unsafe { sim.map_dma(memory.ptr(), pages * PAGE_SIZE) }.unwrap();
        let admin_sq = RawSq { qid: 0, page: 0, size: ADMIN_ENTRIES, tail: 0 };
        let admin_cq = RawCq { qid: 0, page: 1, size: ADMIN_ENTRIES, head: 0, phase: true };
        Host { sim, memory, iova, pages, admin_sq, admin_cq }
    }

    fn enabled(config: SimConfig, pages: usize) -> Self {
        let host = Host::new(config, pages);
        host.sim.write32(reg::AQA, Aqa::new(ADMIN_ENTRIES, ADMIN_ENTRIES).0);
        host.sim.write64(reg::ASQ, host.page(0));
        host.sim.write64(reg::ACQ, host.page(1));
        host.sim.write32(reg::CC, host.cc().0);
        assert!(Csts(host.sim.read32(reg::CSTS)).rdy());
        host
    }

    fn cc(&self) -> Cc {
        Cc::new().with_css(CC_CSS_ALL_IO).with_iosqes(6).with_iocqes(4).with_enable(true)
    }

    fn page(&self, page: usize) -> u64 {
        assert!(page < self.pages);
        self.iova + page as u64 * PAGE
    }

    fn push(&self, sq: &mut RawSq, command: Command) {
        let offset = sq.page * PAGE_SIZE + usize::from(sq.tail) * 64;
        self.memory.all().put(offset, &command.to_bytes());
        sq.tail = (sq.tail + 1) % sq.size;
    }

    fn ring(&self, sq: &RawSq) {
        self.sim.write32(reg::sq_tail_doorbell(sq.qid, 0), u32::from(sq.tail));
    }

    /// Every new completion in `cq`, then its head doorbell.
    fn reap(&self, cq: &mut RawCq) -> Vec<Completion> {
        let mut out = Vec::new();
        loop {
            let offset = cq.page * PAGE_SIZE + usize::from(cq.head) * 16;
            let entry = Completion::from_bytes(&self.memory.all().read_volatile::<16>(offset));
            if entry.phase() != cq.phase {
                break;
            }
            out.push(entry);
            cq.head = (cq.head + 1) % cq.size;
            if cq.head == 0 {
                cq.phase = !cq.phase;
            }
        }
        if !out.is_empty() {
            self.sim.write32(reg::cq_head_doorbell(cq.qid, 0), u32::from(cq.head));
        }
        out
    }

    /// Runs one admin command and returns its completion.
    fn admin(&mut self, command: Command) -> Completion {
        let mut sq = std::mem::replace(&mut self.admin_sq, RawSq { qid: 0, page: 0, size: 1, tail: 0 });
        self.push(&mut sq, command);
        self.ring(&sq);
        self.admin_sq = sq;
        let mut cq = std::mem::replace(&mut self.admin_cq, RawCq { qid: 0, page: 1, size: 1, head: 0, phase: true });
        let mut done = self.reap(&mut cq);
        self.admin_cq = cq;
        assert_eq!(done.len(), 1, "one admin completion");
        done.remove(0)
    }

    fn admin_status(&mut self, command: Command) -> Result<(), Status> {
        let completion = self.admin(command);
        if completion.is_success() {
            Ok(())
        } else {
            Err(completion.status())
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.sim.unmap_dma(self.iova, self.pages * PAGE_SIZE);
    }
}

fn specific(code: CommandSpecificStatus) -> StatusCode {
    StatusCode::CommandSpecific(code)
}

fn generic(code: GenericStatus) -> StatusCode {
    StatusCode::Generic(code)
}

#[test]
fn registers_read_back_and_csts_follows_cc() {
    let host = Host::new(SimConfig::default(), 4);
    let sim = &host.sim;
    let cap = Cap(sim.read64(reg::CAP));
    assert_eq!((cap.mqes(), cap.cqr(), cap.to_500ms(), cap.dstrd()), (0x7FF, true, 15, 0));
    assert_eq!(cap.css(), reg::CapCss::NVM | reg::CapCss::IO_COMMAND_SETS);
    assert_eq!((cap.mpsmin(), cap.mpsmax()), (0, 0));
    assert_eq!(sim.read32(reg::VS), reg::Vs::V1_4.0);
    sim.write32(reg::INTMS, 0b101);
    sim.write32(reg::INTMC, 0b001);
    assert_eq!(sim.read32(reg::INTMS), 0b100);
    sim.write64(reg::ASQ, 0x1234_5678_9000);
    assert_eq!(sim.read64(reg::ASQ), 0x1234_5678_9000);
    assert_eq!(sim.read32(0x50), 0, "reserved registers read 0");
    assert!(!Csts(sim.read32(reg::CSTS)).rdy());
    // Enabling with an unmapped admin queue: controller fatal status.
    sim.write32(reg::AQA, Aqa::new(4, 4).0);
    sim.write32(reg::CC, host.cc().0);
    let csts = Csts(sim.read32(reg::CSTS));
    assert!(csts.cfs() && !csts.rdy());
    // A reset clears it; a good configuration then enables.
    sim.write32(reg::CC, 0);
    assert!(!Csts(sim.read32(reg::CSTS)).cfs());
    sim.write64(reg::ASQ, host.page(0));
    sim.write64(reg::ACQ, host.page(1));
    sim.write32(reg::CC, host.cc().with_mps(1).0);
    assert!(Csts(sim.read32(reg::CSTS)).cfs(), "8 KiB pages are not offered");
    sim.write32(reg::CC, 0);
    sim.write32(reg::CC, host.cc().0);
    assert!(Csts(sim.read32(reg::CSTS)).rdy());
    // Shutdown notification, then its status.
    sim.write32(reg::CC, host.cc().with_shn(reg::Shn::Normal).0);
    assert_eq!(Csts(sim.read32(reg::CSTS)).shst(), reg::ShutdownStatus::Complete);
}

#[test]
fn completions_wait_for_room_in_a_small_cq() {
    let mut host = Host::enabled(SimConfig::default(), 8);
    // An I/O CQ of 4 entries (3 usable) under an SQ of 16.
    host.admin_status(admin::create_io_cq(1, 4, host.page(2), true, false, 0)).unwrap();
    host.admin_status(admin::create_io_sq(1, 16, host.page(3), 1, 0)).unwrap();
    let mut sq = RawSq { qid: 1, page: 3, size: 16, tail: 0 };
    let mut cq = RawCq { qid: 1, page: 2, size: 4, head: 0, phase: true };
    for cid in 0..10 {
        host.push(&mut sq, Command { cid, ..nvm::flush(1) });
    }
    host.ring(&sq);
    let mut cids = Vec::new();
    let mut sq_head = 0;
    for _ in 0..4 {
        let done = host.reap(&mut cq);
        assert!(done.len() <= 3, "never more than the CQ holds");
        for entry in done {
            assert_eq!(entry.sq_id, 1);
            // The SQ head when the entry was written: the first three went
            // out while the SQ was being fetched, the rest after.
            assert!(entry.sq_head > entry.cid && entry.sq_head >= sq_head);
            sq_head = entry.sq_head;
            cids.push(entry.cid);
        }
    }
    assert_eq!(sq_head, 10);
    assert_eq!(cids, (0..10).collect::<Vec<_>>(), "in order, none lost, none twice");
    assert_eq!(host.sim.stats().completions_posted, 2 + 10);
}

#[test]
fn bad_doorbells_are_ignored_and_counted() {
    let host = Host::enabled(SimConfig::default(), 4);
    host.sim.write32(reg::sq_tail_doorbell(5, 0), 1);
    host.sim.write32(reg::sq_tail_doorbell(0, 0), u32::from(ADMIN_ENTRIES));
    host.sim.write32(reg::cq_head_doorbell(0, 0), 3);
    assert_eq!(host.sim.stats().doorbell_errors, 3);
    assert_eq!(host.sim.stats().completions_posted, 0);
}

#[test]
fn queue_requests_are_checked() {
    let mut host = Host::enabled(SimConfig { mqes: 63, ..SimConfig::default() }, 8);
    let (p2, p3, p4) = (host.page(2), host.page(3), host.page(4));
    let status = |host: &mut Host, command| host.admin_status(command).unwrap_err().code();
    let cq = |qid, entries, prp| admin::create_io_cq(qid, entries, prp, true, false, 0);
    let admin_qid = Command { cdw10: 3 << 16, ..cq(1, 4, p2) };
    assert_eq!(status(&mut host, admin_qid), specific(CommandSpecificStatus::InvalidQueueIdentifier));
    assert_eq!(status(&mut host, cq(65, 4, p2)), specific(CommandSpecificStatus::InvalidQueueIdentifier));
    assert_eq!(status(&mut host, cq(1, 65, p2)), specific(CommandSpecificStatus::InvalidQueueSize));
    assert_eq!(status(&mut host, cq(1, 4, p2 + 64)), generic(GenericStatus::PrpOffsetInvalid));
    assert_eq!(status(&mut host, cq(1, 4, 0x2000)), generic(GenericStatus::DataTransferError));
    let scattered = admin::create_io_cq(1, 4, p2, false, false, 0);
    assert_eq!(status(&mut host, scattered), generic(GenericStatus::InvalidFieldInCommand), "CAP.CQR");
    assert_eq!(
        status(&mut host, admin::create_io_sq(1, 4, p3, 1, 0)),
        specific(CommandSpecificStatus::CompletionQueueInvalid)
    );
    host.admin_status(cq(1, 4, p2)).unwrap();
    assert_eq!(status(&mut host, cq(1, 4, p4)), specific(CommandSpecificStatus::InvalidQueueIdentifier));
    host.admin_status(admin::create_io_sq(1, 4, p3, 1, 0)).unwrap();
    assert_eq!(status(&mut host, admin::delete_io_cq(1)), specific(CommandSpecificStatus::InvalidQueueDeletion));
    assert_eq!(status(&mut host, admin::delete_io_sq(2)), specific(CommandSpecificStatus::InvalidQueueIdentifier));
    host.admin_status(admin::delete_io_sq(1)).unwrap();
    host.admin_status(admin::delete_io_cq(1)).unwrap();
    // Set Features Number of Queues limits the QIDs that follow.
    let granted = host.admin(admin::set_number_of_queues(2, 2));
    assert_eq!(admin::NumberOfQueues::from_dw0(granted.dw0), (2, 2));
    assert_eq!(status(&mut host, cq(3, 4, p2)), specific(CommandSpecificStatus::InvalidQueueIdentifier));
}

#[test]
fn deleting_an_sq_aborts_its_waiting_completions() {
    let mut host = Host::enabled(SimConfig::default().with_completion_delay(10, 10), 8);
    // Admin completions are delayed too: tick them out.
    let run = |host: &mut Host, command: Command| {
        host.push_admin(command);
        for _ in 0..10 {
            host.sim.tick();
        }
        let done = host.reap_admin();
        assert!(done.len() == 1 && done[0].is_success());
    };
    let (cq_page, sq_page) = (host.page(2), host.page(3));
    run(&mut host, admin::create_io_cq(1, 8, cq_page, true, false, 0));
    run(&mut host, admin::create_io_sq(1, 8, sq_page, 1, 0));
    let mut sq = RawSq { qid: 1, page: 3, size: 8, tail: 0 };
    for cid in 0..3 {
        host.push(&mut sq, Command { cid, ..nvm::flush(1) });
    }
    host.ring(&sq);
    host.push_admin(admin::delete_io_sq(1));
    let mut cq = RawCq { qid: 1, page: 2, size: 8, head: 0, phase: true };
    let aborted = host.reap(&mut cq);
    assert_eq!(aborted.len(), 3, "posted at the deletion, not after the delay");
    assert!(aborted.iter().all(|entry| entry.status().code() == generic(GenericStatus::AbortedSqDeletion)));
}

#[test]
fn unmapping_a_live_ring_is_fatal() {
    let mut host = Host::enabled(SimConfig::default(), 4);
    let other = TestMemory::new(1);
    // SAFETY: `other` outlives its mapping (unmapped below).
    let iova = unsafe { host.sim.map_dma(other.ptr(), PAGE_SIZE) }.unwrap();
    host.admin_status(admin::create_io_cq(1, 8, iova, true, false, 0)).unwrap();
    host.sim.unmap_dma(iova, PAGE_SIZE).unwrap();
    assert!(Csts(host.sim.read32(reg::CSTS)).cfs());
    assert!(host.sim.unmap_dma(iova, PAGE_SIZE).is_err(), "already unmapped");
    assert_eq!(host.sim.mappings(), 1);
}

#[test]
fn async_event_requests_wait_for_an_event() {
    let mut host = Host::enabled(SimConfig::default(), 4);
    for cid in 0..4 {
        host.push_admin(Command { cid, ..admin::async_event_request() });
    }
    assert!(host.reap_admin().is_empty(), "held until an event");
    let refused = host.admin(Command { cid: 9, ..admin::async_event_request() });
    assert_eq!(refused.status().code(), specific(CommandSpecificStatus::AsyncEventRequestLimitExceeded));
    assert!(host.sim.async_event(1, 2, 0x02));
    let done = host.reap_admin();
    assert_eq!((done.len(), done[0].cid, done[0].dw0), (1, 0, 0x0002_0201));
    // A reset drops the rest.
    host.sim.write32(reg::CC, 0);
    assert!(!host.sim.async_event(1, 0, 0));
}

#[test]
fn abort_ends_a_hung_command_and_declines_the_rest() {
    let mut host = Host::enabled(SimConfig::default(), 8);
    let (cq_page, sq_page) = (host.page(2), host.page(3));
    host.admin_status(admin::create_io_cq(1, 8, cq_page, true, false, 0)).unwrap();
    host.admin_status(admin::create_io_sq(1, 8, sq_page, 1, 0)).unwrap();
    let mut sq = RawSq { qid: 1, page: 3, size: 8, tail: 0 };
    let mut cq = RawCq { qid: 1, page: 2, size: 8, head: 0, phase: true };
    host.sim.inject(Fault::DropCompletions { count: 1 });
    host.push(&mut sq, Command { cid: 5, ..nvm::flush(1) });
    host.push(&mut sq, Command { cid: 6, ..nvm::flush(1) });
    host.ring(&sq);
    let done = host.reap(&mut cq);
    assert_eq!((done.len(), done[0].cid), (1, 6), "cid 5 hangs");
    assert_eq!(host.sim.hung_commands(), 1);
    // NVMe Base 2.0 §5.1: a command already completed is not aborted
    // (DW0 bit 0 set); a hung one is, and completes with Command Abort
    // Requested on its own CQ.
    assert_eq!(host.admin(admin::abort(1, 6)).dw0 & 1, 1);
    let abort = host.admin(admin::abort(1, 5));
    assert!(abort.is_success() && abort.dw0 & 1 == 0);
    let done = host.reap(&mut cq);
    assert_eq!((done.len(), done[0].cid), (1, 5));
    assert_eq!(done[0].status().code(), generic(GenericStatus::CommandAbortRequested));
    assert_eq!(host.sim.stats().faults.aborted_commands, 1);
    assert_eq!(host.admin(admin::abort(1, 5)).dw0 & 1, 1, "only once");
    assert_eq!(
        host.admin_status(admin::abort(7, 0)).unwrap_err().code(),
        generic(GenericStatus::InvalidFieldInCommand)
    );
    // Declined aborts leave it hung; a reset discards it.
    host.sim.inject(Fault::DeclineAborts);
    host.sim.inject(Fault::DropCompletions { count: 1 });
    host.push(&mut sq, Command { cid: 1, ..nvm::flush(1) });
    host.ring(&sq);
    assert_eq!(host.admin(admin::abort(1, 1)).dw0 & 1, 1);
    assert!(host.reap(&mut cq).is_empty());
    host.sim.write32(reg::CC, 0);
    assert_eq!(host.sim.hung_commands(), 0);
}

#[test]
fn hung_reads_hold_only_reads_of_their_blocks_until_an_abort() {
    let mut host = Host::enabled(SimConfig::nvm(1 << 12, 4096), 16);
    host.admin_status(admin::create_io_cq(1, 8, host.page(2), true, false, 0)).unwrap();
    host.admin_status(admin::create_io_sq(1, 8, host.page(3), 1, 0)).unwrap();
    let mut sq = RawSq { qid: 1, page: 3, size: 8, tail: 0 };
    let mut cq = RawCq { qid: 1, page: 2, size: 8, head: 0, phase: true };
    host.sim.inject(Fault::HangReads { nsid: 1, slba: 10, blocks: 2 });
    // A read touching block 11 hangs; one beside the range, and a write
    // over it, complete.
    host.push(&mut sq, Command { cid: 1, prp1: host.page(4), ..nvm::read(1, 11, 1) });
    host.push(&mut sq, Command { cid: 2, prp1: host.page(5), ..nvm::read(1, 12, 1) });
    host.push(&mut sq, Command { cid: 3, prp1: host.page(6), ..nvm::write(1, 10, 1, true) });
    host.push(&mut sq, Command { cid: 4, prp1: host.page(7), ..nvm::read(1, 8, 2) });
    host.ring(&sq);
    let mut done: Vec<u16> = host.reap(&mut cq).iter().map(|c| c.cid).collect();
    done.sort_unstable();
    assert_eq!(done, [2, 3, 4]);
    assert_eq!(host.sim.hung_commands(), 1);
    let abort = host.admin(admin::abort(1, 1));
    assert!(abort.is_success() && abort.dw0 & 1 == 0);
    let done = host.reap(&mut cq);
    assert_eq!((done.len(), done[0].cid), (1, 1));
    assert_eq!(done[0].status().code(), generic(GenericStatus::CommandAbortRequested));
    // Cleared, the same read completes.
    host.sim.clear_faults();
    host.push(&mut sq, Command { cid: 5, prp1: host.page(4), ..nvm::read(1, 11, 1) });
    host.ring(&sq);
    let done = host.reap(&mut cq);
    assert!(done.len() == 1 && done[0].cid == 5 && done[0].is_success());
}

#[test]
fn smart_warnings_wait_for_a_request_and_stay_masked_until_the_log_is_read() {
    let mut host = Host::enabled(SimConfig::default(), 4);
    // Only warnings enabled in Asynchronous Event Configuration raise one.
    host.sim.set_smart_critical_warning(0b10);
    host.push_admin(Command { cid: 1, ..admin::async_event_request() });
    assert!(host.reap_admin().is_empty());
    host.sim.set_smart_critical_warning(0);
    host.admin_status(admin::set_features(admin::FID_ASYNC_EVENT_CONFIG, 0xFF, false)).unwrap();
    host.sim.set_smart_critical_warning(0b10);
    let done = host.reap_admin();
    assert_eq!((done.len(), done[0].cid, done[0].dw0), (1, 1, 0x0002_0101), "temperature, SMART log");
    // Masked until the SMART log is read: the next warning waits.
    host.push_admin(Command { cid: 2, ..admin::async_event_request() });
    host.sim.set_smart_critical_warning(0b11);
    assert!(host.reap_admin().is_empty());
    let log = host.page(3);
    host.push_admin(Command { cid: 3, ..admin::get_log_page(0x02, 0xFFFF_FFFF, 512, 0, log, 0) });
    let done = host.reap_admin();
    assert_eq!(done.len(), 2, "the log page and the event it unmasked");
    assert!(done.iter().any(|c| c.cid == 3 && c.is_success()));
    let event = done.iter().find(|c| c.cid == 2).expect("the event");
    assert_eq!(event.dw0, 0x0002_0201, "spare, once the log was read");
}

impl Host {
    fn push_admin(&mut self, command: Command) {
        let mut sq = std::mem::replace(&mut self.admin_sq, RawSq { qid: 0, page: 0, size: 1, tail: 0 });
        self.push(&mut sq, command);
        self.ring(&sq);
        self.admin_sq = sq;
    }

    fn reap_admin(&mut self) -> Vec<Completion> {
        let mut cq = std::mem::replace(&mut self.admin_cq, RawCq { qid: 0, page: 1, size: 1, head: 0, phase: true });
        let done = self.reap(&mut cq);
        self.admin_cq = cq;
        done
    }
}

#[test]
fn reads_follow_chained_prp_lists() {
    let mut host = Host::enabled(SimConfig::nvm(1 << 12, 4096), 16);
    host.admin_status(admin::create_io_cq(1, 8, host.page(2), true, false, 0)).unwrap();
    host.admin_status(admin::create_io_sq(1, 8, host.page(3), 1, 0)).unwrap();
    // Write 4 blocks from pages 4..8 (a plain list in page 8).
    let memory = host.memory.all();
    for (i, byte) in [0xA1u8, 0xB2, 0xC3, 0xD4].iter().enumerate() {
        memory.put((4 + i) * PAGE_SIZE, &[*byte; PAGE_SIZE]);
    }
    for i in 0..3 {
        memory.put(8 * PAGE_SIZE + i * 8, &host.page(5 + i).to_le_bytes());
    }
    let mut sq = RawSq { qid: 1, page: 3, size: 8, tail: 0 };
    let mut cq = RawCq { qid: 1, page: 2, size: 8, head: 0, phase: true };
    host.push(&mut sq, Command { cid: 1, prp1: host.page(4), prp2: host.page(8), ..nvm::write(1, 0, 4, true) });
    host.ring(&sq);
    assert!(host.reap(&mut cq)[0].is_success());
    // Read them back into pages 10..14 through a list that starts in the
    // last slot but one of page 9 and chains to page 15.
    let list = 9 * PAGE_SIZE + PAGE_SIZE - 16;
    memory.put(list, &host.page(11).to_le_bytes());
    memory.put(list + 8, &host.page(15).to_le_bytes());
    memory.put(15 * PAGE_SIZE, &host.page(12).to_le_bytes());
    memory.put(15 * PAGE_SIZE + 8, &host.page(13).to_le_bytes());
    let prp2 = host.iova + list as u64;
    host.push(&mut sq, Command { cid: 2, prp1: host.page(10), prp2, ..nvm::read(1, 0, 4) });
    host.ring(&sq);
    assert!(host.reap(&mut cq)[0].is_success());
    for (i, byte) in [0xA1u8, 0xB2, 0xC3, 0xD4].iter().enumerate() {
        assert_eq!(host.memory.byte((10 + i) * PAGE_SIZE + 77), *byte);
    }
}

#[test]
fn identify_and_log_pages_answer_their_fields() {
    let mut host = Host::enabled(SimConfig::default().with_namespace(NamespaceConfig::nvm(64, 512)), 4);
    let read_page = |host: &Host| {
        let mut page = vec![0u8; PAGE_SIZE];
        host.memory.all().take(2 * PAGE_SIZE, &mut page);
        page
    };
    // Active namespaces above NSID 1.
    host.admin_status(admin::identify_active_namespaces(1, host.page(2))).unwrap();
    assert_eq!(crate::spec::identify::parse_active_namespace_list(&read_page(&host)).unwrap(), vec![2]);
    // The ZNS structure of a conventional namespace does not exist.
    let status = host.admin_status(admin::identify_csi_namespace(1, 2, host.page(2))).unwrap_err();
    assert_eq!(status.code(), generic(GenericStatus::InvalidFieldInCommand));
    assert!(status.dnr);
    // Get Log Page with an offset: the SMART page from byte 112 (Power
    // Cycles).
    host.admin_status(admin::get_log_page(0x02, 0xFFFF_FFFF, 16, 112, host.page(2), 0)).unwrap();
    assert_eq!(read_page(&host)[0], 1);
    let status = host.admin_status(admin::get_log_page(0x02, 0, 16, 4096, host.page(2), 0)).unwrap_err();
    assert_eq!(status.code(), generic(GenericStatus::InvalidFieldInCommand), "offset past the page");
    // Number of Queues, read back.
    host.admin_status(admin::set_number_of_queues(3, 5)).unwrap();
    let current = host.admin(admin::get_features(admin::FID_NUMBER_OF_QUEUES, 0, 0));
    assert_eq!(admin::NumberOfQueues::from_dw0(current.dw0), (3, 5));
    assert_eq!(host.sim.stats().admin(opcode::admin::IDENTIFY), 2);
}
