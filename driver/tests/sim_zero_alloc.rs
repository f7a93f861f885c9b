//! The simulator's command path allocates nothing once warm: reads,
//! cached and FUA writes and flushes, submitted or sent again in place,
//! driver and device side together,
//! counted by a global allocator. (One test in this binary, so no other
//! test allocates concurrently.)

use nvme_testkit::alloc::{allocations_during, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;
mod sim_support;

use nvme_driver::dma::DmaMemory;
use nvme_driver::sim::SimConfig;
use nvme_driver::{IoBuffer, IoCompletion};
use sim_support::Rig;

#[test]
fn the_command_path_allocates_nothing_once_warm() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    let mut buffers: Vec<Option<IoBuffer>> = (0..32).map(|_| Some(rig.buffer(4096))).collect();
    for buffer in buffers.iter().flatten() {
        buffer.buffer().fill(0, 4096, 0xA5);
    }
    let mut completions: Vec<IoCompletion> = Vec::with_capacity(64);
    let mut cycle = |rig: &mut Rig, completions: &mut Vec<IoCompletion>| {
        for (token, slot) in buffers.iter_mut().enumerate() {
            let lba = token as u64 * 8;
            let request = match token % 3 {
                0 => rig.ns.read(lba, slot.take().unwrap(), token as u64),
                1 => rig.ns.write(lba, slot.take().unwrap(), false, token as u64),
                _ => rig.ns.write(lba, slot.take().unwrap(), true, token as u64),
            };
            rig.pair.submit(request.unwrap()).map_err(|(error, _)| error).unwrap();
        }
        rig.pair.submit(rig.ns.flush(99)).map_err(|(error, _)| error).unwrap();
        while completions.len() < 33 {
            rig.pair.poll(|done| completions.push(done));
        }
        for completion in completions.drain(..) {
            completion.status.unwrap();
            if let Some(buffer) = completion.buffer {
                buffers[completion.token as usize] = Some(buffer);
            }
        }
    };
    // Warm up: chunks, maps and scratch reach their working size.
    for _ in 0..4 {
        cycle(&mut rig, &mut completions);
    }
    let allocations = allocations_during(|| {
        for _ in 0..100 {
            cycle(&mut rig, &mut completions);
        }
    });
    assert_eq!(allocations, 0, "allocations on the command path");

    // In place: each finished command goes again from its slot, reads and
    // writes in turn, and a deadline check or two runs among the passes.
    for (token, slot) in buffers.iter_mut().enumerate() {
        let request = rig.ns.read(token as u64 * 8, slot.take().unwrap(), token as u64).unwrap();
        rig.pair.submit(request).map_err(|(error, _)| error).unwrap();
    }
    let mut sent = 0u64;
    let mut in_place = |rig: &mut Rig, passes: usize| {
        for _ in 0..passes {
            let (ns, pair) = (&rig.ns, &mut rig.pair);
            pair.poll_in_place(|done| {
                done.status().unwrap();
                let token = done.token();
                let lba = (token + sent) % 64 * 8;
                sent += 1;
                let again =
                    if sent.is_multiple_of(2) { done.read(ns, lba, token) } else { done.write(ns, lba, false, token) };
                again.map_err(|(error, _)| error).unwrap();
            });
        }
    };
    in_place(&mut rig, 64);
    let allocations = allocations_during(|| in_place(&mut rig, 2000));
    assert!(sent > 2000, "{sent} sent again");
    assert_eq!(allocations, 0, "allocations on the in-place path");
}
