//! zns-active: the open and active zone limits, reached and respected.

use super::*;

/// Opens as many zones as Max Active Resources allows, one by write, one
/// by append and the rest explicitly; one more zone cannot be opened,
/// written or appended to (Too Many Active Zones, SCT 1h / SC BDh), until a
/// zone is finished. A Closed zone still counts as active.
pub(super) fn zns_active(target: &Target) -> Outcome {
    let max_active = target
        .ns
        .zones()
        .ok_or("the namespace is not zoned")?
        .max_active_zones
        .ok_or("the namespace has no active zone limit")? as u64;
    let mut zones = Zones::new(target, 8)?;
    if max_active < 2 || zones.zone_count < max_active + 1 {
        return Err(format!(
            "max active {max_active} with {} zones; the scenario needs at least 2 and one zone more",
            zones.zone_count
        ));
    }
    zones.reset_all()?;
    let too_many = CommandSpecificStatus::TooManyActiveZones;
    let extra = max_active;
    check("zns-active limit", || {
        zones.write(zones.zslba(0), 8)?;
        zones.append(1, 8)?.map_err(|status| format!("append to zone 1: {status}"))?;
        for zone in 2..max_active {
            zones.send(zone, ZoneSendAction::Open)?;
        }
        let opened = zones.send_expecting(extra, ZoneSendAction::Open, too_many)?;
        expect_raw(opened, StatusCodeType::CommandSpecific, 0xBD)?;
        let written = zones.write_expecting(zones.zslba(extra), 1, too_many)?;
        expect_raw(written, StatusCodeType::CommandSpecific, 0xBD)?;
        match zones.append(extra, 1)? {
            Err(status) if status.code() == StatusCode::CommandSpecific(too_many) => {}
            other => return Err(format!("append to zone {extra}: {other:?}, expected Too Many Active Zones")),
        }
        zones.expect(extra, ZoneState::Empty, Some(0))?;
        // The refused commands leave every active zone active (Open or
        // Closed: a controller may close an implicitly opened zone to make
        // room for an open one).
        let mut states = Vec::new();
        for zone in 0..max_active {
            let descriptor = zones.zone(zone)?;
            let active = matches!(
                descriptor.state,
                ZoneState::ImplicitlyOpened | ZoneState::ExplicitlyOpened | ZoneState::Closed
            );
            if !active {
                return Err(format!("zone {zone} is no longer active: {descriptor:?}"));
            }
            states.push(format!("{zone} {:?}", descriptor.state));
        }
        target.ok(
            "zns-active limit",
            format!(
                "{max_active} zones active (zone 0 by a write, zone 1 by an append, the rest by Open); open, write and append to zone {extra} fail with {opened}; then {}",
                states.join(", ")
            ),
        );
        Ok(())
    })?;
    check("zns-active release", || {
        // A Closed zone keeps its active resource.
        zones.send(0, ZoneSendAction::Close)?;
        zones.expect(0, ZoneState::Closed, Some(8))?;
        zones.send_expecting(extra, ZoneSendAction::Open, too_many)?;
        // A Full zone does not.
        zones.send(0, ZoneSendAction::Finish)?;
        zones.expect(0, ZoneState::Full, None)?;
        zones.send(extra, ZoneSendAction::Open)?;
        zones.expect(extra, ZoneState::ExplicitlyOpened, Some(0))?;
        zones.reset_all()?;
        target.ok("zns-active release", format!("closing zone 0 kept the limit; finishing it let zone {extra} open"));
        Ok(())
    })
}
