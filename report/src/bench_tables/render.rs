//! Runs as markdown: a paragraph of provenance, then one table per area,
//! each figure beside its anchor, with the bench's own numbers.

use super::run::{size_text, Area, DriverSettings, ResilverSettings, Row, Run, Target, ZonedSettings};
use std::fmt::Write as _;

/// The tables of `runs`, one run after the other.
pub fn render(runs: &[Run]) -> String {
    runs.iter().map(render_run).collect::<Vec<_>>().join("\n")
}

fn render_run(run: &Run) -> String {
    let mut out = format!("{}\n", provenance(run));
    for area in Area::ALL {
        let rows = run.rows_of(area);
        if !rows.is_empty() {
            out += &format!("\n## {}\n\n{}\n\n{}", heading(area), caption(area, run), table(&rows));
        }
    }
    out
}

/// When, from what and on what machine: "not recorded" for what the JSON
/// lacks.
fn provenance(run: &Run) -> String {
    let date = run.date.as_deref().map_or("not recorded".to_owned(), |date| format!("**{date}**"));
    let commit = match (&run.commit, run.modified_files) {
        (None, _) => "not recorded".to_owned(),
        (Some(commit), None) => format!("`{}`", short(commit)),
        (Some(commit), Some(0)) => format!("`{}`, no file modified", short(commit)),
        (Some(commit), Some(n)) => {
            format!("`{}` with {n} file(s) modified under driver/, examples/ or hack/", short(commit))
        }
    };
    let runtime = run.runtime_s.map_or(String::new(), |s| format!("; the run took {}", duration_text(s)));
    let machine = match (run.host.is_empty(), run.guest.is_empty()) {
        (true, true) => "not recorded".to_owned(),
        (host_missing, guest_missing) => format!(
            "host {}; guest {}",
            if host_missing { "not recorded".to_owned() } else { run.host.join(", ") },
            if guest_missing { "not recorded".to_owned() } else { run.guest.join(", ") },
        ),
    };
    format!("Date: {date}; commit: {commit}{runtime}.\nMachine: {machine}.")
}

fn short(commit: &str) -> &str {
    commit.get(..7).unwrap_or(commit)
}

fn duration_text(seconds: f64) -> String {
    let whole = seconds.round() as u64;
    format!("{} min {} s", whole / 60, whole % 60)
}

fn heading(area: Area) -> &'static str {
    match area {
        Area::Driver => "The driver",
        Area::Allocator => "The allocator",
        Area::Scrub => "The scrub",
        Area::Resilver => "The resilver",
        Area::Other => "Other rows",
    }
}

/// How the area's figures were taken (medians or one run, from the
/// settings), and what ours and its anchors are.
fn caption(area: Area, run: &Run) -> String {
    match area {
        Area::Driver => format!(
            "{} Ours is `perf` (vfio-pci, polled); its anchors are fio on the guest kernel's nvme driver and, \
             where the run has them, ours with PRPs only (`--sgl never`) and the floor (`--engine raw`).",
            driver_figures(run.driver)
        ),
        Area::Allocator => format!(
            "{} Ours is `seqwrite` through the zoned allocator; its anchors are btrfs in zoned mode (the seed's \
             fio job), fio on the raw zoned namespace, and ablations of our own.",
            zoned_figures(run.zoned)
        ),
        Area::Scrub => "One run of each, over data that seqwrite wrote. Ours is `scrub`; its anchors are `btrfs \
                        scrub` of as much data, fio's sequential reads, `perf` over the same blocks, and an \
                        ablation of our own."
            .to_owned(),
        Area::Resilver => format!(
            "{} Ours is `volume replace`; its anchors are our `perf` on the same devices and our scrub of the \
             same volume.",
            resilver_figures(run.resilver)
        ),
        Area::Other => "Rows of the run that no area above claims.".to_owned(),
    }
}

fn driver_figures(settings: Option<DriverSettings>) -> String {
    let Some(s) = settings else { return "Medians over the rounds.".to_owned() };
    format!(
        "Medians of {} rounds of {} s per side, on {} conventional namespaces{}.",
        s.rounds,
        s.time_s,
        size_text(s.size_bytes),
        if s.preconditioned { " written once first" } else { ", not preconditioned" }
    )
}

fn zoned_figures(settings: Option<ZonedSettings>) -> String {
    let Some(s) = settings else { return "One run of each.".to_owned() };
    format!(
        "One run of each, on {} ZNS namespaces of {} zones; seqwrite and raw fio write {:.0}% of theirs, btrfs \
         {:.0}%.",
        size_text(s.size_bytes),
        size_text(s.zone_bytes),
        s.fill_percent,
        s.btrfs_fill_percent
    )
}

fn resilver_figures(settings: Option<ResilverSettings>) -> String {
    let Some(s) = settings else { return "Medians over the rounds.".to_owned() };
    format!(
        "Medians of {} rounds, two ZNS mirror members of {} and a conventional spare, the mirror holding {}.",
        s.rounds,
        size_text(s.size_bytes),
        size_text(s.data_bytes)
    )
}

fn table(rows: &[&Row]) -> String {
    let mut out = String::from(
        "| job | ours | figure | anchor | figure | ratio | target |\n| --- | --- | ---: | --- | ---: | ---: | --- |\n",
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            cell(&row.job),
            cell(&row.ours_label),
            value_text(&row.unit, row.ours),
            cell(&row.anchor_label),
            value_text(&row.unit, row.anchor),
            ratio_cell(row),
            row.target.map_or(String::new(), target_text)
        );
    }
    if rows.iter().any(|row| row.paired_ratio.is_some()) {
        out += "\nRatios are of the medians; *paired* is the median of each round's own ratio, the two sides run \
                back to back, and a target judges it.\n";
    }
    out
}

/// A table cell: a `|` in the text would end it.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// A figure in the bench's unit, as the bench prints it.
fn value_text(unit: &str, value: Option<f64>) -> String {
    let Some(v) = value else { return "–".to_owned() };
    match unit {
        "iops" => format!("{v:.0} IOPS"),
        "mib_s" => format!("{v:.1} MiB/s"),
        "flatness" => format!("{v:.3}"),
        "queue_depth" => format!("QD {v:.1}"),
        "s" => format!("{v:.1} s"),
        "bytes" => format!("{:.1} MiB", v / f64::from(1 << 20)),
        other => format!("{v} {other}"),
    }
}

/// Three decimals below 10, so that a ratio just under a target does not
/// print as the target (the bench's rule).
fn ratio_text(ratio: f64) -> String {
    if ratio < 10.0 {
        format!("{ratio:.3}×")
    } else {
        format!("{ratio:.2}×")
    }
}

fn ratio_cell(row: &Row) -> String {
    match (row.ratio, row.paired_ratio) {
        (None, None) => String::new(),
        (Some(ratio), None) => ratio_text(ratio),
        (None, Some(paired)) => format!("paired {}", ratio_text(paired)),
        (Some(ratio), Some(paired)) => format!("{} (paired {})", ratio_text(ratio), ratio_text(paired)),
    }
}

fn target_text(target: Target) -> String {
    let (bound, met) = match target {
        Target::Ratio { at_least, met } => (format!("≥ {at_least}×"), met),
        Target::Minimum { at_least, met } => (format!("ours ≥ {at_least}"), met),
    };
    let verdict = match met {
        Some(true) => "met",
        Some(false) => "**missed**",
        None => "not judged",
    };
    format!("{bound}, {verdict}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A run of every area, cut down to two or three rows each.
    fn fixture() -> Value {
        json!({
            "environment": {
                "date": "2026-12-06 10:05 UTC",
                "source": { "commit": "0123456789abcdef0123456789abcdef01234567", "modified": ["driver/src/a.rs"] },
                "host": { "cpu": "AMD EPYC", "cores": 2, "qemu": "QEMU emulator version 7.2.22" },
                "guest": { "vcpus": 2, "mem_bytes": 3u64 << 30, "accel": "tcg", "details": { "kernel": "6.1.0" } },
            },
            "runtime_s": 125.4,
            "driver": {
                "settings": { "rounds": 7, "time_s": 10, "size_bytes": 256u64 << 20, "precondition": ["perf"] },
                "jobs": [{ "title": "4 KiB random read, QD1" }],
            },
            "zoned": {
                "settings": { "size_bytes": 4u64 << 30, "zone_bytes": 64u64 << 20, "fill_percent": 90.0,
                              "btrfs_fill_percent": 70.0 },
            },
            "table": [
                { "job": "4 KiB random read, QD1", "unit": "iops",
                  "ours": { "label": "perf --rw randread --bs 4k --qd 1", "value": 15774.2 },
                  "kernel": { "label": "fio, io_uring --hipri, polled", "value": 11217.7 },
                  "ratio": 1.40619, "target": null },
                { "job": "4 KiB random read, QD1, against the floor", "unit": "iops",
                  "ours": { "label": "perf --rw randread --bs 4k --qd 1", "value": 15774.2 },
                  "kernel": { "label": "the same with --engine raw", "value": 15950.0 },
                  "ratio": 0.98898, "paired_ratio": 0.99112,
                  "target": { "ratio_at_least": 0.97, "met": true } },
                { "job": "seqwrite 256K QD1, 90% fill", "unit": "mib_s",
                  "ours": { "label": "seqwrite", "value": 142.46 },
                  "kernel": { "label": "btrfs zoned, the seed's fio job, 70% fill", "value": 132.36 },
                  "ratio": 1.0763, "target": { "ratio_at_least": 2.0, "met": false } },
                { "job": "seqwrite flatness, QD1", "unit": "flatness",
                  "ours": { "label": "seqwrite", "value": 1.0522 },
                  "kernel": { "label": "btrfs zoned", "value": 0.99059 },
                  "ratio": null, "target": { "ours_at_least": 0.95, "met": true } },
                { "job": "scrub against its ablation", "unit": "mib_s",
                  "ours": { "label": "scrub --no-verify", "value": 5974.0 },
                  "kernel": { "label": "scrub QD1 submit-and-wait, 64K (ours)", "value": 712.2 },
                  "ratio": 8.3877, "target": { "ratio_at_least": 3.0, "met": true } },
                { "job": "scrub, verifying", "unit": "mib_s",
                  "ours": { "label": "scrub --qd 64", "value": 551.0 },
                  "kernel": { "label": "btrfs scrub | start -B", "value": null },
                  "ratio": null, "target": { "ratio_at_least": 2.0, "met": null } },
                { "job": "resilver verifying: reads in flight", "unit": "queue_depth",
                  "ours": { "label": "mean, of 64", "value": 1.62 },
                  "kernel": { "label": "scrub, verifying: mean QD", "value": 1.1 }, "ratio": 1.4727 },
                { "job": "something new", "unit": "s",
                  "ours": { "label": "ours", "value": 12.26 },
                  "kernel": { "label": "theirs", "value": 1.0 }, "ratio": 12.26 },
            ],
        })
    }

    #[test]
    fn a_run_byte_for_byte() {
        let run = Run::from_json(&fixture()).unwrap();
        let expected = "\
Date: **2026-12-06 10:05 UTC**; commit: `0123456` with 1 file(s) modified under driver/, examples/ or hack/; the run took 2 min 5 s.
Machine: host AMD EPYC, 2 cores, QEMU emulator version 7.2.22; guest TCG, 2 vCPUs, 3 GiB, kernel 6.1.0.

## The driver

Medians of 7 rounds of 10 s per side, on 256 MiB conventional namespaces written once first. Ours is `perf` (vfio-pci, polled); its anchors are fio on the guest kernel's nvme driver and, where the run has them, ours with PRPs only (`--sgl never`) and the floor (`--engine raw`).

| job | ours | figure | anchor | figure | ratio | target |
| --- | --- | ---: | --- | ---: | ---: | --- |
| 4 KiB random read, QD1 | perf --rw randread --bs 4k --qd 1 | 15774 IOPS | fio, io_uring --hipri, polled | 11218 IOPS | 1.406× |  |
| 4 KiB random read, QD1, against the floor | perf --rw randread --bs 4k --qd 1 | 15774 IOPS | the same with --engine raw | 15950 IOPS | 0.989× (paired 0.991×) | ≥ 0.97×, met |

Ratios are of the medians; *paired* is the median of each round's own ratio, the two sides run back to back, and a target judges it.

## The allocator

One run of each, on 4 GiB ZNS namespaces of 64 MiB zones; seqwrite and raw fio write 90% of theirs, btrfs 70%. Ours is `seqwrite` through the zoned allocator; its anchors are btrfs in zoned mode (the seed's fio job), fio on the raw zoned namespace, and ablations of our own.

| job | ours | figure | anchor | figure | ratio | target |
| --- | --- | ---: | --- | ---: | ---: | --- |
| seqwrite 256K QD1, 90% fill | seqwrite | 142.5 MiB/s | btrfs zoned, the seed's fio job, 70% fill | 132.4 MiB/s | 1.076× | ≥ 2×, **missed** |
| seqwrite flatness, QD1 | seqwrite | 1.052 | btrfs zoned | 0.991 |  | ours ≥ 0.95, met |

## The scrub

One run of each, over data that seqwrite wrote. Ours is `scrub`; its anchors are `btrfs scrub` of as much data, fio's sequential reads, `perf` over the same blocks, and an ablation of our own.

| job | ours | figure | anchor | figure | ratio | target |
| --- | --- | ---: | --- | ---: | ---: | --- |
| scrub against its ablation | scrub --no-verify | 5974.0 MiB/s | scrub QD1 submit-and-wait, 64K (ours) | 712.2 MiB/s | 8.388× | ≥ 3×, met |
| scrub, verifying | scrub --qd 64 | 551.0 MiB/s | btrfs scrub \\| start -B | – |  | ≥ 2×, not judged |

## The resilver

Medians over the rounds. Ours is `volume replace`; its anchors are our `perf` on the same devices and our scrub of the same volume.

| job | ours | figure | anchor | figure | ratio | target |
| --- | --- | ---: | --- | ---: | ---: | --- |
| resilver verifying: reads in flight | mean, of 64 | QD 1.6 | scrub, verifying: mean QD | QD 1.1 | 1.473× |  |

## Other rows

Rows of the run that no area above claims.

| job | ours | figure | anchor | figure | ratio | target |
| --- | --- | ---: | --- | ---: | ---: | --- |
| something new | ours | 12.3 s | theirs | 1.0 s | 12.26× |  |
";
        assert_eq!(render(&[run]), expected);
    }

    #[test]
    fn what_is_not_recorded_says_so() {
        let run = Run::from_json(&json!({ "table": [] })).unwrap();
        assert_eq!(render(&[run]), "Date: not recorded; commit: not recorded.\nMachine: not recorded.\n");
        let run = Run::from_json(&json!({
            "table": [],
            "environment": { "source": { "commit": "abc" }, "guest": { "vcpus": 2 } },
        }))
        .unwrap();
        assert_eq!(render(&[run]), "Date: not recorded; commit: `abc`.\nMachine: host not recorded; guest 2 vCPUs.\n");
    }

    #[test]
    fn two_runs_one_after_the_other() {
        let run = Run::from_json(&json!({ "table": [], "environment": { "date": "d" } })).unwrap();
        let one = render(std::slice::from_ref(&run));
        assert_eq!(render(&[run.clone(), run]), format!("{one}\n{one}"));
    }

    #[test]
    fn figures_as_the_bench_prints_them() {
        assert_eq!(value_text("iops", Some(5241.6)), "5242 IOPS");
        assert_eq!(value_text("mib_s", Some(2125.78)), "2125.8 MiB/s");
        assert_eq!(value_text("flatness", Some(0.99059)), "0.991");
        assert_eq!(value_text("queue_depth", Some(29.66)), "QD 29.7");
        assert_eq!(value_text("s", Some(10.94)), "10.9 s");
        assert_eq!(value_text("bytes", Some(1_395_654_656.0)), "1331.0 MiB");
        assert_eq!(value_text("furlongs", Some(2.5)), "2.5 furlongs");
        assert_eq!(value_text("iops", None), "–");
        assert_eq!(ratio_text(0.8974), "0.897×");
        assert_eq!(ratio_text(12.345), "12.35×");
        assert_eq!(duration_text(534.7), "8 min 55 s");
        assert_eq!(target_text(Target::Ratio { at_least: 0.9, met: Some(false) }), "≥ 0.9×, **missed**");
    }
}
