//! Process lifecycle faults on real processes: a run that fails at the
//! profiling gate, output of the profiled program, partial profiles, ops
//! that leave threads or daemons behind. Each ends within its own bound
//! with a clear message, no process left and no temporary file left.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::common::faults::{assert_no_processes, marker, text, wait_bounded, Scratch};
use crate::common::{python, GOOD_OP};

/// With too few file descriptors, lotus fails at one step or another of
/// starting a run; at some limits the forked child has already reached the
/// profiling gate when the events cannot be opened. At every limit lotus
/// must end with the cause named, within `--timeout`, leaving neither the
/// gate child nor the harness folder.
#[test]
fn gate_failure_from_the_descriptor_limit_ends_cleanly() {
    let s = Scratch::new();
    let mark = marker("gate");
    let op = s.op(&mark, GOOD_OP);
    let py = python();
    let mut at_the_gate = Vec::new();
    for limit in 10..=30 {
        let mut cmd = s.lotus_after(
            &format!("ulimit -n {limit}"),
            &[
                "map",
                "--backend",
                "perf",
                "--runs",
                "1",
                "--warmup",
                "1",
                "--min-samples",
                "100",
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
        assert!(!err.contains("panicked"), "ulimit -n {limit}: {err}");
        if !o.status.success() {
            assert_eq!(o.status.code(), Some(1), "ulimit -n {limit}: {err}");
            assert!(
                err.contains("Too many open files") && err.contains("ulimit -n"),
                "ulimit -n {limit}: the cause and the fix are named: {err}"
            );
        }
        if err.contains("out of file descriptors (perf needs") {
            at_the_gate.push(limit);
        }
        assert_no_processes(&mark);
        s.assert_tmp_empty();
    }
    assert!(
        !at_the_gate.is_empty(),
        "no limit made opening the events fail with the child at the gate"
    );
}

/// `lotus map --format json` without `--out` writes the mapping on stdout;
/// what the op prints (at import, in setup, in every call) goes to stderr.
#[test]
fn what_an_op_prints_stays_out_of_the_mapping() {
    let s = Scratch::new();
    let mark = marker("prints");
    let op = s.op(
        &mark,
        &format!(
            "print('import says {mark}')\n\n\
             def setup():\n    print('setup says {mark}')\n    return list(range(2000))\n\n\
             def op(x):\n    print('op says {mark}')\n    return sorted(x)\n"
        ),
    );
    let py = python();
    let mut cmd = s.lotus(&[
        "map",
        "--backend",
        "perf",
        "--runs",
        "1",
        "--warmup",
        "1",
        "--min-samples",
        "200",
        "--format",
        "json",
        "--python",
        py.to_str().expect("utf-8"),
        op.to_str().expect("utf-8"),
    ]);
    let o = wait_bounded(cmd.spawn().expect("spawn"), Duration::from_secs(120), &mark);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let m: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&o.stdout)));
    assert_eq!(m["ops"][0]["name"], mark.as_str(), "{m}");
    for what in ["import says", "setup says", "op says"] {
        assert!(err.contains(&format!("{what} {mark}")), "{what}: {err}");
    }
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}

/// `lotus profile` without `--out` writes the profile on stdout and the
/// program's output on stderr; with `--out` the program's stdout is
/// lotus's stdout.
#[test]
fn what_a_profiled_program_prints_stays_out_of_the_profile() {
    let s = Scratch::new();
    let mark = marker("profile_prints");
    let py = python();
    let script = format!("print('the program says {mark}')");
    let run = |extra: &[&str]| {
        let mut args = vec!["profile", "--backend", "perf"];
        args.extend_from_slice(extra);
        args.extend(["--", py.to_str().expect("utf-8"), "-c", &script]);
        let o = wait_bounded(
            s.lotus(&args).spawn().expect("spawn"),
            Duration::from_secs(60),
            &mark,
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        o
    };
    let o = run(&[]);
    let p: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&o.stdout)));
    assert_eq!(p["schema"], "lotus.profile/1");
    assert!(text(&o.stderr).contains(&format!("the program says {mark}")));

    let out = s.path().join("p.json");
    let o = run(&["--out", out.to_str().expect("utf-8")]);
    assert_eq!(text(&o.stdout).trim(), format!("the program says {mark}"));
    let written = std::fs::read_to_string(&out).expect("profile written");
    let p: serde_json::Value = serde_json::from_str(&written).expect("JSON");
    assert_eq!(p["schema"], "lotus.profile/1");
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}

/// A program that burns CPU until it is stopped; it creates `started` once
/// it has used 0.3 s of CPU time (so there are samples to keep).
fn endless_program(started: &std::path::Path, mark: &str) -> String {
    format!(
        "import time\nx = 0\nwhile time.process_time() < 0.3:\n    x = sum(range(10000)) + x % 7\n\
         open({:?}, 'w').close()\nwhile True:\n    x = sum(range(10000)) + x % 7  # {mark}\n",
        started.to_str().expect("utf-8")
    )
}

/// The partial profile: its `partial.reason`, and (when the program ran
/// long enough to create `started`) the samples that were kept.
fn assert_partial(path: &std::path::Path, reason: &str, started: &std::path::Path) {
    let text = std::fs::read_to_string(path).expect("the partial profile was written");
    let p: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(p["partial"]["reason"], reason, "{p}");
    let samples: f64 = p["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["value"].as_f64())
        .sum();
    if started.exists() {
        assert!(samples > 0.0, "what was sampled is kept: {p}");
    }
}

/// `lotus profile --timeout` writes what it sampled, marked partial, and
/// exits 1 with a message about the program (not an op).
#[test]
fn profile_timeout_keeps_the_partial_profile() {
    let s = Scratch::new();
    let mark = marker("profile_timeout");
    let started = s.path().join("started");
    let out = s.path().join("p.json");
    let py = python();
    let program = endless_program(&started, &mark);
    let mut cmd = s.lotus(&[
        "profile",
        "--backend",
        "perf",
        "--timeout",
        "3",
        "--out",
        out.to_str().expect("utf-8"),
        "--",
        py.to_str().expect("utf-8"),
        "-c",
        &program,
    ]);
    let o = wait_bounded(cmd.spawn().expect("spawn"), Duration::from_secs(60), &mark);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--timeout 3 s") && err.contains("partial"),
        "{err}"
    );
    assert!(!err.contains("the op"), "map's wording: {err}");
    assert_partial(&out, "timeout", &started);
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}

/// Ctrl-C on `lotus profile` writes what was sampled, marked partial, and
/// exits 130.
#[test]
fn profile_interrupted_keeps_the_partial_profile() {
    let s = Scratch::new();
    let mark = marker("profile_int");
    let started = s.path().join("started");
    let out = s.path().join("p.json");
    let py = python();
    let program = endless_program(&started, &mark);
    let child = s
        .lotus(&[
            "profile",
            "--backend",
            "perf",
            "--out",
            out.to_str().expect("utf-8"),
            "--",
            py.to_str().expect("utf-8"),
            "-c",
            &program,
        ])
        .spawn()
        .expect("spawn");
    let start = std::time::Instant::now();
    while !started.exists() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let o = wait_bounded(child, Duration::from_secs(60), &mark);
    let err = text(&o.stderr);
    assert!(started.exists(), "the program never started: {err}");
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted") && err.contains("partial"),
        "{err}"
    );
    assert_partial(&out, "interrupted", &started);
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}

/// `map_args` for `op` run by `python`, waited for (60 s at most, then
/// everything named `mark` is killed and the test fails).
fn map_op(s: &Scratch, mark: &str, python: &Path, timeout: &str, op: &Path) -> Output {
    let args = map_args(
        python.to_str().expect("utf-8"),
        timeout,
        op.to_str().expect("utf-8"),
    );
    wait_bounded(
        s.lotus(&args).spawn().expect("spawn"),
        Duration::from_secs(60),
        mark,
    )
}

/// The mapping a successful `map_op` printed, which must name `mark` as
/// its first op.
fn mapped_alone(o: &Output, mark: &str) -> serde_json::Value {
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let m: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON mapping");
    assert_eq!(m["ops"][0]["name"], mark, "{m}");
    m
}

/// `lotus map` with small windows, one run, no floor, and the given
/// `--timeout` and interpreter.
fn map_args<'a>(py: &'a str, timeout: &'a str, op: &'a str) -> Vec<&'a str> {
    vec![
        "map",
        "--backend",
        "perf",
        "--runs",
        "1",
        "--warmup",
        "1",
        "--min-samples",
        "200",
        "--no-baseline",
        "--format",
        "json",
        "--timeout",
        timeout,
        "--python",
        py,
        op,
    ]
}

/// A non-daemon thread left by the op would keep Python from exiting: the
/// run finished (its result is written), so it is kept, not timed out.
#[test]
fn a_thread_left_by_the_op_does_not_turn_a_finished_run_into_a_timeout() {
    let s = Scratch::new();
    let mark = marker("thread");
    let op = s.op(
        &mark,
        "import threading, time\n\n\
         def setup():\n    threading.Thread(target=time.sleep, args=(3600,)).start()\n    return list(range(2000))\n\n\
         def op(x):\n    return sorted(x)\n",
    );
    let py = python();
    let o = map_op(&s, &mark, &py, "20", &op);
    mapped_alone(&o, &mark);
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}

/// Whatever keeps the profiled process alive after the harness wrote its
/// result (here an interpreter wrapper that goes on sleeping), the written
/// result ends the run.
#[test]
fn a_written_result_ends_the_run_even_if_the_process_lingers() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    let mark = marker("linger");
    let op = s.op(&mark, GOOD_OP);
    let py = python();
    let wrapper = s.path().join("python-then-sleep");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{py:?} \"$@\"\n[ \"$1\" = --version ] || exec {py:?} -c 'import time; time.sleep(3600)' {mark}\n",
            py = py.to_str().expect("utf-8")
        ),
    )
    .expect("write the wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = map_op(&s, &mark, &wrapper, "30", &op);
    let m = mapped_alone(&o, &mark);
    assert!(
        m["ops"][0]["window"]["samples"].as_u64().unwrap_or(0) > 0,
        "{m}"
    );
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}

/// Python that starts a daemon the classic way (fork, setsid, fork): it
/// leaves the process group and session, and keeps stdout and stderr.
fn daemon_code(mark: &str) -> String {
    format!(
        "import os, sys, time\n\
         if os.fork() == 0:\n\
         \x20   os.setsid()\n\
         \x20   if os.fork() == 0:\n\
         \x20       os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(1000)', {mark:?}])\n\
         \x20   os._exit(0)\n\
         os.wait()\n"
    )
}

/// A `setsid` daemon started by an op must not outlive lotus: it would
/// hold lotus's stdout and stderr, so `lotus map ... | cat` never ends.
#[test]
fn a_daemon_started_by_an_op_does_not_outlive_lotus() {
    let s = Scratch::new();
    let mark = marker("daemon");
    let setup_body: String = daemon_code(&mark)
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    let op = s.op(
        &mark,
        &format!("def setup():\n{setup_body}    return list(range(2000))\n\ndef op(x):\n    return sorted(x)\n"),
    );
    let py = python();
    // Piped outputs: the wait ends only when every holder closed them.
    let o = map_op(&s, &mark, &py, "30", &op);
    mapped_alone(&o, &mark);
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}

/// The same for `lotus profile`: a daemon the program started ends with it.
#[test]
fn a_daemon_started_by_a_profiled_program_does_not_outlive_lotus() {
    let s = Scratch::new();
    let mark = marker("profile_daemon");
    let py = python();
    let code = daemon_code(&mark);
    let o = wait_bounded(
        s.lotus(&[
            "profile",
            "--backend",
            "perf",
            "--",
            py.to_str().expect("utf-8"),
            "-c",
            &code,
        ])
        .spawn()
        .expect("spawn"),
        Duration::from_secs(60),
        &mark,
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let p: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON profile");
    assert_eq!(p["schema"], "lotus.profile/1");
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}

/// Each failure says what happened and what to do: null bytes instead of
/// "line None", an op that ended the process itself (with its status, and
/// whether it printed anything), an op that called sys.exit.
#[test]
fn failures_name_what_happened() {
    let s = Scratch::new();
    let mark = marker("messages");
    let nul = s.op(&format!("{mark}_nul"), "def op(x):\n    return 1\0\n");
    let quiet = s.op(
        &format!("{mark}_quiet"),
        "import os\n\ndef op(x):\n    os._exit(0)\n",
    );
    let loud = s.op(
        &format!("{mark}_loud"),
        "import os, sys\n\ndef op(x):\n    print('last words', flush=True)\n    os._exit(5)\n",
    );
    let exits = s.op(
        &format!("{mark}_exits"),
        "import sys\n\ndef op(x):\n    sys.exit(3)\n",
    );
    let py = python();
    let mut args = map_args(
        py.to_str().expect("utf-8"),
        "30",
        nul.to_str().expect("utf-8"),
    );
    for op in [&quiet, &loud, &exits] {
        args.push(op.to_str().expect("utf-8"));
    }
    let o = wait_bounded(
        s.lotus(&args).spawn().expect("spawn"),
        Duration::from_secs(120),
        &mark,
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let line_of = |op: &str| {
        err.lines()
            .position(|l| l.contains(&format!("op {mark}_{op} (")))
            .map(|i| err.lines().skip(i).take(2).collect::<Vec<_>>().join("\n"))
            .unwrap_or_else(|| panic!("no error for {op}: {err}"))
    };
    let nul = line_of("nul");
    assert!(
        nul.contains("null bytes") && nul.contains("line 2") && !nul.contains("None"),
        "{nul}"
    );
    let quiet = line_of("quiet");
    assert!(
        quiet.contains("exited with status 0 without writing its result")
            && quiet.contains("os._exit(0)")
            && quiet.contains("it printed nothing"),
        "{quiet}"
    );
    let loud = line_of("loud");
    assert!(
        loud.contains("status 5") && loud.contains("see its output above"),
        "{loud}"
    );
    assert!(err.contains("last words"), "{err}");
    let exits = line_of("exits");
    assert!(exits.contains("sys.exit(3)"), "{exits}");
    assert!(!err.contains("panicked"), "{err}");
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}

/// An interpreter or program this user may not execute is "permission
/// denied", naming the path, not "cannot find binary path".
#[test]
fn a_program_that_may_not_be_executed_is_permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    let op = s.op("Good", GOOD_OP);
    let locked = s.path().join("python-locked");
    std::fs::write(&locked, "#!/bin/sh\nexit 0\n").expect("write");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let locked = locked.to_str().expect("utf-8");
    for args in [
        vec![
            "map",
            "--backend",
            "perf",
            "--python",
            locked,
            op.to_str().expect("utf-8"),
        ],
        vec!["profile", "--backend", "perf", "--", locked],
    ] {
        let o = wait_bounded(
            s.lotus(&args).spawn().expect("spawn"),
            Duration::from_secs(60),
            "python-locked",
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("permission denied") && err.contains(locked),
            "{args:?}: {err}"
        );
        assert!(!err.contains("cannot find binary path"), "{args:?}: {err}");
    }
    s.assert_tmp_empty();
}

/// A lotus killed with SIGKILL between runs cannot remove its harness
/// folder: the next lotus removes it (and leaves a running lotus's alone).
#[test]
fn harness_folders_of_a_killed_lotus_are_removed_by_the_next() {
    let s = Scratch::new();
    let mark = marker("stale");
    let mut gone = std::process::Command::new("true").spawn().expect("true");
    gone.wait().expect("wait");
    let stale = s.tmp.join("lotus-harness-killed");
    std::fs::create_dir(&stale).expect("mkdir");
    std::fs::write(stale.join("lotus_harness.py"), "").expect("write");
    std::fs::write(stale.join("lotus.owner"), format!("{} 1", gone.id())).expect("write");
    let op = s.op(&mark, GOOD_OP);
    let py = python();
    let o = map_op(&s, &mark, &py, "30", &op);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!stale.exists(), "the killed lotus's folder is still there");
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}
