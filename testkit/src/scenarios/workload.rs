//! The workload scenarios: format, write many in flight, free, reclaim
//! and read back (`zns`, `conventional`, `zcap`, `4k`, `tags`, `area`,
//! `mirror`), and a volume filled to the end under zone limits
//! (`limits`).

use super::*;
use std::collections::BTreeSet;
use std::time::Instant;
use zoned_allocator::{Error, Profile, Volume, BLOCK_SIZE};

/// Format, write, free, reclaim and read back: `zns`, `conventional`,
/// `zcap`, `4k` and `mirror`.
pub(super) fn workload(check: &Check, scenario: Scenario, controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let (devices, geometry) = scenario_devices(check, scenario, controllers)?;
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

/// `max-open=2,max-active=4`: too many streams refused; one stream fills
/// the volume to `NoSpace`; free, reclaim, and it fills again.
pub(super) fn limits(check: &Check, controllers: &[Controller]) -> Result<(), String> {
    let seed = check.seed;
    let (refused, _) = scenario_devices(check, Scenario::Limits, controllers)?;
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
