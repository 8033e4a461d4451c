//! The Python tracer end to end: `lotus trace run` (and
//! `lotus_trace.enable()` in code) on a multiprocessing pipeline without
//! torch, and on plain torch DataLoaders when torch and torchvision are
//! importable. The logs are read here with a parser of the test's own (not
//! lotus-core's reader), strictly: every line must be
//! `S<Name>,<start_ns>,<duration_ns>[,key=value...]`, a `#` comment, or
//! the `#lotus-trace v1` header; what the logs say is checked against what
//! the pipeline reports it did (pids, which worker did which batch, each
//! batch's samples, which batches were already there).
//!
//! Python: $LOTUS_PYTHON, else the repository's .venv.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

use common::{fixture, root};
use serde_json::Value;

fn python() -> PathBuf {
    let p = std::env::var_os("LOTUS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv/bin/python"));
    let ok = Command::new(&p)
        .args(["-c", "import multiprocessing, json"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "{} does not run: run `bash scripts/setup.sh` (or set LOTUS_PYTHON)",
        p.display()
    );
    p
}

fn has_torch(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", "import torch, torchvision, PIL"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
}

fn harness_dir() -> PathBuf {
    root().join("lotus-cli/harness")
}

/// `lotus trace run --out DIR [extra] -- python ARGS`.
fn trace_run(dir: &Path, extra: &[&str], py: &Path, args: &[&OsStr]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run", "--out"])
        .arg(dir)
        .args(extra)
        .arg("--")
        .arg(py)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH");
    cmd.output().expect("run lotus")
}

/// `python ARGS` with lotus_trace importable (from the source tree), no
/// `lotus trace run`.
fn python_with_tracer(py: &Path, args: &[&OsStr]) -> Output {
    Command::new(py)
        .args(args)
        .env("PYTHONPATH", harness_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .output()
        .expect("run python")
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// --- the test's own log reader ------------------------------------------------

#[derive(Debug, Clone)]
struct Ev {
    name: String,
    start: u64,
    dur: u64,
    fields: BTreeMap<String, String>,
}

impl Ev {
    fn end(&self) -> u64 {
        self.start + self.dur
    }
    fn kind(&self) -> &str {
        self.fields.get("kind").map(String::as_str).unwrap_or("")
    }
    fn num(&self, key: &str) -> Option<u64> {
        self.fields.get(key).map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{key}={v} is not a number in {self:?}"))
        })
    }
    fn batch(&self) -> Option<u64> {
        self.num("batch")
    }
    fn sample(&self) -> Option<u64> {
        self.num("sample")
    }
    /// Whether `self` lies within `outer`.
    fn within(&self, outer: &Ev) -> bool {
        self.start >= outer.start && self.end() <= outer.end()
    }
}

#[derive(Debug)]
struct Log {
    role: String,
    pid: u32,
    events: Vec<Ev>,
    comments: Vec<String>,
}

fn parse_line(line: &str, file: &str, no: usize) -> Ev {
    let mut parts = line.split(',');
    let name = parts.next().unwrap_or("");
    let name = name
        .strip_prefix('S')
        .filter(|n| !n.is_empty() && !n.contains(char::is_whitespace))
        .unwrap_or_else(|| panic!("{file}:{no}: bad name in {line:?}"));
    let num = |s: Option<&str>| -> u64 {
        s.and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{file}:{no}: bad number in {line:?}"))
    };
    let start = num(parts.next());
    let dur = num(parts.next());
    let mut fields = BTreeMap::new();
    for f in parts {
        let (k, v) = f
            .split_once('=')
            .unwrap_or_else(|| panic!("{file}:{no}: field {f:?} is not key=value"));
        assert!(
            fields.insert(k.to_string(), v.to_string()).is_none(),
            "{file}:{no}: {k} twice"
        );
    }
    Ev {
        name: name.to_string(),
        start,
        dur,
        fields,
    }
}

/// Every file in `dir` must be a log named `lotus_<role>_pid_<pid>`.
fn read_logs(dir: &Path) -> Vec<Log> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir).expect("trace folder") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().to_string();
        let (role, pid) = if let Some(p) = name.strip_prefix("lotus_main_pid_") {
            ("main", p)
        } else if let Some(p) = name.strip_prefix("lotus_worker_pid_") {
            ("worker", p)
        } else {
            panic!("unexpected file {name} in the trace folder");
        };
        let pid: u32 = pid.parse().unwrap_or_else(|_| panic!("pid in {name}"));
        let text = std::fs::read_to_string(entry.path()).expect("read log");
        assert!(text.ends_with('\n'), "{name}: last line not ended");
        let mut lines = text.lines();
        let header = lines.next().unwrap_or("");
        assert_eq!(
            header.split_whitespace().take(4).collect::<Vec<_>>(),
            [
                "#lotus-trace",
                "v1",
                &format!("role={role}"),
                &format!("pid={pid}")
            ],
            "{name}: header"
        );
        assert!(header.contains(" host=") && header.contains(" rank="));
        let mut events = Vec::new();
        let mut comments = Vec::new();
        for (i, line) in lines.enumerate() {
            if let Some(c) = line.strip_prefix('#') {
                comments.push(c.to_string());
                continue;
            }
            events.push(parse_line(line, &name, i + 2));
        }
        logs.push(Log {
            role: role.to_string(),
            pid,
            events,
            comments,
        });
    }
    logs.sort_by_key(|l| (l.role.clone(), l.pid));
    logs
}

fn pids(v: &Value) -> BTreeSet<u32> {
    v.as_array()
        .expect("pid list")
        .iter()
        .map(|p| p.as_u64().expect("pid") as u32)
        .collect()
}

fn read_report(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report")).expect("report JSON")
}

// --- the pure-Python pipeline ---------------------------------------------------

struct Pipeline {
    workers: usize,
    batches: u64,
    batch_size: usize,
    start_method: &'static str,
    step_ms: u32,
}

impl Pipeline {
    fn args(&self, report: &Path) -> Vec<std::ffi::OsString> {
        let mut v: Vec<std::ffi::OsString> = vec![fixture("trace/pipeline.py").into()];
        for (k, val) in [
            ("--workers", self.workers.to_string()),
            ("--batches", self.batches.to_string()),
            ("--batch-size", self.batch_size.to_string()),
            ("--start-method", self.start_method.to_string()),
            ("--step-ms", self.step_ms.to_string()),
            ("--sleep-ms", "2".into()),
            ("--spin-ms", "1".into()),
            ("--collate-ms", "1".into()),
        ] {
            v.push(k.into());
            v.push(val.into());
        }
        v.push("--report".into());
        v.push(report.into());
        v
    }
}

const MS: u64 = 1_000_000;

/// A least duration as the log shows it: the ops sleep or spin on the
/// monotonic clock, the log is in wall-clock time, which NTP may slew by
/// up to 0.05%.
fn at_least(ns: u64) -> u64 {
    ns - ns / 1000
}

/// Checks a trace of fixtures/trace/pipeline.py against its report.
fn check_pipeline(dir: &Path, report: &Value, p: &Pipeline, t_before: u64, t_after: u64) {
    let logs = read_logs(dir);
    let main_pid = report["main_pid"].as_u64().expect("main pid") as u32;
    let worker_pids = pids(&report["worker_pids"]);
    assert_eq!(worker_pids.len(), p.workers);
    assert!(report["exitcodes"]
        .as_array()
        .expect("exit codes")
        .iter()
        .all(|c| c.as_i64() == Some(0)));

    // One main log, one per worker, nothing else.
    let mains: Vec<&Log> = logs.iter().filter(|l| l.role == "main").collect();
    assert_eq!(
        mains.iter().map(|l| l.pid).collect::<Vec<_>>(),
        [main_pid],
        "main logs"
    );
    let worker_logs: BTreeMap<u32, &Log> = logs
        .iter()
        .filter(|l| l.role == "worker")
        .map(|l| (l.pid, l))
        .collect();
    assert_eq!(
        worker_logs.keys().copied().collect::<BTreeSet<_>>(),
        worker_pids,
        "one log per worker pid"
    );
    for log in &logs {
        assert!(log.comments.is_empty(), "comments: {:?}", log.comments);
        for e in &log.events {
            assert!(
                e.start >= t_before && e.end() <= t_after,
                "{e:?} outside the run's wall-clock time"
            );
        }
    }

    // Workers: each batch once, by the worker the pipeline says did it.
    let done_by = report["done_by"].as_object().expect("done_by");
    let batches = report["batches"].as_array().expect("batches");
    let mut batch_ev: HashMap<u64, (u32, Ev)> = HashMap::new();
    for (pid, log) in &worker_logs {
        let mut own: Vec<&Ev> = Vec::new();
        for e in &log.events {
            assert!(
                ["Sleep", "Spin", "Sample", "Fetch", "Collation", "Batch"]
                    .contains(&e.name.as_str()),
                "unexpected event in a worker: {e:?}"
            );
            assert!(e.batch().is_some(), "worker event without batch: {e:?}");
            if e.name == "Batch" {
                assert_eq!(e.kind(), "batch");
                let b = e.batch().expect("batch id");
                assert!(
                    batch_ev.insert(b, (*pid, e.clone())).is_none(),
                    "batch {b} twice"
                );
                own.push(e);
            }
        }
        // A worker's batches follow one another.
        own.sort_by_key(|e| e.start);
        for w in own.windows(2) {
            assert!(w[0].end() <= w[1].start, "overlapping batches {w:?}");
        }
    }
    assert_eq!(
        batch_ev.keys().copied().collect::<BTreeSet<_>>(),
        (0..p.batches).collect::<BTreeSet<_>>(),
        "every batch id exactly once"
    );
    for (b, (pid, batch)) in &batch_ev {
        assert_eq!(
            done_by[&b.to_string()].as_u64(),
            Some(u64::from(*pid)),
            "batch {b}'s worker"
        );
        let log = worker_logs[pid];
        let of_batch: Vec<&Ev> = log
            .events
            .iter()
            .filter(|e| e.batch() == Some(*b))
            .collect();
        let one = |name: &str, kind: &str| -> Ev {
            let v: Vec<&&Ev> = of_batch.iter().filter(|e| e.name == name).collect();
            assert_eq!(v.len(), 1, "batch {b}: {name} events");
            assert_eq!(v[0].kind(), kind, "{name}'s kind");
            (*v[0]).clone()
        };
        let fetch = one("Fetch", "fetch");
        let coll = one("Collation", "op");
        assert_eq!(
            fetch.start, batch.start,
            "batch {b}: fetch starts the batch"
        );
        assert!(
            fetch.end() <= coll.start && coll.within(batch),
            "batch {b}: fetch, then collation, within the batch"
        );
        assert!(
            coll.dur >= at_least(MS),
            "batch {b}: collation slept 1 ms: {coll:?}"
        );

        // Its samples: the pipeline's indices, each once, inside the fetch.
        let samples: Vec<&&Ev> = of_batch.iter().filter(|e| e.name == "Sample").collect();
        let mut got: Vec<u64> = samples.iter().map(|e| e.sample().expect("idx")).collect();
        let mut want: Vec<u64> = batches[*b as usize]
            .as_array()
            .expect("indices")
            .iter()
            .map(|i| i.as_u64().expect("index"))
            .collect();
        assert_eq!(samples.len(), p.batch_size, "batch {b}: samples");
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "batch {b}: sample indices");
        for s in &samples {
            assert_eq!(s.kind(), "sample");
            assert!(s.within(&fetch), "sample within the fetch: {s:?}");
            let idx = s.sample();
            for (op, least) in [("Sleep", 2 * MS), ("Spin", MS)] {
                let ops: Vec<&&Ev> = of_batch
                    .iter()
                    .filter(|e| e.name == op && e.sample() == idx)
                    .collect();
                assert_eq!(ops.len(), 1, "batch {b} sample {idx:?}: {op} events");
                assert_eq!(ops[0].kind(), "op");
                assert!(ops[0].within(s), "{op} within its sample");
                assert!(
                    ops[0].dur >= at_least(least),
                    "{op} took at least {least} ns: {:?}",
                    ops[0]
                );
            }
        }
        assert_eq!(
            of_batch.len(),
            3 + p.batch_size * 3,
            "batch {b}: nothing else"
        );
    }

    // Main: one wait and one consumption per batch, in order.
    let main = mains[0];
    let mut waits: BTreeMap<u64, &Ev> = BTreeMap::new();
    let mut consumes: BTreeMap<u64, &Ev> = BTreeMap::new();
    let plans: Vec<&Ev> = main.events.iter().filter(|e| e.name == "Plan").collect();
    assert_eq!(plans.len(), 1, "the main process's op before the workers");
    assert_eq!((plans[0].kind(), plans[0].batch()), ("op", None));
    for e in main.events.iter().filter(|e| e.name != "Plan") {
        let b = e.batch().expect("main event without batch");
        let map = match (e.name.as_str(), e.kind()) {
            ("Wait", "wait") => &mut waits,
            ("Consume", "consume") => &mut consumes,
            _ => panic!("unexpected event in main: {e:?}"),
        };
        assert!(map.insert(b, e).is_none(), "{} of batch {b} twice", e.name);
    }
    let all: BTreeSet<u64> = (0..p.batches).collect();
    assert_eq!(waits.keys().copied().collect::<BTreeSet<_>>(), all);
    assert_eq!(consumes.keys().copied().collect::<BTreeSet<_>>(), all);
    let ready: BTreeSet<u64> = report["ready"]
        .as_array()
        .expect("ready")
        .iter()
        .map(|b| b.as_u64().expect("batch"))
        .collect();
    for b in 0..p.batches {
        let (w, c) = (waits[&b], consumes[&b]);
        let flag = w.fields.get("ready").map(String::as_str);
        assert_eq!(
            flag,
            Some(if ready.contains(&b) { "1" } else { "0" }),
            "batch {b}: ready"
        );
        assert_eq!(c.dur, 0, "a consumption is a point");
        assert!(c.start >= w.end(), "batch {b}: consumed after the wait");
        let (_, batch) = &batch_ev[&b];
        assert!(
            c.start >= batch.end(),
            "batch {b}: consumed after the worker finished it"
        );
        if !ready.contains(&b) {
            // Waited for it: the wait ended after the worker finished.
            assert!(
                w.end() >= batch.end(),
                "batch {b}: wait ends after the batch"
            );
        }
        if b > 0 {
            assert!(
                w.start >= consumes[&(b - 1)].start,
                "batch {b}: waited after consuming {}",
                b - 1
            );
        }
    }
}

fn run_pipeline_traced(p: &Pipeline, in_code: bool) {
    let py = python();
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace");
    let report = tmp.path().join("report.json");
    let mut args = p.args(&report);
    let t_before = now_ns();
    let out = if in_code {
        args.push("--enable".into());
        args.push(dir.clone().into());
        let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        python_with_tracer(&py, &args)
    } else {
        let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        trace_run(&dir, &[], &py, &args)
    };
    let t_after = now_ns();
    assert_ok(&out, "the traced pipeline");
    if !in_code {
        let err = String::from_utf8_lossy(&out.stderr);
        let want = format!("{} log(s) (1 main, {} worker)", p.workers + 1, p.workers);
        assert!(err.contains(&want), "{err}");
    }
    check_pipeline(&dir, &read_report(&report), p, t_before, t_after);
}

#[test]
fn trace_run_traces_forked_workers() {
    run_pipeline_traced(
        &Pipeline {
            workers: 3,
            batches: 12,
            batch_size: 4,
            start_method: "fork",
            step_ms: 3,
        },
        false,
    );
}

#[test]
fn trace_run_traces_spawned_workers() {
    // A slow training step: batches arrive during it and are ready.
    run_pipeline_traced(
        &Pipeline {
            workers: 2,
            batches: 10,
            batch_size: 3,
            start_method: "spawn",
            step_ms: 25,
        },
        false,
    );
}

#[test]
fn enable_in_code_traces_forked_workers() {
    run_pipeline_traced(
        &Pipeline {
            workers: 2,
            batches: 8,
            batch_size: 4,
            start_method: "fork",
            step_ms: 25,
        },
        true,
    );
}

#[test]
fn enable_in_code_reaches_spawned_workers() {
    run_pipeline_traced(
        &Pipeline {
            workers: 3,
            batches: 9,
            batch_size: 2,
            start_method: "spawn",
            step_ms: 2,
        },
        true,
    );
}

#[test]
fn without_tracing_nothing_is_written_and_the_pipeline_runs() {
    let py = python();
    let tmp = tempfile::tempdir().expect("temp dir");
    let report = tmp.path().join("report.json");
    let p = Pipeline {
        workers: 2,
        batches: 4,
        batch_size: 2,
        start_method: "fork",
        step_ms: 1,
    };
    let args = p.args(&report);
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let out = Command::new(&py)
        .args(&args)
        .current_dir(tmp.path())
        .env("PYTHONPATH", harness_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .output()
        .expect("python");
    assert_ok(&out, "the untraced pipeline");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, [OsStr::new("report.json")]);
}

#[test]
fn trace_run_passes_the_exit_code_through_and_creates_the_folder() {
    let py = python();
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("a/b/trace");
    let out = trace_run(
        &dir,
        &[],
        &py,
        &[
            OsStr::new("-c"),
            OsStr::new("import os, sys; assert os.environ['LOTUS_TRACE_DIR']; sys.exit(3)"),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.is_dir());
    // A process that traced nothing leaves no log.
    assert_eq!(std::fs::read_dir(&dir).expect("ls").count(), 0);
}

#[test]
fn an_existing_sitecustomize_still_runs() {
    let py = python();
    let tmp = tempfile::tempdir().expect("temp dir");
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir_all(&theirs).expect("mkdir");
    let marker = tmp.path().join("marker");
    std::fs::write(
        theirs.join("sitecustomize.py"),
        "import os\nopen(os.environ['MARKER'], 'w').write('ran')\nTHEIRS = 1\n",
    )
    .expect("write");
    let dir = tmp.path().join("trace");
    let script = "import lotus_trace, sitecustomize\n\
                  op = lotus_trace.wrap(lambda x: x + 1, 'Probe')\n\
                  assert op(1) == 2\n\
                  print(lotus_trace.trace_dir(), sitecustomize.THEIRS)\n";
    let out = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "--out"])
        .arg(&dir)
        .arg("--")
        .arg(&py)
        .args(["-c", script])
        .env("PYTHONPATH", &theirs)
        .env("MARKER", &marker)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("lotus");
    assert_ok(&out, "trace run with another sitecustomize");
    assert_eq!(std::fs::read_to_string(&marker).expect("marker"), "ran");
    let canon = std::fs::canonicalize(&dir).expect("canon");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{} 1", canon.display())
    );
    let logs = read_logs(&dir);
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].role, "main");
    assert_eq!(logs[0].events.len(), 1);
    let e = &logs[0].events[0];
    assert_eq!((e.name.as_str(), e.kind()), ("Probe", "op"));
    assert_eq!((e.batch(), e.sample()), (None, None));
}

#[test]
fn old_logs_are_kept_with_a_warning_or_removed_with_clean() {
    let py = python();
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let old = dir.join("lotus_main_pid_1");
    let other = dir.join("notes.txt");
    std::fs::write(&old, "SX,1,1\n").expect("write");
    std::fs::write(&other, "mine").expect("write");
    let out = trace_run(&dir, &[], &py, &[OsStr::new("-c"), OsStr::new("pass")]);
    assert_ok(&out, "trace run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds 1 trace log"));
    assert!(old.exists());
    let out = trace_run(
        &dir,
        &["--clean"],
        &py,
        &[OsStr::new("-c"), OsStr::new("pass")],
    );
    assert_ok(&out, "trace run --clean");
    assert!(!old.exists(), "--clean removes old logs");
    assert!(other.exists(), "--clean keeps other files");
}

#[test]
fn a_bad_prefix_or_program_is_an_error() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace");
    let py = python();
    let out = trace_run(&dir, &["--prefix", "a/b"], &py, &[OsStr::new("-V")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--prefix"));
    let out = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "--out"])
        .arg(&dir)
        .args(["--", "no-such-program-lotus"])
        .output()
        .expect("lotus");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-program-lotus"));
}

// --- torch ---------------------------------------------------------------------

struct TorchRun {
    dataset: &'static str,
    workers: usize,
    batches: u64,
    batch_size: u64,
    epochs: u64,
    start_method: &'static str,
    persistent: bool,
    in_code: bool,
}

/// Runs fixtures/trace/torch_pipeline.py traced; None when torch is missing.
fn torch_trace(t: &TorchRun) -> Option<(Vec<Log>, Value)> {
    let py = python();
    if !has_torch(&py) {
        eprintln!(
            "skipped: {} cannot import torch and torchvision (set LOTUS_PYTHON to a Python that has them)",
            py.display()
        );
        return None;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace");
    let report = tmp.path().join("report.json");
    let mut args: Vec<std::ffi::OsString> = vec![
        fixture("trace/torch_pipeline.py").into(),
        "--data".into(),
        tmp.path().join("data").into(),
        "--report".into(),
        report.clone().into(),
    ];
    for (k, v) in [
        ("--dataset", t.dataset.to_string()),
        ("--workers", t.workers.to_string()),
        ("--batches", t.batches.to_string()),
        ("--batch-size", t.batch_size.to_string()),
        ("--epochs", t.epochs.to_string()),
        ("--start-method", t.start_method.to_string()),
    ] {
        args.push(k.into());
        args.push(v.into());
    }
    if t.persistent {
        args.push("--persistent".into());
    }
    let out = if t.in_code {
        args.push("--enable".into());
        args.push(dir.clone().into());
        let a: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        python_with_tracer(&py, &a)
    } else {
        let a: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        trace_run(&dir, &[], &py, &a)
    };
    assert_ok(&out, "the torch pipeline");
    Some((read_logs(&dir), read_report(&report)))
}

/// Checks a torch trace: logs per pid, every batch of every epoch, its
/// samples and ops, and the main process's waits and consumptions.
fn check_torch(t: &TorchRun, logs: &[Log], report: &Value, ops: &[&str]) {
    let main_pid = report["main_pid"].as_u64().expect("main pid") as u32;
    let workers = pids(&report["worker_pids"]);
    let epochs_of_workers = if t.persistent { 1 } else { t.epochs as usize };
    assert_eq!(workers.len(), t.workers * epochs_of_workers, "worker pids");
    let mains: Vec<&Log> = logs.iter().filter(|l| l.role == "main").collect();
    assert_eq!(mains.iter().map(|l| l.pid).collect::<Vec<_>>(), [main_pid]);
    let worker_logs: BTreeSet<u32> = logs
        .iter()
        .filter(|l| l.role == "worker")
        .map(|l| l.pid)
        .collect();
    assert_eq!(worker_logs, workers, "one log per worker");
    for log in logs {
        // Main-process events in the main log only; with workers, batches
        // in worker logs only (a forked worker drops its copy of the main
        // process's unwritten events).
        for e in &log.events {
            let main_kind = matches!(e.kind(), "wait" | "consume");
            assert_eq!(
                main_kind,
                log.role == "main" && (t.workers > 0 || main_kind),
                "pid {} ({}): {e:?}",
                log.pid,
                log.role
            );
        }
        assert!(
            log.comments.iter().all(|c| !c.contains("not hooked")),
            "pid {}: {:?}",
            log.pid,
            log.comments
        );
    }

    // Where batches are made: the workers, or the main process itself.
    let makers: Vec<&Log> = if t.workers == 0 {
        mains.clone()
    } else {
        logs.iter().filter(|l| l.role == "worker").collect()
    };
    let mut per_batch: BTreeMap<u64, u64> = BTreeMap::new();
    for log in &makers {
        let batches: Vec<&Ev> = log.events.iter().filter(|e| e.name == "Batch").collect();
        for batch in &batches {
            assert_eq!(batch.kind(), "batch");
            let b = batch.batch().expect("batch id");
            *per_batch.entry(b).or_default() += 1;
            // The batch's events lie within it (batch ids repeat per epoch).
            let inside: Vec<&Ev> = log
                .events
                .iter()
                .filter(|e| e.batch() == Some(b) && e.within(batch) && e.name != "Batch")
                .filter(|e| !matches!(e.kind(), "wait" | "consume"))
                .collect();
            let count = |name: &str| inside.iter().filter(|e| e.name == name).count() as u64;
            assert_eq!(count("Fetch"), 1, "batch {b}: fetch");
            assert_eq!(count("Collation"), 1, "batch {b}: collation");
            assert_eq!(count("Sample"), t.batch_size, "batch {b}: samples");
            let mut idx: Vec<u64> = inside
                .iter()
                .filter(|e| e.name == "Sample")
                .map(|e| e.sample().expect("sample index"))
                .collect();
            idx.sort_unstable();
            let want: Vec<u64> = (b * t.batch_size..(b + 1) * t.batch_size).collect();
            assert_eq!(idx, want, "batch {b}: sample indices");
            for op in ops {
                let of_op: Vec<&&Ev> = inside.iter().filter(|e| e.name == *op).collect();
                assert_eq!(
                    of_op.len() as u64,
                    t.batch_size,
                    "batch {b}: {op} per sample"
                );
                let mut s: Vec<u64> = of_op.iter().map(|e| e.sample().expect("idx")).collect();
                s.sort_unstable();
                assert_eq!(s, want, "batch {b}: {op}'s samples");
            }
        }
    }
    let want: BTreeMap<u64, u64> = (0..t.batches).map(|b| (b, t.epochs)).collect();
    assert_eq!(per_batch, want, "each batch once per epoch");

    let main = mains[0];
    for (name, kind) in [("Wait", "wait"), ("Consume", "consume")] {
        let mut n: BTreeMap<u64, u64> = BTreeMap::new();
        for e in main.events.iter().filter(|e| e.name == name) {
            assert_eq!(e.kind(), kind);
            *n.entry(e.batch().expect("batch")).or_default() += 1;
        }
        assert_eq!(n, want, "{name} per batch and epoch");
    }
    // Consumptions follow their waits, in order.
    let mut seq: Vec<&Ev> = main
        .events
        .iter()
        .filter(|e| matches!(e.kind(), "wait" | "consume"))
        .collect();
    seq.sort_by_key(|e| (e.start, e.kind() == "consume"));
    let kinds: Vec<(&str, u64)> = seq
        .iter()
        .map(|e| (e.kind(), e.batch().expect("batch")))
        .collect();
    let expect: Vec<(&str, u64)> = (0..t.epochs)
        .flat_map(|_| 0..t.batches)
        .flat_map(|b| [("wait", b), ("consume", b)])
        .collect();
    assert_eq!(kinds, expect, "wait, consume, batch after batch");
}

const FOLDER_OPS: &[&str] = &["Loader", "Resize", "CenterCrop", "ToTensor"];
const GENERIC_OPS: &[&str] = &["AddOne", "Normalize"];

#[test]
fn torch_image_folder_with_forked_workers_two_epochs() {
    // Workers of the second epoch are forked from a main process with
    // unwritten events of the first: they must not write them again.
    let t = TorchRun {
        dataset: "folder",
        workers: 2,
        batches: 5,
        batch_size: 4,
        epochs: 2,
        start_method: "fork",
        persistent: false,
        in_code: false,
    };
    if let Some((logs, report)) = torch_trace(&t) {
        check_torch(&t, &logs, &report, FOLDER_OPS);
    }
}

#[test]
fn torch_generic_dataset_with_spawned_workers_two_epochs() {
    let t = TorchRun {
        dataset: "generic",
        workers: 2,
        batches: 4,
        batch_size: 3,
        epochs: 2,
        start_method: "spawn",
        persistent: false,
        in_code: false,
    };
    if let Some((logs, report)) = torch_trace(&t) {
        check_torch(&t, &logs, &report, GENERIC_OPS);
    }
}

#[test]
fn torch_v2_compose_persistent_workers_enabled_in_code() {
    let t = TorchRun {
        dataset: "v2",
        workers: 3,
        batches: 6,
        batch_size: 2,
        epochs: 2,
        start_method: "fork",
        persistent: true,
        in_code: true,
    };
    if let Some((logs, report)) = torch_trace(&t) {
        check_torch(&t, &logs, &report, GENERIC_OPS);
    }
}

#[test]
fn torch_without_workers() {
    let t = TorchRun {
        dataset: "folder",
        workers: 0,
        batches: 4,
        batch_size: 3,
        epochs: 1,
        start_method: "fork",
        persistent: false,
        in_code: false,
    };
    if let Some((logs, report)) = torch_trace(&t) {
        check_torch(&t, &logs, &report, FOLDER_OPS);
    }
}
