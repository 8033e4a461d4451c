//! ITT, both ways:
//!
//! - Under the VTune backend the control library calls `__itt_resume` /
//!   `__itt_pause` / `__itt_detach` (the `ittapi` crate), which reach the
//!   collector `INTEL_LIBITTNOTIFY64` names. A stand-in collector (a C
//!   library exporting `__itt_api_init`, built here) records the calls.
//! - The control library is itself an ITT collector: a script that uses
//!   the `ittapi` Python package runs under `--backend perf` with its ITT
//!   windows turned into lotus windows.
//! - `lotus map --backend vtune` against a stand-in `vtune` on PATH gives the
//!   mapping `--from-reports` gives on the same reports; without vtune it
//!   fails saying why.
//!
//! Python: `$LOTUS_PYTHON`, else the workspace's `.venv` (scripts/setup.sh
//! installs Pillow, numpy and ittapi there).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::root;
use crate::map_harness as harness;
use harness::{HarnessArgs, HarnessResult};
use lotus_control::host::ControlHost;
use lotus_protocol::Reply;
use serde_json::Value;

const PATIENCE: Duration = Duration::from_secs(120);

/// The Python the tests use; fails saying what to install when it lacks
/// Pillow, numpy or ittapi.
fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let p = std::env::var_os("LOTUS_PYTHON")
                .map(PathBuf::from)
                .unwrap_or_else(|| root().join(".venv/bin/python"));
            let out = Command::new(&p)
                .args(["-c", "import PIL, numpy, ittapi"])
                .output();
            let ok = out.as_ref().map(|o| o.status.success()).unwrap_or(false);
            assert!(
                ok,
                "{} cannot import Pillow, numpy and ittapi ({}): run `bash scripts/setup.sh` \
                 (or set LOTUS_PYTHON to a Python that has them)",
                p.display(),
                out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_else(|e| e.to_string())
            );
            p
        })
        .clone()
}

/// The stand-in tools: the ITT collector (built with the C compiler) and a
/// folder holding the stand-in `vtune`.
struct Tools {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    collector: PathBuf,
}

fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let data = root().join("backends/vtune/tests/data");
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::copy(data.join("standin_vtune.sh"), bin.join("vtune")).unwrap();
        let collector = dir.path().join("libitt_standin.so");
        let out = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
            .args(["-shared", "-fPIC", "-o"])
            .arg(&collector)
            .arg(data.join("itt_standin_collector.c"))
            .output()
            .expect("a C compiler (cc) to build the stand-in ITT collector");
        assert!(
            out.status.success(),
            "building the stand-in collector failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tools {
            _dir: dir,
            bin,
            collector,
        }
    })
}

fn control_lib() -> PathBuf {
    common::control_lib()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// One harness run without a control channel (the VTune backend's way).
struct Plain {
    output: Output,
    result: Option<HarnessResult>,
}

impl Plain {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

fn harness_args(op_file: &Path, result: &Path, warmup: u32) -> HarnessArgs {
    HarnessArgs {
        op_file: op_file.to_path_buf(),
        warmup,
        window: Duration::from_millis(30),
        min_iterations: 4,
        result: result.to_path_buf(),
        empty: false,
        name: None,
        threads: None,
        cwd: None,
        runs: None,
        run_timeout: None,
        unsampled: None,
    }
}

/// [`run_vtune_harness`] with VTune's collector stand-in loaded through
/// ITT, logging what reached it to `log`.
fn run_under_collector(op_file: &Path, warmup: u32, log: &Path) -> Plain {
    run_vtune_harness(
        op_file,
        warmup,
        &[
            ("INTEL_LIBITTNOTIFY64", tools().collector.as_os_str()),
            ("LOTUS_TEST_ITT_LOG", log.as_os_str()),
        ],
    )
}

/// Runs the harness on `op_file` with `LOTUS_BACKEND=vtune`, no channel,
/// and `env` (INTEL_LIBITTNOTIFY64 is unset unless `env` sets it).
fn run_vtune_harness(op_file: &Path, warmup: u32, env: &[(&str, &std::ffi::OsStr)]) -> Plain {
    let files = harness::write_harness().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let result = dir.path().join("result.json");
    let mut cmd = Command::new(python());
    cmd.arg(&files.harness)
        .args(harness_args(op_file, &result, warmup).to_args())
        .env(harness::ENV_CONTROL_LIB, control_lib())
        .env("LOTUS_BACKEND", "vtune")
        .env_remove("LOTUS_CONTROL_FDS")
        .env_remove("INTEL_LIBITTNOTIFY64")
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().unwrap();
    let result = result
        .exists()
        .then(|| HarnessResult::read(&result).unwrap());
    Plain { output, result }
}

/// An op that appends "op" to $LOTUS_TEST_ITT_LOG (the stand-in
/// collector's log) per call.
const LOGGING_OP: &str = r#"
import os

def setup():
    return open(os.environ["LOTUS_TEST_ITT_LOG"], "ab", buffering=0)

def op(log):
    log.write(b"op\n")
"#;

#[test]
fn under_vtune_the_harness_calls_itt_around_the_op_calls_only() {
    let ops = tempfile::tempdir().unwrap();
    let op_file = write(ops.path(), "Logged.py", LOGGING_OP);
    let log = ops.path().join("itt.log");
    let run = run_under_collector(&op_file, 5, &log);
    assert_eq!(
        run.output.status.code(),
        Some(0),
        "harness failed:\n{}",
        run.stderr()
    );
    let result = run.result.expect("a result");
    assert_eq!(result.error, None);
    let iterations = result.iterations.expect("iterations") as usize;
    assert!(iterations >= 4);
    let mut want = vec!["op"; 5];
    want.push("resume");
    want.extend(std::iter::repeat_n("op", iterations));
    want.push("pause");
    assert_eq!(read_lines(&log), want);
}

#[test]
fn under_vtune_a_detach_is_final() {
    let ops = tempfile::tempdir().unwrap();
    let script = write(
        ops.path(),
        "Detaching.py",
        r#"
import os
import lotus

def note(what):
    with open(os.environ["LOTUS_TEST_ITT_LOG"], "a") as f:
        f.write(what + "\n")

lotus.resume("Detaching")
note("op")
lotus.pause()
lotus.detach()
lotus.pause()  # nothing is open: a no-op
try:
    lotus.resume("again")
except RuntimeError as e:
    note("refused: " + str(e))
"#,
    );
    let log = ops.path().join("itt.log");
    let run = run_under_collector(&script, 0, &log);
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr());
    let lines = read_lines(&log);
    assert_eq!(lines[..4], ["resume", "op", "pause", "detach"], "{lines:?}");
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(
        lines[4].starts_with("refused: lotus_resume called after lotus_detach"),
        "{lines:?}"
    );
}

/// The study's Intel and AMD script patterns under VTune, with neither
/// itt-python nor uProf's binding installed: the harness's stand-ins open
/// the windows, which reach VTune's collector through ITT.
#[test]
fn under_vtune_the_study_scripts_reach_itt_through_the_stand_ins() {
    let ops = tempfile::tempdir().unwrap();
    for (name, script) in [
        (
            "IntelStudy.py",
            "import os, itt\nfor i in range(3):\n    if i == 2:\n        itt.resume()\n    open(os.environ['LOTUS_TEST_ITT_LOG'], 'a').write('op\\n')\n    if i == 2:\n        itt.detach()\n",
        ),
        (
            "AmdStudy.py",
            "import os, amdprofilecontrol as a\nfor i in range(3):\n    if i == 2:\n        assert a.resume(1)\n    open(os.environ['LOTUS_TEST_ITT_LOG'], 'a').write('op\\n')\n    if i == 2:\n        assert a.pause(1)\n",
        ),
    ] {
        let script = write(ops.path(), name, script);
        let log = ops.path().join(format!("{name}.log"));
        let run = run_under_collector(&script, 0, &log);
        assert_eq!(run.output.status.code(), Some(0), "{name}: {}", run.stderr());
        let lines = read_lines(&log);
        let end = if name.starts_with("Intel") {
            vec!["op", "op", "resume", "op", "pause", "detach"]
        } else {
            vec!["op", "op", "resume", "op", "pause"]
        };
        assert_eq!(lines, end, "{name}");
    }
}

#[test]
fn under_vtune_without_a_collector_the_first_call_fails_saying_why() {
    let ops = tempfile::tempdir().unwrap();
    let op_file = write(ops.path(), "Logged.py", LOGGING_OP);
    let log = ops.path().join("itt.log");
    let run = run_vtune_harness(&op_file, 2, &[("LOTUS_TEST_ITT_LOG", log.as_os_str())]);
    assert_eq!(
        run.output.status.code(),
        Some(harness::EXIT_CONTROL),
        "{}",
        run.stderr()
    );
    let error = run.result.and_then(|r| r.error).unwrap_or_default();
    assert!(error.contains("INTEL_LIBITTNOTIFY64 is not set"), "{error}");
    assert!(
        error.contains("vtune -collect hotspots -start-paused"),
        "{error}"
    );
}

#[test]
fn under_vtune_the_control_library_refuses_to_be_its_own_collector() {
    let ops = tempfile::tempdir().unwrap();
    let op_file = write(ops.path(), "Logged.py", LOGGING_OP);
    let log = ops.path().join("itt.log");
    let lib = control_lib();
    let run = run_vtune_harness(
        &op_file,
        2,
        &[
            ("INTEL_LIBITTNOTIFY64", lib.as_os_str()),
            ("LOTUS_TEST_ITT_LOG", log.as_os_str()),
        ],
    );
    assert_eq!(
        run.output.status.code(),
        Some(harness::EXIT_CONTROL),
        "{}",
        run.stderr()
    );
    let error = run.result.and_then(|r| r.error).unwrap_or_default();
    assert!(error.contains("names the lotus control library"), "{error}");
}

/// Runs the harness on a script under `LOTUS_BACKEND=perf` with this test
/// as the lotus side of the channel and the control library as the ITT
/// collector. Returns each request with the ops logged when it arrived.
fn run_itt_script_on_the_channel(
    script: &str,
) -> (Vec<(String, usize)>, Output, tempfile::TempDir) {
    let ops = tempfile::tempdir().unwrap();
    let op_file = write(ops.path(), "IttScript.py", script);
    let log = ops.path().join("ops.log");
    let files = harness::write_harness().unwrap();
    let result = ops.path().join("result.json");
    let mut cmd = Command::new(python());
    cmd.arg(&files.harness)
        .args(harness_args(&op_file, &result, 0).to_args())
        .env(harness::ENV_CONTROL_LIB, control_lib())
        .env("INTEL_LIBITTNOTIFY64", control_lib())
        .env("LOTUS_BACKEND", "perf")
        .env("OPS_LOG", &log)
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut host = ControlHost::new().unwrap();
    host.configure(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    host.close_child_ends();
    let mut requests = Vec::new();
    loop {
        match host.recv_line(Some(PATIENCE)) {
            Ok(Some(line)) => {
                requests.push((line.trim().to_string(), read_lines(&log).len()));
                host.reply(&Reply::Ok).unwrap();
            }
            Ok(None) => break,
            Err(e) => {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "control channel: {e}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    let output = child.wait_with_output().unwrap();
    (requests, output, ops)
}

/// A script (no top-level `op`) in the original Lotus style: warm-up calls,
/// then an ITT window around three more.
const ITT_SCRIPT_HEAD: &str = r#"
import os
import ittapi

log = open(os.environ["OPS_LOG"], "ab", buffering=0)

def work():
    log.write(b"op\n")

work(); work()        # warm-up, outside the window
ittapi.resume()
work(); work(); work()
"#;

#[test]
fn under_perf_an_itt_script_switches_lotus_windows() {
    let script = format!("{ITT_SCRIPT_HEAD}ittapi.pause()\nwork()\nittapi.detach()\nwork()\n");
    let (requests, output, dir) = run_itt_script_on_the_channel(&script);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        requests,
        [
            ("resume".to_string(), 2),
            ("pause".to_string(), 5),
            ("detach".to_string(), 6)
        ]
    );
    assert_eq!(read_lines(&dir.path().join("ops.log")).len(), 7);
}

#[test]
fn under_perf_an_itt_detach_closes_an_open_window_first() {
    let script = format!("{ITT_SCRIPT_HEAD}ittapi.detach()\nwork()\n");
    let (requests, output, dir) = run_itt_script_on_the_channel(&script);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        requests,
        [
            ("resume".to_string(), 2),
            ("pause".to_string(), 5),
            ("detach".to_string(), 5)
        ]
    );
    assert_eq!(read_lines(&dir.path().join("ops.log")).len(), 6);
}

// ---------------------------------------------------------------------------
// `lotus map` end to end.

fn lotus(args: &[&str], env: &[(&str, OsString)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(args)
        .env("LOTUS_PYTHON", python())
        .env_remove("INTEL_LIBITTNOTIFY64")
        .env_remove("VTUNE_PROFILER_DIR")
        .env_remove("LOTUS_CONTROL_LIB")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn lotus_ok(args: &[&str], env: &[(&str, OsString)]) -> Output {
    let out = lotus(args, env);
    assert!(
        out.status.success(),
        "lotus {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// function|module -> samples, for one op of a mapping.
fn functions(mapping: &Value, op: &str) -> BTreeMap<String, f64> {
    let op = mapping["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == op)
        .unwrap_or_else(|| panic!("no op {op} in {mapping}"));
    op["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                format!(
                    "{}|{}",
                    f["function"].as_str().unwrap(),
                    f["module"].as_str().unwrap()
                ),
                f["samples"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// Whether a function|module key is the IttFlip script's work outside its
/// window: the JPEG decode, numpy's sort and random numbers.
fn outside_work(key: &str) -> bool {
    let (function, module) = key.split_once('|').unwrap();
    let function = function.to_lowercase();
    module.contains("libjpeg")
        || module.contains("_pcg64")
        || (module.contains("_multiarray_umath")
            && (function.contains("sort") || function.contains("partition")))
}

#[test]
fn lotus_map_perf_maps_an_itt_script_inside_its_window_only() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("itt.json");
    let op = root().join("fixtures/itt_ops/IttFlip.py");
    let args = [
        "map",
        "--backend",
        "perf",
        "--runs",
        "1",
        "--no-baseline",
        op.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    lotus_ok(&args, &[]);
    let mapping = read_json(&out);
    let f = functions(&mapping, "IttFlip");
    let total: f64 = f.values().sum();
    let flip = f
        .iter()
        .find(|(k, _)| k.starts_with("ImagingFlipLeftRight|_imaging"))
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("ImagingFlipLeftRight not found: {f:?}"));
    assert!(flip > 0.5 * total, "{flip} of {total}: {f:?}");
    let outside: Vec<&String> = f.keys().filter(|k| outside_work(k)).collect();
    assert!(
        outside.is_empty(),
        "work outside the window was mapped: {outside:?}"
    );

    // The same script with its window opened before the set-up shows that
    // work: the check above can fail.
    let ops = work.path().join("ops");
    let images = work.path().join("images");
    std::fs::create_dir_all(&ops).unwrap();
    std::fs::create_dir_all(&images).unwrap();
    std::fs::copy(
        root().join("fixtures/images/sample.jpg"),
        images.join("sample.jpg"),
    )
    .unwrap();
    let text = std::fs::read_to_string(&op).unwrap();
    let early = text.replacen("ittapi.resume()\n", "", 1).replacen(
        "# Set-up, outside the window.\n",
        "ittapi.resume()\n",
        1,
    );
    assert_ne!(early, text);
    assert_eq!(early.matches("ittapi.resume()").count(), 1);
    let early_op = write(&ops, "IttFlipEarly.py", &early);
    let early_out = work.path().join("early.json");
    let args = [
        "map",
        "--backend",
        "perf",
        "--runs",
        "1",
        "--no-baseline",
        early_op.to_str().unwrap(),
        "--out",
        early_out.to_str().unwrap(),
    ];
    lotus_ok(&args, &[]);
    let f = functions(&read_json(&early_out), "IttFlipEarly");
    assert!(
        f.keys().any(|k| outside_work(k)),
        "the set-up's functions should show when the window covers it: {f:?}"
    );
}

/// The environment that puts the stand-in vtune first on PATH.
fn standin_env(state: &Path, calls: &Path) -> Vec<(&'static str, OsString)> {
    let tools = tools();
    let mut path = vec![tools.bin.clone()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    vec![
        ("PATH", std::env::join_paths(path).unwrap()),
        ("VTUNE_STANDIN_COLLECTOR", tools.collector.clone().into()),
        (
            "VTUNE_STANDIN_REPORTS",
            root().join("fixtures/reports/vtune/hotspots").into(),
        ),
        ("VTUNE_STANDIN_STATE", state.into()),
        ("VTUNE_STANDIN_CALLS", calls.into()),
    ]
}

#[test]
fn lotus_map_vtune_with_a_stand_in_equals_from_reports() {
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let calls = work.path().join("calls.log");
    let env = standin_env(&state, &calls);
    let ops = ["Loader", "RandomHorizontalFlip"];
    let files: Vec<String> = ops
        .iter()
        .map(|o| {
            root()
                .join(format!("fixtures/ops/{o}.py"))
                .display()
                .to_string()
        })
        .collect();
    let live = work.path().join("live.json");
    let mut args = vec![
        "map",
        "--backend",
        "vtune",
        "--runs",
        "3",
        "--no-baseline",
        "--min-samples",
        "1",
        "--min-window-ms",
        "20",
        "--out",
        live.to_str().unwrap(),
    ];
    args.extend(files.iter().map(String::as_str));
    lotus_ok(&args, &env);

    // The same reports, read offline.
    let reports = work.path().join("reports");
    for op in ops {
        std::fs::create_dir_all(reports.join(op)).unwrap();
        for run in 1..=3 {
            std::fs::copy(
                root().join(format!("fixtures/reports/vtune/hotspots/{op}/{run}.csv")),
                reports.join(op).join(format!("{run}.csv")),
            )
            .unwrap();
        }
    }
    let offline = work.path().join("offline.json");
    lotus_ok(
        &[
            "map",
            "--backend",
            "vtune",
            "--from-reports",
            reports.to_str().unwrap(),
            "--out",
            offline.to_str().unwrap(),
        ],
        &[],
    );
    let (live, offline) = (read_json(&live), read_json(&offline));
    assert_eq!(live["backend"], "vtune");
    for op in ops {
        let (a, b) = (functions(&live, op), functions(&offline, op));
        assert!(!a.is_empty());
        assert_eq!(
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>(),
            "{op}"
        );
        for (k, v) in &a {
            assert!((v - b[k]).abs() < 1e-9, "{op} {k}: {v} vs {}", b[k]);
        }
        let sum = |m: &BTreeMap<String, f64>| m.values().sum::<f64>();
        assert!((sum(&a) - sum(&b)).abs() < 1e-6, "{op}");
    }
    let names = |m: &Value| {
        let mut v: Vec<String> = m["shared"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| format!("{}|{}", s["function"], s["module"]))
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&live), names(&offline));

    // Six collections, each followed by its report; every window was
    // opened and closed through ITT by the harness (resume, pause).
    let calls = read_lines(&calls);
    let collects: Vec<&String> = calls.iter().filter(|l| l.starts_with("-collect")).collect();
    let reports: Vec<&String> = calls.iter().filter(|l| l.starts_with("-report")).collect();
    let itt: Vec<&String> = calls.iter().filter(|l| l.starts_with("itt.log:")).collect();
    assert_eq!(
        (collects.len(), reports.len(), itt.len()),
        (6, 6, 6),
        "{calls:#?}"
    );
    // The sampling knobs from --frequency, then the documented options.
    assert!(
        collects.iter().all(|l| l.starts_with(
            "-collect | hotspots | -knob | sampling-mode=hw | -knob | sampling-interval="
        ) && l.contains(" | -start-paused | -result-dir | ")),
        "{collects:#?}"
    );
    assert!(
        itt.iter().all(|l| *l == "itt.log: | resume | pause"),
        "{itt:?}"
    );
}

#[test]
fn lotus_map_vtune_runs_an_itt_script_with_vtunes_collector() {
    let work = tempfile::tempdir().unwrap();
    let calls = work.path().join("calls.log");
    let mut env = standin_env(work.path(), &calls);
    env.push((
        "VTUNE_STANDIN_REPORT",
        root()
            .join("fixtures/reports/vtune/hotspots/RandomHorizontalFlip/1.csv")
            .into(),
    ));
    let op = root().join("fixtures/itt_ops/IttFlip.py");
    let out = work.path().join("m.json");
    lotus_ok(
        &[
            "map",
            "--backend",
            "vtune",
            "--runs",
            "1",
            "--no-baseline",
            op.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &env,
    );
    // The script's own ITT calls (Python's ittapi) reached the collector
    // vtune named, not lotus's.
    let itt: Vec<String> = read_lines(&calls)
        .into_iter()
        .filter(|l| l.starts_with("itt.log:"))
        .collect();
    assert_eq!(itt, ["itt.log: | resume | pause | detach"]);
    assert!(!functions(&read_json(&out), "IttFlip").is_empty());
}

#[test]
fn lotus_map_vtune_here_fails_saying_why_and_dry_run_still_plans() {
    let empty = tempfile::tempdir().unwrap();
    let path: OsString = format!("{}:/usr/bin:/bin", empty.path().display()).into();
    if which_in("vtune", &path) {
        eprintln!("vtune is installed here: nothing to check");
        return;
    }
    let env = [("PATH", path)];
    let op = root().join("fixtures/ops/Loader.py");
    let out = lotus(&["map", "--backend", "vtune", op.to_str().unwrap()], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("vtune"), "{stderr}");
    assert!(stderr.contains("not on PATH"), "{stderr}");
    assert!(stderr.contains("install Intel VTune Profiler"), "{stderr}");
    assert!(stderr.contains("VTUNE_PROFILER_DIR"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let out = lotus_ok(&["backends"], &env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let vtune = stdout
        .lines()
        .skip_while(|l| !l.starts_with("vtune"))
        .take(3)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(vtune.starts_with("vtune  no"), "{stdout}");
    assert!(
        vtune.contains("not available: `vtune` is not on PATH"),
        "{stdout}"
    );

    let out = lotus_ok(
        &[
            "map",
            "--backend",
            "vtune",
            "--dry-run",
            op.to_str().unwrap(),
        ],
        &env,
    );
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.contains("vtune -collect hotspots -knob sampling-mode=hw -knob sampling-interval="),
        "{plan}"
    );
    assert!(plan.contains(" -start-paused -result-dir "), "{plan}");
    assert!(
        plan.contains("sampling: hardware event-based, every "),
        "{plan}"
    );
    assert!(
        plan.contains("vtune -report hotspots -result-dir "),
        "{plan}"
    );
    assert!(
        plan.contains("-format csv -csv-delimiter comma -report-output "),
        "{plan}"
    );
    assert!(plan.contains("vtune was not found"), "{plan}");
    assert!(plan.contains("LOTUS_BACKEND=vtune"), "{plan}");
    assert!(!plan.contains("LOTUS_CONTROL_FDS"), "{plan}");
}

fn which_in(program: &str, path: &std::ffi::OsStr) -> bool {
    std::env::split_paths(path).any(|d| d.join(program).is_file())
}

#[test]
fn lotus_map_vtune_passes_collect_type_and_keeps_raw_results() {
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let calls = work.path().join("calls.log");
    let env = standin_env(&state, &calls);
    let raw = work.path().join("raw");
    let op = root().join("fixtures/ops/RandomHorizontalFlip.py");
    let out = work.path().join("m.json");
    lotus_ok(
        &[
            "map",
            "--backend",
            "vtune",
            "--runs",
            "2",
            "--no-baseline",
            "--min-samples",
            "1",
            "--min-window-ms",
            "20",
            "--collect-type",
            "uarch-exploration",
            "--keep-raw",
            raw.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            op.to_str().unwrap(),
        ],
        &env,
    );
    // vtune was asked for that analysis, once per run.
    let log = std::fs::read_to_string(&calls).unwrap();
    let collects: Vec<&str> = log.lines().filter(|l| l.contains("-collect")).collect();
    assert_eq!(collects.len(), 2, "{log}");
    assert!(
        collects
            .iter()
            .all(|l| l.contains("-collect | uarch-exploration |")),
        "{log}"
    );
    // Each run's raw results are kept under DIR/<op>-run<N>, report included.
    for run in 1..=2 {
        let dir = raw.join(format!("RandomHorizontalFlip-run{run}"));
        let files: Vec<PathBuf> = walk(&dir);
        assert!(
            files.iter().any(|p| p.ends_with("hotspots.csv")),
            "run {run}: {files:?}"
        );
        assert!(
            files.iter().any(|p| p.ends_with("itt.log")),
            "run {run}: {files:?}"
        );
    }
    assert_eq!(read_json(&out)["ops"][0]["runs"], 2);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn lotus_profile_vtune_windows_reads_the_report_of_the_scripts_own_windows() {
    let work = tempfile::tempdir().unwrap();
    let calls = work.path().join("calls.log");
    let report = root().join("fixtures/reports/vtune/hotspots/Loader/2.csv");
    let mut env = standin_env(work.path(), &calls);
    env.push(("VTUNE_STANDIN_REPORT", report.clone().into()));
    let script = root().join("fixtures/itt_ops/IttFlip.py");
    let out = work.path().join("profile.json");
    lotus_ok(
        &[
            "profile",
            "--backend",
            "vtune",
            "--windows",
            "--out",
            out.to_str().unwrap(),
            "--",
            python().to_str().unwrap(),
            script.to_str().unwrap(),
        ],
        &env,
    );
    // vtune started paused, the script's ITT window reached its collector.
    let log = std::fs::read_to_string(&calls).unwrap();
    assert!(
        log.contains("-collect | hotspots | -knob | sampling-mode=")
            && log.contains(" | -start-paused |"),
        "{log}"
    );
    assert!(log.contains("itt.log: | resume | pause | detach"), "{log}");
    // The profile holds the report's rows: (function, module) -> seconds.
    let p = read_json(&out);
    assert_eq!(p["schema"], "lotus.profile/1");
    assert_eq!(p["backend"], "vtune");
    assert_eq!(p["unit"], "seconds");
    let mut got: BTreeMap<String, f64> = BTreeMap::new();
    for r in p["rows"].as_array().unwrap() {
        *got.entry(format!(
            "{}|{}",
            r["function"].as_str().unwrap(),
            r["module"].as_str().unwrap()
        ))
        .or_default() += r["value"].as_f64().unwrap();
    }
    let mut want: BTreeMap<String, f64> = BTreeMap::new();
    let mut rdr = csv::Reader::from_path(&report).unwrap();
    let h = rdr.headers().unwrap().clone();
    let col = |n: &str| h.iter().position(|x| x == n).unwrap();
    let (f, m, t) = (col("Function"), col("Module"), col("CPU Time"));
    for rec in rdr.records() {
        let rec = rec.unwrap();
        *want.entry(format!("{}|{}", &rec[f], &rec[m])).or_default() +=
            rec[t].parse::<f64>().unwrap();
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, v) in &want {
        assert!((got[k] - v).abs() < 1e-9, "{k}");
    }
}

/// The CPU time a run's windows held: the stand-in collector's
/// "resume SECONDS" / "pause SECONDS" lines (process CPU time).
fn window_cpu_seconds(log: &Path) -> f64 {
    let mut open = None;
    let mut total = 0.0;
    for line in read_lines(log) {
        let (what, t) = line.split_once(' ').expect("WHAT SECONDS");
        let t: f64 = t.parse().expect("seconds");
        match what {
            "resume" => open = Some(t),
            "pause" => total += t - open.take().expect("pause after resume"),
            other => panic!("unexpected {other}"),
        }
    }
    total
}

/// VTune samples every 10 ms at --frequency 100 and every 1 ms at 1000
/// (user-mode sampling either way): a window holding the same
/// --min-samples lasts about ten times as long at 10 ms, measured as the
/// CPU time the harness spent in its windows; the mapping records the
/// interval.
#[test]
fn lotus_map_vtune_sizes_windows_by_the_interval_vtune_is_given() {
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let calls = work.path().join("calls.log");
    // About a millisecond of CPU a call.
    let op = write(
        work.path(),
        "Spin.py",
        "def op(_=None):\n    s = 0\n    for i in range(20000):\n        s += i * i\n    return s\n",
    );
    let mut cpu = BTreeMap::new();
    for (hz, interval) in [(1000u64, "1"), (100, "10")] {
        let log = work.path().join(format!("cpu-{hz}.log"));
        let out = work.path().join(format!("map-{hz}.json"));
        let mut env = standin_env(&state, &calls);
        env.push((
            "VTUNE_STANDIN_REPORT",
            root()
                .join("fixtures/reports/vtune/hotspots/Loader/1.csv")
                .into(),
        ));
        env.push(("LOTUS_TEST_ITT_CPU_LOG", log.clone().into()));
        let hz_arg = hz.to_string();
        lotus_ok(
            &[
                "map",
                "--backend",
                "vtune",
                "--runs",
                "1",
                "--warmup",
                "1",
                "--no-baseline",
                "--frequency",
                &hz_arg,
                "--min-samples",
                "40",
                "--min-window-ms",
                "1",
                "--out",
                out.to_str().unwrap(),
                op.to_str().unwrap(),
            ],
            &env,
        );
        let mapping = read_json(&out);
        assert_eq!(
            mapping["environment"]["sample_interval_ms"], interval,
            "{mapping}"
        );
        assert!(
            read_lines(&calls)
                .iter()
                .any(|l| l.contains(&format!("| sampling-interval={interval} |"))),
            "{:?}",
            read_lines(&calls)
        );
        cpu.insert(hz, window_cpu_seconds(&log));
    }
    let ratio = cpu[&100] / cpu[&1000];
    eprintln!("window CPU seconds by frequency: {cpu:?}, ratio {ratio:.2}");
    assert!(
        (6.0..=16.0).contains(&ratio),
        "window CPU time at 10 ms / at 1 ms = {ratio:.2} ({cpu:?})"
    );
}
