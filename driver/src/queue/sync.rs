//! A submission/completion queue pair that runs one command at a time and
//! polls for its completion with a deadline. Used for admin commands, where
//! simplicity beats throughput.

use super::doorbell::{Doorbell, ShadowPages, ShadowPolicy};
use crate::dma::{DmaMemory, DmaRegion};
use crate::error::{Error, Result};
use crate::spec::command::Command;
use crate::spec::completion::{Completion, STATUS_WORD_OFFSET};
use crate::spec::registers::{cq_head_doorbell, sq_tail_doorbell, Csts, CSTS};
use crate::transport::Transport;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const SQE_SIZE: usize = std::mem::size_of::<Command>();
pub(crate) const CQE_SIZE: usize = std::mem::size_of::<Completion>();

/// Spins between deadline and CSTS checks: reading the clock and a
/// register every poll would dominate a fast completion.
const POLLS_PER_CHECK: u32 = 256;

#[derive(Debug)]
pub(crate) struct SyncQueue {
    transport: Arc<dyn Transport>,
    admin: bool,
    sq: DmaRegion,
    cq: DmaRegion,
    entries: u16,
    sq_tail: u16,
    cq_head: u16,
    phase: bool,
    qid: u16,
    dstrd: u8,
    sq_doorbell: Doorbell,
    cq_doorbell: Doorbell,
    next_cid: u16,
}

impl SyncQueue {
    /// Allocates the rings for queue `qid` with `entries` slots. The caller
    /// tells the controller about them (AQA/ASQ/ACQ or Create I/O queue).
    pub(crate) fn new(
        transport: &Arc<dyn Transport>,
        qid: u16,
        entries: u16,
        dstrd: u8,
    ) -> Result<Self> {
        assert!(entries >= 2, "a queue needs at least two entries");
        let sq = DmaRegion::allocate(transport, usize::from(entries) * SQE_SIZE)?;
        let cq = DmaRegion::allocate(transport, usize::from(entries) * CQE_SIZE)?;
        Ok(SyncQueue {
            transport: Arc::clone(transport),
            admin: qid == 0,
            sq,
            cq,
            entries,
            sq_tail: 0,
            cq_head: 0,
            phase: true,
            qid,
            dstrd,
            sq_doorbell: Doorbell::new(
                transport,
                sq_tail_doorbell(qid, dstrd),
                None,
                ShadowPolicy::Off,
            ),
            cq_doorbell: Doorbell::new(
                transport,
                cq_head_doorbell(qid, dstrd),
                None,
                ShadowPolicy::Off,
            ),
            next_cid: 0,
        })
    }

    /// Mirrors both doorbells into the shadow doorbell page as well as
    /// the registers, once Doorbell Buffer Config is in effect. Every
    /// update still writes the register (see [`ShadowPolicy::Always`]).
    pub(crate) fn use_shadow(&mut self, pages: ShadowPages) {
        let sq = sq_tail_doorbell(self.qid, self.dstrd);
        let cq = cq_head_doorbell(self.qid, self.dstrd);
        self.sq_doorbell = Doorbell::new(
            &self.transport,
            sq,
            Some(pages.slot(sq)),
            ShadowPolicy::Always,
        );
        self.cq_doorbell = Doorbell::new(
            &self.transport,
            cq,
            Some(pages.slot(cq)),
            ShadowPolicy::Always,
        );
    }

    pub(crate) fn sq_iova(&self) -> u64 {
        self.sq.iova()
    }

    pub(crate) fn cq_iova(&self) -> u64 {
        self.cq.iova()
    }

    pub(crate) fn qid(&self) -> u16 {
        self.qid
    }

    pub(crate) fn entries(&self) -> u16 {
        self.entries
    }

    /// Submits `command` and polls until its completion arrives or
    /// `timeout` passes. A completion with an error status is an
    /// [`Error::Command`].
    pub(crate) fn execute(
        &mut self,
        mut command: Command,
        timeout: Duration,
    ) -> Result<Completion> {
        let cid = self.next_cid;
        // 0xFFFF is reserved (NVMe Base 2.0 §4.2: it means "no command" in
        // the error log).
        self.next_cid = if cid >= 0xFFFE { 0 } else { cid + 1 };
        command.cid = cid;
        let opcode = command.opcode;
        self.sq.write(usize::from(self.sq_tail) * SQE_SIZE, command);
        self.sq_tail = (self.sq_tail + 1) % self.entries;
        // The entry must be in memory before the doorbell tells the
        // controller to fetch it.
        fence(Ordering::Release);
        let old_tail = if self.sq_tail == 0 {
            self.entries - 1
        } else {
            self.sq_tail - 1
        };
        self.sq_doorbell.update(old_tail, self.sq_tail);

        let started = Instant::now();
        let mut polls = 0u32;
        loop {
            let offset = usize::from(self.cq_head) * CQE_SIZE;
            let status_word: u16 = self.cq.read(offset + STATUS_WORD_OFFSET);
            if (status_word & 1 == 1) == self.phase {
                // The phase tag is read first; the rest of the entry only
                // after it, so no stale fields are seen.
                fence(Ordering::Acquire);
                let completion: Completion = self.cq.read(offset);
                self.cq_head += 1;
                if self.cq_head == self.entries {
                    self.cq_head = 0;
                    self.phase = !self.phase;
                }
                let old_head = if self.cq_head == 0 {
                    self.entries - 1
                } else {
                    self.cq_head - 1
                };
                self.cq_doorbell.update(old_head, self.cq_head);
                if completion.cid != cid {
                    // A late completion of an earlier, timed-out command.
                    continue;
                }
                if completion.is_success() {
                    return Ok(completion);
                }
                return Err(Error::Command {
                    opcode,
                    admin: self.admin,
                    status: completion.status(),
                });
            }
            polls += 1;
            if polls.is_multiple_of(POLLS_PER_CHECK) {
                let csts = self.transport.read32(CSTS);
                if csts == u32::MAX {
                    return Err(Error::DeviceGone);
                }
                if Csts(csts).cfs() {
                    return Err(Error::ControllerFatal);
                }
                if started.elapsed() > timeout {
                    return Err(Error::Timeout {
                        what: if self.admin {
                            "an admin command"
                        } else {
                            "an I/O command"
                        },
                        waited_ms: started.elapsed().as_millis() as u64,
                    });
                }
            }
            std::hint::spin_loop();
        }
    }
}
