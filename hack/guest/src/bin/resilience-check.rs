//! `resilience-check smart-event|hot-unplug [--pci BDF]`: the guest side of
//! the QEMU resilience tests (`examples/tests/qemu_resilience.rs`). Each
//! scenario prints a marker line the host acts on through QEMU's monitor,
//! then checks what the driver reports; every wait is bounded.
//!
//! - `smart-event` prints `resilience-check: raise smart warning now` and
//!   waits (up to 60 s) for a SMART / Health event from
//!   `Controller::poll_events`.
//! - `hot-unplug [--writes]` keeps reads (or writes, each with its blocks'
//!   metadata when the namespace has some) in flight on two queue pairs,
//!   prints `resilience-check: unplug now` after 500 of them, and requires
//!   every command from then on to end (up to 120 s), the last ones with
//!   `IoError::DeviceGone`, and `submit` to refuse with
//!   `SubmitError::DeviceGone` on both pairs; then it releases the device
//!   and waits (up to 30 s) for the function to leave the guest.
//!
//! Passed checks print `resilience-check: CHECK: ok (...)`; the last line is
//! `resilience-check: SCENARIO ok` (status 0) or `... FAILED: why` (1).

use nvme_driver::dma::DmaPool;
use nvme_driver::{AsyncEventKind, Controller, ControllerOptions, IoBuffer, IoError, SubmitError};
use nvme_examples::device::open_controller;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: resilience-check smart-event|hot-unplug [--writes] [--pci BDF]";

fn smart_event(controller: &Controller) -> Result<(), String> {
    println!("resilience-check: raise smart warning now");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        for event in controller.poll_events().map_err(|e| format!("poll_events: {e}"))? {
            if let AsyncEventKind::Smart { critical_warning } = event.kind {
                println!(
                    "resilience-check: smart event: ok (type {} information {:#04x} log page {:#04x} critical warning {:#04x} after {} ms)",
                    event.event_type,
                    event.information,
                    event.log_page,
                    critical_warning.bits(),
                    started.elapsed().as_millis()
                );
                return Ok(());
            }
            println!("resilience-check: other event {event:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err("no SMART event within 60 s".into())
}

/// What the hot-unplug scenario keeps in flight.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Load {
    Reads,
    /// Writes, each with its blocks' metadata when the namespace carries
    /// some (a second transfer phase in QEMU's device model).
    Writes,
}

/// Queue pairs the hot-unplug scenario keeps busy, polled in turn.
const PAIRS: usize = 2;

fn hot_unplug(controller: Controller, bdf: Option<&str>, load: Load) -> Result<(), String> {
    let ns = controller.namespace(1).map_err(|e| e.to_string())?;
    let mut pairs = Vec::new();
    for _ in 0..PAIRS {
        pairs.push(controller.create_queue_pair(64).map_err(|e| e.to_string())?);
    }
    let pool = DmaPool::new(controller.transport(), 4096, 16 * PAIRS as u32).map_err(|e| e.to_string())?;
    let metadata_pool = DmaPool::new(controller.transport(), 4096, 16 * PAIRS as u32).map_err(|e| e.to_string())?;
    let with_metadata = load == Load::Writes && ns.metadata().is_some();
    let blocks = 4096 / u64::from(ns.block_size());
    let metadata_len = ns.metadata().map_or(0, |format| blocks as usize * usize::from(format.bytes_per_block));
    let (mut ok, mut gone, mut other, mut next) = (0u64, 0u64, 0u64, 0u64);
    let mut refused = [false; PAIRS];
    let mut unplug_at = None;
    let started = Instant::now();
    loop {
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("still running after 120 s: {ok} ok, {gone} gone, {other} other"));
        }
        for (index, pair) in pairs.iter_mut().enumerate() {
            while !refused[index] && pair.in_flight() < 8 {
                let Some(buffer) = pool.get() else { break };
                let slba = (next % 1024) * blocks;
                let request = match load {
                    Load::Reads => ns.read(slba, IoBuffer::new(buffer), next),
                    Load::Writes if with_metadata => {
                        let Some(metadata) = metadata_pool.get() else { break };
                        let metadata = IoBuffer::new(metadata).truncate(metadata_len);
                        ns.write_with_metadata(slba, IoBuffer::new(buffer), metadata, false, next)
                    }
                    Load::Writes => ns.write(slba, IoBuffer::new(buffer), false, next),
                };
                next += 1;
                match pair.submit(request.map_err(|e| e.to_string())?) {
                    Ok(()) => {}
                    Err((SubmitError::DeviceGone, _)) => refused[index] = true,
                    Err((error, _)) => return Err(format!("submit: {error}")),
                }
            }
            pair.poll(|done| match done.status {
                Ok(()) => ok += 1,
                Err(IoError::DeviceGone) => gone += 1,
                Err(error) => {
                    other += 1;
                    println!("resilience-check: a command ended with {error}");
                }
            });
        }
        if ok >= 500 && unplug_at.is_none() {
            println!("resilience-check: unplug now");
            unplug_at = Some(Instant::now());
        }
        if refused.iter().all(|&r| r) && pairs.iter().all(|pair| pair.in_flight() == 0) {
            break;
        }
    }
    let waited = unplug_at.map_or(0, |at| at.elapsed().as_millis());
    if gone == 0 || !controller.is_gone() {
        return Err(format!("the submit was refused but no command ended DeviceGone ({ok} ok, {other} other)"));
    }
    let what = match load {
        Load::Reads => "reads",
        Load::Writes if with_metadata => "writes with metadata",
        Load::Writes => "writes",
    };
    println!(
        "resilience-check: device gone: ok ({ok} {what} before, {gone} ended DeviceGone, {other} otherwise, on {PAIRS} pairs, submit refused, {waited} ms after the unplug request)"
    );
    let released = Instant::now();
    // Everything that holds the transport (and so the VFIO device) open.
    drop(pairs);
    drop(pool);
    drop(metadata_pool);
    drop(ns);
    drop(controller);
    println!("resilience-check: released: ok ({} ms)", released.elapsed().as_millis());
    // With the device closed, the kernel finishes the removal and QEMU
    // unplugs it: the function leaves sysfs.
    if let Some(bdf) = bdf {
        let path = std::path::Path::new("/sys/bus/pci/devices").join(bdf);
        let started = Instant::now();
        while path.exists() {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("{bdf} still present 30 s after release"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        println!(
            "resilience-check: removed: ok ({bdf} left the guest {} ms after release)",
            started.elapsed().as_millis()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut words = std::env::args().skip(1);
    let (mut scenario, mut pci, mut load) = (None, None, Load::Reads);
    while let Some(word) = words.next() {
        match word.as_str() {
            "--pci" => pci = words.next(),
            "--writes" => load = Load::Writes,
            "smart-event" | "hot-unplug" if scenario.is_none() => scenario = Some(word),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(scenario) = scenario else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let options = ControllerOptions { io_timeout: Some(Duration::from_secs(5)), ..ControllerOptions::default() };
    let result = open_controller(pci.as_deref(), options).map_err(|e| format!("open: {e}")).and_then(|controller| {
        if scenario == "smart-event" {
            smart_event(&controller)
        } else {
            hot_unplug(controller, pci.as_deref(), load)
        }
    });
    match result {
        Ok(()) => {
            println!("resilience-check: {scenario} ok");
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("resilience-check: {scenario} FAILED: {why}");
            ExitCode::FAILURE
        }
    }
}
