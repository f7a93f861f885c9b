//! A mirror's members through their life, one volume and one process per
//! phase, in this order, on three controllers: a conventional one (device
//! 0, pulled), a ZNS one (device 1) and a blank conventional one (the
//! replacement). The phases take them in these orders:
//!
//! - `unplug` (0, 1): format; a batch, committed; then writes in bursts;
//!   after a few the [`Host`] pulls device 0 ([`Host::unplug`]), and the
//!   writes go on until the volume gives device 0 up, then a few bursts
//!   more. Every write is acknowledged, the commit succeeds, every extent
//!   reads back, and every extent not committed before the unplug lacks
//!   copy 0.
//! - `degraded` (1): waits until the pulled device has left
//!   ([`Host::wait_removed`]); open without `degraded` fails with
//!   `Degraded { missing: [0] }`; with it, the volume opens on device 1
//!   and every extent reads back.
//! - `replace` (1, 2): opens degraded on device 1; device 2 probes blank
//!   and takes place 0 (`Volume::replace`), lacking every copy; the
//!   resilver writes them all and scrubs them; every extent reads back
//!   from each copy; the volume reopens on both, online.
//! - `rejoin` (2, 1): opens online; a batch is written and not committed;
//!   device 1's controller is reset, and the next write gives it up (its
//!   copies since the last commit may be lost with its cache) and goes to
//!   copy 0 alone; a batch is written and committed without it; a new
//!   `Device` on the reset controller rejoins (`Volume::rejoin`), lacking
//!   exactly the two batches' blocks, which is what the resilver copies;
//!   every extent reads back from each copy.
//! - `final` (2, 1): opens online; every extent reads back from each copy.
//!
//! Data is a function of the seed and each extent's owner; each batch has
//! its own range of owners, so a later process tells from the owners what
//! each extent must hold and which copies it may lack. Every phase prints
//! the volume's status as JSON, `PREFIX: members PHASE status NAME {...}`,
//! and its extents per batch, for the host to check.

use super::*;
use crate::data::describe_mismatch;
use nvme_scrub::{resilver, Control, Outcome, ResilverOptions, ResilverReport};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use zoned_allocator::{
    Device, DeviceState, Error, MemberState, Profile, Volume, VolumeOptions, VolumeState, VolumeStatus, BLOCK_SIZE,
};

/// The phases, one process each, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MembersPhase {
    Unplug,
    Degraded,
    Replace,
    Rejoin,
    Final,
}

impl MembersPhase {
    pub const ALL: [MembersPhase; 5] = [
        MembersPhase::Unplug,
        MembersPhase::Degraded,
        MembersPhase::Replace,
        MembersPhase::Rejoin,
        MembersPhase::Final,
    ];

    /// The phase's name (`--phase`).
    pub fn name(self) -> &'static str {
        self.label().trim_start_matches("members ")
    }

    pub fn parse(name: &str) -> Option<MembersPhase> {
        MembersPhase::ALL.into_iter().find(|phase| phase.name() == name)
    }

    pub fn label(self) -> &'static str {
        match self {
            MembersPhase::Unplug => "members unplug",
            MembersPhase::Degraded => "members degraded",
            MembersPhase::Replace => "members replace",
            MembersPhase::Rejoin => "members rejoin",
            MembersPhase::Final => "members final",
        }
    }

    /// The controllers the phase takes.
    pub fn controllers(self) -> usize {
        match self {
            MembersPhase::Degraded => 1,
            _ => 2,
        }
    }

    /// The checks a passing run reports, in order.
    pub fn checks(self) -> Vec<&'static str> {
        match self {
            MembersPhase::Unplug => {
                vec!["geometry", "commit", "given up", "commit degraded", "verify", "extents", "invariants"]
            }
            MembersPhase::Degraded => vec!["removed", "geometry", "refused", "open", "verify", "extents", "invariants"],
            MembersPhase::Replace => {
                vec!["geometry", "blank", "replace", "resilver", "verify", "extents", "invariants", "reopen"]
            }
            MembersPhase::Rejoin => vec![
                "geometry",
                "degraded on",
                "given up",
                "commit away",
                "rejoin",
                "missing",
                "resilver",
                "verify",
                "extents",
                "invariants",
            ],
            MembersPhase::Final => vec!["geometry", "verify", "extents", "invariants"],
        }
    }
}

const STREAMS: u8 = 1;

/// Small extents: many writes in flight when device 0 goes, and a volume
/// of a few hundred MiB holds everything the phases write.
const EXTENT_BLOCKS_MAX: u32 = 8;

/// Bursts written before asking for the unplug, and after the volume gave
/// device 0 up.
const BURSTS_BEFORE_UNPLUG: usize = 4;
const BURSTS_AFTER_GIVE_UP: usize = 4;

/// A pause between bursts until device 0 is given up (the guest kernel
/// asks for the device a tenth of a second after the unplug here, but
/// might take seconds), so the volume does not fill meanwhile.
const BURST_PAUSE: Duration = Duration::from_millis(50);

/// Bound on waiting for the volume to give device 0 up.
const GIVE_UP_WAIT_MAX: Duration = Duration::from_secs(90);

/// The batches, each with its own owners.
struct Batches {
    /// Committed before the unplug.
    first: Vec<Planned>,
    /// Written while device 0 is pulled, never committed before it goes:
    /// a prefix of this plan.
    unplug: Vec<Planned>,
    /// Written before device 1's controller reset, not committed.
    uncommitted: Vec<Planned>,
    /// Written and committed while device 1 is away.
    away: Vec<Planned>,
}

const FIRST_OWNER: u64 = 0;
const UNPLUG_OWNER: u64 = 10_000;
const UNCOMMITTED_OWNER: u64 = 20_000;
const AWAY_OWNER: u64 = 30_000;

/// How many extents each batch plans; the unplug batch is the most the
/// phase may write before giving up on the unplug.
const FIRST_EXTENTS: u64 = 96;
const UNPLUG_EXTENTS_MAX: u64 = 4096;
const UNCOMMITTED_EXTENTS: u64 = 16;
const AWAY_EXTENTS: u64 = 48;

impl Batches {
    fn new(seed: u64) -> Batches {
        let batch = |first, count| plan(seed, first, count, STREAMS, EXTENT_BLOCKS_MAX);
        Batches {
            first: batch(FIRST_OWNER, FIRST_EXTENTS),
            unplug: batch(UNPLUG_OWNER, UNPLUG_EXTENTS_MAX),
            uncommitted: batch(UNCOMMITTED_OWNER, UNCOMMITTED_EXTENTS),
            away: batch(AWAY_OWNER, AWAY_EXTENTS),
        }
    }

    fn all(&self) -> [(&'static str, &[Planned]); 4] {
        [("first", &self.first), ("unplug", &self.unplug), ("uncommitted", &self.uncommitted), ("away", &self.away)]
    }

    /// The planned write of `owner`.
    fn planned(&self, owner: u64) -> Option<&Planned> {
        self.all().into_iter().find_map(|(_, batch)| {
            let first = batch.first()?.owner;
            batch.get(usize::try_from(owner.checked_sub(first)?).ok()?)
        })
    }

    /// The batch `owner` belongs to.
    fn batch_of(&self, owner: u64) -> Option<&'static str> {
        self.all()
            .into_iter()
            .find(|(_, b)| b.first().zip(b.last()).is_some_and(|(f, l)| (f.owner..=l.owner).contains(&owner)))
            .map(|(name, _)| name)
    }
}

/// Extents per batch, in the order of [`Batches::all`].
type Counts = BTreeMap<&'static str, u64>;

fn describe_counts(counts: &Counts) -> String {
    let total: u64 = counts.values().sum();
    let parts: Vec<String> = ["first", "unplug", "uncommitted", "away"]
        .iter()
        .map(|name| format!("{name} {}", counts.get(name).copied().unwrap_or(0)))
        .collect();
    format!("{total} extents ({})", parts.join(", "))
}

/// The volume's extents against the plan: every extent is a planned
/// owner's, of its planned size, and each batch is present as a prefix of
/// its plan (an acknowledged write is never lost, and nothing is written
/// out of order). Returns the model and the count per batch.
fn model_of(batches: &Batches, volume: &mut Volume) -> Result<(Model, Counts), String> {
    let mut model = Model::new();
    for (id, owner) in volume.extent_owners().map_err(|e| format!("listing owners: {e}"))? {
        let len = volume.extent(id).ok_or_else(|| format!("extent {id} listed but unknown"))?;
        let planned = batches.planned(owner).ok_or_else(|| format!("extent {id} has owner {owner}, never planned"))?;
        if len != planned.blocks as usize * BLOCK_SIZE {
            return Err(format!("extent {id} (owner {owner}) is {len} bytes, {} planned", planned.blocks));
        }
        if model.insert(owner, (id, planned.blocks, planned.stream)).is_some() {
            return Err(format!("owner {owner} has two extents"));
        }
    }
    let mut counts = Counts::new();
    for (name, batch) in batches.all() {
        let present = batch.iter().take_while(|w| model.contains_key(&w.owner)).count();
        if let Some(stray) = batch[present..].iter().find(|w| model.contains_key(&w.owner)) {
            return Err(format!(
                "batch {name}: owners {}..{} present, then owner {} (a hole)",
                batch[0].owner,
                batch[0].owner + present as u64,
                stray.owner
            ));
        }
        counts.insert(name, present as u64);
    }
    Ok((model, counts))
}

/// Opens namespace 1 of each controller, each told its address.
fn member_devices(controllers: &[Controller], host: &dyn Host) -> Result<Vec<Device>, String> {
    let mut devices = open_devices(controllers)?;
    for (index, device) in devices.iter_mut().enumerate() {
        device.set_identity(&host.address(index));
    }
    Ok(devices)
}

/// The namespaces' kinds, in order (`true`: ZNS), as the phase needs them.
fn check_kinds(check: &Check, devices: &[Device], zoned: &[bool]) -> Result<(), String> {
    let geometry: Vec<Geometry> = devices.iter().map(Geometry::of).collect();
    let text: Vec<String> = geometry.iter().map(Geometry::describe).collect();
    if geometry.iter().map(|g| g.zoned).collect::<Vec<_>>() != zoned {
        return Err(format!("the phase needs ZNS {zoned:?}; found {}", text.join("; ")));
    }
    check.ok("geometry", text.join("; "));
    Ok(())
}

fn options(degraded: bool) -> VolumeOptions {
    VolumeOptions { degraded, ..volume_options(Profile::Mirror, STREAMS) }
}

/// Prints the volume's status as one JSON line for the host, and returns
/// it.
fn print_status(check: &Check, name: &str, volume: &Volume) -> Result<VolumeStatus, String> {
    let status = volume.status();
    let json = serde_json::to_string(&status).map_err(|e| format!("the status as JSON: {e}"))?;
    println!("{}: {} status {name} {json}", check.prefix, check.label);
    Ok(status)
}

/// Requires the volume's state and each device's.
fn require_states(
    name: &str,
    status: &VolumeStatus,
    volume: VolumeState,
    devices: &[MemberState],
) -> Result<(), String> {
    let found: Vec<MemberState> = status.devices.iter().map(|d| d.state).collect();
    if status.state != volume || found != devices {
        return Err(format!(
            "status {name}: the volume is {:?} with devices {found:?}; expected {volume:?} with {devices:?}",
            status.state
        ));
    }
    Ok(())
}

/// Every extent of `model` reads back through `Volume::read`; then each
/// copy on its own where its device is in use. Copy `lane` must be
/// missing exactly for the owners `lacks(lane, owner)` picks. Returns the
/// bytes read and the copies read.
fn verify_copies(
    volume: &mut Volume,
    seed: u64,
    model: &Model,
    lacks: impl Fn(usize, u64) -> bool,
) -> Result<(u64, u64), String> {
    let (mut bytes, mut copies) = (0u64, 0u64);
    let mut got = Vec::new();
    for (&owner, &(id, blocks, _)) in model {
        let want = extent_data(seed, owner, blocks);
        got.resize(want.len(), 0);
        let outcome = volume.read(id, &mut got).map_err(|e| format!("reading extent {id} (owner {owner}): {e}"))?;
        if got != want {
            return Err(format!("extent {id} (owner {owner}) reads back wrong: {}", describe_mismatch(&want, &got)));
        }
        if !outcome.repaired.is_empty() {
            return Err(format!("extent {id} (owner {owner}): blocks {:?} needed repair", outcome.repaired));
        }
        bytes += want.len() as u64;
        for lane in 0..volume.lanes() {
            if volume.lacks_copy(id, lane) != lacks(lane, owner) {
                return Err(format!(
                    "extent {id} (owner {owner}): copy {lane} {}",
                    if lacks(lane, owner) { "should be missing but is there" } else { "is missing" }
                ));
            }
            if volume.lacks_copy(id, lane) || !volume.lane_online(lane) {
                continue;
            }
            got.fill(0);
            volume.read_copy(id, lane, &mut got).map_err(|e| format!("reading copy {lane} of extent {id}: {e}"))?;
            if got != want {
                return Err(format!("copy {lane} of extent {id} is wrong: {}", describe_mismatch(&want, &got)));
            }
            copies += 1;
        }
    }
    Ok((bytes, copies))
}

/// Blocks of the extents of `model` whose owner `pick` chooses.
fn blocks_of(model: &Model, pick: impl Fn(u64) -> bool) -> u64 {
    model.iter().filter(|(&owner, _)| pick(owner)).map(|(_, &(_, blocks, _))| u64::from(blocks)).sum()
}

/// Runs the resilver of `place` to the end, printing progress, and
/// requires it complete with a clean scrub of the new copy.
fn resilver_place(check: &Check, volume: &mut Volume, place: usize) -> Result<ResilverReport, String> {
    let started = Instant::now();
    let report = resilver(volume, place, &ResilverOptions::default(), &Control::new(), &mut |p| {
        eprintln!("{}: resilver of place {place}: {} of {} bytes", check.prefix, p.bytes_done, p.bytes_total)
    })
    .map_err(|e| format!("resilver of place {place}: {e}"))?;
    let scrubbed = report.verify.as_ref().map(|v| v.outcome);
    if !report.complete() || scrubbed != Some(Outcome::Clean) {
        return Err(format!("the resilver of place {place} did not complete clean: {report:?}"));
    }
    check.ok(
        "resilver",
        format!(
            "{} bytes copied of {} missing, {} extents, {} reads ({}) at mean QD {:.1}, {} commits, the new copy \
             scrubbed clean, {} ms",
            report.bytes_copied,
            report.bytes_total,
            report.extents_copied,
            report.reads,
            mib(report.bytes_read),
            report.mean_read_queue_depth,
            report.commits,
            started.elapsed().as_millis()
        ),
    );
    Ok(report)
}

/// Runs `phase` on the host's controllers, reporting each passed check
/// through `check`.
pub fn run_members(check: &Check, phase: MembersPhase, host: &mut dyn Host) -> Result<(), String> {
    let mut controllers = host.controllers()?;
    if controllers.len() != phase.controllers() {
        return Err(format!("{} takes {} controllers, got {}", phase.label(), phase.controllers(), controllers.len()));
    }
    match phase {
        MembersPhase::Unplug => {
            // Device 1 in use, then device 0, given up; the host takes the
            // pulled one's.
            let mut devices = unplug(check, &controllers, host)?;
            let pulled =
                devices.pop().filter(|_| devices.len() == 1).ok_or("the volume handed back no pulled device")?;
            host.release_pulled(pulled, controllers.remove(0));
            Ok(())
        }
        MembersPhase::Degraded => degraded(check, &controllers, host),
        MembersPhase::Replace => replace(check, &controllers, host),
        MembersPhase::Rejoin => rejoin(check, &controllers, host),
        MembersPhase::Final => last(check, &controllers, host),
    }
}

/// Format, a committed batch, then bursts of writes through the unplug of
/// device 0 and after it. Returns the devices the closed volume hands
/// back.
fn unplug(check: &Check, controllers: &[Controller], host: &mut dyn Host) -> Result<Vec<Device>, String> {
    let seed = check.seed;
    let devices = member_devices(controllers, host)?;
    check_kinds(check, &devices, &[false, true])?;
    let mut volume = Volume::format(devices, &options(false)).map_err(|e| format!("format: {e}"))?;
    let batches = Batches::new(seed);
    let mut model = Model::new();
    write_all(&mut volume, seed, &batches.first, &mut model, false)?;
    commit(check, &mut volume, "commit")?;

    let mut written = 0usize;
    let mut asked: Option<Instant> = None;
    let mut given_up: Option<(Duration, usize)> = None;
    for burst in batches.unplug.chunks(WRITE_DEPTH) {
        // Every write is acknowledged: on both copies, or on the one left.
        write_all(&mut volume, seed, burst, &mut model, false)?;
        written += burst.len();
        match (asked, given_up) {
            (None, _) if written >= BURSTS_BEFORE_UNPLUG * WRITE_DEPTH => {
                host.unplug(0)?;
                asked = Some(Instant::now());
            }
            (Some(at), None) if !volume.lane_online(0) => given_up = Some((at.elapsed(), written)),
            (Some(at), None) if at.elapsed() > GIVE_UP_WAIT_MAX => {
                return Err(format!(
                    "device 0 still in use {} s after the unplug ({written} extents written)",
                    GIVE_UP_WAIT_MAX.as_secs()
                ))
            }
            (_, Some((_, at))) if written >= at + BURSTS_AFTER_GIVE_UP * WRITE_DEPTH => break,
            _ => {}
        }
        if given_up.is_none() {
            std::thread::sleep(BURST_PAUSE);
        }
    }
    let Some((after, at)) = given_up else {
        return Err(format!("device 0 still in use after the whole plan ({written} extents)"));
    };
    let why = volume.status().devices[0].why.clone().unwrap_or_default();
    check.ok(
        "given up",
        format!(
            "device 0 given up {} ms after the unplug ({why}); {} extents of the batch acknowledged by then, {} \
             more on device 1 alone",
            after.as_millis(),
            at,
            written - at
        ),
    );
    commit(check, &mut volume, "commit degraded")?;

    // Copy 0 of everything not committed before the unplug is missing:
    // written after the device went, or never made durable on it.
    let unplugged = |owner: u64| (UNPLUG_OWNER..UNPLUG_OWNER + UNPLUG_EXTENTS_MAX).contains(&owner);
    let (bytes, copies) = verify_copies(&mut volume, seed, &model, |lane, owner| lane == 0 && unplugged(owner))?;
    check.ok("verify", format!("{} extents, {} read back, {copies} copies on device 1", model.len(), mib(bytes)));
    let status = print_status(check, "degraded", &volume)?;
    require_states("degraded", &status, VolumeState::Degraded, &[MemberState::Failed, MemberState::Online])?;
    let at_risk = blocks_of(&model, unplugged) * BLOCK_SIZE as u64;
    if status.redundancy.bytes_missing != at_risk || status.redundancy.extents_missing != written as u64 {
        return Err(format!(
            "missing: {:?}; expected {written} extents, {at_risk} bytes (those written since the unplug began)",
            status.redundancy
        ));
    }
    let (_, counts) = model_of(&batches, &mut volume)?;
    check.ok("extents", describe_counts(&counts));
    invariants(check, &volume)?;
    // The process ends, letting device 0 go: the guest kernel finishes
    // the removal then.
    volume.close().map_err(|e| format!("close: {e}"))
}

/// A new process: the volume opens on device 1 only when allowed, and
/// everything reads back.
fn degraded(check: &Check, controllers: &[Controller], host: &mut dyn Host) -> Result<(), String> {
    let seed = check.seed;
    check.ok("removed", host.wait_removed()?);
    let devices = member_devices(controllers, host)?;
    check_kinds(check, &devices, &[true])?;
    match Volume::open(devices, &options(false)) {
        Err(Error::Degraded { missing, why }) if missing == [0] => {
            check.ok("refused", format!("{}", Error::Degraded { missing, why }))
        }
        Err(error) => {
            return Err(format!("open without degraded: expected Degraded {{ missing: [0] }}, got {error:?}"))
        }
        Ok(_) => return Err("the volume opened without degraded, a device missing".into()),
    }
    let started = Instant::now();
    let devices = member_devices(controllers, host)?;
    let mut volume = Volume::open(devices, &options(true)).map_err(|e| format!("open degraded: {e}"))?;
    check.ok("open", format!("volume {:#x} on device 1 in {} ms", volume.id(), started.elapsed().as_millis()));
    let status = print_status(check, "open", &volume)?;
    require_states("open", &status, VolumeState::Degraded, &[MemberState::Failed, MemberState::Online])?;
    let batches = Batches::new(seed);
    let (model, counts) = model_of(&batches, &mut volume)?;
    let unplugged = |owner: u64| batches.batch_of(owner) == Some("unplug");
    let (bytes, copies) = verify_copies(&mut volume, seed, &model, |lane, owner| lane == 0 && unplugged(owner))?;
    check.ok("verify", format!("{} extents, {} read back, {copies} copies on device 1", model.len(), mib(bytes)));
    if status.redundancy.extents_missing != counts["unplug"] {
        return Err(format!("missing: {:?}; expected the {} unplug extents", status.redundancy, counts["unplug"]));
    }
    check.ok("extents", describe_counts(&counts));
    invariants(check, &volume)?;
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}

/// Opens degraded, replaces device 0 with the blank device and resilvers.
fn replace(check: &Check, controllers: &[Controller], host: &dyn Host) -> Result<(), String> {
    let seed = check.seed;
    let spare = host.address(1);
    let mut devices = member_devices(controllers, host)?;
    check_kinds(check, &devices, &[true, false])?;
    let mut blank = devices.pop().expect("two devices");
    match Volume::probe(&mut blank) {
        DeviceState::Blank => check.ok("blank", format!("{spare} probes Blank")),
        other => return Err(format!("{spare} probes {other:?}, not Blank")),
    }
    let mut volume = Volume::open(devices, &options(true)).map_err(|e| format!("open degraded: {e}"))?;
    let batches = Batches::new(seed);
    let (model, counts) = model_of(&batches, &mut volume)?;
    let total_blocks = blocks_of(&model, |_| true);

    let started = Instant::now();
    volume.replace(0, blank, false).map_err(|e| format!("replace: {e}"))?;
    if volume.missing_blocks(0) != total_blocks || volume.missing_blocks(1) != 0 {
        return Err(format!(
            "after replace copy 0 lacks {} blocks and copy 1 {}; expected {total_blocks} and 0",
            volume.missing_blocks(0),
            volume.missing_blocks(1)
        ));
    }
    check.ok(
        "replace",
        format!("{spare} in place 0 in {} ms, lacking {total_blocks} blocks", started.elapsed().as_millis()),
    );
    let status = print_status(check, "replaced", &volume)?;
    require_states("replaced", &status, VolumeState::Resilvering, &[MemberState::Resilvering, MemberState::Online])?;

    let report = resilver_place(check, &mut volume, 0)?;
    let total_bytes = total_blocks * BLOCK_SIZE as u64;
    if report.bytes_copied != total_bytes || report.extents_copied != model.len() as u64 {
        return Err(format!(
            "the resilver copied {} bytes in {} extents; expected {total_bytes} in {}",
            report.bytes_copied,
            report.extents_copied,
            model.len()
        ));
    }
    let status = print_status(check, "resilvered", &volume)?;
    require_states("resilvered", &status, VolumeState::Online, &[MemberState::Online, MemberState::Online])?;
    let (bytes, copies) = verify_copies(&mut volume, seed, &model, |_, _| false)?;
    check.ok("verify", format!("{} extents, {} read back, {copies} copies", model.len(), mib(bytes)));
    check.ok("extents", describe_counts(&counts));
    invariants(check, &volume)?;
    volume.close().map_err(|e| format!("close: {e}"))?;

    // The replacement is a member: both open, nothing missing.
    let volume =
        Volume::open(member_devices(controllers, host)?, &options(false)).map_err(|e| format!("reopen: {e}"))?;
    let status = print_status(check, "reopened", &volume)?;
    require_states("reopened", &status, VolumeState::Online, &[MemberState::Online, MemberState::Online])?;
    check.ok(
        "reopen",
        format!("volume {:#x} online on both, device order {:?}", volume.id(), volume.recovery().device_order),
    );
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}

/// Device 1's controller reset: given up, written without, rejoined, and
/// brought up to date with only what it missed.
fn rejoin(check: &Check, controllers: &[Controller], host: &dyn Host) -> Result<(), String> {
    let seed = check.seed;
    let rejoining = host.address(1);
    let devices = member_devices(controllers, host)?;
    check_kinds(check, &devices, &[false, true])?;
    let mut volume = Volume::open(devices, &options(false)).map_err(|e| format!("open: {e}"))?;
    let status = print_status(check, "open", &volume)?;
    require_states("open", &status, VolumeState::Online, &[MemberState::Online, MemberState::Online])?;
    if volume.lane_device(1) != 1 {
        return Err(format!("copy 1 is on device {}", volume.lane_device(1)));
    }
    let batches = Batches::new(seed);
    let (mut model, _) = model_of(&batches, &mut volume)?;
    write_all(&mut volume, seed, &batches.uncommitted, &mut model, false)?;

    // The reset: a volatile write cache may be lost with it, so the
    // volume gives the member up and goes on with the other.
    let resets = controllers[1].resets();
    controllers[1].reset().map_err(|e| format!("resetting {rejoining}: {e}"))?;
    if controllers[1].resets() != resets + 1 {
        return Err(format!("{} resets counted, {} before", controllers[1].resets(), resets));
    }
    let probe = extent_data(seed, AWAY_OWNER, 1);
    match volume.write(0, &probe, AWAY_OWNER) {
        Ok(id) if volume.lacks_copy(id, 1) => {
            // Not one of the batches: the probe goes again.
            volume.free(id).map_err(|e| format!("free {id}: {e}"))?;
            let why = volume.status().devices[1].why.clone().unwrap_or_default();
            check.ok("degraded on", format!("a write after the reset went to copy 0 alone; device 1: {why}"));
        }
        Ok(id) => return Err(format!("a write after the reset has copy 1 (extent {id})")),
        Err(error) => return Err(format!("a write after the reset: {error}")),
    }
    let status = print_status(check, "away", &volume)?;
    require_states("away", &status, VolumeState::Degraded, &[MemberState::Online, MemberState::Failed])?;
    // Its copies of the uncommitted batch were never made durable.
    let uncommitted = |owner: u64| batches.batch_of(owner) == Some("uncommitted");
    let lacking: Vec<u64> = model.iter().filter(|(_, &(id, _, _))| volume.lacks_copy(id, 1)).map(|(&o, _)| o).collect();
    if lacking.len() as u64 != UNCOMMITTED_EXTENTS || !lacking.iter().all(|&o| uncommitted(o)) {
        return Err(format!(
            "after the reset copy 1 is missing for owners {lacking:?}; expected the uncommitted batch"
        ));
    }
    check.ok("given up", format!("device 1 given up; the {} extents not yet committed lack copy 1", lacking.len()));
    write_all(&mut volume, seed, &batches.away, &mut model, false)?;
    commit(check, &mut volume, "commit away")?;

    // The same controller, a new queue pair: the device comes back.
    let mut device = Device::open(&controllers[1], 1, device_options())
        .map_err(|e| format!("{rejoining}: open namespace 1 after the reset: {e}"))?;
    device.set_identity(&rejoining);
    let started = Instant::now();
    let place = volume.rejoin(device).map_err(|e| format!("rejoin: {e}"))?;
    if place != 1 {
        return Err(format!("the device rejoined in place {place}"));
    }
    let missed = |owner: u64| matches!(batches.batch_of(owner), Some("uncommitted" | "away"));
    let missing = blocks_of(&model, missed);
    if volume.missing_blocks(1) != missing || volume.missing_blocks(0) != 0 {
        return Err(format!(
            "after rejoin copy 1 lacks {} blocks and copy 0 {}; expected {missing} (the uncommitted and away \
             batches) and 0",
            volume.missing_blocks(1),
            volume.missing_blocks(0)
        ));
    }
    check.ok(
        "rejoin",
        format!("place 1 in {} ms, lacking {missing} blocks: the writes it missed", started.elapsed().as_millis()),
    );
    let status = print_status(check, "rejoined", &volume)?;
    require_states("rejoined", &status, VolumeState::Resilvering, &[MemberState::Online, MemberState::Resilvering])?;
    let (_, lacking) = verify_copies(&mut volume, seed, &model, |lane, owner| lane == 1 && missed(owner))?;
    check.ok(
        "missing",
        format!(
            "exactly the {} extents written while away lack copy 1; {lacking} copies read",
            model.keys().filter(|&&o| missed(o)).count()
        ),
    );

    let report = resilver_place(check, &mut volume, 1)?;
    let missing_bytes = missing * BLOCK_SIZE as u64;
    let extents = model.keys().filter(|&&o| missed(o)).count() as u64;
    if report.bytes_copied != missing_bytes || report.extents_copied != extents {
        return Err(format!(
            "the resilver copied {} bytes in {} extents; expected {missing_bytes} in {extents}",
            report.bytes_copied, report.extents_copied
        ));
    }
    let status = print_status(check, "resilvered", &volume)?;
    require_states("resilvered", &status, VolumeState::Online, &[MemberState::Online, MemberState::Online])?;
    let (bytes, copies) = verify_copies(&mut volume, seed, &model, |_, _| false)?;
    check.ok("verify", format!("{} extents, {} read back, {copies} copies", model.len(), mib(bytes)));
    let (_, counts) = model_of(&batches, &mut volume)?;
    check.ok("extents", describe_counts(&counts));
    invariants(check, &volume)?;
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}

/// A new process: online on both, every copy there.
fn last(check: &Check, controllers: &[Controller], host: &dyn Host) -> Result<(), String> {
    let seed = check.seed;
    let devices = member_devices(controllers, host)?;
    check_kinds(check, &devices, &[false, true])?;
    let mut volume = Volume::open(devices, &options(false)).map_err(|e| format!("open: {e}"))?;
    let status = print_status(check, "open", &volume)?;
    require_states("open", &status, VolumeState::Online, &[MemberState::Online, MemberState::Online])?;
    let (model, counts) = model_of(&Batches::new(seed), &mut volume)?;
    let (bytes, copies) = verify_copies(&mut volume, seed, &model, |_, _| false)?;
    check.ok("verify", format!("{} extents, {} read back, {copies} copies", model.len(), mib(bytes)));
    check.ok("extents", describe_counts(&counts));
    invariants(check, &volume)?;
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}
