//! The pool campaign: seeded runs over pools of 2 to 8 namespaces, ZNS
//! and conventional mixed, with a random profile (single, mirror, 3-copy
//! mirror). While writes, frees, reclaim and commits run, up to copies − 1
//! devices are lost at random points; the pool goes on degraded, is
//! reopened (after a clean close or a power cut), and is made whole again
//! by one of: the devices given back (they rejoin), blank devices put in
//! their places (replace, then a resilver from every survivor), or a
//! distributed rebuild onto the survivors' free space; each resilver and
//! rebuild cut by power losses at random points. A single pool loses a
//! device and gets it back. A pool of three or more whole again then
//! grows by a spare (the new device's power cut at a random command) and
//! loses a member without metadata by removal (stopped, the power cut, and
//! run again).
//!
//! Checked after every step: the volume's invariants. At each stage every
//! committed extent reads back with its own bytes (degraded: from a copy
//! available; whole: from every copy on its own). At the end, one device
//! more than the profile promises is withheld: the open either refuses
//! with a typed error (no metadata copy left) or names as lost exactly the
//! extents whose every copy was withheld, and every other reads back.
//!
//! `POOL_CAMPAIGN_SEEDS=N` runs more (`hack/test --long` runs 10,000);
//! `POOL_CAMPAIGN_SEED=S` replays one. A failure names its seed.

use nvme_testkit::harness as support;

use nvme_driver::sim::{Fault, FaultConfig, SimConfig};
use nvme_scrub::{Resilver, ResilverOptions};
use nvme_testkit::{data::pattern, Prng};
use std::collections::{BTreeMap, BTreeSet};
use support::{conventional, device_options, volume_options, zns, Harness};
use zoned_allocator::{Device, Error, Profile, Volume, VolumeOptions, VolumeState};

/// extent → (pattern seed, blocks)
type Model = BTreeMap<u64, (u64, usize)>;

/// How the pool is made whole after its losses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Repair {
    /// The lost devices come back and rejoin.
    Rejoin,
    /// Blank devices take their places; a resilver reads every survivor.
    Replace,
    /// Their copies are rebuilt on the survivors' free space.
    Distributed,
}

struct Run {
    seed: u64,
    rng: Prng,
    harness: Harness,
    options: VolumeOptions,
    /// Pool devices: the simulator now in each place.
    sim_of: Vec<usize>,
    /// Spare simulators not yet used.
    spares: Vec<usize>,
    committed: Model,
    current: Model,
    next_seed: u64,
}

fn namespace(zoned: bool, seed: u64) -> SimConfig {
    let faults = FaultConfig { power_cut_keep_probability: 0.5, ..FaultConfig::default() };
    let config = if zoned { zns(40, 256) } else { conventional(10) };
    config.with_seed(seed).with_faults(faults)
}

impl Run {
    fn new(seed: u64) -> Run {
        let mut rng = Prng::new(seed);
        let devices = 2 + rng.below(7) as usize;
        let profiles: Vec<Profile> =
            [Profile::Single, Profile::Mirror, Profile::Mirror3].into_iter().filter(|p| p.spans(devices)).collect();
        let profile = profiles[rng.below(profiles.len() as u64) as usize];
        // The pool's devices and two spares.
        let configs: Vec<SimConfig> =
            (0..devices + 2).map(|i| namespace(rng.chance(0.5), seed * 16 + i as u64)).collect();
        let harness = Harness::new(configs, (0..devices).map(|c| (c, 1)).collect());
        let options = VolumeOptions {
            profile,
            software_zone_bytes: Some(256 << 10),
            max_extent_bytes: 64 << 10,
            timeout: std::time::Duration::from_millis(500),
            ..volume_options()
        };
        Run {
            seed,
            rng,
            harness,
            options,
            sim_of: (0..devices).collect(),
            spares: vec![devices, devices + 1],
            committed: Model::new(),
            current: Model::new(),
            next_seed: seed * 1_000_000 + 1,
        }
    }

    fn context(&self, what: &str) -> String {
        format!("seed {} ({:?} over {}): {what}", self.seed, self.options.profile, self.sim_of.len())
    }

    fn device(&self, sim: usize) -> Device {
        Device::open(&self.harness.controllers[sim], 1, device_options()).expect("open the device")
    }

    /// The pool's devices but those at `away`.
    fn devices_but(&self, away: &[usize]) -> Vec<Device> {
        (0..self.sim_of.len()).filter(|p| !away.contains(p)).map(|p| self.device(self.sim_of[p])).collect()
    }

    /// A write, frees, a commit or a reclaim step; each must succeed.
    fn step(&mut self, volume: &mut Volume) {
        match self.rng.below(10) {
            0..=5 => {
                let seed = self.next_seed;
                self.next_seed += 1;
                let blocks = 1 + self.rng.below(16) as usize;
                match volume.write(0, &pattern(seed, blocks), seed) {
                    Ok(id) => {
                        self.current.insert(id, (seed, blocks));
                    }
                    Err(Error::NoSpace(_)) => self.free_some(volume),
                    // A single pool's write to a device just gone: nothing
                    // was written, and the next goes to the others.
                    Err(Error::Member { .. }) if self.options.profile.copies() == 1 => {}
                    Err(error) => panic!("{}", self.context(&format!("write: {error}"))),
                }
            }
            6 | 7 => self.free_some(volume),
            8 => self.commit(volume),
            _ => {
                volume.reclaim_step(64).unwrap_or_else(|e| panic!("{}", self.context(&format!("reclaim: {e}"))));
                self.commit(volume);
            }
        }
        volume.check_invariants();
    }

    fn free_some(&mut self, volume: &mut Volume) {
        for _ in 0..1 + self.rng.below(4) {
            let Some(&id) = self.current.keys().nth(self.rng.below(self.current.len().max(1) as u64) as usize) else {
                return;
            };
            volume.free(id).unwrap_or_else(|e| panic!("{}", self.context(&format!("free {id}: {e}"))));
            self.current.remove(&id);
        }
    }

    fn commit(&mut self, volume: &mut Volume) {
        volume.commit().unwrap_or_else(|e| panic!("{}", self.context(&format!("commit: {e}"))));
        self.committed = self.current.clone();
    }

    /// Every committed extent reads back exactly, but those in `lost`
    /// (which must read as uncorrectable); with `every_copy`, from each of
    /// its copies on its own, all of them there.
    fn verify(&self, volume: &mut Volume, every_copy: bool, lost: &BTreeSet<u64>, what: &str) {
        volume.check_invariants();
        let found: BTreeSet<u64> = volume.extent_ids().collect();
        let expected: BTreeSet<u64> = self.committed.keys().copied().collect();
        assert_eq!(found, expected, "{}", self.context(&format!("{what}: the extents")));
        let mut back = Vec::new();
        for (&id, &(seed, blocks)) in &self.committed {
            let data = pattern(seed, blocks);
            back.resize(data.len(), 0);
            match volume.read(id, &mut back) {
                Err(Error::Uncorrectable { .. }) if lost.contains(&id) => continue,
                Err(e) => panic!("{}", self.context(&format!("{what}: {id}: {e}"))),
                Ok(_) => assert!(!lost.contains(&id), "{}", self.context(&format!("{what}: lost {id} read"))),
            }
            assert!(back == data, "{}", self.context(&format!("{what}: extent {id} reads back wrong")));
            if every_copy {
                let mut copies = 0;
                for lane in 0..volume.lanes() {
                    if volume.location(id, lane).is_none_or(|at| at.is_missing()) {
                        continue;
                    }
                    volume.read_copy(id, lane, &mut back).unwrap_or_else(|e| {
                        panic!("{}", self.context(&format!("{what}: extent {id} copy {lane}: {e}")))
                    });
                    assert!(back == data, "{}", self.context(&format!("{what}: extent {id} copy {lane}")));
                    copies += 1;
                }
                let wanted = volume.copies();
                assert_eq!(copies, wanted, "{}", self.context(&format!("{what}: extent {id}'s copies")));
            }
        }
    }

    /// Power lost on every device, then a new process.
    fn power_cut(&mut self, volume: Volume) {
        drop(volume.abandon());
        self.harness.power_cut();
        self.current = self.committed.clone();
    }

    /// The lanes each committed extent has a copy in.
    fn placement(&self, volume: &Volume) -> BTreeMap<u64, Vec<usize>> {
        let lanes = |id: u64| {
            (0..volume.lanes()).filter(|&l| volume.location(id, l).is_some_and(|at| !at.is_missing())).collect()
        };
        self.committed.keys().map(|&id| (id, lanes(id))).collect()
    }
}

fn run(seed: u64) {
    support::set_timeout(support::CRASH_TIMEOUT);
    let mut run = Run::new(seed);
    let copies = run.options.profile.copies();
    let places = run.sim_of.len();
    let mut volume = run.harness.format(&run.options);
    for _ in 0..run.rng.below(60) {
        run.step(&mut volume);
    }
    run.commit(&mut volume);

    // The losses: up to copies − 1 devices (one on a single pool, whose
    // extents on it are lost until it is back).
    let lose = if copies == 1 { 1 } else { 1 + run.rng.below(copies as u64 - 1) as usize };
    let mut lost: Vec<usize> = Vec::new();
    while lost.len() < lose {
        let place = run.rng.below(places as u64) as usize;
        if !lost.contains(&place) {
            lost.push(place);
        }
    }
    let before_loss = run.placement(&volume);
    for &place in &lost {
        run.harness.sims[run.sim_of[place]].inject(Fault::SurpriseRemoval);
        // The loss shows on the next command to the device: the pool goes
        // on (a single pool's writes go to the others).
        for _ in 0..1 + run.rng.below(10) {
            run.step(&mut volume);
        }
    }
    run.commit(&mut volume);
    // A single pool's extents whose copy was on a lost device are lost.
    let lost_extents: BTreeSet<u64> = if copies == 1 {
        before_loss
            .iter()
            .filter(|(id, lanes)| run.committed.contains_key(id) && lanes.iter().all(|l| lost.contains(l)))
            .map(|(&id, _)| id)
            .collect()
    } else {
        BTreeSet::new()
    };

    // A new process, after a clean close or a power cut, opens degraded.
    if run.rng.chance(0.5) {
        run.power_cut(volume);
    } else {
        run.commit(&mut volume);
        drop(volume.close().unwrap_or_else(|e| panic!("{}", run.context(&format!("close: {e}")))));
        run.harness.power_cut();
    }
    for &place in &lost {
        run.harness.sims[run.sim_of[place]].inject(Fault::SurpriseRemoval);
    }
    let degraded = VolumeOptions { degraded: true, ..run.options.clone() };
    let mut volume = match Volume::open(run.devices_but(&lost), &degraded) {
        Ok(volume) => volume,
        // Every metadata copy was on a lost device: a typed refusal, and
        // the devices back give the whole pool.
        Err(Error::Degraded { .. } | Error::NoVolume | Error::NoDevices) if copies == 1 || lost.len() >= 2 => {
            for &place in &lost {
                run.harness.sims[run.sim_of[place]].clear_faults();
            }
            run.harness.power_cut();
            let mut volume = Volume::open(run.devices_but(&[]), &run.options)
                .unwrap_or_else(|e| panic!("{}", run.context(&format!("all back: {e}"))));
            run.verify(&mut volume, copies > 1, &BTreeSet::new(), "all back");
            return;
        }
        Err(e) => panic!("{}", run.context(&format!("places {lost:?} gone: degraded open: {e}"))),
    };
    // Opened without them, the volume names exactly those lost.
    let named: BTreeSet<u64> = volume.lost_extents().into_iter().map(|(id, _)| id).collect();
    assert_eq!(named, lost_extents, "{}", run.context(&format!("places {lost:?} gone: the extents named lost")));
    run.verify(&mut volume, false, &lost_extents, "degraded open");
    for _ in 0..run.rng.below(20) {
        run.step(&mut volume);
    }
    run.commit(&mut volume);

    // A distributed rebuild needs as many survivors as copies.
    let survivors = places - lost.len();
    let repair = match copies {
        1 => Repair::Rejoin,
        _ if survivors < copies => [Repair::Rejoin, Repair::Replace][run.rng.below(2) as usize],
        _ => [Repair::Rejoin, Repair::Replace, Repair::Distributed][run.rng.below(3) as usize],
    };
    let context = format!("places {lost:?} gone, {repair:?}");
    // What each rebuild works on.
    let mut work: Vec<(usize, bool)> = Vec::new();
    match repair {
        Repair::Rejoin => {
            drop(volume.close().unwrap_or_else(|e| panic!("{}", run.context(&format!("close: {e}")))));
            for &place in &lost {
                run.harness.sims[run.sim_of[place]].clear_faults();
            }
            run.harness.power_cut();
            volume = Volume::open(run.devices_but(&[]), &run.options)
                .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: open with all: {e}"))));
            run.verify(&mut volume, false, &BTreeSet::new(), "rejoined");
            // A single pool has no copy to write back: the device brought
            // its extents with it.
            if copies > 1 {
                work.extend(lost.iter().map(|&place| (place, false)));
            }
        }
        Repair::Replace => {
            for &place in &lost {
                let spare = run.spares.pop().expect("a spare per loss");
                volume
                    .replace(place, run.device(spare), false)
                    .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: replace {place}: {e}"))));
                // The old device, out of the pool, answers again (so that
                // the harness can bring every controller up).
                run.harness.sims[run.sim_of[place]].power_cut();
                run.sim_of[place] = spare;
                work.push((place, false));
            }
            run.verify(&mut volume, false, &BTreeSet::new(), "replaced");
        }
        Repair::Distributed => work.extend(lost.iter().map(|&place| (place, true))),
    }
    // The lost devices not given back stay away for good.
    let away: Vec<usize> = if repair == Repair::Distributed { lost.clone() } else { Vec::new() };

    // Each resilver or rebuild, cut by power losses at random points.
    let options = ResilverOptions {
        commit_every_bytes: 64 << 10,
        max_request_bytes: Some(64 << 10),
        verify_after: false,
        timeout: support::CRASH_TIMEOUT * 20,
        ..ResilverOptions::default()
    };
    for (place, distributed) in work {
        let mut cuts = 0;
        loop {
            let set_up = if distributed {
                Resilver::distributed(&volume, place, &options)
            } else {
                Resilver::new(&volume, place, &options)
            };
            let mut engine = match set_up {
                Ok(engine) => engine,
                Err(e) => panic!("{}", run.context(&format!("{context}: rebuild of {place}: {e}"))),
            };
            let cut_after = if cuts < 2 && run.rng.chance(0.4) { Some(run.rng.below(4)) } else { None };
            let mut steps = 0;
            let done = loop {
                let seq = volume.committed_seq();
                let done = engine
                    .step(&mut volume, 32 << 10)
                    .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: step: {e}"))));
                if volume.committed_seq() != seq {
                    run.committed = run.current.clone();
                }
                if done || cut_after == Some(steps) {
                    break done;
                }
                steps += 1;
                if run.rng.chance(0.2) {
                    run.step(&mut volume);
                }
            };
            if done || cut_after.is_none() {
                let report = engine.finish(&mut volume).unwrap_or_else(|e| panic!("{}", run.context(&format!("{e}"))));
                run.committed = run.current.clone();
                if done {
                    assert_eq!(report.bytes_left, 0, "{}", run.context(&format!("{context}: {report:?}")));
                    break;
                }
                continue;
            }
            drop(engine);
            cuts += 1;
            run.power_cut(volume);
            let options = if away.is_empty() { run.options.clone() } else { degraded.clone() };
            volume = Volume::open(run.devices_but(&away), &options)
                .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: reopen in the rebuild: {e}"))));
            run.verify(&mut volume, false, &BTreeSet::new(), "reopened in the rebuild");
        }
    }
    run.commit(&mut volume);
    let status = volume.status();
    assert_eq!(status.redundancy.extents_at_risk, 0, "{}", run.context(&format!("{context}: {:?}", status.redundancy)));
    if away.is_empty() {
        assert_eq!(status.state, VolumeState::Online, "{}", run.context(&context));
    }
    run.verify(&mut volume, copies > 1, &BTreeSet::new(), "whole");
    if away.is_empty() {
        volume = grow_and_shrink(&mut run, volume);
    }
    let places = run.sim_of.len();

    // One device more than promised, withheld: typed errors, and exactly
    // the extents whose every copy was there are lost.
    let placement = run.placement(&volume);
    let in_use: Vec<usize> = (0..places).filter(|p| !away.contains(p)).collect();
    let mut withheld: Vec<usize> = away.clone();
    while withheld.len() < copies.min(places) && withheld.len() < away.len() + in_use.len() {
        let place = in_use[run.rng.below(in_use.len() as u64) as usize];
        if !withheld.contains(&place) {
            withheld.push(place);
        }
    }
    drop(volume.close().unwrap_or_else(|e| panic!("{}", run.context(&format!("close: {e}")))));
    // The devices away answer again (not given: their places are
    // withheld). The old controllers go first: their shutdown must not
    // reach the new ones.
    run.harness.controllers.clear();
    for &place in &away {
        run.harness.sims[run.sim_of[place]].clear_faults();
        run.harness.sims[run.sim_of[place]].power_cut();
    }
    run.harness.restart();
    if withheld.len() == places {
        return;
    }
    let expected: BTreeSet<u64> =
        placement.iter().filter(|(_, lanes)| lanes.iter().all(|l| withheld.contains(l))).map(|(&id, _)| id).collect();
    match Volume::open(run.devices_but(&withheld), &degraded) {
        Ok(mut volume) => {
            let named: BTreeSet<u64> = volume.lost_extents().into_iter().map(|(id, _)| id).collect();
            assert_eq!(named, expected, "{}", run.context(&format!("{context}; {withheld:?} withheld: lost")));
            run.verify(&mut volume, false, &expected, "one device too many withheld");
        }
        Err(Error::Degraded { .. } | Error::NoVolume | Error::NoDevices | Error::MetadataLost { .. }) => {}
        Err(e) => panic!("{}", run.context(&format!("{context}; {withheld:?} withheld: {e}"))),
    }
}

/// A spare added (the new device's power cut at a random command, or not;
/// on a pool of one or two it takes a metadata copy), then a member removed, a metadata one or
/// not (stopped at a random point and the power cut, then run again),
/// each checked whole after.
fn grow_and_shrink(run: &mut Run, mut volume: Volume) -> Volume {
    let copies = run.options.profile.copies();
    if run.options.profile == Profile::Dup || !run.rng.chance(0.6) {
        return volume;
    }
    if let Some(spare) = run.spares.pop() {
        run.commit(&mut volume);
        let cut = run.rng.chance(0.5).then(|| run.rng.below(12));
        if let Some(commands) = cut {
            run.harness.sims[spare].inject(Fault::PowerCutAfter { io_commands: commands });
        }
        let added = volume.add(run.device(spare), false);
        match (added, cut) {
            (Ok(place), None) => assert_eq!(place, run.sim_of.len(), "{}", run.context("add")),
            (Err(e), None) => panic!("{}", run.context(&format!("add: {e}"))),
            (_, Some(commands)) => {
                let context = format!("add cut at the new device's command {commands}");
                run.harness.sims[spare].clear_faults();
                run.power_cut(volume);
                let mut with = run.devices_but(&[]);
                with.push(run.device(spare));
                let places = run.sim_of.len();
                let mut reopened = match Volume::open(with, &run.options) {
                    Ok(volume) => volume,
                    // Not committed: the pool as it was.
                    Err(Error::InvalidConfig(_)) => Volume::open(run.devices_but(&[]), &run.options)
                        .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: reopen: {e}")))),
                    Err(e) => panic!("{}", run.context(&format!("{context}: reopen with it: {e}"))),
                };
                // Not committed (open left the device out, or it was not
                // given): added now, with force when the cut tore its first
                // label (which then reads as data that is not a volume's).
                if reopened.status().devices.len() == places {
                    match reopened.add(run.device(spare), false) {
                        Ok(_) => {}
                        Err(Error::Member { why, .. }) if why.contains("not blank") => {
                            reopened.add(run.device(spare), true).unwrap_or_else(|e| {
                                panic!("{}", run.context(&format!("{context}: again, forced: {e}")))
                            });
                        }
                        Err(e) => panic!("{}", run.context(&format!("{context}: again: {e}"))),
                    }
                }
                volume = reopened;
            }
        }
        run.sim_of.push(spare);
        run.verify(&mut volume, copies > 1, &BTreeSet::new(), "added");
        for _ in 0..run.rng.below(20) {
            run.step(&mut volume);
        }
        run.commit(&mut volume);
    }
    let places = run.sim_of.len();
    if places < 3 || places - 1 < copies || !run.rng.chance(0.7) {
        return volume;
    }
    let place = run.rng.below(places as u64) as usize;
    let stop_at = run.rng.chance(0.5).then(|| run.rng.below(60));
    let mut calls = 0;
    let context = format!("removal of place {place}, stopped at {stop_at:?}");
    let removal = volume.remove(place, &mut |_, _| {
        calls += 1;
        stop_at.is_none_or(|stop| calls <= stop)
    });
    let removal = match removal {
        // The others lack room, or the last member's first zones cannot
        // take the metadata copy: nothing moved.
        Err(Error::Member { why, .. }) if why.contains("lack room") || why.contains("which goes to the last") => {
            run.verify(&mut volume, copies > 1, &BTreeSet::new(), &format!("{context}: refused"));
            return volume;
        }
        Err(e) => panic!("{}", run.context(&format!("{context}: {e}"))),
        Ok(removal) => removal,
    };
    run.committed = run.current.clone();
    if !removal.complete {
        run.power_cut(volume);
        volume = Volume::open(run.devices_but(&[]), &run.options)
            .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: reopen: {e}"))));
        run.verify(&mut volume, copies > 1, &BTreeSet::new(), &format!("{context}: reopened"));
        let removal = volume
            .remove(place, &mut |_, _| true)
            .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: again: {e}"))));
        assert!(removal.complete, "{}", run.context(&context));
    }
    run.sim_of.swap_remove(place);
    run.verify(&mut volume, copies > 1, &BTreeSet::new(), &format!("{context}: done"));
    // The pool reopens without it.
    run.power_cut(volume);
    let volume = Volume::open(run.devices_but(&[]), &run.options)
        .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: reopened after: {e}"))));
    volume
}

#[test]
fn a_pool_loses_devices_and_is_made_whole_without_losing_anything() {
    if let Some(seed) = std::env::var("POOL_CAMPAIGN_SEED").ok().and_then(|s| s.parse().ok()) {
        run(seed);
        return;
    }
    let seeds: u64 = std::env::var("POOL_CAMPAIGN_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let started = std::time::Instant::now();
    for seed in 0..seeds {
        run(seed);
    }
    eprintln!("{seeds} seeds in {:.1} s", started.elapsed().as_secs_f64());
}
