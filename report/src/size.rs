//! Byte sizes as fio, QEMU and our command lines write them: `512`, `4k`,
//! `256K`, `1m`, `2GiB`, `1T` (binary multiples, case-insensitive).

/// A size that does not parse, or overflows 64 bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeError(String);

impl std::fmt::Display for SizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SizeError {}

/// Parses `N[k|m|g|t]`, with an optional trailing `B` or `iB`.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let lower = text.trim().to_ascii_lowercase();
    let body = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (digits, shift) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 10),
        Some('m') => (&body[..body.len() - 1], 20),
        Some('g') => (&body[..body.len() - 1], 30),
        Some('t') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    let value: u64 =
        digits.parse().map_err(|_| SizeError(format!("invalid size {text:?} (e.g. 512, 4k, 256K, 1m, 2G, 1T)")))?;
    value.checked_mul(1u64 << shift).ok_or_else(|| SizeError(format!("size {text:?} overflows")))
}

/// Formats a byte count the way [`parse_size`] reads it, exactly.
pub fn format_size(bytes: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("256K").unwrap(), 256 << 10);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size(" 1T ").unwrap(), 1 << 40);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "x", "G", "4q", "1.5G", "-1", "12Q", "99999999999999999999", "16777216T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_size("16777216T").unwrap_err().to_string().contains("overflows"));
    }

    #[test]
    fn format_round_trips() {
        for v in [1, 512, 4096, 64 << 20, 3 << 30, (1 << 30) + 1, 5 << 40] {
            assert_eq!(parse_size(&format_size(v)).unwrap(), v);
        }
        assert_eq!(format_size(0), "0");
        assert_eq!(format_size(256 << 10), "256K");
    }
}
