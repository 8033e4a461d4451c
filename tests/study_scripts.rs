//! The original Lotus study's op scripts run unchanged: `import itt`
//! (itt-python) and `import amdprofilecontrol` work without those modules
//! installed, their windows become lotus's, the op's kernel is inside and
//! the set-up work outside; native code calling uProf's entry points opens
//! lotus's windows too.

use crate::common;

use std::path::Path;

use crate::common::mapping::{map_result, op};
use crate::common::{fixture, lotus_env, python};
use serde_json::Value;

/// The flip's kernel (in the window) and the set-up resize's (not).
const KERNEL: &str = "ImagingFlipLeftRight";
const SETUP: &str = "ImagingResample";

/// Maps `files` with perf, one run each, no floor; `extra` goes before the
/// files. Returns (exit code, mapping if written, stderr).
fn map(files: &[&Path], out: &Path, extra: &[&str]) -> (i32, Option<Value>, String) {
    let py = python();
    let mut args = vec![
        "map",
        "--backend",
        "perf",
        "--runs",
        "1",
        "--no-baseline",
        "--timeout",
        "90",
        "--python",
        py.to_str().expect("p"),
        "--out",
        out.to_str().expect("p"),
    ];
    args.extend_from_slice(extra);
    args.extend(files.iter().map(|f| f.to_str().expect("p")));
    let o = lotus_env(&args, &[]);
    map_result(&o, out)
}

fn functions(op: &Value) -> Vec<String> {
    op["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("").to_string())
        .collect()
}

fn has(funcs: &[String], part: &str) -> bool {
    funcs.iter().any(|f| f.contains(part))
}

/// A copy of a study-style fixture in `dir`, its image path made absolute
/// (the working directory is another test's subject).
fn copy_with_absolute_image(name: &str, dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(fixture(&format!("study_ops/{name}"))).expect("fixture");
    let image = fixture("images/sample.jpg");
    let text = text.replace("\"fixtures/images/sample.jpg\"", &format!("{image:?}"));
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn study_itt_and_amd_scripts_run_without_their_modules() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let intel = copy_with_absolute_image("IntelFlip.py", tmp.path());
    let amd = copy_with_absolute_image("AmdFlip.py", tmp.path());
    let out = tmp.path().join("m.json");
    let (code, m, stderr) = map(&[&intel, &amd], &out, &[]);
    assert_eq!(code, 0, "{stderr}");
    let m = m.expect("mapping");
    for name in ["IntelFlip", "AmdFlip"] {
        let funcs = functions(op(&m, name));
        assert!(has(&funcs, KERNEL), "{name}: {funcs:?}\n{stderr}");
        assert!(
            !has(&funcs, SETUP),
            "{name}: set-up in the window: {funcs:?}"
        );
    }
}

/// Native code written for uProf (`amdProfileResume(1)` ...
/// `amdProfilePause(1)`), calling those entry points in the control
/// library, opens lotus's windows under perf.
#[test]
fn uprof_entry_points_of_the_control_library_open_lotus_windows() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let script = tmp.path().join("AmdNative.py");
    std::fs::write(
        &script,
        "import ctypes, os\n\
         lib = ctypes.CDLL(os.environ['LOTUS_CONTROL_LIB'])\n\
         lib.amdProfileResume.restype = ctypes.c_bool\n\
         lib.amdProfilePause.restype = ctypes.c_bool\n\
         assert lib.amdProfileResume(1), lib.amdGetLastProfileError()\n\
         sum(i * i for i in range(2_000_000))\n\
         assert lib.amdProfilePause(1)\n\
         assert lib.amdGetLastProfileError() == 0\n",
    )
    .expect("write");
    let out = tmp.path().join("m.json");
    let (code, m, stderr) = map(&[&script], &out, &[]);
    assert_eq!(code, 0, "{stderr}");
    let m = m.expect("mapping");
    let window = &op(&m, "AmdNative")["window"];
    assert!(window["samples"].as_u64().unwrap_or(0) > 0, "{m}");
}

/// Runs `lotus map` (perf, one run, no floor) from the workspace root, as
/// the study ran its scripts; `extra` goes before the files.
fn map_from_root(files: &[&Path], out: &Path, extra: &[&str]) -> (i32, Option<Value>, String) {
    let py = python();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.current_dir(common::root()).args([
        "map",
        "--backend",
        "perf",
        "--no-baseline",
        "--timeout",
        "90",
        "--python",
        py.to_str().expect("p"),
        "--out",
        out.to_str().expect("p"),
    ]);
    if !extra.contains(&"--runs") {
        cmd.args(["--runs", "1"]);
    }
    cmd.args(extra).args(files);
    let o = cmd.output().expect("run lotus");
    map_result(&o, out)
}

/// The study's fixtures, unchanged, run from the repository root with
/// `--cwd .`: the op's kernel is in the window, the set-up's resize is
/// not; a copy whose window also covers the resize shows it (so the check
/// can fail), and its folder stays importable.
#[test]
fn study_scripts_map_unchanged_from_the_repository_root() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("m.json");
    let intel = fixture("study_ops/IntelFlip.py");
    let amd = fixture("study_ops/AmdFlip.py");
    let (code, m, stderr) = map_from_root(&[&intel, &amd], &out, &["--cwd", "."]);
    assert_eq!(code, 0, "{stderr}");
    let m = m.expect("mapping");
    for name in ["IntelFlip", "AmdFlip"] {
        let funcs = functions(op(&m, name));
        assert!(has(&funcs, KERNEL), "{name}: {funcs:?}\n{stderr}");
        assert!(
            !has(&funcs, SETUP),
            "{name}: set-up in the window: {funcs:?}"
        );
    }

    // The window moved before the set-up, and a helper module imported
    // from the script's own folder (not the working folder).
    let text = std::fs::read_to_string(&intel).expect("fixture");
    let early = "    if i == 4:\n        itt.resume()\n";
    assert!(text.contains(early), "the fixture's window: {text}");
    let covering = text.replace(early, "").replace(
        "    image = image.resize(",
        &format!("{early}    study_helper.noop()\n    image = image.resize("),
    );
    let covering = covering.replacen("import time, itt", "import time, itt, study_helper", 1);
    let script = tmp.path().join("CoveringFlip.py");
    std::fs::write(&script, covering).expect("write");
    std::fs::write(
        tmp.path().join("study_helper.py"),
        "def noop():\n    pass\n",
    )
    .expect("write");
    let _ = std::fs::remove_file(&out);
    let (code, m, stderr) = map_from_root(&[&script], &out, &["--cwd", "."]);
    assert_eq!(code, 0, "{stderr}");
    let funcs = functions(op(&m.expect("mapping"), "CoveringFlip"));
    assert!(
        has(&funcs, SETUP),
        "the resize is in this window: {funcs:?}"
    );
    assert!(has(&funcs, KERNEL), "{funcs:?}");
}

/// Without `--cwd` an op runs in its own folder, where the study's
/// root-relative image path does not resolve: the failure says so.
#[test]
fn without_cwd_a_root_relative_path_fails_naming_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("m.json");
    let intel = fixture("study_ops/IntelFlip.py");
    let (code, _, stderr) = map_from_root(&[&intel], &out, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("FileNotFoundError") && stderr.contains("fixtures/images/sample.jpg"),
        "{stderr}"
    );
    let (code, _, stderr) = map_from_root(&[&intel], &out, &["--cwd", "no/such/folder"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--cwd no/such/folder"), "{stderr}");
}

/// A script's windows are recorded with their real length and count (one
/// per run in the study's pattern), and the low-samples warning names the
/// cause: one call per window, so more runs or a loop.
#[test]
fn script_windows_record_their_time_and_count_and_the_warning_says_why() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("m.json");
    let amd = fixture("study_ops/AmdFlip.py");
    let (code, m, stderr) = map_from_root(&[&amd], &out, &["--cwd", ".", "--runs", "2"]);
    assert_eq!(code, 0, "{stderr}");
    let m = m.expect("mapping");
    let window = &op(&m, "AmdFlip")["window"];
    assert_eq!(window["windows"], 2, "{window}");
    let seconds = window["seconds"].as_f64().expect("seconds");
    let cpu = window["counters"]["task-clock-ns"]
        .as_f64()
        .expect("task clock")
        / 1e9;
    // One thread runs the flip: the windows were open at least as long as
    // it ran on the CPU inside them.
    assert!(cpu > 0.0 && seconds >= cpu * 0.9, "{window}");
    assert!(
        stderr.contains("2 window(s)") || stderr.contains("1 window(s) in"),
        "{stderr}"
    );
    assert!(stderr.contains("raise --runs, or loop the op"), "{stderr}");
    assert!(!stderr.contains("may mostly wait"), "{stderr}");
}

/// Under perf the real `amdprofilecontrol` (here a module beside the
/// script, which, like the real binding without uProf collecting, returns
/// False and opens nothing) is replaced by the stand-in: the window opens.
#[test]
fn under_perf_the_stand_in_replaces_an_installed_amdprofilecontrol() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        tmp.path().join("amdprofilecontrol.py"),
        "def resume(reserved=1):\n    return False\n\ndef pause(reserved=1):\n    return False\n",
    )
    .expect("write");
    let amd = copy_with_absolute_image("AmdFlip.py", tmp.path());
    let out = tmp.path().join("m.json");
    let (code, m, stderr) = map(&[&amd], &out, &[]);
    assert_eq!(code, 0, "{stderr}");
    let funcs = functions(op(&m.expect("mapping"), "AmdFlip"));
    assert!(has(&funcs, KERNEL), "{funcs:?}");
}
