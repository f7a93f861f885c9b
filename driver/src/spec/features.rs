//! Feature data carried in a data buffer rather than in CDW11 and DW0
//! (NVMe Base 2.1 §5.1.25.1): Host Behavior Support.

use super::identify::CopyFormats;
use super::le::{u16_at, u8_at};
use super::{check_len, ParseError};
use core::fmt;

/// Bytes of the Host Behavior Support data structure, in both directions
/// (Set Features host to controller, Get Features controller to host).
pub const HOST_BEHAVIOR_SUPPORT_SIZE: usize = 512;

/// Field offsets of Host Behavior Support (NVMe Base 2.1 §5.1.25.1.14,
/// Figure 407). Bytes 511:6 are reserved.
pub mod host_behavior_offsets {
    /// Advanced Command Retry Enable.
    pub const ACRE: usize = 0;
    /// Extended Telemetry Data Area 4 Supported.
    pub const ETDAS: usize = 1;
    /// LBA Format Extension Enable.
    pub const LBAFEE: usize = 2;
    /// Host Dispersed Namespace Support.
    pub const HDISNS: usize = 3;
    /// Copy Descriptor Formats Enable (2 bytes).
    pub const CDFE: usize = 4;
}

/// The Host Behavior Support feature (Feature Identifier 16h, NVMe Base
/// 2.1 §5.1.25.1.14): what the host says it handles, so that the
/// controller may use what depends on it. Not saveable; all zeroes after
/// a Controller Level Reset.
///
/// The whole structure is kept, reserved bytes included, so that a host
/// that reads it, changes one field and writes it back changes nothing
/// else.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HostBehaviorSupport {
    bytes: [u8; HOST_BEHAVIOR_SUPPORT_SIZE],
}

impl Default for HostBehaviorSupport {
    /// All zeroes, the feature's default value.
    fn default() -> Self {
        Self { bytes: [0; HOST_BEHAVIOR_SUPPORT_SIZE] }
    }
}

impl HostBehaviorSupport {
    const WHAT: &'static str = "Host Behavior Support";

    /// Decodes the structure from its first [`HOST_BEHAVIOR_SUPPORT_SIZE`]
    /// bytes.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        check_len(buf, HOST_BEHAVIOR_SUPPORT_SIZE, Self::WHAT)?;
        let mut bytes = [0u8; HOST_BEHAVIOR_SUPPORT_SIZE];
        bytes.copy_from_slice(&buf[..HOST_BEHAVIOR_SUPPORT_SIZE]);
        Ok(Self { bytes })
    }

    /// The structure as it travels in the data buffer.
    pub fn to_bytes(&self) -> [u8; HOST_BEHAVIOR_SUPPORT_SIZE] {
        self.bytes
    }

    /// ACRE: the host retries commands aborted with Command Interrupted.
    pub fn acre(&self) -> u8 {
        u8_at(&self.bytes, host_behavior_offsets::ACRE)
    }

    /// ETDAS: the host reads Telemetry Data Area 4.
    pub fn etdas(&self) -> u8 {
        u8_at(&self.bytes, host_behavior_offsets::ETDAS)
    }

    /// LBAFEE: the host uses extended LBA formats.
    pub fn lbafee(&self) -> u8 {
        u8_at(&self.bytes, host_behavior_offsets::LBAFEE)
    }

    /// HDISNS: the host supports dispersed namespaces.
    pub fn hdisns(&self) -> u8 {
        u8_at(&self.bytes, host_behavior_offsets::HDISNS)
    }

    /// CDFE: the Copy Descriptor Formats the host enabled (bit 2: format
    /// 2h, bit 3: format 3h; the other bits are reserved).
    pub fn cdfe(&self) -> CopyFormats {
        CopyFormats::from_bits_retain(u16_at(&self.bytes, host_behavior_offsets::CDFE))
    }

    /// The same structure with CDFE set to `formats`, every other byte
    /// kept.
    #[must_use]
    pub fn with_cdfe(mut self, formats: CopyFormats) -> Self {
        let at = host_behavior_offsets::CDFE;
        self.bytes[at..at + 2].copy_from_slice(&formats.bits().to_le_bytes());
        self
    }
}

impl fmt::Debug for HostBehaviorSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBehaviorSupport")
            .field("acre", &self.acre())
            .field("etdas", &self.etdas())
            .field("lbafee", &self.lbafee())
            .field("hdisns", &self.hdisns())
            .field("cdfe", &self.cdfe())
            .field("reserved_nonzero", &self.bytes[6..].iter().any(|byte| *byte != 0))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_spec() {
        use host_behavior_offsets::*;
        assert_eq!([ACRE, ETDAS, LBAFEE, HDISNS, CDFE], [0, 1, 2, 3, 4]);
        assert_eq!(HOST_BEHAVIOR_SUPPORT_SIZE, 512);
    }

    #[test]
    fn fields_decode_and_cdfe_changes_only_bytes_5_4() {
        let mut raw = [0u8; HOST_BEHAVIOR_SUPPORT_SIZE];
        raw[..6].copy_from_slice(&[0x01, 0x01, 0x01, 0x00, 0x08, 0x00]);
        raw[511] = 0xA5;
        let read = HostBehaviorSupport::parse(&raw).unwrap();
        assert_eq!((read.acre(), read.etdas(), read.lbafee(), read.hdisns()), (1, 1, 1, 0));
        assert_eq!(read.cdfe(), CopyFormats::FORMAT_3);

        let written = read.with_cdfe(read.cdfe() | CopyFormats::FORMAT_2);
        let mut expected = raw;
        expected[4] = 0x0C;
        assert_eq!(written.to_bytes(), expected);
        assert_eq!(written.cdfe(), CopyFormats::FORMAT_2 | CopyFormats::FORMAT_3);
        assert_eq!(HostBehaviorSupport::parse(&written.to_bytes()).unwrap(), written);
    }

    #[test]
    fn default_is_all_zeroes_and_short_buffers_are_refused() {
        assert_eq!(HostBehaviorSupport::default().to_bytes(), [0u8; HOST_BEHAVIOR_SUPPORT_SIZE]);
        assert_eq!(HostBehaviorSupport::default().cdfe(), CopyFormats::empty());
        assert_eq!(
            HostBehaviorSupport::parse(&[0u8; 511]),
            Err(ParseError::TooShort { what: "Host Behavior Support", expected: 512, got: 511 })
        );
        // A longer buffer (the admin scratch) is read from its start.
        let mut page = [0u8; 4096];
        page[4] = 0x04;
        assert_eq!(HostBehaviorSupport::parse(&page).unwrap().cdfe(), CopyFormats::FORMAT_2);
    }
}
