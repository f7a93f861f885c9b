//! A volume's status in the Prometheus text exposition format (version
//! 0.0.4), for a metrics collector to read from a file or a pipe:
//! `# HELP` and `# TYPE` once per metric family, then its samples,
//! `name{label="value",...} value`, one a line.

use crate::health::Health;
use std::fmt::Write;
use zoned_allocator::{DeviceStatus, MemberState, VolumeState, VolumeStatus};

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A count that only goes up (until its source restarts).
    Counter,
}

/// The exposition text, written family by family.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
    /// The family whose samples are being written.
    family: Option<String>,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts family `name`: its `# HELP` and `# TYPE` lines. Every sample
    /// of a family follows its start, before the next family's.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        assert!(valid_name(name), "metric name {name:?}");
        assert!(kind != Kind::Counter || name.ends_with("_total"), "a counter's name ends in _total: {name}");
        let kind = match kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
        self.family = Some(name.to_string());
    }

    /// One sample of the current family.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) {
        let name = self.family.as_deref().expect("a sample belongs to a family");
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (index, (label, value)) in labels.iter().enumerate() {
                assert!(valid_name(label) && !label.starts_with("__"), "label name {label:?}");
                if index > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"{}\"", escape_label_value(value));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", value.into());
    }

    /// The exposition text.
    pub fn finish(self) -> String {
        self.text
    }
}

/// A sample's value: integers exactly, floats as the format spells them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A whole number (counters, bytes).
    Integer(u128),
    /// Anything else.
    Float(f64),
}

impl From<u64> for Value {
    fn from(value: u64) -> Value {
        Value::Integer(u128::from(value))
    }
}

impl From<u128> for Value {
    fn from(value: u128) -> Value {
        Value::Integer(value)
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Value {
        Value::Integer(u128::from(value))
    }
}

impl From<f64> for Value {
    fn from(value: f64) -> Value {
        Value::Float(value)
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Value::Integer(value) => write!(f, "{value}"),
            Value::Float(value) if value.is_nan() => f.write_str("NaN"),
            Value::Float(value) if value.is_infinite() => f.write_str(if value > 0.0 { "+Inf" } else { "-Inf" }),
            Value::Float(value) => write!(f, "{value}"),
        }
    }
}

/// A metric or label name: `[a-zA-Z_][a-zA-Z0-9_]*` (metric names may
/// also hold `:`, which these never use).
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A label value as the format quotes it: backslash, double quote and
/// line feed escaped.
pub fn escape_label_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// `# HELP` text: backslash and line feed escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// How the views name a volume's state (as `--json` does).
pub fn volume_state_name(state: VolumeState) -> &'static str {
    match state {
        VolumeState::Online => "online",
        VolumeState::Resilvering => "resilvering",
        VolumeState::Degraded => "degraded",
        VolumeState::Damaged => "damaged",
        VolumeState::Failed => "failed",
    }
}

/// How the views name a device's state (as `--json` does).
pub fn member_state_name(state: MemberState) -> &'static str {
    match state {
        MemberState::Online => "online",
        MemberState::Resilvering => "resilvering",
        MemberState::Failed => "failed",
    }
}

const VOLUME_STATES: [VolumeState; 5] =
    [VolumeState::Online, VolumeState::Resilvering, VolumeState::Degraded, VolumeState::Damaged, VolumeState::Failed];
const MEMBER_STATES: [MemberState; 3] = [MemberState::Online, MemberState::Resilvering, MemberState::Failed];

/// `status` as exposition text; `health[i]` is device `status.devices[i]`'s
/// controller health, when known. Device metrics carry the labels
/// `place`, `pci` and `serial` (empty when the device is absent).
pub fn volume_status(status: &VolumeStatus, health: &[Option<Health>]) -> String {
    let mut out = Exposition::new();
    volume_figures(&mut out, status);
    let labels = DeviceLabels::of(status);
    device_figures(&mut out, status, &labels);
    if let Some(scrub) = &status.last_scrub {
        scrub_figures(&mut out, scrub);
    }
    health_figures(&mut out, health, &labels);
    out.finish()
}

/// Each device place's identifying labels: place, PCI address, serial.
struct DeviceLabels(Vec<[String; 3]>);

impl DeviceLabels {
    fn of(status: &VolumeStatus) -> DeviceLabels {
        DeviceLabels(status.devices.iter().map(|d| [d.place.to_string(), d.pci.clone(), d.serial.clone()]).collect())
    }

    /// Device `index`'s labels, to extend with the figure's own.
    fn at(&self, index: usize) -> Vec<(&str, &str)> {
        let [place, pci, serial] = &self.0[index];
        vec![("place", place.as_str()), ("pci", pci.as_str()), ("serial", serial.as_str())]
    }
}

/// The volume as a whole: identity, state, space and redundancy.
fn volume_figures(out: &mut Exposition, status: &VolumeStatus) {
    let volume_id = format!("{:#018x}", status.volume_id);
    let profile = format!("{:?}", status.profile).to_lowercase();
    out.family("nvme_volume_info", Kind::Gauge, "The volume's identity and profile (always 1).");
    out.sample(&[("volume_id", &volume_id), ("profile", &profile)], 1u64);
    out.family("nvme_volume_state", Kind::Gauge, "1 for the volume's current state, 0 for the others.");
    for state in VOLUME_STATES {
        out.sample(&[("state", volume_state_name(state))], state == status.state);
    }
    out.family("nvme_volume_capacity_bytes", Kind::Gauge, "Bytes the volume can hold (one copy).");
    out.sample(&[], status.capacity_bytes);
    out.family("nvme_volume_used_bytes", Kind::Gauge, "Bytes of live data (one copy).");
    out.sample(&[], status.used_bytes);
    out.family("nvme_volume_committed_seq", Kind::Gauge, "The last committed journal sequence number.");
    out.sample(&[], status.committed_seq);
    out.family("nvme_volume_copies", Kind::Gauge, "Copies each extent should have.");
    out.sample(&[], status.redundancy.copies as u64);
    out.family("nvme_volume_bytes_full", Kind::Gauge, "Bytes (counted once) with every copy present.");
    out.sample(&[], status.redundancy.bytes_full);
    out.family("nvme_volume_bytes_at_risk", Kind::Gauge, "Bytes with fewer copies available than the profile asks.");
    out.sample(&[], status.redundancy.bytes_at_risk);
    out.family("nvme_volume_extents_at_risk", Kind::Gauge, "Extents with fewer copies available than asked.");
    out.sample(&[], status.redundancy.extents_at_risk);
    out.family("nvme_volume_bytes_missing", Kind::Gauge, "Bytes of extents with a copy a resilver must write.");
    out.sample(&[], status.redundancy.bytes_missing);
    out.family("nvme_volume_extents_missing", Kind::Gauge, "Extents with a copy a resilver must write.");
    out.sample(&[], status.redundancy.extents_missing);
    out.family("nvme_volume_bytes_lost", Kind::Gauge, "Bytes with no copy on a device in use: lost.");
    out.sample(&[], status.redundancy.bytes_lost);
    out.family("nvme_volume_extents_lost", Kind::Gauge, "Extents with no copy on a device in use: lost.");
    out.sample(&[], status.redundancy.extents_lost);
}

/// Each device place: its role, state, errors, zones, space, and what a
/// resilver has left to copy to it.
fn device_figures(out: &mut Exposition, status: &VolumeStatus, labels: &DeviceLabels) {
    let per_device = |out: &mut Exposition, name: &str, kind: Kind, help: &str, value: fn(&DeviceStatus) -> u64| {
        out.family(name, kind, help);
        for (index, device) in status.devices.iter().enumerate() {
            out.sample(&labels.at(index), value(device));
        }
    };
    out.family("nvme_volume_device_info", Kind::Gauge, "A device place: its role, namespace and model (always 1).");
    for (index, device) in status.devices.iter().enumerate() {
        let nsid = device.nsid.to_string();
        let mut labels = labels.at(index);
        labels.extend([("role", device.role.as_str()), ("nsid", nsid.as_str()), ("model", device.model.as_str())]);
        out.sample(&labels, 1u64);
    }
    out.family("nvme_volume_device_state", Kind::Gauge, "1 for the device place's current state, 0 for the others.");
    for (index, device) in status.devices.iter().enumerate() {
        for state in MEMBER_STATES {
            let mut labels = labels.at(index);
            labels.push(("state", member_state_name(state)));
            out.sample(&labels, state == device.state);
        }
    }
    out.family(
        "nvme_volume_device_errors_total",
        Kind::Counter,
        "Errors by kind: read, write and checksum kept in the volume's metadata; timeouts and resets since the \
         volume was opened.",
    );
    for (index, device) in status.devices.iter().enumerate() {
        let errors = device.errors;
        let kinds = [
            ("read", errors.read),
            ("write", errors.write),
            ("checksum", errors.checksum),
            ("timeout", errors.timeouts),
            ("reset", errors.resets),
        ];
        for (kind, count) in kinds {
            let mut labels = labels.at(index);
            labels.push(("kind", kind));
            out.sample(&labels, count);
        }
    }
    out.family("nvme_volume_device_zones", Kind::Gauge, "Data zones by state (0 for an absent device).");
    for (index, device) in status.devices.iter().enumerate() {
        let zones = [
            ("empty", device.zones_empty),
            ("open", device.zones_open),
            ("full", device.zones_full),
            ("worn", device.zones_worn),
        ];
        for (state, count) in zones {
            let mut labels = labels.at(index);
            labels.push(("state", state));
            out.sample(&labels, count);
        }
    }
    per_device(out, "nvme_volume_device_used_bytes", Kind::Gauge, "Bytes of live copies held.", |d| d.used_bytes);
    per_device(out, "nvme_volume_device_capacity_bytes", Kind::Gauge, "Bytes its copies can take.", |d| {
        d.capacity_bytes
    });
    per_device(
        out,
        "nvme_volume_device_missing_bytes",
        Kind::Gauge,
        "Bytes of copies it should hold but lacks.",
        |d| d.missing_bytes,
    );
    per_device(
        out,
        "nvme_volume_device_metadata_bytes",
        Kind::Gauge,
        "Bytes of the device its metadata segments or label take.",
        |d| d.metadata_bytes,
    );
    out.family(
        "nvme_volume_resilver_bytes_left",
        Kind::Gauge,
        "Bytes still to copy to a device place being resilvered.",
    );
    for resilver in &status.resilver {
        let index = status.devices.iter().position(|d| d.place == resilver.place).expect("a place of the volume");
        out.sample(&labels.at(index), resilver.bytes_left);
    }
}

/// The last scrub pass, as the volume recorded it.
fn scrub_figures(out: &mut Exposition, scrub: &zoned_allocator::ScrubRecord) {
    out.family("nvme_volume_last_scrub_timestamp_seconds", Kind::Gauge, "When the last scrub pass ended (Unix time).");
    out.sample(&[], scrub.finished_unix_s);
    out.family("nvme_volume_last_scrub_bytes_verified", Kind::Gauge, "Bytes the last scrub pass verified.");
    out.sample(&[], scrub.bytes_verified);
    out.family("nvme_volume_last_scrub_bad_blocks", Kind::Gauge, "Bad blocks the last scrub pass found.");
    out.sample(&[], scrub.bad_blocks);
    out.family("nvme_volume_last_scrub_repaired_blocks", Kind::Gauge, "Blocks the last scrub pass repaired.");
    out.sample(&[], scrub.repaired_blocks);
    out.family(
        "nvme_volume_last_scrub_uncorrectable_blocks",
        Kind::Gauge,
        "Blocks the last scrub pass found with no good copy.",
    );
    out.sample(&[], scrub.uncorrectable_blocks);
    out.family(
        "nvme_volume_last_scrub_clean",
        Kind::Gauge,
        "1 when the last scrub pass read and verified everything and left nothing bad.",
    );
    out.sample(&[], scrub.clean);
}

/// What each controller says of its health, where it was read.
fn health_figures(out: &mut Exposition, health: &[Option<Health>], labels: &DeviceLabels) {
    let known: Vec<(usize, &Health)> =
        health.iter().enumerate().filter_map(|(index, h)| h.as_ref().map(|h| (index, h))).collect();
    if !known.is_empty() {
        type Figure = fn(&Health) -> Value;
        let figures: [(&str, Kind, &str, Figure); 5] = [
            ("nvme_volume_device_temperature_kelvin", Kind::Gauge, "The controller's Composite Temperature.", |h| {
                u64::from(h.composite_temperature_kelvin).into()
            }),
            (
                "nvme_volume_device_percentage_used",
                Kind::Gauge,
                "The controller's estimate of its life used, percent (may exceed 100).",
                |h| u64::from(h.percentage_used).into(),
            ),
            (
                "nvme_volume_device_available_spare_percent",
                Kind::Gauge,
                "The controller's spare capacity left, percent.",
                |h| u64::from(h.available_spare_percent).into(),
            ),
            (
                "nvme_volume_device_media_errors_total",
                Kind::Counter,
                "The controller's Media and Data Integrity Errors over its life.",
                |h| h.media_errors.into(),
            ),
            (
                "nvme_volume_device_critical_warning",
                Kind::Gauge,
                "The controller's Critical Warning bits (0: none).",
                |h| u64::from(h.critical_warning).into(),
            ),
        ];
        for (name, kind, help, figure) in figures {
            out.family(name, kind, help);
            for &(index, health) in &known {
                out.sample(&labels.at(index), figure(health));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{degraded, device, health};
    use zoned_allocator::ResilverStatus;

    fn lines(text: &str) -> Vec<&str> {
        text.lines().collect()
    }

    #[test]
    fn a_degraded_mirror_as_exposition_text() {
        let text = volume_status(&degraded(), &[Some(health()), None]);
        let lines = lines(&text);
        let has = |line: &str| assert!(lines.contains(&line), "no {line:?} in\n{text}");
        has("# HELP nvme_volume_state 1 for the volume's current state, 0 for the others.");
        has("# TYPE nvme_volume_state gauge");
        has("nvme_volume_state{state=\"online\"} 0");
        has("nvme_volume_state{state=\"resilvering\"} 0");
        has("nvme_volume_state{state=\"degraded\"} 1");
        has("nvme_volume_state{state=\"failed\"} 0");
        has("nvme_volume_info{volume_id=\"0x000000000000abcd\",profile=\"mirror\"} 1");
        has("nvme_volume_bytes_at_risk 1056768");
        has("nvme_volume_extents_at_risk 258");
        has("nvme_volume_extents_missing 2");
        has("# TYPE nvme_volume_device_errors_total counter");
        has("nvme_volume_device_errors_total{place=\"0\",pci=\"0000:01:00.0\",serial=\"SN0\",kind=\"read\"} 3");
        has("nvme_volume_device_errors_total{place=\"1\",pci=\"\",serial=\"\",kind=\"checksum\"} 7");
        has("nvme_volume_device_state{place=\"1\",pci=\"\",serial=\"\",state=\"failed\"} 1");
        has("nvme_volume_device_state{place=\"1\",pci=\"\",serial=\"\",state=\"online\"} 0");
        has("nvme_volume_device_missing_bytes{place=\"1\",pci=\"\",serial=\"\"} 8192");
        // The model's double quotes are escaped in the label value.
        has("nvme_volume_device_info{place=\"0\",pci=\"0000:01:00.0\",serial=\"SN0\",role=\"mirror copy 0\",nsid=\"1\",model=\"Model \\\"Z\\\"\"} 1");
        has("nvme_volume_last_scrub_timestamp_seconds 1700000000");
        has("nvme_volume_last_scrub_clean 1");
        // Health only where it is known: the absent device has none.
        has("nvme_volume_device_temperature_kelvin{place=\"0\",pci=\"0000:01:00.0\",serial=\"SN0\"} 310");
        has("nvme_volume_device_percentage_used{place=\"0\",pci=\"0000:01:00.0\",serial=\"SN0\"} 3");
        has("# TYPE nvme_volume_device_media_errors_total counter");
        has("nvme_volume_device_media_errors_total{place=\"0\",pci=\"0000:01:00.0\",serial=\"SN0\"} 5");
        has("nvme_volume_device_critical_warning{place=\"0\",pci=\"0000:01:00.0\",serial=\"SN0\"} 0");
        assert!(!text.contains("temperature_kelvin{place=\"1\""), "{text}");
        // No resilver is running: the family has no samples.
        assert!(!text.contains("nvme_volume_resilver_bytes_left{"), "{text}");
    }

    #[test]
    fn every_family_is_announced_once_and_its_samples_follow_it() {
        let mut status = degraded();
        status.state = VolumeState::Resilvering;
        status.devices[1] = device(1, MemberState::Resilvering, "0000:02:00.0");
        status.resilver = vec![ResilverStatus { place: 1, bytes_left: 4096 }];
        let text = volume_status(&status, &[Some(health()), Some(health())]);
        assert!(
            text.contains("nvme_volume_resilver_bytes_left{place=\"1\",pci=\"0000:02:00.0\",serial=\"SN1\"} 4096\n")
        );
        let mut seen = std::collections::HashSet::new();
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                current = rest.split(' ').next().unwrap().to_string();
                assert!(seen.insert(current.clone()), "{current} announced twice");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                assert!(rest.starts_with(&format!("{current} ")), "{line} after the HELP of {current}");
                assert!(rest.ends_with(" gauge") || rest.ends_with(" counter"), "{line}");
            } else {
                let name = line.split(['{', ' ']).next().unwrap();
                assert_eq!(name, current, "a sample of {name} under {current}");
                let value = line.rsplit(' ').next().unwrap();
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        assert_eq!(escape_label_value(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label_value("line\nbreak"), "line\\nbreak");
        assert_eq!(escape_label_value("plain 0000:01:00.0"), "plain 0000:01:00.0");
        let mut out = Exposition::new();
        out.family("x_total", Kind::Counter, "a \\ and\na line");
        out.sample(&[("path", "C:\\dir\n\"q\"")], 1u64);
        out.family("y", Kind::Gauge, "floats");
        out.sample(&[], f64::INFINITY);
        out.sample(&[], f64::NAN);
        out.sample(&[], 0.5);
        assert_eq!(
            out.finish(),
            "# HELP x_total a \\\\ and\\na line\n# TYPE x_total counter\nx_total{path=\"C:\\\\dir\\n\\\"q\\\"\"} 1\n\
             # HELP y floats\n# TYPE y gauge\ny +Inf\ny NaN\ny 0.5\n"
        );
    }

    #[test]
    #[should_panic(expected = "_total")]
    fn a_counter_is_named_total() {
        Exposition::new().family("nvme_errors", Kind::Counter, "no suffix");
    }
}
