//! Completion Queue Entry: the 16-byte completion (NVMe Base 2.0, "Common
//! Completion Queue Entry").

use core::mem::{offset_of, size_of};

use super::status::Status;

/// Bytes in a completion queue entry.
pub const CQE_SIZE: usize = 16;
/// `log2(CQE_SIZE)`, the value for CC.IOCQES.
pub const CQE_SIZE_LOG2: u8 = 4;
/// Byte offset of the 16-bit word holding the Phase Tag (bit 0) and the
/// Status Field (bits 15:1): DW3 bits 31:16.
pub const STATUS_WORD_OFFSET: usize = 14;
/// The Phase Tag within the status word.
pub const PHASE_TAG_BIT: u16 = 1 << 0;

/// A completion queue entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// DW0 – command specific.
    pub dw0: u32,
    /// DW1 – command specific.
    pub dw1: u32,
    /// SQHD – SQ Head Pointer.
    pub sq_head: u16,
    /// SQID – SQ Identifier.
    pub sq_id: u16,
    /// CID – Command Identifier.
    pub cid: u16,
    /// P – Phase Tag (bit 0) and the Status Field (bits 15:1).
    pub status: u16,
}

const _: () = assert!(size_of::<Completion>() == CQE_SIZE);
const _: () = assert!(1 << CQE_SIZE_LOG2 == CQE_SIZE);
const _: () = assert!(offset_of!(Completion, dw0) == 0);
const _: () = assert!(offset_of!(Completion, dw1) == 4);
const _: () = assert!(offset_of!(Completion, sq_head) == 8);
const _: () = assert!(offset_of!(Completion, sq_id) == 10);
const _: () = assert!(offset_of!(Completion, cid) == 12);
const _: () = assert!(offset_of!(Completion, status) == STATUS_WORD_OFFSET);

impl Completion {
    /// P – the Phase Tag.
    pub const fn phase(&self) -> bool {
        self.status & PHASE_TAG_BIT != 0
    }

    /// The 15-bit Status Field (`status >> 1`).
    pub const fn status_field(&self) -> u16 {
        self.status >> 1
    }

    /// The decoded Status Field.
    pub const fn status(&self) -> Status {
        Status::from_field(self.status_field())
    }

    /// Successful Completion.
    pub const fn is_success(&self) -> bool {
        self.status().is_success()
    }

    /// Decodes a wire image (little-endian).
    pub fn from_bytes(bytes: &[u8; CQE_SIZE]) -> Self {
        use super::le::{u16_at, u32_at};
        Self {
            dw0: u32_at(bytes, 0),
            dw1: u32_at(bytes, 4),
            sq_head: u16_at(bytes, 8),
            sq_id: u16_at(bytes, 10),
            cid: u16_at(bytes, 12),
            status: u16_at(bytes, STATUS_WORD_OFFSET),
        }
    }

    /// The wire image, the inverse of [`Completion::from_bytes`]. Used by
    /// simulated controllers and tests.
    pub fn to_bytes(&self) -> [u8; CQE_SIZE] {
        let mut out = [0u8; CQE_SIZE];
        out[0..4].copy_from_slice(&self.dw0.to_le_bytes());
        out[4..8].copy_from_slice(&self.dw1.to_le_bytes());
        out[8..10].copy_from_slice(&self.sq_head.to_le_bytes());
        out[10..12].copy_from_slice(&self.sq_id.to_le_bytes());
        out[12..14].copy_from_slice(&self.cid.to_le_bytes());
        out[STATUS_WORD_OFFSET..].copy_from_slice(&self.status.to_le_bytes());
        out
    }

    /// The status word for a Status Field and Phase Tag.
    pub const fn status_word(status: Status, phase: bool) -> u16 {
        (status.to_field() << 1) | phase as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::status::{CommandSpecificStatus, GenericStatus, StatusCode};

    #[test]
    fn from_bytes_places_every_field() {
        let bytes: [u8; 16] = [
            0x01, 0x02, 0x03, 0x04, // DW0
            0x05, 0x06, 0x07, 0x08, // DW1
            0x09, 0x0A, // SQHD
            0x0B, 0x0C, // SQID
            0x0D, 0x0E, // CID
            0x05, 0x80, // status word: P=1, SC 02h, DNR
        ];
        let cqe = Completion::from_bytes(&bytes);
        assert_eq!(cqe.dw0, 0x0403_0201);
        assert_eq!(cqe.dw1, 0x0807_0605);
        assert_eq!(cqe.sq_head, 0x0A09);
        assert_eq!(cqe.sq_id, 0x0C0B);
        assert_eq!(cqe.cid, 0x0E0D);
        assert!(cqe.phase());
        assert_eq!(cqe.status_field(), 0x4002);
        let status = cqe.status();
        assert_eq!(status.code(), StatusCode::Generic(GenericStatus::InvalidFieldInCommand));
        assert!(status.dnr);
        assert!(!cqe.is_success());
        assert_eq!(cqe.to_bytes(), bytes);
    }

    #[test]
    fn success_with_either_phase() {
        let mut cqe = Completion::default();
        assert!(cqe.is_success());
        assert!(!cqe.phase());
        cqe.status = 1;
        assert!(cqe.is_success());
        assert!(cqe.phase());
    }

    #[test]
    fn status_word_round_trips() {
        let status: Status = CommandSpecificStatus::ZoneInvalidWrite.into();
        let word = Completion::status_word(status.with_dnr(), true);
        // DNR (bit 15) | SCT 1h (bits 11:9) | SC BCh (bits 8:1) | P.
        assert_eq!(word, 0x8000 | (1 << 9) | (0xBC << 1) | 1);
        let cqe = Completion { status: word, ..Completion::default() };
        assert_eq!(cqe.status(), status.with_dnr());
        assert!(cqe.phase());
    }
}
