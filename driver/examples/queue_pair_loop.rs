//! Runs one of the `queue_pair` criterion bench's loops a given number of
//! times and nothing else, for counting instructions per command with
//! callgrind (`hack/io-instructions qd1_flush ...`): the count is
//! deterministic where the host's timings are not.
//!
//! `cargo run --release -p nvme-driver --example queue_pair_loop -- CASE --commands N`
//! with CASE one of qd1_flush, qd1_read_4k_with_buffer, qd1_read_4k_in_place,
//! batch32_flush, or idle_poll (a poll pass that finds nothing; each counts
//! as a command).

#[allow(dead_code, reason = "shared with the criterion bench")]
#[path = "../benches/cases/queue_pair.rs"]
mod queue_pair_cases;
use queue_pair_cases::{Flushes, IdlePoll, Qd1ReadInPlace, Qd1ReadWithBuffer};

const USAGE: &str = "usage: queue_pair_loop CASE --commands N [--json]
CASE: qd1_flush, qd1_read_4k_with_buffer, qd1_read_4k_in_place, batch32_flush,
      idle_poll (a poll pass that finds nothing, each counted as a command)";

fn main() -> Result<(), String> {
    let mut case = None;
    let mut commands: Option<u64> = None;
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--commands" => {
                commands =
                    Some(args.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).ok_or("--commands N, N > 0")?)
            }
            "--json" => json = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            name if case.is_none() && !name.starts_with('-') => case = Some(name.to_owned()),
            other => return Err(format!("unexpected argument {other:?}\n{USAGE}")),
        }
    }
    let (case, commands) = case.zip(commands).ok_or(USAGE)?;
    // Whole steps only: a batch case runs `Flushes::BATCH` commands a step,
    // the others one.
    let ran = match case.as_str() {
        "qd1_flush" => run(Flushes::new(), Flushes::qd1_step, commands),
        "qd1_read_4k_with_buffer" => run(Qd1ReadWithBuffer::new(), Qd1ReadWithBuffer::step, commands),
        "qd1_read_4k_in_place" => run(Qd1ReadInPlace::new(), Qd1ReadInPlace::step, commands),
        "batch32_flush" => {
            run(Flushes::new(), Flushes::batch32_step, commands.div_ceil(Flushes::BATCH)) * Flushes::BATCH
        }
        "idle_poll" => run(IdlePoll::new(), IdlePoll::step, commands),
        other => return Err(format!("unknown case {other:?}\n{USAGE}")),
    };
    if json {
        println!("{{\"case\":\"{case}\",\"commands\":{ran}}}");
    } else {
        println!("{case}: {ran} commands");
    }
    Ok(())
}

fn run<C>(mut case: C, step: impl Fn(&mut C), steps: u64) -> u64 {
    for _ in 0..steps {
        step(&mut case);
    }
    steps
}
