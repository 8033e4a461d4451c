//! Bad input of every kind a user can hand lotus: files that are not
//! regular files, duplicate names and keys, sums past what a number holds,
//! inputs larger than the memory allowed. Each is a clear error naming the
//! file (and line, op or key), exit status 1, and never a hang or abort.

use crate::common;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{fixture, lotus_fails, s};

/// Runs lotus with `args` and gives up (killing it) after `limit`: a
/// command that would read forever fails the test instead of hanging it.
fn lotus_within(args: &[&str], limit: Duration) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lotus");
    let start = Instant::now();
    loop {
        if let Some(_status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            return (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("lotus {args:?} still running after {limit:?}: it blocks on its input");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo")
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

/// A mapping of two ops, `names`, each with one function of its own.
fn mapping_json(names: [&str; 2]) -> String {
    format!(
        r#"{{"schema": "lotus.mapping/1", "backend": "perf", "settings": {{"rule": "union"}},
  "unit": "samples", "shared": [],
  "ops": [
    {{"name": "{}", "runs": 1, "samples": 10, "functions": [
      {{"function": "decode_mcu", "module": "libjpeg.so.9", "samples": 10, "share": 1.0, "runs_seen": 1}}]}},
    {{"name": "{}", "runs": 1, "samples": 5, "functions": [
      {{"function": "ImagingFlipLeftRight", "module": "_imaging.so", "samples": 5, "share": 1.0, "runs_seen": 1}}]}}
  ]}}"#,
        names[0], names[1]
    )
}

#[test]
fn devices_and_fifos_are_refused_where_a_file_is_expected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fifo = tmp.path().join("mapping.json");
    mkfifo(&fifo);
    let mapping = tmp.path().join("m.json");
    std::fs::write(&mapping, mapping_json(["A", "B"])).expect("write");
    let profile = fixture("attribute/profile_samples.json");
    let limit = Duration::from_secs(30);
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["show", "/dev/zero"], "/dev/zero", "character device"),
        (vec!["show", s(&fifo)], s(&fifo), "fifo"),
        (
            vec!["attribute", "--mapping", s(&fifo), "--profile", s(&profile)],
            s(&fifo),
            "fifo",
        ),
        (
            vec![
                "attribute",
                "--mapping",
                s(&mapping),
                "--profile",
                "/dev/zero",
            ],
            "/dev/zero",
            "character device",
        ),
        (
            vec!["attribute", "--mapping", s(&mapping), "--profile", s(&fifo)],
            s(&fifo),
            "fifo",
        ),
        (
            vec![
                "attribute",
                "--mapping",
                s(&mapping),
                "--profile",
                s(&profile),
                "--op-times",
                "/dev/zero",
            ],
            "/dev/zero",
            "character device",
        ),
    ];
    for (args, file, what) in cases {
        let (code, stderr) = lotus_within(&args, limit);
        assert_eq!(code, Some(1), "lotus {args:?}: {stderr}");
        assert!(
            stderr.contains(file) && stderr.contains(what),
            "lotus {args:?} names the file and what it is: {stderr}"
        );
    }
}

#[test]
fn duplicate_op_names_rows_and_keys_are_refused_with_the_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dup = tmp.path().join("dup.json");
    std::fs::write(&dup, mapping_json(["Loader", "Loader"])).expect("write");
    let profile = fixture("attribute/profile_samples.json");
    let e = lotus_fails(&["show", s(&dup)]);
    assert!(e.contains("op 'Loader' is listed twice"), "{e}");
    let e = lotus_fails(&["attribute", "--mapping", s(&dup), "--profile", s(&profile)]);
    assert!(e.contains("'Loader'") && e.contains("twice"), "{e}");

    let schema_twice = tmp.path().join("schema.json");
    let text = mapping_json(["A", "B"]).replacen(
        r#""schema": "lotus.mapping/1","#,
        r#""schema": "lotus.mapping/1", "schema": "lotus.mapping/1","#,
        1,
    );
    std::fs::write(&schema_twice, text).expect("write");
    let e = lotus_fails(&["show", s(&schema_twice)]);
    assert!(e.contains("duplicate field `schema`"), "{e}");

    let good = tmp.path().join("m.json");
    std::fs::write(&good, mapping_json(["A", "B"])).expect("write");
    let times = tmp.path().join("times.csv");
    std::fs::write(&times, "op,seconds\nA,1\nB,2\nA,3\n").expect("write");
    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        s(&good),
        "--profile",
        s(&profile),
        "--op-times",
        s(&times),
    ]);
    assert!(
        e.contains(&format!("{}:4: op 'A' is listed twice", times.display())),
        "{e}"
    );
}

/// A mapping of `n` functions in one op, written without holding it whole.
fn write_big_mapping(path: &Path, n: usize) {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    write!(
        w,
        r#"{{"schema": "lotus.mapping/1", "backend": "perf", "settings": {{"rule": "union"}}, "unit": "samples", "shared": [], "ops": [{{"name": "Big", "runs": 1, "samples": {n}, "functions": ["#
    )
    .expect("write");
    for i in 0..n {
        let sep = if i + 1 < n { "," } else { "" };
        write!(
            w,
            r#"{{"function": "function_number_{i}", "module": "libm{}.so", "samples": 1, "share": 0.0, "runs_seen": 1}}{sep}"#,
            i % 50
        )
        .expect("write");
    }
    write!(w, "]}}]}}").expect("write");
}

/// Under a memory limit too small for the input, lotus says it ran out of
/// memory and exits with 1: no abort (134), no backtrace.
#[test]
fn out_of_memory_is_a_clear_error_not_an_abort() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let big = tmp.path().join("big.json");
    write_big_mapping(&big, 400_000);
    // Enough address space to start, far too little for the input's
    // functions.
    const LIMIT: libc::rlim_t = 96 << 20;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["show", s(&big)]);
    // SAFETY: the hook only calls setrlimit(2), async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: LIMIT,
                rlim_max: LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run lotus");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), None, "killed by a signal: {stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("lotus: error: out of memory"), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
}

/// `DIR/<op>/<run>.csv` with the given runs' contents.
fn reports(dir: &Path, op: &str, runs: &[&str]) {
    let op_dir = dir.join(op);
    std::fs::create_dir_all(&op_dir).expect("mkdir");
    for (i, text) in runs.iter().enumerate() {
        std::fs::write(op_dir.join(format!("{}.csv", i + 1)), text).expect("write");
    }
}

#[test]
fn from_reports_refuses_what_a_mapping_cannot_hold_with_file_and_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let header = "Function,Module,CPU Time\n";
    reports(
        tmp.path(),
        "Negative",
        &[&format!("{header}f,a.so,1.0\ng,a.so,-0.5\n")],
    );
    reports(
        tmp.path(),
        "Huge",
        &[&format!("{header}f,a.so,1e308\ng,a.so,1e308\n")],
    );
    reports(
        tmp.path(),
        "HugeRuns",
        &[
            &format!("{header}f,a.so,1e308\n"),
            &format!("{header}f,a.so,1e308\n"),
        ],
    );
    reports(tmp.path(), "Good", &[&format!("{header}f,a.so,1.0\n")]);
    let out = tmp.path().join("m.json");
    let e = lotus_fails(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        s(tmp.path()),
        "--out",
        s(&out),
    ]);
    let negative = tmp.path().join("Negative/1.csv");
    assert!(
        e.contains(&format!("{}:3:", negative.display())) && e.contains("negative"),
        "{e}"
    );
    let huge = tmp.path().join("Huge/1.csv");
    assert!(e.contains(&format!("{}:3:", huge.display())), "{e}");
    assert!(e.contains("op HugeRuns") && e.contains("add up"), "{e}");
    // What was written reads back: the good op, no infinite totals.
    let text = common::lotus_ok(&["show", s(&out), "--format", "json"]);
    let m: serde_json::Value = serde_json::from_str(&text).expect("json");
    let ops: Vec<&str> = m["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|o| o["name"].as_str().expect("name"))
        .collect();
    assert_eq!(ops, ["Good"], "{text}");
}

#[test]
fn from_reports_names_report_files_that_are_not_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let op_dir = tmp.path().join("Op");
    std::fs::create_dir_all(op_dir.join("2.csv")).expect("mkdir");
    mkfifo(&op_dir.join("1.csv"));
    let (code, e) = lotus_within(
        &["map", "--backend", "vtune", "--from-reports", s(tmp.path())],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(1), "{e}");
    assert!(
        e.contains(&format!("{}", op_dir.join("1.csv").display())) && e.contains("fifo"),
        "{e}"
    );
    assert!(!e.contains("no reports"), "{e}");
}

#[test]
fn trace_logs_that_are_not_files_are_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(tmp.path().join("lotus_main_pid_1"), "SLoader,1000,500\n").expect("write");
    let fifo = tmp.path().join("lotus_worker_pid_2");
    mkfifo(&fifo);
    let out = tmp.path().join("view.json");
    let limit = Duration::from_secs(30);
    for args in [
        vec!["trace", "stats", s(tmp.path())],
        vec!["trace", "view", s(tmp.path()), "--out", s(&out)],
        vec!["trace", "stats", s(&fifo)],
    ] {
        let (code, e) = lotus_within(&args, limit);
        assert_eq!(code, Some(1), "lotus {args:?}: {e}");
        assert!(
            e.contains(s(&fifo)) && e.contains("fifo"),
            "lotus {args:?}: {e}"
        );
    }
    let (code, e) = lotus_within(&["trace", "stats", "/dev/zero"], limit);
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("character device"), "{e}");
}

#[test]
fn a_sort_buffer_past_the_maximum_is_called_too_large() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(tmp.path().join("lotus_main_pid_1"), "SLoader,1000,500\n").expect("write");
    let out = common::lotus_env(
        &["trace", "stats", s(tmp.path())],
        &[(
            "LOTUS_SORT_BUFFER",
            std::ffi::OsStr::new("99999999999999999999"),
        )],
    );
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("too large") && e.contains("at most 64g"), "{e}");
    assert!(!e.contains("not a number"), "{e}");
}

/// A newline in an op's name (its file name or `NAME`) is shown escaped
/// wherever a name is printed on one line: table, Markdown heading,
/// progress.
#[test]
fn a_newline_in_a_name_is_escaped_where_names_are_printed_on_one_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let m = tmp.path().join("m.json");
    std::fs::write(&m, mapping_json(["Two\\nLines", "B"])).expect("write");
    let md = common::lotus_ok(&["show", s(&m), "--format", "md"]);
    assert!(md.contains("## Two\\nLines\n"), "{md}");
    let table = common::lotus_ok(&["show", s(&m)]);
    assert!(table.contains("\nTwo\\nLines  ("), "{table}");
    assert!(!table.contains("\nLines"), "{table}");
    let profile = fixture("attribute/profile_samples.json");
    for format in ["table", "md"] {
        let text = common::lotus_ok(&[
            "attribute",
            "--mapping",
            s(&m),
            "--profile",
            s(&profile),
            "--format",
            format,
        ]);
        assert!(text.contains("Two\\nLines"), "{format}: {text}");
        assert!(!text.contains("\nLines"), "{format}: {text}");
    }

    let op = tmp.path().join("Two\nLines.py");
    std::fs::write(&op, "def op(x):\n    return sum(range(2000))\n").expect("write");
    let py = common::python();
    let out = common::lotus_env(
        &[
            "map",
            "--backend",
            "perf",
            "--runs",
            "1",
            "--warmup",
            "1",
            "--min-samples",
            "200",
            "--no-baseline",
            "--python",
            s(&py),
            "--out",
            s(&tmp.path().join("out.json")),
            s(&op),
        ],
        &[],
    );
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{e}");
    assert!(e.contains("Two\\nLines run 1/1"), "{e}");
    assert!(
        e.lines().all(|l| !l.starts_with("Lines")),
        "a name broke a line: {e}"
    );
}

#[test]
fn an_op_file_that_is_a_fifo_is_refused_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fifo = tmp.path().join("Op.py");
    mkfifo(&fifo);
    let (code, e) = lotus_within(
        &["map", "--backend", "perf", "--dry-run", s(&fifo)],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains(s(&fifo)) && e.contains("fifo"), "{e}");
}

/// `lotus attribute` with nothing to attribute points to its usual use
/// (a trace folder) before the mapping's pair, and a file given where the
/// folder goes is called a file, not an OS error.
#[test]
fn attribute_says_what_to_give_and_that_a_file_is_not_a_folder() {
    for args in [&["attribute"][..], &["attribute", "--mapping", "m.json"]] {
        let err = common::lotus_usage_error(args);
        assert!(
            err.contains("lotus attribute DIR") && err.contains("--mapping M.json --profile P.csv"),
            "{args:?}: {err}"
        );
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("trace.txt");
    std::fs::write(&file, "SLoader,1,2\n").expect("file");
    let err = common::lotus_usage_error(&["attribute", file.to_str().expect("utf-8")]);
    assert!(
        err.contains("a file, not a trace folder") && !err.contains("os error"),
        "{err}"
    );
}
