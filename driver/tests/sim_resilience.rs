//! Resilience on the simulator: deadlines, Abort, controller resets,
//! surprise removal and asynchronous events, observed through real queue
//! pairs. Every command completes exactly once; every test is bounded in
//! time (short deadlines, bounded poll loops).

mod sim_support;

use nvme_driver::cmd::admin;
use nvme_driver::controller::AsyncEventKind;
use nvme_driver::sim::{Fault, FaultConfig, SimConfig, Simulator};
use nvme_driver::spec::log::CriticalWarning;
use nvme_driver::{Error, IoBuffer, IoCompletion, IoError, QueuePair, SubmitError};
use sim_support::{init, pattern, Rig};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A deadline short enough for tests; the simulator answers at once.
const DEADLINE: Duration = Duration::from_millis(40);
/// No test waits longer than this for anything.
const BOUND: Duration = Duration::from_secs(10);

fn rig(config: SimConfig) -> Rig {
    let mut rig = Rig::new(config);
    rig.pair.set_timeout(Some(DEADLINE));
    rig
}

/// Polls until `count` completions arrived, within [`BOUND`]; returns them
/// by token. Panics on a token completing twice.
fn drain(pair: &mut QueuePair, count: usize) -> BTreeMap<u64, IoCompletion> {
    let started = Instant::now();
    let mut done = BTreeMap::new();
    while done.len() < count {
        assert!(started.elapsed() < BOUND, "{} of {count} completions after {BOUND:?}", done.len());
        pair.poll(|completion| {
            let token = completion.token;
            assert!(done.insert(token, completion).is_none(), "token {token} completed twice");
        });
    }
    done
}

/// Polls for `time` and requires that nothing completes.
fn quiet(pair: &mut QueuePair, time: Duration) {
    let started = Instant::now();
    while started.elapsed() < time {
        pair.poll(|completion| panic!("token {} completed again: {:?}", completion.token, completion.status));
    }
}

fn submit_flushes(rig: &mut Rig, tokens: std::ops::Range<u64>) {
    for token in tokens {
        let request = rig.ns.flush(token);
        rig.pair.submit(request).map_err(|(error, _)| error).unwrap();
    }
}

fn submit_writes(rig: &mut Rig, tokens: std::ops::Range<u64>) {
    for token in tokens {
        let request = rig.ns.write(token * 8, rig.buffer_with(&pattern(token, 4096)), false, token).unwrap();
        rig.pair.submit(request).map_err(|(error, _)| error).unwrap();
    }
}

/// I/O works on the pair: a write reads back.
fn io_works(rig: &mut Rig, lba: u64) {
    let data = pattern(lba, 4096);
    rig.write(lba, &data, false).unwrap();
    assert_eq!(rig.read(lba, 4096).unwrap(), data);
}

#[test]
fn a_dropped_completion_times_out_is_aborted_and_completes_once() {
    let mut rig = rig(SimConfig::nvm(1 << 16, 512));
    rig.sim.inject(Fault::DropCompletions { count: 1 });
    let started = Instant::now();
    submit_flushes(&mut rig, 0..3);
    let done = drain(&mut rig.pair, 3);
    assert_eq!(done[&0].status, Err(IoError::Timeout), "the dropped one");
    assert!(done[&1].status.is_ok() && done[&2].status.is_ok());
    assert!(started.elapsed() >= DEADLINE, "not before its deadline");
    let stats = rig.pair.stats();
    assert_eq!((stats.timeouts, stats.aborts_sent, stats.resets_requested), (1, 1, 0));
    assert_eq!(rig.sim.stats().faults.aborted_commands, 1, "the Abort ended it inside the controller");
    assert_eq!(rig.sim.hung_commands(), 0);
    assert_eq!(rig.controller.resets(), 0, "an abort that works needs no reset");
    quiet(&mut rig.pair, 3 * DEADLINE);
    assert_eq!(rig.pair.in_flight(), 0);
    io_works(&mut rig, 64);
}

#[test]
fn an_abort_the_device_declines_ends_in_a_reset() {
    let mut rig = rig(SimConfig::nvm(1 << 16, 512));
    // QEMU 7.2 never aborts: the driver must reset to get the slot back.
    rig.sim.inject(Fault::DeclineAborts);
    rig.sim.inject(Fault::DropCompletions { count: 1 });
    submit_writes(&mut rig, 0..2);
    let done = drain(&mut rig.pair, 2);
    assert_eq!(done[&0].status, Err(IoError::Timeout));
    assert!(done[&0].buffer.is_some(), "the buffer comes back: the device was disabled");
    assert!(done[&1].status.is_ok());
    let stats = rig.pair.stats();
    assert_eq!((stats.timeouts, stats.aborts_sent, stats.resets_requested, stats.recoveries), (1, 1, 1, 1));
    assert_eq!(rig.controller.resets(), 1);
    quiet(&mut rig.pair, 3 * DEADLINE);
    // The same pair works after its queues were re-created.
    io_works(&mut rig, 128);
    assert_eq!(rig.sim.read_block(1, 8), pattern(1, 4096)[..512], "the write that completed is there");
}

#[test]
fn lost_completions_by_probability_each_complete_exactly_once() {
    let mut rig = rig(SimConfig::nvm(1 << 16, 512).with_seed(11).with_completion_delay(0, 2).with_reorder(true));
    rig.sim.set_fault_config(FaultConfig { dropped_completion_probability: 0.1, ..FaultConfig::default() });
    let mut completed = 0u64;
    let mut timeouts = 0;
    for round in 0..10u64 {
        submit_writes(&mut rig, round * 20..round * 20 + 20);
        for (_, completion) in drain(&mut rig.pair, 20) {
            match completion.status {
                Ok(()) => completed += 1,
                Err(IoError::Timeout) => timeouts += 1,
                Err(other) => panic!("unexpected {other}"),
            }
        }
    }
    assert_eq!(completed + timeouts, 200);
    let dropped = rig.sim.stats().completions_dropped;
    assert_eq!(timeouts, dropped, "every lost completion, and only those, timed out");
    assert!(timeouts > 5, "{timeouts} timeouts at p = 0.1");
    assert_eq!(rig.pair.stats().timeouts, timeouts);
    assert_eq!(rig.pair.in_flight(), 0);
}

#[test]
fn a_reset_ends_every_command_in_flight_once_and_io_resumes() {
    let mut rig = rig(SimConfig::nvm(1 << 16, 512).with_completion_delay(1000, 1000));
    submit_writes(&mut rig, 0..8);
    rig.pair.ring();
    rig.controller.reset().unwrap();
    let done = drain(&mut rig.pair, 8);
    assert!(done.values().all(|c| c.status == Err(IoError::ControllerReset) && c.buffer.is_some()));
    assert!(done.values().all(|c| c.status.unwrap_err().is_retryable()));
    assert_eq!(rig.pair.stats().recoveries, 1);
    quiet(&mut rig.pair, 2 * DEADLINE);
    rig.sim.set_fault_config(FaultConfig::default());
    let sim = rig.finish();
    // A second pair sees the same; resubmission after the reset works.
    let mut rig = Rig::on(sim);
    rig.pair.set_timeout(Some(DEADLINE));
    let mut second = rig.controller.create_queue_pair(8).unwrap();
    rig.controller.reset().unwrap();
    assert_eq!(second.poll(|_| panic!("nothing was in flight")), 0);
    let request = rig.ns.flush(5);
    second.execute(request, BOUND).unwrap().status.unwrap();
    io_works(&mut rig, 0);
    assert_eq!(rig.controller.resets(), 1);
}

#[test]
fn controller_fatal_during_io_resets_and_io_resumes() {
    let mut rig = rig(SimConfig::nvm(1 << 16, 512).with_completion_delay(1000, 1000));
    submit_writes(&mut rig, 0..6);
    rig.pair.ring();
    rig.sim.inject(Fault::ControllerFatal);
    let done = drain(&mut rig.pair, 6);
    assert!(done.values().all(|c| c.status == Err(IoError::ControllerReset)), "{done:?}");
    assert_eq!(rig.controller.resets(), 1);
    let stats = rig.pair.stats();
    assert_eq!((stats.resets_requested, stats.recoveries, stats.timeouts), (1, 1, 0));
    // The owner resubmits.
    rig.sim.set_fault_config(FaultConfig::default());
    let sim = rig.finish();
    let mut rig = Rig::on(sim);
    io_works(&mut rig, 256);
    assert_eq!(rig.sim.stats().faults.controller_fatal, 1);
}

#[test]
fn surprise_removal_fails_everything_with_device_gone_and_nothing_hangs() {
    let started = Instant::now();
    let mut rig = rig(SimConfig::nvm(1 << 16, 512).with_completion_delay(1000, 1000));
    submit_writes(&mut rig, 0..5);
    rig.pair.ring();
    rig.sim.inject(Fault::SurpriseRemoval);
    let done = drain(&mut rig.pair, 5);
    assert!(done.values().all(|c| c.status == Err(IoError::DeviceGone) && c.buffer.is_some()));
    assert!(!IoError::DeviceGone.is_retryable());
    assert!(rig.controller.is_gone());
    let request = rig.ns.flush(9);
    let (error, request) = rig.pair.submit(request).unwrap_err();
    assert_eq!(error, SubmitError::DeviceGone);
    assert_eq!(request.token, 9, "handed back");
    assert_eq!(rig.pair.unavailable(), Some(SubmitError::DeviceGone));
    let error = rig.controller.admin_command(admin::get_features(admin::FID_ARBITRATION, 0, 0)).unwrap_err();
    assert!(matches!(error, Error::DeviceGone), "{error}");
    assert!(matches!(rig.controller.create_queue_pair(8), Err(Error::DeviceGone)));
    assert!(matches!(rig.controller.reset(), Err(Error::DeviceGone)));
    // Teardown frees everything without waiting on the device.
    drop(done);
    let sim = rig.finish();
    assert_eq!(sim.mappings(), 0, "every DMA mapping released");
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
}

#[test]
fn a_dropped_admin_completion_times_out_and_the_reset_brings_io_back() {
    let mut rig = rig(SimConfig::nvm(1 << 16, 512));
    rig.sim.inject(Fault::DropAdminCompletions { count: 1 });
    let error = rig.controller.admin_command(admin::get_features(admin::FID_ARBITRATION, 0, 0)).unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
    assert_eq!(rig.controller.resets(), 1, "an admin timeout resets, as Linux does");
    assert_eq!(rig.pair.poll(|_| panic!("nothing was in flight")), 0);
    assert_eq!(rig.pair.stats().recoveries, 1);
    io_works(&mut rig, 512);
    rig.controller.admin_command(admin::get_features(admin::FID_ARBITRATION, 0, 0)).unwrap();
}

#[test]
fn a_timed_out_command_keeps_its_slot_until_it_ends() {
    // Depth 2: one slot. While the timed-out command waits for its abort to
    // take effect, the slot is not handed out again.
    let rig = rig(SimConfig::nvm(1 << 16, 512));
    let mut pair = rig.controller.create_queue_pair(2).unwrap();
    pair.set_timeout(Some(DEADLINE));
    rig.sim.inject(Fault::DeclineAborts);
    rig.sim.inject(Fault::DropCompletions { count: 1 });
    pair.submit(rig.ns.flush(1)).map_err(|(error, _)| error).unwrap();
    let started = Instant::now();
    while pair.stats().timeouts == 0 {
        assert!(started.elapsed() < BOUND);
        pair.poll(|completion| panic!("completed before its abort was given up: {:?}", completion.status));
    }
    let (error, _) = pair.submit(rig.ns.flush(2)).unwrap_err();
    assert_eq!(error, SubmitError::QueueFull, "the timed-out command's slot stays reserved");
    let done = drain(&mut pair, 1);
    assert_eq!(done[&1].status, Err(IoError::Timeout));
    pair.submit(rig.ns.flush(3)).map_err(|(error, _)| error).unwrap();
    assert!(drain(&mut pair, 1)[&3].status.is_ok());
}

#[test]
fn smart_critical_warnings_reach_the_owner() {
    let sim = Simulator::new(SimConfig::nvm(1 << 16, 512));
    let controller = init(&sim);
    assert!(controller.poll_events().unwrap().is_empty());
    sim.set_smart_critical_warning(CriticalWarning::TEMPERATURE.bits());
    let events = controller.poll_events().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!((event.event_type, event.information, event.log_page), (1, 0x01, 0x02));
    let AsyncEventKind::Smart { critical_warning } = event.kind else { panic!("{event:?}") };
    assert_eq!(critical_warning, CriticalWarning::TEMPERATURE);
    assert!(controller.poll_events().unwrap().is_empty(), "reported once");
    // Reading the log re-armed SMART events; a new bit is a new event.
    sim.set_smart_critical_warning((CriticalWarning::TEMPERATURE | CriticalWarning::SPARE).bits());
    let events = controller.poll_events().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].information, 0x02, "spare below threshold");
    // Events come back after a reset: configuration and request re-armed.
    controller.reset().unwrap();
    sim.set_smart_critical_warning(0);
    sim.set_smart_critical_warning(CriticalWarning::DEGRADED.bits());
    let events = controller.poll_events().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        matches!(events[0].kind, AsyncEventKind::Smart { critical_warning } if critical_warning.contains(CriticalWarning::DEGRADED))
    );
}

#[test]
fn zone_descriptor_changed_notices_reach_the_owner() {
    let sim = Simulator::new(SimConfig::zoned(64 * 1024, 512, 1024, 1024));
    let controller = init(&sim);
    assert!(sim.async_event(2, 0xEF, 0xBF), "a request is outstanding");
    // An admin command in between keeps the completion for poll_events.
    controller.admin_command(admin::get_features(admin::FID_ARBITRATION, 0, 0)).unwrap();
    let events = controller.poll_events().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, AsyncEventKind::ZoneDescriptorChanged);
    assert_eq!(events[0].log_page, 0xBF);
    assert!(sim.async_event(2, 0x00, 0x04), "re-armed");
    let events = controller.poll_events().unwrap();
    assert_eq!(events[0].kind, AsyncEventKind::NamespaceAttributeChanged);
}

/// A controller that takes at most 500 ms (CAP.TO) to disable, so a
/// disable that never happens times out quickly.
fn quick_to_disable(mut config: SimConfig) -> SimConfig {
    config.timeout_500ms = 1;
    config
}

/// A read whose completion never comes: the device still owns its buffer.
fn hung_read(rig: &mut Rig, token: u64) {
    rig.sim.inject(Fault::DropCompletions { count: 1 });
    let request = rig.ns.read(0, IoBuffer::new(rig.pool.get().unwrap()), token).unwrap();
    rig.pair.submit(request).map_err(|(error, _)| error).unwrap();
    rig.pair.poll(|completion| panic!("a hung read completed: {:?}", completion.status));
    assert_eq!(rig.sim.hung_commands(), 1);
}

/// A controller quick to disable, its pair's deadlines at `timeout`, and
/// read 7 hung in it; with how many buffers the pool held before.
fn rig_with_a_hung_read(timeout: Option<Duration>) -> (Rig, usize) {
    let mut rig = Rig::new(quick_to_disable(SimConfig::nvm(1 << 16, 512)));
    rig.pair.set_timeout(timeout);
    let full = rig.pool.available();
    hung_read(&mut rig, 7);
    (rig, full)
}

/// The fault cleared, a reset whose disable is confirmed gives every
/// quarantined buffer back to its pool, and I/O goes on.
fn a_confirmed_reset_gives_the_quarantine_back(rig: &mut Rig, full: usize) {
    rig.sim.clear_faults();
    rig.controller.reset().unwrap();
    assert_eq!((rig.pool.available(), rig.controller.quarantined_buffers()), (full, 0));
    io_works(rig, 64);
}

/// The controller will not disable, and has no function-level reset.
const STUCK: Fault = Fault::WontDisable { function_reset_too: true };

#[test]
fn a_reset_whose_disable_times_out_quarantines_the_buffers_in_flight() {
    let (mut rig, full) = rig_with_a_hung_read(None);
    rig.sim.inject(STUCK);
    let error = rig.controller.reset().unwrap_err();
    assert!(matches!(error, Error::Timeout { what: "controller disabled (CSTS.RDY=0)", .. }), "{error}");
    // The read ends, exactly once, but without its buffer: the device may
    // still write it, so it must not be handed to another command.
    let done = drain(&mut rig.pair, 1);
    assert_eq!(done[&7].status, Err(IoError::ControllerReset));
    assert!(done[&7].buffer.is_none(), "a buffer the device may still write came back");
    drop(done);
    assert_eq!((rig.pool.available(), rig.controller.quarantined_buffers()), (full - 1, 1));
    // The next reset's disable is confirmed: the buffer comes back and I/O goes on.
    a_confirmed_reset_gives_the_quarantine_back(&mut rig, full);
}

#[test]
fn a_controller_that_will_not_disable_is_stopped_by_a_function_level_reset() {
    let (mut rig, full) = rig_with_a_hung_read(None);
    rig.sim.inject(Fault::WontDisable { function_reset_too: false });
    rig.controller.reset().unwrap();
    assert_eq!(rig.sim.stats().faults.function_resets, 1);
    let done = drain(&mut rig.pair, 1);
    assert_eq!(done[&7].status, Err(IoError::ControllerReset));
    assert!(done[&7].buffer.is_some(), "the reset stopped the device: the buffer is free");
    drop(done);
    assert_eq!((rig.pool.available(), rig.controller.quarantined_buffers()), (full, 0));
    io_works(&mut rig, 64);
}

#[test]
fn a_requested_removal_whose_disable_times_out_quarantines_the_buffers_for_good() {
    let (mut rig, full) = rig_with_a_hung_read(Some(BOUND));
    // The host wants the device back while it is still live and will not stop.
    rig.sim.inject(STUCK);
    rig.sim.inject(Fault::RemovalRequested);
    let done = drain(&mut rig.pair, 1);
    assert_eq!(done[&7].status, Err(IoError::DeviceGone));
    assert!(done[&7].buffer.is_none(), "a buffer the device may still write came back");
    drop(done);
    assert!(rig.controller.is_gone());
    assert_eq!((rig.pool.available(), rig.controller.quarantined_buffers()), (full - 1, 1));
    // Nothing after can confirm a stop: the buffer is never reused.
    let Rig { sim: _, controller, ns, pair, pool } = rig;
    drop((pair, ns, controller));
    assert_eq!(pool.available(), full - 1);
}

#[test]
fn a_requested_removal_whose_disable_is_confirmed_gives_the_buffers_back() {
    let (mut rig, full) = rig_with_a_hung_read(Some(BOUND));
    rig.sim.inject(Fault::RemovalRequested);
    let done = drain(&mut rig.pair, 1);
    assert_eq!(done[&7].status, Err(IoError::DeviceGone));
    assert!(done[&7].buffer.is_some(), "the disable was confirmed: the buffer is free");
    drop(done);
    assert_eq!((rig.pool.available(), rig.controller.quarantined_buffers()), (full, 0));
}

#[test]
fn a_pair_whose_queues_cannot_be_deleted_keeps_its_buffers_out_of_the_pool() {
    // A read hangs in the controller; dropping its pair sends Delete I/O
    // SQ, whose completion never comes, and the reset that follows cannot
    // disable the controller. It may still write the read's buffer: the
    // buffer must never go back to the pool, to be handed to another
    // command, until a disable is confirmed.
    let mut rig = rig(quick_to_disable(SimConfig::nvm(1 << 16, 512)));
    let mut pair = rig.controller.create_queue_pair(8).unwrap();
    pair.set_timeout(None);
    std::mem::swap(&mut pair, &mut rig.pair);
    let full = rig.pool.available();
    hung_read(&mut rig, 7);
    std::mem::swap(&mut pair, &mut rig.pair);
    rig.sim.inject(STUCK);
    rig.sim.inject(Fault::DropAdminCompletions { count: 1 });
    drop(pair);
    assert_eq!(rig.pool.available(), full - 1, "the hung read's buffer went back to the pool");
    assert_eq!(rig.controller.quarantined_buffers(), 1);
    a_confirmed_reset_gives_the_quarantine_back(&mut rig, full);
}

#[test]
fn a_pair_whose_delete_timed_out_but_whose_controller_reset_gives_its_buffers_back() {
    // As above, but the reset after the timed-out Delete I/O SQ disables
    // the controller: nothing can write the buffer any more.
    let mut rig = rig(SimConfig::nvm(1 << 16, 512));
    let mut pair = rig.controller.create_queue_pair(8).unwrap();
    pair.set_timeout(None);
    std::mem::swap(&mut pair, &mut rig.pair);
    let full = rig.pool.available();
    hung_read(&mut rig, 7);
    std::mem::swap(&mut pair, &mut rig.pair);
    rig.sim.inject(Fault::DropAdminCompletions { count: 1 });
    drop(pair);
    assert_eq!((rig.pool.available(), rig.controller.quarantined_buffers()), (full, 0));
    io_works(&mut rig, 64);
}

/// The host asks for the device back (vfio-pci's device request, an
/// orderly removal) while writes sit in the controller on two queue pairs.
/// What a real device deserves, and what QEMU's device model needs (a
/// reset that drops a command it still holds can complete that command
/// after freeing its queue, and crash: docs/rig.md): the driver deletes
/// the I/O queues, which ends their commands, notifies a shutdown, and
/// only then disables. So no reset drops a command in flight, the writes
/// acknowledged before the request are durable without a flush (the
/// shutdown wrote the cache back), every command in flight completes once
/// with DeviceGone, and the confirmed disable gives every buffer back.
#[test]
fn a_requested_removal_with_writes_in_flight_on_two_pairs_deletes_the_queues_then_shuts_down() {
    use nvme_driver::spec::command::opcode::admin as op;
    // Completions wait long enough (in polls) for the pair's health check
    // (every 10 ms) to see the request while the writes are in flight.
    let config = SimConfig::nvm(1 << 16, 512).with_completion_delay(50_000, 50_000);
    let mut rig = rig(config);
    rig.pair.set_timeout(Some(BOUND));
    let mut second = rig.controller.create_queue_pair(16).unwrap();
    second.set_timeout(Some(BOUND));
    let full = rig.pool.available();
    // Acknowledged before the request: tokens 0..4 (cached, not flushed).
    submit_writes(&mut rig, 0..4);
    drop(drain(&mut rig.pair, 4));
    // In flight on both pairs when the request comes.
    submit_writes(&mut rig, 4..12);
    for token in 12..20 {
        let request = rig.ns.write(token * 8, rig.buffer_with(&pattern(token, 4096)), false, token).unwrap();
        second.submit(request).map_err(|(error, _)| error).unwrap();
    }
    let deletes_before = rig.sim.stats().admin_commands[usize::from(op::DELETE_IO_SQ)];
    rig.sim.inject(Fault::RemovalRequested);
    let done = drain(&mut rig.pair, 8);
    assert!(done.values().all(|c| c.status == Err(IoError::DeviceGone)), "{done:?}");
    drop(done);
    let done = drain(&mut second, 8);
    assert!(done.values().all(|c| c.status == Err(IoError::DeviceGone)), "{done:?}");
    drop(done);
    assert!(rig.controller.is_gone());
    let stats = rig.sim.stats();
    assert_eq!(stats.io_dropped_by_resets, 0, "the disable dropped commands the device still held");
    assert_eq!(stats.admin_commands[usize::from(op::DELETE_IO_SQ)] - deletes_before, 2, "both pairs' SQs deleted");
    for token in 0..4 {
        assert_eq!(rig.sim.durable_block(1, token * 8), pattern(token, 4096)[..512], "write {token} not durable");
    }
    assert_eq!((rig.pool.available(), rig.controller.quarantined_buffers()), (full, 0));
    let request = rig.ns.flush(99);
    assert!(matches!(second.submit(request), Err((SubmitError::DeviceGone, _))));
}

/// A "BAR" the kernel can revoke: the simulator's registers, reached only
/// while a page of a file, mapped and guarded as `VfioPci` guards BAR0
/// (`nvme_driver::sigbus`), is still there. Truncating the file under the
/// mapping is what a revoked BAR looks like to the process: the next access
/// raises SIGBUS.
#[derive(Debug)]
struct RevocableBar {
    sim: Arc<Simulator>,
    path: std::path::PathBuf,
    file: std::fs::File,
    mmio: nvme_driver::mmio::Mmio,
    guard: nvme_driver::sigbus::BarGuard,
    _map: memmap2::MmapRaw,
}

impl RevocableBar {
    fn new(sim: Arc<Simulator>) -> Arc<Self> {
        use std::io::Write;
        let path = std::env::temp_dir().join(format!("revocable-bar-{}", std::process::id()));
        let mut file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.write_all(&[0; 4096]).unwrap();
        let map = memmap2::MmapOptions::new().len(4096).map_raw(&file).unwrap();
        let base = std::ptr::NonNull::new(map.as_mut_ptr()).unwrap();
        // SAFETY: the mapping is a whole page that outlives the guard and
        // the Mmio (fields dropped before `_map`); nothing references it.
        let guard = unsafe { nvme_driver::sigbus::BarGuard::new(base, 4096) }.unwrap();
        // SAFETY: as above; page-aligned.
        let mmio = unsafe { nvme_driver::mmio::Mmio::new(base, 4096) };
        Arc::new(RevocableBar { sim, path, file, mmio, guard, _map: map })
    }

    /// Revokes the "BAR": the file is cut under its mapping.
    fn revoke(&self) {
        self.file.set_len(0).unwrap();
    }

    /// Whether the window is still there: a read of it (SIGBUS once
    /// revoked, then all ones).
    fn present(&self) -> bool {
        self.mmio.read32(0) != u32::MAX
    }
}

impl Drop for RevocableBar {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl nvme_driver::Transport for RevocableBar {
    fn read32(&self, offset: usize) -> u32 {
        if self.present() {
            self.sim.read32(offset)
        } else {
            u32::MAX
        }
    }
    fn write32(&self, offset: usize, value: u32) {
        if self.present() {
            self.sim.write32(offset, value);
        }
    }
    fn tick(&self) {
        self.sim.tick();
    }
    unsafe fn map_dma(&self, vaddr: std::ptr::NonNull<u8>, len: usize) -> nvme_driver::Result<u64> {
        // SAFETY: forwarded contract.
        unsafe { self.sim.map_dma(vaddr, len) }
    }
    fn unmap_dma(&self, iova: u64, len: usize) -> nvme_driver::Result<()> {
        self.sim.unmap_dma(iova, len)
    }
    fn name(&self) -> &str {
        "revocable-bar"
    }
    fn pci_id(&self) -> nvme_driver::transport::PciId {
        self.sim.pci_id()
    }
}

/// The kernel revokes BAR0 under the driver while writes are in flight
/// (memory decode disabled, a reset it started): the next register access
/// raises SIGBUS, the handler maps all ones over the window, and the
/// driver reads "device gone". Every command ends once with DeviceGone,
/// submit refuses, the controller says it is gone, and the process lives.
#[test]
fn a_bar_revoked_mid_io_ends_in_device_gone_not_a_dead_process() {
    let sim = Simulator::new(SimConfig::nvm(1 << 16, 512).with_completion_delay(50_000, 50_000));
    let bar = RevocableBar::new(Arc::clone(&sim));
    let transport: Arc<dyn nvme_driver::Transport> = bar.clone();
    let controller = nvme_driver::Controller::init(transport, sim_support::options()).unwrap();
    let mut rig = Rig::on_controller(Arc::clone(&sim), controller);
    rig.pair.set_timeout(Some(BOUND));
    let full = rig.pool.available();
    submit_writes(&mut rig, 0..8);
    bar.revoke();
    assert!(!bar.guard.revoked());
    let done = drain(&mut rig.pair, 8);
    assert!(done.values().all(|c| c.status == Err(IoError::DeviceGone)), "{done:?}");
    drop(done);
    assert!(bar.guard.revoked(), "the access after the revocation went through the SIGBUS handler");
    assert!(rig.controller.is_gone());
    let request = rig.ns.flush(99);
    assert!(matches!(rig.pair.submit(request), Err((SubmitError::DeviceGone, _))));
    // A device reading all ones counts as stopped: the buffers come back.
    assert_eq!(rig.pool.available(), full);
}

/// A counter for a manual clock, leaked: a `Clock` holds a `'static`.
fn manual_counter(start: u64) -> &'static std::sync::atomic::AtomicU64 {
    Box::leak(Box::new(std::sync::atomic::AtomicU64::new(start)))
}

/// The pair's clock is a TSC nobody vouched for (a manual counter, as an
/// unverified TSC in a VM) that stops: deadlines read the OS clock instead
/// (`Clock::for_deadlines`), so a hung command still times out, once, after
/// its deadline, and is aborted.
#[test]
fn a_stopped_unvouched_clock_does_not_stop_deadlines() {
    let mut rig = rig(SimConfig::nvm(1 << 16, 512));
    let counter = manual_counter(1_000);
    rig.pair.set_clock(nvme_driver::clock::Clock::manual(counter, 1_000_000_000));
    rig.pair.set_timeout(Some(DEADLINE));
    rig.sim.inject(Fault::DropCompletions { count: 1 });
    let started = Instant::now();
    submit_flushes(&mut rig, 0..1);
    let done = drain(&mut rig.pair, 1);
    assert_eq!(done[&0].status, Err(IoError::Timeout));
    assert!(started.elapsed() >= DEADLINE, "not before its deadline");
    assert_eq!(counter.load(std::sync::atomic::Ordering::Relaxed), 1_000, "the counter never moved");
}

/// The same counter jumps an hour ahead while commands are in flight, then
/// back (as two cores' TSCs that differ): nothing times out early, every
/// command completes with its own status, and a hung one still times out.
#[test]
fn an_unvouched_clock_that_jumps_or_goes_back_does_not_fire_deadlines() {
    let mut rig = rig(SimConfig::nvm(1 << 16, 512).with_completion_delay(2_000, 2_000));
    let counter = manual_counter(5_000_000_000_000);
    rig.pair.set_clock(nvme_driver::clock::Clock::manual(counter, 1_000_000_000));
    rig.pair.set_timeout(Some(Duration::from_secs(5)));
    submit_writes(&mut rig, 0..8);
    let mut done = BTreeMap::new();
    let started = Instant::now();
    let mut passes = 0u64;
    while done.len() < 8 {
        assert!(started.elapsed() < BOUND, "{} of 8 after {BOUND:?}", done.len());
        // Back to where it was, then an hour ahead, 100 passes each (deadline
        // checks come every 8 to 64 passes, so they see both).
        let at =
            if (passes / 100).is_multiple_of(2) { 5_000_000_000_000 } else { 5_000_000_000_000 + 3_600_000_000_000 };
        counter.store(at, std::sync::atomic::Ordering::Relaxed);
        passes += 1;
        rig.pair.poll(|completion| {
            assert!(done.insert(completion.token, completion).is_none());
        });
    }
    assert!(done.values().all(|c| c.status.is_ok()), "{done:?}");
    assert_eq!(rig.pair.stats().timeouts, 0, "a jump of the stamp clock fired a deadline");
}

/// The host asks for the device back while its owner has no I/O in flight
/// (no health check runs on an idle pair): the owner's periodic
/// `poll_events` lets it go all the same. The queues are deleted and the
/// controller stopped, the pair then refuses to submit, and nothing hangs.
#[test]
fn a_requested_removal_of_an_idle_controller_is_noticed_by_poll_events() {
    use nvme_driver::spec::command::opcode::admin as op;
    let mut rig = rig(SimConfig::nvm(1 << 16, 512));
    io_works(&mut rig, 0);
    rig.sim.inject(Fault::RemovalRequested);
    assert!(!rig.controller.is_gone());
    let deletes_before = rig.sim.stats().admin_commands[usize::from(op::DELETE_IO_SQ)];
    rig.controller.poll_events().unwrap();
    assert!(rig.controller.is_gone());
    assert_eq!(rig.sim.stats().admin_commands[usize::from(op::DELETE_IO_SQ)] - deletes_before, 1);
    rig.pair.poll(|completion| panic!("nothing was in flight: {completion:?}"));
    let request = rig.ns.flush(1);
    assert!(matches!(rig.pair.submit(request), Err((SubmitError::DeviceGone, _))));
}
