//! The report: the side-by-side rows and their targets, the tables, the
//! JSON, the SVG chart, the header with the environment, and what a
//! failed run shows.

use super::*;

impl Unit {
    pub(super) fn key(self) -> &'static str {
        match self {
            Unit::Iops => "iops",
            Unit::MibS => "mib_s",
            Unit::Flatness => "flatness",
            Unit::Depth => "queue_depth",
            Unit::Seconds => "s",
            Unit::Bytes => "bytes",
        }
    }

    pub(super) fn format(self, value: Option<f64>) -> String {
        match value {
            None => "-".into(),
            Some(v) => match self {
                Unit::Iops => format!("{v:.0} IOPS"),
                Unit::MibS => format!("{v:.1} MiB/s"),
                Unit::Flatness => format!("{v:.3}"),
                Unit::Depth => format!("QD {v:.1}"),
                Unit::Seconds => format!("{v:.1} s"),
                Unit::Bytes => format!("{:.1} MiB", v / f64::from(1 << 20)),
            },
        }
    }
}

impl Row {
    pub(super) fn new(
        job: String,
        ours_label: String,
        ours: Option<f64>,
        kernel_label: String,
        kernel: Option<f64>,
        unit: Unit,
    ) -> Self {
        Row { job, ours_label, ours, kernel_label, kernel, unit, target: None, baseline_ours: false, paired: None }
    }

    pub(super) fn paired(mut self, ratio: Option<f64>) -> Self {
        self.paired = ratio;
        self
    }

    pub(super) fn target(mut self, ratio: f64) -> Self {
        self.target = Some(Target::Ratio(ratio));
        self
    }

    pub(super) fn minimum(mut self, value: f64) -> Self {
        self.target = Some(Target::Minimum(value));
        self
    }

    pub(super) fn baseline_is_ours(mut self) -> Self {
        self.baseline_ours = true;
        self
    }

    /// Ours over the other side; flatness is compared by value, not ratio.
    pub(super) fn ratio(&self) -> Option<f64> {
        match (self.unit, self.ours, self.kernel) {
            (Unit::Flatness, ..) => None,
            (_, Some(ours), Some(kernel)) if kernel > 0.0 => Some(ours / kernel),
            _ => None,
        }
    }

    pub(super) fn met(&self) -> Option<bool> {
        match self.target? {
            Target::Ratio(at_least) => Some(self.paired.or(self.ratio())? >= at_least),
            Target::Minimum(at_least) => Some(self.ours? >= at_least),
        }
    }

    pub(super) fn target_text(&self) -> String {
        let verdict = match self.met() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "n/a",
        };
        match self.target {
            None => String::new(),
            Some(Target::Ratio(r)) => format!(">= {r}x {verdict}"),
            Some(Target::Minimum(m)) => format!("ours >= {m} {verdict}"),
        }
    }

    pub(super) fn to_json(&self) -> Value {
        json!({
            "job": self.job,
            "unit": self.unit.key(),
            "ours": { "label": self.ours_label, "value": self.ours },
            "kernel": { "label": self.kernel_label, "value": self.kernel },
            "baseline": if self.baseline_ours { "ours" } else { "kernel" },
            "ratio": self.ratio(),
            "paired_ratio": self.paired,
            "target": self.target.map(|t| match t {
                Target::Ratio(r) => json!({ "ratio_at_least": r, "met": self.met() }),
                Target::Minimum(m) => json!({ "ours_at_least": m, "met": self.met() }),
            }),
        })
    }
}

/// The driver's rows: our median against each kernel side's median, with
/// the targets of the queue-pair work.
pub(super) fn driver_rows(results: &[JobResult]) -> Vec<Row> {
    let mut rows = Vec::new();
    for result in results {
        let job = &JOBS[result.job];
        let unit = match job.metric {
            Metric::Iops => Unit::Iops,
            Metric::MibS => Unit::MibS,
        };
        let median = |side| result.summary(side).map(|s| s.median.metric(job.metric));
        for side in job.sides().into_iter().filter(|s| !matches!(s, Side::Ours | Side::OursPrp | Side::Floor)) {
            let row = Row::new(
                job.title.to_owned(),
                format!("perf --rw {} --bs {} --qd {}", job.rw, job.bs, job.qd),
                median(Side::Ours),
                format!("fio, {}", job.side_label(side).trim_start_matches("kernel ")),
                median(side),
                unit,
            );
            rows.push(match (job.name, side) {
                ("randread-4k-qd32", Side::KernelPolled) => row.target(3.0),
                ("write-256k-qd1" | "read-512k-qd32", Side::KernelIrq) => row.target(2.0),
                _ => row,
            });
        }
        if job.prp_baseline && result.summary(Side::OursPrp).is_some() {
            rows.push(
                Row::new(
                    format!("{}, SGLs against PRPs", job.title),
                    format!("perf --rw {} --bs {} --qd {}", job.rw, job.bs, job.qd),
                    median(Side::Ours),
                    "the same with --sgl never".into(),
                    median(Side::OursPrp),
                    unit,
                )
                .baseline_is_ours(),
            );
        }
        if result.summary(Side::Floor).is_some() {
            rows.push(
                Row::new(
                    format!("{}, against the floor", job.title),
                    format!("perf --rw {} --bs {} --qd {}", job.rw, job.bs, job.qd),
                    median(Side::Ours),
                    "the same with --engine raw".into(),
                    median(Side::Floor),
                    unit,
                )
                .baseline_is_ours()
                .paired(result.paired_ratio(Side::Floor))
                .target(FLOOR_RATIO_MIN),
            );
        }
    }
    rows
}

/// What ours must reach of the floor, job by job.
pub(super) const FLOOR_RATIO_MIN: f64 = 0.97;

/// The side-by-side table, kernel comparisons first.
pub(super) fn render_rows(rows: &[Row]) -> String {
    let mut out = String::new();
    for (baseline_ours, heading) in
        [(false, "Ours against the kernel, one boot"), (true, "Ours against our own baselines")]
    {
        let section: Vec<&Row> = rows.iter().filter(|r| r.baseline_ours == baseline_ours).collect();
        if section.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{heading}\n");
        // The paired column only where some row has one (the baselines
        // run back to back with ours).
        let paired = section.iter().any(|r| r.paired.is_some());
        let column = |text: String| if paired { format!(" {text:>7}") } else { String::new() };
        let _ = writeln!(
            out,
            "  {:<36} {:>14} {:>14} {:>7}{}  {:<17} compared with",
            "job",
            "ours",
            if baseline_ours { "baseline" } else { "kernel" },
            "ratio",
            column("paired".into()),
            "target",
        );
        for row in section {
            let _ = writeln!(
                out,
                "  {:<36} {:>14} {:>14} {:>7}{}  {:<17} {}",
                row.job,
                row.unit.format(row.ours),
                row.unit.format(row.kernel),
                ratio_text(row.ratio()),
                column(ratio_text(row.paired)),
                row.target_text(),
                row.kernel_label
            );
        }
        if paired {
            let _ = writeln!(
                out,
                "\n  ratio: of the medians; paired: the median of each round's own ratio, the two run back to \
                 back (a target judges this one)"
            );
        }
    }
    out
}

/// The chart: ours and the other side per row (each row scaled to its own
/// larger value), then bandwidth over time of the write runs.
pub(super) fn render_svg(rows: &[Row], line_charts: Vec<zoned::LineChart>) -> String {
    let bars: Vec<(String, Vec<f64>)> = rows
        .iter()
        .filter_map(|row| {
            let unit = match row.unit {
                Unit::Iops => "IOPS",
                Unit::MibS => "MiB/s",
                Unit::Flatness => "flatness",
                Unit::Depth => "mean queue depth",
                Unit::Seconds => "s",
                Unit::Bytes => "bytes",
            };
            let ratio = row.ratio().map_or(String::new(), |r| format!(": {}", ratio_text(Some(r))));
            let label = format!("{} ({unit}) vs {}{ratio}", row.job, row.kernel_label);
            Some((label, vec![row.ours?, row.kernel?]))
        })
        .collect();
    let mut charts =
        vec![svg::bar_chart("hack/bench: ours against the kernel, one VM boot", "", &["ours", "other side"], &bars)];
    for (title, lines) in line_charts {
        let series: Vec<svg::Series> = lines.into_iter().map(|(label, points)| svg::Series { label, points }).collect();
        charts.push(svg::line_chart(&title, "time (s)", "MiB/s", &series));
    }
    svg::stack(&charts)
}

pub(super) fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / f64::from(1 << 30))
}

pub(super) fn format_count(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

pub(super) fn range(min: f64, max: f64) -> String {
    format!("{}-{}", format_count(min), format_count(max))
}

pub(super) fn ratio_text(ratio: Option<f64>) -> String {
    // Three decimals below 10, so that a ratio just under a target does not
    // print as the target.
    ratio.map_or_else(|| "-".into(), |r| if r < 10.0 { format!("{r:.3}x") } else { format!("{r:.2}x") })
}

/// Date, settings, host, guest and source lines above the tables.
pub(super) fn render_header(options: &Options, environment: &Value) -> String {
    let text = |value: &Value| value.as_str().unwrap_or("unknown").to_owned();
    let (host, guest, source) = (&environment["host"], &environment["guest"]["details"], &environment["source"]);
    let modified = source["modified"].as_array().map_or(0, Vec::len);
    let mut out = String::new();
    let _ = writeln!(out, "hack/bench, {}", text(&environment["date"]));
    if options.parts.driver() {
        let _ = writeln!(
            out,
            "driver: {} round(s) of {} s per run on {} conventional namespaces; {}",
            options.rounds,
            options.time_s,
            format_size(options.size_bytes),
            if options.precondition { "both written once first" } else { "not preconditioned" }
        );
    }
    if options.parts.zoned() {
        let z = &options.zoned;
        let _ = writeln!(
            out,
            "zoned: {} ZNS namespaces of {} zones; seqwrite and raw-zbd write {:.0}%, btrfs {:.0}%; {}",
            format_size(z.size),
            format_size(z.zone),
            z.fill,
            z.btrfs_fill,
            if z.ablations { "with the ablations" } else { "no ablations" }
        );
    }
    if options.parts.resilver() {
        let r = &options.resilver;
        let _ = writeln!(
            out,
            "resilver: {} round(s); two ZNS members of {} ({} zones) and a conventional spare; the mirror holds {}",
            r.rounds,
            format_size(r.size),
            format_size(r.zone_bytes()),
            resilver::mib(r.data_bytes())
        );
    }
    let _ = writeln!(
        out,
        "host: {}, {} cores, {}; guest: {}{}",
        text(&host["cpu"]),
        host["cores"],
        text(&host["qemu"]),
        text(&guest["kernel"]),
        // The resilver's guest runs no fio.
        guest.get("fio").map_or(String::new(), |fio| format!(", {}", text(fio)))
    );
    let _ = writeln!(
        out,
        "source: commit {}{}",
        text(&source["commit"]),
        if modified > 0 {
            format!(" with {modified} modified file(s) under driver/, examples/, hack/")
        } else {
            String::new()
        }
    );
    out
}

pub(super) fn render_tables(results: &[JobResult], options: &Options) -> String {
    let mut out = String::new();
    for result in results {
        let job = &JOBS[result.job];
        let _ = writeln!(
            out,
            "\n{} ({}): median of {} round(s) of {} s, (min-max)",
            job.title, job.name, options.rounds, options.time_s
        );
        let _ = writeln!(
            out,
            "  {:<32} {:>8} {:>15} {:>8} {:>13} {:>9} {:>9} {:>9} {:>7}",
            "side", "IOPS", "(min-max)", "MiB/s", "(min-max)", "mean us", "p50 us", "p99 us", "busy*"
        );
        for (side, samples) in &result.sides {
            let s = result.summary(*side).expect("listed side");
            let disturbed = samples.iter().filter(|s| s.load.is_some_and(HostLoad::disturbed)).count();
            let _ = writeln!(
                out,
                "  {:<32} {:>8} {:>15} {:>8} {:>13} {:>9.1} {:>9.1} {:>9.1} {:>7}",
                job.side_label(*side),
                format_count(s.median.iops),
                format!("({})", range(s.min.iops, s.max.iops)),
                format_count(s.median.mib_s),
                format!("({})", range(s.min.mib_s, s.max.mib_s)),
                s.median.mean_us,
                s.median.p50_us,
                s.median.p99_us,
                format!("{disturbed}/{}", samples.len())
            );
        }
        let metric = match job.metric {
            Metric::Iops => "IOPS",
            Metric::MibS => "MiB/s",
        };
        let _ = writeln!(
            out,
            "  ours/kernel irq: {}   ours/kernel polled: {}   ours/PRPs only: {}   ours/floor: {}   ({metric}, \
             medians)",
            ratio_text(result.ratio(Side::KernelIrq)),
            ratio_text(result.ratio(Side::KernelPolled)),
            ratio_text(result.ratio(Side::OursPrp)),
            ratio_text(result.ratio(Side::Floor))
        );
        if let Some(paired) = result.paired_ratio(Side::Floor) {
            let _ = writeln!(
                out,
                "  ours/floor round by round, back to back: median {} ({metric}); ours' mean latency less the \
                 floor's: median {:+.1} us",
                ratio_text(Some(paired)),
                result.paired_latency_difference_us(Side::Floor).unwrap_or(f64::NAN)
            );
        }
    }
    let _ = writeln!(
        out,
        "\n* busy: rounds in which other host processes or the hypervisor took more than {:.0}% of the \
         host's CPU time",
        HostLoad::DISTURBED * 100.0
    );
    out
}

/// The driver half as JSON: settings, and every job's sides with their
/// medians, ranges, rounds and commands.
pub(super) fn render_json(results: &[JobResult], runs: &[Run], options: &Options) -> Value {
    let jobs: Vec<Value> = results
        .iter()
        .map(|result| {
            let job = &JOBS[result.job];
            let sides: Vec<Value> = result
                .sides
                .iter()
                .map(|(side, samples)| {
                    let summary = result.summary(*side).expect("listed side");
                    let command = runs
                        .iter()
                        .find(|r| r.job == Some(result.job) && r.side == *side)
                        .map(|r| r.command.join(" "))
                        .unwrap_or_default();
                    json!({
                        "side": side.key(),
                        "label": job.side_label(*side),
                        "command": command,
                        "median": summary.median.to_json(),
                        "min": summary.min.to_json(),
                        "max": summary.max.to_json(),
                        "rounds": samples.iter().map(|s| s.to_json()).collect::<Vec<_>>(),
                    })
                })
                .collect();
            json!({
                "name": job.name,
                "title": job.title,
                "metric": match job.metric { Metric::Iops => "iops", Metric::MibS => "mib_s" },
                "sides": sides,
                "ratio_ours_kernel_irq": result.ratio(Side::KernelIrq),
                "ratio_ours_kernel_polled": result.ratio(Side::KernelPolled),
                "ratio_ours_prp_only": result.ratio(Side::OursPrp),
                "ratio_ours_floor": result.ratio(Side::Floor),
                "paired_ratio_ours_floor": result.paired_ratio(Side::Floor),
                "paired_mean_latency_ours_less_floor_us": result.paired_latency_difference_us(Side::Floor),
            })
        })
        .collect();
    let precondition: Vec<String> = runs.iter().filter(|r| r.job.is_none()).map(|r| r.command.join(" ")).collect();
    json!({
        "settings": {
            "rounds": options.rounds,
            "time_s": options.time_s,
            "size_bytes": options.size_bytes,
            "precondition": precondition,
        },
        "jobs": jobs,
    })
}

/// `YYYY-MM-DD HH:MM UTC` for a Unix time: days since 1970-01-01 to a
/// proleptic Gregorian date, counting in 400-year eras that start on
/// 1 March so that leap days fall at the end of a year.
pub(super) fn utc_date(unix_s: u64) -> String {
    let days = (unix_s / 86400) as i64;
    let seconds_of_day = unix_s % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", seconds_of_day / 3600, seconds_of_day % 3600 / 60)
}

/// The commit the tools were built from, and the files under `driver/`,
/// `examples/` and `hack/` that differ from it (results of a modified tree
/// cannot be reproduced from the commit alone).
pub(super) fn source_tree() -> Value {
    let root = vm_rig::workspace_root();
    let git = |args: &[&str]| {
        host_command(Command::new("git").arg("-C").arg(&root).args(args), GIT_TIMEOUT)
            .ok()
            .filter(|out| out.status.success())
            .map(|out| out.stdout)
    };
    let commit = git(&["rev-parse", "HEAD"]).map(|s| s.trim().to_owned());
    let modified: Vec<String> = git(&["status", "--porcelain", "--", "driver", "examples", "hack"])
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.get(3..).map(str::to_owned))
        .collect();
    json!({ "commit": commit, "modified": modified })
}

/// What the host is: QEMU's version, CPU model and count, kernel.
pub(super) fn host_environment() -> Value {
    let qemu = host_command(Command::new("qemu-system-x86_64").arg("--version"), QEMU_VERSION_TIMEOUT)
        .map(|out| out.stdout.lines().next().unwrap_or_default().to_owned())
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown", |(_, model)| model.trim());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    json!({
        "qemu": qemu,
        "cpu": cpu,
        "cores": cores,
        "kernel": kernel.trim(),
    })
}

/// What failed, from the guest's output: the failed run with its stderr
/// (its `bench-note` lines) and stdout, or the output's last lines when the
/// script itself failed.
pub(super) fn failure_report(output: &str, status: i32, runs: &[Run], rounds: u32) -> String {
    const TAIL_LINES: usize = 60;
    let lines: Vec<&str> = output.lines().collect();
    let failed = lines.iter().enumerate().find_map(|(at, line)| match classify(line) {
        Line::Failed(tag, text) => Some((at, tag, text)),
        _ => None,
    });
    let Some((at, tag, text)) = failed else {
        let tail = &lines[lines.len().saturating_sub(TAIL_LINES)..];
        return format!("the guest script exited with status {status}; its output ends with:\n{}", tail.join("\n"));
    };
    let stderr: Vec<&str> = lines[..at]
        .iter()
        .filter_map(|line| match classify(line) {
            Line::Note(note_tag, note) if note_tag == tag => Some(note),
            _ => None,
        })
        .collect();
    let stdout = &lines[at + 1..(at + 1 + TAIL_LINES).min(lines.len())];
    format!(
        "{} failed with {text}\nstderr:\n{}\nstdout:\n{}",
        describe_tag(tag, runs, rounds),
        stderr.join("\n"),
        stdout.join("\n")
    )
}
