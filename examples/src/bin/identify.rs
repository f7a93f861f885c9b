//! `identify`: brings up NVMe controllers owned through VFIO and prints what
//! they and their namespaces report, as text or as JSON.

use clap::Parser;
use nvme_driver::spec::identify::DeallocateReadBehavior;
use nvme_driver::vfio::{self, Vfio};
use nvme_driver::{Controller, ControllerOptions, NamespaceInfo, Transport};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::sync::Arc;

/// Identify NVMe controllers bound to vfio-pci.
#[derive(Parser, Debug)]
#[command(
    name = "identify",
    version,
    after_help = "Without --pci, every NVMe function bound to vfio-pci is reported, like `nvme list`.\n\
                  Bind devices with hack/setup-vfio bind."
)]
struct Args {
    /// PCI address of a controller (DDDD:BB:DD.F or BB:DD.F); repeatable.
    /// All controllers are opened in one VFIO container.
    #[arg(long = "pci", value_name = "BDF", value_parser = nvme_examples::args::pci_address)]
    pci: Vec<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Also read the SMART / health log and the error log.
    #[arg(long)]
    logs: bool,
    /// Print every raw Identify page as `page BDF NAME HEX` lines instead
    /// of the report (for bug reports and test fixtures).
    #[arg(long, conflicts_with_all = ["json", "logs"])]
    dump_pages: bool,
    /// Add or remove quirks: VID:DID:FLAGS, FLAGS a hex mask or +NAME,-NAME (repeatable).
    #[arg(long = "quirks", value_name = "VID:DID:FLAGS")]
    quirks: Vec<nvme_driver::quirks::QuirkOverride>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            nvme_examples::output::failure("identify", &message);
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let bdfs = if args.pci.is_empty() {
        let bound = vfio::vfio_nvme_functions();
        if bound.is_empty() {
            return Err(nvme_driver::Error::NoVfioDevice.to_string());
        }
        bound
    } else {
        args.pci.clone()
    };
    let container = Vfio::new().map_err(|e| e.to_string())?;
    let mut reports = Vec::new();
    for bdf in &bdfs {
        let device = container.open(bdf).map_err(|e| e.to_string())?;
        let transport: Arc<dyn Transport> = device;
        let options = ControllerOptions { quirk_overrides: args.quirks.clone(), ..ControllerOptions::default() };
        let mut controller = Controller::init(transport, options).map_err(|e| format!("{bdf}: {e}"))?;
        if args.dump_pages {
            dump_pages(&mut controller).map_err(|e| format!("{bdf}: {e}"))?;
            continue;
        }
        reports.push(describe(&mut controller, args.logs).map_err(|e| format!("{bdf}: {e}"))?);
    }
    let iommu = container.iommu_info().map(|info| {
        json!({
            "page_sizes": info.page_sizes,
            "iova_ranges": info.iova_ranges.iter().map(|(s, e)| json!([s, e])).collect::<Vec<_>>(),
            "dma_mappings_available": info.dma_mappings_available,
        })
    });
    if args.dump_pages {
        return Ok(());
    }
    if args.json {
        let out = json!({ "controllers": reports, "iommu": iommu });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON values serialize"));
    } else {
        for report in &reports {
            print_text(report);
        }
    }
    Ok(())
}

fn describe(controller: &mut Controller, logs: bool) -> nvme_driver::Result<Value> {
    let pci = controller.transport().pci_id();
    let id = controller.identify().clone();
    let cap = controller.cap();
    let mut namespaces = Vec::new();
    let infos: Vec<NamespaceInfo> = controller.namespaces().to_vec();
    for ns in &infos {
        namespaces.push(describe_namespace(controller, ns)?);
    }
    let nvm = controller.identify_nvm().cloned();
    let zasl = controller.identify_zns().map(|z| z.zasl);
    let max_transfer = controller.max_transfer_bytes();
    let zone_append_max =
        controller.identify_zns().and_then(|z| z.zone_append_size_limit_bytes(cap.min_page_size(), max_transfer));
    let mut report = json!({
        "pci": controller.transport().name(),
        "vendor_id": format!("{:04x}", pci.vendor),
        "device_id": format!("{:04x}", pci.device),
        "subsystem_vendor_id": format!("{:04x}", pci.subsystem_vendor),
        "subsystem_device_id": format!("{:04x}", pci.subsystem_device),
        "model": id.mn,
        "serial": id.sn,
        "firmware": id.fr,
        "version": controller.version().to_string(),
        "mdts": id.mdts,
        "max_transfer_bytes": max_transfer,
        "oncs": {
            "raw": id.oncs.bits(),
            "commands": id.oncs.iter_names().map(|(name, _)| name).collect::<Vec<_>>(),
        },
        "oacs": {
            "raw": id.oacs.bits(),
            "commands": id.oacs.iter_names().map(|(name, _)| name).collect::<Vec<_>>(),
        },
        "vwc": id.volatile_write_cache_present(),
        "sgl": id.sgl_supported(),
        "nn": id.nn,
        "command_sets": match controller.command_sets() {
            0b110 => "all",
            _ => "nvm",
        },
        "max_queue_entries": cap.max_queue_entries(),
        "doorbell_stride": cap.dstrd(),
        "ready_timeout_ms": cap.timeout_ms(),
        "io_queue_pairs": controller.io_queue_pairs(),
        "wzsl": nvm.as_ref().map(|n| n.wzsl),
        "dmrl": nvm.as_ref().map(|n| n.dmrl),
        "dmrsl": nvm.as_ref().map(|n| n.dmrsl),
        "dmsl": nvm.as_ref().map(|n| n.dmsl),
        "zasl": zasl,
        "zone_append_max_bytes": zone_append_max,
        "quirks": controller.quirks().names(),
        "namespaces": namespaces,
    });
    if logs {
        let smart = controller.smart_log()?;
        let errors = controller.error_log()?;
        report["smart"] = serde_json::to_value(&smart).expect("serializable");
        report["error_log"] = serde_json::to_value(&errors).expect("serializable");
    }
    Ok(report)
}

fn dump_pages(controller: &mut Controller) -> nvme_driver::Result<()> {
    use nvme_driver::spec::identify::{
        CNS_ACTIVE_NAMESPACES, CNS_CONTROLLER, CNS_CSI_CONTROLLER, CNS_CSI_NAMESPACE, CNS_NAMESPACE,
        CNS_NS_ID_DESCRIPTORS, CSI_NVM, CSI_ZONED,
    };
    let bdf = controller.transport().name().to_string();
    let mut pages = vec![
        ("controller".to_string(), CNS_CONTROLLER, 0, CSI_NVM),
        ("active-namespaces".to_string(), CNS_ACTIVE_NAMESPACES, 0, CSI_NVM),
        ("controller-nvm".to_string(), CNS_CSI_CONTROLLER, 0, CSI_NVM),
        ("controller-zns".to_string(), CNS_CSI_CONTROLLER, 0, CSI_ZONED),
    ];
    for ns in controller.namespaces() {
        pages.push((format!("ns{}", ns.nsid), CNS_NAMESPACE, ns.nsid, CSI_NVM));
        pages.push((format!("ns{}-descriptors", ns.nsid), CNS_NS_ID_DESCRIPTORS, ns.nsid, CSI_NVM));
        if ns.zoned.is_some() {
            pages.push((format!("ns{}-zns", ns.nsid), CNS_CSI_NAMESPACE, ns.nsid, CSI_ZONED));
        }
    }
    for (name, cns, nsid, csi) in pages {
        let page = controller.identify_raw(cns, nsid, 0, csi)?;
        let hex: String = page.iter().map(|b| format!("{b:02x}")).collect();
        println!("page {bdf} {name} {hex}");
    }
    Ok(())
}

fn describe_namespace(controller: &mut Controller, ns: &NamespaceInfo) -> nvme_driver::Result<Value> {
    let id = &ns.identify;
    let dlfeat = id.deallocate_features();
    let format = id.current_lba_format()?;
    let mut value = json!({
        "nsid": ns.nsid,
        "csi": ns.csi,
        "command_set": if ns.zoned.is_some() { "zoned" } else { "nvm" },
        "lba_size": ns.block_size,
        "metadata_size": format.ms,
        "lba_format": id.current_lba_format_index(),
        "capacity_blocks": ns.capacity_blocks,
        "capacity_bytes": ns.capacity_bytes() as u64,
        "dlfeat": {
            "raw": id.dlfeat,
            "read_behavior": match dlfeat.read_behavior() {
                DeallocateReadBehavior::NotReported => "not reported",
                DeallocateReadBehavior::Zeroes => "zeroes",
                DeallocateReadBehavior::Ones => "ones",
                DeallocateReadBehavior::Reserved(_) => "reserved",
            },
            "write_zeroes_deac": dlfeat.write_zeroes_deac_supported(),
        },
        "npdg": id.npdg,
        "npda": id.npda,
    });
    let handle = controller.namespace(ns.nsid)?;
    if let Some(stats) = handle.zero_stats() {
        value["zero_strategy"] = json!(stats.strategy.name());
        value["zero_strategies_allowed"] = json!(stats.allowed.iter().map(|s| s.name()).collect::<Vec<_>>());
    }
    if let Some(zoned) = &ns.zoned {
        // Zone capacity lives in the zone descriptors, not in Identify.
        let first = controller.report_zones(ns.nsid, 0, 1)?;
        let zone_capacity_blocks = first.first().map(|z| z.zcap);
        value["zoned"] = json!({
            "zone_size_blocks": zoned.zone_size_blocks,
            "zone_size_bytes": zoned.zone_size_blocks * u64::from(ns.block_size),
            "zone_capacity_blocks": zone_capacity_blocks,
            "zone_capacity_bytes": zone_capacity_blocks.map(|c| c * u64::from(ns.block_size)),
            "zones": ns.capacity_blocks / zoned.zone_size_blocks,
            "max_open": zoned.max_open_zones,
            "max_active": zoned.max_active_zones,
        });
    }
    Ok(value)
}

fn bytes(value: &Value) -> String {
    match value.as_u64() {
        Some(b) if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        Some(b) if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        Some(b) if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        Some(b) => format!("{b} B"),
        None => "unlimited".into(),
    }
}

fn limit(value: &Value) -> String {
    value.as_u64().map_or("unlimited".into(), |v| v.to_string())
}

fn print_text(c: &Value) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    println!("{}  {} ({}:{})", s(&c["pci"]), s(&c["model"]), s(&c["vendor_id"]), s(&c["device_id"]));
    println!("  serial        {}", s(&c["serial"]));
    println!("  firmware      {}", s(&c["firmware"]));
    println!("  version       NVMe {}", s(&c["version"]));
    println!("  mdts          {} ({})", c["mdts"], bytes(&c["max_transfer_bytes"]));
    let names = |v: &Value| v.as_array().map(|a| a.iter().map(s).collect::<Vec<_>>().join(", ")).unwrap_or_default();
    println!("  oncs          {:#x}: {}", c["oncs"]["raw"].as_u64().unwrap_or(0), names(&c["oncs"]["commands"]));
    println!("  vwc           {}", if c["vwc"].as_bool() == Some(true) { "present" } else { "absent" });
    println!("  queues        {} I/O queue pairs, up to {} entries each", c["io_queue_pairs"], c["max_queue_entries"]);
    if !c["wzsl"].is_null() {
        println!("  nvm limits    wzsl {}, dmrl {}, dmrsl {}, dmsl {}", c["wzsl"], c["dmrl"], c["dmrsl"], c["dmsl"]);
    }
    let quirks = c["quirks"].as_array().map(|q| q.iter().map(s).collect::<Vec<_>>().join(", ")).unwrap_or_default();
    println!("  quirks        {}", if quirks.is_empty() { "none".to_string() } else { quirks });
    if !c["zasl"].is_null() {
        println!("  zasl          {} (zone append up to {})", c["zasl"], bytes(&c["zone_append_max_bytes"]));
    }
    for ns in c["namespaces"].as_array().into_iter().flatten() {
        println!(
            "  namespace {}   {}, {} blocks x {} B = {} (LBA format {})",
            ns["nsid"],
            s(&ns["command_set"]),
            ns["capacity_blocks"],
            ns["lba_size"],
            bytes(&ns["capacity_bytes"]),
            ns["lba_format"]
        );
        println!(
            "    dlfeat      {:#04x}: deallocated blocks read {}; DEAC in Write Zeroes {}",
            ns["dlfeat"]["raw"].as_u64().unwrap_or(0),
            s(&ns["dlfeat"]["read_behavior"]),
            if ns["dlfeat"]["write_zeroes_deac"].as_bool() == Some(true) { "supported" } else { "not supported" }
        );
        if let Some(allowed) = ns["zero_strategies_allowed"].as_array() {
            let allowed: Vec<String> = allowed.iter().map(s).collect();
            println!("    zero-out    {} (allowed: {})", s(&ns["zero_strategy"]), allowed.join(", "));
        }
        let z = &ns["zoned"];
        if !z.is_null() {
            println!(
                "    zones       {} zones of {} (capacity {}), max open {}, max active {}",
                z["zones"],
                bytes(&z["zone_size_bytes"]),
                bytes(&z["zone_capacity_bytes"]),
                limit(&z["max_open"]),
                limit(&z["max_active"])
            );
        }
    }
    if let Some(smart) = c.get("smart") {
        println!("  smart         {smart}");
    }
}
