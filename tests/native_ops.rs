//! A native program as an op: a C program linked to liblotus_control.so
//! opens windows that reach lotus, whether a Python script starts it
//! (`subprocess.run`, which closes other descriptors) or it is given on the
//! command line in place of a `.py` file. The window's function is mapped;
//! the set-up's is not, unless the window covers it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::mapping::{function_fields, map_result};
use crate::common::{control_lib, python, root};
use serde_json::Value;

/// A program that burns CPU time in `native_setup_only` outside its window
/// and in `native_window_kernel` inside it (NATIVE_COVER_SETUP=1 opens the
/// window before the set-up instead).
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "lotus.h"

static volatile double sink;

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void native_setup_only(double seconds) {
    double end = cpu_seconds() + seconds, x = 1.0;
    while (cpu_seconds() < end)
        for (int i = 0; i < 10000; i++) x = x * 1.0000001 + 0.5;
    sink = x;
}

__attribute__((noinline)) void native_window_kernel(double seconds) {
    double end = cpu_seconds() + seconds, x = 2.0;
    while (cpu_seconds() < end)
        for (int i = 0; i < 10000; i++) x = x * 0.9999999 + 0.25;
    sink = x;
}

static void check(int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "native op: %s: %s\n", what, lotus_last_error());
        exit(1);
    }
}

int main(void) {
    int cover = getenv("NATIVE_COVER_SETUP") != NULL;
    if (cover) check(lotus_resume(NULL), "lotus_resume");
    native_setup_only(0.3);
    if (!cover) check(lotus_resume(NULL), "lotus_resume");
    native_window_kernel(0.3);
    check(lotus_pause(), "lotus_pause");
    return 0;
}
"#;

/// Builds the program into `dir`, linked to this build's control library.
fn build(dir: &Path) -> PathBuf {
    let source = dir.join("native_op.c");
    std::fs::write(&source, PROGRAM).expect("write");
    compile(&source, &dir.join("native_op"))
}

/// Compiles the C file `source` into `exe`, with `lotus.h` and linked to
/// this build's control library.
fn compile(source: &Path, exe: &Path) -> PathBuf {
    let lib = control_lib();
    let libdir = lib.parent().expect("lib folder");
    let exe = exe.to_path_buf();
    let out = Command::new("cc")
        .args(["-O1", "-g", "-fno-inline", "-o"])
        .arg(&exe)
        .arg(source)
        .arg(format!(
            "-I{}",
            root().join("lotus-control/include").display()
        ))
        .arg(format!("-L{}", libdir.display()))
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .arg("-llotus_control")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Maps `file` with perf (one run, no floor). Returns (code, mapping, stderr).
fn map(file: &Path, out: &Path, env: &[(&str, &str)]) -> (i32, Option<Value>, String) {
    let py = python();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["map", "--backend", "perf", "--runs", "1", "--no-baseline"])
        .args(["--timeout", "60", "--python"])
        .arg(&py)
        .arg("--out")
        .arg(out)
        .arg(file);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("run lotus");
    map_result(&o, out)
}

fn functions(m: &Value, op: &str) -> Vec<String> {
    function_fields(m, op, "function")
}

#[test]
fn a_native_program_started_by_a_script_opens_lotus_windows() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let exe = build(tmp.path());
    let script = tmp.path().join("RunsNative.py");
    std::fs::write(
        &script,
        format!(
            "import os, subprocess\n\
             subprocess.run([{exe:?}], check=True)\n\
             subprocess.run([{exe:?}], check=True, close_fds=False)\n\
             assert os.system({exe:?}) == 0\n",
            exe = exe.display().to_string()
        ),
    )
    .expect("write");
    let out = tmp.path().join("m.json");
    let (code, m, stderr) = map(&script, &out, &[]);
    assert_eq!(code, 0, "{stderr}");
    let m = m.expect("mapping");
    // One window per start: subprocess (which closes other descriptors),
    // subprocess with close_fds=False, os.system.
    assert_eq!(m["ops"][0]["window"]["windows"], 3, "{m}");
    let funcs = functions(&m, "RunsNative");
    assert!(
        funcs.iter().any(|f| f == "native_window_kernel"),
        "{funcs:?}"
    );
    assert!(!funcs.iter().any(|f| f == "native_setup_only"), "{funcs:?}");
}

#[test]
fn an_executable_given_as_the_op_file_is_an_op_of_its_own() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let exe = build(tmp.path());
    let out = tmp.path().join("m.json");
    let (code, m, stderr) = map(&exe, &out, &[]);
    assert_eq!(code, 0, "{stderr}");
    let m = m.expect("mapping");
    let funcs = functions(&m, "native_op");
    assert!(
        funcs.iter().any(|f| f == "native_window_kernel"),
        "{funcs:?}"
    );
    assert!(!funcs.iter().any(|f| f == "native_setup_only"), "{funcs:?}");
    assert_eq!(m["ops"][0]["window"]["windows"], 1, "{m}");

    // The same program with its window over the set-up: the set-up shows,
    // so the check above can fail.
    let _ = std::fs::remove_file(&out);
    let (code, m, stderr) = map(&exe, &out, &[("NATIVE_COVER_SETUP", "1")]);
    assert_eq!(code, 0, "{stderr}");
    let funcs = functions(&m.expect("mapping"), "native_op");
    assert!(funcs.iter().any(|f| f == "native_setup_only"), "{funcs:?}");
}

#[test]
fn a_program_that_fails_or_opens_no_window_says_so() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let quiet = tmp.path().join("quiet");
    std::fs::write(&quiet, "#!/bin/sh\nexit 0\n").expect("write");
    let failing = tmp.path().join("failing");
    std::fs::write(&failing, "#!/bin/sh\necho broken >&2\nexit 3\n").expect("write");
    for f in [&quiet, &failing] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let out = tmp.path().join("m.json");
    let (code, _, stderr) = map(&quiet, &out, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("never called lotus_resume"), "{stderr}");
    let (code, _, stderr) = map(&failing, &out, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("exited with status 3"), "{stderr}");
}

/// `lotus-cli/examples/windows.c`, built as its comment says and mapped by
/// `lotus map`: its five windows hold the loop's function and the CPU time
/// it burned there, not the set-up's.
#[test]
fn the_c_example_maps_its_loop_not_its_set_up() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let exe = compile(
        &root().join("lotus-cli/examples/windows.c"),
        &tmp.path().join("windows"),
    );
    let out = tmp.path().join("m.json");
    let (code, m, stderr) = map(&exe, &out, &[]);
    assert_eq!(code, 0, "{stderr}");
    let m = m.expect("mapping");
    let window = &m["ops"][0]["window"];
    assert_eq!(window["windows"], 5, "{m}");
    // 5 x 0.06 s of CPU inside the windows; the 0.3 s set-up is outside.
    let cpu_s = window["counters"]["task-clock-ns"]
        .as_f64()
        .expect("task-clock")
        / 1e9;
    assert!(
        (0.25..0.5).contains(&cpu_s),
        "{cpu_s} s of CPU in the windows: {m}"
    );
    let funcs = functions(&m, "windows");
    assert_eq!(
        funcs.first().map(String::as_str),
        Some("transform_batch"),
        "{funcs:?}"
    );
    assert!(!funcs.iter().any(|f| f == "prepare_input"), "{funcs:?}");
}
