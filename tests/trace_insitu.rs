//! In-pipeline attribution's groundwork, end to end: the tracer records
//! the thread that ran each span and where its wall clock stands against
//! CLOCK_MONOTONIC (the clock perf stamps samples with), measured during
//! the run.
//!
//! Python: $LOTUS_PYTHON, else the repository's .venv.

mod common;

use std::ffi::OsStr;
use std::path::Path;

use common::python;
use common::trace_logs::{assert_ok, trace_run};
use lotus_core::trace::clock::{clock_pair_of_line, ClockMap};
use lotus_core::trace::parse::parse_event_line;
use serde_json::Value;

/// A program with one op on its main thread and one on another thread,
/// each run 3 times (1 ms of CPU each); it reports its pid and the other
/// thread's native id.
const THREADS_PY: &str = r#"
import json, os, sys, threading, time
import lotus_trace

def burn(ms):
    end = time.thread_time_ns() + ms * 1_000_000
    while time.thread_time_ns() < end:
        pass

main_op = lotus_trace.wrap(burn, "MainOp")
thread_op = lotus_trace.wrap(burn, "ThreadOp")
got = {}

def run():
    got["tid"] = threading.get_native_id()
    for _ in range(3):
        thread_op(1)

t = threading.Thread(target=run)
t.start()
t.join()
for _ in range(3):
    main_op(1)
with open(sys.argv[1], "w") as f:
    json.dump({"pid": os.getpid(), "thread_tid": got["tid"]}, f)
"#;

/// (CLOCK_REALTIME, CLOCK_MONOTONIC) in ns, read back to back.
fn clocks_now() -> (u64, u64) {
    let read = |id| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes a timespec into a valid local.
        unsafe { libc::clock_gettime(id, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    (read(libc::CLOCK_REALTIME), read(libc::CLOCK_MONOTONIC))
}

fn only_log(dir: &Path) -> (String, String) {
    let logs: Vec<_> = std::fs::read_dir(dir)
        .expect("trace folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("lotus_main_pid_"))
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let text = std::fs::read_to_string(dir.join(&logs[0])).expect("read log");
    (logs[0].clone(), text)
}

#[test]
fn spans_know_their_thread_and_the_clock_offset_is_measured() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let script = tmp.path().join("threads.py");
    let report = tmp.path().join("report.json");
    std::fs::write(&script, THREADS_PY).expect("script");
    let (_, mono_before) = clocks_now();
    let out = trace_run(
        &dir,
        &[],
        &python(),
        &[script.as_os_str(), OsStr::new(&report)],
    );
    let (_, mono_after) = clocks_now();
    assert_ok(&out, "trace run");
    let rep: Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report"))
        .expect("report JSON");
    let pid = rep["pid"].as_u64().expect("pid") as u32;
    let thread_tid = rep["thread_tid"].as_u64().expect("tid") as u32;
    assert_ne!(pid, thread_tid);

    let (name, text) = only_log(&dir);
    assert_eq!(name, format!("lotus_main_pid_{pid}"));
    let lines: Vec<&str> = text.lines().collect();
    // The thread of every op span: `tid=` on the other thread's, none
    // (the main thread) on the main thread's.
    let mut seen = std::collections::BTreeMap::new();
    for line in lines.iter().filter(|l| l.starts_with('S')) {
        let e = parse_event_line(line).unwrap_or_else(|m| panic!("{line}: {m}"));
        *seen.entry((e.name.to_string(), e.tid)).or_insert(0) += 1;
    }
    let want = std::collections::BTreeMap::from([
        (("MainOp".to_string(), None), 3),
        (("ThreadOp".to_string(), Some(thread_tid)), 3),
    ]);
    assert_eq!(seen, want, "{text}");

    // The clock pairs: in the header and after the last block of events.
    assert!(
        clock_pair_of_line(lines[0]).is_some(),
        "header: {}",
        lines[0]
    );
    let last = lines.last().expect("lines");
    assert!(
        last.starts_with("# lotus-trace: clock ") && clock_pair_of_line(last).is_some(),
        "the log ends with a clock line: {last}"
    );
    let map = ClockMap::new(lines.iter().filter_map(|l| clock_pair_of_line(l)).collect());
    assert!(map.pairs().len() >= 2, "{text}");
    // The clocks are the machine's: the offset the tracer measured is the
    // one this process measures (give or take a clock step by NTP).
    let (wall, mono) = clocks_now();
    let here = i128::from(wall) - i128::from(mono);
    for p in map.pairs() {
        let off = p.offset_ns() - here;
        assert!(off.abs() < 5_000_000, "offset {off} ns off: {p:?}");
    }
    // Every span, on the monotonic clock, lies within the run.
    for line in lines.iter().filter(|l| l.starts_with('S')) {
        let e = parse_event_line(line).expect("event");
        let start = map.to_monotonic(e.start_ns).expect("maps");
        let end = map.to_monotonic(e.start_ns + e.dur_ns).expect("maps");
        assert!(
            mono_before <= start && start <= end && end <= mono_after,
            "{line}: [{start}, {end}] not within the run [{mono_before}, {mono_after}]"
        );
    }
}
