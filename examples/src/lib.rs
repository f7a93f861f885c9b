//! Shared pieces of the tools: a latency histogram, size and option
//! parsing, device choice and confirmation before destroying data.

pub mod args;
pub mod confirm;
pub mod conformance;
pub mod device;
pub mod histogram;
pub mod logging;
pub mod profile;
pub mod size;
pub mod svg;
