//! What the tracer records for `lotus predict` / `lotus tune` (issue 35),
//! checked against `fixtures/pipelines/loader_settings.py`'s own timings:
//! the batch spans' process CPU (`pcpu=`) against each worker's
//! `os.times`, run-queue delays where the kernel has them, the
//! DataLoader's settings (`kind=config`), garbage collections as `gc`
//! spans nested in the op that set them off, and the settings lotus
//! applies (`LOTUS_LOADER`) and its stop after N batches
//! (`LOTUS_STOP_AFTER`).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::sampled::attribute_json;
use crate::common::torch::torch_python;
use crate::common::trace_logs::{assert_ok, read_logs, Ev, Log};

/// A traced run of the fixture.
struct Run {
    out: Output,
    logs: Vec<Log>,
    dir: PathBuf,
    truth: PathBuf,
    _tmp: tempfile::TempDir,
}

/// `lotus trace run -- python loader_settings.py ARGS` with `env` set.
fn run(py: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    run_with(py, &[], args, env)
}

/// [`run`] with `lotus` options `lotus_args` (`--sample`).
fn run_with(py: &Path, lotus_args: &[&str], args: &[&str], env: &[(&str, &str)]) -> Run {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("trace");
    let truth = tmp.path().join("truth");
    std::fs::create_dir_all(&truth).expect("truth folder");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run", "--out"])
        .arg(&dir)
        .args(lotus_args)
        .arg("--")
        .arg(py)
        .arg(common::fixture("pipelines").join("loader_settings.py"))
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TRUTH_DIR", &truth)
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("LOTUS_LOADER")
        .env_remove("LOTUS_STOP_AFTER")
        .env_remove("PYTHONPATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run lotus");
    assert_ok(&out, "loader_settings.py");
    Run {
        out,
        logs: read_logs(&dir),
        dir,
        truth,
        _tmp: tmp,
    }
}

impl Run {
    fn main(&self) -> &Log {
        let mains: Vec<&Log> = self.logs.iter().filter(|l| l.role == "main").collect();
        assert_eq!(mains.len(), 1, "one main process: {:?}", self.logs);
        mains[0]
    }

    fn workers(&self) -> Vec<&Log> {
        self.logs.iter().filter(|l| l.role == "worker").collect()
    }

    fn kind<'a>(log: &'a Log, kind: &str) -> Vec<&'a Ev> {
        log.events.iter().filter(|e| e.kind() == kind).collect()
    }

    /// Worker `pid`'s own timings.
    fn truth_of(&self, pid: u32) -> serde_json::Value {
        let path = self.truth.join(format!("usage_{pid}.json"));
        serde_json::from_str(&std::fs::read_to_string(&path).expect("worker truth")).expect("JSON")
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
}

/// Whether this kernel has `/proc/thread-self/schedstat` (run-queue
/// delays).
fn schedstat_readable() -> bool {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .is_some()
}

fn within(a: u64, b: u64, share: f64) -> bool {
    (a as f64 - b as f64).abs() <= share * (b as f64)
}

#[test]
fn batch_spans_say_the_workers_process_cpu_and_delays() {
    let Some(py) = torch_python("batch_spans_say_the_workers_process_cpu_and_delays") else {
        return;
    };
    let r = run(&py, &["--workers", "2", "--batches", "40"], &[]);
    let workers = r.workers();
    assert_eq!(workers.len(), 2, "{}", r.stderr());
    let delays = schedstat_readable();
    for w in workers {
        let batches = Run::kind(w, "batch");
        assert!(!batches.is_empty(), "worker {} made batches", w.pid);
        let mut pcpu = 0;
        for b in &batches {
            pcpu += b.num("pcpu").expect("pcpu= on every batch span");
            assert!(b.num("pcpu_at").is_some(), "pcpu_at= on {b:?}");
            assert_eq!(
                b.num("delay").is_some(),
                delays,
                "delay= where schedstat is readable: {b:?}"
            );
        }
        let t = r.truth_of(w.pid);
        let (init, last) = (
            t["init_ns"].as_u64().unwrap(),
            t["last_ns"].as_u64().unwrap(),
        );
        // The worker's own CPU from its start-up's end to its last
        // collation: its batches', and the little between them.
        assert!(
            within(pcpu, last - init, 0.10),
            "worker {}: batches' pcpu {pcpu} ns, its own CPU over them {} ns",
            w.pid,
            last - init
        );
        // The first batch's pcpu_at is the start-up's CPU (a child's
        // starts at 0): at least what the worker had used at its init.
        let first = batches
            .iter()
            .map(|b| b.num("pcpu_at").unwrap())
            .min()
            .unwrap();
        assert!(
            first + 10_000_000 >= init && first <= init + 50_000_000,
            "first pcpu_at {first} ns, CPU at worker_init {init} ns"
        );
    }
    let main = r.main();
    for kind in ["wait", "consume"] {
        let evs = Run::kind(main, kind);
        assert_eq!(evs.len(), 40, "{kind} events");
        for e in evs {
            assert!(e.num("pcpu_at").is_some(), "{e:?}");
            assert_eq!(e.num("delay_at").is_some(), delays, "{e:?}");
        }
    }
    for kind in ["start", "stop"] {
        let evs = Run::kind(main, kind);
        assert_eq!(evs.len(), 1, "{kind} events");
        assert!(evs[0].num("pcpu").is_some(), "{:?}", evs[0]);
        assert_eq!(evs[0].num("delay").is_some(), delays, "{:?}", evs[0]);
    }
    // The settings, before the workers start.
    let configs = Run::kind(main, "config");
    assert_eq!(configs.len(), 1, "one iter(loader)");
    let c = &configs[0].fields;
    let want: BTreeMap<String, String> = [
        ("kind", "config"),
        ("workers", "2"),
        ("prefetch", "2"),
        ("persistent", "0"),
        ("pin", "0"),
        ("batch_size", "4"),
        ("method", "fork"),
        ("len", "40"),
        ("overridden", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(c, &want, "{:?}", configs[0]);
    assert!(configs[0].start <= Run::kind(main, "start")[0].start);
}

#[test]
fn lotus_loader_sets_the_workers_and_says_so() {
    let Some(py) = torch_python("lotus_loader_sets_the_workers_and_says_so") else {
        return;
    };
    let r = run(
        &py,
        &["--workers", "2", "--batches", "12"],
        &[("LOTUS_LOADER", "workers=1,persistent=1")],
    );
    assert_eq!(r.workers().len(), 1, "one worker: {}", r.stderr());
    let main = r.main();
    let configs = Run::kind(main, "config");
    assert_eq!(configs.len(), 1);
    let c = &configs[0];
    assert_eq!(
        (c.num("workers"), c.num("persistent"), c.num("overridden")),
        (Some(1), Some(1), Some(1)),
        "{c:?}"
    );
    assert_eq!(Run::kind(main, "consume").len(), 12, "the job ran whole");

    // A malformed value changes nothing, and says which part is wrong.
    let r = run(
        &py,
        &["--workers", "2", "--batches", "8"],
        &[("LOTUS_LOADER", "workers=1,threads=3")],
    );
    assert_eq!(r.workers().len(), 2, "the job's own settings");
    let err = r.stderr();
    assert!(
        err.contains("LOTUS_LOADER") && err.contains("'threads=3'"),
        "stderr names the variable and the bad part: {err}"
    );
    let c = &Run::kind(r.main(), "config")[0];
    assert_eq!((c.num("workers"), c.num("overridden")), (Some(2), Some(0)));

    // Down to no workers: the settings torch refuses then are dropped.
    let r = run(
        &py,
        &["--workers", "2", "--batches", "8"],
        &[("LOTUS_LOADER", "workers=0,prefetch=4,persistent=1")],
    );
    assert_eq!(r.workers().len(), 0, "{}", r.stderr());
    let main = r.main();
    let c = &Run::kind(main, "config")[0];
    assert_eq!(
        (
            c.num("workers"),
            c.fields["prefetch"].as_str(),
            c.num("persistent")
        ),
        (Some(0), "-", Some(0))
    );
    assert!(
        main.comments
            .iter()
            .any(|n| n.contains("LOTUS_LOADER") && n.contains("num_workers=0")),
        "{:?}",
        main.comments
    );
    // Made in the main process, its batch spans say its usage.
    let batches = Run::kind(main, "batch");
    assert_eq!(batches.len(), 8);
    assert!(batches.iter().all(|b| b.num("pcpu").is_some()));
}

/// Whether process `pid` still runs `what` (its command line says so).
fn still_running(pid: u32, what: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains(what))
        .unwrap_or(false)
}

#[test]
fn lotus_stop_after_ends_the_run_cleanly_after_n_batches() {
    let Some(py) = torch_python("lotus_stop_after_ends_the_run_cleanly_after_n_batches") else {
        return;
    };
    let r = run(
        &py,
        &["--workers", "2", "--batches", "40"],
        &[("LOTUS_STOP_AFTER", "5")],
    );
    assert_eq!(r.out.status.code(), Some(0));
    let main = r.main();
    assert_eq!(Run::kind(main, "consume").len(), 5, "{}", r.stderr());
    assert!(
        main.comments
            .iter()
            .any(|c| c.contains("stopped after 5 batches (LOTUS_STOP_AFTER)")),
        "{:?}",
        main.comments
    );
    assert!(
        !r.truth.join("finished").exists(),
        "the job's loop did not run on"
    );
    let workers = r.workers();
    assert_eq!(workers.len(), 2);
    for w in workers {
        assert!(
            !still_running(w.pid, "loader_settings.py"),
            "worker {} is still alive",
            w.pid
        );
    }
    assert_eq!(
        Run::kind(main, "stop").len(),
        1,
        "the workers were shut down"
    );
}

#[test]
fn collections_are_gc_spans_inside_the_op_that_set_them_off() {
    let Some(py) = torch_python("collections_are_gc_spans_inside_the_op_that_set_them_off") else {
        return;
    };
    // Off by default: none without LOTUS_TRACE_GC=1.
    let off = run(&py, &["--workers", "1", "--batches", "6", "--gc"], &[]);
    assert!(
        off.workers()
            .iter()
            .all(|w| w.events.iter().all(|e| e.name != "gc")),
        "gc spans without LOTUS_TRACE_GC"
    );
    let r = run(
        &py,
        &["--workers", "1", "--batches", "6", "--gc"],
        &[("LOTUS_TRACE_GC", "1")],
    );
    let workers = r.workers();
    assert_eq!(workers.len(), 1);
    let w = workers[0];
    let t = r.truth_of(w.pid);
    let ops: Vec<&Ev> = w.events.iter().filter(|e| e.name == "Allocating").collect();
    let gcs: Vec<&Ev> = w.events.iter().filter(|e| e.name == "gc").collect();
    assert!(gcs
        .iter()
        .all(|g| g.kind() == "op" && g.num("gen").is_some_and(|n| n <= 2)));
    let tid = |e: &Ev| e.fields.get("tid").cloned();
    let inside = |g: &Ev| {
        ops.iter()
            .find(|o| g.within(o) && tid(g) == tid(o))
            .copied()
    };
    // The job's timer counts from the end of its worker_init_fn (whose
    // own gc.collect() is a span too).
    let init_end = w
        .events
        .iter()
        .find(|e| e.name == "worker_init")
        .map(|e| e.end())
        .expect("the worker_init_fn's span");
    let gen2: Vec<&Ev> = gcs
        .iter()
        .copied()
        .filter(|g| g.num("gen") == Some(2) && g.start >= init_end)
        .collect();
    let (truth_gc, truth_n) = (t["gc2_ns"].as_u64().unwrap(), t["gc2"].as_u64().unwrap());
    assert!(
        truth_n >= 5,
        "the fixture set off collections of generation 2: {t}"
    );
    assert_eq!(
        gen2.len() as u64,
        truth_n,
        "one span a collection of generation 2"
    );
    let gc_cpu: u64 = gen2.iter().map(|g| g.num("cpu").expect("cpu=")).sum();
    assert!(
        within(gc_cpu, truth_gc, 0.10),
        "gc spans' cpu {gc_cpu} ns, the job's own timing {truth_gc} ns"
    );
    // Nested in the op: its own CPU (less its gc children) is the op's
    // own work.
    let nested: Vec<&Ev> = gcs
        .iter()
        .copied()
        .filter(|g| inside(g).is_some())
        .collect();
    assert!(
        nested.iter().filter(|g| g.num("gen") == Some(2)).count() as u64 + 2 >= truth_n,
        "the collections ran inside Allocating's spans: {} of {truth_n}",
        nested.len()
    );
    let op_cpu: u64 = ops.iter().map(|o| o.num("cpu").expect("cpu=")).sum();
    let child_cpu: u64 = nested.iter().map(|g| g.num("cpu").unwrap()).sum();
    let truth_own = t["getitem_ns"].as_u64().unwrap() - truth_gc;
    assert!(
        within(op_cpu - child_cpu, truth_own, 0.10),
        "Allocating's own cpu {} ns (its spans' {op_cpu} less gc's {child_cpu}), the job's {truth_own} ns",
        op_cpu - child_cpu
    );
    // The model reads them in its batches (whatever the order the tracer
    // wrote a batch's line and its collections in): what `--gc-freeze`
    // takes out is the job's collections.
    let p = common::lotus_ok(&[
        "predict",
        r.dir.to_str().expect("utf8"),
        "--gc-freeze",
        "--format",
        "json",
    ]);
    let p: serde_json::Value = serde_json::from_str(&p).expect("predict JSON");
    let reason = p["scenarios"][0]["reason"].as_str().expect("reason");
    let ms: f64 = reason
        .split_once("inherit took ")
        .and_then(|(_, rest)| rest.split_once(" ms"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no collections' CPU in {reason}"));
    let truth_ms = truth_gc as f64 / 1e6;
    assert!(
        ms >= 0.8 * truth_ms && ms <= 1.5 * truth_ms + 5.0,
        "--gc-freeze takes {ms} ms, the job's collections {truth_ms:.1} ms: {reason}"
    );
}

/// The gc spans in the attribution: a row `Allocating/gc` under the op
/// that set them off, its CPU the collections' (the job's own timing).
#[test]
fn gc_is_a_row_under_its_op_in_the_attribution() {
    let Some(py) = torch_python("gc_is_a_row_under_its_op_in_the_attribution") else {
        return;
    };
    let r = run_with(
        &py,
        &["--sample", "-F", "1000"],
        &["--workers", "1", "--batches", "6", "--gc"],
        &[("LOTUS_TRACE_GC", "1")],
    );
    let a = attribute_json(&r.dir);
    let rows = a["rows"].as_array().expect("rows");
    let row = |path: &str| {
        rows.iter()
            .find(|x| x["path"] == path && x["kind"] == "op")
            .unwrap_or_else(|| panic!("no op row {path}: {a:#}"))
    };
    let gc = row("Allocating/gc");
    let gc_cpu = gc["cpu_ns"].as_u64().expect("cpu_ns");
    let t = r.truth_of(r.workers()[0].pid);
    let truth_gc = t["gc2_ns"].as_u64().unwrap();
    // Collections of generation 0 or 1 of a millisecond or more are spans
    // too: a little more than the job's generation 2.
    assert!(
        gc_cpu >= truth_gc * 9 / 10 && gc_cpu <= truth_gc * 12 / 10,
        "Allocating/gc {gc_cpu} ns, the job's collections {truth_gc} ns"
    );
    row("Allocating");
}
