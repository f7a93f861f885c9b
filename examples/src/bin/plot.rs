//! plot: draws fio-format bandwidth logs (ours or fio's `--write_bw_log`)
//! as one SVG line chart, MiB/s over seconds.
//!
//! `plot --title T --out chart.svg ours=ours_bw.1.log btrfs=btrfs_bw.1.log`

use clap::Parser;
use nvme_report::svg::{line_chart, Series};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Draw fio-format bandwidth logs (time ms, KiB/s, ...) as an SVG chart.
#[derive(Parser, Debug)]
#[command(
    name = "plot",
    version,
    after_help = "--out is never one of the logs read, and an existing file there is replaced only when it is an \
                  SVG (a chart drawn before) or with --force.\n\
                  Exit status: 0 drawn; 1 a log or the chart could not be read or written; 2 a bad argument (a \
                  malformed LABEL=FILE, a log line that is not a time and a bandwidth, --out refused)."
)]
struct Args {
    /// Chart title.
    #[arg(long, default_value = "bandwidth over time")]
    title: String,
    /// Output SVG file.
    #[arg(long)]
    out: PathBuf,
    /// Replace --out even when it holds something other than an SVG.
    #[arg(long)]
    force: bool,
    /// LABEL=FILE, one per line of the chart.
    #[arg(required = true)]
    logs: Vec<String>,
}

/// Parses fio's log lines `time_ms, value, direction, bs[, offset]`:
/// times and bandwidths finite and not negative.
fn parse_log(text: &str) -> Result<Vec<(f64, f64)>, String> {
    let number = |field: Option<&str>, what: &str, n: usize| {
        field
            .and_then(|f| f.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or(format!("line {}: bad {what} (expected a finite number, 0 or more)", n + 1))
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, line)| {
            let mut fields = line.split(',').map(str::trim);
            let time = number(fields.next(), "time", n)?;
            let kib_s = number(fields.next(), "value", n)?;
            Ok((time / 1000.0, kib_s / 1024.0))
        })
        .collect()
}

/// Why `out` may not be written, given the logs read: it is one of them,
/// or it holds something other than an SVG and `force` is not given.
fn refuse_out(out: &Path, logs: &[&str], force: bool) -> Option<String> {
    let same = |file: &str| match (std::fs::canonicalize(out), std::fs::canonicalize(file)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if let Some(file) = logs.iter().find(|f| same(f)) {
        return Some(format!("--out {}: it is {file}, one of its own inputs", out.display()));
    }
    let held = std::fs::read(out).ok()?;
    let svg = String::from_utf8_lossy(&held[..held.len().min(256)]).trim_start().starts_with("<svg");
    (!svg && !force).then(|| format!("--out {}: the file exists and is not an SVG; --force replaces it", out.display()))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut specs = Vec::new();
    for spec in &args.logs {
        let Some(pair) = spec.split_once('=') else {
            eprintln!("plot: {spec:?}: expected LABEL=FILE");
            return ExitCode::from(2);
        };
        specs.push(pair);
    }
    let files: Vec<&str> = specs.iter().map(|&(_, file)| file).collect();
    if let Some(why) = refuse_out(&args.out, &files, args.force) {
        eprintln!("plot: {why}");
        return ExitCode::from(2);
    }
    let mut series = Vec::new();
    for (label, file) in specs {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("plot: {file}: {e}");
                return ExitCode::FAILURE;
            }
        };
        match parse_log(&text) {
            Ok(points) => series.push(Series { label: label.to_string(), points }),
            Err(e) => {
                eprintln!("plot: {file}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Err(e) = std::fs::write(&args.out, line_chart(&args.title, "time (s)", "MiB/s", &series)) {
        eprintln!("plot: {}: {e}", args.out.display());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fio_logs() {
        let points = parse_log("1000, 2048, 1, 262144, 0\n2000, 1024, 1, 262144\n").unwrap();
        assert_eq!(points, vec![(1.0, 2.0), (2.0, 1.0)]);
        assert!(parse_log("x, 1").is_err());
        for odd in ["1, NaN", "1, inf", "1, -2", "-1, 2"] {
            assert!(parse_log(odd).is_err(), "{odd}");
        }
    }
}
