//! The bare queue pair behind `perf --engine raw`, on the simulator: data
//! goes both ways through PRPs (with and without a list) and SGLs, many
//! commands in flight complete once each, and dropping it gives its queue
//! back to the controller.

mod sim_support;

use nvme_driver::cmd::nvm;
use nvme_driver::dma::{DmaMemory, DmaPool};
use nvme_driver::sim::{SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions, RawQueue, SglMode};
use sim_support::{pattern, transport};
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_secs(10);

fn controller(sgl: SglMode) -> Controller {
    let sim = Simulator::new(SimConfig::nvm(1 << 16, 512).with_completion_delay(0, 3));
    Controller::init(transport(&sim), ControllerOptions { sgl, ..sim_support::options() }).unwrap()
}

/// Waits until `count` commands completed; returns (cid, status) pairs.
fn reap(queue: &mut RawQueue, count: usize) -> Vec<(u16, u16)> {
    let started = Instant::now();
    let mut done = Vec::new();
    while done.len() < count {
        assert!(started.elapsed() < BOUND, "{} of {count} completions", done.len());
        queue.reap(|cid, status| done.push((cid, status)));
    }
    done
}

fn round_trip(sgl: SglMode, bs: usize) {
    let controller = controller(sgl);
    let mut queue = controller.create_raw_queue(64).unwrap();
    let pool = DmaPool::new(controller.transport(), bs, 32).unwrap();
    let blocks = (bs / 512) as u32;
    let writes: Vec<_> = (0..16u16).map(|cid| (cid, pool.get().unwrap())).collect();
    for (cid, buffer) in &writes {
        buffer.copy_in(0, &pattern(u64::from(*cid), bs));
        let command = nvm::write(1, u64::from(*cid) * u64::from(blocks), blocks, false);
        // SAFETY: the buffer is mapped for this controller and untouched
        // until its completion is reaped below.
        unsafe { queue.push(command, *cid, buffer.iova(), bs) }.unwrap();
    }
    queue.ring();
    let mut done = reap(&mut queue, 16);
    done.sort_unstable();
    assert_eq!(done, (0..16).map(|cid| (cid, 0)).collect::<Vec<_>>(), "each write once, with success");
    let reads: Vec<_> = (0..16u16).map(|cid| (cid, pool.get().unwrap())).collect();
    for (cid, buffer) in &reads {
        let command = nvm::read(1, u64::from(*cid) * u64::from(blocks), blocks);
        // SAFETY: as above.
        unsafe { queue.push(command, *cid, buffer.iova(), bs) }.unwrap();
    }
    queue.ring();
    assert_eq!(reap(&mut queue, 16).len(), 16);
    for (cid, buffer) in &reads {
        let mut data = vec![0; bs];
        buffer.copy_out(0, &mut data);
        assert!(data == pattern(u64::from(*cid), bs), "cid {cid}: the data read is not the data written");
    }
}

#[test]
fn data_round_trips_through_prps_without_and_with_a_list() {
    round_trip(SglMode::Never, 4096);
    round_trip(SglMode::Never, 64 * 1024);
}

#[test]
fn data_round_trips_through_an_sgl_descriptor() {
    round_trip(SglMode::Always, 64 * 1024);
}

#[test]
fn dropping_a_raw_queue_gives_its_queue_id_back() {
    let controller = controller(SglMode::Auto);
    let queues = controller.io_queue_pairs();
    let held: Vec<_> = (0..queues).map(|_| controller.create_raw_queue(8).unwrap()).collect();
    assert!(controller.create_raw_queue(8).is_err(), "every queue id is in use");
    drop(held);
    let _again = controller.create_raw_queue(8).unwrap();
}
