//! `lotus map --from-trace DIR` (the in-pipeline mapping) and `lotus show
//! MAPPING --against OTHER` (how much of each op's in-pipeline work an
//! isolated mapping explains), on a sampled trace of the fixture pipeline
//! (fixtures/trace/kernel_pipeline.py: ops on C kernels of known cost).
//!
//! Python: $LOTUS_PYTHON, else the repository's .venv.

use crate::common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::common::python;
use crate::common::trace_logs::{assert_ok, trace_run};
use serde_json::Value;

/// One sampled trace of the fixture pipeline (forked workers), made once
/// for the tests of this binary, under cargo's per-test-binary temp folder.
fn sampled_trace() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("map_from_trace");
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("trace");
        let reports = base.join("reports");
        std::fs::create_dir_all(&reports).expect("reports");
        let script = common::fixture("trace/kernel_pipeline.py");
        let args = [
            script.as_os_str(),
            OsStr::new("--report-dir"),
            reports.as_os_str(),
            OsStr::new("--start-method"),
            OsStr::new("fork"),
            OsStr::new("--batches"),
            OsStr::new("8"),
        ];
        let out = trace_run(&dir, &["--sample", "--frequency", "2000"], &python(), &args);
        assert_ok(&out, "trace run --sample");
        dir
    })
}

fn json_of(out: &std::process::Output, what: &str) -> Value {
    assert_ok(out, what);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}"))
}

#[test]
fn the_in_pipeline_mapping_is_the_attribution_s_per_op_functions() {
    let dir = sampled_trace();
    let d = dir.to_str().expect("utf8");
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("in_pipeline.json");
    let f = file.to_str().expect("utf8");
    let out = common::lotus(&["map", "--from-trace", d, "--out", f]);
    assert_ok(&out, "map --from-trace");
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("mapping")).expect("JSON");
    let a = json_of(
        &common::lotus(&["attribute", d, "--format", "json", "--top", "100000"]),
        "attribute DIR",
    );

    assert_eq!(m["schema"], "lotus.mapping/1");
    assert_eq!(m["backend"], "perf");
    assert_eq!(m["environment"]["method"], "in-pipeline");
    assert_eq!(m["environment"]["frequency_hz"], "2000");
    assert_eq!(
        m["environment"]["total_samples"].as_str(),
        Some(a["total_samples"].to_string().as_str())
    );
    // The same ops, with the same samples and functions, in the same order.
    let op_rows: Vec<&Value> = a["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["kind"] == "op")
        .collect();
    let ops = m["ops"].as_array().expect("ops");
    let names = |v: &[&Value]| v.iter().map(|o| o["name"].clone()).collect::<Vec<_>>();
    assert_eq!(names(&ops.iter().collect::<Vec<_>>()), names(&op_rows));
    assert!(ops.len() >= 2, "{m:#}");
    for (op, row) in ops.iter().zip(&op_rows) {
        let name = &op["name"];
        assert_eq!(op["samples"], row["samples"], "{name}");
        let fs = op["functions"].as_array().expect("functions");
        let want = row["top_functions"].as_array().expect("top");
        assert_eq!(fs.len(), want.len(), "{name}: every function is listed");
        for (f, w) in fs.iter().zip(want) {
            assert_eq!(
                (&f["function"], &f["samples"]),
                (&w["function"], &w["samples"]),
                "{name}"
            );
        }
        let total: f64 = fs.iter().map(|f| f["share"].as_f64().expect("share")).sum();
        assert!((total - 1.0).abs() < 1e-9, "{name}: shares sum to {total}");
    }
    let top = |op: &str| {
        ops.iter().find(|o| o["name"] == op).expect("op")["functions"][0]["function"].clone()
    };
    assert_eq!(top("Dot"), "lotus_fixture_dot");
    assert_eq!(top("PoolBlur"), "lotus_fixture_blur");

    // Everything that reads mappings reads it.
    let shown = common::lotus(&["show", f]);
    assert_ok(&shown, "show");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("PoolBlur") && text.contains("lotus_fixture_blur"),
        "{text}"
    );
    let again = json_of(
        &common::lotus(&["show", f, "--format", "json"]),
        "show json",
    );
    assert_eq!(again["ops"], m["ops"]);
}

#[test]
fn from_trace_usage_errors_exit_2_and_a_folder_without_samples_says_what_to_do() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path().to_str().expect("utf8");
    let out = common::lotus(&["map", "--from-trace", d, "--backend", "vtune"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = common::lotus(&["map", "--from-trace", d, "x.py"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    std::fs::write(tmp.path().join("lotus_main_pid_1"), "SA,1,2,kind=op\n").expect("log");
    let out = common::lotus(&["map", "--from-trace", d]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(d) && err.contains("--sample"), "{err}");
}

/// `lotus map` in isolation of the op files in fixtures/mapping_compare/SET.
fn isolated_mapping(set: &str, out: &Path) {
    let dir = common::fixture(&format!("mapping_compare/{set}"));
    let ops = [dir.join("Dot.py"), dir.join("PoolBlur.py")];
    let mut args = vec![
        "map",
        "--backend",
        "perf",
        "--runs",
        "1",
        "--min-samples",
        "1000",
        "--no-baseline",
        "--python",
    ];
    let py = python();
    args.push(py.to_str().expect("utf8"));
    args.extend(ops.iter().map(|p| p.to_str().expect("utf8")));
    args.extend(["--out", out.to_str().expect("utf8")]);
    assert_ok(&common::lotus(&args), &format!("map {set}"));
}

fn against(mapping: &Path, other: &Path, format: &str) -> std::process::Output {
    common::lotus(&[
        "show",
        mapping.to_str().expect("utf8"),
        "--against",
        other.to_str().expect("utf8"),
        "--format",
        format,
    ])
}

#[test]
fn an_isolated_mapping_of_the_same_work_covers_the_pipeline_and_a_wrong_one_does_not() {
    let dir = sampled_trace();
    let tmp = tempfile::tempdir().expect("tmp");
    let pipeline = tmp.path().join("pipeline.json");
    assert_ok(
        &common::lotus(&[
            "map",
            "--from-trace",
            dir.to_str().expect("utf8"),
            "--out",
            pipeline.to_str().expect("utf8"),
        ]),
        "map --from-trace",
    );
    let (same, swapped) = (
        tmp.path().join("same.json"),
        tmp.path().join("swapped.json"),
    );
    isolated_mapping("same", &same);
    isolated_mapping("swapped", &swapped);

    let coverage = |mapping: &Path| {
        let c = json_of(&against(mapping, &pipeline, "json"), "show --against");
        assert_eq!(c["schema"], "lotus.mapping-comparison/1");
        let ops = c["ops"].as_array().expect("ops").clone();
        assert_eq!(ops.len(), 2, "{c:#}");
        (c, ops)
    };
    let kernel_of = |op: &Value| match op["op"].as_str() {
        Some("Dot") => "lotus_fixture_dot",
        Some("PoolBlur") => "lotus_fixture_blur",
        other => panic!("op {other:?}"),
    };
    let (c, ops) = coverage(&same);
    for op in &ops {
        let x = op["coverage"].as_f64().expect("coverage");
        assert!(x > 0.8, "{}: coverage {x}: {c:#}", op["op"]);
        // Its own kernel is not among what the isolated mapping missed.
        assert!(
            op["missed"]
                .as_array()
                .expect("missed")
                .iter()
                .all(|f| f["function"] != kernel_of(op)),
            "{c:#}"
        );
    }
    let (c, ops) = coverage(&swapped);
    for op in &ops {
        let x = op["coverage"].as_f64().expect("coverage");
        assert!(x < 0.2, "{}: coverage {x}: {c:#}", op["op"]);
        // What it missed most is the op's own kernel; what it lists and the
        // op never ran in the pipeline leads with the other kernel.
        assert_eq!(op["missed"][0]["function"], kernel_of(op), "{c:#}");
        let other = if kernel_of(op) == "lotus_fixture_dot" {
            "lotus_fixture_blur"
        } else {
            "lotus_fixture_dot"
        };
        assert_eq!(op["not_run"][0]["function"], other, "{c:#}");
    }

    // The other formats carry the same figures.
    let table = against(&same, &pipeline, "table");
    assert_ok(&table, "table");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("coverage %") && text.contains("PoolBlur"),
        "{text}"
    );
    let md = against(&swapped, &pipeline, "md");
    assert_ok(&md, "md");
    let text = String::from_utf8_lossy(&md.stdout);
    assert!(text.contains("| Dot | "), "{text}");
    let csv = against(&same, &pipeline, "csv");
    assert_ok(&csv, "csv");
    let text = String::from_utf8_lossy(&csv.stdout);
    assert!(
        text.starts_with("op,kind,coverage,") && text.contains("Dot,coverage,0."),
        "{text}"
    );
    // A comparison is not a mapping: --format lotus is a usage error.
    assert_eq!(against(&same, &pipeline, "lotus").status.code(), Some(2));
}
