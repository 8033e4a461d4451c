//! The original Lotus study's op scripts run unchanged: `import itt`
//! (itt-python) and `import amdprofilecontrol` work without those modules
//! installed, their windows become lotus's, the op's kernel is inside and
//! the set-up work outside; native code calling uProf's entry points opens
//! lotus's windows too.

mod common;

use std::path::Path;

use common::{fixture, lotus_env, python};
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
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let m = std::fs::read_to_string(out)
        .ok()
        .map(|t| serde_json::from_str(&t).expect("json"));
    (o.status.code().unwrap_or(-1), m, stderr)
}

fn op<'a>(m: &'a Value, name: &str) -> &'a Value {
    m["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("op {name} in {m}"))
}

fn functions(op: &Value) -> Vec<String> {
    op["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("").to_string())
        .collect()
}

fn has(funcs: &[String], prefix: &str) -> bool {
    funcs.iter().any(|f| f.starts_with(prefix))
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
