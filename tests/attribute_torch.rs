//! In-pipeline attribution on the real thing: `lotus trace run --sample`
//! of a torchvision ImageFolder pipeline (fixtures/trace/torch_pipeline.py:
//! JPEGs through RandomResizedCrop, RandomHorizontalFlip, ToTensor and
//! Normalize, two DataLoader workers forked or spawned, three epochs, a model
//! step in the main process), then `lotus attribute DIR`, checked against
//! the pipeline's own per-op thread CPU timers (`--op-cpu`: each op timed
//! inside its call with `time.thread_time_ns`, in the workers).
//!
//! Attribution reads samples and span boundaries only: no op durations,
//! mapping or splitting rule, so the timers it is checked against play no
//! part in what it computes.
//!
//! Torch: see tests/common/torch.rs (skipped by name without torch, a
//! failure with LOTUS_REQUIRE_TORCH=1).

use crate::common;

use std::ffi::OsStr;

use crate::common::sampled::{attribute, attribute_json, sampling, timers};
use crate::common::torch::torch_python;
use crate::common::trace_logs::{assert_ok, trace_run};

/// Sampling frequency: dense enough that every op but the flip gets a few
/// hundred samples in a run of about 20 s of CPU here.
const FREQUENCY_HZ: u64 = 5000;

/// Epochs of the pipeline: three, so that Collation, the smallest op the
/// test needs samples of, gets about 700 (two gave it 473-487 at 5 kHz, under
/// the 500 it is held to, once its batches ran a little faster).
const EPOCHS: u32 = 3;

/// The ops the pipeline runs and times.
const OPS: [&str; 6] = [
    "Loader",
    "RandomResizedCrop",
    "RandomHorizontalFlip",
    "ToTensor",
    "Normalize",
    "Collation",
];

/// One pipeline at a time: two at once on two CPUs would measure mostly
/// how they get in each other's way.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn torchvision_attribution(test: &str, start_method: &str) {
    let Some(py) = torch_python(test) else { return };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let timers_dir = tmp.path().join("timers");
    std::fs::create_dir(&timers_dir).expect("timers");
    let data = tmp.path().join("data");
    let mut args = common::torch::jpeg_pipeline_args(&data, EPOCHS);
    args.extend(["--start-method", start_method, "--model", "--op-cpu"].map(Into::into));
    args.push(timers_dir.clone().into_os_string());
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let f = FREQUENCY_HZ.to_string();
    let out = trace_run(&dir, &["--sample", "-F", &f], &py, &args);
    assert_ok(&out, "trace run --sample");
    let a = attribute_json(&dir);
    // Two workers per epoch, not persistent.
    let t = timers(&timers_dir, "ops_");
    assert_eq!(
        t.reports,
        2 * EPOCHS as usize,
        "every worker wrote its timers"
    );
    let rows = a["rows"].as_array().expect("rows");
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name && r["kind"] == "op")
            .unwrap_or_else(|| panic!("no op row {name}: {a:#}"))
    };
    let interval_ns = 1e9 / FREQUENCY_HZ as f64;
    let sampling = sampling(&dir)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");

    // An op's timer holds the garbage collections its call set off: its
    // row's CPU and its `gc` child row's (`Loader/gc`).
    let op_cpu = |op: &str| {
        let r = row(op);
        let path = format!("{}/gc", r["path"].as_str().expect("path"));
        let gc = rows
            .iter()
            .find(|g| g["path"] == path.as_str() && g["kind"] == "op")
            .map_or(0, |g| g["cpu_ns"].as_u64().expect("cpu"));
        r["cpu_ns"].as_u64().expect("cpu") + gc
    };
    let measured_total: u64 = OPS.iter().map(|op| t.ops[*op]).sum();
    let attributed_total: u64 = OPS.iter().map(|op| op_cpu(op)).sum();
    let mut figures = Vec::new();
    let mut failures = Vec::new();
    for op in OPS {
        let r = row(op);
        let (want, calls) = (t.ops[op], t.calls[op]);
        let got = op_cpu(op) as f64;
        let samples = r["samples"].as_u64().expect("samples");
        let want = want as f64;
        let share_got = got / attributed_total as f64 * 100.0;
        let share_want = want / measured_total as f64 * 100.0;
        figures.push(format!(
            "{op}: attributed {:.1} ms, measured {:.1} ms ({:+.1}%), share {share_got:.1}% vs {share_want:.1}%, {samples} samples",
            got / 1e6,
            want / 1e6,
            (got - want) / want * 100.0
        ));
        assert_eq!(r["calls"].as_u64(), Some(calls), "{op}: calls");
        if (share_got - share_want).abs() > 2.0 {
            failures.push(format!("{op}: share off by more than 2 points"));
        }
        // Within 10% where the op has the samples for it (at least 500,
        // as the issue asks of the fixture pipeline); below that, sampling
        // error alone (each span gets its CPU time over the interval,
        // rounded up or down: the flip's spans hold about one sample
        // each) can pass 10%, so the bound widens by three standard
        // deviations of that error. The timers miss a little of what the
        // spans hold (the call into the timer and out: 1-4% here), so the
        // attributed time runs a few percent above them.
        let bound = if samples >= 500 {
            0.10 * want
        } else {
            0.10 * want + 3.0 * (samples as f64).sqrt() * interval_ns
        };
        if (got - want).abs() > bound {
            failures.push(format!(
                "{op}: CPU time off by more than {:.1} ms",
                bound / 1e6
            ));
        }
    }
    let summary = format!("{start_method}: {}\n{sampling}", figures.join("\n  "));
    eprintln!("{summary}");
    assert!(failures.is_empty(), "{failures:?}\n{summary}");
    // The test needs enough samples to mean something.
    for op in ["Loader", "RandomResizedCrop", "ToTensor", "Collation"] {
        let samples = row(op)["samples"].as_u64().expect("samples");
        assert!(samples >= 500, "{op}: only {samples} samples\n{summary}");
    }

    // What each op ran: its own native code, leaving out the interpreter
    // running the op's Python and the kernel (the flip spends more in
    // those than in its kernel: half its calls flip nothing).
    let file = |m: &str| {
        std::path::Path::new(m)
            .file_name()
            .map_or(String::new(), |f| f.to_string_lossy().into_owned())
    };
    let top = |op: &str| {
        let t = row(op)["top_functions"]
            .as_array()
            .expect("top")
            .iter()
            .find(|t| {
                let m = file(t["module"].as_str().expect("module"));
                !(m.starts_with("python") || m.starts_with("libpython") || m == "[kernel]")
            })
            .unwrap_or_else(|| panic!("{op}: no native function\n{summary}"));
        (
            t["function"].as_str().expect("function").to_string(),
            t["module"].as_str().expect("module").to_string(),
        )
    };
    let (f, module) = top("RandomResizedCrop");
    assert!(
        f.trim_start_matches('_').starts_with("ImagingResample")
            && file(&module).starts_with("_imaging"),
        "RandomResizedCrop's top function: {f} in {module}"
    );
    let (f, module) = top("RandomHorizontalFlip");
    assert!(
        f == "ImagingFlipLeftRight" && file(&module).starts_with("_imaging"),
        "the flip's top function: {f} in {module}"
    );
    let (f, module) = top("Loader");
    assert!(
        file(&module).starts_with("libjpeg"),
        "the loader's top function: {f} in {module}"
    );

    // The rows add up to every sample taken.
    let sum: u64 = rows.iter().map(|r| r["samples"].as_u64().expect("n")).sum();
    assert_eq!(sum, a["total_samples"].as_u64().expect("total"));

    stacks_reach_torch(&dir, rows, &summary);
}

/// The call stacks of the run (`--stacks dwarf`, the default): each row's
/// folded lines add up to its samples; at least 90% of the samples have a
/// chain of two frames or more under their row; and Collation's page
/// faults (the kernel's frames, where kernel mode is sampled) reach the
/// torch code that touched the new batch's memory: an `at::` or `c10::`
/// frame above the fault.
fn stacks_reach_torch(dir: &std::path::Path, rows: &[serde_json::Value], summary: &str) {
    let folded = attribute(dir, "folded");
    let text = String::from_utf8(folded.stdout).expect("utf-8");
    // Each row's path as folded roots it (`/` becomes `;`), its samples.
    let paths: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            let path = r["path"]
                .as_str()
                .unwrap_or(r["name"].as_str().expect("name"));
            (path.replace('/', ";"), r["samples"].as_u64().expect("n"))
        })
        .collect();
    let mut sums: std::collections::BTreeMap<&str, u64> = Default::default();
    let (mut total, mut deep) = (0u64, 0u64);
    let (mut faults, mut faults_in_torch) = (0u64, 0u64);
    for line in text.lines() {
        let (frames, n) = line.rsplit_once(' ').expect("frames count");
        let n: u64 = n.parse().expect("count");
        let (row, _) = paths
            .iter()
            .filter(|(p, _)| frames.starts_with(&format!("{p};")))
            .max_by_key(|(p, _)| p.len())
            .unwrap_or_else(|| panic!("a line under no row: {line}"));
        *sums.entry(row).or_default() += n;
        let below: Vec<&str> = frames[row.len() + 1..].split(';').collect();
        total += n;
        if below.len() >= 2 {
            deep += n;
        }
        if row == "Collation" && below.iter().any(|f| f.contains("page_fault_[k]")) {
            faults += n;
            let fault = below
                .iter()
                .position(|f| f.contains("page_fault_[k]"))
                .unwrap_or(0);
            if below[..fault]
                .iter()
                .any(|f| f.contains("at::") || f.contains("c10::"))
            {
                faults_in_torch += n;
            }
        }
    }
    for (path, n) in &paths {
        assert_eq!(
            sums.get(path.as_str()).copied().unwrap_or(0),
            *n,
            "{path}: folded lines against the row's samples"
        );
    }
    assert!(
        deep * 10 >= total * 9,
        "{deep} of {total} samples with two frames or more under their row\n{summary}"
    );
    eprintln!(
        "stacks: {deep} of {total} samples with two frames or more; Collation: {faults_in_torch} of {faults} page-fault samples under at::/c10::"
    );
    if sampling(dir).get("kernel").map(String::as_str) != Some("1") {
        eprintln!("skipped: Collation's page faults: kernel mode is not sampled here (perf_event_paranoid > 1 and not root)");
        return;
    }
    assert!(
        faults >= 20,
        "Collation: {faults} page-fault samples\n{summary}"
    );
    assert!(
        faults_in_torch * 10 >= faults * 9,
        "Collation: {faults_in_torch} of {faults} page-fault samples under an at::/c10:: frame"
    );
}

#[test]
fn torchvision_attribution_is_exact_with_forked_workers() {
    torchvision_attribution(
        "torchvision_attribution_is_exact_with_forked_workers",
        "fork",
    );
}

#[test]
fn torchvision_attribution_is_exact_with_spawned_workers() {
    torchvision_attribution(
        "torchvision_attribution_is_exact_with_spawned_workers",
        "spawn",
    );
}
