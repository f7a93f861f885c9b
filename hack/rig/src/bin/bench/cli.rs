//! The command line: options, their ranges, and how the run was invoked.

use super::*;

pub(super) fn parse_options(args: Vec<String>) -> Result<Option<Options>, String> {
    let mut rounds = None;
    let mut time_s = None;
    let mut quick = false;
    let mut options = Options {
        rounds: 3,
        time_s: 10,
        size_bytes: 256 << 20,
        json: None,
        svg: vm_rig::workspace_root().join("target/bench/bench.svg"),
        precondition: true,
        timeout_s: None,
        parts: Parts::Both,
        zoned: zoned::Options::defaults(false),
        resilver: resilver::Options::defaults(false),
        pool: pool::Options::defaults(false),
        scale: scale::Options::default(),
    };
    // Zoned settings given explicitly; --quick changes only the others.
    let mut zoned_size = None;
    let mut zone = None;
    let mut fill = None;
    let mut btrfs_fill = None;
    let mut iodepth = None;
    let mut zoned_metadata = None;
    let mut zoned_checksums = None;
    let mut no_ablations = false;
    let mut resilver_size = None;
    let mut resilver_fill = None;
    let (mut pool_size, mut pool_hold, mut pool_scale) = (None, None, None);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"));
        let size = |text: String, name: &str| parse_size(&text).map_err(|e| format!("{name}: {e}"));
        let percent = |text: String, name: &str| {
            text.trim_end_matches('%').parse::<f64>().map_err(|_| format!("{name}: {text:?} is not a percentage"))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--rounds" => rounds = Some(number(&value("--rounds")?, 1, ROUNDS_MAX.into())?),
            "--time" => time_s = Some(number(&value("--time")?, 1, RUN_TIME_MAX_S)?),
            "--quick" => quick = true,
            "--json" => options.json = Some(value("--json")?),
            "--svg" => options.svg = PathBuf::from(value("--svg")?),
            "--no-precondition" => options.precondition = false,
            "--size" => options.size_bytes = size(value("--size")?, "--size")?,
            "--timeout" => options.timeout_s = Some(number(&value("--timeout")?, 1, 7 * 86400)?),
            "--only" => {
                options.parts = match value("--only")?.as_str() {
                    "driver" => Parts::Driver,
                    "zoned" => Parts::Zoned,
                    "resilver" => Parts::Resilver,
                    "pool" => Parts::Pool,
                    "scale" => Parts::Scale,
                    other => return Err(format!("--only {other:?}: driver, zoned, resilver, pool or scale")),
                }
            }
            "--zoned-size" => zoned_size = Some(size(value("--zoned-size")?, "--zoned-size")?),
            "--zone" => zone = Some(size(value("--zone")?, "--zone")?),
            "--zoned-metadata" => {
                let text = value("--zoned-metadata")?;
                zoned_metadata =
                    Some(text.parse().map_err(|_| format!("--zoned-metadata {text}: expected 0, 8, 16 or 64"))?);
            }
            "--zoned-checksums" => {
                let text = value("--zoned-checksums")?;
                zoned_checksums = Some(
                    ["auto", "area", "map", "tags"]
                        .into_iter()
                        .find(|&kind| kind == text)
                        .ok_or(format!("--zoned-checksums {text}: expected auto, area, map or tags"))?,
                );
            }
            "--fill" => fill = Some(percent(value("--fill")?, "--fill")?),
            "--btrfs-fill" => btrfs_fill = Some(percent(value("--btrfs-fill")?, "--btrfs-fill")?),
            "--iodepth" => iodepth = Some(number(&value("--iodepth")?, 1, 256)? as u32),
            "--no-ablations" => no_ablations = true,
            "--resilver-size" => resilver_size = Some(size(value("--resilver-size")?, "--resilver-size")?),
            "--resilver-fill" => resilver_fill = Some(percent(value("--resilver-fill")?, "--resilver-fill")?),
            "--pool-size" => pool_size = Some(size(value("--pool-size")?, "--pool-size")?),
            "--pool-hold" => pool_hold = Some(size(value("--pool-hold")?, "--pool-hold")?),
            "--pool-scale" => pool_scale = Some(size(value("--pool-scale")?, "--pool-scale")?),
            "--scale-capacities" => options.scale.capacities = Some(value("--scale-capacities")?),
            "--scale-extents" => options.scale.extents = Some(value("--scale-extents")?),
            "--scale-metadata" => options.scale.metadata = Some(value("--scale-metadata")?),
            "--scale-checksums" => options.scale.checksums = Some(value("--scale-checksums")?),
            other => return Err(format!("unknown option {other:?}\n\n{USAGE}")),
        }
    }
    let (quick_rounds, quick_time_s) = if quick { (1, 2) } else { (3, 10) };
    options.rounds = rounds.map_or(quick_rounds, |r| r as u32);
    options.scale.quick = quick;
    options.time_s = time_s.unwrap_or(quick_time_s);
    // Every job's block size must tile the region; 512 KiB is the largest.
    let largest_bs_bytes = 512 << 10;
    if options.size_bytes < 4 * largest_bs_bytes || !options.size_bytes.is_multiple_of(largest_bs_bytes) {
        return Err(format!("--size {} must be a multiple of 512K and at least 2M", options.size_bytes));
    }
    let defaults = zoned::Options::defaults(quick);
    options.zoned = zoned::Options {
        size: zoned_size.unwrap_or(defaults.size),
        zone: zone.unwrap_or(defaults.zone),
        fill: fill.unwrap_or(defaults.fill),
        btrfs_fill: btrfs_fill.unwrap_or(defaults.btrfs_fill),
        iodepth: iodepth.unwrap_or(defaults.iodepth),
        ablations: defaults.ablations && !no_ablations,
        metadata: zoned_metadata.unwrap_or(defaults.metadata),
        checksums: zoned_checksums.unwrap_or(defaults.checksums),
    };
    options.zoned.validate()?;
    let defaults = resilver::Options::defaults(quick);
    options.resilver = resilver::Options {
        size: resilver_size.unwrap_or(defaults.size),
        fill: resilver_fill.unwrap_or(defaults.fill),
        rounds: options.rounds,
    };
    options.resilver.validate()?;
    let defaults = pool::Options::defaults(quick);
    options.pool = pool::Options {
        size: pool_size.unwrap_or(defaults.size),
        hold: pool_hold.unwrap_or(defaults.hold),
        scale: pool_scale.unwrap_or(defaults.scale),
        rounds: options.rounds,
    };
    options.pool.validate()?;
    Ok(Some(options))
}

pub(super) fn number(text: &str, min: u64, max: u64) -> Result<u64, String> {
    text.parse()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| format!("{text:?} is not a number in {min}..={max}"))
}

/// The command line as typed: `hack/bench` (which the wrapper passes in
/// `HACK_BENCH`) in place of the binary it execs.
pub(super) fn invocation(mut args: impl Iterator<Item = String>, wrapper: Option<String>) -> String {
    let program = args.next().unwrap_or_default();
    std::iter::once(wrapper.unwrap_or(program)).chain(args).collect::<Vec<_>>().join(" ")
}
