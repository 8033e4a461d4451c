//! Helpers shared by the end-to-end tests (the modules of `tests/main.rs`);
//! those other crates' tests share too are in `lotus-testkit`.
#![allow(dead_code)]

pub use lotus_testkit::cargo_artifact;
pub mod faults;
pub mod mapping;
pub mod sampled;
pub mod torch;
pub mod trace_check;
pub mod trace_logs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A fixture path.
pub fn fixture(rel: &str) -> PathBuf {
    root().join("fixtures").join(rel)
}

/// Runs the `lotus` binary.
pub fn lotus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(args)
        .output()
        .expect("run lotus")
}

/// Runs `lotus` and returns stdout, failing the test on a non-zero exit.
pub fn lotus_ok(args: &[&str]) -> String {
    let out = lotus(args);
    assert!(
        out.status.success(),
        "lotus {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs `lotus` expecting failure; returns stderr. Checks it did not panic.
pub fn lotus_fails(args: &[&str]) -> String {
    let out = lotus(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "lotus {args:?} should fail; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "exit code of lotus {args:?}: {stderr}"
    );
    assert!(
        !stderr.contains("panicked"),
        "lotus {args:?} panicked: {stderr}"
    );
    stderr
}

/// Runs `lotus` expecting a usage error (exit status 2, as clap's own);
/// returns stderr. Checks it did not panic.
pub fn lotus_usage_error(args: &[&str]) -> String {
    let out = lotus(args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit code of lotus {args:?} (a usage error): {stderr}"
    );
    assert!(
        !stderr.contains("panicked"),
        "lotus {args:?} panicked: {stderr}"
    );
    stderr
}

/// An op that runs and maps: sorts a list, with a set-up.
pub const GOOD_OP: &str =
    "def setup():\n    return list(range(2000))\n\ndef op(x):\n    return sorted(x, reverse=True)\n";

/// Writes op `name` (`DIR/NAME.py`) with `body`; returns its path.
pub fn write_op(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(format!("{name}.py"));
    std::fs::write(&p, body).expect("write op");
    p
}

/// `p` as the `&str` lotus's arguments take (the tests' paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The Python the tests use: `$LOTUS_PYTHON`, else the repo's `.venv`
/// (made by scripts/setup.sh). Fails the test with the fix when it lacks
/// Pillow or numpy.
pub fn python() -> PathBuf {
    let p = std::env::var_os("LOTUS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv/bin/python"));
    let ok = Command::new(&p)
        .args(["-c", "import PIL, numpy"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "{} cannot import Pillow and numpy: run `bash scripts/setup.sh` (or set LOTUS_PYTHON)",
        p.display()
    );
    p
}

/// The Python to run when no package is needed: `$LOTUS_PYTHON`, else
/// the repo's `.venv`, else `python3` (see [`python`] for the one that
/// must have Pillow and numpy).
pub fn any_python() -> PathBuf {
    if let Some(p) = std::env::var_os("LOTUS_PYTHON") {
        return p.into();
    }
    let venv = root().join(".venv/bin/python");
    if venv.exists() {
        return venv;
    }
    "python3".into()
}

/// liblotus_control.so from this build: `cargo build` puts it beside the
/// `lotus` binary, `cargo test` only in `deps/` below it; the newer wins.
pub fn control_lib() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_lotus"));
    let dir = bin.parent().expect("the binary has a folder");
    [
        dir.join("liblotus_control.so"),
        dir.join("deps/liblotus_control.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max()
    .map(|(_, p)| p)
    .unwrap_or_else(|| panic!("liblotus_control.so was not built beside {}", bin.display()))
}

/// The tracer's Python side (`lotus_trace`), which the binary carries.
pub fn harness_dir() -> PathBuf {
    root().join("lotus-tracer/python")
}

/// The Python side of a live mapping (`lotus.py`, the op harness), which
/// the `lotus_map` library carries.
pub fn map_harness_dir() -> PathBuf {
    root().join("lotus-tracer/python")
}

/// Runs `lotus` with extra environment variables.
pub fn lotus_env(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run lotus")
}

/// Process ids whose command line contains `needle` (other than ours).
pub fn processes_with(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(needle) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// A Python 3.12+: $LOTUS_PYTHON312, else the repository's .venv312, else
/// pyenv's 3.12 or 3.13; `None` without one, after printing that `test`
/// is skipped, or a failure with LOTUS_REQUIRE_PYTHON312=1 (what
/// scripts/test.sh sets: CI has pyenv's).
pub fn python312(test: &str) -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("LOTUS_PYTHON312").map(PathBuf::from),
        Some(root().join(".venv312/bin/python")),
        pyenv_versions(|major, minor| major == 3 && (minor == 12 || minor == 13)).pop(),
    ];
    let found = candidates.into_iter().flatten().find(|py| {
        Command::new(py)
            .args(["-c", "import sys; assert sys.version_info >= (3, 12)"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("LOTUS_REQUIRE_PYTHON312").is_none_or(|v| v != "1"),
            "{test}: no Python 3.12+ (LOTUS_PYTHON312, .venv312, ~/.pyenv/versions/3.12*|3.13*) and LOTUS_REQUIRE_PYTHON312=1"
        );
        eprintln!("skipped: {test}: no Python 3.12+ (set LOTUS_PYTHON312)");
    }
    found
}

/// pyenv's Pythons (`~/.pyenv/versions/X.Y.Z/bin/python3`, where it
/// exists) whose major and minor version `keep` accepts, oldest first.
fn pyenv_versions(keep: impl Fn(u32, u32) -> bool) -> Vec<PathBuf> {
    let versions = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv/versions"));
    let mut found: Vec<((u32, u32, u32), PathBuf)> = versions
        .and_then(|v| std::fs::read_dir(v).ok())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let mut parts = name.split('.').map(|p| p.parse::<u32>().ok());
            let (major, minor, patch) = (parts.next()??, parts.next()??, parts.next()??);
            let py = e.path().join("bin/python3");
            (keep(major, minor) && py.exists()).then_some(((major, minor, patch), py))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, py)| py).collect()
}

/// pyenv's CPython `version` (`"3.8"`: the newest `~/.pyenv/versions/3.8.*`
/// that runs); `None` without one, after printing that `test` is skipped,
/// or a failure with LOTUS_REQUIRE_PYENV=1 (what scripts/test.sh sets: CI
/// has pyenv's 3.8 to 3.13).
pub fn pyenv_python(version: &str, test: &str) -> Option<PathBuf> {
    let wanted = version
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
    let found = pyenv_versions(|major, minor| wanted == Some((major, minor)))
        .into_iter()
        .rev()
        .find(|py| {
            Command::new(py)
                .args(["-c", "pass"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("LOTUS_REQUIRE_PYENV").is_none_or(|v| v != "1"),
            "{test}: no Python {version} (~/.pyenv/versions/{version}.*) and LOTUS_REQUIRE_PYENV=1"
        );
        eprintln!("skipped: {test}: no Python {version} under ~/.pyenv/versions");
    }
    found
}

/// Every Python 3.12+ here, one per minor version: [`python312`]'s, then
/// pyenv's 3.13 where it is another version (the Python-frames test runs
/// on each: CPython's perf trampolines are per version). Empty (after
/// [`python312`]'s skip or failure) without one.
pub fn pythons_312_and_later(test: &str) -> Vec<PathBuf> {
    let Some(first) = python312(test) else {
        return Vec::new();
    };
    let minor = |py: &Path| {
        Command::new(py)
            .args(["-c", "import sys; print(sys.version_info[1])"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let mut seen = vec![minor(&first)];
    let mut out = vec![first];
    for py in pyenv_versions(|major, minor| major == 3 && minor >= 10) {
        let m = minor(&py);
        if m.as_deref()
            .and_then(|m| m.parse::<u32>().ok())
            .is_some_and(|m| m >= 12)
            && !seen.contains(&m)
        {
            seen.push(m);
            out.push(py);
        }
    }
    out
}
