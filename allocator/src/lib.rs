//! Zoned allocator over ZNS namespaces and conventional namespaces split into
//! software zones.
//!
//! Not built yet: placement, the write path, the journal, checksums and
//! reclaim arrive with the allocator issue. The crate exists so the workspace
//! has its final shape.
