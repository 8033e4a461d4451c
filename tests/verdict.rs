//! The verdict (`lotus_attribute`) at the head of `lotus attribute DIR`
//! and `lotus trace stats`: the share of the training loop spent waiting
//! for data, checked against the loop's own timer on the pipeline of
//! tests/attribute_torch.rs; with it, on the same run, the op rows' wall
//! time beside their CPU and the main process's rows split by phase.
//!
//! Torch: see tests/common/torch.rs (skipped by name without torch, a
//! failure with LOTUS_REQUIRE_TORCH=1).

use crate::common;

use std::ffi::OsStr;

use crate::common::sampled::{attribute, attribute_json};
use crate::common::torch::torch_python;
use crate::common::trace_logs::{assert_ok, trace_run};
use serde_json::Value;

/// The main-process rows outside every op, in the order they come.
const MAIN_ROWS: [&str; 3] = [
    "start-up and imports (main)",
    "training loop, outside the DataLoader (main)",
    "after the last batch (main)",
];

/// The pipeline of tests/attribute_torch.rs (JPEGs through
/// RandomResizedCrop, RandomHorizontalFlip, ToTensor and Normalize, two
/// forked workers, three epochs, a model step in the main process),
/// sampled, with the main loop timing itself (`--loop-timer`): the
/// verdict's waiting share, from `attribute` and from `trace stats`,
/// within 5 points of the loop's own (wall time in `next(loader)` over
/// the loop's wall time, both in this one run of the loop).
#[test]
fn verdict_waiting_share_matches_the_main_loops_own_timer() {
    let Some(py) = torch_python("verdict_waiting_share_matches_the_main_loops_own_timer") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let data = tmp.path().join("data");
    let timer = tmp.path().join("loop.json");
    let mut args = common::torch::jpeg_pipeline_args(&data, 3);
    args.extend(["--start-method", "fork", "--model", "--loop-timer"].map(Into::into));
    args.push(timer.clone().into_os_string());
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let out = trace_run(&dir, &["--sample", "-F", "2000"], &py, &args);
    assert_ok(&out, "trace run --sample");
    let own: Value =
        serde_json::from_slice(&std::fs::read(&timer).expect("loop timer")).expect("timer JSON");
    let own_share = own["wait_ns"].as_f64().expect("wait") / own["loop_ns"].as_f64().expect("loop");
    assert_eq!(own["batches"], 48, "{own}");

    // attribute DIR: the verdict, from the logs, with CPU facts.
    let a = attribute_json(&dir);
    let v = &a["verdict"];
    let share = v["waiting_share"]
        .as_f64()
        .unwrap_or_else(|| panic!("{v:#}"));
    let summary = format!(
        "verdict {:.1}%, the loop's own timer {:.1}% (loop {:.0} ms by the verdict, {:.0} ms by the timer)\n{v:#}",
        share * 100.0,
        own_share * 100.0,
        v["loop_ns"].as_f64().unwrap_or(0.0) / 1e6,
        own["loop_ns"].as_f64().unwrap_or(0.0) / 1e6
    );
    eprintln!("{summary}");
    assert!(
        (share - own_share).abs() <= 0.05,
        "waiting share off by more than 5 points: {summary}"
    );
    // The waiting itself, beside the share: the trace's waits are the
    // loop's `next()` calls, which begin where the loop's timer starts.
    // The tracer once read the process's CPU clock before it took a wait's
    // start, and the kernel, asked for that clock, could take the CPU from
    // the loop there for milliseconds: the waits came out 10-16% short.
    let own_wait = own["wait_ns"].as_f64().expect("wait");
    let wait = share * v["loop_ns"].as_f64().expect("loop_ns");
    let longest: Vec<u64> = {
        let mut each: Vec<u64> = own["each_wait_ns"]
            .as_array()
            .expect("each_wait_ns")
            .iter()
            .map(|w| w.as_u64().expect("ns") / 1000)
            .collect();
        each.sort_unstable_by(|a, b| b.cmp(a));
        each.truncate(5);
        each
    };
    assert!(
        (wait - own_wait).abs() <= 0.04 * own_wait,
        "the trace's waits, {:.1} ms, are not within 4% of the loop's own, {:.1} ms \
         (its longest next() calls, us: {longest:?}): {summary}",
        wait / 1e6,
        own_wait / 1e6
    );
    assert_eq!(v["workers"], 2, "{v:#}");
    let busy = v["worker_busy_share"].as_f64().expect("busy");
    assert!((0.0..=1.0).contains(&busy), "{v:#}");
    assert!(
        v["heaviest_op"]["basis"] == "cpu_sampled" && v["heaviest_op"]["name"].is_string(),
        "{v:#}"
    );
    assert!(!v["advice"].as_array().expect("advice").is_empty(), "{v:#}");

    // trace stats DIR: the same loop, the same share.
    let stats: Value = serde_json::from_str(&common::lotus_ok(&[
        "trace",
        "stats",
        dir.to_str().expect("utf8"),
        "--json",
    ]))
    .expect("stats JSON");
    let s = stats["verdict"]["waiting_share"]
        .as_f64()
        .expect("stats share");
    assert!((s - share).abs() < 1e-9, "{s} vs {share}");
    assert_eq!(stats["verdict"]["heaviest_op"]["basis"], "cpu_sampled");

    let rows = a["rows"].as_array().expect("rows");
    // Wall beside CPU: the loader decodes on its worker's thread only, so
    // its wall time (its spans' durations) holds its CPU time.
    for r in rows.iter().filter(|r| r["kind"] == "op") {
        assert!(r["wall_ns"].as_u64().is_some(), "{r:#}");
    }
    let loader = rows
        .iter()
        .find(|r| r["name"] == "Loader")
        .expect("Loader row");
    let (wall, cpu) = (
        loader["wall_ns"].as_u64().expect("wall"),
        loader["inclusive_cpu_ns"].as_u64().expect("cpu"),
    );
    assert!(
        loader["cpu_source"] == "exact" && wall >= cpu && cpu > 0,
        "Loader: wall {wall} ns, CPU {cpu} ns: {loader:#}"
    );

    // The main process's rows: split by phase, after every op row, adding
    // up with the others to every sample.
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    assert!(!names.contains(&"outside any op (main)"), "{names:?}");
    let at = |n: &str| names.iter().position(|x| *x == n);
    let last_op = rows.iter().rposition(|r| r["kind"] == "op").expect("ops");
    for n in &MAIN_ROWS[..2] {
        let i = at(n).unwrap_or_else(|| panic!("no row {n}: {names:?}"));
        assert!(i > last_op, "{n} before an op: {names:?}");
        assert!(rows[i]["samples"].as_u64().expect("samples") > 0, "{n}");
    }
    assert!(at(MAIN_ROWS[0]) < at(MAIN_ROWS[1]), "{names:?}");
    let sum: u64 = rows.iter().map(|r| r["samples"].as_u64().expect("n")).sum();
    assert_eq!(sum, a["total_samples"].as_u64().expect("total"));

    // The table: the verdict first, then a wall column beside CPU.
    let text = String::from_utf8(attribute(&dir, "table").stdout).expect("utf8");
    assert!(
        text.starts_with("verdict: training waited for data"),
        "{text}"
    );
    assert!(text.contains("what would help: "), "{text}");
    assert!(text.contains("wall ms"), "{text}");
    // (The row's name wraps in its cell where the table is narrow.)
    assert!(text.contains("training loop, outside"), "{text}");
    let md = String::from_utf8(attribute(&dir, "md").stdout).expect("utf8");
    assert!(
        md.starts_with("- **verdict**: training waited for data"),
        "{md}"
    );
}

/// A trace without samples: `trace stats` says the verdict from the logs
/// alone, first in its text and as `verdict` in its JSON. The main
/// process waits 600 of its 1000 ms loop, its two workers are busy all of
/// their time: the model's advice, the op of most time taken out first.
#[test]
fn trace_stats_says_the_verdict_from_the_logs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ms = 1_000_000u64;
    let t0 = 1_700_000_000_000_000_000u64;
    let mut main = String::from("#lotus-trace v1 role=main pid=1\n");
    // Batches b at 200 ms apart: a wait of 120 ms, then the step.
    for b in 0..5u64 {
        let start = t0 + b * 200 * ms;
        main += &format!("SWait,{start},{},kind=wait,batch={b},ready=0\n", 120 * ms);
        main += &format!("SConsume,{},0,kind=consume,batch={b}\n", start + 120 * ms);
    }
    std::fs::write(tmp.path().join("lotus_main_pid_1"), main).expect("main");
    for (pid, batches) in [(2u32, [0u64, 2, 4]), (3, [1, 3, 5])] {
        let mut log = format!("#lotus-trace v1 role=worker pid={pid}\n");
        for (k, b) in batches.into_iter().enumerate() {
            let start = t0 + (k as u64) * 400 * ms - 100 * ms + u64::from(pid - 2) * 200 * ms;
            log += &format!("SDecode,{start},{},kind=op,batch={b}\n", 300 * ms);
            log += &format!(
                "SFlip,{},{},kind=op,batch={b}\n",
                start + 300 * ms,
                100 * ms
            );
            log += &format!("SBatch,{start},{},kind=batch,batch={b}\n", 400 * ms);
        }
        std::fs::write(tmp.path().join(format!("lotus_worker_pid_{pid}")), log).expect("worker");
    }
    let d = tmp.path().to_str().expect("utf8");
    let stats: Value =
        serde_json::from_str(&common::lotus_ok(&["trace", "stats", d, "--json"])).expect("JSON");
    let v = &stats["verdict"];
    // The loop: the first wait's start to the last batch taken, 920 ms.
    assert_eq!(v["loop_ns"], 920 * ms, "{v:#}");
    assert_eq!(v["wait_ns"], 600 * ms, "{v:#}");
    assert_eq!(v["workers"], 2, "{v:#}");
    assert!(
        v["worker_busy_share"].as_f64().expect("busy") > 0.99,
        "{v:#}"
    );
    assert_eq!(v["heaviest_op"]["name"], "Decode", "{v:#}");
    assert_eq!(v["heaviest_op"]["basis"], "wall_spans", "{v:#}");
    let rules: Vec<&str> = v["advice"]
        .as_array()
        .expect("advice")
        .iter()
        .map(|a| a["rule"].as_str().expect("rule"))
        .collect();
    // The advice is the model's predictions (lotus predict): taking
    // Decode (300 of each batch's 400 ms) out comes first.
    assert_eq!(rules.first(), Some(&"predicted"), "{rules:?}");
    assert!(
        v["advice"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("--without Decode: the loop 0.9 s -> ")),
        "{v:#}"
    );
    let text = common::lotus_ok(&["trace", "stats", d]);
    assert!(
        text.starts_with("verdict: training waited for data 65% of its loop"),
        "{text}"
    );
    assert!(
        text.contains("what would help: --without Decode: the loop"),
        "{text}"
    );
}
