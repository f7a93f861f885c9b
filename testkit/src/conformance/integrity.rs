//! integrity: seeded random writes over a region, several generations, every
//! block read back against a model of what it must hold.

use super::*;

/// Blocks each phase writes and verifies ("several thousand").
const INTEGRITY_REGION_BLOCKS: u64 = 4096;
/// Write generations; the first covers the whole region, each later one a
/// random half of it.
const INTEGRITY_GENERATIONS: u64 = 3;
/// Longest write or read extent, in blocks.
const INTEGRITY_EXTENT_BLOCKS_MAX: u32 = 16;
/// Queue depth of the full-depth phase (clamped to CAP.MQES+1).
const INTEGRITY_QUEUE_DEPTH: u32 = 256;

pub(super) fn integrity(target: &Target) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let region_blocks = INTEGRITY_REGION_BLOCKS;
    if ns.capacity_blocks() < 2 * region_blocks {
        return Err(format!("the namespace needs at least {} blocks", 2 * region_blocks));
    }
    let max_blocks = INTEGRITY_EXTENT_BLOCKS_MAX.min(target.blocks(ns.max_transfer_bytes() as usize) as u32);
    let extent_bytes = max_blocks as usize * block_bytes;

    let name = format!("integrity qd=1 lba={block_bytes}");
    check(&name, || {
        let mut qpair = target.queue_pair(2)?;
        let pool = target.pool(extent_bytes, 1)?;
        let (report, held) = integrity_phase(target, &mut qpair, &pool, 0, max_blocks, 1)?;
        target.ok(&name, format!("{report}, generations 1/2/3 hold {held}"));
        Ok(())
    })?;

    let name = format!("integrity qd=full lba={block_bytes}");
    check(&name, || {
        let depth = INTEGRITY_QUEUE_DEPTH.min(target.controller.cap().max_queue_entries());
        let mut qpair = target.queue_pair(depth as u16)?;
        let capacity = qpair.capacity();
        let pool = target.pool(extent_bytes, capacity)?;
        let (report, held) = integrity_phase(target, &mut qpair, &pool, region_blocks, max_blocks, capacity)?;
        if report.max_in_flight != capacity || !report.queue_full_checked {
            return Err(format!("reached {} of {capacity} in flight; the queue was never full", report.max_in_flight));
        }
        target.ok(
            &name,
            format!(
                "{report}, {capacity} in flight (capacity), a submit to the full queue handed the request back, generations 1/2/3 hold {held}"
            ),
        );
        Ok(())
    })
}

#[derive(Debug, Default)]
struct PhaseReport {
    blocks: u64,
    writes: usize,
    reads: usize,
    max_in_flight: usize,
    queue_full_checked: bool,
}

impl PhaseReport {
    fn add(&mut self, batch: &BatchReport, reads: bool) {
        if reads {
            self.reads += batch.commands;
        } else {
            self.writes += batch.commands;
        }
        self.max_in_flight = self.max_in_flight.max(batch.max_in_flight);
        self.queue_full_checked |= batch.queue_full_checked;
    }
}

impl fmt::Display for PhaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} blocks, {} writes and {} reads verified", self.blocks, self.writes, self.reads)
    }
}

/// Writes generation 1 over the region, then two more generations over
/// random halves, reading and checking the whole region after each later
/// generation. Returns how many blocks each generation holds at the end.
fn integrity_phase(
    target: &Target,
    qpair: &mut QueuePair,
    pool: &DmaPool,
    base: u64,
    max_blocks: u32,
    depth: usize,
) -> Outcome<(PhaseReport, String)> {
    let ns = &target.ns;
    let mut rng = Prng::with_stream(target.seed, base ^ depth as u64);
    let mut model = Model::new(base, INTEGRITY_REGION_BLOCKS, Expect::Zeroes);
    let mut report = PhaseReport { blocks: INTEGRITY_REGION_BLOCKS, ..PhaseReport::default() };
    for generation in 1..=INTEGRITY_GENERATIONS {
        let mut extents = random_extents(&mut rng, base, INTEGRITY_REGION_BLOCKS, max_blocks);
        if generation > 1 {
            // Disjoint extents, so no two writes in flight overlap.
            extents.truncate(extents.len() / 2);
        }
        let ops: Vec<Op> = extents.into_iter().map(|(slba, blocks)| Op::Write { slba, blocks, generation }).collect();
        let batch = run_batch(qpair, ns, pool, &mut model, &ops, depth)
            .map_err(|e| format!("generation {generation} writes: {e}"))?;
        report.add(&batch, false);
        if generation > 1 {
            let batch = verify_region(qpair, ns, pool, &mut model, &mut rng, max_blocks, depth)
                .map_err(|e| format!("reads after generation {generation}: {e}"))?;
            report.add(&batch, true);
        }
    }
    let held: Vec<usize> = (1..=INTEGRITY_GENERATIONS)
        .map(|generation| (base..model.end()).filter(|&lba| model.expect(lba) == lba_stamp(lba, generation)).count())
        .collect();
    let held_text = held.iter().map(usize::to_string).collect::<Vec<_>>().join("/");
    if held.contains(&0) {
        return Err(format!("a generation holds no blocks: {held_text}"));
    }
    Ok((report, held_text))
}
