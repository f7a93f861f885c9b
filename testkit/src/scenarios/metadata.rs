//! Format 2's metadata safety, one phase per process, in this order on the
//! same controllers: a mirror of a conventional namespace (device 0) and a
//! second namespace, whose media the [`Host`] overwrites in part between
//! and within phases.
//!
//! - `format` (the two): format; extents in three commits with frees; the
//!   host overwrites device 0's metadata zones (zone 0 up to its first
//!   data zone) with random bytes; waits (up to [`HOST_WAIT_MAX`]) until
//!   device 0 no longer probes as a member.
//! - `garbage` (the two): open finds device 0 unlabelled, opens from
//!   device 1's copy, rewrites device 0's (`copies_repaired`); every
//!   extent reads back from both copies; device 0 is labelled again.
//! - `reopen` (the two): opens with nothing to repair.
//! - `swapped` (the two, in the other order): the same volume opens,
//!   `device_order` [1, 0].
//! - `foreign` (the two and a third): a single volume formatted on the
//!   third; opening the mirror with it as device 1 fails with
//!   `ForeignDevice { device: 1, .. }`; then both volumes open as they
//!   were, neither repaired.
//! - `damage` (the two): the host overwrites device 0's journal records
//!   (its label blocks kept) and device 1's whole metadata; open must fail
//!   with `MetadataLost`, and `seqwrite` (no `--format`) must refuse with
//!   "nothing was formatted"; then the host restores device 0's records
//!   and open, which must fail with `MetadataLost` until it opens (up to
//!   [`HOST_WAIT_MAX`]), rewrites device 1's copy and reads back every
//!   extent; then it reopens clean.
//!
//! Every open reports the volume's ID (`volume 0x...`) for the host to
//! compare.

use super::*;
use std::time::Instant;
use zoned_allocator::zones::ZoneUse;
use zoned_allocator::{Device, DeviceState, Error, Location, Profile, Volume, VolumeOptions, BLOCK_SIZE};

/// The phases, one process each, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetadataPhase {
    Format,
    Garbage,
    Reopen,
    Swapped,
    Foreign,
    Damage,
}

impl MetadataPhase {
    pub const ALL: [MetadataPhase; 6] = [
        MetadataPhase::Format,
        MetadataPhase::Garbage,
        MetadataPhase::Reopen,
        MetadataPhase::Swapped,
        MetadataPhase::Foreign,
        MetadataPhase::Damage,
    ];

    /// The phase's name (`--phase`).
    pub fn name(self) -> &'static str {
        self.label().trim_start_matches("metadata ")
    }

    pub fn parse(name: &str) -> Option<MetadataPhase> {
        MetadataPhase::ALL.into_iter().find(|phase| phase.name() == name)
    }

    pub fn label(self) -> &'static str {
        match self {
            MetadataPhase::Format => "metadata format",
            MetadataPhase::Garbage => "metadata garbage",
            MetadataPhase::Reopen => "metadata reopen",
            MetadataPhase::Swapped => "metadata swapped",
            MetadataPhase::Foreign => "metadata foreign",
            MetadataPhase::Damage => "metadata damage",
        }
    }

    /// The controllers the phase takes: the mirror's two (the other way
    /// round for `swapped`), and a third for `foreign`.
    pub fn controllers(self) -> usize {
        match self {
            MetadataPhase::Foreign => 3,
            _ => 2,
        }
    }

    /// The checks a passing run reports, in order.
    pub fn checks(self) -> Vec<&'static str> {
        match self {
            MetadataPhase::Format => {
                vec!["geometry", "commit", "commit frees", "commit second", "committed", "overwritten"]
            }
            MetadataPhase::Garbage | MetadataPhase::Reopen | MetadataPhase::Swapped => {
                vec!["geometry", "open", "invariants", "labels"]
            }
            MetadataPhase::Foreign => vec![
                "geometry",
                "commit other",
                "other volume",
                "foreign refused",
                "other volume intact",
                "volume intact",
                "invariants",
                "labels",
            ],
            MetadataPhase::Damage => vec![
                "geometry",
                "open",
                "damaged",
                "open refused",
                "seqwrite refused",
                "not formatted",
                "restored",
                "invariants",
                "reopen",
                "labels",
            ],
        }
    }
}

/// Runs `phase` on the host's controllers, reporting each passed check
/// through `check`.
pub fn run_metadata(check: &Check, phase: MetadataPhase, host: &mut dyn Host) -> Result<(), String> {
    let controllers = host.controllers()?;
    if controllers.len() != phase.controllers() {
        return Err(format!("{} takes {} controllers, got {}", phase.label(), phase.controllers(), controllers.len()));
    }
    match phase {
        MetadataPhase::Format => metadata_format(check, &controllers, host),
        MetadataPhase::Garbage | MetadataPhase::Reopen | MetadataPhase::Swapped => {
            metadata_reopen(check, phase, &controllers)
        }
        MetadataPhase::Foreign => metadata_foreign(check, &controllers),
        // Lets the controllers go while seqwrite runs.
        MetadataPhase::Damage => metadata_damage(check, controllers, host),
    }
}

/// Device 0, whose metadata zones the host overwrites and open rewrites
/// in place, is conventional (in every phase but `swapped`, which names
/// the devices in the other order).
fn conventional_first(phase: MetadataPhase, geometry: &[Geometry]) -> Option<&'static str> {
    (phase != MetadataPhase::Swapped && geometry[0].zoned).then_some("a conventional namespace first")
}

/// Label blocks at the head of every metadata segment (format 2;
/// docs/allocator.md, "Durable metadata"). The damage phase keeps device 0's, so the
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
fn metadata_format(check: &Check, controllers: &[Controller], host: &mut dyn Host) -> Result<(), String> {
    let seed = check.seed;
    let devices = open_devices(controllers)?;
    check_geometry(check, &devices, |geometry| conventional_first(MetadataPhase::Format, geometry))?;
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
    host.overwrite(&[MediaRange { device: 0, offset: 0, len: zones.bytes }])?;
    let (state, waited) = wait_for_host(&mut devices[0], "overwrite", |s| !member_of(s, volume_id, 0))?;
    check.ok("overwritten", format!("device 0 probes {state:?} after {} ms", waited.as_millis()));
    Ok(())
}

/// Opens the volume in a new process: after the host's garbage (from
/// device 1's copy, rewriting device 0's), once more (nothing to repair),
/// and with the devices given the other way round.
fn metadata_reopen(check: &Check, phase: MetadataPhase, controllers: &[Controller]) -> Result<(), String> {
    let devices = open_devices(controllers)?;
    check_geometry(check, &devices, |geometry| conventional_first(phase, geometry))?;
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
    check_geometry(check, &devices, |geometry| conventional_first(MetadataPhase::Foreign, geometry))?;
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
fn metadata_damage(check: &Check, controllers: Vec<Controller>, host: &mut dyn Host) -> Result<(), String> {
    let devices = open_devices(&controllers)?;
    check_geometry(check, &devices, |geometry| conventional_first(MetadataPhase::Damage, geometry))?;
    let mut volume = open_metadata(check, devices, "open", &[0, 1], false)?;
    let volume_id = volume.id();
    let (first, second) = (MetadataZones::of(&mut volume, 0)?, MetadataZones::of(&mut volume, 1)?);
    let mut devices = volume.close().map_err(|e| format!("close: {e}"))?;

    // Device 0 keeps its labels and loses its journal records; device 1
    // loses all of its metadata zones, its first label last.
    let records = first.records().map(|(offset, len)| MediaRange { device: 0, offset, len });
    let mut damage = records.to_vec();
    damage.push(MediaRange { device: 1, offset: 0, len: second.bytes });
    host.overwrite(&damage)?;
    let (state, waited) = wait_for_host(&mut devices[1], "overwrite", |s| !member_of(s, volume_id, 1))?;
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
    let started = Instant::now();
    let refusal = host.seqwrite_refusal()?;
    if !refusal.contains("nothing was formatted") {
        return Err(format!("seqwrite on the damaged volume did not say that nothing was formatted: {refusal}"));
    }
    check.ok("seqwrite refused", format!("after {} ms: {refusal}", started.elapsed().as_millis()));
    let controllers = host.controllers()?;
    let mut devices = open_devices(&controllers)?;
    let states: Vec<DeviceState> = devices.iter_mut().map(Volume::probe).collect();
    if !member_of(&states[0], volume_id, 0) || states[1] != state {
        return Err(format!("after seqwrite the devices probe {states:?}"));
    }
    check.ok("not formatted", format!("device 0 still a member of volume {volume_id:#x}, device 1 still {state:?}"));

    // Device 0's records back; device 1 stays garbage, a member without a
    // label, whose metadata open rewrites once its data verifies.
    drop(devices);
    host.restore(&records)?;
    let (volume, open_time) = open_when_restored(check, &controllers)?;
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
fn open_when_restored(check: &Check, controllers: &[Controller]) -> Result<(Volume, Duration), String> {
    let started = Instant::now();
    for attempt in 1.. {
        let opened = Instant::now();
        match Volume::open(open_devices(controllers)?, &metadata_options()) {
            Ok(volume) => {
                eprintln!(
                    "{}: opened at attempt {attempt}, {} ms after the restore",
                    check.prefix,
                    started.elapsed().as_millis()
                );
                return Ok((volume, opened.elapsed()));
            }
            Err(Error::MetadataLost { .. }) if started.elapsed() < HOST_WAIT_MAX => {
                std::thread::sleep(HOST_POLL_INTERVAL)
            }
            Err(error) => return Err(format!("after the restore: open attempt {attempt}: {error:?}")),
        }
    }
    unreachable!("the loop returns")
}
