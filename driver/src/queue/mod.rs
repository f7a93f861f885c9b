//! Queues. [`QueuePair`] is the polled I/O path; [`SyncQueue`] runs one
//! command at a time for the admin queue and bring-up.

mod doorbell;
mod pair;
pub mod prp;
mod sync;

pub(crate) use doorbell::ShadowPages;
pub(crate) use pair::DoorbellConfig;
pub use pair::{IoBuffer, IoCompletion, QueuePair, QueueStats, Request, SubmitError};
pub(crate) use sync::SyncQueue;
