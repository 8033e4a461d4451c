//! `lotus map --backend perf` on real Python processes: the fixture ops on
//! Pillow, numpy and a C library of known functions.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::common::mapping::op;
use crate::common::{fixture, lotus_env, processes_with, python, write_op, GOOD_OP};
use serde_json::Value;

fn op_files(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| {
            fixture(&format!("ops/{n}.py"))
                .to_string_lossy()
                .to_string()
        })
        .collect()
}

/// Maps `ops` with perf; returns (mapping, stderr). Fails on error.
fn map(ops: &[String], extra: &[&str], out: &Path) -> (Value, String) {
    let py = python();
    let mut args = vec![
        "map",
        "--backend",
        "perf",
        "--out",
        out.to_str().expect("p"),
        "--python",
        py.to_str().expect("p"),
    ];
    args.extend_from_slice(extra);
    args.extend(ops.iter().map(String::as_str));
    let o = lotus_env(&args, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "lotus map failed: {stderr}");
    let m: Value =
        serde_json::from_str(&fs::read_to_string(out).expect("mapping written")).expect("json");
    (m, stderr)
}

fn functions(op: &Value) -> Vec<(String, String, f64)> {
    op["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| {
            (
                f["function"].as_str().expect("f").to_string(),
                f["module"].as_str().expect("m").to_string(),
                f["share"].as_f64().expect("share"),
            )
        })
        .collect()
}

fn share_of(op: &Value, pred: impl Fn(&str, &str) -> bool) -> f64 {
    functions(op)
        .iter()
        .filter(|(f, m, _)| pred(f, m))
        .map(|(_, _, s)| s)
        .sum()
}

/// The top `n` non-baseline functions of an op.
fn top(op: &Value, n: usize) -> Vec<String> {
    op["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter(|f| f["baseline"] != true)
        .take(n)
        .map(|f| {
            format!(
                "{}|{}",
                f["function"].as_str().expect("f"),
                f["module"].as_str().expect("m")
            )
        })
        .collect()
}

/// The frequency `lotus map` samples at by default here: 10 kHz, capped at
/// the kernel's `perf_event_max_sample_rate`.
fn default_frequency_in_force() -> u64 {
    let cap = fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    cap.map_or(10_000, |c| c.clamp(1, 10_000))
}

/// A figure the mapping's `environment` records as text (`frequency_hz`,
/// `sampling_cost_us`, ...).
fn env_figure(m: &Value, key: &str) -> f64 {
    let env = &m["environment"];
    env[key]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key} in {env}"))
}

const ALL_OPS: &[&str] = &[
    "Loader",
    "RandomResizedCrop",
    "RandomHorizontalFlip",
    "ToTensor",
    "Normalize",
    "Collation",
    "CKernels",
];

#[test]
fn an_explicit_frequency_is_kept_and_said_so() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ops = op_files(&["RandomHorizontalFlip"]);
    let settings = [
        "-F",
        "2500",
        "--runs",
        "1",
        "--min-samples",
        "300",
        "--no-baseline",
    ];
    let (m, stderr) = map(&ops, &settings, &tmp.path().join("f.json"));
    let env = &m["environment"];
    let hz = default_frequency_in_force().min(2500);
    assert_eq!(env["frequency_hz"], hz.to_string(), "{env}");
    assert_eq!(env["frequency_source"], "given (-F)", "{env}");
    // Lowering is for the default only.
    assert!(!stderr.contains("note: sampling at"), "{stderr}");
    assert!(env["sampling_cost_us"].is_string(), "{env}");
}

#[test]
fn fixture_ops_map_to_their_kernels() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ops = op_files(ALL_OPS);
    let settings = ["--runs", "1", "--warmup", "2", "--min-samples", "1600"];
    let (m, stderr) = map(&ops, &settings, &tmp.path().join("a.json"));
    assert_eq!(m["schema"], "lotus.mapping/1");
    assert_eq!(m["backend"], "perf");
    assert_eq!(m["unit"], "samples");
    assert!(m["failures"].is_null(), "{m}");
    // 10 kHz by default, or the kernel's maximum where that is lower, or
    // lower still where a sample costs the op so much that 10 kHz would
    // slow it by more than 10%; the mapping says which, and the cost.
    let env = &m["environment"];
    let figure = |key: &str| env_figure(&m, key);
    let (hz, cost_us) = (figure("frequency_hz"), figure("sampling_cost_us"));
    assert_eq!(env["frequency_source"], "default", "{env}");
    let cap = default_frequency_in_force() as f64;
    assert!(hz <= cap, "{env}");
    let slowdown = |hz: f64| cost_us * 1e-6 * hz;
    // As fast as the limit allows, in steps of 500 Hz, and not below 1 kHz.
    assert!(hz == 1000.0 || slowdown(hz) <= 0.1 + 1e-3, "{env}");
    assert!(hz == cap || slowdown(hz + 500.0) > 0.1 - 1e-3, "{env}");
    assert!(
        (figure("sampling_slowdown_pct") - slowdown(hz) * 100.0).abs() < 0.2,
        "{env}"
    );

    for name in ALL_OPS {
        let o = op(&m, name);
        let w = &o["window"];
        let samples = w["samples"].as_u64().expect("samples") as f64;
        // The window lasts until the op used enough CPU time for the
        // samples asked for (1600), whatever else the machine runs.
        assert!(samples >= 1200.0, "{name}: window samples {w}; {stderr}");
        // Every CPU-millisecond of the op (kernel time included) is sampled.
        let cpu_s = w["counters"]["task-clock-ns"].as_f64().expect("task-clock") / 1e9;
        let expected = cpu_s * hz;
        assert!(
            samples >= 0.8 * expected && samples <= 1.2 * expected + 50.0,
            "{name}: {samples} samples for {cpu_s:.3} s of task-clock at {hz} Hz"
        );
        assert!(w["iterations"].as_u64().expect("iterations") >= 1, "{name}");
        let shares: f64 = functions(o).iter().map(|f| f.2).sum();
        assert!(
            (shares - 1.0).abs() < 1e-9,
            "{name}: shares sum to {shares}"
        );
    }

    // Flip: ImagingFlipLeftRight holds most of the op's samples.
    let flip = op(&m, "RandomHorizontalFlip");
    let s = share_of(flip, |f, _| f == "ImagingFlipLeftRight");
    assert!(
        s > 0.5,
        "flip: ImagingFlipLeftRight share {s}: {:?}",
        top(flip, 8)
    );

    // Crop and resize: both of Pillow's resample kernels.
    let crop = op(&m, "RandomResizedCrop");
    for kernel in [
        "ImagingResampleHorizontal_8bpc",
        "ImagingResampleVertical_8bpc",
    ] {
        // Pillow 10+ names them with a leading underscore.
        assert!(
            share_of(crop, |f, _| f.trim_start_matches('_') == kernel) > 0.02,
            "crop: {kernel} missing: {:?}",
            top(crop, 10)
        );
    }

    // The C library op: its known functions, in its module, and none of the
    // Pillow kernels.
    let ck = op(&m, "CKernels");
    let known = share_of(ck, |f, m| {
        f.starts_with("lotus_fixture_") && m.starts_with("liblotus_fixture_kernels")
    });
    assert!(
        known > 0.5,
        "CKernels: known functions share {known}: {:?}",
        top(ck, 8)
    );
    let names: BTreeSet<String> = functions(ck).into_iter().map(|f| f.0).collect();
    assert!(
        names.contains("lotus_fixture_dot") && names.contains("lotus_fixture_blur"),
        "{names:?}"
    );
    for foreign in [
        "ImagingFlipLeftRight",
        "ImagingResampleHorizontal_8bpc",
        "ImagingResampleVertical_8bpc",
    ] {
        assert!(!names.contains(foreign), "CKernels shows {foreign}");
    }
    // ...and no other op shows the C library's functions.
    for name in ALL_OPS.iter().filter(|n| **n != "CKernels") {
        assert!(
            share_of(op(&m, name), |f, _| f.starts_with("lotus_fixture_")) == 0.0,
            "{name} shows lotus_fixture_*"
        );
    }

    // JPEG load: the libjpeg module Pillow bundles holds most of the op's
    // user-space time. Kernel time is left out of this share: how much of
    // it an op is charged (page faults, and the scheduler's switches, which
    // grow when other processes compete for the CPUs) depends on the
    // machine's load, not on the op.
    let loader = op(&m, "Loader");
    let user = share_of(loader, |_, m| m != "[kernel]");
    let jpeg = share_of(loader, |_, m| m.starts_with("libjpeg")) / user;
    assert!(
        jpeg > 0.3,
        "Loader: libjpeg share of user-space samples {jpeg}: {:?}",
        top(loader, 8)
    );

    // The harness floor is recorded and marks interpreter functions.
    assert_eq!(m["baseline"]["name"], "(empty)");

    // A second, separate mapping gives the same top functions: the same
    // first function, and the same set of functions holding over 10% of
    // the op (smaller ones trade places from run to run).
    let again = ["RandomHorizontalFlip", "RandomResizedCrop", "CKernels"];
    let (m2, _) = map(&op_files(&again), &settings, &tmp.path().join("b.json"));
    let major = |o: &Value| -> BTreeSet<String> {
        functions(o)
            .into_iter()
            .filter(|f| f.2 > 0.10)
            .map(|f| format!("{}|{}", f.0, f.1))
            .collect()
    };
    for name in again {
        let (a, b) = (op(&m, name), op(&m2, name));
        assert_eq!(
            top(b, 1),
            top(a, 1),
            "{name}: top function differs between two mappings"
        );
        assert_eq!(
            major(b),
            major(a),
            "{name}: functions over 10% differ between two mappings"
        );
        assert!(!major(a).is_empty(), "{name}");
    }
}

#[test]
fn failing_ops_are_reported_and_the_others_still_mapped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let good = write_op(d, "Good", GOOD_OP);
    let raises = write_op(
        d,
        "Raises",
        "def op(x):\n    raise ValueError('bad pixel 42')\n",
    );
    let syntax = write_op(d, "Syntax", "def op(x)\n    return x\n");
    let hangs = write_op(
        d,
        "Hangs",
        "import time\ndef op(x):\n    time.sleep(3600)\n",
    );
    let crashes = write_op(
        d,
        "Crashes",
        "import os, signal\ndef op(x):\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
    );
    let out = d.join("m.json");
    let py = python();
    let tmpdir = d.join("tmp");
    fs::create_dir(&tmpdir).expect("mkdir");
    let paths: Vec<&str> = [&good, &raises, &syntax, &hangs, &crashes]
        .iter()
        .map(|p| p.to_str().expect("p"))
        .collect();
    let mut args = vec![
        "map",
        "--backend",
        "perf",
        "--runs",
        "1",
        "--warmup",
        "1",
        "--min-samples",
        "400",
        "--timeout",
        "4",
        "--no-baseline",
        "--python",
        py.to_str().expect("p"),
        "--out",
        out.to_str().expect("p"),
    ];
    args.extend(paths);
    let o = lotus_env(&args, &[("TMPDIR", tmpdir.as_os_str())]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("op Raises")
            && err.contains("ValueError: bad pixel 42")
            && err.contains("Traceback"),
        "{err}"
    );
    assert!(
        err.contains("op Syntax") && err.contains("syntax error") && err.contains("Syntax.py:1"),
        "{err}"
    );
    assert!(
        err.contains("op Hangs") && err.contains("--timeout"),
        "{err}"
    );
    assert!(
        err.contains("op Crashes") && err.contains("signal 11 (SIGSEGV)"),
        "{err}"
    );
    assert!(err.contains("4 of 5 op(s) could not be mapped"), "{err}");
    let m: Value =
        serde_json::from_str(&fs::read_to_string(&out).expect("good op written")).expect("json");
    assert_eq!(m["ops"].as_array().map(Vec::len), Some(1));
    assert_eq!(m["ops"][0]["name"], "Good");
    let failed: BTreeSet<&str> = m["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| f["op"].as_str().expect("op"))
        .collect();
    assert_eq!(
        failed,
        ["Crashes", "Hangs", "Raises", "Syntax"]
            .into_iter()
            .collect()
    );
    // Nothing left behind: no process of the hung op, no temporary files.
    assert!(
        processes_with(hangs.to_str().expect("p")).is_empty(),
        "stray processes"
    );
    let left: Vec<_> = fs::read_dir(&tmpdir).expect("list").collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn missing_python_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let good = write_op(tmp.path(), "Good", GOOD_OP);
    let o = lotus_env(
        &[
            "map",
            "--backend",
            "perf",
            "--python",
            "/nonexistent/python3",
            good.to_str().expect("p"),
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--python /nonexistent/python3") && err.contains("no such interpreter"),
        "{err}"
    );
    let o = lotus_env(
        &["map", "--backend", "perf", good.to_str().expect("p")],
        &[
            ("PATH", std::ffi::OsStr::new("/nonexistent")),
            ("VIRTUAL_ENV", std::ffi::OsStr::new("")),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    if std::env::var_os("LOTUS_PYTHON").is_none() {
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("no Python found"), "{err}");
    }
}

#[test]
fn missing_op_file_is_named_before_anything_runs() {
    let o = lotus_env(&["map", "--backend", "perf", "/nonexistent/Op.py"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("/nonexistent/Op.py: no such file"), "{err}");
}

#[test]
fn ctrl_c_stops_children_and_keeps_finished_ops() {
    use std::process::{Command, Stdio};
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let good = write_op(d, "Good", GOOD_OP);
    let marker = format!("lotus_ctrl_c_{}", std::process::id());
    let slow = write_op(
        d,
        &marker,
        "import time\ndef op(x):\n    time.sleep(3600)\n",
    );
    let out = d.join("m.json");
    let tmpdir = d.join("tmp");
    fs::create_dir(&tmpdir).expect("mkdir");
    let py = python();
    let child = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args([
            "map",
            "--backend",
            "perf",
            "--runs",
            "1",
            "--warmup",
            "1",
            "--min-samples",
            "400",
            "--no-baseline",
        ])
        .args([
            "--python",
            py.to_str().expect("p"),
            "--out",
            out.to_str().expect("p"),
        ])
        .args([&good, &slow])
        .env("TMPDIR", &tmpdir)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lotus");
    // Wait until the slow op's Python process is running.
    let start = std::time::Instant::now();
    // The harness process runs the slow op (lotus's own command line names
    // the op file too, so look for the harness script beside it).
    let harness_running = || {
        processes_with(&marker).into_iter().any(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains("lotus_harness.py"))
                .unwrap_or(false)
        })
    };
    while !harness_running() {
        assert!(start.elapsed().as_secs() < 30, "slow op never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc_kill(child.id() as i32, 2) };
    let o = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    let m: Value =
        serde_json::from_str(&fs::read_to_string(&out).expect("finished op kept")).expect("json");
    assert_eq!(m["ops"][0]["name"], "Good");
    assert!(
        processes_with(&marker).is_empty(),
        "the interrupted op's process is still running"
    );
    let left: Vec<_> = fs::read_dir(&tmpdir).expect("list").collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn harness_floor_marks_and_exclude_baseline_drops_interpreter_functions() {
    let tmp = tempfile::tempdir().expect("tmp");
    let good = write_op(tmp.path(), "Good", GOOD_OP);
    let ops = vec![good.to_string_lossy().to_string()];
    let settings = ["--runs", "1", "--warmup", "1", "--min-samples", "800"];
    let (marked, _) = map(&ops, &settings, &tmp.path().join("a.json"));
    let floor: BTreeSet<String> = functions(&marked["baseline"])
        .into_iter()
        .map(|f| format!("{}|{}", f.0, f.1))
        .collect();
    assert!(
        !floor.is_empty(),
        "the floor shows the interpreter: {marked}"
    );
    let good_op = op(&marked, "Good");
    for f in good_op["functions"].as_array().expect("functions") {
        let key = format!(
            "{}|{}",
            f["function"].as_str().expect("f"),
            f["module"].as_str().expect("m")
        );
        assert_eq!(f["baseline"].as_bool(), Some(floor.contains(&key)), "{key}");
    }
    // Two runs of the op, one of the floor: the floor only marks functions,
    // and is measured once per invocation.
    let mut excluded_args = settings.to_vec();
    excluded_args[1] = "2";
    excluded_args.push("--exclude-baseline");
    let (excluded, stderr) = map(&ops, &excluded_args, &tmp.path().join("b.json"));
    assert_eq!(op(&excluded, "Good")["runs"], 2, "{stderr}");
    assert_eq!(excluded["baseline"]["runs"], 1, "{stderr}");
    assert!(stderr.contains("(harness floor) run 1/1"), "{stderr}");
    let kept = op(&excluded, "Good")["functions"]
        .as_array()
        .expect("functions")
        .clone();
    assert!(
        !kept.is_empty(),
        "sorting a list runs functions the empty op does not"
    );
    let floor2: BTreeSet<String> = functions(&excluded["baseline"])
        .into_iter()
        .map(|f| format!("{}|{}", f.0, f.1))
        .collect();
    for f in &kept {
        let key = format!(
            "{}|{}",
            f["function"].as_str().expect("f"),
            f["module"].as_str().expect("m")
        );
        assert!(!floor2.contains(&key), "{key} is in the floor but was kept");
        assert_eq!(f["baseline"], false);
    }
    let shares: f64 = kept
        .iter()
        .map(|f| f["share"].as_f64().expect("share"))
        .sum();
    assert!((shares - 1.0).abs() < 1e-9);
}

/// Ends the hogs of a test, also when it fails.
struct Hogs(Vec<std::process::Child>);

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// On a CPU crowded by other work (three busy loops pinned to the CPU the
/// op runs on, so the op gets about a quarter of it), the window still
/// holds the samples asked for: the time the op waited for the CPU is not
/// counted against the wall-time cap meant for ops that mostly wait.
#[test]
fn a_window_on_a_crowded_cpu_still_holds_its_samples() {
    if !Path::new("/usr/bin/taskset").exists() {
        eprintln!(
            "skipped: a_window_on_a_crowded_cpu_still_holds_its_samples: no taskset (util-linux)"
        );
        return;
    }
    let hogs = Hogs(
        (0..3)
            .map(|_| {
                std::process::Command::new("/usr/bin/taskset")
                    .args(["-c", "0", "sh", "-c", "while :; do :; done"])
                    .spawn()
                    .expect("hog")
            })
            .collect(),
    );
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("m.json");
    let py = python();
    let o = std::process::Command::new("/usr/bin/taskset")
        .args([
            "-c",
            "0",
            env!("CARGO_BIN_EXE_lotus"),
            "map",
            "--backend",
            "perf",
        ])
        .args([
            "--runs",
            "1",
            "--warmup",
            "1",
            "--min-samples",
            "800",
            "--no-baseline",
        ])
        .arg("--python")
        .arg(&py)
        .arg("--out")
        .arg(&out)
        .args(op_files(&["RandomHorizontalFlip"]))
        .output()
        .expect("lotus");
    drop(hogs);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let m: Value = serde_json::from_str(&fs::read_to_string(&out).expect("m")).expect("json");
    let w = &op(&m, "RandomHorizontalFlip")["window"];
    let samples = w["samples"].as_f64().expect("samples");
    let cpu_s = w["counters"]["task-clock-ns"].as_f64().expect("task-clock") / 1e9;
    let wall_s = w["seconds"].as_f64().expect("seconds");
    // It really was crowded: the window took well over its CPU time.
    assert!(wall_s > 2.0 * cpu_s, "{w}");
    assert!(samples >= 0.9 * 800.0, "{samples} samples: {w}\n{stderr}");
    let hz = env_figure(&m, "frequency_hz");
    assert!(samples >= 0.8 * cpu_s * hz, "{w}");
}

/// Under perf the op process stamps its own window edges and reads its own
/// counters by default; `--round-trip` has lotus mark them (the reference).
/// On the same op both windows hold the samples their CPU time gives, the
/// op's kernel keeps its share, and the counters are there in both.
#[test]
fn stamped_windows_agree_with_the_round_trip_on_the_same_op() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ops = op_files(&["RandomHorizontalFlip"]);
    let settings = [
        "--runs",
        "1",
        "--warmup",
        "2",
        "--min-samples",
        "1500",
        "--no-baseline",
    ];
    let (stamped, e1) = map(&ops, &settings, &tmp.path().join("stamped.json"));
    let mut reference = settings.to_vec();
    reference.push("--round-trip");
    let (round_trip, e2) = map(&ops, &reference, &tmp.path().join("round-trip.json"));
    assert!(
        stamped["environment"]["window_edges"]
            .as_str()
            .is_some_and(|s| s.contains("stamped by the op process")),
        "{stamped}"
    );
    assert!(
        round_trip["environment"]["window_edges"]
            .as_str()
            .is_some_and(|s| s.contains("round trip")),
        "{round_trip}"
    );
    let mut per_cpu_second = Vec::new();
    let mut flip = Vec::new();
    for (m, stderr) in [(&stamped, &e1), (&round_trip, &e2)] {
        let o = op(m, "RandomHorizontalFlip");
        let w = &o["window"];
        let samples = w["samples"].as_f64().expect("samples");
        let cpu_s = w["counters"]["task-clock-ns"].as_f64().expect("task-clock") / 1e9;
        let hz = env_figure(m, "frequency_hz");
        assert!(samples >= 1200.0, "{w}\n{stderr}");
        assert!(
            samples >= 0.8 * cpu_s * hz && samples <= 1.2 * cpu_s * hz + 50.0,
            "{samples} samples for {cpu_s} s of CPU at {hz} Hz: {w}"
        );
        for counter in ["page-faults", "context-switches"] {
            assert!(w["counters"][counter].is_number(), "{counter}: {w}");
        }
        assert!(
            w["seconds"].as_f64().expect("seconds") >= cpu_s * 0.9,
            "{w}"
        );
        // Per CPU-second and per hertz: each map chose its own default
        // frequency from what a sample cost at its start.
        per_cpu_second.push(samples / cpu_s / hz);
        flip.push(share_of(o, |f, _| f == "ImagingFlipLeftRight"));
    }
    let ratio = per_cpu_second[0] / per_cpu_second[1];
    assert!(
        (0.85..=1.15).contains(&ratio),
        "samples per CPU-second and hertz: stamped {} vs round trip {}",
        per_cpu_second[0],
        per_cpu_second[1]
    );
    assert!(
        (flip[0] - flip[1]).abs() < 0.1 && flip[0] > 0.5,
        "ImagingFlipLeftRight's share: stamped {} vs round trip {}",
        flip[0],
        flip[1]
    );
}

/// Under perf the op module is imported once per op (the fork server) and
/// each run is a fresh process forked from it before the op's first call:
/// setup() runs in three distinct children of the importing process.
/// `--no-fork-server` starts one interpreter per run, importing each time.
#[test]
fn the_fork_server_imports_the_op_once_and_forks_each_run() {
    let tmp = tempfile::tempdir().expect("tmp");
    let log = tmp.path().join("log");
    let body = format!(
        "import os\n\
         LOG = {log:?}\n\
         with open(LOG, 'a') as f:\n    f.write(f'import {{os.getpid()}}\\n')\n\
         def setup():\n    \
             with open(LOG, 'a') as f:\n        f.write(f'setup {{os.getpid()}} {{os.getppid()}}\\n')\n    \
             return list(range(2000))\n\
         def op(x):\n    return sorted(x)\n",
        log = log.to_str().expect("utf-8")
    );
    let op_file = write_op(tmp.path(), "Forked", &body);
    let ops = vec![op_file.to_str().expect("p").to_string()];
    let settings = [
        "--runs",
        "3",
        "--warmup",
        "1",
        "--min-samples",
        "300",
        "--no-baseline",
    ];
    let lines = |log: &Path| -> Vec<Vec<String>> {
        fs::read_to_string(log)
            .expect("log")
            .lines()
            .map(|l| l.split(' ').map(str::to_string).collect())
            .collect()
    };

    let (m, stderr) = map(&ops, &settings, &tmp.path().join("a.json"));
    assert_eq!(op(&m, "Forked")["window"]["windows"], 3, "{m}\n{stderr}");
    let seen = lines(&log);
    let imports: Vec<&Vec<String>> = seen.iter().filter(|l| l[0] == "import").collect();
    let setups: Vec<&Vec<String>> = seen.iter().filter(|l| l[0] == "setup").collect();
    assert_eq!(imports.len(), 1, "imported once: {seen:?}");
    assert_eq!(setups.len(), 3, "{seen:?}");
    let server = &imports[0][1];
    let children: BTreeSet<&String> = setups.iter().map(|l| &l[1]).collect();
    assert_eq!(children.len(), 3, "a fresh process per run: {seen:?}");
    assert!(!children.contains(server), "{seen:?}");
    assert!(
        setups.iter().all(|l| &l[2] == server),
        "each run forked from the importing process: {seen:?}"
    );

    fs::remove_file(&log).expect("rm log");
    let mut one_per_run = settings.to_vec();
    one_per_run.push("--no-fork-server");
    let (m, stderr) = map(&ops, &one_per_run, &tmp.path().join("b.json"));
    assert_eq!(op(&m, "Forked")["window"]["windows"], 3, "{m}\n{stderr}");
    let seen = lines(&log);
    assert_eq!(
        seen.iter().filter(|l| l[0] == "import").count(),
        3,
        "{seen:?}"
    );
}

/// A fork server's run that crashes or hangs after a good one fails its op
/// with the run's number and the cause, as a process of its own would; the
/// other op is still mapped and nothing is left running.
#[test]
fn a_later_run_that_crashes_or_hangs_fails_its_op_by_run() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    // setup() counts the runs in a file beside the op; run 2 misbehaves.
    let misbehaves = |what: &str| {
        format!(
            "import os, signal, time\n\
             COUNT = os.path.join(os.path.dirname(os.path.abspath(__file__)), {what:?} + '.count')\n\
             def setup():\n    \
                 n = int(open(COUNT).read()) + 1 if os.path.exists(COUNT) else 1\n    \
                 open(COUNT, 'w').write(str(n))\n    \
                 if n == 2:\n        \
                     {}\n    \
                 return list(range(2000))\n\
             def op(x):\n    return sorted(x)\n",
            if what == "Crash2" {
                "os.kill(os.getpid(), signal.SIGSEGV)"
            } else {
                "time.sleep(3600)"
            }
        )
    };
    let crash = write_op(d, "Crash2", &misbehaves("Crash2"));
    let hang = write_op(d, "Hang2", &misbehaves("Hang2"));
    let good = write_op(d, "Good", GOOD_OP);
    let out = d.join("m.json");
    let py = python();
    let args = [
        "map",
        "--backend",
        "perf",
        "--runs",
        "3",
        "--warmup",
        "1",
        "--min-samples",
        "300",
        "--timeout",
        "4",
        "--no-baseline",
        "--python",
        py.to_str().expect("p"),
        "--out",
        out.to_str().expect("p"),
        crash.to_str().expect("p"),
        hang.to_str().expect("p"),
        good.to_str().expect("p"),
    ];
    let o = lotus_env(&args, &[]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(1), "{err}");
    let line = |op: &str| {
        err.lines()
            .find(|l| l.contains(&format!("op {op} (")))
            .unwrap_or_else(|| panic!("no error for {op}: {err}"))
            .to_string()
    };
    let crashed = line("Crash2");
    assert!(
        crashed.contains("run 2") && crashed.contains("signal 11 (SIGSEGV)"),
        "{crashed}"
    );
    let hung = line("Hang2");
    assert!(
        hung.contains("run 2") && hung.contains("--timeout 4"),
        "{hung}"
    );
    let m: Value = serde_json::from_str(&fs::read_to_string(&out).expect("written")).expect("json");
    assert_eq!(op(&m, "Good")["window"]["windows"], 3, "{m}");
    assert!(
        processes_with(hang.to_str().expect("p")).is_empty(),
        "stray processes"
    );
}

/// The harness floor runs beside the first op's import (a slow import, as
/// torch's, is the case it is for), and the op's runs wait for it: the op
/// module sees the floor's process while it imports, and no run of the op
/// starts while that process is alive. The floor's functions still mark
/// the mapping's baseline.
#[test]
fn the_floor_runs_beside_the_first_import_and_never_beside_a_run() {
    let tmp = tempfile::tempdir().expect("tmp");
    let seen = tmp.path().join("seen");
    let overlap = tmp.path().join("overlap");
    let body = format!(
        r#"import os, time

def _floor_alive():
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{{pid}}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"--empty" in args and any(a.endswith(b"lotus_harness.py") for a in args):
            return True
    return False

# A slow import: look for the floor for up to 20 s.
_deadline = time.monotonic() + 20
while time.monotonic() < _deadline:
    if _floor_alive():
        open({seen:?}, "w").close()
        break
    time.sleep(0.01)

def setup():
    if _floor_alive():
        open({overlap:?}, "w").close()
    return list(range(2000))

def op(x):
    return sorted(x, reverse=True)
"#,
        seen = seen.to_str().expect("utf-8"),
        overlap = overlap.to_str().expect("utf-8"),
    );
    let file = write_op(tmp.path(), "SlowImport", &body);
    let ops = vec![file.to_str().expect("utf-8").to_string()];
    let settings = ["--runs", "2", "--min-samples", "300", "-F", "2000"];
    let (m, stderr) = map(&ops, &settings, &tmp.path().join("m.json"));
    assert!(
        seen.exists(),
        "the floor did not run beside the import: {stderr}"
    );
    assert!(
        !overlap.exists(),
        "a run started beside the floor: {stderr}"
    );
    assert!(stderr.contains("(harness floor) run 1/1"), "{stderr}");
    let o = op(&m, "SlowImport");
    assert!(
        o["functions"]
            .as_array()
            .expect("functions")
            .iter()
            .any(|f| f["baseline"] == true),
        "no function marked baseline: {o}"
    );
}

/// After each window the harness calls the op again with sampling stopped
/// (lotus stops the samplers over the control channel) and times the
/// calls: the mapping keeps them beside the windows, each run's progress
/// line says what sampling cost a call, and `lotus show` prints both
/// figures. Sampling only adds work, so a sampled call takes at least
/// about the CPU time of an unsampled one.
#[test]
fn each_op_is_timed_unsampled_after_its_windows() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ops = op_files(&["RandomHorizontalFlip"]);
    let out = tmp.path().join("m.json");
    let (m, stderr) = map(
        &ops,
        &[
            "--runs",
            "2",
            "--warmup",
            "2",
            "--min-samples",
            "1500",
            "--no-baseline",
        ],
        &out,
    );
    let o = op(&m, "RandomHorizontalFlip");
    let w = &o["window"];
    let u = &w["unsampled"];
    let calls = u["calls"].as_f64().expect("unsampled calls");
    let cpu_s = u["cpu_seconds"].as_f64().expect("unsampled CPU");
    let wall_s = u["seconds"].as_f64().expect("unsampled seconds");
    // Two runs of a twentieth of a window's CPU time each (at most 25 ms).
    assert!(calls >= 2.0 && cpu_s > 0.0 && cpu_s <= 0.2, "{w}");
    assert!(wall_s >= 0.9 * cpu_s, "the op is single-threaded: {w}");
    let sampled = w["counters"]["task-clock-ns"].as_f64().expect("task-clock")
        / 1e9
        / w["iterations"].as_f64().expect("calls");
    let unsampled = cpu_s / calls;
    assert!(
        sampled >= 0.7 * unsampled && sampled <= 5.0 * unsampled,
        "{sampled} s a call sampled against {unsampled} unsampled: {w}"
    );
    let runs_with_cost = stderr
        .lines()
        .filter(|l| l.contains("% CPU a call"))
        .count();
    assert_eq!(runs_with_cost, 2, "{stderr}");
    let shown = lotus_env(&["show", out.to_str().expect("utf-8 path")], &[]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("us CPU a call sampled against") && text.contains("unsampled"),
        "{text}"
    );
}
