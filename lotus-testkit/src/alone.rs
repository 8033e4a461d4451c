//! Tests that change what is process-wide (the environment, resource
//! limits, the child-subreaper flag) run alone in a fresh process of their
//! own test binary: with every test of a crate in one binary, the others'
//! threads would see the change (or have made it first).
//!
//! The test body is a test too, which does nothing unless this module
//! started it:
//!
//! ```no_run
//! #[test]
//! fn empties_path() {
//!     lotus_testkit::alone::run("empties_path_alone", &[]);
//! }
//!
//! #[test]
//! fn empties_path_alone() {
//!     if !lotus_testkit::alone::started("empties_path_alone") {
//!         return;
//!     }
//!     // No other test runs in this process.
//!     std::env::set_var("PATH", "");
//! }
//! ```

use std::ffi::OsStr;
use std::process::Command;

/// The variable that names the test a process was started for.
const VAR: &str = "LOTUS_TEST_ALONE";

/// Whether this process was started by [`run`] for the test whose name
/// ends with `name` (its function name, or `module::function`).
pub fn started(name: &str) -> bool {
    std::env::var_os(VAR).is_some_and(|v| v.to_string_lossy().ends_with(name))
}

/// Runs the test `name` (its path in this binary without the crate,
/// `module::function`, or a unique function name) alone in a fresh
/// process of this test binary, with `env` added; fails the calling test
/// with the child's output when it fails or when no test of that name ran.
pub fn run(name: &str, env: &[(&str, &OsStr)]) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([name, "--test-threads=1", "--nocapture"]);
    cmd.env(VAR, name);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name}, alone in its own process, failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "no single test {name} ran in its own process:\n{stdout}\n{stderr}"
    );
}
