//! Interop with the original study's tools: `lotus trace run --format
//! original` writes logs its scripts read (checked with a test
//! implementation of their parser: pandas `read_csv(header=None)` into
//! three columns), and views already made of a trace (lotus's own, the
//! study's `*_coarse.json`) found in a trace folder are not merged again
//! into `lotus trace view`.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::trace_logs::{assert_ok, trace_run};
use crate::common::{fixture, lotus, lotus_ok, root, s};
use serde_json::Value;

fn python() -> PathBuf {
    std::env::var_os("LOTUS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv/bin/python"))
}

/// The study's parsing (its `delay_and_wait_time_stats_and_plot.py` and
/// `preprocessing_time_stats.py`): each `*worker_pid*` / `*main_pid*` file
/// read by pandas with no header into `name, start_ts, duration`, batch ids
/// taken from the names. Prints each batch's preprocessing time and delay
/// to consumption (ns), and the wait count.
const STUDY_PARSER: &str = r#"
import json, os, sys
import pandas as pd
d = sys.argv[1]
workers, mains = [], []
for f in sorted(os.listdir(d)):
    df = pd.read_csv(os.path.join(d, f), header=None)
    assert len(df.columns) == 3, (f, df.columns)
    df.columns = ["name", "start_ts", "duration"]
    (workers if "worker_pid" in f else mains).append(df)
w = pd.concat(workers)
w = w[w["name"].str.startswith("SBatchPreprocessed")].copy()
w["batch_id"] = w["name"].map(lambda x: int(x.replace("SBatchPreprocessed_", "")))
w["preprocess_finish_ts"] = w["start_ts"] + w["duration"]
m = pd.concat(mains)
waits = m[m["name"].str.startswith("SBatchWait")]
c = m[m["name"].str.startswith("SBatchConsumed")].copy()
c["batch_id"] = c["name"].map(lambda x: int(x.replace("SBatchConsumed_", "")))
c = c.rename(columns={"start_ts": "consume_ts"})[["batch_id", "consume_ts"]]
final = pd.merge(w, c, on="batch_id")
final["delay"] = final["consume_ts"] - final["preprocess_finish_ts"]
print(json.dumps({
    "duration": {str(int(r.batch_id)): int(r.duration) for r in w.itertuples()},
    "delay": {str(int(r.batch_id)): int(r.delay) for r in final.itertuples()},
    "waits": int(len(waits)),
}))
"#;

fn has_pandas(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", "import pandas"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn original_format_logs_are_read_by_the_studys_parser() {
    let py = python();
    if !has_pandas(&py) {
        println!(
            "skipped: original_format_logs_are_read_by_the_studys_parser: pandas is not importable by {} (bash scripts/setup.sh --torch installs it)",
            py.display()
        );
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let report = tmp.path().join("report.json");
    let batches = 6u64;
    let args: Vec<std::ffi::OsString> = vec![
        fixture("trace/pipeline.py").into(),
        "--workers".into(),
        "2".into(),
        "--batches".into(),
        batches.to_string().into(),
        "--batch-size".into(),
        "2".into(),
        "--sleep-ms".into(),
        "1".into(),
        "--spin-ms".into(),
        "1".into(),
        "--report".into(),
        report.clone().into(),
    ];
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let out = trace_run(&dir, &["--format", "original"], &py, &args);
    assert_ok(&out, "the traced pipeline");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 log(s) (1 main, 2 worker)"), "{err}");

    // Nothing but the three columns: no header, no comments, no fields.
    for e in fs::read_dir(&dir).expect("dir") {
        let p = e.expect("entry").path();
        for line in fs::read_to_string(&p).expect("read").lines() {
            let cols: Vec<&str> = line.split(',').collect();
            assert_eq!(cols.len(), 3, "{}: {line}", p.display());
            assert!(
                line.starts_with('S') && !line.contains('='),
                "{}: {line}",
                p.display()
            );
            assert!(
                cols[1].parse::<u64>().is_ok() && cols[2].parse::<u64>().is_ok(),
                "{line}"
            );
        }
    }

    // The study's parser reads them; its figures are lotus's.
    let parsed = Command::new(&py)
        .args(["-c", STUDY_PARSER])
        .arg(&dir)
        .output()
        .expect("python");
    assert_ok(&parsed, "the study's parser");
    let study: Value = serde_json::from_slice(&parsed.stdout).expect("JSON");
    let durations = study["duration"].as_object().expect("durations");
    assert_eq!(durations.len() as u64, batches, "{study}");
    assert_eq!(study["waits"].as_u64(), Some(batches));

    let v: Value = serde_json::from_str(&lotus_ok(&["trace", "stats", s(&dir), "--json"]))
        .expect("stats JSON");
    let mut got_dur = BTreeMap::new();
    let mut got_delay = BTreeMap::new();
    for r in v["per_batch"].as_array().expect("per_batch") {
        let b = r["batch"].as_u64().expect("id").to_string();
        got_dur.insert(b.clone(), r["dur_ns"].as_i64().expect("dur"));
        if let Some(d) = r["delay_ns"].as_i64() {
            got_delay.insert(b, d);
        }
    }
    let want_dur: BTreeMap<String, i64> = durations
        .iter()
        .map(|(k, d)| (k.clone(), d.as_i64().expect("ns")))
        .collect();
    let want_delay: BTreeMap<String, i64> = study["delay"]
        .as_object()
        .expect("delays")
        .iter()
        .map(|(k, d)| (k.clone(), d.as_i64().expect("ns")))
        .collect();
    assert_eq!(got_dur, want_dur);
    assert_eq!(got_delay, want_delay);
    assert_eq!(want_delay.len() as u64, batches);
    // The ops are there too, under their own names.
    let ops: Vec<&str> = v["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|o| o["name"].as_str().expect("name"))
        .collect();
    assert!(ops.contains(&"Sleep") && ops.contains(&"Spin"), "{ops:?}");
}

/// `lotus trace view DIR` and its stderr.
fn view(dir: &Path, out: &Path) -> (Value, String) {
    let o = lotus(&["trace", "view", s(dir), "--out", s(out)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = serde_json::from_slice(&fs::read(out).expect("view")).expect("JSON");
    (v, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Events per (name, phase).
fn counts(v: &Value) -> BTreeMap<(String, String), usize> {
    let mut m = BTreeMap::new();
    for e in v["traceEvents"].as_array().expect("events") {
        let k = (
            e["name"].as_str().unwrap_or("").to_string(),
            e["ph"].as_str().unwrap_or("").to_string(),
        );
        *m.entry(k).or_default() += 1;
    }
    m
}

/// Copies a folder (files and sub-folders).
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for e in fs::read_dir(from).expect("dir") {
        let e = e.expect("entry");
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            fs::copy(&p, to.join(e.file_name())).expect("copy");
        }
    }
}

#[test]
fn views_in_the_trace_folder_are_not_merged_again() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    copy_dir(&fixture("traces/with_torch"), &dir);
    let (clean, clean_err) = view(&dir, &tmp.path().join("clean.json"));
    assert!(
        clean_err.contains("2 PyTorch profiler trace(s) merged"),
        "{clean_err}"
    );

    // The study's visualization_augmenter.py: the profiler trace X.json with
    // its batch events appended, written as X_coarse.json beside it; and the
    // same without that name (the study's events at its end).
    let profiler = dir.join("gpu1_6000.1700000000.pt.trace.json");
    let mut aug: Value = serde_json::from_slice(&fs::read(&profiler).expect("read")).expect("json");
    let events = aug["traceEvents"].as_array_mut().expect("events");
    for b in 0..3i64 {
        events.push(serde_json::json!({"ph": "X", "cat": "user_annotation",
            "name": format!("SBatchPreprocessed_{b}"), "pid": 6001, "tid": 6001,
            "args": {"External id": -1 - b, "correlation": -1 - b}, "ts": 1_700_000_000_000_000i64 + b, "dur": 5}));
        events.push(serde_json::json!({"ph": "X", "cat": "user_annotation",
            "name": format!("SBatchConsumed_{b}"), "pid": 6000, "tid": 6000,
            "args": {"External id": -1 - b, "correlation": -1 - b}, "ts": 1_700_000_000_000_100i64 + b, "dur": 0}));
    }
    let text = serde_json::to_string(&aug).expect("json");
    fs::write(dir.join("gpu1_6000.1700000000.pt.trace_coarse.json"), &text).expect("write");
    fs::write(dir.join("rank1").join("study_viz_trace.json"), &text).expect("write");
    // lotus's own view, written into the folder.
    view(&dir, &dir.join("lotus_view_trace.json"));

    let (again, err) = view(&dir, &tmp.path().join("again.json"));
    assert!(err.contains("2 PyTorch profiler trace(s) merged"), "{err}");
    for name in [
        "gpu1_6000.1700000000.pt.trace_coarse.json",
        "study_viz_trace.json",
        "lotus_view_trace.json",
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(name) && l.contains("left out")),
            "{name}: {err}"
        );
    }
    assert_eq!(counts(&again), counts(&clean), "nothing merged twice");
}
