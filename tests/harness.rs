//! The Python op harness, run as `lotus map` runs it (the files written by
//! `harness::write_harness`, the control library of this build), with this
//! test as the lotus side of the control channel.
//!
//! The fixture-op tests need Pillow and numpy in the Python they use
//! (`LOTUS_PYTHON`, else the workspace's `.venv`, else `python3`); they fail
//! saying so when those are missing.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::any_python as python;
use crate::map_harness as harness;
use harness::{HarnessArgs, HarnessFiles, HarnessMode, HarnessResult, HarnessStage};
use lotus_control::host::ControlHost;
use lotus_protocol::Reply;

const PATIENCE: Duration = Duration::from_secs(120);

/// Fails the test, saying what to install, when the Python lacks Pillow or
/// numpy (the fixture ops need both).
fn require_pillow_and_numpy() {
    let py = python();
    let out = Command::new(&py)
        .args(["-c", "import PIL, numpy"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run Python {}: {e}", py.display()));
    assert!(
        out.status.success(),
        "the fixture ops need Pillow and numpy, which {} cannot import:\n{}\n\
         install them (python3 -m venv .venv && .venv/bin/pip install pillow numpy) \
         or point LOTUS_PYTHON at a Python that has them",
        py.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One harness run: what the fake lotus side saw and what the harness left.
struct Run {
    requests: Vec<String>,
    /// What the `answer` hook recorded when each request arrived.
    notes: Vec<String>,
    output: Output,
    /// The harness process's id.
    pid: u32,
    result: Option<HarnessResult>,
    _files: HarnessFiles,
    _dir: tempfile::TempDir,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    fn result(&self) -> &HarnessResult {
        self.result.as_ref().unwrap_or_else(|| {
            panic!(
                "the harness wrote no result ({}):\n{}",
                self.output.status,
                self.stderr()
            )
        })
    }

    fn assert_ok(&self) -> &HarnessResult {
        assert_eq!(self.code(), Some(0), "harness failed:\n{}", self.stderr());
        let result = self.result();
        assert_eq!(result.error, None);
        result
    }
}

struct Options<'a> {
    warmup: u32,
    window_ms: u64,
    min_iterations: u64,
    empty: bool,
    name: Option<&'a str>,
    env: Vec<(&'a str, String)>,
    unsampled_ms: Option<u64>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            warmup: 2,
            window_ms: 20,
            min_iterations: 3,
            empty: false,
            name: None,
            env: Vec::new(),
            unsampled_ms: None,
        }
    }
}

/// Runs the harness on `op_file` with a fake lotus side: `answer` gets each
/// request line, replies through the host, and may return a note.
fn run_harness(
    op_file: &Path,
    opts: Options<'_>,
    mut answer: impl FnMut(&str, &mut ControlHost) -> Option<String>,
) -> Run {
    let files = harness::write_harness().expect("write the harness");
    assert!(files.harness.is_file());
    assert!(files.dir.path().join("lotus.py").is_file());
    let control_lib = common::control_lib();
    let dir = tempfile::tempdir().expect("temp dir");
    let result_path = dir.path().join("result.json");
    let args = HarnessArgs {
        op_file: op_file.to_path_buf(),
        warmup: opts.warmup,
        window: Duration::from_millis(opts.window_ms),
        min_iterations: opts.min_iterations,
        result: result_path.clone(),
        empty: opts.empty,
        name: opts.name.map(str::to_string),
        threads: None,
        cwd: None,
        runs: None,
        run_timeout: None,
        unsampled: opts.unsampled_ms.map(Duration::from_millis),
    };
    let mut cmd = Command::new(python());
    cmd.arg(&files.harness)
        .args(args.to_args())
        .env(harness::ENV_CONTROL_LIB, &control_lib)
        .env("LOTUS_BACKEND", "perf")
        .env_remove("PYTHONPATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    let mut host = ControlHost::new().expect("pipes");
    host.configure(&mut cmd);
    let mut child = cmd.spawn().expect("start the harness");
    host.close_child_ends();
    let pid = child.id();
    let (mut requests, mut notes) = (Vec::new(), Vec::new());
    loop {
        match host.recv_line(Some(PATIENCE)) {
            Ok(Some(line)) => {
                if let Some(note) = answer(&line, &mut host) {
                    notes.push(note);
                }
                requests.push(line);
            }
            Ok(None) => break,
            Err(e) => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("wait");
                panic!(
                    "control channel: {e}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    let output = child.wait_with_output().expect("wait for the harness");
    let result = result_path
        .exists()
        .then(|| HarnessResult::read(&result_path).expect("result JSON"));
    Run {
        requests,
        notes,
        output,
        pid,
        result,
        _files: files,
        _dir: dir,
    }
}

fn ok(_: &str, host: &mut ControlHost) -> Option<String> {
    host.reply(&Reply::Ok).expect("reply");
    None
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write test file");
    path
}

fn count_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// An op that appends a line to COUNT_FILE per call; its setup reads a file
/// relative to its own folder (the harness runs it there).
const COUNTING_OP: &str = r#"
import os

NAME = "Counted"

def setup():
    with open("input.txt") as f:  # relative: the harness chdirs here
        assert f.read() == "payload"
    return open(os.environ["COUNT_FILE"], "ab", buffering=0)

def op(f):
    f.write(b"call\n")
"#;

/// With `--unsampled-ms` the op is called again after the window, between
/// "sampling off" and "sampling on" (each waiting for lotus's reply), for
/// that much CPU time; the calls are timed in the result. Where lotus
/// refuses, the result says why and the run still succeeds.
#[test]
fn after_the_window_the_op_runs_timed_with_sampling_stopped() {
    let ops = tempfile::tempdir().expect("temp dir");
    let op_file = write(ops.path(), "counted_op.py", COUNTING_OP);
    write(ops.path(), "input.txt", "payload");
    let count_file = ops.path().join("calls.txt");
    let options = || Options {
        warmup: 3,
        window_ms: 20,
        unsampled_ms: Some(10),
        env: vec![("COUNT_FILE", count_file.display().to_string())],
        ..Options::default()
    };
    let run = run_harness(&op_file, options(), |_, host| {
        let calls = count_lines(&count_file);
        host.reply(&Reply::Ok).expect("reply");
        Some(calls.to_string())
    });
    let result = run.assert_ok();
    assert_eq!(
        run.requests,
        ["resume Counted", "pause", "sampling off", "sampling on"]
    );
    let iterations = result.iterations.expect("iterations");
    let unsampled = result.unsampled.expect("unsampled calls");
    assert_eq!(
        run.notes,
        [
            "3".to_string(),
            (3 + iterations).to_string(),
            (3 + iterations).to_string(),
            (3 + iterations + unsampled.calls).to_string()
        ],
        "the unsampled calls come after the window, between off and on"
    );
    assert!(unsampled.calls >= 1, "{unsampled:?}");
    // At least the CPU time asked for, unless the wall-clock cap (three
    // times that) came first.
    assert!(
        unsampled.cpu_ns >= 10_000_000 || unsampled.wall_ns >= 30_000_000,
        "{unsampled:?}"
    );
    assert_eq!(result.unsampled_error, None);

    // lotus refuses to stop sampling: no reference, a reason, no failure.
    std::fs::remove_file(&count_file).expect("reset the count");
    let run = run_harness(&op_file, options(), |line, host| {
        let reply = if line.starts_with("sampling") {
            Reply::Error("this backend cannot stop sampling".into())
        } else {
            Reply::Ok
        };
        host.reply(&reply).expect("reply");
        None
    });
    let result = run.assert_ok();
    assert_eq!(run.requests, ["resume Counted", "pause", "sampling off"]);
    assert_eq!(result.unsampled, None);
    assert!(
        result
            .unsampled_error
            .as_deref()
            .is_some_and(|e| e.contains("cannot stop sampling")),
        "{result:?}"
    );
}

#[test]
fn op_mode_warms_up_outside_the_window_then_loops_inside_it() {
    let ops = tempfile::tempdir().expect("temp dir");
    let op_file = write(ops.path(), "counted_op.py", COUNTING_OP);
    write(ops.path(), "input.txt", "payload");
    let count_file = ops.path().join("calls.txt");
    let run = run_harness(
        &op_file,
        Options {
            warmup: 5,
            window_ms: 30,
            min_iterations: 7,
            env: vec![("COUNT_FILE", count_file.display().to_string())],
            ..Options::default()
        },
        |_, host| {
            // The calls made so far, as the window opens and closes.
            let calls = count_lines(&count_file);
            host.reply(&Reply::Ok).expect("reply");
            Some(calls.to_string())
        },
    );
    let result = run.assert_ok();
    assert_eq!(run.requests, ["resume Counted", "pause"]);
    let iterations = result.iterations.expect("iterations");
    assert_eq!(
        run.notes,
        ["5".to_string(), (5 + iterations).to_string()],
        "warm-up calls before the window"
    );
    assert_eq!(
        count_lines(&count_file) as u64,
        5 + iterations,
        "no call after the window"
    );
    assert!(iterations >= 7, "{iterations}");
    assert_eq!(result.name, "Counted");
    assert_eq!(result.mode, Some(HarnessMode::Op));
    assert_eq!(result.warmup, Some(5));
    assert!(
        result.window_ns.expect("window_ns") >= 30_000_000,
        "{result:?}"
    );
    assert!(result.setup_ns.is_some());
    assert!(result.ns_per_iteration().expect("per call") > 0.0);
    assert_eq!(result.pid, run.pid);
    assert_eq!(result.op_file.as_deref(), Some(op_file.as_path()));
}

#[test]
fn min_iterations_holds_the_window_open_past_its_time() {
    let ops = tempfile::tempdir().expect("temp dir");
    let op_file = write(
        ops.path(),
        "Sleepy.py",
        "import time\nop = lambda x: time.sleep(0.002)\n",
    );
    let run = run_harness(
        &op_file,
        Options {
            window_ms: 1,
            min_iterations: 20,
            ..Options::default()
        },
        ok,
    );
    let result = run.assert_ok();
    assert_eq!(
        run.requests,
        ["resume Sleepy", "pause"],
        "the name is the file stem"
    );
    assert_eq!(result.iterations, Some(20));
    assert!(result.window_ns.expect("window_ns") >= 40_000_000);
}

#[test]
fn name_flag_overrides_the_files_name() {
    let ops = tempfile::tempdir().expect("temp dir");
    let op_file = write(
        ops.path(),
        "Thing.py",
        "NAME = 'FromFile'\ndef op(x):\n    return x\n",
    );
    let run = run_harness(
        &op_file,
        Options {
            name: Some("Renamed"),
            ..Options::default()
        },
        ok,
    );
    assert_eq!(run.assert_ok().name, "Renamed");
    assert_eq!(run.requests, ["resume Renamed", "pause"]);
}

#[test]
fn a_file_without_op_runs_as_a_script_with_its_own_windows() {
    let ops = tempfile::tempdir().expect("temp dir");
    let op_file = write(
        ops.path(),
        "pipeline.py",
        r#"
import sys
import lotus

def helper():
    op = "a local named op does not make this an op file"
    return op

class Holder:
    op = None

if __name__ == "__main__":
    assert sys.argv[0].endswith("pipeline.py"), sys.argv
    assert lotus.active()
    for stage in ("Decode", "Crop"):
        lotus.resume(stage)
        sum(range(1000))
        lotus.pause()
"#,
    );
    let run = run_harness(&op_file, Options::default(), ok);
    let result = run.assert_ok();
    assert_eq!(
        run.requests,
        ["resume Decode", "pause", "resume Crop", "pause"]
    );
    assert_eq!(result.mode, Some(HarnessMode::Script));
    assert_eq!(result.name, "pipeline");
    assert_eq!(result.iterations, None);
}

#[test]
fn an_op_that_raises_in_the_window_exits_3_with_its_traceback() {
    let ops = tempfile::tempdir().expect("temp dir");
    let op_file = write(
        ops.path(),
        "Flaky.py",
        "calls = 0\n\ndef op(x):\n    global calls\n    calls += 1\n    if calls == 4:\n        \
         raise ValueError('boom on call 4')\n",
    );
    let run = run_harness(
        &op_file,
        Options {
            warmup: 2,
            min_iterations: 10,
            ..Options::default()
        },
        ok,
    );
    assert_eq!(run.code(), Some(3), "{}", run.stderr());
    let stderr = run.stderr();
    assert!(
        stderr.contains("Traceback (most recent call last)"),
        "{stderr}"
    );
    assert!(stderr.contains("Flaky.py\", line 7"), "{stderr}");
    assert!(stderr.contains("ValueError: boom on call 4"), "{stderr}");
    let result = run.result();
    assert_eq!(result.stage, Some(HarnessStage::Window));
    assert!(result
        .error
        .as_deref()
        .unwrap_or("")
        .contains("ValueError: boom on call 4"));
    assert_eq!(
        run.requests,
        ["resume Flaky", "pause"],
        "the window is closed after the failure"
    );
}

#[test]
fn failures_before_the_window_name_their_stage() {
    let ops = tempfile::tempdir().expect("temp dir");
    let cases = [
        (
            "ImportFails.py",
            "import no_such_module_here\nop = len\n",
            HarnessStage::Import,
            "ModuleNotFoundError",
        ),
        (
            "SetupFails.py",
            "def setup():\n    return open('missing.bin')\n\nop = len\n",
            HarnessStage::Setup,
            "FileNotFoundError",
        ),
        (
            "WarmupFails.py",
            "def op(x):\n    return 1 / 0\n",
            HarnessStage::Warmup,
            "ZeroDivisionError",
        ),
        (
            "ScriptFails.py",
            "raise KeyError('no such stage')\n",
            HarnessStage::Script,
            "KeyError",
        ),
        (
            "ScriptExits.py",
            "import sys\nsys.exit(5)\n",
            HarnessStage::Script,
            "exited with status 5",
        ),
    ];
    for (file, source, stage, expected) in cases {
        let op_file = write(ops.path(), file, source);
        let run = run_harness(&op_file, Options::default(), ok);
        assert_eq!(run.code(), Some(3), "{file}: {}", run.stderr());
        assert!(run.stderr().contains(expected), "{file}: {}", run.stderr());
        let result = run.result();
        assert_eq!(result.stage, Some(stage), "{file}");
        assert!(
            result.error.as_deref().unwrap_or("").contains(expected),
            "{file}: {result:?}"
        );
        assert!(
            run.requests.is_empty(),
            "{file}: no window opened: {:?}",
            run.requests
        );
    }
}

#[test]
fn a_script_that_exits_zero_succeeds() {
    let ops = tempfile::tempdir().expect("temp dir");
    let op_file = write(
        ops.path(),
        "Quits.py",
        "import sys, lotus\nlotus.resume('Q')\nlotus.pause()\nsys.exit(0)\n",
    );
    let run = run_harness(&op_file, Options::default(), ok);
    run.assert_ok();
    assert_eq!(run.requests, ["resume Q", "pause"]);
}

#[test]
fn a_thread_left_running_does_not_keep_the_harness_from_exiting() {
    // A non-daemon thread that never ends: a normal interpreter exit would
    // wait for it forever (the control channel's PATIENCE bounds the test).
    let ops = tempfile::tempdir().expect("temp dir");
    let op_file = write(
        ops.path(),
        "Threaded.py",
        r#"import sys, threading

def setup():
    threading.Thread(target=threading.Event().wait).start()
    sys.stdout.write("from setup, unflushed")
    return 1

def op(x):
    return x + 1
"#,
    );
    let opts = Options {
        // Buffered stdout: the harness must flush what the op printed.
        env: vec![("PYTHONUNBUFFERED", String::new())],
        ..Options::default()
    };
    let run = run_harness(&op_file, opts, ok);
    run.assert_ok();
    assert_eq!(
        String::from_utf8_lossy(&run.output.stdout),
        "from setup, unflushed"
    );
}

#[test]
fn a_syntax_error_exits_2_naming_the_file_and_line() {
    let ops = tempfile::tempdir().expect("temp dir");
    let op_file = write(
        ops.path(),
        "Broken.py",
        "def setup():\n    return 1\n\ndef op(x):\n    return x +\n",
    );
    let run = run_harness(&op_file, Options::default(), ok);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    let stderr = run.stderr();
    assert!(
        stderr.contains(&format!("{}:5", op_file.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("return x +"),
        "the offending line is shown: {stderr}"
    );
    let result = run.result();
    assert_eq!(result.stage, Some(HarnessStage::Parse));
    assert_eq!(result.mode, None);
    assert_eq!(result.name, "Broken");
    assert!(run.requests.is_empty());
}

#[test]
fn a_missing_op_file_exits_2() {
    let ops = tempfile::tempdir().expect("temp dir");
    let run = run_harness(&ops.path().join("Nope.py"), Options::default(), ok);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    assert_eq!(run.result().stage, Some(HarnessStage::Read));
    assert!(run.stderr().contains("Nope.py"), "{}", run.stderr());
}

#[test]
fn a_refused_window_exits_4() {
    let ops = tempfile::tempdir().expect("temp dir");
    let op_file = write(ops.path(), "Fine.py", "op = lambda x: x\n");
    let run = run_harness(&op_file, Options::default(), |_, host| {
        host.reply(&Reply::Error("perf_event_paranoid is 4".into()))
            .expect("reply");
        None
    });
    assert_eq!(run.code(), Some(4), "{}", run.stderr());
    let result = run.result();
    assert_eq!(result.stage, Some(HarnessStage::Control));
    assert!(
        result
            .error
            .as_deref()
            .unwrap_or("")
            .contains("perf_event_paranoid is 4"),
        "{result:?}"
    );
}

#[test]
fn empty_runs_the_same_loop_around_nothing() {
    let ops = tempfile::tempdir().expect("temp dir");
    // The op file is not even read in --empty mode.
    let run = run_harness(
        &ops.path().join("Whatever.py"),
        Options {
            empty: true,
            min_iterations: 1000,
            window_ms: 5,
            ..Options::default()
        },
        ok,
    );
    let result = run.assert_ok();
    assert_eq!(run.requests, ["resume (empty)", "pause"]);
    assert_eq!(result.name, "(empty)");
    assert_eq!(result.mode, Some(HarnessMode::Op));
    assert!(result.iterations.expect("iterations") >= 1000);
}

#[test]
fn every_fixture_op_runs_under_the_harness() {
    require_pillow_and_numpy();
    let ops = common::root().join("fixtures").join("ops");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&ops).expect("fixtures/ops") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "py") {
            names.push(path);
        }
    }
    names.sort();
    let stems: Vec<String> = names
        .iter()
        .map(|p| p.file_stem().expect("stem").to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        stems,
        [
            "CKernels",
            "Collation",
            "Loader",
            "Normalize",
            "RandomHorizontalFlip",
            "RandomResizedCrop",
            "ToTensor"
        ]
    );
    for (path, stem) in names.iter().zip(&stems) {
        let run = run_harness(
            path,
            Options {
                warmup: 1,
                window_ms: 30,
                min_iterations: 3,
                ..Options::default()
            },
            ok,
        );
        let result = run.assert_ok();
        assert_eq!(result.name, *stem);
        assert_eq!(result.mode, Some(HarnessMode::Op), "{stem}");
        assert!(result.iterations.expect("iterations") >= 3, "{stem}");
        assert_eq!(
            run.requests,
            [format!("resume {stem}"), "pause".to_string()]
        );
    }
}

/// Builds the fixture C library with `cc`, as CKernels' setup would.
fn build_fixture_clib(dir: &Path) -> PathBuf {
    let lib = dir.join("liblotus_fixture_kernels.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(
            common::root()
                .join("fixtures")
                .join("clib/lotus_fixture_kernels.c"),
        )
        .output()
        .unwrap_or_else(|e| panic!("the CKernels fixture needs a C compiler ({cc}): {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lib
}

fn read_counts(path: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let get = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} count in {text:?}"))
    };
    (get("dot "), get("blur "))
}

#[test]
fn ckernels_calls_the_functions_in_the_c_library() {
    require_pillow_and_numpy();
    let dir = tempfile::tempdir().expect("temp dir");
    let lib = build_fixture_clib(dir.path());
    let counts = dir.path().join("counts.txt");
    let run = run_harness(
        &common::root().join("fixtures").join("ops/CKernels.py"),
        Options {
            warmup: 3,
            window_ms: 20,
            min_iterations: 5,
            env: vec![
                ("LOTUS_FIXTURE_CLIB", lib.display().to_string()),
                ("LOTUS_FIXTURE_CLIB_COUNTS", counts.display().to_string()),
            ],
            ..Options::default()
        },
        ok,
    );
    let result = run.assert_ok();
    let calls = 3 + result.iterations.expect("iterations");
    // setup() checks one dot product against numpy; every op call runs both.
    assert_eq!(read_counts(&counts), (calls + 1, calls));
}

#[test]
fn ckernels_compiles_its_library_when_none_is_given() {
    require_pillow_and_numpy();
    let tmp = tempfile::tempdir().expect("temp dir");
    let counts = tmp.path().join("counts.txt");
    let run = run_harness(
        &common::root().join("fixtures").join("ops/CKernels.py"),
        Options {
            env: vec![
                ("TMPDIR", tmp.path().display().to_string()),
                ("LOTUS_FIXTURE_CLIB", String::new()),
                ("LOTUS_FIXTURE_CLIB_COUNTS", counts.display().to_string()),
            ],
            ..Options::default()
        },
        ok,
    );
    run.assert_ok();
    let cache: Vec<PathBuf> = std::fs::read_dir(tmp.path())
        .expect("tmp")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("lotus-fixture-clib-"))
        })
        .collect();
    assert_eq!(cache.len(), 1, "one cache folder under TMPDIR: {cache:?}");
    assert!(read_counts(&counts).1 > 0);
}
