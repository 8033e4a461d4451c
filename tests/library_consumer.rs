//! The mapping engine used as an outside Rust developer would: a new Cargo
//! project outside the workspace, depending by path on the library crates
//! only (`lotus-map`, `lotus-core`, `lotus-sys` for its writer, the backends), maps a fixture op live
//! through perf and builds a mapping from the fixture reports; its results
//! are checked against `lotus map`'s on the same inputs. Also the
//! `lotus-map` example that maps an op file, run as a user would. And the
//! trace runner the same way: a second project outside the workspace,
//! depending on `lotus-runner` alone, runs a tiny Python job traced and
//! the folder it leaves is checked for the job's logs.
//!
//! The consumer is built `--offline` with the workspace's `Cargo.lock`
//! into `target/consumer` (shared from run to run), so it downloads
//! nothing and rebuilds only what changed.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{control_lib, fixture, lotus, python, root, s};
use serde_json::Value;

/// The op mapped live, and the function its window must show.
const OP: &str = "ops/RandomHorizontalFlip.py";
const OP_NAME: &str = "RandomHorizontalFlip";
const KERNEL: &str = "ImagingFlipLeftRight";
/// The vendor reports mapped, and their backend.
const REPORTS: &str = "reports/vtune/hotspots";

/// Few samples: the window's length is not what is compared.
const MIN_SAMPLES: &str = "300";
const MIN_WINDOW_MS: u64 = 100;

/// A line on the test's own stderr, which `cargo test` does not capture.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The manifest of a consumer named `name`: path dependencies on the
/// library crates `deps` (name, folder).
fn manifest(name: &str, deps: &[(&str, &str)]) -> String {
    let deps: String = deps
        .iter()
        .map(|(dep, dir)| {
            format!(
                "{dep} = {{ path = {:?} }}\n",
                root().join(dir).display().to_string()
            )
        })
        .collect();
    format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n\
         # Not part of any workspace above the temporary folder.\n[workspace]\n\n[dependencies]\n{deps}",
    )
}

/// The mapping consumer's dependencies.
const MAP_DEPS: &[(&str, &str)] = &[
    ("lotus-map", "lotus-map"),
    ("lotus-core", "lotus-core"),
    ("lotus-sys", "lotus-sys"),
    ("lotus-backend-perf", "backends/linux-perf"),
    ("lotus-backend-vtune", "backends/vtune"),
];

/// The consumer's program: `lotus-consumer OP REPORTS PYTHON CONTROL_LIB
/// OUT` writes OUT/live.json and OUT/reports.json.
const CONSUMER_MAIN: &str = r#"
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

// Naming the backend crates keeps their registrations.
use lotus_backend_perf as _;
use lotus_backend_vtune as _;
use lotus_map::live::{map_live, LiveOptions};
use lotus_map::output::{render, Format, NameWidth};
use lotus_map::progress::NoProgress;
use lotus_map::from_reports;
use lotus_sys::write_file;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [op, reports, python, control_lib, out] = &args[..] else {
        return Err("usage: lotus-consumer OP REPORTS PYTHON CONTROL_LIB OUT".into());
    };
    let min_samples: u64 = std::env::var("CONSUMER_MIN_SAMPLES")?.parse()?;
    let min_window: u64 = std::env::var("CONSUMER_MIN_WINDOW_MS")?.parse()?;

    // (a) one op, live, through perf.
    let perf = lotus_core::backend("perf")?;
    let opts = LiveOptions::new(python, control_lib)
        .with_runs(1)
        .with_min_samples(min_samples)
        .with_min_window(Duration::from_millis(min_window));
    let live = map_live(perf.as_ref(), &[op.clone()], &opts, &mut NoProgress, &AtomicBool::new(false))?;
    if !live.failures.is_empty() {
        return Err(format!("live: {:?}", live.failures).into());
    }
    let json = render(&live.into_mapping(), Format::Json, 0, NameWidth::Full)?;
    write_file(&out.join("live.json"), json.as_bytes())?;

    // (b) the vendor reports of a folder.
    let vtune = lotus_core::backend("vtune")?;
    let mapping = from_reports::build(vtune.as_ref(), reports, lotus_core::MergeRule::Union)?;
    let json = render(&mapping.into_mapping(), Format::Json, 0, NameWidth::Full)?;
    write_file(&out.join("reports.json"), json.as_bytes())?;
    Ok(())
}
"#;

/// Runs cargo for the consumer in `dir`, offline, into the shared
/// `target/consumer`.
fn cargo(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO"))
        .args(args)
        .arg("--offline")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", root().join("target/consumer"))
        .output()
        .expect("runs cargo")
}

/// Makes the consumer project `name` (its dependencies `deps`, its
/// `main.rs`) in a fresh temporary folder (outside the workspace), builds
/// it and returns the folder and its binary; the library it is about,
/// `library`, must be among the crates it links.
fn build_consumer(
    name: &str,
    deps: &[(&str, &str)],
    main: &str,
    library: &str,
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    assert!(
        !dir.path().starts_with(root()),
        "the consumer must be outside the workspace"
    );
    std::fs::create_dir(dir.path().join("src")).expect("mkdir src");
    std::fs::write(dir.path().join("Cargo.toml"), manifest(name, deps)).expect("manifest");
    std::fs::write(dir.path().join("src/main.rs"), main).expect("main.rs");
    // The workspace's resolution: the same crate versions, nothing to
    // fetch, and what target/consumer already holds is reused.
    std::fs::copy(root().join("Cargo.lock"), dir.path().join("Cargo.lock")).expect("lock");
    let started = std::time::Instant::now();
    ok(
        &cargo(dir.path(), &["build", "--quiet"]),
        "cargo build (consumer)",
    );
    say(&format!(
        "consumer crate {name}: built in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    let tree = ok(
        &cargo(dir.path(), &["tree", "--prefix", "none", "-e", "normal"]),
        "cargo tree (consumer)",
    );
    let mut lines: Vec<&str> = tree.lines().filter(|l| !l.trim().is_empty()).collect();
    lines.sort_unstable();
    lines.dedup();
    // `sort -u` keeps a crate's first line and its repeats marked `(*)`
    // apart; the distinct crates, the consumer left out, are fewer.
    let mut crates: Vec<&str> = lines
        .iter()
        .map(|l| l.trim_end_matches(" (*)"))
        .filter(|l| !l.starts_with(&format!("{name} ")))
        .collect();
    crates.sort_unstable();
    crates.dedup();
    assert!(
        crates.iter().any(|l| l.starts_with(&format!("{library} "))),
        "{tree}"
    );
    say(&format!(
        "consumer crate {name}: `cargo tree --prefix none -e normal | sort -u | wc -l` = {}; {} distinct crates besides the consumer",
        lines.len(),
        crates.len()
    ));
    let bin = root().join("target/consumer/debug").join(name);
    assert!(bin.is_file(), "no {}", bin.display());
    (dir, bin)
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
    k.sort();
    k
}

/// The op named `name` in a mapping.
fn op<'a>(mapping: &'a Value, name: &str) -> &'a Value {
    mapping["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no op {name} in {mapping}"))
}

fn has_function(op: &Value, function: &str) -> bool {
    op["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .any(|f| f["function"] == function)
}

/// A mapping without what differs from host to host and run to run (the
/// `environment`: host, versions, interpreter).
fn without_host(mut v: Value) -> Value {
    v.as_object_mut().expect("object").remove("environment");
    v
}

#[test]
fn a_crate_outside_the_workspace_maps_as_lotus_map_does() {
    let python = python();
    let (_project, consumer) =
        build_consumer("lotus-consumer", MAP_DEPS, CONSUMER_MAIN, "lotus-map");
    let out = tempfile::tempdir().expect("temp dir");
    let op_file = fixture(OP);
    let reports = fixture(REPORTS);
    ok(
        &Command::new(&consumer)
            .arg(&op_file)
            .arg(&reports)
            .arg(&python)
            .arg(control_lib())
            .arg(out.path())
            .env("CONSUMER_MIN_SAMPLES", MIN_SAMPLES)
            .env("CONSUMER_MIN_WINDOW_MS", MIN_WINDOW_MS.to_string())
            .output()
            .expect("runs the consumer"),
        "lotus-consumer",
    );

    let lotus_live = out.path().join("lotus-live.json");
    let lotus_reports = out.path().join("lotus-reports.json");
    ok(
        &lotus(&[
            "map",
            "--backend",
            "perf",
            s(&op_file),
            "--python",
            s(&python),
            "--runs",
            "1",
            "--min-samples",
            MIN_SAMPLES,
            "--min-window-ms",
            &MIN_WINDOW_MS.to_string(),
            "--out",
            s(&lotus_live),
        ]),
        "lotus map (live)",
    );
    ok(
        &lotus(&[
            "map",
            "--backend",
            "vtune",
            "--from-reports",
            s(&reports),
            "--out",
            s(&lotus_reports),
        ]),
        "lotus map --from-reports",
    );

    // The reports: the same mapping, field for field.
    let mine = read_json(&out.path().join("reports.json"));
    let theirs = read_json(&lotus_reports);
    assert!(!mine["ops"].as_array().expect("ops").is_empty(), "{mine}");
    assert_eq!(without_host(mine), without_host(theirs));

    // Live: the same op with its kernel, and the same fields at every
    // level (the samples differ from run to run).
    let mine = read_json(&out.path().join("live.json"));
    let theirs = read_json(&lotus_live);
    assert_eq!(keys(&mine), keys(&theirs));
    assert_eq!(keys(&mine["settings"]), keys(&theirs["settings"]));
    assert_eq!(keys(&mine["environment"]), keys(&theirs["environment"]));
    assert_eq!(mine["schema"], theirs["schema"]);
    assert_eq!(mine["backend"], "perf");
    assert_eq!(mine["settings"], theirs["settings"]);
    let (a, b) = (op(&mine, OP_NAME), op(&theirs, OP_NAME));
    assert_eq!(keys(a), keys(b));
    assert_eq!(mine["ops"].as_array().map(Vec::len), Some(1), "{mine}");
    assert!(has_function(a, KERNEL), "consumer: no {KERNEL} in {a}");
    assert!(has_function(b, KERNEL), "lotus map: no {KERNEL} in {b}");
    let first = |o: &Value| keys(&o["functions"][0]);
    assert_eq!(first(a), first(b));
}

/// `lotus-map/examples/map_op.rs`, built by cargo as a user would build
/// it (not the copy `cargo test --all-targets` builds as a test harness).
fn map_op_example() -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--example",
            "map_op",
            "--package",
            "lotus-map",
        ])
        .arg("--message-format=json")
        .current_dir(root())
        .output()
        .expect("runs cargo");
    let stdout = ok(&out, "cargo build --example map_op");
    common::cargo_artifact::example_executable(&stdout, "map_op")
}

#[test]
fn the_map_op_example_maps_an_op_file_through_the_library() {
    let out = Command::new(map_op_example())
        .arg(fixture(OP))
        .env("LOTUS_PYTHON", python())
        .env("LOTUS_CONTROL_LIB", control_lib())
        .env("LOTUS_EXAMPLE_RUNS", "2")
        .env("LOTUS_EXAMPLE_MIN_SAMPLES", MIN_SAMPLES)
        .output()
        .expect("runs the example");
    let stdout = ok(&out, "map_op");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mapping: Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(mapping["schema"], "lotus.mapping/1");
    assert_eq!(mapping["settings"]["runs"], 2);
    let flip = op(&mapping, OP_NAME);
    assert_eq!(flip["runs"], 2, "{flip}");
    assert!(has_function(flip, KERNEL), "no {KERNEL} in {flip}");
    // Progress went to the example's Progress, one line per run (the
    // harness floor's and the op's two).
    let runs = stderr
        .lines()
        .filter(|l| {
            // "OP run N/M: ..." (warnings name runs too: "run 1: ...").
            l.split(" run ").nth(1).is_some_and(|rest| {
                rest.split_once(':').is_some_and(|(n, _)| {
                    n.contains('/') && n.chars().all(|c| c.is_ascii_digit() || c == '/')
                })
            })
        })
        .count();
    assert_eq!(runs, 3, "{stderr}");
}

/// The trace runner's consumer: `lotus-runner-consumer OUT CMD...` runs
/// CMD traced into OUT (logs named `consumer_...`), its messages on
/// stderr, and prints the logs of the run, one path a line.
const RUNNER_MAIN: &str = r#"
use lotus_runner::{run_traced, MessageKind, Progress, TraceOptions};

/// The runner's messages on stderr, as `lotus trace run` prints them.
struct Stderr;

impl Progress for Stderr {
    fn message(&mut self, kind: MessageKind, text: &str) {
        eprintln!("{kind:?}: {text}");
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, command @ ..] = &args[..] else {
        return Err("usage: lotus-runner-consumer OUT CMD...".into());
    };
    let options = TraceOptions::new(out, command.to_vec()).with_prefix("consumer");
    let run = run_traced(&options, &mut Stderr)?;
    if !run.failures.is_empty() {
        return Err(format!("an incomplete trace: {:?}", run.failures).into());
    }
    if !run.status.success() {
        return Err(format!("the job failed: {}", run.status).into());
    }
    for log in &run.logs {
        println!("{}", log.display());
    }
    Ok(())
}
"#;

/// The Python of the runner's consumer: `$LOTUS_PYTHON`, or `None` (the
/// test is skipped, said by name).
fn runner_python(test: &str) -> Option<PathBuf> {
    let python = std::env::var_os("LOTUS_PYTHON").map(PathBuf::from);
    if python.is_none() {
        say(&format!("skipped: {test}: LOTUS_PYTHON is not set"));
    }
    python
}

#[test]
fn a_crate_outside_the_workspace_runs_a_job_traced_through_lotus_runner() {
    let Some(python) =
        runner_python("a_crate_outside_the_workspace_runs_a_job_traced_through_lotus_runner")
    else {
        return;
    };
    let (_project, consumer) = build_consumer(
        "lotus-runner-consumer",
        &[("lotus-runner", "lotus-runner")],
        RUNNER_MAIN,
        "lotus-runner",
    );
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("trace");
    let report = tmp.path().join("report.json");
    let stdout = ok(
        &Command::new(&consumer)
            .arg(&out)
            .arg(&python)
            .arg(fixture("trace/pipeline.py"))
            .args(["--workers", "1", "--batches", "2", "--batch-size", "2"])
            .args(["--step-ms", "1", "--report"])
            .arg(&report)
            .output()
            .expect("runs the consumer"),
        "lotus-runner-consumer",
    );

    // The job's own account: its main process and its worker.
    let job = read_json(&report);
    let main_pid = job["main_pid"].as_u64().expect("main_pid");
    let workers: Vec<u64> = job["worker_pids"]
        .as_array()
        .expect("worker_pids")
        .iter()
        .map(|p| p.as_u64().expect("a pid"))
        .collect();
    assert_eq!(workers.len(), 1, "{job}");

    // The logs the run names are in the folder, one per process of the
    // job, each with the tracer's header.
    let out = out.canonicalize().expect("the trace folder");
    let mut logs: Vec<PathBuf> = stdout.lines().map(PathBuf::from).collect();
    logs.sort();
    let mut expected = vec![
        out.join(format!("consumer_main_pid_{main_pid}")),
        out.join(format!("consumer_worker_pid_{}", workers[0])),
    ];
    expected.sort();
    assert_eq!(logs, expected, "{stdout}");
    for log in &logs {
        let text = std::fs::read_to_string(log).expect("a log");
        assert!(
            text.starts_with("#lotus-trace"),
            "{}: {text}",
            log.display()
        );
        assert!(
            text.lines().any(|l| l.starts_with('S')),
            "{}: no event: {text}",
            log.display()
        );
    }
    // The run's record beside them.
    let record = read_json(&out.join("consumer.run"));
    assert_eq!(record["schema"], "lotus.run/1");
    assert_eq!(record["command"][0], s(&python));
}
