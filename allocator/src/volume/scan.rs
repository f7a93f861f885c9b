//! The walk scrub takes: a lane's extents in physical order with their
//! checksums.

use super::{ExtentRef, Volume};
use crate::Location;

impl Volume {
    /// Copy `lane`'s extents in physical order from `from`: one map lookup,
    /// then a walk, for scrub to take in batches as large as it likes.
    pub fn extents_from(&self, lane: usize, from: Location) -> impl Iterator<Item = ExtentRef<'_>> + '_ {
        let device = &self.devices[self.lanes[lane].device];
        self.lanes[lane].index.range(from..).map(move |(&location, id)| {
            let extent = &self.extents[id];
            ExtentRef {
                id: *id,
                owner: extent.owner,
                location,
                lba: device.lba(location.zone, location.offset),
                blocks: extent.blocks,
                crcs: &extent.crcs,
            }
        })
    }
}
