//! `hack/bench-tables`: BENCHMARKS.md's tables of the latest figures from
//! `hack/bench --json FILE`'s output; see `nvme_report::bench_tables`.

use nvme_report::bench_tables::{render, splice, Run, TablesError};
use std::process::ExitCode;

const USAGE: &str = "\
usage: hack/bench-tables [--write PAGE | --check PAGE] JSON...

Prints markdown from hack/bench's JSON (one file per run: the date, commit
and machine, then one table per area, each figure beside its anchor).
--write PAGE puts it between PAGE's lines <!-- bench-tables:begin --> and
<!-- bench-tables:end -->; --check PAGE exits 1 when what is there differs.

  hack/bench-tables --write BENCHMARKS.md bench/latest.json

Exit status: 0, 1 when --check finds the page out of date, 2 for bad
options, an unreadable file or JSON that is not hack/bench's.";

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Mode {
    Print,
    Write(String),
    Check(String),
}

#[derive(Debug, PartialEq, Eq)]
struct Options {
    mode: Mode,
    json_paths: Vec<String>,
}

/// Why the tables were not made, placed or found up to date.
#[derive(Debug)]
enum CliError {
    Usage(String),
    Io {
        path: String,
        error: std::io::Error,
    },
    Json {
        path: String,
        error: serde_json::Error,
    },
    Tables {
        path: String,
        error: TablesError,
    },
    /// `--check`: the page's block is not what the JSON gives.
    Drift {
        page: String,
    },
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Usage(message) => write!(f, "{message}\n\n{USAGE}"),
            CliError::Io { path, error } => write!(f, "{path}: {error}"),
            CliError::Json { path, error } => write!(f, "{path}: {error}"),
            CliError::Tables { path, error } => write!(f, "{path}: {error}"),
            CliError::Drift { page } => write!(
                f,
                "{page}: its tables differ from the JSON; run hack/bench-tables --write {page} with the same JSON"
            ),
        }
    }
}

impl CliError {
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Drift { .. } => 1,
            _ => 2,
        }
    }
}

/// `None` for `--help`.
fn parse_args(args: Vec<String>) -> Result<Option<Options>, CliError> {
    let mut mode = Mode::Print;
    let mut json_paths = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut page = |flag: &str| args.next().ok_or_else(|| CliError::Usage(format!("{flag} needs a page")));
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--write" | "--check" if mode != Mode::Print => {
                return Err(CliError::Usage("one of --write and --check, once".into()))
            }
            "--write" => mode = Mode::Write(page("--write")?),
            "--check" => mode = Mode::Check(page("--check")?),
            flag if flag.starts_with('-') => return Err(CliError::Usage(format!("unknown option {flag}"))),
            _ => json_paths.push(arg),
        }
    }
    if json_paths.is_empty() {
        return Err(CliError::Usage("no JSON file given".into()));
    }
    Ok(Some(Options { mode, json_paths }))
}

fn read(path: &str) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|error| CliError::Io { path: path.to_owned(), error })
}

fn tables(json_paths: &[String]) -> Result<String, CliError> {
    let runs = json_paths
        .iter()
        .map(|path| {
            let json =
                serde_json::from_str(&read(path)?).map_err(|error| CliError::Json { path: path.clone(), error })?;
            Run::from_json(&json).map_err(|error| CliError::Tables { path: path.clone(), error })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(render(&runs))
}

fn spliced(page: &str, tables: &str) -> Result<(String, String), CliError> {
    let text = read(page)?;
    let new = splice(&text, tables).map_err(|error| CliError::Tables { path: page.to_owned(), error })?;
    Ok((text, new))
}

fn run(options: &Options) -> Result<(), CliError> {
    let tables = tables(&options.json_paths)?;
    match &options.mode {
        Mode::Print => {
            use std::io::Write as _;
            // A reader that went away (`| head`) is not worth a panic.
            let _ = std::io::stdout().write_all(tables.as_bytes());
        }
        Mode::Write(page) => {
            let (old, new) = spliced(page, &tables)?;
            let changed = old != new;
            if changed {
                std::fs::write(page, new).map_err(|error| CliError::Io { path: page.clone(), error })?;
            }
            eprintln!("bench-tables: {page}: {}", if changed { "rewritten" } else { "up to date" });
        }
        Mode::Check(page) => {
            let (old, new) = spliced(page, &tables)?;
            if old != new {
                return Err(CliError::Drift { page: page.clone() });
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let outcome = parse_args(std::env::args().skip(1).collect()).and_then(|options| match options {
        None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(options) => run(&options),
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench-tables: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Options>, CliError> {
        parse_args(args.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn modes_and_files() {
        let o = parse(&["a.json"]).unwrap().unwrap();
        assert_eq!(o, Options { mode: Mode::Print, json_paths: vec!["a.json".into()] });
        let o = parse(&["--write", "B.md", "a.json", "b.json"]).unwrap().unwrap();
        assert_eq!(o, Options { mode: Mode::Write("B.md".into()), json_paths: vec!["a.json".into(), "b.json".into()] });
        let o = parse(&["a.json", "--check", "B.md"]).unwrap().unwrap();
        assert_eq!(o.mode, Mode::Check("B.md".into()));
        assert!(parse(&["--help"]).unwrap().is_none());
    }

    #[test]
    fn bad_usage_exits_2() {
        for bad in [
            &[][..],
            &["--write", "B.md"],
            &["--check"],
            &["--bogus", "a.json"],
            &["--write", "B.md", "--check", "B.md", "a.json"],
        ] {
            let error = parse(bad).unwrap_err();
            assert!(matches!(error, CliError::Usage(_)), "{bad:?}");
            assert_eq!(error.exit_code(), 2);
        }
        assert_eq!(CliError::Drift { page: "B.md".into() }.exit_code(), 1);
    }
}
