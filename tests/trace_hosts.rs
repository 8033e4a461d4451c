//! One job, many hosts: a two-node torchrun job on this machine (two
//! agents, c10d rendezvous on localhost, one process and one DataLoader
//! worker per node), each node under its own `lotus trace run --sample`;
//! the two folders merged by `lotus trace stats` give per-op rows per rank,
//! and the rank whose worker was slowed on purpose (a `Jitter` transform
//! spinning on its CPU) is named the straggler, with that op. The job's
//! own per-op thread-CPU timers (`--op-cpu`) are the ground truth of each
//! rank's figures.
//!
//! Torch: see tests/common/torch.rs (skipped by name without torch, a
//! failure with LOTUS_REQUIRE_TORCH=1).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::torch::torch_python;
use crate::common::trace_logs::{assert_ok, read_logs};
use crate::common::{fixture, lotus_ok, lotus_usage_error};

/// Images per batch, batches per rank.
const BATCH: u64 = 4;
const BATCHES: u64 = 4;

/// `lotus trace run --sample --out DIR -- torchrun` as node `node` of two.
fn node(py: &Path, tmp: &Path, node: u32, port: u16) -> Command {
    let torchrun = py.with_file_name("torchrun");
    assert!(torchrun.is_file(), "{} is missing", torchrun.display());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run", "--sample", "--out"])
        .arg(tmp.join(format!("node{node}")))
        .arg("--")
        .arg(torchrun)
        .args(["--nnodes", "2", "--nproc-per-node", "1"])
        .args(["--rdzv-backend", "c10d", "--rdzv-id", "lotus-hosts"])
        .arg(format!("--rdzv-endpoint=127.0.0.1:{port}"))
        .args(["--rdzv-conf", "join_timeout=120"])
        .arg(fixture("trace").join("torch_pipeline.py"))
        .args(["--dataset", "jpeg", "--ddp", "--workers", "1"])
        .args(["--batches", &BATCHES.to_string()])
        .args(["--batch-size", &BATCH.to_string()])
        .args(["--slow-rank", "1", "--slow-ms", "15"])
        .arg("--data")
        .arg(tmp.join(format!("data{node}")))
        .arg("--op-cpu")
        .arg(tmp.join(format!("ops{node}")))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH");
    cmd
}

/// A port free now on localhost, for the rendezvous.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The job's own timers: op -> CPU ns, per rank (each worker's file, its
/// rank from its log's header).
fn timers_per_rank(tmp: &Path) -> BTreeMap<u64, BTreeMap<String, u64>> {
    let mut out: BTreeMap<u64, BTreeMap<String, u64>> = BTreeMap::new();
    for n in 0..2 {
        let logs = read_logs(&tmp.join(format!("node{n}")));
        let dir = tmp.join(format!("ops{n}"));
        for entry in std::fs::read_dir(&dir).expect("op timers") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let v: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
            let pid = v["pid"].as_u64().expect("pid") as u32;
            let log = logs
                .iter()
                .find(|l| l.pid == pid)
                .unwrap_or_else(|| panic!("no log of worker {pid}"));
            let rank: u64 = log.header["rank"].parse().expect("rank");
            let ops = out.entry(rank).or_default();
            for (op, ns) in v["ops"].as_object().expect("ops") {
                *ops.entry(op.clone()).or_default() += ns.as_u64().expect("ns");
            }
        }
    }
    out
}

#[test]
fn two_nodes_merge_into_per_rank_rows_and_the_slowed_rank_is_the_straggler() {
    let test = "two_nodes_merge_into_per_rank_rows_and_the_slowed_rank_is_the_straggler";
    let Some(py) = torch_python(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let t = tmp.path();
    let port = free_port();
    for n in 0..2 {
        std::fs::create_dir(t.join(format!("ops{n}"))).expect("timers' folder");
    }
    let runs: Vec<std::thread::JoinHandle<Output>> = (0..2)
        .map(|n| {
            let mut cmd = node(&py, t, n, port);
            std::thread::spawn(move || cmd.output().expect("run lotus"))
        })
        .collect();
    for (n, r) in runs.into_iter().enumerate() {
        assert_ok(&r.join().expect("node thread"), &format!("node {n}"));
    }
    let (a, b) = (t.join("node0"), t.join("node1"));
    let (a, b) = (a.to_str().expect("path"), b.to_str().expect("path"));

    // Merged without being asked: the logs name one job.
    let v: Value = serde_json::from_str(&lotus_ok(&[
        "trace", "stats", a, b, "--json", "--by", "rank",
    ]))
    .expect("json");
    let job = &v["job"];
    let name = job["job"].as_str().expect("job name");
    assert!(name.starts_with("torchrun:lotus-hosts@"), "{job}");
    assert_eq!(job["world_size"], 2, "{job}");
    let hosts = job["hosts"].as_array().expect("hosts");
    let mut ranks: Vec<u64> = hosts
        .iter()
        .flat_map(|h| {
            h["ranks"]
                .as_array()
                .expect("ranks")
                .iter()
                .map(|r| r.as_u64().expect("rank"))
        })
        .collect();
    ranks.sort_unstable();
    assert_eq!(ranks, [0, 1], "one rank per host folder: {job}");

    // Per-op rows per rank: each transform once per image on each rank,
    // the collation once per batch; each rank's CPU per op against the
    // job's own timers.
    let rows = v["ops_by_rank"].as_array().expect("ops_by_rank");
    let timers = timers_per_rank(t);
    for rank in 0..2u64 {
        for (op, calls) in [
            ("Jitter", BATCH * BATCHES),
            ("RandomResizedCrop", BATCH * BATCHES),
            ("RandomHorizontalFlip", BATCH * BATCHES),
            ("ToTensor", BATCH * BATCHES),
            ("Normalize", BATCH * BATCHES),
            ("Loader", BATCH * BATCHES),
            ("Collation", BATCHES),
        ] {
            let row = rows
                .iter()
                .find(|r| r["op"] == op && r["rank"] == rank)
                .unwrap_or_else(|| panic!("no row of {op} on rank {rank}: {rows:?}"));
            assert_eq!(row["calls"], calls, "{op} on rank {rank}: {row}");
            let Some(truth) = timers.get(&rank).and_then(|t| t.get(op)) else {
                continue;
            };
            let cpu = row["cpu_ns"].as_u64().expect("cpu_ns") as f64;
            let truth = *truth as f64;
            // The span's CPU clock reads sit just outside the timer's:
            // within 5% and 1 ms of it.
            assert!(
                (cpu - truth).abs() <= 0.05 * truth + 1e6,
                "{op} on rank {rank}: lotus {cpu} ns, the job's timer {truth} ns"
            );
        }
    }
    let jitter = |rank: u64| timers[&rank]["Jitter"] as f64;
    assert!(jitter(1) > 10.0 * jitter(0).max(1e5), "{timers:?}");

    // The straggler: rank 1, its Jitter.
    let s = &v["straggler"];
    assert_eq!(s["rank"], 1, "{s}");
    assert_eq!(s["op"]["name"], "Jitter", "{s}");
    assert!(s["ratio"].as_f64().expect("ratio") >= 1.2, "{s}");

    // The tables say the same.
    let table = lotus_ok(&["trace", "stats", a, b, "--by", "rank"]);
    assert!(
        table.contains(&format!("Job {name}: 2 hosts' folders merged")),
        "{table}"
    );
    assert!(table.contains("Input straggler: rank 1"), "{table}");
    assert!(table.contains("Each op on each rank"), "{table}");

    // The samples per rank (`attribute --by rank`): the slowed op's CPU
    // on rank 1 against the job's own timer, within 1.5 times the
    // samples' 95% interval (three standard deviations) and 5%; next to
    // nothing on rank 0.
    let v: Value = serde_json::from_str(&lotus_ok(&[
        "attribute",
        a,
        b,
        "--by",
        "rank",
        "--format",
        "json",
    ]))
    .expect("json");
    assert_eq!(v["schema"], "lotus.attribution-ranks/1");
    assert_eq!(v["job"]["job"], name);
    let rows = v["rows"].as_array().expect("rows");
    let jitter_row = |rank: u64| {
        rows.iter()
            .find(|r| r["rank"] == rank && r["row"].as_str().is_some_and(|p| p.ends_with("Jitter")))
    };
    let on1 = jitter_row(1).unwrap_or_else(|| panic!("no Jitter row on rank 1: {rows:?}"));
    let cpu = on1["cpu_ns"].as_f64().expect("cpu_ns");
    let pm = on1["uncertainty_ns"].as_f64().expect("uncertainty_ns");
    assert!(
        (cpu - jitter(1)).abs() <= 1.5 * pm + 0.05 * jitter(1),
        "Jitter on rank 1: {cpu} ns ± {pm} sampled, the job's timer {} ns",
        jitter(1)
    );
    let on0 = jitter_row(0).map_or(0.0, |r| r["cpu_ns"].as_f64().expect("cpu_ns"));
    assert!(on0 < 0.1 * cpu, "Jitter on rank 0: {on0} ns");
    // Without --by rank: each row once, summed over both hosts.
    let all: Value =
        serde_json::from_str(&lotus_ok(&["attribute", a, b, "--format", "json"])).expect("json");
    assert_eq!(all["by"], "all");
    let summed: Vec<&Value> = all["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["row"].as_str().is_some_and(|p| p.ends_with("Jitter")))
        .collect();
    assert_eq!(summed.len(), 1, "{summed:?}");
    assert_eq!(summed[0]["cpu_ns"].as_f64(), Some(cpu + on0));

    // One timeline of both hosts: each rank's main process and worker,
    // named with their rank, each batch's arrow within its rank.
    let view = t.join("view.json");
    lotus_ok(&["trace", "view", a, b, "--out", view.to_str().expect("path")]);
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&view).expect("view")).expect("json");
    let events = v["traceEvents"].as_array().expect("events");
    let mut tracks: Vec<String> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| {
            e["args"]["name"]
                .as_str()
                .expect("name")
                .split(' ')
                .next()
                .unwrap_or("")
                .to_string()
                + &format!(
                    " {}",
                    e["args"]["name"]
                        .as_str()
                        .expect("name")
                        .contains(", rank 1)")
                )
        })
        .collect();
    tracks.sort();
    assert_eq!(
        tracks,
        ["main false", "main true", "worker false", "worker true"],
        "{tracks:?}"
    );
    let flows = events.iter().filter(|e| e["ph"] == "s").count() as u64;
    assert_eq!(flows, 2 * BATCHES, "one arrow per batch of each rank");

    // The report: each host a run of its own, the job's straggler above.
    let page = t.join("report.html");
    let p = page.to_str().expect("path");
    lotus_ok(&["report", "--trace", a, "--trace", b, "--out", p]);
    let html = std::fs::read_to_string(&page).expect("page");
    assert!(
        html.contains("One job&#x27;s hosts") || html.contains("One job's hosts"),
        "no job section"
    );
    assert!(
        html.contains("Input straggler: rank 1"),
        "no straggler on the page"
    );

    // One folder twice is not two hosts; one host alone is not merged.
    let err = lotus_usage_error(&["trace", "stats", "--hosts", a, a]);
    assert!(err.contains("rank") && err.contains("is in both"), "{err}");
    let err = lotus_usage_error(&["trace", "stats", "--hosts", a]);
    assert!(err.contains("two or more"), "{err}");
    let one: Value =
        serde_json::from_str(&lotus_ok(&["trace", "stats", a, "--json"])).expect("json");
    assert!(one.get("job").is_none(), "one folder is not merged");
}
