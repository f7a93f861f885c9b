//! Memory a device may still write: the one place that decides when a
//! buffer of a command that ended without its completion, or a ring the
//! controller did not give up, may be used again.
//!
//! A command in flight owns its buffer on the device's side until the
//! device completes it. When the host ends it instead (a controller reset,
//! removal, a queue pair dropped), the buffer may go back to its pool only
//! if the device's DMA is known to have stopped since: CC.EN cleared and
//! CSTS.RDY read back as 0 (NVMe Base 2.0 §3.7.2). A disable that timed
//! out with RDY still set proves nothing, nor do register reads of all
//! ones. Until a later disable is confirmed, such memory is held here,
//! never handed to another command; if none ever is, it is leaked rather
//! than freed under DMA.

use super::IoBuffer;
use crate::dma::DmaRegion;

/// Memory held because the device may still write it: kept only to be
/// dropped (given back) or forgotten (leaked), never read.
#[derive(Debug)]
#[allow(dead_code)]
pub(crate) enum Held {
    /// A command's data or metadata buffer.
    Buffer(IoBuffer),
    /// A queue ring or PRP list region.
    Region(DmaRegion),
}

/// The controller's quarantine: what its queue pairs could not safely give
/// back, released as a whole at the next confirmed disable.
#[derive(Debug, Default)]
pub(crate) struct Quarantine {
    held: Vec<Held>,
}

impl Quarantine {
    pub(crate) fn hold(&mut self, memory: Held) {
        self.held.push(memory);
    }

    /// Buffers held now.
    pub(crate) fn buffers(&self) -> usize {
        self.held.iter().filter(|held| matches!(held, Held::Buffer(_))).count()
    }

    /// The controller's DMA was confirmed stopped: everything held goes back
    /// (buffers to their pools, regions unmapped). Returns how many.
    pub(crate) fn release(&mut self) -> usize {
        let released = self.held.len();
        if released > 0 {
            log::info!("quarantine: {released} region(s) and buffer(s) released after a confirmed disable");
        }
        self.held.clear();
        released
    }
}

impl Drop for Quarantine {
    /// Never confirmed stopped: leaked, never reused.
    fn drop(&mut self) {
        if !self.held.is_empty() {
            log::warn!(
                "quarantine: {} region(s) and buffer(s) leaked; the device may still write them",
                self.held.len()
            );
        }
        for held in self.held.drain(..) {
            std::mem::forget(held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::DmaPool;
    use crate::loopback::LoopbackTransport;
    use crate::Transport;
    use std::sync::Arc;

    fn pool() -> DmaPool {
        let transport: Arc<dyn Transport> = LoopbackTransport::new();
        DmaPool::new(&transport, 4096, 4).unwrap()
    }

    #[test]
    fn held_buffers_return_only_on_release() {
        let pool = pool();
        let mut quarantine = Quarantine::default();
        quarantine.hold(Held::Buffer(IoBuffer::new(pool.get().unwrap())));
        quarantine.hold(Held::Buffer(IoBuffer::new(pool.get().unwrap())));
        assert_eq!((quarantine.buffers(), pool.available()), (2, 2));
        assert_eq!(quarantine.release(), 2);
        assert_eq!((quarantine.buffers(), pool.available()), (0, 4));
    }

    #[test]
    fn a_quarantine_never_released_leaks_what_it_holds() {
        let pool = pool();
        let mut quarantine = Quarantine::default();
        quarantine.hold(Held::Buffer(IoBuffer::new(pool.get().unwrap())));
        drop(quarantine);
        assert_eq!(pool.available(), 3);
    }
}
