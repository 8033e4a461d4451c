//! `lotus trace view` and `lotus trace stats` on trace logs: synthetic logs
//! written here (several workers, a main process, known events), the
//! original fork's format (fixtures/traces/original), broken lines
//! (fixtures/traces/broken) and a merged PyTorch profiler trace
//! (fixtures/traces/with_torch). Every expectation is computed here from
//! the events the test wrote (or read from the fixture files), with the
//! documented definitions, not with lotus's own code.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::Path;

use crate::common::trace_check::{
    check_figures, check_format, close, figures, flow_pairs, percentile, phase, stats_json,
};
use crate::common::{fixture, lotus, lotus_fails, lotus_ok, s};
use serde_json::Value;

/// One event as the test writes it.
#[derive(Debug, Clone, PartialEq)]
struct Ev {
    pid: u32,
    name: &'static str,
    kind: &'static str,
    start: u64,
    dur: u64,
    batch: Option<u64>,
    sample: Option<u64>,
    ready: Option<bool>,
}

impl Ev {
    fn end(&self) -> u64 {
        self.start + self.dur
    }

    fn line(&self) -> String {
        let mut l = format!(
            "S{},{},{},kind={}",
            self.name, self.start, self.dur, self.kind
        );
        if let Some(b) = self.batch {
            l += &format!(",batch={b}");
        }
        if let Some(x) = self.sample {
            l += &format!(",sample={x}");
        }
        if let Some(r) = self.ready {
            l += &format!(",ready={}", u8::from(r));
        }
        l
    }
}

const T0: u64 = 1_700_000_000_123_456_789;
const MAIN: u32 = 900;
const WORKERS: [u32; 3] = [901, 902, 903];
const BATCHES: u64 = 12;
const SLOW_BATCH: u64 = 7;
const UNCONSUMED_BATCH: u64 = 11;

/// A small deterministic generator of durations.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, base: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        base + (self.0 >> 33) % base
    }
}

/// The synthetic pipeline: 12 batches of 4 samples over 3 workers; batch
/// 7 is slow, batch 11 is never consumed, one consumption has no batch.
fn synthetic() -> Vec<Ev> {
    let mut rng = Lcg(42);
    let mut evs = Vec::new();
    let mut clock: HashMap<u32, u64> = WORKERS
        .iter()
        .map(|&w| (w, T0 + u64::from(w - 900) * 333))
        .collect();
    let mut ends = BTreeMap::new();
    for b in 0..BATCHES {
        let w = WORKERS[(b % 3) as usize];
        let t0 = clock[&w];
        let mut t = t0;
        for i in 0..4 {
            let sample = b * 4 + i;
            let s0 = t;
            for (name, base) in [
                ("Loader", 3_000_000),
                ("RandomResizedCrop", 1_000_000),
                ("ToTensor", 400_000),
            ] {
                let mut dur = rng.next(base);
                if b == SLOW_BATCH && i == 0 && name == "Loader" {
                    dur = 900_000_000;
                }
                evs.push(Ev {
                    pid: w,
                    name,
                    kind: "op",
                    start: t,
                    dur,
                    batch: Some(b),
                    sample: Some(sample),
                    ready: None,
                });
                t += dur + 1_000;
            }
            evs.push(Ev {
                pid: w,
                name: "Sample",
                kind: "sample",
                start: s0,
                dur: t - s0,
                batch: Some(b),
                sample: Some(sample),
                ready: None,
            });
        }
        evs.push(Ev {
            pid: w,
            name: "Fetch",
            kind: "fetch",
            start: t0,
            dur: t - t0,
            batch: Some(b),
            sample: None,
            ready: None,
        });
        let c = rng.next(200_000);
        evs.push(Ev {
            pid: w,
            name: "Collation",
            kind: "op",
            start: t,
            dur: c,
            batch: Some(b),
            sample: None,
            ready: None,
        });
        t += c + 1;
        evs.push(Ev {
            pid: w,
            name: "Batch",
            kind: "batch",
            start: t0,
            dur: t - t0,
            batch: Some(b),
            sample: None,
            ready: None,
        });
        ends.insert(b, t);
        clock.insert(w, t + 50_000);
    }
    // Waits in every bucket, including the edges of the documented rule.
    let waits: [(u64, bool); 11] = [
        (0, true),
        (250_000, false),
        (5_000_000, false),
        (700_000_000, false),
        (2_000, true),
        (1_000_000, false),
        (999_999, false),
        (500_000_000, false),
        (0, false),
        (42_000_000, false),
        (500_000_001, false),
    ];
    let delays: [u64; 11] = [
        50_000, 1_200_000, 3_000, 40_000_000, 7_777, 250_000, 90_000, 12_345, 600_000, 5_000_000,
        33,
    ];
    for b in 0..BATCHES {
        if b == UNCONSUMED_BATCH {
            continue;
        }
        let consume = ends[&b] + delays[b as usize];
        let (wait, ready) = waits[b as usize];
        evs.push(Ev {
            pid: MAIN,
            name: "Wait",
            kind: "wait",
            start: consume - wait - 500,
            dur: wait,
            batch: Some(b),
            sample: None,
            ready: Some(ready),
        });
        evs.push(Ev {
            pid: MAIN,
            name: "Consume",
            kind: "consume",
            start: consume,
            dur: 0,
            batch: Some(b),
            sample: None,
            ready: None,
        });
    }
    // A consumption no worker log matches.
    evs.push(Ev {
        pid: MAIN,
        name: "Consume",
        kind: "consume",
        start: T0 + 5,
        dur: 0,
        batch: Some(99),
        sample: None,
        ready: None,
    });
    evs
}

/// Writes the events as logs under `dir`: main and two workers with a
/// header, worker 903 without (its pid comes from the file name).
fn write_logs(dir: &Path, evs: &[Ev], host: &str) {
    write_rank_logs(dir, evs, host, "-");
}

/// [`write_logs`] with a rank in the headers (`-`: none).
fn write_rank_logs(dir: &Path, evs: &[Ev], host: &str, rank: &str) {
    fs::create_dir_all(dir).expect("mkdir");
    for pid in std::iter::once(MAIN).chain(WORKERS) {
        let role = if pid == MAIN { "main" } else { "worker" };
        let mut text = String::new();
        if pid != 903 {
            text += &format!("#lotus-trace v1 role={role} pid={pid} host={host} rank={rank}\n");
        }
        text += "# a comment\n\n";
        for e in evs.iter().filter(|e| e.pid == pid) {
            text += &e.line();
            text.push('\n');
        }
        fs::write(dir.join(format!("lotus_{role}_pid_{pid}")), text).expect("write");
    }
}

/// What identifies a span: pid, name, kind, start ns, duration ns, batch,
/// sample.
type SpanKey = (u64, String, String, u64, u64, Option<u64>, Option<u64>);

/// Runs `lotus trace view`; returns the JSON and stderr.
fn view(dir: &Path, out: &Path, extra: &[&str]) -> (Value, String) {
    let mut args = vec!["trace", "view", s(dir), "--out", s(out)];
    args.extend_from_slice(extra);
    let o = lotus(&args);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "lotus {args:?}: {stderr}");
    let v: Value =
        serde_json::from_slice(&fs::read(out).expect("view written")).expect("valid JSON");
    (v, stderr)
}

/// ns since the epoch of a `ts` (µs from `base`), rounded to the ns.
fn ns(base: u64, ts: f64) -> u64 {
    (base as i128 + (ts * 1000.0).round() as i128) as u64
}

#[test]
fn synthetic_view_has_every_event_and_one_flow_per_consumed_batch() {
    let tmp = tempfile::tempdir().expect("tmp");
    let evs = synthetic();
    write_logs(tmp.path(), &evs, "node7");
    let out = tmp.path().join("view.json");
    let (v, stderr) = view(tmp.path(), &out, &[]);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert_eq!(v["lotusTrace"], "lotus.trace-view/1");
    let base = v["baseTimeNanoseconds"].as_u64().expect("base");
    assert_eq!(base, evs.iter().map(|e| e.start).min().expect("events"));
    let events = check_format(&v);

    // One process track per pid, named by role (and host where known).
    let names: BTreeMap<u64, String> = phase(events, "M")
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| {
            (
                e["pid"].as_u64().expect("pid"),
                e["args"]["name"].as_str().expect("name").to_string(),
            )
        })
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(
        names[&900].starts_with("main 900") && names[&900].contains("host node7"),
        "{names:?}"
    );
    assert!(names[&901].starts_with("worker 901"), "{names:?}");
    assert_eq!(names[&903], "worker 903");

    // Every log event is one X event, with its times to the ns.
    let xs = phase(events, "X");
    assert_eq!(xs.len(), evs.len());
    let mut got: Vec<SpanKey> = xs
        .iter()
        .map(|e| {
            assert_eq!(e["pid"], e["tid"]);
            let ts = e["ts"].as_f64().expect("ts");
            let dur = e["dur"].as_f64().expect("dur");
            (
                e["pid"].as_u64().expect("pid"),
                e["name"].as_str().expect("name").to_string(),
                e["cat"].as_str().expect("cat").to_string(),
                ns(base, ts),
                (dur * 1000.0).round() as u64,
                e["args"]["batch"].as_u64(),
                e["args"]["sample"].as_u64(),
            )
        })
        .collect();
    let mut want: Vec<_> = evs
        .iter()
        .map(|e| {
            (
                u64::from(e.pid),
                e.name.to_string(),
                e.kind.to_string(),
                e.start,
                e.dur,
                e.batch,
                e.sample,
            )
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);

    // One flow per consumed batch: s inside the batch's span in its
    // worker, f at its consumption in main.
    let pairs = flow_pairs(events);
    let batch_of = |b: u64| {
        evs.iter()
            .find(|e| e.kind == "batch" && e.batch == Some(b))
            .expect("batch")
    };
    let consume_of = |b: u64| {
        evs.iter()
            .find(|e| e.kind == "consume" && e.batch == Some(b))
            .expect("consume")
    };
    let consumed: BTreeSet<u64> = (0..BATCHES).filter(|b| *b != UNCONSUMED_BATCH).collect();
    assert_eq!(pairs.len(), consumed.len());
    let mut seen = BTreeSet::new();
    for (sf, ff) in pairs.values() {
        let b = sf["args"]["batch"].as_u64().expect("batch id on s");
        assert_eq!(ff["args"]["batch"].as_u64(), Some(b));
        assert!(seen.insert(b), "one flow for batch {b}");
        let (batch, consume) = (batch_of(b), consume_of(b));
        assert_eq!(
            sf["pid"].as_u64(),
            Some(u64::from(batch.pid)),
            "s of batch {b} in its worker"
        );
        assert_eq!(
            ff["pid"].as_u64(),
            Some(u64::from(MAIN)),
            "f of batch {b} in main"
        );
        let s_ns = ns(base, sf["ts"].as_f64().expect("ts"));
        assert!(
            batch.start <= s_ns && s_ns < batch.end() && batch.end() - s_ns <= 1,
            "s of batch {b} at the end of its span"
        );
        assert_eq!(ns(base, ff["ts"].as_f64().expect("ts")), consume.start);
        assert_eq!(ff["bp"], "e");
    }
    assert_eq!(seen, consumed);
    assert!(
        stderr.contains(&format!(
            "{} span(s), {} flow(s), 4 process(es)",
            evs.len(),
            consumed.len()
        )),
        "{stderr}"
    );

    // --coarse: batches, waits and consumptions only, the same flows.
    let coarse = tmp.path().join("coarse.json");
    let (c, _) = view(tmp.path(), &coarse, &["--coarse"]);
    let cev = check_format(&c);
    let kept = evs
        .iter()
        .filter(|e| ["batch", "wait", "consume"].contains(&e.kind))
        .count();
    let cx = phase(cev, "X");
    assert_eq!(cx.len(), kept);
    assert!(cx
        .iter()
        .all(|e| ["batch", "wait", "consume"].contains(&e["cat"].as_str().expect("cat"))));
    assert_eq!(flow_pairs(cev).len(), consumed.len());

    // The view written into the trace folder is not read back as a
    // profiler trace.
    let inside = tmp.path().join("trace.json");
    let (again, stderr) = view(tmp.path(), &inside, &[]);
    let (again2, stderr2) = view(tmp.path(), &inside, &[]);
    assert!(!stderr2.contains("PyTorch"), "{stderr} {stderr2}");
    assert_eq!(again["traceEvents"], again2["traceEvents"]);
}

#[test]
fn synthetic_stats_equal_the_tests_own_figures() {
    let tmp = tempfile::tempdir().expect("tmp");
    let evs = synthetic();
    write_logs(tmp.path(), &evs, "node7");
    let v = stats_json(tmp.path());
    assert_eq!(v["events"].as_u64(), Some(evs.len() as u64));
    assert_eq!(v["bad_lines"].as_u64(), Some(0));
    assert_eq!(v["processes"].as_array().expect("processes").len(), 4);

    // Per op name.
    let mut by_op: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for e in evs.iter().filter(|e| e.kind == "op") {
        by_op.entry(e.name).or_default().push(e.dur as i64);
    }
    let ops = v["ops"].as_array().expect("ops");
    assert_eq!(ops.len(), by_op.len());
    for o in ops {
        let name = o["name"].as_str().expect("name");
        check_figures(o, &figures(&by_op[name]), name);
    }
    // Largest total first.
    let totals: Vec<i64> = ops
        .iter()
        .map(|o| o["total_ns"].as_i64().expect("total"))
        .collect();
    assert!(totals.windows(2).all(|w| w[0] >= w[1]), "{totals:?}");

    // Per kind.
    for k in v["kinds"].as_array().expect("kinds") {
        let kind = k["kind"].as_str().expect("kind");
        let d: Vec<i64> = evs
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.dur as i64)
            .collect();
        check_figures(k, &figures(&d), kind);
    }

    // Batches and the IQR rule.
    let batches: Vec<&Ev> = evs.iter().filter(|e| e.kind == "batch").collect();
    let bd: Vec<i64> = batches.iter().map(|e| e.dur as i64).collect();
    check_figures(&v["batches"]["summary"], &figures(&bd), "batches");
    let mut sorted: Vec<f64> = bd.iter().map(|&x| x as f64).collect();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("numbers"));
    let (q1, q3) = (percentile(&sorted, 25.0), percentile(&sorted, 75.0));
    let (lo, hi) = (q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1));
    for (k, w) in [
        ("q1_ns", q1),
        ("q3_ns", q3),
        ("low_fence_ns", lo),
        ("high_fence_ns", hi),
    ] {
        assert!(close(v["batches"][k].as_f64().expect(k), w), "{k}");
    }
    let want_out: BTreeSet<(u64, u64, &str)> = batches
        .iter()
        .filter(|e| (e.dur as f64) < lo || (e.dur as f64) > hi)
        .map(|e| {
            (
                e.batch.expect("id"),
                u64::from(e.pid),
                if (e.dur as f64) > hi { "high" } else { "low" },
            )
        })
        .collect();
    assert!(
        want_out.contains(&(SLOW_BATCH, 902, "high")),
        "the test's data has its slow batch: {want_out:?}"
    );
    let got_out: BTreeSet<(u64, u64, &str)> = v["batches"]["outliers"]
        .as_array()
        .expect("outliers")
        .iter()
        .map(|o| {
            (
                o["batch"].as_u64().expect("b"),
                o["pid"].as_u64().expect("pid"),
                o["side"].as_str().expect("side"),
            )
        })
        .collect();
    assert_eq!(got_out, want_out);

    // Waits in buckets.
    let waits: Vec<&Ev> = evs.iter().filter(|e| e.kind == "wait").collect();
    let bucket = |e: &Ev| match (e.ready, e.dur) {
        (Some(true), _) | (_, 0) => "none",
        (_, d) if d < 1_000_000 => "under_1ms",
        (_, d) if d <= 500_000_000 => "1ms_to_500ms",
        _ => "over_500ms",
    };
    let buckets = v["wait"]["buckets"].as_array().expect("buckets");
    assert_eq!(
        buckets
            .iter()
            .map(|b| b["bucket"].as_str().expect("name"))
            .collect::<Vec<_>>(),
        ["none", "under_1ms", "1ms_to_500ms", "over_500ms"]
    );
    for b in buckets {
        let name = b["bucket"].as_str().expect("name");
        let mine: Vec<&&Ev> = waits.iter().filter(|e| bucket(e) == name).collect();
        assert!(!mine.is_empty(), "the test's data fills bucket {name}");
        assert_eq!(b["count"].as_u64(), Some(mine.len() as u64), "{name}");
        assert_eq!(
            b["total_ns"].as_u64(),
            Some(mine.iter().map(|e| e.dur).sum()),
            "{name}"
        );
        assert!(close(
            b["share"].as_f64().expect("share"),
            mine.len() as f64 / waits.len() as f64
        ));
    }
    check_figures(
        &v["wait"]["summary"],
        &figures(&waits.iter().map(|e| e.dur as i64).collect::<Vec<_>>()),
        "wait",
    );

    // Delay from end of preprocessing to consumption.
    let mut delays = BTreeMap::new();
    for b in batches.iter() {
        if let Some(c) = evs
            .iter()
            .find(|e| e.kind == "consume" && e.batch == b.batch)
        {
            delays.insert(b.batch.expect("id"), c.start as i64 - b.end() as i64);
        }
    }
    check_figures(
        &v["delay"]["summary"],
        &figures(&delays.values().copied().collect::<Vec<_>>()),
        "delay",
    );
    assert_eq!(v["delay"]["unconsumed"].as_u64(), Some(1));
    assert_eq!(v["delay"]["consumed_without_batch"].as_u64(), Some(1));
    let per = v["per_batch"].as_array().expect("per_batch");
    assert_eq!(per.len(), batches.len());
    for row in per {
        let b = row["batch"].as_u64().expect("id");
        let e = batches.iter().find(|e| e.batch == Some(b)).expect("batch");
        assert_eq!(row["pid"].as_u64(), Some(u64::from(e.pid)));
        assert_eq!(row["end_ns"].as_u64(), Some(e.end()));
        assert_eq!(row["delay_ns"].as_i64(), delays.get(&b).copied());
        let w = waits.iter().find(|w| w.batch == Some(b));
        assert_eq!(row["wait_ns"].as_u64(), w.map(|w| w.dur));
        assert_eq!(row["wait_bucket"].as_str(), w.map(|w| bucket(w)));
    }

    // --op-times: each op's total in seconds; the table view prints.
    let times = tmp.path().join("times.csv");
    let table = lotus_ok(&["trace", "stats", s(tmp.path()), "--op-times", s(&times)]);
    assert!(
        table.contains("Batch preprocessing: 12 batch(es)") && table.contains("RandomResizedCrop"),
        "{table}"
    );
    let text = fs::read_to_string(&times).expect("op times");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("op,seconds"));
    let got: BTreeMap<String, f64> = lines
        .map(|l| {
            let (op, t) = l.split_once(',').expect("op,seconds");
            (op.to_string(), t.parse().expect("seconds"))
        })
        .collect();
    let want: BTreeMap<String, f64> = by_op
        .iter()
        .map(|(k, d)| (k.to_string(), d.iter().sum::<i64>() as f64 / 1e9))
        .collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, w) in &want {
        assert!((got[k] - w).abs() < 1e-9, "{k}");
    }
}

#[test]
fn two_machines_merge_into_one_timeline() {
    // The same run on two machines, copied into one folder: same pids.
    let tmp = tempfile::tempdir().expect("tmp");
    let evs = synthetic();
    write_logs(&tmp.path().join("nodeA"), &evs, "nodeA");
    write_logs(&tmp.path().join("nodeB"), &evs, "nodeB");
    let out = tmp.path().join("view.json");
    let (v, _) = view(tmp.path(), &out, &[]);
    let events = check_format(&v);
    assert_eq!(phase(events, "X").len(), 2 * evs.len());
    let names: BTreeMap<u64, String> = phase(events, "M")
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| {
            (
                e["pid"].as_u64().expect("pid"),
                e["args"]["name"].as_str().expect("name").to_string(),
            )
        })
        .collect();
    assert_eq!(
        names.len(),
        8,
        "a track per process of each machine: {names:?}"
    );
    let mains: Vec<u64> = names
        .iter()
        .filter(|(_, n)| n.starts_with("main"))
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(mains.len(), 2);
    // Flows stay within a machine: each f in a main, each s in a worker
    // of the same machine (by the host in the track name, or the folder).
    let pairs = flow_pairs(events);
    assert_eq!(pairs.len(), 2 * 11);
    let machine = |pid: u64| -> String {
        let n = &names[&pid];
        if n.contains("nodeA") {
            "A".into()
        } else if n.contains("nodeB") {
            "B".into()
        } else {
            // Worker 903 has no header: its track pid says which copy.
            if pid == 903 {
                "A".into()
            } else {
                "B".into()
            }
        }
    };
    for (sf, ff) in pairs.values() {
        let (sp, fp) = (
            sf["pid"].as_u64().expect("pid"),
            ff["pid"].as_u64().expect("pid"),
        );
        assert!(mains.contains(&fp), "{ff}");
        assert_eq!(
            machine(sp),
            machine(fp),
            "flow of batch {} stays on one machine",
            sf["args"]["batch"]
        );
    }
    let stats = stats_json(tmp.path());
    assert_eq!(stats["events"].as_u64(), Some(2 * evs.len() as u64));
    assert_eq!(stats["delay"]["summary"]["count"].as_u64(), Some(22));
}

#[test]
fn each_rank_gets_its_own_statistics_and_tracks_in_rank_order() {
    // A two-rank job (the same synthetic run on each rank, a folder each);
    // worker 903's log has no header and belongs to its folder's rank.
    let tmp = tempfile::tempdir().expect("tmp");
    let evs = synthetic();
    write_rank_logs(&tmp.path().join("b"), &evs, "node0", "0");
    write_rank_logs(&tmp.path().join("a"), &evs, "node1", "1");
    let single = tmp.path().join("single");
    write_logs(&single, &evs, "node0");
    let one = stats_json(&single);
    assert_eq!(
        one["ranks"],
        serde_json::json!([]),
        "no rank, no per-rank figures"
    );

    let job = tmp.path().join("job");
    fs::create_dir(&job).expect("mkdir");
    for d in ["a", "b"] {
        fs::rename(tmp.path().join(d), job.join(d)).expect("move");
    }
    let stats = stats_json(&job);
    assert_eq!(stats["events"].as_u64(), Some(2 * evs.len() as u64));
    let ranks = stats["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 2);
    for (r, got) in ranks.iter().enumerate() {
        assert_eq!(got["rank"].as_u64(), Some(r as u64));
        assert_eq!(got["hosts"], serde_json::json!([format!("node{r}")]));
        assert_eq!(got["files"].as_array().expect("files").len(), 4, "{got}");
        // Each rank ran the synthetic run: its figures are that run's.
        for key in ["events", "ops", "kinds", "batches", "wait", "delay"] {
            assert_eq!(got[key], one[key], "rank {r}: {key}");
        }
    }
    let table = lotus_ok(&["trace", "stats", s(&job)]);
    assert!(table.contains("Per rank (2 rank(s)"), "{table}");
    assert!(table.contains("node1"), "{table}");

    // The view: tracks ordered by rank, each rank's main first.
    let (v, _) = view(&job, &tmp.path().join("view.json"), &[]);
    let events = check_format(&v);
    let meta = |name: &str| -> BTreeMap<u64, Value> {
        phase(events, "M")
            .iter()
            .filter(|e| e["name"] == name)
            .map(|e| (e["pid"].as_u64().expect("pid"), e["args"].clone()))
            .collect()
    };
    let (names, sort) = (meta("process_name"), meta("process_sort_index"));
    let mut order: Vec<(i64, String)> = sort
        .iter()
        .map(|(pid, a)| {
            let n = names[pid]["name"].as_str().expect("name").to_string();
            (a["sort_index"].as_i64().expect("sort index"), n)
        })
        .collect();
    order.sort();
    let rank_of = |n: &str| {
        if n.contains("node0") || n.contains("rank 0") {
            0
        } else {
            1
        }
    };
    // Worker 903 (no header) sorts with its folder's rank: it is the last
    // track of rank 0 (folder b) or of rank 1 (folder a).
    let keys: Vec<(i32, bool)> = order
        .iter()
        .map(|(_, n)| (rank_of(n), n.starts_with("worker")))
        .collect();
    assert_eq!(keys.len(), 8, "{order:?}");
    let last_903 = |r: i32| {
        let of_rank: Vec<&(i64, String)> = order
            .iter()
            .filter(|(i, _)| (*i >= 2) == (r == 1))
            .collect();
        of_rank.last().map(|(_, n)| n.starts_with("worker 903")) == Some(true)
    };
    assert!(last_903(0) && last_903(1), "{order:?}");
    let keys: Vec<(i32, bool)> = keys
        .into_iter()
        .zip(&order)
        .filter(|(_, (_, n))| n.contains("rank "))
        .map(|(k, _)| k)
        .collect();
    assert!(keys.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
    assert_eq!(keys.first(), Some(&(0, false)), "{order:?}");
}

#[test]
fn the_original_forks_logs_give_the_expected_stats() {
    let dir = fixture("traces/original");
    let want: Value = serde_json::from_str(
        &fs::read_to_string(dir.join("expected_stats.json")).expect("expected"),
    )
    .expect("json");
    let v = stats_json(&dir);
    assert_eq!(v["events"], want["events"]);
    assert_eq!(v["bad_lines"].as_u64(), Some(0));
    let ops = v["ops"].as_array().expect("ops");
    let want_ops = want["ops"].as_object().expect("ops");
    assert_eq!(ops.len(), want_ops.len());
    let as_map = |w: &Value| -> BTreeMap<&'static str, f64> {
        [
            "count", "total_ns", "mean_ns", "p50_ns", "p95_ns", "p99_ns", "std_ns", "min_ns",
            "max_ns",
        ]
        .into_iter()
        .map(|k| (k, w[k].as_f64().expect(k)))
        .collect()
    };
    for o in ops {
        let name = o["name"].as_str().expect("name");
        check_figures(o, &as_map(&want_ops[name]), name);
    }
    check_figures(
        &v["batches"]["summary"],
        &as_map(&want["batches"]["summary"]),
        "batches",
    );
    for k in ["q1_ns", "q3_ns", "low_fence_ns", "high_fence_ns"] {
        assert!(
            close(
                v["batches"][k].as_f64().expect(k),
                want["batches"][k].as_f64().expect(k)
            ),
            "{k}"
        );
    }
    let outliers = |x: &Value| -> BTreeSet<(u64, u64, String)> {
        x.as_array()
            .expect("outliers")
            .iter()
            .map(|o| {
                (
                    o["batch"].as_u64().expect("b"),
                    o["pid"].as_u64().expect("p"),
                    o["side"].as_str().expect("s").to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        outliers(&v["batches"]["outliers"]),
        outliers(&want["batches"]["outliers"])
    );
    check_figures(
        &v["wait"]["summary"],
        &as_map(&want["wait"]["summary"]),
        "wait",
    );
    for b in v["wait"]["buckets"].as_array().expect("buckets") {
        let name = b["bucket"].as_str().expect("bucket");
        assert_eq!(b["count"], want["wait"]["buckets"][name], "{name}");
    }
    check_figures(
        &v["delay"]["summary"],
        &as_map(&want["delay"]["summary"]),
        "delay",
    );
    for row in v["per_batch"].as_array().expect("per_batch") {
        let b = row["batch"].as_u64().expect("id").to_string();
        assert_eq!(row["delay_ns"], want["delay"]["per_batch"][&b], "batch {b}");
        assert_eq!(row["pid"], want["batch_worker"][&b], "batch {b}");
    }

    // The view: every line a span, a flow per batch from its worker to main.
    let tmp = tempfile::tempdir().expect("tmp");
    let (view_json, _) = view(&dir, &tmp.path().join("v.json"), &[]);
    let events = check_format(&view_json);
    assert_eq!(
        phase(events, "X").len() as u64,
        want["events"].as_u64().expect("n")
    );
    let pairs = flow_pairs(events);
    assert_eq!(pairs.len(), 6);
    for (sf, ff) in pairs.values() {
        let b = sf["args"]["batch"].as_u64().expect("b").to_string();
        assert_eq!(sf["pid"], want["batch_worker"][&b]);
        assert_eq!(ff["pid"], want["main_pid"]);
    }
}

#[test]
fn garbled_lines_are_reported_with_file_and_line_and_skipped() {
    let dir = fixture("traces/broken");
    let want: Value =
        serde_json::from_str(&fs::read_to_string(dir.join("expected.json")).expect("expected"))
            .expect("json");
    let tmp = tempfile::tempdir().expect("tmp");
    let (v, stderr) = view(&dir, &tmp.path().join("v.json"), &[]);
    let bad = want["bad_lines"].as_array().expect("bad");
    for b in bad {
        let b = b.as_str().expect("line");
        let shown = format!(
            "{}: {}",
            dir.join(b.split(": ").next().expect("file:line")).display(),
            &b[b.find(": ").expect(": ") + 2..]
        );
        assert!(stderr.contains(&shown), "stderr names {shown}:\n{stderr}");
    }
    assert_eq!(
        stderr.matches("lotus: warning:").count(),
        bad.len(),
        "{stderr}"
    );
    // The rest of the trace still shows.
    let events = check_format(&v);
    let mut per_pid: BTreeMap<String, u64> = BTreeMap::new();
    for e in phase(events, "X") {
        *per_pid.entry(e["pid"].to_string()).or_default() += 1;
    }
    let want_pid: BTreeMap<String, u64> = want["events_by_pid"]
        .as_object()
        .expect("by pid")
        .iter()
        .map(|(k, n)| (k.clone(), n.as_u64().expect("n")))
        .collect();
    assert_eq!(per_pid, want_pid);
    assert_eq!(
        flow_pairs(events).len() as u64,
        want["flows"].as_u64().expect("flows")
    );
    let stats = stats_json(&dir);
    assert_eq!(stats["events"], want["events"]);
    assert_eq!(stats["bad_lines"].as_u64(), Some(bad.len() as u64));
    assert_eq!(
        stats["warnings"].as_array().expect("warnings").len(),
        bad.len()
    );

    // A log cut mid-line by a crash, in a trace written here.
    let cut = tmp.path().join("cut");
    fs::create_dir(&cut).expect("mkdir");
    fs::write(
        cut.join("x_main_pid_1"),
        "SWait,100,5,kind=wait,batch=0\nSConsume,200,0,kind=consume,batch=0\n",
    )
    .expect("w");
    fs::write(
        cut.join("x_worker_pid_2"),
        "SBatch,10,50,kind=batch,batch=0\nSLoader,6",
    )
    .expect("w");
    let o = lotus(&["trace", "stats", s(&cut), "--json"]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{}:2: truncated line",
            cut.join("x_worker_pid_2").display()
        )),
        "{err}"
    );
    let st: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(st["events"].as_u64(), Some(3));
    assert_eq!(st["delay"]["summary"]["min_ns"].as_i64(), Some(140));

    // Nothing readable at all, or no logs: an error that says so.
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).expect("mkdir");
    let e = lotus_fails(&["trace", "stats", s(&empty)]);
    assert!(e.contains("no trace logs"), "{e}");
    // Neither logs nor samples: the view is refused, nothing written (a
    // folder of samples alone gets spans from them: tests/trace_attach.rs).
    let view_out = tmp.path().join("e.json");
    let e = lotus_fails(&["trace", "view", s(&empty), "--out", s(&view_out)]);
    assert!(e.contains("no trace logs"), "{e}");
    assert!(!view_out.exists());
    fs::write(empty.join("x_main_pid_3"), "garbage\n").expect("w");
    let e = lotus_fails(&[
        "trace",
        "view",
        s(&empty),
        "--out",
        s(&tmp.path().join("e.json")),
    ]);
    assert!(
        e.contains("no readable events") && e.contains("x_main_pid_3:1"),
        "{e}"
    );
}

#[test]
fn a_pytorch_profiler_trace_is_merged_in_time() {
    let dir = fixture("traces/with_torch");
    let tmp = tempfile::tempdir().expect("tmp");
    let (v, stderr) = view(&dir, &tmp.path().join("v.json"), &[]);
    let events = check_format(&v);
    let base = v["baseTimeNanoseconds"].as_u64().expect("base");

    // Expected wall-clock times, read from the fixture files: Kineto's ts
    // is µs after baseTimeNanoseconds; the old trace's is µs since 1970.
    let kineto: Value = serde_json::from_str(
        &fs::read_to_string(dir.join("gpu1_6000.1700000000.pt.trace.json")).expect("r"),
    )
    .expect("json");
    let old: Value = serde_json::from_str(
        &fs::read_to_string(dir.join("rank1/old_profiler_trace.json")).expect("r"),
    )
    .expect("json");
    let kbase = kineto["baseTimeNanoseconds"].as_u64().expect("base") as i128;
    // µs (f64, exact in the JSON) to ns without losing the fraction.
    let us_to_ns =
        |ts: f64| ts.trunc() as i128 * 1000 + ((ts - ts.trunc()) * 1000.0).round() as i128;
    let mut want: Vec<(String, String, i128)> = Vec::new();
    let key = |e: &Value| {
        (
            e["name"].as_str().expect("n").to_string(),
            e["ph"].as_str().expect("ph").to_string(),
        )
    };
    for e in kineto["traceEvents"].as_array().expect("events") {
        if e["ph"] != "M" {
            let (n, ph) = key(e);
            want.push((n, ph, kbase + us_to_ns(e["ts"].as_f64().expect("ts"))));
        }
    }
    for e in old["traceEvents"].as_array().expect("events") {
        let (n, ph) = key(e);
        want.push((n, ph, us_to_ns(e["ts"].as_f64().expect("ts"))));
    }
    let lotus_start: u64 = fs::read_to_string(dir.join("lotus_worker_pid_6001"))
        .expect("r")
        .lines()
        .filter(|l| l.starts_with('S'))
        .map(|l| {
            l.split(',')
                .nth(1)
                .expect("start")
                .parse::<u64>()
                .expect("ns")
        })
        .min()
        .expect("events");
    let first = want
        .iter()
        .map(|(_, _, t)| *t)
        .min()
        .expect("torch")
        .min(i128::from(lotus_start));
    assert_eq!(
        i128::from(base),
        first,
        "the view starts at the earliest event of either trace"
    );
    for (name, ph, at) in &want {
        let e = events
            .iter()
            .find(|e| {
                e["name"] == name.as_str() && e["ph"] == ph.as_str() && e["cat"] != "lotus.flow"
            })
            .unwrap_or_else(|| panic!("{name} {ph} merged"));
        let got = i128::from(base) + us_to_ns(e["ts"].as_f64().expect("ts"));
        assert_eq!(got, *at, "{name}");
    }
    // Lotus names the tracks of its own processes; the profiler's GPU
    // process keeps its pid.
    let names: Vec<(u64, String)> = phase(events, "M")
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| {
            (
                e["pid"].as_u64().expect("pid"),
                e["args"]["name"].as_str().expect("n").to_string(),
            )
        })
        .collect();
    assert!(
        names.contains(&(6000, "main 6000 (host gpu1, rank 0)".to_string())),
        "{names:?}"
    );
    assert!(!names.iter().any(|(_, n)| n == "python3"), "{names:?}");
    assert!(events
        .iter()
        .any(|e| e["name"] == "volta_sgemm" && e["pid"] == 0));
    assert!(
        stderr.contains("2 PyTorch profiler trace(s) merged"),
        "{stderr}"
    );
    assert_eq!(flow_pairs(events).len(), 1);

    // --no-torch leaves them out.
    let (nt, _) = view(&dir, &tmp.path().join("nt.json"), &["--no-torch"]);
    let nev = check_format(&nt);
    assert!(!nev.iter().any(|e| e["name"] == "aten::conv2d"));
    assert_eq!(nt["baseTimeNanoseconds"].as_u64(), Some(lotus_start));
}

#[test]
fn attribute_reads_op_times_from_a_trace_folder() {
    let tmp = tempfile::tempdir().expect("tmp");
    // Loader ops total 3 s, RandomResizedCrop 1 s.
    let trace = tmp.path().join("trace");
    fs::create_dir(&trace).expect("mkdir");
    let mut w = String::from("#lotus-trace v1 role=worker pid=21 host=h rank=-\n");
    let mut t = T0;
    for (name, dur) in [
        ("Loader", 1_000_000_000u64),
        ("RandomResizedCrop", 250_000_000),
        ("Loader", 2_000_000_000),
        ("RandomResizedCrop", 750_000_000),
    ] {
        w += &format!("S{name},{t},{dur},kind=op,batch=0\n");
        t += dur;
    }
    w += &format!(
        "SBatch,{T0},{},kind=batch,batch=0\nSSample,{T0},5,kind=sample\n",
        t - T0
    );
    fs::write(trace.join("lotus_worker_pid_21"), w).expect("w");
    fs::write(
        trace.join("lotus_main_pid_20"),
        format!("SConsume,{t},0,kind=consume,batch=0\n"),
    )
    .expect("w");

    let mapping = tmp.path().join("mapping_funcs.json");
    fs::write(
        &mapping,
        r#"{"op_to_func": {"Loader": ["decode_mcu|libjpeg.so.9", "memcpy|libc.so.6"],
                          "RandomResizedCrop": ["resample|_imaging.so", "memcpy|libc.so.6"]},
            "common_funcs_to_op": {"memcpy|libc.so.6": ["Loader", "RandomResizedCrop"]}}"#,
    )
    .expect("w");
    let profile = tmp.path().join("profile.json");
    fs::write(
        &profile,
        r#"{"schema": "lotus.profile/1", "backend": "perf", "unit": "seconds", "rows": [
            {"function": "decode_mcu", "module": "libjpeg.so.9", "value": 10.0},
            {"function": "resample", "module": "_imaging.so", "value": 4.0},
            {"function": "memcpy", "module": "libc.so.6", "value": 6.0},
            {"function": "main_loop", "module": "python3", "value": 2.0}]}"#,
    )
    .expect("w");
    let attribute = |times: &Path| -> Value {
        serde_json::from_str(&lotus_ok(&[
            "attribute",
            "--format",
            "json",
            "--mapping",
            s(&mapping),
            "--profile",
            s(&profile),
            "--op-times",
            s(times),
        ]))
        .expect("json")
    };
    let a = attribute(&trace);
    // memcpy (6 s) splits 3 : 1 by the ops' trace times.
    let ops: BTreeMap<String, f64> = a["profiles"][0]["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|o| {
            (
                o["op"].as_str().expect("op").to_string(),
                o["cpu_time_s"].as_f64().expect("s"),
            )
        })
        .collect();
    assert!((ops["Loader"] - 14.5).abs() < 1e-9, "{ops:?}");
    assert!((ops["RandomResizedCrop"] - 5.5).abs() < 1e-9, "{ops:?}");
    assert!((ops["(unexplained)"] - 2.0).abs() < 1e-9, "{ops:?}");
    assert_eq!(a["split"], format!("by op time from {}", s(&trace)));

    // The same through `lotus trace stats --op-times`.
    let csv = tmp.path().join("op_times.csv");
    lotus_ok(&["trace", "stats", s(&trace), "--op-times", s(&csv)]);
    let b = attribute(&csv);
    assert_eq!(a["profiles"][0]["ops"], b["profiles"][0]["ops"]);

    // A folder with neither logs nor op_times.csv.
    let none = tmp.path().join("none");
    fs::create_dir(&none).expect("mkdir");
    let e = lotus_fails(&[
        "attribute",
        "--mapping",
        s(&mapping),
        "--profile",
        s(&profile),
        "--op-times",
        s(&none),
    ]);
    assert!(e.contains("has none; give a CSV of op,seconds"), "{e}");
}

#[test]
fn view_needs_out_and_a_trace() {
    let e = lotus_fails(&[
        "trace",
        "view",
        "/nonexistent/trace",
        "--out",
        "/tmp/x.json",
    ]);
    assert!(e.contains("/nonexistent/trace"), "{e}");
    let help = lotus_ok(&["trace", "--help"]);
    assert!(help.contains("view") && help.contains("stats"), "{help}");
}

#[test]
fn spilling_to_disk_changes_nothing_and_leaves_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let trace = tmp.path().join("trace");
    let evs = synthetic();
    // Three runs: more batches, waits and consumptions than a buffer of
    // 16 records holds.
    for run in 0..3 {
        let dir = trace.join(format!("run{run}"));
        fs::create_dir_all(&dir).expect("mkdir");
        write_logs(&dir, &evs, &format!("node{run}"));
    }
    let spill = tmp.path().join("spill");
    fs::create_dir(&spill).expect("mkdir");
    let missing = tmp.path().join("no-such-folder");
    let run = |args: &[&str], budget: Option<&str>, tmpdir: &Path| {
        let mut env: Vec<(&str, &std::ffi::OsStr)> = vec![("TMPDIR", tmpdir.as_os_str())];
        if let Some(b) = budget {
            env.push(("LOTUS_SORT_BUFFER", std::ffi::OsStr::new(b)));
        }
        common::lotus_env(args, &env)
    };
    let stats = ["trace", "stats", s(&trace), "--json"];
    let in_memory = run(&stats, None, &spill);
    assert!(in_memory.status.success());
    // 1 byte: 16 records per sort buffer, so every sort and spool of this
    // trace goes through temporary files.
    let on_disk = run(&stats, Some("1"), &spill);
    assert!(
        on_disk.status.success(),
        "{}",
        String::from_utf8_lossy(&on_disk.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&in_memory.stdout),
        String::from_utf8_lossy(&on_disk.stdout)
    );
    let v: Value = serde_json::from_slice(&on_disk.stdout).expect("JSON");
    assert!(
        v["per_batch"].as_array().expect("per_batch").len() > 16,
        "more batches than one buffer holds"
    );

    let (mem_view, disk_view) = (tmp.path().join("mem.json"), tmp.path().join("disk.json"));
    for (out, budget) in [(&mem_view, None), (&disk_view, Some("1"))] {
        let o = run(
            &["trace", "view", s(&trace), "--out", s(out)],
            budget,
            &spill,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(
        fs::read(&mem_view).expect("view"),
        fs::read(&disk_view).expect("view")
    );
    // The temporary files were unlinked when made: nothing is left.
    assert_eq!(fs::read_dir(&spill).expect("spill dir").count(), 0);

    // The disk was really used: without a temporary folder the tiny budget
    // fails, clearly, while the default budget never needs one here.
    assert!(run(&stats, None, &missing).status.success());
    let failed = run(&stats, Some("1"), &missing);
    let e = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{e}");
    assert!(
        e.contains("temporary file") && e.contains("TMPDIR") && !e.contains("panicked"),
        "{e}"
    );
    // A failed view leaves the good one as it was.
    let before = fs::read(&mem_view).expect("view");
    let failed = run(
        &["trace", "view", s(&trace), "--out", s(&mem_view)],
        Some("1"),
        &missing,
    );
    assert_eq!(failed.status.code(), Some(1));
    assert_eq!(fs::read(&mem_view).expect("view"), before);

    // A budget that is not a number is named.
    let bad = run(&stats, Some("lots"), &spill);
    let e = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{e}");
    assert!(e.contains("LOTUS_SORT_BUFFER=\"lots\""), "{e}");
}

/// A folder whose samples cannot be credited (logs without clock pairs,
/// as an older lotus wrote them) is viewed as it would be without them,
/// and lotus says why they are left out.
#[test]
fn samples_that_cannot_be_credited_leave_the_view_as_it_was() {
    use lotus_samples::{write_sampling, Sample, SampleFiles, SampleSink};
    use lotus_samples::{SamplesWriter, Symbol};
    let tmp = tempfile::tempdir().expect("tmp");
    let trace = tmp.path().join("trace");
    write_logs(&trace, &synthetic(), "");
    let (plain, _) = view(&trace, &tmp.path().join("plain.json"), &[]);
    let mut w = SamplesWriter::create(&trace, "lotus").expect("samples");
    w.symbols(&[(0, Symbol::new("k", "/k.so"))])
        .expect("symbols");
    w.samples(&[Sample {
        time_ns: 1,
        pid: WORKERS[0],
        tid: WORKERS[0],
        symbol: 0,
        kernel: false,
        counters: Default::default(),
    }])
    .expect("samples");
    w.finish().expect("finish");
    write_sampling(
        &SampleFiles::of(&trace, "lotus").sampling,
        &[("status", "complete".into())],
    )
    .expect("sampling");
    let (with, stderr) = view(&trace, &tmp.path().join("with.json"), &[]);
    assert!(
        stderr.contains("left out of the view") && stderr.contains("no clock pairs"),
        "{stderr}"
    );
    assert_eq!(with["traceEvents"], plain["traceEvents"]);
    assert!(
        with["otherData"].get("samples").is_none(),
        "{}",
        with["otherData"]
    );
}

/// A span the log says ran on another thread (`tid=`) is drawn on that
/// thread's track, the others on the process's: two threads' spans that
/// overlap in time would not nest on one track.
#[test]
fn spans_of_other_threads_get_their_own_tracks() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    std::fs::create_dir(&dir).expect("dir");
    let base = 1_700_000_000_000_000_000u64;
    std::fs::write(
        dir.join("lotus_worker_pid_77"),
        format!(
            "#lotus-trace v1 role=worker pid=77\n\
             SMainOp,{},1000000,kind=op\n\
             SThreadOp,{},1000000,kind=op,tid=78\n\
             SOwnTid,{},10,kind=op,tid=77\n",
            base,
            base + 500_000,
            base + 2_000_000
        ),
    )
    .expect("log");
    let out = tmp.path().join("view.json");
    let (v, _) = view(&dir, &out, &[]);
    let tracks: BTreeMap<String, (u64, u64)> = v["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            (
                e["name"].as_str().expect("name").to_string(),
                (
                    e["pid"].as_u64().expect("pid"),
                    e["tid"].as_u64().expect("tid"),
                ),
            )
        })
        .collect();
    assert_eq!(tracks["MainOp"], (77, 77), "{tracks:?}");
    assert_eq!(tracks["ThreadOp"], (77, 78), "{tracks:?}");
    assert_eq!(tracks["OwnTid"], (77, 77), "{tracks:?}");
}
