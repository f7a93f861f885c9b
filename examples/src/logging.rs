//! A minimal logger for the tools: the driver's warnings (say, a zero-out
//! strategy downgrade) go to stderr, prefixed with the tool's name.

use log::{Level, LevelFilter, Metadata, Record};

struct Stderr {
    tool: &'static str,
}

impl log::Log for Stderr {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= Level::Warn
    }

    fn log(&self, record: &Record) {
        if self.enabled(record.metadata()) {
            eprintln!("{}: {}: {}", self.tool, record.level().as_str().to_lowercase(), record.args());
        }
    }

    fn flush(&self) {}
}

/// Sends warnings and errors to stderr. Call once, first thing in `main`.
pub fn init(tool: &'static str) {
    let logger = Box::leak(Box::new(Stderr { tool }));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(LevelFilter::Warn);
    }
}
