//! The zoned allocator's scenarios, written once for every device model:
//! each takes the controllers (namespace 1 of each, in order), drives a
//! volume on them and checks what it reads back. The QEMU guest tool
//! `volume-check` runs them over VFIO on QEMU's controllers
//! (`examples/tests/qemu_volume.rs`, `qemu_mirror.rs`), and
//! `testkit/tests/sim_scenarios.rs` runs the same bodies on the simulator,
//! so the two device models cannot drift apart. The data is a function of
//! the seed and each extent's owner, so a later process can check it too.
//!
//! - `zns`, `conventional` (one of that kind): format; a few hundred
//!   extents of varied sizes on two streams, many in flight; streams never
//!   share a zone; commit; free two of every three, commit; reclaim until
//!   idle (with NVMe Copy where offered), commit; every live extent reads
//!   back and freed ones are gone; each extent's LBA is its zone's start
//!   plus its offset; the volume's invariants hold.
//! - `zcap` (ZNS, zone capacity below zone size): the same, and no extent
//!   reaches past a zone's capacity.
//! - `4k` (4096-byte LBAs): the same, one LBA per volume block.
//! - `tags` (ZNS with per-block metadata): the same, with the volume's
//!   checksums in block tags (required).
//! - `limits` (ZNS, max-open 2, max-active 4): two streams are refused at
//!   format; one stream fills the volume to `Error::NoSpace(_)`; after frees
//!   and reclaim it fills again; everything reads back.
//! - `reopen write` (one): format, write, free, commit; then writes and
//!   frees left uncommitted, and the volume is abandoned.
//! - `reopen verify` (the same one, after a new bring-up): `Volume::open`
//!   rebuilds exactly the committed state: committed extents read back,
//!   uncommitted writes are absent, uncommitted frees undone; the volume
//!   keeps working.
//! - `mirror` (two): the `zns` workload on `Profile::Mirror`; both copies of
//!   every extent read back.
//! - `repair` (two): a mirror; the [`Host`] flips bytes of one block of
//!   copy 0 at rest; the read returns the original data with the block
//!   reported repaired, and `rewrite_copy` plus a commit fix the copy.
//! - `tags repair` (two, with per-block metadata): `repair` on a volume
//!   whose checksums are block tags: the flipped block fails its tag.
//! - `area` (ZNS): the `zns` workload on zone checksum areas
//!   (`ChecksumStore::Area`): once written and committed, the full zones
//!   are sealed and only the zones being filled keep checksums in memory;
//!   reclaim moves copies out of sealed zones.
//! - `area repair` (two): `repair` on checksum areas, the victim in a
//!   sealed zone with no checksums in memory.
//!
//! Two more run as phases, one process each, on controllers the [`Host`]
//! brings up: [`MetadataPhase`] (format 2's metadata under overwritten
//! media, swapped and foreign devices) and [`MembersPhase`] (a mirror's
//! members pulled, replaced and rejoined).
//!
//! Passed checks print `PREFIX: SCENARIO CHECK: ok (DETAIL)` (see
//! [`Check`]); a failure is an `Err` naming what was wrong.

mod checks;
mod devices;
mod drive;
mod host;
mod members;
mod metadata;
mod reopen;
mod repair;
mod workload;

pub use checks::*;
pub use devices::*;
pub use drive::*;
pub use host::*;
pub use members::{run_members, MembersPhase};
pub use metadata::{run_metadata, MetadataPhase};
use reopen::{reopen_verify, reopen_write};
use repair::repair;
use workload::{limits, workload};

use nvme_driver::Controller;
use std::cell::RefCell;
use std::fmt::Display;
use std::time::Duration;

/// A mebibyte.
pub const MIB: u64 = 1 << 20;

/// Software zones on conventional namespaces: the size of the ZNS zones
/// the tests use, so both kinds fill and reclaim alike.
pub const SOFTWARE_ZONE_BYTES: u64 = 16 * MIB;

/// Writes kept in flight.
pub const WRITE_DEPTH: usize = 16;

/// Extents the single-namespace and mirror workloads write.
pub const WORKLOAD_EXTENTS: u64 = 600;

/// Blocks one reclaim step may move.
pub const RECLAIM_STEP_BLOCKS: u64 = 256;

/// Bounds on loops that wait for the volume or the host.
pub const RECLAIM_STEPS_MAX: usize = 100_000;
pub const RECLAIM_TIME_MAX: Duration = Duration::from_secs(120);
pub const WRITE_TIME_MAX: Duration = Duration::from_secs(120);
pub const CORRUPTION_WAIT_MAX: Duration = Duration::from_secs(20);

/// Where in the chosen block the host flips bytes, and how many.
pub const CORRUPT_OFFSET_IN_BLOCK: usize = 256;
pub const CORRUPT_BYTES: usize = 64;

/// Prints passed checks as `PREFIX: LABEL CHECK: ok (DETAIL)`, the lines
/// the QEMU tests look for, and remembers their names for callers in the
/// same process; carries the scenario's seed.
#[derive(Debug)]
pub struct Check {
    /// Who speaks: the tool's name (`volume-check`) or the test's.
    pub prefix: &'static str,
    /// The scenario (or phase) being run.
    pub label: &'static str,
    pub seed: u64,
    passed: RefCell<Vec<String>>,
}

impl Check {
    pub fn new(prefix: &'static str, label: &'static str, seed: u64) -> Check {
        Check { prefix, label, seed, passed: RefCell::default() }
    }

    pub fn ok(&self, check: &str, detail: impl Display) {
        println!("{}: {} {check}: ok ({detail})", self.prefix, self.label);
        self.passed.borrow_mut().push(check.to_string());
    }

    /// The checks passed so far, in order.
    pub fn passed(&self) -> Vec<String> {
        self.passed.borrow().clone()
    }
}

/// The scenarios written once for every device model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Zns,
    Conventional,
    Zcap,
    FourK,
    /// The `zns` workload on a namespace with per-block metadata: the
    /// volume must keep its checksums in block tags.
    Tags,
    /// `repair` on two namespaces with per-block metadata (block tags).
    TagsRepair,
    /// The `zns` workload on zone checksum areas.
    Area,
    /// `repair` on zone checksum areas, the victim in a sealed zone.
    AreaRepair,
    Limits,
    ReopenWrite,
    ReopenVerify,
    Mirror,
    Repair,
}

impl Scenario {
    /// Every scenario, in the order the suites run them.
    pub const ALL: [Scenario; 13] = [
        Scenario::Zns,
        Scenario::Conventional,
        Scenario::Zcap,
        Scenario::FourK,
        Scenario::Tags,
        Scenario::TagsRepair,
        Scenario::Area,
        Scenario::AreaRepair,
        Scenario::Limits,
        Scenario::ReopenWrite,
        Scenario::ReopenVerify,
        Scenario::Mirror,
        Scenario::Repair,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Scenario::Zns => "zns",
            Scenario::Conventional => "conventional",
            Scenario::Zcap => "zcap",
            Scenario::FourK => "4k",
            Scenario::Tags => "tags",
            Scenario::TagsRepair => "tags repair",
            Scenario::Area => "area",
            Scenario::AreaRepair => "area repair",
            Scenario::Limits => "limits",
            Scenario::ReopenWrite => "reopen write",
            Scenario::ReopenVerify => "reopen verify",
            Scenario::Mirror => "mirror",
            Scenario::Repair => "repair",
        }
    }

    /// The controllers the scenario takes.
    pub fn controllers(self) -> usize {
        match self {
            Scenario::Mirror | Scenario::Repair | Scenario::TagsRepair | Scenario::AreaRepair => 2,
            _ => 1,
        }
    }

    /// The checks a passing run reports, in order: what the QEMU suite
    /// looks for in the guest's output and the simulator suite in
    /// [`Check::passed`].
    pub fn checks(self) -> Vec<&'static str> {
        const REPAIR: [&str; 9] =
            ["geometry", "format", "commit", "corrupted", "read", "commit rewrite", "rewrite", "verify", "invariants"];
        let mut checks = match self {
            Scenario::Limits => vec![
                "geometry",
                "two streams refused",
                "fill",
                "commit",
                "free",
                "commit frees",
                "reclaim",
                "commit refill",
                "write again",
                "verify",
                "invariants",
            ],
            Scenario::ReopenWrite => vec!["geometry", "commit", "commit second", "committed", "uncommitted"],
            Scenario::ReopenVerify => {
                vec!["geometry", "open", "committed state", "invariants", "commit after open", "keeps working"]
            }
            Scenario::Repair | Scenario::TagsRepair | Scenario::AreaRepair => REPAIR.to_vec(),
            _ => vec![
                "geometry",
                "format",
                "write",
                "streams",
                "commit",
                "free",
                "commit frees",
                "reclaim",
                "commit reclaim",
                "verify",
                "lba",
                "invariants",
            ],
        };
        // The workload's optional checks, where it makes them.
        let (before, extra) = match self {
            Scenario::Mirror => ("write", "lanes"),
            Scenario::Zcap => ("commit", "capacity"),
            Scenario::Tags => ("commit", "tagged"),
            Scenario::Area => ("free", "areas"),
            _ => return checks,
        };
        let at = checks.iter().position(|c| *c == before).expect("a workload check");
        checks.insert(at, extra);
        checks
    }

    /// What the scenario needs of the namespaces and `geometry` lacks.
    fn missing(self, geometry: &[Geometry], devices: &[zoned_allocator::Device]) -> Option<&'static str> {
        let first = geometry[0];
        match self {
            Scenario::Zns | Scenario::Zcap | Scenario::Area | Scenario::AreaRepair if !first.zoned => {
                Some("a ZNS namespace")
            }
            Scenario::Conventional if first.zoned => Some("a conventional namespace"),
            Scenario::FourK if first.lba_bytes != 4096 => Some("4096-byte LBAs"),
            Scenario::Tags | Scenario::TagsRepair if devices.iter().any(|d| d.tag_layout().is_none()) => {
                Some("per-block metadata of 8 bytes or more on every namespace")
            }
            Scenario::Limits if !(first.zoned && first.max_open == Some(2) && first.max_active == Some(4)) => {
                Some("a ZNS namespace with max-open 2 and max-active 4")
            }
            _ => None,
        }
    }
}

/// Runs `scenario` on `controllers` (namespace 1 of each), reporting each
/// passed check through `check`; `host` damages media for the repair
/// scenarios.
pub fn run(check: &Check, scenario: Scenario, controllers: &[Controller], host: &mut dyn Host) -> Result<(), String> {
    if controllers.len() != scenario.controllers() {
        return Err(format!(
            "{} takes {} controllers, got {}",
            scenario.label(),
            scenario.controllers(),
            controllers.len()
        ));
    }
    match scenario {
        Scenario::Zns
        | Scenario::Conventional
        | Scenario::Zcap
        | Scenario::FourK
        | Scenario::Tags
        | Scenario::Area
        | Scenario::Mirror => workload(check, scenario, controllers),
        Scenario::Limits => limits(check, controllers),
        Scenario::ReopenWrite => reopen_write(check, controllers),
        Scenario::ReopenVerify => reopen_verify(check, controllers),
        Scenario::Repair | Scenario::TagsRepair | Scenario::AreaRepair => repair(check, scenario, controllers, host),
    }
}

/// Opens namespace 1 of each controller and checks and reports what
/// `scenario` needs of them.
fn scenario_devices(
    check: &Check,
    scenario: Scenario,
    controllers: &[Controller],
) -> Result<(Vec<zoned_allocator::Device>, Vec<Geometry>), String> {
    let devices = open_devices(controllers)?;
    let geometry = check_geometry(check, &devices, |geometry| scenario.missing(geometry, &devices))?;
    Ok((devices, geometry))
}
