//! Where a scrub stands, persisted by the caller to resume after a
//! restart.

use serde::{Deserialize, Serialize};

/// Where a scrub stands: the caller persists it (JSON) to resume after a
/// restart. Everything before the position of the lane named was read and
/// verified; lanes before it are done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The volume scrubbed ([`Volume::id`](zoned_allocator::Volume::id)); [`scrub`](crate::scrub) refuses a checkpoint of
    /// another volume.
    pub volume_id: u64,
    /// The copy (lane) being scrubbed at this point.
    pub lane: usize,
    /// The extent to start from, and blocks of it already done.
    pub zone: u32,
    /// The 4 KiB block offset of that extent in `zone`.
    pub offset: u32,
    /// Blocks at the start of that extent already read and verified.
    pub skip_blocks: u32,
    /// Bytes read before this point, over the whole scrub.
    pub bytes_done: u64,
    /// Every lane is done.
    pub finished: bool,
}
