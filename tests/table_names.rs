//! Function names in tables (`lotus show`, `map`, `attribute`): long C++
//! names shortened to fit the width (the terminal's; `COLUMNS`; else 120
//! columns), distinct functions staying distinct; `--wide` shows them in
//! full; JSON and CSV always hold the full names. The mapping is a real
//! torch one (fixtures/names/torch_mapping.json: ToTensor and Normalize
//! under perf, trimmed to their torch and libc functions).

mod common;

use std::collections::HashSet;
use std::ffi::OsStr;

use common::{fixture, lotus_env, lotus_ok};
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
