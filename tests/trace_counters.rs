//! Counters read with each sample (`lotus trace run --sample --counters`),
//! summed per op by `lotus attribute DIR`, end to end on real perf.
//!
//! This machine has no PMU, so the read-with-each-sample path is checked
//! with software events standing in for cycles and instructions: the
//! samplers read task-clock and context switches as a group with each
//! sample; each op's summed task-clock deltas must match the op's own
//! thread-CPU time as the pipeline measured it. The default counters
//! (cycles, instructions) must be said unsupported, with the kernel's
//! reason, once, and never shown as zeros (or, on a machine with a PMU,
//! read and given a CPI).
//!
//! Python: $LOTUS_PYTHON, else the repository's .venv.

use crate::common;

use std::ffi::OsStr;
use std::path::Path;

use crate::common::python;
use crate::common::sampled::{attribute, kernel_pipeline, sampling, timers};
use crate::common::trace_logs::{assert_ok, trace_run};
use lotus_samples::SampleFiles;
use serde_json::Value;

/// How many counter values each record of the samples file carries.
fn record_counters(dir: &Path) -> usize {
    SampleFiles::open(dir, "lotus")
        .and_then(|f| f.samples())
        .expect("samples")
        .counters()
}

/// Whether this kernel sees a CPU PMU: a perf event source of type
/// `PERF_TYPE_RAW` (4), as `cpu`, `cpu_core` or an ARM PMU registers.
fn has_cpu_pmu() -> bool {
    std::fs::read_dir("/sys/bus/event_source/devices")
        .map(|entries| {
            entries.flatten().any(|e| {
                std::fs::read_to_string(e.path().join("type")).is_ok_and(|t| t.trim() == "4")
            })
        })
        .unwrap_or(false)
}

/// The kernel pipeline (ops on C kernels, each op timed by the pipeline
/// with the thread CPU clock of every thread that ran it), sampled with
/// task-clock and context switches read with each sample.
fn counters_per_op(start_method: &str) {
    let run = kernel_pipeline(
        start_method,
        &[
            "--frequency",
            "2000",
            "--counters",
            "task-clock,context-switches",
        ],
    );
    let dir = &run.dir;
    let meta = sampling(dir);
    assert_eq!(
        meta.get("counters").map(String::as_str),
        Some("task-clock,context-switches"),
        "{meta:?}"
    );
    assert!(!meta.contains_key("counters_unsupported"), "{meta:?}");
    assert_eq!(record_counters(dir), 2);

    let a: Value = serde_json::from_slice(&attribute(dir, "json").stdout).expect("JSON");
    assert_eq!(
        a["counters"],
        serde_json::json!(["task-clock", "context-switches"])
    );
    assert!(a["counters_unsupported"].is_null(), "{a:#}");

    // What the pipeline measured per op, with each op's own thread CPU clocks.
    let measured = timers(&run.reports, "worker_").ops;
    assert_eq!(measured.len(), 2, "{measured:?}");

    let rows = a["rows"].as_array().expect("rows");
    let mut figures = Vec::new();
    let mut checked = 0;
    for r in rows {
        let name = r["name"].as_str().expect("name");
        let Some(&want) = measured.get(name) else {
            continue;
        };
        let samples = r["samples"].as_u64().expect("samples");
        let task_clock = r["counters"]["task-clock"].as_u64().expect("task-clock") as f64;
        let want = want as f64;
        figures.push(format!(
            "{name}: task-clock {:.1} ms, measured {:.1} ms ({:+.2}%), {samples} samples",
            task_clock / 1e6,
            want / 1e6,
            (task_clock - want) / want * 100.0
        ));
        if samples < 500 {
            continue;
        }
        checked += 1;
        assert!(
            (task_clock - want).abs() <= 0.05 * want,
            "{name}: summed task-clock {task_clock} ns, measured {want} ns: {figures:?}"
        );
    }
    // Both ops get about 1000 samples at 2000 Hz: the check must have run.
    assert_eq!(checked, 2, "ops with at least 500 samples: {figures:?}");

    // Every row's counters are non-negative integers, and they add up to
    // the totals over every sample.
    for counter in ["task-clock", "context-switches"] {
        let mut sum = 0u64;
        for r in rows {
            let v = &r["counters"][counter];
            sum += v
                .as_u64()
                .unwrap_or_else(|| panic!("{counter} of {}: {v}", r["name"]));
        }
        assert_eq!(
            Some(sum),
            a["counter_totals"][counter].as_u64(),
            "{counter}: {a:#}"
        );
    }
    let switches = a["counter_totals"]["context-switches"]
        .as_u64()
        .expect("switches");
    assert!(switches > 0, "a pipeline of processes switches: {a:#}");
    assert!(
        rows.iter().all(|r| r["cpi"].is_null()),
        "no CPI without cycles"
    );

    // The table and CSV carry a column per counter.
    let table = String::from_utf8(attribute(dir, "table").stdout).expect("utf8");
    assert!(
        table.contains("task-clock") && table.contains("context-switches"),
        "{table}"
    );
    let csv = String::from_utf8(attribute(dir, "csv").stdout).expect("utf8");
    let header = csv.lines().next().expect("header");
    assert!(header.ends_with(",task-clock,context-switches"), "{header}");
    eprintln!("{start_method}: {}", figures.join("; "));
}

#[test]
fn counters_read_with_each_sample_sum_to_each_ops_cpu_time_with_forked_workers() {
    counters_per_op("fork");
}

#[test]
fn counters_read_with_each_sample_sum_to_each_ops_cpu_time_with_spawned_workers() {
    counters_per_op("spawn");
}

/// The default counters, cycles and instructions: here (no PMU) said
/// unsupported once with the kernel's reason, no counter columns at all;
/// where a PMU exists, read, with a CPI per row.
#[test]
fn default_hardware_counters_are_read_or_said_unsupported_never_zeros() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let out = trace_run(
        &dir,
        &["--sample"],
        &python(),
        &[
            OsStr::new("-c"),
            OsStr::new(
                "import lotus_trace\n\
                 f = lotus_trace.wrap(lambda n: sum(i * i for i in range(n)), 'Squares')\n\
                 for _ in range(20): f(100000)\n",
            ),
        ],
    );
    assert_ok(&out, "trace run --sample");
    let err = String::from_utf8_lossy(&out.stderr);
    let meta = sampling(&dir);
    let json: Value = serde_json::from_slice(&attribute(&dir, "json").stdout).expect("JSON");
    let table = String::from_utf8(attribute(&dir, "table").stdout).expect("utf8");
    let csv = String::from_utf8(attribute(&dir, "csv").stdout).expect("utf8");
    let rows = json["rows"].as_array().expect("rows");
    assert!(!rows.is_empty(), "{json:#}");
    if has_cpu_pmu() {
        assert_eq!(meta["counters"], "cycles,instructions", "{meta:?}");
        assert!(table.contains("CPI"), "{table}");
        let squares = rows.iter().find(|r| r["name"] == "Squares").expect("op");
        assert!(squares["counters"]["cycles"].as_u64().expect("cycles") > 0);
        assert!(squares["cpi"].as_f64().expect("cpi") > 0.0);
        return;
    }
    // No PMU: said once, with the kernel's reason, on each side.
    assert!(!meta.contains_key("counters"), "{meta:?}");
    assert_eq!(meta["counters_unsupported"], "cycles,instructions");
    let reason = &meta["counters_reason"];
    assert!(reason.starts_with("cycles: "), "{reason}");
    assert!(reason.contains("os error"), "the kernel's errno: {reason}");
    assert_eq!(record_counters(&dir), 0);
    assert_eq!(meta["counters_kind"], "hardware");
    // Recorded once: no other line of the description speaks of them.
    let raw = std::fs::read_to_string(dir.join("lotus.sampling")).expect("sampling");
    let about: Vec<&str> = raw.lines().filter(|l| l.contains("cycles")).collect();
    assert_eq!(
        about,
        vec![
            "counters_unsupported=cycles,instructions".to_string(),
            format!("counters_reason={reason}")
        ],
        "{raw}"
    );
    let said = format!("hardware counters: not supported here ({reason})");
    assert_eq!(err.matches(&said).count(), 1, "{err}");
    // The default counters: said by `trace run`, not again by the commands
    // that read the folder (recorded as not asked for).
    assert_eq!(meta["counters_asked"], "default");
    assert!(!table.contains("not supported here"), "said again: {table}");
    let attr_err = String::from_utf8_lossy(&attribute(&dir, "json").stderr).into_owned();
    assert!(
        !attr_err.contains("not supported here"),
        "said again: {attr_err}"
    );
    // Never as zeros: no counter columns, no counters in any row.
    assert!(
        !table.contains("cycles │") && !table.contains("CPI") && !table.contains("┆ cycles"),
        "{table}"
    );
    let header = csv.lines().next().expect("header");
    assert!(
        !header.contains("cycles") && !header.contains("instructions") && !header.contains("cpi"),
        "{header}"
    );
    assert_eq!(json["counters"], serde_json::json!([]));
    assert_eq!(json["counter_totals"], serde_json::json!({}));
    for r in rows {
        assert_eq!(r["counters"], serde_json::json!({}), "{r}");
        assert!(r["cpi"].is_null(), "{r}");
    }
    assert_eq!(json["counters_unsupported"]["reason"], reason.as_str());
    assert_eq!(
        json["counters_unsupported"]["counters"],
        serde_json::json!(["cycles", "instructions"])
    );

    // Asked for (`--counters cycles`): the reading commands say it too,
    // once, in the table's notes wrapped to its width.
    let asked = tmp.path().join("asked");
    let out = trace_run(
        &asked,
        &["--sample", "--counters", "cycles"],
        &python(),
        &[
            OsStr::new("-c"),
            OsStr::new("sum(i * i for i in range(300000))"),
        ],
    );
    assert_ok(&out, "trace run --sample --counters cycles");
    let meta = sampling(&asked);
    assert_eq!(meta["counters_asked"], "yes");
    let said = format!(
        "hardware counters: not supported here ({})",
        meta["counters_reason"]
    );
    let table = String::from_utf8(attribute(&asked, "table").stdout).expect("utf8");
    let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(flat(&table).matches(&flat(&said)).count(), 1, "{table}");
}

/// `--counters` names are checked before anything runs: a usage error
/// (exit 2) naming the counter and the choices.
#[test]
fn unknown_or_repeated_counters_are_usage_errors() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let d = dir.to_str().expect("utf8");
    let err = common::lotus_usage_error(&[
        "trace",
        "run",
        "--sample",
        "--counters",
        "cycles,bogus",
        "--out",
        d,
        "--",
        "true",
    ]);
    assert!(
        err.contains("unknown counter \"bogus\"")
            && err.contains("task-clock")
            && err.contains("`none`"),
        "{err}"
    );
    let err = common::lotus_usage_error(&[
        "trace",
        "run",
        "--sample",
        "--counters",
        "cycles,cycles",
        "--out",
        d,
        "--",
        "true",
    ]);
    assert!(err.contains("named twice"), "{err}");
    let err = common::lotus_usage_error(&[
        "trace",
        "run",
        "--counters",
        "cycles",
        "--out",
        d,
        "--",
        "true",
    ]);
    assert!(err.contains("--sample"), "{err}");
    assert!(!dir.exists(), "nothing ran");
}
