//! Completion: reaping the CQ by its phase tag, handing each command its
//! result exactly once, and announcing the CQ head in batches.

use super::*;

/// Where a poll pass hands the commands it finishes.
pub(super) trait Delivery {
    /// The device completed the command in busy `slot` with `entry`.
    fn reaped(&mut self, pair: &mut QueuePair, slot: u16, entry: &Completion);
    /// Runs `ending` (a deadline check or a recovery), which may end
    /// commands itself (their slots free) through the callback it is
    /// given, and delivers those; returns what `ending` returns.
    fn end(
        &mut self,
        pair: &mut QueuePair,
        ending: impl FnOnce(&mut QueuePair, &mut dyn FnMut(IoCompletion)) -> usize,
    ) -> usize;
}

/// `poll`'s delivery: each command's [`IoCompletion`], by value, its slot
/// free.
pub(super) struct Classic<F>(pub(super) F);

impl<F: FnMut(IoCompletion)> Delivery for Classic<F> {
    #[inline(always)]
    fn reaped(&mut self, pair: &mut QueuePair, slot: u16, entry: &Completion) {
        let status = status_of(entry, pair.trackers[usize::from(slot)].timed_out);
        (self.0)(pair.release(slot, status, entry.dw0, entry.dw1));
    }

    fn end(
        &mut self,
        pair: &mut QueuePair,
        ending: impl FnOnce(&mut QueuePair, &mut dyn FnMut(IoCompletion)) -> usize,
    ) -> usize {
        ending(pair, &mut |completion| (self.0)(completion))
    }
}

/// A completed command's result: success, or why not.
#[inline(always)]
pub(super) fn status_of(entry: &Completion, timed_out: bool) -> std::result::Result<(), IoError> {
    if entry.is_success() {
        Ok(())
    } else {
        Err(failure(entry.status(), timed_out))
    }
}

impl QueuePair {
    /// Frees busy `slot`, whose command finished with `status`, `dw0` and
    /// `dw1`, and gives its completion, buffers included.
    #[inline(always)]
    pub(super) fn release(
        &mut self,
        slot: u16,
        status: std::result::Result<(), IoError>,
        dw0: u32,
        dw1: u32,
    ) -> IoCompletion {
        // The slot goes back first, so that the completion is built where
        // the callback takes it: built before the push (whose growth path
        // is a call), it was built on the stack and copied, and the copy's
        // wide loads over its fresh narrow stores missed store-to-load
        // forwarding. The criterion QD1 flush took 111 ns that way, 103
        // this way, with a few instructions fewer.
        self.free.push(slot);
        let tracker = &mut self.trackers[usize::from(slot)];
        tracker.busy = false;
        IoCompletion {
            token: tracker.token,
            cid: slot,
            status,
            dw0,
            dw1,
            buffer: tracker.buffer.take(),
            metadata: tracker.metadata.take(),
        }
    }

    /// Completion queue entries consumed but not announced.
    #[inline]
    pub(super) fn cq_unannounced(&self) -> usize {
        crate::queue::ring_distance(self.cq_announced, self.cq_head, self.depth)
    }

    /// Consumed entries an I/O queue announces at once: a quarter of it.
    #[inline]
    pub(super) fn cq_batch(&self) -> usize {
        (usize::from(self.depth) / 4).max(1)
    }

    pub(super) fn announce_cq_head(&mut self) {
        self.cq_doorbell.update(self.cq_announced, self.cq_head);
        self.cq_announced = self.cq_head;
    }

    /// Publishes queued submissions, then reaps every ready completion into
    /// `on_completion`, publishes what the callback submitted (one SQ
    /// doorbell update for the pass), and updates the CQ head doorbell
    /// once. Returns the number of commands completed. Now and then it
    /// also checks deadlines and the controller's status, and after a
    /// controller reset it ends the commands in flight and re-creates the
    /// queues (see the [type documentation](Self)).
    pub fn poll(&mut self, on_completion: impl FnMut(IoCompletion)) -> usize {
        let mut delivery = Classic(on_completion);
        if self.profiler.is_some() {
            self.poll_profiled(&mut delivery)
        } else {
            self.poll_as::<false, _>(&mut delivery)
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn poll_profiled(&mut self, delivery: &mut impl Delivery) -> usize {
        self.poll_as::<true, _>(delivery)
    }

    #[inline(always)]
    pub(super) fn poll_as<const PROFILE: bool, D: Delivery>(&mut self, delivery: &mut D) -> usize {
        let mut reaped = 0;
        if self.epoch.generation() != self.generation {
            reaped += delivery.end(self, |pair, mut on_completion| pair.recover(&mut on_completion));
        }
        self.ring_as::<PROFILE>();
        let start = self.stamp::<PROFILE>();
        let mut found_at = 0;
        let mut callback = 0;
        self.transport.tick();
        let old_head = self.cq_head;
        loop {
            let offset = usize::from(self.cq_head) * CQE_SIZE;
            let status_word: u16 = self.rings.read(offset + STATUS_WORD_OFFSET);
            if (status_word & 1 == 1) != self.phase {
                break;
            }
            // Read the rest of the entry only after its phase tag says it
            // is new.
            fence(Ordering::Acquire);
            let entry: Completion = self.rings.read(offset);
            self.cq_head += 1;
            if self.cq_head == self.depth {
                self.cq_head = 0;
                self.phase = !self.phase;
            }
            let slot = usize::from(entry.cid);
            if PROFILE {
                if let Some(profiler) = self.profiler.as_deref_mut() {
                    if found_at == 0 {
                        found_at = self.clock.now();
                    }
                    if self.trackers.get(slot).is_some_and(|tracker| tracker.busy) {
                        profiler.found(slot, found_at);
                    }
                }
            }
            if self.trackers.get(slot).is_some_and(|tracker| tracker.busy) {
                self.stats.completed += 1;
                reaped += 1;
                let called = self.stamp::<PROFILE>();
                delivery.reaped(self, entry.cid, &entry);
                callback += self.stamp::<PROFILE>() - called;
            } else {
                self.stats.spurious_completions += 1;
            }
        }
        // The CQ head doorbell only tells the controller which entries it
        // may reuse. An I/O queue announces consumed entries a quarter of
        // the queue at a time (submissions announce them sooner when the
        // queue could otherwise fill: `make_room`), not every pass: a
        // doorbell write per pass is an MMIO write per I/O at QD1, and
        // with shadow doorbells one per batch the controller posted. The
        // admin queue announces every pass. It goes before the SQ tail,
        // as in SPDK's `nvme_pcie_qpair_process_completions`, so that the
        // write that sets the device to work ends the pass. Under QEMU an
        // MMIO write right after it can wait on the device model the SQ
        // doorbell has just woken: at 4 KiB QD32 the other order cost a
        // tenth of the IOPS (docs/benchmarks/driver.md, 2026-12-05).
        if self.cq_head != old_head && (self.qid == 0 || self.cq_unannounced() >= self.cq_batch()) {
            self.announce_cq_head();
        }
        // What the callbacks submitted goes to the device now, with one
        // doorbell update for the pass, not at the next pass: the deadline
        // cadence and the owner's loop would otherwise sit between a
        // completion and its successor's doorbell. SPDK rings once per
        // completion pass the same way (`delay_cmd_submit`,
        // lib/nvme/nvme_pcie_common.c).
        let ring_start = self.stamp::<PROFILE>();
        self.ring_as::<PROFILE>();
        let rung = self.stamp::<PROFILE>() - ring_start;
        self.polls = self.polls.wrapping_add(1);
        let due = self.polls.is_multiple_of(DEADLINE_CHECK_POLLS)
            || (reaped == 0 && self.polls.is_multiple_of(IDLE_DEADLINE_CHECK_POLLS));
        if due && self.timeout.is_some() && self.free.len() < self.trackers.len() {
            reaped += delivery.end(self, |pair, mut on_completion| pair.check_deadlines(&mut on_completion));
        }
        if PROFILE {
            if let Some(profiler) = self.profiler.as_deref_mut() {
                // The doorbell counts in its own phase (`ring_as`).
                profiler.polled(start, self.clock.now().saturating_sub(rung), reaped, callback);
            }
        }
        reaped
    }
}
