//! The Python tracer end to end: `lotus trace run` (and
//! `lotus_trace.enable()` in code) on a multiprocessing pipeline without
//! torch (torch pipelines: tests/trace_torch.rs). The logs are read here with a parser of the test's own (not
//! lotus-core's reader), strictly: every line must be
//! `S<Name>,<start_ns>,<duration_ns>[,key=value...]`, a `#` comment, or
//! the `#lotus-trace v1` header; what the logs say is checked against what
//! the pipeline reports it did (pids, which worker did which batch, each
//! batch's samples, which batches were already there).
//!
//! Python: $LOTUS_PYTHON, else the repository's .venv.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common;
use crate::common::trace_logs::{
    assert_ok, pids, python_with_tracer, read_logs, read_report, trace_run, Ev, Log,
};
use crate::common::{fixture, harness_dir, root};
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

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
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
        // The clock lines (wall clock against CLOCK_MONOTONIC) come with
        // every block; nothing else is a comment here.
        let other: Vec<&String> = log
            .comments
            .iter()
            .filter(|c| !c.starts_with(" lotus-trace: clock wall_ns="))
            .collect();
        assert!(other.is_empty(), "comments: {other:?}");
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
        // The tracer names the DataLoader's machinery threads.
        for e in &log.threads {
            assert!(
                ["lotus_trace-watch", "QueueFeederThread", "ResourceSharer"]
                    .contains(&e.name.as_str()),
                "unexpected thread named in a worker: {e:?}"
            );
        }
        // A garbage collection is a span wherever it ran.
        for e in log.events.iter().filter(|e| e.name != "gc") {
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
    // A malformed option value: a usage error.
    assert_eq!(out.status.code(), Some(2));
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

// --- Python frames in call stacks ($LOTUS_PY_FRAMES) ---------------------------

/// The job of the Python-frames tests: it runs an op, starts a Python
/// child (a new interpreter, as a spawned DataLoader worker is: it runs
/// the start-up hook) and forks one (each calls `spin`), and prints the
/// three pids. No multiprocessing: its resource tracker, a fourth
/// process, would leave a perf map of its own. Each process appends what
/// it sees of its own perf map, before it ends, to `seen.txt` in the
/// working folder ([`FRAMES_SEEN`]): lotus removes the maps after the run.
const FRAMES_JOB: &str = "\
import os, subprocess, sys, lotus_trace
from frames_seen import seen
def spin():
    return sum(range(1000))
lotus_trace.wrap(spin, 'Spin')()
child = 'import os, lotus_trace\\nfrom frames_seen import seen\\ndef spin():\\n    return sum(range(1000))\\nlotus_trace.wrap(spin, \"Spin\")()\\nseen()\\nprint(os.getpid())'
started = int(subprocess.run([sys.executable, '-c', child], check=True, capture_output=True, timeout=120).stdout)
forked = os.fork()
if forked == 0:
    lotus_trace.wrap(spin, 'Spin')()
    seen()
    lotus_trace.flush()
    os._exit(0)
_, status = os.waitpid(forked, 0)
assert status == 0, status
seen()
print(os.getpid(), started, forked)
";

/// `seen()`: appends `<pid> <uid> <mode> <links> <regular> <spin named>`
/// of this process's perf map to `seen.txt`, or `<pid> none`.
const FRAMES_SEEN: &str = "\
import os, stat
def seen():
    path = f'/tmp/perf-{os.getpid()}.map'
    try:
        st = os.lstat(path)
        named = ' py::spin:' in open(path).read() if stat.S_ISREG(st.st_mode) else False
        line = f'{os.getpid()} {st.st_uid} {stat.S_IMODE(st.st_mode):o} {st.st_nlink} {int(stat.S_ISREG(st.st_mode))} {int(named)}'
    except FileNotFoundError:
        line = f'{os.getpid()} none'
    with open('seen.txt', 'a') as f:
        f.write(line + '\\n')
";

/// What each process of [`FRAMES_JOB`] saw of its own perf map, by pid.
fn frames_seen(dir: &Path) -> BTreeMap<u32, String> {
    std::fs::read_to_string(dir.join("seen.txt"))
        .expect("seen.txt")
        .lines()
        .map(|l| {
            let (pid, rest) = l.split_once(' ').expect("pid and what");
            (pid.parse().expect("pid"), rest.to_string())
        })
        .collect()
}

/// Runs [`FRAMES_JOB`] under `lotus trace run` with `py`, sampled with
/// `--stacks STACKS` where `stacks` is given, else not sampled: the trace
/// folder and the pids (main, started, forked). $LOTUS_PY_FRAMES=1 in
/// lotus's own environment: lotus decides what the job gets.
fn run_frames_job(py: &Path, stacks: Option<&str>) -> (tempfile::TempDir, [u32; 3]) {
    let tmp = tempfile::tempdir().expect("tmp");
    let job = tmp.path().join("job.py");
    std::fs::write(&job, FRAMES_JOB).expect("job");
    std::fs::write(tmp.path().join("frames_seen.py"), FRAMES_SEEN).expect("job's helper");
    let out_dir = tmp.path().join("out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run"]);
    if let Some(stacks) = stacks {
        cmd.args(["--sample", "--counters", "none", "--stacks", stacks]);
    }
    cmd.arg("--out")
        .arg(&out_dir)
        .arg("--")
        .arg(py)
        .arg(&job)
        .current_dir(tmp.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("LOTUS_TRACE_PARENT")
        .env_remove("PYTHONPATH");
    cmd.env("LOTUS_PY_FRAMES", "1");
    let out = cmd.output().expect("run lotus");
    assert_ok(&out, "the Python-frames job");
    std::fs::write(tmp.path().join("stderr"), &out.stderr).expect("keep stderr");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pids: Vec<u32> = stdout
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect();
    let pids: [u32; 3] = pids.try_into().expect("three pids");
    (tmp, pids)
}

/// Removes the perf map files of these pids when dropped (they are in
/// /tmp, outside the test's folder).
struct PerfMaps([u32; 3]);
impl PerfMaps {
    fn path(pid: u32) -> PathBuf {
        PathBuf::from(format!("/tmp/perf-{pid}.map"))
    }
}
impl Drop for PerfMaps {
    fn drop(&mut self) {
        for pid in self.0 {
            let _ = std::fs::remove_file(PerfMaps::path(pid));
        }
    }
}

/// With $LOTUS_PY_FRAMES=1 on Python 3.12+, every process of the job (the
/// main one, a Python child it started, a forked one) writes its perf map, owned by
/// the job's user, naming the functions it ran; without it, none.
#[test]
fn python_frames_turn_the_perf_trampolines_on_in_every_process() {
    let Some(py) = common::python312("python_frames_turn_the_perf_trampolines_on_in_every_process")
    else {
        return;
    };
    let (tmp, pids) = run_frames_job(&py, Some("dwarf"));
    let _maps = PerfMaps(pids);
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let seen = frames_seen(tmp.path());
    for (pid, what) in pids.iter().zip(["main", "started", "forked"]) {
        // While the process ran: a regular file of the job's user, 0600,
        // one link, naming `spin` (the tracer made it before CPython
        // opened it).
        let want = format!("{me} 600 1 1 1");
        assert_eq!(
            seen.get(pid),
            Some(&want),
            "{what} process {pid}: its perf map as it saw it (uid mode links regular named)"
        );
        // After the run: removed by lotus.
        let path = PerfMaps::path(*pid);
        assert!(
            std::fs::symlink_metadata(&path).is_err(),
            "{what} process: {} left in /tmp after the run",
            path.display()
        );
    }
    // Nothing noted: the trampolines came on everywhere.
    for log in read_logs(&tmp.path().join("out")) {
        let notes: Vec<&String> = log
            .comments
            .iter()
            .filter(|c| !c.starts_with(" lotus-trace: clock wall_ns="))
            .collect();
        assert!(notes.is_empty(), "pid {}: {notes:?}", log.pid);
    }
    // Off unless lotus asks: not sampled, or with frame pointers only.
    for frames in [None, Some("fp")] {
        let (_tmp, pids) = run_frames_job(&py, frames);
        let _maps = PerfMaps(pids);
        for pid in pids {
            assert!(
                !PerfMaps::path(pid).exists(),
                "LOTUS_PY_FRAMES={frames:?}: /tmp/perf-{pid}.map written"
            );
        }
    }
}

/// On Python < 3.12 the job's first process notes once, in its log, that
/// it has no perf trampolines and that lotus reads its Python frames from
/// the interpreter instead; its children (a Python child it started, a
/// forked one) do not repeat it, no perf map is written, and lotus says
/// nothing of it on stderr.
#[test]
fn python_frames_on_an_old_python_are_one_note_for_the_job() {
    let py = python();
    let version = Command::new(&py)
        .args([
            "-c",
            "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}', sys.version_info < (3, 12))",
        ])
        .output()
        .expect("python version");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    let Some((version, "True")) = version.trim().split_once(' ') else {
        println!(
            "skipped: python_frames_on_an_old_python_are_one_note_for_the_job: {} is Python 3.12+",
            py.display()
        );
        return;
    };
    let (tmp, pids) = run_frames_job(&py, Some("dwarf"));
    let _maps = PerfMaps(pids);
    let want = format!(
        " lotus-trace: no perf trampolines on Python {version} (3.12+ has them): lotus reads the samples' Python frames from the interpreter's own state instead"
    );
    let logs = read_logs(&tmp.path().join("out"));
    let noted: Vec<u32> = logs
        .iter()
        .filter(|l| l.comments.contains(&want))
        .map(|l| l.pid)
        .collect();
    assert_eq!(noted, [pids[0]], "the note, in the main process's log only");
    let said = tmp.path().join("stderr");
    let said = std::fs::read_to_string(said).expect("lotus's stderr");
    assert!(!said.contains("trampolines"), "{said}");
    assert_eq!(logs.len(), 3, "three logs");
    for pid in pids {
        assert!(!PerfMaps::path(pid).exists(), "/tmp/perf-{pid}.map");
    }
}

/// Where the trampolines cannot be turned on (a build without perf
/// support), the process notes why in its log and runs on.
#[test]
fn python_frames_that_cannot_start_are_a_note_not_an_error() {
    let Some(py) = common::python312("python_frames_that_cannot_start_are_a_note_not_an_error")
    else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let out_dir = tmp.path().join("out");
    let job = "import os, sys\n\
def refuse(backend):\n    raise ValueError('perf trampoline not available')\n\
sys.activate_stack_trampoline = refuse\n\
import lotus_trace\n\
lotus_trace.enable(sys.argv[1])\n\
lotus_trace.wrap(lambda: None, 'Op')()\n\
print(os.getpid())\n";
    let out = Command::new(&py)
        .args(["-c", job])
        .arg(&out_dir)
        .env("PYTHONPATH", harness_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("LOTUS_PY_FRAMES", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("LOTUS_TRACE_PARENT")
        .output()
        .expect("run python");
    assert_ok(&out, "the job whose trampolines fail");
    let pid: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("pid");
    let _maps = PerfMaps([pid; 3]);
    let logs = read_logs(&out_dir);
    assert_eq!(logs.len(), 1);
    let want = format!(
        " lotus-trace: Python frames: the perf trampolines could not be turned on in pid {pid} (ValueError: perf trampoline not available): its stacks show native frames only"
    );
    assert!(logs[0].comments.contains(&want), "{:?}", logs[0].comments);
    assert_eq!(
        logs[0].events.iter().filter(|e| e.name != "gc").count(),
        1,
        "the op still traced"
    );
}

/// A job that recurses 900 Python calls deep (under the default limit of
/// 1000) runs under `trace run --sample`'s defaults as it runs alone, on
/// every Python 3.12+ here: in its main thread, in a thread it starts and
/// in a forked child, with the perf trampolines on (CPython 3.12 counts
/// each call through a trampoline twice against its C recursion limit of
/// 1500, and failed at 748 calls), and after raising its own limit, 1900
/// deep.
#[test]
fn a_deep_recursion_runs_under_the_default_sampling_as_it_runs_alone() {
    let test = "a_deep_recursion_runs_under_the_default_sampling_as_it_runs_alone";
    let job = "\
import os, sys, threading
try:
    from lotus_trace import wrap
except ImportError:  # alone
    def wrap(f, name):
        return f
def deep(n):
    return 0 if n == 0 else 1 + deep(n - 1)
assert sys.is_stack_trampoline_active() == (os.environ.get('EXPECT_ON') == '1'), 'trampolines'
wrap(deep, 'Deep')(900)
done = []
t = threading.Thread(target=lambda: done.append(deep(900)))
t.start(); t.join()
assert done == [900], done
child = os.fork()
if child == 0:
    deep(900)
    os._exit(0)
assert os.waitpid(child, 0)[1] == 0, 'the forked child failed'
sys.setrecursionlimit(2000)
assert deep(1900) == 1900
print('deep ok')
";
    for py in common::pythons_312_and_later(test) {
        let tmp = tempfile::tempdir().expect("tmp");
        let script = tmp.path().join("deep.py");
        std::fs::write(&script, job).expect("job");
        // Alone first: the job is sound.
        let alone = Command::new(&py)
            .arg(&script)
            .env("EXPECT_ON", "0")
            .output()
            .expect("python");
        assert_ok(&alone, "the job alone");
        let out = Command::new(env!("CARGO_BIN_EXE_lotus"))
            .args(["trace", "run", "--sample", "--counters", "none", "-o"])
            .arg(tmp.path().join("out"))
            .arg("--")
            .arg(&py)
            .arg(&script)
            .env("EXPECT_ON", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("LOTUS_TRACE_DIR")
            .env_remove("LOTUS_TRACE_PARENT")
            .env_remove("PYTHONPATH")
            .output()
            .expect("lotus");
        assert_ok(
            &out,
            &format!("{}: the job under trace run --sample", py.display()),
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("deep ok"));
    }
}
