//! One seed, one single-threaded sequence of driver actions: one outcome,
//! bit for bit. A different seed gives a different one.

mod sim_support;

use nvme_driver::dma::DmaMemory;
use nvme_driver::sim::{FaultConfig, PowerCutReport, SimConfig};
use sim_support::{pattern, Rig};

/// Everything observable about a run.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    trace_hash: u64,
    completions: Vec<(u64, u16)>,
    report: PowerCutReport,
    data: Vec<u8>,
    ticks: u64,
}

fn run(seed: u64) -> Outcome {
    let faults = FaultConfig {
        unrecovered_read_probability: 0.05,
        read_bit_flip_probability: 0.05,
        write_fault_probability: 0.05,
        dropped_completion_probability: 0.0,
        power_cut_keep_probability: 0.5,
    };
    let config =
        SimConfig::nvm(1 << 12, 512).with_seed(seed).with_completion_delay(0, 4).with_reorder(true).with_faults(faults);
    let mut rig = Rig::new(config);
    // The workload itself is fixed: only the simulator's seed varies.
    let mut completions = Vec::new();
    let mut next = 0u64;
    for round in 0..20u64 {
        for slot in 0..16u64 {
            let token = round * 16 + slot;
            let lba = (token * 37) % 4000;
            let request = if token % 3 == 0 {
                rig.ns.read(lba, rig.buffer(4096), token).unwrap()
            } else {
                rig.ns.write(lba, rig.buffer_with(&pattern(token, 4096)), token % 5 == 0, token).unwrap()
            };
            rig.pair.submit(request).map_err(|(error, _)| error).unwrap();
        }
        if round % 4 == 1 {
            let flush = rig.ns.flush(10_000 + round);
            rig.pair.submit(flush).map_err(|(error, _)| error).unwrap();
        }
        while rig.pair.in_flight() > 0 {
            rig.pair.poll(|done| {
                let status = sim_support::device(done.status).map_or_else(|status| status.to_field(), |()| 0);
                completions.push((done.token, status));
                if let Some(buffer) = done.buffer {
                    // Reads fold the data they returned into the record.
                    let mut first = [0u8; 8];
                    buffer.buffer().copy_out(0, &mut first);
                    next = next.wrapping_mul(31).wrapping_add(u64::from_le_bytes(first));
                }
            });
        }
    }
    completions.push((next, 0));
    let sim = rig.finish_without_shutdown();
    let report = sim.power_cut();
    let mut rig = Rig::on(sim);
    let mut data = Vec::new();
    for lba in (0..4096).step_by(256) {
        data.extend(rig.read(lba, 128 * 1024).unwrap_or_default());
    }
    Outcome { trace_hash: rig.sim.trace_hash(), completions, report, data, ticks: rig.sim.now() }
}

#[test]
fn the_same_seed_replays_bit_for_bit() {
    let first = run(1234);
    let second = run(1234);
    assert_eq!(first.trace_hash, second.trace_hash);
    assert_eq!(first, second);
    // The run exercised what it claims to.
    assert!(first.report.lost_blocks > 0 && first.report.kept_blocks > 0);
    assert!(first.completions.iter().any(|(_, status)| *status != 0), "some faults fired");
    let tokens: Vec<u64> = first.completions.iter().map(|(token, _)| *token).take(16).collect();
    assert!(tokens.windows(2).any(|pair| pair[0] > pair[1]), "completions were reordered");
}

#[test]
fn another_seed_gives_another_run() {
    let first = run(1);
    let second = run(2);
    assert_ne!(first.trace_hash, second.trace_hash);
    assert_ne!(first.completions, second.completions);
}

/// A run with no fault, delay or reordering, where reads (of 16 KiB, large
/// enough) may move their data outside the simulator's lock
/// (`sim/deferred.rs`), or not, and queues may be lent to lanes
/// (`sim/lane.rs`), or not: each batch reads blocks and then writes the
/// same blocks, so a read that moved late would return the write's data.
/// Returns the reads deferred and the commands carried out in lanes.
fn run_reads(under_lock: bool, lanes: bool) -> (Outcome, u64, u64) {
    let config = SimConfig::nvm(1 << 12, 512).with_seed(7).with_reads_under_lock(under_lock).with_lanes(lanes);
    let mut rig = Rig::new(config);
    let mut completions = Vec::new();
    let mut next = 0u64;
    for round in 0..24u64 {
        for slot in 0..16u64 {
            let token = round * 16 + slot;
            // Pairs of tokens share an LBA: the read first, then the write.
            let lba = (token / 2 * 37) % 4000;
            let request = if token % 2 == 0 {
                rig.ns.read(lba, rig.buffer(16384), token).unwrap()
            } else {
                rig.ns.write(lba, rig.buffer_with(&pattern(token, 16384)), false, token).unwrap()
            };
            rig.pair.submit(request).map_err(|(error, _)| error).unwrap();
        }
        while rig.pair.in_flight() > 0 {
            rig.pair.poll(|done| {
                let status = sim_support::device(done.status).map_or_else(|status| status.to_field(), |()| 0);
                completions.push((done.token, status));
                if let Some(buffer) = done.buffer {
                    let mut bytes = vec![0u8; 16384];
                    buffer.buffer().copy_out(0, &mut bytes);
                    for word in bytes.chunks(8) {
                        next = next.wrapping_mul(31).wrapping_add(u64::from_le_bytes(word.try_into().unwrap()));
                    }
                }
            });
        }
    }
    completions.push((next, 0));
    let stats = rig.sim.stats();
    let mut data = Vec::new();
    for lba in (0..4096).step_by(256) {
        data.extend(rig.read(lba, 128 * 1024).unwrap_or_default());
    }
    let outcome = Outcome {
        trace_hash: rig.sim.trace_hash(),
        completions,
        report: PowerCutReport::default(),
        data,
        ticks: rig.sim.now(),
    };
    (outcome, stats.deferred_reads, stats.lane_commands)
}

#[test]
fn reads_moved_outside_the_lock_change_nothing_one_thread_sees() {
    let (under_lock, none, _) = run_reads(true, false);
    let (outside, deferred, _) = run_reads(false, false);
    assert_eq!(none, 0, "every read moved under the lock");
    assert!(deferred >= 24 * 8, "the reads moved outside the lock: {deferred}");
    assert_eq!(outside.trace_hash, under_lock.trace_hash);
    assert_eq!(outside, under_lock);
    // Reads returned what was there before the write behind them: the
    // earlier round's pattern or zeroes, never their own batch's write.
    assert!(outside.completions.iter().all(|&(_, status)| status == 0));
}

#[test]
fn queues_lent_to_lanes_change_nothing_one_thread_sees() {
    let (under_lock, _, none) = run_reads(true, false);
    let (lanes, _, lent) = run_reads(false, true);
    assert_eq!(none, 0, "no lane without lanes");
    // 24 rounds of 16 commands; the first doorbell of the queue is always
    // the state's, which then lends it.
    assert!(lent >= 24 * 16 - 16, "the reads and writes ran in the lane: {lent}");
    assert_eq!(lanes.trace_hash, under_lock.trace_hash);
    assert_eq!(lanes, under_lock);
    assert!(lanes.completions.iter().all(|&(_, status)| status == 0));
}
