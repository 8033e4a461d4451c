//! Ops across hosts: a live mapping records its host (CPU model, CPUs,
//! cores, kernel), and `lotus compare` puts two mappings' ops side by side,
//! latency and CPU per call with ratios. The second mapping is the first
//! as another host would have measured it (its host and window figures
//! changed by the test); every expectation is computed here from the two
//! files and from /proc.

use crate::common;

use std::fs;

use crate::common::{lotus_env, lotus_fails, lotus_ok, python, s, GOOD_OP};
use serde_json::Value;

/// (calls, seconds, task-clock ns) of each op's window.
fn windows(m: &Value) -> Vec<(String, f64, f64, f64)> {
    m["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|o| {
            let w = &o["window"];
            (
                o["name"].as_str().expect("name").to_string(),
                w["iterations"].as_f64().expect("calls"),
                w["seconds"].as_f64().expect("seconds"),
                w["counters"]["task-clock-ns"].as_f64().expect("task clock"),
            )
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

#[test]
fn live_mappings_record_their_host_and_compare_per_call() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let op = d.join("Sort.py");
    fs::write(&op, GOOD_OP).expect("write");
    let a = d.join("here.json");
    let py = python();
    let o = lotus_env(
        &[
            "map",
            "--backend",
            "perf",
            "--runs",
            "1",
            "--no-baseline",
            "--python",
            s(&py),
            "--out",
            s(&a),
            s(&op),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut m: Value = serde_json::from_str(&fs::read_to_string(&a).expect("read")).expect("json");

    // The host, as /proc says.
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").expect("cpuinfo");
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let env = &m["environment"];
    assert_eq!(
        env["cpus"].as_str(),
        Some(cpus.to_string().as_str()),
        "{env}"
    );
    if let Some(model) = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
    {
        assert_eq!(env["cpu_model"].as_str(), Some(model.1.trim()), "{env}");
    }
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    assert_eq!(env["kernel"].as_str(), Some(kernel.trim()));

    // Another host: slower wall clock (x2.5), more CPU (x1.5) per call,
    // of which its own cost (the calls timed unsampled) is x1.2: the rest
    // is what sampling costs more there.
    let b = d.join("other.json");
    m["environment"]["host"] = "other-node".into();
    m["environment"]["cpu_model"] = "Other CPU 9000".into();
    for o in m["ops"].as_array_mut().expect("ops") {
        let w = &mut o["window"];
        let sec = w["seconds"].as_f64().expect("s");
        w["seconds"] = (sec * 2.5).into();
        let tc = w["counters"]["task-clock-ns"].as_f64().expect("tc");
        w["counters"]["task-clock-ns"] = (tc * 1.5).into();
        let own = w["unsampled"]["cpu_seconds"]
            .as_f64()
            .expect("a perf mapping times each op unsampled");
        w["unsampled"]["cpu_seconds"] = (own * 1.2).into();
    }
    fs::write(&b, serde_json::to_string_pretty(&m).expect("json")).expect("write");

    let here: Value = serde_json::from_str(&fs::read_to_string(&a).expect("r")).expect("json");
    let (wa, wb) = (windows(&here), windows(&m));
    let v: Value = serde_json::from_str(&lotus_ok(&["compare", s(&a), s(&b), "--format", "json"]))
        .expect("json");
    assert_eq!(v["schema"], "lotus.mapping-compare/1");
    assert_eq!(v["mappings"][1]["host"]["cpu_model"], "Other CPU 9000");
    assert_eq!(
        v["mappings"][0]["host"]["kernel"].as_str(),
        Some(kernel.trim())
    );
    let ops = v["ops"].as_array().expect("ops");
    assert_eq!(ops.len(), wa.len());
    for (o, ((name, calls, sec, tc), (_, calls_b, sec_b, tc_b))) in
        ops.iter().zip(wa.iter().zip(&wb))
    {
        assert_eq!(o["op"], name.as_str());
        let pa = &o["per_mapping"][0];
        let pb = &o["per_mapping"][1];
        assert_eq!(pa["calls"].as_f64(), Some(*calls));
        assert!(close(pa["latency_s"].as_f64().expect("lat"), sec / calls));
        assert!(close(pa["cpu_s"].as_f64().expect("cpu"), tc / 1e9 / calls));
        assert!(close(
            pb["latency_s"].as_f64().expect("lat"),
            sec_b / calls_b
        ));
        let lr = o["latency_ratio"][1].as_f64().expect("ratio");
        let cr = o["cpu_ratio"][1].as_f64().expect("ratio");
        assert!(close(lr, (sec_b / calls_b) / (sec / calls)), "{lr}");
        assert!(close(cr, (tc_b / calls_b) / (tc / calls)), "{cr}");
        assert!(close(lr, 2.5) && close(cr, 1.5));
        assert!(
            pa["unsampled_cpu_s"].as_f64().is_some_and(|c| c > 0.0),
            "{o}"
        );
        let ur = o["unsampled_cpu_ratio"][1].as_f64().expect("ratio");
        assert!(close(ur, 1.2), "{ur}");
        assert_eq!(o["latency_ratio"][0].as_f64(), Some(1.0));
    }
    let t = lotus_ok(&["compare", s(&a), s(&b)]);
    assert!(
        t.contains("Other CPU 9000")
            && t.contains("2.50x")
            && t.contains("1.50x")
            && t.contains("1.20x")
            && t.contains("CPU ms unsampled"),
        "{t}"
    );
    let c = lotus_ok(&["compare", s(&a), s(&b), "--format", "csv"]);
    assert_eq!(c.lines().count(), 1 + 2 * wa.len(), "{c}");

    // Mappings from reports have no windows: said, not made up.
    let reports = d.join("reports.json");
    lotus_ok(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        s(&common::fixture("reports/vtune/hotspots")),
        "--out",
        s(&reports),
    ]);
    let e = lotus_fails(&["compare", s(&reports), s(&reports)]);
    assert!(
        e.contains("no op of these mappings has per-call figures"),
        "{e}"
    );
}
