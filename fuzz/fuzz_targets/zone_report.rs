//! Zone reports and log pages on arbitrary bytes: never a panic.
#![no_main]

#[path = "../../driver/tests/fuzz_bodies/mod.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::zone_report(data));
