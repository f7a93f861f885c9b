//! Register access through a mapped BAR.
//!
//! Every access is a 32-bit volatile load or store: QEMU's NVMe BAR (and
//! some real devices) misbehave on wider accesses, and the spec allows
//! 64-bit registers (CAP, ASQ, ACQ) to be accessed as two 32-bit halves
//! (NVMe 1.4 §3, "Controller Registers", now in the NVMe over PCIe
//! Transport specification: the host accesses a register in its specified
//! width or with aligned 32-bit accesses).

use std::ptr::NonNull;

/// A mapped register window. Holds no Rust reference into device memory.
#[derive(Debug)]
pub struct Mmio {
    base: NonNull<u32>,
    len: usize,
}

// SAFETY: the window is plain MMIO; volatile 32-bit accesses from any
// thread are well defined. Ordering between threads is the caller's job,
// as with any register.
unsafe impl Send for Mmio {}
// SAFETY: as above; `&Mmio` only allows volatile loads and stores.
unsafe impl Sync for Mmio {}

impl Mmio {
    /// # Safety
    /// `base` must point to a mapping of at least `len` bytes that stays
    /// mapped for the lifetime of the returned value, and must be 4-byte
    /// aligned. The memory is device registers: nothing may hold a Rust
    /// reference into it.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Self {
        assert_eq!(base.as_ptr() as usize % 4, 0, "MMIO base must be 4-byte aligned");
        Mmio { base: base.cast(), len }
    }

    /// Length of the window, in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn register(&self, offset: usize) -> *mut u32 {
        assert!(
            offset.is_multiple_of(4) && offset + 4 <= self.len,
            "register offset {offset:#x} outside BAR of {:#x}",
            self.len
        );
        // SAFETY: offset + 4 <= len, so the pointer stays inside the mapping.
        unsafe { self.base.as_ptr().byte_add(offset) }
    }

    /// Reads the 32-bit register at byte `offset` with one volatile load.
    /// Panics if `offset` is unaligned or outside the window.
    pub fn read32(&self, offset: usize) -> u32 {
        // SAFETY: `register` bounds-checks; the mapping is live (`new`'s
        // contract) and volatile keeps the access exactly as written.
        unsafe { self.register(offset).read_volatile() }
    }

    /// Writes the 32-bit register at byte `offset` with one volatile store.
    /// Panics if `offset` is unaligned or outside the window. Orders nothing
    /// against other memory: fence first if the device must see earlier
    /// writes.
    pub fn write32(&self, offset: usize, value: u32) {
        // SAFETY: as in `read32`.
        unsafe { self.register(offset).write_volatile(value) }
    }

    /// A pointer for a hot-path doorbell, bounds-checked once here.
    pub fn doorbell(&self, offset: usize) -> NonNull<u32> {
        NonNull::new(self.register(offset)).expect("inside a non-null mapping")
    }
}
