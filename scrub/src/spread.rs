//! Where a distributed rebuild writes each copy: spread so that every
//! survivor ends with the same work, its reads and its writes together.
//!
//! Each missing copy is read from one survivor (`Volume::copy_source`,
//! known before the first read) and may not be written back to it. Chosen
//! one at a time by the least work so far, the copies read from the
//! survivor holding the most ended on the others, which were then the
//! busiest (a pool of four: 1.47 times faster than a replace, against 1.5
//! balanced). So the rebuild first plans what share of the copies read
//! from each survivor goes to each other one (a transport plan with no
//! survivor writing what it reads, scaled in turns to each survivor's
//! reads and its share of the writes: Sinkhorn's matrix balancing). Then
//! each copy goes to the lane whose work at the end looks least: its work
//! so far, and the plan's share of what is still to be read from each
//! survivor. Early on that follows the plan; near the end it evens out
//! what whole copies left uneven.
//!
//! The survivors holding the metadata copies also write the rebuild's
//! journal: the plan charges them its operations
//! (`Volume::relocation_journal_blocks`). Owner pages, the checkpoint the
//! log may move to, and the checksum areas read and written are not
//! charged. In the simulator's test
//! (`the_distributed_rebuild_spreads_its_work_over_every_survivor`) the
//! busiest survivor does 1.50 times less than a replace's new device at
//! four devices and 3.44 times less at eight, against 1.5 and 3.5 with no
//! work but the copies; with the areas and the journal the work of eight
//! is 3.4955 times a replace's even if it were spread perfectly.

/// The plan and what was charged to it so far.
#[derive(Debug, Default)]
pub(crate) struct Spread {
    /// Per lane, its reads in all, what else it writes (`plan`'s
    /// `extra`), and the copies written to it so far, in blocks.
    load: Vec<f64>,
    /// Per source lane and target lane: the share of the source's reads
    /// the plan writes to the target.
    share: Vec<Vec<f64>>,
    /// Per source lane: blocks of copies still to be read from it.
    left: Vec<f64>,
}

impl Spread {
    /// No plan: every lane starts at no work (a replace writes one lane).
    pub fn none(lanes: usize) -> Spread {
        Spread { load: vec![0.0; lanes], share: Vec::new(), left: Vec::new() }
    }

    /// The plan for copies read `reads[s]` blocks from each lane `s`
    /// (none from lanes that are not survivors) and written to the other
    /// survivors, each of which writes `extra[l]` blocks besides (the
    /// rebuild's journal, on the lanes holding a metadata copy).
    pub fn plan(reads: &[u64], extra: &[u64]) -> Spread {
        let lanes = reads.len();
        let survivors: Vec<usize> = (0..lanes).filter(|&l| reads[l] > 0).collect();
        let extra = |l: usize| extra.get(l).copied().unwrap_or(0) as f64;
        let mut quota = vec![vec![0.0; lanes]; lanes];
        let total: u64 = reads.iter().sum();
        if survivors.len() >= 2 {
            // Each survivor's share of the writes: what brings it to the
            // same work as every other (reads, writes and its extra), none
            // for one that does more than that already.
            let all = 2.0 * total as f64 + survivors.iter().map(|&l| extra(l)).sum::<f64>();
            let even = all / survivors.len() as f64;
            let mut wanted: Vec<f64> = (0..lanes).map(|l| (even - reads[l] as f64 - extra(l)).max(0.0)).collect();
            let sum: f64 = survivors.iter().map(|&l| wanted[l]).sum();
            if sum > 0.0 {
                wanted.iter_mut().for_each(|w| *w *= total as f64 / sum);
            }
            for &s in &survivors {
                for &t in &survivors {
                    quota[s][t] = if s == t { 0.0 } else { 1.0 };
                }
            }
            for _ in 0..64 {
                for &s in &survivors {
                    let row: f64 = quota[s].iter().sum();
                    if row > 0.0 {
                        let scale = reads[s] as f64 / row;
                        quota[s].iter_mut().for_each(|q| *q *= scale);
                    }
                }
                for &t in &survivors {
                    let column: f64 = survivors.iter().map(|&s| quota[s][t]).sum();
                    if column > 0.0 {
                        let scale = wanted[t] / column;
                        survivors.iter().for_each(|&s| quota[s][t] *= scale);
                    }
                }
            }
        }
        let share = (0..lanes)
            .map(|s| {
                let row: f64 = quota[s].iter().sum();
                quota[s].iter().map(|q| if row > 0.0 { q / row } else { 0.0 }).collect()
            })
            .collect();
        Spread {
            load: (0..lanes).map(|l| reads[l] as f64 + extra(l)).collect(),
            share,
            left: reads.iter().map(|&r| r as f64).collect(),
        }
    }

    /// Of the lanes in `eligible` (a bit per lane), the one a copy of
    /// `blocks` read from lane `source` goes to: the one whose work at the
    /// end, as far as it can be told now, is least. That is its load so
    /// far and what the plan sends it of the copies still to be read from
    /// each survivor. Early on this follows the plan; towards the end,
    /// when little is left to be read, it evens out what the plan's whole
    /// copies left uneven. Charged the blocks.
    pub fn choose(&mut self, source: Option<usize>, eligible: u32, blocks: u64) -> Option<usize> {
        if let Some(left) = source.and_then(|s| self.left.get_mut(s)) {
            *left = (*left - blocks as f64).max(0.0);
        }
        let lanes = (0..32usize).filter(|&lane| eligible & (1 << lane) != 0);
        let lane = lanes.min_by(|&a, &b| self.projected(a).total_cmp(&self.projected(b)))?;
        if let Some(load) = self.load.get_mut(lane) {
            *load += blocks as f64;
        }
        Some(lane)
    }

    /// Lane `lane`'s work at the end, as far as it can be told now.
    fn projected(&self, lane: usize) -> f64 {
        let coming: f64 =
            self.left.iter().zip(&self.share).map(|(left, row)| left * row.get(lane).unwrap_or(&0.0)).sum();
        self.load.get(lane).copied().unwrap_or(0.0) + coming
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each survivor's work (reads, extra and copies written) when copies
    /// of 32 blocks are read round robin from the survivors while each has
    /// some left (as the rebuild's walks go in parallel) and placed by the
    /// plan for `reads` and `extra`.
    fn work(reads: &[u64], extra: &[u64]) -> Vec<u64> {
        let survivors = reads.iter().filter(|&&r| r > 0).count();
        let all: u32 = (1 << survivors) - 1;
        let mut spread = Spread::plan(reads, extra);
        let mut written = vec![0u64; reads.len()];
        let mut left = reads.to_vec();
        while left.iter().any(|&l| l > 0) {
            for (source, left) in left.iter_mut().enumerate().take(survivors) {
                if *left == 0 {
                    continue;
                }
                let eligible = all & !(1 << source);
                let lane = spread.choose(Some(source), eligible, 32).unwrap();
                assert_ne!(lane, source, "a copy goes back to the lane it was read from");
                written[lane] += 32;
                *left -= 32;
            }
        }
        (0..survivors).map(|l| reads[l] + extra.get(l).copied().unwrap_or(0) + written[l]).collect()
    }

    #[test]
    fn the_plan_brings_every_survivor_to_the_same_work_and_none_writes_what_it_reads() {
        // The pool of four of the rebuild test: survivors 0, 1 and 2. Each
        // ends within one copy of the even share.
        let reads = [1696u64, 1824, 2112, 0];
        let work = work(&reads, &[]);
        let even = 2 * reads.iter().sum::<u64>() / 3;
        for (lane, &w) in work.iter().enumerate() {
            assert!(w.abs_diff(even) <= 32, "lane {lane}: {w} blocks of work, even {even} ({work:?})");
        }
    }

    #[test]
    fn the_survivors_holding_the_metadata_write_fewer_copies() {
        // The pool of eight: seven survivors, the first three holding the
        // metadata, each writing 64 blocks of journal besides.
        let reads = [960u64, 704, 416, 768, 1024, 832, 1088, 0];
        let extra = [64u64, 64, 64, 0, 0, 0, 0, 0];
        let work = work(&reads, &extra);
        let even = (2 * reads.iter().sum::<u64>() + extra.iter().sum::<u64>()) / 7;
        for (lane, &w) in work.iter().enumerate() {
            assert!(w.abs_diff(even) <= 32, "lane {lane}: {w} blocks of work, even {even} ({work:?})");
        }
    }

    #[test]
    fn with_no_plan_the_least_loaded_eligible_lane_is_chosen() {
        let mut spread = Spread::none(3);
        assert_eq!(spread.choose(None, 0b110, 8), Some(1));
        assert_eq!(spread.choose(None, 0b110, 8), Some(2));
        assert_eq!(spread.choose(None, 0b110, 8), Some(1));
        assert_eq!(spread.choose(None, 0, 8), None);
    }
}
