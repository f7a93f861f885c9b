//! Parsers for the tools' numeric options, for clap's `value_parser`.
//!
//! Every number is checked when the command line is parsed, so a bad value
//! stops the tool with exit status 2 before any device is opened. Clap
//! names the option in its message (`invalid value 'nan' for '--runtime
//! <SECONDS>'`); the messages here say what is accepted.

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::CommandFactory;
use nvme_report::size::parse_size;

/// Highest namespace ID a tool takes: 0 is no namespace and `0xFFFF_FFFF`
/// is the broadcast value (NVMe Base 2.0 §3.2.1.1).
pub const NSID_MAX: u64 = 0xFFFF_FFFE;

/// Most commands in flight a tool keeps on one queue pair.
pub const QUEUE_DEPTH_MAX: u64 = 1024;

/// Most worker threads a tool starts for one job.
pub const THREADS_MAX: u64 = 64;

/// Longest `--runtime`: a year, far beyond any fill, and far below what
/// `Duration::from_secs_f64` can hold.
pub const RUNTIME_S_MAX: f64 = 365.0 * 24.0 * 3600.0;

/// The scrub's rate limit range, in MiB/s. Below 1 MiB/s a scrub of any
/// real volume would run for weeks; above 1 TiB/s no device reads.
pub const RATE_MIB_S_MIN: f64 = 1.0;
/// See [`RATE_MIB_S_MIN`].
pub const RATE_MIB_S_MAX: f64 = 1024.0 * 1024.0;

/// Largest single I/O a tool takes (`--bs`): the device's own limit (MDTS,
/// the volume's largest extent) is checked once it is open.
pub const IO_BYTES_MAX: u64 = 64 << 20;

/// The unit of the allocator's blocks and extents.
pub const BLOCK_BYTES: u64 = 4096;

/// The allocator's largest software zone: 2^32 - 1 blocks of 4 KiB.
pub const SOFTWARE_ZONE_BYTES_MAX: u64 = u32::MAX as u64 * BLOCK_BYTES;

/// Largest simulated namespace or volume a tool makes.
pub const SIM_BYTES_MAX: u64 = 1 << 40;

/// The smallest logical block an NVMe namespace has.
pub const LBA_BYTES_MIN: u64 = 512;

/// Stops `tool` the way clap stops it on a bad value: the message and the
/// usage on stderr, exit status 2. For checks across options, made after
/// parsing and before any device is opened.
pub fn exit_usage_error<Args: CommandFactory>(tool: &str, message: &str) -> ! {
    Args::command().bin_name(tool).error(ErrorKind::ValueValidation, message).exit()
}

/// An integer in `min..=max`, for options whose field type is `T`.
/// Clap's message names the option and the range.
pub fn int_in<T>(min: u64, max: u64) -> RangedU64ValueParser<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: std::error::Error + Send + Sync + 'static,
{
    RangedU64ValueParser::<T>::new().range(min..=max)
}

/// A namespace ID, `1..=0xFFFF_FFFE`.
pub fn nsid(text: &str) -> Result<u32, String> {
    let value: u64 = text.trim().parse().map_err(|_| format!("expected a namespace ID, 1..={NSID_MAX}"))?;
    if !(1..=NSID_MAX).contains(&value) {
        return Err(format!("expected a namespace ID, 1..={NSID_MAX}"));
    }
    u32::try_from(value).map_err(|_| format!("expected a namespace ID, 1..={NSID_MAX}"))
}

/// A size as [`parse_size`] reads it (`4k`, `1M`, plain bytes), a multiple
/// of `unit` bytes, in `min..=max`.
pub fn size_in(unit: u64, min: u64, max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    assert!(unit > 0 && min <= max, "a size range needs a unit and min <= max");
    move |text: &str| {
        let bytes = parse_size(text).map_err(|e| e.to_string())?;
        if !bytes.is_multiple_of(unit) || !(min..=max).contains(&bytes) {
            let mut expected = Vec::new();
            if unit > 1 {
                expected.push(format!("a multiple of {unit} bytes"));
            }
            match (min, max) {
                (0, u64::MAX) => {}
                (1.., u64::MAX) if min <= unit => expected.push("more than 0".into()),
                (_, u64::MAX) => expected.push(format!("at least {}", human_size(min))),
                _ => expected.push(format!("{}..={}", human_size(min), human_size(max))),
            }
            return Err(format!("{bytes} bytes: expected {}", expected.join(", ")));
        }
        Ok(bytes)
    }
}

/// `bytes` as [`parse_size`] reads it, in the largest unit that divides it:
/// `4k`, `64M`, `1000`.
pub fn human_size(bytes: u64) -> String {
    for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("k", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A finite number in `min..=max`, or in `(min, max]` when
/// `min_excluded` (for "more than zero").
fn number_in(text: &str, min: f64, min_excluded: bool, max: f64, what: &str) -> Result<f64, String> {
    let lower = if min_excluded { format!("more than {min}") } else { format!("at least {min}") };
    let expected = || format!("expected {what}, {lower} and at most {max}");
    let value: f64 = text.trim().parse().map_err(|_| expected())?;
    // NaN fails every comparison: it is caught by is_finite, not the range.
    let above_min = if min_excluded { value > min } else { value >= min };
    if !value.is_finite() || !above_min || value > max {
        return Err(expected());
    }
    Ok(value)
}

/// A run time in seconds: finite, more than 0, at most a year.
pub fn runtime_s(text: &str) -> Result<f64, String> {
    number_in(text, 0.0, true, RUNTIME_S_MAX, "a number of seconds")
}

/// Whole seconds in `min..=max`; a fraction or anything else is refused
/// saying whole seconds are expected.
pub fn whole_seconds_in(min: u64, max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text: &str| {
        text.trim()
            .parse::<u64>()
            .ok()
            .filter(|s| (min..=max).contains(s))
            .ok_or_else(|| format!("{text}: expected whole seconds, {min}..={max}"))
    }
}

/// A rate limit in MiB/s: finite, 1..=1048576 (fractions allowed).
pub fn rate_mib_s(text: &str) -> Result<f64, String> {
    number_in(text, RATE_MIB_S_MIN, false, RATE_MIB_S_MAX, "a rate in MiB/s")
}

/// How much seqwrite writes: bytes, or a share of the volume's capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    /// This many bytes (more than 0).
    Bytes(u64),
    /// This percentage of the capacity, more than 0 and at most 100.
    Percent(f64),
}

impl Amount {
    /// The amount in bytes on a volume of `capacity_bytes`, rounded down to
    /// whole `unit`s.
    pub fn bytes(self, capacity_bytes: u64, unit: u64) -> u64 {
        assert!(unit > 0, "a write size");
        let bytes = match self {
            Amount::Bytes(bytes) => bytes,
            Amount::Percent(percent) => (capacity_bytes as f64 * percent / 100.0) as u64,
        };
        bytes / unit * unit
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Bytes(bytes) => write!(f, "{}", human_size(*bytes)),
            Amount::Percent(percent) => write!(f, "{percent}%"),
        }
    }
}

/// `N%` (more than 0, at most 100) or a size in bytes (more than 0).
pub fn amount(text: &str) -> Result<Amount, String> {
    match text.trim().strip_suffix('%') {
        Some(percent) => number_in(percent, 0.0, true, 100.0, "a percentage").map(Amount::Percent),
        None => match parse_size(text).map_err(|e| e.to_string())? {
            0 => Err("expected a size of more than 0 bytes, or a percentage (95%)".into()),
            bytes => Ok(Amount::Bytes(bytes)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_ids() {
        assert_eq!(nsid("1"), Ok(1));
        assert_eq!(nsid("4294967294"), Ok(0xFFFF_FFFE));
        for bad in ["0", "4294967295", "-1", "x", "", "1.5", "99999999999"] {
            let message = nsid(bad).unwrap_err();
            assert!(message.contains("1..=4294967294"), "{bad}: {message}");
        }
    }

    #[test]
    fn sizes_in_a_range() {
        let bs = size_in(BLOCK_BYTES, BLOCK_BYTES, IO_BYTES_MAX);
        assert_eq!(bs("4k"), Ok(4096));
        assert_eq!(bs("256k"), Ok(256 << 10));
        assert_eq!(bs("64M"), Ok(64 << 20));
        for bad in ["0", "3000", "4097", "65M", "-4k", "nan", "4q"] {
            assert!(bs(bad).is_err(), "{bad}");
        }
        assert_eq!(bs("3000").unwrap_err(), "3000 bytes: expected a multiple of 4096 bytes, 4k..=64M");
        let offset = size_in(LBA_BYTES_MIN, 0, u64::MAX);
        assert_eq!(offset("0"), Ok(0));
        assert_eq!(offset("1M"), Ok(1 << 20));
        assert!(offset("100").is_err());
        let nonzero = size_in(1, 1, u64::MAX);
        assert_eq!(nonzero("1"), Ok(1));
        assert_eq!(nonzero("0").unwrap_err(), "0 bytes: expected more than 0");
        assert_eq!(offset("100").unwrap_err(), "100 bytes: expected a multiple of 512 bytes");
        assert_eq!(
            size_in(512, 512, u64::MAX)("0").unwrap_err(),
            "0 bytes: expected a multiple of 512 bytes, more than 0"
        );
        assert_eq!(size_in(1, 4096, u64::MAX)("1").unwrap_err(), "1 bytes: expected at least 4k");
        assert_eq!(human_size(4096), "4k");
        assert_eq!(human_size(3 << 30), "3G");
        assert_eq!(human_size(1 << 40), "1T");
        assert_eq!(human_size(1000), "1000");
        assert_eq!(human_size(0), "0");
    }

    #[test]
    fn run_times() {
        assert_eq!(runtime_s("10"), Ok(10.0));
        assert_eq!(runtime_s("0.5"), Ok(0.5));
        assert_eq!(runtime_s("31536000"), Ok(RUNTIME_S_MAX));
        for bad in ["nan", "NaN", "inf", "-inf", "infinity", "0", "-0", "-1", "1e300", "31536001", "", "ten"] {
            let message = runtime_s(bad).unwrap_err();
            assert!(message.contains("more than 0 and at most 31536000"), "{bad}: {message}");
        }
    }

    #[test]
    fn rate_limits() {
        assert_eq!(rate_mib_s("1"), Ok(1.0));
        assert_eq!(rate_mib_s("100.5"), Ok(100.5));
        assert_eq!(rate_mib_s("1048576"), Ok(RATE_MIB_S_MAX));
        for bad in ["0", "nan", "inf", "-5", "0.5", "1e-300", "1048577", "x"] {
            let message = rate_mib_s(bad).unwrap_err();
            assert!(message.contains("at least 1 and at most 1048576"), "{bad}: {message}");
        }
    }

    #[test]
    fn amounts() {
        assert_eq!(amount("95%"), Ok(Amount::Percent(95.0)));
        assert_eq!(amount("100%"), Ok(Amount::Percent(100.0)));
        assert_eq!(amount("0.5%"), Ok(Amount::Percent(0.5)));
        assert_eq!(amount("1G"), Ok(Amount::Bytes(1 << 30)));
        for bad in ["0%", "-1%", "101%", "nan%", "inf%", "%", "0", "x", "1G%"] {
            assert!(amount(bad).is_err(), "{bad}");
        }
        assert!(amount("101%").unwrap_err().contains("a percentage, more than 0 and at most 100"));
        assert!(amount("0").unwrap_err().contains("more than 0 bytes"));
        assert_eq!(Amount::Percent(50.0).bytes(1 << 20, 4096), 512 << 10);
        assert_eq!(Amount::Bytes(10_000).bytes(1 << 20, 4096), 8192);
        assert_eq!(Amount::Bytes(100).bytes(1 << 20, 4096), 0);
        assert_eq!(Amount::Percent(95.0).to_string(), "95%");
    }

    #[test]
    fn integer_ranges() {
        let parser = int_in::<usize>(1, QUEUE_DEPTH_MAX);
        let command = clap::Command::new("t").arg(clap::Arg::new("qd").long("qd").value_parser(parser));
        let parse = |value: &str| command.clone().try_get_matches_from(["t".to_string(), format!("--qd={value}")]);
        assert_eq!(parse("1024").unwrap().get_one::<usize>("qd"), Some(&1024));
        for bad in ["0", "1025", "-1", "nan"] {
            let message = parse(bad).unwrap_err().to_string();
            assert!(message.contains("--qd"), "{bad}: {message}");
        }
        assert!(parse("0").unwrap_err().to_string().contains("1..=1024"));
    }
}

/// A PCI address, `DDDD:BB:DD.F` or `BB:DD.F` (domain 0), hexadecimal,
/// normalised to the kernel's form (`0000:01:00.0`, lowercase), so that
/// one function named two ways is one.
pub fn pci_address(text: &str) -> Result<String, String> {
    let bad =
        || format!("{text}: not a PCI address (expected DDDD:BB:DD.F or BB:DD.F, hexadecimal, e.g. 0000:01:00.0)");
    let (rest, function) = text.rsplit_once('.').ok_or_else(bad)?;
    let parts: Vec<&str> = rest.split(':').collect();
    let (domain, bus, device) = match parts[..] {
        [domain, bus, device] => (domain, bus, device),
        [bus, device] => ("0", bus, device),
        _ => return Err(bad()),
    };
    let field = |digits: &str, width: usize, max: u32| {
        let ok = !digits.is_empty() && digits.len() <= width && digits.chars().all(|c| c.is_ascii_hexdigit());
        ok.then(|| u32::from_str_radix(digits, 16).ok()).flatten().filter(|&v| v <= max).ok_or_else(bad)
    };
    let (domain, bus, device, function) =
        (field(domain, 4, 0xffff)?, field(bus, 2, 0xff)?, field(device, 2, 0x1f)?, field(function, 1, 7)?);
    Ok(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

/// A PCI address as [`pci_address`] takes it, or a simulated controller's
/// name (`sim0`, `sim1`, ...) for tools that run on the simulator.
pub fn pci_address_or_sim(text: &str) -> Result<String, String> {
    match text.strip_prefix("sim") {
        Some(n) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => Ok(text.to_owned()),
        _ => pci_address(text),
    }
}

#[cfg(test)]
mod pci_tests {
    use super::{pci_address, whole_seconds_in};

    #[test]
    fn seconds_are_whole() {
        let parse = whole_seconds_in(1, 86400);
        assert_eq!(parse("10"), Ok(10));
        for bad in ["1.5", "0", "86401", "-1", "ten"] {
            assert!(parse(bad).unwrap_err().contains("expected whole seconds, 1..=86400"), "{bad}");
        }
    }

    #[test]
    fn pci_addresses_are_normalised_and_checked() {
        assert_eq!(pci_address("0000:01:00.0").as_deref(), Ok("0000:01:00.0"));
        assert_eq!(pci_address("01:00.0").as_deref(), Ok("0000:01:00.0"));
        assert_eq!(pci_address("1:0.7").as_deref(), Ok("0000:01:00.7"));
        assert_eq!(pci_address("ABCD:Ef:1f.3").as_deref(), Ok("abcd:ef:1f.3"));
        for bad in ["", "zz", "0000:01:00", "01:00.8", "01:20.0", "0000:100:00.0", "1:2:3:4.0", "0x1:00.0", ":00.0"] {
            assert!(pci_address(bad).unwrap_err().contains("not a PCI address"), "{bad}");
        }
    }
}

/// Bytes of memory this host has available now (`MemAvailable` in
/// `/proc/meminfo`); `None` when it cannot be read.
pub fn memory_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Refuses a simulated run whose devices would hold `bytes` in memory
/// when the host has less available, naming both: checked before the
/// simulator is built, so that `--sim 1T` fails at once rather than
/// growing until the host runs out.
pub fn sim_fits(option: &str, bytes: u64) -> Result<(), String> {
    match memory_available_bytes() {
        Some(available) if bytes > available => Err(format!(
            "{option}: the simulated devices would hold about {} in memory; this host has {} available",
            human_size(bytes),
            human_size(available)
        )),
        _ => Ok(()),
    }
}
