//! Shared pieces of the tools: a latency histogram and size parsing.

pub mod conformance;
pub mod device;
pub mod histogram;
pub mod logging;
pub mod profile;
pub mod size;
pub mod svg;
