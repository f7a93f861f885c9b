//! What a commit costs, on the simulator: metadata bytes written per commit
//! (the simulator counts every logical block written; a commit writes only
//! metadata, so the count during `commit()` is its cost, rotations
//! included), and commit latency (median, p99, max: the allocator's and the
//! simulated controller's CPU time, the same work on any machine).
//!
//! Each commit follows `--writes` writes of `--bs`; when the volume fills,
//! the oldest half of the extents is freed, committed and reclaimed, so the
//! run goes on as long as asked. Profiles: single ZNS, dup ZNS, and a mirror
//! of a ZNS and a conventional namespace.
//!
//! ```text
//! cargo run --release -p zoned-allocator --example commit_cost -- [--commits N] [--writes K] [--bs BYTES] [--json]
//! ```

use nvme_driver::sim::{SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zoned_allocator::{Device, DeviceOptions, Error, Profile, ReclaimProgress, Volume, VolumeOptions};

struct Args {
    commits: usize,
    writes: usize,
    bs: usize,
    json: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args { commits: 2000, writes: 4, bs: 64 << 10, json: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            let value = it.next().ok_or(format!("{name} needs a value"))?;
            value.parse().ok().filter(|&n| n > 0).ok_or(format!("{name} {value}: expected a positive integer"))
        };
        match arg.as_str() {
            "--commits" => args.commits = number("--commits")?,
            "--writes" => args.writes = number("--writes")?,
            "--bs" => args.bs = number("--bs")?,
            "--json" => args.json = true,
            "-h" | "--help" => {
                println!("commit_cost [--commits N (2000)] [--writes K (4)] [--bs BYTES (65536)] [--json]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other} (see --help)")),
        }
    }
    if !args.bs.is_multiple_of(4096) || args.bs > 1 << 20 {
        return Err(format!("--bs {}: expected a multiple of 4096 up to 1 MiB", args.bs));
    }
    Ok(args)
}

/// 256 MiB, 4 MiB zones, 512-byte LBAs.
fn zoned() -> SimConfig {
    SimConfig::zoned(256 << 11, 512, 4 << 11, 4 << 11)
}

fn conventional() -> SimConfig {
    SimConfig::nvm(256 << 11, 512)
}

fn device(sim: &Arc<Simulator>) -> Device {
    let controller = Controller::init(sim.clone(), ControllerOptions::default()).expect("bring-up");
    Device::open(&controller, 1, DeviceOptions::default()).expect("a device")
}

struct Figures {
    profile: &'static str,
    commits: usize,
    checkpoints: u64,
    metadata_bytes_per_commit: f64,
    commit_us_median: f64,
    commit_us_p99: f64,
    commit_us_max: f64,
}

fn run(profile: Profile, name: &'static str, args: &Args) -> Result<Figures, Error> {
    let sims: Vec<Arc<Simulator>> = match profile {
        Profile::Mirror => vec![Simulator::new(zoned()), Simulator::new(conventional())],
        _ => vec![Simulator::new(zoned())],
    };
    let devices = sims.iter().map(device).collect();
    let options = VolumeOptions { profile, software_zone_bytes: Some(4 << 20), ..VolumeOptions::default() };
    let mut volume = Volume::format(devices, &options)?;
    let written = |sims: &[Arc<Simulator>]| sims.iter().map(|s| s.stats().lbas_written).sum::<u64>();
    let data = vec![0x5Au8; args.bs];
    let mut live = VecDeque::new();
    let mut latencies = Vec::with_capacity(args.commits);
    let mut metadata_lbas = 0u64;
    while latencies.len() < args.commits {
        for _ in 0..args.writes {
            match volume.write(0, &data, 0) {
                Ok(id) => live.push_back(id),
                Err(Error::NoSpace(_)) => {
                    for _ in 0..live.len() / 2 {
                        volume.free(live.pop_front().expect("live extents"))?;
                    }
                    volume.commit()?;
                    while !matches!(volume.reclaim_step(1 << 16)?, ReclaimProgress::Idle) {}
                }
                Err(error) => return Err(error),
            }
        }
        let before = written(&sims);
        let started = Instant::now();
        volume.commit()?;
        latencies.push(started.elapsed());
        metadata_lbas += written(&sims) - before;
    }
    latencies.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| us(latencies[((latencies.len() - 1) as f64 * q).round() as usize]);
    Ok(Figures {
        profile: name,
        commits: latencies.len(),
        checkpoints: volume.stats().checkpoints,
        metadata_bytes_per_commit: metadata_lbas as f64 * 512.0 / latencies.len() as f64,
        commit_us_median: at(0.5),
        commit_us_p99: at(0.99),
        commit_us_max: us(*latencies.last().expect("commits")),
    })
}

fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("commit_cost: {message}");
            std::process::exit(2);
        }
    };
    let mut rows = Vec::new();
    for (profile, name) in [(Profile::Single, "single"), (Profile::Dup, "dup"), (Profile::Mirror, "mirror")] {
        match run(profile, name, &args) {
            Ok(figures) => rows.push(figures),
            Err(error) => {
                eprintln!("commit_cost: {name}: {error}");
                std::process::exit(1);
            }
        }
    }
    if args.json {
        let rows: Vec<String> = rows
            .iter()
            .map(|f| {
                format!(
                    "{{\"profile\":\"{}\",\"commits\":{},\"checkpoints\":{},\"metadata_bytes_per_commit\":{:.0},\
                     \"commit_us_median\":{:.1},\"commit_us_p99\":{:.1},\"commit_us_max\":{:.1}}}",
                    f.profile,
                    f.commits,
                    f.checkpoints,
                    f.metadata_bytes_per_commit,
                    f.commit_us_median,
                    f.commit_us_p99,
                    f.commit_us_max
                )
            })
            .collect();
        println!("[{}]", rows.join(","));
        return;
    }
    println!("profile  commits  checkpoints  metadata B/commit  commit µs median  p99  max");
    for f in &rows {
        println!(
            "{:<8} {:>7} {:>12} {:>18.0} {:>17.1} {:>4.1} {:>4.1}",
            f.profile,
            f.commits,
            f.checkpoints,
            f.metadata_bytes_per_commit,
            f.commit_us_median,
            f.commit_us_p99,
            f.commit_us_max
        );
    }
}
