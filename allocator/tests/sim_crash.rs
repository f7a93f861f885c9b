//! Crash test: seeded power cuts at random points of random work (writes,
//! frees, commits, reclaim), including mid-commit and mid-reclaim. After
//! each cut the volume is reopened by a new "process" and must hold
//! exactly the last committed state, or, when the cut fell inside a
//! commit, exactly the state that commit was making durable; every extent
//! reads back byte for byte. A failure prints its seed; `CRASH_SEEDS=N`
//! runs more (the default keeps `hack/test` quick; `hack/test --long` runs
//! thousands), `CRASH_SEED=S` replays one. A second test cuts the power
//! while a checkpoint of several pages is spread over commits
//! (`CHECKPOINT_CRASH_SEEDS`, `CHECKPOINT_CRASH_SEED`).

use nvme_testkit::harness as support;

use nvme_driver::sim::{Fault, FaultConfig};
use nvme_testkit::{data::pattern, Prng};
use support::{conventional, volume_options, zns, Harness, Model};
use zoned_allocator::{Profile, ReclaimProgress, Volume, VolumeOptions};

struct Outcome {
    cut_inside_commit: bool,
    commits: u32,
}

fn setup(seed: u64) -> (Harness, VolumeOptions) {
    let keep = [0.0, 0.5, 1.0][(seed / 4 % 3) as usize];
    let faults = FaultConfig { power_cut_keep_probability: keep, ..FaultConfig::default() };
    match seed % 4 {
        0 => (Harness::single(zns(32, 256).with_seed(seed).with_faults(faults)), volume_options()),
        1 => (
            Harness::single(conventional(8).with_seed(seed).with_faults(faults)),
            VolumeOptions { software_zone_bytes: Some(256 << 10), ..volume_options() },
        ),
        2 => (
            Harness::single(zns(32, 256).with_seed(seed).with_faults(faults)),
            VolumeOptions { profile: Profile::Dup, ..volume_options() },
        ),
        _ => (
            Harness::new(
                vec![zns(32, 256).with_seed(seed).with_faults(faults.clone()), conventional(8).with_faults(faults)],
                vec![(0, 1), (1, 1)],
            ),
            VolumeOptions { profile: Profile::Mirror, software_zone_bytes: Some(256 << 10), ..volume_options() },
        ),
    }
}

/// Random work until an operation fails (the power is gone) or `steps`
/// are done. `committed` tracks the durable state; `pending` the state a
/// commit in progress would make durable.
fn work(volume: &mut Volume, rng: &mut Prng, steps: usize, committed: &mut Model, current: &mut Model) -> Outcome {
    let mut outcome = Outcome { cut_inside_commit: false, commits: 0 };
    for _ in 0..steps {
        match rng.below(100) {
            0..=54 => {
                let blocks = 1 + rng.below(12) as usize;
                let data_seed = rng.next_u64();
                match volume.write(0, &pattern(data_seed, blocks), owner_of(data_seed)) {
                    Ok(id) => {
                        current.insert(id, (data_seed, blocks));
                    }
                    Err(zoned_allocator::Error::NoSpace(_)) => {}
                    Err(_) => return outcome,
                }
            }
            55..=74 if !current.is_empty() => {
                let id = *current.keys().nth(rng.below(current.len() as u64) as usize).unwrap();
                volume.free(id).unwrap();
                current.remove(&id);
            }
            75..=87 => {
                if volume.commit().is_err() {
                    outcome.cut_inside_commit = true;
                    return outcome;
                }
                *committed = current.clone();
                outcome.commits += 1;
            }
            _ => match volume.reclaim_step(1 + rng.below(48)) {
                Ok(ReclaimProgress::Reclaimed { .. }) => {
                    *committed = current.clone();
                    outcome.commits += 1;
                }
                Ok(_) => {}
                // Reclaim commits when it empties a zone: the cut may be
                // inside that commit.
                Err(_) => {
                    outcome.cut_inside_commit = true;
                    return outcome;
                }
            },
        }
    }
    outcome
}

/// Every extent of `model` reads back exactly.
fn read_back(volume: &mut Volume, model: &Model, context: &str) {
    for (&id, &(data_seed, blocks)) in model {
        let mut back = vec![0u8; blocks * 4096];
        volume.read(id, &mut back).unwrap_or_else(|e| panic!("{context}: extent {id}: {e}"));
        assert!(back == pattern(data_seed, blocks), "{context}: extent {id} reads back wrong");
        let owner = volume.owner(id).unwrap_or_else(|e| panic!("{context}: extent {id}'s owner: {e}"));
        assert_eq!(owner, owner_of(data_seed), "{context}: extent {id}'s owner");
    }
}

/// The owner a write of `data_seed`'s pattern is given (never
/// [`zoned_allocator::OWNER_LOST`]).
fn owner_of(data_seed: u64) -> u64 {
    data_seed >> 1
}

/// (power cuts that happened during the work, of them inside a commit)
static CUTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static INSIDE_COMMIT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn crash_once(seed: u64) {
    support::set_timeout(support::CRASH_TIMEOUT);
    let mut rng = Prng::new(seed);
    let (mut harness, options) = setup(seed);
    let mut committed = Model::new();
    let mut current = Model::new();
    let mut volume = harness.format(&options);
    // Some committed history first, then a cut somewhere in what follows.
    let history = 20 + rng.below(60) as usize;
    work(&mut volume, &mut rng, history, &mut committed, &mut current);
    volume.commit().unwrap_or_else(|e| panic!("seed {seed}: commit before the cut: {e}"));
    committed = current.clone();
    let cut_sim = rng.below(harness.sims.len() as u64) as usize;
    harness.sims[cut_sim].inject(Fault::PowerCutAfter { io_commands: rng.below(120) });
    let outcome = work(&mut volume, &mut rng, 200, &mut committed, &mut current);
    drop(volume);
    if harness.sims.iter().any(|sim| sim.take_power_cut().is_some()) {
        CUTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if outcome.cut_inside_commit {
            INSIDE_COMMIT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    harness.power_cut();

    let mut volume = harness.open(&options).unwrap_or_else(|e| panic!("seed {seed}: reopening after the cut: {e}"));
    volume.check_invariants();
    let context = format!("seed {seed}: after the cut");
    let expected = support::expected_state(&volume, &committed, &current, outcome.cut_inside_commit, &context);
    read_back(&mut volume, expected, &context);
    // The volume works after the cut: write, commit, reopen.
    let id = volume.write(0, &pattern(seed, 2), 0).unwrap_or_else(|e| panic!("seed {seed}: write after the cut: {e}"));
    volume.commit().unwrap_or_else(|e| panic!("seed {seed}: commit after the cut: {e}"));
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap_or_else(|e| panic!("seed {seed}: second reopen: {e}"));
    assert!(volume.extent(id).is_some(), "seed {seed}: the write after the cut was lost");
    let mut back = vec![0u8; 2 * 4096];
    volume.read(id, &mut back).unwrap_or_else(|e| panic!("seed {seed}: the write after the cut: {e}"));
    assert!(back == pattern(seed, 2), "seed {seed}: the write after the cut reads back wrong");
}

#[test]
fn power_cuts_at_random_points_keep_the_committed_state() {
    if let Some(seed) = std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()) {
        crash_once(seed);
        return;
    }
    let seeds: u64 = std::env::var("CRASH_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let started = std::time::Instant::now();
    for seed in 0..seeds {
        crash_once(seed);
    }
    let cuts = CUTS.load(std::sync::atomic::Ordering::Relaxed);
    let inside = INSIDE_COMMIT.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{seeds} seeds in {:.1} s: {cuts} cuts during work ({inside} inside a commit or reclaim), the rest after it",
        started.elapsed().as_secs_f64()
    );
    assert!(cuts * 2 >= seeds, "only {cuts} of {seeds} cuts fell inside the work");
}

/// A volume whose extent table spans several checkpoint pages (3,000 and
/// more extents of one block), each checkpoint written a page per commit.
fn paged_setup(seed: u64) -> (Harness, VolumeOptions) {
    let keep = [0.0, 0.5, 1.0][(seed / 3 % 3) as usize];
    let faults = FaultConfig { power_cut_keep_probability: keep, ..FaultConfig::default() };
    let soft = VolumeOptions { software_zone_bytes: Some(1 << 20), ..volume_options() };
    match seed % 3 {
        0 => (Harness::single(zns(64, 1024).with_seed(seed).with_faults(faults)), soft),
        1 => (Harness::single(conventional(64).with_seed(seed).with_faults(faults)), soft),
        _ => (
            Harness::new(
                vec![zns(64, 1024).with_seed(seed).with_faults(faults.clone()), conventional(64).with_faults(faults)],
                vec![(0, 1), (1, 1)],
            ),
            VolumeOptions { profile: Profile::Mirror, ..soft },
        ),
    }
}

fn checkpoint_cut_once(seed: u64) {
    support::set_timeout(support::CRASH_TIMEOUT);
    let mut rng = Prng::new(seed ^ 0xC4EC);
    let (mut harness, options) = paged_setup(seed);
    let mut committed = Model::new();
    let mut volume = harness.format(&options);
    let extents = 3000 + rng.below(1000);
    for i in 0..extents {
        let data_seed = rng.next_u64();
        let id = volume
            .write(0, &pattern(data_seed, 1), owner_of(data_seed))
            .unwrap_or_else(|e| panic!("seed {seed}: fill: {e}"));
        committed.insert(id, (data_seed, 1));
        if i % 40 == 39 {
            volume.commit().unwrap_or_else(|e| panic!("seed {seed}: fill commit: {e}"));
        }
    }
    volume.commit().unwrap_or_else(|e| panic!("seed {seed}: fill commit: {e}"));
    // Small commits until a checkpoint begins; the cut falls while its
    // pages follow, one per commit.
    let begun = volume.stats().checkpoints;
    let mut current = committed.clone();
    let mut steps = 0;
    while volume.stats().checkpoints == begun {
        let data_seed = rng.next_u64();
        let id = volume
            .write(0, &pattern(data_seed, 1), owner_of(data_seed))
            .unwrap_or_else(|e| panic!("seed {seed}: write: {e}"));
        current.insert(id, (data_seed, 1));
        volume.commit().unwrap_or_else(|e| panic!("seed {seed}: commit: {e}"));
        committed = current.clone();
        steps += 1;
        assert!(steps < 10_000, "seed {seed}: no checkpoint began");
    }
    let cut_sim = rng.below(harness.sims.len() as u64) as usize;
    harness.sims[cut_sim].inject(Fault::PowerCutAfter { io_commands: rng.below(60) });
    let outcome = work(&mut volume, &mut rng, 400, &mut committed, &mut current);
    drop(volume);
    harness.power_cut();
    let mut volume = harness.open(&options).unwrap_or_else(|e| panic!("seed {seed}: reopening after the cut: {e}"));
    volume.check_invariants();
    let context = format!("seed {seed}: a cut while a checkpoint was written");
    let expected = support::expected_state(&volume, &committed, &current, outcome.cut_inside_commit, &context);
    read_back(&mut volume, expected, &context);
    // It goes on: more commits finish (or restart) the checkpoint.
    let model = expected.clone();
    for _ in 0..20 {
        let id = volume.write(0, &pattern(seed, 1), 0).unwrap_or_else(|e| panic!("seed {seed}: write after: {e}"));
        volume.commit().unwrap_or_else(|e| panic!("seed {seed}: commit after: {e}"));
        volume.free(id).unwrap();
    }
    volume.commit().unwrap_or_else(|e| panic!("seed {seed}: commit after: {e}"));
    drop(volume);
    harness.restart();
    let mut volume = harness.open(&options).unwrap_or_else(|e| panic!("seed {seed}: second reopen: {e}"));
    volume.check_invariants();
    assert_eq!(volume.stats().extents, model.len() as u64, "seed {seed}: extents after the second reopen");
    read_back(&mut volume, &model, &format!("seed {seed}: after the second reopen"));
}

#[test]
fn power_cuts_while_a_checkpoint_spreads_over_commits_keep_the_committed_state() {
    if let Some(seed) = std::env::var("CHECKPOINT_CRASH_SEED").ok().and_then(|s| s.parse().ok()) {
        checkpoint_cut_once(seed);
        return;
    }
    let seeds: u64 = std::env::var("CHECKPOINT_CRASH_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    for seed in 0..seeds {
        checkpoint_cut_once(seed);
    }
}
