//! The admin queue: commands run with bounded waits, the controller reset
//! and bring-up that a timeout or fatal status leads to, and the
//! Asynchronous Event Request kept outstanding.

use super::*;

impl Admin {
    /// Runs an admin command without data. A timeout or a fatal status
    /// resets the controller (as Linux does after an admin timeout); the
    /// error is still returned.
    pub(super) fn run(&mut self, command: Command, timeout: Duration) -> Result<IoCompletion> {
        // SAFETY: no data pointer.
        let result = unsafe { self.run_raw(command, 0, 0, timeout) };
        self.settle(&result);
        result
    }

    /// Runs an admin command that transfers `len` bytes through the scratch
    /// buffer, zeroed first, and copies them out.
    pub(super) fn run_with_scratch(
        &mut self,
        command: Command,
        len: usize,
        timeout: Duration,
    ) -> Result<(IoCompletion, Vec<u8>)> {
        let result = self.scratch_from_device(command, len, timeout);
        self.settle(&result);
        result
    }

    /// [`Admin::run_with_scratch`] without settling: no reset after a
    /// timeout, no event request armed; for bring-up, which settles once
    /// it is done.
    fn scratch_from_device(
        &mut self,
        command: Command,
        len: usize,
        timeout: Duration,
    ) -> Result<(IoCompletion, Vec<u8>)> {
        assert!(len <= SCRATCH_LEN);
        self.scratch.fill(0, len, 0);
        let iova = self.scratch.iova();
        // SAFETY: the scratch region is mapped for this controller, owned by
        // this struct (behind the admin lock) and not touched by the host
        // until the completion has been reaped (or a reset ended it).
        let completion = unsafe { self.run_raw(command, iova, len, timeout) }?;
        let mut data = vec![0u8; len];
        self.scratch.copy_out(0, &mut data);
        Ok((completion, data))
    }

    /// Runs an admin command that transfers `data` to the controller
    /// through the scratch buffer, written first (Set Features with a data
    /// structure, say). Does not settle, as
    /// [`Admin::scratch_from_device`].
    fn scratch_to_device(&mut self, command: Command, data: &[u8], timeout: Duration) -> Result<IoCompletion> {
        assert!(data.len() <= SCRATCH_LEN);
        // Written before the command is submitted: the queue pair's Release
        // fence before the doorbell publishes these bytes to the device.
        self.scratch.copy_in(0, data);
        let iova = self.scratch.iova();
        // SAFETY: the scratch region is mapped for this controller, owned by
        // this struct (behind the admin lock); the host wrote it above and
        // does not touch it again until the completion has been reaped (or
        // a reset ended it), and the device only reads it.
        unsafe { self.run_raw(command, iova, data.len(), timeout) }
    }

    /// Enables Copy Descriptor Format 2h (NVM Command Set 1.1 §3.3.2):
    /// reads Host Behavior Support (NVMe Base 2.1 §5.1.25.1.14), sets CDFE
    /// bit 2 and writes the structure back with every other field as the
    /// controller reported it. `Ok(false)` when the controller refuses
    /// either command (a status); other errors as any admin command's.
    /// Does not settle (see [`Admin::scratch_from_device`]).
    pub(super) fn enable_copy_format_2(&mut self) -> Result<bool> {
        let timeout = self.setup.admin_timeout;
        let name = self.setup.transport.name().to_owned();
        let command = admin::get_host_behavior_support(0);
        let enabled = self.scratch_from_device(command, HOST_BEHAVIOR_SUPPORT_SIZE, timeout).and_then(|(_, data)| {
            let current = HostBehaviorSupport::parse(&data)?;
            let wanted = current.with_cdfe(current.cdfe() | CopyFormats::FORMAT_2);
            self.scratch_to_device(admin::set_host_behavior_support(0), &wanted.to_bytes(), timeout)
        });
        match enabled {
            Ok(_) => Ok(true),
            Err(error @ Error::Command { .. }) => {
                ::log::info!("{name}: Host Behavior Support refused ({error}); Copy across namespaces stays off");
                Ok(false)
            }
            Err(other) => Err(other),
        }
    }

    /// Runs one command; completions of Asynchronous Event Requests that
    /// arrive meanwhile are kept, late ones of abandoned commands dropped.
    ///
    /// # Safety
    /// As [`QueuePair::execute_raw`].
    pub(super) unsafe fn run_raw(
        &mut self,
        command: Command,
        iova: u64,
        len: usize,
        timeout: Duration,
    ) -> Result<IoCompletion> {
        let Admin { queue, aer_completions, aer_armed, events_dropped, .. } = self;
        let route = |completion: IoCompletion| route_aer(completion, aer_completions, aer_armed, events_dropped);
        // SAFETY: forwarded contract.
        unsafe { queue.run_routing(command, iova, len, timeout, route) }
    }

    /// After an admin command: removal is recorded; a timeout or a fatal
    /// status resets the controller; the event request is re-armed.
    pub(super) fn settle<T>(&mut self, result: &Result<T>) {
        match result {
            Err(Error::DeviceGone) => self.device_gone(),
            Err(Error::ControllerFatal | Error::Timeout { .. }) => {
                let _ = self.reset();
            }
            _ => {}
        }
        if !self.aer_armed && self.epoch.condition() == Condition::Live {
            self.arm_aer();
        }
    }

    /// The device is gone, or the host wants it back. A device still
    /// there is first quiesced ([`Admin::quiesce`]); then a best-effort,
    /// bounded disable, so it stops its DMA before the pairs hand buffers
    /// back (a gone one reads all ones and returns at once). Unless that
    /// disable is confirmed, the pairs quarantine the buffers of their
    /// commands in flight.
    pub(super) fn device_gone(&mut self) {
        if self.epoch.condition() == Condition::Gone {
            return;
        }
        self.quiesce();
        let _ = self.disable();
        // Condition first: a pair that sees the new generation must find
        // the device gone.
        self.epoch.set_condition(Condition::Gone);
        self.epoch.advance();
    }

    /// An orderly stop of a controller about to be let go, as NVMe Base
    /// 2.0 §3.6.1 asks of a host before a shutdown and as Linux's
    /// `nvme_dev_disable` does on removal: every I/O SQ in use is deleted
    /// (Delete I/O Submission Queue ends the commands still in it, §5.7),
    /// then its CQ, then a normal shutdown is notified (the controller
    /// writes its cache back). The disable that follows then drops no
    /// command the controller still holds. QEMU's device model needs that
    /// order: from 7.2 to 10.0, a disable that drops a read or write still
    /// in flight can complete it after freeing its queue, and the emulator
    /// dies (`nvme_ctrl_reset` drains its namespaces, and a request issued
    /// during the drain, such as a metadata transfer's second phase, is
    /// queued uncounted; docs/rig.md has the trace). Each command waits at
    /// most [`QUIESCE_COMMAND_TIMEOUT`]; a timeout or an absent device ends
    /// the quiesce, and the disable goes on without it. Other pairs may
    /// still ring doorbells of deleted queues meanwhile: the controller
    /// ignores them, and their commands end with the device.
    pub(super) fn quiesce(&mut self) {
        let transport = Arc::clone(&self.setup.transport);
        let csts = transport.read32(registers::CSTS);
        if csts == u32::MAX || !Csts(csts).rdy() {
            return;
        }
        let timeout = self.setup.admin_timeout.min(QUIESCE_COMMAND_TIMEOUT);
        let in_use: Vec<u16> = (1..self.qid_in_use.len())
            .filter(|&qid| self.qid_in_use[qid])
            .map(|qid| u16::try_from(qid).expect("qids fit the granted count"))
            .collect();
        // SQs before CQs: a CQ that still has an SQ cannot be deleted (§5.6).
        let deletes = in_use
            .iter()
            .map(|&qid| admin::delete_io_sq(qid))
            .chain(in_use.iter().map(|&qid| admin::delete_io_cq(qid)));
        // The host's request would end each wait at once.
        self.queue.set_waits_end_on_removal_request(false);
        let deleted = self.delete_io_queues(deletes, timeout);
        self.queue.set_waits_end_on_removal_request(true);
        if let Err(error) = deleted {
            ::log::warn!("{}: quiescing for removal: {error}; disabling without it", transport.name());
            return;
        }
        if let Err(error) = notify_shutdown(&*transport, self.setup.shutdown_timeout) {
            ::log::warn!("{}: quiescing for removal: {error}; disabling without it", transport.name());
        }
    }

    /// Runs `deletes` in order; a status (a queue already gone) is no
    /// reason to stop, a timeout or an absent device is.
    fn delete_io_queues(&mut self, deletes: impl Iterator<Item = Command>, timeout: Duration) -> Result<()> {
        for command in deletes {
            // SAFETY: no data pointer. Not `run`: its timeout handling
            // would reset the controller, and this is already its end.
            match unsafe { self.run_raw(command, 0, 0, timeout) } {
                Ok(_) | Err(Error::Command { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Clears CC.EN and waits (bounded) for CSTS.RDY = 0; if the controller
    /// stays ready, a function-level reset, where the transport has one.
    /// Once RDY = 0 is read back the device's DMA has ended (NVMe Base 2.0
    /// §3.7.2): queues of every generation so far are known stopped and the
    /// quarantine is released. A device reading all ones counts as stopped
    /// too: it is off the bus, or its link is down, which resets it (PCIe
    /// Base 6.0 §6.6.1: DL_Down is a hot reset of the device below). A
    /// disable that timed out, with no reset to follow it, confirms nothing:
    /// the pairs then quarantine the buffers of their commands in flight.
    pub(super) fn disable(&mut self) -> Result<()> {
        let transport = Arc::clone(&self.setup.transport);
        let result = stop(&*transport, self.setup.ready_timeout);
        match &result {
            Ok(()) | Err(Error::DeviceGone) => {
                self.epoch.confirm_stopped();
                self.quarantine.release();
            }
            Err(error) => ::log::warn!(
                "{}: disable not confirmed ({error}); memory of commands in flight stays quarantined",
                transport.name()
            ),
        }
        result
    }

    /// Keeps one Asynchronous Event Request outstanding (NVMe Base 2.0
    /// §5.2): it completes only when the controller has an event.
    pub(super) fn arm_aer(&mut self) {
        // SAFETY: no data pointer.
        if unsafe { self.queue.submit_raw(admin::async_event_request(), 0, 0, AER_TOKEN) }.is_ok() {
            self.queue.ring();
            self.aer_armed = true;
        }
    }

    /// Reaps whatever the admin queue holds without waiting.
    pub(super) fn poll(&mut self) {
        let Admin { queue, aer_completions, aer_armed, events_dropped, .. } = self;
        queue.poll(|completion| route_aer(completion, aer_completions, aer_armed, events_dropped));
    }

    /// A controller reset (NVMe Base 2.0 §3.7.2, Controller Level Reset):
    /// the controller is disabled (which ends all its DMA once confirmed),
    /// every queue pair learns of the reset through the epoch, and the
    /// controller is brought up again with the admin queue, Number of
    /// Queues, shadow doorbells, event configuration and an Asynchronous
    /// Event Request, and Copy Descriptor Format 2h enabled again where it
    /// was (the reset cleared Host Behavior Support). I/O queue pairs
    /// re-create their own queues at their next poll. The disable comes
    /// before the epoch advances, so no pair hands back a buffer while the
    /// disable is still in progress.
    pub(super) fn reset(&mut self) -> Result<()> {
        if self.epoch.condition() == Condition::Gone {
            return Err(Error::DeviceGone);
        }
        self.resets += 1;
        let disabled = self.disable();
        self.epoch.advance();
        let result = disabled.and_then(|()| self.bring_up());
        self.epoch.set_condition(match &result {
            Ok(()) => Condition::Live,
            Err(Error::DeviceGone) => Condition::Gone,
            Err(_) => Condition::Failed,
        });
        result
    }

    /// Brings a controller whose disable was confirmed back up.
    pub(super) fn bring_up(&mut self) -> Result<()> {
        let transport = Arc::clone(&self.setup.transport);
        let ready_timeout = self.setup.ready_timeout;
        // Disabled: nothing in flight on the admin queue will complete.
        self.queue.reset_after_disable();
        self.aer_armed = false;
        self.aer_completions.clear();
        enable(&*transport, &self.queue, self.setup.admin_entries, self.setup.css, ready_timeout)?;
        let timeout = self.setup.admin_timeout;
        let requested = self.setup.io_queues_requested;
        // SAFETY: no data pointer.
        unsafe { self.run_raw(admin::set_number_of_queues(requested, requested), 0, 0, timeout) }?;
        if let Some(shadow) = &self.shadow {
            // Zeroed pages: every queue starts at 0 again.
            shadow.values.fill(0, PAGE_SIZE, 0);
            shadow.event_idx.fill(0, PAGE_SIZE, 0);
            let (values, event_idx, pages) = (shadow.values.iova(), shadow.event_idx.iova(), shadow.pages);
            // SAFETY: no data pointer (the pages are named in PRP1/PRP2 and
            // live with the controller).
            unsafe { self.run_raw(admin::doorbell_buffer_config(values, event_idx), 0, 0, timeout) }?;
            self.queue.use_shadow(pages, ShadowPolicy::Always);
        }
        if self.setup.cross_namespace_copy && !self.enable_copy_format_2()? {
            // Handles made before the reset still build such commands; the
            // controller refuses them (Invalid Field in Command).
            ::log::warn!("{}: Copy across namespaces not enabled again after the reset", transport.name());
            self.setup.cross_namespace_copy = false;
        }
        if let Some(config) = self.setup.async_event_config {
            let command = admin::set_features(admin::FID_ASYNC_EVENT_CONFIG, config, false);
            // SAFETY: no data pointer.
            unsafe { self.run_raw(command, 0, 0, timeout) }?;
        }
        self.arm_aer();
        Ok(())
    }
}
