//! Byte sizes as the rig's command line writes them: `512`, `4K`, `64M`,
//! `1G`, `2T` (binary multiples, as QEMU reads them).

use crate::Error;

/// Parses `N[K|M|G|T]` (case-insensitive, optional trailing `B` or `iB`).
pub fn parse_size(text: &str) -> Result<u64, Error> {
    let bad = || Error::Spec(format!("invalid size {text:?}: expected N, NK, NM, NG or NT"));
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    let body = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (digits, shift) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 10),
        Some('m') => (&body[..body.len() - 1], 20),
        Some('g') => (&body[..body.len() - 1], 30),
        Some('t') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    let value: u64 = digits.parse().map_err(|_| bad())?;
    value.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// Formats a byte count the way `parse_size` reads it, exactly.
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
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "G", "1.5G", "-1", "12Q", "99999999999999999999", "16777216T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn format_round_trips() {
        for v in [1, 512, 4096, 64 << 20, 3 << 30, (1 << 30) + 1] {
            assert_eq!(parse_size(&format_size(v)).unwrap(), v);
        }
    }
}
