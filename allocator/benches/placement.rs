//! Placement cost on a volume of 10,000 zones, empty and 99% full: the
//! ratio must stay near 1 (full zones are never visited). Beside it, a
//! first-fit scan from the first zone, the shape of the btrfs walk from a
//! stale hint, to show what the structure avoids.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use std::time::{Duration, Instant};
use zoned_allocator::zones::{Slot, ZoneTable};

const ZONES: usize = 10_000;
/// 64 MiB zones of 4 KiB blocks; 256 KiB allocations (the seed's fio job).
const ZONE_BLOCKS: u32 = 16_384;
const BLOCKS: u32 = 64;

fn table(full_percent: usize) -> ZoneTable {
    let mut table = ZoneTable::new(&vec![ZONE_BLOCKS; ZONES], |_| true, 1, 0);
    let fill = ZONES * full_percent / 100 * (ZONE_BLOCKS / BLOCKS) as usize;
    for _ in 0..fill {
        table.allocate(Slot::Stream(0), BLOCKS).unwrap();
    }
    table
}

/// First fit from zone 0 over a plain array of used blocks.
fn first_fit(used: &mut [u32], blocks: u32) -> Option<(usize, u32)> {
    let zone = used.iter().position(|&u| ZONE_BLOCKS - u >= blocks)?;
    let offset = used[zone];
    used[zone] += blocks;
    Some((zone, offset))
}

fn placement(c: &mut Criterion) {
    let mut group = c.benchmark_group("placement");
    group.measurement_time(Duration::from_secs(3));
    for full in [0, 99] {
        let base = table(full);
        group.bench_with_input(BenchmarkId::new("zone_table", format!("{full}%_full")), &base, |b, base| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let mut t = base.clone();
                    let n = left.min(20_000);
                    let start = Instant::now();
                    for _ in 0..n {
                        black_box(t.allocate(Slot::Stream(0), BLOCKS).unwrap());
                    }
                    total += start.elapsed();
                    left -= n;
                }
                total
            });
        });
        let used: Vec<u32> = (0..ZONES).map(|z| if z < ZONES * full / 100 { ZONE_BLOCKS } else { 0 }).collect();
        group.bench_with_input(BenchmarkId::new("first_fit_scan", format!("{full}%_full")), &used, |b, used| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let mut u = used.clone();
                    let n = left.min(20_000);
                    let start = Instant::now();
                    for _ in 0..n {
                        black_box(first_fit(&mut u, BLOCKS).unwrap());
                    }
                    total += start.elapsed();
                    left -= n;
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group!(benches, placement);
criterion_main!(benches);
