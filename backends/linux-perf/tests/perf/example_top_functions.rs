//! `examples/top_functions.rs` run as a user would: on a shell busy loop,
//! its table checked against what the window measured.

use std::path::PathBuf;
use std::process::Command;

use lotus_testkit::cargo_artifact;

/// The example's binary, built by cargo as a user would build it. (Not the
/// copy `cargo test` builds: with `--all-targets` that one is a test
/// harness, not the program.)
fn example_binary() -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--example", "top_functions"])
        .args(["--package", "lotus-backend-perf", "--message-format=json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo build --example top_functions: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    cargo_artifact::example_executable(&stdout, "top_functions")
}

#[test]
fn top_functions_prints_the_window_and_its_hottest_functions() {
    let shell = std::fs::canonicalize("/bin/sh").expect("/bin/sh");
    let shell_name = shell
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let out = Command::new(example_binary())
        .args([
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done",
        ])
        .env("LOTUS_EXAMPLE_SKIP_MS", "50")
        .env("LOTUS_EXAMPLE_WINDOW_MS", "400")
        .output()
        .expect("runs the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);

    let mut lines = stdout.lines();
    // "window: N samples at F Hz, C s CPU (task-clock) in W s"
    let head: Vec<&str> = lines
        .next()
        .expect("window line")
        .split_whitespace()
        .collect();
    assert_eq!(head[0], "window:", "{stdout}");
    let samples: f64 = head[1].parse().expect("samples");
    let hz: f64 = head[4].parse().expect("frequency");
    let cpu_s: f64 = head[6].parse().expect("CPU seconds");
    assert!(samples > 0.0 && cpu_s > 0.0, "{stdout}");
    // cpu-clock samples the target's own CPU time: the count follows the
    // CPU time it ran in the window, however busy the machine is.
    let expected = cpu_s * hz;
    assert!(
        samples > 0.5 * expected && samples < 1.5 * expected,
        "{samples} samples for {cpu_s} s of CPU at {hz} Hz\n{stdout}"
    );

    let rows: Vec<(f64, String)> = lines
        .map(|l| {
            let value: f64 = l
                .split_whitespace()
                .next()
                .expect("value")
                .parse()
                .expect("number");
            let module = l
                .rsplit_once('(')
                .expect("(module)")
                .1
                .trim_end_matches(')');
            (value, module.to_string())
        })
        .collect();
    assert!(!rows.is_empty() && rows.len() <= 10, "{stdout}");
    assert!(
        rows.windows(2).all(|w| w[0].0 >= w[1].0),
        "sorted: {stdout}"
    );
    assert!(rows.iter().map(|r| r.0).sum::<f64>() <= samples, "{stdout}");
    // The loop runs in the shell and the C library it calls.
    assert!(
        rows.iter().any(|r| r.1 == shell_name),
        "no row in {shell_name}:\n{stdout}"
    );
}
