//! What Identify says about a controller and its namespaces, summed up
//! for the driver: each active namespace ([`NamespaceInfo`]), and the
//! controller-wide limits a namespace handle and its zero-out take
//! ([`ControllerLimits`]). It sits below `controller`, `namespace` and
//! `zeroout`, which all read it, so none of them imports another to
//! build itself.

use crate::cmd::nvm::{self, COPY_MAX_RANGES, DSM_MAX_RANGES};
use crate::quirks::Quirks;
use crate::spec::identify::{IdentifyController, IdentifyControllerNvm, IdentifyNamespace};
use crate::spec::zns::{IdentifyControllerZns, IdentifyNamespaceZns};
use serde::Serialize;

/// What a namespace handle and its zero-out take from their controller:
/// Identify's controller pages and the limits bring-up settled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ControllerLimits<'a> {
    pub(crate) identify: &'a IdentifyController,
    pub(crate) identify_nvm: Option<&'a IdentifyControllerNvm>,
    pub(crate) identify_zns: Option<&'a IdentifyControllerZns>,
    /// CAP.MPSMIN in bytes: the unit of MDTS, WZSL and ZASL.
    pub(crate) min_page_size: usize,
    /// MDTS in bytes, `None` if unlimited.
    pub(crate) max_transfer_bytes: Option<u64>,
    /// The largest transfer one data pointer describes (a PRP list page,
    /// or an SGL descriptor).
    pub(crate) data_pointer_max_bytes: usize,
    /// The effective quirks.
    pub(crate) quirks: Quirks,
    /// Bring-up enabled Copy Descriptor Format 2h (Host Behavior Support
    /// CDFE bit 2): Copy may name a source namespace.
    pub(crate) cross_namespace_copy: bool,
}

/// A zoned namespace's geometry and limits.
#[derive(Clone, Debug, Serialize)]
pub struct ZonedInfo {
    /// Zone size, in logical blocks (ZSZE of the LBA format in use); the zone
    /// capacity may be smaller, per zone.
    pub zone_size_blocks: u64,
    /// Max open zones, `None` if unlimited.
    pub max_open_zones: Option<u32>,
    /// Max active zones, `None` if unlimited.
    pub max_active_zones: Option<u32>,
    /// The Identify Namespace data for the Zoned Namespace Command Set (CNS
    /// 05h, CSI 02h), as read.
    pub identify: IdentifyNamespaceZns,
}

/// An active namespace as Identify describes it.
#[derive(Clone, Debug, Serialize)]
pub struct NamespaceInfo {
    /// Namespace ID.
    pub nsid: u32,
    /// Command Set Identifier (0 NVM, 2 Zoned).
    pub csi: u8,
    /// Logical block size, in bytes (LBADS of the LBA format in use).
    pub block_size: u32,
    /// NSZE: the namespace size in logical blocks.
    pub capacity_blocks: u64,
    /// The Identify Namespace data (CNS 00h), as read.
    pub identify: IdentifyNamespace,
    /// Zone geometry and limits; `None` for a namespace that is not zoned.
    pub zoned: Option<ZonedInfo>,
}

impl NamespaceInfo {
    /// The namespace size, in bytes (NSZE times the block size); `u128` so no
    /// namespace size overflows.
    pub fn capacity_bytes(&self) -> u128 {
        u128::from(self.capacity_blocks) * u128::from(self.block_size)
    }
}

/// Range limits of Dataset Management and Copy, as the controller reports
/// them (DMRL/DMRSL/DMSL in the NVM controller data, MSRC/MSSRL/MCL in the
/// namespace data). A limit the device does not report is the command's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RangeLimits {
    /// Ranges per Dataset Management command (DMRL; at most 256).
    pub dsm_ranges: usize,
    /// Logical blocks per Dataset Management range (DMRSL).
    pub dsm_range_blocks: u64,
    /// Logical blocks per Dataset Management command, over all its ranges
    /// (DMSL).
    pub dsm_total_blocks: u64,
    /// Source ranges per Copy command (MSRC + 1).
    pub copy_ranges: usize,
    /// Logical blocks per Copy source range (MSSRL).
    pub copy_range_blocks: u64,
    /// Logical blocks per Copy command, over all its ranges (MCL).
    pub copy_total_blocks: u64,
}

impl Default for RangeLimits {
    fn default() -> Self {
        RangeLimits {
            dsm_ranges: DSM_MAX_RANGES,
            dsm_range_blocks: u64::from(u32::MAX),
            dsm_total_blocks: u64::MAX,
            copy_ranges: COPY_MAX_RANGES,
            copy_range_blocks: u64::from(nvm::MAX_BLOCKS),
            copy_total_blocks: u64::MAX,
        }
    }
}
