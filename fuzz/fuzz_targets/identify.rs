//! Every Identify parser on arbitrary bytes: a typed error or a value,
//! never a panic; validation accessors are total too.
#![no_main]

#[path = "../../driver/tests/fuzz_bodies/mod.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::identify(data));
