//! `hack/vm`: boot a VM with emulated NVMe/ZNS controllers and run one
//! command in it. See `vm --help`.

use std::process::ExitCode;
use std::time::Duration;
use vm_rig::{parse_size, Controller, Vm};

const USAGE: &str = "\
usage: hack/vm [OPTIONS] -- COMMAND [ARGS...]

Boots a QEMU (TCG) VM whose NVMe functions are bound to vfio-pci, runs
COMMAND in it, prints its output and exits with its status.

Controllers (repeatable, each with one namespace on a fresh backing image;
they appear in the guest in the order given, at 0000:00:10.0, 00:11.0, ...):
  --nvme SIZE[,lba=512|4096][,ms=8|16|64][,mdts=N][,discard=unmap|ignore][,intel-id][,kernel]
  --zns  SIZE,zone=SIZE[,cap=SIZE][,max-open=N][,max-active=N][,zasl=N][,lba=N][,ms=N][,mdts=N][,kernel]
         kernel: leave this controller to the guest kernel's nvme driver; its
         namespace appears as /dev/ctrlNn1 (N = the controller's position)
         ms: per-LBA metadata in a separate buffer (not with kernel)
Options:
  --images DIR     keep backing images in DIR across runs (nvme0.img, ...)
  --mem SIZE       guest memory (default 2G)
  --smp N          guest vCPUs (default 2)
  --hugepages N    2 MiB hugepages reserved in the guest (default 128)
  --timeout SECS   hard limit for the whole run (default 300)
  --append ARGS    add ARGS to the guest kernel's command line (repeatable),
                   e.g. 'nvme.poll_queues=1' for polled I/O (io_uring hipri)
                   on kernel-owned controllers
  --host-program PATH
                   copy a host program into the guest at PATH, with every
                   shared library ldd lists and the dynamic loader, each at
                   its host path (repeatable), e.g. /usr/bin/fio
  -h, --help       this text

COMMAND is one of our tools (identify, perf, ...), a busybox applet, a host
program added with --host-program, or sh -c '...'. The guest's PATH is
/bin:/usr/bin:/sbin:/usr/sbin.

Examples:
  hack/vm --nvme 1G --zns 2G,zone=64M,max-open=8,max-active=8 -- identify --json
  hack/vm --nvme 256M,kernel --append nvme.poll_queues=1 --host-program /usr/bin/fio -- \\
      fio --name=poll --filename=/dev/ctrl0n1 --direct=1 --ioengine=io_uring --hipri \\
          --rw=randread --bs=4k --time_based --runtime=5";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("vm: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<ExitCode, String> {
    let mut vm = Vm::new().stream(true);
    let mut args = args.into_iter();
    let mut command = Vec::new();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"));
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            "--nvme" => vm = vm.controller(Controller::parse(&value("--nvme")?, false).map_err(|e| e.to_string())?),
            "--zns" => vm = vm.controller(Controller::parse(&value("--zns")?, true).map_err(|e| e.to_string())?),
            "--images" => vm = vm.images(value("--images")?),
            "--mem" => vm = vm.mem(parse_size(&value("--mem")?).map_err(|e| e.to_string())?),
            "--smp" => vm = vm.smp(number(&value("--smp")?)?),
            "--hugepages" => vm = vm.hugepages(number(&value("--hugepages")?)?),
            "--timeout" => vm = vm.timeout(Duration::from_secs(number(&value("--timeout")?)?.into())),
            "--append" => vm = vm.append(value("--append")?),
            "--host-program" => vm = vm.host_program(value("--host-program")?),
            "--" => {
                command.extend(args.by_ref());
                break;
            }
            other => return Err(format!("unknown option {other:?}\n\n{USAGE}")),
        }
    }
    if command.is_empty() {
        return Err(format!("no command given\n\n{USAGE}"));
    }
    let outcome = vm.run(&command).map_err(|e| e.to_string())?;
    Ok(ExitCode::from(u8::try_from(outcome.status).unwrap_or(255)))
}

fn number(text: &str) -> Result<u32, String> {
    text.parse().map_err(|_| format!("{text:?} is not a number"))
}
