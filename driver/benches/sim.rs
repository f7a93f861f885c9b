//! The simulator as a device: 4 KiB random reads at queue depth 32 through
//! a real queue pair (driver and simulated controller on one core), over
//! data that is really stored, so each read copies 4 KiB out of the
//! simulator's chunks. The figure bounds how fast property tests over the
//! simulator can go; it should never be their bottleneck.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nvme_driver::dma::DmaPool;
use nvme_driver::sim::{SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions, IoBuffer, Transport};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const QUEUE_DEPTH: usize = 32;
const BLOCK: u32 = 512;
/// Written before the reads start.
const WRITTEN_BYTES: u64 = 256 << 20;

fn bench(c: &mut Criterion) {
    let sim = Simulator::new(SimConfig::nvm((1 << 30) / u64::from(BLOCK), BLOCK).with_seed(1));
    let transport: Arc<dyn Transport> = sim.clone();
    let controller = Controller::init(transport, ControllerOptions::default()).unwrap();
    let ns = controller.namespace(1).unwrap();
    let mut pair = controller.create_queue_pair(64).unwrap();
    let pool = DmaPool::new(controller.transport(), 128 * 1024, 1).unwrap();

    // Fill the hot area (durable), 128 KiB at a time.
    let mut buffer = Some(IoBuffer::new(pool.get().unwrap()));
    let step = 128 * 1024 / u64::from(BLOCK);
    for lba in (0..WRITTEN_BYTES / u64::from(BLOCK)).step_by(step as usize) {
        let request = ns.write(lba, buffer.take().unwrap(), true, lba).unwrap();
        let done = pair.execute(request, Duration::from_secs(1)).unwrap();
        done.status.unwrap();
        buffer = done.buffer;
    }
    drop(buffer);

    let reads = DmaPool::new(controller.transport(), 4096, QUEUE_DEPTH as u32).unwrap();
    let mut free: Vec<IoBuffer> = (0..QUEUE_DEPTH).map(|_| IoBuffer::new(reads.get().unwrap())).collect();
    let blocks_per_read = 4096 / u64::from(BLOCK);
    let mut rng = nvme_driver::prng::Prng::new(0x2545_F491_4F6C_DD1D);

    let mut group = c.benchmark_group("sim");
    group.throughput(Throughput::Elements(1));
    // 16 MiB of data stays in the last-level cache, like the working set of
    // a property test; 256 MiB is bound by DRAM bandwidth.
    for (name, hot_bytes) in [("randread_4k_qd32", 16u64 << 20), ("randread_4k_qd32_256mib", WRITTEN_BYTES)] {
        let slots = hot_bytes / 4096;
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                let started = Instant::now();
                let mut submitted = 0u64;
                let mut completed = 0u64;
                while completed < iterations {
                    while submitted < iterations && !free.is_empty() {
                        let lba = rng.below(slots) * blocks_per_read;
                        let request = ns.read(lba, free.pop().unwrap(), submitted).unwrap();
                        pair.submit(request).map_err(|(error, _)| error).unwrap();
                        submitted += 1;
                    }
                    pair.poll(|done| {
                        debug_assert!(done.status.is_ok());
                        black_box(done.token);
                        free.push(done.buffer.unwrap());
                        completed += 1;
                    });
                }
                started.elapsed()
            })
        });
    }
    group.finish();
    let stats = sim.stats();
    eprintln!("simulator: {} reads, {} completions posted", stats.io(0x02), stats.completions_posted);
}

criterion_group!(benches, bench);
criterion_main!(benches);
