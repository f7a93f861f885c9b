//! Doorbells: an MMIO register, optionally fronted by a shadow doorbell and
//! an EventIdx (NVMe Base 2.0 §5.8, Doorbell Buffer Config; the algorithm
//! is the virtio "event index" one).
//!
//! With a shadow doorbell the host writes the new value to host memory,
//! which the controller reads when it is already working, and writes the
//! MMIO register only when the new value passes the controller's EventIdx,
//! that is, when the controller may have gone idle. Under emulation every
//! MMIO write is a costly exit, so this is where much of the speed comes
//! from.

use crate::transport::Transport;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// Where an MMIO doorbell write goes.
#[derive(Debug)]
enum Register {
    /// A mapped BAR: a plain volatile store, no dispatch.
    Mapped(NonNull<u32>),
    /// Through the transport (a simulator, a loopback sink).
    Transport(usize),
}

/// A shadow doorbell slot and its EventIdx slot, in DMA memory the
/// controller reads and writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shadow {
    pub(crate) value: NonNull<u32>,
    pub(crate) event_idx: NonNull<u32>,
}

/// The shadow doorbell page and the EventIdx page given to the controller
/// with Doorbell Buffer Config. Each holds one 32-bit slot per doorbell, at
/// the doorbell's offset from the first doorbell register.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShadowPages {
    pub(crate) values: NonNull<u8>,
    pub(crate) event_idx: NonNull<u8>,
}

// SAFETY: the pointers name DMA pages the controller owns and keeps alive
// while any of its queues lives; they are only dereferenced (volatile) by
// the one queue that owns each slot, or by a reset under the admin lock.
unsafe impl Send for ShadowPages {}
// SAFETY: as above; sharing hands out slot addresses only.
unsafe impl Sync for ShadowPages {}

impl ShadowPages {
    /// The slots for the doorbell at BAR offset `offset`.
    pub(crate) fn slot(&self, offset: usize) -> Shadow {
        let at = offset - crate::spec::registers::DOORBELL_BASE;
        assert!(at + 4 <= crate::dma::PAGE_SIZE, "shadow doorbells cover one page");
        // SAFETY: `at + 4 <= PAGE_SIZE`: inside both one-page buffers,
        // which the controller keeps alive as long as any of its queues.
        let value = unsafe { self.values.byte_add(at) };
        // SAFETY: as above.
        let event_idx = unsafe { self.event_idx.byte_add(at) };
        Shadow { value: value.cast(), event_idx: event_idx.cast() }
    }
}

/// How a doorbell decides to write its register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShadowPolicy {
    /// No shadow doorbell: every update is an MMIO write.
    Off,
    /// Shadow, then MMIO only when EventIdx says the controller needs it.
    EventIdx,
    /// Shadow and MMIO on every update (the admin queue: controllers differ
    /// in whether they consult the shadow for queue 0).
    Always,
}

/// One SQ tail or CQ head doorbell.
#[derive(Debug)]
pub(crate) struct Doorbell {
    register: Register,
    shadow: Option<Shadow>,
    policy: ShadowPolicy,
    /// MMIO writes made, for statistics.
    pub(crate) mmio_writes: u64,
    /// Updates made.
    pub(crate) updates: u64,
    // Keeps the BAR mapping (and the shadow pages' device) alive.
    transport: Arc<dyn Transport>,
}

// SAFETY: the pointers are into a BAR mapping and DMA pages that the held
// transport (and the queue owning this doorbell) keep alive; they are only
// touched through volatile accesses by the doorbell's single owner.
unsafe impl Send for Doorbell {}

/// True when moving a doorbell from `old` to `new` passes `event_idx`, so
/// the controller asked to be notified (virtio's `vring_need_event`).
pub(crate) fn need_event(event_idx: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event_idx).wrapping_sub(1) < new.wrapping_sub(old)
}

impl Doorbell {
    pub(crate) fn new(
        transport: &Arc<dyn Transport>,
        offset: usize,
        shadow: Option<Shadow>,
        policy: ShadowPolicy,
    ) -> Self {
        let register = match transport.doorbell_pointer(offset) {
            Some(pointer) => Register::Mapped(pointer),
            None => Register::Transport(offset),
        };
        let policy = if shadow.is_some() { policy } else { ShadowPolicy::Off };
        Doorbell { register, shadow, policy, mmio_writes: 0, updates: 0, transport: Arc::clone(transport) }
    }

    /// Zeroes the shadow doorbell and EventIdx slots, after a controller
    /// reset and before the queue is created again: a new queue starts
    /// at 0 on both sides.
    pub(crate) fn clear_shadow(&self) {
        if let Some(shadow) = self.shadow {
            // SAFETY: `shadow` points into a live, aligned DMA page (see the
            // Send impl); volatile, no reference formed.
            unsafe { shadow.value.as_ptr().write_volatile(0) };
            // SAFETY: as above.
            unsafe { shadow.event_idx.as_ptr().write_volatile(0) };
        }
    }

    /// Publishes `new` (the previous value was `old`). The caller has made
    /// the queue entries it covers visible (a Release fence) before this.
    pub(crate) fn update(&mut self, old: u16, new: u16) {
        self.updates += 1;
        let write_register = match (self.policy, self.shadow) {
            (ShadowPolicy::Off, _) | (_, None) => true,
            (policy, Some(shadow)) => {
                // SAFETY: `shadow` points into a live, aligned DMA page
                // (see the Send impl); volatile, no reference formed.
                unsafe { shadow.value.as_ptr().write_volatile(u32::from(new)) };
                if policy == ShadowPolicy::Always {
                    true
                } else {
                    // The shadow store must be visible to the controller
                    // before we read its EventIdx, or both sides could
                    // miss each other's update (store-load ordering needs a
                    // full fence).
                    fence(Ordering::SeqCst);
                    // SAFETY: as above.
                    let event_idx = unsafe { shadow.event_idx.as_ptr().read_volatile() };
                    need_event(event_idx as u16, new, old)
                }
            }
        };
        if write_register {
            self.mmio_writes += 1;
            match self.register {
                // SAFETY: the pointer was bounds-checked by the transport
                // and the BAR stays mapped while `transport` is held.
                Register::Mapped(pointer) => unsafe { pointer.as_ptr().write_volatile(u32::from(new)) },
                Register::Transport(offset) => self.transport.write32(offset, u32::from(new)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn need_event_matches_the_event_index_rule() {
        // The controller asked to hear when the value passes 5.
        assert!(need_event(5, 6, 5));
        assert!(need_event(5, 8, 3));
        assert!(!need_event(5, 5, 3), "not yet past 5");
        assert!(!need_event(5, 9, 6), "already past 5 before this update");
        // Wrapping at 16 bits.
        assert!(need_event(0xffff, 1, 0xfffe));
        assert!(!need_event(0xfff0, 1, 0xfff8));
        assert!(!need_event(3, 3, 3), "no movement, no event");
    }
}
