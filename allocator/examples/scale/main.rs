//! The allocator's metadata at scale, on the simulator: for each capacity
//! and extent size, a volume on a simulated ZNS namespace that keeps its
//! data as seeds (`nvme_driver::sim::synthetic`) is filled with extents,
//! committing every few writes, then reopened, checkpointed and reopened
//! again. Per (capacity, extent size) it reports the heap the open volume
//! holds, commit latency and bytes (median, p99, max), the checkpoint's
//! size and time, and open times.
//!
//! Timings are this machine's CPU time for the allocator and the simulated
//! controller together; memory and bytes are exact counts. A point whose
//! peak memory, projected from the one before it, would not fit the
//! budget is skipped and says so.
//!
//! ```text
//! cargo run --release -p zoned-allocator --example scale -- [--capacities 64G,256G,1T,2T]
//!     [--extents 16K,256K,4M] [--commit-every N] [--fill PERCENT] [--zone-size SIZE]
//!     [--metadata BYTES] [--memory-budget SIZE] [--json FILE]
//! ```
//! `hack/bench --only scale` runs it.

mod heap;
mod run;

use run::{size, Row, Settings};

#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

struct Args {
    capacities: Vec<u64>,
    extents: Vec<u64>,
    settings: Settings,
    memory_budget_bytes: u64,
    /// Where the rows go as JSON, besides the table on stdout.
    json: Option<String>,
}

const USAGE: &str = "scale [--capacities LIST (64G,256G,1T,2T)] [--extents LIST (16K,256K,4M)] [--commit-every N (64)]
      [--fill PERCENT (90)] [--zone-size SIZE (256M)] [--metadata BYTES (8)] [--checksums KIND (auto)]
      [--opens N (1)] [--memory-budget SIZE (80% of available)] [--json FILE]

For each extent size, fills a simulated ZNS volume of each capacity and reports the heap the
open volume holds, commit latency and bytes, the checkpoint, and open times. --metadata is the
namespace's per-block metadata (0, 8, 16 or 64 bytes; 4096+8 is the common enterprise format):
with it the volume keeps each block's checksum there (block tags), with 0 in its extent map. --checksums
area keeps them after each zone's data instead, on any namespace (auto, area, map or tags). Sizes take K, M,
G, T (powers of 1024). --opens N opens the filled volume N times with its log and reports the
median too (memory is measured on the first). The table goes to stdout, progress to stderr; --json FILE also writes
the settings and one row per point as JSON.";

/// A size above zero (`nvme_report::size` reads the suffixes).
fn parse_size(text: &str) -> Result<u64, String> {
    match nvme_report::size::parse_size(text) {
        Ok(0) => Err(format!("{text:?}: out of range")),
        Ok(bytes) => Ok(bytes),
        Err(error) => Err(error.to_string()),
    }
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        capacities: vec![64 << 30, 256 << 30, 1 << 40, 2 << 40],
        extents: vec![16 << 10, 256 << 10, 4 << 20],
        settings: Settings {
            commit_every: 64,
            fill_percent: 90,
            zone_bytes: 256 << 20,
            sim_memory_bytes: 64 << 30,
            metadata_bytes: 8,
            opens: 1,
            checksums: zoned_allocator::ChecksumStore::Auto,
        },
        memory_budget_bytes: heap::available_bytes() / 10 * 8,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--capacities" => {
                args.capacities = value("--capacities")?.split(',').map(parse_size).collect::<Result<_, _>>()?
            }
            "--extents" => args.extents = value("--extents")?.split(',').map(parse_size).collect::<Result<_, _>>()?,
            "--commit-every" => {
                let text = value("--commit-every")?;
                args.settings.commit_every =
                    text.parse().ok().filter(|&n| n > 0).ok_or(format!("--commit-every {text}: expected N > 0"))?;
            }
            "--fill" => {
                let text = value("--fill")?;
                args.settings.fill_percent =
                    text.parse().ok().filter(|p| (1..=100).contains(p)).ok_or(format!("--fill {text}: 1 to 100"))?;
            }
            "--zone-size" => args.settings.zone_bytes = parse_size(&value("--zone-size")?)?,
            "--metadata" => {
                let text = value("--metadata")?;
                args.settings.metadata_bytes = text
                    .parse()
                    .ok()
                    .filter(|b| [0, 8, 16, 64].contains(b))
                    .ok_or(format!("--metadata {text}: expected 0, 8, 16 or 64"))?;
            }
            "--checksums" => {
                let text = value("--checksums")?;
                args.settings.checksums = match text.as_str() {
                    "auto" => zoned_allocator::ChecksumStore::Auto,
                    "area" => zoned_allocator::ChecksumStore::Area,
                    "map" => zoned_allocator::ChecksumStore::Map,
                    "tags" => zoned_allocator::ChecksumStore::Tags,
                    _ => return Err(format!("--checksums {text}: expected auto, area, map or tags")),
                };
            }
            "--opens" => {
                let text = value("--opens")?;
                args.settings.opens =
                    text.parse().ok().filter(|&n| n > 0).ok_or(format!("--opens {text}: expected N > 0"))?;
            }
            "--memory-budget" => args.memory_budget_bytes = parse_size(&value("--memory-budget")?)?,
            "--json" => args.json = Some(value("--json")?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other} (see --help)")),
        }
    }
    // An extent is written by one command, of at most 4 MiB here (see
    // `run::MAX_TRANSFER_BYTES`).
    for &extent in &args.extents {
        if !extent.is_multiple_of(4096) || extent == 0 || extent > 4 << 20 {
            return Err(format!("extent size {extent}: a multiple of 4 KiB up to 4 MiB"));
        }
    }
    if !args.settings.zone_bytes.is_multiple_of(4096) || args.settings.zone_bytes < 1 << 20 {
        return Err("--zone-size: a multiple of 4 KiB, at least 1 MiB".into());
    }
    for &capacity in &args.capacities {
        if capacity < 64 * args.settings.zone_bytes {
            return Err(format!(
                "capacity {}: at least 64 zones of {}",
                size(capacity),
                size(args.settings.zone_bytes)
            ));
        }
    }
    args.capacities.sort_unstable();
    Ok(args)
}

/// A point measured, or skipped with the reason; a row of the JSON.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Point {
    Measured(Box<Row>),
    Skipped {
        capacity_bytes: u64,
        extent_bytes: u64,
        #[serde(rename = "skipped")]
        why: String,
    },
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

fn print_header() {
    println!(
        "{:>9} {:>7} {:>10} {:>9} {:>8} {:>22} {:>24} {:>10} {:>8} {:>8} {:>8} {:>7}",
        "capacity",
        "extent",
        "extents",
        "mem MiB",
        "MiB/TiB",
        "commit ms med/p99/max",
        "commit KiB med/p99/max",
        "ckpt MiB",
        "ckpt s",
        "open s",
        "open2 s",
        "fill s"
    );
}

fn print_point(point: &Point) {
    {
        match point {
            Point::Skipped { capacity_bytes, extent_bytes, why } => {
                println!("{:>9} {:>7} skipped: {why}", size(*capacity_bytes), size(*extent_bytes))
            }
            Point::Measured(r) => {
                let tib = r.data_bytes as f64 / (1u64 << 40) as f64;
                println!(
                    "{:>9} {:>7} {:>10} {:>9.1} {:>8.1} {:>22} {:>24} {:>10.1} {:>8.2} {:>8.2} {:>8.2} {:>7.0}",
                    size(r.capacity_bytes),
                    size(r.extent_bytes),
                    r.extents,
                    mib(r.memory_bytes),
                    mib(r.memory_bytes) / tib,
                    format!("{:.2}/{:.2}/{:.1}", r.commit_median_ms, r.commit_p99_ms, r.commit_max_ms),
                    format!(
                        "{:.0}/{:.0}/{:.0}",
                        r.commit_median_bytes as f64 / 1024.0,
                        r.commit_p99_bytes as f64 / 1024.0,
                        r.commit_max_bytes as f64 / 1024.0
                    ),
                    mib(r.checkpoint_bytes),
                    r.checkpoint_seconds,
                    r.open_seconds,
                    r.open_after_checkpoint_seconds,
                    r.fill_seconds
                );
            }
        }
    }
}

fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("scale: {message}");
            std::process::exit(2);
        }
    };
    let mut points = Vec::new();
    print_header();
    for &extent in &args.extents {
        let mut previous: Option<Row> = None;
        for &capacity in &args.capacities {
            if let Some(before) = &previous {
                let projected = before.peak_rss_bytes as f64 * capacity as f64 / before.capacity_bytes as f64;
                if projected > args.memory_budget_bytes as f64 {
                    let skipped = Point::Skipped {
                        capacity_bytes: capacity,
                        extent_bytes: extent,
                        why: format!(
                            "peak memory projected from {} at {}: {:.1} GiB, over the budget of {:.1} GiB",
                            size(before.capacity_bytes),
                            mib(before.peak_rss_bytes) as u64,
                            projected / f64::from(1 << 30),
                            args.memory_budget_bytes as f64 / f64::from(1 << 30)
                        ),
                    };
                    print_point(&skipped);
                    points.push(skipped);
                    write_json(&args, &points);
                    continue;
                }
            }
            eprintln!("scale: {} × {}", size(capacity), size(extent));
            match run::run(capacity, extent as usize, &args.settings) {
                Ok(row) => {
                    previous = Some(row.clone());
                    let point = Point::Measured(Box::new(row));
                    print_point(&point);
                    points.push(point);
                    // Rewritten after every point: a long run that stops
                    // keeps what it measured.
                    write_json(&args, &points);
                }
                Err(error) => {
                    eprintln!("scale: {} × {}: {error}", size(capacity), size(extent));
                    std::process::exit(1);
                }
            }
        }
    }
}

/// Writes the settings and the points so far to `--json`, if given.
fn write_json(args: &Args, points: &[Point]) {
    if let Some(path) = &args.json {
        let document = serde_json::json!({
            "settings": {
                "commit_every": args.settings.commit_every,
                "fill_percent": args.settings.fill_percent,
                "zone_bytes": args.settings.zone_bytes,
                "memory_budget_bytes": args.memory_budget_bytes,
            },
            "rows": points,
        });
        let text = serde_json::to_string(&document).expect("rows serialize") + "\n";
        if let Err(error) = std::fs::write(path, text) {
            eprintln!("scale: {path}: {error}");
            std::process::exit(1);
        }
    }
}
