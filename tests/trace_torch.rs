//! The tracer on real torch pipelines (fixtures/trace/torch_pipeline.py):
//! an ImageFolder of generated JPEGs through RandomResizedCrop(224),
//! RandomHorizontalFlip, ToTensor and Normalize (transforms v1 and v2),
//! DataLoader workers forked and spawned, persistent workers, pin_memory,
//! two epochs, a model step in the main process; the same under
//! `torchrun --nproc_per_node=2` with gloo, a DistributedSampler and DDP;
//! and smaller custom datasets. The logs are read with the tests' own
//! reader; `lotus trace stats` and `view` are checked against figures
//! computed here from those logs.
//!
//! Torch: see tests/common/torch.rs (skipped by name without torch, a
//! failure with LOTUS_REQUIRE_TORCH=1).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::common::torch::torch_python;
use crate::common::trace_check::{check_stats, check_view, stats_json};
use crate::common::trace_logs::{
    assert_ok, pids, python_with_tracer, read_logs, read_report, trace_run, Ev, Log,
};
use crate::common::{fixture, lotus_ok};
use serde_json::Value;

/// A run of the fixture.
struct TorchRun {
    dataset: &'static str,
    transforms: &'static str,
    workers: usize,
    /// Batches per epoch (per rank under torchrun).
    batches: u64,
    batch_size: u64,
    epochs: u64,
    start_method: &'static str,
    persistent: bool,
    pin_memory: bool,
    model: bool,
    in_code: bool,
}

impl TorchRun {
    const fn new(dataset: &'static str) -> TorchRun {
        TorchRun {
            dataset,
            transforms: "v1",
            workers: 2,
            batches: 3,
            batch_size: 8,
            epochs: 2,
            start_method: "fork",
            persistent: false,
            pin_memory: false,
            model: false,
            in_code: false,
        }
    }

    /// The fixture's arguments.
    fn args(&self, data: &Path, report: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            fixture("trace/torch_pipeline.py").into(),
            "--data".into(),
            data.into(),
            "--report".into(),
            report.into(),
        ];
        for (k, v) in [
            ("--dataset", self.dataset.to_string()),
            ("--transforms", self.transforms.to_string()),
            ("--workers", self.workers.to_string()),
            ("--batches", self.batches.to_string()),
            ("--batch-size", self.batch_size.to_string()),
            ("--epochs", self.epochs.to_string()),
            ("--start-method", self.start_method.to_string()),
        ] {
            args.push(k.into());
            args.push(v.into());
        }
        for (on, flag) in [
            (self.persistent, "--persistent"),
            (self.pin_memory, "--pin-memory"),
            (self.model, "--model"),
        ] {
            if on {
                args.push(flag.into());
            }
        }
        args
    }
}

/// A traced run's folder (kept while the value lives).
struct Traced {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    logs: Vec<Log>,
    report: Value,
}

/// Runs the fixture traced (`lotus trace run`, or `--enable` in code);
/// None when torch is missing and not required (the test is skipped).
fn torch_trace(test: &str, t: &TorchRun) -> Option<Traced> {
    let py = torch_python(test)?;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace");
    let report = tmp.path().join("report.json");
    let mut args = t.args(&tmp.path().join("data"), &report);
    let out = if t.in_code {
        args.push("--enable".into());
        args.push(dir.clone().into());
        let a: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        python_with_tracer(&py, &a)
    } else {
        let a: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        trace_run(&dir, &[], &py, &a)
    };
    assert_ok(&out, "the torch pipeline");
    // An ImageFolder's loader and transforms are spans already: lotus does
    // not tell to name what it calls (the note is for a dataset's own
    // code run as one span, as the generic dataset's with
    // LOTUS_TRACE_FINER=0).
    let stderr = String::from_utf8_lossy(&out.stderr);
    if t.dataset == "jpeg" {
        assert!(
            !stderr.contains("spans stop at each dataset's __getitem__"),
            "{test}: {stderr}"
        );
    }
    Some(Traced {
        logs: read_logs(&dir),
        report: read_report(&report),
        dir,
        _tmp: tmp,
    })
}

// --- the JPEG pipeline ------------------------------------------------------------

/// The ops of one sample of the JPEG pipeline, in order: the dataset's
/// __getitem__ (the parent of the others), the image load, then each
/// transform of the Compose.
const JPEG_V1_OPS: &[&str] = &[
    "ImageFolder",
    "Loader",
    "RandomResizedCrop",
    "RandomHorizontalFlip",
    "ToTensor",
    "Normalize",
];
const JPEG_V2_OPS: &[&str] = &[
    "ImageFolder",
    "Loader",
    "RandomResizedCrop",
    "RandomHorizontalFlip",
    "ToImage",
    "ToDtype",
    "Normalize",
];

fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("a list: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap_or_else(|| panic!("a number: {x}")))
        .collect()
}

/// The one event of `name` among `evs`, of kind `kind`.
fn one<'a>(evs: &[&'a Ev], name: &str, kind: &str, what: &str) -> &'a Ev {
    let v: Vec<&&Ev> = evs.iter().filter(|e| e.name == name).collect();
    assert_eq!(v.len(), 1, "{what}: {name} events");
    assert_eq!(v[0].kind(), kind, "{what}: {name}'s kind");
    v[0]
}

/// Checks one rank's logs (its main process and its workers; the whole
/// trace without torchrun) of the JPEG pipeline against its report: one
/// log per process, the rank in every header, each batch of each epoch
/// once in the worker that had to make it with its samples in the
/// sampler's order, every transform once per sample, one wait and one
/// consumption per batch with `ready` right. Returns every consumed
/// batch's delay from the end of its preprocessing to its consumption.
fn check_jpeg(t: &TorchRun, logs: &[&Log], report: &Value, ops: &[&str]) -> Vec<i64> {
    let main_pid = report["main_pid"].as_u64().expect("main pid") as u32;
    let rank = report["rank"].as_u64().expect("rank");
    let world = report["world_size"].as_u64().expect("world size");
    let bs = t.batch_size as usize;
    // Each worker: the epoch it was started for, and its worker id.
    let workers: BTreeMap<u32, (u64, u64)> = report["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| {
            let w = numbers(w);
            (w[0] as u32, (w[1], w[2]))
        })
        .collect();
    let worker_epochs = if t.persistent { 1 } else { t.epochs };
    assert_eq!(
        workers.len() as u64,
        t.workers as u64 * worker_epochs,
        "rank {rank}: workers started: {report}"
    );

    // One log per process, each with its rank.
    let mains: Vec<&Log> = logs.iter().copied().filter(|l| l.role == "main").collect();
    assert_eq!(
        mains.iter().map(|l| l.pid).collect::<Vec<_>>(),
        [main_pid],
        "rank {rank}: one main log"
    );
    let worker_logs: BTreeMap<u32, &Log> = logs
        .iter()
        .filter(|l| l.role == "worker")
        .map(|l| (l.pid, *l))
        .collect();
    assert_eq!(
        worker_logs.keys().copied().collect::<BTreeSet<_>>(),
        workers.keys().copied().collect::<BTreeSet<_>>(),
        "rank {rank}: one log per worker"
    );
    let (want_rank, want_world) = if world > 1 {
        (rank.to_string(), world.to_string())
    } else {
        ("-".to_string(), "-".to_string())
    };
    for log in logs {
        let h = |k: &str| log.header.get(k).map(String::as_str).unwrap_or("");
        assert_eq!(
            (h("rank"), h("local_rank"), h("world_size")),
            (want_rank.as_str(), want_rank.as_str(), want_world.as_str()),
            "pid {}: the header's rank, local rank (one machine) and world size",
            log.pid
        );
        assert!(
            log.comments.iter().all(|c| !c.contains("not hooked")),
            "pid {}: {:?}",
            log.pid,
            log.comments
        );
    }

    // The sampler's order per epoch: each index once.
    let orders: Vec<Vec<u64>> = report["orders"]
        .as_array()
        .expect("orders")
        .iter()
        .map(numbers)
        .collect();
    assert_eq!(orders.len() as u64, t.epochs, "rank {rank}: epochs");
    for o in &orders {
        assert_eq!(o.len() as u64, t.batches * t.batch_size);
        assert_eq!(o.iter().collect::<BTreeSet<_>>().len(), o.len(), "{o:?}");
    }

    // Workers: batch ids restart each epoch; the k-th Batch of id b (in
    // order of start) is epoch k's.
    let mut by_id: BTreeMap<u64, Vec<(u32, &Ev)>> = BTreeMap::new();
    // The worker_init_fn: one op span per worker, before any batch.
    let is_init = |e: &Ev| e.name == "record_worker" && e.kind() == "op" && e.batch().is_none();
    for (pid, log) in &worker_logs {
        assert_eq!(
            log.events.iter().filter(|e| is_init(e)).count(),
            1,
            "worker {pid}: its worker_init_fn"
        );
        // A garbage collection is a span wherever it ran (start-up too).
        for e in log.events.iter().filter(|e| !is_init(e) && e.name != "gc") {
            assert!(
                matches!(e.kind(), "op" | "sample" | "fetch" | "batch"),
                "worker {pid}: {e:?}"
            );
            let b = e
                .batch()
                .unwrap_or_else(|| panic!("worker {pid}: no batch: {e:?}"));
            if e.name == "Batch" {
                assert_eq!(e.kind(), "batch");
                by_id.entry(b).or_default().push((*pid, e));
            }
        }
    }
    assert_eq!(
        by_id.keys().copied().collect::<Vec<_>>(),
        (0..t.batches).collect::<Vec<_>>(),
        "rank {rank}: batch ids"
    );
    let mut accounted: BTreeMap<u32, usize> = BTreeMap::new();
    let mut made: BTreeMap<(u64, u64), &Ev> = BTreeMap::new();
    for (b, mut evs) in by_id {
        evs.sort_by_key(|(_, e)| e.start);
        assert_eq!(
            evs.len() as u64,
            t.epochs,
            "rank {rank}: batch {b} once per epoch"
        );
        for (epoch, (pid, batch)) in evs.into_iter().enumerate() {
            let what = format!("rank {rank} epoch {epoch} batch {b}");
            let epoch = epoch as u64;
            // The DataLoader hands batch b to worker b mod W, of this
            // epoch's workers (the first epoch's, when persistent).
            assert_eq!(
                workers[&pid],
                (if t.persistent { 0 } else { epoch }, b % t.workers as u64),
                "{what}: made by worker {pid}"
            );
            let inside: Vec<&Ev> = worker_logs[&pid]
                .events
                .iter()
                .filter(|e| e.batch() == Some(b) && e.within(batch) && e.name != "gc")
                .collect();
            *accounted.entry(pid).or_default() += inside.len();
            let fetch = one(&inside, "Fetch", "fetch", &what);
            let coll = one(&inside, "Collation", "op", &what);
            assert_eq!(fetch.start, batch.start, "{what}: the fetch starts it");
            assert!(fetch.end() <= coll.start, "{what}: fetch, then collation");
            let mut samples: Vec<&Ev> = inside
                .iter()
                .copied()
                .filter(|e| e.name == "Sample")
                .collect();
            samples.sort_by_key(|e| e.start);
            let got: Vec<u64> = samples.iter().map(|e| e.sample().expect("index")).collect();
            let lo = b as usize * bs;
            assert_eq!(
                got,
                orders[epoch as usize][lo..lo + bs],
                "{what}: its samples, in the sampler's order"
            );
            for s in &samples {
                assert_eq!(s.kind(), "sample");
                assert!(s.within(fetch), "{what}: sample within the fetch: {s:?}");
                let mut of_s: Vec<&Ev> = inside
                    .iter()
                    .copied()
                    .filter(|e| e.kind() == "op" && e.name != "gc" && e.sample() == s.sample())
                    .collect();
                of_s.sort_by_key(|e| e.start);
                assert_eq!(
                    of_s.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
                    ops,
                    "{what}: sample {:?}: each transform once, in order",
                    s.sample()
                );
                assert!(of_s.iter().all(|o| o.within(s)), "{what}: ops within");
            }
            assert_eq!(
                inside.len(),
                3 + bs * (1 + ops.len()),
                "{what}: nothing else in the batch"
            );
            made.insert((epoch, b), batch);
        }
    }
    for (pid, log) in &worker_logs {
        assert_eq!(
            accounted.get(pid).copied().unwrap_or(0) + 1,
            log.events.iter().filter(|e| e.name != "gc").count(),
            "worker {pid}: every event but its worker_init_fn's belongs to a batch"
        );
    }

    // Main: one wait and one consumption per batch and epoch, in order.
    let main = mains[0];
    let mut waits: BTreeMap<u64, Vec<&Ev>> = BTreeMap::new();
    let mut consumes: BTreeMap<u64, Vec<&Ev>> = BTreeMap::new();
    // Starting the workers: once per epoch (once where persistent);
    // stopping them: at each epoch's end (never where persistent: a
    // persistent iterator's workers stop when the job drops it).
    let (mut starts, mut stops) = (0, 0);
    for e in &main.events {
        let map = match (e.name.as_str(), e.kind()) {
            ("Wait", "wait") => &mut waits,
            ("Consume", "consume") => &mut consumes,
            ("WorkersStart", "start") => {
                starts += 1;
                continue;
            }
            ("WorkersStop", "stop") => {
                stops += 1;
                continue;
            }
            // The DataLoader's settings at each iter(loader); a garbage
            // collection wherever it ran.
            ("DataLoader", "config") | ("gc", "op") => continue,
            _ => panic!("rank {rank}: unexpected event in main: {e:?}"),
        };
        map.entry(e.batch().expect("batch")).or_default().push(e);
    }
    let want = if t.persistent {
        (1, 0)
    } else {
        (t.epochs, t.epochs)
    };
    assert_eq!(
        (starts, stops),
        want,
        "rank {rank}: workers started, stopped"
    );
    let mut seq: Vec<&Ev> = main.events.iter().filter(|e| e.batch().is_some()).collect();
    seq.sort_by_key(|e| (e.start, e.kind() == "consume"));
    let got: Vec<(&str, u64)> = seq
        .iter()
        .map(|e| (e.kind(), e.batch().expect("batch")))
        .collect();
    let want: Vec<(&str, u64)> = (0..t.epochs)
        .flat_map(|_| 0..t.batches)
        .flat_map(|b| [("wait", b), ("consume", b)])
        .collect();
    assert_eq!(got, want, "rank {rank}: wait, consume, batch after batch");
    let mut delays = Vec::new();
    for b in 0..t.batches {
        let (ws, cs) = (&waits[&b], &consumes[&b]);
        for epoch in 0..t.epochs {
            let what = format!("rank {rank} epoch {epoch} batch {b}");
            let (w, c) = (ws[epoch as usize], cs[epoch as usize]);
            let batch = made[&(epoch, b)];
            assert_eq!(c.dur, 0, "a consumption is a point");
            assert!(c.start >= w.end(), "{what}: consumed after its wait");
            assert!(
                w.end() >= batch.end(),
                "{what}: the wait ends after the batch was made"
            );
            match w.fields.get("ready").map(String::as_str) {
                // Already received: made before the wait began.
                Some("1") => assert!(
                    batch.end() <= w.start,
                    "{what}: ready=1 but made during the wait"
                ),
                Some("0") => {}
                other => panic!("{what}: ready={other:?}"),
            }
            delays.push(c.start as i64 - batch.end() as i64);
        }
    }
    delays
}

#[test]
fn torch_jpeg_v1_forked_workers_pin_memory_two_epochs() {
    // Workers of the second epoch are forked from a main process with
    // unwritten events of the first: they must not write them again.
    let t = TorchRun {
        pin_memory: true,
        model: true,
        ..TorchRun::new("jpeg")
    };
    let Some(run) = torch_trace("torch_jpeg_v1_forked_workers_pin_memory_two_epochs", &t) else {
        return;
    };
    let logs: Vec<&Log> = run.logs.iter().collect();
    let delays = check_jpeg(&t, &logs, &run.report, JPEG_V1_OPS);
    check_stats(&stats_json(&run.dir), &logs, &delays, "stats");
    check_view(&run.dir, &run.logs);
}

#[test]
fn torch_jpeg_v2_spawned_persistent_workers_two_epochs() {
    let t = TorchRun {
        transforms: "v2",
        start_method: "spawn",
        persistent: true,
        model: true,
        ..TorchRun::new("jpeg")
    };
    let Some(run) = torch_trace("torch_jpeg_v2_spawned_persistent_workers_two_epochs", &t) else {
        return;
    };
    let logs: Vec<&Log> = run.logs.iter().collect();
    let delays = check_jpeg(&t, &logs, &run.report, JPEG_V2_OPS);
    check_stats(&stats_json(&run.dir), &logs, &delays, "stats");
    check_view(&run.dir, &run.logs);
}

#[test]
fn torchrun_two_ranks_with_ddp_are_traced_per_rank() {
    let test = "torchrun_two_ranks_with_ddp_are_traced_per_rank";
    let Some(py) = torch_python(test) else {
        return;
    };
    let torchrun = py.with_file_name("torchrun");
    assert!(torchrun.is_file(), "{} is missing", torchrun.display());
    let t = TorchRun {
        model: true,
        ..TorchRun::new("jpeg")
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("trace");
    let report = tmp.path().join("report.json");
    let mut args: Vec<OsString> = vec!["--standalone".into(), "--nproc_per_node=2".into()];
    args.extend(t.args(&tmp.path().join("data"), &report));
    args.push("--ddp".into());
    let a: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let out = trace_run(&dir, &[], &torchrun, &a);
    assert_ok(&out, "torchrun");
    let err = String::from_utf8_lossy(&out.stderr);
    let n = 2 * (1 + 2 * t.workers);
    assert!(
        err.contains(&format!("{n} log(s) (2 main, {} worker)", n - 2)),
        "{err}"
    );

    let logs = read_logs(&dir);
    let stats = stats_json(&dir);
    let ranks = stats["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 2, "two ranks in the statistics");
    let mut all_delays = Vec::new();
    let mut orders: Vec<Vec<u64>> = vec![Vec::new(); t.epochs as usize];
    for rank in 0..2u64 {
        let rep = read_report(&report.with_file_name(format!("report.json.rank{rank}")));
        let own: Vec<&Log> = logs
            .iter()
            .filter(|l| l.header.get("rank") == Some(&rank.to_string()))
            .collect();
        let delays = check_jpeg(&t, &own, &rep, JPEG_V1_OPS);
        let got = &ranks[rank as usize];
        assert_eq!(got["rank"].as_u64(), Some(rank));
        let host = own[0].header["host"].clone();
        assert_eq!(got["hosts"], serde_json::json!([host]));
        check_stats(got, &own, &delays, &format!("rank {rank}"));
        all_delays.extend(delays);
        for (e, o) in rep["orders"].as_array().expect("orders").iter().enumerate() {
            orders[e].extend(numbers(o));
        }
    }
    // Every log belongs to a rank; the ranks share out the whole dataset.
    let ranked: usize = (0..2)
        .map(|r| {
            logs.iter()
                .filter(|l| l.header.get("rank") == Some(&r.to_string()))
                .count()
        })
        .sum();
    assert_eq!(ranked, logs.len(), "every log has rank 0 or 1");
    let n_images = 2 * t.batches * t.batch_size;
    for o in &mut orders {
        o.sort_unstable();
        assert_eq!(
            *o,
            (0..n_images).collect::<Vec<_>>(),
            "each image once per epoch"
        );
    }
    let all: Vec<&Log> = logs.iter().collect();
    check_stats(&stats, &all, &all_delays, "the whole job");
    let table = lotus_ok(&["trace", "stats", dir.to_str().expect("path")]);
    assert!(table.contains("Per rank (2 rank(s)"), "{table}");
    check_view(&dir, &logs);
}

// --- smaller pipelines: custom datasets, in-code tracing, no workers --------------

/// Runs a smaller pipeline traced and checks it (see [`check_torch`]).
fn run_small(test: &str, t: &TorchRun, ops: &[&str]) {
    if let Some(run) = torch_trace(test, t) {
        check_torch(t, &run.logs, &run.report, ops);
    }
}

/// Checks a torch trace: logs per pid, every batch of every epoch, its
/// samples and ops, and the main process's waits and consumptions.
fn check_torch(t: &TorchRun, logs: &[Log], report: &Value, ops: &[&str]) {
    let main_pid = report["main_pid"].as_u64().expect("main pid") as u32;
    let workers = pids(&report["worker_pids"]);
    let epochs_of_workers = if t.persistent { 1 } else { t.epochs as usize };
    assert_eq!(workers.len(), t.workers * epochs_of_workers, "worker pids");
    let mains: Vec<&Log> = logs.iter().filter(|l| l.role == "main").collect();
    assert_eq!(mains.iter().map(|l| l.pid).collect::<Vec<_>>(), [main_pid]);
    let worker_logs: BTreeSet<u32> = logs
        .iter()
        .filter(|l| l.role == "worker")
        .map(|l| l.pid)
        .collect();
    assert_eq!(worker_logs, workers, "one log per worker");
    for log in logs {
        // Main-process events in the main log only; with workers, batches
        // in worker logs only (a forked worker drops its copy of the main
        // process's unwritten events).
        for e in &log.events {
            // A garbage collection is a span wherever it ran.
            if e.name == "gc" {
                continue;
            }
            let main_kind = matches!(e.kind(), "wait" | "consume" | "start" | "stop" | "config");
            assert_eq!(
                main_kind,
                log.role == "main" && (t.workers > 0 || main_kind),
                "pid {} ({}): {e:?}",
                log.pid,
                log.role
            );
        }
        assert!(
            log.comments.iter().all(|c| !c.contains("not hooked")),
            "pid {}: {:?}",
            log.pid,
            log.comments
        );
    }

    // Where batches are made: the workers, or the main process itself.
    let makers: Vec<&Log> = if t.workers == 0 {
        mains.clone()
    } else {
        logs.iter().filter(|l| l.role == "worker").collect()
    };
    let mut per_batch: BTreeMap<u64, u64> = BTreeMap::new();
    for log in &makers {
        let batches: Vec<&Ev> = log.events.iter().filter(|e| e.name == "Batch").collect();
        for batch in &batches {
            assert_eq!(batch.kind(), "batch");
            let b = batch.batch().expect("batch id");
            *per_batch.entry(b).or_default() += 1;
            // The batch's events lie within it (batch ids repeat per epoch).
            let inside: Vec<&Ev> = log
                .events
                .iter()
                .filter(|e| e.batch() == Some(b) && e.within(batch) && e.name != "Batch")
                .filter(|e| !matches!(e.kind(), "wait" | "consume"))
                .collect();
            let count = |name: &str| inside.iter().filter(|e| e.name == name).count() as u64;
            assert_eq!(count("Fetch"), 1, "batch {b}: fetch");
            assert_eq!(count("Collation"), 1, "batch {b}: collation");
            assert_eq!(count("Sample"), t.batch_size, "batch {b}: samples");
            let mut idx: Vec<u64> = inside
                .iter()
                .filter(|e| e.name == "Sample")
                .map(|e| e.sample().expect("sample index"))
                .collect();
            idx.sort_unstable();
            let want: Vec<u64> = (b * t.batch_size..(b + 1) * t.batch_size).collect();
            assert_eq!(idx, want, "batch {b}: sample indices");
            for op in ops {
                let of_op: Vec<&&Ev> = inside.iter().filter(|e| e.name == *op).collect();
                assert_eq!(
                    of_op.len() as u64,
                    t.batch_size,
                    "batch {b}: {op} per sample"
                );
                let mut s: Vec<u64> = of_op.iter().map(|e| e.sample().expect("idx")).collect();
                s.sort_unstable();
                assert_eq!(s, want, "batch {b}: {op}'s samples");
            }
        }
    }
    let want: BTreeMap<u64, u64> = (0..t.batches).map(|b| (b, t.epochs)).collect();
    assert_eq!(per_batch, want, "each batch once per epoch");

    let main = mains[0];
    for (name, kind) in [("Wait", "wait"), ("Consume", "consume")] {
        let mut n: BTreeMap<u64, u64> = BTreeMap::new();
        for e in main.events.iter().filter(|e| e.name == name) {
            assert_eq!(e.kind(), kind);
            *n.entry(e.batch().expect("batch")).or_default() += 1;
        }
        assert_eq!(n, want, "{name} per batch and epoch");
    }
    // Consumptions follow their waits, in order.
    let mut seq: Vec<&Ev> = main
        .events
        .iter()
        .filter(|e| matches!(e.kind(), "wait" | "consume"))
        .collect();
    seq.sort_by_key(|e| (e.start, e.kind() == "consume"));
    let kinds: Vec<(&str, u64)> = seq
        .iter()
        .map(|e| (e.kind(), e.batch().expect("batch")))
        .collect();
    let expect: Vec<(&str, u64)> = (0..t.epochs)
        .flat_map(|_| 0..t.batches)
        .flat_map(|b| [("wait", b), ("consume", b)])
        .collect();
    assert_eq!(kinds, expect, "wait, consume, batch after batch");
}

const FOLDER_OPS: &[&str] = &["Loader", "Resize", "CenterCrop", "ToTensor"];
const GENERIC_OPS: &[&str] = &["AddOne", "Normalize"];

#[test]
fn torch_generic_dataset_with_forked_workers_two_epochs() {
    let t = TorchRun {
        batches: 4,
        batch_size: 3,
        ..TorchRun::new("generic")
    };
    run_small(
        "torch_generic_dataset_with_forked_workers_two_epochs",
        &t,
        GENERIC_OPS,
    );
}

#[test]
fn torch_v2_compose_persistent_workers_enabled_in_code() {
    let t = TorchRun {
        workers: 3,
        batches: 6,
        batch_size: 2,
        persistent: true,
        in_code: true,
        ..TorchRun::new("v2")
    };
    run_small(
        "torch_v2_compose_persistent_workers_enabled_in_code",
        &t,
        GENERIC_OPS,
    );
}

#[test]
fn torch_without_workers() {
    let t = TorchRun {
        workers: 0,
        batches: 4,
        batch_size: 3,
        epochs: 1,
        ..TorchRun::new("folder")
    };
    run_small("torch_without_workers", &t, FOLDER_OPS);
}
