//! `lotus map`'s memory does not grow with the windows a script opens
//! (issue 23): a run keeps its windows summed, not one record each in
//! lotus-core's form (over a kilobyte a window: 300,000 windows cost
//! 538 MB before). Alone in its test binary: the peak resident size of
//! this process's children (`getrusage(RUSAGE_CHILDREN)`) is lotus's (or
//! its op process's), no other test's.

use std::path::Path;

use crate::common::{lotus_env, python, s};

/// A script that opens `n` short windows, one name.
const SCRIPT: &str = r#"
import os
import lotus

for i in range(int(os.environ["WINDOWS"])):
    lotus.resume("Many")
    sum(range(50))
    lotus.pause()
"#;

/// The peak resident size of every child waited for so far, in KiB.
fn children_peak_kib() -> i64 {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid
    // rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    usage.ru_maxrss
}

/// Maps the script with `n` windows; the windows the mapping counted.
fn map(dir: &Path, n: u64) -> u64 {
    let script = dir.join("Many.py");
    std::fs::write(&script, SCRIPT).expect("write");
    let out = dir.join(format!("m{n}.json"));
    let py = python();
    let windows = n.to_string();
    let o = lotus_env(
        &[
            "map",
            "--backend",
            "perf",
            "--runs",
            "1",
            "--min-samples",
            "1",
            "--no-baseline",
            "--timeout",
            "300",
            "--python",
            s(&py),
            "--out",
            s(&out),
            s(&script),
        ],
        &[("WINDOWS", std::ffi::OsStr::new(&windows))],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("mapping")).expect("json");
    m["ops"][0]["window"]["windows"].as_u64().expect("windows")
}

/// 100,000 windows cost lotus at most 10 MiB more than 1,000 do (about
/// 100 bytes a window). Before issue 23 each cost about 1.7 KB (170 MB
/// more); until the perf backend kept its closed windows summed (it kept
/// a record of each, counted each one's samples apart and built a list of
/// them at the end) 100,000 cost 26 MiB more here (debug build), after
/// that 3.4 MiB: what is left is each window's two edges, which the
/// sampler needs to place samples in time.
#[test]
fn a_hundred_thousand_windows_cost_a_bounded_amount_of_memory() {
    let tmp = tempfile::tempdir().expect("tmp");
    assert_eq!(map(tmp.path(), 1_000), 1_000);
    let small = children_peak_kib();
    assert_eq!(map(tmp.path(), 100_000), 100_000);
    let large = children_peak_kib();
    let grown_mib = (large - small) as f64 / 1024.0;
    eprintln!("peak resident: {small} KiB with 1,000 windows, {large} KiB with 100,000");
    assert!(
        grown_mib < 10.0,
        "100,000 windows took {grown_mib:.1} MiB more than 1,000 ({small} -> {large} KiB)"
    );
}
