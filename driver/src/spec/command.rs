//! Submission Queue Entry: the 64-byte command (NVMe Base 2.0, "Submission
//! Queue Entry" / "Common Command Format"), and the opcodes.

use core::mem::{offset_of, size_of};

/// Bytes in a submission queue entry.
pub const SQE_SIZE: usize = 64;
/// `log2(SQE_SIZE)`, the value for CC.IOSQES.
pub const SQE_SIZE_LOG2: u8 = 6;

/// CDW0.FUSE (bits 9:8, i.e. `flags` bits 1:0): normal operation.
pub const FUSE_NORMAL: u8 = 0b00;
/// CDW0.FUSE: first command of a fused operation.
pub const FUSE_FIRST: u8 = 0b01;
/// CDW0.FUSE: second command of a fused operation.
pub const FUSE_SECOND: u8 = 0b10;
/// Mask of FUSE within `flags`.
pub const FLAGS_FUSE_MASK: u8 = 0b0000_0011;

/// CDW0.PSDT (bits 15:14, i.e. `flags` bits 7:6): PRPs describe the data.
pub const PSDT_PRP: u8 = 0b00;
/// CDW0.PSDT: SGLs, MPTR holds a contiguous metadata buffer address.
pub const PSDT_SGL_MPTR_CONTIGUOUS: u8 = 0b01;
/// CDW0.PSDT: SGLs, MPTR holds the address of an SGL segment.
pub const PSDT_SGL_MPTR_SGL: u8 = 0b10;
/// Shift of PSDT within `flags`.
pub const FLAGS_PSDT_SHIFT: u32 = 6;

/// A submission queue entry.
///
/// Field names follow the spec; CDW0 is split into `opcode`, `flags`
/// (FUSE and PSDT) and `cid`, and the data pointer into `prp1`/`prp2`.
/// The in-memory layout equals the wire layout on little-endian hosts; use
/// [`Command::to_bytes`] for a byte-exact image on any host.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Command {
    /// CDW0 bits 7:0 – Opcode.
    pub opcode: u8,
    /// CDW0 bits 15:8 – FUSE (bits 1:0 here) and PSDT (bits 7:6 here).
    pub flags: u8,
    /// CDW0 bits 31:16 – Command Identifier, set by the queue at submission.
    pub cid: u16,
    /// Namespace Identifier.
    pub nsid: u32,
    /// Command Dword 2.
    pub cdw2: u32,
    /// Command Dword 3.
    pub cdw3: u32,
    /// Metadata Pointer.
    pub mptr: u64,
    /// Data Pointer, PRP Entry 1.
    pub prp1: u64,
    /// Data Pointer, PRP Entry 2.
    pub prp2: u64,
    /// Command Dword 10.
    pub cdw10: u32,
    /// Command Dword 11.
    pub cdw11: u32,
    /// Command Dword 12.
    pub cdw12: u32,
    /// Command Dword 13.
    pub cdw13: u32,
    /// Command Dword 14.
    pub cdw14: u32,
    /// Command Dword 15.
    pub cdw15: u32,
}

const _: () = assert!(size_of::<Command>() == SQE_SIZE);
const _: () = assert!(1 << SQE_SIZE_LOG2 == SQE_SIZE);
const _: () = assert!(offset_of!(Command, opcode) == 0);
const _: () = assert!(offset_of!(Command, flags) == 1);
const _: () = assert!(offset_of!(Command, cid) == 2);
const _: () = assert!(offset_of!(Command, nsid) == 4);
const _: () = assert!(offset_of!(Command, cdw2) == 8);
const _: () = assert!(offset_of!(Command, cdw3) == 12);
const _: () = assert!(offset_of!(Command, mptr) == 16);
const _: () = assert!(offset_of!(Command, prp1) == 24);
const _: () = assert!(offset_of!(Command, prp2) == 32);
const _: () = assert!(offset_of!(Command, cdw10) == 40);
const _: () = assert!(offset_of!(Command, cdw11) == 44);
const _: () = assert!(offset_of!(Command, cdw12) == 48);
const _: () = assert!(offset_of!(Command, cdw13) == 52);
const _: () = assert!(offset_of!(Command, cdw14) == 56);
const _: () = assert!(offset_of!(Command, cdw15) == 60);

impl Command {
    /// A command with this opcode and every other field zero.
    pub const fn new(opcode: u8) -> Self {
        Self {
            opcode,
            flags: 0,
            cid: 0,
            nsid: 0,
            cdw2: 0,
            cdw3: 0,
            mptr: 0,
            prp1: 0,
            prp2: 0,
            cdw10: 0,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
            cdw15: 0,
        }
    }

    /// CDW0 as one dword.
    pub const fn cdw0(&self) -> u32 {
        self.opcode as u32 | (self.flags as u32) << 8 | (self.cid as u32) << 16
    }

    /// FUSE – Fused Operation (`FUSE_*`).
    pub const fn fuse(&self) -> u8 {
        self.flags & FLAGS_FUSE_MASK
    }

    /// PSDT – PRP or SGL for Data Transfer (`PSDT_*`).
    pub const fn psdt(&self) -> u8 {
        self.flags >> FLAGS_PSDT_SHIFT
    }

    /// The entry as it appears on the wire (little-endian).
    pub fn to_bytes(&self) -> [u8; SQE_SIZE] {
        let mut out = [0u8; SQE_SIZE];
        out[0] = self.opcode;
        out[1] = self.flags;
        out[2..4].copy_from_slice(&self.cid.to_le_bytes());
        out[4..8].copy_from_slice(&self.nsid.to_le_bytes());
        out[8..12].copy_from_slice(&self.cdw2.to_le_bytes());
        out[12..16].copy_from_slice(&self.cdw3.to_le_bytes());
        out[16..24].copy_from_slice(&self.mptr.to_le_bytes());
        out[24..32].copy_from_slice(&self.prp1.to_le_bytes());
        out[32..40].copy_from_slice(&self.prp2.to_le_bytes());
        let dwords = [self.cdw10, self.cdw11, self.cdw12, self.cdw13, self.cdw14, self.cdw15];
        for (i, dword) in dwords.iter().enumerate() {
            let at = 40 + 4 * i;
            out[at..at + 4].copy_from_slice(&dword.to_le_bytes());
        }
        out
    }

    /// Decodes a wire image, the inverse of [`Command::to_bytes`]. Used by
    /// simulated controllers and tests.
    pub fn from_bytes(bytes: &[u8; SQE_SIZE]) -> Self {
        use super::le::{u16_at, u32_at, u64_at};
        Self {
            opcode: bytes[0],
            flags: bytes[1],
            cid: u16_at(bytes, 2),
            nsid: u32_at(bytes, 4),
            cdw2: u32_at(bytes, 8),
            cdw3: u32_at(bytes, 12),
            mptr: u64_at(bytes, 16),
            prp1: u64_at(bytes, 24),
            prp2: u64_at(bytes, 32),
            cdw10: u32_at(bytes, 40),
            cdw11: u32_at(bytes, 44),
            cdw12: u32_at(bytes, 48),
            cdw13: u32_at(bytes, 52),
            cdw14: u32_at(bytes, 56),
            cdw15: u32_at(bytes, 60),
        }
    }
}

/// Command opcodes.
pub mod opcode {
    /// Admin Command Set opcodes (NVMe Base 2.0, "Opcodes for Admin Commands").
    pub mod admin {
        /// Delete I/O Submission Queue.
        pub const DELETE_IO_SQ: u8 = 0x00;
        /// Create I/O Submission Queue.
        pub const CREATE_IO_SQ: u8 = 0x01;
        /// Get Log Page.
        pub const GET_LOG_PAGE: u8 = 0x02;
        /// Delete I/O Completion Queue.
        pub const DELETE_IO_CQ: u8 = 0x04;
        /// Create I/O Completion Queue.
        pub const CREATE_IO_CQ: u8 = 0x05;
        /// Identify.
        pub const IDENTIFY: u8 = 0x06;
        /// Abort.
        pub const ABORT: u8 = 0x08;
        /// Set Features.
        pub const SET_FEATURES: u8 = 0x09;
        /// Get Features.
        pub const GET_FEATURES: u8 = 0x0A;
        /// Asynchronous Event Request.
        pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
        /// Namespace Management.
        pub const NAMESPACE_MANAGEMENT: u8 = 0x0D;
        /// Firmware Commit.
        pub const FIRMWARE_COMMIT: u8 = 0x10;
        /// Firmware Image Download.
        pub const FIRMWARE_DOWNLOAD: u8 = 0x11;
        /// Device Self-test.
        pub const DEVICE_SELF_TEST: u8 = 0x14;
        /// Namespace Attachment.
        pub const NAMESPACE_ATTACHMENT: u8 = 0x15;
        /// Keep Alive.
        pub const KEEP_ALIVE: u8 = 0x18;
        /// Directive Send.
        pub const DIRECTIVE_SEND: u8 = 0x19;
        /// Directive Receive.
        pub const DIRECTIVE_RECEIVE: u8 = 0x1A;
        /// Virtualization Management.
        pub const VIRTUALIZATION_MANAGEMENT: u8 = 0x1C;
        /// NVMe-MI Send.
        pub const NVME_MI_SEND: u8 = 0x1D;
        /// NVMe-MI Receive.
        pub const NVME_MI_RECEIVE: u8 = 0x1E;
        /// Capacity Management.
        pub const CAPACITY_MANAGEMENT: u8 = 0x20;
        /// Lockdown.
        pub const LOCKDOWN: u8 = 0x24;
        /// Doorbell Buffer Config.
        pub const DOORBELL_BUFFER_CONFIG: u8 = 0x7C;
        /// Fabrics Commands.
        pub const FABRICS: u8 = 0x7F;
        /// Format NVM.
        pub const FORMAT_NVM: u8 = 0x80;
        /// Security Send.
        pub const SECURITY_SEND: u8 = 0x81;
        /// Security Receive.
        pub const SECURITY_RECEIVE: u8 = 0x82;
        /// Sanitize.
        pub const SANITIZE: u8 = 0x84;
        /// Get LBA Status.
        pub const GET_LBA_STATUS: u8 = 0x86;
    }

    /// I/O opcodes of the NVM Command Set 1.0 and the Zoned Namespace
    /// Command Set 1.1.
    pub mod nvm {
        /// Flush.
        pub const FLUSH: u8 = 0x00;
        /// Write.
        pub const WRITE: u8 = 0x01;
        /// Read.
        pub const READ: u8 = 0x02;
        /// Write Uncorrectable.
        pub const WRITE_UNCORRECTABLE: u8 = 0x04;
        /// Compare.
        pub const COMPARE: u8 = 0x05;
        /// Write Zeroes.
        pub const WRITE_ZEROES: u8 = 0x08;
        /// Dataset Management.
        pub const DATASET_MANAGEMENT: u8 = 0x09;
        /// Verify.
        pub const VERIFY: u8 = 0x0C;
        /// Reservation Register.
        pub const RESERVATION_REGISTER: u8 = 0x0D;
        /// Reservation Report.
        pub const RESERVATION_REPORT: u8 = 0x0E;
        /// Reservation Acquire.
        pub const RESERVATION_ACQUIRE: u8 = 0x11;
        /// Reservation Release.
        pub const RESERVATION_RELEASE: u8 = 0x15;
        /// Copy.
        pub const COPY: u8 = 0x19;
        /// Zone Management Send (ZNS).
        pub const ZONE_MANAGEMENT_SEND: u8 = 0x79;
        /// Zone Management Receive (ZNS).
        pub const ZONE_MANAGEMENT_RECEIVE: u8 = 0x7A;
        /// Zone Append (ZNS).
        pub const ZONE_APPEND: u8 = 0x7D;
    }
}

/// The spec name of an admin opcode, for error messages.
pub const fn admin_opcode_name(opcode: u8) -> &'static str {
    use opcode::admin::*;
    match opcode {
        DELETE_IO_SQ => "Delete I/O Submission Queue",
        CREATE_IO_SQ => "Create I/O Submission Queue",
        GET_LOG_PAGE => "Get Log Page",
        DELETE_IO_CQ => "Delete I/O Completion Queue",
        CREATE_IO_CQ => "Create I/O Completion Queue",
        IDENTIFY => "Identify",
        ABORT => "Abort",
        SET_FEATURES => "Set Features",
        GET_FEATURES => "Get Features",
        ASYNC_EVENT_REQUEST => "Asynchronous Event Request",
        NAMESPACE_MANAGEMENT => "Namespace Management",
        FIRMWARE_COMMIT => "Firmware Commit",
        FIRMWARE_DOWNLOAD => "Firmware Image Download",
        DEVICE_SELF_TEST => "Device Self-test",
        NAMESPACE_ATTACHMENT => "Namespace Attachment",
        KEEP_ALIVE => "Keep Alive",
        DIRECTIVE_SEND => "Directive Send",
        DIRECTIVE_RECEIVE => "Directive Receive",
        VIRTUALIZATION_MANAGEMENT => "Virtualization Management",
        NVME_MI_SEND => "NVMe-MI Send",
        NVME_MI_RECEIVE => "NVMe-MI Receive",
        CAPACITY_MANAGEMENT => "Capacity Management",
        LOCKDOWN => "Lockdown",
        DOORBELL_BUFFER_CONFIG => "Doorbell Buffer Config",
        FABRICS => "Fabrics Command",
        FORMAT_NVM => "Format NVM",
        SECURITY_SEND => "Security Send",
        SECURITY_RECEIVE => "Security Receive",
        SANITIZE => "Sanitize",
        GET_LBA_STATUS => "Get LBA Status",
        0xC0..=0xFF => "Vendor Specific Admin Command",
        _ => "Unknown Admin Command",
    }
}

/// The spec name of an NVM or ZNS I/O opcode, for error messages.
pub const fn io_opcode_name(opcode: u8) -> &'static str {
    use opcode::nvm::*;
    match opcode {
        FLUSH => "Flush",
        WRITE => "Write",
        READ => "Read",
        WRITE_UNCORRECTABLE => "Write Uncorrectable",
        COMPARE => "Compare",
        WRITE_ZEROES => "Write Zeroes",
        DATASET_MANAGEMENT => "Dataset Management",
        VERIFY => "Verify",
        RESERVATION_REGISTER => "Reservation Register",
        RESERVATION_REPORT => "Reservation Report",
        RESERVATION_ACQUIRE => "Reservation Acquire",
        RESERVATION_RELEASE => "Reservation Release",
        COPY => "Copy",
        ZONE_MANAGEMENT_SEND => "Zone Management Send",
        ZONE_MANAGEMENT_RECEIVE => "Zone Management Receive",
        ZONE_APPEND => "Zone Append",
        0x80..=0xFF => "Vendor Specific I/O Command",
        _ => "Unknown I/O Command",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_bytes_places_every_field() {
        let cmd = Command {
            opcode: 0x02,
            flags: (PSDT_SGL_MPTR_SGL << FLAGS_PSDT_SHIFT) | FUSE_FIRST,
            cid: 0xBEEF,
            nsid: 0x0403_0201,
            cdw2: 0x0807_0605,
            cdw3: 0x0C0B_0A09,
            mptr: 0x1817_1615_1413_1211,
            prp1: 0x2827_2625_2423_2221,
            prp2: 0x3837_3635_3433_3231,
            cdw10: 0x4443_4241,
            cdw11: 0x4847_4645,
            cdw12: 0x4C4B_4A49,
            cdw13: 0x504F_4E4D,
            cdw14: 0x5453_5251,
            cdw15: 0x5857_5655,
        };
        let expected: [u8; 64] = [
            0x02, 0x81, 0xEF, 0xBE, // CDW0
            0x01, 0x02, 0x03, 0x04, // NSID
            0x05, 0x06, 0x07, 0x08, // CDW2
            0x09, 0x0A, 0x0B, 0x0C, // CDW3
            0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // MPTR
            0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, // PRP1
            0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, // PRP2
            0x41, 0x42, 0x43, 0x44, // CDW10
            0x45, 0x46, 0x47, 0x48, // CDW11
            0x49, 0x4A, 0x4B, 0x4C, // CDW12
            0x4D, 0x4E, 0x4F, 0x50, // CDW13
            0x51, 0x52, 0x53, 0x54, // CDW14
            0x55, 0x56, 0x57, 0x58, // CDW15
        ];
        assert_eq!(cmd.to_bytes(), expected);
        assert_eq!(Command::from_bytes(&expected), cmd);
        assert_eq!(cmd.cdw0(), 0xBEEF_8102);
        assert_eq!(cmd.fuse(), FUSE_FIRST);
        assert_eq!(cmd.psdt(), PSDT_SGL_MPTR_SGL);
    }

    #[test]
    fn new_is_zero_but_opcode() {
        let cmd = Command::new(opcode::admin::IDENTIFY);
        let mut expected = [0u8; 64];
        expected[0] = 0x06;
        assert_eq!(cmd.to_bytes(), expected);
        assert_eq!(Command::default().to_bytes(), [0u8; 64]);
        assert_eq!(cmd.psdt(), PSDT_PRP);
        assert_eq!(cmd.fuse(), FUSE_NORMAL);
    }

    #[test]
    fn opcodes_match_spec() {
        use opcode::{admin, nvm};
        let admin_codes = [
            (admin::DELETE_IO_SQ, 0x00),
            (admin::CREATE_IO_SQ, 0x01),
            (admin::GET_LOG_PAGE, 0x02),
            (admin::DELETE_IO_CQ, 0x04),
            (admin::CREATE_IO_CQ, 0x05),
            (admin::IDENTIFY, 0x06),
            (admin::ABORT, 0x08),
            (admin::SET_FEATURES, 0x09),
            (admin::GET_FEATURES, 0x0A),
            (admin::ASYNC_EVENT_REQUEST, 0x0C),
            (admin::NAMESPACE_MANAGEMENT, 0x0D),
            (admin::FIRMWARE_COMMIT, 0x10),
            (admin::FIRMWARE_DOWNLOAD, 0x11),
            (admin::DOORBELL_BUFFER_CONFIG, 0x7C),
            (admin::FORMAT_NVM, 0x80),
        ];
        for (code, expected) in admin_codes {
            assert_eq!(code, expected);
        }
        let io_codes = [
            (nvm::FLUSH, 0x00),
            (nvm::WRITE, 0x01),
            (nvm::READ, 0x02),
            (nvm::WRITE_UNCORRECTABLE, 0x04),
            (nvm::COMPARE, 0x05),
            (nvm::WRITE_ZEROES, 0x08),
            (nvm::DATASET_MANAGEMENT, 0x09),
            (nvm::VERIFY, 0x0C),
            (nvm::COPY, 0x19),
            (nvm::ZONE_MANAGEMENT_SEND, 0x79),
            (nvm::ZONE_MANAGEMENT_RECEIVE, 0x7A),
            (nvm::ZONE_APPEND, 0x7D),
        ];
        for (code, expected) in io_codes {
            assert_eq!(code, expected);
        }
    }

    #[test]
    fn opcode_names_are_total() {
        assert_eq!(admin_opcode_name(0x06), "Identify");
        assert_eq!(admin_opcode_name(0x7C), "Doorbell Buffer Config");
        assert_eq!(admin_opcode_name(0x03), "Unknown Admin Command");
        assert_eq!(admin_opcode_name(0xC5), "Vendor Specific Admin Command");
        assert_eq!(io_opcode_name(0x7D), "Zone Append");
        assert_eq!(io_opcode_name(0x02), "Read");
        assert_eq!(io_opcode_name(0x03), "Unknown I/O Command");
        assert_eq!(io_opcode_name(0x81), "Vendor Specific I/O Command");
        for op in 0..=u8::MAX {
            assert!(!admin_opcode_name(op).is_empty());
            assert!(!io_opcode_name(op).is_empty());
        }
    }
}
