//! Scrub engine: reads every extent a zoned-allocator volume holds, verifies
//! checksums and repairs from the redundant copy.
//!
//! Not built yet: the plan, the in-flight table and repair arrive with the
//! scrub issue. The crate exists so the workspace has its final shape.
