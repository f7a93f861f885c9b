//! The contract between a queue pair and its controller: where its
//! doorbells are, the reset epoch and condition it reads without a lock,
//! and what it asks of the controller on the rare paths.

use super::doorbell::{ShadowPages, ShadowPolicy};
use super::quarantine::Held;
use crate::error::Result;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Where the doorbells of a new queue pair point.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DoorbellConfig {
    pub(crate) dstrd: u8,
    /// Shadow doorbell and EventIdx pages, if Doorbell Buffer Config ran.
    pub(crate) shadow: Option<ShadowPages>,
    /// How the shadow is used (ignored without one).
    pub(crate) policy: ShadowPolicy,
}

/// A controller's condition, as its queue pairs see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Condition {
    Live,
    /// Register reads return all ones. Final.
    Gone,
    /// A reset did not bring the controller back; another reset may.
    Failed,
}

/// What a controller tells its queue pairs without a lock: a generation
/// that every controller reset advances (queues of an older generation no
/// longer exist on the controller), and its condition. The poll path reads
/// the generation once per pass: one load of a line that is written only
/// by a reset.
#[derive(Debug, Default)]
pub(crate) struct Epoch {
    generation: AtomicU64,
    condition: AtomicU8,
    /// Queues of every generation below this one are known to be stopped:
    /// a disable was confirmed (CSTS.RDY read back 0) after they were
    /// created, so the device no longer touches their memory or their
    /// commands' buffers.
    stopped_below: AtomicU64,
}

/// Controller resets begun in this process, every controller's: see
/// [`resets_begun`].
static RESETS_BEGUN: AtomicU64 = AtomicU64::new(0);

/// How many controller resets have begun in this process, on any
/// controller: a user of many queue pairs that saw this count unchanged
/// since it last looked knows that no pair's reset generation
/// ([`crate::QueuePair::reset_generation`]) moved meanwhile, without
/// reading each (one load, however many devices).
pub fn resets_begun() -> u64 {
    RESETS_BEGUN.load(Ordering::Acquire)
}

const LIVE: u8 = 0;
const GONE: u8 = 1;
const FAILED: u8 = 2;

impl Epoch {
    pub(crate) fn generation(&self) -> u64 {
        // Acquire: the reset's writes are visible once its generation is seen.
        self.generation.load(Ordering::Acquire)
    }

    /// A reset begins: every queue of the earlier generation is gone.
    pub(crate) fn advance(&self) -> u64 {
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        // After the generation: whoever sees the count move sees it too.
        RESETS_BEGUN.fetch_add(1, Ordering::AcqRel);
        generation
    }

    /// A disable was confirmed: the device's DMA for every queue so far has
    /// ended. Called before the generation advances, so a pair that sees
    /// the new generation sees this too.
    pub(crate) fn confirm_stopped(&self) {
        // Release: pairs read it after an Acquire of the generation.
        self.stopped_below.fetch_max(self.generation() + 1, Ordering::AcqRel);
    }

    /// Whether the device's DMA for queues of `generation` is known to have
    /// ended (see [`super::quarantine`]).
    pub(crate) fn stopped_since(&self, generation: u64) -> bool {
        self.stopped_below.load(Ordering::Acquire) > generation
    }

    pub(crate) fn condition(&self) -> Condition {
        match self.condition.load(Ordering::Acquire) {
            LIVE => Condition::Live,
            GONE => Condition::Gone,
            _ => Condition::Failed,
        }
    }

    /// Records `condition`; a device once gone stays gone.
    pub(crate) fn set_condition(&self, condition: Condition) {
        let value = match condition {
            Condition::Live => LIVE,
            Condition::Gone => GONE,
            Condition::Failed => FAILED,
        };
        let _ = self.condition.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| (old != GONE).then_some(value));
    }
}

/// How an Abort command went (NVMe Base 2.0 §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AbortOutcome {
    /// DW0 bit 0 clear: the command is aborted; its own completion (with
    /// Command Abort Requested) follows, or already came.
    Aborted,
    /// DW0 bit 0 set: not aborted (it may have completed meanwhile, or the
    /// controller declined, as QEMU always does).
    NotAborted,
    /// The Abort failed or did not complete in time.
    Failed,
    /// The device is gone.
    Gone,
}

/// What an I/O queue pair asks of its controller on the rare paths:
/// timeouts, resets, removal and drop. Each call may take the controller's
/// admin lock and wait (bounded); the submit path never calls it, and the
/// poll path only when a deadline passed, the controller's status says so,
/// or a reset happened.
pub(crate) trait QueueHost: Send + Sync + std::fmt::Debug {
    /// Sends Abort for command `cid` of queue `qid` and waits for its
    /// completion (within the admin timeout).
    fn abort(&self, qid: u16, cid: u16) -> AbortOutcome;
    /// Resets the controller, unless a reset already began after
    /// `generation`.
    fn reset(&self, generation: u64);
    /// Register reads returned all ones.
    fn device_gone(&self);
    /// Creates queue pair `qid` again after a reset, on the same memory:
    /// the generation the new queues belong to.
    fn recreate_queues(&self, qid: u16, depth: u16, sq_iova: u64, cq_iova: u64) -> Result<u64>;
    /// Deletes queue pair `qid` (created in `generation`) and frees the qid.
    /// `false` if the controller may still use the memory.
    fn delete_queues(&self, qid: u16, generation: u64) -> bool;
    /// Keeps `memory`, which the device may still write, out of use until
    /// a disable is confirmed (see [`super::quarantine`]).
    fn quarantine(&self, memory: Held);
}
