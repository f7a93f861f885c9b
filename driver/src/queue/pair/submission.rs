//! Submission: a request checked, its data pointer built (PRPs or one
//! SGL descriptor) and its SQE written into the ring; the SQ tail
//! published with one doorbell update per batch.

use super::*;

impl QueuePair {
    /// Queues `request`. Its buffer belongs to the queue pair until the
    /// completion returns it. A full queue, a buffer PRPs cannot describe,
    /// or a device gone or failed hands the request back untouched.
    #[allow(clippy::result_large_err, reason = "the request comes back by value: no heap allocation on the I/O path")]
    pub fn submit(&mut self, request: Request) -> std::result::Result<(), (SubmitError, Request)> {
        if self.profiler.is_some() {
            self.submit_profiled(request)
        } else {
            self.submit_as::<false>(request)
        }
    }

    /// `submit` with phase timings, out of the way of the one without.
    #[cold]
    #[inline(never)]
    #[allow(clippy::result_large_err, reason = "as submit")]
    pub(super) fn submit_profiled(&mut self, request: Request) -> std::result::Result<(), (SubmitError, Request)> {
        self.submit_as::<true>(request)
    }

    #[allow(clippy::result_large_err, reason = "as submit")]
    #[inline(always)]
    pub(super) fn submit_as<const PROFILE: bool>(
        &mut self,
        request: Request,
    ) -> std::result::Result<(), (SubmitError, Request)> {
        let start = self.stamp::<PROFILE>();
        self.catch_up_if_idle();
        if let Some(error) = self.dead {
            return Err((error, request));
        }
        let Some(&slot) = self.free.last() else {
            return Err((SubmitError::QueueFull, request));
        };
        let foreign = |b: &Option<IoBuffer>| b.as_ref().is_some_and(|b| b.buffer().dma_domain() != self.dma_domain);
        if foreign(&request.buffer) || foreign(&request.metadata) {
            return Err((SubmitError::ForeignBuffer, request));
        }
        // Opcode bits 1:0 give the data direction; 1xb moves data to the
        // host (NVMe Base 2.0 §3.3.3.1, Figure 89).
        if request.command.opcode & 0b10 != 0 {
            let read_only = |b: &Option<IoBuffer>| b.as_ref().is_some_and(|b| !b.buffer().device_writes());
            if read_only(&request.buffer) || read_only(&request.metadata) {
                return Err((SubmitError::DeviceReadOnly, request));
            }
        }
        let checked = self.stamp::<PROFILE>();
        let (iova, len) = request.buffer.as_ref().map_or((0, 0), |b| (b.iova(), b.len()));
        let mut command = request.command;
        if let Err(error) = self.fill_data_pointer(&mut command, slot, iova, len) {
            return Err((error, request));
        }
        if let Some(metadata) = &request.metadata {
            // PSDT 00b: MPTR is the address of one contiguous buffer, dword
            // aligned (NVMe Base 2.0 §4.1.2, Figure 92).
            if !metadata.iova().is_multiple_of(4) {
                return Err((SubmitError::Buffer(prp::PrpError::Misaligned { iova: metadata.iova() }), request));
            }
            command.mptr = metadata.iova();
        }
        let pointed = self.stamp::<PROFILE>();
        self.free.pop();
        let tracker = &mut self.trackers[usize::from(slot)];
        debug_assert!(!tracker.busy, "a free slot is never busy");
        tracker.busy = true;
        tracker.timed_out = false;
        tracker.deadline = None;
        tracker.token = request.token;
        // A free slot holds no buffer (`release` and recovery take them),
        // so there is nothing to drop: no drop call for the command's
        // fields to be kept across.
        debug_assert!(tracker.buffer.is_none() && tracker.metadata.is_none(), "a free slot holds no buffer");
        std::mem::forget(std::mem::replace(&mut tracker.buffer, request.buffer));
        std::mem::forget(std::mem::replace(&mut tracker.metadata, request.metadata));
        command.cid = slot;
        tracker.command = command;
        self.push_command(command);
        if PROFILE {
            if let Some(profiler) = self.profiler.as_deref_mut() {
                profiler.submitted(slot, [start, checked, pointed, self.clock.now()]);
            }
        }
        Ok(())
    }

    /// Queues a command whose data lies at `iova` (`len` bytes), outside
    /// the queue pair's ownership.
    ///
    /// # Safety
    /// `[iova, iova + len)` must be DMA-mapped memory of this controller
    /// that stays mapped, and is neither read nor written by the host in a
    /// way that races with the device, until this command's completion has
    /// been returned by [`QueuePair::poll`].
    pub unsafe fn submit_raw(&mut self, mut command: Command, iova: u64, len: usize, token: u64) -> Result<()> {
        self.catch_up_if_idle();
        if let Some(error) = self.dead {
            return Err(error.into());
        }
        let Some(&slot) = self.free.last() else {
            return Err(Error::QueueFull);
        };
        self.fill_data_pointer(&mut command, slot, iova, len).map_err(Error::from)?;
        self.free.pop();
        let tracker = &mut self.trackers[usize::from(slot)];
        tracker.busy = true;
        tracker.timed_out = false;
        tracker.deadline = None;
        tracker.token = token;
        debug_assert!(tracker.buffer.is_none() && tracker.metadata.is_none(), "a free slot holds no buffer");
        (tracker.buffer, tracker.metadata) = (None, None);
        command.cid = slot;
        tracker.command = command;
        self.push_command(command);
        Ok(())
    }

    /// After a reset, with nothing in flight there is nothing to report:
    /// the queues are re-created before the submission instead of failing
    /// it at the next poll. (With commands in flight, `poll` ends them and
    /// then this submission too.)
    #[inline]
    pub(super) fn catch_up_if_idle(&mut self) {
        if self.epoch.generation() != self.generation && self.free.len() == self.trackers.len() {
            self.recover(&mut |_| unreachable!("nothing in flight"));
        }
    }

    #[inline(always)]
    pub(super) fn fill_data_pointer(
        &mut self,
        command: &mut Command,
        slot: u16,
        iova: u64,
        len: usize,
    ) -> std::result::Result<(), SubmitError> {
        if len == 0 {
            return Ok(());
        }
        // The pointer comes back by value, so that the command stays out
        // of memory until it is written whole (see `push_command`).
        let (dptr1, dptr2, sgl) = self.data_pointer(slot, iova, len)?;
        if sgl {
            command.flags = (command.flags & FLAGS_FUSE_MASK) | (PSDT_SGL_MPTR_CONTIGUOUS << FLAGS_PSDT_SHIFT);
        }
        command.prp1 = dptr1;
        command.prp2 = dptr2;
        Ok(())
    }

    /// The data pointer of `len` (> 0) bytes at `iova` for the command in
    /// `slot`: DPTR's two halves, and whether they are an SGL descriptor.
    fn data_pointer(&mut self, slot: u16, iova: u64, len: usize) -> std::result::Result<(u64, u64, bool), SubmitError> {
        // The bytes from the start of the buffer's first page to its end:
        // past two pages, PRPs need a list. An odd length goes by PRPs,
        // which a controller that wants dword granularity for SGLs (SGLS
        // 10b) would refuse in an SGL.
        let span = (iova % PAGE_SIZE as u64) as usize + len;
        if self.sgl_above.is_some_and(|threshold| span > threshold) && len.is_multiple_of(4) {
            let (dptr1, dptr2) = sgl::data_block(iova, len).map_err(SubmitError::Buffer)?;
            return Ok((dptr1, dptr2, true));
        }
        let list_offset = self.lists_offset + usize::from(slot) * PAGE_SIZE;
        let list_iova = self.rings.iova() + list_offset as u64;
        let rings = &self.rings;
        let (prp1, prp2) = prp::build(iova, len, list_iova, |index, address| {
            rings.write::<u64>(list_offset + index * 8, address.to_le());
        })
        .map_err(SubmitError::Buffer)?;
        Ok((prp1, prp2, false))
    }

    /// As a command takes its slot: the controller must always have room
    /// in the CQ for every command in flight. It counts as occupied both
    /// the entries not yet reaped (whose trackers are still busy) and
    /// those reaped but not announced, and a CQ of `depth` entries holds
    /// `depth - 1`, the trackers' number: so the busy trackers, this
    /// command's included, and the unannounced entries must fit in it.
    #[inline(always)]
    pub(super) fn make_room(&mut self) {
        let busy = self.trackers.len() - self.free.len();
        if busy + self.cq_unannounced() > self.trackers.len() {
            self.announce_cq_head();
        }
    }

    /// Writes `command`, its identifier set, into the SQ. Callers build it
    /// as a value and keep their copy in the tracker: a copy read back
    /// from memory just written field by field is read with wider loads
    /// than it was stored with, and such loads miss store-to-load
    /// forwarding.
    #[inline(always)]
    pub(super) fn push_command(&mut self, command: Command) {
        self.make_room();
        self.rings.write(self.sq_offset as usize + usize::from(self.sq_tail) * SQE_SIZE, command);
        self.sq_tail = if self.sq_tail + 1 == self.depth { 0 } else { self.sq_tail + 1 };
        self.stats.submitted += 1;
    }

    /// Publishes queued submissions with one SQ doorbell update.
    pub fn ring(&mut self) {
        if self.profiler.is_some() {
            self.ring_profiled();
        } else {
            self.ring_as::<false>();
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn ring_profiled(&mut self) {
        self.ring_as::<true>();
    }

    #[inline(always)]
    pub(super) fn ring_as<const PROFILE: bool>(&mut self) {
        if self.sq_tail != self.sq_published {
            let start = self.stamp::<PROFILE>();
            // Every SQE written before must be visible before the
            // controller learns of the new tail.
            fence(Ordering::Release);
            self.sq_doorbell.update(self.sq_published, self.sq_tail);
            self.sq_published = self.sq_tail;
            if PROFILE {
                if let Some(profiler) = self.profiler.as_deref_mut() {
                    profiler.rung(start, self.clock.now());
                }
            }
        }
    }
}
