//! `volume-check SCENARIO --pci BDF... [--seed N] [--phase PHASE]`:
//! the guest side of the zoned allocator's QEMU tests
//! (`examples/tests/qemu_volume.rs`; `qemu_mirror.rs` for `members`).
//! Each scenario builds a volume on the controllers named (namespace 1 of
//! each, in the order given), drives it and checks what it reads back; the
//! data is a deterministic function of the seed and each extent's owner,
//! so a later process can check it too.
//!
//! Scenarios, and the controllers each takes (`--pci`, in this order):
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
//!   format; one stream fills the volume to `Error::NoSpace`; after frees
//!   and reclaim it fills again; everything reads back.
//! - `reopen --phase write` (one): format, write, free, commit; then writes
//!   and frees left uncommitted, and the process ends.
//! - `reopen --phase verify` (the same one, in a new process):
//!   `Volume::open` rebuilds exactly the committed state: committed extents
//!   read back, uncommitted writes are absent, uncommitted frees undone; the
//!   volume keeps working.
//! - `mirror` (two): the `zns` workload on `Profile::Mirror`; both copies of
//!   every extent read back.
//! - `repair` (two): a mirror; prints `volume-check: corrupt-me OFFSET LEN`,
//!   the byte range of one block of copy 0 in the first controller's
//!   backing image (LBA × LBA size), waits (up to 20 s) until the host has
//!   inverted those bytes, then requires the read to return the original
//!   data with the block reported repaired, and `rewrite_copy` plus a commit
//!   to fix the copy.
//! - `tags-repair` (two, with per-block metadata): `repair` on a volume
//!   whose checksums are block tags: the flipped block fails its tag.
//! - `area` (ZNS): the `zns` workload on a volume with zone checksum areas
//!   (`ChecksumStore::Area`): once written and committed, the full zones
//!   are sealed and only the zones being filled keep checksums in memory;
//!   reclaim moves copies out of sealed zones (their checksums read from
//!   the areas).
//! - `area-repair` (two): `repair` on a volume with checksum areas, the
//!   victim in a sealed zone with no checksums in memory: the flipped block
//!   fails the tag in its zone's area.
//! - `metadata --phase PHASE`: format 2's metadata safety on a mirror of a
//!   conventional namespace (device 0) and a second namespace, whose
//!   backing images the host overwrites in part while the guest waits; one
//!   process per phase, in this order in one boot:
//!   - `format` (the two): format; extents in three commits with frees;
//!     prints `volume-check: overwrite-me BDF OFFSET LEN`, device 0's
//!     metadata zones (zone 0 up to its first data zone), then waits (up
//!     to a minute) until device 0 no longer probes as a member.
//!   - `garbage` (the two): open finds device 0 unlabelled, opens from
//!     device 1's copy, rewrites device 0's (`copies_repaired`); every
//!     extent reads back from both copies; device 0 is labelled again.
//!   - `reopen` (the two): opens with nothing to repair.
//!   - `swapped` (the two, in the other order): the same volume opens,
//!     `device_order` [1, 0].
//!   - `foreign` (the two and a third): a single volume formatted on the
//!     third; opening the mirror with it as device 1 fails with
//!     `ForeignDevice { device: 1, .. }`; then both volumes open as they
//!     were, neither repaired.
//!   - `damage` (the two): prints `overwrite-me` for device 0's journal
//!     records (its label blocks kept) and device 1's whole metadata, then
//!     waits until device 1 no longer probes as a member; open must fail
//!     with `MetadataLost`, and `seqwrite` (no `--format`) must exit 1 with
//!     "nothing was formatted"; then prints `volume-check: restore-me BDF
//!     OFFSET LEN...` (device 0's records) and retries open, which must
//!     fail with `MetadataLost` until it opens (up to a minute), rewrite
//!     device 1's copy and read back every extent; then reopens clean.
//!
//!   Every open prints the volume's ID (`volume 0x...`) for the host to
//!   compare.
//! - `members --phase PHASE`: a mirror's members through their life: a
//!   device pulled mid-write (the host unplugs it through QEMU's monitor
//!   when the guest prints `volume-check: unplug-me`), a degraded open, a
//!   replacement and resilver, a device back after a controller reset;
//!   phases `unplug`, `degraded` (with `--gone BDF`), `replace`, `rejoin`
//!   and `final`, one process each, in this order in one boot (see
//!   `volume-check/members.rs`).
//!
//! Passed checks print `volume-check: SCENARIO CHECK: ok (DETAIL)`; the
//! last line is `volume-check: SCENARIO ok` (status 0) or
//! `volume-check: SCENARIO FAILED: why` (status 1). Phases call themselves
//! by scenario and phase (`reopen write`, `metadata garbage`). Usage
//! errors exit with status 2.

use nvme_driver::spec::identify::Oncs;
use nvme_driver::{Controller, ControllerOptions};
use nvme_examples::device::open_controller;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Display;
use std::fs::File;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use zoned_allocator::zones::ZoneUse;

// The crate root is this file: its modules sit beside it, in a directory
// of its name.
#[path = "volume-check/members.rs"]
mod members;
use zoned_allocator::{
    BadBlock, ChecksumStore, Device, DeviceOptions, DeviceState, Error, ExtentId, Location, Profile, ReclaimProgress,
    Volume, VolumeOptions, BLOCK_SIZE,
};

const USAGE: &str = "usage: volume-check zns|conventional|zcap|4k|tags|tags-repair|area|area-repair|limits|reopen|\
                     mirror|repair|metadata|members \
                     --pci BDF... [--seed N] [--phase PHASE] [--gone BDF]\n\
                     phases: reopen write|verify; metadata format|garbage|reopen|swapped|foreign|damage; \
                     members unplug|degraded|replace|rejoin|final";

const MIB: u64 = 1 << 20;

/// Software zones on conventional namespaces: the size of the ZNS zones
/// the tests use, so both kinds fill and reclaim alike.
const SOFTWARE_ZONE_BYTES: u64 = 16 * MIB;

/// Writes kept in flight.
const WRITE_DEPTH: usize = 16;

/// Extents the single-namespace and mirror workloads write.
const WORKLOAD_EXTENTS: u64 = 600;

/// Blocks one reclaim step may move.
const RECLAIM_STEP_BLOCKS: u64 = 256;

/// Bounds on loops that wait for the volume or the host.
const RECLAIM_STEPS_MAX: usize = 100_000;
const RECLAIM_TIME_MAX: Duration = Duration::from_secs(120);
const WRITE_TIME_MAX: Duration = Duration::from_secs(120);
const CORRUPTION_WAIT_MAX: Duration = Duration::from_secs(20);

/// Where in the chosen block the host flips bytes, and how many.
const CORRUPT_OFFSET_IN_BLOCK: usize = 256;
const CORRUPT_BYTES: usize = 64;

/// How long the metadata scenario waits for the host to overwrite or
/// restore an image (the host hashes whole images first), and how often
/// it looks.
const HOST_WAIT_MAX: Duration = Duration::from_secs(60);
const HOST_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Bound on the `seqwrite` run that must refuse a damaged volume.
const SEQWRITE_TIME_MAX: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Write,
    Verify,
}

/// The metadata scenario's phases, one process each, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MetadataPhase {
    Format,
    Garbage,
    Reopen,
    Swapped,
    Foreign,
    Damage,
}

impl MetadataPhase {
    fn parse(name: &str) -> Option<MetadataPhase> {
        Some(match name {
            "format" => MetadataPhase::Format,
            "garbage" => MetadataPhase::Garbage,
            "reopen" => MetadataPhase::Reopen,
            "swapped" => MetadataPhase::Swapped,
            "foreign" => MetadataPhase::Foreign,
            "damage" => MetadataPhase::Damage,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
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
    Reopen(Phase),
    Mirror,
    Repair,
    Metadata(MetadataPhase),
    Members(members::Phase),
}

impl Scenario {
    fn label(self) -> &'static str {
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
            Scenario::Reopen(Phase::Write) => "reopen write",
            Scenario::Reopen(Phase::Verify) => "reopen verify",
            Scenario::Mirror => "mirror",
            Scenario::Repair => "repair",
            Scenario::Metadata(MetadataPhase::Format) => "metadata format",
            Scenario::Metadata(MetadataPhase::Garbage) => "metadata garbage",
            Scenario::Metadata(MetadataPhase::Reopen) => "metadata reopen",
            Scenario::Metadata(MetadataPhase::Swapped) => "metadata swapped",
            Scenario::Metadata(MetadataPhase::Foreign) => "metadata foreign",
            Scenario::Metadata(MetadataPhase::Damage) => "metadata damage",
            Scenario::Members(phase) => phase.label(),
        }
    }

    fn controllers(self) -> usize {
        match self {
            Scenario::Metadata(MetadataPhase::Foreign) => 3,
            Scenario::Members(phase) => phase.controllers(),
            Scenario::Mirror
            | Scenario::Repair
            | Scenario::TagsRepair
            | Scenario::AreaRepair
            | Scenario::Metadata(_) => 2,
            _ => 1,
        }
    }
}

#[derive(Debug)]
struct Args {
    scenario: Scenario,
    pci: Vec<String>,
    seed: u64,
    /// A device that must leave the guest first (`members --phase
    /// degraded`).
    gone: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut words = std::env::args().skip(1);
    let (mut name, mut phase, mut pci, mut seed, mut gone) = (None, None, Vec::new(), 1u64, None);
    while let Some(word) = words.next() {
        match word.as_str() {
            "--pci" => pci.push(words.next().ok_or("--pci needs a BDF")?),
            "--seed" => {
                let value = words.next().ok_or("--seed needs a number")?;
                seed = value.parse().map_err(|_| format!("--seed {value}: not a number"))?;
            }
            "--phase" => phase = Some(words.next().ok_or("--phase needs a name")?),
            "--gone" => gone = Some(words.next().ok_or("--gone needs a BDF")?),
            "-h" | "--help" => return Err(String::new()),
            _ if name.is_none() => name = Some(word),
            other => return Err(format!("unexpected argument {other}")),
        }
    }
    let name = name.ok_or("no scenario given")?;
    let metadata = |phase: &str| {
        MetadataPhase::parse(phase)
            .map(Scenario::Metadata)
            .ok_or_else(|| format!("--phase {phase}: expected format, garbage, reopen, swapped, foreign or damage"))
    };
    let scenario = match (name.as_str(), phase.as_deref()) {
        ("reopen", Some("write")) => Scenario::Reopen(Phase::Write),
        ("reopen", Some("verify")) => Scenario::Reopen(Phase::Verify),
        ("reopen", _) => return Err("reopen needs --phase write|verify".into()),
        ("metadata", Some(phase)) => metadata(phase)?,
        ("metadata", None) => return Err("metadata needs --phase".into()),
        ("members", Some(phase)) => members::Phase::parse(phase)
            .map(Scenario::Members)
            .ok_or_else(|| format!("--phase {phase}: expected unplug, degraded, replace, rejoin or final"))?,
        ("members", None) => return Err("members needs --phase".into()),
        (_, Some(_)) => return Err(format!("--phase applies to reopen, metadata and members, not {name}")),
        ("zns", None) => Scenario::Zns,
        ("conventional", None) => Scenario::Conventional,
        ("zcap", None) => Scenario::Zcap,
        ("4k", None) => Scenario::FourK,
        ("tags", None) => Scenario::Tags,
        ("tags-repair", None) => Scenario::TagsRepair,
        ("area", None) => Scenario::Area,
        ("area-repair", None) => Scenario::AreaRepair,
        ("limits", None) => Scenario::Limits,
        ("mirror", None) => Scenario::Mirror,
        ("repair", None) => Scenario::Repair,
        _ => return Err(format!("unknown scenario {name}")),
    };
    if pci.len() != scenario.controllers() {
        return Err(format!("{name} takes {} --pci, got {}", scenario.controllers(), pci.len()));
    }
    if gone.is_some() != (scenario == Scenario::Members(members::Phase::Degraded)) {
        return Err("--gone goes with members --phase degraded, and only there".into());
    }
    Ok(Args { scenario, pci, seed, gone })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("volume-check: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let label = args.scenario.label();
    let started = Instant::now();
    match run(&args) {
        Ok(()) => {
            println!("volume-check: {label} ok");
            eprintln!("volume-check: {label} took {} ms", started.elapsed().as_millis());
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("volume-check: {label} FAILED: {why}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let check = Check { label: args.scenario.label(), seed: args.seed };
    if let Scenario::Members(phase) = args.scenario {
        return members::run(&check, phase, &args.pci, args.gone.as_deref());
    }
    let controllers = open_controllers(&args.pci)?;
    match args.scenario {
        Scenario::Zns
        | Scenario::Conventional
        | Scenario::Zcap
        | Scenario::FourK
        | Scenario::Tags
        | Scenario::Area
        | Scenario::Mirror => workload(&check, args.scenario, &controllers),
        Scenario::Limits => limits(&check, &controllers),
        Scenario::Reopen(Phase::Write) => reopen_write(&check, &controllers),
        Scenario::Reopen(Phase::Verify) => reopen_verify(&check, &controllers),
        Scenario::Repair | Scenario::TagsRepair | Scenario::AreaRepair => repair(&check, args.scenario, &controllers),
        Scenario::Metadata(MetadataPhase::Format) => metadata_format(&check, &args.pci, &controllers),
        Scenario::Metadata(phase @ (MetadataPhase::Garbage | MetadataPhase::Reopen | MetadataPhase::Swapped)) => {
            metadata_reopen(&check, phase, &controllers)
        }
        Scenario::Metadata(MetadataPhase::Foreign) => metadata_foreign(&check, &controllers),
        // Lets the controllers go while seqwrite runs.
        Scenario::Metadata(MetadataPhase::Damage) => metadata_damage(&check, &args.pci, controllers),
        Scenario::Members(_) => unreachable!("run above"),
    }
}

/// Opens and brings up each controller, in order.
fn open_controllers(pci: &[String]) -> Result<Vec<Controller>, String> {
    pci.iter()
        .map(|bdf| open_controller(Some(bdf), ControllerOptions::default()).map_err(|e| format!("open {bdf}: {e}")))
        .collect()
}

/// Prints passed checks under the scenario's label.
struct Check {
    label: &'static str,
    seed: u64,
}

impl Check {
    fn ok(&self, check: &str, detail: impl Display) {
        println!("volume-check: {} {check}: ok ({detail})", self.label);
    }
}

// -------------------------------------------------------------------
// devices and geometry
// -------------------------------------------------------------------

fn device_options() -> DeviceOptions {
    DeviceOptions { queue_depth: 128, buffers: 32, ..DeviceOptions::default() }
}

fn volume_options(profile: Profile, streams: u8) -> VolumeOptions {
    VolumeOptions { profile, streams, software_zone_bytes: Some(SOFTWARE_ZONE_BYTES), ..VolumeOptions::default() }
}

/// [`volume_options`] for `scenario`: zone checksum areas for the area
/// scenarios, the format's choice otherwise.
fn scenario_options(scenario: Scenario, profile: Profile, streams: u8) -> VolumeOptions {
    let checksums = match scenario {
        Scenario::Area | Scenario::AreaRepair => ChecksumStore::Area,
        _ => ChecksumStore::Auto,
    };
    VolumeOptions { checksums, ..volume_options(profile, streams) }
}

/// Namespace 1 of each controller, in order.
fn open_devices(controllers: &[Controller]) -> Result<Vec<Device>, String> {
    controllers
        .iter()
        .map(|c| {
            Device::open(c, 1, device_options()).map_err(|e| format!("{}: open namespace 1: {e}", c.transport().name()))
        })
        .collect()
}

/// What a namespace offers, as the checks need it.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    lba_bytes: u32,
    capacity_lbas: u64,
    /// Zone size in LBAs: hardware zones, or the software zones we ask for.
    zone_lbas: u64,
    zoned: bool,
    max_open: Option<u32>,
    max_active: Option<u32>,
    copy: bool,
}

impl Geometry {
    fn of(device: &Device) -> Geometry {
        let ns = device.namespace();
        let lba_bytes = ns.block_size();
        let zones = ns.zones();
        Geometry {
            lba_bytes,
            capacity_lbas: ns.capacity_blocks(),
            zone_lbas: zones.map_or(SOFTWARE_ZONE_BYTES / u64::from(lba_bytes), |z| z.zone_size_blocks),
            zoned: zones.is_some(),
            max_open: zones.and_then(|z| z.max_open_zones),
            max_active: zones.and_then(|z| z.max_active_zones),
            copy: ns.supports(Oncs::COPY),
        }
    }

    fn lbas_per_block(&self) -> u64 {
        BLOCK_SIZE as u64 / u64::from(self.lba_bytes)
    }

    fn describe(&self) -> String {
        let bytes = self.capacity_lbas * u64::from(self.lba_bytes);
        let zone_bytes = self.zone_lbas * u64::from(self.lba_bytes);
        let kind = if self.zoned { "ZNS" } else { "conventional" };
        let zones = if self.zoned { "zones" } else { "software zones" };
        let limit = |l: Option<u32>| l.map_or("no limit".to_string(), |n| n.to_string());
        let mut text = format!(
            "{kind}, {}-byte LBAs, {} MiB, {} {zones} of {} MiB",
            self.lba_bytes,
            bytes / MIB,
            bytes / zone_bytes,
            zone_bytes / MIB
        );
        if self.zoned {
            text += &format!(", max open {}, max active {}", limit(self.max_open), limit(self.max_active));
        }
        text += if self.copy { ", Copy" } else { ", no Copy" };
        text
    }
}

/// The namespaces' geometry, checked against what the scenario needs (the
/// test configures the controllers; a mismatch is a test bug, said clearly).
fn check_geometry(check: &Check, scenario: Scenario, devices: &[Device]) -> Result<Vec<Geometry>, String> {
    let geometry: Vec<Geometry> = devices.iter().map(Geometry::of).collect();
    let first = geometry[0];
    let wrong = |what: &str| Err(format!("the scenario needs {what}; found {}", first.describe()));
    match scenario {
        Scenario::Zns | Scenario::Zcap | Scenario::Area | Scenario::AreaRepair if !first.zoned => {
            return wrong("a ZNS namespace")
        }
        Scenario::Conventional if first.zoned => return wrong("a conventional namespace"),
        Scenario::FourK if first.lba_bytes != 4096 => return wrong("4096-byte LBAs"),
        Scenario::Tags | Scenario::TagsRepair if devices.iter().any(|d| d.tag_layout().is_none()) => {
            return wrong("per-block metadata of 8 bytes or more on every namespace")
        }
        Scenario::Limits if !(first.zoned && first.max_open == Some(2) && first.max_active == Some(4)) => {
            return wrong("a ZNS namespace with max-open 2 and max-active 4")
        }
        // Device 0, whose metadata zones the host overwrites and open
        // rewrites in place, is conventional.
        Scenario::Metadata(phase) if phase != MetadataPhase::Swapped && first.zoned => {
            return wrong("a conventional namespace first")
        }
        _ => {}
    }
    let text: Vec<String> = geometry.iter().map(Geometry::describe).collect();
    check.ok("geometry", text.join("; "));
    Ok(geometry)
}

// -------------------------------------------------------------------
// data
// -------------------------------------------------------------------

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seeded generator for sizes and choices.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Rng {
        let mut state = seed ^ stream.wrapping_mul(0xD6E8_FEB8_6659_FD93);
        splitmix(&mut state);
        Rng(state)
    }

    fn next(&mut self) -> u64 {
        splitmix(&mut self.0)
    }

    /// Uniform in `low..=high`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// The contents of `owner`'s extent of `blocks`: every block starts with
/// the owner and the block's index (so a misplaced block says where it came
/// from), then seeded noise.
fn extent_data(seed: u64, owner: u64, blocks: u32) -> Vec<u8> {
    let mut data = vec![0u8; blocks as usize * BLOCK_SIZE];
    let mut state = seed ^ owner.wrapping_mul(0xA076_1D64_78BD_642F);
    for (index, block) in data.chunks_exact_mut(BLOCK_SIZE).enumerate() {
        block[..8].copy_from_slice(&owner.to_le_bytes());
        block[8..16].copy_from_slice(&(index as u64).to_le_bytes());
        for word in block[16..].chunks_exact_mut(8) {
            word.copy_from_slice(&splitmix(&mut state).to_le_bytes());
        }
    }
    data
}

/// Where `got` first differs from `want`, told in terms of blocks.
fn describe_mismatch(want: &[u8], got: &[u8]) -> String {
    let Some(at) = want.iter().zip(got).position(|(a, b)| a != b) else {
        return format!("lengths {} and {}", want.len(), got.len());
    };
    let block = at / BLOCK_SIZE;
    let start = block * BLOCK_SIZE;
    let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    format!(
        "first difference at byte {at} (block {block}); that block holds owner {} block {}",
        word(&got[start..start + 8]),
        word(&got[start + 8..start + 16])
    )
}

/// `bytes` in MiB, to a tenth.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

/// Extent sizes: mostly small, some medium, a few as large as the volume
/// allows.
fn extent_blocks(rng: &mut Rng, max_blocks: u32) -> u32 {
    let max = u64::from(max_blocks);
    let blocks = match rng.next() % 8 {
        0..=2 => rng.range(1, 4),
        3..=5 => rng.range(5, 32),
        _ => rng.range(33.min(max), max),
    };
    blocks.min(max) as u32
}

/// Whether the workloads free `owner`'s extent: two of every three, spread
/// over every zone, so zones are left a third live and reclaim has work.
fn freed(seed: u64, owner: u64) -> bool {
    !Rng::new(seed, owner ^ 0xF4EE).next().is_multiple_of(3)
}

// -------------------------------------------------------------------
// driving the volume
// -------------------------------------------------------------------

/// One planned write.
#[derive(Clone, Copy, Debug)]
struct Planned {
    owner: u64,
    stream: u8,
    blocks: u32,
}

/// `count` writes for owners from `first_owner`, sizes from the seed,
/// round-robin over `streams`.
fn plan(seed: u64, first_owner: u64, count: u64, streams: u8, max_blocks: u32) -> Vec<Planned> {
    let mut rng = Rng::new(seed, first_owner);
    (first_owner..first_owner + count)
        .map(|owner| Planned {
            owner,
            stream: (owner % u64::from(streams)) as u8,
            blocks: extent_blocks(&mut rng, max_blocks),
        })
        .collect()
}

/// What the volume should hold: owner to (extent, blocks, stream).
type Model = BTreeMap<u64, (ExtentId, u32, u8)>;

#[derive(Debug, Default)]
struct WriteReport {
    extents: u64,
    bytes: u64,
    most_in_flight: usize,
    /// The plan stopped at `Error::NoSpace`.
    no_space: bool,
}

/// Writes `planned`, [`WRITE_DEPTH`] at a time in flight, adding each
/// finished extent to `model`. With `stop_at_no_space`, `Error::NoSpace`
/// ends the plan early (reported); otherwise it is a failure.
fn write_all(
    volume: &mut Volume,
    seed: u64,
    planned: &[Planned],
    model: &mut Model,
    stop_at_no_space: bool,
) -> Result<WriteReport, String> {
    let mut report = WriteReport::default();
    let mut pending: HashMap<ExtentId, Planned> = HashMap::new();
    let deadline = Instant::now() + WRITE_TIME_MAX;
    let mut reap = |volume: &mut Volume, pending: &mut HashMap<ExtentId, Planned>, report: &mut WriteReport| {
        while let Some(done) = volume.next_done() {
            let write = pending.remove(&done.id).ok_or_else(|| format!("completion for unknown extent {}", done.id))?;
            done.result.map_err(|e| format!("write of owner {}'s {} blocks failed: {e}", write.owner, write.blocks))?;
            model.insert(write.owner, (done.id, write.blocks, write.stream));
            report.extents += 1;
            report.bytes += u64::from(write.blocks) * BLOCK_SIZE as u64;
        }
        Ok::<(), String>(())
    };
    // Bursts of WRITE_DEPTH submissions with no poll between them, so that
    // many writes are in flight (many appends per zone) however fast the
    // device completes them.
    'bursts: for burst in planned.chunks(WRITE_DEPTH) {
        let data: Vec<Vec<u8>> = burst.iter().map(|w| extent_data(seed, w.owner, w.blocks)).collect();
        while volume.writes_in_flight() > 0 {
            volume.poll();
            if Instant::now() > deadline {
                return Err(format!("writes still in flight after {} s", WRITE_TIME_MAX.as_secs()));
            }
        }
        reap(volume, &mut pending, &mut report)?;
        for (write, data) in burst.iter().zip(&data) {
            match volume.submit_write(write.stream, data, write.owner) {
                Ok(id) => {
                    pending.insert(id, *write);
                    report.most_in_flight = report.most_in_flight.max(volume.writes_in_flight());
                }
                Err(Error::NoSpace) if stop_at_no_space => {
                    report.no_space = true;
                    break 'bursts;
                }
                Err(error) => {
                    return Err(format!("submitting owner {}'s {} blocks: {error}", write.owner, write.blocks))
                }
            }
        }
    }
    volume.wait_idle().map_err(|e| format!("waiting for writes: {e}"))?;
    reap(volume, &mut pending, &mut report)?;
    if !pending.is_empty() {
        return Err(format!("{} writes never completed", pending.len()));
    }
    Ok(report)
}

/// The volume's extents by owner (each owner writes one extent here).
fn extents_by_owner(volume: &mut Volume) -> Result<BTreeMap<u64, ExtentId>, String> {
    let owners = volume.extent_owners().map_err(|e| format!("listing owners: {e}"))?;
    Ok(owners.into_iter().map(|(id, owner)| (owner, id)).collect())
}

/// Reads every extent of `model` and compares it with its data, each copy
/// too when `copies`; requires the volume to hold exactly the model's
/// extents. Returns the bytes read.
fn verify(volume: &mut Volume, seed: u64, model: &Model, copies: bool) -> Result<u64, String> {
    let mut present: BTreeMap<u64, ExtentId> = BTreeMap::new();
    for (id, owner) in volume.extent_owners().map_err(|e| format!("listing owners: {e}"))? {
        if let Some(other) = present.insert(owner, id) {
            return Err(format!("owner {owner} has two extents, {other} and {id}"));
        }
    }
    let expected: BTreeMap<u64, ExtentId> = model.iter().map(|(&owner, &(id, _, _))| (owner, id)).collect();
    if present != expected {
        let missing: Vec<_> = expected.iter().filter(|(o, _)| !present.contains_key(o)).take(10).collect();
        let extra: Vec<_> = present.iter().filter(|(o, _)| !expected.contains_key(o)).take(10).collect();
        return Err(format!(
            "the volume holds {} extents, {} expected; (owner, extent) missing {missing:?}, unexpected {extra:?}",
            present.len(),
            expected.len()
        ));
    }
    let mut bytes = 0u64;
    for (&owner, &(id, blocks, _)) in model {
        let want = extent_data(seed, owner, blocks);
        let len = volume.extent(id).ok_or_else(|| format!("extent {id} (owner {owner}) is gone"))?;
        if len != want.len() {
            return Err(format!("extent {id} (owner {owner}) is {len} bytes, {} written", want.len()));
        }
        let mut got = vec![0u8; want.len()];
        let outcome = volume.read(id, &mut got).map_err(|e| format!("reading extent {id} (owner {owner}): {e}"))?;
        if got != want {
            return Err(format!("extent {id} (owner {owner}) reads back wrong: {}", describe_mismatch(&want, &got)));
        }
        if !outcome.repaired.is_empty() {
            return Err(format!("extent {id} (owner {owner}): blocks {:?} needed repair", outcome.repaired));
        }
        if copies {
            for lane in 0..volume.lanes() {
                volume.read_copy(id, lane, &mut got).map_err(|e| format!("reading copy {lane} of extent {id}: {e}"))?;
                if got != want {
                    return Err(format!("copy {lane} of extent {id} is wrong: {}", describe_mismatch(&want, &got)));
                }
            }
        }
        bytes += want.len() as u64;
    }
    Ok(bytes)
}

/// `Volume::check_invariants`, its panic turned into a failure.
fn invariants(check: &Check, volume: &Volume) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| volume.check_invariants())).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("check_invariants: {message}")
    })?;
    let stats = volume.stats();
    check.ok("invariants", format!("{} extents, {} live, zone counts agree", stats.extents, mib(stats.valid_bytes)));
    Ok(())
}

fn commit(check: &Check, volume: &mut Volume, name: &str) -> Result<(), String> {
    let info = volume.commit().map_err(|e| format!("{name}: {e}"))?;
    check.ok(
        name,
        format!(
            "journal sequence {}, {} operations{}, {} zones reset",
            info.seq,
            info.ops,
            if info.checkpoint { ", a checkpoint" } else { "" },
            info.zones_reset
        ),
    );
    Ok(())
}

/// Frees every extent of `model` that [`freed`] picks; returns how many
/// and their bytes.
fn free_some(volume: &mut Volume, seed: u64, model: &mut Model) -> Result<(u64, u64), String> {
    let victims: Vec<u64> = model.keys().copied().filter(|&owner| freed(seed, owner)).collect();
    let mut bytes = 0;
    for owner in &victims {
        let (id, blocks, _) = model.remove(owner).expect("listed");
        volume.free(id).map_err(|e| format!("freeing extent {id} (owner {owner}): {e}"))?;
        bytes += u64::from(blocks) * BLOCK_SIZE as u64;
    }
    Ok((victims.len() as u64, bytes))
}

#[derive(Debug, Default)]
struct ReclaimReport {
    steps: usize,
    zones: usize,
    moved_blocks: u64,
}

/// Reclaim steps until the volume says there is nothing to reclaim.
fn reclaim_until_idle(volume: &mut Volume) -> Result<ReclaimReport, String> {
    let mut report = ReclaimReport::default();
    let started = Instant::now();
    loop {
        if report.steps >= RECLAIM_STEPS_MAX || started.elapsed() > RECLAIM_TIME_MAX {
            return Err(format!(
                "reclaim still busy after {} steps and {} ms",
                report.steps,
                started.elapsed().as_millis()
            ));
        }
        report.steps += 1;
        match volume.reclaim_step(RECLAIM_STEP_BLOCKS).map_err(|e| format!("reclaim step {}: {e}", report.steps))? {
            ReclaimProgress::Idle => return Ok(report),
            ReclaimProgress::InProgress { moved_blocks, .. } => report.moved_blocks += moved_blocks,
            ReclaimProgress::Reclaimed { moved_blocks, .. } => {
                report.moved_blocks += moved_blocks;
                report.zones += 1;
            }
        }
    }
}

/// Each live extent's first LBA on copy 0 is its zone's start plus its
/// block offset: what the repair test's byte offsets rely on.
fn check_lbas(check: &Check, volume: &Volume, geometry: &Geometry, model: &Model) -> Result<(), String> {
    let mut example = None;
    for &(id, _, _) in model.values() {
        let location = volume.location(id, 0).ok_or_else(|| format!("extent {id} has no copy 0"))?;
        let lba = volume.lba(0, location);
        let want =
            u64::from(location.zone) * geometry.zone_lbas + u64::from(location.offset) * geometry.lbas_per_block();
        if lba != want {
            return Err(format!("extent {id} at {location:?}: LBA {lba}, expected {want}"));
        }
        example.get_or_insert((id, location, lba));
    }
    let (id, location, lba) = example.ok_or("no extent to check")?;
    check.ok(
        "lba",
        format!(
            "{} extents; e.g. extent {id} at zone {} block {} is LBA {lba} = {} x {} + {} x {}",
            model.len(),
            location.zone,
            location.offset,
            location.zone,
            geometry.zone_lbas,
            location.offset,
            geometry.lbas_per_block()
        ),
    );
    Ok(())
}

/// Streams never share a zone (checked before reclaim mixes them).
fn check_streams(check: &Check, volume: &Volume, model: &Model) -> Result<(), String> {
    let mut zone_streams: BTreeMap<(usize, u32), BTreeSet<u8>> = BTreeMap::new();
    for &(id, _, stream) in model.values() {
        for lane in 0..volume.lanes() {
            let location = volume.location(id, lane).ok_or_else(|| format!("extent {id} has no copy {lane}"))?;
            zone_streams.entry((lane, location.zone)).or_default().insert(stream);
        }
    }
    if let Some(((lane, zone), streams)) = zone_streams.iter().find(|(_, s)| s.len() > 1) {
        return Err(format!("copy {lane} zone {zone} holds streams {streams:?}"));
    }
    let streams: BTreeSet<u8> = zone_streams.values().flatten().copied().collect();
    check.ok("streams", format!("{} streams in {} zones, none shared", streams.len(), zone_streams.len()));
    Ok(())
}

/// No extent reaches past its zone's capacity, and capacity is below the
/// zone size.
fn check_capacity(check: &Check, volume: &Volume, geometry: &Geometry, model: &Model) -> Result<(), String> {
    let table = volume.zone_table(0);
    let zone_blocks = (geometry.zone_lbas / geometry.lbas_per_block()) as u32;
    let owned: Vec<u32> = (0..table.zone_count()).filter(|&z| table.zone(z).usage != ZoneUse::NotOwned).collect();
    let capacity = owned.iter().map(|&z| table.zone(z).capacity).max().unwrap_or(0);
    if capacity == 0 || capacity >= zone_blocks {
        return Err(format!("zone capacity {capacity} blocks is not below the zone size of {zone_blocks}"));
    }
    let mut furthest = 0;
    for &(id, blocks, _) in model.values() {
        let location = volume.location(id, 0).ok_or_else(|| format!("extent {id} has no copy 0"))?;
        let end = location.offset + blocks;
        let cap = table.zone(location.zone).capacity;
        if end > cap {
            return Err(format!("extent {id} at {location:?} ends at block {end}, past the zone capacity {cap}"));
        }
        furthest = furthest.max(end);
    }
    let filled = owned.iter().filter(|&&z| table.zone(z).usage == ZoneUse::Full).count();
    if filled == 0 {
        return Err("no zone filled: the workload never reached a zone's capacity".into());
    }
    check.ok(
        "capacity",
        format!(
            "zones of {zone_blocks} blocks with {capacity} usable; {filled} zones filled; extents end by block {furthest}"
        ),
    );
    Ok(())
}

// -------------------------------------------------------------------
// scenarios
// -------------------------------------------------------------------

/// Format, write, free, reclaim and read back: `zns`, `conventional`,
/// `zcap`, `4k` and `mirror`.
fn workload(check: &Check, scenario: Scenario, controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let devices = open_devices(controllers)?;
    let geometry = check_geometry(check, scenario, &devices)?;
    let profile = if scenario == Scenario::Mirror { Profile::Mirror } else { Profile::Single };
    let streams = 2;
    let mut volume =
        Volume::format(devices, &scenario_options(scenario, profile, streams)).map_err(|e| format!("format: {e}"))?;
    require_tags(scenario, &volume)?;
    let stats = volume.stats();
    check.ok(
        "format",
        format!(
            "{profile:?}, {} {}, {} usable in {} zones, extents up to {} KiB, {}",
            volume.lanes(),
            if volume.lanes() == 1 { "copy" } else { "copies" },
            mib(stats.capacity_bytes),
            stats.zones,
            volume.max_extent_bytes() / 1024,
            checksums(&volume),
        ),
    );
    if profile == Profile::Mirror {
        let lanes: Vec<usize> = (0..volume.lanes()).map(|lane| volume.lane_device(lane)).collect();
        if lanes != [0, 1] {
            return Err(format!("mirror copies on devices {lanes:?}, expected [0, 1]"));
        }
        check.ok(
            "lanes",
            format!("copy 0 on {}, copy 1 on {}", controllers[0].transport().name(), controllers[1].transport().name()),
        );
    }

    let max_blocks = (volume.max_extent_bytes() / BLOCK_SIZE) as u32;
    let planned = plan(seed, 0, WORKLOAD_EXTENTS, streams, max_blocks);
    let mut model = Model::new();
    let started = Instant::now();
    let written = write_all(&mut volume, seed, &planned, &mut model, false)?;
    let sizes: BTreeSet<u32> = planned.iter().map(|p| p.blocks).collect();
    check.ok(
        "write",
        format!(
            "{} extents, {}, {} sizes from {} to {} blocks, {streams} streams, up to {} in flight, {} ms",
            written.extents,
            mib(written.bytes),
            sizes.len(),
            sizes.first().unwrap_or(&0),
            sizes.last().unwrap_or(&0),
            written.most_in_flight,
            started.elapsed().as_millis()
        ),
    );
    if written.most_in_flight < WRITE_DEPTH {
        return Err(format!("at most {} writes in flight, {WRITE_DEPTH} submitted at once", written.most_in_flight));
    }
    check_streams(check, &volume, &model)?;
    if scenario == Scenario::Zcap {
        check_capacity(check, &volume, &geometry[0], &model)?;
    }
    if scenario == Scenario::Tags {
        check_tagged(check, &volume, &model)?;
    }
    commit(check, &mut volume, "commit")?;
    if scenario == Scenario::Area {
        check_areas(check, &volume, &model)?;
    }

    let (count, bytes) = free_some(&mut volume, seed, &mut model)?;
    check.ok("free", format!("{count} extents, {}; {} extents live", mib(bytes), model.len()));
    commit(check, &mut volume, "commit frees")?;

    let started = Instant::now();
    let before = volume.stats();
    let reclaimed = reclaim_until_idle(&mut volume)?;
    let after = volume.stats();
    if reclaimed.zones == 0 || after.relocated_bytes == before.relocated_bytes {
        return Err(format!("reclaim found nothing to do: {reclaimed:?}, stats {after:?}"));
    }
    // Relocation must use NVMe Copy where every namespace offers it.
    if geometry.iter().all(|g| g.copy) && after.copy_commands == before.copy_commands {
        return Err(format!("the namespaces offer Copy but reclaim read and wrote: {after:?}"));
    }
    check.ok(
        "reclaim",
        format!(
            "{} zones in {} steps, {} relocated, {} Copy commands, {} empty zones, {} ms",
            reclaimed.zones,
            reclaimed.steps,
            mib(after.relocated_bytes - before.relocated_bytes),
            after.copy_commands - before.copy_commands,
            after.empty_zones,
            started.elapsed().as_millis()
        ),
    );
    commit(check, &mut volume, "commit reclaim")?;

    let started = Instant::now();
    let bytes = verify(&mut volume, seed, &model, profile == Profile::Mirror)?;
    let what = if profile == Profile::Mirror { ", both copies" } else { "" };
    check.ok(
        "verify",
        format!(
            "{} extents, {} read back{what}, freed extents gone, {} ms",
            model.len(),
            mib(bytes),
            started.elapsed().as_millis()
        ),
    );
    check_lbas(check, &volume, &geometry[0], &model)?;
    invariants(check, &volume)
}

/// On zone checksum areas: zones were sealed, and only extents with a
/// copy in a zone not sealed keep their checksums in memory.
fn check_areas(check: &Check, volume: &Volume, model: &Model) -> Result<(), String> {
    let zones = volume.zone_table(0).zone_count();
    let sealed = (0..zones).filter(|&zone| volume.sealed_blocks(0, zone) > 0).count();
    let unsealed_extents = model
        .values()
        .filter(|&&(id, _, _)| volume.location(id, 0).is_some_and(|l| volume.sealed_blocks(0, l.zone) == 0))
        .count();
    if sealed == 0 || volume.mapped_extents() > unsealed_extents {
        return Err(format!(
            "{sealed} zones sealed; {} extents with checksums in memory, {unsealed_extents} in zones not sealed",
            volume.mapped_extents()
        ));
    }
    check.ok(
        "areas",
        format!(
            "{sealed} zones sealed; {} of {} extents with checksums in memory, all in zones being filled",
            volume.mapped_extents(),
            model.len()
        ),
    );
    Ok(())
}

/// `max-open=2,max-active=4`: too many streams refused; one stream fills
/// the volume to `NoSpace`; free, reclaim, and it fills again.
fn limits(check: &Check, controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let refused = open_devices(controllers)?;
    check_geometry(check, Scenario::Limits, &refused)?;
    match Volume::format(refused, &volume_options(Profile::Single, 2)) {
        Err(Error::InvalidConfig(why)) if why.contains("active") => check.ok("two streams refused", why),
        Err(other) => return Err(format!("two streams on max-active 4: expected InvalidConfig, got {other}")),
        Ok(_) => return Err("two streams on max-active 4 were accepted".into()),
    }
    // The refused devices' queue pairs ran commands and are gone: these
    // reuse their queue IDs, with shadow doorbells on (a regression check:
    // stale EventIdx values once left such a pair's doorbell unwritten).
    let devices = open_devices(controllers)?;
    let mut volume = Volume::format(devices, &volume_options(Profile::Single, 1))
        .map_err(|e| format!("format with one stream: {e}"))?;
    let capacity = volume.stats().capacity_bytes;
    let max_blocks = (volume.max_extent_bytes() / BLOCK_SIZE) as u32;
    // Far more than fits: the plan ends at NoSpace.
    let blocks_planned = 2 * capacity / BLOCK_SIZE as u64;
    let planned = plan(seed, 0, blocks_planned / 16, 1, max_blocks.min(64));
    let mut model = Model::new();
    let started = Instant::now();
    let first = write_all(&mut volume, seed, &planned, &mut model, true)?;
    if !first.no_space {
        return Err(format!("{} written without NoSpace", mib(first.bytes)));
    }
    let stats = volume.stats();
    let percent = stats.valid_bytes * 100 / capacity;
    if percent < 90 {
        return Err(format!("NoSpace with only {percent}% of {} used: {stats:?}", mib(capacity)));
    }
    check.ok(
        "fill",
        format!(
            "{} extents, {}, {percent}% of {}, then NoSpace; {} zones finished early; {} ms",
            first.extents,
            mib(first.bytes),
            mib(capacity),
            stats.zones_finished,
            started.elapsed().as_millis()
        ),
    );
    commit(check, &mut volume, "commit")?;

    let (count, bytes) = free_some(&mut volume, seed, &mut model)?;
    check.ok("free", format!("{count} extents, {}; {} extents live", mib(bytes), model.len()));
    commit(check, &mut volume, "commit frees")?;
    let reclaimed = reclaim_until_idle(&mut volume)?;
    if reclaimed.zones == 0 {
        return Err(format!("reclaim freed no zone: {reclaimed:?}"));
    }
    check.ok(
        "reclaim",
        format!(
            "{} zones in {} steps, {} moved",
            reclaimed.zones,
            reclaimed.steps,
            mib(reclaimed.moved_blocks * BLOCK_SIZE as u64)
        ),
    );

    let planned = plan(seed, 1 << 32, blocks_planned / 16, 1, max_blocks.min(64));
    let second = write_all(&mut volume, seed, &planned, &mut model, true)?;
    commit(check, &mut volume, "commit refill")?;
    let percent = second.bytes * 100 / capacity;
    if !second.no_space || percent < 40 {
        return Err(format!(
            "after freeing {} and reclaim, only {} ({percent}%) written (NoSpace: {})",
            mib(bytes),
            mib(second.bytes),
            second.no_space
        ));
    }
    check.ok(
        "write again",
        format!("{} extents, {} ({percent}% of capacity), then NoSpace", second.extents, mib(second.bytes)),
    );
    let bytes = verify(&mut volume, seed, &model, false)?;
    check.ok("verify", format!("{} extents, {} read back", model.len(), mib(bytes)));
    invariants(check, &volume)
}

/// The reopen scenario's plan: committed writes in two batches with a
/// committed free between them, then writes and frees never committed.
struct ReopenPlan {
    first: Vec<Planned>,
    second: Vec<Planned>,
    uncommitted: Vec<Planned>,
}

const REOPEN_STREAMS: u8 = 2;

impl ReopenPlan {
    fn new(seed: u64, max_blocks: u32) -> ReopenPlan {
        ReopenPlan {
            first: plan(seed, 0, 160, REOPEN_STREAMS, max_blocks),
            second: plan(seed, 1000, 80, REOPEN_STREAMS, max_blocks),
            uncommitted: plan(seed, 2000, 40, REOPEN_STREAMS, max_blocks),
        }
    }

    /// Owners of the first batch freed before the second commit.
    fn committed_free(&self, seed: u64, owner: u64) -> bool {
        owner < 1000 && freed(seed, owner)
    }

    /// Owners still live at the last commit and freed after it.
    fn uncommitted_free(&self, owner: u64) -> bool {
        (1000..2000).contains(&owner) && owner.is_multiple_of(4)
    }
}

fn reopen_write(check: &Check, controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let devices = open_devices(controllers)?;
    check_geometry(check, Scenario::Reopen(Phase::Write), &devices)?;
    let options = volume_options(Profile::Single, REOPEN_STREAMS);
    let mut volume = Volume::format(devices, &options).map_err(|e| format!("format: {e}"))?;
    let plan = ReopenPlan::new(seed, (volume.max_extent_bytes() / BLOCK_SIZE) as u32);
    let mut model = Model::new();
    let first = write_all(&mut volume, seed, &plan.first, &mut model, false)?;
    commit(check, &mut volume, "commit")?;
    let victims: Vec<u64> = model.keys().copied().filter(|&o| plan.committed_free(seed, o)).collect();
    for owner in &victims {
        let (id, _, _) = model.remove(owner).expect("listed");
        volume.free(id).map_err(|e| format!("freeing extent {id}: {e}"))?;
    }
    let second = write_all(&mut volume, seed, &plan.second, &mut model, false)?;
    commit(check, &mut volume, "commit second")?;
    check.ok(
        "committed",
        format!(
            "{} extents ({}) written, {} freed, {} live at journal sequence {}",
            first.extents + second.extents,
            mib(first.bytes + second.bytes),
            victims.len(),
            model.len(),
            volume.committed_seq()
        ),
    );
    // Past the last commit: writes that reach the media, frees that
    // change only memory. None of it may survive.
    let mut lost = Model::new();
    let uncommitted = write_all(&mut volume, seed, &plan.uncommitted, &mut lost, false)?;
    let frees: Vec<u64> = model.keys().copied().filter(|&o| plan.uncommitted_free(o)).collect();
    for owner in &frees {
        volume.free(model[owner].0).map_err(|e| format!("freeing owner {owner}: {e}"))?;
    }
    check.ok(
        "uncommitted",
        format!(
            "{} extents ({}) written and {} freed after the last commit; {} operations pending",
            uncommitted.extents,
            mib(uncommitted.bytes),
            frees.len(),
            volume.uncommitted_ops()
        ),
    );
    // The process ends without a commit; the controller shuts down as the
    // process exits.
    drop(volume.abandon());
    Ok(())
}

fn reopen_verify(check: &Check, controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let devices = open_devices(controllers)?;
    check_geometry(check, Scenario::Reopen(Phase::Verify), &devices)?;
    let options = volume_options(Profile::Single, REOPEN_STREAMS);
    let started = Instant::now();
    let mut volume = Volume::open(devices, &options).map_err(|e| format!("open: {e}"))?;
    check.ok(
        "open",
        format!(
            "journal sequence {}, {} extents, {} ms",
            volume.committed_seq(),
            volume.stats().extents,
            started.elapsed().as_millis()
        ),
    );
    let plan = ReopenPlan::new(seed, (volume.max_extent_bytes() / BLOCK_SIZE) as u32);
    // The model: what the write phase committed, from the same plan. The
    // extent IDs come from the volume (checked against owners by verify).
    let owners = extents_by_owner(&mut volume)?;
    let mut model = Model::new();
    for write in plan.first.iter().chain(&plan.second) {
        if plan.committed_free(seed, write.owner) {
            continue;
        }
        let id = *owners.get(&write.owner).ok_or_else(|| format!("committed owner {} is missing", write.owner))?;
        model.insert(write.owner, (id, write.blocks, write.stream));
    }
    let absent: Vec<u64> = plan.uncommitted.iter().map(|w| w.owner).filter(|o| owners.contains_key(o)).collect();
    if !absent.is_empty() {
        return Err(format!("uncommitted writes survived: owners {absent:?}"));
    }
    let undone = model.keys().filter(|&&o| plan.uncommitted_free(o)).count();
    let bytes = verify(&mut volume, seed, &model, false)?;
    check.ok(
        "committed state",
        format!(
            "{} extents, {} read back; {} uncommitted writes absent; {undone} uncommitted frees undone",
            model.len(),
            mib(bytes),
            plan.uncommitted.len()
        ),
    );
    invariants(check, &volume)?;
    // The reopened volume keeps working.
    let more = plan_more(seed, &volume);
    write_all(&mut volume, seed, &more, &mut model, false)?;
    commit(check, &mut volume, "commit after open")?;
    let bytes = verify(&mut volume, seed, &model, false)?;
    check
        .ok("keeps working", format!("{} more extents; {} extents, {} read back", more.len(), model.len(), mib(bytes)));
    Ok(())
}

fn plan_more(seed: u64, volume: &Volume) -> Vec<Planned> {
    plan(seed, 3000, 40, REOPEN_STREAMS, (volume.max_extent_bytes() / BLOCK_SIZE) as u32)
}

/// A mirror; the host flips bytes of one block of copy 0 in the first
/// controller's backing image; the read repairs it and `rewrite_copy`
/// fixes the copy.
/// Every extent whose tags one command carries is tagged, the others keep
/// the map (on QEMU 7.2, whose quirk refuses metadata transfers of 512
/// bytes or more that are not a multiple of 512); some of each.
fn check_tagged(check: &Check, volume: &Volume, model: &Model) -> Result<(), String> {
    let layout = volume.block_tags().ok_or("no block tags")?;
    let mut tagged = 0;
    for &(id, blocks, _) in model.values() {
        if volume.tagged(id) != layout.carries(blocks as usize) {
            return Err(format!(
                "extent {id} of {blocks} blocks: tagged {}, carried {}",
                volume.tagged(id),
                !volume.tagged(id)
            ));
        }
        tagged += usize::from(volume.tagged(id));
    }
    let mapped = model.len() - tagged;
    if tagged == 0 || (layout.granule.is_some() && mapped == 0) {
        return Err(format!("{tagged} extents tagged, {mapped} in the map"));
    }
    check.ok(
        "tagged",
        format!("{tagged} extents tagged, {mapped} with checksums in the map (granule {:?})", layout.granule),
    );
    Ok(())
}

/// Where the volume keeps its checksums, in words.
fn checksums(volume: &Volume) -> String {
    if volume.checksum_areas() {
        return "checksums in zone checksum areas".into();
    }
    match volume.block_tags() {
        Some(layout) => format!("checksums in block tags ({} bytes of metadata per block)", layout.stride),
        None => "checksums in the extent map".into(),
    }
}

/// A tags scenario's volume must keep its checksums in block tags.
fn require_tags(scenario: Scenario, volume: &Volume) -> Result<(), String> {
    match scenario {
        Scenario::Tags | Scenario::TagsRepair if volume.block_tags().is_none() => {
            Err("the namespaces have per-block metadata, but the volume keeps its checksums in the map".into())
        }
        _ => Ok(()),
    }
}

fn repair(check: &Check, scenario: Scenario, controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let devices = open_devices(controllers)?;
    let geometry = check_geometry(check, scenario, &devices)?;
    let mut volume =
        Volume::format(devices, &scenario_options(scenario, Profile::Mirror, 1)).map_err(|e| format!("format: {e}"))?;
    require_tags(scenario, &volume)?;
    check.ok("format", checksums(&volume));
    // On areas, enough to fill a zone and a half, so that the victim's
    // checksums are in its sealed zone's area only.
    let area = scenario == Scenario::AreaRepair;
    let count = if area {
        let table = volume.zone_table(0);
        let largest = (0..table.zone_count()).map(|z| table.zone(z).capacity).max().unwrap_or(0);
        u64::from(largest) * 3 / 2 / 8 + 24
    } else {
        24
    };
    let planned = plan(seed, 0, count, 1, 16);
    let mut model = Model::new();
    write_all(&mut volume, seed, &planned, &mut model, false)?;
    commit(check, &mut volume, "commit")?;

    // The victim: the first extent of at least 4 blocks (on areas, in a
    // sealed zone); its block 2.
    let in_area = |id: u64| {
        volume.location(id, 0).is_some_and(|l| volume.sealed_blocks(0, l.zone) > 0) && volume.checksums(id).is_none()
    };
    let (&owner, &(id, blocks, _)) = model
        .iter()
        .find(|(_, &(id, blocks, _))| blocks >= 4 && (!area || in_area(id)))
        .ok_or("no extent of 4 blocks or more (in a sealed zone, on areas)")?;
    let block = 2u32;
    let data = extent_data(seed, owner, blocks);
    let location = volume.location(id, 0).ok_or("no copy 0")?;
    let first_lba = volume.lba(0, location);
    let lba = first_lba + u64::from(block) * geometry[0].lbas_per_block();
    let offset = lba * u64::from(geometry[0].lba_bytes) + CORRUPT_OFFSET_IN_BLOCK as u64;
    println!("volume-check: corrupt-me {offset} {CORRUPT_BYTES}");
    eprintln!("volume-check: extent {id} (owner {owner}, {blocks} blocks) copy 0 at {location:?}, LBA {first_lba}");

    // Wait for the host's flip to show through the device.
    let started = Instant::now();
    let mut copy = vec![0u8; data.len()];
    loop {
        volume.read_copy(id, 0, &mut copy).map_err(|e| format!("reading copy 0: {e}"))?;
        if copy != data {
            break;
        }
        if started.elapsed() > CORRUPTION_WAIT_MAX {
            return Err(format!(
                "copy 0 of extent {id} unchanged {} s after corrupt-me",
                CORRUPTION_WAIT_MAX.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let changed: Vec<usize> = (0..data.len()).filter(|&i| copy[i] != data[i]).collect();
    let want_start = block as usize * BLOCK_SIZE + CORRUPT_OFFSET_IN_BLOCK;
    let (lo, hi) = (changed[0], changed[changed.len() - 1] + 1);
    if lo < want_start || hi > want_start + CORRUPT_BYTES {
        return Err(format!(
            "copy 0 changed in bytes {lo}..{hi} of the extent, not within {want_start}..{}",
            want_start + CORRUPT_BYTES
        ));
    }
    check.ok(
        "corrupted",
        format!(
            "copy 0 of extent {id} differs in bytes {lo}..{hi} (block {block}) after {} ms",
            started.elapsed().as_millis()
        ),
    );

    let mut back = vec![0u8; data.len()];
    let outcome = volume.read(id, &mut back).map_err(|e| format!("reading extent {id}: {e}"))?;
    if back != data {
        return Err(format!("the repaired read is wrong: {}", describe_mismatch(&data, &back)));
    }
    if outcome.repaired != [block] {
        return Err(format!("repaired blocks {:?}, expected [{block}]", outcome.repaired));
    }
    let want = BadBlock { extent: id, lane: 0, block, unreadable: false };
    if volume.bad_blocks() != [want] {
        return Err(format!("bad blocks {:?}, expected [{want:?}]", volume.bad_blocks()));
    }
    check
        .ok("read", format!("original data from copy 1, block {block} repaired, bad blocks {:?}", volume.bad_blocks()));

    let moved = volume.rewrite_copy(id, 0, &back).map_err(|e| format!("rewrite_copy: {e}"))?;
    if moved == location {
        return Err(format!("rewrite_copy left copy 0 at {location:?}"));
    }
    commit(check, &mut volume, "commit rewrite")?;
    volume.read_copy(id, 0, &mut copy).map_err(|e| format!("reading copy 0 again: {e}"))?;
    if copy != data {
        return Err(format!("copy 0 still wrong after rewrite_copy: {}", describe_mismatch(&data, &copy)));
    }
    let outcome = volume.read(id, &mut back).map_err(|e| format!("reading extent {id} again: {e}"))?;
    if !outcome.repaired.is_empty() || back != data {
        return Err(format!("after rewrite_copy the read repaired {:?}", outcome.repaired));
    }
    check.ok("rewrite", format!("copy 0 moved from {location:?} to {moved:?}, reads back clean"));
    volume.take_bad_blocks();
    let bytes = verify(&mut volume, seed, &model, true)?;
    check.ok("verify", format!("{} extents, {}, both copies", model.len(), mib(bytes)));
    invariants(check, &volume)
}

// -------------------------------------------------------------------
// metadata safety (format 2)
// -------------------------------------------------------------------

/// Label blocks at the head of every metadata segment (format 2; the
/// README's "Durable metadata"). The damage phase keeps device 0's, so the
/// device is still a member whose journal records are gone, and checks
/// that they survived.
const LABEL_BLOCKS: u64 = 2;

const METADATA_STREAMS: u8 = 2;

/// The largest extent the metadata scenario writes, in blocks: small, so
/// that each phase reads everything back quickly.
const METADATA_EXTENT_BLOCKS_MAX: u32 = 64;

/// The other volume's extents in the foreign phase, and their owners.
const FOREIGN_EXTENTS: u64 = 24;
const FOREIGN_FIRST_OWNER: u64 = 1 << 40;

fn metadata_options() -> VolumeOptions {
    volume_options(Profile::Mirror, METADATA_STREAMS)
}

/// What the format phase commits: a batch, two of every three of it
/// freed, a second batch; three commits, so the journal holds a
/// checkpoint and deltas.
struct MetadataPlan {
    first: Vec<Planned>,
    second: Vec<Planned>,
}

impl MetadataPlan {
    fn new(seed: u64) -> MetadataPlan {
        MetadataPlan {
            first: plan(seed, 0, 120, METADATA_STREAMS, METADATA_EXTENT_BLOCKS_MAX),
            second: plan(seed, 1000, 60, METADATA_STREAMS, METADATA_EXTENT_BLOCKS_MAX),
        }
    }

    /// Owners of the first batch freed before the last commit.
    fn freed(seed: u64, owner: u64) -> bool {
        owner < 1000 && freed(seed, owner)
    }

    /// The committed extents, with the IDs `volume` gives them. Every
    /// owner the plan keeps must be there; `verify` then requires that no
    /// other is.
    fn model(&self, seed: u64, volume: &mut Volume) -> Result<Model, String> {
        let owners = extents_by_owner(volume)?;
        let mut model = Model::new();
        for write in self.first.iter().chain(&self.second).filter(|w| !MetadataPlan::freed(seed, w.owner)) {
            let id = *owners.get(&write.owner).ok_or_else(|| format!("committed owner {} is missing", write.owner))?;
            model.insert(write.owner, (id, write.blocks, write.stream));
        }
        Ok(model)
    }
}

/// Bytes of a controller's backing image, as the host takes them.
#[derive(Clone, Copy, Debug)]
struct ImageRange<'a> {
    bdf: &'a str,
    offset: u64,
    len: u64,
}

/// Asks the host to act on `ranges`, in order: `overwrite-me` (random
/// bytes) or `restore-me` (what it overwrote there). The host writes each
/// range back to front, so a range's first block (a label, or a segment's
/// checkpoint) changes last: a guest that probes or opens sees the rest of
/// the range changed once it sees that block changed.
fn ask_host(request: &str, ranges: &[ImageRange<'_>]) {
    let words: Vec<String> = ranges.iter().map(|r| format!("{} {} {}", r.bdf, r.offset, r.len)).collect();
    println!("volume-check: {request} {}", words.join(" "));
}

/// Where a mirror's metadata lies on one device: two segments of whole
/// zones from zone 0, up to the first zone its lane owns for data.
#[derive(Clone, Copy, Debug)]
struct MetadataZones {
    /// From the start of the namespace to the first data zone.
    bytes: u64,
}

impl MetadataZones {
    fn of(volume: &mut Volume, lane: usize) -> Result<MetadataZones, String> {
        let table = volume.zone_table(lane);
        let first = (0..table.zone_count())
            .find(|&z| table.zone(z).usage != ZoneUse::NotOwned)
            .ok_or_else(|| format!("lane {lane} owns no zone"))?;
        if first == 0 || !first.is_multiple_of(2) {
            return Err(format!("lane {lane}'s data starts at zone {first}, not after two segments of whole zones"));
        }
        let lba = volume.lba(lane, Location { zone: first, offset: 0 });
        let device = volume.lane_device(lane);
        let lba_bytes = u64::from(volume.devices_mut()[device].as_ref().expect("in use").namespace().block_size());
        Ok(MetadataZones { bytes: lba * lba_bytes })
    }

    /// Each segment's journal records, as (offset, length): all of the
    /// segment but its label blocks.
    fn records(self) -> [(u64, u64); 2] {
        let segment = self.bytes / 2;
        let labels = LABEL_BLOCKS * BLOCK_SIZE as u64;
        [(labels, segment - labels), (segment + labels, segment - labels)]
    }
}

/// Whether `state` is device `index` of volume `volume_id`.
fn member_of(state: &DeviceState, volume_id: u64, index: u8) -> bool {
    matches!(state, DeviceState::Member { volume_id: v, device_index: i, .. } if *v == volume_id && *i == index)
}

/// Probes `device` until `done` holds for what it finds (the host's
/// change has shown), for at most [`HOST_WAIT_MAX`]; returns that state
/// and the wait.
fn wait_for_host(
    device: &mut Device,
    request: &str,
    done: impl Fn(&DeviceState) -> bool,
) -> Result<(DeviceState, Duration), String> {
    let started = Instant::now();
    loop {
        let state = Volume::probe(device);
        if done(&state) {
            return Ok((state, started.elapsed()));
        }
        if started.elapsed() > HOST_WAIT_MAX {
            return Err(format!("{request}: the device still probes {state:?} after {} s", HOST_WAIT_MAX.as_secs()));
        }
        std::thread::sleep(HOST_POLL_INTERVAL);
    }
}

/// Opens the metadata scenario's volume on `devices`; requires the device
/// order open found, whether it rewrote a copy, and every committed extent
/// on both copies.
fn open_metadata(
    check: &Check,
    devices: Vec<Device>,
    name: &str,
    order: &[usize],
    repaired: bool,
) -> Result<Volume, String> {
    let started = Instant::now();
    let volume = Volume::open(devices, &metadata_options()).map_err(|e| format!("{name}: {e}"))?;
    check_opened(check, volume, name, order, repaired, started.elapsed())
}

/// What [`open_metadata`] requires of the volume open returned.
fn check_opened(
    check: &Check,
    mut volume: Volume,
    name: &str,
    order: &[usize],
    repaired: bool,
    open_time: Duration,
) -> Result<Volume, String> {
    let seed = check.seed;
    let recovery = volume.recovery().clone();
    if recovery.device_order != order {
        return Err(format!("{name}: device order {:?}, expected {order:?}", recovery.device_order));
    }
    if recovery.copies_repaired != repaired {
        return Err(format!("{name}: copies_repaired is {}, expected {repaired}", recovery.copies_repaired));
    }
    if let Some(dropped) = &recovery.dropped {
        return Err(format!("{name}: commits dropped without a rewind: {dropped:?}"));
    }
    let model = MetadataPlan::new(seed).model(seed, &mut volume)?;
    let bytes = verify(&mut volume, seed, &model, true)?;
    check.ok(
        name,
        format!(
            "volume {:#x} in {} ms, device order {order:?}, {}; {} extents, {} read back from both copies",
            volume.id(),
            open_time.as_millis(),
            if repaired { "a copy rewritten" } else { "nothing to repair" },
            model.len(),
            mib(bytes)
        ),
    );
    Ok(volume)
}

/// Closes `volume` and requires each device to carry its label again.
fn check_labels(check: &Check, volume: Volume) -> Result<(), String> {
    let volume_id = volume.id();
    // In the volume's order, whatever the order given.
    let mut devices = volume.close().map_err(|e| format!("close: {e}"))?;
    let states: Vec<DeviceState> = devices.iter_mut().map(Volume::probe).collect();
    if !states.iter().enumerate().all(|(index, state)| member_of(state, volume_id, index as u8)) {
        return Err(format!("after close the devices probe {states:?}"));
    }
    check.ok("labels", format!("{states:?}"));
    Ok(())
}

/// Formats the mirror, commits extents, and has the host overwrite device
/// 0's metadata zones with random bytes.
fn metadata_format(check: &Check, pci: &[String], controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let devices = open_devices(controllers)?;
    check_geometry(check, Scenario::Metadata(MetadataPhase::Format), &devices)?;
    let mut volume = Volume::format(devices, &metadata_options()).map_err(|e| format!("format: {e}"))?;
    if volume.max_extent_bytes() < METADATA_EXTENT_BLOCKS_MAX as usize * BLOCK_SIZE {
        return Err(format!("extents up to {} bytes only", volume.max_extent_bytes()));
    }
    let plan = MetadataPlan::new(seed);
    let mut model = Model::new();
    let first = write_all(&mut volume, seed, &plan.first, &mut model, false)?;
    commit(check, &mut volume, "commit")?;
    let victims: Vec<u64> = model.keys().copied().filter(|&owner| MetadataPlan::freed(seed, owner)).collect();
    for owner in &victims {
        let (id, _, _) = model.remove(owner).expect("listed");
        volume.free(id).map_err(|e| format!("freeing extent {id} (owner {owner}): {e}"))?;
    }
    commit(check, &mut volume, "commit frees")?;
    let second = write_all(&mut volume, seed, &plan.second, &mut model, false)?;
    commit(check, &mut volume, "commit second")?;
    let bytes = verify(&mut volume, seed, &model, true)?;
    let zones = MetadataZones::of(&mut volume, 0)?;
    let volume_id = volume.id();
    check.ok(
        "committed",
        format!(
            "volume {volume_id:#x}: {} extents written, {} freed, {} live, {} read back from both copies; \
             device 0's metadata zones are its first {}",
            first.extents + second.extents,
            victims.len(),
            model.len(),
            mib(bytes),
            mib(zones.bytes)
        ),
    );
    let mut devices = volume.close().map_err(|e| format!("close: {e}"))?;
    // Every block of device 0's metadata zones, labels and all.
    ask_host("overwrite-me", &[ImageRange { bdf: &pci[0], offset: 0, len: zones.bytes }]);
    let (state, waited) = wait_for_host(&mut devices[0], "overwrite-me", |s| !member_of(s, volume_id, 0))?;
    check.ok("overwritten", format!("device 0 probes {state:?} after {} ms", waited.as_millis()));
    Ok(())
}

/// Opens the volume in a new process: after the host's garbage (from
/// device 1's copy, rewriting device 0's), once more (nothing to repair),
/// and with the devices given the other way round.
fn metadata_reopen(check: &Check, phase: MetadataPhase, controllers: &[Controller]) -> Result<(), String> {
    let devices = open_devices(controllers)?;
    check_geometry(check, Scenario::Metadata(phase), &devices)?;
    let (order, repaired): (&[usize], bool) = match phase {
        MetadataPhase::Garbage => (&[0, 1], true),
        MetadataPhase::Swapped => (&[1, 0], false),
        _ => (&[0, 1], false),
    };
    let volume = open_metadata(check, devices, "open", order, repaired)?;
    invariants(check, &volume)?;
    check_labels(check, volume)
}

/// A single volume formatted on the third controller is refused by name
/// in place of the mirror's device 1, and nothing is written: both
/// volumes open afterwards as they were.
fn metadata_foreign(check: &Check, controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let mut devices = open_devices(controllers)?;
    check_geometry(check, Scenario::Metadata(MetadataPhase::Foreign), &devices)?;
    let volume_id = match Volume::probe(&mut devices[0]) {
        DeviceState::Member { volume_id, device_index: 0, .. } => volume_id,
        other => return Err(format!("device 0 probes {other:?}, not as a volume's device 0")),
    };
    let third = devices.pop().expect("three devices");
    let options = volume_options(Profile::Single, 1);
    let mut other = Volume::format(vec![third], &options).map_err(|e| format!("format the other volume: {e}"))?;
    let planned = plan(seed, FOREIGN_FIRST_OWNER, FOREIGN_EXTENTS, 1, METADATA_EXTENT_BLOCKS_MAX);
    let mut other_model = Model::new();
    write_all(&mut other, seed, &planned, &mut other_model, false)?;
    commit(check, &mut other, "commit other")?;
    let other_id = other.id();
    if other_id == volume_id {
        return Err(format!("both volumes have ID {other_id:#x}"));
    }
    check.ok(
        "other volume",
        format!("volume {other_id:#x} on {}, {} extents", controllers[2].transport().name(), other_model.len()),
    );
    let third = other.close().map_err(|e| format!("close the other volume: {e}"))?.pop().expect("one device");

    // The mirror's device 0, and the other volume's namespace as device 1.
    devices.truncate(1);
    devices.push(third);
    match Volume::open(devices, &metadata_options()) {
        Err(Error::ForeignDevice { device: 1, found, expected }) if found == other_id && expected == volume_id => {
            let error = Error::ForeignDevice { device: 1, found, expected };
            check.ok("foreign refused", format!("{error:?}: {error}"));
        }
        Err(error) => {
            return Err(format!(
                "expected ForeignDevice {{ device: 1, found: {other_id:#x}, expected: {volume_id:#x} }}, got {error:?}"
            ))
        }
        Ok(_) => return Err("the mirror opened with another volume's namespace as device 1".into()),
    }

    // Nothing was written: both volumes open as they were, neither with
    // anything to repair.
    let mut devices = open_devices(controllers)?;
    let third = devices.pop().expect("three devices");
    let mut other = Volume::open(vec![third], &options).map_err(|e| format!("reopen the other volume: {e}"))?;
    if other.id() != other_id || other.recovery().copies_repaired {
        return Err(format!("the other volume reopened as {:#x}, recovery {:?}", other.id(), other.recovery()));
    }
    let bytes = verify(&mut other, seed, &other_model, false)?;
    check.ok(
        "other volume intact",
        format!("volume {other_id:#x}, nothing to repair, {} extents, {} read back", other_model.len(), mib(bytes)),
    );
    other.close().map_err(|e| format!("close the other volume: {e}"))?;
    let volume = open_metadata(check, devices, "volume intact", &[0, 1], false)?;
    invariants(check, &volume)?;
    check_labels(check, volume)
}

/// Damages the metadata on both copies so that open fails but not with
/// `NoVolume`: seqwrite must refuse and format nothing. Then the host puts
/// back device 0's records, and every extent reads back.
fn metadata_damage(check: &Check, pci: &[String], controllers: Vec<Controller>) -> Result<(), String> {
    let devices = open_devices(&controllers)?;
    check_geometry(check, Scenario::Metadata(MetadataPhase::Damage), &devices)?;
    let mut volume = open_metadata(check, devices, "open", &[0, 1], false)?;
    let volume_id = volume.id();
    let (first, second) = (MetadataZones::of(&mut volume, 0)?, MetadataZones::of(&mut volume, 1)?);
    let mut devices = volume.close().map_err(|e| format!("close: {e}"))?;

    // Device 0 keeps its labels and loses its journal records; device 1
    // loses all of its metadata zones, its first label last.
    let records = first.records().map(|(offset, len)| ImageRange { bdf: &pci[0], offset, len });
    let mut damage = records.to_vec();
    damage.push(ImageRange { bdf: &pci[1], offset: 0, len: second.bytes });
    ask_host("overwrite-me", &damage);
    let (state, waited) = wait_for_host(&mut devices[1], "overwrite-me", |s| !member_of(s, volume_id, 1))?;
    let kept = Volume::probe(&mut devices[0]);
    if !member_of(&kept, volume_id, 0) {
        return Err(format!("device 0 probes {kept:?} after the damage: its labels should have survived"));
    }
    check.ok(
        "damaged",
        format!(
            "device 0 keeps its labels, its records overwritten; device 1 probes {state:?} after {} ms",
            waited.as_millis()
        ),
    );
    match Volume::open(devices, &metadata_options()) {
        Err(error @ Error::MetadataLost { .. }) => check.ok("open refused", error),
        Err(Error::NoVolume) => return Err("open says NoVolume: a tool would format over the volume".into()),
        Err(error) => return Err(format!("open: expected MetadataLost, got {error:?}")),
        Ok(_) => return Err("the volume opened with its journal lost on both copies".into()),
    }

    // seqwrite opens the controllers itself.
    drop(controllers);
    seqwrite_refuses(check, pci)?;
    let controllers = open_controllers(pci)?;
    let mut devices = open_devices(&controllers)?;
    let states: Vec<DeviceState> = devices.iter_mut().map(Volume::probe).collect();
    if !member_of(&states[0], volume_id, 0) || states[1] != state {
        return Err(format!("after seqwrite the devices probe {states:?}"));
    }
    check.ok("not formatted", format!("device 0 still a member of volume {volume_id:#x}, device 1 still {state:?}"));

    // Device 0's records back; device 1 stays garbage, a member without a
    // label, whose metadata open rewrites once its data verifies.
    drop(devices);
    ask_host("restore-me", &records);
    let (volume, open_time) = open_when_restored(&controllers)?;
    let volume = check_opened(check, volume, "restored", &[0, 1], true, open_time)?;
    invariants(check, &volume)?;
    volume.close().map_err(|e| format!("close: {e}"))?;
    let volume = open_metadata(check, open_devices(&controllers)?, "reopen", &[0, 1], false)?;
    check_labels(check, volume)
}

/// Opens the metadata scenario's volume once the host's restore shows.
/// Until then open must fail with `MetadataLost`, writing nothing: the
/// host writes each range back to front, so a segment's checkpoint, at
/// its head, verifies only once every record after it is back. Returns the
/// volume and the last open's time.
fn open_when_restored(controllers: &[Controller]) -> Result<(Volume, Duration), String> {
    let started = Instant::now();
    for attempt in 1.. {
        let opened = Instant::now();
        match Volume::open(open_devices(controllers)?, &metadata_options()) {
            Ok(volume) => {
                eprintln!(
                    "volume-check: opened at attempt {attempt}, {} ms after restore-me",
                    started.elapsed().as_millis()
                );
                return Ok((volume, opened.elapsed()));
            }
            Err(Error::MetadataLost { .. }) if started.elapsed() < HOST_WAIT_MAX => {
                std::thread::sleep(HOST_POLL_INTERVAL)
            }
            Err(error) => return Err(format!("restore-me: open attempt {attempt}: {error:?}")),
        }
    }
    unreachable!("the loop returns")
}

/// Runs the `seqwrite` tool without `--format` on the damaged volume's
/// two controllers: it must exit 1 with its reason, "nothing was
/// formatted".
fn seqwrite_refuses(check: &Check, pci: &[String]) -> Result<(), String> {
    let out = std::env::temp_dir().join("volume-check-seqwrite.out");
    let err = std::env::temp_dir().join("volume-check-seqwrite.err");
    let create = |path: &std::path::Path| File::create(path).map_err(|e| format!("{}: {e}", path.display()));
    let started = Instant::now();
    let mut child = Command::new("seqwrite")
        .args(["--pci", &pci[0], "--pci", &pci[1], "--profile", "mirror", "--size", "16M", "--no-progress"])
        .stdin(Stdio::null())
        .stdout(create(&out)?)
        .stderr(create(&err)?)
        .spawn()
        .map_err(|e| format!("starting seqwrite: {e}"))?;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("waiting for seqwrite: {e}"))? {
            break status;
        }
        if started.elapsed() > SEQWRITE_TIME_MAX {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("seqwrite still running after {} s", SEQWRITE_TIME_MAX.as_secs()));
        }
        std::thread::sleep(HOST_POLL_INTERVAL);
    };
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    match (status.code(), stderr.lines().find(|l| l.contains("nothing was formatted"))) {
        (Some(1), Some(line)) => {
            check.ok("seqwrite refused", format!("exit status 1 after {} ms: {line}", started.elapsed().as_millis()));
            Ok(())
        }
        _ => Err(format!("seqwrite on the damaged volume: {status}; stderr {stderr:?}; stdout {stdout:?}")),
    }
}
