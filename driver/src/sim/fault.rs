//! Faults a test injects, what the simulator counts, and what a power cut
//! reports.

/// A fault injected with [`super::Simulator::inject`]. Range faults stay
/// until [`super::Simulator::clear_faults`]; the others fire once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Reads (Read, Compare, Verify, Copy sources) touching these blocks
    /// complete with Unrecovered Read Error (SCT 2h / SC 81h) and transfer
    /// nothing. A successful write of a block heals it, as a drive remaps a
    /// bad block on write.
    UnrecoveredRead {
        /// The namespace.
        nsid: u32,
        /// First bad logical block.
        slba: u64,
        /// Bad logical blocks from `slba`.
        blocks: u64,
    },
    /// Reads touching these blocks succeed, but the data arrives with one
    /// bit (chosen by the PRNG) flipped in one of them. The stored data is
    /// intact.
    ReadBitFlip {
        /// The namespace.
        nsid: u32,
        /// First affected logical block.
        slba: u64,
        /// Affected logical blocks from `slba`.
        blocks: u64,
    },
    /// Writes touching these blocks complete with Write Fault (SCT 2h /
    /// SC 80h) and write nothing.
    WriteFault {
        /// The namespace.
        nsid: u32,
        /// First failing logical block.
        slba: u64,
        /// Failing logical blocks from `slba`.
        blocks: u64,
    },
    /// The next `count` I/O commands execute, but their completions are
    /// never posted: the commands hang inside the controller until an
    /// Abort names them (then they complete with Command Abort Requested)
    /// or a reset ends them.
    DropCompletions {
        /// I/O commands affected.
        count: u32,
    },
    /// Reads (Read commands) touching these blocks execute, but their
    /// completions are never posted: they hang, as with
    /// [`Fault::DropCompletions`], until an Abort or a reset ends them. A
    /// drive retrying a marginal area past the host's deadline, for tests
    /// of a read that times out where it lands rather than whichever
    /// command comes next.
    HangReads {
        /// The namespace.
        nsid: u32,
        /// First affected logical block.
        slba: u64,
        /// Affected logical blocks from `slba`.
        blocks: u64,
    },
    /// The next `count` admin commands execute, but their completions are
    /// never posted (hung, as above).
    DropAdminCompletions {
        /// Admin commands affected.
        count: u32,
    },
    /// Abort commands answer "not aborted" (DW0 bit 0 set) for every
    /// command, as QEMU 7.2's controller does; a hung command then ends
    /// only with a reset.
    DeclineAborts,
    /// CSTS.CFS = 1: the controller stops processing commands until a reset
    /// (CC.EN = 0).
    ControllerFatal,
    /// The device is gone: every register reads all ones, nothing is
    /// processed. [`super::Simulator::power_cut`] brings it back.
    SurpriseRemoval,
    /// The host asks for the device back (on Linux, vfio-pci's device
    /// request during a hot-unplug or an unbind):
    /// [`crate::Transport::removal_requested`] answers yes from now on,
    /// while the device itself stays live and keeps working. Until
    /// [`super::Simulator::power_cut`].
    RemovalRequested,
    /// CC.EN 1 → 0 is ignored: CSTS.RDY stays 1 and the controller keeps
    /// its queues and the commands in them (hung ones included), as
    /// firmware stuck on its way into reset. The host's disable times out
    /// and proves nothing about the device's DMA. A function-level reset
    /// ([`crate::Transport::function_reset`]) still stops it, unless
    /// `function_reset_too`. Until [`super::Simulator::clear_faults`].
    WontDisable {
        /// The function-level reset fails as well.
        function_reset_too: bool,
    },
    /// The zone starting at `zslba` becomes Read Only (ZSRO).
    ZoneReadOnly {
        /// The zoned namespace.
        nsid: u32,
        /// The zone's start LBA (ZSLBA).
        zslba: u64,
    },
    /// The zone starting at `zslba` becomes Offline (ZSO).
    ZoneOffline {
        /// The zoned namespace.
        nsid: u32,
        /// The zone's start LBA (ZSLBA).
        zslba: u64,
    },
    /// Every I/O command with this opcode completes with Invalid Command
    /// Opcode (SCT 0h / SC 01h, DNR) and does nothing, although Identify
    /// still advertises it: firmware that disabled a command ONCS reports
    /// (the drives behind the Linux 6.12 zero-out regression).
    RejectOpcode {
        /// The I/O command opcode (OPC) to reject.
        opcode: u8,
    },
    /// The next `count` Zone Appends write where the zone's write pointer
    /// is, as they must, but report an LBA `skew_lbas` further on (modulo
    /// 2^64): a controller whose completions cannot be trusted, for tests
    /// that the host checks what a device returns.
    MisreportAppendLba {
        /// Zone Appends affected.
        count: u32,
        /// Added to the LBA reported (wrapping).
        skew_lbas: u64,
    },
    /// After `after` more Flush commands succeed, the next one completes
    /// with Write Fault (SCT 2h / SC 80h) and leaves the cache as it is:
    /// a flush that failed, for tests of what is retried after one. Fires
    /// once.
    FlushFails {
        /// Flushes that succeed first.
        after: u32,
    },
    /// The power fails just before the controller fetches its
    /// `io_commands + 1`-th I/O command from now, as
    /// [`super::Simulator::power_cut`] would (that command and every later
    /// one are never executed), for crash tests that cut at a chosen point
    /// of a sequence. [`super::Simulator::take_power_cut`] returns the
    /// report.
    PowerCutAfter {
        /// I/O commands fetched and executed before the cut.
        io_commands: u64,
    },
}

/// Most range faults at once.
pub(crate) const RANGE_FAULTS_MAX: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RangeKind {
    UnrecoveredRead,
    ReadBitFlip,
    WriteFault,
    HangRead,
}

#[derive(Clone, Copy, Debug)]
struct RangeFault {
    kind: RangeKind,
    nsid: u32,
    start: u64,
    end: u64,
}

/// The range faults in force.
#[derive(Debug, Default)]
pub(crate) struct RangeFaults {
    ranges: Vec<RangeFault>,
}

impl RangeFaults {
    pub(crate) fn add(&mut self, kind: RangeKind, nsid: u32, slba: u64, blocks: u64) {
        assert!(blocks > 0, "a fault over no blocks");
        assert!(self.ranges.len() < RANGE_FAULTS_MAX, "more than {RANGE_FAULTS_MAX} range faults");
        let end = slba.checked_add(blocks).expect("fault range overflows");
        self.ranges.push(RangeFault { kind, nsid, start: slba, end });
    }

    pub(crate) fn clear(&mut self) {
        self.ranges.clear();
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The first block of `[slba, slba + blocks)` a fault of `kind` covers.
    pub(crate) fn first_hit(&self, kind: RangeKind, nsid: u32, slba: u64, blocks: u64) -> Option<u64> {
        let end = slba + blocks;
        self.ranges
            .iter()
            .filter(|fault| fault.kind == kind && fault.nsid == nsid && fault.start < end && slba < fault.end)
            .map(|fault| fault.start.max(slba))
            .min()
    }

    /// Removes the unrecovered-read faults of the written blocks.
    pub(crate) fn heal(&mut self, nsid: u32, slba: u64, blocks: u64) {
        let end = slba + blocks;
        let mut index = 0;
        while index < self.ranges.len() {
            let fault = self.ranges[index];
            let hit =
                fault.kind == RangeKind::UnrecoveredRead && fault.nsid == nsid && fault.start < end && slba < fault.end;
            if !hit {
                index += 1;
                continue;
            }
            self.ranges.swap_remove(index);
            // What lies outside the written blocks stays bad.
            if fault.start < slba {
                self.ranges.push(RangeFault { end: slba, ..fault });
            }
            if fault.end > end {
                self.ranges.push(RangeFault { start: end, ..fault });
            }
        }
        // Keep a stable order: determinism does not depend on it (lookups
        // take the minimum), but readers of a Debug print might.
        self.ranges.sort_by_key(|fault| (fault.nsid, fault.start));
    }
}

/// Faults fired so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Reads failed with Unrecovered Read Error by a range fault.
    pub unrecovered_reads: u64,
    /// Reads delivered with a flipped bit by a range fault.
    pub read_bit_flips: u64,
    /// Writes failed with Write Fault by a range fault.
    pub write_faults: u64,
    /// Completions withheld ([`Fault::DropCompletions`],
    /// [`Fault::DropAdminCompletions`], [`Fault::HangReads`], or the
    /// dropped-completion probability).
    pub dropped_completions: u64,
    /// Times the controller entered the fatal state (CSTS.CFS = 1).
    pub controller_fatal: u64,
    /// Surprise removals injected.
    pub surprise_removals: u64,
    /// Disables (CC.EN 1 → 0) that [`Fault::WontDisable`] ignored.
    pub ignored_disables: u64,
    /// Function-level resets done.
    pub function_resets: u64,
    /// Hung commands an Abort ended.
    pub aborted_commands: u64,
    /// Bits flipped at rest by [`super::Simulator::corrupt_at_rest`].
    pub corrupted_at_rest: u64,
    /// Blocks overwritten at rest by [`super::Simulator::write_at_rest`].
    pub overwritten_at_rest_blocks: u64,
}

/// What the simulator did, for tests and benchmarks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimStats {
    /// Admin commands fetched, by opcode.
    pub admin_commands: [u64; 256],
    /// I/O commands fetched, by opcode.
    pub io_commands: [u64; 256],
    /// Logical blocks written (Write, Zone Append, Write Zeroes, Copy
    /// destinations), for benchmarks of write amplification.
    pub lbas_written: u64,
    /// Logical blocks read (Read commands that succeeded).
    pub lbas_read: u64,
    /// Completion queue entries written.
    pub completions_posted: u64,
    /// Completions executed but never posted (a dropped-completion fault).
    pub completions_dropped: u64,
    /// Completions held back because their CQ was full (the host had not
    /// announced the entries it consumed): a host that keeps its CQ from
    /// filling never causes one.
    pub completions_held_cq_full: u64,
    /// Completions that completed with an error status.
    pub errors: u64,
    /// Faults fired, by kind.
    pub faults: FaultStats,
    /// Power cuts ([`super::Simulator::power_cut`] and
    /// [`Fault::PowerCutAfter`]).
    pub power_cuts: u64,
    /// Accesses through an IOVA no mapping covers.
    pub dma_errors: u64,
    /// I/O commands whose data an SGL described (PSDT 01b), resolved.
    pub sgl_transfers: u64,
    /// Reads whose data moved after the controller's lock was let go
    /// (`sim/deferred.rs`).
    pub deferred_reads: u64,
    /// Reads and Writes carried out in a queue's lane, outside the
    /// controller's lock (`sim/lane.rs`).
    pub lane_commands: u64,
    /// Doorbell writes naming a queue that does not exist or a value out of
    /// range (ignored, as the spec lets a controller do).
    pub doorbell_errors: u64,
    /// I/O commands the controller had fetched and not yet completed
    /// (a completion waiting for its tick, or hung) when a reset (CC.EN 1
    /// → 0, or a function-level reset) dropped them. A controller may do
    /// that, but QEMU's device model (7.2 to 10.0) can then complete such a
    /// command after it freed its queue, and crash (docs/rig.md, "QEMU and
    /// removal"): an orderly removal deletes the I/O queues first, which
    /// ends their commands, and leaves none.
    pub io_dropped_by_resets: u64,
    /// Ticks so far.
    pub ticks: u64,
}

impl Default for SimStats {
    fn default() -> Self {
        SimStats {
            admin_commands: [0; 256],
            io_commands: [0; 256],
            lbas_written: 0,
            lbas_read: 0,
            completions_posted: 0,
            completions_dropped: 0,
            completions_held_cq_full: 0,
            errors: 0,
            faults: FaultStats::default(),
            power_cuts: 0,
            dma_errors: 0,
            sgl_transfers: 0,
            deferred_reads: 0,
            lane_commands: 0,
            doorbell_errors: 0,
            io_dropped_by_resets: 0,
            ticks: 0,
        }
    }
}

impl SimStats {
    /// Admin commands fetched with `opcode`.
    pub fn admin(&self, opcode: u8) -> u64 {
        self.admin_commands[usize::from(opcode)]
    }

    /// I/O commands fetched with `opcode`.
    pub fn io(&self, opcode: u8) -> u64 {
        self.io_commands[usize::from(opcode)]
    }
}

/// Unflushed blocks a power cut lost, as a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostRange {
    /// The namespace.
    pub nsid: u32,
    /// First lost logical block.
    pub slba: u64,
    /// Lost logical blocks from `slba`.
    pub blocks: u64,
}

/// A zone whose write pointer a power cut moved back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneRewind {
    /// The zoned namespace.
    pub nsid: u32,
    /// The zone's start LBA (ZSLBA).
    pub zslba: u64,
    /// The write pointer before the cut (the write boundary for a Full
    /// zone).
    pub wp_before: u64,
    /// The write pointer after: the end of the zone's persisted prefix.
    pub wp_after: u64,
}

/// What [`super::Simulator::power_cut`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PowerCutReport {
    /// Lost blocks, in (NSID, LBA) order, adjacent ones merged.
    pub lost: Vec<LostRange>,
    /// Lost blocks in all, the sum of `lost`'s lengths.
    pub lost_blocks: u64,
    /// Unflushed blocks that persisted anyway.
    pub kept_blocks: u64,
    /// Zones whose write pointer moved back to the end of what persisted.
    pub rewound_zones: Vec<ZoneRewind>,
    /// Commands executed whose completions were still waiting to be posted.
    pub completions_discarded: u64,
}

impl PowerCutReport {
    /// Whether block `lba` of `nsid` was lost.
    pub fn is_lost(&self, nsid: u32, lba: u64) -> bool {
        self.lost.iter().any(|range| range.nsid == nsid && (range.slba..range.slba + range.blocks).contains(&lba))
    }

    pub(crate) fn record_lost(&mut self, nsid: u32, lba: u64) {
        self.lost_blocks += 1;
        if let Some(last) = self.lost.last_mut() {
            if last.nsid == nsid && last.slba + last.blocks == lba {
                last.blocks += 1;
                return;
            }
        }
        self.lost.push(LostRange { nsid, slba: lba, blocks: 1 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_faults_hit_and_heal() {
        let mut faults = RangeFaults::default();
        faults.add(RangeKind::UnrecoveredRead, 1, 100, 10);
        faults.add(RangeKind::WriteFault, 1, 50, 1);
        assert_eq!(faults.first_hit(RangeKind::UnrecoveredRead, 1, 90, 20), Some(100));
        assert_eq!(faults.first_hit(RangeKind::UnrecoveredRead, 1, 105, 1), Some(105));
        assert_eq!(faults.first_hit(RangeKind::UnrecoveredRead, 2, 100, 1), None);
        assert_eq!(faults.first_hit(RangeKind::UnrecoveredRead, 1, 110, 1), None);
        faults.heal(1, 103, 2);
        assert_eq!(faults.first_hit(RangeKind::UnrecoveredRead, 1, 103, 2), None);
        assert_eq!(faults.first_hit(RangeKind::UnrecoveredRead, 1, 100, 5), Some(100));
        assert_eq!(faults.first_hit(RangeKind::UnrecoveredRead, 1, 104, 6), Some(105));
        assert_eq!(faults.first_hit(RangeKind::WriteFault, 1, 0, 100), Some(50), "writes do not heal write faults");
    }

    #[test]
    fn lost_ranges_merge() {
        let mut report = PowerCutReport::default();
        for lba in [1, 2, 3, 7] {
            report.record_lost(1, lba);
        }
        report.record_lost(2, 8);
        assert_eq!(report.lost.len(), 3);
        assert_eq!(report.lost[0], LostRange { nsid: 1, slba: 1, blocks: 3 });
        assert!(report.is_lost(1, 3) && !report.is_lost(1, 4) && report.is_lost(2, 8));
        assert_eq!(report.lost_blocks, 5);
    }
}
