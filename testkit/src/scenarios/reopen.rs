//! The reopen scenario, in two processes (or two bring-ups of the same
//! simulated controllers): what was committed comes back exactly, what
//! was not is gone.

use super::*;
use std::time::Instant;
use zoned_allocator::{Profile, Volume, BLOCK_SIZE};

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

pub(super) fn reopen_write(check: &Check, controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let (devices, _) = scenario_devices(check, Scenario::ReopenWrite, controllers)?;
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

pub(super) fn reopen_verify(check: &Check, controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let (devices, _) = scenario_devices(check, Scenario::ReopenVerify, controllers)?;
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
