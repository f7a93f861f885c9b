//! Asynchronous events during a long run: the tools that run for minutes
//! (seqwrite, scrub, a resilver or rebuild) ask each controller for its
//! events about once a second ([`Controller::poll_events`]) and say each
//! on stderr as it comes, so that a SMART critical warning (spare below
//! threshold, media read-only, reliability degraded) raised in the middle
//! of a rebuild is not silent until the next `volume status`. The same
//! call lets a device the host asks back for go while nothing is in
//! flight on it.

use nvme_driver::controller::{AsyncEvent, AsyncEventKind};
use nvme_driver::Controller;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Every event the run's watches saw, with its controller's name and in
/// words, oldest first: for the tool's `--json` ([`seen_json`]).
static SEEN: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// The events this run saw so far, as a JSON array of `{"controller",
/// "event"}`: empty when none came.
pub fn seen_json() -> serde_json::Value {
    let seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    seen.iter().map(|(controller, event)| serde_json::json!({ "controller": controller, "event": event })).collect()
}

/// How often [`Watch::poll`] asks, at most.
pub const EVERY: Duration = Duration::from_secs(1);

/// The controllers of a run, asked for their events now and then.
#[derive(Debug)]
pub struct Watch<'a> {
    controllers: Vec<(String, &'a Controller)>,
    every: Duration,
    /// When to ask next (`None`: at the first call): one comparison per
    /// call of a loop that runs per write.
    next: Option<Instant>,
    /// Every event seen, with the name of its controller, oldest first.
    pub seen: Vec<(String, AsyncEvent)>,
}

impl<'a> Watch<'a> {
    /// A watch over `controllers`, each with the name the run gives it,
    /// asking at most once every `every`.
    pub fn new(controllers: impl IntoIterator<Item = (String, &'a Controller)>, every: Duration) -> Watch<'a> {
        Watch { controllers: controllers.into_iter().collect(), every, next: None, seen: Vec::new() }
    }

    /// A watch over `controllers`, named by their transports (a PCI
    /// address, or `sim`).
    pub fn of(controllers: &'a [Controller]) -> Watch<'a> {
        Watch::new(controllers.iter().map(|c| (c.transport().name().to_string(), c)), EVERY)
    }

    /// Asks every controller for its events when `every` has passed since
    /// the last time (or never asked), `now` being the caller's clock:
    /// each is written to stderr as a warning and kept in [`Watch::seen`].
    /// A controller that cannot be asked (it is gone) is said each time,
    /// and the run goes on: its I/O fails by itself. Returns the events
    /// this call found.
    pub fn poll(&mut self, now: Instant) -> usize {
        if self.next.is_some_and(|next| now < next) {
            return 0;
        }
        self.next = now.checked_add(self.every);
        let before = self.seen.len();
        for (name, controller) in &self.controllers {
            match controller.poll_events() {
                Ok(events) => {
                    for event in events {
                        let words = describe(&event);
                        eprintln!("\nwarning: {name}: {words}");
                        SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((name.clone(), words));
                        self.seen.push((name.clone(), event));
                    }
                }
                Err(error) => eprintln!("\nwarning: {name}: its events could not be read: {error}"),
            }
        }
        self.seen.len() - before
    }
}

/// One event in words.
pub fn describe(event: &AsyncEvent) -> String {
    match &event.kind {
        AsyncEventKind::Smart { critical_warning } => {
            let names: Vec<String> = critical_warning.iter_names().map(|(name, _)| name.to_lowercase()).collect();
            match names.is_empty() {
                true => "a SMART / health event with no critical warning set".to_string(),
                false => format!("SMART critical warning: {} (see `volume status`)", names.join(", ")),
            }
        }
        AsyncEventKind::ZoneDescriptorChanged => "zone descriptors changed".to_string(),
        AsyncEventKind::NamespaceAttributeChanged => "a namespace's attributes changed".to_string(),
        AsyncEventKind::Error => format!("an error event (information {:#04x})", event.information),
        AsyncEventKind::Other => format!(
            "an event of type {:#x}, information {:#04x}, log page {:#04x}",
            event.event_type, event.information, event.log_page
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::sim::{SimConfig, Simulator};
    use nvme_driver::spec::log::CriticalWarning;
    use nvme_driver::{ControllerOptions, Transport};
    use std::sync::Arc;

    #[test]
    fn a_critical_warning_raised_during_a_run_is_seen_once_and_asking_is_paced() {
        let sim = Simulator::new(SimConfig::nvm(1 << 16, 512));
        let transport: Arc<dyn Transport> = sim.clone();
        let controllers = [Controller::init(transport, ControllerOptions::default()).expect("init")];
        let named = || controllers.iter().map(|c| ("sim".to_string(), c));
        let mut watch = Watch::new(named(), Duration::ZERO);
        assert_eq!(watch.poll(Instant::now()), 0, "nothing yet");
        sim.set_smart_critical_warning(CriticalWarning::SPARE.bits());
        assert_eq!(watch.poll(Instant::now()), 1);
        let (name, event) = &watch.seen[0];
        let words = describe(event);
        assert!(words.contains("critical warning: spare"), "{name}: {words}");
        assert_eq!(watch.poll(Instant::now()), 0, "said once");
        // Paced: a new warning waits for the next turn.
        let mut slow = Watch::new(named(), Duration::from_secs(3600));
        assert_eq!(slow.poll(Instant::now()), 0);
        sim.set_smart_critical_warning((CriticalWarning::SPARE | CriticalWarning::TEMPERATURE).bits());
        assert_eq!(slow.poll(Instant::now()), 0, "asked again only after an hour");
        assert_eq!(watch.poll(Instant::now()), 1, "another watch asks now");
        // The run's JSON lists each event seen, by its controller.
        let seen = seen_json();
        let seen = seen.as_array().expect("an array");
        assert!(seen.len() >= 2, "{seen:?}");
        assert!(seen.iter().all(|e| e["controller"] == "sim"), "{seen:?}");
        assert!(seen.iter().any(|e| e["event"].as_str().is_some_and(|w| w.contains("temperature"))), "{seen:?}");
    }
}
