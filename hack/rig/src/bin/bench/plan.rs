//! The plan: every job on every side for every round, the perf and fio
//! command lines, and the guest script that runs them.

use super::*;

impl Job {
    pub(super) fn sides(&self) -> Vec<Side> {
        let mut sides = vec![Side::Ours, Side::KernelIrq];
        if self.polled {
            sides.push(Side::KernelPolled);
        }
        if self.prp_baseline {
            sides.push(Side::OursPrp);
        }
        sides.push(Side::Floor);
        sides
    }

    pub(super) fn is_read(&self) -> bool {
        matches!(self.rw, "read" | "randread")
    }

    pub(super) fn is_random(&self) -> bool {
        self.rw.starts_with("rand")
    }

    pub(super) fn side_label(&self, side: Side) -> String {
        match side {
            Side::Ours => "ours (vfio-pci, polled)".into(),
            Side::KernelIrq => format!("kernel {}, irq", self.irq_engine),
            Side::KernelPolled => "kernel io_uring --hipri, polled".into(),
            Side::OursPrp => "ours, PRPs only (--sgl never)".into(),
            Side::Floor => "the floor (--engine raw)".into(),
        }
    }
}

impl Run {
    pub(super) fn tag(index: usize) -> String {
        format!("r{index}")
    }

    /// The guest kills a run still going this long after its start.
    pub(super) fn limit_s(&self) -> u64 {
        self.time_s + RUN_LIMIT_SLACK_S
    }

    pub(super) fn describe(&self, rounds: u32) -> String {
        match self.job {
            Some(job) => {
                format!("round {}/{rounds} {:<16} {}", self.round, JOBS[job].name, JOBS[job].side_label(self.side))
            }
            None if self.side == Side::Ours => "precondition ours (perf write)".into(),
            None => "precondition kernel (fio write)".into(),
        }
    }
}

/// Ours reads the TSC (`--clock tsc`), as on hardware with an invariant
/// TSC, where `auto` takes it: TCG does not advertise one, though its TSC
/// follows the host's, and the OS clock is a system call and an emulated
/// HPET read there.
pub(super) fn perf_command(rw: &str, bs: &str, qd: u16, time_s: u64) -> Vec<String> {
    [
        "perf",
        "--rw",
        rw,
        "--bs",
        bs,
        "--qd",
        &qd.to_string(),
        "--time",
        &time_s.to_string(),
        "--clock",
        "tsc",
        "--pci",
        OURS_PCI,
        "--json",
    ]
    .map(str::to_owned)
    .into_iter()
    // A write job overwrites the scratch namespace, which is the bench's.
    .chain(matches!(rw, "write" | "randwrite" | "randrw").then(|| "--yes".to_owned()))
    .collect()
}

pub(super) fn fio_command(job: &Job, side: Side, time_s: u64) -> Vec<String> {
    let engine = match side {
        Side::KernelPolled => "io_uring",
        _ => job.irq_engine,
    };
    let mut command = vec![
        "fio".to_owned(),
        format!("--name={}-{}", job.name, side.key()),
        format!("--filename={KERNEL_DEVICE}"),
        "--direct=1".into(),
        format!("--rw={}", job.rw),
        format!("--bs={}", job.bs),
        format!("--iodepth={}", job.qd),
        format!("--ioengine={engine}"),
    ];
    if side == Side::KernelPolled {
        command.push("--hipri".into());
    }
    if job.is_random() {
        // Like perf: offsets drawn independently, not a shuffled pass.
        command.push("--norandommap".into());
    }
    command.extend([
        "--time_based".into(),
        format!("--runtime={time_s}"),
        // Percentiles of submission-to-completion latency, as perf reports.
        "--lat_percentiles=1".into(),
        "--output-format=json".into(),
    ]);
    command
}

/// Preconditioning (when asked for), then every round of every job on
/// every side; within a round the sides' order rotates by the round number.
/// Ours and the floor always run back to back, in alternating order, so
/// that each round's ratio of the two compares runs under the same host
/// conditions (see [`JobResult::paired_ratio`]).
pub(super) fn plan(options: &Options) -> Vec<Run> {
    let mut runs = Vec::new();
    if options.precondition {
        let precondition_s = (options.size_bytes / (PRECONDITION_MIN_MIB_S << 20)).max(3);
        let bs = format!("{}k", PRECONDITION_BS_BYTES >> 10);
        runs.push(Run {
            round: 0,
            job: None,
            side: Side::Ours,
            command: {
                let mut command = perf_command("write", &bs, PRECONDITION_QD, precondition_s);
                command.extend(["--io-bytes".into(), options.size_bytes.to_string()]);
                command
            },
            time_s: precondition_s,
        });
        runs.push(Run {
            round: 0,
            job: None,
            side: Side::KernelIrq,
            command: vec![
                "fio".into(),
                "--name=precondition".into(),
                format!("--filename={KERNEL_DEVICE}"),
                "--direct=1".into(),
                "--rw=write".into(),
                format!("--bs={bs}"),
                format!("--iodepth={PRECONDITION_QD}"),
                "--ioengine=libaio".into(),
                // One whole pass over the device, not time-based.
                "--size=100%".into(),
                "--lat_percentiles=1".into(),
                "--output-format=json".into(),
            ],
            time_s: precondition_s,
        });
    }
    for round in 1..=options.rounds {
        for (index, job) in JOBS.iter().enumerate() {
            let mut sides = job.sides();
            let floor = sides.iter().position(|&s| s == Side::Floor).map(|at| sides.remove(at));
            let turn = (round as usize - 1) % sides.len();
            sides.rotate_left(turn);
            if let Some(floor) = floor {
                let ours = sides.iter().position(|&s| s == Side::Ours).expect("every job runs ours");
                sides.insert(if round % 2 == 1 { ours + 1 } else { ours }, floor);
            }
            for side in sides {
                let command = match side {
                    Side::Ours => perf_command(job.rw, job.bs, job.qd, options.time_s),
                    Side::OursPrp => {
                        let mut command = perf_command(job.rw, job.bs, job.qd, options.time_s);
                        command.extend(["--sgl".into(), "never".into()]);
                        command
                    }
                    Side::Floor => {
                        let mut command = perf_command(job.rw, job.bs, job.qd, options.time_s);
                        command.extend(["--engine".into(), "raw".into()]);
                        command
                    }
                    _ => fio_command(job, side, options.time_s),
                };
                runs.push(Run { round, job: Some(index), side, command, time_s: options.time_s });
            }
        }
    }
    runs
}

/// The guest script: environment lines, then each run with its result on
/// one line (`bench-result TAG JSON`), stopping at the first failure
/// (`bench-failed TAG status N`, then the run's output).
pub(super) fn guest_script(runs: &[Run]) -> String {
    let mut script = String::from(
        r#"set -u
dev=$(basename "$(readlink /dev/ctrl1n1)")
if [ -z "$dev" ] || [ ! -e "/sys/block/$dev" ]; then
    echo "bench-failed setup status 1"; echo "/dev/ctrl1n1 is missing"; exit 1
fi
echo "bench-env kernel $(uname -r)"
echo "bench-env fio $(fio --version 2>&1 | tr '\n' ' ')"
echo "bench-env device $dev"
echo "bench-env io_poll $(cat /sys/block/$dev/queue/io_poll)"
if [ "$(cat /sys/block/$dev/queue/io_poll)" != 1 ]; then
    echo "bench-failed setup status 1, /dev/ctrl1n1 has no poll queue: --hipri would not poll"
    exit 1
fi
echo "bench-env scheduler $(cat /sys/block/$dev/queue/scheduler)"
echo "bench-env cmdline $(cat /proc/cmdline)"
run() {
    tag=$1; limit=$2; shift 2
    timeout -k 10 "$limit" "$@" > /tmp/out 2> /tmp/err
    status=$?
    [ -s /tmp/err ] && sed "s/^/bench-note $tag /" /tmp/err
    if [ $status -ne 0 ]; then
        case $status in
            137|143) echo "bench-failed $tag status $status, killed at its $limit s limit" ;;
            *) echo "bench-failed $tag status $status" ;;
        esac
        cat /tmp/out
        exit 1
    fi
    echo "bench-result $tag $(tr -d '\n' < /tmp/out)"
}
"#,
    );
    for (index, run) in runs.iter().enumerate() {
        let words: Vec<String> = run.command.iter().map(|w| format!("'{}'", w.replace('\'', r"'\''"))).collect();
        let _ = writeln!(script, "run {} {} {}", Run::tag(index), run.limit_s(), words.join(" "));
    }
    script.push_str("echo bench-done\n");
    script
}
