//! Pure command builders.
