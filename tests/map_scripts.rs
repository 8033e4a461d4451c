//! Script-mode ops (files without `op`) that open their own windows: each
//! name given to `lotus.resume` is its own op; a run whose windows never
//! opened, or held no samples, is a failure of that op saying why; ITT
//! windows reach lotus even when the environment names another collector.

use std::path::Path;

use crate::common::mapping::{function_fields, map_result, op_names};
use crate::common::{fixture, lotus_env, python};
use serde_json::Value;

/// Maps `files` with perf, one quick run each; returns (exit code, mapping
/// if written, stderr).
fn map(
    files: &[&Path],
    out: &Path,
    env: &[(&str, &std::ffi::OsStr)],
) -> (i32, Option<Value>, String) {
    let py = python();
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
        "--no-baseline",
        "--timeout",
        "60",
        "--python",
        py.to_str().expect("p"),
        "--out",
        out.to_str().expect("p"),
    ];
    args.extend(files.iter().map(|f| f.to_str().expect("p")));
    let o = lotus_env(&args, env);
    map_result(&o, out)
}

fn modules(m: &Value, op: &str) -> Vec<String> {
    function_fields(m, op, "module")
}

const TWO_NAMES: &str = r#"
import time
import numpy as np
import lotus

a = np.random.default_rng(0).random((200, 200))

def burn(seconds, work):
    end = time.process_time() + seconds
    while time.process_time() < end:
        work()

def matmul():
    a @ a

def pysum():
    sum(range(20000))

lotus.resume("MatMul")
burn(0.3, matmul)
lotus.pause()
lotus.resume("PySum")
burn(0.3, pysum)
lotus.pause()
lotus.resume("MatMul")
burn(0.2, matmul)
lotus.pause()
"#;

#[test]
fn each_name_a_script_gives_lotus_resume_is_its_own_op() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let script = tmp.path().join("Mixed.py");
    std::fs::write(&script, TWO_NAMES).expect("write");
    let unnamed = tmp.path().join("Unnamed.py");
    std::fs::write(
        &unnamed,
        "import lotus\nlotus.resume()\nsum(i * i for i in range(3_000_000))\nlotus.pause()\n",
    )
    .expect("write");
    let out = tmp.path().join("m.json");
    // One BLAS thread: idle BLAS workers spinning after a product would be
    // sampled in the next window.
    let one = std::ffi::OsStr::new("1");
    let (code, m, stderr) = map(
        &[&script, &unnamed],
        &out,
        &[("OPENBLAS_NUM_THREADS", one), ("OMP_NUM_THREADS", one)],
    );
    assert_eq!(code, 0, "{stderr}");
    let m = m.expect("mapping");
    assert_eq!(op_names(&m), ["MatMul", "PySum", "Unnamed"], "{stderr}");
    // The product's BLAS kernels are in MatMul's windows, not PySum's.
    let blas = |mods: &[String]| {
        mods.iter()
            .any(|m| m.contains("blas") || m.contains("_multiarray_umath"))
    };
    assert!(blas(&modules(&m, "MatMul")), "{:?}", modules(&m, "MatMul"));
    assert!(!blas(&modules(&m, "PySum")), "{:?}", modules(&m, "PySum"));
    for op in m["ops"].as_array().expect("ops") {
        assert!(op["window"]["samples"].as_u64().unwrap_or(0) > 0, "{op}");
    }
}

#[test]
fn a_run_whose_window_never_opened_fails_saying_why() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let empty = tmp.path().join("Empty.py");
    std::fs::write(&empty, "").expect("write");
    let no_window = tmp.path().join("NoWindow.py");
    std::fs::write(&no_window, "x = sum(range(1000))\n").expect("write");
    let pause_only = tmp.path().join("PauseOnly.py");
    std::fs::write(
        &pause_only,
        "import lotus\nsum(range(100000))\nlotus.pause()\n",
    )
    .expect("write");
    for (file, why) in [
        (&empty, "the op file is empty"),
        (&no_window, "never called lotus.resume"),
        (&pause_only, "never called lotus.resume"),
    ] {
        let out = tmp.path().join("m.json");
        let _ = std::fs::remove_file(&out);
        let (code, m, stderr) = map(&[file], &out, &[]);
        assert_eq!(code, 1, "{}: {stderr}", file.display());
        assert!(stderr.contains(why), "{}: {stderr}", file.display());
        if let Some(m) = m {
            assert!(op_names(&m).is_empty(), "{m}");
        }
    }
}

#[test]
fn itt_windows_reach_lotus_when_the_environment_names_another_collector() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("m.json");
    let script = fixture("itt_ops/IttFlip.py");
    // As after sourcing oneAPI's setvars.sh: a collector that is not
    // lotus's (here one that cannot even load).
    let other = tmp.path().join("libittnotify_collector.so");
    std::fs::write(&other, "not a library").expect("write");
    let (code, m, stderr) = map(
        &[&script],
        &out,
        &[
            ("INTEL_LIBITTNOTIFY64", other.as_os_str()),
            ("ITTFLIP_WINDOW_SECONDS", std::ffi::OsStr::new("0.3")),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("INTEL_LIBITTNOTIFY64"), "says so: {stderr}");
    let m = m.expect("mapping");
    assert_eq!(op_names(&m), ["IttFlip"]);
    assert!(m["ops"][0]["window"]["samples"].as_u64().unwrap_or(0) > 0);
}

#[test]
fn an_over_long_window_name_is_refused_at_once_not_at_the_timeout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let script = tmp.path().join("LongName.py");
    std::fs::write(
        &script,
        "import lotus\n\
         try:\n    lotus.resume('x' * 70000)\nexcept RuntimeError as e:\n    print('refused:', e, flush=True)\n\
         lotus.resume('Ok')\nsum(i * i for i in range(3_000_000))\nlotus.pause()\n",
    )
    .expect("write");
    let out = tmp.path().join("m.json");
    // Not a wall-clock bound (that depends on the machine's load): had the
    // refused resume waited for the run's --timeout, the run would have
    // been stopped and failed ("still running after --timeout"); it
    // succeeds, and the window opened after the refusal is mapped.
    let (code, m, stderr) = map(&[&script], &out, &[]);
    assert!(!stderr.contains("still running after"), "{stderr}");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(op_names(&m.expect("mapping")), ["Ok"]);
}

/// A script that gives `lotus.resume` 200 distinct names is not run 201
/// times: lotus maps the first `--max-window-names` (64 by default) in
/// runs of their own, warns naming the script and the count, and says in
/// its progress how many runs the script takes. The script counts its own
/// runs (a line each in a file).
#[test]
fn a_script_with_many_window_names_is_run_a_bounded_number_of_times() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let runs_file = tmp.path().join("runs.txt");
    let script = tmp.path().join("PerBatch.py");
    std::fs::write(
        &script,
        format!(
            r#"
import time
import lotus

with open({runs:?}, "a") as f:
    f.write("run\n")

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        sum(range(1000))

for i in range(200):
    lotus.resume(f"batch{{i}}")
    burn(0.004)
    lotus.pause()
"#,
            runs = runs_file.to_str().expect("utf-8")
        ),
    )
    .expect("write");
    let out = tmp.path().join("m.json");
    let py = python();
    let o = lotus_env(
        &[
            "map",
            "--backend",
            "perf",
            "--runs",
            "1",
            "--min-samples",
            "1",
            "--no-baseline",
            "--timeout",
            "120",
            "--max-window-names",
            "4",
            "--python",
            py.to_str().expect("p"),
            "--out",
            out.to_str().expect("p"),
            script.to_str().expect("p"),
        ],
        &[],
    );
    let (code, m, stderr) = map_result(&o, &out);
    assert_eq!(code, 0, "{stderr}");
    let m = m.expect("mapping");
    assert_eq!(
        op_names(&m),
        ["batch0", "batch1", "batch2", "batch3"],
        "the first names opened: {stderr}"
    );
    let runs = std::fs::read_to_string(&runs_file).expect("runs file");
    assert_eq!(
        runs.lines().count(),
        5,
        "one run, then one per name mapped: {stderr}"
    );
    assert!(
        stderr.contains("PerBatch")
            && stderr.contains("200 names")
            && stderr.contains("196 left out")
            && stderr.contains("--max-window-names"),
        "the warning: {stderr}"
    );
    assert!(
        stderr.contains("windows for 200 ops")
            && stderr.contains("4 run(s) of the script after its first"),
        "the progress says how many runs: {stderr}"
    );
}
