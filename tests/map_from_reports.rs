//! `lotus map --from-reports` on the real VTune and uProf reports of the
//! original Lotus study, with expectations computed here, independently of
//! lotus's own readers.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use crate::common::{fixture, lotus_fails, lotus_ok};
use serde_json::Value;

/// (function, module basename, value) rows of one run.
type Rows = Vec<(String, String, f64)>;

fn basename(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// A VTune hotspots CSV, read with the csv crate by column name.
fn vtune_rows(path: &Path) -> Rows {
    let mut r = csv::Reader::from_path(path).expect("open");
    let h = r.headers().expect("header").clone();
    let col = |n: &str| {
        h.iter()
            .position(|x| x == n)
            .unwrap_or_else(|| panic!("{n} in {path:?}"))
    };
    let (f, m, t) = (col("Function"), col("Module"), col("CPU Time"));
    r.records()
        .map(|rec| {
            let rec = rec.expect("record");
            (
                rec[f].to_string(),
                rec[m].to_string(),
                rec[t].parse().expect("time"),
            )
        })
        .collect()
}

/// A uProf report: the lines after the `HOTTEST FUNCTIONS` title and its
/// header, up to the next blank line.
fn uprof_rows(path: &Path) -> Rows {
    let text = fs::read_to_string(path).expect("read");
    let mut lines = text
        .lines()
        .skip_while(|l| !l.contains("HOTTEST FUNCTIONS"));
    lines.next().expect("title");
    let header = lines.next().expect("header");
    assert!(header.starts_with("FUNCTION,"), "{header}");
    lines
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let mut r = csv::ReaderBuilder::new()
                .has_headers(false)
                .from_reader(l.as_bytes());
            let rec = r.records().next().expect("one record").expect("parses");
            (
                rec[0].to_string(),
                basename(&rec[2]),
                rec[1].parse().expect("count"),
            )
        })
        .collect()
}

/// Op name -> runs, each a list of rows.
fn expected_runs(dir: &Path, read: fn(&Path) -> Rows) -> BTreeMap<String, Vec<Rows>> {
    let mut ops = BTreeMap::new();
    for op in fs::read_dir(dir).expect("list") {
        let op = op.expect("entry").path();
        let runs: Vec<Rows> = fs::read_dir(&op)
            .expect("list op")
            .map(|e| read(&e.expect("entry").path()))
            .collect();
        ops.insert(
            op.file_name().expect("name").to_string_lossy().to_string(),
            runs,
        );
    }
    ops
}

fn union_keys(runs: &[Rows]) -> BTreeSet<String> {
    runs.iter()
        .flatten()
        .map(|(f, m, _)| format!("{f}|{m}"))
        .collect()
}

fn check_lotus_format(backend: &str, dir: &Path, read: fn(&Path) -> Rows) {
    let expected = expected_runs(dir, read);
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("mapping_funcs.json");
    lotus_ok(&[
        "map",
        "--backend",
        backend,
        "--from-reports",
        dir.to_str().expect("utf-8"),
        "--rule",
        "union",
        "--format",
        "lotus",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    let got: Value =
        serde_json::from_str(&fs::read_to_string(&out).expect("written")).expect("json");
    let op_to_func = got["op_to_func"].as_object().expect("op_to_func");
    assert_eq!(
        op_to_func.keys().cloned().collect::<BTreeSet<_>>(),
        expected.keys().cloned().collect::<BTreeSet<_>>()
    );
    let mut owners: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (op, runs) in &expected {
        let want = union_keys(runs);
        let list = op_to_func[op].as_array().expect("list");
        let have: BTreeSet<String> = list
            .iter()
            .map(|v| v.as_str().expect("str").to_string())
            .collect();
        assert_eq!(have.len(), list.len(), "{op}: duplicate keys");
        assert_eq!(have, want, "{backend} op {op}");
        for key in want {
            owners.entry(key).or_default().insert(op.clone());
        }
    }
    let want_common: BTreeMap<String, BTreeSet<String>> = owners
        .into_iter()
        .filter(|(_, ops)| ops.len() >= 2)
        .collect();
    let common = got["common_funcs_to_op"].as_object().expect("common");
    let have_common: BTreeMap<String, BTreeSet<String>> = common
        .iter()
        .map(|(k, v)| {
            let ops = v
                .as_array()
                .expect("ops")
                .iter()
                .map(|o| o.as_str().expect("str").to_string());
            (k.clone(), ops.collect())
        })
        .collect();
    assert!(
        !want_common.is_empty(),
        "the fixtures share functions between ops"
    );
    assert_eq!(have_common, want_common, "{backend} common_funcs_to_op");
}

#[test]
fn vtune_union_in_lotus_format_equals_the_reports() {
    check_lotus_format("vtune", &fixture("reports/vtune/hotspots"), vtune_rows);
}

#[test]
fn uprof_union_in_lotus_format_equals_the_reports() {
    check_lotus_format("uprof", &fixture("reports/uprof"), uprof_rows);
}

fn check_json(backend: &str, dir: &Path, read: fn(&Path) -> Rows) {
    let expected = expected_runs(dir, read);
    let text = lotus_ok(&[
        "map",
        "--backend",
        backend,
        "--from-reports",
        dir.to_str().expect("utf-8"),
        "--format",
        "json",
    ]);
    let m: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(m["schema"], "lotus.mapping/1");
    assert_eq!(m["backend"], backend);
    assert_eq!(m["settings"]["rule"], "union");
    for op in m["ops"].as_array().expect("ops") {
        let name = op["name"].as_str().expect("name");
        let runs = &expected[name];
        assert_eq!(op["runs"].as_u64(), Some(runs.len() as u64), "{name}");
        // Per key: summed value and the number of runs that saw it.
        let mut want: BTreeMap<String, (f64, u64)> = BTreeMap::new();
        for run in runs {
            let mut seen = BTreeSet::new();
            for (f, m, v) in run {
                let key = format!("{f}|{m}");
                let e = want.entry(key.clone()).or_default();
                e.0 += v;
                if seen.insert(key) {
                    e.1 += 1;
                }
            }
        }
        let funcs = op["functions"].as_array().expect("functions");
        assert_eq!(funcs.len(), want.len(), "{name}");
        let mut share_sum = 0.0;
        for f in funcs {
            let key = format!(
                "{}|{}",
                f["function"].as_str().expect("f"),
                f["module"].as_str().expect("m")
            );
            let (sum, seen) = want[&key];
            let got = f["samples"].as_f64().expect("samples");
            assert!(
                (got - sum).abs() <= 1e-6 * sum.max(1.0),
                "{name} {key}: {got} vs {sum}"
            );
            assert_eq!(f["runs_seen"].as_u64(), Some(seen), "{name} {key}");
            share_sum += f["share"].as_f64().expect("share");
        }
        assert!(
            (share_sum - 1.0).abs() < 1e-9,
            "{name}: shares sum to {share_sum}"
        );
        // Most samples first.
        let values: Vec<f64> = funcs
            .iter()
            .map(|f| f["samples"].as_f64().expect("n"))
            .collect();
        assert!(values.windows(2).all(|w| w[0] >= w[1]), "{name} sorted");
    }
}

#[test]
fn vtune_json_keeps_runs_seen_and_summed_time() {
    check_json("vtune", &fixture("reports/vtune/hotspots"), vtune_rows);
}

#[test]
fn uprof_json_keeps_runs_seen_and_summed_samples() {
    check_json("uprof", &fixture("reports/uprof"), uprof_rows);
}

#[test]
fn stricter_rules_keep_fewer_functions_consistently() {
    let dir = fixture("reports/vtune/hotspots");
    let expected = expected_runs(&dir, vtune_rows);
    let text = lotus_ok(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        dir.to_str().expect("p"),
        "--rule",
        "all",
        "--format",
        "lotus",
    ]);
    let got: Value = serde_json::from_str(&text).expect("json");
    for (op, runs) in &expected {
        let all: BTreeSet<String> = union_keys(runs)
            .into_iter()
            .filter(|k| {
                runs.iter()
                    .all(|r| r.iter().any(|(f, m, _)| &format!("{f}|{m}") == k))
            })
            .collect();
        let have: BTreeSet<String> = got["op_to_func"][op]
            .as_array()
            .expect("list")
            .iter()
            .map(|v| v.as_str().expect("s").to_string())
            .collect();
        assert_eq!(have, all, "op {op} under --rule all");
    }
}

#[test]
fn show_reads_both_schemas_back() {
    let dir = fixture("reports/uprof");
    let tmp = tempfile::tempdir().expect("tmp");
    let json = tmp.path().join("m.json");
    let old = tmp.path().join("mapping_funcs.json");
    let d = dir.to_str().expect("p");
    lotus_ok(&[
        "map",
        "--backend",
        "uprof",
        "--from-reports",
        d,
        "--out",
        json.to_str().expect("p"),
    ]);
    lotus_ok(&[
        "map",
        "--backend",
        "uprof",
        "--from-reports",
        d,
        "--format",
        "lotus",
        "--out",
        old.to_str().expect("p"),
    ]);
    let table = lotus_ok(&["show", json.to_str().expect("p")]);
    assert!(
        table.contains("jpeg_idct_16x16") && table.contains("libjpeg.so.9.5.0"),
        "{table}"
    );
    assert!(table.contains("RandomHorizontalFlip"));
    // The original schema read back gives the same lotus-format file.
    let again = lotus_ok(&["show", old.to_str().expect("p"), "--format", "lotus"]);
    let a: Value = serde_json::from_str(&again).expect("json");
    let b: Value = serde_json::from_str(&fs::read_to_string(&old).expect("read")).expect("json");
    assert_eq!(a, b);
    // A stricter rule re-applied by show equals mapping with it.
    let strict = lotus_ok(&[
        "show",
        json.to_str().expect("p"),
        "--rule",
        "all",
        "--format",
        "lotus",
    ]);
    let direct = lotus_ok(&[
        "map",
        "--backend",
        "uprof",
        "--from-reports",
        d,
        "--rule",
        "all",
        "--format",
        "lotus",
    ]);
    assert_eq!(strict, direct);
    let csv_out = lotus_ok(&["show", json.to_str().expect("p"), "--format", "csv"]);
    assert!(
        csv_out.starts_with("op,function,module,samples,share,runs_seen,runs,shared_with\n"),
        "{csv_out}"
    );
    let md = lotus_ok(&["show", json.to_str().expect("p"), "--format", "md"]);
    assert!(
        md.contains("## Loader") && md.contains("| `jpeg_idct_16x16` |"),
        "{md}"
    );
}

// ---- bad input -------------------------------------------------------------

fn op_dir(root: &Path, op: &str) -> std::path::PathBuf {
    let d = root.join(op);
    fs::create_dir_all(&d).expect("mkdir");
    d
}

#[test]
fn empty_dir_is_refused_with_the_layout() {
    let tmp = tempfile::tempdir().expect("tmp");
    let err = lotus_fails(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        tmp.path().to_str().expect("p"),
    ]);
    assert!(
        err.contains(tmp.path().to_str().expect("p")) && err.contains("DIR/<Op>/<run>.csv"),
        "{err}"
    );
}

#[test]
fn op_folder_without_reports_is_named_and_others_are_kept() {
    let tmp = tempfile::tempdir().expect("tmp");
    let reports = tmp.path().join("reports");
    fs::copy(
        fixture("reports/vtune/hotspots/RandomHorizontalFlip/1.csv"),
        op_dir(&reports, "Flip").join("1.csv"),
    )
    .expect("copy");
    op_dir(&reports, "Empty");
    let out = tmp.path().join("m.json");
    let err = lotus_fails(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        reports.to_str().expect("p"),
        "--out",
        out.to_str().expect("p"),
    ]);
    assert!(
        err.contains("op Empty") && err.contains("no reports"),
        "{err}"
    );
    assert!(
        err.contains(reports.join("Empty").to_str().expect("p")),
        "{err}"
    );
    assert!(err.contains("1 of 2 op(s) could not be mapped"), "{err}");
    // The op that read cleanly is written, and the file says what failed.
    let kept: Value =
        serde_json::from_str(&fs::read_to_string(&out).expect("finished ops kept")).expect("json");
    assert_eq!(kept["ops"].as_array().map(Vec::len), Some(1));
    assert_eq!(kept["ops"][0]["name"], "Flip");
    assert_eq!(kept["failures"][0]["op"], "Empty");
    assert!(kept["failures"][0]["error"]
        .as_str()
        .expect("error")
        .contains("no reports"));
}

fn one_report(content: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = op_dir(tmp.path(), "Op").join("1.csv");
    fs::write(&file, content).expect("write");
    (tmp, file)
}

fn map_fails(backend: &str, dir: &Path) -> String {
    lotus_fails(&[
        "map",
        "--backend",
        backend,
        "--from-reports",
        dir.to_str().expect("p"),
    ])
}

#[test]
fn csv_without_needed_columns_names_file_and_columns() {
    let (tmp, file) = one_report(b"Name,Time,Module\nf,1.0,m\n");
    let err = map_fails("vtune", tmp.path());
    assert!(err.contains(&format!("{}:1:", file.display())), "{err}");
    assert!(err.contains("no function column"), "{err}");
}

#[test]
fn uprof_report_without_functions_section_is_named() {
    let text = fs::read_to_string(fixture("reports/uprof/Loader/1.csv")).expect("read");
    let cut: String = text
        .split("\"100 HOTTEST FUNCTIONS")
        .next()
        .expect("head")
        .to_string();
    let (tmp, file) = one_report(cut.as_bytes());
    let err = map_fails("uprof", tmp.path());
    assert!(
        err.contains(file.to_str().expect("p")) && err.contains("no 'HOTTEST FUNCTIONS' section"),
        "{err}"
    );
}

#[test]
fn truncated_reports_name_the_line() {
    // VTune: cut in the middle of the second data row.
    let text = fs::read(fixture("reports/vtune/hotspots/Loader/1.csv")).expect("read");
    let second_row_end = text
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(2)
        .expect("rows")
        .0;
    let (tmp, file) = one_report(&text[..second_row_end - 20]);
    let err = map_fails("vtune", tmp.path());
    assert!(
        err.contains(&format!("{}:3:", file.display())) && err.contains("truncated"),
        "{err}"
    );

    // uProf: cut in the middle of the function table's third row.
    let text = fs::read_to_string(fixture("reports/uprof/Loader/1.csv")).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    let title = lines
        .iter()
        .position(|l| l.contains("HOTTEST FUNCTIONS"))
        .expect("title");
    let keep = lines[..title + 4].join("\n") + "\n" + &lines[title + 4][..20];
    let (tmp, file) = one_report(keep.as_bytes());
    let err = map_fails("uprof", tmp.path());
    assert!(
        err.contains(&format!("{}:{}:", file.display(), title + 5)) && err.contains("truncated"),
        "{err}"
    );
}

#[test]
fn non_utf8_bytes_name_file_and_line() {
    let mut text =
        fs::read(fixture("reports/vtune/hotspots/RandomHorizontalFlip/1.csv")).expect("read");
    let at = text.iter().position(|b| *b == b'\n').expect("header") + 3;
    text[at] = 0xff;
    let (tmp, file) = one_report(&text);
    let err = map_fails("vtune", tmp.path());
    assert!(
        err.contains(&format!("{}:2:", file.display())) && err.contains("UTF-8"),
        "{err}"
    );

    let text =
        fs::read_to_string(fixture("reports/uprof/RandomHorizontalFlip/1.csv")).expect("read");
    let mut bytes = text
        .replace("\"ImagingFlipLeftRight\"", "\"Imaging\u{1}FlipLeftRight\"")
        .into_bytes();
    let at = bytes.iter().position(|b| *b == 1).expect("marker");
    bytes[at] = 0xfe;
    let line = 1 + bytes[..at].iter().filter(|b| **b == b'\n').count();
    let (tmp, file) = one_report(&bytes);
    let err = map_fails("uprof", tmp.path());
    assert!(
        err.contains(&format!("{}:{line}:", file.display())) && err.contains("UTF-8"),
        "{err}"
    );
}

#[test]
fn unknown_backend_lists_the_known_ones() {
    let err = common::lotus_usage_error(&["map", "--backend", "gprof", "--from-reports", "."]);
    assert!(
        err.contains("unknown backend 'gprof'") && err.contains("perf, uprof, vtune"),
        "{err}"
    );
}

#[test]
fn wrong_backend_for_the_reports_fails_clearly() {
    // VTune reports read as uProf reports: no functions section.
    let err = map_fails("uprof", &fixture("reports/vtune/hotspots"));
    assert!(err.contains("HOTTEST FUNCTIONS"), "{err}");
    // perf with --from-reports is a usage error (exit status 2).
    let err = common::lotus_usage_error(&[
        "map",
        "--backend",
        "perf",
        "--from-reports",
        fixture("reports/vtune/hotspots").to_str().expect("utf-8"),
    ]);
    assert!(err.contains("--backend vtune"), "{err}");
}
