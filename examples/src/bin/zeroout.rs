//! `zeroout`: zeroes a range of a namespace with the driver's zero-out
//! strategy (like `blkdiscard -z`), and reports the strategy, the commands
//! and the time it took. Zeroing a whole namespace, or to its end without
//! `--length`, asks first (`--yes` to go on without asking).

use clap::Parser;
use nvme_driver::dma::{DmaMemory, DmaPool};
use nvme_driver::quirks::QuirkOverride;
use nvme_driver::zeroout::{ZeroStats, ZeroStrategy};
use nvme_driver::{ControllerOptions, IoBuffer, Namespace};
use nvme_examples::args::{self, LBA_BYTES_MIN, QUEUE_DEPTH_MAX};
use nvme_examples::confirm::Confirmation;
use nvme_examples::device::open_controller;
use nvme_examples::output::Failure;
use serde_json::json;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Zero a range of an NVMe namespace, choosing the command from what the device really offers.
#[derive(Parser, Debug)]
#[command(name = "zeroout", version)]
struct Args {
    /// Controller PCI address; default: the first NVMe function bound to vfio-pci.
    #[arg(long, value_name = "BDF", value_parser = nvme_examples::args::pci_address)]
    pci: Option<String>,
    /// Namespace ID, 1..=4294967294.
    #[arg(long, default_value_t = 1, value_parser = args::nsid)]
    ns: u32,
    /// Start of the range, in bytes: a multiple of the namespace's block
    /// size, before its end.
    #[arg(long, default_value = "0", value_parser = args::size_in(LBA_BYTES_MIN, 0, u64::MAX))]
    offset: u64,
    /// Length of the range in bytes: more than 0, a multiple of the block
    /// size, within the namespace. Default: to the end of the namespace
    /// (asks first, see --yes).
    #[arg(long, value_parser = args::size_in(LBA_BYTES_MIN, LBA_BYTES_MIN, u64::MAX))]
    length: Option<u64>,
    /// Don't ask before zeroing the whole namespace, or without --length
    /// to its end (without a terminal to ask on, those need --yes).
    #[arg(long)]
    yes: bool,
    /// Let the device deallocate instead of writing (DEAC, zone resets).
    #[arg(long)]
    allow_unmap: bool,
    /// Force a strategy the device allows: write-zeroes, deallocate-as-zeroes, zero-buffer.
    #[arg(long, value_parser = strategy)]
    strategy: Option<ZeroStrategy>,
    /// Add or remove quirks: VID:DID:FLAGS, FLAGS a hex mask or +NAME,-NAME (repeatable).
    #[arg(long = "quirks", value_name = "VID:DID:FLAGS")]
    quirks: Vec<QuirkOverride>,
    /// Queue depth for the zero-out commands, 1..=1024.
    #[arg(long, default_value_t = 64, value_parser = args::int_in::<u16>(1, QUEUE_DEPTH_MAX))]
    qd: u16,
    /// Read the range back afterwards and check every byte is zero.
    #[arg(long)]
    verify: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// A zero-out strategy by name.
fn strategy(name: &str) -> Result<ZeroStrategy, String> {
    ZeroStrategy::from_name(name)
        .ok_or_else(|| "expected write-zeroes, deallocate-as-zeroes or zero-buffer".to_string())
}

fn main() -> ExitCode {
    nvme_examples::logging::init("zeroout");
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report("zeroout"),
    }
}

fn run(args: &Args) -> Result<(), Failure> {
    let confirmation = if args.length.is_none() {
        // The range runs to the namespace's end, a length nobody typed:
        // asked before any device is opened.
        let controller = args.pci.as_deref().unwrap_or("the default controller");
        let what = if args.offset == 0 {
            format!("this zeroes all of namespace {} of {controller}", args.ns)
        } else {
            format!("this zeroes namespace {} of {controller} from byte {} to its end", args.ns, args.offset)
        };
        // Refused here when nobody can answer; asked once the controller
        // is open, naming the namespace by what it is and holds.
        Some(Confirmation::before_opening(&what, args.yes)?)
    } else {
        None
    };
    let options = ControllerOptions { quirk_overrides: args.quirks.clone(), ..ControllerOptions::default() };
    let controller = open_controller(args.pci.as_deref(), options)?;
    let ns = controller.namespace(args.ns).map_err(|e| e.to_string())?;
    let block = u64::from(ns.block_size());
    let capacity = ns.capacity_blocks() * block;
    let length = checked_length(args, block, capacity).map_err(Failure::Argument)?;
    let whole = args.offset == 0 && length == capacity;
    let confirmation = match confirmation {
        Some(confirmation) => Some(confirmation),
        // A --length of the whole namespace: asked before the first write.
        None if whole => Some(Confirmation::before_opening("this zeroes all of the namespace", args.yes)?),
        None => None,
    };
    if let Some(confirmation) = confirmation {
        let named = nvme_examples::device::named_namespace(&controller, args.ns);
        let what = match whole {
            true => format!("this zeroes all of {named}"),
            false => format!("this zeroes {named} from byte {} to its end", args.offset),
        };
        confirmation.ask("zeroout", &what)?;
    }
    if let Some(strategy) = args.strategy {
        ns.set_zero_strategy(strategy).map_err(|e| format!("--strategy {}: {e}", strategy.name()))?;
    }
    let mut pair = controller.create_queue_pair(args.qd.max(2)).map_err(|e| e.to_string())?;
    let before = ns.zero_stats().expect("a controller's namespace has zero-out state");
    let started = Instant::now();
    ns.zeroout(&mut pair, args.offset / block, length / block, args.allow_unmap).map_err(|e| e.to_string())?;
    let elapsed = started.elapsed();
    let after = ns.zero_stats().expect("zero-out state");

    let verified = if args.verify {
        Some(verify(&controller, &ns, &mut pair, args.offset / block, length / block)?)
    } else {
        None
    };

    report(args, &controller, &ns, (&before, &after), length, elapsed, verified);
    match verified {
        Some(false) => Err("the range does not read back as zeroes".into()),
        _ => Ok(()),
    }
}

/// The length of the range --offset and --length give, checked against
/// the namespace (`capacity` bytes of `block`-byte blocks).
fn checked_length(args: &Args, block: u64, capacity: u64) -> Result<u64, String> {
    if args.offset >= capacity {
        return Err(format!(
            "--offset {}: at or past the end of namespace {} ({capacity} bytes)",
            args.offset, args.ns
        ));
    }
    let length = args.length.unwrap_or(capacity - args.offset);
    if !args.offset.is_multiple_of(block) || !length.is_multiple_of(block) {
        return Err(format!("--offset and --length must be multiples of the {block}-byte block"));
    }
    if args.offset.checked_add(length).is_none_or(|end| end > capacity) {
        return Err(format!(
            "--offset {} --length {length}: past the end of namespace {} ({capacity} bytes)",
            args.offset, args.ns
        ));
    }
    Ok(length)
}

/// What was zeroed, how, and how fast: JSON or a line of text.
fn report(
    args: &Args,
    controller: &nvme_driver::Controller,
    ns: &Namespace,
    (before, after): (&ZeroStats, &ZeroStats),
    length: u64,
    elapsed: Duration,
    verified: Option<bool>,
) {
    let per_strategy: Vec<_> = after
        .per_strategy
        .iter()
        .zip(&before.per_strategy)
        .map(|(a, b)| {
            json!({
                "strategy": a.strategy.name(),
                "commands": a.commands - b.commands,
                "bytes": a.bytes - b.bytes,
                "downgrades": a.downgrades - b.downgrades,
            })
        })
        .collect();
    let commands: u64 = after.per_strategy.iter().zip(&before.per_strategy).map(|(a, b)| a.commands - b.commands).sum();
    let mib_s = length as f64 / elapsed.as_secs_f64().max(1e-9) / (1 << 20) as f64;
    if args.json {
        let out = json!({
            "pci": controller.transport().name(),
            "nsid": ns.nsid(),
            "quirks": controller.quirks().names(),
            "allowed": after.allowed.iter().map(|s| s.name()).collect::<Vec<_>>(),
            "strategy_before": before.strategy.name(),
            "strategy_after": after.strategy.name(),
            "offset": args.offset,
            "length": length,
            "seconds": elapsed.as_secs_f64(),
            "mib_s": mib_s,
            "commands": commands,
            "per_strategy": per_strategy,
            "verified_zero": verified,
        });
        println!("{out}");
    } else {
        println!(
            "zeroout: {} ns {}: {} bytes at {} in {:.3} s ({:.1} MiB/s), {} commands, strategy {}{}",
            controller.transport().name(),
            ns.nsid(),
            length,
            args.offset,
            elapsed.as_secs_f64(),
            mib_s,
            commands,
            after.strategy.name(),
            if after.strategy != before.strategy {
                format!(" (downgraded from {})", before.strategy.name())
            } else {
                String::new()
            }
        );
        if let Some(ok) = verified {
            println!("zeroout: read back: {}", if ok { "all zeroes" } else { "NOT ZERO" });
        }
    }
}

/// Reads the range back in 128 KiB pieces; true if every byte is zero.
fn verify(
    controller: &nvme_driver::Controller,
    ns: &nvme_driver::Namespace,
    pair: &mut nvme_driver::QueuePair,
    slba: u64,
    blocks: u64,
) -> Result<bool, String> {
    let chunk_blocks = (128 * 1024 / u64::from(ns.block_size())).max(1);
    let chunk_bytes = (chunk_blocks * u64::from(ns.block_size())) as usize;
    let pool = DmaPool::new(controller.transport(), chunk_bytes, 1).map_err(|e| e.to_string())?;
    let mut buffer = Some(pool.get().ok_or("DMA pool empty")?);
    let mut lba = slba;
    let mut page = vec![0u8; chunk_bytes];
    while lba < slba + blocks {
        let n = chunk_blocks.min(slba + blocks - lba);
        let len = (n * u64::from(ns.block_size())) as usize;
        let data = buffer.take().expect("one buffer, always returned");
        data.fill(0, len, 0xAA);
        let request = ns.read(lba, IoBuffer::range(data, 0, len), lba).map_err(|e| e.to_string())?;
        let done = pair.execute(request, Duration::from_secs(30)).map_err(|e| e.to_string())?;
        if let Err(status) = done.status {
            return Err(format!("read back at LBA {lba}: {status}"));
        }
        let data = done.buffer.expect("the buffer comes back").into_buffer();
        data.copy_out(0, &mut page[..len]);
        if page[..len].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        buffer = Some(data);
        lba += n;
    }
    Ok(true)
}
