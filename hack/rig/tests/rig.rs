//! The rig itself, in real VMs: exit statuses, timeouts, kernel-owned
//! controllers and images kept across boots.

use std::time::Duration;
use vm_rig::{Controller, Error, Vm};

#[test]
fn exit_status_and_output_come_back() {
    let outcome = Vm::new().run(&["sh", "-c", "echo hello from the guest; echo to stderr >&2; exit 200"]).unwrap();
    assert_eq!(outcome.status, 200);
    assert!(outcome.output.contains("hello from the guest\n"), "{}", outcome.output);
    assert!(outcome.output.contains("to stderr"), "{}", outcome.output);
}

#[test]
fn a_hung_guest_is_killed_at_the_timeout() {
    let started = std::time::Instant::now();
    let result = Vm::new().timeout(Duration::from_secs(20)).run(&["sh", "-c", "echo step one done; sleep 600"]);
    // What the command printed before it hung comes back, to tell where.
    assert!(
        matches!(&result, Err(Error::Timeout { seconds: 20, output_tail, .. }) if output_tail.contains("step one done")),
        "{result:?}"
    );
    assert!(result.unwrap_err().to_string().contains("step one done"));
    // Killed near its 20 s, not after the guest's 600. The margin is for a
    // slow host: on one (2026-12-04, under a full test run) this took just
    // over 60 s.
    assert!(started.elapsed() < Duration::from_secs(120), "{:?}", started.elapsed());
}

/// A guest that powers off without reporting a status (QEMU exits
/// normally; a QEMU killed by a signal is `Error::QemuKilled`, below): a
/// typed error that says so and carries what the command printed.
#[test]
fn a_guest_that_ends_without_a_status_says_so() {
    let result = Vm::new().run(&["sh", "-c", "echo last words; sleep 1; poweroff -f"]);
    assert!(
        matches!(&result, Err(Error::Guest { reason, output_tail, .. })
            if reason.contains("without reporting a status") && output_tail.contains("last words")),
        "{result:?}"
    );
}

/// A QEMU that dies by a signal (a stand-in that kills itself with
/// SIGSEGV, as QEMU 7.2 did on a removal): a typed error with the signal
/// and the command line that ran it, never a retry.
#[test]
fn a_qemu_killed_by_a_signal_says_which_and_how_it_ran() {
    let dir = std::env::temp_dir().join(format!("vm-rig-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let qemu = dir.join("qemu-system-x86_64");
    std::fs::write(&qemu, "#!/bin/sh\nkill -SEGV $$\n").unwrap();
    std::fs::set_permissions(&qemu, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let result = Vm::new().qemu(&qemu).controller(Controller::nvme(64 << 20)).run(&["true"]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        matches!(&result, Err(Error::QemuKilled { signal: 11, qemu_command, .. })
            if qemu_command.contains("qemu-system-x86_64 -accel tcg") && qemu_command.contains("nvme")),
        "{result:?}"
    );
    let text = result.unwrap_err().to_string();
    assert!(text.contains("signal 11 (SIGSEGV)"), "{text}");
}

/// Controllers sit at 00:10.0, 00:11.0, ... in the order given; a `kernel`
/// controller gets the nvme driver, the others vfio-pci. An image kept in
/// `--images` carries data from one boot to the next.
#[test]
fn kernel_controllers_and_kept_images() {
    let images = std::env::temp_dir().join(format!("vm-rig-images-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&images);
    let vm = Vm::new()
        .images(&images)
        .controller(Controller::nvme(64 << 20))
        .controller(Controller::nvme(32 << 20).kernel());
    let drivers =
        "for d in 0000:00:10.0 0000:00:11.0; do echo $d=$(basename $(readlink /sys/bus/pci/devices/$d/driver)); done";
    let write = format!("{drivers}; echo kept-across-boots | dd of=/dev/ctrl1n1 bs=512 conv=sync 2>/dev/null");
    let outcome = vm.run(&["sh", "-c", &write]).unwrap();
    assert_eq!(outcome.status, 0, "{}", outcome.output);
    assert!(outcome.output.contains("0000:00:10.0=vfio-pci"), "{}", outcome.output);
    assert!(outcome.output.contains("0000:00:11.0=nvme"), "{}", outcome.output);

    let outcome = vm.run(&["sh", "-c", "dd if=/dev/ctrl1n1 bs=512 count=1 2>/dev/null | head -c 17"]).unwrap();
    assert_eq!(outcome.status, 0, "{}", outcome.output);
    assert_eq!(outcome.output.trim(), "kept-across-boots");
    std::fs::remove_dir_all(&images).unwrap();

    // A fresh image (no --images) starts empty.
    let fresh = Vm::new().controller(Controller::nvme(64 << 20)).controller(Controller::nvme(32 << 20).kernel());
    let outcome =
        fresh.run(&["sh", "-c", "dd if=/dev/ctrl1n1 bs=512 count=1 2>/dev/null | tr -d '\\0' | wc -c"]).unwrap();
    assert_eq!(outcome.output.trim(), "0");
}
