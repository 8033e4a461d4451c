//! Sampled trace folders (`lotus trace run --sample`) in the tests: the
//! kernel pipeline run sampled, the sampling description, `lotus
//! attribute DIR`, and the per-op CPU timers a pipeline wrote itself.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;

use lotus_samples::SampleFiles;
use serde_json::Value;

use super::trace_logs::{assert_ok, trace_run};

/// The sampling description of the folder's `lotus` samples, `note`
/// lines left out.
pub fn sampling(dir: &Path) -> BTreeMap<String, String> {
    SampleFiles::of(dir, "lotus")
        .read_sampling()
        .expect("sampling")
        .into_iter()
        .filter(|(k, _)| k != "note")
        .collect()
}

/// `lotus attribute DIR --format FORMAT --top 1000`, which must succeed.
pub fn attribute(dir: &Path, format: &str) -> Output {
    let out = super::lotus(&[
        "attribute",
        dir.to_str().expect("utf8"),
        "--format",
        format,
        "--top",
        "1000",
    ]);
    assert_ok(&out, "attribute DIR");
    out
}

/// [`attribute`] as JSON.
pub fn attribute_json(dir: &Path) -> Value {
    serde_json::from_slice(&attribute(dir, "json").stdout).expect("JSON")
}

/// A sampled run of fixtures/trace/kernel_pipeline.py (12 batches, the
/// background threads on): the trace folder and the pipeline's reports,
/// kept while the value lives.
pub struct KernelRun {
    _tmp: tempfile::TempDir,
    /// The trace folder.
    pub dir: PathBuf,
    /// The pipeline's own reports (`worker_<pid>.json`, `main.json`).
    pub reports: PathBuf,
}

/// `lotus trace run --sample EXTRA` of the kernel pipeline, its workers
/// started by `start_method`; the run must succeed.
pub fn kernel_pipeline(start_method: &str, extra: &[&str]) -> KernelRun {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let reports = tmp.path().join("reports");
    std::fs::create_dir(&reports).expect("reports");
    let script = super::fixture("trace/kernel_pipeline.py");
    let args = [
        script.as_os_str(),
        OsStr::new("--report-dir"),
        reports.as_os_str(),
        OsStr::new("--start-method"),
        OsStr::new(start_method),
        OsStr::new("--batches"),
        OsStr::new("12"),
        OsStr::new("--background"),
    ];
    let mut flags = vec!["--sample"];
    flags.extend_from_slice(extra);
    let out = trace_run(&dir, &flags, &super::python(), &args);
    assert_ok(&out, "trace run --sample");
    KernelRun {
        _tmp: tmp,
        dir,
        reports,
    }
}

/// What a pipeline measured itself, summed over its reports: per op the
/// CPU time (ns) and calls, and its background threads' CPU time.
#[derive(Debug, Default)]
pub struct Timers {
    /// CPU ns per op.
    pub ops: BTreeMap<String, u64>,
    /// Calls per op.
    pub calls: BTreeMap<String, u64>,
    /// CPU ns of the background threads, where every report has it.
    pub background_ns: Option<u64>,
    /// How many reports were read.
    pub reports: usize,
}

/// Reads the JSON reports in `dir` whose names start with `prefix`
/// (`{"ops": {name: ns}, "calls": {name: n}, "background_ns"?}`).
pub fn timers(dir: &Path, prefix: &str) -> Timers {
    let mut t = Timers {
        background_ns: Some(0),
        ..Timers::default()
    };
    for entry in std::fs::read_dir(dir).expect("reports") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name").to_string_lossy();
        if !name.starts_with(prefix) || !name.ends_with(".json") {
            continue;
        }
        t.reports += 1;
        let r: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
        for (op, ns) in r["ops"].as_object().expect("ops") {
            *t.ops.entry(op.clone()).or_default() += ns.as_u64().expect("ns");
        }
        for (op, n) in r["calls"].as_object().expect("calls") {
            *t.calls.entry(op.clone()).or_default() += n.as_u64().expect("n");
        }
        t.background_ns = t
            .background_ns
            .zip(r["background_ns"].as_u64())
            .map(|(a, b)| a + b);
    }
    t
}
