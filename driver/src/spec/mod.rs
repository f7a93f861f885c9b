//! NVMe wire formats (NVMe Base 2.0 and 2.1, NVM Command Set 1.0 and 1.1, ZNS
//! Command Set 1.1).
//!
//! Everything here is pure data: register layouts, the 64-byte submission
//! queue entry, the 16-byte completion queue entry, status codes, identify
//! data structures, feature data and log pages. Nothing does I/O, nothing
//! needs `unsafe`, and every parser is total: malformed input yields a
//! [`ParseError`], never a panic.

pub mod command;
pub mod completion;
pub mod features;
pub mod identify;
pub mod log;
pub mod registers;
pub mod status;
pub mod zns;

use core::fmt;

/// Why a device-provided buffer could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The buffer is shorter than the data structure requires.
    TooShort {
        /// The data structure being decoded.
        what: &'static str,
        /// Bytes required.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// A field holds a value this driver cannot use (reserved, out of range
    /// or inconsistent with another field).
    InvalidField {
        /// The data structure being decoded.
        what: &'static str,
        /// The spec name of the field.
        field: &'static str,
        /// The raw value found.
        value: u64,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort { what, expected, got } => {
                write!(f, "{what}: buffer too short: need {expected} bytes, got {got}")
            }
            Self::InvalidField { what, field, value } => {
                write!(f, "{what}: invalid {field} value {value:#x}")
            }
        }
    }
}

impl std::error::Error for ParseError {}

/// Returns `TooShort` unless `buf` holds at least `expected` bytes.
pub(crate) fn check_len(buf: &[u8], expected: usize, what: &'static str) -> Result<(), ParseError> {
    if buf.len() < expected {
        Err(ParseError::TooShort { what, expected, got: buf.len() })
    } else {
        Ok(())
    }
}

/// Little-endian field readers for length-checked buffers.
///
/// Callers check the buffer length first ([`check_len`]); reading past the
/// end is then a bug, caught by a debug assertion. In release builds an
/// out-of-range read yields zeroes rather than a panic.
pub(crate) mod le {
    /// `N` bytes at `offset`.
    pub(crate) fn bytes<const N: usize>(buf: &[u8], offset: usize) -> [u8; N] {
        let mut out = [0u8; N];
        let end = offset.checked_add(N);
        match end.and_then(|end| buf.get(offset..end)) {
            Some(src) => out.copy_from_slice(src),
            None => debug_assert!(false, "read of {N} bytes at {offset} past {}", buf.len()),
        }
        out
    }

    pub(crate) fn u8_at(buf: &[u8], offset: usize) -> u8 {
        bytes::<1>(buf, offset)[0]
    }

    pub(crate) fn u16_at(buf: &[u8], offset: usize) -> u16 {
        u16::from_le_bytes(bytes(buf, offset))
    }

    pub(crate) fn u32_at(buf: &[u8], offset: usize) -> u32 {
        u32::from_le_bytes(bytes(buf, offset))
    }

    pub(crate) fn u64_at(buf: &[u8], offset: usize) -> u64 {
        u64::from_le_bytes(bytes(buf, offset))
    }

    pub(crate) fn u128_at(buf: &[u8], offset: usize) -> u128 {
        u128::from_le_bytes(bytes(buf, offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_error_display() {
        let short = ParseError::TooShort { what: "Identify Controller", expected: 1024, got: 10 };
        assert_eq!(short.to_string(), "Identify Controller: buffer too short: need 1024 bytes, got 10");
        let invalid = ParseError::InvalidField { what: "LBA Format", field: "LBADS", value: 0 };
        assert_eq!(invalid.to_string(), "LBA Format: invalid LBADS value 0x0");
        let _: &dyn std::error::Error = &invalid;
    }

    #[test]
    fn le_readers() {
        let buf = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];
        assert_eq!(le::u8_at(&buf, 7), 0x08);
        assert_eq!(le::u16_at(&buf, 0), 0x0201);
        assert_eq!(le::u32_at(&buf, 4), 0x0807_0605);
        assert_eq!(le::u64_at(&buf, 0), 0x0807_0605_0403_0201);
        assert!(check_len(&buf, 8, "x").is_ok());
        assert_eq!(check_len(&buf, 9, "x"), Err(ParseError::TooShort { what: "x", expected: 9, got: 8 }));
    }
}
