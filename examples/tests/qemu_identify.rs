//! QEMU integration tests for controller bring-up and identify, run in a VM
//! by the rig (hack/rig). Each test boots its own VM.

use serde_json::Value;
use vm_rig::{Controller, Outcome, Vm};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn run(vm: Vm, command: &[&str]) -> Outcome {
    vm.run(command).unwrap_or_else(|e| panic!("VM run failed: {e}"))
}

fn identify_json(vm: Vm, extra: &[&str]) -> Value {
    let mut command = vec!["identify", "--json"];
    command.extend_from_slice(extra);
    let outcome = run(vm, &command);
    assert_eq!(outcome.status, 0, "identify failed:\n{}\nconsole:\n{}", outcome.output, outcome.console);
    let json = outcome.output_json().unwrap_or_else(|| panic!("no JSON in output:\n{}", outcome.output));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{json}"))
}

fn controllers(report: &Value) -> &Vec<Value> {
    report["controllers"].as_array().expect("controllers array")
}

/// A conventional and a ZNS controller come up, and every identify value
/// the rig configured comes back: MDTS, LBA sizes 4096 and 512, zone size
/// and capacity, MOR/MAR and ZASL.
#[test]
fn conventional_and_zns_report_configured_geometry() {
    let vm = Vm::new()
        .controller(Controller::nvme(GIB).lba(4096).mdts(5))
        .controller(Controller::zns(2 * GIB, 64 * MIB).zone_capacity(48 * MIB).max_open(8).max_active(12).zasl(4));
    let report = identify_json(vm, &[]);
    let ctrls = controllers(&report);
    assert_eq!(ctrls.len(), 2, "{report:#}");

    let nvme = &ctrls[0];
    assert_eq!(nvme["pci"], "0000:00:10.0");
    assert_eq!(nvme["serial"], "rig0");
    assert_eq!(nvme["mdts"], 5);
    assert_eq!(nvme["max_transfer_bytes"], 128 * 1024);
    let ns = &nvme["namespaces"][0];
    assert_eq!(ns["nsid"], 1);
    assert_eq!(ns["command_set"], "nvm");
    assert_eq!(ns["lba_size"], 4096);
    assert_eq!(ns["capacity_bytes"], GIB);
    assert_eq!(ns["capacity_blocks"], GIB / 4096);
    assert!(ns["zoned"].is_null());

    let zns = &ctrls[1];
    assert_eq!(zns["pci"], "0000:00:11.0");
    assert_eq!(zns["mdts"], 7, "QEMU's default MDTS");
    assert_eq!(zns["zasl"], 4);
    assert_eq!(zns["zone_append_max_bytes"], 4096 << 4);
    let ns = &zns["namespaces"][0];
    assert_eq!(ns["command_set"], "zoned");
    assert_eq!(ns["csi"], 2);
    assert_eq!(ns["lba_size"], 512);
    assert_eq!(ns["capacity_bytes"], 2 * GIB);
    let zoned = &ns["zoned"];
    assert_eq!(zoned["zone_size_bytes"], 64 * MIB);
    assert_eq!(zoned["zone_size_blocks"], 64 * MIB / 512);
    assert_eq!(zoned["zone_capacity_bytes"], 48 * MIB);
    assert_eq!(zoned["zones"], 32);
    assert_eq!(zoned["max_open"], 8);
    assert_eq!(zoned["max_active"], 12);
}

/// Defaults: 512-byte blocks, QEMU's MDTS 7, unlimited zone resources,
/// zone capacity equal to zone size, and the capabilities QEMU 7.2 reports.
#[test]
fn defaults_and_capabilities() {
    let vm = Vm::new().controller(Controller::nvme(256 * MIB)).controller(Controller::zns(GIB, 128 * MIB));
    let report = identify_json(vm, &["--logs"]);
    let ctrls = controllers(&report);
    let nvme = &ctrls[0];
    assert_eq!(nvme["vendor_id"], "1b36");
    assert_eq!(nvme["mdts"], 7);
    assert_eq!(nvme["vwc"], true);
    let oncs: Vec<&str> = nvme["oncs"]["commands"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for wanted in ["COMPARE", "DATASET_MANAGEMENT", "WRITE_ZEROES", "COPY"] {
        assert!(oncs.contains(&wanted), "{wanted} missing from {oncs:?}");
    }
    assert!(nvme["io_queue_pairs"].as_u64().unwrap() >= 1);
    assert_eq!(nvme["namespaces"][0]["lba_size"], 512);
    assert_eq!(nvme["namespaces"][0]["dlfeat"]["read_behavior"], "zeroes");
    assert!(nvme["smart"]["available_spare"].as_u64().is_some(), "{:#}", nvme["smart"]);
    let zoned = &ctrls[1]["namespaces"][0]["zoned"];
    assert_eq!(zoned["zone_size_bytes"], 128 * MIB);
    assert_eq!(zoned["zone_capacity_bytes"], 128 * MIB);
    assert!(zoned["max_open"].is_null(), "unlimited: {zoned:#}");
    assert!(zoned["max_active"].is_null(), "unlimited: {zoned:#}");
    assert!(report["iommu"]["iova_ranges"].as_array().is_some_and(|r| !r.is_empty()), "{:#}", report["iommu"]);
}

/// Two controllers opened by address into one VFIO container: both come up
/// and DMA works for each (identify data arrives through the shared IOMMU
/// address space).
#[test]
fn two_controllers_share_one_container() {
    let vm = Vm::new().controller(Controller::nvme(128 * MIB)).controller(Controller::nvme(256 * MIB).lba(4096));
    let report = identify_json(vm, &["--pci", "00:11.0", "--pci", "0000:00:10.0"]);
    let ctrls = controllers(&report);
    assert_eq!(ctrls.len(), 2);
    assert_eq!(ctrls[0]["pci"], "0000:00:11.0");
    assert_eq!(ctrls[0]["namespaces"][0]["capacity_bytes"], 256 * MIB);
    assert_eq!(ctrls[1]["pci"], "0000:00:10.0");
    assert_eq!(ctrls[1]["namespaces"][0]["capacity_bytes"], 128 * MIB);
}

/// Wrong addresses give clear errors and a failing status: one that does
/// not exist, one bound to the kernel's nvme driver, one that is no NVMe
/// controller (exit 1), and one that is malformed (exit 2).
#[test]
fn bad_addresses_give_clear_errors() {
    let vm = Vm::new().controller(Controller::nvme(64 * MIB)).controller(Controller::nvme(64 * MIB).kernel());
    let script = "\
        identify --pci 00:1e.0; echo status=$?; \
        identify --pci 0000:00:11.0; echo status=$?; \
        identify --pci 00:1f.0; echo status=$?; \
        identify --pci 00:10; echo status=$?; \
        identify --pci 00:10.0 >/dev/null; echo status=$?";
    let outcome = run(vm, &["sh", "-c", script]);
    assert_eq!(outcome.status, 0, "{}", outcome.output);
    let out = &outcome.output;
    assert!(out.contains("identify: no PCI function 0000:00:1e.0"), "{out}");
    assert!(out.contains("identify: 0000:00:11.0 is bound to nvme, not vfio-pci"), "{out}");
    assert!(out.contains("identify: 0000:00:1f.0 is not an NVMe controller"), "{out}");
    // A malformed address is a bad argument (exit 2), refused before any
    // device is opened.
    assert!(out.contains("00:10: not a PCI address"), "{out}");
    let statuses: Vec<&str> = out.lines().filter(|l| l.starts_with("status=")).collect();
    assert_eq!(statuses, ["status=1", "status=1", "status=1", "status=2", "status=0"], "{out}");
}
