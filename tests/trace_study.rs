//! `lotus trace stats` against the original study's own analyses
//! (rajveerb/lotus, `code/image_classification/analysis/
//! LotusTrace_imagenet_vary_batch_and_gpu/`): its `--remove_outliers` rule
//! (`preprocessing_time_stats.py`), its delay shares
//! (`delay_and_wait_time_stats_and_plot.py`) and its comparison of
//! configurations (`iqr_and_stddev_preprocessing_time_stats.py`). The logs
//! are written here in the study's own three-column format, and every
//! expectation is computed here from those raw lines with the scripts'
//! definitions (durations in ms, pandas/numpy linear quantiles, `np.std`
//! with ddof=0), not with lotus's code.

use std::fs;
use std::path::Path;

use crate::common::trace_check::{close, percentile};
use crate::common::{lotus_fails, lotus_ok, lotus_usage_error, s};
use serde_json::Value;

/// A small deterministic generator.
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, m: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % m
    }
}

const T0: u64 = 1_700_000_000_000_000_000;
const MS: u64 = 1_000_000;

/// Writes one configuration's logs in the study's format (two workers, a
/// main process): `batches` batches of about `base_ms`, two far below
/// (small last batches) and two far above; returns nothing, the test
/// reads the files back as the study's scripts do.
fn write_config(dir: &Path, seed: u64, batches: u64, base_ms: u64) {
    fs::create_dir_all(dir).expect("mkdir");
    let mut r = Lcg(seed);
    let mut workers: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let mut main = Vec::new();
    for b in 0..batches {
        let w = (b % 2) as usize;
        let start = T0 + b * 300 * MS + r.below(MS);
        let dur = match b {
            3 => base_ms * MS / 20 + r.below(MS),
            11 => base_ms * MS / 12 + r.below(MS),
            5 => base_ms * MS * 5 + r.below(MS),
            17 => base_ms * MS * 4 + r.below(MS),
            _ => base_ms * MS + r.below(base_ms * MS / 3),
        };
        workers[w].push(format!("SLoader,{},{}", start, dur / 3));
        workers[w].push(format!("SBatchPreprocessed_{b},{start},{dur}"));
        // Consumed 50 to 800 ms after its end: both delay shares non-empty.
        let consumed = start + dur + 50 * MS + r.below(750 * MS);
        let wait = if b % 4 == 0 {
            1000
        } else {
            r.below(30 * MS) + 1
        };
        main.push(format!("SBatchWait_{b},{},{wait}", consumed - wait));
        main.push(format!("SBatchConsumed_{b},{consumed},0"));
    }
    for (i, lines) in workers.iter().enumerate() {
        fs::write(
            dir.join(format!("lotustrace_log_worker_pid_{}", 500 + i)),
            lines.join("\n") + "\n",
        )
        .expect("write");
    }
    fs::write(
        dir.join("lotustrace_log_main_pid_499"),
        main.join("\n") + "\n",
    )
    .expect("write");
}

/// The study's reading: `(name, start_ts, duration)` of every line of the
/// files whose name holds `which` (`worker_pid` or `main_pid`).
fn read_study(dir: &Path, which: &str) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).expect("dir") {
        let p = e.expect("entry").path();
        if !p
            .file_name()
            .expect("name")
            .to_string_lossy()
            .contains(which)
        {
            continue;
        }
        for line in fs::read_to_string(&p).expect("read").lines() {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), 3, "{line}");
            out.push((
                f[0].to_string(),
                f[1].trim().parse().expect("ts"),
                f[2].trim().parse().expect("dur"),
            ));
        }
    }
    out
}

/// Batch id and duration in ms (the study divides by 1e6) of every
/// `SBatchPreprocessed_<id>` line.
fn study_batches(dir: &Path) -> Vec<(u64, f64)> {
    read_study(dir, "worker_pid")
        .into_iter()
        .filter_map(|(n, _, d)| {
            let id = n.strip_prefix("SBatchPreprocessed_")?;
            Some((id.parse().expect("id"), d as f64 / 1e6))
        })
        .collect()
}

/// The figures `log_stats_to_file` logs, in ms.
struct StudyFigures {
    count: usize,
    sum: f64,
    mean: f64,
    std: f64,
    min: f64,
    max: f64,
    median: f64,
    p25: f64,
    p75: f64,
}

fn study_figures(durations: &[f64]) -> StudyFigures {
    let mut v = durations.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("numbers"));
    let n = v.len() as f64;
    let sum: f64 = v.iter().sum();
    let mean = sum / n;
    let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    StudyFigures {
        count: v.len(),
        sum,
        mean,
        std,
        min: v[0],
        max: v[v.len() - 1],
        median: percentile(&v, 50.0),
        p25: percentile(&v, 25.0),
        p75: percentile(&v, 75.0),
    }
}

/// `remove_wild_outliers`: the fence `q1 - (q3 - q1) * 2` (pandas
/// quantiles) and the durations not below it.
fn study_remove(durations: &[(u64, f64)]) -> (f64, Vec<u64>, Vec<f64>) {
    let mut v: Vec<f64> = durations.iter().map(|d| d.1).collect();
    v.sort_by(|a, b| a.partial_cmp(b).expect("numbers"));
    let (q1, q3) = (percentile(&v, 25.0), percentile(&v, 75.0));
    let fence = q1 - (q3 - q1) * 2.0;
    let mut removed: Vec<u64> = durations
        .iter()
        .filter(|d| d.1 < fence)
        .map(|d| d.0)
        .collect();
    removed.sort_unstable();
    let kept = durations
        .iter()
        // `~(duration < fence)`, as the script writes it: the same for numbers.
        .filter(|d| d.1 >= fence)
        .map(|d| d.1)
        .collect();
    (fence, removed, kept)
}

/// `ns` (lotus) against `ms` (the study), to 1e-9 relative.
fn same_ms(got_ns: &Value, want_ms: f64, what: &str) {
    let g = got_ns
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {got_ns}"));
    assert!(
        close(g / 1e6, want_ms),
        "{what}: lotus {} ms, the study {want_ms} ms",
        g / 1e6
    );
}

fn stats(args: &[&str]) -> Value {
    let mut a = vec!["trace", "stats"];
    a.extend(args);
    a.push("--json");
    serde_json::from_str(&lotus_ok(&a)).expect("JSON")
}

#[test]
fn the_studys_rule_removes_low_batches_and_recomputes_every_figure() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("b256_gpu4");
    write_config(&dir, 7, 40, 400);
    let batches = study_batches(&dir);
    let (fence, removed, kept) = study_remove(&batches);
    // The data has outliers on both sides; the study's rule takes the low
    // ones only.
    assert_eq!(removed, vec![3, 11], "the test's data");
    let all: Vec<f64> = batches.iter().map(|b| b.1).collect();
    let before = study_figures(&all);
    let after = study_figures(&kept);

    let v = stats(&[s(&dir), "--outliers", "study"]);
    let b = &v["batches"];
    assert_eq!(b["outlier_rule"], "study-remove-below-q1-2iqr");
    same_ms(&b["low_fence_ns"], fence, "fence");
    assert!(b["high_fence_ns"].is_null(), "no high fence: {b}");
    let got_removed: Vec<u64> = b["outliers"]
        .as_array()
        .expect("outliers")
        .iter()
        .map(|o| {
            assert_eq!(o["side"], "low");
            assert_eq!(o["removed"], true);
            o["batch"].as_u64().expect("id")
        })
        .collect();
    assert_eq!(got_removed, removed);
    let sum = &b["summary"];
    assert_eq!(sum["count"].as_u64(), Some(after.count as u64));
    same_ms(&sum["total_ns"], after.sum, "sum");
    same_ms(&sum["mean_ns"], after.mean, "mean");
    same_ms(&sum["std_ns"], after.std, "std");
    same_ms(&sum["min_ns"], after.min, "min");
    same_ms(&sum["max_ns"], after.max, "max");
    same_ms(&sum["p50_ns"], after.median, "median");
    same_ms(&b["q1_ns"], after.p25, "25th percentile");
    same_ms(&b["q3_ns"], after.p75, "75th percentile");
    same_ms(&b["iqr_ns"], after.p75 - after.p25, "75th - 25th");
    // The figures before removal, as the study logs them first.
    let pre = &b["before_removal"];
    assert_eq!(pre["summary"]["count"].as_u64(), Some(before.count as u64));
    same_ms(&pre["summary"]["mean_ns"], before.mean, "mean before");
    same_ms(&pre["summary"]["std_ns"], before.std, "std before");
    same_ms(&pre["q1_ns"], before.p25, "q1 before");
    same_ms(&pre["q3_ns"], before.p75, "q3 before");

    // Today's rule on the same trace: both sides flagged, nothing removed.
    let v = stats(&[s(&dir)]);
    let b = &v["batches"];
    assert_eq!(b["outlier_rule"], "flag-1.5iqr");
    assert_eq!(b["summary"]["count"].as_u64(), Some(before.count as u64));
    same_ms(&b["summary"]["mean_ns"], before.mean, "mean, flagged");
    let (q1, q3) = (before.p25, before.p75);
    let (lo, hi) = (q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1));
    let mut want: Vec<(u64, &str)> = batches
        .iter()
        .filter_map(|&(id, d)| {
            (d < lo)
                .then_some((id, "low"))
                .or((d > hi).then_some((id, "high")))
        })
        .collect();
    want.sort_unstable();
    let mut got: Vec<(u64, &str)> = b["outliers"]
        .as_array()
        .expect("outliers")
        .iter()
        .map(|o| {
            assert_eq!(o["removed"], false);
            (
                o["batch"].as_u64().expect("id"),
                o["side"].as_str().expect("side"),
            )
        })
        .collect();
    got.sort_unstable();
    assert!(want.iter().any(|w| w.1 == "high") && want.iter().any(|w| w.1 == "low"));
    assert_eq!(got, want);

    // A distributed job's ranks follow the same rule: the same logs with
    // headers naming rank 0.
    let ranked = tmp.path().join("ranked");
    fs::create_dir_all(&ranked).expect("mkdir");
    for e in fs::read_dir(&dir).expect("dir") {
        let p = e.expect("entry").path();
        let name = p.file_name().expect("name").to_string_lossy().into_owned();
        let (role, pid) = name.rsplit_once("_pid_").expect("a log");
        let role = if role.ends_with("main") {
            "main"
        } else {
            "worker"
        };
        let header = format!(
            "#lotus-trace v1 role={role} pid={pid} host=h rank=0 local_rank=0 world_size=1\n"
        );
        let body = fs::read_to_string(&p).expect("read");
        fs::write(ranked.join(&name), header + &body).expect("write");
    }
    let v = stats(&[s(&ranked), "--outliers", "study"]);
    let r = &v["ranks"][0]["batches"];
    assert_eq!(
        r["outlier_rule"], "study-remove-below-q1-2iqr",
        "{}",
        v["ranks"]
    );
    assert_eq!(r["summary"]["count"].as_u64(), Some(after.count as u64));

    // The table names the rule.
    let text = lotus_ok(&["trace", "stats", s(&dir), "--outliers", "study"]);
    assert!(text.contains("removed below Q1 - 2 IQR"), "{text}");
    assert!(text.contains("(low, removed)"), "{text}");
}

#[test]
fn delay_shares_are_the_studys() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("b128_gpu1");
    write_config(&dir, 11, 60, 200);
    // The study's merge of worker batches and main consumptions on the id.
    let ends: std::collections::HashMap<u64, u64> = read_study(&dir, "worker_pid")
        .into_iter()
        .filter_map(|(n, t, d)| Some((n.strip_prefix("SBatchPreprocessed_")?.parse().ok()?, t + d)))
        .collect();
    let delays: Vec<f64> = read_study(&dir, "main_pid")
        .into_iter()
        .filter_map(|(n, t, _)| {
            let id: u64 = n.strip_prefix("SBatchConsumed_")?.parse().ok()?;
            Some((t as f64 - ends[&id] as f64) / 1e6)
        })
        .collect();
    let n = delays.len() as f64;
    let under = delays.iter().filter(|&&d| d < 250.0).count();
    let over = delays.iter().filter(|&&d| d > 500.0).count();
    assert!(under > 0 && over > 0, "the test's data fills both shares");
    let v = stats(&[s(&dir)]);
    let d = &v["delay"];
    assert_eq!(d["under_250ms"].as_u64(), Some(under as u64));
    assert_eq!(d["over_500ms"].as_u64(), Some(over as u64));
    assert!(close(
        d["under_250ms_share"].as_f64().expect("share"),
        under as f64 / n
    ));
    assert!(close(
        d["over_500ms_share"].as_f64().expect("share"),
        over as f64 / n
    ));
    // The renamed wait bucket.
    let names: Vec<&str> = v["wait"]["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| b["bucket"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["none", "under_1ms", "1ms_to_500ms", "over_500ms"]);
}

/// One configuration's block without its label.
fn unlabelled(block: &Value) -> Value {
    let mut b = block.clone();
    b.as_object_mut().expect("object").remove("label");
    b
}

#[test]
fn each_configuration_is_its_own_block_equal_to_the_folder_alone() {
    let tmp = tempfile::tempdir().expect("tmp");
    let parent = tmp.path().join("lotustrace_result");
    let (a, b) = (parent.join("b1024_gpu4"), parent.join("b128_gpu4"));
    write_config(&a, 3, 30, 900);
    write_config(&b, 5, 50, 150);
    fs::create_dir_all(parent.join("e2e")).expect("mkdir");
    fs::write(parent.join("e2e").join("notes.txt"), "not a trace\n").expect("write");

    for rule in ["flag", "study"] {
        let alone_a = stats(&[s(&a), "--outliers", rule]);
        let alone_b = stats(&[s(&b), "--outliers", rule]);
        let both = stats(&[s(&a), s(&b), "--outliers", rule]);
        assert_eq!(both["schema"], "lotus.trace-stats-configs/1");
        let blocks = both["configurations"].as_array().expect("blocks");
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0]["label"], "b1024_gpu4");
        assert_eq!(unlabelled(&blocks[0]), alone_a, "{rule}: A");
        assert_eq!(unlabelled(&blocks[1]), alone_b, "{rule}: B");

        // The parent folder: the same blocks, in the study's natural order
        // (b128 before b1024), the folder without logs left out.
        let parent_v = stats(&["--configs", s(&parent), "--outliers", rule]);
        let blocks = parent_v["configurations"].as_array().expect("blocks");
        let labels: Vec<&str> = blocks
            .iter()
            .map(|b| b["label"].as_str().expect("label"))
            .collect();
        assert_eq!(labels, ["b128_gpu4", "b1024_gpu4"]);
        assert_eq!(unlabelled(&blocks[0]), alone_b, "{rule}: --configs B");
        assert_eq!(unlabelled(&blocks[1]), alone_a, "{rule}: --configs A");

        // The study's comparison, from the raw logs: IQR and std of each
        // configuration (after its removal with --outliers study) over the
        // smallest, and the largest ratio.
        let figures: Vec<StudyFigures> = [&b, &a]
            .iter()
            .map(|d| {
                let batches = study_batches(d);
                let kept = if rule == "study" {
                    study_remove(&batches).2
                } else {
                    batches.iter().map(|b| b.1).collect()
                };
                study_figures(&kept)
            })
            .collect();
        let iqrs: Vec<f64> = figures.iter().map(|f| f.p75 - f.p25).collect();
        let stds: Vec<f64> = figures.iter().map(|f| f.std).collect();
        let max_ratio = |v: &[f64]| {
            let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
            v.iter().map(|x| x / min).fold(0.0, f64::max)
        };
        let c = &parent_v["comparison"];
        let max_iqr = c["max_normalized_iqr"].as_f64().expect("max iqr");
        let max_std = c["max_normalized_std"].as_f64().expect("max std");
        assert!(
            close(max_iqr, max_ratio(&iqrs)),
            "{rule}: {max_iqr} vs {iqrs:?}"
        );
        assert!(
            close(max_std, max_ratio(&stds)),
            "{rule}: {max_std} vs {stds:?}"
        );
        assert!(max_iqr > 1.0 && max_std > 1.0, "the configurations differ");

        let text = lotus_ok(&[
            "trace",
            "stats",
            "--configs",
            s(&parent),
            "--outliers",
            rule,
        ]);
        assert!(text.contains("=== Configuration b128_gpu4 ==="), "{text}");
        assert!(text.contains(&format!("{max_iqr:.2}x")), "{text}");
    }

    // --op-times takes one trace (a usage error); a parent without
    // configurations is named.
    let err = lotus_usage_error(&[
        "trace",
        "stats",
        s(&a),
        s(&b),
        "--op-times",
        s(&tmp.path().join("o.csv")),
    ]);
    assert!(err.contains("--op-times takes one trace"), "{err}");
    let err = lotus_fails(&["trace", "stats", "--configs", s(&parent.join("e2e"))]);
    assert!(err.contains("no sub-folder holds trace logs"), "{err}");
}
