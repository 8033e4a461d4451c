//! What lotus prints from untrusted data (issue 23): names that hold
//! terminal escape sequences (symbol, module, op, host and file names)
//! never reach stdout or stderr raw; CSV text cells a spreadsheet would
//! run as formulas get a leading `'` while numbers stay numbers; and
//! `lotus compare` refuses window figures no window can have measured,
//! naming the file, the op and the field, instead of printing them.

use crate::common;

use std::fs;
use std::path::Path;
use std::process::Output;

use crate::common::{lotus, s};
use serde_json::{json, Value};

/// An OSC sequence (retitles the terminal) and a CSI one (clears it).
const OSC: &str = "\x1b]0;pwned\x07";
const CSI: &str = "\x1b[2J";
/// A C1 control (a one-character CSI in some terminals) and a
/// bidirectional override.
const C1: &str = "\u{9b}31m\u{202e}";

fn hostile(name: &str) -> String {
    format!("{name}{OSC}{CSI}{C1}")
}

/// A live mapping (windows with calls, seconds and CPU time) whose op,
/// function, module, backend and host hold escape sequences.
fn mapping(op: &str, seconds: f64, calls: u64, cpu_ns: f64) -> Value {
    json!({
        "schema": "lotus.mapping/1",
        "backend": hostile("perf"),
        "settings": {"rule": "union", "runs": 1},
        "unit": "samples",
        "environment": {
            "host": hostile("node"),
            "cpu_model": hostile("CPU"),
            "cpus": "4",
            "kernel": hostile("6.1"),
        },
        "shared": [{"function": hostile("decode"), "module": hostile("libjpeg.so"), "ops": [op, "Other"]}],
        "ops": [
            {"name": op, "runs": 1, "samples": 10, "functions": [
                {"function": hostile("decode"), "module": hostile("libjpeg.so"), "samples": 10, "share": 1.0, "runs_seen": 1}],
             "window": {"seconds": seconds, "iterations": calls, "windows": 1, "samples": 10,
                        "counters": {"task-clock-ns": cpu_ns}}},
            {"name": "Other", "runs": 1, "samples": 5, "functions": [
                {"function": hostile("decode"), "module": hostile("libjpeg.so"), "samples": 5, "share": 1.0, "runs_seen": 1}],
             "window": {"seconds": 1.0, "iterations": 10, "windows": 1, "samples": 5,
                        "counters": {"task-clock-ns": 5e8}}}
        ]
    })
}

fn profile() -> Value {
    json!({
        "schema": "lotus.profile/1",
        "backend": "perf",
        "unit": "samples",
        "rows": [
            {"function": hostile("decode"), "module": hostile("libjpeg.so"), "value": 40},
            {"function": hostile("unmapped"), "module": hostile("libc.so.6"), "value": 10}
        ]
    })
}

fn write(path: &Path, v: &Value) {
    fs::write(path, serde_json::to_string_pretty(v).expect("json")).expect("write");
}

/// No ESC, BEL or C1 control in either stream (UTF-8's encoding of
/// U+009B is C2 9B); returns stdout.
fn clean(what: &str, o: &Output) -> String {
    for (stream, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !bytes.contains(&0x1b) && !bytes.contains(&0x07),
            "{what}: a raw escape on {stream}: {text:?}"
        );
        assert!(
            !bytes.windows(2).any(|w| w == [0xc2, 0x9b]) && !text.contains('\u{202e}'),
            "{what}: a raw C1 control or bidi override on {stream}: {text:?}"
        );
    }
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn escape_sequences_in_names_are_printed_escaped_by_every_text_view() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let op = hostile("Loader");
    let a = d.join("a.json");
    // The file name too (compare labels its columns with it).
    let b = d.join(format!("b{CSI}.json"));
    write(&a, &mapping(&op, 2.0, 100, 1.5e9));
    write(&b, &mapping(&op, 3.0, 100, 2.0e9));
    let prof = d.join("p.json");
    write(&prof, &profile());

    let runs: Vec<(&str, Vec<&str>)> = vec![
        ("show", vec!["show", s(&a), "--top", "0"]),
        ("show md", vec!["show", s(&a), "--format", "md"]),
        ("show wide", vec!["show", s(&a), "--wide"]),
        ("show against", vec!["show", s(&a), "--against", s(&b)]),
        (
            "show against md",
            vec!["show", s(&a), "--against", s(&b), "--format", "md"],
        ),
        (
            "attribute",
            vec!["attribute", "--mapping", s(&a), "--profile", s(&prof)],
        ),
        (
            "attribute md",
            vec![
                "attribute",
                "--mapping",
                s(&a),
                "--profile",
                s(&prof),
                "--format",
                "md",
            ],
        ),
        (
            "attribute functions",
            vec![
                "attribute",
                "--mapping",
                s(&a),
                "--profile",
                s(&prof),
                "--by",
                "function",
            ],
        ),
        ("compare", vec!["compare", s(&a), s(&b)]),
    ];
    for (what, args) in runs {
        let o = lotus(&args);
        let out = clean(what, &o);
        assert!(
            o.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // What was there is shown, escaped.
        assert!(out.contains("\\x1b"), "{what}: {out}");
    }
    let o = lotus(&["compare", s(&a), s(&b)]);
    let out = clean("compare", &o);
    for shown in [
        "node\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u{202e}",
        "b\\x1b[2J",
    ] {
        assert!(out.contains(shown), "{shown}: {out}");
    }

    // An error that quotes a name (here a mapping no op of which matches
    // the profile: the op list is quoted).
    let none = d.join("none.json");
    write(
        &none,
        &json!({"schema": "lotus.profile/1", "backend": "perf", "unit": "samples",
                "rows": [{"function": hostile("nothing"), "module": "m", "value": 1}]}),
    );
    let o = lotus(&["attribute", "--mapping", s(&a), "--profile", s(&none)]);
    clean("attribute error", &o);
    assert!(!o.status.success());
}

/// A trace whose folder name, header (host, role) and op lines hold
/// escape sequences: `lotus trace stats` shows them escaped, in its
/// tables and in its warnings about bad lines.
#[test]
fn trace_stats_prints_hostile_hosts_and_lines_escaped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join(format!("trace{OSC}"));
    fs::create_dir(&dir).expect("mkdir");
    let host = hostile("node");
    fs::write(
        dir.join("lotustrace_log_main_pid_100"),
        format!(
            "#lotus-trace v1 role=main pid=100 host={} rank=0\nSBatchWait_0,1000,500,kind=wait\nSBatchConsumed_0,2000,10,kind=consume\n",
            host.replace(' ', "")
        ),
    )
    .expect("write");
    fs::write(
        dir.join("lotustrace_log_worker_pid_101"),
        format!(
            "#lotus-trace v1 role={CSI}worker pid=101 host={} rank=0\nSLoader,100,400,kind=op\nS{}Crop,200,100,kind=op\nSBatch_0,100,800,kind=batch,batch=0\n",
            host.replace(' ', ""),
            hostile("Bad"),
        ),
    )
    .expect("write");
    let o = lotus(&["trace", "stats", s(&dir)]);
    let out = clean("trace stats", &o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("trace\\x1b]0;pwned\\x07"), "{out}");
    assert!(out.contains("node\\x1b]0;pwned"), "the rank's host: {out}");
    assert!(err.contains("\\x1b"), "the bad line is quoted: {err}");
}

/// CSV: a name a spreadsheet would run as a formula comes out behind a
/// `'`; figures (negative ones too) stay numbers.
#[test]
fn csv_text_cells_that_start_a_formula_are_quoted_and_numbers_are_not() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let formula = "=cmd|' /C calc'!A0";
    let mut m = mapping(formula, 2.0, 100, 1.5e9);
    m["ops"][0]["functions"][0]["function"] = "@SUM(A1)".into();
    m["ops"][0]["functions"][0]["module"] = "+lib.so".into();
    m["shared"] = json!([]);
    let a = d.join("a.json");
    write(&a, &m);
    let b = d.join("-b.json");
    write(&b, &m);
    let mut p = profile();
    p["rows"] = json!([
        {"function": "@SUM(A1)", "module": "+lib.so", "value": 40,
         "counters": {"delta": -0.5}},
        {"function": "other", "module": "m", "value": 10}
    ]);
    let prof = d.join("p.json");
    write(&prof, &p);

    let cells = |text: &str| -> Vec<Vec<String>> {
        csv::Reader::from_reader(text.as_bytes())
            .records()
            .map(|r| r.expect("csv").iter().map(String::from).collect())
            .collect()
    };
    let quoted = format!("'{formula}");

    // show: op, function, module.
    let out = common::lotus_ok(&["show", s(&a), "--format", "csv"]);
    let rows = cells(&out);
    assert_eq!(rows[0][0], quoted, "{out}");
    assert_eq!(rows[0][1], "'@SUM(A1)", "{out}");
    assert_eq!(rows[0][2], "'+lib.so", "{out}");

    // compare: the op and the label (the file stem `-b`).
    let out = common::lotus_ok(&["compare", s(&a), s(&b), "--format", "csv"]);
    let rows = cells(&out);
    assert_eq!(rows[0][0], quoted, "{out}");
    assert_eq!(rows[1][1], "'-b", "{out}");
    assert_eq!(rows[0][2], "100", "calls stay a number: {out}");

    // attribute: op names; by function: function, module; and a negative
    // counter stays a negative number.
    let out = common::lotus_ok(&[
        "attribute",
        "--mapping",
        s(&a),
        "--profile",
        s(&prof),
        "--format",
        "csv",
    ]);
    assert!(
        cells(&out).iter().any(|r| r[1] == quoted),
        "attribute csv: {out}"
    );
    assert!(!out.contains(&format!(",{formula}")), "{out}");
    let out = common::lotus_ok(&[
        "attribute",
        "--mapping",
        s(&a),
        "--profile",
        s(&prof),
        "--by",
        "function",
        "--format",
        "csv",
    ]);
    let rows = cells(&out);
    let header = csv::Reader::from_reader(out.as_bytes())
        .headers()
        .expect("header")
        .clone();
    let delta = header
        .iter()
        .position(|h| h == "delta")
        .expect("delta column");
    let sum = rows
        .iter()
        .find(|r| r[1] == "'@SUM(A1)")
        .expect("function row");
    assert_eq!(sum[2], "'+lib.so", "{out}");
    assert_eq!(sum[delta], "-0.5", "{out}");
    // The ops cell (`op=part;...`) starts with the formula's op.
    assert!(sum[3].starts_with(&quoted), "{out}");
}

/// `lotus compare` refuses a window figure no window can have measured,
/// naming the file, the op and the field; no figure it prints is a long
/// digit string.
#[test]
fn compare_refuses_impossible_window_figures_naming_file_op_and_field() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let good = d.join("good.json");
    write(&good, &mapping("Loader", 2.0, 100, 1.5e9));
    type Change = fn(&mut Value);
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "huge seconds",
            |m| m["ops"][0]["window"]["seconds"] = 1e300.into(),
            "window.seconds",
        ),
        (
            "negative seconds",
            |m| m["ops"][0]["window"]["seconds"] = (-2.0).into(),
            "window.seconds",
        ),
        (
            "huge CPU",
            |m| m["ops"][0]["window"]["counters"]["task-clock-ns"] = 1e300.into(),
            "window.counters.task-clock-ns",
        ),
        (
            "more CPU than 4 CPUs hold",
            |m| m["ops"][0]["window"]["counters"]["task-clock-ns"] = 9e10.into(),
            "window.counters.task-clock-ns",
        ),
        (
            "unsampled CPU without calls",
            |m| {
                m["ops"][0]["window"]["unsampled"] =
                    json!({"calls": 0, "seconds": 1.0, "cpu_seconds": 0.5})
            },
            "window.unsampled.calls",
        ),
        (
            "a CPU count that is not one",
            |m| m["environment"]["cpus"] = "-3".into(),
            "environment.cpus",
        ),
    ];
    for (what, change, field) in cases {
        let mut m = mapping("Loader", 2.0, 100, 1.5e9);
        change(&mut m);
        let bad = d.join("other.json");
        write(&bad, &m);
        let o = lotus(&["compare", s(&good), s(&bad)]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert!(o.stdout.is_empty(), "{what}: nothing printed");
        assert!(
            err.contains(s(&bad)) && err.contains(field) && err.contains("lotus map"),
            "{what}: {err}"
        );
        if field.starts_with("window") {
            assert!(err.contains("op Loader"), "{what}: {err}");
        }
        assert!(
            !err.split(|c: char| !c.is_ascii_digit())
                .any(|run| run.len() > 20),
            "{what}: a long digit string: {err}"
        );
    }
    // Extreme but possible figures (a 1 ns op, 1e9 calls) print bounded.
    let mut m = mapping("Loader", 1.0, 1_000_000_000, 1e9);
    m["ops"][0]["window"]["seconds"] = 1.0.into();
    let tiny = d.join("tiny.json");
    write(&tiny, &m);
    let out = common::lotus_ok(&["compare", s(&good), s(&tiny)]);
    assert!(
        !out.split(|c: char| !c.is_ascii_digit())
            .any(|run| run.len() > 20),
        "{out}"
    );
}

/// A mapping or a profile holding a figure such as 1e300 is shown in
/// exponent form by `lotus show` and `lotus attribute`, never as a
/// 301-digit number.
#[test]
fn huge_figures_in_a_mapping_or_a_profile_print_bounded() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let m = d.join("big.json");
    write(
        &m,
        &json!({"schema": "lotus.mapping/1", "backend": "perf", "settings": {"rule": "union"},
                "unit": "samples", "shared": [],
                "ops": [{"name": "A", "runs": 1, "samples": 1e300, "functions": [
                    {"function": "f", "module": "m", "samples": 1e300, "share": 1.0, "runs_seen": 1}]}]}),
    );
    let p = d.join("big_profile.json");
    write(
        &p,
        &json!({"schema": "lotus.profile/1", "backend": "perf", "unit": "samples",
                "rows": [{"function": "f", "module": "m", "value": 1e300}]}),
    );
    let long_digits = |text: &str| {
        text.split(|c: char| !c.is_ascii_digit())
            .any(|run| run.len() > 20)
    };
    for args in [
        vec!["show", s(&m)],
        vec!["show", s(&m), "--format", "md"],
        vec!["attribute", "--mapping", s(&m), "--profile", s(&p)],
        vec![
            "attribute",
            "--mapping",
            s(&m),
            "--profile",
            s(&p),
            "--format",
            "md",
        ],
    ] {
        let out = common::lotus_ok(&args);
        assert!(!long_digits(&out), "{args:?}: {out}");
        assert!(out.contains("e300"), "{args:?}: {out}");
    }
}

/// `lotus trace stats --op-times` writes an op whose name starts a
/// formula behind a `'`, and `lotus attribute --op-times` reads the name
/// back as it was.
#[test]
fn op_times_guard_formula_names_and_read_them_back() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    fs::create_dir(&dir).expect("mkdir");
    fs::write(
        dir.join("lotustrace_log_worker_pid_101"),
        "S=cmd|calc,100,400,kind=op\nSLoader,600,100,kind=op\nSBatch_0,100,800,kind=batch,batch=0\n",
    )
    .expect("write");
    let times = tmp.path().join("op_times.csv");
    common::lotus_ok(&["trace", "stats", s(&dir), "--op-times", s(&times)]);
    let text = fs::read_to_string(&times).expect("op times");
    assert!(text.contains("\n'=cmd|calc,"), "{text}");

    // Read back: the op of the mapping named `=cmd|calc` gets its time.
    let m = tmp.path().join("m.json");
    let mut mapping = mapping("=cmd|calc", 2.0, 100, 1.5e9);
    mapping["ops"][1]["name"] = "Loader".into();
    mapping["shared"] = json!([]);
    write(&m, &mapping);
    let prof = tmp.path().join("p.json");
    write(&prof, &profile());
    let out = common::lotus_ok(&[
        "attribute",
        "--mapping",
        s(&m),
        "--profile",
        s(&prof),
        "--op-times",
        s(&times),
        "--format",
        "json",
    ]);
    assert!(
        !out.contains("'=cmd"),
        "the guard is not part of the name: {out}"
    );
    let o = lotus(&[
        "attribute",
        "--mapping",
        s(&m),
        "--profile",
        s(&prof),
        "--op-times",
        s(&times),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("'=cmd"), "no op time goes unmatched: {err}");
}
