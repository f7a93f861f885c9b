//! SGL data pointers over the simulator: which commands use them (the
//! controller's SGLS and `ControllerOptions::sgl`), and transfers past
//! what one PRP list page describes.

mod sim_support;

use nvme_driver::dma::{DmaMemory, DmaPool, PAGE_SIZE};
use nvme_driver::queue::prp;
use nvme_driver::sim::{SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions, IoBuffer, SglMode};
use sim_support::{options, pattern};
use std::sync::Arc;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(2);

fn controller(sim: &Arc<Simulator>, sgl: SglMode) -> Controller {
    Controller::init(sim.clone(), ControllerOptions { sgl, ..options() }).expect("bring-up over the simulator")
}

/// Writes `data` at `lba` and reads it back through `controller`, in one
/// command each; returns what was read.
fn round_trip(controller: &Controller, pool: &DmaPool, lba: u64, data: &[u8]) -> Vec<u8> {
    let ns = controller.namespace(1).unwrap();
    let mut pair = controller.create_queue_pair(8).unwrap();
    let buffer = IoBuffer::range(pool.get().unwrap(), 0, data.len());
    buffer.buffer().copy_in(0, data);
    let request = ns.write(lba, buffer, false, 1).unwrap();
    pair.execute(request, BOUND).unwrap().status.unwrap();
    let request = ns.read(lba, IoBuffer::range(pool.get().unwrap(), 0, data.len()), 2).unwrap();
    let done = pair.execute(request, BOUND).unwrap();
    done.status.unwrap();
    let mut out = vec![0u8; data.len()];
    done.buffer.expect("the read's buffer").buffer().copy_out(0, &mut out);
    out
}

#[test]
fn the_controller_and_the_mode_choose_sgls_by_length() {
    // (SGLS, mode, length): whether the transfer went by SGL.
    let cases = [
        (0b01, SglMode::Auto, 4096, false),
        (0b01, SglMode::Auto, 8192, false),
        (0b01, SglMode::Auto, 12288, true),
        (0b01, SglMode::Auto, 64 * 1024, true),
        (0b01, SglMode::Always, 512, true),
        (0b01, SglMode::Never, 64 * 1024, false),
        (0b00, SglMode::Always, 64 * 1024, false),
        (0b00, SglMode::Auto, 64 * 1024, false),
    ];
    for (sgls, mode, len, expected) in cases {
        let mut config = SimConfig::nvm(1 << 16, 512);
        config.sgls = sgls;
        let sim = Simulator::new(config);
        let controller = controller(&sim, mode);
        let pool = DmaPool::new(controller.transport(), 64 * 1024, 4).unwrap();
        let data = pattern(len as u64, len);
        assert_eq!(round_trip(&controller, &pool, 64, &data), data, "SGLS {sgls:#b}, {mode:?}, {len} bytes");
        let sgl_transfers = sim.stats().sgl_transfers;
        assert_eq!(sgl_transfers, if expected { 2 } else { 0 }, "SGLS {sgls:#b}, {mode:?}, {len} bytes");
    }
}

#[test]
fn auto_goes_by_the_pages_a_buffer_spans() {
    // 8 KiB from 512 bytes into a page spans three pages: PRPs would need
    // a list, so an SGL describes it.
    let sim = Simulator::new(SimConfig::nvm(1 << 16, 512));
    let controller = controller(&sim, SglMode::Auto);
    let ns = controller.namespace(1).unwrap();
    let mut pair = controller.create_queue_pair(8).unwrap();
    let pool = DmaPool::new(controller.transport(), 16 * 1024, 2).unwrap();
    let data = pattern(8, 8192);
    let buffer = IoBuffer::range(pool.get().unwrap(), 512, 8192);
    buffer.buffer().copy_in(512, &data);
    pair.execute(ns.write(0, buffer, false, 1).unwrap(), BOUND).unwrap().status.unwrap();
    assert_eq!(sim.stats().sgl_transfers, 1);
    let aligned = IoBuffer::range(pool.get().unwrap(), 0, 8192);
    let done = pair.execute(ns.read(0, aligned, 2).unwrap(), BOUND).unwrap();
    done.status.unwrap();
    let mut out = vec![0u8; 8192];
    done.buffer.unwrap().buffer().copy_out(0, &mut out);
    assert_eq!(out, data);
    assert_eq!(sim.stats().sgl_transfers, 1, "an aligned 8 KiB buffer is PRP1 and PRP2");
}

#[test]
fn one_sgl_descriptor_carries_what_no_prp_list_page_can() {
    // MDTS 4 MiB: past the 2 MiB one PRP list page describes.
    let mut config = SimConfig::nvm(1 << 16, 4096);
    config.mdts = 10;
    let sim = Simulator::new(config);
    let len = 4 << 20;
    assert!(len > prp::MAX_TRANSFER_BYTES);
    let with_sgls = controller(&sim, SglMode::Auto);
    assert_eq!(with_sgls.namespace(1).unwrap().max_transfer_bytes(), len as u64, "MDTS bounds it, not PRPs");
    let pool = DmaPool::new(with_sgls.transport(), len, 2).unwrap();
    let data = pattern(4, len);
    assert_eq!(round_trip(&with_sgls, &pool, 0, &data), data);
    assert_eq!(sim.stats().sgl_transfers, 2);
    drop(pool);
    drop(with_sgls);
    // The same blocks read back through PRPs, in the halves they allow.
    let with_prps = controller(&sim, SglMode::Never);
    let ns = with_prps.namespace(1).unwrap();
    assert_eq!(ns.max_transfer_bytes(), (prp::MAX_TRANSFER_BYTES - PAGE_SIZE) as u64);
    let half = len / 2;
    let pool = DmaPool::new(with_prps.transport(), half, 2).unwrap();
    let mut pair = with_prps.create_queue_pair(8).unwrap();
    for (i, lba) in [0u64, (half / 4096) as u64].into_iter().enumerate() {
        let request = ns.read(lba, IoBuffer::range(pool.get().unwrap(), 0, half), 3).unwrap();
        let done = pair.execute(request, BOUND).unwrap();
        done.status.unwrap();
        let mut out = vec![0u8; half];
        done.buffer.unwrap().buffer().copy_out(0, &mut out);
        assert!(out == data[i * half..(i + 1) * half], "half {i} read through PRPs");
    }
    assert_eq!(sim.stats().sgl_transfers, 2, "no SGL since");
}
