//! Submit + complete cost per command on the I/O path, over the loopback
//! device (no hardware): at queue depth 1, a 4 KiB read also sent again
//! in place, and in batches of 32; and a poll pass that finds nothing.
//! The loops are `cases/queue_pair.rs`'s, which `hack/io-instructions`
//! also counts instructions of.
//!
//! Each iteration submits, lets the loopback device post completions, and
//! polls them back, so the figure includes the device side's work (reading
//! the SQE and writing the CQE), which real hardware does for free.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

#[allow(dead_code, reason = "each user takes the cases it needs")]
#[path = "cases/queue_pair.rs"]
mod queue_pair_cases;
use queue_pair_cases::{Flushes, IdlePoll, Qd1ReadInPlace, Qd1ReadWithBuffer};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue_pair");
    group.throughput(Throughput::Elements(1));
    let mut flushes = Flushes::new();
    group.bench_function("qd1_flush", |b| b.iter(|| flushes.qd1_step()));
    let mut case = Qd1ReadWithBuffer::new();
    group.bench_function("qd1_read_4k_with_buffer", |b| b.iter(|| case.step()));
    let mut case = Qd1ReadInPlace::new();
    group.bench_function("qd1_read_4k_in_place", |b| b.iter(|| case.step()));
    group.throughput(Throughput::Elements(Flushes::BATCH));
    let mut flushes = Flushes::new();
    group
        .bench_function("batch32_flush", |b| b.iter_batched(|| (), |()| flushes.batch32_step(), BatchSize::SmallInput));
    group.throughput(Throughput::Elements(1));
    let mut case = IdlePoll::new();
    group.bench_function("idle_poll", |b| b.iter(|| case.step()));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
