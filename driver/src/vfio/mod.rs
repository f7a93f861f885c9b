//! VFIO: a container (one IOMMU address space) shared by any number of PCI
//! functions bound to vfio-pci, each with BAR0 mapped for registers.
//!
//! Lifetimes: `vfio-ioctls` tears the IOMMU backend down when the last
//! device of a group drops, which would invalidate every DMA mapping. Each
//! [`crate::dma::DmaRegion`] therefore holds an `Arc` of its transport (the
//! [`VfioPci`]), which holds the [`Vfio`] container: no mapping outlives the
//! device that makes it usable.
//!
//! Removal: BAR0 stays mapped until the device drops, and Linux's vfio-pci
//! does not finish removing a device while a process holds it open: it
//! signals the device request eventfd ([`Transport::removal_requested`],
//! `VFIO_PCI_REQ_IRQ_INDEX`) and waits. The driver takes that as the device
//! being gone: it quiesces the controller (its I/O queues deleted, a
//! shutdown notified, then disabled: `Admin::quiesce`), fails everything
//! left, so the owner can drop it and let the removal finish. After a surprise removal, reads
//! through the mapping return all ones (which the controller code treats
//! as "device gone"). Should the kernel revoke the mapping while it is in
//! use (memory decode disabled, a kernel-initiated reset), an access raises
//! SIGBUS; as SPDK does, the handler in [`crate::sigbus`] then maps all
//! ones over the BAR, so the access reads "device gone" too.

mod sys;

pub use sys::IommuInfo;

use crate::error::{io_context, Error, Result};
use crate::mmio::Mmio;
use crate::sigbus::BarGuard;
use crate::transport::{PciId, Transport};
use memmap2::{MmapOptions, MmapRaw};
use std::fs;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use vfio_bindings::bindings::vfio::{
    VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_REQ_IRQ_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioOps};
use vmm_sys_util::eventfd::EventFd;

const SYSFS_PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// PCI class code of an NVMe controller: mass storage, non-volatile memory,
/// NVM Express I/O controller interface.
pub const NVME_CLASS: u32 = 0x01_08_02;

/// PCI configuration space (PCI Local Bus 3.0 §6.1).
mod config {
    pub const VENDOR_ID: u64 = 0x00;
    pub const COMMAND: u64 = 0x04;
    pub const SUBSYSTEM_VENDOR_ID: u64 = 0x2c;
    pub const COMMAND_MEMORY: u16 = 1 << 1;
    pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
    pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;
}

/// A PCI function as sysfs describes it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PciFunction {
    /// Its address, in full form (`0000:00:10.0`).
    pub bdf: String,
    /// PCI class code, 24 bits (01 08 02h is an NVMe controller).
    pub class: u32,
    /// The kernel driver bound to it (`nvme`, `vfio-pci`), if any.
    pub driver: Option<String>,
}

/// Accepts `0000:00:10.0` or `00:10.0` and returns the full form.
pub fn normalize_bdf(text: &str) -> Result<String> {
    let full = if text.matches(':').count() == 1 { format!("0000:{text}") } else { text.to_string() };
    let valid = full.len() == 12
        && full.char_indices().all(|(i, c)| match i {
            4 | 7 => c == ':',
            10 => c == '.',
            11 => ('0'..='7').contains(&c),
            _ => c.is_ascii_hexdigit(),
        });
    if valid {
        Ok(full.to_ascii_lowercase())
    } else {
        Err(Error::InvalidArgument(format!("{text:?} is not a PCI address (DDDD:BB:DD.F or BB:DD.F)")))
    }
}

fn read_hex(path: &Path) -> Option<u32> {
    let text = fs::read_to_string(path).ok()?;
    u32::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
}

fn driver_of(device: &Path) -> Option<String> {
    let link = fs::read_link(device.join("driver")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// Every NVMe function on the machine, in PCI address order.
pub fn nvme_functions() -> Vec<PciFunction> {
    let Ok(entries) = fs::read_dir(SYSFS_PCI_DEVICES) else {
        return Vec::new();
    };
    let mut functions: Vec<PciFunction> = entries
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            let class = read_hex(&path.join("class"))?;
            (class == NVME_CLASS).then(|| PciFunction {
                bdf: entry.file_name().to_string_lossy().into_owned(),
                class,
                driver: driver_of(&path),
            })
        })
        .collect();
    functions.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    functions
}

/// The NVMe functions bound to vfio-pci, in PCI address order.
pub fn vfio_nvme_functions() -> Vec<String> {
    nvme_functions().into_iter().filter(|f| f.driver.as_deref() == Some("vfio-pci")).map(|f| f.bdf).collect()
}

/// An IOVA allocator over the ranges the IOMMU reports. Bump allocation:
/// the 48-bit space is far larger than any run maps, so freed IOVA is not
/// reused.
#[derive(Debug)]
struct IovaSpace {
    ranges: Vec<(u64, u64)>,
    next: u64,
}

impl IovaSpace {
    /// IOVAs start above the first 4 GiB's usual reserved windows; the
    /// reported ranges decide what is valid.
    const START: u64 = 1 << 32;

    fn new(ranges: Vec<(u64, u64)>) -> Self {
        let ranges = if ranges.is_empty() { vec![(0, (1u64 << 39) - 1)] } else { ranges };
        IovaSpace { ranges, next: Self::START }
    }

    fn allocate(&mut self, len: u64, align: u64) -> Option<u64> {
        for &(start, end) in &self.ranges {
            let candidate = self.next.max(start).next_multiple_of(align);
            let last = candidate.checked_add(len)?.checked_sub(1)?;
            if last <= end {
                self.next = last + 1;
                return Some(candidate);
            }
        }
        None
    }
}

/// A VFIO container: one IOMMU address space for any number of devices.
pub struct Vfio {
    container: Arc<VfioContainer>,
    iommu: OnceLock<IommuInfo>,
    iova: Mutex<Option<IovaSpace>>,
}

impl std::fmt::Debug for Vfio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vfio").field("iommu", &self.iommu.get()).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for VfioPci {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioPci").field("bdf", &self.bdf).field("pci_id", &self.pci_id).finish_non_exhaustive()
    }
}

impl Vfio {
    /// Opens `/dev/vfio/vfio`.
    pub fn new() -> Result<Arc<Self>> {
        let container = VfioContainer::new(None)
            .map_err(|source| Error::Vfio { context: "opening the VFIO container /dev/vfio/vfio".into(), source })?;
        Ok(Arc::new(Vfio { container: Arc::new(container), iommu: OnceLock::new(), iova: Mutex::new(None) }))
    }

    /// Opens the NVMe function at `bdf` (which must be bound to vfio-pci)
    /// into this container.
    pub fn open(self: &Arc<Self>, bdf: &str) -> Result<Arc<VfioPci>> {
        let bdf = normalize_bdf(bdf)?;
        let sysfs = PathBuf::from(SYSFS_PCI_DEVICES).join(&bdf);
        if !sysfs.exists() {
            return Err(Error::NoSuchDevice { bdf });
        }
        let class = read_hex(&sysfs.join("class")).unwrap_or(0);
        if class != NVME_CLASS {
            return Err(Error::NotNvme { bdf, class });
        }
        match driver_of(&sysfs) {
            Some(driver) if driver == "vfio-pci" => {}
            driver => return Err(Error::NotBoundToVfio { bdf, driver }),
        }
        check_group_viable(&bdf, &sysfs)?;

        let ops: Arc<dyn VfioOps> = self.container.clone();
        let device = VfioDevice::new(&sysfs, ops, false)
            .map_err(|source| Error::Vfio { context: format!("opening VFIO device {bdf}"), source })?;
        let fd = device.as_raw_fd();

        // The IOMMU backend exists once the first group joined the container.
        if self.iommu.get().is_none() {
            let info = sys::iommu_get_info(self.container.as_raw_fd()).map_err(io_context("VFIO_IOMMU_GET_INFO"))?;
            let _ = self.iommu.set(info);
        }

        let config_offset = device.get_region_offset(VFIO_PCI_CONFIG_REGION_INDEX);
        let mut ids = [0u8; 4];
        sys::pread_exact(fd, &mut ids, config_offset + config::VENDOR_ID)
            .map_err(io_context(format!("{bdf}: reading PCI IDs")))?;
        let mut subsystem = [0u8; 4];
        sys::pread_exact(fd, &mut subsystem, config_offset + config::SUBSYSTEM_VENDOR_ID)
            .map_err(io_context(format!("{bdf}: reading PCI subsystem IDs")))?;
        let pci_id = PciId {
            vendor: u16::from_le_bytes([ids[0], ids[1]]),
            device: u16::from_le_bytes([ids[2], ids[3]]),
            subsystem_vendor: u16::from_le_bytes([subsystem[0], subsystem[1]]),
            subsystem_device: u16::from_le_bytes([subsystem[2], subsystem[3]]),
            class,
        };

        // Memory space for BAR0 and bus mastering for DMA. QEMU leaves bus
        // mastering off until the driver sets it. INTx off: we poll.
        let mut command = [0u8; 2];
        sys::pread_exact(fd, &mut command, config_offset + config::COMMAND)
            .map_err(io_context(format!("{bdf}: reading the PCI command register")))?;
        let value = u16::from_le_bytes(command)
            | config::COMMAND_MEMORY
            | config::COMMAND_BUS_MASTER
            | config::COMMAND_INTX_DISABLE;
        sys::pwrite_all(fd, &value.to_le_bytes(), config_offset + config::COMMAND)
            .map_err(io_context(format!("{bdf}: writing the PCI command register")))?;

        let bar_flags = device.get_region_flags(VFIO_PCI_BAR0_REGION_INDEX);
        let bar_size = device.get_region_size(VFIO_PCI_BAR0_REGION_INDEX);
        if bar_flags & VFIO_REGION_INFO_FLAG_MMAP == 0 || bar_size < 0x1008 {
            return Err(Error::Unsupported(format!("{bdf}: BAR0 ({bar_size} bytes) cannot be mapped")));
        }
        let bar_len = usize::try_from(bar_size).map_err(|_| Error::Unsupported(format!("{bdf}: BAR0 too large")))?;
        let bar0 = MmapOptions::new()
            .offset(device.get_region_offset(VFIO_PCI_BAR0_REGION_INDEX))
            .len(bar_len)
            .map_raw(fd)
            .map_err(io_context(format!("{bdf}: mapping BAR0")))?;
        let base = NonNull::new(bar0.as_mut_ptr()).ok_or_else(|| Error::Unsupported("BAR0 mapped at null".into()))?;
        // SAFETY: `bar0` maps `bar_len` bytes and is dropped after `mmio`
        // (field order in VfioPci); page-aligned, so 4-byte aligned; the
        // memory is only reached through Mmio's volatile accesses.
        let mmio = unsafe { Mmio::new(base, bar_len) };
        // SAFETY: as above; the guard drops before `bar0` (field order).
        let bar_guard = match unsafe { BarGuard::new(base, bar_len) } {
            Ok(guard) => Some(guard),
            Err(error) => {
                ::log::warn!("{bdf}: BAR0 unguarded ({error}): a revoked BAR would raise SIGBUS");
                None
            }
        };

        // The device request channel: vfio-pci signals it when the device is
        // to be removed and waits for us to close it. Kernels or devices
        // without it just go without.
        let removal_request = EventFd::new(libc::EFD_NONBLOCK)
            .ok()
            .filter(|eventfd| device.enable_irq(VFIO_PCI_REQ_IRQ_INDEX, vec![eventfd]).is_ok());
        Ok(Arc::new(VfioPci {
            mmio,
            _bar_guard: bar_guard,
            _bar0: bar0,
            removal_request,
            removal_seen: AtomicBool::new(false),
            device: ClosingDevice(std::mem::ManuallyDrop::new(device), AtomicBool::new(false)),
            vfio: Arc::clone(self),
            bdf,
            pci_id,
        }))
    }

    /// The IOMMU's limits, known once a device is open.
    pub fn iommu_info(&self) -> Option<&IommuInfo> {
        self.iommu.get()
    }

    fn allocate_iova(&self, len: usize) -> Result<u64> {
        let mut guard = self.iova.lock().unwrap_or_else(|poison| poison.into_inner());
        let space = guard.get_or_insert_with(|| {
            IovaSpace::new(self.iommu.get().map(|info| info.iova_ranges.clone()).unwrap_or_default())
        });
        let align = if len >= crate::dma::HUGE_PAGE_SIZE { crate::dma::HUGE_PAGE_SIZE } else { crate::dma::PAGE_SIZE };
        space
            .allocate(len as u64, align as u64)
            .ok_or_else(|| Error::Dma(format!("no IOVA space left for {len} bytes")))
    }
}

/// A VFIO group is usable only when every device in it is bound to
/// vfio-pci or to no driver (Linux `Documentation/driver-api/vfio.rst`).
fn check_group_viable(bdf: &str, sysfs: &Path) -> Result<()> {
    let group_link = fs::read_link(sysfs.join("iommu_group"))
        .map_err(|_| Error::Unsupported(format!("{bdf} has no IOMMU group: is the IOMMU on (intel_iommu=on)?")))?;
    let group: u32 = group_link.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse().ok()).unwrap_or(u32::MAX);
    let members = sysfs.join("iommu_group").join("devices");
    for member in fs::read_dir(&members).into_iter().flatten().flatten() {
        match driver_of(&member.path()).as_deref() {
            None | Some("vfio-pci") | Some("pcieport") => {}
            Some(_) => return Err(Error::GroupNotViable { bdf: bdf.to_string(), group }),
        }
    }
    Ok(())
}

/// The VFIO device, closed in its place in `VfioPci`'s drop order. Its
/// library's drop closes the device and then reads the device's sysfs
/// `iommu_group` link, unwrapping it; after a hot-unplug, closing lets the
/// removal finish, and the link may already be gone. That panic is caught
/// and logged: the device is closed either way. (For a device being
/// removed, the panic's message is kept off stderr: the panic hook is
/// swapped for the close, so a panic on another thread at that moment
/// would go unprinted too; it still unwinds.)
struct ClosingDevice(std::mem::ManuallyDrop<VfioDevice>, AtomicBool);

impl Drop for ClosingDevice {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and never used again.
        let device = unsafe { std::mem::ManuallyDrop::take(&mut self.0) };
        let removed = self.1.load(Ordering::Relaxed);
        let hook = removed.then(|| {
            let hook = std::panic::take_hook();
            std::panic::set_hook(Box::new(|_| {}));
            hook
        });
        let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(device)));
        if let Some(hook) = hook {
            std::panic::set_hook(hook);
        }
        if closed.is_err() {
            log::warn!("closing a VFIO device that was being removed: its sysfs entry was already gone");
        }
    }
}

impl std::ops::Deref for ClosingDevice {
    type Target = VfioDevice;
    fn deref(&self) -> &VfioDevice {
        &self.0
    }
}

/// One NVMe PCI function owned through VFIO.
pub struct VfioPci {
    // Field order is drop order: registers, the SIGBUS guard, then the BAR
    // mapping, then the device, then (maybe) the container.
    mmio: Mmio,
    /// Turns a SIGBUS from a revoked BAR into reads of all ones
    /// ([`crate::sigbus`]); `None` if the process guards too many.
    _bar_guard: Option<BarGuard>,
    _bar0: MmapRaw,
    /// Signalled by vfio-pci when the device is to be removed.
    removal_request: Option<EventFd>,
    removal_seen: AtomicBool,
    device: ClosingDevice,
    vfio: Arc<Vfio>,
    bdf: String,
    pci_id: PciId,
}

impl VfioPci {
    /// Opens `bdf` in a container of its own.
    pub fn open(bdf: &str) -> Result<Arc<Self>> {
        Vfio::new()?.open(bdf)
    }

    /// The VFIO container this device was opened in; other devices opened in
    /// it share its IOMMU address space.
    pub fn vfio(&self) -> &Arc<Vfio> {
        &self.vfio
    }

    /// Length of BAR 0, the controller's register window, in bytes.
    pub fn bar0_len(&self) -> usize {
        self.mmio.len()
    }

    /// The device's VFIO file descriptor, for diagnostics.
    pub fn device_fd(&self) -> i32 {
        self.device.as_raw_fd()
    }
}

impl Transport for VfioPci {
    fn read32(&self, offset: usize) -> u32 {
        self.mmio.read32(offset)
    }

    fn write32(&self, offset: usize, value: u32) {
        self.mmio.write32(offset, value)
    }

    fn doorbell_pointer(&self, offset: usize) -> Option<NonNull<u32>> {
        Some(self.mmio.doorbell(offset))
    }

    fn function_reset(&self) -> Result<()> {
        sys::device_reset(self.device.as_raw_fd()).map_err(io_context(format!("{}: VFIO_DEVICE_RESET", self.bdf)))
    }

    fn removal_requested(&self) -> bool {
        if self.removal_seen.load(Ordering::Relaxed) {
            return true;
        }
        // Non-blocking: an error means no request is pending.
        let requested = self.removal_request.as_ref().is_some_and(|eventfd| eventfd.read().is_ok_and(|n| n > 0));
        if requested {
            self.removal_seen.store(true, Ordering::Relaxed);
            self.device.1.store(true, Ordering::Relaxed);
        }
        requested
    }

    unsafe fn map_dma(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64> {
        let iova = self.vfio.allocate_iova(len)?;
        // SAFETY: the caller guarantees the memory stays allocated until
        // unmap_dma and is accessed only through raw pointers.
        unsafe { self.vfio.container.vfio_dma_map(iova, len, vaddr.as_ptr()) }
            .map_err(|source| Error::Vfio { context: format!("mapping {len} bytes for DMA"), source })?;
        Ok(iova)
    }

    unsafe fn map_dma_device_reads(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64> {
        let iova = self.vfio.allocate_iova(len)?;
        // SAFETY: the caller keeps the memory allocated until unmap_dma.
        unsafe { sys::iommu_map_dma_device_reads(self.vfio.container.as_raw_fd(), iova, len, vaddr.as_ptr()) }
            .map_err(io_context(format!("mapping {len} bytes for the device to read")))?;
        Ok(iova)
    }

    fn unmap_dma(&self, iova: u64, len: usize) -> Result<()> {
        self.vfio
            .container
            .vfio_dma_unmap(iova, len)
            .map_err(|source| Error::Vfio { context: format!("unmapping {len} bytes at IOVA {iova:#x}"), source })
    }

    fn dma_domain(&self) -> usize {
        // Every device of a container shares its IOMMU mappings.
        Arc::as_ptr(&self.vfio).cast::<()>() as usize
    }

    fn name(&self) -> &str {
        &self.bdf
    }

    fn pci_id(&self) -> PciId {
        self.pci_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_forms() {
        assert_eq!(normalize_bdf("00:10.0").unwrap(), "0000:00:10.0");
        assert_eq!(normalize_bdf("0000:3B:00.1").unwrap(), "0000:3b:00.1");
        for bad in ["", "00:10", "0000:00:10.8", "zz:10.0", "0000-00:10.0", "00:10.0x"] {
            assert!(normalize_bdf(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn iova_allocation_stays_in_ranges_and_aligns() {
        let mut space = IovaSpace::new(vec![(0, 0xfedf_ffff), (0xfef0_0000, (1 << 48) - 1)]);
        let a = space.allocate(4096, 4096).unwrap();
        assert_eq!(a, IovaSpace::START);
        let b = space.allocate(2 << 20, 2 << 20).unwrap();
        assert_eq!(b % (2 << 20), 0);
        assert!(b >= a + 4096);
        let mut tiny = IovaSpace::new(vec![(0x1000, 0x1fff)]);
        assert_eq!(tiny.allocate(0x1000, 0x1000), None, "the range lies below START");
        let mut low = IovaSpace { ranges: vec![(0x1000, 0x2fff)], next: 0 };
        assert_eq!(low.allocate(0x1000, 0x1000), Some(0x1000));
        assert_eq!(low.allocate(0x1000, 0x1000), Some(0x2000));
        assert_eq!(low.allocate(0x1000, 0x1000), None);
    }
}
