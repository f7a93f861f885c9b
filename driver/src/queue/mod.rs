//! Queues: [`QueuePair`] is the polled path for I/O and, with qid 0 and
//! its blocking helpers, for admin commands.

mod doorbell;
mod pair;
pub mod prp;

pub(crate) use doorbell::{ShadowPages, ShadowPolicy};
pub(crate) use pair::{AbortOutcome, Condition, DoorbellConfig, Epoch, QueueHost};
pub use pair::{IoBuffer, IoCompletion, QueuePair, QueueStats, Request, SubmitError, DEFAULT_IO_TIMEOUT};
