//! `lotus attribute` on the whole-training-run VTune uarch profiles of the
//! original Lotus study, with a mapping built from the study's per-op
//! hotspot reports. Expectations are computed here, from the files, with
//! the csv crate and the documented rules, not with lotus's own code.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::common::{fixture, lotus, lotus_fails, lotus_ok, s};
use serde_json::Value;

const UARCH: [&str; 3] = [
    "b1024_gpu4_dataloader8",
    "b1024_gpu4_dataloader12",
    "b1024_gpu4_dataloader16",
];
const UNEXPLAINED: &str = "(unexplained)";

fn uarch(name: &str) -> PathBuf {
    fixture(&format!("reports/vtune/uarch/{name}.csv"))
}

/// A profile row as the test reads it.
#[derive(Debug, Clone)]
struct Row {
    function: String,
    module: String,
    value: f64,
    clockticks: Option<f64>,
    instructions: Option<f64>,
    retiring: Option<f64>,
}

/// `1,868.632s` / `41.5%` / `6,275,872,000,000` as a number.
fn figure(text: &str) -> Option<f64> {
    let t = text.trim();
    let t = t.strip_suffix('s').or(t.strip_suffix('%')).unwrap_or(t);
    t.replace(',', "").parse().ok()
}

/// A VTune uarch report (TAB-separated), columns by name.
fn uarch_rows(path: &Path) -> Vec<Row> {
    let mut r = csv::ReaderBuilder::new()
        .delimiter(b'\t')
        .from_path(path)
        .expect("open");
    let h = r.headers().expect("header").clone();
    let col = |n: &str| h.iter().position(|x| x == n).expect(n);
    let (f, t, m) = (
        col("Source Function / Function / Call Stack"),
        col("CPU Time"),
        col("Module"),
    );
    let (c, i, ret) = (
        col("Clockticks"),
        col("Instructions Retired"),
        col("Retiring"),
    );
    r.records()
        .map(|rec| {
            let rec = rec.expect("record");
            Row {
                function: rec[f].to_string(),
                module: rec[m].to_string(),
                value: figure(&rec[t]).expect("cpu time"),
                clockticks: figure(&rec[c]),
                instructions: figure(&rec[i]),
                retiring: figure(&rec[ret]),
            }
        })
        .collect()
}

/// A `lotus.profile/1` file's rows, read as plain JSON.
fn json_profile_rows(path: &Path) -> Vec<Row> {
    let v: Value = serde_json::from_str(&fs::read_to_string(path).expect("read")).expect("json");
    v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| Row {
            function: r["function"].as_str().expect("function").to_string(),
            module: r["module"].as_str().expect("module").to_string(),
            value: r["value"].as_f64().expect("value"),
            clockticks: r["counters"]["cycles"].as_f64(),
            instructions: r["counters"]["instructions"].as_f64(),
            retiring: None,
        })
        .collect()
}

/// Op -> (function, module) of a lotus.mapping/1 file, in file order.
fn mapping_ops(path: &Path) -> Vec<(String, Vec<(String, String)>)> {
    let m: Value = serde_json::from_str(&fs::read_to_string(path).expect("read")).expect("json");
    m["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|op| {
            let funcs = op["functions"]
                .as_array()
                .expect("functions")
                .iter()
                .map(|f| {
                    (
                        f["function"].as_str().expect("f").to_string(),
                        f["module"].as_str().expect("m").to_string(),
                    )
                })
                .collect();
            (op["name"].as_str().expect("name").to_string(), funcs)
        })
        .collect()
}

/// The documented module rule: trailing `.<digits>` groups after `.so` go.
fn strip_version(module: &str) -> &str {
    let mut m = module;
    while let Some((head, tail)) = m.rsplit_once('.') {
        if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) && head.contains(".so") {
            m = head;
        } else {
            break;
        }
    }
    m
}

fn unknown(module: &str) -> bool {
    module.is_empty() || module == "[Unknown]"
}

#[derive(Debug, Default, Clone)]
struct Want {
    value: f64,
    exclusive: f64,
    shared: f64,
    clockticks: f64,
    instructions: f64,
    retiring_weighted: f64,
    retiring_weight: f64,
}

/// The expected attribution: each row to the ops whose mapping lists its
/// function (and module, unless either is unknown or `by_name`), divided
/// by `times` or equally; unmatched rows to `(unexplained)`.
fn expected(
    ops: &[(String, Vec<(String, String)>)],
    rows: &[Row],
    times: Option<&BTreeMap<String, f64>>,
    by_name: bool,
) -> BTreeMap<String, Want> {
    let mut want: BTreeMap<String, Want> = ops
        .iter()
        .map(|(n, _)| (n.clone(), Want::default()))
        .chain([(UNEXPLAINED.to_string(), Want::default())])
        .collect();
    for row in rows {
        let owners: Vec<&String> = ops
            .iter()
            .filter(|(_, funcs)| {
                funcs.iter().any(|(f, m)| {
                    *f == row.function
                        && (by_name
                            || unknown(&row.module)
                            || unknown(m)
                            || strip_version(m) == strip_version(&row.module))
                })
            })
            .map(|(n, _)| n)
            .collect();
        let parts: Vec<(String, f64)> = if owners.is_empty() {
            vec![(UNEXPLAINED.to_string(), 1.0)]
        } else {
            let w: Vec<f64> = owners
                .iter()
                .map(|o| times.map_or(1.0, |t| t.get(*o).copied().unwrap_or(0.0)))
                .collect();
            let sum: f64 = w.iter().sum();
            owners
                .iter()
                .zip(&w)
                .map(|(o, x)| {
                    let part = if sum > 0.0 {
                        x / sum
                    } else {
                        1.0 / owners.len() as f64
                    };
                    (o.to_string(), part)
                })
                .collect()
        };
        let exclusive = parts.len() == 1;
        for (op, part) in parts {
            let e = want.get_mut(&op).expect("op");
            e.value += row.value * part;
            if exclusive {
                e.exclusive += row.value * part;
            } else {
                e.shared += row.value * part;
            }
            e.clockticks += row.clockticks.unwrap_or(0.0) * part;
            e.instructions += row.instructions.unwrap_or(0.0) * part;
            if let (Some(c), Some(r)) = (row.clockticks, row.retiring) {
                e.retiring_weighted += c * part * r;
                e.retiring_weight += c * part;
            }
        }
    }
    want
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) + 1e-12
}

fn assert_close(got: f64, want: f64, what: &str) {
    assert!(close(got, want), "{what}: got {got}, want {want}");
}

fn build_mapping(dir: &Path) -> PathBuf {
    let out = dir.join("mapping.json");
    lotus_ok(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        s(&fixture("reports/vtune/hotspots")),
        "--out",
        s(&out),
    ]);
    out
}

fn attribute_json(args: &[&str]) -> Value {
    let mut all = vec!["attribute", "--format", "json"];
    all.extend_from_slice(args);
    serde_json::from_str(&lotus_ok(&all)).expect("json output")
}

fn op_times() -> BTreeMap<String, f64> {
    let text = fs::read_to_string(fixture("attribute/op_times.csv")).expect("read");
    text.lines()
        .skip(1)
        .map(|l| {
            let (op, t) = l.split_once(',').expect("op,seconds");
            (op.to_string(), t.parse().expect("seconds"))
        })
        .collect()
}

/// Checks one profile's JSON against the expectation, in seconds.
fn check_profile(p: &Value, want: &BTreeMap<String, Want>, rows: &[Row], ops: &[String]) {
    let total: f64 = rows.iter().map(|r| r.value).sum();
    assert_close(
        p["total_cpu_time_s"].as_f64().expect("total"),
        total,
        "total",
    );
    let entries = p["ops"].as_array().expect("ops");
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["op"].as_str().expect("op"))
        .collect();
    let mut want_names: Vec<&str> = ops.iter().map(String::as_str).collect();
    want_names.push(UNEXPLAINED);
    assert_eq!(names, want_names, "one entry per op, then (unexplained)");
    let (mut sum, mut share_sum) = (0.0, 0.0);
    for e in entries {
        let op = e["op"].as_str().expect("op");
        let w = &want[op];
        let got = |k: &str| e[k].as_f64().unwrap_or_else(|| panic!("{op}.{k}: {e}"));
        assert_close(got("cpu_time_s"), w.value, &format!("{op} cpu_time_s"));
        assert_close(
            got("exclusive_s"),
            w.exclusive,
            &format!("{op} exclusive_s"),
        );
        assert_close(got("shared_s"), w.shared, &format!("{op} shared_s"));
        assert_close(got("share"), w.value / total, &format!("{op} share"));
        if w.clockticks > 0.0 {
            assert_close(
                e["counters"]["Clockticks"].as_f64().expect("clockticks"),
                w.clockticks,
                &format!("{op} Clockticks"),
            );
            assert_close(
                got("cpi"),
                w.clockticks / w.instructions,
                &format!("{op} cpi"),
            );
            assert_close(
                e["topdown"]["Retiring"].as_f64().expect("Retiring"),
                w.retiring_weighted / w.retiring_weight,
                &format!("{op} Retiring"),
            );
        }
        assert!(
            e["topdown"].get("CPI Rate").is_none(),
            "CPI Rate is recomputed, not averaged"
        );
        sum += got("cpu_time_s");
        share_sum += got("share");
    }
    assert_close(sum, total, "entries add up to the profile total");
    assert_close(share_sum, 1.0, "shares add up to 100%");
}

#[test]
fn uarch_profiles_fold_onto_ops_with_an_equal_split() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = build_mapping(tmp.path());
    let ops = mapping_ops(&mapping);
    let names: Vec<String> = ops.iter().map(|(n, _)| n.clone()).collect();
    let mut args = vec!["--mapping".to_string(), s(&mapping).to_string()];
    for p in UARCH {
        args.push("--profile".into());
        args.push(s(&uarch(p)).to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = attribute_json(&args);
    assert_eq!(out["schema"], "lotus.attribution/1");
    assert_eq!(out["split"], "equal");
    let profiles = out["profiles"].as_array().expect("profiles");
    assert_eq!(profiles.len(), 3);
    for (p, name) in profiles.iter().zip(UARCH) {
        assert_eq!(p["name"], name);
        assert_eq!(p["split"], "equal");
        assert_eq!(p["unit"], "seconds");
        let rows = uarch_rows(&uarch(name));
        assert_eq!(p["rows"].as_u64(), Some(rows.len() as u64));
        let want = expected(&ops, &rows, None, false);
        // The fixtures do share functions between ops, and leave time
        // that no op explains: both paths are exercised.
        assert!(want.values().any(|w| w.shared > 0.0), "{name}: shared");
        assert!(want[UNEXPLAINED].value > 0.0, "{name}: unexplained");
        check_profile(p, &want, &rows, &names);
    }
}

#[test]
fn op_times_divide_shared_functions() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = build_mapping(tmp.path());
    let ops = mapping_ops(&mapping);
    let names: Vec<String> = ops.iter().map(|(n, _)| n.clone()).collect();
    let times_file = fixture("attribute/op_times.csv");
    let profile = uarch(UARCH[0]);
    let out = attribute_json(&[
        "--mapping",
        s(&mapping),
        "--profile",
        s(&profile),
        "--op-times",
        s(&times_file),
    ]);
    let want_split = format!("by op time from {}", s(&times_file));
    assert_eq!(out["split"], want_split.as_str());
    let p = &out["profiles"][0];
    assert_eq!(p["split"], want_split.as_str());
    let rows = uarch_rows(&profile);
    let times = op_times();
    let want = expected(&ops, &rows, Some(&times), false);
    check_profile(p, &want, &rows, &names);

    // One shared function, by hand: __memmove_avx_unaligned_erms belongs
    // to Loader, RandomResizedCrop and ToTensor, 5 : 2 : 1 by the times.
    let memmove: f64 = rows
        .iter()
        .filter(|r| r.function == "__memmove_avx_unaligned_erms")
        .map(|r| r.value)
        .sum();
    assert!(memmove > 0.0);
    let equal = expected(&ops, &rows, None, false);
    let by_time_gain = want["Loader"].shared - equal["Loader"].shared;
    assert!(
        by_time_gain > 0.0,
        "Loader, the op with the most time, gets more of what it shares than an equal split gives"
    );
    let loader_share_of_memmove = memmove * 5.0 / 8.0;
    assert!(want["Loader"].shared >= loader_share_of_memmove * (1.0 - 1e-12));

    // Same files, no times: a different result, and it says so.
    let eq = attribute_json(&["--mapping", s(&mapping), "--profile", s(&profile)]);
    let loader = |v: &Value| {
        v["profiles"][0]["ops"][1]["shared_s"]
            .as_f64()
            .expect("shared")
    };
    assert_eq!(eq["profiles"][0]["ops"][1]["op"], "Loader");
    assert!(loader(&out) > loader(&eq));
}

#[test]
fn the_original_tools_mapping_gives_the_same_attribution() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = build_mapping(tmp.path());
    let lotus_format = tmp.path().join("mapping_funcs.json");
    lotus_ok(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        s(&fixture("reports/vtune/hotspots")),
        "--format",
        "lotus",
        "--out",
        s(&lotus_format),
    ]);
    let profile = uarch(UARCH[1]);
    let a = attribute_json(&["--mapping", s(&mapping), "--profile", s(&profile)]);
    let b = attribute_json(&["--mapping", s(&lotus_format), "--profile", s(&profile)]);
    let figures = |v: &Value| -> Vec<(String, f64)> {
        v["profiles"][0]["ops"]
            .as_array()
            .expect("ops")
            .iter()
            .map(|e| {
                (
                    e["op"].as_str().expect("op").to_string(),
                    e["cpu_time_s"].as_f64().expect("t"),
                )
            })
            .collect()
    };
    assert_eq!(figures(&a), figures(&b));
}

#[test]
fn sample_profiles_match_modules_across_versions_and_by_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = build_mapping(tmp.path());
    let ops = mapping_ops(&mapping);
    let profile = fixture("attribute/profile_samples.json");
    let rows = json_profile_rows(&profile);
    let total: f64 = rows.iter().map(|r| r.value).sum();
    for (mode, by_name) in [("auto", false), ("name", true)] {
        let out = attribute_json(&[
            "--mapping",
            s(&mapping),
            "--profile",
            s(&profile),
            "--match",
            mode,
        ]);
        assert_eq!(out["match"], mode);
        let p = &out["profiles"][0];
        assert_eq!(p["unit"], "samples");
        assert_eq!(p["format"], "lotus.profile/1");
        // No sample interval: no seconds, and the samples say so.
        assert!(p["total_cpu_time_s"].is_null(), "{p}");
        assert_eq!(p["total_samples"].as_f64(), Some(total));
        let want = expected(&ops, &rows, None, by_name);
        let mut sum = 0.0;
        for e in p["ops"].as_array().expect("ops") {
            let op = e["op"].as_str().expect("op");
            assert!(e["cpu_time_s"].is_null());
            let got = e["samples"].as_f64().expect("samples");
            assert_close(got, want[op].value, &format!("{mode} {op}"));
            assert_close(
                e["exclusive_samples"].as_f64().expect("excl"),
                want[op].exclusive,
                &format!("{mode} {op} exclusive"),
            );
            if want[op].instructions > 0.0 {
                assert_close(
                    e["cpi"].as_f64().expect("cpi"),
                    want[op].clockticks / want[op].instructions,
                    &format!("{mode} {op} cpi from perf's cycles / instructions"),
                );
            }
            sum += got;
        }
        assert_close(sum, total, "samples add up");
        // libjpeg.so.9.5.0 matches the mapping's libjpeg.so.9: decode_mcu
        // and jpeg_idct_16x16 there are Loader's alone; libjpeg-turbo.so.8
        // is another library and only matches by name.
        let loader = p["ops"][1]["exclusive_samples"].as_f64().expect("loader");
        assert_eq!(p["ops"][1]["op"], "Loader");
        let want_loader = if by_name { 7070.0 } else { 7000.0 };
        assert_eq!(loader, want_loader, "{mode}");
        assert_eq!(want["Loader"].exclusive, want_loader, "{mode}");
    }
    // libc-2.31.so is not libc.so.6 unless matching by name.
    let auto = expected(&ops, &rows, None, false);
    let name = expected(&ops, &rows, None, true);
    assert!(name[UNEXPLAINED].value < auto[UNEXPLAINED].value);
}

#[test]
fn uprof_reports_read_as_profiles_with_their_sample_interval() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = build_mapping(tmp.path());
    let out = attribute_json(&[
        "--mapping",
        s(&mapping),
        "--profile",
        s(&fixture("reports/uprof/Loader/1.csv")),
    ]);
    let p = &out["profiles"][0];
    assert_eq!(p["format"], "uprof-csv");
    assert_eq!(p["sample_interval_s"].as_f64(), Some(0.001));
    // The function table of that report, summed by hand: 5179 samples
    // of 1 ms.
    assert_eq!(p["total_samples"].as_f64(), Some(5179.0));
    assert_close(
        p["total_cpu_time_s"].as_f64().expect("s"),
        5.179,
        "uprof seconds",
    );
    // libjpeg.so.9.5.0 (uProf) against libjpeg.so.9 (VTune mapping): the
    // libjpeg functions the Loader mapping lists are Loader's.
    let loader = &p["ops"][1];
    assert_eq!(loader["op"], "Loader");
    assert!(loader["samples"].as_f64().expect("samples") >= 2454.0 + 1439.0 + 154.0);
}

fn three_profile_args(mapping: &Path) -> Vec<String> {
    let mut args = vec![
        "attribute".to_string(),
        "--mapping".into(),
        s(mapping).into(),
    ];
    for p in UARCH {
        args.push("-p".into());
        args.push(s(&uarch(p)).into());
    }
    args
}

#[test]
fn csv_md_and_table_render() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = build_mapping(tmp.path());
    let ops = mapping_ops(&mapping);
    let base = three_profile_args(&mapping);
    let run = |format: &str| {
        let mut a: Vec<&str> = base.iter().map(String::as_str).collect();
        a.extend(["--format", format]);
        lotus_ok(&a)
    };

    let csv_text = run("csv");
    let mut r = csv::Reader::from_reader(csv_text.as_bytes());
    let h = r.headers().expect("header").clone();
    for c in [
        "profile",
        "op",
        "cpu_time_s",
        "share",
        "exclusive_s",
        "shared_s",
        "cpi",
        "Clockticks",
        "Retiring",
    ] {
        assert!(h.iter().any(|x| x == c), "csv column {c}: {h:?}");
    }
    let recs: Vec<csv::StringRecord> = r.records().map(|x| x.expect("record")).collect();
    assert_eq!(recs.len(), 3 * (ops.len() + 1));
    let col = |n: &str| h.iter().position(|x| x == n).expect(n);
    for name in UARCH {
        let rows = uarch_rows(&uarch(name));
        let total: f64 = rows.iter().map(|r| r.value).sum();
        let mine: Vec<&csv::StringRecord> =
            recs.iter().filter(|r| &r[col("profile")] == name).collect();
        let sum: f64 = mine
            .iter()
            .map(|r| r[col("cpu_time_s")].parse::<f64>().expect("number"))
            .sum();
        assert_close(sum, total, &format!("{name} csv total"));
        assert_eq!(&mine.last().expect("rows")[col("op")], UNEXPLAINED);
    }

    let md = run("md");
    assert!(md.starts_with("# lotus attribution"), "{md}");
    assert!(
        md.contains(
            "| op | b1024_gpu4_dataloader8 | b1024_gpu4_dataloader12 | b1024_gpu4_dataloader16 |"
        ),
        "{md}"
    );
    assert!(md.contains("split: equal"));
    for (op, _) in &ops {
        assert!(md.contains(&format!("| {op} |")), "{op} in markdown");
    }
    assert!(md.contains("| (unexplained) |"));

    let table = run("table");
    assert!(table.contains("split: equal"), "{table}");
    assert!(table.contains("b1024_gpu4_dataloader16"));
    assert!(table.contains("(unexplained)"));
    assert!(table.contains("Retiring"));
    assert!(table.contains("weighted by Clockticks"));

    // --out picks the format from the extension.
    let out = tmp.path().join("attribution.json");
    let mut a: Vec<&str> = base.iter().map(String::as_str).collect();
    a.extend(["--out", s(&out)]);
    assert_eq!(lotus_ok(&a), "");
    let v: Value = serde_json::from_str(&fs::read_to_string(&out).expect("written")).expect("json");
    assert_eq!(v["profiles"].as_array().map(Vec::len), Some(3));
}

#[test]
fn plot_draws_one_stacked_bar_per_profile_and_a_legend() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = build_mapping(tmp.path());
    let mut ops: Vec<String> = mapping_ops(&mapping).into_iter().map(|(n, _)| n).collect();
    ops.push(UNEXPLAINED.into());
    let svg_path = tmp.path().join("ops.svg");
    let mut a: Vec<String> = three_profile_args(&mapping);
    a.extend(["--plot".into(), s(&svg_path).into()]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    lotus_ok(&a);
    let text = fs::read_to_string(&svg_path).expect("svg written");
    let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: BTreeSet<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .collect();
    for op in &ops {
        assert!(texts.contains(op), "legend names {op}: {texts:?}");
    }
    for p in UARCH {
        assert!(texts.contains(p), "bar labelled {p}");
    }
    // Filled rectangles by colour: the background, then one colour per op
    // with one bar segment per profile plus its legend swatch.
    let mut by_fill: BTreeMap<String, usize> = BTreeMap::new();
    for n in doc.descendants().filter(|n| n.has_tag_name("rect")) {
        *by_fill
            .entry(n.attribute("fill").unwrap_or("").to_string())
            .or_default() += 1;
    }
    by_fill.remove("#FFFFFF");
    assert_eq!(by_fill.len(), ops.len(), "one colour per op: {by_fill:?}");
    assert!(
        by_fill.values().all(|&c| c == UARCH.len() + 1),
        "{by_fill:?}"
    );
}

#[test]
fn uarch_reports_read_through_the_vtune_reader() {
    // The hotspots reader finds the uarch columns by name: the function
    // under `Source Function / Function / Call Stack`, CPU time with its
    // `s`, counters with thousands separators, percentages.
    let path = uarch(UARCH[0]);
    let file = fs::File::open(&path).expect("open");
    let report = lotus_backend_vtune::read_hotspots(&mut std::io::BufReader::new(file), s(&path))
        .expect("reads");
    let rows = uarch_rows(&path);
    assert_eq!(report.rows.len(), rows.len());
    for (got, want) in report.rows.iter().zip(&rows) {
        assert_eq!(got.function, want.function);
        assert_eq!(got.module, "[Unknown]");
        assert_eq!(got.value, want.value);
        assert_eq!(got.counters.get("Clockticks").copied(), want.clockticks);
        assert_eq!(got.counters.get("Retiring").copied(), want.retiring);
    }
}

#[test]
fn bad_inputs_say_what_did_not_match() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = build_mapping(tmp.path());
    let m = s(&mapping);
    let profile = uarch(UARCH[0]);
    let p = s(&profile);

    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        m,
        "--profile",
        s(&fixture("attribute/no_function_column.csv")),
    ]);
    assert!(
        e.contains("no_function_column.csv:1: no function column"),
        "{e}"
    );
    assert!(
        e.contains("found 'Module', 'CPU Time', 'Clockticks'"),
        "{e}"
    );

    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        s(&fixture("attribute/empty_mapping.json")),
        "--profile",
        p,
    ]);
    assert!(
        e.contains("empty_mapping.json: the mapping is empty: it has no ops"),
        "{e}"
    );

    let other = fixture("attribute/other_ops_mapping.json");
    let e = lotus_fails(&["attribute", "--mapping", s(&other), "--profile", p]);
    assert!(e.contains("no op of"), "{e}");
    assert!(e.contains("Pad, Tokenize"), "names the ops: {e}");
    assert!(e.contains("matched by name"), "hint: {e}");

    // A profile whose modules are known: the hint is about --match name.
    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        s(&other),
        "--profile",
        s(&fixture("attribute/profile_samples.json")),
    ]);
    assert!(e.contains("--match name"), "{e}");

    // Some ops matching nothing is a warning that names them.
    let partial = tmp.path().join("partial.json");
    fs::write(
        &partial,
        r#"{"op_to_func": {"Loader": ["decode_mcu|libjpeg.so.9"], "Tokenize": ["wordpiece_encode|libtokenizers.so"]}}"#,
    )
    .expect("write");
    let out = lotus(&[
        "attribute",
        "--mapping",
        s(&partial),
        "--profile",
        p,
        "--format",
        "json",
    ]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning") && stderr.contains("op(s) Tokenize"),
        "{stderr}"
    );

    // Files swapped or mismatched.
    let e = lotus_fails(&["attribute", "--mapping", m, "--profile", m]);
    assert!(
        e.contains("it is a lotus mapping") && e.contains("pass it as --mapping"),
        "{e}"
    );
    let e = lotus_fails(&["attribute", "--mapping", p, "--profile", p]);
    assert!(e.contains("pass profiles with --profile"), "{e}");
    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        s(&fixture("attribute/profile_samples.json")),
        "--profile",
        p,
    ]);
    assert!(
        e.contains("this is a profile: pass it with --profile"),
        "{e}"
    );
    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        m,
        "--profile",
        s(&fixture("attribute/op_times.csv")),
    ]);
    assert!(
        e.contains("no function column") && e.contains("'op', 'seconds'"),
        "{e}"
    );

    // Op times: a folder without op_times.csv, times for other ops, bad lines.
    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        m,
        "--profile",
        p,
        "--op-times",
        s(tmp.path()),
    ]);
    assert!(e.contains("has none; give a CSV of op,seconds"), "{e}");
    let wrong = tmp.path().join("times.csv");
    fs::write(&wrong, "op,seconds\nTokenize,1.0\n").expect("write");
    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        m,
        "--profile",
        p,
        "--op-times",
        s(&wrong),
    ]);
    assert!(
        e.contains("names none of the mapping's ops (it has Tokenize;"),
        "{e}"
    );
    fs::write(&wrong, "op,seconds\nLoader,fast\n").expect("write");
    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        m,
        "--profile",
        p,
        "--op-times",
        s(&wrong),
    ]);
    assert!(e.contains("times.csv:2: 'fast' is not a number"), "{e}");

    // Missing and empty files, a folder as a profile.
    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        m,
        "--profile",
        "/nonexistent/p.csv",
    ]);
    assert!(e.contains("cannot open profile /nonexistent/p.csv"), "{e}");
    let empty = tmp.path().join("empty.csv");
    fs::write(&empty, "").expect("write");
    let e = lotus_fails(&["attribute", "--mapping", m, "--profile", s(&empty)]);
    assert!(e.contains("empty file"), "{e}");
    let e = lotus_fails(&["attribute", "--mapping", m, "--profile", s(tmp.path())]);
    assert!(e.contains("is a folder"), "{e}");
}

/// `libjpeg.so.9.5.0` -> `libjpeg.so`, as the README says modules are
/// matched (version suffixes after `.so` dropped).
fn module_without_version(m: &str) -> String {
    match m.find(".so.") {
        Some(i)
            if m[i + 4..]
                .split('.')
                .all(|p| p.chars().all(|c| c.is_ascii_digit())) =>
        {
            m[..i + 3].to_string()
        }
        _ => m.to_string(),
    }
}

#[test]
fn by_function_gives_each_native_functions_own_sums() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = build_mapping(tmp.path());
    let ops = mapping_ops(&mapping);
    // The mapping's functions: (name, module without version) -> ops.
    let mut funcs: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (op, fs) in &ops {
        for (f, m) in fs {
            let e = funcs
                .entry((f.clone(), module_without_version(m)))
                .or_default();
            if !e.contains(op) {
                e.push(op.clone());
            }
        }
    }
    let mut args = vec!["--mapping".to_string(), s(&mapping).to_string()];
    for p in UARCH {
        args.push("--profile".into());
        args.push(s(&uarch(p)).to_string());
    }
    let mut json_args = vec!["--by", "function"];
    json_args.extend(args.iter().map(String::as_str));
    let out = attribute_json(&json_args);
    assert_eq!(out["schema"], "lotus.attribution-functions/1");
    let mut shared_seen = false;
    for (p, name) in out["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .zip(UARCH)
    {
        let rows = uarch_rows(&uarch(name));
        let got = p["functions"].as_array().expect("functions");
        assert_eq!(got.len(), funcs.len(), "{name}: one entry per function");
        let mut explained = 0.0;
        for ((f, m), f_ops) in &funcs {
            // The profile names no modules: a row goes to every function
            // of its name, equally.
            let same_name = funcs.keys().filter(|(g, _)| g == f).count() as f64;
            let mine: Vec<&Row> = rows.iter().filter(|r| &r.function == f).collect();
            let time: f64 = mine.iter().map(|r| r.value).sum::<f64>() / same_name;
            let ck: f64 = mine.iter().filter_map(|r| r.clockticks).sum::<f64>() / same_name;
            let inst: f64 = mine.iter().filter_map(|r| r.instructions).sum::<f64>() / same_name;
            let ret_w: f64 = mine
                .iter()
                .filter_map(|r| Some(r.retiring? * r.clockticks?))
                .sum::<f64>()
                / same_name;
            explained += time;
            let e = got
                .iter()
                .find(|g| {
                    g["function"] == f.as_str()
                        && module_without_version(g["module"].as_str().expect("module")) == *m
                })
                .unwrap_or_else(|| panic!("{name}: {f} ({m}) listed"));
            assert_close(e["cpu_time_s"].as_f64().expect("time"), time, f);
            assert_eq!(e["rows"].as_u64(), Some(mine.len() as u64), "{f}");
            let credited: Vec<(&str, f64)> = e["ops"]
                .as_array()
                .expect("ops")
                .iter()
                .map(|c| {
                    (
                        c["op"].as_str().expect("op"),
                        c["part"].as_f64().expect("part"),
                    )
                })
                .collect();
            let want: Vec<(&str, f64)> = f_ops
                .iter()
                .map(|o| (o.as_str(), 1.0 / f_ops.len() as f64))
                .collect();
            assert_eq!(credited, want, "{f}");
            shared_seen |= f_ops.len() > 1 && time > 0.0;
            if ck > 0.0 {
                assert_close(e["counters"]["Clockticks"].as_f64().expect("ck"), ck, f);
                assert_close(
                    e["counters"]["Instructions Retired"]
                        .as_f64()
                        .expect("inst"),
                    inst,
                    f,
                );
                assert_close(e["cpi"].as_f64().expect("cpi"), ck / inst, f);
                assert_close(
                    e["topdown"]["Retiring"].as_f64().expect("retiring"),
                    ret_w / ck,
                    f,
                );
            }
        }
        // Sorted by time, and with the unexplained rows, the whole profile.
        let times: Vec<f64> = got
            .iter()
            .map(|g| g["cpu_time_s"].as_f64().expect("t"))
            .collect();
        assert!(
            times.windows(2).all(|w| w[0] >= w[1]),
            "{name}: most time first"
        );
        let total: f64 = rows.iter().map(|r| r.value).sum();
        assert_close(
            p["total_cpu_time_s"].as_f64().expect("total"),
            total,
            "total",
        );
        assert_close(
            p["unexplained"]["cpu_time_s"]
                .as_f64()
                .expect("unexplained"),
            total - explained,
            "unexplained",
        );
    }
    assert!(shared_seen, "the fixtures have functions several ops share");

    // The same figures in every format.
    let text = |format: &str| {
        let mut a = vec!["attribute", "--by", "function", "--format", format];
        a.extend(args.iter().map(String::as_str));
        lotus_ok(&a)
    };
    let csv_text = text("csv");
    let mut r = csv::Reader::from_reader(csv_text.as_bytes());
    let h = r.headers().expect("header").clone();
    let col = |n: &str| h.iter().position(|x| x == n).expect(n);
    let (pc, fc, tc, cc) = (
        col("profile"),
        col("function"),
        col("cpu_time_s"),
        col("cpi"),
    );
    let records: Vec<csv::StringRecord> = r.records().map(|x| x.expect("record")).collect();
    assert_eq!(records.len(), funcs.len() * UARCH.len());
    for p in out["profiles"].as_array().expect("profiles") {
        for e in p["functions"].as_array().expect("functions") {
            let rec = records
                .iter()
                .find(|x| {
                    x[pc] == *p["name"].as_str().expect("n")
                        && x[fc] == *e["function"].as_str().expect("f")
                        && x[col("module")] == *e["module"].as_str().expect("m")
                })
                .expect("csv row");
            let t: f64 = rec[tc].parse().expect("time");
            assert_close(t, e["cpu_time_s"].as_f64().expect("t"), "csv time");
            assert_eq!(rec[cc].parse::<f64>().ok(), e["cpi"].as_f64(), "csv cpi");
        }
    }
    let top = out["profiles"][0]["functions"][0].clone();
    let top_name = top["function"].as_str().expect("name");
    let top_time = format!("{:.3} s", top["cpu_time_s"].as_f64().expect("t"));
    for format in ["table", "md"] {
        let t = text(format);
        assert!(
            t.contains(top_name) && t.contains(&top_time),
            "{format}: {t}"
        );
        assert!(t.contains("Retiring") && t.contains("CPI"), "{format}");
    }
}

#[test]
fn plot_title_fits_inside_the_image_however_long() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = build_mapping(tmp.path());
    // A long --op-times path makes a long title ("split: by op time from ...").
    let deep = tmp
        .path()
        .join("a_rather_long_folder_name_for_the_op_times_of_this_run/and_deeper_still");
    fs::create_dir_all(&deep).expect("mkdir");
    let times = deep.join("op_times.csv");
    fs::copy(fixture("attribute/op_times.csv"), &times).expect("copy");
    let svg_path = tmp.path().join("ops.svg");
    let mut a: Vec<String> = three_profile_args(&mapping);
    a.extend([
        "--op-times".into(),
        s(&times).into(),
        "--plot".into(),
        s(&svg_path).into(),
    ]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    lotus_ok(&a);
    let text = fs::read_to_string(&svg_path).expect("svg written");
    let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
    let width: f64 = doc
        .root_element()
        .attribute("width")
        .expect("width")
        .parse()
        .expect("number");
    let title = doc
        .descendants()
        .find(|n| n.has_tag_name("text") && n.text().is_some_and(|t| t.contains("CPU time per op")))
        .expect("title");
    let t = title.text().expect("text").trim();
    let size: f64 = title
        .attribute("font-size")
        .and_then(|f| f.trim_end_matches("px").parse().ok())
        .unwrap_or(18.0);
    let x: f64 = title.attribute("x").expect("x").parse().expect("x");
    // Sans-serif glyphs average about half their size; 0.6 is generous.
    let half = t.chars().count() as f64 * size * 0.6 / 2.0;
    let (left, right) = match title.attribute("text-anchor") {
        Some("middle") => (x - half, x + half),
        Some("end") => (x - 2.0 * half, x),
        _ => (x, x + 2.0 * half),
    };
    assert!(
        left >= 0.0 && right <= width,
        "title '{t}' spans {left}..{right} of {width}"
    );
    assert!(
        t.ends_with("op_times.csv)"),
        "the end of the path is kept: {t}"
    );
}
