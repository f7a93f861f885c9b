//! Zero-out in QEMU, one VM with four controllers: the default device
//! (Write Zeroes), the Intel-ID variant (the quirk table disables Write
//! Zeroes), and `discard=unmap` and `discard=ignore` backing. With
//! `discard=ignore` QEMU claims DLFEAT "reads zeroes" yet returns old data
//! after a deallocate: a device that lies, which the strategy must survive.
//! In every configuration the zeroed range reads back as zeroes.

use serde_json::Value;
use vm_rig::{Controller, Discard, Vm};

const MIB: u64 = 1 << 20;

#[test]
fn zeroout_reads_back_zeroes_everywhere_with_the_right_strategy() {
    let vm = Vm::new()
        .controller(Controller::nvme(64 * MIB))
        .controller(Controller::nvme(64 * MIB).intel_id())
        .controller(Controller::nvme(64 * MIB).discard(Discard::Unmap))
        .controller(Controller::nvme(64 * MIB).discard(Discard::Ignore));
    // For each controller: fill 16 MiB with data, zero 1 MiB..9 MiB (with
    // and without unmapping), and read it back.
    let mut script = String::from("set -e; identify --json > /tmp/id.json; cat /tmp/id.json; ");
    for bdf in ["00:10.0", "00:11.0", "00:12.0", "00:13.0"] {
        script += &format!(
            "perf --pci {bdf} --rw write --yes --bs 128k --qd 8 --time 1 --size 16M --json > /dev/null; \
             zeroout --pci {bdf} --offset 1M --length 4M --verify --json; \
             zeroout --pci {bdf} --offset 5M --length 4M --allow-unmap --verify --json; "
        );
    }
    let outcome = vm.run(&["sh", "-c", &script]).expect("VM run");
    assert_eq!(outcome.status, 0, "{}", outcome.output);
    let mut lines = outcome.output.lines();
    let identify: String = lines.by_ref().take_while(|l| !l.starts_with("{\"allowed\"")).collect::<Vec<_>>().join("\n");
    let identify: Value = serde_json::from_str(identify.trim()).unwrap_or_else(|e| panic!("{e}: {}", outcome.output));
    let ctrls = identify["controllers"].as_array().unwrap();
    // QEMU's metadata DMA quirk only ever matters to metadata transfers.
    assert_eq!(ctrls[0]["quirks"], serde_json::json!(["METADATA_DMA_TRUNCATED"]));
    assert_eq!(ctrls[0]["namespaces"][0]["zero_strategy"], "write-zeroes");
    assert_eq!(ctrls[1]["vendor_id"], "8086");
    assert_eq!(ctrls[1]["device_id"], "5845");
    assert_eq!(ctrls[1]["quirks"], serde_json::json!(["DISABLE_WRITE_ZEROES", "METADATA_DMA_TRUNCATED"]));
    assert_eq!(ctrls[1]["namespaces"][0]["zero_strategy"], "zero-buffer", "the quirk table disables Write Zeroes");

    let runs: Vec<Value> = outcome
        .output
        .lines()
        .filter(|l| l.starts_with("{\"allowed\""))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(runs.len(), 8, "{}", outcome.output);
    for run in &runs {
        assert_eq!(run["verified_zero"], true, "{run}");
        assert_eq!(run["strategy_before"], run["strategy_after"], "no downgrade on QEMU: {run}");
    }
    let strategy = |i: usize| runs[i]["strategy_after"].as_str().unwrap().to_string();
    assert_eq!(strategy(0), "write-zeroes");
    assert_eq!(strategy(2), "zero-buffer");
    assert_eq!(strategy(4), "write-zeroes");
    assert_eq!(strategy(6), "write-zeroes");
}
