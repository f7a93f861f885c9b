//! The metadata journal: its wire format (`format`: labels, records,
//! checkpoints), where it lies (`layout`: two copies of two segments), how
//! it is written (`log`), how a page's owners are read back from it
//! (`blobs`) and how the committed state is recovered from it
//! (`recovery`).

mod blobs;
pub(crate) mod format;
pub(crate) mod layout;
pub(crate) mod log;
pub(crate) mod recovery;

pub(crate) use format::*;
