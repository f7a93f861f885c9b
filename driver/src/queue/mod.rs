//! Queues: [`QueuePair`] is the polled path for I/O and, with qid 0 and
//! its blocking helpers, for admin commands.
//!
//! A queue pair owns one submission and one completion ring in DMA memory,
//! a fixed table of command trackers (one per slot, so the I/O path never
//! allocates) and its doorbells (the `doorbell` module handles shadow
//! doorbells and EventIdx, NVMe Base 2.0 §5.8). [`prp`] describes each
//! buffer with PRP entries, using one preallocated list page per slot, and
//! [`sgl`] with one SGL descriptor where the controller supports SGLs.
//! Submissions are published with one doorbell write per batch and
//! completions reaped by polling the phase tag; deadlines, aborts and
//! controller resets are handled on the same polled path (see
//! [`QueuePair`]). The [`Controller`](crate::Controller) creates the pairs
//! and re-creates their queues after a reset.
//!
//! # What pairs share on the I/O path
//!
//! A pair is owned by one thread and takes no lock to submit or poll. What
//! it touches besides its own rings, trackers and counters:
//! - **The controller's `Epoch`**: one Acquire load of its generation
//!   per submission and per poll pass. A reset is its only writer, so the
//!   line stays shared (read-only) in every core's cache.
//! - **Its doorbell registers**: MMIO, one SQ tail and one CQ head register
//!   per queue, written only by this pair.
//! - **The shadow doorbell and EventIdx pages** (Doorbell Buffer Config),
//!   when the controller offers them: one page each for every queue, at
//!   the register stride, so with the usual stride of 4 bytes eight
//!   queues' entries share a 64-byte line. The offsets are the
//!   specification's; pairs on different cores then write the same lines.
//!   Controllers that offer Doorbell Buffer Config are emulated ones (QEMU),
//!   where an MMIO exit costs far more than a shared line;
//!   `ControllerOptions::shadow_doorbells` turns them off.
//! - **A [`DmaPool`](crate::dma::DmaPool) it takes buffers from**: `get`
//!   and a buffer's drop are a lock-free queue operation and a reference
//!   count on the pool, shared by every thread using that pool. A buffer
//!   that goes out with a request and comes back with its completion is
//!   not taken or returned per I/O; callers that do take one per I/O
//!   should keep a pool per thread, as `perf` does.
//!
//! Nothing else is shared: the quarantine, the admin queue and the
//! controller's reset path are taken only on recovery.

mod doorbell;
mod host;
pub use host::resets_begun;
mod pair;
mod profile;
pub mod prp;
mod quarantine;
mod raw;
mod request;
pub mod sgl;

pub(crate) use doorbell::{ShadowPages, ShadowPolicy};
pub(crate) use host::{AbortOutcome, Condition, DoorbellConfig, Epoch, QueueHost};
pub use pair::{Finished, QueuePair, QueueStats, Submitter, DEFAULT_IO_TIMEOUT};
pub use profile::PhaseTicks;
pub(crate) use quarantine::{Held, Quarantine};
pub use raw::RawQueue;
pub use request::{IoBuffer, IoCompletion, Request, SubmitError};

/// Where a queue's rings and PRP list pages sit in its one DMA region,
/// each on its own 4 KiB pages (the controller's page size): the CQ at 0,
/// where every poll pass reads it with no offset to add, the SQ, then
/// `lists` list pages. One region, so one IOMMU mapping and,
/// where the platform has them, one 2 MiB huge page for all of them
/// ([`crate::dma::DmaRegion::allocate_preferring_huge_pages`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingLayout {
    pub(crate) sq_offset: usize,
    pub(crate) lists_offset: usize,
    /// The bytes the region needs.
    pub(crate) len: usize,
}

impl RingLayout {
    pub(crate) fn new(entries: u16, lists: usize) -> Self {
        use crate::dma::PAGE_SIZE;
        let sqe = std::mem::size_of::<crate::spec::command::Command>();
        let cqe = std::mem::size_of::<crate::spec::completion::Completion>();
        let sq_offset = (usize::from(entries) * cqe).next_multiple_of(PAGE_SIZE);
        let lists_offset = sq_offset + (usize::from(entries) * sqe).next_multiple_of(PAGE_SIZE);
        RingLayout { sq_offset, lists_offset, len: lists_offset + lists * PAGE_SIZE }
    }
}

/// Entries from `from` up to `to` on a ring of `entries` (both indices
/// below `entries`): a compare and a subtraction, not a division, on every
/// submission and reaping pass.
#[inline]
pub(crate) fn ring_distance(from: u16, to: u16, entries: u16) -> usize {
    debug_assert!(from < entries && to < entries, "{from} and {to} on a ring of {entries}");
    let (from, to, entries) = (usize::from(from), usize::from(to), usize::from(entries));
    if to >= from {
        to - from
    } else {
        to + entries - from
    }
}

#[cfg(test)]
mod tests {
    use super::{ring_distance, RingLayout};

    #[test]
    fn the_ring_layout_keeps_rings_and_lists_on_their_own_pages() {
        let layout = RingLayout::new(256, 255);
        assert_eq!((layout.sq_offset, layout.lists_offset), (4 * 1024, 20 * 1024));
        assert_eq!(layout.len, 20 * 1024 + 255 * 4096);
        // Tiny queues still give each part a page of its own.
        let layout = RingLayout::new(2, 1);
        assert_eq!((layout.sq_offset, layout.lists_offset, layout.len), (4096, 8192, 12288));
        // A 2 MiB huge page holds a 256-entry queue with a list page per
        // command.
        assert!(RingLayout::new(256, 256).len <= crate::dma::HUGE_PAGE_SIZE);
    }

    #[test]
    fn ring_distance_wraps() {
        assert_eq!(ring_distance(0, 0, 8), 0);
        assert_eq!(ring_distance(2, 5, 8), 3);
        assert_eq!(ring_distance(6, 1, 8), 3);
        assert_eq!(ring_distance(7, 6, 8), 7);
        for entries in 1..=9u16 {
            for from in 0..entries {
                for to in 0..entries {
                    let expected = (usize::from(to) + usize::from(entries) - usize::from(from)) % usize::from(entries);
                    assert_eq!(ring_distance(from, to, entries), expected, "{from}->{to} of {entries}");
                }
            }
        }
    }
}
