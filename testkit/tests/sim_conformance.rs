//! The conformance scenarios that run in QEMU (`qemu_io.rs`, through the
//! guest tool `io-check`) run here unchanged against the simulator, on the
//! same device shapes, once with completions in order and once delayed and
//! reordered. If the simulator drifts from QEMU's device model, these fail.
//!
//! A failure prints its seed; `SIM_SEED=N cargo test -p nvme-testkit --test
//! sim_conformance` replays it exactly (single-threaded scenarios).

use nvme_driver::sim::{NamespaceConfig, SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_testkit::conformance::{self, Scenario};
use std::sync::Arc;

const MIB: u64 = 1 << 20;

fn seed() -> u64 {
    std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed)
}

/// Runs `scenario` on a simulated controller shaped by `config`, twice:
/// completions in order, then delayed by up to 3 ticks and reordered.
fn run(scenario: &str, config: SimConfig) {
    run_with(scenario, config, ControllerOptions::default());
}

/// [`run`] with the controller brought up with `options`.
fn run_with(scenario: &str, config: SimConfig, options: ControllerOptions) {
    let scenario = Scenario::parse(scenario).expect("a known scenario");
    let seed = seed();
    for (label, config) in [
        ("in order", config.clone().with_seed(seed)),
        ("delayed and reordered", config.with_seed(seed).with_completion_delay(0, 3).with_reorder(true)),
    ] {
        let simulator = Simulator::new(config);
        let transport: Arc<dyn Transport> = simulator.clone();
        let controller = Controller::init(transport, options.clone())
            .unwrap_or_else(|e| panic!("bring-up on the simulator ({label}, seed {seed}): {e}"));
        if let Err(error) = conformance::run(scenario, &controller, seed) {
            panic!(
                "{} failed on the simulator ({label}) with seed {seed} (replay: SIM_SEED={seed}): {error}",
                scenario.name()
            );
        }
    }
}

fn nvm(bytes: u64, block: u32) -> SimConfig {
    SimConfig::nvm(bytes / u64::from(block), block)
}

#[test]
fn integrity() {
    run("integrity", nvm(64 * MIB, 512));
    run("integrity", nvm(64 * MIB, 4096));
}

#[test]
fn sizes() {
    run("sizes", SimConfig { mdts: 5, ..nvm(64 * MIB, 512) });
    run("sizes", SimConfig { mdts: 5, ..nvm(64 * MIB, 4096) });
    run("sizes", nvm(64 * MIB, 512));
}

#[test]
fn threads() {
    run("threads", nvm(64 * MIB, 512));
}

#[test]
fn zns() {
    let blocks = |bytes: u64| bytes / 512;
    let namespace = NamespaceConfig::zoned(blocks(512 * MIB), 512, blocks(16 * MIB), blocks(16 * MIB))
        .max_open_zones(4)
        .max_active_zones(4);
    run("zns", SimConfig { zasl: 5, ..SimConfig::empty().with_namespace(namespace) });
    // The same scenario on a conventional namespace checks that zone
    // commands are refused.
    run("zns", nvm(16 * MIB, 512));
}

#[test]
fn zns_active() {
    let blocks = |bytes: u64| bytes / 512;
    let namespace =
        NamespaceConfig::zoned(blocks(128 * MIB), 512, blocks(16 * MIB), blocks(16 * MIB)).max_active_zones(2);
    run("zns-active", SimConfig::empty().with_namespace(namespace));
}

#[test]
fn zeroes() {
    run("zeroes", nvm(16 * MIB, 512));
    run("zeroes", nvm(16 * MIB, 4096));
}

#[test]
fn dsm_limit() {
    // QEMU 7.2's DMRSL, on a namespace larger than one range may cover.
    run("dsm-limit", SimConfig { dmrsl: 4_194_303, ..nvm(3 << 30, 512) });
}

#[test]
fn metadata() {
    // As QEMU 7.2 moves metadata, truncation included: the simulator
    // introduces itself as QEMU, so the driver applies the quirk.
    let with = |config: SimConfig, bytes: u16| {
        let mut config = SimConfig { metadata_dma_truncation: true, ..config };
        config.namespaces[0].metadata_bytes = bytes;
        config
    };
    run("metadata", with(nvm(16 * MIB, 512), 8));
    run("metadata", with(nvm(16 * MIB, 4096), 64));
    let blocks = |bytes: u64| bytes / 4096;
    let zoned = NamespaceConfig::zoned(blocks(64 * MIB), 4096, blocks(16 * MIB), blocks(16 * MIB)).metadata_bytes(16);
    run("metadata", SimConfig { metadata_dma_truncation: true, ..SimConfig::empty() }.with_namespace(zoned));
    // Without metadata in the format, a metadata buffer is refused.
    run("metadata", nvm(16 * MIB, 512));
    // A controller that moves metadata whole (no truncation, no quirk):
    // long transfers round-trip.
    let whole = ControllerOptions {
        quirk_overrides: vec!["1b36:0010:-METADATA_DMA_TRUNCATED".parse().expect("an override")],
        ..ControllerOptions::default()
    };
    let mut config = nvm(16 * MIB, 512);
    config.namespaces[0].metadata_bytes = 8;
    run_with("metadata", config, whole);
}
