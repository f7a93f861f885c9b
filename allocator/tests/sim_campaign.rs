//! The fault campaign: seeded runs over single, dup and mirror volumes on
//! ZNS and conventional namespaces. Each run builds some committed history,
//! then meets one fault while it works or at rest:
//!
//! - a power cut during writes, commits, rotations or reclaim;
//! - a flush that fails, followed by a retry;
//! - bit rot at rest, on metadata or on data;
//! - media errors on metadata or on data;
//! - a metadata or data zone turning read-only (ZNS);
//! - a mirror device wiped, or all of its reads failing.
//!
//! The invariant after every open: every committed extent is present and
//! reads back exactly, or the open (or the read) fails with a typed error
//! that names what is lost, and a failed open writes nothing. Where the
//! volume holds two copies, a single fault must cost nothing at all.
//!
//! `CAMPAIGN_SEEDS=N` runs more (`hack/test --long` runs 20,000);
//! `CAMPAIGN_SEED=S` replays one. A failure prints its seed.

use nvme_testkit::harness as support;

use nvme_driver::sim::{Fault, FaultConfig, Simulator};
use nvme_testkit::{data::pattern, Prng};
use support::{conventional, volume_options, zns, Harness, Model};
use zoned_allocator::{Error, Profile, ReclaimProgress, Volume, VolumeOptions};

/// 512-byte LBAs per 4 KiB block, and LBAs per 256 KiB zone.
const LPB: u64 = 8;
const ZONE_LBAS: u64 = 512;
/// Zones per namespace (32 of 256 KiB, ZNS or software).
const ZONES: u64 = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultKind {
    PowerCut,
    FlushFails,
    RotAtRest { metadata: bool },
    MediaErrors { metadata: bool },
    ZoneReadOnly { metadata: bool },
    DeviceWiped,
    DeviceUnreadable,
}

struct Setup {
    harness: Harness,
    options: VolumeOptions,
    profile: Profile,
    /// Per simulator: metadata zones at its start, and whether it is zoned.
    meta_zones: Vec<u64>,
    zoned: Vec<bool>,
}

fn setup(seed: u64, rng: &mut Prng) -> Setup {
    let keep = [0.0, 0.5, 1.0][rng.below(3) as usize];
    let faults = FaultConfig { power_cut_keep_probability: keep, ..FaultConfig::default() };
    // The volume waits longer than the driver takes to end a command of a
    // device that stopped (the short crash bound), so that a slow host
    // never turns a write that completes into one that timed out.
    let soft = VolumeOptions {
        software_zone_bytes: Some(256 << 10),
        timeout: std::time::Duration::from_millis(500),
        ..volume_options()
    };
    let namespace = |zoned: bool| {
        if zoned {
            zns(ZONES, 256).with_seed(seed).with_faults(faults.clone())
        } else {
            conventional(8).with_seed(seed).with_faults(faults.clone())
        }
    };
    match rng.below(6) {
        kind @ 0..=3 => {
            let zoned = kind % 2 == 0;
            let profile = if kind < 2 { Profile::Single } else { Profile::Dup };
            Setup {
                harness: Harness::single(namespace(zoned)),
                options: VolumeOptions { profile, ..soft },
                profile,
                meta_zones: vec![4],
                zoned: vec![zoned],
            }
        }
        kind => {
            let first_zoned = kind == 4;
            Setup {
                harness: Harness::new(vec![namespace(first_zoned), namespace(!first_zoned)], vec![(0, 1), (1, 1)]),
                options: VolumeOptions { profile: Profile::Mirror, ..soft },
                profile: Profile::Mirror,
                meta_zones: vec![2, 2],
                zoned: vec![first_zoned, !first_zoned],
            }
        }
    }
}

fn fault_kind(setup: &Setup, rng: &mut Prng) -> FaultKind {
    let metadata = rng.chance(0.5);
    loop {
        let kind = match rng.below(7) {
            0 => FaultKind::PowerCut,
            1 => FaultKind::FlushFails,
            2 => FaultKind::RotAtRest { metadata },
            3 => FaultKind::MediaErrors { metadata },
            4 => FaultKind::ZoneReadOnly { metadata },
            5 => FaultKind::DeviceWiped,
            _ => FaultKind::DeviceUnreadable,
        };
        let fits = match kind {
            FaultKind::ZoneReadOnly { .. } => setup.zoned.iter().any(|&z| z),
            FaultKind::DeviceWiped | FaultKind::DeviceUnreadable => setup.profile == Profile::Mirror,
            _ => true,
        };
        if fits {
            return kind;
        }
    }
}

/// Commands that change a namespace, summed over the simulators.
fn device_writes(harness: &Harness) -> u64 {
    let opcodes = [0x01usize, 0x08, 0x19, 0x79, 0x7d];
    harness.sims.iter().map(|s| opcodes.iter().map(|&o| s.stats().io_commands[o]).sum::<u64>()).sum()
}

/// What the work knows of durability: the last state a commit returned
/// for, and whether the fault fell inside a commit (then the state it was
/// making durable may be the one found).
struct Work {
    committed: Model,
    current: Model,
    inside_commit: bool,
}

/// Random writes, frees, commits and reclaim steps, until one fails for a
/// reason other than space, or `steps` are done.
fn work(volume: &mut Volume, rng: &mut Prng, steps: usize, state: &mut Work) -> bool {
    for _ in 0..steps {
        match rng.below(100) {
            0..=54 => {
                let blocks = 1 + rng.below(8) as usize;
                let data_seed = rng.next_u64();
                match volume.write(0, &pattern(data_seed, blocks), data_seed) {
                    Ok(id) => {
                        state.current.insert(id, (data_seed, blocks));
                    }
                    Err(Error::NoSpace(_)) => {}
                    Err(_) => return false,
                }
            }
            55..=72 if !state.current.is_empty() => {
                let id = *state.current.keys().nth(rng.below(state.current.len() as u64) as usize).unwrap();
                volume.free(id).unwrap();
                state.current.remove(&id);
            }
            73..=88 => {
                if volume.commit().is_err() {
                    state.inside_commit = true;
                    return false;
                }
                state.committed = state.current.clone();
            }
            _ => match volume.reclaim_step(1 + rng.below(32)) {
                Ok(ReclaimProgress::Reclaimed { .. }) => state.committed = state.current.clone(),
                Ok(_) => {}
                Err(_) => {
                    state.inside_commit = true;
                    return false;
                }
            },
        }
    }
    true
}

/// Where a single fault falls on simulator `sim`: within one metadata copy
/// (two zones), or within one data zone, as a bad area or a worn zone
/// does. (A dup's two copies of an extent lie in different zones, a
/// mirror's on different devices, so one area never holds both.)
#[derive(Clone, Copy)]
enum Area {
    MetadataCopy(u64),
    DataZone(u64),
}

fn area(setup: &Setup, sim: usize, metadata: bool, rng: &mut Prng) -> Area {
    let meta = setup.meta_zones[sim];
    if metadata {
        Area::MetadataCopy(rng.below(meta / 2))
    } else {
        Area::DataZone(meta + rng.below(ZONES - meta))
    }
}

/// A random 4 KiB-aligned LBA within `area`.
fn random_lba(area: Area, rng: &mut Prng) -> u64 {
    let zone = match area {
        Area::MetadataCopy(copy) => copy * 2 + rng.below(2),
        Area::DataZone(zone) => zone,
    };
    zone * ZONE_LBAS + rng.below(ZONE_LBAS / LPB) * LPB
}

struct Outcome {
    /// The fault could cost data beyond the volume's redundancy: reads may
    /// fail with `Uncorrectable`, naming the extent.
    may_lose_reads: bool,
    /// Open may refuse, with a typed error naming a device.
    may_refuse: bool,
}

fn run(seed: u64) {
    support::set_timeout(support::CRASH_TIMEOUT);
    let mut rng = Prng::new(seed);
    let mut setup = setup(seed, &mut rng);
    let kind = fault_kind(&setup, &mut rng);
    let context = format!("seed {seed} ({:?}, zoned {:?}, {kind:?})", setup.profile, setup.zoned);
    let mut volume = setup.harness.format(&setup.options);
    let mut state = Work { committed: Model::new(), current: Model::new(), inside_commit: false };
    let history = 20 + rng.below(60) as usize;
    work(&mut volume, &mut rng, history, &mut state);
    volume.commit().unwrap_or_else(|e| panic!("{context}: commit before the fault: {e}"));
    state.committed = state.current.clone();
    state.inside_commit = false;
    let victim = rng.below(setup.harness.sims.len() as u64) as usize;
    let mut outcome = Outcome { may_lose_reads: false, may_refuse: false };
    let mut cut = false;
    match kind {
        FaultKind::PowerCut => {
            setup.harness.sims[victim].inject(Fault::PowerCutAfter { io_commands: rng.below(150) });
            work(&mut volume, &mut rng, 150, &mut state);
            cut = true;
        }
        FaultKind::FlushFails => {
            let steps = rng.below(40) as usize;
            work(&mut volume, &mut rng, steps, &mut state);
            setup.harness.sims[victim].inject(Fault::FlushFails { after: rng.below(3) as u32 });
            if volume.commit().is_err() {
                setup.harness.sims[victim].clear_faults();
                volume.commit().unwrap_or_else(|e| panic!("{context}: the retry after a failed flush: {e}"));
            }
            setup.harness.sims[victim].clear_faults();
            state.committed = state.current.clone();
            work(&mut volume, &mut rng, 40, &mut state);
            volume.commit().unwrap_or_else(|e| panic!("{context}: commit after the retry: {e}"));
            state.committed = state.current.clone();
        }
        FaultKind::ZoneReadOnly { metadata } => {
            let sim = (0..setup.zoned.len()).cycle().skip(victim).find(|&s| setup.zoned[s]).unwrap();
            let place = area(&setup, sim, metadata, &mut rng);
            let lba = random_lba(place, &mut rng);
            let steps = rng.below(40) as usize;
            work(&mut volume, &mut rng, steps, &mut state);
            setup.harness.sims[sim].inject(Fault::ZoneReadOnly { nsid: 1, zslba: lba / ZONE_LBAS * ZONE_LBAS });
            if !work(&mut volume, &mut rng, 80, &mut state) {
                // A commit that failed against the worn zone: its state may
                // or may not be durable.
                state.inside_commit = true;
            }
        }
        _ => {
            work(&mut volume, &mut rng, 60, &mut state);
            volume.commit().unwrap_or_else(|e| panic!("{context}: commit: {e}"));
            state.committed = state.current.clone();
        }
    }
    drop(volume);
    // Faults at rest, after the work.
    match kind {
        FaultKind::RotAtRest { metadata } => {
            let place = area(&setup, victim, metadata, &mut rng);
            for _ in 0..1 + rng.below(6) {
                let lba = random_lba(place, &mut rng);
                setup.harness.sims[victim].corrupt_at_rest(1, lba + rng.below(LPB), rng.below(4096));
            }
            outcome.may_lose_reads = setup.profile == Profile::Single && !metadata;
        }
        FaultKind::MediaErrors { metadata } => {
            let place = area(&setup, victim, metadata, &mut rng);
            for _ in 0..1 + rng.below(4) {
                let lba = random_lba(place, &mut rng);
                // Within the zone the area is in.
                let blocks = (LPB * (1 + rng.below(8))).min(ZONE_LBAS - lba % ZONE_LBAS);
                setup.harness.sims[victim].inject(Fault::UnrecoveredRead { nsid: 1, slba: lba, blocks });
            }
            outcome.may_lose_reads = setup.profile == Profile::Single && !metadata;
        }
        FaultKind::DeviceWiped => {
            let config = if setup.zoned[victim] { zns(ZONES, 256) } else { conventional(8) };
            setup.harness.sims[victim] = Simulator::new(config);
            outcome.may_refuse = true;
        }
        FaultKind::DeviceUnreadable => {
            setup.harness.sims[victim].inject(Fault::UnrecoveredRead { nsid: 1, slba: 0, blocks: ZONES * ZONE_LBAS });
            outcome.may_refuse = true;
        }
        FaultKind::ZoneReadOnly { metadata: false } => {}
        _ => {}
    }
    if cut {
        setup.harness.power_cut();
    } else {
        setup.harness.restart();
    }
    check(&setup, &state, &outcome, &context);
}

fn check(setup: &Setup, state: &Work, outcome: &Outcome, context: &str) {
    let before = device_writes(&setup.harness);
    let mut volume = match setup.harness.open(&setup.options) {
        Ok(volume) => volume,
        Err(error @ (Error::BlankDevice { .. } | Error::Unreadable { .. })) if outcome.may_refuse => {
            assert_eq!(device_writes(&setup.harness), before, "{context}: a failed open wrote ({error})");
            return;
        }
        Err(error) => panic!("{context}: reopening: {error}"),
    };
    volume.check_invariants();
    let expected = support::expected_state(&volume, &state.committed, &state.current, state.inside_commit, context);
    for (&id, &(data_seed, blocks)) in expected {
        let mut back = vec![0u8; blocks * 4096];
        match volume.read(id, &mut back) {
            Ok(_) => assert!(back == pattern(data_seed, blocks), "{context}: extent {id} reads back wrong"),
            Err(Error::Uncorrectable { extent, .. }) if outcome.may_lose_reads && extent == id => {}
            Err(error) => panic!("{context}: extent {id}: {error}"),
        }
        // Owners live in the journal only: a single fault never loses one.
        match volume.owner(id) {
            Ok(owner) => assert_eq!(owner, data_seed, "{context}: extent {id}'s owner"),
            Err(error) => panic!("{context}: extent {id}'s owner: {error}"),
        }
    }
}

#[test]
fn single_faults_never_lose_committed_data_silently() {
    if let Some(seed) = std::env::var("CAMPAIGN_SEED").ok().and_then(|s| s.parse().ok()) {
        run(seed);
        return;
    }
    let seeds: u64 = std::env::var("CAMPAIGN_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(500);
    let started = std::time::Instant::now();
    for seed in 0..seeds {
        run(seed);
    }
    eprintln!("{seeds} seeds in {:.1} s", started.elapsed().as_secs_f64());
}
