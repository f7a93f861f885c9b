//! QEMU integration tests for resilience: a hot-unplug of the controller
//! mid-I/O through the QEMU monitor, and a SMART critical warning raised
//! from the monitor, each observed by the driver in the guest
//! (`resilience-check`, hack/guest). The rig sends the QMP commands when
//! the guest prints its marker line.

use vm_rig::{Controller, Outcome, Vm};

const MIB: u64 = 1 << 20;

fn run(vm: Vm, scenario: &str, pci: &str) -> Outcome {
    run_with(vm, scenario, &[], pci)
}

/// Runs `resilience-check SCENARIO ARGS --pci PCI` in one boot. A QEMU that
/// dies fails the test with its signal (no second boot: hack/run and these
/// tests once hid QEMU's crash on removal that way; docs/rig.md).
fn run_with(vm: Vm, scenario: &str, args: &[&str], pci: &str) -> Outcome {
    let vm = vm.timeout(std::time::Duration::from_secs(240));
    let mut command = vec!["resilience-check", scenario];
    command.extend_from_slice(args);
    command.extend_from_slice(&["--pci", pci]);
    let outcome = vm.run(&command).unwrap_or_else(|e| panic!("VM run failed: {e}"));
    let report = format!("resilience-check {scenario}: {}", outcome.report());
    assert_eq!(outcome.status, 0, "{report}");
    let last = outcome.output.lines().last().unwrap_or_default();
    assert_eq!(last, format!("resilience-check: {scenario} ok"), "{report}");
    eprintln!("{report}");
    outcome
}

fn check<'a>(outcome: &'a Outcome, check: &str) -> &'a str {
    let prefix = format!("resilience-check: {check}: ok (");
    outcome
        .output
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in\n{}", outcome.output))
}

/// `device_del` of a controller under a PCIe root port while reads are in
/// flight: the guest kernel starts the removal and asks the process for
/// the device (vfio-pci's device request); the driver stops the
/// controller, every command ends, the last ones with DeviceGone, submit
/// refuses, releasing the device takes no waiting, and then the removal
/// completes (the function leaves the guest). Nothing hangs.
#[test]
fn hot_unplug_mid_io_ends_in_device_gone() {
    let vm = Vm::new()
        .controller(Controller::nvme(64 * MIB).hotplug())
        .qmp_on_output("resilience-check: unplug now", &[r#"{"execute":"device_del","arguments":{"id":"nvme0"}}"#]);
    let outcome = run(vm, "hot-unplug", "0000:01:00.0");
    let gone = check(&outcome, "device gone");
    assert!(gone.contains("submit refused"), "{gone}");
    check(&outcome, "released");
    check(&outcome, "removed");
}

/// As above, with writes in flight on two queue pairs, each write carrying
/// its blocks' metadata (8 bytes per block, a separate buffer), as
/// hack/run's volume does: in QEMU's device model every such write has a
/// second transfer phase, the one a disable with I/O in flight used to
/// complete after its queue was freed (docs/rig.md). The driver deletes
/// the queues and notifies a shutdown first; QEMU survives, and the
/// function leaves the guest.
#[test]
fn hot_unplug_mid_writes_with_metadata_ends_in_device_gone() {
    let vm = Vm::new()
        .controller(Controller::nvme(64 * MIB).metadata(8).hotplug())
        .qmp_on_output("resilience-check: unplug now", &[r#"{"execute":"device_del","arguments":{"id":"nvme0"}}"#]);
    let outcome = run_with(vm, "hot-unplug", &["--writes"], "0000:01:00.0");
    let gone = check(&outcome, "device gone");
    assert!(gone.contains("writes with metadata before") && gone.contains("on 2 pairs"), "{gone}");
    assert!(gone.contains("submit refused"), "{gone}");
    check(&outcome, "released");
    check(&outcome, "removed");
}

/// `qom-set` of the controller's `smart_critical_warning` (bit 1,
/// temperature) reaches the owner as a SMART / Health asynchronous event
/// (QEMU hw/nvme/ctrl.c raises it for bits enabled in Asynchronous Event
/// Configuration), with the critical warning read from the SMART log.
#[test]
fn smart_critical_warning_from_the_monitor_reaches_the_owner() {
    let vm = Vm::new().controller(Controller::nvme(64 * MIB)).qmp_on_output(
        "resilience-check: raise smart warning now",
        &[r#"{"execute":"qom-set","arguments":{"path":"/machine/peripheral/nvme0","property":"smart_critical_warning","value":2}}"#],
    );
    let outcome = run(vm, "smart-event", "0000:00:10.0");
    let event = check(&outcome, "smart event");
    assert!(event.starts_with("type 1 information 0x01 log page 0x02 critical warning 0x02"), "{event}");
}
