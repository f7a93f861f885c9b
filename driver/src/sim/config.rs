//! What a simulated controller is: identity, limits, namespaces, timing and
//! fault probabilities. [`SimConfig::default`] resembles QEMU 7.2's emulated
//! controller (hw/nvme/ctrl.c) with one 1 GiB namespace of 512-byte blocks,
//! and offers Copy across namespaces as QEMU 9.1 does.

use crate::spec::identify::{CopyFormats, Oncs};
use crate::spec::registers::Vs;
use crate::transport::PciId;

/// Most namespaces one simulated controller holds.
pub const NAMESPACES_MAX: usize = 64;
/// Most I/O queue pairs one simulated controller grants.
pub const IO_QUEUE_PAIRS_MAX: u16 = 1024;
/// Most zones one zoned namespace holds.
pub const ZONES_MAX: u64 = 1 << 22;
/// Largest namespace: 1 PiB of virtual capacity (storage is sparse).
pub const NAMESPACE_BYTES_MAX: u128 = 1 << 50;
/// Longest completion delay, in ticks.
pub const COMPLETION_DELAY_TICKS_MAX: u32 = 1_000_000;
/// Largest Copy (MCL blocks): the sim reads every source before it writes
/// the destination, through one buffer of at most this size.
pub const COPY_BYTES_MAX: u64 = 64 << 20;
/// The Copy Descriptor Formats the simulator carries out: the ones without
/// protection information.
pub const COPY_FORMATS_IMPLEMENTED: CopyFormats = CopyFormats::FORMAT_0.union(CopyFormats::FORMAT_2);
/// Metadata sizes (MS, bytes per logical block) a namespace may have: those
/// of QEMU 7.2's eight LBA formats (hw/nvme/ns.c, `nvme_ns_init`). QEMU
/// adds a ninth, non-standard format for any other size; the simulator
/// refuses other sizes instead, so every namespace lists the same formats.
pub const METADATA_BYTES_ALLOWED: [u16; 4] = [0, 8, 16, 64];

/// What a Dataset Management deallocate does to the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeallocateBehavior {
    /// Deallocated blocks read as zeroes (DLFEAT read behaviour 001b), like
    /// QEMU with `discard=unmap`.
    Zeroes,
    /// Deallocate is a hint the controller ignores: the old data stays
    /// readable (DLFEAT read behaviour 000b, "not reported"), like QEMU with
    /// `discard=ignore`.
    KeepData,
}

/// What Report Zones puts in the Write Pointer field of a zone in the Full,
/// Read Only or Offline state. ZNS 1.1 (Zone Descriptor, "Write Pointer")
/// says the field is not valid in those states, so a driver must not use
/// it; the knob lets a test prove that it does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FullZoneWritePointer {
    /// All ones, as QEMU 7.2 reports (`nvme_wp_is_valid`).
    AllOnes,
    /// ZSLBA + ZCAP, where the controller keeps it internally after Finish.
    WriteBoundary,
}

/// The zone geometry and limits of a zoned namespace (ZNS 1.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZonedConfig {
    /// ZSZE: logical blocks per zone. The namespace holds a whole number of
    /// zones.
    pub zone_size_blocks: u64,
    /// ZCAP: writable blocks per zone, at most the zone size.
    pub zone_capacity_blocks: u64,
    /// Open resources (MOR + 1); `None` for no limit.
    pub max_open_zones: Option<u32>,
    /// Active resources (MAR + 1); `None` for no limit.
    pub max_active_zones: Option<u32>,
    /// OZCS bit 0: reads may cross zone boundaries.
    pub read_across_zone_boundaries: bool,
    /// Write Pointer reported for Full, Read Only and Offline zones.
    pub full_zone_write_pointer: FullZoneWritePointer,
}

impl ZonedConfig {
    /// The open limit in force: an active limit without an open one limits
    /// open zones too (as QEMU 7.2 sets MOR = MAR then).
    pub fn open_limit(&self) -> Option<u32> {
        self.max_open_zones.or(self.max_active_zones)
    }
}

/// One namespace. NSIDs are assigned in order, from 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// NSZE (and NCAP, NUSE): logical blocks.
    pub capacity_blocks: u64,
    /// 512 or 4096 bytes of data per logical block.
    pub block_size: u32,
    /// MS: metadata bytes per logical block, in a separate buffer (MPTR;
    /// FLBAS bit 4 clear), without protection information (DPS = 0), as
    /// QEMU's `nvme-ns` with `ms=N,mset=0,pi=0`. One of
    /// [`METADATA_BYTES_ALLOWED`]; 0 for none.
    pub metadata_bytes: u16,
    /// DLFEAT, as Identify Namespace reports it.
    pub dlfeat: u8,
    /// What Dataset Management deallocate does.
    pub deallocate: DeallocateBehavior,
    /// MSRC: most Copy source ranges, 0-based.
    pub msrc: u8,
    /// MSSRL: most blocks per Copy source range.
    pub mssrl: u16,
    /// MCL: most blocks per Copy command.
    pub mcl: u32,
    /// Zones, for a namespace of the Zoned Namespace Command Set.
    pub zoned: Option<ZonedConfig>,
    /// Keep synthetic blocks ([`super::synthetic`]) as seeds rather than
    /// bytes, so that a namespace of terabytes fits in host memory; needs a
    /// controller without a volatile write cache.
    pub synthetic_data: bool,
}

/// DLFEAT read behaviour 001b: deallocated blocks read as zeroes.
pub const DLFEAT_READ_ZEROES: u8 = 0b001;

impl NamespaceConfig {
    /// A conventional (NVM Command Set) namespace, with QEMU 7.2's defaults
    /// for DLFEAT (0x01) and the Copy limits (MSRC 127, MSSRL 128, MCL 128).
    pub fn nvm(capacity_blocks: u64, block_size: u32) -> Self {
        NamespaceConfig {
            capacity_blocks,
            block_size,
            metadata_bytes: 0,
            dlfeat: DLFEAT_READ_ZEROES,
            deallocate: DeallocateBehavior::Zeroes,
            msrc: 127,
            mssrl: 128,
            mcl: 128,
            zoned: None,
            synthetic_data: false,
        }
    }

    /// A zoned namespace of `capacity_blocks / zone_size_blocks` zones, no
    /// open or active limit (QEMU's default), reads within one zone.
    pub fn zoned(capacity_blocks: u64, block_size: u32, zone_size_blocks: u64, zone_capacity_blocks: u64) -> Self {
        NamespaceConfig {
            zoned: Some(ZonedConfig {
                zone_size_blocks,
                zone_capacity_blocks,
                max_open_zones: None,
                max_active_zones: None,
                read_across_zone_boundaries: false,
                full_zone_write_pointer: FullZoneWritePointer::AllOnes,
            }),
            ..NamespaceConfig::nvm(capacity_blocks, block_size)
        }
    }

    /// Keeps synthetic blocks as seeds (see
    /// [`NamespaceConfig::synthetic_data`]).
    #[must_use]
    pub fn synthetic_data(mut self) -> Self {
        self.synthetic_data = true;
        self
    }

    /// Formats the namespace with `metadata_bytes` of metadata per block
    /// (see [`NamespaceConfig::metadata_bytes`]).
    #[must_use]
    pub fn metadata_bytes(mut self, metadata_bytes: u16) -> Self {
        self.metadata_bytes = metadata_bytes;
        self
    }

    fn zoned_mut(&mut self) -> &mut ZonedConfig {
        self.zoned.as_mut().expect("a zone setting on a namespace without zones")
    }

    /// Limits the open zones (MOR + 1). Panics on a conventional namespace.
    #[must_use]
    pub fn max_open_zones(mut self, zones: u32) -> Self {
        self.zoned_mut().max_open_zones = Some(zones);
        self
    }

    /// Limits the active zones (MAR + 1). Panics on a conventional namespace.
    #[must_use]
    pub fn max_active_zones(mut self, zones: u32) -> Self {
        self.zoned_mut().max_active_zones = Some(zones);
        self
    }

    /// Lets reads cross zone boundaries (OZCS bit 0).
    #[must_use]
    pub fn read_across_zone_boundaries(mut self) -> Self {
        self.zoned_mut().read_across_zone_boundaries = true;
        self
    }

    /// Reports `pointer` as the Write Pointer of Full zones.
    #[must_use]
    pub fn full_zone_write_pointer(mut self, pointer: FullZoneWritePointer) -> Self {
        self.zoned_mut().full_zone_write_pointer = pointer;
        self
    }

    /// Deallocate keeps the old data (QEMU's `discard=ignore`); DLFEAT
    /// reports the read behaviour as not reported.
    #[must_use]
    pub fn deallocate_keeps_data(mut self) -> Self {
        self.deallocate = DeallocateBehavior::KeepData;
        self.dlfeat &= !0b111;
        self
    }

    /// Copy limits: MSRC (0-based ranges), MSSRL and MCL (blocks).
    #[must_use]
    pub fn copy_limits(mut self, msrc: u8, mssrl: u16, mcl: u32) -> Self {
        self.msrc = msrc;
        self.mssrl = mssrl;
        self.mcl = mcl;
        self
    }
}

/// Fault probabilities, each drawn from the simulator's seeded PRNG. Faults
/// aimed at particular LBAs or commands are injected with
/// [`super::Simulator::inject`].
#[derive(Clone, Debug, PartialEq)]
pub struct FaultConfig {
    /// Per read-type command (Read, Compare, Verify, Copy): Unrecovered Read
    /// Error (SCT 2h / SC 81h), no data transferred.
    pub unrecovered_read_probability: f64,
    /// Per Read: the data arrives with one bit flipped and success status.
    pub read_bit_flip_probability: f64,
    /// Per write-type command (Write, Write Zeroes, Zone Append, Copy):
    /// Write Fault (SCT 2h / SC 80h), nothing written.
    pub write_fault_probability: f64,
    /// Per I/O command: executed, but its completion is never posted.
    pub dropped_completion_probability: f64,
    /// At [`super::Simulator::power_cut`]: the chance that each unflushed
    /// logical block persists anyway.
    pub power_cut_keep_probability: f64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            unrecovered_read_probability: 0.0,
            read_bit_flip_probability: 0.0,
            write_fault_probability: 0.0,
            dropped_completion_probability: 0.0,
            power_cut_keep_probability: 0.5,
        }
    }
}

/// A simulated controller.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Seeds the one PRNG behind every random choice.
    pub seed: u64,
    /// What [`crate::Transport::pci_id`] reports; VID and SSVID also go to
    /// Identify Controller.
    pub pci_id: PciId,
    /// MN of Identify Controller.
    pub model: String,
    /// SN of Identify Controller.
    pub serial: String,
    /// FR of Identify Controller.
    pub firmware: String,
    /// VS (and Identify Controller VER).
    pub version: Vs,
    /// CAP.MQES: largest queue, 0-based (2047 is 2048 entries).
    pub mqes: u16,
    /// CAP.TO, in 500 ms units.
    pub timeout_500ms: u8,
    /// MDTS: `4096 << mdts` bytes per command; 0 is no limit.
    pub mdts: u8,
    /// SGLS of Identify Controller: bits 1:0 say whether I/O commands may
    /// describe their data with SGLs (01b: yes, with no alignment rule;
    /// 00b: PRPs only). The simulator reads Data Block, Segment and Last
    /// Segment descriptors. QEMU 7.2 says 01b too, and also offers Bit
    /// Bucket descriptors (bit 16), which no driver here uses.
    pub sgls: u32,
    /// ONCS.
    pub oncs: Oncs,
    /// The Copy Descriptor Formats offered (OCFS, named CDFS since NVMe
    /// Base 2.1) while ONCS offers Copy: 0h, 2h or both. Format 2h (a
    /// source namespace per range, NVM Command Set 1.1 §3.3.2.4) works only
    /// once the host enables it through Host Behavior Support. Both by
    /// default, as QEMU 9.1 and later offer 2h (and 3h, which needs
    /// protection information the simulator does not model); QEMU 7.2
    /// offers 0h (and 1h) only: [`SimConfig::with_copy_formats`] with
    /// [`CopyFormats::FORMAT_0`].
    pub copy_formats: CopyFormats,
    /// VWC bit 0: a volatile write cache, enabled at start.
    pub volatile_write_cache: bool,
    /// NN: the largest NSID.
    pub nn: u32,
    /// I/O queue pairs granted at most by Set Features Number of Queues.
    pub max_io_queue_pairs: u16,
    /// NVM Command Set controller limits (Identify CNS 06h, CSI 00h):
    /// `4096 << vsl` bytes per Verify and `4096 << wzsl` per Write Zeroes
    /// (0: no limit), DMRL ranges, DMRSL blocks per range, DMSL blocks per
    /// Dataset Management command (0: no limit).
    pub vsl: u8,
    /// See `vsl` above: Write Zeroes size limit, as a power of two of 4 KiB.
    pub wzsl: u8,
    /// See `vsl` above: Dataset Management ranges per command (DMRL).
    pub dmrl: u8,
    /// See `vsl` above: logical blocks per Dataset Management range (DMRSL).
    pub dmrsl: u32,
    /// See `vsl` above: logical blocks per Dataset Management command (DMSL).
    pub dmsl: u64,
    /// ZASL (Identify CNS 06h, CSI 02h): `4096 << zasl` bytes per Zone
    /// Append; 0 defers to MDTS. Controller-wide, as in the spec.
    pub zasl: u8,
    /// Ticks between a command's execution and its completion, drawn
    /// uniformly from `min..=max` for each command.
    pub completion_delay_ticks: (u32, u32),
    /// Post the completions that fall due in one tick in a seeded random
    /// order (held until the next tick even with no delay).
    pub reorder: bool,
    /// Move a separate metadata buffer (MPTR) of 512 bytes or more that is
    /// not a multiple of 512 the way QEMU 7.2 does: only its first
    /// `len % 512` bytes (softmmu/dma-helpers.c `dma_blk_cb` discards
    /// `QEMU_ALIGN_DOWN(len, 512)` bytes from the back), the rest of the
    /// blocks' metadata left as it was on a write and the rest of the host
    /// buffer untouched on a read. Off by default; the driver's quirk
    /// `METADATA_DMA_TRUNCATED` keeps its requests clear of it.
    pub metadata_dma_truncation: bool,
    /// Move every read's data under the controller's lock, as the
    /// simulator did before reads moved outside it (`sim/deferred.rs`):
    /// what a single thread sees is the same either way, which a test
    /// checks with this. Reads carried out in a lane (see
    /// [`SimConfig::lanes`]) are under the lane's lock instead, whatever
    /// this says.
    pub reads_under_lock: bool,
    /// Lend each I/O queue pair to a lane of its own while nothing could
    /// tell (`sim/lane.rs`), so that queues on several threads run at
    /// once. On by default; what a single thread sees is the same either
    /// way, which a test checks with this.
    pub lanes: bool,
    /// Fault probabilities.
    pub faults: FaultConfig,
    /// Sparse storage may hold at most this many bytes per namespace.
    pub memory_limit_bytes: u64,
    /// The namespaces, NSID 1 first.
    pub namespaces: Vec<NamespaceConfig>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            pci_id: PciId {
                vendor: 0x1B36,
                device: 0x0010,
                subsystem_vendor: 0x1AF4,
                subsystem_device: 0x1100,
                class: 0x01_08_02,
            },
            model: "QEMU NVMe Ctrl".into(),
            serial: "sim0".into(),
            firmware: "7.2.0".into(),
            version: Vs::V1_4,
            mqes: 0x7FF,
            timeout_500ms: 15,
            mdts: 7,
            sgls: 0b01,
            // QEMU 7.2's 0x15D (Compare, DSM, Write Zeroes, Save/Select,
            // Timestamp, Copy) plus Verify, which the simulator implements.
            oncs: Oncs::from_bits_retain(0x15D) | Oncs::VERIFY,
            copy_formats: COPY_FORMATS_IMPLEMENTED,
            volatile_write_cache: true,
            nn: 256,
            max_io_queue_pairs: 64,
            vsl: 7,
            wzsl: 0,
            dmrl: 0,
            dmrsl: 0x7_FFFF,
            dmsl: 0,
            zasl: 0,
            completion_delay_ticks: (0, 0),
            reorder: false,
            metadata_dma_truncation: false,
            reads_under_lock: false,
            lanes: true,
            faults: FaultConfig::default(),
            memory_limit_bytes: 8 << 30,
            namespaces: vec![NamespaceConfig::nvm((1 << 30) / 512, 512)],
        }
    }
}

impl SimConfig {
    /// The default controller with one conventional namespace.
    pub fn nvm(capacity_blocks: u64, block_size: u32) -> Self {
        SimConfig { namespaces: vec![NamespaceConfig::nvm(capacity_blocks, block_size)], ..SimConfig::default() }
    }

    /// The default controller with one zoned namespace (see
    /// [`NamespaceConfig::zoned`]).
    pub fn zoned(capacity_blocks: u64, block_size: u32, zone_size_blocks: u64, zone_capacity_blocks: u64) -> Self {
        let namespace = NamespaceConfig::zoned(capacity_blocks, block_size, zone_size_blocks, zone_capacity_blocks);
        SimConfig { namespaces: vec![namespace], ..SimConfig::default() }
    }

    /// The default controller without namespaces; add them with
    /// [`SimConfig::with_namespace`].
    pub fn empty() -> Self {
        SimConfig { namespaces: Vec::new(), ..SimConfig::default() }
    }

    /// Adds a namespace (its NSID is its position, from 1).
    #[must_use]
    pub fn with_namespace(mut self, namespace: NamespaceConfig) -> Self {
        self.namespaces.push(namespace);
        self
    }

    #[must_use]
    /// Sets the PRNG seed (see [`SimConfig::seed`]).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    #[must_use]
    /// Sets the completion delay, in ticks, drawn uniformly from
    /// `min_ticks..=max_ticks` for each command.
    pub fn with_completion_delay(mut self, min_ticks: u32, max_ticks: u32) -> Self {
        self.completion_delay_ticks = (min_ticks, max_ticks);
        self
    }

    #[must_use]
    /// Moves every read's data under the controller's lock (see
    /// [`SimConfig::reads_under_lock`]).
    pub fn with_reads_under_lock(mut self, under_lock: bool) -> Self {
        self.reads_under_lock = under_lock;
        self
    }

    /// Whether completions may wait for ticks: delayed, or reordered
    /// within one.
    pub fn completions_wait(&self) -> bool {
        self.completion_delay_ticks != (0, 0) || self.reorder
    }

    #[must_use]
    /// Lends queues to lanes, or keeps every command under the
    /// controller's lock (see [`SimConfig::lanes`]).
    pub fn with_lanes(mut self, lanes: bool) -> Self {
        self.lanes = lanes;
        self
    }

    #[must_use]
    /// Posts the completions of one tick in a seeded random order.
    pub fn with_reorder(mut self, reorder: bool) -> Self {
        self.reorder = reorder;
        self
    }

    #[must_use]
    /// Offers the Copy Descriptor Formats `formats` (see
    /// [`SimConfig::copy_formats`]).
    pub fn with_copy_formats(mut self, formats: CopyFormats) -> Self {
        self.copy_formats = formats;
        self
    }

    /// OCFS as Identify Controller reports it: the formats offered, none
    /// without Copy.
    pub(crate) fn ocfs(&self) -> CopyFormats {
        if self.oncs.contains(Oncs::COPY) {
            self.copy_formats
        } else {
            CopyFormats::empty()
        }
    }

    #[must_use]
    /// Sets the fault probabilities.
    pub fn with_faults(mut self, faults: FaultConfig) -> Self {
        self.faults = faults;
        self
    }

    /// Panics with the reason when the configuration is outside what the
    /// simulator (or the spec) supports: a configuration is written by a
    /// programmer, so a bad one is a bug, not a runtime condition.
    pub(crate) fn validate(&self) {
        assert!(self.namespaces.len() <= NAMESPACES_MAX, "at most {NAMESPACES_MAX} namespaces");
        assert!(self.nn as usize >= self.namespaces.len() && self.nn < u32::MAX, "NN {} too small", self.nn);
        assert!(self.mqes >= 1, "CAP.MQES must allow queues of 2 entries");
        assert!(
            (1..=IO_QUEUE_PAIRS_MAX).contains(&self.max_io_queue_pairs),
            "1..={IO_QUEUE_PAIRS_MAX} I/O queue pairs"
        );
        assert!(
            self.mdts <= 16 && self.zasl <= 16 && self.vsl <= 16 && self.wzsl <= 16,
            "size limits up to 2^16 pages"
        );
        assert!(self.sgls & !0b11 == 0 && self.sgls != 0b11, "SGLS {:#x}: 00b, 01b or 10b in bits 1:0", self.sgls);
        assert!(
            COPY_FORMATS_IMPLEMENTED.contains(self.copy_formats),
            "Copy Descriptor Formats {:#x}: the simulator carries out 0h and 2h only",
            self.copy_formats.bits()
        );
        let (min, max) = self.completion_delay_ticks;
        assert!(min <= max && max <= COMPLETION_DELAY_TICKS_MAX, "completion delay {min}..={max} ticks");
        let faults = &self.faults;
        for p in [
            faults.unrecovered_read_probability,
            faults.read_bit_flip_probability,
            faults.write_fault_probability,
            faults.dropped_completion_probability,
            faults.power_cut_keep_probability,
        ] {
            assert!((0.0..=1.0).contains(&p), "probability {p} outside 0..=1");
        }
        assert!(self.model.len() <= 40 && self.serial.len() <= 20 && self.firmware.len() <= 8, "MN/SN/FR too long");
        assert!(self.memory_limit_bytes >= 1 << 20, "at least 1 MiB of storage");
        for (index, ns) in self.namespaces.iter().enumerate() {
            let nsid = index + 1;
            assert!(ns.block_size == 512 || ns.block_size == 4096, "namespace {nsid}: block size 512 or 4096");
            assert!(ns.capacity_blocks >= 1, "namespace {nsid}: empty");
            assert!(
                METADATA_BYTES_ALLOWED.contains(&ns.metadata_bytes),
                "namespace {nsid}: metadata of {} bytes per block (0, 8, 16 or 64, as QEMU 7.2's LBA formats)",
                ns.metadata_bytes
            );
            assert!(
                !ns.synthetic_data || !self.volatile_write_cache,
                "namespace {nsid}: synthetic data needs a controller without a volatile write cache"
            );
            assert!(
                u128::from(ns.capacity_blocks) * u128::from(ns.block_size) <= NAMESPACE_BYTES_MAX,
                "namespace {nsid}: larger than 1 PiB"
            );
            // MSSRL or MCL 0 is allowed: QEMU reports it for the namespace
            // of a controller given a drive directly, and every Copy then
            // exceeds it.
            assert!(
                u64::from(ns.mcl) * u64::from(ns.block_size) <= COPY_BYTES_MAX,
                "namespace {nsid}: MCL over {COPY_BYTES_MAX} bytes"
            );
            if let Some(zoned) = &ns.zoned {
                assert!(zoned.zone_size_blocks >= 1, "namespace {nsid}: zones of 0 blocks");
                assert!(
                    (1..=zoned.zone_size_blocks).contains(&zoned.zone_capacity_blocks),
                    "namespace {nsid}: zone capacity {} outside 1..={}",
                    zoned.zone_capacity_blocks,
                    zoned.zone_size_blocks
                );
                assert!(
                    ns.capacity_blocks.is_multiple_of(zoned.zone_size_blocks),
                    "namespace {nsid}: capacity is not a whole number of zones"
                );
                assert!(ns.capacity_blocks / zoned.zone_size_blocks <= ZONES_MAX, "namespace {nsid}: too many zones");
                let open = zoned.open_limit().unwrap_or(u32::MAX);
                let active = zoned.max_active_zones.unwrap_or(u32::MAX);
                assert!(open >= 1 && active >= 1, "namespace {nsid}: zone limits of at least 1");
                assert!(open <= active, "namespace {nsid}: more open than active zones");
            }
        }
    }

    /// Bytes per command (MDTS), `None` when unlimited.
    pub(crate) fn max_transfer_bytes(&self) -> Option<u64> {
        (self.mdts != 0).then(|| 4096u64 << self.mdts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_resembles_qemu_7_2() {
        let config = SimConfig::default();
        config.validate();
        assert_eq!((config.pci_id.vendor, config.pci_id.device), (0x1B36, 0x0010));
        assert_eq!(config.mdts, 7);
        assert_eq!(config.oncs.bits(), 0x15D | 0x80);
        assert!(config.volatile_write_cache);
        assert_eq!(config.namespaces, vec![NamespaceConfig::nvm(2 * 1024 * 1024, 512)]);
        assert_eq!(config.max_transfer_bytes(), Some(512 * 1024));
        // Copy formats 0h and 2h, as QEMU 9.1 offers (without 1h and 3h).
        assert_eq!(config.ocfs().bits(), 0b101);
        assert_eq!(config.clone().with_copy_formats(CopyFormats::FORMAT_0).ocfs().bits(), 0b001);
        let no_copy = SimConfig { oncs: config.oncs - Oncs::COPY, ..config };
        assert_eq!(no_copy.ocfs(), CopyFormats::empty());
    }

    #[test]
    #[should_panic(expected = "0h and 2h only")]
    fn copy_formats_with_protection_information_are_refused() {
        SimConfig::default().with_copy_formats(CopyFormats::FORMAT_0 | CopyFormats::FORMAT_1).validate();
    }

    #[test]
    fn helpers_build_valid_configs() {
        SimConfig::nvm(1 << 20, 4096).validate();
        SimConfig::zoned(1 << 20, 512, 1 << 16, 1 << 15).validate();
        let config = SimConfig::empty()
            .with_namespace(NamespaceConfig::nvm(1000, 512).deallocate_keeps_data())
            .with_namespace(NamespaceConfig::zoned(64, 4096, 16, 8).max_open_zones(2).max_active_zones(3))
            .with_seed(9)
            .with_completion_delay(1, 4)
            .with_reorder(true);
        config.validate();
        assert_eq!(config.namespaces[0].dlfeat & 0b111, 0);
        assert_eq!(config.namespaces[1].zoned.as_ref().unwrap().max_open_zones, Some(2));
    }

    #[test]
    fn metadata_sizes_are_qemu_7_2s() {
        assert_eq!(NamespaceConfig::nvm(64, 512).metadata_bytes, 0, "no metadata unless asked");
        for size in METADATA_BYTES_ALLOWED {
            let namespace = NamespaceConfig::zoned(64, 4096, 16, 16).metadata_bytes(size);
            assert_eq!(namespace.metadata_bytes, size);
            SimConfig::empty().with_namespace(namespace).validate();
        }
    }

    #[test]
    #[should_panic(expected = "metadata of 32 bytes")]
    fn other_metadata_sizes_are_refused() {
        SimConfig::empty().with_namespace(NamespaceConfig::nvm(64, 512).metadata_bytes(32)).validate();
    }

    #[test]
    #[should_panic(expected = "whole number of zones")]
    fn partial_zones_are_refused() {
        SimConfig::zoned(1000, 512, 64, 64).validate();
    }

    #[test]
    #[should_panic(expected = "more open than active")]
    fn open_limit_above_active_limit_is_refused() {
        SimConfig::empty()
            .with_namespace(NamespaceConfig::zoned(64, 512, 16, 16).max_open_zones(3).max_active_zones(2))
            .validate();
    }
}
