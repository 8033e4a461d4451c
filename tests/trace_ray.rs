//! Ray Data under `lotus trace run --sample`: a pipeline of three
//! operators (`fixtures/trace/ray_pipeline.py`: `Map(decode)`,
//! `MapBatches(Augment)` on an actor pool, `FlatMap(explode)`) on a local
//! Ray cluster of two nodes on one machine (`ray.cluster_utils.Cluster`,
//! as Ray's own tests make one), the driver iterating over its batches.
//! Each operator's UDF times itself on its thread's CPU clock and hands
//! the time on with its rows, per Ray node: the ground truth. Checked:
//! each operator is an op in the Ray workers of both nodes, its CPU per
//! node within 10% of its timers (`trace stats --by node`), its calls the
//! UDF's; the read and write tasks are ops; the driver's waits are the verdict's;
//! and the samples credit each operator its CPU (`attribute DIR`).
//!
//! Needs `ray[data]` in the tests' Python (scripts/setup.sh --torch
//! installs it): skipped by name without it, a failure with
//! LOTUS_REQUIRE_PIPELINE_PACKAGES=1.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::common::torch::torch_python;
use crate::common::trace_logs::assert_ok;
use crate::common::{fixture, lotus_ok};

/// The tests' Python where it imports `ray.data`, else `None` (said by
/// name), or a failure where the pipeline packages are required.
fn ray_python(test: &str) -> Option<PathBuf> {
    let py = torch_python(test)?;
    let ok = Command::new(&py)
        .args(["-c", "import ray.data"])
        .output()
        .is_ok_and(|o| o.status.success());
    let why = "cannot import ray.data (bash scripts/setup.sh --torch installs it)";
    assert!(
        ok || std::env::var_os("LOTUS_REQUIRE_PIPELINE_PACKAGES").is_none_or(|v| v != "1"),
        "{test}: LOTUS_REQUIRE_PIPELINE_PACKAGES=1 but {} {why}",
        py.display()
    );
    if !ok {
        let _ = writeln!(std::io::stderr(), "skipped: {test}: {} {why}", py.display());
    }
    ok.then_some(py)
}

#[test]
fn ray_data_operators_are_ops_on_every_node_as_their_own_timers_say() {
    let test = "ray_data_operators_are_ops_on_every_node_as_their_own_timers_say";
    let Some(py) = ray_python(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let (dir, report) = (tmp.path().join("trace"), tmp.path().join("truth.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "--sample", "--out"])
        .arg(&dir)
        .arg("--")
        .arg(&py)
        .arg(fixture("trace").join("ray_pipeline.py"))
        .arg("--report")
        .arg(&report)
        .arg("--write")
        .arg(tmp.path().join("written"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // Ray's own temporary files in this test's folder, not /tmp/ray.
        .env("RAY_TMPDIR", tmp.path())
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH")
        .output()
        .expect("run lotus");
    assert_ok(&out, "the Ray pipeline");
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("truth")).expect("json");
    let d = dir.to_str().expect("path");

    let v: Value =
        serde_json::from_str(&lotus_ok(&["trace", "stats", d, "--by", "node", "--json"]))
            .expect("json");
    let nodes = v["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 2, "two Ray nodes: {nodes:?}");
    let rows = v["ops_by_node"].as_array().expect("ops_by_node");
    let mut worked = std::collections::BTreeSet::new();
    for (op, per_node) in truth["ops"].as_object().expect("ops") {
        // Ray places the tasks and hands the actors their batches: an
        // operator may run on one node only, but both nodes work.
        for (node, ns) in per_node.as_object().expect("per node") {
            worked.insert(node.clone());
            let row = rows
                .iter()
                .find(|r| r["op"] == op.as_str() && r["node"] == node.as_str())
                .unwrap_or_else(|| panic!("no row of {op} on node {node}: {rows:?}"));
            let (cpu, ns) = (
                row["cpu_ns"].as_f64().expect("cpu_ns"),
                ns.as_f64().expect("ns"),
            );
            assert!(
                (cpu - ns).abs() <= 0.10 * ns + 1e6,
                "{op} on node {node}: lotus {cpu} ns, its timers {ns} ns"
            );
            assert_eq!(
                row["calls"], truth["calls"][op][node],
                "{op} on node {node}: calls"
            );
        }
    }
    assert_eq!(worked.len(), 2, "both nodes ran operators: {truth}");
    for op in ["ReadRange", "WriteJSON"] {
        assert!(
            rows.iter().any(|r| r["op"] == op),
            "the read and write tasks are ops ({op}): {rows:?}"
        );
    }
    // The driver's waits for batches are the verdict's.
    let waits = v["wait"]["summary"]["count"].as_u64().expect("waits");
    assert!(waits >= 2, "the driver's waits: {}", v["wait"]);
    assert!(
        v["verdict"]["waiting_share"].as_f64().is_some(),
        "{}",
        v["verdict"]
    );

    // The samples: each operator a row with its CPU, the UDF's time
    // within the samples' 95% interval and 10%.
    let a: Value =
        serde_json::from_str(&lotus_ok(&["attribute", d, "--format", "json"])).expect("json");
    let arows = a["rows"].as_array().expect("rows");
    for (op, per_node) in truth["ops"].as_object().expect("ops") {
        let ns: f64 = per_node
            .as_object()
            .expect("nodes")
            .values()
            .filter_map(Value::as_f64)
            .sum();
        let row = arows
            .iter()
            .find(|r| r["path"] == op.as_str())
            .unwrap_or_else(|| panic!("no row {op} in the attribution"));
        let cpu = row["cpu_ns"].as_f64().expect("cpu_ns");
        let pm = row["uncertainty_ns"].as_f64().expect("uncertainty_ns");
        assert!(
            (cpu - ns).abs() <= pm + 0.10 * ns,
            "{op}: sampled {cpu} ns ± {pm}, its timers {ns} ns"
        );
    }
}
