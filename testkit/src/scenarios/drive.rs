//! Driving a volume: planned writes many in flight, frees, reclaim,
//! commits, and reading every extent back against its data.

use super::{Check, MIB, RECLAIM_STEPS_MAX, RECLAIM_STEP_BLOCKS, RECLAIM_TIME_MAX, WRITE_DEPTH, WRITE_TIME_MAX};
use crate::data::{describe_mismatch, owned_blocks};
use crate::Prng;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;
use zoned_allocator::{Error, ExtentId, ReclaimProgress, Volume, BLOCK_SIZE};

/// The contents of `owner`'s extent of `blocks`: self-describing blocks
/// (`nvme_testkit::data::owned_blocks`), a function of the seed and the
/// owner, so a later process can check them.
pub fn extent_data(seed: u64, owner: u64, blocks: u32) -> Vec<u8> {
    owned_blocks(seed, owner, blocks as usize)
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

/// Extent sizes: mostly small, some medium, a few as large as the volume
/// allows.
pub fn extent_blocks(rng: &mut Prng, max_blocks: u32) -> u32 {
    let max = u64::from(max_blocks);
    let blocks = match rng.below(8) {
        0..=2 => rng.between(1, 4),
        3..=5 => rng.between(5, 32),
        _ => rng.between(33.min(max), max),
    };
    blocks.min(max) as u32
}

/// Whether the workloads free `owner`'s extent: two of every three, spread
/// over every zone, so zones are left a third live and reclaim has work.
pub fn freed(seed: u64, owner: u64) -> bool {
    Prng::with_stream(seed, owner ^ 0xF4EE).below(3) != 0
}

/// One planned write.
#[derive(Clone, Copy, Debug)]
pub struct Planned {
    pub owner: u64,
    pub stream: u8,
    pub blocks: u32,
}

/// `count` writes for owners from `first_owner`, sizes from the seed,
/// round-robin over `streams`.
pub fn plan(seed: u64, first_owner: u64, count: u64, streams: u8, max_blocks: u32) -> Vec<Planned> {
    let mut rng = Prng::with_stream(seed, first_owner);
    (first_owner..first_owner + count)
        .map(|owner| Planned {
            owner,
            stream: (owner % u64::from(streams)) as u8,
            blocks: extent_blocks(&mut rng, max_blocks),
        })
        .collect()
}

/// What the volume should hold: owner to (extent, blocks, stream).
pub type Model = BTreeMap<u64, (ExtentId, u32, u8)>;

#[derive(Debug, Default)]
pub struct WriteReport {
    pub extents: u64,
    pub bytes: u64,
    pub most_in_flight: usize,
    /// The plan stopped at `Error::NoSpace(_)`.
    pub no_space: bool,
}

/// Writes `planned`, [`WRITE_DEPTH`] at a time in flight, adding each
/// finished extent to `model`. With `stop_at_no_space`, `Error::NoSpace(_)`
/// ends the plan early (reported); otherwise it is a failure.
pub fn write_all(
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
                Err(Error::NoSpace(_)) if stop_at_no_space => {
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
pub fn extents_by_owner(volume: &mut Volume) -> Result<BTreeMap<u64, ExtentId>, String> {
    let owners = volume.extent_owners().map_err(|e| format!("listing owners: {e}"))?;
    Ok(owners.into_iter().map(|(id, owner)| (owner, id)).collect())
}

/// Reads every extent of `model` and compares it with its data, each copy
/// too when `copies`; requires the volume to hold exactly the model's
/// extents. Returns the bytes read.
pub fn verify(volume: &mut Volume, seed: u64, model: &Model, copies: bool) -> Result<u64, String> {
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
pub fn invariants(check: &Check, volume: &Volume) -> Result<(), String> {
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

pub fn commit(check: &Check, volume: &mut Volume, name: &str) -> Result<(), String> {
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
pub fn free_some(volume: &mut Volume, seed: u64, model: &mut Model) -> Result<(u64, u64), String> {
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
pub struct ReclaimReport {
    pub steps: usize,
    pub zones: usize,
    pub moved_blocks: u64,
}

/// Reclaim steps until the volume says there is nothing to reclaim.
pub fn reclaim_until_idle(volume: &mut Volume) -> Result<ReclaimReport, String> {
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
