//! `QueuePair::poll_in_place`: a finished Read or Write goes again from its
//! slot with the same buffers, checked as a new request is, and every
//! command still completes exactly once, including those a reset ends.

mod sim_support;

use nvme_driver::dma::{DmaMemory, DmaPool};
use nvme_driver::sim::{NamespaceConfig, SimConfig};
use nvme_driver::{Error, IoBuffer, IoError, RequestError};
use sim_support::{pattern, Rig};
use std::time::{Duration, Instant};

/// Longer than any of these runs should take.
const BOUND: Duration = Duration::from_secs(5);

fn read_back(rig: &mut Rig, lba: u64, len: usize) -> Vec<u8> {
    rig.read(lba, len).unwrap()
}

#[test]
fn a_write_then_reads_go_again_from_one_slot_with_the_data_where_it_should_be() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    let first = pattern(1, 8192);
    let request = rig.ns.write(0, rig.buffer_with(&first), false, 10).unwrap();
    rig.pair.submit(request).map_err(|(e, _)| e).unwrap();

    // Write 1 at LBA 0 finishes: the same buffer goes again to LBA 64, then
    // is refilled and written to LBA 128, then read from LBA 0 and 64.
    let second = pattern(2, 8192);
    let mut steps = 0;
    let mut read_at_64 = Vec::new();
    let started = Instant::now();
    while steps < 5 {
        assert!(started.elapsed() < BOUND, "stuck at step {steps}");
        let (ns, pair) = (&rig.ns, &mut rig.pair);
        pair.poll_in_place(|done| {
            done.status().unwrap();
            assert_eq!(done.token(), 10 + steps);
            match steps {
                0 => done.write(ns, 64, false, 11).unwrap(),
                1 => {
                    let buffer = done.buffer().unwrap();
                    buffer.buffer().copy_in(buffer.offset(), &second);
                    done.write(ns, 128, true, 12).unwrap();
                }
                2 => {
                    let buffer = done.buffer().unwrap();
                    buffer.buffer().fill(buffer.offset(), buffer.len(), 0);
                    done.read(ns, 0, 13).unwrap()
                }
                3 => {
                    let buffer = done.buffer().unwrap();
                    let mut data = vec![0; buffer.len()];
                    buffer.buffer().copy_out(buffer.offset(), &mut data);
                    assert_eq!(data, first, "LBA 0 read in place");
                    done.read(ns, 64, 14).unwrap()
                }
                _ => {
                    let (completion, _) = done.complete();
                    let buffer = completion.buffer.unwrap();
                    read_at_64 = vec![0; buffer.len()];
                    buffer.buffer().copy_out(buffer.offset(), &mut read_at_64);
                }
            }
            steps += 1;
        });
    }
    assert_eq!(read_at_64, first);
    assert_eq!(read_back(&mut rig, 64, 8192), first);
    assert_eq!(read_back(&mut rig, 128, 8192), second);
    let stats = rig.pair.stats();
    assert_eq!(
        (stats.submitted, stats.completed),
        (5 + 2, 5 + 2),
        "each once: one submitted, four in place, two reads back"
    );
    assert_eq!(rig.pair.in_flight(), 0);
    // The FUA write reached the media.
    assert_eq!(rig.sim.durable_block(1, 128), second[..512]);
    assert_eq!(rig.pool.available(), 48);
}

#[test]
fn refusals_hand_the_finished_command_back_unchanged() {
    let config = SimConfig::nvm(1 << 12, 512).with_namespace(NamespaceConfig::nvm(1 << 12, 512));
    let mut rig = Rig::new(config);
    let other = rig.controller.namespace(2).unwrap();
    let read_only = DmaPool::new_device_reads(rig.controller.transport(), 4096, 1).unwrap();
    let data = pattern(3, 4096);
    let buffer = IoBuffer::new(read_only.get().unwrap());
    buffer.buffer().copy_in(0, &data);
    let request = rig.ns.write(8, buffer, false, 1).unwrap();
    rig.pair.submit(request).map_err(|(e, _)| e).unwrap();
    let flush = rig.ns.flush(2);
    rig.pair.submit(flush).map_err(|(e, _)| e).unwrap();

    let mut seen = 0;
    let started = Instant::now();
    while seen < 2 {
        assert!(started.elapsed() < BOUND);
        let (ns, pair) = (&rig.ns, &mut rig.pair);
        pair.poll_in_place(|done| {
            seen += 1;
            done.status().unwrap();
            if done.token() == 2 {
                // A Flush has no buffer to send again.
                let (error, done) = done.read(ns, 0, 3).unwrap_err();
                assert!(matches!(error, Error::InvalidArgument(_)), "{error}");
                let (completion, _) = done.complete();
                assert!(completion.buffer.is_none());
                return;
            }
            // Past the end of the namespace.
            let (error, done) = done.write(ns, (1 << 12) - 7, false, 4).unwrap_err();
            assert!(matches!(error, Error::InvalidRequest(RequestError::LbaOutOfRange { .. })), "{error}");
            // Another namespace.
            let (error, done) = done.write(&other, 8, false, 4).unwrap_err();
            assert!(matches!(error, Error::InvalidArgument(_)), "{error}");
            // A read into a buffer the device may only read.
            let (error, done) = done.read(ns, 8, 4).unwrap_err();
            assert!(matches!(error, Error::InvalidArgument(_)), "{error}");
            // Still the write that finished, its buffer and token kept.
            assert_eq!(done.token(), 1);
            let (completion, _) = done.complete();
            assert_eq!((completion.token, completion.status), (1, Ok(())));
            let buffer = completion.buffer.expect("the buffer comes back");
            let mut back = vec![0; 4096];
            buffer.buffer().copy_out(0, &mut back);
            assert_eq!(back, data);
        });
    }
    let stats = rig.pair.stats();
    assert_eq!((stats.submitted, stats.completed, rig.pair.in_flight()), (2, 2, 0));
    assert_eq!(read_back(&mut rig, 8, 4096), data);
    assert_eq!(read_only.available(), 1, "the refused buffer went back to its pool");
}

#[test]
fn a_finished_command_dropped_is_complete_and_its_buffer_goes_home() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 12, 512));
    for token in 0..4 {
        let request = rig.ns.read(token * 8, rig.buffer(4096), token).unwrap();
        rig.pair.submit(request).map_err(|(e, _)| e).unwrap();
    }
    assert_eq!(rig.pool.available(), 44);
    let mut tokens = Vec::new();
    let started = Instant::now();
    while tokens.len() < 4 {
        assert!(started.elapsed() < BOUND);
        rig.pair.poll_in_place(|done| tokens.push(done.token()));
    }
    tokens.sort_unstable();
    assert_eq!(tokens, [0, 1, 2, 3]);
    assert_eq!((rig.pair.in_flight(), rig.pool.available()), (0, 48));
    // The slots are free: a full queue's worth goes in.
    for token in 0..63 {
        let request = rig.ns.flush(token);
        rig.pair.submit(request).map_err(|(e, _)| e).unwrap();
    }
}

#[test]
fn commands_a_reset_ends_come_through_the_callback_and_go_again_as_requests() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512).with_completion_delay(1000, 1000));
    let data = pattern(4, 4096);
    for token in 0..6 {
        let request = rig.ns.write(token * 8, rig.buffer_with(&data), false, token).unwrap();
        rig.pair.submit(request).map_err(|(e, _)| e).unwrap();
    }
    rig.pair.ring();
    rig.controller.reset().unwrap();

    let mut ended = Vec::new();
    let (ns, pair) = (&rig.ns, &mut rig.pair);
    pair.poll_in_place(|done| {
        assert_eq!(done.status(), Err(IoError::ControllerReset));
        let token = done.token();
        // Not in its slot any more: the reset freed it.
        let (error, done) = done.write(ns, token * 8, false, token).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)), "{error}");
        let (completion, mut pair) = done.complete();
        // The disable was confirmed, so the buffer is back: resubmit it.
        let buffer = completion.buffer.expect("buffers come back after a confirmed disable");
        let request = ns.write(token * 8 + 1, buffer, false, 100 + token).unwrap();
        pair.submit(request).map_err(|(e, _)| e).unwrap();
        ended.push(token);
    });
    ended.sort_unstable();
    assert_eq!(ended, [0, 1, 2, 3, 4, 5], "each once, in one pass");
    assert_eq!(rig.pair.stats().recoveries, 1);

    // The resubmitted writes complete (after the simulator's delay) and
    // land where they were sent.
    rig.sim.set_fault_config(Default::default());
    let mut tokens = Vec::new();
    let started = Instant::now();
    while tokens.len() < 6 {
        assert!(started.elapsed() < BOUND, "{tokens:?}");
        rig.pair.poll_in_place(|done| {
            done.status().unwrap();
            tokens.push(done.token());
        });
    }
    tokens.sort_unstable();
    assert_eq!(tokens, [100, 101, 102, 103, 104, 105]);
    for token in 0..6 {
        assert_eq!(read_back(&mut rig, token * 8 + 1, 4096), data);
    }
}

#[test]
fn a_command_sent_again_gets_a_deadline_of_its_own() {
    use nvme_driver::sim::Fault;
    let mut rig = Rig::new(SimConfig::nvm(1 << 12, 512));
    rig.pair.set_timeout(Some(Duration::from_millis(200)));
    let request = rig.ns.read(0, rig.buffer(4096), 1).unwrap();
    rig.pair.submit(request).map_err(|(e, _)| e).unwrap();
    // The read sent again hangs in the device: its own deadline passes,
    // the pair aborts it, and it finishes once with Timeout.
    rig.sim.inject(Fault::HangReads { nsid: 1, slba: 64, blocks: 8 });
    let mut statuses = Vec::new();
    let started = Instant::now();
    while statuses.len() < 2 {
        assert!(started.elapsed() < BOUND, "{statuses:?}");
        let (ns, pair) = (&rig.ns, &mut rig.pair);
        pair.poll_in_place(|done| {
            statuses.push((done.token(), done.status()));
            if done.token() == 1 {
                done.read(ns, 64, 2).unwrap();
            }
        });
    }
    assert_eq!(statuses, [(1, Ok(())), (2, Err(IoError::Timeout))]);
    let stats = rig.pair.stats();
    assert_eq!((stats.timeouts, stats.submitted, stats.completed), (1, 2, 2));
    assert_eq!(rig.pair.in_flight(), 0);
}
