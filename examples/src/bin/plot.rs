//! plot: draws fio-format bandwidth logs (ours or fio's `--write_bw_log`)
//! as one SVG line chart, MiB/s over seconds.
//!
//! `plot --title T --out chart.svg ours=ours_bw.1.log btrfs=btrfs_bw.1.log`

use clap::Parser;
use nvme_report::svg::{line_chart, Series};
use std::path::PathBuf;
use std::process::ExitCode;

/// Draw fio-format bandwidth logs (time ms, KiB/s, ...) as an SVG chart.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Chart title.
    #[arg(long, default_value = "bandwidth over time")]
    title: String,
    /// Output SVG file.
    #[arg(long)]
    out: PathBuf,
    /// LABEL=FILE, one per line of the chart.
    #[arg(required = true)]
    logs: Vec<String>,
}

/// Parses fio's log lines `time_ms, value, direction, bs[, offset]`.
fn parse_log(text: &str) -> Result<Vec<(f64, f64)>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, line)| {
            let mut fields = line.split(',').map(str::trim);
            let time: f64 = fields.next().and_then(|f| f.parse().ok()).ok_or(format!("line {}: bad time", n + 1))?;
            let kib_s: f64 = fields.next().and_then(|f| f.parse().ok()).ok_or(format!("line {}: bad value", n + 1))?;
            Ok((time / 1000.0, kib_s / 1024.0))
        })
        .collect()
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut series = Vec::new();
    for spec in &args.logs {
        let Some((label, file)) = spec.split_once('=') else {
            eprintln!("plot: {spec:?}: expected LABEL=FILE");
            return ExitCode::from(2);
        };
        let points = match std::fs::read_to_string(file).map_err(|e| e.to_string()).and_then(|t| parse_log(&t)) {
            Ok(points) => points,
            Err(e) => {
                eprintln!("plot: {file}: {e}");
                return ExitCode::FAILURE;
            }
        };
        series.push(Series { label: label.to_string(), points });
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
    }
}
