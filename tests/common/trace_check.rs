//! Checks shared by the trace tests: the statistics a test expects of some
//! durations (numpy's definitions), the trace event format of a view, and
//! its flows.

use std::collections::BTreeMap;

use serde_json::Value;

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
