//! The simulated controller's registers (NVMe Base 2.0 §3.1.3): CAP, the
//! CC/CSTS handshakes that enable, disable and shut it down, and the
//! resets (controller and function level) that drop its queues.

use super::*;

impl State {
    pub(super) fn cap(&self) -> u64 {
        u64::from(self.config.mqes)
            | CAP_CQR
            | u64::from(self.config.timeout_500ms) << 24
            | CAP_CSS_NVM
            | CAP_CSS_IO_COMMAND_SETS
        // DSTRD, MPSMIN and MPSMAX are 0: 4-byte doorbell stride, 4 KiB pages.
    }

    pub(crate) fn read_register(&self, offset: usize) -> u32 {
        if self.removed {
            return u32::MAX;
        }
        match offset {
            reg::CAP => self.cap() as u32,
            o if o == reg::CAP + 4 => (self.cap() >> 32) as u32,
            reg::VS => self.config.version.0,
            reg::INTMS | reg::INTMC => self.intms,
            reg::CC => self.cc,
            reg::CSTS => {
                (u32::from(self.ready) * CSTS_RDY) | (u32::from(self.fatal) * CSTS_CFS) | (self.shst << CSTS_SHST_SHIFT)
            }
            reg::AQA => self.aqa,
            reg::ASQ => self.asq as u32,
            o if o == reg::ASQ + 4 => (self.asq >> 32) as u32,
            reg::ACQ => self.acq as u32,
            o if o == reg::ACQ + 4 => (self.acq >> 32) as u32,
            // Reserved registers and the write-only doorbells read 0.
            _ => 0,
        }
    }

    pub(crate) fn write_register(&mut self, offset: usize, value: u32) {
        if self.removed {
            return;
        }
        match offset {
            reg::INTMS => self.intms |= value,
            reg::INTMC => self.intms &= !value,
            reg::CC => self.write_cc(value),
            reg::AQA => self.aqa = value,
            reg::ASQ => self.asq = self.asq & !0xFFFF_FFFF | u64::from(value),
            o if o == reg::ASQ + 4 => self.asq = self.asq & 0xFFFF_FFFF | u64::from(value) << 32,
            reg::ACQ => self.acq = self.acq & !0xFFFF_FFFF | u64::from(value),
            o if o == reg::ACQ + 4 => self.acq = self.acq & 0xFFFF_FFFF | u64::from(value) << 32,
            o if o >= reg::DOORBELL_BASE => self.doorbell(o, value),
            // Read-only and unimplemented registers (NSSR: CAP.NSSRS = 0).
            _ => {}
        }
    }

    /// CC writes: shutdown notification, enable and reset, in QEMU 7.2's
    /// order (hw/nvme/ctrl.c, `nvme_write_bar`).
    pub(super) fn write_cc(&mut self, value: u32) {
        let old = Cc(self.cc);
        let new = Cc(value);
        self.cc = value;
        if !old.enable() && new.enable() {
            self.start();
        } else if !new.enable() && (old.enable() || self.ready) {
            // Also EN = 0 written again while still ready, after a disable
            // that a fault ignored.
            if self.wont_disable {
                self.stats.faults.ignored_disables += 1;
            } else {
                self.reset();
            }
        }
        let notified = |cc: Cc| matches!(cc.shn(), Some(Shn::Normal | Shn::Abrupt) | None);
        if notified(new) && !notified(old) {
            self.shutdown();
            self.shst = SHST_COMPLETE;
        } else if !notified(new) && notified(old) {
            self.shst = 0;
        }
    }

    /// CC.EN 0 → 1: the admin queues from AQA/ASQ/ACQ. A configuration the
    /// controller cannot run with ends in CSTS.CFS, as in QEMU.
    pub(super) fn start(&mut self) {
        let cc = Cc(self.cc);
        let aqa = Aqa(self.aqa);
        let css_ok = cc.css() == CC_CSS_NVM || cc.css() == CC_CSS_ALL_IO;
        let entries_ok = cc.iosqes() == 6 && cc.iocqes() == 4;
        let sizes_ok = aqa.asqs() >= 1 && aqa.acqs() >= 1;
        let aligned = self.asq != 0
            && self.acq != 0
            && self.asq.is_multiple_of(PAGE_SIZE as u64)
            && self.acq.is_multiple_of(PAGE_SIZE as u64);
        if self.fatal || !css_ok || !entries_ok || cc.mps() != 0 || !sizes_ok || !aligned {
            self.fatal = true;
            return;
        }
        let sq_size = u32::from(aqa.asqs()) + 1;
        let cq_size = u32::from(aqa.acqs()) + 1;
        let sq = self.dma.translate(self.asq, sq_size as usize * SQE_SIZE);
        let cq = self.dma.translate(self.acq, cq_size as usize * CQE_SIZE);
        let (Some((sq_ring, sq_mapping)), Some((cq_ring, cq_mapping))) = (sq, cq) else {
            self.stats.dma_errors += 1;
            self.fatal = true;
            return;
        };
        self.cqs[0] = Some(CompletionQueue {
            ring: cq_ring,
            mapping: cq_mapping,
            size: cq_size,
            head: 0,
            tail: 0,
            phase: true,
            backlog: VecDeque::new(),
            sqs: 1,
        });
        self.sqs[0] =
            Some(SubmissionQueue { ring: sq_ring, mapping: sq_mapping, size: sq_size, head: 0, tail: 0, cqid: 0 });
        self.ready = true;
    }

    /// A function-level reset: the registers take their reset values and
    /// the controller resets as on CC.EN 1 → 0.
    pub(crate) fn function_reset(&mut self) -> Result<(), &'static str> {
        if self.wont_function_reset {
            return Err("the function ignored the reset");
        }
        self.stats.faults.function_resets += 1;
        self.reset();
        self.cc = 0;
        self.aqa = 0;
        self.asq = 0;
        self.acq = 0;
        self.intms = 0;
        self.shst = 0;
        Ok(())
    }

    /// A Controller Level Reset (CC.EN 1 → 0): queues, outstanding commands
    /// and feature settings are gone; cached data and zones stay. Open zones
    /// close (Closed, or Empty without data), as on a shutdown: the open
    /// state belongs to the controller session that opened them.
    pub(super) fn reset(&mut self) {
        let in_flight = self.pending.iter().chain(&self.due).filter(|pending| pending.entry.sqid != 0).count()
            + self.hung.iter().filter(|entry| entry.sqid != 0).count();
        self.stats.io_dropped_by_resets += in_flight as u64;
        self.drop_queues();
        self.ready = false;
        self.fatal = false;
        self.features = Features::new(&self.config);
        for namespace in &mut self.namespaces {
            if let Some(zones) = &mut namespace.zones {
                zones.close_open_zones();
            }
        }
    }

    /// Queues, waiting completions and held requests go; returns how many
    /// completions were never posted.
    pub(super) fn drop_queues(&mut self) -> u64 {
        // Reads in flight outside the lock finish first (`sim/deferred.rs`).
        self.gate.end_dma(None);
        let mut discarded = self.pending.len() as u64 + self.aers.len() as u64;
        self.pending.clear();
        self.aers.clear();
        // As QEMU's reset: queued events and masks go too.
        self.aer_queue.clear();
        self.aer_masked = 0;
        self.hung.clear();
        for cq in self.cqs.iter_mut().filter_map(Option::take) {
            discarded += cq.backlog.len() as u64;
        }
        for sq in &mut self.sqs {
            *sq = None;
        }
        discarded
    }

    /// A normal or abrupt shutdown notification: the cache is written back
    /// and open zones close.
    pub(super) fn shutdown(&mut self) {
        for namespace in &mut self.namespaces {
            namespace.storage_mut().flush();
            if let Some(zones) = &mut namespace.zones {
                zones.close_open_zones();
            }
        }
    }
}
