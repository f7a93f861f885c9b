//! `hack/bench --only scale`: the allocator's metadata at scale, on the
//! host, no VM. Builds and runs the allocator's `scale` example (release),
//! which fills simulated ZNS volumes of several capacities with extents of
//! several sizes and measures memory, commits, checkpoints and opens; see
//! `allocator/examples/scale/main.rs`. Its table goes to stdout, its
//! progress to stderr; `--json FILE` gets its rows with the environment.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use vm_rig::host_command;

/// What the scale run is told.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `--scale-capacities`, passed on as given.
    pub capacities: Option<String>,
    /// `--scale-extents`, passed on as given.
    pub extents: Option<String>,
    /// `--scale-metadata`, passed on as given.
    pub metadata: Option<String>,
    /// `--scale-checksums`, passed on as given.
    pub checksums: Option<String>,
    /// `--quick`: small capacities, for a look at the shape.
    pub quick: bool,
}

/// The build may compile the workspace in release mode from scratch.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);
/// Every point of the default plan, with room.
const RUN_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

fn example_args(options: &Options, json: &Path) -> Vec<String> {
    let mut args = vec!["--json".to_owned(), json.display().to_string()];
    let capacities = options.capacities.clone().or_else(|| options.quick.then(|| "16G,32G".to_owned()));
    if let Some(capacities) = capacities {
        args.extend(["--capacities".to_owned(), capacities]);
    }
    if let Some(extents) = &options.extents {
        args.extend(["--extents".to_owned(), extents.clone()]);
    }
    if let Some(metadata) = &options.metadata {
        args.extend(["--metadata".to_owned(), metadata.clone()]);
    }
    if let Some(checksums) = &options.checksums {
        args.extend(["--checksums".to_owned(), checksums.clone()]);
    }
    args
}

/// Runs the scale example and writes its rows, with the environment, to
/// `json` (a file, or `-` for stdout).
pub fn bench(options: &Options, json: Option<&str>, timeout: Option<Duration>) -> Result<(), (u8, String)> {
    let started = Instant::now();
    let root = vm_rig::workspace_root();
    eprintln!("bench: scale: building the allocator's scale example (release)");
    let build = host_command(
        Command::new("cargo").current_dir(&root).args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "zoned-allocator",
            "--example",
            "scale",
        ]),
        BUILD_TIMEOUT,
    )
    .map_err(|e| (2, format!("building the scale example: {e}")))?;
    if !build.status.success() {
        return Err((2, format!("building the scale example failed:\n{}", build.stderr)));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let binary = target.join("release/examples/scale");
    let rows_file = target.join(format!("bench/scale-{}.json", std::process::id()));
    std::fs::create_dir_all(rows_file.parent().expect("a directory")).map_err(|e| (2, e.to_string()))?;
    let args = example_args(options, &rows_file);
    eprintln!("bench: scale: {} {}", binary.display(), args.join(" "));
    // Inherited stdout and stderr: the table and the progress show as
    // they come, over a run of many minutes.
    // With the JSON on stdout, the table goes to stderr.
    let mut command = Command::new(&binary);
    command.args(&args);
    if json == Some("-") {
        command.stdout(std::io::stderr());
    }
    let mut child = command.spawn().map_err(|e| (2, format!("{}: {e}", binary.display())))?;
    let deadline = Instant::now() + timeout.unwrap_or(RUN_TIMEOUT);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err((
                    1,
                    format!("the scale run passed its time limit of {:?}", timeout.unwrap_or(RUN_TIMEOUT)),
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err((2, format!("waiting for the scale run: {e}"))),
        }
    };
    if !status.success() {
        return Err((1, format!("the scale run failed ({status})")));
    }
    let text = std::fs::read_to_string(&rows_file).map_err(|e| (2, format!("{}: {e}", rows_file.display())))?;
    let _ = std::fs::remove_file(&rows_file);
    let measured: Value = serde_json::from_str(&text).map_err(|e| (2, format!("the scale run's JSON: {e}")))?;
    let report = json!({
        "command": super::invocation(std::env::args(), std::env::var("HACK_BENCH").ok()),
        "environment": { "host": super::host_environment(), "source": super::source_tree() },
        "settings": measured["settings"],
        "rows": measured["rows"],
        "runtime_s": started.elapsed().as_secs(),
    });
    let json_text = serde_json::to_string_pretty(&report).expect("a JSON value serializes");
    match json {
        Some("-") => super::out(&format!("{json_text}\n")),
        Some(path) => {
            std::fs::write(path, json_text + "\n").map_err(|e| (2, format!("{path}: {e}")))?;
            eprintln!("bench: wrote {path}");
        }
        None => {}
    }
    eprintln!("bench: scale: done in {} min {} s", started.elapsed().as_secs() / 60, started.elapsed().as_secs() % 60);
    Ok(())
}
