//! `io-check SCENARIO [--pci BDF]... [--seed N]`: runs one conformance
//! scenario (see `nvme_testkit::conformance`) on each named controller (by
//! default the first NVMe function bound to vfio-pci), printing one line per
//! check. The QEMU integration tests (`examples/tests/qemu_io.rs`) run it in
//! the rig's guest and read those lines.
//!
//! Every line of a passed check reads `io-check: BDF CHECK: ok (...)`; the
//! last line is `io-check: SCENARIO ok` (status 0) or
//! `io-check: SCENARIO FAILED on BDF: CHECK: why` (status 1). Usage errors
//! exit with status 2.

use nvme_driver::ControllerOptions;
use nvme_examples::device::open_controller;
use nvme_testkit::conformance::{self, Scenario};
use std::process::ExitCode;

const USAGE: &str = "usage: io-check integrity|sizes|threads|zns|zns-active|zeroes|dsm-limit [--pci BDF]... [--seed N]";

#[derive(Debug)]
struct Args {
    scenario: Scenario,
    /// Controllers in the order given; empty means the first vfio-pci one.
    pci: Vec<String>,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut words = std::env::args().skip(1);
    let mut scenario = None;
    let mut pci = Vec::new();
    let mut seed = 1;
    while let Some(word) = words.next() {
        match word.as_str() {
            "--pci" => pci.push(words.next().ok_or("--pci needs a BDF")?),
            "--seed" => {
                let value = words.next().ok_or("--seed needs a number")?;
                seed = value.parse().map_err(|_| format!("--seed {value}: not a number"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            name if scenario.is_none() => {
                scenario = Some(Scenario::parse(name).ok_or_else(|| format!("unknown scenario {name}"))?);
            }
            other => return Err(format!("unexpected argument {other}")),
        }
    }
    let scenario = scenario.ok_or("no scenario given")?;
    Ok(Args { scenario, pci, seed })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("io-check: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let name = args.scenario.name();
    let targets: Vec<Option<&str>> =
        if args.pci.is_empty() { vec![None] } else { args.pci.iter().map(|bdf| Some(bdf.as_str())).collect() };
    for pci in targets {
        let label = pci.unwrap_or("the first vfio-pci controller");
        let controller = match open_controller(pci, ControllerOptions::default()) {
            Ok(controller) => controller,
            Err(message) => {
                println!("io-check: {name} FAILED on {label}: open: {message}");
                return ExitCode::FAILURE;
            }
        };
        let result = conformance::run(args.scenario, &controller, args.seed);
        if let Err(message) = result {
            println!("io-check: {name} FAILED on {}: {message}", controller.transport().name());
            return ExitCode::FAILURE;
        }
    }
    println!("io-check: {name} ok");
    ExitCode::SUCCESS
}
