//! A bare queue pair, the floor the driver is measured against
//! (`perf --engine raw`): submission entries written straight into the
//! ring, one doorbell write per batch, the completion ring's phase tag spun
//! on. No trackers, request validation, deadlines, reset handling or buffer
//! ownership: what is left is what the device (and under emulation, QEMU
//! and TCG) costs by itself, which SPDK's perf sits close to.
//!
//! Rings and PRP list pages share one region ([`super::RingLayout`]), on
//! a huge page where the platform has one, as SPDK keeps its rings and as
//! the driver's queue pairs do: the IOMMU then translates one large page
//! for all of them.

use super::doorbell::Doorbell;
use super::{prp, sgl, Held, QueueHost, RingLayout, SubmitError};
use crate::dma::{DmaMemory, DmaRegion, PAGE_SIZE};
use crate::error::{Error, Result};
use crate::spec::command::{Command, FLAGS_FUSE_MASK, FLAGS_PSDT_SHIFT, PSDT_SGL_MPTR_CONTIGUOUS};
use crate::spec::completion::{Completion, STATUS_WORD_OFFSET};
use crate::transport::Transport;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

const SQE_SIZE: usize = std::mem::size_of::<Command>();
const CQE_SIZE: usize = std::mem::size_of::<Completion>();

/// A bare I/O queue pair on its controller; see the module documentation.
/// Created by [`crate::Controller::create_raw_queue`]; deleted on drop. A
/// controller reset ends it: its commands never complete.
#[derive(Debug)]
pub struct RawQueue {
    qid: u16,
    entries: u16,
    /// CQ at 0, SQ at `sq_offset`, one PRP list page per command
    /// identifier from `lists_offset`.
    memory: Option<DmaRegion>,
    sq_offset: usize,
    lists_offset: usize,
    sq_tail: u16,
    sq_published: u16,
    cq_head: u16,
    /// The CQ head the controller was last told.
    cq_announced: u16,
    /// Commands pushed and not yet reaped.
    in_flight: u16,
    phase: bool,
    sq_doorbell: Doorbell,
    cq_doorbell: Doorbell,
    sgl_above: Option<usize>,
    transport: Arc<dyn Transport>,
    host: Arc<dyn QueueHost>,
    generation: u64,
}

impl RawQueue {
    /// A queue over `memory` (laid out by [`RawQueue::layout`]), whose queues the
    /// controller created as `qid` in reset generation `generation`.
    /// With `doorbells` from [`super::QueuePair::make_doorbells`], made
    /// before the queues were created (their shadow slots zeroed): a
    /// controller with shadow doorbells reads the tail from there, as it
    /// does for every queue pair, and the floor uses them as the pairs do.
    pub(crate) fn new(
        transport: &Arc<dyn Transport>,
        host: Arc<dyn QueueHost>,
        (qid, entries, generation): (u16, u16, u64),
        memory: DmaRegion,
        (sq_doorbell, cq_doorbell): (Doorbell, Doorbell),
        sgl_above: Option<usize>,
    ) -> Self {
        let RingLayout { sq_offset, lists_offset, len } = Self::layout(entries);
        assert!(memory.len() >= len, "raw queue memory of {} bytes, {len} needed", memory.len());
        RawQueue {
            qid,
            entries,
            memory: Some(memory),
            sq_offset,
            lists_offset,
            sq_tail: 0,
            sq_published: 0,
            cq_head: 0,
            cq_announced: 0,
            in_flight: 0,
            phase: true,
            sq_doorbell,
            cq_doorbell,
            sgl_above,
            transport: Arc::clone(transport),
            host,
            generation,
        }
    }

    /// Where the rings and the PRP list pages go: one list page per
    /// command identifier, of which there are `entries`.
    pub(crate) fn layout(entries: u16) -> RingLayout {
        RingLayout::new(entries, usize::from(entries))
    }

    /// Entries per ring: at most `entries - 1` commands may be in flight.
    pub fn entries(&self) -> u16 {
        self.entries
    }

    /// Whether the rings and PRP lists sit on a 2 MiB huge page.
    pub fn is_hugepage_backed(&self) -> bool {
        self.memory().is_hugepage_backed()
    }

    fn memory(&self) -> &DmaRegion {
        self.memory.as_ref().expect("present until drop")
    }

    /// Writes `command` into the submission ring as command `cid`, with its
    /// data pointer for `len` bytes at `iova` (PRPs through the cid's list
    /// page, or one SGL descriptor as the controller's SGL threshold says).
    /// Published by the next [`RawQueue::ring`].
    ///
    /// # Safety
    /// `cid` must not be in flight, and no more than `entries - 1` commands
    /// may be. `[iova, iova + len)` must be memory mapped for this
    /// controller that stays mapped, and untouched by the host, until the
    /// command's completion has been reaped.
    pub unsafe fn push(&mut self, mut command: Command, cid: u16, iova: u64, len: usize) -> Result<()> {
        assert!(cid < self.entries, "cid {cid} of a {}-entry queue", self.entries);
        let span = (iova % PAGE_SIZE as u64) as usize + len;
        if self.sgl_above.is_some_and(|threshold| span > threshold) {
            let (dptr1, dptr2) = sgl::data_block(iova, len).map_err(|e| Error::from(SubmitError::Buffer(e)))?;
            command.flags = (command.flags & FLAGS_FUSE_MASK) | (PSDT_SGL_MPTR_CONTIGUOUS << FLAGS_PSDT_SHIFT);
            (command.prp1, command.prp2) = (dptr1, dptr2);
        } else {
            let memory = self.memory.as_ref().expect("present until drop");
            let list_offset = self.lists_offset + usize::from(cid) * PAGE_SIZE;
            let list_iova = memory.iova() + list_offset as u64;
            (command.prp1, command.prp2) = prp::build(iova, len, list_iova, |index, address| {
                memory.write::<u64>(list_offset + index * 8, address.to_le());
            })
            .map_err(|e| Error::from(SubmitError::Buffer(e)))?;
        }
        command.cid = cid;
        // The controller must have room in the CQ for every command in
        // flight: entries reaped but not announced count as occupied.
        self.in_flight += 1;
        if usize::from(self.in_flight) + self.cq_unannounced() >= usize::from(self.entries) {
            self.announce_cq_head();
        }
        self.memory().write(self.sq_offset + usize::from(self.sq_tail) * SQE_SIZE, command);
        self.sq_tail = if self.sq_tail + 1 == self.entries { 0 } else { self.sq_tail + 1 };
        assert_ne!(self.sq_tail, self.sq_published, "more than {} commands pushed", self.entries - 1);
        Ok(())
    }

    /// Publishes pushed commands with one SQ tail doorbell write.
    pub fn ring(&mut self) {
        if self.sq_tail != self.sq_published {
            // Every SQE written before must be visible before the
            // controller learns of the new tail.
            fence(Ordering::Release);
            self.sq_doorbell.update(self.sq_published, self.sq_tail);
            self.sq_published = self.sq_tail;
        }
    }

    /// Hands every completion ready now to `on_completion` (its command
    /// identifier and status field, 0 on success) and writes the CQ head
    /// doorbell once if there were any. Returns how many.
    pub fn reap(&mut self, mut on_completion: impl FnMut(u16, u16)) -> usize {
        self.transport.tick();
        let memory = self.memory.as_ref().expect("present until drop");
        let mut reaped = 0;
        loop {
            let offset = usize::from(self.cq_head) * CQE_SIZE;
            let status_word: u16 = memory.read(offset + STATUS_WORD_OFFSET);
            if (status_word & 1 == 1) != self.phase {
                break;
            }
            // The rest of the entry only after its phase tag says it is new.
            fence(Ordering::Acquire);
            let entry: Completion = memory.read(offset);
            self.cq_head += 1;
            if self.cq_head == self.entries {
                self.cq_head = 0;
                self.phase = !self.phase;
            }
            reaped += 1;
            on_completion(entry.cid, status_word >> 1);
        }
        self.in_flight -= reaped as u16;
        // The CQ head only tells the controller which entries it may reuse:
        // announced a quarter of the queue at a time, as the driver's pairs
        // do (an MMIO write per I/O at QD1 otherwise).
        if self.cq_unannounced() >= (usize::from(self.entries) / 4).max(1) {
            self.announce_cq_head();
        }
        reaped
    }

    fn cq_unannounced(&self) -> usize {
        super::ring_distance(self.cq_announced, self.cq_head, self.entries)
    }

    fn announce_cq_head(&mut self) {
        // The host is done with the entries: the controller may reuse them.
        fence(Ordering::Release);
        self.cq_doorbell.update(self.cq_announced, self.cq_head);
        self.cq_announced = self.cq_head;
    }

    /// MMIO doorbell writes so far: (SQ tail, CQ head). With shadow
    /// doorbells, only those the controller's EventIdx asked for.
    pub fn mmio_writes(&self) -> (u64, u64) {
        (self.sq_doorbell.mmio_writes, self.cq_doorbell.mmio_writes)
    }
}

impl Drop for RawQueue {
    fn drop(&mut self) {
        let memory = self.memory.take().expect("present until drop");
        if !self.host.delete_queues(self.qid, self.generation) {
            // The controller may still use the rings: never reused.
            self.host.quarantine(Held::Region(memory));
        }
    }
}
