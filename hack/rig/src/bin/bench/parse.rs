//! Reading the guest's output: each run's JSON into a sample, the lines
//! the script prints, and the medians and ranges over the rounds.

use super::*;

impl Sample {
    pub(super) fn fields(&self) -> [f64; FIELDS] {
        [self.iops, self.mib_s, self.mean_us, self.p50_us, self.p99_us, self.p999_us]
    }

    pub(super) fn from_fields(f: [f64; FIELDS]) -> Self {
        Sample {
            iops: f[0],
            mib_s: f[1],
            mean_us: f[2],
            p50_us: f[3],
            p99_us: f[4],
            p999_us: f[5],
            bytes: 0,
            load: None,
        }
    }

    pub(super) fn metric(&self, metric: Metric) -> f64 {
        match metric {
            Metric::Iops => self.iops,
            Metric::MibS => self.mib_s,
        }
    }

    pub(super) fn to_json(self) -> Value {
        let mut value = json!({
            "iops": self.iops,
            "mib_s": self.mib_s,
            "lat_us": {
                "mean": self.mean_us,
                "p50": self.p50_us,
                "p99": self.p99_us,
                "p999": self.p999_us,
            },
        });
        if let Some(load) = self.load {
            value["host_other_cpu"] = json!(load.other);
            value["host_steal"] = json!(load.steal);
            value["host_disturbed"] = json!(load.disturbed());
        }
        value
    }
}

pub(super) fn field(value: &Value, path: &[&str]) -> Result<f64, String> {
    let mut at = value;
    for key in path {
        at = at.get(key).ok_or_else(|| format!("no {} in the output", path.join(".")))?;
    }
    at.as_f64().ok_or_else(|| format!("{} is not a number", path.join(".")))
}

/// `perf --json`: iops, mib_s, lat_us{mean,p50,p99,p999}, ios, bs, errors.
pub(super) fn parse_perf(output: &Value) -> Result<Sample, String> {
    let errors = field(output, &["errors"])?;
    if errors != 0.0 {
        return Err(format!("perf reports {errors} failed I/Os"));
    }
    let ios = field(output, &["ios"])?;
    let bs = field(output, &["bs"])?;
    Ok(Sample {
        iops: field(output, &["iops"])?,
        mib_s: field(output, &["mib_s"])?,
        mean_us: field(output, &["lat_us", "mean"])?,
        p50_us: field(output, &["lat_us", "p50"])?,
        p99_us: field(output, &["lat_us", "p99"])?,
        p999_us: field(output, &["lat_us", "p999"])?,
        bytes: (ios * bs) as u64,
        load: None,
    })
}

/// fio `--output-format=json` of one job: the read or write side's IOPS,
/// bandwidth and total (submission to completion) latency in ns.
pub(super) fn parse_fio(output: &Value, read: bool) -> Result<Sample, String> {
    let job = output.get("jobs").and_then(|jobs| jobs.get(0)).ok_or("no jobs[0] in fio's output")?;
    let error = field(job, &["error"])?;
    if error != 0.0 {
        return Err(format!("fio reports error {error}"));
    }
    let direction = if read { "read" } else { "write" };
    let side = job.get(direction).ok_or_else(|| format!("no {direction} section in fio's output"))?;
    if field(side, &["total_ios"])? == 0.0 {
        return Err(format!("fio completed no {direction}s"));
    }
    let us = |path: &[&str]| field(side, path).map(|ns| ns / 1000.0);
    Ok(Sample {
        iops: field(side, &["iops"])?,
        mib_s: field(side, &["bw_bytes"])? / f64::from(1 << 20),
        mean_us: us(&["lat_ns", "mean"])?,
        p50_us: us(&["lat_ns", "percentile", "50.000000"])?,
        p99_us: us(&["lat_ns", "percentile", "99.000000"])?,
        p999_us: us(&["lat_ns", "percentile", "99.900000"])?,
        bytes: field(side, &["io_bytes"])? as u64,
        load: None,
    })
}

/// A run's result from its `bench-result` line.
pub(super) fn parse_result(run: &Run, json_text: &str) -> Result<Sample, String> {
    // fio may print notices before its JSON.
    let start = json_text.find('{').ok_or("the run printed no JSON object")?;
    let value: Value = serde_json::from_str(&json_text[start..])
        .map_err(|e| format!("unreadable JSON from {}: {e}", run.command[0]))?;
    match (run.side, run.job) {
        (Side::Ours | Side::OursPrp | Side::Floor, _) => parse_perf(&value),
        (_, Some(job)) => parse_fio(&value, JOBS[job].is_read()),
        (_, None) => parse_fio(&value, false),
    }
}

pub(super) fn split_word(text: &str) -> (&str, &str) {
    text.split_once(' ').unwrap_or((text, ""))
}

pub(super) fn classify(line: &str) -> Line<'_> {
    let split = split_word;
    if let Some(rest) = line.strip_prefix("bench-env ") {
        let (key, value) = split(rest);
        Line::Env(key, value)
    } else if let Some(rest) = line.strip_prefix("bench-result r") {
        let (index, json) = split(rest);
        index.parse().map_or(Line::Other, |i| Line::Result(i, json))
    } else if let Some(rest) = line.strip_prefix("bench-note ") {
        let (tag, text) = split(rest);
        Line::Note(tag, text)
    } else if let Some(rest) = line.strip_prefix("bench-failed ") {
        let (tag, text) = split(rest);
        Line::Failed(tag, text)
    } else if line == "bench-done" {
        Line::Done
    } else {
        Line::Other
    }
}

pub(super) fn median(values: &mut [f64]) -> f64 {
    assert!(!values.is_empty(), "a median of nothing");
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

pub(super) fn summarize(samples: &[Sample]) -> Summary {
    let mut median_fields = [0.0; FIELDS];
    let mut min_fields = [0.0; FIELDS];
    let mut max_fields = [0.0; FIELDS];
    for index in 0..FIELDS {
        let mut values: Vec<f64> = samples.iter().map(|s| s.fields()[index]).collect();
        median_fields[index] = median(&mut values);
        min_fields[index] = values[0];
        max_fields[index] = values[values.len() - 1];
    }
    Summary {
        median: Sample::from_fields(median_fields),
        min: Sample::from_fields(min_fields),
        max: Sample::from_fields(max_fields),
    }
}

impl JobResult {
    pub(super) fn summary(&self, side: Side) -> Option<Summary> {
        self.sides.iter().find(|(s, _)| *s == side).map(|(_, samples)| summarize(samples))
    }

    /// Our median over the kernel side's median, in the job's metric.
    pub(super) fn ratio(&self, kernel: Side) -> Option<f64> {
        let metric = JOBS[self.job].metric;
        let ours = self.summary(Side::Ours)?.median.metric(metric);
        let theirs = self.summary(kernel)?.median.metric(metric);
        (theirs > 0.0).then(|| ours / theirs)
    }

    /// The median over rounds of ours over `other` in the same round, in
    /// the job's metric: with the two run back to back (as `plan` runs ours
    /// and the floor), a slow or fast spell of the host weighs on both
    /// sides of each ratio, where a ratio of medians may take its two
    /// medians from different spells.
    pub(super) fn paired_ratio(&self, other: Side) -> Option<f64> {
        let metric = JOBS[self.job].metric;
        let mut ratios: Vec<f64> = self
            .paired(other)?
            .filter(|(_, theirs)| theirs.metric(metric) > 0.0)
            .map(|(ours, theirs)| ours.metric(metric) / theirs.metric(metric))
            .collect();
        (!ratios.is_empty()).then(|| median(&mut ratios))
    }

    /// The median over rounds of ours' mean latency less `other`'s in the
    /// same round, in µs.
    pub(super) fn paired_latency_difference_us(&self, other: Side) -> Option<f64> {
        let mut differences: Vec<f64> =
            self.paired(other)?.map(|(ours, theirs)| ours.mean_us - theirs.mean_us).collect();
        (!differences.is_empty()).then(|| median(&mut differences))
    }

    /// Ours and `other`'s samples round by round (each side has one sample
    /// per round, in round order).
    fn paired(&self, other: Side) -> Option<impl Iterator<Item = (&Sample, &Sample)>> {
        let samples = |side| self.sides.iter().find(|(s, _)| *s == side).map(|(_, samples)| samples);
        let (ours, theirs) = (samples(Side::Ours)?, samples(other)?);
        debug_assert_eq!(ours.len(), theirs.len(), "one sample per side per round");
        Some(ours.iter().zip(theirs))
    }
}

pub(super) fn collect_results(runs: &[Run], output: &str, monitor: &LoadMonitor) -> Result<Vec<JobResult>, String> {
    let mut samples: Vec<Option<Sample>> = vec![None; runs.len()];
    for line in output.lines() {
        if let Line::Result(index, json) = classify(line) {
            let run = runs.get(index).ok_or_else(|| format!("a result for unknown run {index}"))?;
            let sample = parse_result(run, json).map_err(|e| format!("{}: {e}", run.describe(0)))?;
            samples[index] = Some(Sample { load: monitor.load(index), ..sample });
        }
    }
    let mut results: Vec<JobResult> = (0..JOBS.len())
        .map(|job| JobResult { job, sides: JOBS[job].sides().into_iter().map(|s| (s, Vec::new())).collect() })
        .collect();
    for (run, sample) in runs.iter().zip(samples) {
        let sample = sample.ok_or_else(|| format!("no result for {}", run.describe(0)))?;
        let Some(job) = run.job else {
            continue;
        };
        let side =
            results[job].sides.iter_mut().find(|(s, _)| *s == run.side).expect("plan() runs only a job's own sides");
        side.1.push(sample);
    }
    Ok(results)
}

/// Checks that preconditioning wrote at least the whole region on each side.
pub(super) fn check_preconditioning(runs: &[Run], output: &str, size_bytes: u64) -> Result<(), String> {
    for line in output.lines() {
        if let Line::Result(index, json) = classify(line) {
            let Some(run) = runs.get(index).filter(|r| r.job.is_none()) else {
                continue;
            };
            let sample = parse_result(run, json)?;
            if sample.bytes < size_bytes {
                return Err(format!(
                    "{} wrote {} of the {} region; it must cover all of it",
                    run.describe(0),
                    gib(sample.bytes),
                    gib(size_bytes)
                ));
            }
        }
    }
    Ok(())
}
