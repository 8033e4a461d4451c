//! The pipelines `bench/predict.py` checks `lotus predict` against
//! (`fixtures/predict/`, issue 35): each one's own loop timer must be the
//! loop lotus's verdict measures (the same window, so a prediction is
//! compared with what the run really took), and its per-op truth must name
//! the ops as lotus shows them (what `--without OP` takes). Checked on
//! `custom.py` (fork, workers started and stopped every epoch), with
//! persistent workers, and with no workers; and its bad `--without`.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

const OPS: [&str; 8] = [
    "--op",
    "__main__:jitter",
    "--op",
    "__main__:window_stats",
    "--op",
    "__main__:encode_fields",
    "--op",
    "__main__:resample",
];

/// `lotus trace run --out DIR --op ... -- python fixtures/predict/custom.py
/// ARGS --report REPORT`.
fn trace(py: &Path, dir: &Path, report: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "-q", "--out"])
        .arg(dir)
        .args(OPS)
        .arg("--")
        .arg(py)
        .arg(common::fixture("predict").join("custom.py"))
        .args(args)
        .arg("--report")
        .arg(report)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("LOTUS_TRACE_OPS")
        .output()
        .expect("run lotus")
}

fn json(text: &[u8], what: &str) -> serde_json::Value {
    serde_json::from_slice(text).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"))
}

/// The script's report and `lotus trace stats --format json` of one traced run.
fn traced(py: &Path, args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("trace");
    let report = tmp.path().join("report.json");
    let out = trace(py, &dir, &report, args);
    assert!(
        out.status.success(),
        "custom.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "stats", "-q", "--format", "json"])
        .arg(&dir)
        .output()
        .expect("lotus trace stats");
    assert!(
        stats.status.success(),
        "{}",
        String::from_utf8_lossy(&stats.stderr)
    );
    (
        json(&std::fs::read(&report).expect("the report"), "report"),
        json(&stats.stdout, "lotus trace stats"),
    )
}

#[test]
fn predict_fixture_loop_timer_is_the_verdicts_loop_and_its_truth_names_lotuss_ops() {
    let test = "predict_fixture_loop_timer_is_the_verdicts_loop_and_its_truth_names_lotuss_ops";
    let Some(py) = common::torch::torch_python(test) else {
        return;
    };
    for args in [
        &["--workers", "2", "--epochs", "2", "--batches", "6"][..],
        &[
            "--workers",
            "2",
            "--epochs",
            "2",
            "--batches",
            "6",
            "--persistent",
        ],
        &["--workers", "0", "--epochs", "2", "--batches", "6"],
    ] {
        let (report, stats) = traced(&py, args);
        let own = report["loop_s"].as_f64().expect("loop_s");
        let lotus = stats["verdict"]["loop_ns"]
            .as_f64()
            .expect("verdict.loop_ns")
            / 1e9;
        // The same window, timed by two clocks a few Python lines apart at
        // each end (2% leaves room for a preemption there): a timer that
        // left out the first start of the workers, or the last stop, was
        // 6% off here.
        assert!(
            (own - lotus).abs() <= 0.02 * lotus,
            "{args:?}: the script's loop {own:.4} s, lotus's {lotus:.4} s"
        );
        assert_eq!(report["batches"], 12, "{args:?}: {report}");
        // Every op the script times is an op lotus shows, with as many calls.
        let truth = report["ops"].as_object().expect("ops");
        let shown: std::collections::BTreeMap<&str, u64> = stats["ops"]
            .as_array()
            .expect("ops")
            .iter()
            .map(|o| {
                (
                    o["name"].as_str().expect("name"),
                    o["count"].as_u64().expect("count"),
                )
            })
            .collect();
        for (name, t) in truth {
            assert_eq!(
                shown.get(name.as_str()).copied(),
                t["calls"].as_u64(),
                "{args:?}: op {name}: lotus shows {shown:?}"
            );
        }
        for name in report["removable"].as_array().expect("removable") {
            assert!(
                truth.contains_key(name.as_str().expect("name")),
                "{name} is not timed"
            );
        }
    }
}

#[test]
fn predict_fixture_names_its_ops_when_without_names_none_of_them() {
    let test = "predict_fixture_names_its_ops_when_without_names_none_of_them";
    let Some(py) = common::torch::torch_python(test) else {
        return;
    };
    let out = Command::new(&py)
        .arg(common::fixture("predict").join("custom.py"))
        .args(["--batches", "1", "--without", "Jitter"])
        .output()
        .expect("run custom.py");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--without Jitter: no such op")
            && err.contains("jitter, window_stats, encode_fields, resample"),
        "{err}"
    );
}
