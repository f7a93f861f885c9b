//! Completions handled in place: [`QueuePair::poll_in_place`] hands each
//! finished command over still in its slot, with its buffers and data
//! pointer where they are, and the owner may send a Read or Write from the
//! same slot and buffers at once ([`Finished::read`], [`Finished::write`])
//! or take the completion as [`QueuePair::poll`] gives it and submit
//! anything ([`Finished::complete`]).
//!
//! This is the shape of SPDK's callbacks, where `spdk_nvme_perf` submits
//! the next I/O from the completion of the last (`io_complete`, then
//! `submit_single_io`): no request is built, no buffer moves out of the
//! pair and back, no slot goes to the free list and comes back, and the
//! data pointer (PRPs, a PRP list page, an SGL descriptor) is written once
//! for the buffer, not once per command. What stays is what keeps the
//! driver trustworthy: the new LBA range is checked against the namespace,
//! a Read into a buffer the device may only read is refused, the command
//! gets a new deadline, and it completes exactly once like any other.

use super::completion::{status_of, Delivery};
use super::*;
use crate::cmd::nvm;
use crate::namespace::Namespace;
use crate::spec::command::opcode::nvm as op;

/// A command the pair finished, handed to [`QueuePair::poll_in_place`]'s
/// callback. It is that command's one completion: the callback either
/// sends a new command from its slot ([`Finished::read`],
/// [`Finished::write`]) or takes the completion ([`Finished::complete`]).
/// Dropped without either, the command is complete and its buffers go
/// back to their pools.
#[must_use = "a finished command not sent again or completed is dropped with its buffers"]
#[derive(Debug)]
pub struct Finished<'a> {
    /// `None` only once `complete` has moved it out.
    pair: Option<&'a mut QueuePair>,
    token: u64,
    status: std::result::Result<(), IoError>,
    result: u64,
    what: What,
}

#[derive(Debug)]
enum What {
    /// The device completed the command in this slot, which stays busy,
    /// with its buffers, until sent again or completed.
    InSlot(u16),
    /// The pair ended the command itself (a deadline, a reset, removal):
    /// its slot is free, its buffers (if the device's DMA is known to have
    /// ended) in the completion.
    Ended(IoCompletion),
    /// Sent again or completed.
    Done,
}

/// The queue pair, to submit from a completion callback (from
/// [`Finished::complete`]).
#[derive(Debug)]
pub struct Submitter<'a> {
    pair: &'a mut QueuePair,
}

impl Submitter<'_> {
    /// As [`QueuePair::submit`].
    #[allow(clippy::result_large_err, reason = "as QueuePair::submit")]
    pub fn submit(&mut self, request: Request) -> std::result::Result<(), (SubmitError, Request)> {
        self.pair.submit(request)
    }
}

impl<'a> Finished<'a> {
    /// The caller's token, as given at submission.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// `Ok` on success; else why not, as [`IoCompletion::status`].
    pub fn status(&self) -> std::result::Result<(), IoError> {
        self.status
    }

    /// DW0 and DW1 of the completion, as [`IoCompletion::result_u64`].
    pub fn result_u64(&self) -> u64 {
        self.result
    }

    /// The data buffer: the device no longer touches it, so it may be read
    /// or filled before it goes out again. `None` for a command without
    /// one, or one the pair ended while the device might still write it
    /// (quarantined).
    pub fn buffer(&self) -> Option<&IoBuffer> {
        match &self.what {
            What::InSlot(slot) => {
                self.pair.as_deref().and_then(|pair| pair.trackers[usize::from(*slot)].buffer.as_ref())
            }
            What::Ended(completion) => completion.buffer.as_ref(),
            What::Done => None,
        }
    }

    /// Reads `ns`'s blocks from `slba` into the same buffers, from the same
    /// slot: the same length, data pointer and metadata buffer, a new
    /// token and deadline. Only for a Read or Write of `ns` that the
    /// device completed (else, and for an LBA range outside `ns` or a
    /// buffer the device may only read, the finished command comes back
    /// with the error, unchanged). Published when the poll pass ends, with
    /// whatever else its callbacks sent.
    #[inline]
    #[allow(clippy::result_large_err, reason = "the finished command comes back by value")]
    pub fn read(self, ns: &Namespace, slba: u64, token: u64) -> std::result::Result<(), (Error, Finished<'a>)> {
        self.again(ns, op::READ, slba, 0, token)
    }

    /// Writes the same buffers to `ns` at `slba`, from the same slot; with
    /// `fua` the data is durable at completion. As [`Finished::read`].
    #[inline]
    #[allow(clippy::result_large_err, reason = "the finished command comes back by value")]
    pub fn write(
        self,
        ns: &Namespace,
        slba: u64,
        fua: bool,
        token: u64,
    ) -> std::result::Result<(), (Error, Finished<'a>)> {
        self.again(ns, op::WRITE, slba, nvm::cdw12_fua(fua), token)
    }

    /// The command in the slot again as `opcode` at `slba`, with CDW12's
    /// flags `flags`: what `nvm::read` or `nvm::write` would build, with
    /// the data pointer it had.
    #[inline(always)]
    #[allow(clippy::result_large_err, reason = "as read")]
    fn again(
        mut self,
        ns: &Namespace,
        opcode: u8,
        slba: u64,
        flags: u32,
        token: u64,
    ) -> std::result::Result<(), (Error, Finished<'a>)> {
        let (What::InSlot(slot), Some(pair)) = (&self.what, self.pair.as_deref_mut()) else {
            return Err((not_in_slot(), self));
        };
        let slot = *slot;
        if let Some(error) = pair.dead {
            return Err((error.into(), self));
        }
        let start = pair.clock_if_profiling();
        // The clock is a copy, so timing the checks keeps `tracker`.
        let (profiling, clock) = (pair.profiler.is_some(), pair.clock);
        let tracker = &mut pair.trackers[usize::from(slot)];
        let last = &tracker.command;
        if !matches!(last.opcode, op::READ | op::WRITE) || last.nsid != ns.nsid() || tracker.buffer.is_none() {
            return Err((not_in_slot(), self));
        }
        let blocks = nvm::cdw12_blocks(last.cdw12);
        if let Err(error) = ns.check_range(slba, u64::from(blocks)) {
            return Err((Error::InvalidRequest(error), self));
        }
        // A Write's buffers were not checked for the device writing them.
        if opcode == op::READ && last.opcode == op::WRITE {
            let read_only = |b: &Option<IoBuffer>| b.as_ref().is_some_and(|b| !b.buffer().device_writes());
            if read_only(&tracker.buffer) || read_only(&tracker.metadata) {
                return Err((SubmitError::DeviceReadOnly.into(), self));
            }
        }
        let checked = if profiling { clock.now() } else { 0 };
        // Retargeted in place; its identifier is still the slot's. (Built
        // as a value instead, as `submit` does, it took 19 instructions
        // more per I/O and no less time.)
        nvm::retarget(&mut tracker.command, opcode, slba, blocks, flags);
        tracker.token = token;
        tracker.timed_out = false;
        tracker.deadline = None;
        let command = tracker.command;
        pair.push_command(command);
        if let Some(profiler) = pair.profiler.as_deref_mut() {
            let end = pair.clock.now();
            // No data pointer to build: the checks, then the SQE.
            profiler.submitted(slot, [start, checked, checked, end]);
        }
        // The slot's command is in flight again and `What::InSlot` owns
        // nothing: there is nothing to drop, and no drop call to make on
        // every I/O.
        std::mem::forget(self);
        Ok(())
    }

    /// The completion, as [`QueuePair::poll`] gives it (the slot is free),
    /// and the pair, to submit more from the callback.
    pub fn complete(mut self) -> (IoCompletion, Submitter<'a>) {
        let completion = self.take();
        let pair = self.pair.take().expect("the pair stays until complete");
        (completion, Submitter { pair })
    }

    /// The completion, taking it from the slot if it is there.
    fn take(&mut self) -> IoCompletion {
        match std::mem::replace(&mut self.what, What::Done) {
            What::InSlot(slot) => {
                let pair = self.pair.as_deref_mut().expect("the pair stays until complete");
                pair.release(slot, self.status, self.result as u32, (self.result >> 32) as u32)
            }
            What::Ended(completion) => completion,
            What::Done => unreachable!("consumed"),
        }
    }
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        if !matches!(self.what, What::Done) {
            drop(self.take());
        }
    }
}

#[cold]
fn not_in_slot() -> Error {
    Error::InvalidArgument(
        "only a Read or Write of this namespace, with its buffer, that the device completed goes again in place".into(),
    )
}

/// `poll_as`'s delivery to `poll_in_place`'s callback.
pub(super) struct InPlace<F> {
    pub(super) on_done: F,
}

impl<F: FnMut(Finished<'_>)> Delivery for InPlace<F> {
    #[inline(always)]
    fn reaped(&mut self, pair: &mut QueuePair, slot: u16, entry: &Completion) {
        let tracker = &pair.trackers[usize::from(slot)];
        let token = tracker.token;
        let status = status_of(entry, tracker.timed_out);
        let result = u64::from(entry.dw1) << 32 | u64::from(entry.dw0);
        (self.on_done)(Finished { pair: Some(pair), token, status, result, what: What::InSlot(slot) });
    }

    /// What the pair ends goes first to its own list, lent for the while
    /// (its capacity is a slot each, so pushing never allocates), and to
    /// the callback after, with the pair free again to lend to it.
    fn end(
        &mut self,
        pair: &mut QueuePair,
        ending: impl FnOnce(&mut QueuePair, &mut dyn FnMut(IoCompletion)) -> usize,
    ) -> usize {
        let mut ended = std::mem::take(&mut pair.ended);
        let count = ending(pair, &mut |completion| ended.push(completion));
        // Oldest first, as they were ended. Most deadline checks end
        // nothing: no drain then.
        if !ended.is_empty() {
            for completion in ended.drain(..) {
                let (token, status, result) = (completion.token, completion.status, completion.result_u64());
                (self.on_done)(Finished {
                    pair: Some(&mut *pair),
                    token,
                    status,
                    result,
                    what: What::Ended(completion),
                });
            }
        }
        pair.ended = ended;
        count
    }
}

impl QueuePair {
    /// As [`QueuePair::poll`], but each command finishes in place: the
    /// callback gets a [`Finished`], which can send the next Read or Write
    /// from the same slot and buffers with no request built and no buffer
    /// moved, or give the completion and the pair to submit anything.
    /// Commands the pair ends itself (deadlines, resets, removal) come
    /// through the same callback, after the pair is done with them, with
    /// their slots free.
    pub fn poll_in_place(&mut self, on_done: impl FnMut(Finished<'_>)) -> usize {
        let mut delivery = InPlace { on_done };
        if self.profiler.is_some() {
            self.poll_profiled(&mut delivery)
        } else {
            self.poll_as::<false, _>(&mut delivery)
        }
    }
}
