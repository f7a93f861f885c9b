//! The `--checksums` argument of the volume tools.

/// Where a volume a tool formats keeps its blocks' checksums
/// (`zoned_allocator::ChecksumStore`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ChecksumsArg {
    /// Block tags on namespaces with per-block metadata, zone checksum
    /// areas otherwise.
    Auto,
    /// After each zone's data, on any namespace.
    Area,
    /// In the extent map (in memory, in the journal and in checkpoints).
    Map,
    /// Block tags; format fails on a namespace without metadata.
    Tags,
}

impl From<ChecksumsArg> for zoned_allocator::ChecksumStore {
    fn from(store: ChecksumsArg) -> Self {
        match store {
            ChecksumsArg::Auto => zoned_allocator::ChecksumStore::Auto,
            ChecksumsArg::Area => zoned_allocator::ChecksumStore::Area,
            ChecksumsArg::Map => zoned_allocator::ChecksumStore::Map,
            ChecksumsArg::Tags => zoned_allocator::ChecksumStore::Tags,
        }
    }
}
