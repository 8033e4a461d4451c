//! Function names in tables (`lotus show`, `map`, `attribute`): long C++
//! names shortened to fit the width (the terminal's; `COLUMNS`; else 120
//! columns), distinct functions staying distinct; `--wide` shows them in
//! full; JSON and CSV always hold the full names. The mapping is a real
//! torch one (fixtures/names/torch_mapping.json: ToTensor and Normalize
//! under perf, trimmed to their torch and libc functions).

use std::collections::HashSet;
use std::ffi::OsStr;

use crate::common::{fixture, lotus_env, lotus_ok};
use serde_json::Value;

fn mapping() -> Value {
    let text = std::fs::read_to_string(fixture("names/torch_mapping.json")).expect("fixture");
    serde_json::from_str(&text).expect("mapping JSON")
}

/// Every function name of the mapping, once.
fn full_names(mapping: &Value) -> Vec<String> {
    let mut names = Vec::new();
    for op in mapping["ops"].as_array().expect("ops") {
        for f in op["functions"].as_array().expect("functions") {
            let name = f["function"].as_str().expect("name").to_string();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// The function cells of the table's rows (first column), per table.
fn function_cells(table: &str) -> Vec<Vec<String>> {
    let mut tables = Vec::new();
    let mut rows = Vec::new();
    for line in table.lines() {
        if line.starts_with('┌') {
            rows = Vec::new();
        } else if line.starts_with('└') {
            tables.push(std::mem::take(&mut rows));
        } else if let Some(rest) = line.strip_prefix("│ ") {
            let cell = rest.split(" ┆ ").next().unwrap_or("").trim_end();
            if cell != "function" {
                rows.push(cell.to_string());
            }
        }
    }
    tables
}

fn show(args: &[&str], columns: Option<&str>) -> String {
    let file = fixture("names/torch_mapping.json");
    let mut all = vec!["show", file.to_str().expect("utf-8"), "--top", "0"];
    all.extend_from_slice(args);
    let env: Vec<(&str, &OsStr)> = columns
        .map(|c| ("COLUMNS", OsStr::new(c)))
        .into_iter()
        .collect();
    let out = lotus_env(&all, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn tables_fit_the_width_and_keep_functions_apart_and_wide_shows_them_whole() {
    let mapping = mapping();
    let names = full_names(&mapping);
    let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    assert!(longest > 300, "the fixture has long C++ names");
    let ops = mapping["ops"].as_array().expect("ops");

    for (columns, width) in [(None, 120), (Some("110"), 110), (Some("200"), 200)] {
        let table = show(&[], columns);
        for line in table.lines() {
            assert!(
                line.chars().count() <= width,
                "COLUMNS={columns:?}: a line of {} characters:\n{line}",
                line.chars().count()
            );
        }
        let cells = function_cells(&table);
        assert_eq!(cells.len(), ops.len(), "{table}");
        for (op, cells) in ops.iter().zip(&cells) {
            let distinct: HashSet<&String> = cells.iter().collect();
            assert_eq!(
                distinct.len(),
                op["functions"].as_array().expect("functions").len(),
                "COLUMNS={columns:?}: {} has functions that read alike:\n{table}",
                op["name"]
            );
        }
        // The kernels' own names survive the shortening.
        for kernel in ["direct_copy_kernel", "div_true_kernel", "add_kernel"] {
            assert!(
                table.contains(kernel),
                "COLUMNS={columns:?}: no {kernel}:\n{table}"
            );
        }
        assert!(
            !table.contains("(long, char**"),
            "parameter lists kept:\n{table}"
        );
    }

    // --wide: every name whole, whatever the width.
    let wide = show(&["--wide"], Some("80"));
    for name in &names {
        assert!(wide.contains(name.as_str()), "--wide lacks {name}");
    }
    // CSV and JSON hold the full names.
    let csv = show(&["--format", "csv"], Some("80"));
    let json: Value = serde_json::from_str(&show(&["--format", "json"], Some("80"))).expect("json");
    assert_eq!(full_names(&json), names);
    for name in &names {
        assert!(csv.contains(name.as_str()), "CSV lacks {name}");
    }
}

#[test]
fn map_and_attribute_take_wide_too() {
    // The study's VTune reports hold long C++ names as well.
    let reports = fixture("reports/vtune/hotspots");
    let args = [
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        reports.to_str().expect("utf-8"),
        "--top",
        "0",
    ];
    let short = lotus_ok(&args);
    let wide = lotus_ok(&[&args[..], &["--wide"]].concat());
    let widest = |t: &str| t.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest(&short) <= 120, "not fitted to 120 columns:\n{short}");
    assert!(widest(&wide) > 120, "--wide shortened the names");

    // attribute: the metrics table's op names in full with --wide.
    let dir = tempfile::tempdir().expect("temp dir");
    let mut mapping = mapping();
    let long_op = "Normalize_with_the_ImageNet_mean_and_std_per_channel";
    mapping["ops"][0]["name"] = Value::from(long_op);
    let rows: Vec<Value> = mapping["ops"][0]["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| {
            serde_json::json!({
                "function": f["function"], "module": f["module"], "value": f["samples"],
                "counters": {"cycles": 1000, "instructions": 2000, "Retiring": 25.0}
            })
        })
        .collect();
    let profile = serde_json::json!({
        "schema": "lotus.profile/1", "backend": "perf", "unit": "samples",
        "command": ["python", "train.py"], "rows": rows
    });
    let m = dir.path().join("mapping.json");
    let p = dir.path().join("profile.json");
    std::fs::write(&m, mapping.to_string()).expect("write");
    std::fs::write(&p, profile.to_string()).expect("write");
    let base = [
        "attribute",
        "--mapping",
        m.to_str().expect("utf-8"),
        "--profile",
        p.to_str().expect("utf-8"),
    ];
    let short = lotus_ok(&base);
    let wide = lotus_ok(&[&base[..], &["--wide"]].concat());
    assert!(short.contains("metrics per op"), "{short}");
    let header = |t: &str| {
        t.lines()
            .skip_while(|l| !l.starts_with("metrics per op"))
            .find(|l| l.starts_with("│ metric"))
            .unwrap_or("")
            .to_string()
    };
    assert!(!header(&short).contains(long_op), "{short}");
    assert!(header(&wide).contains(long_op), "{wide}");
}

/// `lotus attribute DIR` (a sampled trace folder): the top functions of
/// each row, one a line, shortened to the width; `--wide` and JSON keep
/// them whole. The folder is written here: one worker whose op spans hold
/// samples in the mapping's long torch kernels.
#[test]
fn attribute_of_a_sampled_trace_fits_its_names_too() {
    use lotus_samples::{write_sampling, Sample, SampleFiles, SampleSink, SamplesWriter, Symbol};
    let names = full_names(&mapping());
    let long: Vec<&String> = names.iter().filter(|n| n.len() > 150).take(3).collect();
    assert_eq!(long.len(), 3, "the fixture has long torch names");
    let dir = tempfile::tempdir().expect("temp dir");
    // wall = monotonic + 1 s; ToTensor over [1000, 5000) ns.
    let off = 1_000_000_000u64;
    std::fs::write(
        dir.path().join("lotus_worker_pid_10"),
        format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n\
             SToTensor,{},4000,kind=op\n",
            1000 + off
        ),
    )
    .expect("log");
    let mut w = SamplesWriter::create(dir.path(), "lotus").expect("samples");
    let symbols: Vec<(u32, Symbol)> = long
        .iter()
        .enumerate()
        .map(|(i, n)| (i as u32, Symbol::new(n, "/torch/lib/libtorch_cpu.so")))
        .collect();
    w.symbols(&symbols).expect("symbols");
    let samples: Vec<Sample> = (0..30u64)
        .map(|i| Sample {
            time_ns: 1000 + i * 100,
            pid: 10,
            tid: 10,
            symbol: (i % 3) as u32,
            kernel: false,
            counters: Default::default(),
        })
        .collect();
    w.samples(&samples).expect("samples");
    w.finish().expect("finish");
    let files = SampleFiles::of(dir.path(), "lotus");
    write_sampling(
        &files.sampling,
        &[
            ("backend", "perf".into()),
            ("frequency_hz", "10000".into()),
            ("interval_ns", "100000".into()),
            ("clock", "monotonic".into()),
            ("status", "complete".into()),
            ("samples", "30".into()),
        ],
    )
    .expect("sampling");
    let d = dir.path().to_str().expect("utf-8");
    let table = |extra: &[&str]| {
        let mut args = vec!["attribute", d];
        args.extend_from_slice(extra);
        let out = lotus_env(&args, &[("COLUMNS", OsStr::new("140"))]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let short = table(&[]);
    let widest = |t: &str| t.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest(&short) <= 140, "not fitted to 140 columns:\n{short}");
    // One function a line, each distinct, its module and share in the
    // table's last columns (… ┆ function ┆ module ┆ %).
    let cells: Vec<&str> = short
        .lines()
        .map(|l| {
            l.trim_end_matches('│')
                .split('┆')
                .map(str::trim)
                .collect::<Vec<_>>()
        })
        .filter(|c| c.len() >= 4 && matches!(c[c.len() - 1], "33%" | "34%"))
        .inspect(|c| assert_eq!(c[c.len() - 2], "libtorch_cpu.so", "{short}"))
        .map(|c| c[c.len() - 3])
        .collect();
    assert_eq!(cells.len(), 3, "three functions, one a line:\n{short}");
    assert_eq!(cells.iter().collect::<HashSet<_>>().len(), 3, "{short}");
    let wide = table(&["--wide"]);
    for n in &long {
        assert!(wide.contains(n.as_str()), "--wide shows {n} whole:\n{wide}");
        assert!(
            !short.contains(n.as_str()),
            "{n} was not shortened:\n{short}"
        );
    }
    let json = table(&["--format", "json"]);
    for n in &long {
        let quoted = serde_json::to_string(n).expect("json");
        assert!(json.contains(&quoted), "JSON keeps {n} whole");
    }
}
