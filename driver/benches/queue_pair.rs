//! Submit + complete cost per command on the I/O path, over the loopback
//! device (no hardware): at queue depth 1, a 4 KiB read also sent again
//! in place, and in batches of 32.
//!
//! Each iteration submits, lets the loopback device post completions, and
//! polls them back, so the figure includes the device side's work (reading
//! the SQE and writing the CQE), which real hardware does for free.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use nvme_driver::cmd::nvm;
use nvme_driver::dma::DmaPool;
use nvme_driver::loopback;
use nvme_driver::{IoBuffer, Request, Transport};
use std::hint::black_box;
use std::sync::Arc;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue_pair");

    // QD1: one command without data.
    {
        let (mut pair, mut device, _) = loopback::queue_pair(64).unwrap();
        group.throughput(Throughput::Elements(1));
        group.bench_function("qd1_flush", |b| {
            b.iter(|| {
                pair.submit(Request { command: nvm::flush(1), buffer: None, metadata: None, token: 7 }).unwrap();
                pair.ring();
                device.complete_all();
                black_box(pair.poll(|c| {
                    black_box(c.token);
                }));
            })
        });
    }

    // QD1: a 4 KiB read with a pooled buffer that travels with the command.
    {
        let (mut pair, mut device, transport) = loopback::queue_pair(64).unwrap();
        let transport: Arc<dyn Transport> = transport;
        let pool = DmaPool::new(&transport, 4096, 1).unwrap();
        let mut buffer = Some(IoBuffer::new(pool.get().unwrap()));
        group.bench_function("qd1_read_4k_with_buffer", |b| {
            b.iter(|| {
                let request = Request { command: nvm::read(1, 8, 8), buffer: buffer.take(), metadata: None, token: 1 };
                pair.submit(request).unwrap();
                pair.ring();
                device.complete_all();
                pair.poll(|c| buffer = c.buffer);
            })
        });
    }

    // QD1: the same 4 KiB read sent again from its completion, in its
    // slot (`poll_in_place`): no request built, the buffer never moved.
    {
        let (mut pair, mut device, transport) = loopback::queue_pair(64).unwrap();
        let transport: Arc<dyn Transport> = transport;
        let ns = loopback::namespace(1, 1 << 20, 512);
        let pool = DmaPool::new(&transport, 4096, 1).unwrap();
        let request = ns.read(8, IoBuffer::new(pool.get().unwrap()), 1).unwrap();
        pair.submit(request).unwrap();
        group.bench_function("qd1_read_4k_in_place", |b| {
            b.iter(|| {
                pair.ring();
                device.complete_all();
                pair.poll_in_place(|done| done.read(&ns, 8, 1).map_err(|(error, _)| error).unwrap());
            })
        });
    }

    // Batches of 32: one doorbell per batch, one poll pass.
    {
        let (mut pair, mut device, _) = loopback::queue_pair(64).unwrap();
        group.throughput(Throughput::Elements(32));
        group.bench_function("batch32_flush", |b| {
            b.iter_batched(
                || (),
                |()| {
                    for token in 0..32 {
                        pair.submit(Request { command: nvm::flush(1), buffer: None, metadata: None, token }).unwrap();
                    }
                    pair.ring();
                    device.complete_all();
                    let mut n = 0;
                    pair.poll(|c| {
                        n += 1;
                        black_box(c.token);
                    });
                    assert_eq!(n, 32);
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
