//! Shared pieces of the tools (identify, perf, zeroout, seqwrite, scrub,
//! volume, plot): option parsing, device choice, confirmation before
//! destroying data, output files checked before any device is touched, the volume tool's views (text, Prometheus exposition,
//! controller health). The conformance scenarios the tests run are in
//! `nvme-testkit`. Sizes, charts and
//! histograms are in `nvme-report`, which the bench shares.

pub mod args;
pub mod checksums;
pub mod confirm;
pub mod device;
pub mod events;
#[cfg(test)]
mod fixtures;
pub mod health;
pub mod interrupt;
pub mod logging;
pub mod output;
pub mod profile;
pub mod prometheus;
pub mod volume_view;
