//! The controller side of the queue pairs' contract (`QueueHost`): queue
//! ids, queue creation and deletion, Abort, resets, removal, the
//! quarantine, and the shutdown when the last handle goes.

use super::*;

impl Shared {
    pub(super) fn admin(&self) -> MutexGuard<'_, Admin> {
        // A panic while holding the lock leaves the queue usable: each
        // command is self-contained.
        self.admin.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    pub(super) fn command(&self, command: Command) -> Result<IoCompletion> {
        self.admin().run(command, self.options.admin_timeout)
    }

    /// Runs an Identify into the scratch page and copies the page out.
    pub(super) fn identify_page(&self, command: Command) -> Result<Vec<u8>> {
        Ok(self.admin().run_with_scratch(command, IDENTIFY_DATA_SIZE, self.options.admin_timeout)?.1)
    }

    /// An Identify that a controller may reject as unsupported: `None` then.
    pub(super) fn optional_identify(&self, command: Command) -> Result<Option<Vec<u8>>> {
        match self.identify_page(command) {
            Ok(page) => Ok(Some(page)),
            Err(Error::Command { status, .. }) if status.dnr => Ok(None),
            Err(other) => Err(other),
        }
    }

    pub(super) fn allocate_qid(admin: &mut Admin) -> Result<u16> {
        let free = admin.qid_in_use.iter().skip(1).position(|used| !used).map(|i| i + 1);
        let qid = free.ok_or_else(|| {
            Error::Unsupported(format!("all {} I/O queue pairs are in use", admin.qid_in_use.len().saturating_sub(1)))
        })?;
        admin.qid_in_use[qid] = true;
        Ok(u16::try_from(qid).expect("qids fit the granted count"))
    }

    /// Creates I/O queue pair `qid` on the controller: the completion queue
    /// first, since the submission queue names it (NVMe Base 2.0 §5.4,
    /// §5.5).
    /// Whether new queues can be made: the device there, the controller up.
    pub(super) fn live(&self) -> Result<()> {
        match self.epoch.condition() {
            Condition::Live => Ok(()),
            Condition::Gone => Err(Error::DeviceGone),
            Condition::Failed => Err(Error::ControllerFailed),
        }
    }

    /// A new I/O queue pair of `depth` entries, for [`QueuePair`] and
    /// [`RawQueue`] alike: under the admin lock, with the controller live,
    /// takes a free queue id, lets `build` make the host side for it (given
    /// the id and its doorbells' configuration; it returns that side and
    /// its SQ and CQ addresses) and creates the queues there. The id goes
    /// back if anything fails. Returns the host side, the id and the reset
    /// generation the queues belong to.
    pub(super) fn open_queue_pair<T>(
        &self,
        depth: u16,
        build: impl FnOnce(u16, DoorbellConfig) -> Result<(T, u64, u64)>,
    ) -> Result<(T, u16, u64)> {
        let max = self.cap.max_queue_entries();
        if depth < 2 || u32::from(depth) > max {
            return Err(Error::InvalidArgument(format!("queue depth {depth}: expected 2..={max} (CAP.MQES+1)")));
        }
        let mut admin = self.admin();
        self.live()?;
        let qid = Self::allocate_qid(&mut admin)?;
        let shadow = admin.shadow.as_ref().map(|shadow| shadow.pages);
        let doorbells = DoorbellConfig { dstrd: self.cap.dstrd(), shadow, policy: ShadowPolicy::EventIdx };
        let generation = self.epoch.generation();
        let opened = build(qid, doorbells).and_then(|(side, sq_iova, cq_iova)| {
            self.create_queues(&mut admin, qid, depth, sq_iova, cq_iova)?;
            Ok(side)
        });
        match opened {
            Ok(side) => Ok((side, qid, generation)),
            Err(error) => {
                admin.qid_in_use[usize::from(qid)] = false;
                Err(error)
            }
        }
    }

    pub(super) fn create_queues(
        &self,
        admin: &mut Admin,
        qid: u16,
        depth: u16,
        sq_iova: u64,
        cq_iova: u64,
    ) -> Result<()> {
        let timeout = self.options.admin_timeout;
        admin.run(admin::create_io_cq(qid, depth, cq_iova, true, false, 0), timeout)?;
        if let Err(error) = admin.run(admin::create_io_sq(qid, depth, sq_iova, qid, 0), timeout) {
            let _ = admin.run(admin::delete_io_cq(qid), timeout);
            return Err(error);
        }
        Ok(())
    }

    /// A normal shutdown (CC.SHN, then a bounded wait for CSTS.SHST
    /// "complete", NVMe Base 2.0 §3.6.1), then CC.EN = 0 so the controller
    /// touches no host memory after this returns. Queue pairs are gone by
    /// now: each holds this state alive and deletes its queues on drop.
    /// Returns whether the disable was confirmed (CSTS.RDY = 0).
    pub(super) fn shutdown(&self) -> bool {
        if self.epoch.condition() == Condition::Gone {
            return false;
        }
        match notify_shutdown(&*self.transport, self.options.shutdown_timeout) {
            Ok(()) => {}
            Err(Error::DeviceGone) => return false,
            Err(error) => ::log::warn!("{}: {error}; disabling without it", self.transport.name()),
        }
        // Even when CC.EN is already clear: an earlier disable may have
        // timed out with RDY still set.
        let ready_timeout = Duration::from_millis(u64::from(self.cap.timeout_ms()).max(500));
        stop(&*self.transport, ready_timeout).is_ok()
    }
}

impl QueueHost for Shared {
    fn abort(&self, qid: u16, cid: u16) -> AbortOutcome {
        let mut admin = self.admin();
        match self.epoch.condition() {
            Condition::Live => {}
            Condition::Gone => return AbortOutcome::Gone,
            Condition::Failed => return AbortOutcome::Failed,
        }
        // NVMe Base 2.0 §5.1: DW0 bit 0 clear means the command was
        // aborted (and completes with Command Abort Requested).
        match admin.run(admin::abort(qid, cid), self.options.admin_timeout) {
            Ok(completion) if completion.dw0 & 1 == 0 => AbortOutcome::Aborted,
            Ok(_) => AbortOutcome::NotAborted,
            Err(Error::DeviceGone) => AbortOutcome::Gone,
            Err(_) => AbortOutcome::Failed,
        }
    }

    fn reset(&self, generation: u64) {
        let mut admin = self.admin();
        // Someone else reset it since the caller looked: once is enough.
        if self.epoch.generation() == generation {
            let _ = admin.reset();
        }
    }

    fn device_gone(&self) {
        self.admin().device_gone();
    }

    fn recreate_queues(&self, qid: u16, depth: u16, sq_iova: u64, cq_iova: u64) -> Result<u64> {
        let mut admin = self.admin();
        self.live()?;
        // Under the admin lock, which resets also hold: the queues belong to
        // this generation.
        let generation = self.epoch.generation();
        self.create_queues(&mut admin, qid, depth, sq_iova, cq_iova)?;
        Ok(generation)
    }

    /// Deletes the SQ before its CQ (NVMe Base 2.0 §5.6, §5.7). Queues of
    /// an older generation died with a reset or removal: nothing to delete,
    /// and their memory is free once a disable was confirmed since.
    fn delete_queues(&self, qid: u16, generation: u64) -> bool {
        let mut admin = self.admin();
        let deleted = match self.epoch.condition() {
            Condition::Live if self.epoch.generation() == generation => {
                let timeout = self.options.admin_timeout;
                let deleted = admin.run(admin::delete_io_sq(qid), timeout).is_ok()
                    && admin.run(admin::delete_io_cq(qid), timeout).is_ok();
                // A delete that timed out reset the controller: its
                // confirmed disable stopped the queues as well.
                deleted || self.epoch.stopped_since(generation)
            }
            Condition::Live | Condition::Gone | Condition::Failed => self.epoch.stopped_since(generation),
        };
        if let Some(used) = admin.qid_in_use.get_mut(usize::from(qid)) {
            *used = !deleted;
        }
        deleted
    }

    fn quarantine(&self, memory: Held) {
        self.admin().quarantine.hold(memory);
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let stopped = self.shutdown();
        // Disabled for good: quarantined memory may go (else it leaks with
        // the quarantine).
        if stopped {
            self.admin.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).quarantine.release();
        }
    }
}
