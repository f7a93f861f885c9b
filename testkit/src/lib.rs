//! What the project's tests share, so that no suite writes its own:
//!
//! - [`Prng`]: the one seeded PRNG (the driver's, re-exported), so a seed
//!   printed by any campaign replays the same way;
//! - [`alloc`]: a counting global allocator for the zero-allocation tests;
//! - [`conformance`]: the driver's I/O scenarios, one file each, run on
//!   the simulator (`tests/sim_conformance.rs`) and on QEMU (`io-check`);
//! - [`data`]: the data patterns tests write and check;
//! - [`harness`]: volumes on simulated controllers, with restarts and
//!   power cuts, and the reference model a reopened volume must match;
//! - [`scenarios`]: the zoned allocator's scenarios, one body for the
//!   simulator and for QEMU.

#![deny(missing_debug_implementations)]

pub mod alloc;
pub mod conformance;
pub mod data;
pub mod harness;
pub mod scenarios;

pub use nvme_driver::prng::{mix, Prng};
