//! zns: Zone Append in flight at once, its limit, zone states and their
//! transitions, and the writes a zone must refuse.

use super::*;

/// Zone Appends in flight at once, and rounds of them.
const APPENDS_IN_FLIGHT: usize = 32;
const APPEND_ROUNDS: usize = 8;
const APPEND_BYTES: usize = 4096;
/// Tags of append payloads: "APPD" above the append's number.
const APPEND_TAG: u64 = 0x4150_5044 << 32;

/// Zone commands for one zoned namespace through one queue pair.
#[derive(Debug)]
pub(super) struct Zones<'a> {
    target: &'a Target<'a>,
    qpair: QueuePair,
    /// Buffers for reads, big appends and zone reports.
    pool: DmaPool,
    zone_size_blocks: u64,
    pub(super) zone_count: u64,
}

impl<'a> Zones<'a> {
    pub(super) fn new(target: &'a Target<'a>, depth: u16) -> Outcome<Self> {
        let zones = *target.ns.zones().ok_or("the namespace is not zoned")?;
        let buffer_bytes = (target.ns.max_transfer_bytes() as usize).min(1 << 20) + PAGE_SIZE;
        Ok(Zones {
            target,
            qpair: target.queue_pair(depth)?,
            pool: target.pool(buffer_bytes, 2)?,
            zone_size_blocks: zones.zone_size_blocks,
            zone_count: zones.zone_count,
        })
    }

    pub(super) fn zslba(&self, zone: u64) -> u64 {
        zone * self.zone_size_blocks
    }

    /// Report Zones from `slba` with room for `room` descriptors: the
    /// header's zone count and the descriptors that came back.
    pub(super) fn report(
        &mut self,
        slba: u64,
        filter: ReportFilter,
        partial: bool,
        room: usize,
    ) -> Outcome<(u64, Vec<ZoneDescriptor>)> {
        let len = REPORT_HEADER_SIZE + room * ZONE_DESCRIPTOR_SIZE;
        let buffer = take(&self.pool)?;
        buffer.fill(0, len, 0xFF);
        let request = self.target.ns.report_zones(slba, filter, partial, IoBuffer::range(buffer, 0, len), 0);
        let completion = run_ok(&mut self.qpair, request, "report zones")?;
        let buffer = completion.buffer.ok_or("the report came back without its buffer")?;
        let mut data = vec![0u8; buffer.len()];
        buffer.buffer().copy_out(buffer.offset(), &mut data);
        parse_report_zones(&data).map_err(|e| format!("report zones: {e}"))
    }

    /// One zone's descriptor.
    pub(super) fn zone(&mut self, zone: u64) -> Outcome<ZoneDescriptor> {
        let zslba = self.zslba(zone);
        let (_, zones) = self.report(zslba, ReportFilter::All, true, 1)?;
        match zones.first() {
            Some(descriptor) if descriptor.zslba == zslba => Ok(*descriptor),
            other => Err(format!("a report from LBA {zslba} returned {other:?}, not zone {zone}")),
        }
    }

    /// Requires zone `zone` to be in `state`, with its write pointer at
    /// `zslba + written` when `written` is given.
    pub(super) fn expect(&mut self, zone: u64, state: ZoneState, written: Option<u64>) -> Outcome {
        let descriptor = self.zone(zone)?;
        if descriptor.state != state {
            return Err(format!("zone {zone} is {:?}, expected {state:?} ({descriptor:?})", descriptor.state));
        }
        if let Some(written) = written {
            let wp = descriptor.zslba + written;
            if descriptor.wp != wp {
                return Err(format!("zone {zone} has its write pointer at {}, expected {wp}", descriptor.wp));
            }
        }
        Ok(())
    }

    pub(super) fn send(&mut self, zone: u64, action: ZoneSendAction) -> Outcome {
        let request = self.target.ns.zone_send(self.zslba(zone), action, false, 0);
        run_ok(&mut self.qpair, request, &format!("{action:?} zone {zone}")).map(drop)
    }

    pub(super) fn send_expecting(
        &mut self,
        zone: u64,
        action: ZoneSendAction,
        want: CommandSpecificStatus,
    ) -> Outcome<Status> {
        let request = self.target.ns.zone_send(self.zslba(zone), action, false, 0);
        let what = format!("{action:?} zone {zone}");
        run_expecting(&mut self.qpair, request, StatusCode::CommandSpecific(want), &what)
    }

    pub(super) fn reset_all(&mut self) -> Outcome {
        let request = self.target.ns.zone_send(0, ZoneSendAction::Reset, true, 0);
        run_ok(&mut self.qpair, request, "reset all zones").map(drop)
    }

    /// A write request of `blocks` stamped blocks at `slba`.
    pub(super) fn write_request(&self, slba: u64, blocks: u64) -> Outcome<Result<Request, RequestError>> {
        let block_bytes = self.target.block_bytes;
        let buffer = take(&self.pool)?;
        for i in 0..blocks as usize {
            stamp_block(&buffer, i * block_bytes, block_bytes, Stamp { tag: slba + i as u64, generation: 1 });
        }
        let len = blocks as usize * block_bytes;
        Ok(self.target.ns.write(slba, IoBuffer::range(buffer, 0, len), false, 0))
    }

    pub(super) fn write(&mut self, slba: u64, blocks: u64) -> Outcome {
        let request = self.write_request(slba, blocks)?;
        run_ok(&mut self.qpair, request, &format!("write {blocks} blocks at {slba}")).map(drop)
    }

    pub(super) fn write_expecting(&mut self, slba: u64, blocks: u64, want: CommandSpecificStatus) -> Outcome<Status> {
        let request = self.write_request(slba, blocks)?;
        let what = format!("write {blocks} blocks at {slba}");
        run_expecting(&mut self.qpair, request, StatusCode::CommandSpecific(want), &what)
    }

    /// One Zone Append of `blocks` stamped blocks: the LBA the controller
    /// chose, or the status it failed with. The buffer goes straight back
    /// to the pool.
    pub(super) fn append(&mut self, zone: u64, blocks: u64) -> Outcome<Result<u64, Status>> {
        let block_bytes = self.target.block_bytes;
        let buffer = take(&self.pool)?;
        for i in 0..blocks as usize {
            stamp_block(&buffer, i * block_bytes, block_bytes, Stamp { tag: APPEND_TAG, generation: i as u64 });
        }
        let len = blocks as usize * block_bytes;
        let request = self.target.ns.zone_append(self.zslba(zone), IoBuffer::range(buffer, 0, len), false, 0);
        let what = format!("append {blocks} blocks to zone {zone}");
        let completion = execute(&mut self.qpair, request, &what)?;
        match completion.status {
            Ok(()) => Ok(Ok(completion.result_u64())),
            Err(IoError::Device(status)) => Ok(Err(status)),
            Err(error) => Err(format!("{what}: {error}")),
        }
    }
}

pub(super) fn zns(target: &Target) -> Outcome {
    if target.ns.zones().is_none() {
        return not_zoned(target);
    }
    let mut zones = Zones::new(target, 64)?;
    if zones.zone_count < 8 {
        return Err(format!("{} zones; the scenario needs 8", zones.zone_count));
    }
    zones.reset_all()?;
    check("zns report", || {
        let (reported, descriptors) = zones.report(0, ReportFilter::All, false, zones.zone_count as usize)?;
        if reported != zones.zone_count || descriptors.len() as u64 != zones.zone_count {
            return Err(format!(
                "{reported} zones reported, {} descriptors, {} zones expected",
                descriptors.len(),
                zones.zone_count
            ));
        }
        for (index, zone) in descriptors.iter().enumerate() {
            let zslba = zones.zslba(index as u64);
            if zone.zslba != zslba || zone.wp != zslba || zone.state != ZoneState::Empty {
                return Err(format!("zone {index} after reset: {zone:?}"));
            }
            if zone.zcap == 0 || zone.zcap > zones.zone_size_blocks {
                return Err(format!("zone {index} has capacity {}", zone.zcap));
            }
        }
        target.ok(
            "zns report",
            format!(
                "{} zones of {} blocks, all Empty with the write pointer at the zone start",
                zones.zone_count, zones.zone_size_blocks
            ),
        );
        Ok(())
    })?;
    check("zns append", || zns_appends(target, &mut zones))?;
    check("zns append limit", || zns_append_limit(target, &mut zones))?;
    check("zns states", || zns_states(target, &mut zones))?;
    check("zns invalid write", || zns_invalid_writes(target, &mut zones))?;
    check("zns reset all", || {
        zones.reset_all()?;
        let (empty, _) = zones.report(0, ReportFilter::Empty, false, 1)?;
        if empty != zones.zone_count {
            return Err(format!("{empty} of {} zones Empty", zones.zone_count));
        }
        target.ok("zns reset all", format!("select-all reset left {empty} zones Empty"));
        Ok(())
    })
}

/// Concurrent Zone Appends to zone 0: the LBAs they return tile the
/// written range exactly, and each holds the payload its append carried.
fn zns_appends(target: &Target, zones: &mut Zones) -> Outcome {
    let block_bytes = target.block_bytes;
    let blocks_per_append = target.blocks(APPEND_BYTES);
    let appends = APPENDS_IN_FLIGHT * APPEND_ROUNDS;
    let pool = target.pool(APPEND_BYTES, APPENDS_IN_FLIGHT)?;
    let zslba = zones.zslba(0);
    // (assigned LBA, append number)
    let mut placed: Vec<(u64, u64)> = Vec::with_capacity(appends);
    let mut completions_per_append = vec![0u8; appends];
    let mut reaped = Vec::with_capacity(APPENDS_IN_FLIGHT);
    for round in 0..APPEND_ROUNDS {
        for i in 0..APPENDS_IN_FLIGHT {
            let id = (round * APPENDS_IN_FLIGHT + i) as u64;
            let buffer = take(&pool)?;
            for block in 0..blocks_per_append as usize {
                stamp_block(
                    &buffer,
                    block * block_bytes,
                    block_bytes,
                    Stamp { tag: APPEND_TAG | id, generation: block as u64 },
                );
            }
            let request = target
                .ns
                .zone_append(zslba, IoBuffer::new(buffer).truncate(APPEND_BYTES), false, id)
                .map_err(|e| format!("append {id}: refused by the driver: {e}"))?;
            zones.qpair.submit(request).map_err(|(error, _)| format!("append {id}: {error:?}"))?;
        }
        // All of them reach the controller with one doorbell update.
        if zones.qpair.in_flight() != APPENDS_IN_FLIGHT {
            return Err(format!("{} appends in flight", zones.qpair.in_flight()));
        }
        let started = Instant::now();
        while zones.qpair.in_flight() > 0 {
            zones.qpair.poll(|completion| reaped.push(completion));
            for completion in reaped.drain(..) {
                let id = completion.token;
                let count = completions_per_append
                    .get_mut(id as usize)
                    .ok_or_else(|| format!("a completion carries unused token {id}"))?;
                *count += 1;
                if *count > 1 {
                    return Err(format!("append {id} completed twice"));
                }
                if let Err(status) = completion.status {
                    return Err(format!("append {id} failed: {status}"));
                }
                placed.push((completion.result_u64(), id));
            }
            if started.elapsed() > BATCH_TIMEOUT {
                return Err(format!("{} appends never completed", zones.qpair.in_flight()));
            }
        }
    }
    if let Some(id) = completions_per_append.iter().position(|&n| n != 1) {
        return Err(format!("append {id} completed {} times", completions_per_append[id]));
    }
    placed.sort_unstable();
    for (index, &(lba, id)) in placed.iter().enumerate() {
        let want = zslba + index as u64 * blocks_per_append;
        if lba != want {
            return Err(format!(
                "sorted by assigned LBA, append {index} (number {id}) sits at {lba}, expected {want}: the appends do not tile [{zslba}, {})",
                zslba + appends as u64 * blocks_per_append
            ));
        }
    }
    let written = appends as u64 * blocks_per_append;
    zones.expect(0, ZoneState::ImplicitlyOpened, Some(written))?;

    // Read the zone back: each block holds what its append carried.
    let chunk_blocks = target.blocks(zones.pool.buffer_len() - PAGE_SIZE).min(written);
    let mut lba = zslba;
    while lba < zslba + written {
        let blocks = chunk_blocks.min(zslba + written - lba);
        let buffer = take(&zones.pool)?;
        let len = blocks as usize * block_bytes;
        poison_blocks(&buffer, 0, blocks as usize, block_bytes);
        let completion =
            run_ok(&mut zones.qpair, target.ns.read(lba, IoBuffer::range(buffer, 0, len), 0), "read back")?;
        let buffer = completion.buffer.ok_or("a read came back without its buffer")?;
        for i in 0..blocks {
            let at = lba + i;
            let index = ((at - zslba) / blocks_per_append) as usize;
            let id = placed[index].1;
            let expect = Expect::Stamp(Stamp { tag: APPEND_TAG | id, generation: (at - zslba) % blocks_per_append });
            check_block(buffer.buffer(), i as usize * block_bytes, block_bytes, expect)
                .map_err(|e| format!("LBA {at}, assigned to append {id}: {e}"))?;
        }
        lba += blocks;
    }
    target.ok(
        "zns append",
        format!(
            "{APPEND_ROUNDS} rounds of {APPENDS_IN_FLIGHT} appends in flight, {appends} distinct LBAs tile [{zslba}, {}), each holds its own payload; zone ImplicitlyOpened, write pointer at the end",
            zslba + written
        ),
    );
    Ok(())
}

/// An append of exactly the Zone Append Size Limit succeeds at the write
/// pointer; one block more is refused by the driver and by the device.
fn zns_append_limit(target: &Target, zones: &mut Zones) -> Outcome {
    let limit_bytes = target.ns.zones().expect("zoned").zone_append_max_bytes as usize;
    let block_bytes = target.block_bytes;
    if limit_bytes + block_bytes > zones.pool.buffer_len() {
        return Err(format!("a {limit_bytes}-byte append does not fit the buffers"));
    }
    let before = zones.zone(0)?;
    let limit_blocks = target.blocks(limit_bytes);
    let landed =
        zones.append(0, limit_blocks)?.map_err(|status| format!("an append of {limit_bytes} bytes: {status}"))?;
    if landed != before.wp {
        return Err(format!("an append landed at {landed}, the write pointer was {}", before.wp));
    }
    let over = limit_bytes + block_bytes;
    let buffer = take(&zones.pool)?;
    expect_refused(
        target.ns.zone_append(zones.zslba(0), IoBuffer::range(buffer, 0, over), false, 0),
        &RequestError::TooLarge { bytes: over as u64, max_bytes: limit_bytes as u64 },
        "an append one block over the limit",
    )?;
    let request = Request {
        command: zns_cmd::zone_append(target.ns.nsid(), zones.zslba(0), (over / block_bytes) as u32, false),
        buffer: Some(IoBuffer::range(take(&zones.pool)?, 0, over)),
        metadata: None,
        token: 0,
    };
    let status = run_expecting(
        &mut zones.qpair,
        Ok(request),
        StatusCode::Generic(GenericStatus::InvalidFieldInCommand),
        "a hand-built append one block over the limit",
    )?;
    let zasl = target.controller.identify_zns().map(|z| z.zasl);
    zones.expect(0, ZoneState::ImplicitlyOpened, Some(before.wp - before.zslba + limit_blocks))?;
    target.ok(
        "zns append limit",
        format!(
            "{limit_bytes} bytes (ZASL {zasl:?}) appended at the write pointer; {over} bytes refused with TooLarge, and by the device with {status}"
        ),
    );
    Ok(())
}

/// Explicit open, close, finish and reset, seen through zone reports,
/// including partial and filtered ones. Zone 0 stays implicitly opened
/// from the appends.
fn zns_states(target: &Target, zones: &mut Zones) -> Outcome {
    let written = 16;
    // Zone 1: Empty → (close refused) → Explicitly Opened → written →
    // Closed → Explicitly Opened → Full → Empty.
    zones.expect(1, ZoneState::Empty, Some(0))?;
    let refused = zones.send_expecting(1, ZoneSendAction::Close, CommandSpecificStatus::InvalidZoneStateTransition)?;
    expect_raw(refused, StatusCodeType::CommandSpecific, 0xBF)?;
    zones.send(1, ZoneSendAction::Open)?;
    zones.expect(1, ZoneState::ExplicitlyOpened, Some(0))?;
    zones.write(zones.zslba(1), written)?;
    zones.expect(1, ZoneState::ExplicitlyOpened, Some(written))?;
    zones.send(1, ZoneSendAction::Close)?;
    zones.expect(1, ZoneState::Closed, Some(written))?;
    zones.send(1, ZoneSendAction::Open)?;
    zones.expect(1, ZoneState::ExplicitlyOpened, Some(written))?;
    zones.send(1, ZoneSendAction::Finish)?;
    zones.expect(1, ZoneState::Full, None)?;
    zones.write_expecting(zones.zslba(1) + written, 1, CommandSpecificStatus::ZoneIsFull)?;
    zones.send(1, ZoneSendAction::Reset)?;
    zones.expect(1, ZoneState::Empty, Some(0))?;
    target.ok(
        "zns states",
        format!(
            "zone 1: Empty, close refused ({refused}), open, {written} blocks written, close, open, finish (a write then fails as Zone Is Full), reset; the write pointer followed"
        ),
    );

    // One zone in each state, then filtered and partial reports.
    zones.send(2, ZoneSendAction::Open)?;
    zones.write(zones.zslba(2), 8)?;
    zones.send(2, ZoneSendAction::Close)?;
    zones.send(3, ZoneSendAction::Finish)?;
    zones.send(4, ZoneSendAction::Open)?;
    let want: [(ReportFilter, &[u64]); 4] = [
        (ReportFilter::ImplicitlyOpened, &[0]),
        (ReportFilter::Closed, &[2]),
        (ReportFilter::Full, &[3]),
        (ReportFilter::ExplicitlyOpened, &[4]),
    ];
    for (filter, expected) in want {
        let (reported, descriptors) = zones.report(0, filter, false, 4)?;
        let got: Vec<u64> = descriptors.iter().map(|d| d.zslba / zones.zone_size_blocks).collect();
        if reported != expected.len() as u64 || got != expected {
            return Err(format!("report {filter:?}: {reported} zones, {got:?}; expected {expected:?}"));
        }
    }
    let empty = zones.zone_count - 4;
    let (reported, descriptors) = zones.report(0, ReportFilter::Empty, false, 2)?;
    if reported != empty || descriptors.len() != 2 {
        return Err(format!(
            "report Empty with room for 2, not partial: {reported} zones and {} descriptors; expected {empty} and 2",
            descriptors.len()
        ));
    }
    if descriptors.iter().map(|d| d.zslba).collect::<Vec<_>>() != [zones.zslba(1), zones.zslba(5)] {
        return Err(format!("report Empty lists {descriptors:?}, expected zones 1 and 5"));
    }
    let (reported, descriptors) = zones.report(0, ReportFilter::Empty, true, 2)?;
    if reported != 2 || descriptors.len() != 2 {
        return Err(format!(
            "partial report Empty with room for 2: {reported} zones and {} descriptors",
            descriptors.len()
        ));
    }
    // A report from inside a zone starts with that zone.
    let inside = zones.zslba(2) + 5;
    let (_, descriptors) = zones.report(inside, ReportFilter::All, true, 2)?;
    if descriptors.first().map(|d| d.zslba) != Some(zones.zslba(2)) {
        return Err(format!("a report from LBA {inside} starts with {:?}, expected zone 2", descriptors.first()));
    }
    target.ok(
        "zns report filters",
        format!(
            "ImplicitlyOpened [0], Closed [2], Full [3], ExplicitlyOpened [4]; Empty counts {empty} (room for 2), partial counts 2; a report from inside zone 2 starts there"
        ),
    );
    // Back to Empty, releasing their resources.
    for zone in [2, 3, 4] {
        zones.send(zone, ZoneSendAction::Reset)?;
    }
    Ok(())
}

/// Writes that miss the write pointer fail with Zone Invalid Write
/// (SCT 1h, SC BCh in the ZNS Command Set status values); the one at it
/// succeeds.
fn zns_invalid_writes(target: &Target, zones: &mut Zones) -> Outcome {
    let invalid = CommandSpecificStatus::ZoneInvalidWrite;
    // An Empty zone: its write pointer is its start.
    let empty_zone = 5;
    zones.expect(empty_zone, ZoneState::Empty, Some(0))?;
    let status = zones.write_expecting(zones.zslba(empty_zone) + 8, 1, invalid)?;
    expect_raw(status, StatusCodeType::CommandSpecific, 0xBC)?;
    zones.expect(empty_zone, ZoneState::Empty, Some(0))?;
    // An open zone: ahead of and behind the write pointer, then at it.
    let open = zones.zone(0)?;
    let ahead = zones.write_expecting(open.wp + 1, 1, invalid)?;
    expect_raw(ahead, StatusCodeType::CommandSpecific, 0xBC)?;
    let behind = zones.write_expecting(open.wp - 1, 1, invalid)?;
    expect_raw(behind, StatusCodeType::CommandSpecific, 0xBC)?;
    zones.write(open.wp, 1)?;
    zones.expect(0, ZoneState::ImplicitlyOpened, Some(open.wp - open.zslba + 1))?;
    target.ok(
        "zns invalid write",
        format!(
            "a write 8 blocks into an Empty zone, and writes one block ahead of and behind an open zone's write pointer, fail with {status}; a write at the write pointer succeeds"
        ),
    );
    Ok(())
}

/// Zone commands on a conventional namespace are refused by the driver.
fn not_zoned(target: &Target) -> Outcome {
    let ns = &target.ns;
    let want = RequestError::NotZoned { nsid: ns.nsid() };
    let pool = target.pool(PAGE_SIZE, 1)?;
    expect_refused(
        ns.zone_append(0, IoBuffer::range(take(&pool)?, 0, target.block_bytes), false, 0),
        &want,
        "zone append",
    )?;
    expect_refused(ns.zone_send(0, ZoneSendAction::Open, false, 0), &want, "open zone")?;
    expect_refused(ns.zone_send(0, ZoneSendAction::Reset, true, 0), &want, "reset all zones")?;
    expect_refused(
        ns.report_zones(0, ReportFilter::All, false, IoBuffer::new(take(&pool)?), 0),
        &want,
        "report zones",
    )?;
    target.ok("zns not zoned", "zone append, open, reset all and report zones refused with NotZoned");
    Ok(())
}
