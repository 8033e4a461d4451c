//! Checks shared by the trace tests: the statistics a test expects of some
//! durations (numpy's definitions), the trace event format of a view, and
//! its flows; `lotus trace stats` and `view` of a folder of logs against
//! the tests' own reading of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::lotus_ok;
use super::trace_logs::{Ev, Log};

/// numpy's default percentile (linear interpolation between closest ranks).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// The figures the test expects of some durations (or delays).
pub fn figures(values: &[i64]) -> BTreeMap<&'static str, f64> {
    let mut v: Vec<f64> = values.iter().map(|&x| x as f64).collect();
    v.sort_by(|a, b| a.partial_cmp(b).expect("numbers"));
    let n = v.len() as f64;
    let total: i64 = values.iter().sum();
    let mean = total as f64 / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    BTreeMap::from([
        ("count", n),
        ("total_ns", total as f64),
        ("mean_ns", mean),
        ("p50_ns", percentile(&v, 50.0)),
        ("p95_ns", percentile(&v, 95.0)),
        ("p99_ns", percentile(&v, 99.0)),
        ("std_ns", var.sqrt()),
        ("min_ns", v[0]),
        ("max_ns", v[v.len() - 1]),
    ])
}

/// Whether two figures agree to 1e-9 (relative; absolute below 1).
pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

pub fn check_figures(got: &Value, want: &BTreeMap<&'static str, f64>, what: &str) {
    for (k, w) in want {
        let g = got[*k]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: no {k} in {got}"));
        assert!(close(g, *w), "{what}: {k} = {g}, expected {w}");
    }
}

/// Checks every event has the fields the trace event format requires.
pub fn check_format(v: &Value) -> &Vec<Value> {
    assert!(v.is_object(), "JSON object format");
    let events = v["traceEvents"].as_array().expect("traceEvents");
    for e in events {
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("ph: {e}"));
        assert!(e["name"].is_string(), "name: {e}");
        assert!(e["ts"].is_number(), "ts: {e}");
        assert!(e["pid"].is_u64() || e["pid"].is_i64(), "pid: {e}");
        assert!(e["tid"].is_u64() || e["tid"].is_i64(), "tid: {e}");
        match ph {
            "X" => assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0), "dur: {e}"),
            "s" | "f" => {
                assert!(e["id"].is_number() || e["id"].is_string(), "id: {e}");
                assert!(e["cat"].is_string(), "cat: {e}");
            }
            "M" => assert!(e["args"].is_object(), "args: {e}"),
            // An instant: the DataLoader's settings.
            "i" => assert!(
                matches!(e["s"].as_str(), Some("t" | "p" | "g")) && e["args"].is_object(),
                "instant: {e}"
            ),
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    events
}

/// The events of one phase (`ph`).
pub fn phase<'a>(events: &'a [Value], ph: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["ph"] == ph).collect()
}

/// Flow pairs by id: (s, f).
pub fn flow_pairs(events: &[Value]) -> BTreeMap<String, (Value, Value)> {
    let mut starts = BTreeMap::new();
    let mut ends = BTreeMap::new();
    for e in events {
        let id = e["id"].to_string();
        match e["ph"].as_str() {
            Some("s") => assert!(starts.insert(id, e.clone()).is_none(), "one s per id"),
            Some("f") if e["cat"] == "lotus.flow" => {
                assert!(ends.insert(id, e.clone()).is_none(), "one f per id")
            }
            _ => {}
        }
    }
    let starts: BTreeMap<String, Value> = starts
        .into_iter()
        .filter(|(_, e)| e["cat"] == "lotus.flow")
        .collect();
    assert_eq!(
        starts.keys().collect::<Vec<_>>(),
        ends.keys().collect::<Vec<_>>(),
        "every flow has both ends"
    );
    starts
        .into_iter()
        .map(|(id, s)| {
            let f = ends[&id].clone();
            (id, (s, f))
        })
        .collect()
}

// --- lotus trace stats and view against the tests' own reading of the logs ---

/// Checks `lotus trace stats --json` figures (`got`: the whole job's, or
/// one rank's) against the test's own, from `logs`: event and process
/// counts, every op name's and every kind's count, total, mean,
/// percentiles and std, the batch and wait summaries, the wait buckets,
/// the delays.
pub fn check_stats(got: &Value, logs: &[&Log], delays: &[i64], what: &str) {
    let mut ops: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    let mut kinds: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    let mut buckets = [0u64; 4];
    for e in logs.iter().flat_map(|l| &l.events) {
        let d = e.dur as i64;
        if e.kind() == "op" {
            ops.entry(e.name.as_str()).or_default().push(d);
        } else if e.kind() == "config" {
            // The DataLoader's settings: a point, no duration summarised.
        } else {
            kinds.entry(e.kind()).or_default().push(d);
        }
        if e.kind() == "wait" {
            let ready = e.fields.get("ready").map(String::as_str) == Some("1");
            let i = match e.dur {
                _ if ready || e.dur == 0 => 0,
                d if d < 1_000_000 => 1,
                d if d <= 500_000_000 => 2,
                _ => 3,
            };
            buckets[i] += 1;
        }
    }
    // Every line the stats read, the threads the tracer named included.
    let events: usize = logs.iter().map(|l| l.events.len() + l.threads.len()).sum();
    assert_eq!(
        got["events"].as_u64(),
        Some(events as u64),
        "{what}: events"
    );
    assert_eq!(got["bad_lines"].as_u64(), Some(0), "{what}: bad lines");
    assert_eq!(
        got["processes"].as_array().expect("processes").len(),
        logs.len(),
        "{what}: processes"
    );
    let named = |list: &Value, key: &str| -> BTreeMap<String, Value> {
        list.as_array()
            .unwrap_or_else(|| panic!("{what}: {key} list"))
            .iter()
            .map(|v| (v[key].as_str().expect("name").to_string(), v.clone()))
            .collect()
    };
    let got_ops = named(&got["ops"], "name");
    assert_eq!(
        got_ops.keys().map(String::as_str).collect::<Vec<_>>(),
        ops.keys().copied().collect::<Vec<_>>(),
        "{what}: op names"
    );
    for (name, v) in &ops {
        check_figures(&got_ops[*name], &figures(v), &format!("{what}: op {name}"));
    }
    let got_kinds = named(&got["kinds"], "kind");
    assert_eq!(
        got_kinds
            .keys()
            .map(String::as_str)
            .collect::<BTreeSet<_>>(),
        kinds.keys().copied().collect::<BTreeSet<_>>(),
        "{what}: kinds"
    );
    for (kind, v) in &kinds {
        check_figures(
            &got_kinds[*kind],
            &figures(v),
            &format!("{what}: kind {kind}"),
        );
    }
    check_figures(
        &got["batches"]["summary"],
        &figures(&kinds["batch"]),
        &format!("{what}: batches"),
    );
    check_figures(
        &got["wait"]["summary"],
        &figures(&kinds["wait"]),
        &format!("{what}: waits"),
    );
    let got_buckets: Vec<u64> = got["wait"]["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| b["count"].as_u64().expect("count"))
        .collect();
    assert_eq!(got_buckets, buckets, "{what}: wait buckets");
    check_figures(
        &got["delay"]["summary"],
        &figures(delays),
        &format!("{what}: delays"),
    );
    assert_eq!(got["delay"]["unconsumed"].as_u64(), Some(0), "{what}");
    assert_eq!(
        got["delay"]["consumed_without_batch"].as_u64(),
        Some(0),
        "{what}"
    );
}

/// The track name `lotus trace view` gives a log's process.
pub fn track_label(log: &Log) -> String {
    let mut extra = Vec::new();
    if let Some(h) = log.header.get("host").filter(|h| *h != "-") {
        extra.push(format!("host {h}"));
    }
    if let Some(r) = log.header.get("rank").filter(|r| *r != "-") {
        extra.push(format!("rank {r}"));
    }
    format!("{} {} ({})", log.role, log.pid, extra.join(", "))
}

/// Runs `lotus trace stats --json`.
pub fn stats_json(dir: &Path) -> Value {
    let out = lotus_ok(&[
        "trace",
        "stats",
        dir.to_str().expect("utf-8 path"),
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).expect("stats JSON");
    assert_eq!(v["schema"], "lotus.trace-stats/2");
    v
}

/// Checks `lotus trace view`: valid trace event format, one track per log
/// labelled with its role, pid, host and rank, every event a span, and one
/// flow per consumed batch from a worker of a rank to the main process of
/// the same rank.
pub fn check_view(dir: &Path, logs: &[Log]) {
    let out = dir.with_file_name("view.json");
    lotus_ok(&[
        "trace",
        "view",
        dir.to_str().expect("path"),
        "--out",
        out.to_str().expect("path"),
    ]);
    let v: Value = serde_json::from_slice(&std::fs::read(&out).expect("view")).expect("JSON");
    let events = check_format(&v);
    let tracks: BTreeMap<u64, String> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| {
            let name = e["args"]["name"].as_str().expect("track name").to_string();
            (e["pid"].as_u64().expect("pid"), name)
        })
        .collect();
    assert_eq!(
        tracks.values().cloned().collect::<BTreeSet<_>>(),
        logs.iter().map(track_label).collect::<BTreeSet<_>>(),
        "one track per process, labelled"
    );
    // Tracks in order of rank, each rank's main process before its workers.
    let mut order: Vec<(i64, &str)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_sort_index")
        .map(|e| {
            let pid = e["pid"].as_u64().expect("pid");
            (
                e["args"]["sort_index"].as_i64().expect("sort index"),
                tracks[&pid].as_str(),
            )
        })
        .collect();
    assert_eq!(order.len(), tracks.len(), "a sort index per track");
    order.sort();
    let keys: Vec<(Option<u32>, bool)> = order
        .iter()
        .map(|(_, l)| {
            let rank = l
                .rsplit_once("rank ")
                .map(|(_, r)| r.trim_end_matches(')').parse().expect("rank"));
            (rank, l.starts_with("worker"))
        })
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] <= w[1]),
        "track order: {order:?}"
    );
    let spans = events.iter().filter(|e| e["ph"] == "X").count();
    let is_config = |e: &&Ev| e.kind() == "config";
    let total: usize = logs
        .iter()
        .map(|l| l.events.iter().filter(|e| !is_config(e)).count())
        .sum();
    assert_eq!(spans, total, "every event a span, but the settings");
    let configs: usize = logs
        .iter()
        .map(|l| l.events.iter().filter(is_config).count())
        .sum();
    let instants = events
        .iter()
        .filter(|e| e["ph"] == "i" && e["cat"] == "config")
        .count();
    assert_eq!(
        instants, configs,
        "the DataLoader's settings: an instant each"
    );
    let consumed = logs
        .iter()
        .flat_map(|l| &l.events)
        .filter(|e| e.kind() == "consume")
        .count();
    let flows = flow_pairs(events);
    assert_eq!(flows.len(), consumed, "one flow per consumed batch");
    let rank_of = |label: &str| label.rsplit_once("rank ").map(|(_, r)| r.to_string());
    // (labels end with "rank N)"; the comparison needs only equality)
    for (s, f) in flows.values() {
        let from = &tracks[&s["pid"].as_u64().expect("pid")];
        let to = &tracks[&f["pid"].as_u64().expect("pid")];
        assert!(
            from.starts_with("worker ") && to.starts_with("main "),
            "{from} -> {to}"
        );
        assert_eq!(rank_of(from), rank_of(to), "a flow stays in its rank");
    }
}
