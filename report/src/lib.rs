//! What the tools (`examples/`) and the bench (`hack/rig`) share to
//! report a run, one of each: byte sizes as command lines write them, the
//! shape of a bandwidth series (flatness, steady state), SVG charts, and
//! latency histograms. No dependencies, so the rig can use it without
//! building the driver.

pub mod histogram;
pub mod series;
pub mod size;
pub mod svg;
