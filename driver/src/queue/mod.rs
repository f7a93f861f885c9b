//! Queues. [`SyncQueue`] runs one command at a time and is what the admin
//! queue (and bring-up's zone report) use; the polled I/O queue pairs build
//! on the same ring layout.

mod sync;

pub(crate) use sync::SyncQueue;
