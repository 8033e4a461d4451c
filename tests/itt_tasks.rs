//! ITT tasks and the trace, both ways:
//!
//! - Under a collector other than lotus's (VTune's; here a stand-in built
//!   from `tests/data/itt_task_recorder.c`, loaded through the real
//!   `INTEL_LIBITTNOTIFY64` path by the `ittapi` package's static part),
//!   `lotus trace run` leaves the collector in place and the tracer marks
//!   each op as an ITT task in domain `lotus`: the stand-in records the
//!   task names, threads and nesting it receives.
//! - Under `lotus trace run` with no collector set, lotus's own collector
//!   (liblotus_control.so) writes the tasks the job's libraries begin and
//!   end into the trace folder, where `trace stats` and `trace view` read
//!   them.
//!
//! Python: `$LOTUS_PYTHON`, else the workspace's `.venv`, with `ittapi`.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use crate::common::trace_logs::{parse_line, read_logs, Ev};
use serde_json::Value;

/// The Python the tests use; fails saying what to install when it lacks
/// ittapi.
fn python() -> PathBuf {
    let p = common::any_python();
    let ok = Command::new(&p)
        .args(["-c", "import ittapi"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import ittapi: run `bash scripts/setup.sh` (or set LOTUS_PYTHON to a Python that has it)",
        p.display()
    );
    p
}

/// The stand-in "VTune" collector, built once with the C compiler.
fn recorder() -> &'static Path {
    static BUILT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &BUILT
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let lib = dir.path().join("libitt_task_recorder.so");
            let out = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
                .args(["-shared", "-fPIC", "-o"])
                .arg(&lib)
                .arg(common::root().join("tests/data/itt_task_recorder.c"))
                .output()
                .expect("a C compiler (cc) to build the stand-in ITT collector");
            assert!(
                out.status.success(),
                "building the stand-in collector failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            (dir, lib)
        })
        .1
}

/// `lotus trace run --no-torch --itt-tasks --out DIR -- python SCRIPT`,
/// with `env` and no ITT collector unless `env` names one.
fn trace_run(dir: &Path, script: &str, env: &[(&str, &std::ffi::OsStr)]) -> Output {
    trace_run_with(&python(), &["--no-torch", "--itt-tasks"], dir, script, env)
}

/// [`trace_run`] with the Python `py` and the options `extra`.
fn trace_run_with(
    py: &Path,
    extra: &[&str],
    dir: &Path,
    script: &str,
    env: &[(&str, &std::ffi::OsStr)],
) -> Output {
    let job = dir.join("job.py");
    std::fs::write(&job, script).unwrap();
    let out = dir.join("trace");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run", "--out"])
        .arg(&out)
        .args(extra)
        .arg("--")
        .arg(py)
        .arg(&job)
        .env_remove("INTEL_LIBITTNOTIFY64")
        .env_remove("LOTUS_CONTROL_LIB")
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A pipeline of wrapped ops on two threads: `Augment` calls `Crop`
/// (nested ops), `Fails` raises, then a `span` block and a batch whose
/// collation runs `Decode`.
const PIPELINE: &str = r#"
import threading
import lotus_trace

@lotus_trace.wrap(name="Crop")
def crop(x):
    return x * 2

@lotus_trace.wrap(name="Augment")
def augment(x):
    return crop(x) + 1

@lotus_trace.wrap(name="Decode")
def decode(x):
    return sum(range(20000)) + x

@lotus_trace.wrap(name="Fails")
def fails():
    raise ValueError("on purpose")

def run(n):
    for i in range(n):
        augment(decode(i))
        try:
            fails()
        except ValueError:
            pass

t = threading.Thread(target=run, args=(5,))
t.start()
run(3)
t.join()
with lotus_trace.span("Tail"):
    pass
with lotus_trace.batch(0) as b:
    with b.collate():
        decode(0)
"#;

/// One task as the stand-in received it: its name, and the name of the
/// task open around it on its thread when it began.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Task {
    name: String,
    parent: Option<String>,
}

/// The stand-in's log, per (pid, tid): the tasks begun, checking that
/// every end ends a task of the same domain on the same thread and that
/// none is left open.
fn recorded_tasks(log: &Path) -> BTreeMap<(u32, u32), Vec<Task>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut open: BTreeMap<(u32, u32), Vec<(String, String)>> = BTreeMap::new();
    let mut tasks: BTreeMap<(u32, u32), Vec<Task>> = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        let thread = (w[1].parse().unwrap(), w[2].parse().unwrap());
        let stack = open.entry(thread).or_default();
        match w[0] {
            "begin" => {
                assert_eq!(w.len(), 5, "{line}");
                tasks.entry(thread).or_default().push(Task {
                    name: w[4].to_string(),
                    parent: stack.last().map(|(n, _)| n.clone()),
                });
                stack.push((w[4].to_string(), w[3].to_string()));
            }
            "end" => {
                let (_, domain) = stack
                    .pop()
                    .unwrap_or_else(|| panic!("{line}: an end with no task open on its thread"));
                assert_eq!(domain, w[3], "{line}: ends a task of another domain");
            }
            _ => panic!("unexpected line {line:?} in the stand-in's log"),
        }
    }
    for (thread, stack) in open {
        assert!(
            stack.is_empty(),
            "tasks never ended on {thread:?}: {stack:?}"
        );
    }
    tasks
}

#[test]
fn under_a_foreign_collector_each_op_is_an_itt_task_in_domain_lotus() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("tasks.log");
    let out = trace_run(
        dir.path(),
        PIPELINE,
        &[
            ("INTEL_LIBITTNOTIFY64", recorder().as_os_str()),
            ("LOTUS_TEST_ITT_TASK_LOG", log.as_os_str()),
        ],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.matches("lotus leaves it in place").count(),
        1,
        "the foreign collector is named once: {err}"
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.lines()
            .all(|l| l.ends_with(" lotus") || l.contains(" lotus ")),
        "every task is in domain lotus:\n{text}"
    );
    let tasks = recorded_tasks(&log);
    // The trace's op spans, per thread (a span without tid= ran on the
    // process's main thread, whose id is the pid).
    let logs = read_logs(&dir.path().join("trace"));
    assert_eq!(logs.len(), 1, "one traced process");
    let mut spans: BTreeMap<(u32, u32), Vec<String>> = BTreeMap::new();
    for e in logs[0].events.iter().filter(|e| e.kind() == "op") {
        let tid = e.num("tid").map_or(logs[0].pid, |t| t as u32);
        spans
            .entry((logs[0].pid, tid))
            .or_default()
            .push(e.name.clone());
    }
    assert_eq!(spans.len(), 2, "ops ran on two threads: {spans:?}");
    let mut begun: BTreeMap<(u32, u32), Vec<String>> = tasks
        .iter()
        .map(|(t, v)| (*t, v.iter().map(|t| t.name.clone()).collect()))
        .collect();
    for v in spans.values_mut().chain(begun.values_mut()) {
        v.sort();
    }
    assert_eq!(begun, spans, "one task per op span, on the span's thread");
    // Nesting: each Crop inside an Augment, one Decode inside the
    // Collation; the other ops at the top.
    let main = &tasks[&(logs[0].pid, logs[0].pid)];
    let in_collation = |t: &Task| t.parent.as_deref() == Some("Collation");
    assert_eq!(
        main.iter().filter(|t| in_collation(t)).collect::<Vec<_>>(),
        [&Task {
            name: "Decode".into(),
            parent: Some("Collation".into())
        }]
    );
    for (thread, list) in &tasks {
        for t in list.iter().filter(|t| !in_collation(t)) {
            let want = (t.name == "Crop").then(|| "Augment".to_string());
            assert_eq!(t.parent, want, "{thread:?}: {t:?}");
        }
    }
    assert_eq!(main.iter().filter(|t| t.name == "Decode").count(), 4);
    assert_eq!(main.iter().filter(|t| t.name == "Collation").count(), 1);
    assert_eq!(main.iter().filter(|t| t.name == "Fails").count(), 3);
    assert_eq!(main.iter().filter(|t| t.name == "Tail").count(), 1);
}

#[test]
fn without_ittapi_the_tracer_says_so_once_and_the_job_runs() {
    let dir = tempfile::tempdir().unwrap();
    // An `ittapi` that cannot be imported, first on the job's path.
    let fake = dir.path().join("fake");
    std::fs::create_dir_all(fake.join("ittapi")).unwrap();
    std::fs::write(
        fake.join("ittapi/__init__.py"),
        "raise ImportError('no ittapi here')\n",
    )
    .unwrap();
    let log = dir.path().join("tasks.log");
    // The job starts a second Python process, which traces too.
    let script = format!(
        "{PIPELINE}\nimport subprocess, sys\nsubprocess.run([sys.executable, '-c', {:?}], check=True)\n",
        "import lotus_trace\nlotus_trace.wrap(lambda: 1, 'Child')()\n"
    );
    let out = trace_run(
        dir.path(),
        &script,
        &[
            ("INTEL_LIBITTNOTIFY64", recorder().as_os_str()),
            ("LOTUS_TEST_ITT_TASK_LOG", log.as_os_str()),
            ("PYTHONPATH", fake.as_os_str()),
        ],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.matches("not marked as ITT tasks").count(),
        1,
        "said once for the job: {err}"
    );
    assert!(err.contains("no ittapi here"), "{err}");
    let logs = read_logs(&dir.path().join("trace"));
    assert_eq!(logs.len(), 2, "both processes traced");
    assert!(logs
        .iter()
        .any(|l| l.events.iter().any(|e| e.name == "Child")));
    assert!(recorded_tasks(&log).is_empty());
}

/// The log of ITT tasks lotus's collector wrote in `trace` (exactly one),
/// read strictly: the tracer's header, then event and `#` lines.
fn itt_log(trace: &Path) -> (BTreeMap<String, String>, Vec<Ev>) {
    let logs: Vec<PathBuf> = std::fs::read_dir(trace)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("lotus.itt_main_pid_")
        })
        .collect();
    assert_eq!(logs.len(), 1, "one log of ITT tasks in {trace:?}");
    let text = std::fs::read_to_string(&logs[0]).unwrap();
    assert!(text.ends_with('\n'), "a cut line in {:?}", logs[0]);
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("#lotus-trace v1 role=main pid="),
        "{header}"
    );
    let header: BTreeMap<String, String> = header
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let events = lines
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#'))
        .map(|(i, l)| parse_line(l, "itt log", i + 2))
        .collect();
    (header, events)
}

/// Tasks of the `ittapi` package on two threads: on each, an outer task
/// holding three inner ones that burn CPU.
const ITT_JOB: &str = r#"
import threading, time
import ittapi

domain = ittapi.domain("mylib")

def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

def work(tag):
    with ittapi.task("Outer" + tag, domain=domain):
        for _ in range(3):
            with ittapi.task("Inner", domain=domain):
                burn(0.01)

t = threading.Thread(target=work, args=("T",))
t.start()
work("M")
t.join()
"#;

#[test]
fn under_trace_run_the_tasks_of_an_instrumented_library_become_spans() {
    let dir = tempfile::tempdir().unwrap();
    let out = trace_run(dir.path(), ITT_JOB, &[]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("1 log(s) of ITT tasks"), "{err}");
    let trace = dir.path().join("trace");
    let (header, events) = itt_log(&trace);
    let pid: u32 = header["pid"].parse().unwrap();
    assert!(header.contains_key("run") && header.contains_key("monotonic_ns"));
    assert_eq!(events.len(), 8, "{events:?}");
    assert!(events
        .iter()
        .all(|e| e.kind() == "op" && e.fields.get("domain").map(String::as_str) == Some("mylib")));
    // Per thread: one outer task holding its three inner ones.
    let mut threads: BTreeMap<u32, Vec<&Ev>> = BTreeMap::new();
    for e in &events {
        threads
            .entry(e.num("tid").map_or(pid, |t| t as u32))
            .or_default()
            .push(e);
    }
    assert_eq!(threads.len(), 2, "two threads: {events:?}");
    for (tid, list) in &threads {
        let want_outer = if *tid == pid { "OuterM" } else { "OuterT" };
        let outer: Vec<_> = list
            .iter()
            .filter(|e| e.name.starts_with("Outer"))
            .collect();
        assert_eq!(outer.len(), 1, "{tid}: {list:?}");
        assert_eq!(outer[0].name, want_outer);
        let inner: Vec<_> = list.iter().filter(|e| e.name == "Inner").collect();
        assert_eq!(inner.len(), 3, "{tid}: {list:?}");
        assert!(inner.iter().all(|e| e.within(outer[0])), "{tid}: {list:?}");
    }
    // The readers see them.
    let stats = common::trace_check::stats_json(&trace);
    let text = stats.to_string();
    assert!(
        text.contains("\"Inner\"") && text.contains("\"OuterT\""),
        "{text}"
    );
    let view = dir.path().join("view.json");
    common::lotus_ok(&[
        "trace",
        "view",
        trace.to_str().unwrap(),
        "--out",
        view.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&std::fs::read(&view).unwrap()).unwrap();
    let names: Vec<&str> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(
        names.iter().filter(|n| **n == "Inner").count(),
        6,
        "{names:?}"
    );
    assert!(
        names.contains(&"OuterM") && names.contains(&"OuterT"),
        "{names:?}"
    );
}

#[test]
fn a_job_killed_inside_its_itt_tasks_leaves_a_readable_trace() {
    let dir = tempfile::tempdir().unwrap();
    let job = r#"
import os, signal, time
import ittapi

domain = ittapi.domain("mylib")

def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

outer = ittapi.task("Outer", domain=domain)
outer.begin()
for _ in range(20):
    with ittapi.task("Inner", domain=domain):
        burn(0.02)
ittapi.task("Never", domain=domain).begin()
os.kill(os.getpid(), signal.SIGKILL)
"#;
    let out = trace_run(dir.path(), job, &[]);
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    let trace = dir.path().join("trace");
    let (_, events) = itt_log(&trace);
    // Most ended tasks were written before the kill (the collector writes
    // at least every 100 ms of the thread's tasks); open ones never are.
    let inner = events.iter().filter(|e| e.name == "Inner").count();
    assert!(inner >= 10, "{events:?}");
    assert_eq!(inner, events.len(), "{events:?}");
    let stats = common::trace_check::stats_json(&trace);
    assert!(stats.to_string().contains("\"Inner\""), "{stats}");
}

#[test]
fn a_forked_child_writes_its_own_log_without_the_parents_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let job = r#"
import os
import ittapi

domain = ittapi.domain("mylib")
with ittapi.task("Parent", domain=domain):
    for name in ("Before1", "Before2"):
        with ittapi.task(name, domain=domain):
            pass
    pid = os.fork()
    if pid == 0:
        import lotus_trace
        lotus_trace.set_role("worker")  # as the DataLoader hooks do
        with ittapi.task("Child", domain=domain):
            pass
        os._exit(0)
    os.waitpid(pid, 0)
"#;
    let out = trace_run(dir.path(), job, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let trace = dir.path().join("trace");
    let mut by_log: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(&trace).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name == "lotus.run" {
            continue; // the run's record (command, host, ...), not a log
        }
        // The role is in the name: the child's log is a worker's.
        let role_pid = name.strip_prefix("lotus.itt_").unwrap().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let names = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| parse_line(l, &name, 0).name)
            .collect();
        by_log.insert(role_pid, names);
    }
    let mut logs: Vec<(String, Vec<String>)> = by_log
        .into_iter()
        .map(|(role_pid, mut names)| {
            names.sort();
            (role_pid.split("_pid_").next().unwrap().to_string(), names)
        })
        .collect();
    logs.sort();
    assert_eq!(
        logs,
        [
            (
                "main".to_string(),
                vec!["Before1".to_string(), "Before2".into(), "Parent".into()]
            ),
            ("worker".to_string(), vec!["Child".to_string()])
        ]
    );
}

#[test]
fn a_multiprocessing_worker_that_leaves_through_exit_keeps_its_last_tasks() {
    let dir = tempfile::tempdir().unwrap();
    // Tasks ended in quick succession (within the collector's 100 ms) by a
    // forked multiprocessing worker, which ends with os._exit: no exit
    // handler runs, the tracer's multiprocessing hook does.
    let job = r#"
import multiprocessing as mp
import ittapi
import lotus_trace

domain = ittapi.domain("mylib")

def child():
    lotus_trace.set_role("worker")
    for _ in range(5):
        with ittapi.task("Quick", domain=domain):
            pass
    lotus_trace.wrap(lambda: None, "Op")()

if __name__ == "__main__":
    p = mp.get_context("fork").Process(target=child)
    p.start()
    p.join()
    assert p.exitcode == 0, p.exitcode
"#;
    let out = trace_run(dir.path(), job, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let trace = dir.path().join("trace");
    let worker: Vec<PathBuf> = std::fs::read_dir(&trace)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("lotus.itt_worker_pid_")
        })
        .collect();
    assert_eq!(worker.len(), 1, "{worker:?}");
    let text = std::fs::read_to_string(&worker[0]).unwrap();
    assert_eq!(text.matches("\nSQuick,").count(), 5, "{text}");
}

#[test]
fn the_collector_never_writes_through_a_link_or_file_at_its_log_name() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    // The job plants, at its own ITT log's first names, what another user
    // could: a link, then a file.
    let job = format!(
        r#"
import os
import ittapi

out = os.environ["LOTUS_TRACE_DIR"]
pid = os.getpid()
os.symlink({victim:?}, os.path.join(out, f"lotus.itt_main_pid_{{pid}}"))
with open(os.path.join(out, f"lotus.itt1_main_pid_{{pid}}"), "w") as f:
    f.write("someone else\n")
domain = ittapi.domain("mylib")
with ittapi.task("Planted", domain=domain):
    pass
print(pid)
"#
    );
    let out = trace_run(dir.path(), &job, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let trace = dir.path().join("trace");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(
        std::fs::read_to_string(trace.join(format!("lotus.itt1_main_pid_{pid}"))).unwrap(),
        "someone else\n"
    );
    let log = std::fs::read_to_string(trace.join(format!("lotus.itt2_main_pid_{pid}")))
        .expect("the log under the next free name");
    assert!(log.contains("\nSPlanted,"), "{log}");
}

#[test]
fn itt_tasks_that_cannot_be_written_fail_the_run_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    // Files of the job may not grow past 4 KiB (Python ignores SIGXFSZ,
    // so a write past it fails with EFBIG): the first block fits, the rest
    // does not.
    let job = r#"
import resource
import ittapi

resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
domain = ittapi.domain("mylib")
for _ in range(2000):
    with ittapi.task("Many", domain=domain):
        pass
"#;
    let out = trace_run(dir.path(), job, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write the ITT task log ")
            && err.contains("lotus.itt_main_pid_")
            && err.contains("File too large"),
        "{err}"
    );
    assert!(err.contains("is incomplete"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // What was written before stays readable, in whole lines (the block
    // that was cut short by the limit is taken back).
    let (_, events) = itt_log(&dir.path().join("trace"));
    assert!(!events.is_empty() && events.iter().all(|e| e.name == "Many"));
}

#[test]
fn under_torch_onednns_tasks_become_spans_with_itt_tasks_only() {
    let Some(py) = common::torch::torch_python("under_torch_onednns_tasks_become_spans") else {
        return;
    };
    // A convolution, forward and backward: oneDNN primitives, which begin
    // and end an ITT task each when a collector is loaded.
    let job = "import torch\nm = torch.nn.Conv2d(3, 8, 3)\nx = torch.randn(2, 3, 32, 32)\nfor _ in range(3):\n    m(x).sum().backward()\n";
    let dir = tempfile::tempdir().unwrap();
    let out = trace_run_with(&py, &["--itt-tasks"], dir.path(), job, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (_, events) = itt_log(&dir.path().join("trace"));
    assert!(
        events.iter().any(|e| e.name == "convolution"
            && e.fields
                .get("domain")
                .is_some_and(|d| d.starts_with("dnnl"))),
        "{events:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    // Without --itt-tasks: no collector, no task log.
    let out = trace_run_with(&py, &[], dir.path(), job, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("of ITT tasks"), "{}", stderr(&out));
    let left: Vec<_> = std::fs::read_dir(dir.path().join("trace"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn under_sampling_the_cpu_inside_itt_tasks_is_credited_to_them() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("inner_cpu_ns");
    // Two threads, each an outer task holding inner ones that burn CPU;
    // the job adds up the thread CPU time its inner tasks took.
    let job = format!(
        r#"
import threading, time
import ittapi

domain = ittapi.domain("mylib")
total = []

def work(tag):
    spent = 0
    with ittapi.task("Outer" + tag, domain=domain):
        for _ in range(4):
            with ittapi.task("Inner", domain=domain):
                t0 = time.thread_time_ns()
                while time.thread_time_ns() - t0 < 60_000_000:
                    pass
                spent += time.thread_time_ns() - t0
    total.append(spent)

t = threading.Thread(target=work, args=("T",))
t.start()
work("M")
t.join()
open({report:?}, "w").write(str(sum(total)))
"#
    );
    let out = trace_run_with(
        &python(),
        &[
            "--no-torch",
            "--itt-tasks",
            "--sample",
            "--frequency",
            "1000",
        ],
        dir.path(),
        &job,
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let measured: f64 = std::fs::read_to_string(&report).unwrap().parse().unwrap();
    let trace = dir.path().join("trace");
    let attributed = common::lotus(&["attribute", trace.to_str().unwrap(), "--format", "json"]);
    assert!(
        attributed.status.success(),
        "{}",
        String::from_utf8_lossy(&attributed.stderr)
    );
    let a: Value = serde_json::from_slice(&attributed.stdout).unwrap();
    // Inner runs under two parents (OuterM and OuterT, one per thread):
    // a row at each place in the tree, summed here.
    let inner: Vec<&Value> = a["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "Inner")
        .collect();
    assert!(!inner.is_empty(), "no Inner row: {a:#}");
    let samples: u64 = inner.iter().map(|r| r["samples"].as_u64().unwrap()).sum();
    let got = inner
        .iter()
        .map(|r| r["cpu_ns"].as_u64().unwrap())
        .sum::<u64>() as f64;
    assert!(samples >= 200, "{samples} samples: {a:#}");
    assert!(
        (got - measured).abs() <= 0.2 * measured,
        "Inner: attributed {got} ns, measured {measured} ns: {a:#}"
    );
}

#[test]
fn a_transform_that_raises_still_ends_its_itt_task() {
    let Some(py) = common::torch::torch_python("a_transform_that_raises_still_ends_its_itt_task")
    else {
        return;
    };
    // torchvision's Compose, hooked by the tracer: each transform an op,
    // and an ITT task for the stand-in collector, also when it raises.
    let job = r#"
import torchvision.transforms as T

class Boom:
    def __call__(self, x):
        raise ValueError("on purpose")

failing = T.Compose([T.Lambda(lambda x: x + 1), Boom()])
for _ in range(3):
    try:
        failing(1)
    except ValueError:
        pass
T.Compose([T.Lambda(lambda x: x + 1)])(1)
"#;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("tasks.log");
    let out = trace_run_with(
        &py,
        &[],
        dir.path(),
        job,
        &[
            ("INTEL_LIBITTNOTIFY64", recorder().as_os_str()),
            ("LOTUS_TEST_ITT_TASK_LOG", log.as_os_str()),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // Balanced (checked by the reader), none nested in a failed one.
    let tasks: Vec<Task> = recorded_tasks(&log).into_values().flatten().collect();
    let count = |name: &str| tasks.iter().filter(|t| t.name == name).count();
    // A `Lambda(f)` is named after its function: a lambda by file and line.
    let lambdas = tasks
        .iter()
        .filter(|t| t.name.starts_with("<lambda>@job.py:"))
        .count();
    assert_eq!((lambdas, count("Boom")), (4, 3), "{tasks:?}");
    assert!(tasks.iter().all(|t| t.parent.is_none()), "{tasks:?}");
}
