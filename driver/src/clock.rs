//! The poll path's clock: the time stamp counter where it keeps a constant
//! rate, else the OS's monotonic clock.
//!
//! A queue pair reads the time to start and check deadlines, and a tool
//! to stamp latencies, on the path every I/O takes. SPDK's pollers read
//! only the TSC (`spdk_get_ticks`, `lib/env_dpdk`). An OS clock read is a
//! vDSO call on hardware whose clocksource the vDSO can read (about 20 ns),
//! but a system call plus an emulated timer read where it cannot: a VM on
//! HPET, as under QEMU's TCG, where each read also takes QEMU's global
//! lock. The TSC is one instruction on hardware and a cheap helper under
//! TCG, whose guest TSC follows the host's.
//!
//! [`ClockSource::Auto`] takes the TSC when CPUID says it is invariant
//! (constant rate in every P-, C- and T-state: CPUID 8000_0007h EDX bit 8,
//! on every x86 CPU since about 2008). Where it is not said so, it measures
//! once per process what an OS clock read costs against a TSC read, and
//! takes the TSC when the OS clock is slow ([`os_clock_is_slow`]: a VM
//! whose clocksource the vDSO cannot read, as under TCG), else the OS
//! clock.
//! [`ClockSource::Tsc`] takes it in every case. The TSC's rate is measured
//! once per process against the OS clock, over [`CALIBRATION`].
//!
//! A TSC that CPUID does not vouch for may jump, stop, or differ between
//! cores. It then only stamps: [`Clock::for_deadlines`] gives the OS clock
//! in its place, and queue pairs time their deadlines and health checks by
//! that, reading it once per deadline check (every few dozen polls), not
//! per I/O. So a default run in a VM stamps with the cheap counter, and no
//! deadline depends on one nobody vouched for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the TSC's rate is measured against the OS clock, once per
/// process (the first [`Clock`] on the TSC pays it).
pub const CALIBRATION: Duration = Duration::from_millis(20);

/// Which counter a [`Clock`] reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockSource {
    /// The TSC where it is invariant (CPUID), else the OS clock.
    #[default]
    Auto,
    /// The TSC, whatever CPUID says (the OS clock on other architectures).
    Tsc,
    /// The OS's monotonic clock ([`Instant`]).
    Os,
}

impl std::str::FromStr for ClockSource {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(ClockSource::Auto),
            "tsc" => Ok(ClockSource::Tsc),
            "os" => Ok(ClockSource::Os),
            _ => Err(format!("clock {text:?}: expected auto, tsc or os")),
        }
    }
}

/// A monotonic clock in ticks: TSC cycles, or nanoseconds since the
/// clock was made. Copy it freely; reading it takes no lock and makes no
/// system call on the TSC.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    counter: Counter,
    /// Whether its ticks may time deadlines: the OS clock, or a TSC that
    /// CPUID says is invariant.
    trusted: bool,
    ticks_per_s: u64,
    /// Nanoseconds per tick in 32.32 fixed point, so that `nanos` is a
    /// multiply and a shift: a 128-bit division per call (a library call,
    /// and an emulated divide under TCG) would cost every I/O it times.
    /// Linux's clocksources convert cycles the same way (`mult`, `shift`).
    nanos_per_tick_q32: u64,
}

/// What a [`Clock`] reads.
#[derive(Clone, Copy, Debug)]
enum Counter {
    Tsc,
    /// The OS clock, counted from this instant, in nanoseconds.
    Os(Instant),
    /// A counter a test sets ([`Clock::manual`]).
    Manual(&'static AtomicU64),
}

impl Clock {
    /// A clock on `source`.
    pub fn new(source: ClockSource) -> Clock {
        let x86 = cfg!(target_arch = "x86_64");
        let tsc = match source {
            ClockSource::Auto => x86 && (tsc_invariant() || os_clock_is_slow()),
            ClockSource::Tsc => x86,
            ClockSource::Os => false,
        };
        match tsc {
            true => Clock::counting(Counter::Tsc, x86 && tsc_invariant(), tsc_hz()),
            false => Clock::os(),
        }
    }

    /// The OS's monotonic clock, in nanoseconds.
    pub fn os() -> Clock {
        Clock::counting(Counter::Os(Instant::now()), true, 1_000_000_000)
    }

    /// A clock that reads `counter`, at `ticks_per_s`, for tests of what a
    /// counter nobody vouches for does (it jumps, stops, goes back): like an
    /// unverified TSC, it is not trusted with deadlines.
    pub fn manual(counter: &'static AtomicU64, ticks_per_s: u64) -> Clock {
        Clock::counting(Counter::Manual(counter), false, ticks_per_s)
    }

    fn counting(counter: Counter, trusted: bool, ticks_per_s: u64) -> Clock {
        let ticks_per_s = ticks_per_s.max(1);
        // At most 10^9 << 32 < 2^62 for one tick a second: it fits.
        let nanos_per_tick_q32 = ((1_000_000_000u128 << 32) / u128::from(ticks_per_s)) as u64;
        Clock { counter, trusted, ticks_per_s, nanos_per_tick_q32 }
    }

    /// Whether it reads the TSC.
    pub fn is_tsc(&self) -> bool {
        matches!(self.counter, Counter::Tsc)
    }

    /// Whether its ticks time deadlines ([`Clock::for_deadlines`]).
    pub fn is_trusted(&self) -> bool {
        self.trusted
    }

    /// The clock to time deadlines and health checks by: this one when it
    /// is the OS clock or an invariant TSC, else the OS clock.
    pub fn for_deadlines(&self) -> Clock {
        if self.trusted {
            *self
        } else {
            Clock::os()
        }
    }

    /// The time, in ticks.
    #[inline]
    pub fn now(&self) -> u64 {
        match self.counter {
            Counter::Tsc => rdtsc(),
            Counter::Os(origin) => origin.elapsed().as_nanos() as u64,
            Counter::Manual(counter) => counter.load(Ordering::Relaxed),
        }
    }

    /// Ticks per second.
    pub fn ticks_per_second(&self) -> u64 {
        self.ticks_per_s
    }

    /// `duration` in ticks (saturating).
    pub fn ticks(&self, duration: Duration) -> u64 {
        let ticks = duration.as_nanos() * u128::from(self.ticks_per_s) / 1_000_000_000;
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// `ticks` in nanoseconds (within a part in 10^9 on the TSC).
    #[inline]
    pub fn nanos(&self, ticks: u64) -> u64 {
        match self.counter {
            Counter::Os(_) => ticks,
            // The product has at most 64 + 62 bits.
            Counter::Tsc | Counter::Manual(_) => {
                ((u128::from(ticks) * u128::from(self.nanos_per_tick_q32)) >> 32) as u64
            }
        }
    }
}

impl Default for Clock {
    /// [`ClockSource::Auto`].
    fn default() -> Self {
        Clock::new(ClockSource::Auto)
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC exists on every x86_64 CPU and only reads a counter.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    unreachable!("a TSC clock is only made on x86_64")
}

/// Whether CPUID says the TSC is invariant (8000_0007h EDX bit 8).
pub fn tsc_invariant() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // Leaf 8000_0000h gives the highest extended leaf, checked before
        // 8000_0007h is asked.
        let highest = __cpuid(0x8000_0000).eax;
        highest >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Reads of each clock timed in a batch, and batches: the fastest batch
/// counts, so a preemption in one does not decide.
const READS_PER_BATCH: u32 = 64;
const BATCHES: u32 = 5;

/// Whether an OS clock read costs more than twice a TSC read here, and
/// over 100 ns: measured once per process, the fastest of [`BATCHES`]
/// batches of [`READS_PER_BATCH`] reads of each. On hardware the vDSO
/// reads the TSC itself (tens of ns): not slow. In a VM whose clocksource
/// the vDSO cannot read, as under QEMU's TCG on the HPET, each read is a
/// system call and maybe a trapped MMIO read (4 KiB random reads at QD1
/// ran at 9,000 IOPS on the OS clock against 28,500 on the TSC in one
/// boot). A TSC chosen here only stamps: deadlines read the OS clock
/// ([`Clock::for_deadlines`]).
pub fn os_clock_is_slow() -> bool {
    static SLOW: OnceLock<bool> = OnceLock::new();
    *SLOW.get_or_init(|| {
        if !cfg!(target_arch = "x86_64") {
            return false;
        }
        let fastest = |read: &dyn Fn()| {
            (0..BATCHES)
                .map(|_| {
                    let start = Instant::now();
                    for _ in 0..READS_PER_BATCH {
                        read();
                    }
                    start.elapsed().as_nanos() / u128::from(READS_PER_BATCH)
                })
                .min()
                .unwrap_or(0)
        };
        let os_ns = fastest(&|| {
            std::hint::black_box(Instant::now());
        });
        let tsc_ns = fastest(&|| {
            std::hint::black_box(rdtsc());
        });
        os_ns > 100 && os_ns > 2 * tsc_ns.max(1)
    })
}

/// The TSC's rate, measured once against the OS clock.
fn tsc_hz() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(|| {
        let (start, tsc_start) = (Instant::now(), rdtsc());
        while start.elapsed() < CALIBRATION {
            std::thread::sleep(CALIBRATION / 4);
        }
        let (elapsed, cycles) = (start.elapsed(), rdtsc().wrapping_sub(tsc_start));
        let hz = u128::from(cycles) * 1_000_000_000 / elapsed.as_nanos().max(1);
        // A TSC that did not move (or went back) cannot time anything: 1
        // GHz keeps the arithmetic sane, and the tests below catch it.
        u64::try_from(hz).unwrap_or(u64::MAX).max(1_000_000)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sources_agree_with_the_os_on_a_sleep() {
        for source in [ClockSource::Os, ClockSource::Tsc, ClockSource::Auto] {
            let clock = Clock::new(source);
            let (start, ticks) = (Instant::now(), clock.now());
            std::thread::sleep(Duration::from_millis(30));
            let measured = clock.nanos(clock.now() - ticks);
            let os = start.elapsed().as_nanos() as u64;
            // Within 20% (a loaded host may stretch either read).
            assert!(measured.abs_diff(os) * 5 < os, "{source:?}: {measured} ns against the OS's {os}");
        }
    }

    #[test]
    fn only_a_vouched_for_clock_times_deadlines() {
        static COUNTER: AtomicU64 = AtomicU64::new(7);
        let manual = Clock::manual(&COUNTER, 1_000);
        assert!(!manual.is_trusted());
        assert!(!manual.for_deadlines().is_tsc() && manual.for_deadlines().is_trusted(), "the OS clock instead");
        assert_eq!(manual.now(), 7);
        assert!(Clock::os().for_deadlines().is_trusted());
        let tsc = Clock::new(ClockSource::Tsc);
        assert_eq!(tsc.is_trusted(), tsc_invariant());
        assert_eq!(tsc.for_deadlines().is_tsc(), tsc_invariant());
    }

    #[test]
    fn durations_and_ticks_convert_both_ways() {
        let clock = Clock::new(ClockSource::Tsc);
        let ticks = clock.ticks(Duration::from_millis(10));
        assert!(clock.nanos(ticks).abs_diff(10_000_000) < 1_000, "{}", clock.nanos(ticks));
        assert_eq!(Clock::os().ticks(Duration::from_micros(7)), 7_000);
        assert_eq!(Clock::os().ticks(Duration::MAX), u64::MAX, "saturates");
        assert_eq!("tsc".parse(), Ok(ClockSource::Tsc));
        assert!("hpet".parse::<ClockSource>().is_err());
    }

    #[test]
    fn nanos_by_fixed_point_match_the_exact_quotient() {
        for hz in [1, 3, 1_000_000, 999_999_937, 1_000_000_000, 2_096_064_000, 3_000_000_007, 5_000_000_000] {
            let clock = Clock::counting(Counter::Tsc, true, hz);
            for ticks in [0, 1, 977, hz, 12_345_678_901, u64::from(u32::MAX) * 1_000, u64::MAX / 1_000] {
                let exact = u128::from(ticks) * 1_000_000_000 / u128::from(hz);
                if exact > u128::from(u64::MAX) {
                    continue; // not a time in nanoseconds either way
                }
                let ours = u128::from(clock.nanos(ticks));
                // Truncating the factor loses under a part in 10^9, and
                // the shift rounds down as the division does.
                assert!(
                    ours <= exact && exact - ours <= 1 + exact / 1_000_000_000,
                    "{hz} Hz, {ticks}: {ours} for {exact}"
                );
            }
        }
    }
}
