//! `lotus report` opened in a real headless browser (Debian's Chromium,
//! driven over the DevTools protocol by fixtures/report/cdp_check.py): it
//! loads with no console error and no request but its own file, every plot
//! is there with marks in it, a full-page screenshot is written for a
//! person to look at, and every figure the page shows equals `lotus trace
//! stats --json`'s and `lotus attribute --format json`'s. Skipped, with a
//! `skipped:` line saying why, where Chromium is not installed
//! (`bash scripts/setup.sh --torch` installs it as root).

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{any_python, fixture, lotus_ok, s};
use serde_json::Value;

fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
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

#[test]
fn the_report_opens_in_a_browser_with_every_plot_and_the_same_numbers() {
    let Some(browser) = chromium() else {
        println!(
            "skipped: the_report_opens_in_a_browser_with_every_plot_and_the_same_numbers: no chromium in /usr/bin (bash scripts/setup.sh --torch installs it as root with apt-get)"
        );
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
    assert!(
        !html.contains("<script") && !html.contains("<link"),
        "self-contained"
    );

    // The browser's view of it.
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lotus-report.png");
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
