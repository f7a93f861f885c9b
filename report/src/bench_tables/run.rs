//! A `hack/bench` run as its JSON gives it: when, on what commit and
//! machine, with which settings, and its side-by-side rows.

use super::TablesError;
use serde_json::Value;

/// What part of the stack a row measures; one table each, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Area {
    /// `perf` against fio on the kernel's driver, PRPs only and the floor.
    Driver,
    /// `seqwrite` through the zoned allocator against btrfs and raw fio.
    Allocator,
    /// `scrub` against `btrfs scrub` and fio reads.
    Scrub,
    /// A mirror member rebuilt (`hack/bench --only resilver`).
    Resilver,
    /// A row none of the above claims, so that no figure goes unshown.
    Other,
}

impl Area {
    pub const ALL: [Area; 5] = [Area::Driver, Area::Allocator, Area::Scrub, Area::Resilver, Area::Other];

    /// The area of a row, from its job: the driver's jobs by their titles
    /// (`driver.jobs[].title`, with or without a `, ...` suffix such as
    /// `, against the floor`), the rest by the tool the job names.
    pub fn of(job: &str, driver_titles: &[String]) -> Area {
        let driver = driver_titles.iter().any(|title| {
            job.strip_prefix(title.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with(", "))
        });
        if driver {
            Area::Driver
        } else if job.contains("resilver") {
            Area::Resilver
        } else if job.starts_with("seqwrite") {
            Area::Allocator
        } else if job.starts_with("scrub") {
            Area::Scrub
        } else {
            Area::Other
        }
    }
}

/// What a row is held to, and whether the run met it (`None`: the bench
/// could not judge, a side having no figure).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// Ours over the anchor, at least (the paired ratio where there is one).
    Ratio { at_least: f64, met: Option<bool> },
    /// Ours alone, at least.
    Minimum { at_least: f64, met: Option<bool> },
}

/// One row of the bench's side-by-side table, with its own figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub job: String,
    /// The bench's unit key: `iops`, `mib_s`, `flatness`, `queue_depth`,
    /// `s` or `bytes`.
    pub unit: String,
    pub ours_label: String,
    pub ours: Option<f64>,
    /// What ours is compared with: the kernel's path, btrfs, the floor, or
    /// a baseline of our own.
    pub anchor_label: String,
    pub anchor: Option<f64>,
    /// Ours over the anchor, of the medians.
    pub ratio: Option<f64>,
    /// The median of the rounds' own ratios, where the two sides ran back
    /// to back.
    pub paired_ratio: Option<f64>,
    pub target: Option<Target>,
}

/// The driver's settings: its figures are medians over the rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DriverSettings {
    pub rounds: u64,
    pub time_s: u64,
    pub size_bytes: u64,
    pub preconditioned: bool,
}

/// The zoned half's settings: one run of each step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ZonedSettings {
    pub size_bytes: u64,
    pub zone_bytes: u64,
    pub fill_percent: f64,
    pub btrfs_fill_percent: f64,
}

/// The resilver's settings: its figures are medians over the rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResilverSettings {
    pub rounds: u64,
    pub size_bytes: u64,
    pub data_bytes: u64,
}

/// One `hack/bench` run. Fields the JSON lacks (older runs recorded less)
/// are `None`, and the tables say "not recorded".
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// `YYYY-MM-DD HH:MM UTC`, as the bench wrote it.
    pub date: Option<String>,
    pub commit: Option<String>,
    /// Files under `driver/`, `examples/` and `hack/` that differed from
    /// the commit.
    pub modified_files: Option<usize>,
    pub runtime_s: Option<f64>,
    /// The host: CPU, cores, QEMU.
    pub host: Vec<String>,
    /// The guest: machine, accelerator, vCPUs, memory, kernel, fio, images.
    pub guest: Vec<String>,
    pub driver: Option<DriverSettings>,
    pub zoned: Option<ZonedSettings>,
    pub resilver: Option<ResilverSettings>,
    pub driver_titles: Vec<String>,
    pub rows: Vec<Row>,
}

impl Run {
    /// Reads a run from `hack/bench --json`'s output. Only `table` is
    /// required, with a job, a unit and two labels per row.
    pub fn from_json(json: &Value) -> Result<Run, TablesError> {
        let table = json["table"].as_array().ok_or_else(|| TablesError::Field("table".into()))?;
        let rows = table.iter().enumerate().map(|(index, row)| row_from_json(index, row)).collect::<Result<_, _>>()?;
        let environment = &json["environment"];
        let source = &environment["source"];
        Ok(Run {
            date: text(&environment["date"]),
            commit: text(&source["commit"]),
            modified_files: source["modified"].as_array().map(Vec::len),
            runtime_s: json["runtime_s"].as_f64(),
            host: host_parts(&environment["host"]),
            guest: guest_parts(&environment["guest"]),
            driver: driver_settings(&json["driver"]["settings"]),
            zoned: zoned_settings(&json["zoned"]["settings"]),
            resilver: resilver_settings(&json["resilver"]["settings"]),
            driver_titles: json["driver"]["jobs"]
                .as_array()
                .map(|jobs| jobs.iter().filter_map(|job| text(&job["title"])).collect())
                .unwrap_or_default(),
            rows,
        })
    }

    /// The rows of one area, in the bench's order.
    pub fn rows_of(&self, area: Area) -> Vec<&Row> {
        self.rows.iter().filter(|row| Area::of(&row.job, &self.driver_titles) == area).collect()
    }
}

fn text(value: &Value) -> Option<String> {
    value.as_str().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

fn row_from_json(index: usize, row: &Value) -> Result<Row, TablesError> {
    let field = |path: &[&str]| {
        let value = path.iter().fold(row, |value, key| &value[*key]);
        text(value).ok_or_else(|| TablesError::Field(format!("table[{index}].{}", path.join("."))))
    };
    Ok(Row {
        job: field(&["job"])?,
        unit: field(&["unit"])?,
        ours_label: field(&["ours", "label"])?,
        ours: row["ours"]["value"].as_f64(),
        anchor_label: field(&["kernel", "label"])?,
        anchor: row["kernel"]["value"].as_f64(),
        ratio: row["ratio"].as_f64(),
        paired_ratio: row["paired_ratio"].as_f64(),
        target: target_from_json(&row["target"]),
    })
}

fn target_from_json(target: &Value) -> Option<Target> {
    let met = target["met"].as_bool();
    if let Some(at_least) = target["ratio_at_least"].as_f64() {
        Some(Target::Ratio { at_least, met })
    } else {
        target["ours_at_least"].as_f64().map(|at_least| Target::Minimum { at_least, met })
    }
}

fn host_parts(host: &Value) -> Vec<String> {
    let mut parts = Vec::new();
    parts.extend(text(&host["cpu"]));
    parts.extend(host["cores"].as_u64().filter(|&n| n > 0).map(|n| format!("{n} cores")));
    parts.extend(text(&host["qemu"]));
    parts
}

fn guest_parts(guest: &Value) -> Vec<String> {
    let details = &guest["details"];
    let mut parts = Vec::new();
    parts.extend(text(&guest["machine"]));
    parts.extend(text(&guest["accel"]).map(|accel| accel.to_uppercase()));
    parts.extend(guest["vcpus"].as_u64().map(|n| format!("{n} vCPUs")));
    parts.extend(guest["mem_bytes"].as_u64().map(size_text));
    parts.extend(text(&details["kernel"]).map(|kernel| format!("kernel {kernel}")));
    parts.extend(text(&details["fio"]));
    parts.extend(text(&guest["images"]).map(|images| format!("images on {images}")));
    parts
}

fn driver_settings(settings: &Value) -> Option<DriverSettings> {
    Some(DriverSettings {
        rounds: settings["rounds"].as_u64()?,
        time_s: settings["time_s"].as_u64()?,
        size_bytes: settings["size_bytes"].as_u64()?,
        preconditioned: settings["precondition"].as_array().is_some_and(|runs| !runs.is_empty()),
    })
}

fn zoned_settings(settings: &Value) -> Option<ZonedSettings> {
    Some(ZonedSettings {
        size_bytes: settings["size_bytes"].as_u64()?,
        zone_bytes: settings["zone_bytes"].as_u64()?,
        fill_percent: settings["fill_percent"].as_f64()?,
        btrfs_fill_percent: settings["btrfs_fill_percent"].as_f64()?,
    })
}

fn resilver_settings(settings: &Value) -> Option<ResilverSettings> {
    Some(ResilverSettings {
        rounds: settings["rounds"].as_u64()?,
        size_bytes: settings["size_bytes"].as_u64()?,
        data_bytes: settings["data_bytes"].as_u64()?,
    })
}

/// A byte count in binary units where it is a whole number of them
/// (`3 GiB`, `64 MiB`), else in MiB with one decimal.
pub(super) fn size_text(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn titles() -> Vec<String> {
        vec!["4 KiB random read, QD1".to_owned(), "512 KiB sequential read, QD32".to_owned()]
    }

    #[test]
    fn areas_follow_the_job() {
        let t = titles();
        assert_eq!(Area::of("4 KiB random read, QD1", &t), Area::Driver);
        assert_eq!(Area::of("512 KiB sequential read, QD32, against the floor", &t), Area::Driver);
        assert_eq!(Area::of("512 KiB sequential read, QD32, SGLs against PRPs", &t), Area::Driver);
        // A prefix of a title that is not a whole title is not the driver's.
        assert_eq!(Area::of("4 KiB random read, QD16", &t), Area::Other);
        assert_eq!(Area::of("seqwrite 256K QD8", &t), Area::Allocator);
        assert_eq!(Area::of("seqwrite flatness, QD1", &t), Area::Allocator);
        assert_eq!(Area::of("scrub engine efficiency", &t), Area::Scrub);
        assert_eq!(Area::of("resilver, verifying", &t), Area::Resilver);
        assert_eq!(Area::of("full resilver of 1331.0 MiB", &t), Area::Resilver);
        assert_eq!(Area::of("4 KiB random read, QD1", &[]), Area::Other);
    }

    #[test]
    fn a_row_keeps_the_bench_figures() {
        let row = json!({
            "job": "scrub, verifying", "unit": "mib_s",
            "ours": { "label": "scrub --qd 64", "value": 550.5 },
            "kernel": { "label": "btrfs scrub start -B", "value": null },
            "baseline": "kernel", "ratio": null,
            "target": { "ratio_at_least": 2.0, "met": null },
        });
        assert_eq!(
            row_from_json(0, &row).unwrap(),
            Row {
                job: "scrub, verifying".into(),
                unit: "mib_s".into(),
                ours_label: "scrub --qd 64".into(),
                ours: Some(550.5),
                anchor_label: "btrfs scrub start -B".into(),
                anchor: None,
                ratio: None,
                paired_ratio: None,
                target: Some(Target::Ratio { at_least: 2.0, met: None }),
            }
        );
        let flatness = json!({ "ours_at_least": 0.95, "met": true });
        assert_eq!(target_from_json(&flatness), Some(Target::Minimum { at_least: 0.95, met: Some(true) }));
        assert_eq!(target_from_json(&Value::Null), None);
    }

    #[test]
    fn a_row_without_its_labels_is_an_error() {
        let row = json!({ "job": "x", "unit": "iops", "ours": { "value": 1.0 }, "kernel": { "label": "k" } });
        assert_eq!(row_from_json(7, &row), Err(TablesError::Field("table[7].ours.label".into())));
        assert_eq!(Run::from_json(&json!({ "driver": {} })), Err(TablesError::Field("table".into())));
    }

    #[test]
    fn what_the_json_does_not_record_is_none() {
        let run = Run::from_json(&json!({ "table": [] })).unwrap();
        assert_eq!((run.date, run.commit, run.modified_files, run.runtime_s), (None, None, None, None));
        assert!(run.host.is_empty() && run.guest.is_empty() && run.driver_titles.is_empty());
        assert_eq!((run.driver, run.zoned, run.resilver), (None, None, None));
    }

    #[test]
    fn machine_parts_in_order() {
        let environment = json!({
            "host": { "cpu": "AMD EPYC", "cores": 2, "qemu": "QEMU emulator version 7.2.22", "kernel": "6.1" },
            "guest": {
                "vcpus": 2, "mem_bytes": 3u64 << 30, "accel": "tcg", "machine": "q35, intel-iommu",
                "images": "tmpfs (/dev/shm)", "details": { "kernel": "6.1.0-57-cloud-amd64", "fio": "fio-3.33" },
            },
        });
        assert_eq!(host_parts(&environment["host"]), ["AMD EPYC", "2 cores", "QEMU emulator version 7.2.22"]);
        assert_eq!(
            guest_parts(&environment["guest"]),
            [
                "q35, intel-iommu",
                "TCG",
                "2 vCPUs",
                "3 GiB",
                "kernel 6.1.0-57-cloud-amd64",
                "fio-3.33",
                "images on tmpfs (/dev/shm)"
            ]
        );
    }

    #[test]
    fn sizes_in_binary_units() {
        assert_eq!(size_text(3 << 30), "3 GiB");
        assert_eq!(size_text(256 << 20), "256 MiB");
        assert_eq!(size_text(1 << 40), "1 TiB");
        assert_eq!(size_text(1331 << 20), "1331 MiB");
        assert_eq!(size_text(1_395_700_000), "1331.0 MiB");
        assert_eq!(size_text(0), "0.0 MiB");
    }
}
