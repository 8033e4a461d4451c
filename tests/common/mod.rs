//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

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
