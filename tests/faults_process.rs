//! Process lifecycle faults on real processes: a run that fails at the
//! profiling gate, output of the profiled program, partial profiles, ops
//! that leave threads or daemons behind. Each ends within its own bound
//! with a clear message, no process left and no temporary file left.

mod common;

use std::time::Duration;

use common::faults::{assert_no_processes, marker, text, wait_bounded, Scratch};
use common::python;

const GOOD_OP: &str =
    "def setup():\n    return list(range(2000))\n\ndef op(x):\n    return sorted(x, reverse=True)\n";

/// With too few file descriptors to open its events, the forked child has
/// already reached the gate: lotus must end with the cause named, within
/// `--timeout`, leaving neither the gate child nor the harness folder.
#[test]
fn gate_failure_from_the_descriptor_limit_ends_cleanly() {
    let s = Scratch::new();
    let mark = marker("gate");
    let op = s.op(&mark, GOOD_OP);
    let py = python();
    // 16 descriptors: enough to fork the child to the gate, not enough for
    // the per-CPU samplers and the counters.
    let mut cmd = s.lotus_after(
        "ulimit -n 16",
        &[
            "map",
            "--backend",
            "perf",
            "--runs",
            "1",
            "--no-baseline",
            "--timeout",
            "5",
            "--python",
            py.to_str().expect("utf-8"),
            op.to_str().expect("utf-8"),
        ],
    );
    let o = wait_bounded(cmd.spawn().expect("spawn"), Duration::from_secs(60), &mark);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("Too many open files") && err.contains("ulimit -n"),
        "the cause and the fix are named: {err}"
    );
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}
