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

mod doorbell;
mod pair;
mod profile;
pub mod prp;
mod quarantine;
mod raw;
pub mod sgl;

pub(crate) use doorbell::{ShadowPages, ShadowPolicy};
pub(crate) use pair::{AbortOutcome, Condition, DoorbellConfig, Epoch, QueueHost};
pub use pair::{IoBuffer, IoCompletion, QueuePair, QueueStats, Request, SubmitError, DEFAULT_IO_TIMEOUT};
pub use profile::PhaseTicks;
pub(crate) use quarantine::{Held, Quarantine};
pub(crate) use raw::layout as raw_layout;
pub use raw::RawQueue;
