//! The registry as the binary sees it, and `lotus backends`.

use crate::common;

use crate::common::{lotus_fails, lotus_ok};
use serde_json::Value;

#[test]
fn binary_registers_exactly_the_three_backends_sorted() {
    let list: Value = serde_json::from_str(&lotus_ok(&["backends", "--json"])).expect("json");
    let names: Vec<&str> = list
        .as_array()
        .expect("array")
        .iter()
        .map(|b| b["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["perf", "uprof", "vtune"]);
}

#[test]
fn unavailable_backends_say_why() {
    let list: Value = serde_json::from_str(&lotus_ok(&["backends", "--json"])).expect("json");
    for b in list.as_array().expect("array") {
        let available = b["available"].as_bool().expect("bool");
        assert_eq!(available, b["reason"].is_null(), "{b}");
        if !available {
            assert!(!b["reason"].as_str().expect("reason").is_empty());
        }
    }
    // Where the vendor tool is not installed, the reason names it.
    let on_path = |tool: &str| {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            .unwrap_or(false)
    };
    let by_name = |n: &str| {
        list.as_array()
            .expect("a")
            .iter()
            .find(|b| b["name"] == n)
            .expect("listed")
            .clone()
    };
    if !on_path("vtune") && std::env::var_os("VTUNE_PROFILER_DIR").is_none() {
        let v = by_name("vtune");
        assert_eq!(v["available"], false);
        assert!(
            v["reason"]
                .as_str()
                .expect("r")
                .contains("VTUNE_PROFILER_DIR"),
            "{v}"
        );
    }
    if !on_path("AMDuProfCLI") && std::env::var_os("AMDUPROF_HOME").is_none() {
        let u = by_name("uprof");
        assert_eq!(u["available"], false);
        assert!(
            u["reason"].as_str().expect("r").contains("AMDuProfCLI"),
            "{u}"
        );
    }
    let table = lotus_ok(&["backends"]);
    assert!(table.contains("vtune") && table.contains("uprof") && table.contains("perf"));
}

#[test]
fn bad_rule_and_bad_mapping_files_fail_clearly() {
    let out = common::lotus(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        ".",
        "--rule",
        "most",
    ]);
    assert_eq!(out.status.code(), Some(2), "clap usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown merge rule 'most'"));

    let tmp = tempfile::tempdir().expect("tmp");
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, "{\"schema\": \"lotus.mapping/1\", \"ops\": [").expect("write");
    let err = lotus_fails(&["show", bad.to_str().expect("p")]);
    assert!(err.contains(&format!("{}:1:", bad.display())), "{err}");
    let missing = tmp.path().join("nope.json");
    let err = lotus_fails(&["show", missing.to_str().expect("p")]);
    assert!(err.contains("nope.json"), "{err}");
    std::fs::write(&bad, [0xffu8, 0xfe, b'{']).expect("write");
    let err = lotus_fails(&["show", bad.to_str().expect("p")]);
    assert!(err.contains("UTF-8"), "{err}");
}

#[test]
fn dry_run_prints_commands_and_runs_nothing() {
    let op = common::fixture("ops/RandomHorizontalFlip.py");
    let op = op.to_str().expect("utf-8");
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("never.json");
    let text = lotus_ok(&[
        "map",
        "--backend",
        "perf",
        "--dry-run",
        "--runs",
        "2",
        "--python",
        "/bin/true",
        "--out",
        out.to_str().expect("p"),
        op,
    ]);
    assert!(!out.exists(), "a dry run writes no mapping");
    assert!(text.contains("export LOTUS_BACKEND=perf"), "{text}");
    assert!(text.contains("INTEL_LIBITTNOTIFY64="), "{text}");
    assert!(
        text.contains("lotus_harness.py --op-file") && text.contains(op),
        "{text}"
    );
    assert!(
        text.contains("# (harness floor)") && text.contains("--empty"),
        "{text}"
    );
    assert!(text.contains("2 run(s) per op"), "{text}");
}

#[test]
fn vendor_backends_without_their_tool_say_so() {
    let on_path = |tool: &str| {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            .unwrap_or(false)
    };
    if on_path("vtune") || std::env::var_os("VTUNE_PROFILER_DIR").is_some() {
        return;
    }
    let op = common::fixture("ops/RandomHorizontalFlip.py");
    let op = op.to_str().expect("utf-8");
    let err = lotus_fails(&["map", "--backend", "vtune", "--python", "/bin/true", op]);
    assert!(
        err.contains("vtune backend cannot run here") && err.contains("VTUNE_PROFILER_DIR"),
        "{err}"
    );
    // A dry run still prints what would run, with the reason.
    let text = lotus_ok(&[
        "map",
        "--backend",
        "vtune",
        "--dry-run",
        "--python",
        "/bin/true",
        op,
    ]);
    assert!(
        text.contains("cannot run here") && text.contains(op),
        "{text}"
    );
}
