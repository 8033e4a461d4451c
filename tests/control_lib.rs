//! The control library (liblotus_control.so) seen from a real Python
//! process through `lotus-tracer/python/lotus/__init__.py`, with this test as the lotus side of
//! the pipe pair.
//!
//! The round-trip figure is an ignored test that prints, not a timed test:
//! `cargo test -p lotus-cli --release --test e2e -- control_lib:: --ignored --nocapture`.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{any_python as python, control_lib, map_harness_dir};
use lotus_control::host::ControlHost;
use lotus_protocol::{Reply, Request};

/// How long the test waits for the next request before giving up.
const PATIENCE: Duration = Duration::from_secs(60);

/// A Python process running `script` with `lotus` importable, the control
/// library named, and no lotus variables inherited from the test's own
/// environment.
fn python_command(script: &str) -> Command {
    let mut cmd = Command::new(python());
    cmd.arg("-c")
        .arg(script)
        .env("PYTHONPATH", map_harness_dir())
        .env("LOTUS_CONTROL_LIB", control_lib())
        .env_remove("LOTUS_BACKEND")
        .env_remove("LOTUS_CONTROL_FDS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

struct Served {
    /// The request lines, in order, without newlines.
    requests: Vec<String>,
    output: Output,
}

impl Served {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    fn assert_success(&self) {
        assert!(
            self.output.status.success(),
            "python failed ({}):\nstdout:\n{}\nstderr:\n{}",
            self.output.status,
            self.stdout(),
            String::from_utf8_lossy(&self.output.stderr)
        );
    }
}

/// Runs `cmd` under a fake lotus process: each request line is recorded and
/// handed to `answer`, which replies (or not) through the host.
fn serve(mut cmd: Command, mut answer: impl FnMut(&str, &mut ControlHost)) -> Served {
    let mut host = ControlHost::new().expect("pipes");
    host.configure(&mut cmd);
    cmd.env("LOTUS_BACKEND", "perf");
    let mut child = cmd.spawn().expect("start python");
    host.close_child_ends();
    let mut requests = Vec::new();
    loop {
        match host.recv_line(Some(PATIENCE)) {
            Ok(Some(line)) => {
                answer(&line, &mut host);
                requests.push(line);
            }
            Ok(None) => break,
            Err(e) => {
                let _ = child.kill();
                let output = child.wait_with_output().expect("wait");
                panic!(
                    "control channel: {e}; requests so far {requests:?}\nstderr:\n{}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
    }
    let output = child.wait_with_output().expect("wait for python");
    Served { requests, output }
}

fn ok(_: &str, host: &mut ControlHost) {
    host.reply(&Reply::Ok).expect("reply");
}

#[test]
fn requests_arrive_in_order_and_name_the_op() {
    let served = serve(
        python_command(
            "import lotus\n\
             assert lotus.active() is True\n\
             print(lotus.backend())\n\
             lotus.resume('Foo')\n\
             lotus.pause()\n\
             lotus.resume()\n\
             lotus.pause()\n\
             lotus.detach()\n\
             print('done')\n",
        ),
        ok,
    );
    served.assert_success();
    assert_eq!(
        served.requests,
        ["resume Foo", "pause", "resume ", "pause", "detach"]
    );
    assert_eq!(
        Request::decode(&served.requests[2]),
        Ok(Request::Resume { op: String::new() }),
        "an unnamed resume is a resume with an empty op"
    );
    assert_eq!(served.stdout(), "perf\ndone\n");
}

#[test]
fn resume_returns_only_after_the_reply() {
    let served = serve(
        python_command(
            "import lotus, time\n\
             t = time.perf_counter()\n\
             lotus.resume('Slow')\n\
             print(time.perf_counter() - t)\n\
             lotus.pause()\n",
        ),
        |line, host| {
            if line.starts_with("resume") {
                std::thread::sleep(Duration::from_millis(200));
            }
            host.reply(&Reply::Ok).expect("reply");
        },
    );
    served.assert_success();
    let took: f64 = served
        .stdout()
        .trim()
        .parse()
        .expect("python printed a duration");
    assert!(
        took >= 0.2,
        "lotus.resume returned after {took} s, before the 200 ms reply"
    );
    assert_eq!(served.requests, ["resume Slow", "pause"]);
}

/// With `LOTUS_WINDOW_STAMPS=1` (lotus map under perf) resume and pause
/// stamp their edge on CLOCK_MONOTONIC with the process's own counters and
/// return without a reply: lotus here never answers, and the calls still
/// return, in order, with times inside the span Python saw around them.
#[test]
fn stamped_edges_go_out_without_waiting_for_a_reply() {
    let mut cmd = python_command(
        "import lotus, time\n\
         t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)\n\
         lotus.resume('Stamped')\n\
         x = sum(range(200000))\n\
         lotus.pause()\n\
         t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)\n\
         print(t0, t1)\n",
    );
    cmd.env("LOTUS_WINDOW_STAMPS", "1");
    let served = serve(cmd, |_, _| {});
    served.assert_success();
    let span: Vec<u64> = served
        .stdout()
        .split_whitespace()
        .map(|v| v.parse().expect("a time"))
        .collect();
    let edges: Vec<Request> = served
        .requests
        .iter()
        .map(|l| Request::decode(l).expect("a request"))
        .collect();
    let [Request::OpenedAt { op, edge: open }, Request::ClosedAt { edge: close }] =
        edges.as_slice()
    else {
        panic!(
            "expected an opened and a closed edge: {:?}",
            served.requests
        );
    };
    assert_eq!(op, "Stamped");
    assert!(
        span[0] <= open.at_ns && open.at_ns < close.at_ns && close.at_ns <= span[1],
        "edges {open:?} {close:?} outside Python's span {span:?}"
    );
    // The loop between the edges used CPU time, and the process read it.
    assert!(close.own.cpu_ns > open.own.cpu_ns, "{open:?} {close:?}");
    assert!(close.own.cpu_ns - open.own.cpu_ns <= close.at_ns - open.at_ns + 1_000_000);
}

#[test]
fn an_error_reply_raises_with_its_message() {
    let served = serve(
        python_command(
            "import lotus\n\
             try:\n    lotus.resume('Foo')\nexcept RuntimeError as e:\n    print('raised:', e)\n\
             lotus.pause()\n",
        ),
        |line, host| {
            let reply = if line.starts_with("resume") {
                Reply::Error("no counters on this CPU".into())
            } else {
                Reply::Ok
            };
            host.reply(&reply).expect("reply");
        },
    );
    served.assert_success();
    let out = served.stdout();
    assert!(out.starts_with("raised: "), "{out}");
    assert!(out.contains("no counters on this CPU"), "{out}");
    assert!(
        out.contains("lotus_resume"),
        "the message names the call: {out}"
    );
    // A refusal is an answer: the channel stays usable.
    assert_eq!(served.requests, ["resume Foo", "pause"]);
}

#[test]
fn an_over_long_op_name_is_refused_at_once_and_the_channel_stays_usable() {
    let served = serve(
        python_command(
            "import lotus\n\
             try:\n    lotus.resume('x' * 70000)\nexcept RuntimeError as e:\n    print('raised:', e)\n\
             lotus.resume('Ok')\n\
             lotus.pause()\n",
        ),
        ok,
    );
    served.assert_success();
    let out = served.stdout();
    assert!(out.starts_with("raised: "), "{out}");
    assert!(out.contains("64 KiB"), "the message gives the limit: {out}");
    assert_eq!(served.requests, ["resume Ok", "pause"]);
}

#[test]
fn a_garbled_reply_is_an_error_and_the_channel_is_not_used_again() {
    let served = serve(
        python_command(
            "import lotus\n\
             for call in (lambda: lotus.resume('Foo'), lotus.pause):\n    \
                 try:\n        call()\n        print('returned')\n    \
                 except RuntimeError as e:\n        print('raised:', e)\n",
        ),
        |_, host| host.send_raw(b"sure thing\n").expect("reply"),
    );
    served.assert_success();
    let out = served.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].contains("bad reply") && lines[0].contains("sure thing"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("raised:") && lines[1].contains("unusable"),
        "{out}"
    );
    assert_eq!(
        served.requests,
        ["resume Foo"],
        "nothing is sent on a broken channel"
    );
}

#[test]
fn a_reply_split_across_writes_is_read_whole() {
    let served = serve(
        python_command("import lotus\nlotus.resume('Foo')\nlotus.pause()\nprint('ok')\n"),
        |_, host| {
            host.send_raw(b"o").expect("reply");
            std::thread::sleep(Duration::from_millis(20));
            host.send_raw(b"k\n").expect("reply");
        },
    );
    served.assert_success();
    assert_eq!(served.stdout(), "ok\n");
}

#[test]
fn lotus_exiting_mid_call_is_an_error_not_a_hang() {
    let mut cmd = python_command(
        "import lotus\n\
         try:\n    lotus.resume('Foo')\nexcept RuntimeError as e:\n    print('raised:', e)\n",
    );
    let mut host = ControlHost::new().expect("pipes");
    host.configure(&mut cmd);
    let child = cmd.spawn().expect("start python");
    host.close_child_ends();
    assert_eq!(
        host.recv_line(Some(PATIENCE)).expect("request").as_deref(),
        Some("resume Foo")
    );
    drop(host);
    let output = child.wait_with_output().expect("wait");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains("closed the channel"), "{out}");
}

#[test]
fn not_under_lotus_every_call_is_a_no_op() {
    let script = "import lotus\n\
                  assert lotus.active() is False\n\
                  assert lotus.backend() is None\n\
                  lotus.resume('Foo'); lotus.pause(); lotus.detach(); lotus.resume()\n\
                  print('ok')\n";
    // With the library loaded but no lotus variables.
    let out = python_command(script).output().expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    // Without the library at all (a script run by hand).
    let out = python_command(script)
        .env_remove("LOTUS_CONTROL_LIB")
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
}

#[test]
fn a_malformed_environment_fails_with_the_reason() {
    for (fds, expected) in [
        ("7", "<read_fd>,<write_fd>"),
        ("a,b", "is not a file descriptor number"),
        ("900,901", "not open in this process"),
    ] {
        let out = python_command(
            "import lotus\n\
             assert lotus.active()\n\
             try:\n    lotus.resume('Foo')\nexcept RuntimeError as e:\n    print(e)\n",
        )
        .env("LOTUS_BACKEND", "perf")
        .env("LOTUS_CONTROL_FDS", fds)
        .output()
        .expect("python");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("LOTUS_CONTROL_FDS") && text.contains(expected),
            "{fds}: {text}"
        );
    }
}

#[test]
fn vendor_backends_without_their_collector_say_what_is_missing() {
    // Without a channel the vendor's API is called in this process; with
    // no collector to reach (VTune not running the process, no uProf
    // control library), the call fails and says what is missing.
    for (backend, missing) in [
        ("vtune", "INTEL_LIBITTNOTIFY64"),
        ("uprof", "libAMDProfileController"),
    ] {
        let out = python_command(
            "import lotus\n\
             print(lotus.active(), lotus.backend())\n\
             try:\n    lotus.resume('Foo')\nexcept RuntimeError as e:\n    print(e)\n",
        )
        .env("LOTUS_BACKEND", backend)
        .env_remove("INTEL_LIBITTNOTIFY64")
        .env_remove("INTEL_ITTNOTIFY_GROUPS")
        .env_remove("LOTUS_UPROF_CONTROL_LIB")
        .env("AMDUPROF_HOME", "/nonexistent")
        .output()
        .expect("python");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with(&format!("True {backend}\n")), "{text}");
        assert!(text.contains(missing), "{backend}: {text}");
    }
}

#[test]
fn a_forked_child_cannot_use_the_parents_channel() {
    let served = serve(
        python_command(
            "import lotus, os\n\
             pid = os.fork()\n\
             if pid == 0:\n    \
                 try:\n        lotus.resume('Child')\n        os._exit(1)\n    \
                 except RuntimeError as e:\n        \
                     os._exit(0 if 'forked process' in str(e) else 2)\n\
             _, status = os.waitpid(pid, 0)\n\
             print('child', os.waitstatus_to_exitcode(status))\n\
             lotus.resume('Parent')\n\
             lotus.pause()\n",
        ),
        ok,
    );
    served.assert_success();
    assert_eq!(served.stdout(), "child 0\n");
    assert_eq!(served.requests, ["resume Parent", "pause"]);
}

#[test]
fn after_detach_the_channel_is_closed_and_resume_fails() {
    let served = serve(
        python_command(
            "import lotus\n\
             lotus.detach()\n\
             lotus.pause()\n\
             lotus.detach()\n\
             try:\n    lotus.resume('Late')\nexcept RuntimeError as e:\n    print(e)\n",
        ),
        ok,
    );
    served.assert_success();
    assert_eq!(served.requests, ["detach"]);
    assert!(
        served.stdout().contains("after lotus_detach"),
        "{}",
        served.stdout()
    );
}

#[test]
fn the_c_header_matches_the_library() {
    let dir = tempfile::tempdir().expect("temp dir");
    let program = dir.path().join("use_lotus");
    let source = dir.path().join("use_lotus.c");
    std::fs::write(
        &source,
        r#"#include <stdio.h>
#include <string.h>
#include "lotus.h"
int main(void) {
    if (!lotus_active()) return 10;
    if (strcmp(lotus_backend(), "perf") != 0) return 11;
    if (lotus_resume("FromC") != 0) { printf("%s\n", lotus_last_error()); return 12; }
    if (lotus_pause() != 0) return 13;
    if (lotus_resume(NULL) == 0) return 14;
    printf("%s\n", lotus_last_error());
    if (lotus_detach() != 0) return 15;
    return 0;
}
"#,
    )
    .expect("write C source");
    let lib = control_lib();
    let lib_dir = lib.parent().expect("lib folder");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lotus-control/include");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(&include)
        .arg("-o")
        .arg(&program)
        .arg(&source)
        .arg("-L")
        .arg(lib_dir)
        .arg("-llotus_control")
        .output()
        .unwrap_or_else(|e| panic!("this test needs a C compiler ({cc}): {e}"));
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut cmd = Command::new(&program);
    cmd.env("LD_LIBRARY_PATH", lib_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let served = serve(cmd, |line, host| {
        let reply = if line == "resume " {
            Reply::Error("unnamed".into())
        } else {
            Reply::Ok
        };
        host.reply(&reply).expect("reply");
    });
    served.assert_success();
    assert_eq!(
        served.requests,
        ["resume FromC", "pause", "resume ", "detach"]
    );
    assert!(served.stdout().contains("unnamed"), "{}", served.stdout());
}

/// Prints the resume + pause round trip from Python against a lotus side
/// that answers at once. Run with `--ignored --nocapture`, in release.
#[test]
#[ignore = "a measurement, not a check: run with --ignored --nocapture"]
fn round_trip_from_python() {
    let served = serve(
        python_command(
            "import lotus, time\n\
             n = 10000\n\
             for _ in range(200):\n    lotus.resume('Bench'); lotus.pause()\n\
             clock = time.perf_counter_ns\n\
             times = []\n\
             for _ in range(n):\n    \
                 t = clock(); lotus.resume('Bench'); lotus.pause(); times.append(clock() - t)\n\
             times.sort()\n\
             empty = []\n\
             for _ in range(n):\n    t = clock(); empty.append(clock() - t)\n\
             empty.sort()\n\
             print(f'resume+pause over {n}: p50 {times[n // 2] / 1000:.1f} us, '\n      \
                   f'p99 {times[n * 99 // 100] / 1000:.1f} us, max {times[-1] / 1000:.1f} us '\n      \
                   f'(clock alone p50 {empty[n // 2] / 1000:.2f} us)')\n",
        ),
        ok,
    );
    served.assert_success();
    println!("{}", served.stdout().trim());
}
