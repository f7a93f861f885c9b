//! A userspace NVMe driver over VFIO.
//!
//! Layers, from the wire up:
//! - [`spec`]: wire formats as data (registers, SQE, CQE, status, identify
//!   pages, log pages, zone reports). Pure, no I/O.
//! - [`cmd`]: pure command builders.
//! - [`transport`]: the hardware seam (registers and DMA mapping), with
//!   [`vfio`] as the real implementation.
//! - [`mmio`], [`dma`]: register access and DMA memory; with [`vfio`] the
//!   only places that touch device-visible memory.
//! - [`controller`]: bring-up, the admin queue, identify, log pages.

pub mod cmd;
pub mod controller;
pub mod dma;
mod error;
pub mod loopback;
pub mod mmio;
pub mod namespace;
pub mod queue;
pub mod spec;
pub mod transport;
pub mod vfio;

pub use controller::{Controller, ControllerOptions, NamespaceInfo, ZonedInfo};
pub use error::{Error, RequestError, Result};
pub use namespace::{Namespace, ZoneGeometry};
pub use queue::{IoBuffer, IoCompletion, QueuePair, Request};
pub use transport::{PciId, Transport};
