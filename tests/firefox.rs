//! `lotus trace view DIR --format firefox`: a sampled DataLoader job
//! (two workers, each item an op `Spin` that runs the frame-pointer C
//! library of `stacks.rs`: `outer` calling `inner`) as a Firefox Profiler
//! profile; the profile is read back as JSON: its processes and threads,
//! every sample of the samples file with its stack, the op spans as
//! markers on their thread, on the samples' clock.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::sampled::attribute_json;
use crate::common::torch::torch_python;
use crate::common::{lotus_env, s};
use crate::stacks::trace_job;
use serde_json::Value;

const JOB: &str = r#"
import ctypes, sys
import torch
from torch.utils.data import DataLoader, Dataset
import lotus_trace
LIB = sys.argv[1]
class Items(Dataset):
    def __len__(self): return 8
    def __getitem__(self, i):
        lib = ctypes.CDLL(LIB)
        lib.outer.argtypes = [ctypes.c_double]
        with lotus_trace.span("Spin"):
            lib.outer(0.05)
        return torch.zeros(4)
if __name__ == "__main__":
    for b in DataLoader(Items(), batch_size=2, num_workers=2):
        pass
"#;

/// `lotus trace view DIR --format firefox --out FILE`, read back.
fn profile(dir: &str, file: &Path) -> (Value, String) {
    let o = lotus_env(
        &[
            "trace",
            "view",
            dir,
            "--format",
            "firefox",
            "--out",
            s(file),
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    let text = std::fs::read_to_string(file).expect("profile");
    (serde_json::from_str(&text).expect("profile JSON"), err)
}

/// A thread's string.
fn string(thread: &Value, i: &Value) -> String {
    let i = i.as_u64().expect("string index") as usize;
    thread["stringArray"][i]
        .as_str()
        .expect("string")
        .to_string()
}

/// A thread's samples: their frames (outermost first) and times (ms).
fn samples(thread: &Value) -> Vec<(Vec<String>, f64)> {
    let (st, ft, func) = (
        &thread["stackTable"],
        &thread["frameTable"],
        &thread["funcTable"],
    );
    let s = &thread["samples"];
    let mut t = 0.0;
    let mut out = Vec::new();
    for (i, stack) in s["stack"].as_array().expect("stack").iter().enumerate() {
        t += s["timeDeltas"][i].as_f64().expect("delta");
        let mut frames = Vec::new();
        let mut at = stack.as_u64();
        while let Some(k) = at {
            let frame = st["frame"][k as usize].as_u64().expect("frame") as usize;
            let f = ft["func"][frame].as_u64().expect("func") as usize;
            frames.push(string(thread, &func["name"][f]));
            at = st["prefix"][k as usize].as_u64();
        }
        frames.reverse();
        out.push((frames, t));
    }
    out
}

/// A thread's markers: name, start, end (ms).
fn markers(thread: &Value) -> Vec<(String, f64, f64)> {
    let m = &thread["markers"];
    (0..m["length"].as_u64().expect("length") as usize)
        .map(|i| {
            (
                string(thread, &m["name"][i]),
                m["startTime"][i].as_f64().expect("start"),
                m["endTime"][i].as_f64().expect("end"),
            )
        })
        .collect()
}

#[test]
fn a_sampled_dataloader_job_is_a_profile_with_its_processes_stacks_and_op_markers() {
    let test =
        "firefox::a_sampled_dataloader_job_is_a_profile_with_its_processes_stacks_and_op_markers";
    if torch_python(test).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let out = trace_job(tmp.path(), "fp", JOB);
    let file = tmp.path().join("profile.json");
    let (p, err) = profile(&out, &file);
    assert!(
        err.contains("wrote") && err.contains("profiler.firefox.com"),
        "{err}"
    );
    let threads = p["threads"].as_array().expect("threads");

    // A process per traced process, named by its role; the tracer's
    // thread names. A process the job started that wrote no log (torch's
    // import runs `ldconfig -p`, sampled now and then) is there too, by
    // its pid alone.
    let procs: BTreeSet<String> = threads
        .iter()
        .map(|t| t["processName"].as_str().expect("name").to_string())
        .collect();
    let names: Vec<&str> = procs
        .iter()
        .map(|n| n.split(" (").next().unwrap_or(""))
        .filter(|n| !n.starts_with("untraced process "))
        .collect();
    assert_eq!(names, ["main", "worker 0", "worker 1"], "{procs:?}\n{err}");
    assert!(
        threads.iter().any(|t| t["name"] == "QueueFeederThread"),
        "no thread named by the tracer"
    );

    // Every sample of the samples file, as `attribute` counts them.
    let all: Vec<Vec<(Vec<String>, f64)>> = threads.iter().map(samples).collect();
    let count: usize = all.iter().map(Vec::len).sum();
    let total = attribute_json(Path::new(&out))["total_samples"]
        .as_u64()
        .expect("total_samples");
    assert_eq!(
        count as u64, total,
        "samples in the profile, and attribute's total\n{err}"
    );
    let (first, last) = all
        .iter()
        .flatten()
        .fold((f64::MAX, f64::MIN), |(a, b), (_, t)| {
            (a.min(*t), b.max(*t))
        });

    // The op's spans: markers named `Spin` on the workers' main threads,
    // inside the run; the samples in them have outer;inner on their stack.
    let (mut spins, mut inside, mut chained) = (0, 0, 0);
    for (t, thread) in threads.iter().enumerate() {
        for (name, a, b) in markers(thread) {
            assert!(a < b, "{name}: {a} >= {b}");
            if name != "Spin" {
                continue;
            }
            spins += 1;
            assert!(
                thread["processName"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("worker"))
                    && thread["pid"] == thread["tid"],
                "Spin on {} {}",
                thread["processName"],
                thread["tid"]
            );
            // On the samples' clock: each span (50 ms of its thread's
            // CPU) holds its thread's samples, and begins inside the run
            // (its end may follow the last sample: a worker's tail after
            // its last span can go unsampled on a busy machine).
            assert!(
                first <= a && a <= last,
                "Spin [{a}, {b}] outside [{first}, {last}]"
            );
            let held: Vec<&(Vec<String>, f64)> = all[t]
                .iter()
                .filter(|(_, at)| (a..=b).contains(at))
                .collect();
            assert!(
                held.len() >= 10,
                "Spin [{a}, {b}] holds {} samples",
                held.len()
            );
            for (frames, _) in held {
                inside += 1;
                chained += usize::from(frames.windows(2).any(|w| w == ["outer", "inner"]));
            }
        }
    }
    assert_eq!(spins, 8, "one Spin marker per item");
    assert!(inside >= 200, "{inside} samples in Spin spans");
    assert!(
        chained * 10 >= inside * 9,
        "{chained} of {inside} samples in Spin have outer;inner"
    );
}

#[test]
fn a_folder_without_logs_is_a_clear_error_and_nothing_is_written() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("profile.json");
    let dir = tmp.path().join("empty");
    std::fs::create_dir(&dir).expect("dir");
    let o = lotus_env(
        &[
            "trace",
            "view",
            s(&dir),
            "--format",
            "firefox",
            "--out",
            s(&file),
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no trace logs") && err.contains("empty"),
        "{err}"
    );
    assert!(!file.exists(), "a profile was left behind");
}
