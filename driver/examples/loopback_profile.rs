//! Where a queue pair's time goes natively, with no device cost: QD1 4 KiB
//! reads with a pooled buffer on the loopback device (as the `queue_pair`
//! criterion bench's `qd1_read_4k_with_buffer`), with the pair's phase
//! timings on. Prints nanoseconds per I/O by phase; `--json` prints them
//! as one object.
//!
//! `cargo run --release -p nvme-driver --example loopback_profile [-- --ios N] [--json]`

use nvme_driver::clock::{Clock, ClockSource};
use nvme_driver::cmd::nvm;
use nvme_driver::dma::DmaPool;
use nvme_driver::{loopback, IoBuffer, Request, Transport};
use std::sync::Arc;

fn main() -> Result<(), String> {
    let mut ios: u64 = 2_000_000;
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--ios" => ios = args.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).ok_or("--ios N, N > 0")?,
            "--json" => json = true,
            "--help" | "-h" => {
                println!("usage: loopback_profile [--ios N] [--json]");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}; see --help")),
        }
    }
    let (mut pair, mut device, transport) = loopback::queue_pair(64).map_err(|e| e.to_string())?;
    let transport: Arc<dyn Transport> = transport;
    let clock = Clock::new(ClockSource::Auto);
    pair.set_clock(clock);
    let pool = DmaPool::new(&transport, 4096, 1).map_err(|e| e.to_string())?;
    let mut buffer = Some(IoBuffer::new(pool.get().ok_or("empty pool")?));
    // Untimed runs first: caches, branch predictors.
    for round in [false, true] {
        pair.set_profiling(round);
        let started = clock.now();
        for token in 0..ios {
            let request = Request { command: nvm::read(1, 8, 8), buffer: buffer.take(), metadata: None, token };
            pair.submit(request).map_err(|(e, _)| e.to_string())?;
            pair.ring();
            device.complete_all();
            pair.poll(|c| buffer = c.buffer);
        }
        if round {
            let total = clock.nanos(clock.now() - started) as f64 / ios as f64;
            let t = pair.profile().ok_or("profiling is on")?;
            let ns = |ticks: u64| clock.nanos(ticks) as f64 / ios as f64;
            let phases = [
                ("checks", ns(t.checks)),
                ("data_pointer", ns(t.data_pointer)),
                ("sqe", ns(t.sqe)),
                ("doorbell", ns(t.doorbell)),
                ("poll", ns(t.reaping + t.empty_poll)),
                ("callback", ns(t.callback)),
            ];
            let driver: f64 = phases.iter().map(|(_, v)| v).sum();
            if json {
                let fields: Vec<String> = phases.iter().map(|(n, v)| format!("\"{n}\":{v:.2}")).collect();
                println!(
                    "{{\"ios\":{ios},\"clock\":\"{}\",\"total_ns\":{total:.2},\"driver_ns\":{driver:.2},{}}}",
                    if clock.is_tsc() { "tsc" } else { "os" },
                    fields.join(",")
                );
            } else {
                println!("loopback, QD1 4 KiB reads with a buffer, {ios} I/Os, ns per I/O (phase timing on):");
                for (name, value) in phases {
                    println!("  {name:<14} {value:>8.1}");
                }
                println!("  {:<14} {driver:>8.1}", "driver, summed");
                println!(
                    "  {:<14} {total:>8.1}  (the loop, the loopback device's side and the timing included)",
                    "total"
                );
            }
        }
    }
    Ok(())
}
