//! A userspace NVMe driver over VFIO.
//!
//! Layers, from the wire up:
//! - [`spec`]: wire formats as data (registers, SQE, CQE, status, identify
//!   pages, log pages). Pure, no I/O.
//! - [`cmd`]: pure command builders.
//! - [`vfio`], [`mmio`], [`dma`]: the platform layer. All `unsafe` that touches
//!   the device lives here.
//! - [`controller`]: bring-up, the admin queue and the identify results.

pub mod cmd;
pub mod spec;
