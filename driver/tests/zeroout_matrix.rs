//! The zero-out strategy over the capability matrix: quirks, ONCS.WZ,
//! ONCS.DSM, DLFEAT (000/001/010, with and without bit 3), WZSL zero and
//! non-zero, DSM limits. Asserts the strategy chosen and the exact commands
//! issued for a range that needs splitting, including the Linux 6.12 case:
//! the deallocate-zeroes quirk without DSM must never issue DSM.

use nvme_driver::quirks::Quirks;
use nvme_driver::spec::identify::Oncs;
use nvme_driver::zeroout::{plan, ZeroCapabilities, ZeroOp, ZeroStrategy};
use nvme_driver::RangeLimits;

const BLOCK: u32 = 512;

fn caps(quirks: Quirks, wz: bool, dsm: bool, dlfeat: u8, wzsl_bytes: Option<u64>) -> ZeroCapabilities {
    let mut oncs = Oncs::COMPARE | Oncs::COPY;
    oncs.set(Oncs::WRITE_ZEROES, wz);
    oncs.set(Oncs::DATASET_MANAGEMENT, dsm);
    ZeroCapabilities {
        block_size: BLOCK,
        capacity_blocks: 1 << 30,
        oncs,
        quirks,
        dlfeat,
        write_zeroes_max_bytes: wzsl_bytes,
        max_transfer_bytes: 128 * 1024,
        dsm: RangeLimits { dsm_ranges: 4, dsm_range_blocks: 1000, dsm_total_blocks: 3000, ..RangeLimits::default() },
        deallocate_granularity_blocks: 8,
        deallocate_alignment_blocks: 8,
        zone_size_blocks: None,
    }
}

/// The rule, written independently of the implementation.
fn expected_first(quirks: Quirks, wz: bool, dsm: bool) -> ZeroStrategy {
    if wz && !quirks.contains(Quirks::DISABLE_WRITE_ZEROES) {
        ZeroStrategy::WriteZeroes
    } else if quirks.contains(Quirks::DEALLOCATE_ZEROES) && dsm {
        ZeroStrategy::DeallocateAsZeroes
    } else {
        ZeroStrategy::ZeroBuffer
    }
}

fn plan_all(c: &ZeroCapabilities, allow_unmap: bool) -> Vec<(ZeroStrategy, Vec<ZeroOp>)> {
    let allowed = c.strategies();
    allowed
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let fallback = allowed.get(i + 1).copied().unwrap_or(ZeroStrategy::ZeroBuffer);
            (s, plan(s, fallback, c, 1003, 20_000, allow_unmap, 256))
        })
        .collect()
}

#[test]
fn the_whole_matrix() {
    let quirk_sets = [Quirks::empty(), Quirks::DEALLOCATE_ZEROES, Quirks::DISABLE_WRITE_ZEROES, Quirks::all()];
    let mut rows = 0;
    for quirks in quirk_sets {
        for wz in [false, true] {
            for dsm in [false, true] {
                for read_behavior in [0b000u8, 0b001, 0b010] {
                    for deac_bit in [false, true] {
                        for wzsl in [None, Some(16 * 1024u64)] {
                            for allow_unmap in [false, true] {
                                rows += 1;
                                let dlfeat = read_behavior | if deac_bit { 1 << 3 } else { 0 };
                                let c = caps(quirks, wz, dsm, dlfeat, wzsl);
                                let allowed = c.strategies();
                                let what =
                                    format!("quirks {quirks:?} wz {wz} dsm {dsm} dlfeat {dlfeat:#05b} wzsl {wzsl:?}");
                                assert_eq!(allowed[0], expected_first(quirks, wz, dsm), "{what}");
                                assert_eq!(*allowed.last().unwrap(), ZeroStrategy::ZeroBuffer, "{what}");
                                for (strategy, ops) in plan_all(&c, allow_unmap) {
                                    for op in &ops {
                                        match op {
                                            ZeroOp::Deallocate { ranges } => {
                                                // Never DSM without ONCS.DSM (6.12), nor
                                                // without the quirk.
                                                assert!(dsm && quirks.contains(Quirks::DEALLOCATE_ZEROES), "{what}");
                                                assert!(ranges.len() <= 4 && ranges.iter().all(|r| r.1 <= 1000));
                                                assert!(ranges.iter().map(|r| u64::from(r.1)).sum::<u64>() <= 3000);
                                                assert!(ranges.iter().all(|r| r.0 % 8 == 0 && r.1 % 8 == 0), "aligned");
                                            }
                                            ZeroOp::WriteZeroes { blocks, deallocate, .. } => {
                                                assert!(wz && !quirks.contains(Quirks::DISABLE_WRITE_ZEROES), "{what}");
                                                let max = wzsl.unwrap_or(128 * 1024) / u64::from(BLOCK);
                                                assert!(u64::from(*blocks) <= max, "{what}: split by WZSL else MDTS");
                                                let deac = allow_unmap && read_behavior == 0b001 && deac_bit;
                                                assert_eq!(*deallocate, deac, "{what}: DEAC");
                                            }
                                            ZeroOp::ZeroWrite { blocks, .. } => assert!(*blocks <= 256),
                                            ZeroOp::ZoneReset { .. } => panic!("no zones here"),
                                        }
                                    }
                                    let total: u64 = ops.iter().map(ZeroOp::blocks).sum();
                                    assert_eq!(total, 20_000, "{what}: {strategy:?} covers the range once");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(rows, 4 * 2 * 2 * 3 * 2 * 2 * 2);
}

#[test]
fn the_linux_6_12_case_never_issues_dsm() {
    // The quirk is set, but the firmware has Dataset Management disabled.
    let c = caps(Quirks::DEALLOCATE_ZEROES, false, false, 0b001, None);
    assert_eq!(c.strategies(), vec![ZeroStrategy::ZeroBuffer]);
    for (_, ops) in plan_all(&c, true) {
        assert!(ops.iter().all(|op| !matches!(op, ZeroOp::Deallocate { .. })));
    }
}

#[test]
fn exact_commands_for_a_split_range() {
    // Write Zeroes with WZSL 16 KiB (32 blocks), DEAC allowed.
    let c = caps(Quirks::empty(), true, true, 0b1001, Some(16 * 1024));
    let ops = plan(ZeroStrategy::WriteZeroes, ZeroStrategy::ZeroBuffer, &c, 100, 70, true, 256);
    assert_eq!(
        ops,
        vec![
            ZeroOp::WriteZeroes { slba: 100, blocks: 32, deallocate: true },
            ZeroOp::WriteZeroes { slba: 132, blocks: 32, deallocate: true },
            ZeroOp::WriteZeroes { slba: 164, blocks: 6, deallocate: true },
        ]
    );
    // WZSL 0: bounded by MDTS (128 KiB = 256 blocks).
    let c = caps(Quirks::empty(), true, false, 0, None);
    let ops = plan(ZeroStrategy::WriteZeroes, ZeroStrategy::ZeroBuffer, &c, 0, 600, true, 256);
    assert_eq!(
        ops,
        vec![
            ZeroOp::WriteZeroes { slba: 0, blocks: 256, deallocate: false },
            ZeroOp::WriteZeroes { slba: 256, blocks: 256, deallocate: false },
            ZeroOp::WriteZeroes { slba: 512, blocks: 88, deallocate: false },
        ]
    );
    // Deallocate-as-zeroes: 8-block granularity, ranges of at most 1000
    // blocks (kept on the granularity: 1000), 4 ranges and 3000 blocks per
    // command; the unaligned head (3..8) and tail (2508..2510) are zeroed
    // by Write Zeroes.
    let c = caps(Quirks::DEALLOCATE_ZEROES, true, true, 0b001, None);
    let ops = plan(ZeroStrategy::DeallocateAsZeroes, ZeroStrategy::WriteZeroes, &c, 3, 2507, true, 256);
    assert_eq!(
        ops,
        vec![
            ZeroOp::WriteZeroes { slba: 3, blocks: 5, deallocate: false },
            ZeroOp::Deallocate { ranges: vec![(8, 1000), (1008, 1000), (2008, 496)] },
            ZeroOp::WriteZeroes { slba: 2504, blocks: 6, deallocate: false },
        ]
    );
    // Zero-buffer writes of at most 256 blocks (the buffer), 128 KiB.
    let c = caps(Quirks::DISABLE_WRITE_ZEROES, true, false, 0, None);
    let ops = plan(ZeroStrategy::ZeroBuffer, ZeroStrategy::ZeroBuffer, &c, 10, 300, false, 256);
    assert_eq!(ops, vec![ZeroOp::ZeroWrite { slba: 10, blocks: 256 }, ZeroOp::ZeroWrite { slba: 266, blocks: 44 }]);
}

#[test]
fn whole_zones_with_unmap_are_reset() {
    let mut c = caps(Quirks::empty(), true, true, 0b001, None);
    c.zone_size_blocks = Some(1024);
    assert_eq!(
        plan(ZeroStrategy::WriteZeroes, ZeroStrategy::ZeroBuffer, &c, 2048, 2048, true, 256),
        vec![ZeroOp::ZoneReset { zslba: 2048 }, ZeroOp::ZoneReset { zslba: 3072 }]
    );
    // Without unmapping, or for part of a zone, the blocks are written.
    assert!(plan(ZeroStrategy::WriteZeroes, ZeroStrategy::ZeroBuffer, &c, 2048, 2048, false, 256)
        .iter()
        .all(|op| matches!(op, ZeroOp::WriteZeroes { .. })));
    assert!(plan(ZeroStrategy::WriteZeroes, ZeroStrategy::ZeroBuffer, &c, 2048, 100, true, 256)
        .iter()
        .all(|op| matches!(op, ZeroOp::WriteZeroes { .. })));
}
