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

/// Choosing an extent's devices in a pool of N (`docs/pool.md`, decision
/// 3): one pass over at most 16 places per copy, so the cost per extent
/// must stay flat from N = 1 to 16 (the pool issue asks for at most 1.1x).
fn chooser(c: &mut Criterion) {
    use zoned_allocator::chooser::Chooser;
    let mut group = c.benchmark_group("chooser");
    group.measurement_time(Duration::from_secs(3));
    for (devices, copies) in [(1, 1), (4, 1), (16, 1), (4, 2), (16, 3)] {
        let mut chooser = Chooser::new();
        for place in 0..devices {
            chooser.add(place, 1 << 40);
        }
        let mut out = vec![0u8; copies];
        let id = BenchmarkId::new(format!("{copies}_copies"), format!("{devices}_devices"));
        group.bench_function(id, |b| {
            b.iter(|| {
                chooser.choose(BLOCKS, 0, &mut out).unwrap();
                black_box(&out);
            })
        });
    }
    group.finish();
}

/// The chooser as a volume drives it: after each choice the chosen
/// devices' free blocks are set to what they now hold, and the pool fills
/// from 4 GiB per device (of 4 KiB blocks) to nearly full, then starts
/// again. So the choice's passes over the places (each time a device leaves
/// the slack of the roomiest) are in the figure, as the volume pays them.
fn chooser_filling(c: &mut Criterion) {
    use zoned_allocator::chooser::Chooser;
    const FULL: u64 = 1 << 20;
    let mut group = c.benchmark_group("chooser_filling");
    group.measurement_time(Duration::from_secs(3));
    for (devices, copies) in [(1, 1), (4, 1), (16, 1), (4, 2), (16, 3)] {
        let mut chooser = Chooser::new();
        let mut free = vec![FULL; devices];
        for (place, &f) in free.iter().enumerate() {
            chooser.add(place, f);
        }
        let mut out = vec![0u8; copies];
        let id = BenchmarkId::new(format!("{copies}_copies"), format!("{devices}_devices"));
        group.bench_function(id, |b| {
            b.iter(|| {
                chooser.choose(BLOCKS, 0, &mut out).unwrap();
                for &place in &out {
                    let place = usize::from(place);
                    free[place] -= u64::from(BLOCKS);
                    if free[place] < u64::from(BLOCKS) * 16 {
                        free.iter_mut().for_each(|f| *f = FULL);
                        (0..devices).for_each(|p| chooser.set_free(p, FULL));
                    } else {
                        chooser.set_free(place, free[place]);
                    }
                }
                black_box(&out);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, placement, chooser, chooser_filling);
criterion_main!(benches);
