//! Property test against a reference model: seeded random sequences of
//! writes, frees, commits, reopens and reclaim steps. After every reopen
//! the volume holds exactly the committed extents, and every extent the
//! model holds reads back byte for byte.

use nvme_testkit::harness as support;

use nvme_testkit::{data::pattern, Prng};
use std::collections::BTreeMap;
use support::{conventional, volume_options, zns, Harness};
use zoned_allocator::{Error, Profile, ReclaimProgress, Volume, VolumeOptions};

/// Extent ID → (seed of its data, blocks).
type Model = BTreeMap<u64, (u64, usize)>;

fn check_reads(volume: &mut Volume, model: &Model, seed: u64) {
    for (&id, &(data_seed, blocks)) in model {
        let mut back = vec![0u8; blocks * 4096];
        volume.read(id, &mut back).unwrap_or_else(|e| panic!("seed {seed}: extent {id}: {e}"));
        assert!(back == pattern(data_seed, blocks), "seed {seed}: extent {id} reads back wrong");
    }
}

fn run(seed: u64, steps: usize) {
    let mut rng = Prng::new(seed);
    let (mut harness, options) = match seed % 4 {
        0 => (Harness::single(zns(40, 256)), volume_options()),
        1 => (
            Harness::single(conventional(10)),
            VolumeOptions { software_zone_bytes: Some(256 << 10), streams: 2, ..volume_options() },
        ),
        2 => (Harness::single(zns(40, 256)), VolumeOptions { profile: Profile::Dup, ..volume_options() }),
        _ => (
            Harness::new(vec![zns(40, 256), conventional(10)], vec![(0, 1), (1, 1)]),
            VolumeOptions { profile: Profile::Mirror, software_zone_bytes: Some(256 << 10), ..volume_options() },
        ),
    };
    let mut volume = Some(harness.format(&options));
    let mut committed = Model::new();
    let mut current = Model::new();
    for step in 0..steps {
        let v = volume.as_mut().unwrap();
        match rng.below(100) {
            0..=49 => {
                let blocks = 1 + rng.below(16) as usize;
                let data_seed = rng.next_u64();
                let stream = rng.below(u64::from(v.streams())) as u8;
                match v.write(stream, &pattern(data_seed, blocks), data_seed) {
                    Ok(id) => {
                        assert!(current.insert(id, (data_seed, blocks)).is_none(), "seed {seed}: ID {id} reused");
                    }
                    Err(Error::NoSpace(_)) => {}
                    Err(e) => panic!("seed {seed} step {step}: write: {e}"),
                }
            }
            50..=69 if !current.is_empty() => {
                let index = rng.below(current.len() as u64) as usize;
                let id = *current.keys().nth(index).unwrap();
                v.free(id).unwrap();
                current.remove(&id);
            }
            70..=79 => {
                v.commit().unwrap_or_else(|e| panic!("seed {seed} step {step}: commit: {e}"));
                committed = current.clone();
            }
            80..=89 => match v.reclaim_step(1 + rng.below(64)).unwrap() {
                ReclaimProgress::Reclaimed { .. } => committed = current.clone(),
                ReclaimProgress::Idle | ReclaimProgress::InProgress { .. } => {}
            },
            _ => {
                // A new process: uncommitted changes are gone.
                drop(volume.take());
                harness.restart();
                let mut reopened = harness.open(&options).unwrap_or_else(|e| panic!("seed {seed}: open: {e}"));
                reopened.check_invariants();
                current = committed.clone();
                let ids: std::collections::BTreeSet<u64> = reopened.extent_ids().collect();
                assert_eq!(ids, current.keys().copied().collect(), "seed {seed} step {step}: extents after reopen");
                check_reads(&mut reopened, &current, seed);
                volume = Some(reopened);
            }
        }
        volume.as_ref().unwrap().check_invariants();
    }
    let v = volume.as_mut().unwrap();
    check_reads(v, &current, seed);
}

#[test]
fn random_sequences_match_the_model() {
    let seeds: u64 = std::env::var("MODEL_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    for seed in 0..seeds {
        run(seed, 300);
    }
}
