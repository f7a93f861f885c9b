//! `hack/bench-zoned`: sequential writes through our zoned allocator next
//! to btrfs in zoned mode and to raw fio, on identical ZNS controllers in
//! one VM boot.
//!
//! Controller 0 is ours (vfio-pci, `seqwrite`); controller 1 carries a
//! zoned btrfs on the guest kernel's nvme driver, written by the seed's fio
//! job; controller 2 is written raw by fio with `--zonemode=zbd` (no file
//! system, no checksums), the ceiling of the kernel path. Every side
//! writes 256 KiB blocks sequentially at queue depth 1, as the seed's job.
//! Ours writes the largest share of its namespace (`--fill`, default 95%);
//! btrfs writes what a zoned btrfs of that size holds comfortably
//! (`--btrfs-fill`, default 70%: its metadata and system block groups take
//! zones of their own). See BENCHMARKS.md.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use vm_rig::{format_size, parse_size, Controller, Vm};

const USAGE: &str = "\
usage: hack/bench-zoned [--size SIZE] [--zone SIZE] [--fill PERCENT]
                        [--btrfs-fill PERCENT] [--iodepth N] [--json FILE]
                        [--plot FILE.svg] [--skip-btrfs] [--timeout SECONDS]

Boots ONE VM (QEMU TCG, q35, 2 vCPUs, 3 GiB) with three identical ZNS
controllers (backing images on /dev/shm, removed afterwards) and runs,
one after the other:

  ours          seqwrite --bs 256k --iodepth 1 (checksums on two worker
                threads), FILL of the namespace, flatness of the bandwidth
  ours-inline   the same with checksums on the writing thread, to measure
                the time checksums take
  ours-hw-crc   the same with the SSE4.2 crc32c forced (the faster table
                implementation is what the calibration picks under TCG)
  ours-qdN      the same at --iodepth N (default 8)
  btrfs         mkfs.btrfs -O zoned; the seed's fio job (libaio, QD1,
                --fallocate=none, 256k) writing BTRFS-FILL of the namespace
  btrfs-qdN     the same job at --iodepth N on a fresh file system
  raw-zbd       fio --zonemode=zbd on the block device, FILL of it
  btrfs-scrub   btrfs scrub start -B on the btrfs-qdN file system
  scrub         seqwrite puts as much data as btrfs held on our namespace
                (QD8), then our scrub at QD64 with verification,
  scrub-no-verify  without it (plan, merge, read, account),
  scrub-ablation   at QD1 submit-and-wait with 64 KiB reads, no verification,
  perf-read     perf reading the same LBAs once, 512 KiB at QD64,
  fio-read      fio on the kernel driver, 512 KiB sequential reads, QD32

and prints MiB/s, flatness, the ratios, and writes the same as JSON
(--json) and bandwidth over time as SVG (--plot).

Options:
  --size SIZE          each namespace (default 4G)
  --zone SIZE          zone size (default 64M)
  --fill PERCENT       share of the namespace ours and raw-zbd write (95)
  --btrfs-fill PERCENT share btrfs writes (70)
  --iodepth N          queue depth of the ours-qdN run (8)
  --json FILE          write the results as JSON
  --plot FILE          write bandwidth over time as SVG
  --skip-btrfs         leave out the btrfs run
  --timeout SECONDS    hard limit on the VM (default 1800)
  -h, --help           this text";

const OURS_PCI: &str = "0000:00:10.0";
const BTRFS_DEVICE: &str = "/dev/ctrl1n1";
const RAW_DEVICE: &str = "/dev/ctrl2n1";
const FIO: &str = "/usr/bin/fio";
const MKFS: &str = "/usr/sbin/mkfs.btrfs";
const BTRFS: &str = "/usr/bin/btrfs";

struct Options {
    size: u64,
    zone: u64,
    fill: f64,
    btrfs_fill: f64,
    iodepth: u32,
    json: Option<String>,
    plot: Option<String>,
    skip_btrfs: bool,
    timeout_s: u64,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        size: 4 << 30,
        zone: 64 << 20,
        fill: 95.0,
        btrfs_fill: 70.0,
        iodepth: 8,
        json: None,
        plot: None,
        skip_btrfs: false,
        timeout_s: 1800,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--size" => options.size = parse_size(&value()?).map_err(|e| format!("--size: {e}"))?,
            "--zone" => options.zone = parse_size(&value()?).map_err(|e| format!("--zone: {e}"))?,
            "--fill" => options.fill = value()?.parse().map_err(|_| "--fill: a percentage")?,
            "--btrfs-fill" => options.btrfs_fill = value()?.parse().map_err(|_| "--btrfs-fill: a percentage")?,
            "--iodepth" => options.iodepth = value()?.parse().map_err(|_| "--iodepth: a number")?,
            "--json" => options.json = Some(value()?),
            "--plot" => options.plot = Some(value()?),
            "--skip-btrfs" => options.skip_btrfs = true,
            "--timeout" => options.timeout_s = value()?.parse().map_err(|_| "--timeout: seconds")?,
            other => return Err(format!("unknown option {other}\n\n{USAGE}")),
        }
    }
    if !(1.0..=100.0).contains(&options.fill) || !(1.0..=100.0).contains(&options.btrfs_fill) {
        return Err("--fill and --btrfs-fill are percentages".into());
    }
    if options.zone == 0 || !options.size.is_multiple_of(options.zone) {
        return Err("--size must be a multiple of --zone".into());
    }
    Ok(options)
}

/// Bytes for `percent` of `size`, in whole 256 KiB writes.
fn share(size: u64, percent: f64) -> u64 {
    (size as f64 * percent / 100.0) as u64 / (256 << 10) * (256 << 10)
}

fn guest_script(options: &Options) -> String {
    let ours = share(options.size, options.fill);
    let btrfs = share(options.size, options.btrfs_fill);
    let seqwrite = |key: &str, extra: &str| {
        format!(
            "echo '== {key}' >&2; seqwrite --pci {OURS_PCI} --format --yes --bs 256k --size {ours} --iodepth 1 \
             --json --write-log /tmp/{key} {extra} > /tmp/{key}.json || exit 1; echo \"BENCH {key} $(cat /tmp/{key}.json)\"\n"
        )
    };
    let mut script = String::from("set -u\nmkdir -p /mnt\n");
    script += &seqwrite("ours", "--checksum-threads 2");
    script += &seqwrite("ours-inline", "--checksum-threads 0");
    script += &seqwrite("ours-hw-crc", "--checksum-threads 2 --crc32c hardware");
    script += &seqwrite(&format!("ours-qd{}", options.iodepth), "--checksum-threads 2")
        .replace("--iodepth 1 ", &format!("--iodepth {} ", options.iodepth));
    if !options.skip_btrfs {
        for (key, depth) in [("btrfs", 1), (&*format!("btrfs-qd{}", options.iodepth), options.iodepth)] {
            script += &format!(
                "echo '== {key}' >&2; {MKFS} -f -O zoned {BTRFS_DEVICE} > /tmp/mkfs.log 2>&1 || {{ cat /tmp/mkfs.log; exit 1; }}\n\
                 mount -t btrfs {BTRFS_DEVICE} /mnt || exit 1\n\
                 cd /mnt && {FIO} --filename=/mnt/testfile --direct=1 --rw=write --bs=256k --ioengine=libaio \
                 --iodepth={depth} --fallocate=none --write_bw_log=/tmp/{key} --log_avg_msec=1000 --size={btrfs} \
                 --name=seed --output-format=json > /tmp/{key}.json || {{ cat /tmp/{key}.json; exit 1; }}\n\
                 cd / && echo \"BENCH {key} $(tr -d '\\n' < /tmp/{key}.json)\"\n\
                 sed 's/^/BWLOG {key} /' /tmp/{key}_bw.1.log\n"
            );
            if depth != 1 {
                script += &format!(
                    "echo '== btrfs-scrub' >&2; sync; t0=$(cut -d' ' -f1 /proc/uptime)\n\
                     {BTRFS} scrub start -B /mnt > /tmp/btrfs-scrub.txt 2>&1 || {{ cat /tmp/btrfs-scrub.txt; exit 1; }}\n\
                     t1=$(cut -d' ' -f1 /proc/uptime)\n\
                     sed 's/^/BTRFS-SCRUB /' /tmp/btrfs-scrub.txt; echo \"BTRFS-SCRUB-TIME $t0 $t1\"\n"
                );
            }
            script += "umount /mnt\n";
        }
    }
    script += &format!(
        "echo '== raw-zbd' >&2; {FIO} --filename={RAW_DEVICE} --direct=1 --rw=write --bs=256k --ioengine=libaio \
         --iodepth=1 --zonemode=zbd --size={ours} --write_bw_log=/tmp/raw --log_avg_msec=1000 --name=raw \
         --output-format=json > /tmp/raw.json || {{ cat /tmp/raw.json; exit 1; }}\n\
         echo \"BENCH raw-zbd $(tr -d '\\n' < /tmp/raw.json)\"\n\
         sed 's/^/BWLOG raw-zbd /' /tmp/raw_bw.1.log\n"
    );
    // Scrub: the same amount of data as btrfs holds, written by seqwrite at
    // QD8; then our scrub with and without verification, the ablation, and
    // perf reading the same LBAs; fio reads the raw device.
    script += &format!(
        "echo '== scrub-prep' >&2; seqwrite --pci {OURS_PCI} --format --yes --bs 256k --size {btrfs} --iodepth 8 \
         --checksum-threads 2 --json > /tmp/prep.json || exit 1\n\
         offset=$(sed -n 's/.*\"data_offset_bytes\":\\([0-9]*\\).*/\\1/p' /tmp/prep.json)\n\
         echo '== scrub' >&2; scrub --pci {OURS_PCI} --qd 64 --json > /tmp/scrub.json || exit 1\n\
         echo \"BENCH scrub $(cat /tmp/scrub.json)\"\n\
         echo '== scrub-no-verify' >&2; scrub --pci {OURS_PCI} --qd 64 --no-verify --json > /tmp/scrub-nv.json || exit 1\n\
         echo \"BENCH scrub-no-verify $(cat /tmp/scrub-nv.json)\"\n\
         echo '== scrub-ablation' >&2; scrub --pci {OURS_PCI} --no-verify --submit-and-wait --bs 64k --json \
         > /tmp/scrub-ab.json || exit 1\n\
         echo \"BENCH scrub-ablation $(cat /tmp/scrub-ab.json)\"\n\
         echo '== perf-read' >&2; perf --pci {OURS_PCI} --rw read --bs 512k --qd 64 --time 30 --io-bytes {btrfs} --offset $offset \
         --size {btrfs} --json > /tmp/perf.json || exit 1\n\
         echo \"BENCH perf-read $(cat /tmp/perf.json)\"\n\
         echo '== fio-read' >&2; {FIO} --filename={RAW_DEVICE} --direct=1 --rw=read --bs=512k --ioengine=io_uring \
         --iodepth=32 --size={btrfs} --name=read --output-format=json > /tmp/fio-read.json || exit 1\n\
         echo \"BENCH fio-read $(tr -d '\\n' < /tmp/fio-read.json)\"\n"
    );
    let btrfs_log = if options.skip_btrfs { "" } else { " btrfs=/tmp/btrfs_bw.1.log" };
    script += &format!(
        "plot --title 'sequential 256 KiB writes, QD1, one ZNS namespace each' --out /tmp/chart.svg \
         ours=/tmp/ours_bw.1.log{btrfs_log} raw-zbd=/tmp/raw_bw.1.log && sed 's/^/SVG /' /tmp/chart.svg\n"
    );
    script
}

/// btrfs-progs' sizes: `2.80GiB`, `300.00MiB`, `4.00KiB`, `512B`.
fn parse_btrfs_size(text: &str) -> Option<u64> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match unit.trim() {
        "B" => 1u64,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    Some((number * scale as f64) as u64)
}

/// fio's write bandwidth in MiB/s from its JSON output.
fn fio_mib_s(report: &Value) -> Option<f64> {
    let job = report.get("jobs")?.get(0)?;
    Some(job.get("write")?.get("bw_bytes")?.as_f64()? / f64::from(1 << 20))
}

fn fio_bytes(report: &Value) -> Option<u64> {
    report.get("jobs")?.get(0)?.get("write")?.get("io_bytes")?.as_u64()
}

/// The flatness of a fio bandwidth log: mean of the last 10% of intervals
/// over the first 10%.
fn flatness(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let k = (values.len() / 10).max(1);
    let first: f64 = values[..k].iter().sum::<f64>() / k as f64;
    let last: f64 = values[values.len() - k..].iter().sum::<f64>() / k as f64;
    (first > 0.0).then(|| last / first)
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("bench-zoned: {message}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    // Backing images in memory (tmpfs) when there is room: flushes then
    // cost nothing on the host's shared disk, on every side alike.
    let images = std::path::PathBuf::from(format!("/dev/shm/bench-zoned-{}", std::process::id()));
    let use_shm = std::fs::create_dir(&images).is_ok();
    let controller = || Controller::zns(options.size, options.zone);
    let mut vm = Vm::new();
    if use_shm {
        vm = vm.images(&images);
    }
    let vm = vm
        .smp(2)
        .mem(3 << 30)
        .controller(controller())
        .controller(controller().kernel())
        .controller(controller().kernel())
        .kernel_module("btrfs")
        .host_program(FIO)
        .host_program(MKFS)
        .host_program(BTRFS)
        .timeout(Duration::from_secs(options.timeout_s))
        .on_line(move |line| {
            if let Some(step) = line.strip_prefix("== ") {
                eprintln!("[{:6.1} s] {step}", started.elapsed().as_secs_f64());
            }
        });
    eprintln!(
        "bench-zoned: 3 ZNS controllers of {} with {} zones; building the guest tools and booting",
        format_size(options.size),
        format_size(options.zone)
    );
    let outcome = vm.run(&["sh", "-c", &guest_script(&options)]);
    if use_shm {
        let _ = std::fs::remove_dir_all(&images);
    }
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("bench-zoned: {e}");
            return ExitCode::from(2);
        }
    };
    if outcome.status != 0 {
        eprintln!("bench-zoned: the guest script failed ({}):\n{}", outcome.status, outcome.output);
        return ExitCode::FAILURE;
    }
    let mut results = serde_json::Map::new();
    let mut svg = String::new();
    let mut btrfs_scrub_lines: Vec<String> = Vec::new();
    let mut btrfs_scrub_seconds = f64::NAN;
    let mut bw_logs: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for line in outcome.output.lines() {
        if let Some(rest) = line.strip_prefix("BTRFS-SCRUB-TIME ") {
            let times: Vec<f64> = rest.split_whitespace().filter_map(|t| t.parse().ok()).collect();
            if let [t0, t1] = times[..] {
                btrfs_scrub_seconds = t1 - t0;
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("BTRFS-SCRUB ") {
            btrfs_scrub_lines.push(rest.trim().to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("BWLOG ") {
            if let Some((key, entry)) = rest.split_once(' ') {
                if let Some(kib_s) = entry.split(',').nth(1).and_then(|v| v.trim().parse::<f64>().ok()) {
                    bw_logs.entry(key.to_owned()).or_default().push(kib_s / 1024.0);
                }
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("BENCH ") {
            if let Some((key, body)) = rest.split_once(' ') {
                // fio may print notes before its JSON.
                let body = body.find('{').map_or(body, |at| &body[at..]);
                match serde_json::from_str::<Value>(body) {
                    Ok(value) => {
                        results.insert(key.to_owned(), value);
                    }
                    Err(e) => eprintln!("bench-zoned: {key}: unreadable JSON ({e})"),
                }
            }
        } else if let Some(rest) = line.strip_prefix("SVG ") {
            svg.push_str(rest);
            svg.push('\n');
        }
    }
    results.insert("btrfs-scrub".into(), json!({"output": btrfs_scrub_lines, "seconds": btrfs_scrub_seconds}));
    let ours = &results["ours"];
    let ours_mib_s = ours["mib_s"].as_f64().unwrap_or(f64::NAN);
    let mut rows: Vec<(String, f64, String)> = Vec::new();
    for key in results.keys().filter(|k| k.starts_with("ours")) {
        let r = &results[key];
        rows.push((
            key.clone(),
            r["mib_s"].as_f64().unwrap_or(f64::NAN),
            format!(
                "flatness {:.3}, {:.1}% of the namespace, lat {:.0} us",
                r["flatness"].as_f64().unwrap_or(f64::NAN),
                r["namespace_fill_percent"].as_f64().unwrap_or(f64::NAN),
                r["lat_us"]["mean"].as_f64().unwrap_or(f64::NAN)
            ),
        ));
    }
    let mut summary = serde_json::Map::new();
    let btrfs_qd = format!("btrfs-qd{}", options.iodepth);
    for key in ["btrfs", btrfs_qd.as_str(), "raw-zbd"] {
        if let Some(report) = results.get(key) {
            let mib_s = fio_mib_s(report).unwrap_or(f64::NAN);
            let bytes = fio_bytes(report).unwrap_or(0);
            // fio's last interval is partial: leave it out of flatness.
            let log = bw_logs.get(key).map(|l| &l[..l.len().saturating_sub(1)]).unwrap_or(&[]);
            let flat = flatness(log);
            rows.push((
                key.to_owned(),
                mib_s,
                format!(
                    "flatness {:.3}, {:.1}% of the namespace written",
                    flat.unwrap_or(f64::NAN),
                    bytes as f64 / options.size as f64 * 100.0
                ),
            ));
            summary.insert(format!("{key}_flatness"), json!(flat));
            summary.insert(format!("{key}_mib_s"), json!(mib_s));
            summary.insert(format!("ours_over_{key}"), json!(ours_mib_s / mib_s));
        }
    }
    let inline = &results.get("ours-inline");
    if let Some(inline) = inline {
        let seconds = inline["seconds"].as_f64().unwrap_or(f64::NAN);
        let checksum = inline["checksum_seconds_on_writer"].as_f64().unwrap_or(f64::NAN);
        summary.insert("checksum_share_inline".into(), json!(checksum / seconds));
    }
    // Scrub.
    let scrub_row = |key: &str| -> Option<(f64, String)> {
        let r = &results.get(key)?["report"];
        Some((
            r["rate_mib_s"].as_f64()?,
            format!(
                "{:.0} MiB read, mean QD {:.1}, mean request {:.0} KiB, {} checksum errors",
                r["bytes_read"].as_f64()? / f64::from(1 << 20),
                r["mean_queue_depth"].as_f64()?,
                r["mean_request_bytes"].as_f64()? / 1024.0,
                r["errors"]["checksum"]
            ),
        ))
    };
    let mut scrub_rates = BTreeMap::new();
    for key in ["scrub", "scrub-no-verify", "scrub-ablation"] {
        if let Some((rate, notes)) = scrub_row(key) {
            rows.push((key.to_owned(), rate, notes));
            scrub_rates.insert(key, rate);
        }
    }
    if let Some(perf) = results.get("perf-read") {
        let rate = perf["mib_s"].as_f64().unwrap_or(f64::NAN);
        rows.push(("perf-read".into(), rate, "512 KiB sequential reads, QD64, one pass over the same LBAs".into()));
        scrub_rates.insert("perf-read", rate);
    }
    if let Some(fio) = results.get("fio-read") {
        let rate = fio
            .get("jobs")
            .and_then(|j| j.get(0))
            .and_then(|j| j["read"]["bw_bytes"].as_f64())
            .map_or(f64::NAN, |b| b / f64::from(1 << 20));
        rows.push(("fio-read".into(), rate, "kernel, io_uring 512 KiB sequential reads, QD32".into()));
        scrub_rates.insert("fio-read", rate);
    }
    let total_line = btrfs_scrub_lines.iter().find(|l| l.starts_with("Total to scrub:"));
    let btrfs_total = total_line.and_then(|l| parse_btrfs_size(l.trim_start_matches("Total to scrub:").trim()));
    if let Some(total) = btrfs_total {
        let rate = total as f64 / f64::from(1 << 20) / btrfs_scrub_seconds;
        let reported = btrfs_scrub_lines.iter().find(|l| l.starts_with("Rate:")).cloned().unwrap_or_default();
        rows.push((
            "btrfs-scrub".into(),
            rate,
            format!(
                "{:.0} MiB in {:.1} s (btrfs says {reported})",
                total as f64 / f64::from(1 << 20),
                btrfs_scrub_seconds
            ),
        ));
        scrub_rates.insert("btrfs-scrub", rate);
    }
    for (name, over, under) in [
        ("scrub_over_btrfs_scrub", "scrub", "btrfs-scrub"),
        ("scrub_no_verify_over_perf_read", "scrub-no-verify", "perf-read"),
        ("scrub_no_verify_over_fio_read", "scrub-no-verify", "fio-read"),
        ("scrub_no_verify_over_ablation", "scrub-no-verify", "scrub-ablation"),
    ] {
        if let (Some(a), Some(b)) = (scrub_rates.get(over), scrub_rates.get(under)) {
            summary.insert(name.into(), json!(a / b));
        }
    }
    let ours_qd = format!("ours-qd{}", options.iodepth);
    if let (Some(ours), Some(btrfs)) = (results.get(&ours_qd), results.get(&btrfs_qd)) {
        let ratio = ours["mib_s"].as_f64().unwrap_or(f64::NAN) / fio_mib_s(btrfs).unwrap_or(f64::NAN);
        summary.insert(format!("ours_qd{0}_over_btrfs_qd{0}", options.iodepth), json!(ratio));
    }
    summary.insert("ours_mib_s".into(), json!(ours_mib_s));
    summary.insert("ours_flatness".into(), ours["flatness"].clone());
    println!(
        "\nsequential 256 KiB writes, one boot, identical {} ZNS namespaces ({} zones)",
        format_size(options.size),
        format_size(options.zone)
    );
    println!("{:<14} {:>10}  notes", "job", "MiB/s");
    for (job, mib_s, notes) in &rows {
        println!("{job:<14} {mib_s:>10.1}  {notes}");
    }
    for (key, value) in &summary {
        println!("{key}: {}", value.as_f64().map_or(value.to_string(), |v| format!("{v:.3}")));
    }
    let report = json!({
        "date": std::process::Command::new("date").arg("-u").arg("+%Y-%m-%dT%H:%M:%SZ").output().ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()),
        "size_bytes": options.size,
        "zone_bytes": options.zone,
        "fill_percent": options.fill,
        "btrfs_fill_percent": options.btrfs_fill,
        "summary": summary,
        "results": results,
        "vm_seconds": outcome.elapsed.as_secs_f64(),
    });
    if let Some(path) = &options.json {
        if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&report).unwrap_or_default()) {
            eprintln!("bench-zoned: {path}: {e}");
            return ExitCode::from(2);
        }
    }
    if let Some(path) = &options.plot {
        if let Err(e) = std::fs::write(path, &svg) {
            eprintln!("bench-zoned: {path}: {e}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
