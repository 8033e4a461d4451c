//! `lotus report` opened in a real headless browser (Debian's Chromium,
//! driven over the DevTools protocol by fixtures/report/cdp_check.py): it
//! loads with no console error and no request but its own file, every plot
//! is there with marks in it, a full-page screenshot is written for a
//! person to look at, and every figure the page shows equals `lotus trace
//! stats --json`'s and `lotus attribute --format json`'s. Skipped, with a
//! `skipped:` line saying why, where Chromium is not installed
//! (`bash scripts/setup.sh --torch` installs it as root).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{any_python, fixture, lotus_ok, s};
use serde_json::Value;

/// The system's Chromium; where there is none, `test` says by name that it
/// is skipped.
fn chromium_for(test: &str) -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        println!(
            "skipped: {test}: no chromium in /usr/bin (bash scripts/setup.sh --torch installs it as root with apt-get)"
        );
    }
    found
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for e in fs::read_dir(from).expect("dir") {
        let e = e.expect("entry");
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
}

fn ms(ns: &Value) -> String {
    format!("{:.3}", ns.as_f64().expect("number") / 1e6)
}

fn fixed(v: &Value, places: usize) -> String {
    v.as_f64()
        .map_or("-".to_string(), |x| format!("{x:.places$}"))
}

/// The page loads nothing: no `src=` or `href=` to a file or a server, no
/// `http(s)://` anywhere (inline SVG needs no namespace URL), one inline
/// script at most (the timeline's).
pub fn assert_self_contained(html: &str) {
    for bad in ["<link", "src=", "href=", "http://", "https://", "url("] {
        assert!(!html.contains(bad), "self-contained: {bad} in the page");
    }
    assert!(html.matches("<script").count() <= 1, "one inline script");
}

/// Opens `page` in headless Chromium (fixtures/report/cdp_check.py):
/// asserts no console error, no request but the page itself and a
/// screenshot written (`target/tmp/<shot>`); returns what the browser saw.
fn open_in_browser(browser: &Path, page: &Path, shot: &str) -> Value {
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(shot);
    let out = Command::new(any_python())
        .arg(fixture("report/cdp_check.py"))
        .args([browser.as_os_str(), page.as_os_str(), shot.as_os_str()])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "cdp_check: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        seen["console_errors"],
        serde_json::json!([]),
        "no console errors"
    );
    let requests: Vec<&str> = seen["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| r.as_str().expect("url"))
        .collect();
    assert_eq!(
        requests,
        [seen["url"].as_str().expect("url")],
        "no request but the page"
    );
    let png = fs::read(&shot).expect("screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "a screenshot"
    );
    println!("screenshot of the report: {}", shot.display());
    seen
}

#[test]
fn the_report_opens_in_a_browser_with_every_plot_and_the_same_numbers() {
    let Some(browser) =
        chromium_for("the_report_opens_in_a_browser_with_every_plot_and_the_same_numbers")
    else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    // Two configurations, as the study lays them out.
    let parent = d.join("lotustrace_result");
    copy_dir(&fixture("traces/original"), &parent.join("b128_gpu1"));
    copy_dir(&fixture("traces/with_torch"), &parent.join("b256_gpu1"));
    let mapping = d.join("mapping.json");
    lotus_ok(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        s(&fixture("reports/vtune/hotspots")),
        "--out",
        s(&mapping),
    ]);
    let profiles: Vec<PathBuf> = ["b1024_gpu4_dataloader8", "b1024_gpu4_dataloader16"]
        .iter()
        .map(|p| fixture(&format!("reports/vtune/uarch/{p}.csv")))
        .collect();
    let page = d.join("report.html");
    let plot_dir = d.join("plots");
    let mut args = vec![
        "report",
        "--out",
        s(&page),
        "--trace",
        s(&parent),
        "--configs",
        "--mapping",
        s(&mapping),
        "--plot-dir",
        s(&plot_dir),
    ];
    for p in &profiles {
        args.extend(["--profile", s(p)]);
    }
    lotus_ok(&args);
    let html = fs::read_to_string(&page).expect("page");
    assert_self_contained(&html);

    let seen = open_in_browser(&browser, &page, "lotus-report.png");

    // Every plot, with marks: bars beyond the legend's swatches, boxes'
    // whiskers; and the same plot as an SVG file.
    let plots: BTreeMap<String, &Value> = seen["plots"]
        .as_array()
        .expect("plots")
        .iter()
        .map(|p| (p["name"].as_str().expect("name").to_string(), p))
        .collect();
    let names: Vec<&str> = plots.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "batch_time",
            "delay_box",
            "delays",
            "op_cpi",
            "op_cpu_time",
            "op_time",
            "wait_box",
            "waits"
        ]
    );
    for (name, p) in &plots {
        let rects = p["rects"].as_u64().unwrap_or(0);
        let fills = p["fills"].as_u64().unwrap_or(0);
        let lines = p["lines"].as_u64().unwrap_or(0);
        if name.ends_with("_box") {
            // Whiskers and medians of each configuration's box.
            assert!(lines >= 2 * 5, "{name}: {lines} lines");
        } else if name == "batch_time" {
            // The boxes with a height (b256_gpu1 has one batch: Q1 = Q3), and
            // the whiskers and medians of both.
            assert!(
                rects >= 1 && lines >= 2 * 5,
                "{name}: {rects} boxes, {lines} lines"
            );
        } else {
            // A legend swatch per colour, and bars beyond them.
            assert!(
                fills >= 2 && rects > fills,
                "{name}: {rects} filled rects, {fills} colours"
            );
        }
        assert!(p["width"].as_f64().unwrap_or(0.0) > 300.0, "{name}: shown");
        assert_eq!(
            p["clipped"],
            serde_json::json!([]),
            "{name}: text cut at an edge"
        );
        let texts: Vec<&str> = p["texts"]
            .as_array()
            .expect("texts")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if !name.starts_with("op_c") {
            for label in ["b128_gpu1", "b256_gpu1"] {
                assert!(
                    texts.contains(&label),
                    "{name}: {label} under its bars: {texts:?}"
                );
            }
        }
        let file = fs::read_to_string(plot_dir.join(format!("{name}.svg"))).expect("svg file");
        roxmltree::Document::parse(&file).expect("well-formed SVG");
    }

    // The page's figures are the JSON's.
    let cells = seen["cells"].as_object().expect("cells");
    let cell = |k: &str| {
        cells
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no cell {k}"))
            .to_string()
    };
    let stats: Value = serde_json::from_str(&lotus_ok(&[
        "trace",
        "stats",
        "--configs",
        s(&parent),
        "--json",
    ]))
    .expect("stats");
    let mut checked = 0;
    for c in stats["configurations"].as_array().expect("configs") {
        let label = c["label"].as_str().expect("label");
        for o in c["ops"].as_array().expect("ops") {
            let op = o["name"].as_str().expect("op");
            let k = |f: &str| format!("trace/{label}/ops/{op}/{f}");
            assert_eq!(cell(&k("count")), o["count"].to_string());
            for f in ["total_ns", "mean_ns", "p50_ns", "p95_ns", "std_ns"] {
                assert_eq!(cell(&k(f)), ms(&o[f]), "{label} {op} {f}");
                checked += 1;
            }
        }
        let b = &c["batches"];
        let k = |f: &str| format!("trace/{label}/batches/{f}");
        assert_eq!(cell(&k("count")), b["summary"]["count"].to_string());
        for f in ["mean_ns", "p50_ns", "std_ns", "min_ns", "max_ns"] {
            assert_eq!(cell(&k(f)), ms(&b["summary"][f]), "{label} batch {f}");
        }
        assert_eq!(cell(&k("q1_ns")), ms(&b["q1_ns"]));
        assert_eq!(cell(&k("q3_ns")), ms(&b["q3_ns"]));
        for bucket in c["wait"]["buckets"].as_array().expect("buckets") {
            let name = bucket["bucket"].as_str().expect("b");
            assert_eq!(
                cell(&format!("trace/{label}/wait/{name}")),
                bucket["count"].to_string()
            );
        }
        let dl = &c["delay"];
        assert_eq!(
            cell(&format!("trace/{label}/delay/p50_ns")),
            ms(&dl["summary"]["p50_ns"])
        );
        assert_eq!(
            cell(&format!("trace/{label}/delay/under_250ms")),
            dl["under_250ms"].to_string()
        );
        assert_eq!(
            cell(&format!("trace/{label}/delay/over_500ms")),
            dl["over_500ms"].to_string()
        );
    }
    let mut a_args = vec!["attribute", "--format", "json", "--mapping", s(&mapping)];
    for p in &profiles {
        a_args.extend(["--profile", s(p)]);
    }
    let att: Value = serde_json::from_str(&lotus_ok(&a_args)).expect("attribution");
    for p in att["profiles"].as_array().expect("profiles") {
        let name = p["name"].as_str().expect("name");
        for o in p["ops"].as_array().expect("ops") {
            let op = o["op"].as_str().expect("op");
            let k = |f: &str| format!("attribution/{name}/{op}/{f}");
            assert_eq!(
                cell(&k("cpu_time_s")),
                fixed(&o["cpu_time_s"], 3),
                "{name} {op}"
            );
            assert_eq!(cell(&k("share")), fixed(&o["share"], 4));
            assert_eq!(cell(&k("cpi")), fixed(&o["cpi"], 3));
            assert_eq!(
                cell(&k("topdown/Retiring")),
                fixed(&o["topdown"]["Retiring"], 2)
            );
            checked += 4;
        }
    }
    a_args.extend(["--by", "function"]);
    let by_f: Value = serde_json::from_str(&lotus_ok(&a_args)).expect("per function");
    for p in by_f["profiles"].as_array().expect("profiles") {
        let name = p["name"].as_str().expect("name");
        for f in p["functions"].as_array().expect("functions") {
            for c in f["ops"].as_array().expect("ops") {
                let k = |fld: &str| {
                    format!(
                        "functions/{name}/{}/{}/{}/{fld}",
                        c["op"].as_str().expect("op"),
                        f["function"].as_str().expect("f"),
                        f["module"].as_str().expect("m")
                    )
                };
                assert_eq!(cell(&k("part")), fixed(&c["part"], 3));
                assert_eq!(cell(&k("cpu_time_s")), fixed(&f["cpu_time_s"], 3));
                assert_eq!(cell(&k("cpi")), fixed(&f["cpi"], 3));
                checked += 3;
            }
        }
    }
    assert!(checked > 100, "{checked} figures checked");
}

/// Writes a sampled trace folder as `lotus trace run --sample` leaves it:
/// a main process (pid 100) that waits for and consumes `batches` batches,
/// one worker (pid 101) whose batches run `ops` one after the other, each
/// 3 ms with a sample every 100 µs cycling through its functions (a
/// function named twice gets twice the samples), a 1 ms gap after each op
/// sampled in `collate` (outside every op), and, with `counters`, cycles
/// and instructions read with each sample.
fn sampled_folder(dir: &Path, batches: u64, ops: &[(&str, &[&str])], counters: bool) {
    use lotus_samples::{
        write_sampling, CounterValues, Sample, SampleFiles, SampleSink, SamplesWriter, Symbol,
    };
    fs::create_dir_all(dir).expect("mkdir");
    // wall = monotonic + 1 s; samples are on the monotonic clock.
    let off = 1_000_000_000u64;
    const MS: u64 = 1_000_000;
    let batch_ns = ops.len() as u64 * 4 * MS;
    let mut symbols: Vec<String> = vec!["collate".into()];
    let mut worker = format!("#lotus-trace v1 role=worker pid=101 wall_ns={off} monotonic_ns=0\n");
    let mut main = format!("#lotus-trace v1 role=main pid=100 wall_ns={off} monotonic_ns=0\n");
    let mut samples = Vec::new();
    for b in 0..batches {
        let t0 = b * batch_ns;
        for (i, (op, functions)) in ops.iter().enumerate() {
            let start = t0 + i as u64 * 4 * MS;
            worker += &format!("S{op},{},{},kind=op,batch={b}\n", start + off, 3 * MS);
            for j in 0..40u64 {
                let (name, time) = if j < 30 {
                    (
                        functions[j as usize % functions.len()],
                        start + j * 100_000 + 50_000,
                    )
                } else {
                    ("collate", start + j * 100_000 + 50_000)
                };
                let symbol = symbols.iter().position(|s| s == name).unwrap_or_else(|| {
                    symbols.push(name.to_string());
                    symbols.len() - 1
                }) as u32;
                let c = [
                    1000 + 37 * (j % 7) + 100 * symbol as u64,
                    400 + 11 * (j % 5),
                ];
                samples.push(Sample {
                    time_ns: time,
                    pid: 101,
                    tid: 101,
                    symbol,
                    kernel: false,
                    counters: if counters {
                        CounterValues::new(&c).expect("counters")
                    } else {
                        Default::default()
                    },
                });
            }
        }
        worker += &format!("SBatch,{},{batch_ns},kind=batch,batch={b}\n", t0 + off);
        let end = t0 + batch_ns + off;
        main += &format!("SWait,{},{},kind=wait,batch={b},ready=0\n", end - MS, MS);
        main += &format!("SConsume,{},0,kind=consume,batch={b}\n", end + MS);
    }
    fs::write(dir.join("lotus_worker_pid_101"), worker).expect("worker log");
    fs::write(dir.join("lotus_main_pid_100"), main).expect("main log");
    let mut w = SamplesWriter::create_with_counters(dir, "lotus", if counters { 2 } else { 0 })
        .expect("samples");
    let table: Vec<(u32, Symbol)> = symbols
        .iter()
        .enumerate()
        .map(|(i, n)| (i as u32, Symbol::new(n, "/lib/libops.so")))
        .collect();
    w.symbols(&table).expect("symbols");
    w.samples(&samples).expect("samples");
    w.finish().expect("finish");
    let mut meta = vec![
        ("backend", "perf".to_string()),
        ("frequency_hz", "10000".into()),
        ("interval_ns", "100000".into()),
        ("clock", "monotonic".into()),
        ("status", "complete".into()),
        ("samples", samples.len().to_string()),
    ];
    if counters {
        meta.push(("counters", "cycles,instructions".into()));
    }
    write_sampling(&SampleFiles::of(dir, "lotus").sampling, &meta).expect("sampling");
}

/// A sampled trace and an isolated mapping: the page holds the in-pipeline
/// attribution (table and plot) and the isolated mapping compared with the
/// in-pipeline one built from the samples with no extra step, every figure
/// equal to `attribute DIR --format json` and `show --against --format
/// json`, and an op has the same colour in both plots.
#[test]
fn a_sampled_trace_reports_its_samples_and_the_mapping_comparison() {
    let Some(browser) =
        chromium_for("a_sampled_trace_reports_its_samples_and_the_mapping_comparison")
    else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let piped = d.join("piped");
    sampled_folder(
        &piped,
        4,
        &[
            ("Decode", &["decode_huffman", "decode_huffman", "resize"]),
            ("Normalize", &["normalize_kernel", "memcpy"]),
        ],
        true,
    );
    // Each op alone: Decode never resizes but runs an idct the pipeline
    // never does; Normalize never copies.
    let alone = d.join("alone");
    sampled_folder(
        &alone,
        2,
        &[
            ("Decode", &["decode_huffman", "idct"]),
            ("Normalize", &["normalize_kernel"]),
        ],
        false,
    );
    let isolated = d.join("isolated.json");
    lotus_ok(&["map", "--from-trace", s(&alone), "--out", s(&isolated)]);
    let in_pipeline = d.join("in_pipeline.json");
    lotus_ok(&["map", "--from-trace", s(&piped), "--out", s(&in_pipeline)]);

    let page = d.join("report.html");
    let plot_dir = d.join("plots");
    lotus_ok(&[
        "report",
        "--out",
        s(&page),
        "--trace",
        s(&piped),
        "--mapping",
        s(&isolated),
        "--plot-dir",
        s(&plot_dir),
    ]);
    let seen = open_in_browser(&browser, &page, "lotus-report-sampled.png");
    let plots: BTreeMap<String, &Value> = seen["plots"]
        .as_array()
        .expect("plots")
        .iter()
        .map(|p| (p["name"].as_str().expect("name").to_string(), p))
        .collect();
    for name in ["in_pipeline_piped", "coverage_1"] {
        let p = plots
            .get(name)
            .unwrap_or_else(|| panic!("no plot {name}: {:?}", plots.keys()));
        let rects = p["rects"].as_u64().unwrap_or(0);
        assert!(rects >= 2, "{name}: {rects} bars");
        assert_eq!(p["clipped"], serde_json::json!([]), "{name}: text cut");
        for op in ["Decode", "Normalize"] {
            assert!(
                p["texts"]
                    .as_array()
                    .expect("texts")
                    .iter()
                    .any(|t| t.as_str() == Some(op)),
                "{name}: {op} beside its bar"
            );
        }
    }
    // An op's colour: the fill of the bar beside its label's y (one bar a
    // row), the same in both plots (read from the SVG files).
    let fill_of = |name: &str| -> BTreeMap<String, String> {
        let file = fs::read_to_string(plot_dir.join(format!("{name}.svg"))).expect("svg file");
        let doc = roxmltree::Document::parse(&file).expect("well-formed SVG");
        let x = |n: &roxmltree::Node, a: &str| n.attribute(a).and_then(|v| v.parse::<f64>().ok());
        let (at, size) = ("y", "height");
        let bars: Vec<(f64, f64, String)> = doc
            .descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter_map(|n| {
                Some((
                    x(&n, at)?,
                    x(&n, at)? + x(&n, size)?,
                    n.attribute("fill")?.to_string(),
                ))
            })
            .collect();
        ["Decode", "Normalize"]
            .iter()
            .map(|op| {
                let label = doc
                    .descendants()
                    .find(|n| n.has_tag_name("text") && n.text().map(str::trim) == Some(op))
                    .unwrap_or_else(|| panic!("{name}: no label {op}"));
                let lx = x(&label, at).expect("label x");
                let fill = bars
                    .iter()
                    .filter(|(a, b, _)| *a <= lx && lx <= *b)
                    .map(|(_, _, f)| f.clone())
                    .next_back()
                    .unwrap_or_else(|| panic!("{name}: no bar over {op}"));
                (op.to_string(), fill)
            })
            .collect()
    };
    let (in_pipe, coverage) = (fill_of("in_pipeline_piped"), fill_of("coverage_1"));
    assert_eq!(in_pipe, coverage, "an op's colour in both plots");
    assert_ne!(
        in_pipe["Decode"], in_pipe["Normalize"],
        "two ops, two colours"
    );

    let cells = seen["cells"].as_object().expect("cells");
    let cell = |k: &str| {
        cells
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no cell {k}: {:?}", cells.keys().collect::<Vec<_>>()))
            .to_string()
    };
    let att: Value = serde_json::from_str(&lotus_ok(&["attribute", s(&piped), "--format", "json"]))
        .expect("attribution");
    let mut checked = 0;
    for r in att["rows"].as_array().expect("rows") {
        let name = r["name"].as_str().expect("row");
        let k = |f: &str| format!("in_pipeline/piped/{name}/{f}");
        assert_eq!(cell(&k("samples")), r["samples"].to_string(), "{name}");
        assert_eq!(cell(&k("cpu_ms")), ms(&r["cpu_ns"]), "{name}");
        assert_eq!(
            cell(&k("share")),
            format!("{:.2}", r["share"].as_f64().expect("share") * 100.0)
        );
        let or_dash = |v: &Value| v.as_u64().map_or("-".to_string(), |c| c.to_string());
        assert_eq!(cell(&k("calls")), or_dash(&r["calls"]), "{name}");
        assert_eq!(
            cell(&k("cpu_ms_per_call")),
            if r["cpu_per_call_ns"].is_null() {
                "-".to_string()
            } else {
                ms(&r["cpu_per_call_ns"])
            }
        );
        for c in ["cycles", "instructions"] {
            assert_eq!(
                cell(&k(&format!("counters/{c}"))),
                r["counters"][c].to_string(),
                "{name} {c}"
            );
        }
        assert_eq!(
            cell(&k("counters/CPI")),
            fixed(&r["cpi"], 2).replace('-', "")
        );
        let top = r["top_functions"][0]["function"].as_str().expect("top");
        assert!(cell(&k("top")).starts_with(top), "{name}: top {top}");
        checked += 8;
    }
    assert_eq!(
        cell("in_pipeline/piped/total_samples"),
        att["total_samples"].to_string()
    );
    // The logs carry no `cpu=`: the ops table's CPU a call is the samples'.
    for op in ["Decode", "Normalize"] {
        let want = cell(&format!("in_pipeline/piped/{op}/cpu_ms_per_call"));
        assert_ne!(want, "-", "{op}");
        assert_eq!(
            cell(&format!("trace/piped/ops/{op}/cpu_per_call_ms")),
            want,
            "{op}"
        );
    }
    let cmp: Value = serde_json::from_str(&lotus_ok(&[
        "show",
        s(&isolated),
        "--against",
        s(&in_pipeline),
        "--format",
        "json",
    ]))
    .expect("comparison");
    for o in cmp["ops"].as_array().expect("ops") {
        let op = o["op"].as_str().expect("op");
        let k = |f: &str| format!("comparison/piped (its samples)/{op}/{f}");
        assert_eq!(
            cell(&k("coverage")),
            format!("{:.1}", o["coverage"].as_f64().expect("coverage") * 100.0),
            "{op}"
        );
        assert_eq!(cell(&k("listed")), o["listed"].to_string());
        assert_eq!(
            cell(&k("other_samples")).parse::<f64>().expect("number"),
            o["other_samples"].as_f64().expect("samples")
        );
        assert_eq!(cell(&k("missed_count")), o["missed_count"].to_string());
        assert_eq!(cell(&k("not_run_count")), o["not_run_count"].to_string());
        for (list, key) in [("missed", "missed"), ("not_run", "not_run")] {
            let text = cell(&k(key));
            for f in o[list].as_array().expect("list").iter().take(5) {
                let f = f["function"].as_str().expect("function");
                assert!(text.contains(f), "{op} {list}: {f} in {text}");
            }
        }
        checked += 7;
    }
    // What the fixture makes: resize and memcpy missed, idct never run.
    let missed = cell("comparison/piped (its samples)/Decode/missed");
    assert!(missed.starts_with("resize"), "{missed}");
    let not_run = cell("comparison/piped (its samples)/Decode/not_run");
    assert!(not_run.starts_with("idct"), "{not_run}");
    assert!(checked > 20, "{checked} figures checked");

    // --against names the in-pipeline mapping: the same figures.
    let page2 = d.join("against.html");
    lotus_ok(&[
        "report",
        "--out",
        s(&page2),
        "--mapping",
        s(&isolated),
        "--against",
        s(&in_pipeline),
    ]);
    // The engine escapes `/` in attributes too (`&#x2f;`).
    let html = fs::read_to_string(&page2)
        .expect("page")
        .replace("&#x2f;", "/");
    for o in cmp["ops"].as_array().expect("ops") {
        let want = format!(
            "data-key=\"comparison/{}/{}/coverage\">{:.1}<",
            in_pipeline.display(),
            o["op"].as_str().expect("op"),
            o["coverage"].as_f64().expect("coverage") * 100.0
        );
        assert!(html.contains(&want), "{want}");
    }
}
