//! BENCHMARKS.md's tables of the latest figures, generated from the JSON
//! that `hack/bench --json FILE` writes, so that the page cannot drift
//! from the run it cites.
//!
//! [`Run::from_json`] reads a run: its date, commit and machine, the
//! settings that bound its figures, and its side-by-side rows (ours, the
//! anchor, the ratio and the target, as the bench computed them).
//! [`render`] turns runs into markdown: a line of provenance per run, then
//! one table per area (the driver, the allocator, the scrub, the
//! resilver), each figure beside its anchor. [`splice`] puts that between
//! the [`BEGIN`] and [`END`] markers of a page; a page whose block differs
//! from [`splice`]'s result has drifted.

mod block;
mod render;
mod run;

pub use block::{splice, BEGIN, END};
pub use render::render;
pub use run::{Area, Row, Run, Target};

/// Why tables could not be made or placed.
#[derive(Debug, PartialEq)]
pub enum TablesError {
    /// The JSON is not a `hack/bench` run: a field the tables need is
    /// missing or of the wrong type (a JSON path such as `table[3].job`).
    Field(String),
    /// The page lacks a marker line, or has it more than once.
    Marker { marker: &'static str, count: usize },
    /// The end marker comes before the begin marker.
    MarkersOutOfOrder,
}

impl std::fmt::Display for TablesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TablesError::Field(path) => write!(f, "not a hack/bench run's JSON: {path} is missing or malformed"),
            TablesError::Marker { marker, count } => {
                write!(f, "the page has the line {marker} {count} times; it needs it once")
            }
            TablesError::MarkersOutOfOrder => write!(f, "the page has {END} before {BEGIN}"),
        }
    }
}

impl std::error::Error for TablesError {}
