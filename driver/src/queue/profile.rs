//! Where a queue pair's time goes, phase by phase, when its owner asks
//! ([`super::QueuePair::set_profiling`]): each phase is bracketed by reads
//! of the pair's clock (the TSC where it is used, see [`crate::clock`]).
//! Off, the I/O path pays one well-predicted branch per phase; on, a few
//! clock reads per command, which the breakdown itself includes.

use serde::Serialize;

/// Ticks of the pair's clock spent in each phase, and how often each ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PhaseTicks {
    /// Commands submitted while profiling.
    pub submits: u64,
    /// `submit`'s checks: the pair alive, a free slot, the buffers' I/O
    /// address space.
    pub checks: u64,
    /// The data pointer: PRP entries (and list) or the SGL descriptor.
    pub data_pointer: u64,
    /// The tracker and the submission queue entry.
    pub sqe: u64,
    /// SQ tail doorbell updates (the fence and the MMIO or shadow write).
    pub doorbell: u64,
    /// How many SQ doorbell updates.
    pub doorbells: u64,
    /// Poll passes that reaped nothing, and their ticks.
    pub empty_polls: u64,
    /// Ticks of the empty poll passes.
    pub empty_poll: u64,
    /// Poll passes that reaped something.
    pub reaping_polls: u64,
    /// Ticks of those passes, less the owner's completion callback:
    /// reading the entries, the trackers, the CQ head doorbell.
    pub reaping: u64,
    /// Ticks inside the owner's completion callback.
    pub callback: u64,
    /// Commands published and completed while profiling: what `device`
    /// divides by.
    pub completions: u64,
    /// The device's time: from the SQ doorbell update that published each
    /// command to the poll pass that found its completion, summed.
    pub device: u64,
}

/// The profiler's state: the ticks, and the slots queued since the last
/// doorbell (stamped when it is rung).
#[derive(Debug)]
pub(crate) struct Profiler {
    pub(crate) ticks: PhaseTicks,
    /// Slots pushed and not yet published, at most a queue's depth.
    unpublished: Vec<u16>,
    /// When each slot's command was published.
    published_at: Box<[u64]>,
}

impl Profiler {
    /// For a pair of `slots` trackers: allocates everything up front.
    pub(crate) fn new(slots: usize) -> Self {
        Profiler {
            ticks: PhaseTicks::default(),
            unpublished: Vec::with_capacity(slots),
            published_at: vec![0; slots].into_boxed_slice(),
        }
    }

    /// A submission, stamped at its start, after its checks, after its
    /// data pointer and at its end.
    pub(crate) fn submitted(&mut self, slot: u16, [start, checked, pointed, end]: [u64; 4]) {
        debug_assert!(start <= checked && checked <= pointed && pointed <= end);
        let ticks = &mut self.ticks;
        ticks.submits += 1;
        ticks.checks += checked - start;
        ticks.data_pointer += pointed - checked;
        ticks.sqe += end - pointed;
        debug_assert!(self.unpublished.len() < self.unpublished.capacity(), "more pushed than the queue holds");
        self.unpublished.push(slot);
    }

    /// The SQ doorbell was updated between `start` and `end`.
    pub(crate) fn rung(&mut self, start: u64, end: u64) {
        self.ticks.doorbells += 1;
        self.ticks.doorbell += end - start;
        for slot in self.unpublished.drain(..) {
            self.published_at[usize::from(slot)] = end;
        }
    }

    /// The completion of `slot`'s command was found at `now` (not counted
    /// for a command published before profiling began).
    pub(crate) fn found(&mut self, slot: usize, now: u64) {
        let published_at = std::mem::take(&mut self.published_at[slot]);
        if published_at != 0 {
            self.ticks.completions += 1;
            self.ticks.device += now.saturating_sub(published_at);
        }
    }

    /// A poll pass from `start` to `end` that reaped `reaped` commands and
    /// spent `callback` ticks in the owner's callback.
    pub(crate) fn polled(&mut self, start: u64, end: u64, reaped: usize, callback: u64) {
        let ticks = &mut self.ticks;
        let pass = end.saturating_sub(start);
        if reaped == 0 {
            ticks.empty_polls += 1;
            ticks.empty_poll += pass;
        } else {
            ticks.reaping_polls += 1;
            ticks.reaping += pass.saturating_sub(callback);
            ticks.callback += callback;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_and_the_device_time_runs_from_the_doorbell() {
        let mut profiler = Profiler::new(4);
        profiler.submitted(2, [10, 12, 15, 20]);
        profiler.rung(20, 25);
        profiler.polled(25, 30, 0, 0);
        profiler.found(2, 100);
        profiler.polled(95, 110, 1, 4);
        // Published before profiling began: no device time.
        profiler.found(3, 120);
        let t = profiler.ticks;
        assert_eq!((t.submits, t.checks, t.data_pointer, t.sqe), (1, 2, 3, 5));
        assert_eq!((t.doorbells, t.doorbell, t.device, t.completions), (1, 5, 75, 1));
        assert_eq!((t.empty_polls, t.empty_poll, t.reaping_polls, t.reaping, t.callback), (1, 5, 1, 11, 4));
    }
}
