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
//! - [`queue`]: polled queue pairs (I/O, and the admin queue through the
//!   same code), doorbells with shadow/EventIdx, PRP lists.
//! - [`controller`]: bring-up, identify, log pages, queue pair creation.
//! - [`namespace`]: geometry, limits and validated request builders.
//! - [`loopback`]: the queue-pair logic over host memory, for benchmarks
//!   and tests without hardware.
//! - [`prng`]: the one seeded PRNG, for the simulator, the tests and the
//!   tools.
//! - [`sim`]: a deterministic simulated NVMe/ZNS controller behind the
//!   [`Transport`] seam, with seeded faults and power cuts.
//!
//! # Resilience
//!
//! Every command completes exactly once through [`QueuePair::poll`], with
//! success or an [`IoError`]: the device's status, a timeout (the driver
//! aborted the command, or reset the controller when that did not end
//! it), an abort, a controller reset, or removal. Deadlines are checked by
//! the poll path itself (no timer thread); a fatal status (CSTS.CFS) or a
//! controller that stopped being ready leads to a reset, after which every
//! queue pair re-creates its queues and goes on; register reads of all
//! ones mean the device is gone. [`Controller::poll_events`] surfaces
//! asynchronous events (SMART critical warnings, zone and namespace
//! notices). The [`QueuePair`] documentation has the details, and
//! docs/driver.md (Timeouts, resets, removal and events) the resubmission
//! policy for owners.
//!
//! # Example
//!
//! The same code runs over VFIO and over the simulator; on the simulator
//! it needs no hardware and no root. Bring-up, one I/O queue pair, a write
//! and a read back:
//!
//! ```
//! use nvme_driver::dma::{DmaMemory, DmaPool};
//! use nvme_driver::sim::{SimConfig, Simulator};
//! use nvme_driver::{Controller, ControllerOptions, IoBuffer};
//!
//! // A conventional namespace of 16 MiB in 512-byte logical blocks.
//! let sim = Simulator::new(SimConfig::nvm(32768, 512));
//! let controller = Controller::init(sim, ControllerOptions::default()).unwrap();
//! let ns = controller.namespace(1).unwrap();
//! let mut pair = controller.create_queue_pair(64).unwrap();
//! // DMA buffers are allocated and mapped once, up front: 8 of 4 KiB.
//! let pool = DmaPool::new(controller.transport(), 4096, 8).unwrap();
//!
//! // Write 4 KiB (8 blocks) at LBA 16. The queue pair owns the buffer
//! // until the completion hands it back.
//! let buffer = pool.get().unwrap();
//! buffer.fill(0, 4096, 0xA5);
//! let request = ns.write(16, IoBuffer::new(buffer), false, 1).unwrap();
//! pair.submit(request).map_err(|(error, _)| error).unwrap();
//! let mut done = Vec::new();
//! while done.is_empty() {
//!     pair.poll(|completion| done.push(completion));
//! }
//! assert_eq!(done[0].token, 1);
//! assert!(done[0].status.is_ok());
//!
//! // Read it back into another buffer.
//! let request = ns.read(16, IoBuffer::new(pool.get().unwrap()), 2).unwrap();
//! pair.submit(request).map_err(|(error, _)| error).unwrap();
//! done.clear();
//! while done.is_empty() {
//!     pair.poll(|completion| done.push(completion));
//! }
//! let buffer = done.pop().unwrap().buffer.unwrap().into_buffer();
//! let mut data = vec![0u8; 4096];
//! buffer.copy_out(0, &mut data);
//! assert!(data.iter().all(|&byte| byte == 0xA5));
//! ```
//!
//! Over VFIO only the transport changes:
//!
//! ```no_run
//! use nvme_driver::{vfio::VfioPci, Controller, ControllerOptions, IoBuffer, Transport};
//! use nvme_driver::dma::DmaPool;
//! use std::sync::Arc;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let transport: Arc<dyn Transport> = VfioPci::open("0000:00:10.0")?;
//! let controller = Controller::init(transport, ControllerOptions::default())?;
//! let ns = controller.namespace(1)?;
//! let mut pair = controller.create_queue_pair(nvme_driver::DEFAULT_QUEUE_DEPTH)?;
//! let pool = DmaPool::new(controller.transport(), 4096, 64)?;
//! let request = ns.read(0, IoBuffer::new(pool.get().unwrap()), 42)?;
//! pair.submit(request).map_err(|(error, _)| error)?;
//! while pair.poll(|done| assert_eq!(done.token, 42)) == 0 {}
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod clock;
pub mod cmd;
pub mod controller;
pub mod dma;
mod error;
mod identity;
pub mod loopback;
pub mod mmio;
pub mod namespace;
pub mod prng;
pub mod queue;
pub mod quirks;
pub mod sigbus;
pub mod sim;
pub mod spec;
pub mod transport;
pub mod vfio;
pub mod zeroout;

pub use controller::{
    AsyncEvent, AsyncEventKind, Controller, ControllerOptions, NamespaceInfo, ZonedInfo, DEFAULT_QUEUE_DEPTH,
};
pub use error::{Error, IoError, RequestError, Result};
pub use namespace::{MetadataFormat, Namespace, RangeLimits, ZoneGeometry};
pub use queue::sgl::SglMode;
pub use queue::{resets_begun, Finished, IoBuffer, IoCompletion, QueuePair, RawQueue, Request, SubmitError, Submitter};
pub use quirks::{QuirkOverride, Quirks};
pub use transport::{PciId, Transport};
