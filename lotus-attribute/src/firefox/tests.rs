//! Unit tests of the Firefox Profiler output on a synthetic folder.

use super::*;
use lotus_samples::{Sample, SampleSink, SamplesWriter, StackNode, Symbol};
use serde_json::Value;

/// A worker (pid 10): its main thread runs op `Decode` (batch 3,
/// sample 7) over [1000, 2000) ns on the samples' clock (its wall
/// clock 1 ms ahead), its thread 11 is the tracer's `QueueFeederThread`;
/// sampled every 100 ns, with stacks `main;outer;inner` inside the op
/// and a kernel frame outside, and thread 11 once without a stack.
fn folder() -> tempfile::TempDir {
    let symbols = [
        (0, Symbol::new("main", "/bin/x")),
        (1, Symbol::new("outer", "/bin/x")),
        (2, Symbol::new("inner", "/lib/libspin.so")),
        (3, Symbol::new("do_page_fault", "[kernel]")),
    ];
    let stacks = [
        StackNode::new(1, 0, 0),
        StackNode::new(2, 1, 1),
        StackNode::new(3, 2, 2),
        StackNode::new(4, 2, 3),
    ];
    let feeder = Sample {
        time_ns: 4950,
        pid: 10,
        tid: 11,
        symbol: 1,
        kernel: false,
        counters: Default::default(),
    };
    let dir = tempfile::tempdir().expect("tmp");
    lotus_testkit::sampled::worker_folder(
        dir.path(),
        &[
            ("QueueFeederThread", 500, 0, "kind=thread,tid=11"),
            ("Decode", 1000, 1000, "kind=op,batch=3,sample=7"),
        ],
        &symbols,
        &stacks,
        |t| {
            let in_op = (1000..2000).contains(&t);
            (if in_op { 2 } else { 3 }, !in_op, if in_op { 3 } else { 4 })
        },
        &[(feeder, 0)],
    );
    dir
}

/// Each sample's frames (outermost first) and time (ms) of `thread`.
fn samples_of(thread: &Value) -> Vec<(Vec<String>, f64)> {
    let strings = thread["stringArray"].as_array().expect("strings");
    let st = &thread["stackTable"];
    let func_name = |frame: u64| {
        let func = thread["frameTable"]["func"][frame as usize]
            .as_u64()
            .expect("func");
        let name = thread["funcTable"]["name"][func as usize]
            .as_u64()
            .expect("name");
        strings[name as usize].as_str().expect("s").to_string()
    };
    let s = &thread["samples"];
    let mut t = 0.0;
    let mut out = Vec::new();
    for (i, stack) in s["stack"].as_array().expect("stack").iter().enumerate() {
        t += s["timeDeltas"][i].as_f64().expect("delta");
        let mut frames = Vec::new();
        let mut at = stack.as_u64();
        while let Some(k) = at {
            frames.push(func_name(st["frame"][k as usize].as_u64().expect("frame")));
            at = st["prefix"][k as usize].as_u64();
        }
        frames.reverse();
        out.push((frames, t));
    }
    out
}

#[test]
fn a_tiny_folder_becomes_processes_threads_stacks_and_markers() {
    let dir = folder();
    let mut out = Vec::new();
    let w = write_firefox_profile(dir.path(), "lotus", &mut out).expect("profile");
    assert_eq!(
        (w.processes, w.threads, w.samples, w.markers),
        (1, 2, 51, 1)
    );
    assert!(w.sampled && w.with_stacks, "{w:?}");
    let p: Value = serde_json::from_slice(&out).expect("json");
    let threads = p["threads"].as_array().expect("threads");
    let main = threads
        .iter()
        .find(|t| t["tid"] == "10" || t["tid"] == 10)
        .expect("10");
    let feeder = threads
        .iter()
        .find(|t| t["tid"] == "11" || t["tid"] == 11)
        .expect("11");
    assert_eq!(main["processName"], "worker 0 (10)");
    assert_eq!(feeder["name"], "QueueFeederThread");
    let samples = samples_of(main);
    assert_eq!(samples.len(), 50);
    // Times on the samples' clock (ms): the op's ten samples carry its
    // stack, the others the kernel frame.
    for (frames, t) in &samples {
        let ns = (t * 1e6).round() as u64;
        if (1000..2000).contains(&ns) {
            assert_eq!(frames, &["main", "outer", "inner"], "at {ns}");
        } else {
            assert_eq!(frames, &["main", "outer", "do_page_fault_[k]"], "at {ns}");
        }
    }
    assert_eq!(
        samples_of(feeder),
        vec![(vec!["outer".to_string()], 4950.0 / 1e6)]
    );
    // The op's span: a marker on the worker's main thread, moved onto
    // the samples' clock by the log's clock pairs.
    let m = &main["markers"];
    assert_eq!(m["length"], 1);
    let strings = main["stringArray"].as_array().expect("strings");
    assert_eq!(
        strings[m["name"][0].as_u64().expect("n") as usize],
        "Decode"
    );
    let data = &m["data"][0];
    let field = |k: &str| strings[data[k].as_u64().expect("field") as usize].clone();
    assert_eq!(
        (field("kind"), field("batch"), field("index")),
        ("op".into(), "3".into(), "7".into())
    );
    let (a, b) = (
        m["startTime"][0].as_f64().expect("a"),
        m["endTime"][0].as_f64().expect("b"),
    );
    assert_eq!(((a * 1e6).round(), (b * 1e6).round()), (1000.0, 2000.0));
    assert_eq!(feeder["markers"]["length"], 0);
    // A thread starts at its first sample or span.
    assert_eq!(feeder["registerTime"].as_f64(), Some(4950.0 / 1e6));
    // Kernel frames in their own category, user ones by module.
    let cats = p["meta"]["categories"].as_array().expect("categories");
    assert!(cats.iter().any(|c| c["name"] == "Kernel"));
    let user = cats.iter().find(|c| c["name"] == "User").expect("user");
    assert!(user["subcategories"]
        .as_array()
        .expect("sub")
        .iter()
        .any(|s| s == "libspin.so"));
}

#[test]
fn without_samples_the_spans_alone_and_without_logs_an_error() {
    let dir = folder();
    for f in SampleFiles::of(dir.path(), "lotus").existing() {
        std::fs::remove_file(f).expect("rm");
    }
    let mut out = Vec::new();
    let w = write_firefox_profile(dir.path(), "lotus", &mut out).expect("profile");
    assert!(!w.sampled);
    assert_eq!((w.samples, w.markers), (0, 1));
    let empty = tempfile::tempdir().expect("tmp");
    let e = write_firefox_profile(empty.path(), "lotus", &mut Vec::new()).expect_err("no logs");
    assert!(format!("{e:#}").contains("no trace logs"), "{e:#}");
}

#[test]
fn a_task_clock_counter_is_the_cpu_delta_and_no_stacks_is_the_function_alone() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = "#lotus-trace v1 role=main pid=20 wall_ns=1000000 monotonic_ns=0\n\
               SStep,1001000,1000,kind=op\n";
    std::fs::write(dir.path().join("lotus_main_pid_20"), log).expect("log");
    let mut w = SamplesWriter::create_with_counters(dir.path(), "lotus", 1).expect("w");
    w.symbols(&[(0, Symbol::new("work", "/bin/y"))])
        .expect("symbols");
    let samples: Vec<Sample> = [1100u64, 1500]
        .iter()
        .zip([7000u64, 3000])
        .map(|(&t, cpu)| Sample {
            time_ns: t,
            pid: 20,
            tid: 20,
            symbol: 0,
            kernel: false,
            counters: lotus_samples::CounterValues::new(&[cpu]).expect("counters"),
        })
        .collect();
    w.samples(&samples).expect("samples");
    w.finish().expect("finish");
    let files = SampleFiles::of(dir.path(), "lotus");
    lotus_samples::write_sampling(
        &files.sampling,
        &[
            ("status", "complete".into()),
            ("interval_ns", "1000".into()),
            ("counters", "task-clock".into()),
        ],
    )
    .expect("sampling");
    let mut out = Vec::new();
    let w = write_firefox_profile(dir.path(), "lotus", &mut out).expect("profile");
    assert!(!w.with_stacks && w.samples == 2, "{w:?}");
    let p: Value = serde_json::from_slice(&out).expect("json");
    let main = &p["threads"][0];
    assert_eq!(main["processName"], "main (20)");
    let frames: Vec<Vec<String>> = samples_of(main).into_iter().map(|(f, _)| f).collect();
    assert_eq!(frames, vec![vec!["work".to_string()]; 2]);
    // The crate writes CPU deltas in whole µs.
    let cpu: Vec<f64> = main["samples"]["threadCPUDelta"]
        .as_array()
        .expect("cpu")
        .iter()
        .map(|v| v.as_f64().expect("µs"))
        .collect();
    assert_eq!(cpu, [7.0, 3.0]);
}

#[test]
fn a_samples_file_that_links_out_is_left_out_by_name_and_the_markers_kept() {
    let dir = folder();
    let files = SampleFiles::of(dir.path(), "lotus");
    let outside = tempfile::tempdir().expect("tmp");
    let elsewhere = outside.path().join("lotus.samples");
    std::fs::rename(&files.samples, &elsewhere).expect("move");
    std::os::unix::fs::symlink(&elsewhere, &files.samples).expect("link");
    let mut out = Vec::new();
    let w = write_firefox_profile(dir.path(), "lotus", &mut out).expect("profile");
    let why = w.samples_left_out.clone().expect("left out");
    assert!(why.contains("lotus.samples"), "{why}");
    assert_eq!((w.samples, w.markers), (0, 1), "{w:?}");
    let p: Value = serde_json::from_slice(&out).expect("json");
    assert!(p["threads"].as_array().is_some_and(|t| !t.is_empty()));
}
