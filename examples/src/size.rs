//! Sizes as fio writes them: `4k`, `256K`, `1m`, `2G`, plain bytes.

/// Parses `N[k|m|g|t]` (binary multiples, case-insensitive, optional `B`/`iB`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let body = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (digits, shift) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 10),
        Some('m') => (&body[..body.len() - 1], 20),
        Some('g') => (&body[..body.len() - 1], 30),
        Some('t') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    let value: u64 = digits.parse().map_err(|_| format!("invalid size {text:?} (e.g. 4k, 256K, 1m, 2G)"))?;
    value.checked_mul(1u64 << shift).ok_or_else(|| format!("size {text:?} overflows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("256K").unwrap(), 256 << 10);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("512").unwrap(), 512);
        assert!(parse_size("x").is_err());
        assert!(parse_size("4q").is_err());
    }
}
