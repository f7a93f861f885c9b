//! Controller registers (NVMe Base 2.0 §3.1.3 "Controller Properties"; the
//! doorbells are defined by the NVMe over PCIe Transport Specification 1.0).
//!
//! Offsets are byte offsets into BAR0. Register values are newtypes over the
//! raw integer with accessors named after the spec fields; decoding is total.

use core::fmt;

/// CAP – Controller Capabilities (64-bit, §3.1.3.1).
pub const CAP: usize = 0x00;
/// VS – Version (§3.1.3.2).
pub const VS: usize = 0x08;
/// INTMS – Interrupt Mask Set (§3.1.3.3).
pub const INTMS: usize = 0x0C;
/// INTMC – Interrupt Mask Clear (§3.1.3.4).
pub const INTMC: usize = 0x10;
/// CC – Controller Configuration (§3.1.3.5).
pub const CC: usize = 0x14;
/// CSTS – Controller Status (§3.1.3.6).
pub const CSTS: usize = 0x1C;
/// NSSR – NVM Subsystem Reset (§3.1.3.7).
pub const NSSR: usize = 0x20;
/// AQA – Admin Queue Attributes (§3.1.3.8).
pub const AQA: usize = 0x24;
/// ASQ – Admin Submission Queue Base Address (64-bit, §3.1.3.9).
pub const ASQ: usize = 0x28;
/// ACQ – Admin Completion Queue Base Address (64-bit, §3.1.3.10).
pub const ACQ: usize = 0x30;
/// CMBLOC – Controller Memory Buffer Location (§3.1.3.11).
pub const CMBLOC: usize = 0x38;
/// CMBSZ – Controller Memory Buffer Size (§3.1.3.12).
pub const CMBSZ: usize = 0x3C;
/// CRTO – Controller Ready Timeouts (§3.1.3.21).
pub const CRTO: usize = 0x68;
/// First doorbell register (SQ0TDBL).
pub const DOORBELL_BASE: usize = 0x1000;

/// Value written to NSSR to start an NVM Subsystem Reset ("NVMe" in ASCII).
pub const NSSR_RESET_VALUE: u32 = 0x4E56_4D65;

/// Bytes between consecutive doorbells: `4 << CAP.DSTRD`.
///
/// DSTRD is a 4-bit field; higher bits are ignored.
pub const fn doorbell_stride_bytes(dstrd: u8) -> usize {
    4 << (dstrd & 0xF)
}

/// Offset of SQyTDBL, the tail doorbell of submission queue `qid`:
/// `1000h + (2y) * (4 << CAP.DSTRD)`.
pub const fn sq_tail_doorbell(qid: u16, dstrd: u8) -> usize {
    DOORBELL_BASE + (2 * qid as usize) * doorbell_stride_bytes(dstrd)
}

/// Offset of CQyHDBL, the head doorbell of completion queue `qid`:
/// `1000h + (2y + 1) * (4 << CAP.DSTRD)`.
pub const fn cq_head_doorbell(qid: u16, dstrd: u8) -> usize {
    DOORBELL_BASE + (2 * qid as usize + 1) * doorbell_stride_bytes(dstrd)
}

/// Extracts `width` bits of `value` starting at bit `shift`.
const fn bits64(value: u64, shift: u32, width: u32) -> u64 {
    (value >> shift) & ((1 << width) - 1)
}

const fn bits32(value: u32, shift: u32, width: u32) -> u32 {
    (value >> shift) & ((1 << width) - 1)
}

/// Returns `value` with `width` bits at `shift` replaced by `field`.
/// Bits of `field` beyond `width` are dropped.
const fn set_bits32(value: u32, shift: u32, width: u32, field: u32) -> u32 {
    let mask = ((1 << width) - 1) << shift;
    (value & !mask) | ((field << shift) & mask)
}

bitflags::bitflags! {
    /// CAP.CSS – Command Sets Supported (CAP bits 44:37).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
    pub struct CapCss: u8 {
        /// The NVM Command Set.
        const NVM = 1 << 0;
        /// One or more I/O Command Sets, selected with CC.CSS = 110b.
        const IO_COMMAND_SETS = 1 << 6;
        /// No I/O Command Set: only the Admin Command Set (CC.CSS = 111b).
        const NO_IO = 1 << 7;
    }
}

bitflags::bitflags! {
    /// CAP.AMS – Arbitration Mechanism Supported (CAP bits 18:17), beyond
    /// round robin which every controller supports.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
    pub struct CapAms: u8 {
        /// Weighted Round Robin with Urgent Priority Class.
        const WEIGHTED_ROUND_ROBIN_URGENT = 1 << 0;
        /// Vendor specific.
        const VENDOR_SPECIFIC = 1 << 1;
    }
}

/// CAP – Controller Capabilities (§3.1.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap(pub u64);

impl Cap {
    /// MQES – Maximum Queue Entries Supported, 0-based as on the wire.
    pub const fn mqes(self) -> u16 {
        bits64(self.0, 0, 16) as u16
    }

    /// Largest I/O queue, in entries (MQES + 1).
    pub const fn max_queue_entries(self) -> u32 {
        self.mqes() as u32 + 1
    }

    /// CQR – Contiguous Queues Required.
    pub const fn cqr(self) -> bool {
        bits64(self.0, 16, 1) != 0
    }

    /// AMS – Arbitration Mechanism Supported.
    pub const fn ams(self) -> CapAms {
        CapAms::from_bits_retain(bits64(self.0, 17, 2) as u8)
    }

    /// TO – worst-case time to wait for CSTS.RDY to change, in 500 ms units.
    pub const fn to_500ms(self) -> u8 {
        bits64(self.0, 24, 8) as u8
    }

    /// TO in milliseconds.
    pub const fn timeout_ms(self) -> u32 {
        self.to_500ms() as u32 * 500
    }

    /// DSTRD – Doorbell Stride, as the exponent in `4 << DSTRD` bytes.
    pub const fn dstrd(self) -> u8 {
        bits64(self.0, 32, 4) as u8
    }

    /// NSSRS – NVM Subsystem Reset Supported.
    pub const fn nssrs(self) -> bool {
        bits64(self.0, 36, 1) != 0
    }

    /// CSS – Command Sets Supported.
    pub const fn css(self) -> CapCss {
        CapCss::from_bits_retain(bits64(self.0, 37, 8) as u8)
    }

    /// BPS – Boot Partition Support.
    pub const fn bps(self) -> bool {
        bits64(self.0, 45, 1) != 0
    }

    /// CPS – Controller Power Scope (0: not reported, 1: controller,
    /// 2: domain, 3: NVM subsystem).
    pub const fn cps(self) -> u8 {
        bits64(self.0, 46, 2) as u8
    }

    /// MPSMIN – Memory Page Size Minimum, as the exponent in `2^(12 + MPSMIN)`.
    pub const fn mpsmin(self) -> u8 {
        bits64(self.0, 48, 4) as u8
    }

    /// MPSMAX – Memory Page Size Maximum, as the exponent in `2^(12 + MPSMAX)`.
    pub const fn mpsmax(self) -> u8 {
        bits64(self.0, 52, 4) as u8
    }

    /// Smallest memory page size in bytes (`1 << (12 + MPSMIN)`).
    pub const fn min_page_size(self) -> usize {
        1 << (12 + self.mpsmin() as u32)
    }

    /// Largest memory page size in bytes (`1 << (12 + MPSMAX)`).
    pub const fn max_page_size(self) -> usize {
        1 << (12 + self.mpsmax() as u32)
    }

    /// PMRS – Persistent Memory Region Supported.
    pub const fn pmrs(self) -> bool {
        bits64(self.0, 56, 1) != 0
    }

    /// CMBS – Controller Memory Buffer Supported.
    pub const fn cmbs(self) -> bool {
        bits64(self.0, 57, 1) != 0
    }

    /// NSSS – NVM Subsystem Shutdown Supported.
    pub const fn nsss(self) -> bool {
        bits64(self.0, 58, 1) != 0
    }

    /// CRMS – Controller Ready Modes Supported (bit 0: with media,
    /// bit 1: independent of media).
    pub const fn crms(self) -> u8 {
        bits64(self.0, 59, 2) as u8
    }
}

/// VS – Version (§3.1.3.2). Orders like the version it encodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vs(pub u32);

impl Vs {
    /// NVMe 1.0.
    pub const V1_0: Vs = Vs::new(1, 0, 0);
    /// NVMe 1.4.
    pub const V1_4: Vs = Vs::new(1, 4, 0);
    /// NVMe 2.0.
    pub const V2_0: Vs = Vs::new(2, 0, 0);

    /// Encodes a version.
    pub const fn new(major: u16, minor: u8, tertiary: u8) -> Self {
        Self(((major as u32) << 16) | ((minor as u32) << 8) | tertiary as u32)
    }

    /// MJR – Major Version Number.
    pub const fn major(self) -> u16 {
        bits32(self.0, 16, 16) as u16
    }

    /// MNR – Minor Version Number.
    pub const fn minor(self) -> u8 {
        bits32(self.0, 8, 8) as u8
    }

    /// TER – Tertiary Version Number.
    pub const fn tertiary(self) -> u8 {
        bits32(self.0, 0, 8) as u8
    }
}

impl fmt::Display for Vs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major(), self.minor(), self.tertiary())
    }
}

/// CC.CSS: NVM Command Set (when CAP.CSS.NVM is set).
pub const CC_CSS_NVM: u8 = 0b000;
/// CC.CSS: all supported I/O Command Sets (when CAP.CSS.IO_COMMAND_SETS is set).
pub const CC_CSS_ALL_IO: u8 = 0b110;
/// CC.CSS: Admin Command Set only (when CAP.CSS.NO_IO is set).
pub const CC_CSS_ADMIN_ONLY: u8 = 0b111;

/// CC.AMS: Round Robin.
pub const CC_AMS_ROUND_ROBIN: u8 = 0b000;
/// CC.AMS: Weighted Round Robin with Urgent Priority Class.
pub const CC_AMS_WEIGHTED_ROUND_ROBIN_URGENT: u8 = 0b001;
/// CC.AMS: Vendor Specific.
pub const CC_AMS_VENDOR_SPECIFIC: u8 = 0b111;

/// CC.SHN – Shutdown Notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Shn {
    /// No notification.
    None = 0b00,
    /// Normal shutdown notification.
    Normal = 0b01,
    /// Abrupt shutdown notification.
    Abrupt = 0b10,
}

/// CC.MPS value for a memory page size: `log2(page_size) - 12`, or `None`
/// unless `page_size` is a power of two from 4 KiB to 128 MiB.
pub const fn mps_for_page_size(page_size: usize) -> Option<u8> {
    if !page_size.is_power_of_two() {
        return None;
    }
    let log2 = page_size.trailing_zeros();
    if log2 < 12 || log2 > 12 + 15 {
        return None;
    }
    Some((log2 - 12) as u8)
}

/// CC – Controller Configuration (§3.1.3.5).
///
/// Built with `with_*` methods; each masks its argument to the field width
/// (a debug assertion catches out-of-range arguments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cc(pub u32);

impl Cc {
    /// All fields zero: disabled, NVM command set, 4 KiB pages.
    pub const fn new() -> Self {
        Self(0)
    }

    /// EN – Enable.
    #[must_use]
    pub const fn with_enable(self, enable: bool) -> Self {
        Self(set_bits32(self.0, 0, 1, enable as u32))
    }

    /// CSS – I/O Command Set Selected (`CC_CSS_*`).
    #[must_use]
    pub const fn with_css(self, css: u8) -> Self {
        debug_assert!(css <= 0b111);
        Self(set_bits32(self.0, 4, 3, css as u32))
    }

    /// MPS – Memory Page Size, `2^(12 + MPS)` bytes.
    #[must_use]
    pub const fn with_mps(self, mps: u8) -> Self {
        debug_assert!(mps <= 0xF);
        Self(set_bits32(self.0, 7, 4, mps as u32))
    }

    /// AMS – Arbitration Mechanism Selected (`CC_AMS_*`).
    #[must_use]
    pub const fn with_ams(self, ams: u8) -> Self {
        debug_assert!(ams <= 0b111);
        Self(set_bits32(self.0, 11, 3, ams as u32))
    }

    /// SHN – Shutdown Notification.
    #[must_use]
    pub const fn with_shn(self, shn: Shn) -> Self {
        Self(set_bits32(self.0, 14, 2, shn as u32))
    }

    /// IOSQES – I/O Submission Queue Entry Size, as `log2(bytes)` (6 for 64 B).
    #[must_use]
    pub const fn with_iosqes(self, iosqes: u8) -> Self {
        debug_assert!(iosqes <= 0xF);
        Self(set_bits32(self.0, 16, 4, iosqes as u32))
    }

    /// IOCQES – I/O Completion Queue Entry Size, as `log2(bytes)` (4 for 16 B).
    #[must_use]
    pub const fn with_iocqes(self, iocqes: u8) -> Self {
        debug_assert!(iocqes <= 0xF);
        Self(set_bits32(self.0, 20, 4, iocqes as u32))
    }

    /// CRIME – Controller Ready Independent of Media Enable.
    #[must_use]
    pub const fn with_crime(self, crime: bool) -> Self {
        Self(set_bits32(self.0, 24, 1, crime as u32))
    }

    /// EN – Enable.
    pub const fn enable(self) -> bool {
        bits32(self.0, 0, 1) != 0
    }

    /// CSS – I/O Command Set Selected.
    pub const fn css(self) -> u8 {
        bits32(self.0, 4, 3) as u8
    }

    /// MPS – Memory Page Size exponent.
    pub const fn mps(self) -> u8 {
        bits32(self.0, 7, 4) as u8
    }

    /// AMS – Arbitration Mechanism Selected.
    pub const fn ams(self) -> u8 {
        bits32(self.0, 11, 3) as u8
    }

    /// SHN – Shutdown Notification; `None` for the reserved value 11b.
    pub const fn shn(self) -> Option<Shn> {
        match bits32(self.0, 14, 2) {
            0b00 => Some(Shn::None),
            0b01 => Some(Shn::Normal),
            0b10 => Some(Shn::Abrupt),
            _ => None,
        }
    }

    /// IOSQES – I/O Submission Queue Entry Size exponent.
    pub const fn iosqes(self) -> u8 {
        bits32(self.0, 16, 4) as u8
    }

    /// IOCQES – I/O Completion Queue Entry Size exponent.
    pub const fn iocqes(self) -> u8 {
        bits32(self.0, 20, 4) as u8
    }

    /// CRIME – Controller Ready Independent of Media Enable.
    pub const fn crime(self) -> bool {
        bits32(self.0, 24, 1) != 0
    }
}

/// CSTS.SHST – Shutdown Status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShutdownStatus {
    /// Normal operation, no shutdown requested.
    Normal,
    /// Shutdown processing occurring.
    Occurring,
    /// Shutdown processing complete.
    Complete,
    /// The reserved value 11b.
    Reserved,
}

/// CSTS – Controller Status (§3.1.3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Csts(pub u32);

impl Csts {
    /// RDY – Ready.
    pub const fn rdy(self) -> bool {
        bits32(self.0, 0, 1) != 0
    }

    /// CFS – Controller Fatal Status.
    pub const fn cfs(self) -> bool {
        bits32(self.0, 1, 1) != 0
    }

    /// SHST – Shutdown Status.
    pub const fn shst(self) -> ShutdownStatus {
        match bits32(self.0, 2, 2) {
            0b00 => ShutdownStatus::Normal,
            0b01 => ShutdownStatus::Occurring,
            0b10 => ShutdownStatus::Complete,
            _ => ShutdownStatus::Reserved,
        }
    }

    /// NSSRO – NVM Subsystem Reset Occurred.
    pub const fn nssro(self) -> bool {
        bits32(self.0, 4, 1) != 0
    }

    /// PP – Processing Paused.
    pub const fn pp(self) -> bool {
        bits32(self.0, 5, 1) != 0
    }

    /// ST – Shutdown Type (set: NVM subsystem shutdown).
    pub const fn st(self) -> bool {
        bits32(self.0, 6, 1) != 0
    }
}

/// Fewest entries a queue may have (a 0-based size of 1).
pub const QUEUE_ENTRIES_MIN: u16 = 2;
/// Most entries an admin queue may have (AQA fields are 12 bits, 0-based).
pub const ADMIN_QUEUE_ENTRIES_MAX: u16 = 4096;

/// AQA – Admin Queue Attributes (§3.1.3.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aqa(pub u32);

impl Aqa {
    /// Encodes admin queue sizes given in entries (1-based, 2..=4096).
    ///
    /// Out-of-range sizes are a caller bug (debug assertion); release builds
    /// clamp them into range.
    pub const fn new(asq_entries: u16, acq_entries: u16) -> Self {
        debug_assert!(asq_entries >= QUEUE_ENTRIES_MIN && asq_entries <= ADMIN_QUEUE_ENTRIES_MAX);
        debug_assert!(acq_entries >= QUEUE_ENTRIES_MIN && acq_entries <= ADMIN_QUEUE_ENTRIES_MAX);
        let asqs = Self::zero_based(asq_entries);
        let acqs = Self::zero_based(acq_entries);
        Self(set_bits32(set_bits32(0, 0, 12, asqs), 16, 12, acqs))
    }

    const fn zero_based(entries: u16) -> u32 {
        let clamped = if entries < QUEUE_ENTRIES_MIN {
            QUEUE_ENTRIES_MIN
        } else if entries > ADMIN_QUEUE_ENTRIES_MAX {
            ADMIN_QUEUE_ENTRIES_MAX
        } else {
            entries
        };
        clamped as u32 - 1
    }

    /// ASQS – Admin Submission Queue Size, 0-based.
    pub const fn asqs(self) -> u16 {
        bits32(self.0, 0, 12) as u16
    }

    /// ACQS – Admin Completion Queue Size, 0-based.
    pub const fn acqs(self) -> u16 {
        bits32(self.0, 16, 12) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CAP as QEMU 7.2's emulated controller reports it (hw/nvme/ctrl.c,
    /// nvme_init_ctrl): MQES 7FFh, CQR 1, TO Fh, CSS = NVM | I/O command sets
    /// | admin only, MPSMAX 4, everything else 0.
    const QEMU_7_2_CAP: u64 = 0x0040_1820_0F01_07FF;

    #[test]
    fn register_offsets() {
        assert_eq!(
            [CAP, VS, INTMS, INTMC, CC, CSTS, NSSR, AQA, ASQ, ACQ, CMBLOC, CMBSZ, CRTO],
            [0x00, 0x08, 0x0C, 0x10, 0x14, 0x1C, 0x20, 0x24, 0x28, 0x30, 0x38, 0x3C, 0x68]
        );
        assert_eq!(DOORBELL_BASE, 0x1000);
    }

    #[test]
    fn doorbells() {
        assert_eq!(sq_tail_doorbell(0, 0), 0x1000);
        assert_eq!(cq_head_doorbell(0, 0), 0x1004);
        assert_eq!(sq_tail_doorbell(1, 0), 0x1008);
        assert_eq!(cq_head_doorbell(1, 0), 0x100C);
        // DSTRD 1: 8-byte stride.
        assert_eq!(sq_tail_doorbell(1, 1), 0x1010);
        assert_eq!(cq_head_doorbell(1, 1), 0x1018);
        // DSTRD 15, the largest: 128 KiB stride.
        assert_eq!(doorbell_stride_bytes(15), 128 * 1024);
        assert_eq!(cq_head_doorbell(u16::MAX, 15), 0x1000 + (2 * 65535 + 1) * (128 * 1024));
        // Bits above the 4-bit field are ignored.
        assert_eq!(doorbell_stride_bytes(0x10), 4);
    }

    #[test]
    fn cap_qemu_7_2() {
        let cap = Cap(QEMU_7_2_CAP);
        assert_eq!(cap.mqes(), 2047);
        assert_eq!(cap.max_queue_entries(), 2048);
        assert!(cap.cqr());
        assert_eq!(cap.ams(), CapAms::empty());
        assert_eq!(cap.to_500ms(), 15);
        assert_eq!(cap.timeout_ms(), 7500);
        assert_eq!(cap.dstrd(), 0);
        assert!(!cap.nssrs());
        assert_eq!(cap.css(), CapCss::NVM | CapCss::IO_COMMAND_SETS | CapCss::NO_IO);
        assert!(!cap.bps());
        assert_eq!(cap.cps(), 0);
        assert_eq!(cap.mpsmin(), 0);
        assert_eq!(cap.mpsmax(), 4);
        assert_eq!(cap.min_page_size(), 4096);
        assert_eq!(cap.max_page_size(), 64 * 1024);
        assert!(!cap.pmrs());
        assert!(!cap.cmbs());
        assert!(!cap.nsss());
        assert_eq!(cap.crms(), 0);
    }

    #[test]
    fn cap_every_field_at_its_bits() {
        let cap = Cap(u64::MAX);
        assert_eq!(cap.mqes(), 0xFFFF);
        assert_eq!(cap.max_queue_entries(), 65536);
        assert_eq!(cap.ams().bits(), 0b11);
        assert_eq!(cap.timeout_ms(), 255 * 500);
        assert_eq!(cap.dstrd(), 15);
        assert_eq!(cap.css().bits(), 0xFF);
        assert_eq!(cap.cps(), 3);
        assert_eq!(cap.min_page_size(), 1 << 27);
        assert_eq!(cap.crms(), 3);
        assert!(cap.cqr() && cap.nssrs() && cap.bps() && cap.pmrs() && cap.cmbs() && cap.nsss());

        assert!(Cap(1 << 16).cqr());
        assert_eq!(Cap(1 << 17).ams(), CapAms::WEIGHTED_ROUND_ROBIN_URGENT);
        assert_eq!(Cap(0xAB << 24).to_500ms(), 0xAB);
        assert_eq!(Cap(0x5 << 32).dstrd(), 5);
        assert!(Cap(1 << 36).nssrs());
        assert_eq!(Cap(1 << 37).css(), CapCss::NVM);
        assert_eq!(Cap(1 << 43).css(), CapCss::IO_COMMAND_SETS);
        assert_eq!(Cap(1 << 44).css(), CapCss::NO_IO);
        assert!(Cap(1 << 45).bps());
        assert_eq!(Cap(0x3 << 48).mpsmin(), 3);
        assert_eq!(Cap(0x3 << 48).min_page_size(), 32 * 1024);
        assert_eq!(Cap(0x7 << 52).mpsmax(), 7);
        assert!(Cap(1 << 56).pmrs());
        assert!(Cap(1 << 57).cmbs());
        assert!(Cap(1 << 58).nsss());
        assert_eq!(Cap(0b10 << 59).crms(), 0b10);
    }

    #[test]
    fn vs() {
        let vs = Vs(0x0001_0400);
        assert_eq!((vs.major(), vs.minor(), vs.tertiary()), (1, 4, 0));
        assert_eq!(vs.to_string(), "1.4.0");
        assert_eq!(vs, Vs::V1_4);
        assert_eq!(Vs(0x0002_0001).to_string(), "2.0.1");
        assert!(Vs::V2_0 > Vs::V1_4 && Vs::V1_4 > Vs::V1_0);
    }

    #[test]
    fn cc_builder() {
        // A typical enable: all I/O command sets, 4 KiB pages, round robin,
        // 64-byte SQEs, 16-byte CQEs.
        let cc = Cc::new()
            .with_css(CC_CSS_ALL_IO)
            .with_mps(0)
            .with_ams(CC_AMS_ROUND_ROBIN)
            .with_iosqes(6)
            .with_iocqes(4)
            .with_enable(true);
        assert_eq!(cc.0, 0x0046_0061);
        assert!(cc.enable());
        assert_eq!(cc.css(), CC_CSS_ALL_IO);
        assert_eq!(cc.mps(), 0);
        assert_eq!(cc.iosqes(), 6);
        assert_eq!(cc.iocqes(), 4);
        assert_eq!(cc.shn(), Some(Shn::None));

        let cc = cc.with_enable(false).with_shn(Shn::Normal);
        assert_eq!(cc.0, 0x0046_4060);
        assert_eq!(cc.shn(), Some(Shn::Normal));
        assert_eq!(cc.with_shn(Shn::Abrupt).0, 0x0046_8060);
        assert_eq!(Cc(0b11 << 14).shn(), None);

        assert_eq!(Cc::new().with_mps(4).0, 4 << 7);
        assert_eq!(Cc::new().with_ams(CC_AMS_VENDOR_SPECIFIC).ams(), 7);
        assert_eq!(Cc::new().with_ams(CC_AMS_WEIGHTED_ROUND_ROBIN_URGENT).0, 1 << 11);
        assert_eq!(Cc::new().with_css(CC_CSS_ADMIN_ONLY).0, 0b111 << 4);
        assert_eq!(Cc::new().with_css(CC_CSS_NVM).0, 0);
        assert_eq!(Cc::new().with_crime(true).0, 1 << 24);
        assert!(Cc(1 << 24).crime());
        assert_eq!(Cc::default(), Cc::new());
    }

    #[test]
    fn mps() {
        assert_eq!(mps_for_page_size(4096), Some(0));
        assert_eq!(mps_for_page_size(64 * 1024), Some(4));
        assert_eq!(mps_for_page_size(1 << 27), Some(15));
        assert_eq!(mps_for_page_size(1 << 28), None);
        assert_eq!(mps_for_page_size(2048), None);
        assert_eq!(mps_for_page_size(6000), None);
        assert_eq!(mps_for_page_size(0), None);
    }

    #[test]
    fn csts() {
        assert!(Csts(1).rdy());
        assert!(!Csts(0).rdy());
        assert!(Csts(0b10).cfs());
        assert_eq!(Csts(0b00 << 2).shst(), ShutdownStatus::Normal);
        assert_eq!(Csts(0b01 << 2).shst(), ShutdownStatus::Occurring);
        assert_eq!(Csts(0b10 << 2).shst(), ShutdownStatus::Complete);
        assert_eq!(Csts(0b11 << 2).shst(), ShutdownStatus::Reserved);
        assert!(Csts(1 << 4).nssro());
        assert!(Csts(1 << 5).pp());
        assert!(Csts(1 << 6).st());
        // All-ones, as a surprise-removed device reads.
        let gone = Csts(u32::MAX);
        assert!(gone.rdy() && gone.cfs());
    }

    #[test]
    fn aqa() {
        let aqa = Aqa::new(32, 32);
        assert_eq!(aqa.0, 0x001F_001F);
        assert_eq!((aqa.asqs(), aqa.acqs()), (31, 31));
        assert_eq!(Aqa::new(4096, 2).0, 0x0001_0FFF);
        assert_eq!(Aqa::new(2, 4096).0, 0x0FFF_0001);
    }
}
