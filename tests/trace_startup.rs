//! Worker start-up and shutdown as rows of their own, and the verdict's
//! time starting and stopping workers, against the job's own timers
//! (fixtures/trace/startup_pipeline.py: a module that burns 300 ms of CPU
//! at import, a worker_init_fn that burns 150 ms, items of 4 ms), in
//! every start method.
//!
//! Torch: see tests/common/torch.rs (skipped by name without torch, a
//! failure with LOTUS_REQUIRE_TORCH=1).

use crate::common;

use std::ffi::OsStr;
use std::path::Path;

use crate::common::sampled::attribute_json;
use crate::common::torch::torch_python;
use crate::common::trace_logs::{assert_ok, trace_run};
use serde_json::Value;

/// The job's own figures: per worker (import, init, process CPU up to
/// the end of its worker_init_fn), and the main process's.
struct Truth {
    workers: Vec<Value>,
    main: Value,
}

impl Truth {
    fn sum(&self, key: &str) -> f64 {
        self.workers
            .iter()
            .map(|w| w[key].as_f64().expect("number"))
            .sum()
    }
}

/// `lotus trace run --sample -F 1000` of the start-up pipeline, its
/// workers started by `method`, for `epochs` epochs (not persistent):
/// the attribution's JSON and the job's truth.
fn startup_run(py: &Path, method: &str, epochs: u32) -> (Value, Truth) {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let reports = tmp.path().join("reports");
    std::fs::create_dir(&reports).expect("reports");
    let script = common::fixture("trace/startup_pipeline.py");
    let epochs = epochs.to_string();
    let args: Vec<&OsStr> = vec![
        script.as_os_str(),
        OsStr::new("--report-dir"),
        reports.as_os_str(),
        OsStr::new("--start-method"),
        OsStr::new(method),
        OsStr::new("--epochs"),
        OsStr::new(&epochs),
    ];
    let out = trace_run(&dir, &["--sample", "-F", "1000"], py, &args);
    assert_ok(&out, "trace run --sample");
    let a = attribute_json(&dir);
    let read = |p: &Path| -> Value {
        serde_json::from_slice(&std::fs::read(p).expect("report")).expect("report JSON")
    };
    let mut workers = Vec::new();
    for e in std::fs::read_dir(&reports).expect("reports") {
        let p = e.expect("entry").path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("worker_") {
            workers.push(read(&p));
        }
    }
    let main = read(&reports.join("main.json"));
    (a, Truth { workers, main })
}

fn row<'a>(a: &'a Value, name: &str) -> Option<&'a Value> {
    a["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["name"] == name)
}

fn cpu(r: Option<&Value>) -> f64 {
    r.map_or(0.0, |r| r["cpu_ns"].as_f64().expect("cpu"))
}

/// The checks of every start method: the workers' CPU outside any op is
/// at most 5% of theirs; the worker_init_fn is its own op row, within
/// 10% of its own timer; the start-up row holds the rest of the
/// workers' CPU up to the end of it (within 10%, with `slack_ns` per
/// worker where it is small: fork's), imports included. Returns what it
/// measured, to print.
fn check_worker_rows(method: &str, a: &Value, truth: &Truth, slack_ns: f64) -> String {
    let rows = a["rows"].as_array().expect("rows");
    let workers_cpu: f64 = rows
        .iter()
        .filter(|r| {
            r["kind"] == "op" || r["name"].as_str().is_some_and(|n| n.ends_with("(worker)"))
        })
        .map(|r| r["cpu_ns"].as_f64().expect("cpu"))
        .sum();
    let outside = cpu(row(a, "outside any op (worker)"));
    let start_up = cpu(row(a, "start-up and imports (worker)"));
    let shutdown = cpu(row(a, "shutdown and exit (worker)"));
    let init = row(a, "Init").map_or(0.0, |r| r["inclusive_cpu_ns"].as_f64().expect("cpu"));
    let n = truth.workers.len() as f64;
    let (init_truth, process_truth, import_truth) = (
        truth.sum("init_ns"),
        truth.sum("process_ns"),
        truth.sum("import_ns"),
    );
    let start_up_truth = process_truth - init_truth;
    let names: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
    let summary = format!(
        "{method}: {n} workers, {:.0} ms of their CPU; outside any op {:.1} ms ({:.1}%); start-up {:.0} ms against {:.0} ms measured (imports {:.0} ms); Init {:.0} ms against {:.0} ms; shutdown {:.0} ms; rows {names:?}",
        workers_cpu / 1e6,
        outside / 1e6,
        outside * 100.0 / workers_cpu.max(1.0),
        start_up / 1e6,
        start_up_truth / 1e6,
        import_truth / 1e6,
        init / 1e6,
        init_truth / 1e6,
        shutdown / 1e6
    );
    assert!(n >= 2.0, "{summary}");
    assert!(outside <= 0.05 * workers_cpu, "{summary}");
    assert!(
        (init - init_truth).abs() <= 0.10 * init_truth,
        "worker_init_fn: {summary}"
    );
    assert!(
        (start_up - start_up_truth).abs() <= 0.10 * start_up_truth + slack_ns * n,
        "start-up: {summary}"
    );
    assert!(start_up >= 0.9 * import_truth, "imports: {summary}");
    summary
}

#[test]
fn fork_workers_start_up_is_a_row_of_its_own() {
    let Some(py) = torch_python("fork_workers_start_up_is_a_row_of_its_own") else {
        return;
    };
    let (a, truth) = startup_run(&py, "fork", 1);
    // A forked worker imports nothing: its start-up is small, so a few
    // ms either way are allowed.
    assert!(truth.sum("import_ns") == 0.0, "{:?}", truth.workers);
    eprintln!("{}", check_worker_rows("fork", &a, &truth, 10e6));
}

#[test]
fn forkserver_workers_start_up_is_a_row_of_its_own() {
    let Some(py) = torch_python("forkserver_workers_start_up_is_a_row_of_its_own") else {
        return;
    };
    let (a, truth) = startup_run(&py, "forkserver", 1);
    assert!(truth.sum("import_ns") > 0.0, "{:?}", truth.workers);
    eprintln!("{}", check_worker_rows("forkserver", &a, &truth, 0.0));
}

/// Spawn workers, not persistent, three epochs: the worker rows as in
/// every start method, and the verdict counts the main process starting
/// and stopping them (in `iter(loader)` and each epoch's last `next()`)
/// within 10% of the loop's own timers, and advises keeping them with
/// what the model predicts that gives.
#[test]
fn spawn_workers_start_up_is_a_row_and_the_verdict_names_their_restarts() {
    let Some(py) =
        torch_python("spawn_workers_start_up_is_a_row_and_the_verdict_names_their_restarts")
    else {
        return;
    };
    let (a, truth) = startup_run(&py, "spawn", 3);
    assert!(truth.sum("import_ns") > 0.0, "{:?}", truth.workers);
    assert_eq!(truth.workers.len(), 6, "{:?}", truth.workers);
    let summary = check_worker_rows("spawn", &a, &truth, 0.0);
    eprintln!("{summary}");

    let v = &a["verdict"];
    let m = &truth.main;
    let own = m["iter_ns"].as_f64().expect("iter") + m["last_next_ns"].as_f64().expect("next");
    let own_loop = m["loop_ns"].as_f64().expect("loop");
    let got = v["start_stop_ns"]
        .as_f64()
        .unwrap_or_else(|| panic!("no start_stop_ns: {v:#}"));
    let got_loop = v["loop_ns"].as_f64().expect("loop");
    let figures = format!(
        "starting and stopping workers: {:.0} ms by the verdict, {:.0} ms by the loop's timers; loop {:.0} ms by the verdict, {:.0} ms by its timer\n{v:#}",
        got / 1e6,
        own / 1e6,
        got_loop / 1e6,
        own_loop / 1e6
    );
    eprintln!("{figures}");
    // The spans lie inside the timed calls: a few ms less per epoch.
    assert!(got <= own && got >= 0.9 * own - 3.0 * 5e6, "{figures}");
    assert!((got_loop - own_loop).abs() <= 0.05 * own_loop, "{figures}");
    assert_eq!(v["starts"], 3, "{figures}");
    // The advice, the model's predictions: persistent workers, with what
    // they would give.
    let advice = v["advice"].as_array().expect("advice");
    let keep = advice
        .iter()
        .find(|x| {
            x["rule"] == "predicted"
                && x["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("--persistent-workers: the loop"))
        })
        .unwrap_or_else(|| panic!("no persistent workers advice: {figures}"));
    let text = keep["text"].as_str().expect("text");
    assert!(text.contains("would start once, not 3 times"), "{text}");
    assert!(
        !advice.iter().any(|x| x["rule"] == "not_the_bottleneck"),
        "{figures}"
    );
    // The main process's CPU while it starts and stops them (pickling the
    // dataset to each worker, joining them) is a row of its own, within
    // that time.
    let main_cpu = cpu(row(&a, "starting and stopping workers (main)"));
    assert!(
        main_cpu > 0.0 && main_cpu <= got,
        "{main_cpu} ns: {figures}"
    );
}
