//! Recovery: deadlines and Abort, controller resets and removal, and
//! ending commands the device will never complete; buffers the device
//! may still write go to the quarantine, never back to their pool.

use super::*;

impl QueuePair {
    /// Ends the command in `slot` with `error`, without a completion from
    /// the device. Its buffers go back with it only if `device_stopped`
    /// (the device's DMA is known to have ended since its submission);
    /// else the controller's quarantine keeps them.
    pub(super) fn complete_with(
        &mut self,
        slot: usize,
        error: IoError,
        device_stopped: bool,
        on_completion: &mut impl FnMut(IoCompletion),
    ) {
        let tracker = &mut self.trackers[slot];
        debug_assert!(tracker.busy);
        tracker.busy = false;
        let error = if tracker.timed_out && error == IoError::ControllerReset { IoError::Timeout } else { error };
        let (mut buffer, mut metadata) = (tracker.buffer.take(), tracker.metadata.take());
        let token = tracker.token;
        if !device_stopped {
            for held in [buffer.take(), metadata.take()].into_iter().flatten() {
                self.hold(Held::Buffer(held));
            }
        }
        let completion = IoCompletion { token, cid: slot as u16, status: Err(error), dw0: 0, dw1: 0, buffer, metadata };
        self.free.push(slot as u16);
        self.stats.completed += 1;
        on_completion(completion);
    }

    /// Memory the device may still write: to the controller's quarantine,
    /// or leaked when there is no controller to confirm a disable.
    pub(super) fn hold(&self, memory: Held) {
        match &self.host {
            Some(host) => host.quarantine(memory),
            None => std::mem::forget(memory),
        }
    }

    /// Ends every command in flight with `error` (see `complete_with`) and
    /// empties the rings, which the controller no longer knows. Returns how
    /// many it ended.
    pub(super) fn end_in_flight(
        &mut self,
        error: IoError,
        device_stopped: bool,
        on_completion: &mut impl FnMut(IoCompletion),
    ) -> usize {
        let mut ended = 0;
        for slot in 0..self.trackers.len() {
            if self.trackers[slot].busy {
                self.complete_with(slot, error, device_stopped, on_completion);
                ended += 1;
            }
        }
        debug_assert_eq!(self.free.len(), self.trackers.len());
        self.sq_tail = 0;
        self.sq_published = 0;
        self.cq_head = 0;
        self.cq_announced = 0;
        self.phase = true;
        self.rings.fill(0, usize::from(self.depth) * CQE_SIZE, 0);
        self.sq_doorbell.clear_shadow();
        self.cq_doorbell.clear_shadow();
        ended
    }

    /// Starts the clock of new commands, reads CSTS now and then, and acts
    /// on passed deadlines: abort first, reset when that does not end the
    /// command. Returns the commands it completed.
    #[cold]
    #[inline(never)]
    pub(super) fn check_deadlines(&mut self, on_completion: &mut impl FnMut(IoCompletion)) -> usize {
        if self.timeout.is_none() {
            return 0;
        }
        let now = self.deadline_clock.now();
        let timeout = self.timeout_ticks;
        // The host is cloned (two atomic updates) only when its health is
        // due a check, not at every deadline check.
        let health_due = now.saturating_sub(self.health_checked) >= self.health_interval_ticks;
        if let Some(host) = self.host.as_ref().filter(|_| health_due).cloned() {
            self.health_checked = now;
            let raw = self.transport.read32(CSTS);
            if raw == u32::MAX || self.transport.removal_requested() {
                host.device_gone();
                return self.recover(on_completion);
            }
            let csts = Csts(raw);
            if (csts.cfs() || !csts.rdy()) && self.epoch.generation() == self.generation {
                // NVMe Base 2.0 §9.5: a fatal status needs a reset;
                // RDY clear means the controller reset without us.
                self.stats.resets_requested += 1;
                host.reset(self.generation);
                return self.recover(on_completion);
            }
        }
        let mut expired = false;
        // Slots are taken lowest first (`free` pops from its end): the
        // busy ones cluster at the start, and the scan stops at the last.
        let mut busy = self.trackers.len() - self.free.len();
        for tracker in self.trackers.iter_mut() {
            if busy == 0 {
                break;
            }
            if !tracker.busy {
                continue;
            }
            busy -= 1;
            match tracker.deadline {
                None => tracker.deadline = Some(now.saturating_add(timeout)),
                Some(deadline) => expired |= now >= deadline,
            }
        }
        if expired {
            self.expire(now, timeout, on_completion)
        } else {
            0
        }
    }

    /// Acts on every command whose deadline passed.
    pub(super) fn expire(&mut self, now: u64, timeout: u64, on_completion: &mut impl FnMut(IoCompletion)) -> usize {
        for slot in 0..self.trackers.len() {
            let tracker = &mut self.trackers[slot];
            if !tracker.busy || tracker.deadline.is_none_or(|deadline| now < deadline) {
                continue;
            }
            let Some(host) = self.host.clone() else {
                // No controller to abort through (a loopback pair): count
                // the timeout once; the command stays in flight.
                if !tracker.timed_out {
                    tracker.timed_out = true;
                    self.stats.timeouts += 1;
                }
                tracker.deadline = Some(now.saturating_add(timeout));
                continue;
            };
            if tracker.timed_out {
                // Aborted a timeout ago and still not back: reset.
                self.stats.resets_requested += 1;
                host.reset(self.generation);
                return self.recover(on_completion);
            }
            tracker.timed_out = true;
            tracker.deadline = Some(now.saturating_add(timeout));
            self.stats.timeouts += 1;
            self.stats.aborts_sent += 1;
            match host.abort(self.qid, slot as u16) {
                // Its completion follows (or is already in the CQ); if it
                // does not come within another timeout, the next check
                // resets.
                AbortOutcome::Aborted | AbortOutcome::NotAborted => {}
                AbortOutcome::Failed => {
                    self.stats.resets_requested += 1;
                    host.reset(self.generation);
                    return self.recover(on_completion);
                }
                AbortOutcome::Gone => {
                    host.device_gone();
                    return self.recover(on_completion);
                }
            }
        }
        0
    }

    /// After a controller reset (or removal): completes every command in
    /// flight with [`IoError::ControllerReset`] ([`IoError::Timeout`] if
    /// timed out) or [`IoError::DeviceGone`], empties the rings and
    /// re-creates the queues on the controller. Returns the commands it
    /// completed.
    #[cold]
    #[inline(never)]
    pub(super) fn recover(&mut self, on_completion: &mut impl FnMut(IoCompletion)) -> usize {
        let Some(host) = self.host.clone() else {
            self.generation = self.epoch.generation();
            return 0;
        };
        let gone = self.epoch.condition() == Condition::Gone;
        let error = if gone { IoError::DeviceGone } else { IoError::ControllerReset };
        // The controller forgot these queues, so the rings start over. Only
        // a confirmed disable ended its DMA (NVMe Base 2.0 §3.7.2): after a
        // disable that timed out, or removal, the buffers stay quarantined.
        let device_stopped = self.epoch.stopped_since(self.queues_generation);
        let ended = self.end_in_flight(error, device_stopped, on_completion);
        self.rebuild_doorbells();
        self.dead = match self.epoch.condition() {
            Condition::Gone => Some(SubmitError::DeviceGone),
            Condition::Failed => Some(SubmitError::ControllerFailed),
            Condition::Live => None,
        };
        if self.dead.is_some() {
            self.generation = self.epoch.generation();
            return ended;
        }
        match host.recreate_queues(self.qid, self.depth, self.sq_iova(), self.cq_iova()) {
            Ok(generation) => {
                self.generation = generation;
                self.queues_generation = generation;
                self.stats.recoveries += 1;
            }
            Err(error) => {
                self.generation = self.epoch.generation();
                self.dead = Some(match error {
                    Error::DeviceGone => SubmitError::DeviceGone,
                    _ => SubmitError::ControllerFailed,
                });
            }
        }
        self.health_checked = self.deadline_clock.now();
        ended
    }

    /// Forgets every command in flight and empties the rings, for a
    /// controller reset of the admin queue (the controller's disable was
    /// confirmed: nothing in flight will complete or touch memory). Returns
    /// how many were in flight.
    pub(crate) fn reset_after_disable(&mut self) -> usize {
        self.end_in_flight(IoError::ControllerReset, true, &mut |_| {})
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // Delete the queues on the controller before their memory goes.
        let deleted = match (&self.host, self.on_drop.take()) {
            (Some(host), _) => host.delete_queues(self.qid, self.queues_generation),
            (None, Some(delete)) => delete(self.qid),
            (None, None) => true,
        };
        if deleted {
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.rings) };
            return;
        }
        // The controller may still own these queues and the commands in
        // them: the rings, and the buffers of the commands in flight, go to
        // the quarantine, never back to a pool while the device can write
        // them.
        log::warn!("queue {}: not deleted; its rings and buffers in flight are quarantined", self.qid);
        // SAFETY: taken once, here, and never used again.
        let rings = unsafe { ManuallyDrop::take(&mut self.rings) };
        self.hold(Held::Region(rings));
        for slot in 0..self.trackers.len() {
            let tracker = &mut self.trackers[slot];
            for buffer in [tracker.buffer.take(), tracker.metadata.take()].into_iter().flatten() {
                self.hold(Held::Buffer(buffer));
            }
        }
    }
}
