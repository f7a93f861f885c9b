//! One simulated namespace: its geometry, its storage and, when zoned, its
//! zones.

use super::config::{DeallocateBehavior, NamespaceConfig};
use super::storage::Storage;
use super::zones::Zones;
use crate::spec::identify::{CSI_NVM, CSI_ZONED};
use crate::spec::status::{GenericStatus, Status};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

#[derive(Debug)]
pub(crate) struct Namespace {
    pub(crate) nsid: u32,
    pub(crate) config: NamespaceConfig,
    pub(crate) block_size: u64,
    pub(crate) capacity_blocks: u64,
    /// Behind its own lock, so that reads move data while the controller's
    /// state is free for other queues (see `Simulator::write32`); the
    /// controller's lock is always taken first.
    pub(crate) storage: Arc<RwLock<Storage>>,
    pub(crate) zones: Option<Zones>,
}

impl Namespace {
    pub(crate) fn new(nsid: u32, config: &NamespaceConfig, memory_limit_bytes: u64) -> Self {
        Namespace {
            nsid,
            block_size: u64::from(config.block_size),
            capacity_blocks: config.capacity_blocks,
            storage: Arc::new(RwLock::new(Storage::new(
                config.block_size,
                config.metadata_bytes,
                memory_limit_bytes,
                config.synthetic_data,
            ))),
            zones: config.zoned.as_ref().map(|zoned| Zones::new(zoned, config.capacity_blocks)),
            config: config.clone(),
        }
    }

    pub(crate) fn storage(&self) -> RwLockReadGuard<'_, Storage> {
        read(&self.storage)
    }

    pub(crate) fn storage_mut(&self) -> RwLockWriteGuard<'_, Storage> {
        write(&self.storage)
    }

    pub(crate) fn csi(&self) -> u8 {
        if self.zones.is_some() {
            CSI_ZONED
        } else {
            CSI_NVM
        }
    }

    /// LBA Out of Range unless `[slba, slba + blocks)` lies inside the
    /// namespace.
    pub(crate) fn check_range(&self, slba: u64, blocks: u64) -> Result<(), Status> {
        match slba.checked_add(blocks) {
            Some(end) if end <= self.capacity_blocks => Ok(()),
            _ => Err(Status::from(GenericStatus::LbaOutOfRange).with_dnr()),
        }
    }

    pub(crate) fn deallocate_zeroes(&self) -> bool {
        self.config.deallocate == DeallocateBehavior::Zeroes
    }
}

/// A namespace's storage to read (a panic while it was held poisons
/// nothing: the simulator's invariants are asserted before it changes).
pub(crate) fn read(storage: &RwLock<Storage>) -> RwLockReadGuard<'_, Storage> {
    storage.read().unwrap_or_else(PoisonError::into_inner)
}

/// A namespace's storage to change.
pub(crate) fn write(storage: &RwLock<Storage>) -> RwLockWriteGuard<'_, Storage> {
    storage.write().unwrap_or_else(PoisonError::into_inner)
}
