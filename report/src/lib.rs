//! What the tools (`examples/`) and the bench (`hack/rig`) share to
//! report a run, one of each: byte sizes as command lines write them, the
//! shape of a bandwidth series (flatness, steady state), SVG charts, and
//! latency histograms; and BENCHMARKS.md's tables from the bench's JSON
//! (`bench_tables`, the `bench-tables` binary). No dependency but
//! serde_json, so the rig can use it without building the driver.

pub mod bench_tables;
pub mod histogram;
pub mod series;
pub mod size;
pub mod svg;
