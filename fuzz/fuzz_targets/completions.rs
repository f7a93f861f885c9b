//! Completion processing against a hostile device: the fuzzer decides
//! which commands the host submits and which completion entries (any
//! command identifier, status and order, duplicates, unknown identifiers)
//! the device posts. The queue pair must deliver each submitted token at
//! most once, only tokens it submitted, keep its in-flight count exact, and
//! never panic.
#![no_main]

#[path = "../../driver/tests/fuzz_bodies/mod.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::completions(data));
