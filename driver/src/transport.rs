//! The hardware seam: what controller, queue and command code need from a
//! device. VFIO implements it for real hardware (and QEMU's emulated
//! controllers); [`crate::sim::Simulator`] and
//! [`crate::loopback::LoopbackTransport`] implement it on the host.
//!
//! The seam is small on purpose: 32-bit register reads and writes,
//! doorbell pointers, and DMA mapping of host memory to I/O virtual
//! addresses. Everything above it (bring-up, queue pairs, commands,
//! namespaces) is the same code on every backend, so one test body runs
//! against the simulator in `cargo test` and against QEMU in the rig.

use crate::error::{Error, Result};
use serde::Serialize;
use std::fmt;
use std::ptr::NonNull;

/// PCI identity, as the quirk table keys it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PciId {
    /// PCI Vendor ID.
    pub vendor: u16,
    /// PCI Device ID.
    pub device: u16,
    /// PCI Subsystem Vendor ID (SSVID in Identify Controller).
    pub subsystem_vendor: u16,
    /// PCI Subsystem ID.
    pub subsystem_device: u16,
    /// PCI class code, 24 bits: base class, subclass, programming interface
    /// (01 08 02h is an NVMe controller).
    pub class: u32,
}

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:04x}", self.vendor, self.device)
    }
}

/// A device's registers and DMA address space.
pub trait Transport: Send + Sync + fmt::Debug {
    /// A 32-bit register read at a BAR0 offset.
    fn read32(&self, offset: usize) -> u32;

    /// A 32-bit register write at a BAR0 offset.
    fn write32(&self, offset: usize, value: u32);

    /// A 64-bit register read as two 32-bit reads, low half first.
    fn read64(&self, offset: usize) -> u64 {
        let low = u64::from(self.read32(offset));
        let high = u64::from(self.read32(offset + 4));
        high << 32 | low
    }

    /// A 64-bit register write as two 32-bit writes, low half first.
    fn write64(&self, offset: usize, value: u64) {
        self.write32(offset, value as u32);
        self.write32(offset + 4, (value >> 32) as u32);
    }

    /// Called once per queue-pair poll pass: lets a simulated device advance
    /// its clock and post completions. Hardware needs nothing.
    fn tick(&self) {}

    /// Whether the host asked for the device back: on Linux, vfio-pci's
    /// device request (a hot-unplug in progress, or an unbind) that waits
    /// for this process to close the device. The driver treats it as the
    /// device being gone. Checked on the rare paths only (with the CSTS
    /// health check); hardware without such a channel says no.
    fn removal_requested(&self) -> bool {
        false
    }

    /// A function-level reset of the device (on Linux, `VFIO_DEVICE_RESET`:
    /// FLR, or a slot or bus reset where that is what the device allows).
    /// `Ok` means the reset happened: the function's DMA has ended, as
    /// after a confirmed disable. The driver uses it only when clearing
    /// CC.EN did not stop the controller. By default there is none.
    fn function_reset(&self) -> Result<()> {
        Err(crate::Error::Unsupported("function-level reset".into()))
    }

    /// A pointer for direct volatile stores to a doorbell register, when the
    /// registers are memory-mapped. `None` sends doorbell writes through
    /// [`Transport::write32`] instead (simulators, loopback sinks). The
    /// pointer stays valid while the transport lives.
    fn doorbell_pointer(&self, _offset: usize) -> Option<NonNull<u32>> {
        None
    }

    /// Makes `[vaddr, vaddr + len)` reachable by the device and returns its
    /// I/O virtual address.
    ///
    /// # Safety
    /// The memory must stay allocated until [`Transport::unmap_dma`] returns
    /// for it, and until then may be accessed only through raw pointers with
    /// volatile or atomic operations: the device writes it at any time, so a
    /// Rust reference into it is undefined behaviour.
    unsafe fn map_dma(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64>;

    /// [`Transport::map_dma`] with read access only for the device: it may
    /// take data from the memory (a write command's payload) but any
    /// transfer into it faults in the IOMMU, so the host may hold Rust
    /// references into it while no command uses it ([`crate::dma::FillBuffer`]).
    /// Undone by [`Transport::unmap_dma`]. Transports that cannot enforce
    /// the restriction refuse (the default).
    ///
    /// # Safety
    /// As [`Transport::map_dma`], except that the host may form references
    /// into the memory: the device cannot write it.
    unsafe fn map_dma_device_reads(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64> {
        let _ = (vaddr, len);
        Err(Error::Unsupported(format!("{}: DMA mappings the device may only read", self.name())))
    }

    /// Undoes [`Transport::map_dma`].
    fn unmap_dma(&self, iova: u64, len: usize) -> Result<()>;

    /// Which I/O address space [`Transport::map_dma`] maps into: memory
    /// mapped through one transport is reachable by every device whose
    /// transport answers the same value (on VFIO, the devices of one
    /// container share its IOMMU domain). By default each transport has its
    /// own.
    fn dma_domain(&self) -> usize {
        (self as *const Self).cast::<()>() as usize
    }

    /// The device's address, e.g. a PCI BDF.
    fn name(&self) -> &str;

    /// The device's PCI identity, for the quirk table.
    fn pci_id(&self) -> PciId;
}
