//! A fixed-size log-linear latency histogram: recording never allocates,
//! relative error under 1/32 (32 linear sub-buckets per power of two).

const SUB_BUCKET_BITS: u32 = 5;
const SUB_BUCKETS: usize = 1 << SUB_BUCKET_BITS;
/// Powers of two covered: values up to 2^40 ns (about 18 minutes).
const GROUPS: usize = 41;

#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    sum: u128,
    max: u64,
    min: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

fn bucket_of(value: u64) -> usize {
    if value < SUB_BUCKETS as u64 {
        return value as usize;
    }
    let log = 63 - value.leading_zeros(); // >= SUB_BUCKET_BITS
    let shift = log - SUB_BUCKET_BITS;
    let sub = ((value >> shift) as usize) & (SUB_BUCKETS - 1);
    let group = (log - SUB_BUCKET_BITS + 1) as usize;
    (group * SUB_BUCKETS + sub).min(GROUPS * SUB_BUCKETS - 1)
}

/// The largest value that falls in `bucket`.
fn bucket_high(bucket: usize) -> u64 {
    let group = bucket / SUB_BUCKETS;
    let sub = (bucket % SUB_BUCKETS) as u64;
    if group == 0 {
        return sub;
    }
    let shift = (group - 1) as u32;
    ((SUB_BUCKETS as u64 + sub + 1) << shift) - 1
}

impl Histogram {
    pub fn new() -> Self {
        Histogram { counts: vec![0; GROUPS * SUB_BUCKETS].into_boxed_slice(), total: 0, sum: 0, max: 0, min: u64::MAX }
    }

    pub fn record(&mut self, value: u64) {
        self.counts[bucket_of(value)] += 1;
        self.total += 1;
        self.sum += u128::from(value);
        self.max = self.max.max(value);
        self.min = self.min.min(value);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
        self.min = self.min.min(other.min);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn min(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min
        }
    }

    /// The value at quantile `q` (0..=1), as the upper edge of its bucket
    /// (capped at the largest value seen).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_high(bucket).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_cover_their_values() {
        let mut last = 0;
        for value in (0..100_000u64).chain([1 << 30, (1 << 40) - 1]) {
            let bucket = bucket_of(value);
            assert!(bucket >= last || value < 100_000, "monotonic");
            last = bucket;
            assert!(bucket_high(bucket) >= value, "{value} above its bucket's high edge");
            if bucket > 0 {
                assert!(bucket_high(bucket - 1) < value, "{value} belongs in a lower bucket");
            }
        }
    }

    #[test]
    fn quantiles_within_relative_error() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        for (q, exact) in [(0.5, 5_000_000.0), (0.99, 9_900_000.0), (0.999, 9_990_000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - exact).abs() / exact < 1.0 / 16.0, "q{q}: {got} vs {exact}");
        }
        assert_eq!(h.count(), 10_000);
        assert!((h.mean() - 5_000_500.0).abs() < 1.0);
        assert_eq!(h.max(), 10_000_000);
        assert_eq!(Histogram::new().quantile(0.5), 0);
    }
}
