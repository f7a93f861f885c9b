//! The mirror campaign: seeded runs in which a mirror loses a member at a
//! random point while writes, frees, reclaim and commits run; goes on
//! degraded; is reopened degraded (after a clean close or a power cut);
//! then either gets a new blank device in the lost one's place, or gets the
//! lost one back, and is resilvered with power cuts at random points of
//! the resilver; or the lost one is opened alone and written too (both
//! sides went on alone), and every open of the pair must refuse them
//! (`Diverged`) until one side is kept and the other rebuilt from it.
//!
//! Checked after every step: the volume's invariants, and that its state
//! says what happened (degraded while a member is away). At the end every
//! committed extent reads back exactly from each copy on its own, the
//! volume is online, and a read-only check finds nothing to repair. A
//! member that comes back lacks exactly the extents written (or not yet
//! durable) while it was away, and the resilver copies exactly those,
//! reading each once.
//!
//! `MIRROR_CAMPAIGN_SEEDS=N` runs more (`hack/test --long` runs 10,000);
//! `MIRROR_CAMPAIGN_SEED=S` replays one. A failure names its seed.

use nvme_testkit::harness as support;

use nvme_driver::sim::{Fault, FaultConfig, SimConfig};
use nvme_scrub::{Resilver, ResilverOptions};
use nvme_testkit::{data::pattern, Prng};
use std::collections::{BTreeMap, BTreeSet};
use support::{conventional, device_options, volume_options, zns, Harness};
use zoned_allocator::{Device, Error, Profile, Volume, VolumeOptions, VolumeState};

/// LBAs of every namespace (8 MiB of 512-byte LBAs).
const NAMESPACE_LBAS: u64 = 16384;

/// extent → (pattern seed, blocks)
type Model = BTreeMap<u64, (u64, usize)>;

/// How the member is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    /// It goes away (hot-unplug): every command fails with the device gone.
    Removed,
    /// Every write to it fails until it passes the error threshold.
    Failing,
}

/// What comes back in its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Return {
    /// A new blank device, labelled into the place.
    Replaced,
    /// The same device, back after its fault cleared.
    Rejoined,
    /// The same device, but opened alone and written first: both sides
    /// went on alone, and the pair must be refused until one is kept.
    WentOnAlone,
}

struct Run {
    seed: u64,
    rng: Prng,
    harness: Harness,
    options: VolumeOptions,
    /// Simulator of each place now (the spare's after a replace).
    sim_of: [usize; 2],
    committed: Model,
    current: Model,
    next_seed: u64,
    /// A member fails writes and is not yet given up: a write may fail
    /// (not acknowledged; the caller may retry).
    writes_may_fail: bool,
}

fn namespace(zoned: bool, seed: u64) -> SimConfig {
    let faults = FaultConfig { power_cut_keep_probability: 0.5, ..FaultConfig::default() };
    let config = if zoned { zns(32, 256) } else { conventional(8) };
    config.with_seed(seed).with_faults(faults)
}

impl Run {
    fn new(seed: u64) -> Run {
        let mut rng = Prng::new(seed);
        let zoned: Vec<bool> = (0..3).map(|_| rng.chance(0.5)).collect();
        let configs = zoned.iter().enumerate().map(|(i, &z)| namespace(z, seed * 3 + i as u64)).collect();
        let harness = Harness::new(configs, vec![(0, 1), (1, 1)]);
        let options = VolumeOptions {
            profile: Profile::Mirror,
            software_zone_bytes: Some(256 << 10),
            max_extent_bytes: 64 << 10,
            max_device_errors: 3,
            // The volume waits longer than a device takes to be found
            // gone (the driver checks every 10 ms, and its commands time
            // out after the short crash bound).
            timeout: std::time::Duration::from_millis(500),
            ..volume_options()
        };
        Run {
            seed,
            rng,
            harness,
            options,
            sim_of: [0, 1],
            committed: Model::new(),
            current: Model::new(),
            next_seed: seed * 1_000_000 + 1,
            writes_may_fail: false,
        }
    }

    fn context(&self, what: &str) -> String {
        format!("seed {}: {what}", self.seed)
    }

    fn device(&self, sim: usize) -> Device {
        Device::open(&self.harness.controllers[sim], 1, device_options()).expect("open the device")
    }

    /// Writes, frees, a commit or a reclaim step; every one must succeed on
    /// a volume with a member in use.
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
                    Err(Error::Command { .. }) if self.writes_may_fail => {}
                    Err(error) => panic!("{}", self.context(&format!("write: {error}"))),
                }
            }
            6 | 7 => self.free_some(volume),
            8 => self.commit(volume),
            _ => {
                match volume.reclaim_step(64) {
                    Ok(_) => {}
                    Err(Error::Command { .. }) if self.writes_may_fail => {}
                    Err(e) => panic!("{}", self.context(&format!("reclaim: {e}"))),
                }
                // Moves are made durable at once, so that the copies a
                // member lacks when it goes are exactly the new extents.
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

    /// Every extent of `model` reads back exactly, with its owner; with
    /// `copies`, from each copy on its own.
    fn verify(&self, volume: &mut Volume, copies: bool, what: &str) {
        volume.check_invariants();
        let found: BTreeSet<u64> = volume.extent_ids().collect();
        let expected: BTreeSet<u64> = self.committed.keys().copied().collect();
        assert_eq!(found, expected, "{}", self.context(&format!("{what}: the extents")));
        let mut back = Vec::new();
        for (&id, &(seed, blocks)) in &self.committed {
            let data = pattern(seed, blocks);
            back.resize(data.len(), 0);
            volume.read(id, &mut back).unwrap_or_else(|e| panic!("{}", self.context(&format!("{what}: {id}: {e}"))));
            assert!(back == data, "{}", self.context(&format!("{what}: extent {id} reads back wrong")));
            // Every writer here gives the pattern's seed as the owner.
            let owner = volume.owner(id).unwrap_or_else(|e| panic!("{}", self.context(&format!("{what}: {id}: {e}"))));
            assert_eq!(owner, seed, "{}", self.context(&format!("{what}: extent {id}'s owner")));
            if copies {
                for lane in 0..2 {
                    volume.read_copy(id, lane, &mut back).unwrap_or_else(|e| {
                        panic!("{}", self.context(&format!("{what}: extent {id} copy {lane}: {e}")))
                    });
                    assert!(back == data, "{}", self.context(&format!("{what}: extent {id} copy {lane} is wrong")));
                }
            }
        }
    }

    /// Power lost on every device, then a new process.
    fn power_cut(&mut self, volume: Volume) {
        drop(volume.abandon());
        self.harness.power_cut();
        // Only committed state survives a power cut.
        self.current = self.committed.clone();
    }
}

fn run(seed: u64) {
    support::set_timeout(support::CRASH_TIMEOUT);
    let mut run = Run::new(seed);
    let lost = run.rng.below(2) as usize;
    let survivor = 1 - lost;
    let loss = if run.rng.chance(0.5) { Loss::Removed } else { Loss::Failing };
    let back = [Return::Replaced, Return::Rejoined, Return::WentOnAlone][run.rng.below(3) as usize];
    let context = format!("{loss:?} place {lost}, {back:?}");
    let mut volume = run.harness.format(&run.options);

    // Healthy history, then the loss at a random step.
    for _ in 0..run.rng.below(40) {
        run.step(&mut volume);
    }
    let durable_at_loss: BTreeSet<u64> = run.committed.keys().copied().collect();
    // What the lost device's own metadata holds: no commit is in flight
    // when the fault comes, and none reaches the device after it.
    let model_at_loss = run.committed.clone();
    match loss {
        Loss::Removed => run.harness.sims[lost].inject(Fault::SurpriseRemoval),
        Loss::Failing => {
            run.harness.sims[lost].inject(Fault::WriteFault { nsid: 1, slba: 0, blocks: NAMESPACE_LBAS });
            run.writes_may_fail = true;
        }
    }
    // Degraded operation: everything still succeeds (but the writes that
    // fail before a failing member passes its threshold).
    let mut degraded_steps = 5 + run.rng.below(30);
    while degraded_steps > 0 || volume.status().state != VolumeState::Degraded {
        run.step(&mut volume);
        degraded_steps = degraded_steps.saturating_sub(1);
        assert!(degraded_steps > 0 || run.current.len() < 100_000, "{}", run.context("never degraded"));
        if degraded_steps == 0 && volume.status().state != VolumeState::Degraded {
            // The fault only shows on a command to the device: write one.
            let seed = run.next_seed;
            run.next_seed += 1;
            let id = volume.write(0, &pattern(seed, 1), seed);
            if let Ok(id) = id {
                run.current.insert(id, (seed, 1));
            }
            run.commit(&mut volume);
        }
    }
    assert_eq!(volume.status().state, VolumeState::Degraded, "{}", run.context(&context));
    run.writes_may_fail = false;

    // A new process, after a clean close or a power cut, opens degraded.
    if run.rng.chance(0.5) {
        run.power_cut(volume);
    } else {
        run.commit(&mut volume);
        drop(volume.close().unwrap_or_else(|e| panic!("{}", run.context(&format!("close: {e}")))));
        run.harness.power_cut();
    }
    // The lost device's fault stays until it comes back.
    match loss {
        Loss::Removed => run.harness.sims[lost].inject(Fault::SurpriseRemoval),
        Loss::Failing => run.harness.sims[lost].inject(Fault::WriteFault { nsid: 1, slba: 0, blocks: NAMESPACE_LBAS }),
    }
    let degraded = VolumeOptions { degraded: true, ..run.options.clone() };
    let mut volume = Volume::open(vec![run.device(run.sim_of[survivor])], &degraded)
        .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: degraded open: {e}"))));
    run.verify(&mut volume, false, "degraded open");
    for _ in 0..run.rng.below(20) {
        run.step(&mut volume);
    }
    run.commit(&mut volume);
    if back == Return::WentOnAlone {
        went_on_alone(run, volume, lost, model_at_loss, &context);
        return;
    }

    // Replaced, or back.
    run.harness.sims[lost].clear_faults();
    let lane = lost;
    let expected_missing: Option<u64> = match back {
        Return::Replaced => {
            volume
                .replace(lost, run.device(2), false)
                .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: replace: {e}"))));
            run.sim_of[lost] = 2;
            // The old device, out of the volume, answers again (so that
            // the harness can bring every controller up).
            run.harness.sims[lost].power_cut();
            None
        }
        Return::Rejoined => {
            // Re-seated: it answers again, its volatile cache lost. (The
            // old controller goes first: its shutdown must not reach the
            // new one.)
            drop(run.harness.controllers.remove(lost));
            run.harness.sims[lost].power_cut();
            let controller =
                nvme_driver::Controller::init(run.harness.sims[lost].clone(), support::controller_options())
                    .expect("bring-up after re-seating");
            run.harness.controllers.insert(lost, controller);
            volume
                .rejoin(run.device(lost))
                .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: rejoin: {e}"))));
            // It lacks exactly what was not durable on it when it went.
            let missed: u64 = run
                .committed
                .iter()
                .filter(|(id, _)| !durable_at_loss.contains(id))
                .map(|(_, &(_, blocks))| blocks as u64)
                .sum();
            assert_eq!(volume.missing_blocks(lane), missed, "{}", run.context(&format!("{context}: missing")));
            Some(missed)
        }
        Return::WentOnAlone => unreachable!("taken above"),
    };
    run.verify(&mut volume, false, "after the member came");

    // The resilver, cut by power losses at random points.
    let options = ResilverOptions {
        commit_every_bytes: 64 << 10,
        max_request_bytes: Some(64 << 10),
        verify_after: false,
        timeout: support::CRASH_TIMEOUT * 20,
        ..ResilverOptions::default()
    };
    let mut copied = 0u64;
    let mut read = 0u64;
    let mut cuts = 0;
    // The caller's writes and frees between steps (frees change what is
    // left to copy, so the exact count is checked on runs without them).
    let interleave = run.rng.chance(0.5);
    loop {
        let mut engine = Resilver::new(&volume, lost, &options)
            .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: resilver: {e}"))));
        let cut_after = if cuts < 3 && run.rng.chance(0.5) { Some(run.rng.below(4)) } else { None };
        let mut steps = 0;
        let done = loop {
            let seq = volume.committed_seq();
            let done = engine
                .step(&mut volume, 32 << 10)
                .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: resilver step: {e}"))));
            if volume.committed_seq() != seq {
                // The resilver's commit made the caller's writes durable too.
                run.committed = run.current.clone();
            }
            if done || cut_after == Some(steps) {
                break done;
            }
            steps += 1;
            if interleave && run.rng.chance(0.2) {
                run.step(&mut volume);
            }
        };
        if done || cut_after.is_none() {
            let report = engine.finish(&mut volume).unwrap_or_else(|e| panic!("{}", run.context(&format!("{e}"))));
            run.committed = run.current.clone();
            copied += report.bytes_copied;
            read += report.bytes_read;
            if done {
                assert_eq!(report.bytes_left, 0, "{}", run.context(&format!("{context}: {report:?}")));
                break;
            }
            continue;
        }
        drop(engine);
        cuts += 1;
        run.power_cut(volume);
        let devices = vec![run.device(run.sim_of[0]), run.device(run.sim_of[1])];
        volume = Volume::open(devices, &run.options)
            .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: reopen in the resilver: {e}"))));
        run.verify(&mut volume, false, "reopened during the resilver");
        // What was copied before the cut but not committed is copied again.
        copied = 0;
        read = 0;
    }
    if let (Some(missed), 0, false) = (expected_missing, cuts, interleave) {
        assert_eq!(copied, missed * 4096, "{}", run.context(&format!("{context}: copied only what was missed")));
        assert_eq!(read, copied, "{}", run.context(&format!("{context}: each extent read once")));
    }
    run.commit(&mut volume);
    assert_eq!(volume.status().state, VolumeState::Online, "{}", run.context(&context));
    run.verify(&mut volume, true, "resilvered");

    // A new process finds it whole, and a read-only check finds nothing.
    drop(volume.close().unwrap());
    run.harness.restart();
    let devices = vec![run.device(run.sim_of[0]), run.device(run.sim_of[1])];
    let (report, devices) = Volume::check(devices, &run.options).unwrap();
    assert!(report.clean, "{}", run.context(&format!("{context}: check: {report:?}")));
    let mut volume = Volume::open(devices, &run.options).unwrap();
    assert_eq!(volume.status().state, VolumeState::Online, "{}", run.context(&context));
    run.verify(&mut volume, true, "reopened whole");
}

/// The lost device comes back but is opened alone, and written, before
/// the pair is given together: every open of the pair is refused with
/// `Diverged`, whatever the order, and changes nothing; each side still
/// opens alone with exactly its own extents; `resolve` keeps the side
/// chosen, and after its resilver (cut by a power loss or not) every
/// extent of that side reads back from both copies, and nothing of the
/// other side's own history is left.
fn went_on_alone(mut run: Run, volume: Volume, lost: usize, model_at_loss: Model, context: &str) {
    let survivor = 1 - lost;
    drop(volume.close().unwrap_or_else(|e| panic!("{}", run.context(&format!("close: {e}")))));
    // Re-seated in another box, its fault gone, and opened alone there.
    run.harness.sims[lost].clear_faults();
    run.harness.power_cut();
    let survivor_model = std::mem::replace(&mut run.committed, model_at_loss);
    run.current = run.committed.clone();
    let degraded = VolumeOptions { degraded: true, ..run.options.clone() };
    let mut volume = Volume::open(vec![run.device(lost)], &degraded)
        .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: the lost device alone: {e}"))));
    run.verify(&mut volume, false, "the lost device opened alone");
    for _ in 0..1 + run.rng.below(20) {
        run.step(&mut volume);
    }
    run.commit(&mut volume);
    if run.rng.chance(0.5) {
        run.power_cut(volume);
    } else {
        drop(volume.close().unwrap_or_else(|e| panic!("{}", run.context(&format!("close: {e}")))));
        run.harness.restart();
    }
    let models =
        if lost == 0 { [run.committed.clone(), survivor_model] } else { [survivor_model, run.committed.clone()] };
    // Together, in either order: refused, and nothing written.
    for order in [[0, 1], [1, 0]] {
        let before = run.harness.writes();
        let devices = order.iter().map(|&place| run.device(place)).collect();
        match Volume::open(devices, &run.options) {
            Err(Error::Diverged { sides }) => {
                for side in &sides {
                    let held = models[side.place].len() as u64;
                    assert_eq!(side.extents, held, "{}", run.context(&format!("{context}: {side}")));
                }
            }
            other => {
                panic!("{}", run.context(&format!("{context}: order {order:?}: {:?}", other.map(|v| v.status().state))))
            }
        }
        assert_eq!(run.harness.writes(), before, "{}", run.context(&format!("{context}: a refused open wrote")));
        run.harness.restart();
    }
    // Each side alone holds exactly its own.
    for place in [0, 1] {
        run.committed = models[place].clone();
        let mut volume = Volume::open(vec![run.device(place)], &degraded)
            .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: place {place} alone: {e}"))));
        run.verify(&mut volume, false, &format!("place {place} alone"));
        drop(volume.close().unwrap());
        run.harness.restart();
    }
    // One side kept, the other rebuilt from it.
    let keep = if run.rng.chance(0.5) { lost } else { survivor };
    run.committed = models[keep].clone();
    run.current = run.committed.clone();
    let devices = vec![run.device(0), run.device(1)];
    let mut volume = Volume::resolve(devices, keep, &run.options)
        .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: resolve keeping {keep}: {e}"))));
    run.verify(&mut volume, false, "resolved");
    let rebuilt = 1 - keep;
    if run.rng.chance(0.5) {
        // Cut before the resilver: the pair is one history now.
        run.power_cut(volume);
        let devices = vec![run.device(1), run.device(0)];
        volume = Volume::open(devices, &run.options)
            .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: reopen after resolve: {e}"))));
        run.verify(&mut volume, false, "reopened after resolve");
    }
    let options =
        ResilverOptions { verify_after: false, timeout: support::CRASH_TIMEOUT * 20, ..ResilverOptions::default() };
    let mut engine = Resilver::new(&volume, rebuilt, &options)
        .unwrap_or_else(|e| panic!("{}", run.context(&format!("{context}: resilver: {e}"))));
    while !engine.step(&mut volume, 1 << 20).unwrap_or_else(|e| panic!("{}", run.context(&format!("{e}")))) {}
    let report = engine.finish(&mut volume).unwrap_or_else(|e| panic!("{}", run.context(&format!("{e}"))));
    assert_eq!(report.bytes_left, 0, "{}", run.context(&format!("{context}: {report:?}")));
    run.commit(&mut volume);
    assert_eq!(volume.status().state, VolumeState::Online, "{}", run.context(context));
    run.verify(&mut volume, true, "resolved and resilvered");
    drop(volume.close().unwrap());
    run.harness.restart();
    let (report, devices) = Volume::check(vec![run.device(0), run.device(1)], &run.options).unwrap();
    assert!(report.clean, "{}", run.context(&format!("{context}: check: {report:?}")));
    let mut volume = Volume::open(devices, &run.options).unwrap();
    run.verify(&mut volume, true, "reopened whole after resolve");
}

#[test]
fn a_mirror_loses_a_member_and_is_made_whole_without_losing_anything() {
    if let Some(seed) = std::env::var("MIRROR_CAMPAIGN_SEED").ok().and_then(|s| s.parse().ok()) {
        run(seed);
        return;
    }
    let seeds: u64 = std::env::var("MIRROR_CAMPAIGN_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let started = std::time::Instant::now();
    for seed in 0..seeds {
        run(seed);
    }
    eprintln!("{seeds} seeds in {:.1} s", started.elapsed().as_secs_f64());
}
