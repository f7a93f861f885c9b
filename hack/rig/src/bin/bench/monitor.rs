//! The host's load while the VM runs (CPU ticks, steal, the QEMU
//! process), and the progress lines that carry it.

use super::*;

pub(super) fn describe_tag(tag: &str, runs: &[Run], rounds: u32) -> String {
    tag.strip_prefix('r')
        .and_then(|i| i.parse::<usize>().ok())
        .and_then(|i| runs.get(i))
        .map_or_else(|| tag.to_owned(), |run| run.describe(rounds))
}

pub(super) fn clock(started: Instant) -> String {
    let s = started.elapsed().as_secs();
    format!("[{:>2}:{:02}]", s / 60, s % 60)
}

/// Prints one progress line (to stderr) for a guest output line, and
/// samples the host's load at each run's end.
pub(super) fn progress(line: &str, runs: &[Run], rounds: u32, started: Instant, monitor: &LoadMonitor) {
    match classify(line) {
        Line::Env(key, value) if key != "cmdline" => {
            eprintln!("{} guest {key}: {}", clock(started), value.trim())
        }
        // The runs start right after the last environment line.
        Line::Env(..) => monitor.restart(),
        Line::Result(index, json) => {
            let Some(run) = runs.get(index) else { return };
            let load = monitor.run_ended(index);
            let text = match parse_result(run, json) {
                Ok(s) if run.job.is_none() => format!("wrote {}", gib(s.bytes)),
                Ok(s) => format!(
                    "{:>9.0} IOPS {:>8.1} MiB/s  mean {:>7.1} us  p99 {:>8.1} us",
                    s.iops, s.mib_s, s.mean_us, s.p99_us
                ),
                Err(e) => format!("unreadable result: {e}"),
            };
            let warning = match load {
                Some(load) if load.disturbed() => format!(
                    "  [host busy elsewhere: {:.0}% other, {:.0}% steal]",
                    load.other * 100.0,
                    load.steal * 100.0
                ),
                _ => String::new(),
            };
            eprintln!(
                "{} {:>3}/{} {:<62} {text}{warning}",
                clock(started),
                index + 1,
                runs.len(),
                run.describe(rounds)
            );
        }
        Line::Note(tag, text) => {
            eprintln!("{}   note from {}: {text}", clock(started), describe_tag(tag, runs, rounds))
        }
        Line::Failed(tag, text) => {
            eprintln!("{} FAILED: {} with {text}", clock(started), describe_tag(tag, runs, rounds))
        }
        _ => {}
    }
}

impl CpuTicks {
    pub(super) fn now() -> Option<Self> {
        let (total, busy, steal) = parse_cpu_line(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let own_pid = std::process::id();
        let mut ours = process_ticks(own_pid).map_or(0, |(_, ticks)| ticks);
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((parent, ticks)) = process_ticks(pid) {
                if parent == own_pid {
                    ours += ticks;
                }
            }
        }
        Some(CpuTicks { total, busy, steal, ours })
    }
}

/// The total, busy and stolen ticks of `/proc/stat`'s first line:
/// `cpu user nice system idle iowait irq softirq steal guest guest_nice`
/// (guest time is already counted in user and nice).
pub(super) fn parse_cpu_line(stat: &str) -> Option<(u64, u64, u64)> {
    let cpu: Vec<u64> =
        stat.lines().next()?.strip_prefix("cpu ")?.split_whitespace().map(|n| n.parse().ok()).collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal, ..] = cpu[..] else {
        return None;
    };
    let busy = user + nice + system + irq + softirq + steal;
    Some((busy + idle + iowait, busy, steal))
}

pub(super) fn process_ticks(pid: u32) -> Option<(u32, u64)> {
    parse_process_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// A process's parent and its user plus system ticks, from `/proc/PID/stat`:
/// `pid (comm) state ppid ... utime stime ...`, utime and stime being the
/// 14th and 15th fields. The command name may hold spaces and parentheses,
/// so the fields are counted from its last `)`.
pub(super) fn parse_process_stat(stat: &str) -> Option<(u32, u64)> {
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let parent = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((parent, utime + stime))
}

impl HostLoad {
    /// A run whose neighbours took more than this share is flagged.
    pub(super) const DISTURBED: f64 = 0.05;

    pub(super) fn between(before: CpuTicks, after: CpuTicks) -> Option<Self> {
        let total = after.total.checked_sub(before.total).filter(|t| *t > 0)? as f64;
        let busy = after.busy.saturating_sub(before.busy);
        let steal = after.steal.saturating_sub(before.steal);
        let ours = after.ours.saturating_sub(before.ours);
        let other = busy.saturating_sub(steal).saturating_sub(ours);
        Some(HostLoad { other: other as f64 / total, steal: steal as f64 / total })
    }

    pub(super) fn disturbed(self) -> bool {
        self.other + self.steal > Self::DISTURBED
    }
}

impl LoadMonitor {
    pub(super) fn new(runs: usize) -> Self {
        LoadMonitor { last: Mutex::new(CpuTicks::now()), loads: Mutex::new(vec![None; runs]) }
    }

    /// Starts the interval of the first run.
    pub(super) fn restart(&self) {
        *self.last.lock().expect("no panics while locked") = CpuTicks::now();
    }

    /// Ends run `index`'s interval and starts the next one's.
    pub(super) fn run_ended(&self, index: usize) -> Option<HostLoad> {
        let now = CpuTicks::now()?;
        let before = self.last.lock().expect("no panics while locked").replace(now)?;
        let load = HostLoad::between(before, now)?;
        if let Some(slot) = self.loads.lock().expect("no panics while locked").get_mut(index) {
            *slot = Some(load);
        }
        Some(load)
    }

    pub(super) fn load(&self, index: usize) -> Option<HostLoad> {
        self.loads.lock().expect("no panics while locked").get(index).copied().flatten()
    }
}
