//! Snapshots of what users see (insta, `tests/snapshots/`): the tables of
//! `show`, `attribute`, `trace stats` and `compare` at a fixed width
//! (`COLUMNS=100`), their csv, md and json outputs, the messages of bad
//! input, and the structure of the report page (tags and classes, text
//! left out). The inputs are the repository's fixtures, so every figure is
//! fixed; what still differs between machines and runs (the checkout's
//! path, temporary folders, the version, dates, the host) is redacted by
//! [`redacted`] before the comparison.
//!
//! A change in any of these outputs fails here; after a deliberate one,
//! `cargo insta review` (or `INSTA_UPDATE=always cargo test -p lotus-cli
//! --test e2e -- outputs::`) rewrites the snapshots, and the diff goes in
//! the commit. With `CI` set (or `INSTA_UPDATE=no`), nothing is written.

use std::path::Path;
use std::process::Command;

use crate::common::{fixture, root, s};
use serde_json::Value;

/// The width every table is fitted to here.
const COLUMNS: &str = "100";

/// What `lotus ARGS` (run in `cwd`, at [`COLUMNS`]) printed, and whether it
/// succeeded.
struct Run {
    ok: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run_in(cwd: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(args)
        .current_dir(cwd)
        .env("COLUMNS", COLUMNS)
        .env_remove("LOTUS_BACKEND")
        .env_remove("NO_COLOR")
        .output()
        .expect("run lotus");
    Run {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

/// `lotus ARGS`, which must succeed: its stdout.
fn ok_in(cwd: &Path, args: &[&str]) -> String {
    let r = run_in(cwd, args);
    assert!(r.ok, "lotus {args:?} failed:\n{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    r.stdout
}

/// `lotus ARGS`, which must fail with exit status 1 and no panic: its
/// stderr.
fn fails_in(cwd: &Path, args: &[&str]) -> String {
    let r = run_in(cwd, args);
    assert_eq!(r.code, Some(1), "lotus {args:?}: {}{}", r.stdout, r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    r.stderr
}

/// Runs `check` with insta's settings for this module: snapshots in
/// `tests/snapshots/` named by the test alone, and the filters that
/// redact what differs between machines and runs (`tmp`: the test's
/// temporary folder).
fn redacted(tmp: &Path, check: impl FnOnce()) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    // The longer paths first: the temporary folder may lie in the checkout.
    let mut paths = vec![(tmp.to_path_buf(), "[TMP]"), (root(), "[ROOT]")];
    if let Ok(real) = tmp.canonicalize() {
        paths.push((real, "[TMP]"));
    }
    paths.sort_by_key(|(p, _)| std::cmp::Reverse(p.as_os_str().len()));
    for (path, name) in paths {
        settings.add_filter(&regex::escape(s(&path)), name);
    }
    settings.add_filter(
        &format!(r"\b{}\b", regex::escape(env!("CARGO_PKG_VERSION"))),
        "[VERSION]",
    );
    // Dates and times of day (the run's, the page's).
    settings.add_filter(
        r"\b\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?( ?UTC|Z)?)?",
        "[DATE]",
    );
    // The verdict's advice: predictions, whose figures depend on the CPUs
    // of the machine the tests run on (checked in tests/verdict.rs and
    // tests/predict.rs).
    settings.add_filter(
        r"(?m)^(- \*\*)?what would help(\*\*)?: .*(\n  .*)*",
        "what would help: [ADVICE]",
    );
    settings.add_filter(
        r#"("rule": "predicted",\n\s+"text": )".*""#,
        r#"$1"[ADVICE]""#,
    );
    // The commit lotus was built from (`lotus --version`, the report).
    settings.add_filter(r"\b[0-9a-f]{12}(-dirty)?\b", "[COMMIT]");
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if host.len() >= 4 {
            settings.add_filter(&format!(r"\b{}\b", regex::escape(host)), "[HOST]");
        }
    }
    settings.bind(check);
}

/// The mapping the tests attribute through: the study's VTune hotspot
/// reports, mapped (`map --from-reports`), in `dir`.
fn study_mapping(dir: &Path) -> String {
    let out = dir.join("study.json");
    ok_in(
        dir,
        &[
            "map",
            "--backend",
            "vtune",
            "--from-reports",
            s(&fixture("reports/vtune/hotspots")),
            "--out",
            s(&out),
        ],
    );
    std::fs::read_to_string(&out).expect("the mapping")
}

#[test]
fn show_table_csv_md_and_json() {
    let tmp = tempfile::tempdir().expect("tmp");
    let torch = fixture("names/torch_mapping.json");
    let table = ok_in(tmp.path(), &["show", s(&torch)]);
    let csv = ok_in(tmp.path(), &["show", s(&torch), "--format", "csv"]);
    let md = ok_in(tmp.path(), &["show", s(&torch), "--format", "md"]);
    let json = ok_in(tmp.path(), &["show", s(&torch), "--format", "json"]);
    redacted(tmp.path(), || {
        insta::assert_snapshot!("show_table", table);
        insta::assert_snapshot!("show_csv", csv);
        insta::assert_snapshot!("show_md", md);
        insta::assert_snapshot!("show_json", json);
    });
}

#[test]
fn map_from_reports_and_attribute_table_csv_md_and_json() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = study_mapping(tmp.path());
    let m = tmp.path().join("study.json");
    let profile = fixture("reports/vtune/uarch/b1024_gpu4_dataloader8.csv");
    let args = ["attribute", "--mapping", s(&m), "--profile", s(&profile)];
    let table = ok_in(tmp.path(), &args);
    let with = |format: &str| {
        let mut a = args.to_vec();
        a.extend(["--format", format]);
        ok_in(tmp.path(), &a)
    };
    let (csv, md, json) = (with("csv"), with("md"), with("json"));
    redacted(tmp.path(), || {
        insta::assert_snapshot!("map_from_reports_json", mapping);
        insta::assert_snapshot!("attribute_table", table);
        insta::assert_snapshot!("attribute_csv", csv);
        insta::assert_snapshot!("attribute_md", md);
        insta::assert_snapshot!("attribute_json", json);
    });
}

#[test]
fn trace_stats_table_csv_md_and_json() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = fixture("traces/original");
    let stats = |format: Option<&str>| {
        let mut a = vec!["trace", "stats", s(&dir)];
        if let Some(f) = format {
            a.extend(["--format", f]);
        }
        ok_in(tmp.path(), &a)
    };
    let (table, csv, md, json) = (
        stats(None),
        stats(Some("csv")),
        stats(Some("md")),
        stats(Some("json")),
    );
    redacted(tmp.path(), || {
        insta::assert_snapshot!("trace_stats_table", table);
        insta::assert_snapshot!("trace_stats_csv", csv);
        insta::assert_snapshot!("trace_stats_md", md);
        insta::assert_snapshot!("trace_stats_json", json);
    });
}

/// fixtures/names/torch_mapping.json as a live mapping of `host` would
/// record it: a host and, per op, a window of `calls` calls, `scale` times
/// the first host's time and CPU.
fn live_mapping(host: &str, cpu: &str, scale: f64) -> String {
    let text = std::fs::read_to_string(fixture("names/torch_mapping.json")).expect("read");
    let mut m: Value = serde_json::from_str(&text).expect("json");
    m["environment"] = serde_json::json!({
        "host": host,
        "cpu_model": cpu,
        "cpus": "8",
        "cpu_cores": "4",
        "kernel": "6.1.0-test",
    });
    for (i, op) in m["ops"].as_array_mut().expect("ops").iter_mut().enumerate() {
        let calls = 200 + 100 * i as u64;
        let seconds = 0.25 * (i + 1) as f64 * scale;
        op["window"] = serde_json::json!({
            "seconds": seconds,
            "iterations": calls,
            "windows": 2,
            "samples": 500 * (i + 1),
            "counters": {"task-clock-ns": seconds * 0.8e9},
            "unsampled": {"calls": calls, "seconds": seconds * 0.9, "cpu_seconds": seconds * 0.7},
        });
    }
    serde_json::to_string_pretty(&m).expect("json")
}

#[test]
fn compare_table_csv_md_and_json() {
    let tmp = tempfile::tempdir().expect("tmp");
    let a = tmp.path().join("here.json");
    let b = tmp.path().join("there.json");
    std::fs::write(&a, live_mapping("node-a", "Test CPU 1000", 1.0)).expect("write");
    std::fs::write(&b, live_mapping("node-b", "Test CPU 9000", 2.5)).expect("write");
    let compare = |format: Option<&str>| {
        let mut args = vec!["compare", s(&a), s(&b)];
        if let Some(f) = format {
            args.extend(["--format", f]);
        }
        ok_in(tmp.path(), &args)
    };
    let (table, csv, md, json) = (
        compare(None),
        compare(Some("csv")),
        compare(Some("md")),
        compare(Some("json")),
    );
    redacted(tmp.path(), || {
        insta::assert_snapshot!("compare_table", table);
        insta::assert_snapshot!("compare_csv", csv);
        insta::assert_snapshot!("compare_md", md);
        insta::assert_snapshot!("compare_json", json);
    });
}

#[test]
fn messages_of_bad_input() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let study = d.join("study.json");
    study_mapping(d);
    let not_json = d.join("notes.json");
    std::fs::write(&not_json, "these are notes, not a mapping\n").expect("write");
    let cut = d.join("cut.json");
    let torch = std::fs::read_to_string(fixture("names/torch_mapping.json")).expect("read");
    std::fs::write(&cut, &torch[..torch.len() / 2]).expect("write");
    let profile = fixture("attribute/profile_samples.json");
    let no_function_column = fixture("attribute/no_function_column.csv");
    let empty_mapping = fixture("attribute/empty_mapping.json");
    let other_ops = fixture("attribute/other_ops_mapping.json");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("show_missing_file", vec!["show", "missing.json"]),
        ("show_not_json", vec!["show", s(&not_json)]),
        ("show_cut_json", vec!["show", s(&cut)]),
        (
            "attribute_no_function_column",
            vec![
                "attribute",
                "--mapping",
                s(&study),
                "--profile",
                s(&no_function_column),
            ],
        ),
        (
            "attribute_empty_mapping",
            vec![
                "attribute",
                "--mapping",
                s(&empty_mapping),
                "--profile",
                s(&profile),
            ],
        ),
        (
            "attribute_no_shared_function",
            vec![
                "attribute",
                "--mapping",
                s(&other_ops),
                "--profile",
                s(&profile),
            ],
        ),
        (
            "compare_without_windows",
            vec!["compare", s(&study), s(&study)],
        ),
        (
            "trace_stats_missing_folder",
            vec!["trace", "stats", "missing"],
        ),
        ("trace_stats_empty_folder", vec!["trace", "stats", "."]),
    ];
    let messages: Vec<(&str, String)> = cases
        .iter()
        .map(|(name, args)| (*name, fails_in(d, args)))
        .collect();
    redacted(d, || {
        for (name, message) in &messages {
            insta::assert_snapshot!(format!("error_{name}"), message);
        }
    });
}

#[test]
fn report_page_structure() {
    let tmp = tempfile::tempdir().expect("tmp");
    let page = tmp.path().join("page.html");
    let trace = fixture("traces/original");
    ok_in(
        tmp.path(),
        &["report", "--out", s(&page), "--trace", s(&trace)],
    );
    let html = std::fs::read_to_string(&page).expect("the page");
    let outline = outline(&html);
    redacted(tmp.path(), || {
        insta::assert_snapshot!("report_page_outline", outline);
    });
}

/// The outline of a page lotus wrote: one line per element, indented by
/// depth, `tag.class.class#id`; no text, no other attribute, no script or
/// style content; the children of an `svg` counted by tag on its line;
/// a run of siblings with the same outline once, with `×N`.
///
/// Hand-written (not an HTML5 parser crate): it only reads lotus's own
/// template output, whose tags are balanced and attributes quoted, and
/// the test needs tags and classes alone.
fn outline(html: &str) -> String {
    #[derive(Default)]
    struct Node {
        head: String,
        children: Vec<Node>,
        svg_counts: std::collections::BTreeMap<String, usize>,
    }
    const VOID: [&str; 8] = ["meta", "br", "img", "input", "hr", "link", "col", "wbr"];
    fn attr(tag: &str, name: &str) -> Option<String> {
        let key = format!(" {name}=\"");
        let at = tag.find(&key)? + key.len();
        let end = tag[at..].find('"')?;
        Some(tag[at..at + end].to_string())
    }
    let mut stack: Vec<Node> = vec![Node::default()];
    let mut svg_depth = 0usize;
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        rest = &rest[open..];
        let Some(close) = rest.find('>') else { break };
        let tag = &rest[1..close];
        rest = &rest[close + 1..];
        if tag.starts_with('!') || tag.starts_with('?') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim().to_ascii_lowercase();
            if svg_depth > 1 {
                svg_depth -= 1;
                continue;
            }
            if name == "svg" {
                svg_depth = 0;
            }
            if stack.len() > 1 {
                let node = stack.pop().expect("an open element");
                stack.last_mut().expect("its parent").children.push(node);
            }
            continue;
        }
        let name: String = tag
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '/')
            .collect::<String>()
            .to_ascii_lowercase();
        let self_closing = tag.ends_with('/') || VOID.contains(&name.as_str());
        if svg_depth > 0 {
            *stack
                .last_mut()
                .expect("the svg")
                .svg_counts
                .entry(name)
                .or_default() += 1;
            if !self_closing {
                svg_depth += 1;
            }
            continue;
        }
        let mut head = name.clone();
        if let Some(class) = attr(tag, "class") {
            for c in class.split_whitespace() {
                head.push('.');
                head.push_str(c);
            }
        }
        if let Some(id) = attr(tag, "id") {
            head.push('#');
            head.push_str(&id);
        }
        let node = Node {
            head,
            ..Node::default()
        };
        if self_closing {
            stack.last_mut().expect("a parent").children.push(node);
            continue;
        }
        if name == "script" || name == "style" {
            // Their content is not markup: skip to the end tag.
            let end = format!("</{name}");
            let at = rest.find(&end).unwrap_or(rest.len());
            rest = &rest[at..];
        }
        if name == "svg" {
            svg_depth = 1;
        }
        stack.push(node);
    }
    while stack.len() > 1 {
        let node = stack.pop().expect("an open element");
        stack.last_mut().expect("its parent").children.push(node);
    }
    fn render(node: &Node, depth: usize) -> String {
        let mut line = format!("{}{}", "  ".repeat(depth), node.head);
        if !node.svg_counts.is_empty() {
            let counts: Vec<String> = node
                .svg_counts
                .iter()
                .map(|(tag, n)| format!("{tag}×{n}"))
                .collect();
            line.push_str(&format!(" [{}]", counts.join(" ")));
        }
        let mut out = line + "\n";
        let mut i = 0;
        while i < node.children.len() {
            let text = render(&node.children[i], depth + 1);
            let mut same = 1;
            while i + same < node.children.len()
                && render(&node.children[i + same], depth + 1) == text
            {
                same += 1;
            }
            if same > 1 {
                let (first, more) = text.split_once('\n').expect("a line");
                out.push_str(&format!("{first} ×{same}\n{more}"));
            } else {
                out.push_str(&text);
            }
            i += same;
        }
        out
    }
    let top = stack.pop().expect("the document");
    top.children.iter().map(|c| render(c, 0)).collect()
}
