//! The volume tool's text views: a volume's status (state, devices, what
//! is at risk, resilver, last scrub, health), a read-only check's findings
//! and a resilver's report. Pure formatting, tested here; the tool prints
//! what these return.

use crate::health::Health;
use crate::prometheus::{member_state_name, volume_state_name};
use nvme_scrub::ResilverReport;
use std::fmt::Write;
use zoned_allocator::{CheckReport, MemberState, VolumeState, VolumeStatus};

/// `bytes` in the largest binary unit under which it is at least 1, one
/// decimal: `0 B`, `512 B`, `4.0 KiB`, `1.5 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Seconds since the Unix epoch as a UTC date and time:
/// `2023-11-14 22:13:20 UTC` (the proleptic Gregorian calendar).
pub fn utc(unix_s: u64) -> String {
    const DAY_S: u64 = 86_400;
    let (days, second_of_day) = (unix_s / DAY_S, unix_s % DAY_S);
    // Days since 0000-03-01, counted in 400-year eras of 146097 days, so
    // that the leap day ends each year.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 { month_from_march + 3 } else { month_from_march - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    assert!((1..=12).contains(&month) && (1..=31).contains(&day), "a calendar date");
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// How long ago `then_unix_s` was at `now_unix_s`, roughly: `just now`,
/// `42 s ago`, `5 min ago`, `3 h ago`, `12 days ago`; `in the future` for
/// a clock that went back.
pub fn ago(then_unix_s: u64, now_unix_s: u64) -> String {
    let Some(seconds) = now_unix_s.checked_sub(then_unix_s) else {
        return "in the future".into();
    };
    match seconds {
        0 => "just now".into(),
        1..=119 => format!("{seconds} s ago"),
        120..=7199 => format!("{} min ago", seconds / 60),
        7200..=172_799 => format!("{} h ago", seconds / 3600),
        _ => format!("{} days ago", seconds / 86_400),
    }
}

/// Lays out `rows` under `header` in columns two blanks apart; the
/// columns in `right` are aligned right (numbers). No trailing blanks.
pub fn table(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        assert_eq!(row.len(), header.len(), "a cell per column");
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (column, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if column > 0 {
                line.push_str("  ");
            }
            if right.contains(&column) {
                let _ = write!(line, "{cell:>width$}");
            } else {
                let _ = write!(line, "{cell:<width$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.to_string()
    }
}

/// The operator's view of `status`, `health[i]` being device
/// `status.devices[i]`'s controller health when known, at `now_unix_s`.
pub fn status_text(status: &VolumeStatus, health: &[Option<Health>], now_unix_s: u64) -> String {
    let mut out = String::new();
    state_text(&mut out, status);
    summary_text(&mut out, status, now_unix_s);
    out.push('\n');
    devices_text(&mut out, status);
    health_text(&mut out, status, health);
    out
}

/// The volume, its state, and what to do about a state that is not
/// online: a place given up, a resilver owed, bytes at risk.
fn state_text(out: &mut String, status: &VolumeStatus) {
    let profile = format!("{:?}", status.profile).to_lowercase();
    let _ = writeln!(
        out,
        "volume: {:#018x} ({profile}, {} cop{})",
        status.volume_id,
        status.redundancy.copies,
        if status.redundancy.copies == 1 { "y" } else { "ies" }
    );
    let _ = writeln!(out, " state: {}", volume_state_name(status.state).to_uppercase());
    for device in status.devices.iter().filter(|d| d.state == MemberState::Failed) {
        let why = device.why.as_deref().map(|why| format!(" ({why})")).unwrap_or_default();
        let _ = writeln!(out, "status: device place {} is not in use{why}", device.place);
        if status.state != VolumeState::Failed {
            let _ = writeln!(
                out,
                "action: put a new device in its place (volume replace --place {} --new-pci BDF), or give the \
                 device back and open the volume again (volume status) for it to rejoin",
                device.place
            );
        }
    }
    if status.state == VolumeState::Resilvering {
        let _ = writeln!(out, "status: a device in use lacks copies of some extents");
        let _ = writeln!(out, "action: volume resilver (it continues where an earlier one stopped)");
    }
    let redundancy = &status.redundancy;
    if redundancy.extents_lost > 0 {
        let _ = writeln!(
            out,
            "LOST: {} bytes ({}) in {} extent(s) have no copy on a device in use: they read as uncorrectable \
             (a scrub lists them); give back the device that held them, or free them and restore them from a \
             backup",
            redundancy.bytes_lost,
            human_bytes(redundancy.bytes_lost),
            redundancy.extents_lost
        );
    }
    if redundancy.extents_at_risk > 0 {
        let _ = writeln!(
            out,
            "at risk: {} bytes ({}) in {} extent(s) have fewer than their {} copies",
            redundancy.bytes_at_risk,
            human_bytes(redundancy.bytes_at_risk),
            redundancy.extents_at_risk,
            redundancy.copies
        );
        for left in &redundancy.by_copies_left {
            let _ = writeln!(
                out,
                "         {} extent(s) ({}) with {} cop{} left",
                left.extents,
                human_bytes(left.bytes),
                left.copies,
                if left.copies == 1 { "y" } else { "ies" }
            );
        }
    }
    for resilver in &status.resilver {
        let _ = writeln!(
            out,
            "resilver: place {}: {} bytes ({}) left to copy",
            resilver.place,
            resilver.bytes_left,
            human_bytes(resilver.bytes_left)
        );
    }
}

/// The last scrub, the space used and where the checksums live.
fn summary_text(out: &mut String, status: &VolumeStatus, now_unix_s: u64) {
    match &status.last_scrub {
        Some(scrub) => {
            let _ = writeln!(
                out,
                "  scan: last scrub ended {} ({}): {} verified, {} bad block(s), {} repaired, {} uncorrectable: {}",
                utc(scrub.finished_unix_s),
                ago(scrub.finished_unix_s, now_unix_s),
                human_bytes(scrub.bytes_verified),
                scrub.bad_blocks,
                scrub.repaired_blocks,
                scrub.uncorrectable_blocks,
                if scrub.clean { "clean" } else { "not clean" }
            );
        }
        None => {
            let _ = writeln!(out, "  scan: no scrub recorded");
        }
    }
    let _ = writeln!(
        out,
        "  used: {} of {}, committed sequence {}",
        human_bytes(status.used_bytes),
        human_bytes(status.capacity_bytes),
        status.committed_seq
    );
    let checksums = match status.block_tag_bytes {
        Some(bytes) => format!("in block tags ({bytes} bytes of metadata per 4 KiB block)"),
        None if status.checksum_areas && status.unsealed_zones > 0 => format!(
            "in checksum areas after each zone's data; {} zone(s) without one (its write failed): their \
             checksums stay in memory until reclaim moves their data",
            status.unsealed_zones
        ),
        None if status.checksum_areas => "in checksum areas after each zone's data".into(),
        None => "in the extent map".into(),
    };
    let _ = writeln!(out, "   crc: {checksums}");
}

/// One row per device place, then timeouts and resets since open.
fn devices_text(out: &mut String, status: &VolumeStatus) {
    let header = [
        "PLACE",
        "ROLE",
        "PCI",
        "MODEL",
        "SERIAL",
        "NSID",
        "STATE",
        "READ",
        "WRITE",
        "CKSUM",
        "ZONES E/O/F/W",
        "USED",
        "MISSING",
        "ALONE",
    ];
    let mut rows = Vec::new();
    for device in &status.devices {
        let present = device.state != MemberState::Failed;
        rows.push(vec![
            device.place.to_string(),
            device.role.clone(),
            or_dash(&device.pci),
            or_dash(&device.model),
            or_dash(&device.serial),
            device.nsid.to_string(),
            member_state_name(device.state).to_uppercase(),
            device.errors.read.to_string(),
            device.errors.write.to_string(),
            device.errors.checksum.to_string(),
            if present {
                format!("{}/{}/{}/{}", device.zones_empty, device.zones_open, device.zones_full, device.zones_worn)
            } else {
                "-".into()
            },
            if present { human_bytes(device.used_bytes) } else { "-".into() },
            human_bytes(device.missing_bytes),
            if present { human_bytes(device.sole_bytes) } else { "-".into() },
        ]);
    }
    out.push_str(&table(&header, &rows, &[7, 8, 9]));
    for device in &status.devices {
        let errors = device.errors;
        if errors.timeouts > 0 || errors.resets > 0 {
            let _ = writeln!(
                out,
                "place {}: {} timeout(s) and {} controller reset(s) since open",
                device.place, errors.timeouts, errors.resets
            );
        }
    }
}

/// Each controller's health, once per controller.
fn health_text(out: &mut String, status: &VolumeStatus, health: &[Option<Health>]) {
    out.push_str("\nhealth:\n");
    let mut shown: Vec<&str> = Vec::new();
    for (index, device) in status.devices.iter().enumerate() {
        if device.pci.is_empty() || shown.contains(&device.pci.as_str()) {
            continue;
        }
        shown.push(&device.pci);
        let summary = match health.get(index).and_then(Option::as_ref) {
            Some(health) => health.summary(),
            None => "SMART / Health log unavailable".into(),
        };
        let _ = writeln!(out, "  {}: {summary}", device.pci);
    }
    if shown.is_empty() {
        out.push_str("  no device present\n");
    }
}

/// What a read-only check found, in words.
pub fn check_text(report: &CheckReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "check: volume {:#018x}, committed sequence {} (checkpoint generation {})",
        report.volume_id, report.committed_seq, report.generation
    );
    for place in &report.places {
        let standing = match (&place.absent, place.given) {
            (Some(why), _) => format!("absent ({why})"),
            (None, Some(given)) => format!("device {given} of those given"),
            (None, None) => "absent".into(),
        };
        let unlabelled = if place.unlabelled { ", no label (its data was checked)" } else { "" };
        let _ = writeln!(out, "  place {}: {standing}{unlabelled}", place.place);
    }
    for (copy, (records, labels)) in report.bad_records.iter().zip(&report.bad_labels).enumerate() {
        let _ = writeln!(out, "  metadata copy {copy}: {records} bad record(s), {labels} bad label(s)");
    }
    let _ = writeln!(out, "  extents: {} ({} bytes, {})", report.extents, report.bytes, human_bytes(report.bytes));
    for (copy, blocks) in report.missing_blocks.iter().enumerate() {
        if *blocks > 0 {
            let bytes = blocks * zoned_allocator::BLOCK_SIZE as u64;
            let _ = writeln!(
                out,
                "  copy {copy}: {blocks} block(s) missing ({}): a resilver writes them",
                human_bytes(bytes)
            );
        }
    }
    if report.zone_actions.is_empty() {
        let _ = writeln!(out, "  zones: nothing for open to do");
    } else {
        let _ = writeln!(out, "  zones: open would");
        for action in &report.zone_actions {
            let _ = writeln!(out, "    {action}");
        }
    }
    if report.log_mismatch {
        let _ = writeln!(out, "  metadata log: its write pointers are not where it ends: open would move it");
    }
    if report.metadata_rewrite {
        let _ = writeln!(
            out,
            "  metadata: open would rewrite it (a copy differs, a label is missing, or a member came or went)"
        );
    }
    let _ = writeln!(
        out,
        "result: {}",
        if report.clean { "clean" } else { "not clean: opening the volume (volume status) repairs what it can" }
    );
    out
}

/// What a resilver did, in words.
pub fn resilver_text(report: &ResilverReport) -> String {
    let mut out = String::new();
    let sources = report.source_lanes.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
    // A distributed rebuild writes onto the lanes it reads, wherever
    // placement puts each copy.
    let (what, to) = match report.distributed {
        true => ("rebuild", "onto the others' free space".to_string()),
        false => ("resilver", format!("to lane {}", report.target_lane)),
    };
    let _ = writeln!(
        out,
        "{what} place {}: {} of {} copied ({} extent(s)), from lane(s) {sources} {to}, in {:.2} s ({:.1} MiB/s), {} \
         commit(s)",
        report.place,
        human_bytes(report.bytes_copied),
        human_bytes(report.bytes_total),
        report.extents_copied,
        report.duration_s,
        report.rate_mib_s,
        report.commits
    );
    let _ = writeln!(
        out,
        "  read: {} in {} read(s), {}{}; mean queue depth {:.1} reads, {:.1} writes",
        human_bytes(report.bytes_read),
        report.reads,
        if report.verified { "checksums verified" } else { "checksums not verified" },
        if report.zero_copy { ", each written as read (no copy through the host)" } else { "" },
        report.mean_read_queue_depth,
        report.mean_write_queue_depth
    );
    let _ = writeln!(
        out,
        "  errors: {} block(s) failed their checksum, {} read(s) failed",
        report.checksum_errors, report.failed_reads
    );
    if !report.unrecoverable.is_empty() {
        let _ = writeln!(
            out,
            "  unrecoverable: {} extent(s) have no good copy left: {:?}",
            report.unrecoverable.len(),
            report.unrecoverable
        );
    }
    for (extent, why) in &report.copy_failures {
        let _ = writeln!(out, "  copy of extent {extent} failed: {why}");
    }
    if let Some(verify) = &report.verify {
        let _ = writeln!(out, "  verify pass over the new copy:");
        for line in verify.to_string().lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    let result = if report.complete() {
        "complete: every copy this place lacked is written".to_string()
    } else if report.cancelled {
        format!("cancelled with {} left (run it again to continue)", human_bytes(report.bytes_left))
    } else if report.bytes_left > 0 {
        format!("incomplete: {} bytes ({}) still missing", report.bytes_left, human_bytes(report.bytes_left))
    } else {
        "incomplete: the verify pass over the new copy is not clean".into()
    };
    let _ = writeln!(out, "result: {result}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{degraded, device, health};
    use zoned_allocator::{CheckedPlace, ResilverStatus};

    #[test]
    fn sizes_dates_and_ages() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(4096), "4.0 KiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(951_868_799), "2000-02-29 23:59:59 UTC");
        assert_eq!(utc(4_107_542_400), "2100-03-01 00:00:00 UTC");
        assert_eq!(ago(100, 100), "just now");
        assert_eq!(ago(100, 142), "42 s ago");
        assert_eq!(ago(0, 300), "5 min ago");
        assert_eq!(ago(0, 3 * 3600 + 5), "3 h ago");
        assert_eq!(ago(0, 12 * 86_400), "12 days ago");
        assert_eq!(ago(200, 100), "in the future");
    }

    #[test]
    fn columns_line_up() {
        let rows =
            vec![vec!["0".to_string(), "long name".into(), "3".into()], vec!["1".into(), "x".into(), "120".into()]];
        assert_eq!(
            table(&["A", "NAME", "N"], &rows, &[2]),
            "A  NAME         N\n0  long name    3\n1  x          120\n"
        );
    }

    #[test]
    fn a_degraded_mirror_in_words() {
        let text = status_text(&degraded(), &[Some(health()), None], 1_700_000_000 + 3 * 3600);
        let expected = "\
volume: 0x000000000000abcd (mirror, 2 copies)
 state: DEGRADED
status: device place 1 is not in use (the device went away)
action: put a new device in its place (volume replace --place 1 --new-pci BDF), or give the device back and open \
the volume again (volume status) for it to rejoin
at risk: 1056768 bytes (1.0 MiB) in 258 extent(s) have fewer than their 2 copies
         258 extent(s) (1.0 MiB) with 1 copy left
  scan: last scrub ended 2023-11-14 22:13:20 UTC (3 h ago): 2.0 MiB verified, 1 bad block(s), 1 repaired, 0 \
uncorrectable: clean
  used: 1.0 MiB of 1.0 GiB, committed sequence 42
   crc: in the extent map

PLACE  ROLE           PCI           MODEL      SERIAL  NSID  STATE   READ  WRITE  CKSUM  ZONES E/O/F/W  USED     MISSING  ALONE
0      mirror copy 0  0000:01:00.0  Model \"Z\"  SN0     1     ONLINE     3      0      7  10/1/4/0       1.0 MiB  0 B      1.0 MiB
1      mirror copy 1  -             -          -       1     FAILED     3      0      7  -              -        8.0 KiB  -
place 0: 1 timeout(s) and 0 controller reset(s) since open
place 1: 1 timeout(s) and 0 controller reset(s) since open

health:
  0000:01:00.0: 37 C, 3% used, 5 media error(s), spare 100% (threshold 10%), no critical warning
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn a_resilver_in_progress_and_a_health_log_that_failed() {
        let mut status = degraded();
        status.state = VolumeState::Resilvering;
        status.devices[1] = device(1, MemberState::Resilvering, "0000:02:00.0");
        status.resilver = vec![ResilverStatus { place: 1, bytes_left: 3 << 20 }];
        status.last_scrub = None;
        let text = status_text(&status, &[Some(health()), None], 0);
        for line in [
            " state: RESILVERING",
            "action: volume resilver (it continues where an earlier one stopped)",
            "resilver: place 1: 3145728 bytes (3.0 MiB) left to copy",
            "  scan: no scrub recorded",
            "  0000:02:00.0: SMART / Health log unavailable",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(!text.contains("not in use"), "{text}");
    }

    #[test]
    fn checksum_areas_and_zones_left_without_one() {
        let mut status = degraded();
        status.checksum_areas = true;
        let text = status_text(&status, &[None, None], 0);
        assert!(text.lines().any(|l| l == "   crc: in checksum areas after each zone's data"), "{text}");
        status.unsealed_zones = 2;
        let text = status_text(&status, &[None, None], 0);
        let line = text.lines().find(|l| l.starts_with("   crc: ")).unwrap();
        assert!(line.contains("; 2 zone(s) without one (its write failed)"), "{line}");
    }

    #[test]
    fn a_check_that_finds_work_for_open() {
        let report = CheckReport {
            volume_id: 7,
            committed_seq: 12,
            generation: 3,
            places: vec![
                CheckedPlace { place: 0, given: Some(0), unlabelled: false, absent: None },
                CheckedPlace { place: 1, given: None, unlabelled: false, absent: Some("not given".into()) },
            ],
            bad_records: vec![0, 0],
            bad_labels: vec![0, 1],
            extents: 10,
            bytes: 40960,
            missing_blocks: vec![0, 4],
            zone_actions: vec!["device 0 zone 9: reset (holds nothing committed)".into()],
            log_mismatch: false,
            metadata_rewrite: true,
            clean: false,
        };
        let text = check_text(&report);
        for line in [
            "check: volume 0x0000000000000007, committed sequence 12 (checkpoint generation 3)",
            "  place 0: device 0 of those given",
            "  place 1: absent (not given)",
            "  metadata copy 1: 0 bad record(s), 1 bad label(s)",
            "  extents: 10 (40960 bytes, 40.0 KiB)",
            "  copy 1: 4 block(s) missing (16.0 KiB): a resilver writes them",
            "    device 0 zone 9: reset (holds nothing committed)",
            "result: not clean: opening the volume (volume status) repairs what it can",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        let clean = CheckReport { clean: true, zone_actions: Vec::new(), metadata_rewrite: false, ..report };
        let text = check_text(&clean);
        assert!(text.ends_with("result: clean\n"), "{text}");
        assert!(text.contains("  zones: nothing for open to do\n"), "{text}");
    }

    #[test]
    fn a_resilver_report_says_whether_it_is_complete() {
        let report = ResilverReport {
            place: 1,
            source_lanes: vec![0],
            source_bytes: vec![1 << 20],
            target_lane: 1,
            bytes_total: 1 << 20,
            bytes_copied: 1 << 20,
            extents_copied: 4,
            bytes_read: 1 << 20,
            reads: 2,
            verified: true,
            commits: 1,
            duration_s: 0.5,
            rate_mib_s: 2.0,
            ..ResilverReport::default()
        };
        let text = resilver_text(&report);
        assert!(text.starts_with("resilver place 1: 1.0 MiB of 1.0 MiB copied (4 extent(s)), from lane(s) 0 to lane 1"));
        assert!(text.ends_with("result: complete: every copy this place lacked is written\n"), "{text}");
        let cut = ResilverReport { cancelled: true, bytes_left: 4096, ..report.clone() };
        assert!(resilver_text(&cut).ends_with("result: cancelled with 4.0 KiB left (run it again to continue)\n"));
        let lost = ResilverReport { unrecoverable: vec![9], bytes_left: 4096, ..report };
        let text = resilver_text(&lost);
        assert!(text.contains("  unrecoverable: 1 extent(s) have no good copy left: [9]\n"), "{text}");
        assert!(text.ends_with("result: incomplete: 4096 bytes (4.0 KiB) still missing\n"), "{text}");
    }
}
