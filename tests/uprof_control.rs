//! The uProf backend end to end, with stand-ins for uProf:
//!
//! - the control library (liblotus_control.so) under `LOTUS_BACKEND=uprof`
//!   opens stand-in profile-control libraries of both API generations
//!   through its real search path (`LOTUS_UPROF_CONTROL_LIB`, an
//!   `AMDUPROF_HOME` install layout, the dynamic library path) and calls
//!   them from Python, through `lotus.py` and through the harness;
//! - `lotus map --backend uprof` with a stand-in `AMDuProfCLI` first on
//!   PATH gives the mapping `--from-reports` gives on the same reports;
//! - without uProf, `lotus map --backend uprof` fails saying why.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::{control_lib, map_harness_dir};
use lotus_testkit::uprof_standin as standin;
use serde_json::Value;
use standin::{Api, Flavor};

/// A Python command with `lotus` importable, the control library named,
/// `LOTUS_BACKEND=uprof`, no control channel, and none of the places the
/// profile-control library could be found inherited from the test's own
/// environment: each test says where it is.
fn python(args: &[&str], log: &Path) -> Command {
    let mut cmd = Command::new(standin::python());
    cmd.args(args)
        .env("PYTHONPATH", map_harness_dir())
        .env("LOTUS_CONTROL_LIB", control_lib())
        .env("LOTUS_BACKEND", "uprof")
        .env("UPROF_STANDIN_LOG", log)
        .env_remove("LOTUS_CONTROL_FDS")
        .env_remove("LOTUS_UPROF_CONTROL_LIB")
        .env_remove("AMDUPROF_HOME")
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::null());
    cmd
}

fn run(mut cmd: Command) -> Output {
    cmd.output().expect("run python")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Resumes and pauses twice, detaches with a window open, then calls again
/// (no-ops after detach); prints `raised: <message>` for a failed call.
const CALLS: &str = r#"import lotus
assert lotus.active() and lotus.backend() == 'uprof'
def call(f, *a):
    try:
        f(*a)
    except RuntimeError as e:
        print('raised:', e)
        raise SystemExit(0)
call(lotus.resume, 'Op')
call(lotus.pause)
call(lotus.resume, 'Op')
call(lotus.detach)
call(lotus.resume, 'After')
call(lotus.pause)
print('done')
"#;

/// True where a real uProf install could be found instead of the
/// stand-ins: the tests that need "nothing installed" skip there.
fn uprof_installed() -> bool {
    fs::read_dir("/opt")
        .into_iter()
        .flatten()
        .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("AMDuProf")))
        || Path::new("/opt/amd/uprof").exists()
}

#[test]
fn uprof5_library_named_by_the_override_gets_resume_then_pause() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let lib = standin::build_library(
        &tmp.path().join("elsewhere/libcontrol5.so"),
        Flavor::good(Api::V5),
    );
    let log = tmp.path().join("log");
    let mut cmd = python(&["-c", CALLS], &log);
    cmd.env("LOTUS_UPROF_CONTROL_LIB", &lib);
    let o = run(cmd);
    assert_ok(&o);
    assert_eq!(stdout(&o), "done\n");
    assert_eq!(
        standin::calls(&log),
        [
            "amdProfileResumeImpl",
            "amdProfilePauseImpl",
            "amdProfileResumeImpl",
            // detach with a window open pauses it; later calls do nothing
            "amdProfilePauseImpl",
        ]
    );
}

#[test]
fn uprof4_library_in_an_amduprof_home_gets_the_cpu_mode() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let home = tmp.path().join("AMDuProf_4.2-850");
    standin::build_library(
        &home.join("lib/x64/shared/libAMDProfileController.so"),
        Flavor::good(Api::V4),
    );
    let log = tmp.path().join("log");
    let mut cmd = python(&["-c", CALLS], &log);
    cmd.env("AMDUPROF_HOME", &home);
    let o = run(cmd);
    assert_ok(&o);
    assert_eq!(stdout(&o), "done\n");
    assert_eq!(
        standin::calls(&log),
        [
            "amdProfileResume 1",
            "amdProfilePause 1",
            "amdProfileResume 1",
            "amdProfilePause 1"
        ]
    );
}

#[test]
fn a_found_library_others_can_write_is_not_loaded() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("temp dir");
    let home = tmp.path().join("AMDuProf_5.1-701");
    let shared = home.join("lib/x64/shared");
    standin::build_library(
        &shared.join("libAMDProfileController.so"),
        Flavor::good(Api::V5),
    );
    // Any user could have replaced the library in this folder.
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).expect("chmod");
    let log = tmp.path().join("log");
    let mut cmd = python(&["-c", CALLS], &log);
    cmd.env("AMDUPROF_HOME", &home);
    let out = stdout(&run(cmd));
    assert!(out.starts_with("raised: "), "{out}");
    assert!(
        out.contains("is not loaded") && out.contains(&shared.display().to_string()),
        "{out}"
    );
    assert!(out.contains("every user"), "{out}");
    assert!(standin::calls(&log).is_empty(), "the library was called");
}

#[test]
fn the_dynamic_library_path_is_the_last_resort() {
    if uprof_installed() {
        eprintln!("skipped: a uProf install in /opt would be found first");
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("ld");
    standin::build_library(
        &dir.join("libAMDProfileController.so"),
        Flavor::good(Api::V5),
    );
    let log = tmp.path().join("log");
    let mut cmd = python(&["-c", CALLS], &log);
    // A home without the library: the search goes on past it.
    cmd.env("AMDUPROF_HOME", tmp.path().join("empty-home"))
        .env("LD_LIBRARY_PATH", &dir);
    let o = run(cmd);
    assert_ok(&o);
    assert_eq!(standin::calls(&log).len(), 4, "{:?}", standin::calls(&log));
}

#[test]
fn a_missing_library_says_where_it_looked() {
    if uprof_installed() {
        eprintln!("skipped: a uProf install in /opt would be found");
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let home = tmp.path().join("home");
    let mut cmd = python(&["-c", CALLS], &tmp.path().join("log"));
    cmd.env("AMDUPROF_HOME", &home);
    let o = run(cmd);
    assert_ok(&o);
    let out = stdout(&o);
    assert!(out.starts_with("raised: "), "{out}");
    assert!(
        out.contains("cannot find uProf's profile-control library libAMDProfileController.so"),
        "{out}"
    );
    assert!(
        out.contains(&home.join("lib/x64/shared").display().to_string()),
        "{out}"
    );
    assert!(out.contains("LOTUS_UPROF_CONTROL_LIB"), "{out}");

    // An override naming a file that is not there names it.
    let missing = tmp.path().join("nope.so");
    let mut cmd = python(&["-c", CALLS], &tmp.path().join("log"));
    cmd.env("LOTUS_UPROF_CONTROL_LIB", &missing);
    let out = stdout(&run(cmd));
    assert!(
        out.contains(&format!(
            "cannot open uProf's profile-control library {}",
            missing.display()
        )),
        "{out}"
    );
    assert!(out.contains("named by LOTUS_UPROF_CONTROL_LIB"), "{out}");
}

#[test]
fn a_library_with_neither_api_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let lib = standin::build_library(
        &tmp.path().join("libneither.so"),
        Flavor::good(Api::Neither),
    );
    let log = tmp.path().join("log");
    let mut cmd = python(&["-c", CALLS], &log);
    cmd.env("LOTUS_UPROF_CONTROL_LIB", &lib);
    let o = run(cmd);
    assert_ok(&o);
    let out = stdout(&o);
    assert!(out.starts_with("raised: lotus control (uprof): "), "{out}");
    assert!(out.contains(&lib.display().to_string()), "{out}");
    for symbol in [
        "amdProfileResumeImpl",
        "amdProfilePauseImpl",
        "amdProfileResume/",
        "amdProfilePause (uProf 4.x)",
    ] {
        assert!(out.contains(symbol), "{symbol} not named: {out}");
    }
    assert!(standin::calls(&log).is_empty());
}

#[test]
fn a_failed_resume_reports_the_last_error_code_and_its_meaning() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let lib = standin::build_library(
        &tmp.path().join("libfail5.so"),
        Flavor {
            last_error: Some(-6),
            fail_resume: true,
            ..Flavor::good(Api::V5)
        },
    );
    let log = tmp.path().join("log");
    let mut cmd = python(&["-c", CALLS], &log);
    cmd.env("LOTUS_UPROF_CONTROL_LIB", &lib);
    let out = stdout(&run(cmd));
    assert!(
        out.contains(&format!(
            "amdProfileResumeImpl() in {} failed: amdGetLastProfileError() = -6 (AMD_PROFILE_ERROR_VERSION_MISMATCH",
            lib.display()
        )),
        "{out}"
    );
    assert_eq!(standin::calls(&log), ["amdProfileResumeImpl"]);

    // 4.x, and no amdGetLastProfileError to ask.
    let lib = standin::build_library(
        &tmp.path().join("libfail4.so"),
        Flavor {
            fail_resume: true,
            ..Flavor::good(Api::V4)
        },
    );
    let mut cmd = python(&["-c", CALLS], &log);
    cmd.env("LOTUS_UPROF_CONTROL_LIB", &lib);
    let out = stdout(&run(cmd));
    assert!(
        out.contains("amdProfileResume(1)") && out.contains("returned false"),
        "{out}"
    );
    assert!(out.contains("has no amdGetLastProfileError"), "{out}");
}

#[test]
fn already_paused_is_not_a_failure() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let lib = standin::build_library(
        &tmp.path().join("libpaused.so"),
        Flavor {
            last_error: Some(-3),
            fail_pause: true,
            ..Flavor::good(Api::V4)
        },
    );
    let log = tmp.path().join("log");
    let mut cmd = python(&["-c", CALLS], &log);
    cmd.env("LOTUS_UPROF_CONTROL_LIB", &lib);
    let o = run(cmd);
    assert_ok(&o);
    assert_eq!(stdout(&o), "done\n");
}

/// The harness in op mode: warm-up calls outside the window, then resume,
/// the op's calls, pause.
#[test]
fn the_harness_opens_one_window_around_the_op() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let lib = standin::build_library(&tmp.path().join("lib5.so"), Flavor::good(Api::V5));
    let log = tmp.path().join("log");
    let op = tmp.path().join("Marked.py");
    fs::write(
        &op,
        "import os\n\ndef op(x):\n    with open(os.environ['UPROF_STANDIN_LOG'], 'a') as f:\n        f.write('op\\n')\n",
    )
    .expect("op file");
    let result = tmp.path().join("result.json");
    let harness = map_harness_dir().join("lotus_harness.py");
    let mut cmd = python(
        &[
            harness.to_str().expect("path"),
            "--op-file",
            op.to_str().expect("path"),
            "--warmup",
            "2",
            "--window-ms",
            "0",
            "--min-iterations",
            "3",
            "--result",
            result.to_str().expect("path"),
        ],
        &log,
    );
    cmd.env("LOTUS_UPROF_CONTROL_LIB", &lib);
    let o = run(cmd);
    assert_ok(&o);
    let r: Value =
        serde_json::from_str(&fs::read_to_string(&result).expect("result")).expect("json");
    assert_eq!(r["iterations"], 3, "{r}");
    assert_eq!(
        standin::calls(&log),
        [
            "op",
            "op",
            "amdProfileResumeImpl",
            "op",
            "op",
            "op",
            "amdProfilePauseImpl"
        ]
    );
}

/// The fixture ops that have uProf reports.
const OPS: &[&str] = &[
    "Collation",
    "Loader",
    "Normalize",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "ToTensor",
];

fn lotus(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(args)
        .env_remove("LOTUS_UPROF_CONTROL_LIB")
        .env_remove("LOTUS_BACKEND")
        .env_remove("LOTUS_CONTROL_FDS")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run lotus")
}

/// What must agree between two mappings: the ops' names, functions and
/// figures, and the functions shared between ops.
fn comparable(m: &Value) -> Value {
    let ops: Vec<Value> = m["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|o| {
            serde_json::json!({
                "name": o["name"],
                "runs": o["runs"],
                "samples": o["samples"],
                "functions": o["functions"],
            })
        })
        .collect();
    serde_json::json!({
        "backend": m["backend"],
        "unit": m["unit"],
        "ops": ops,
        "shared": m["shared"],
    })
}

#[test]
fn map_with_amduprofcli_equals_the_mapping_from_the_same_reports() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let bin = tmp.path().join("bin");
    standin::install_cli(&bin);
    let lib = standin::build_library(&tmp.path().join("lib5.so"), Flavor::good(Api::V5));
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let calls = tmp.path().join("calls");
    let fixtures = standin::fixtures();
    let env = [
        ("PATH", path.as_os_str()),
        ("UPROF_STANDIN_CONTROL_LIB", lib.as_os_str()),
        ("UPROF_STANDIN_FIXTURES", fixtures.as_os_str()),
        ("UPROF_STANDIN_CALLS", calls.as_os_str()),
    ];
    let py = standin::python();
    let live_out = tmp.path().join("live.json");
    let mut args = vec![
        "map",
        "--backend",
        "uprof",
        "--runs",
        "1",
        "--no-baseline",
        "--warmup",
        "1",
        "--min-samples",
        "1",
        "--min-window-ms",
        "1",
        "--python",
        py.to_str().expect("python path"),
        "--out",
        live_out.to_str().expect("path"),
    ];
    let op_files: Vec<String> = OPS
        .iter()
        .map(|o| {
            standin::root()
                .join(format!("fixtures/ops/{o}.py"))
                .display()
                .to_string()
        })
        .collect();
    args.extend(op_files.iter().map(String::as_str));
    let o = lotus(&args, &env);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "lotus map failed: {stderr}");
    let live: Value =
        serde_json::from_str(&fs::read_to_string(&live_out).expect("mapping")).expect("json");

    let from_out = tmp.path().join("from.json");
    let o = lotus(
        &[
            "map",
            "--backend",
            "uprof",
            "--from-reports",
            fixtures.to_str().expect("path"),
            "--out",
            from_out.to_str().expect("path"),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let from: Value =
        serde_json::from_str(&fs::read_to_string(&from_out).expect("mapping")).expect("json");
    assert_eq!(live["ops"].as_array().map(Vec::len), Some(OPS.len()));
    assert_eq!(comparable(&live), comparable(&from));

    // One collect and one report per op, with no control channel: the
    // harness switched uProf itself (the stand-in refuses to report a
    // session whose window never opened).
    let lines = standin::calls(&calls);
    let collects = lines
        .iter()
        .filter(|l| l.starts_with("[\"collect\""))
        .count();
    let reports = lines
        .iter()
        .filter(|l| l.starts_with("[\"report\""))
        .count();
    assert_eq!((collects, reports), (OPS.len(), OPS.len()), "{lines:?}");
}

/// A PATH with the system's folders but no AMDuProfCLI.
fn path_without_uprof() -> std::ffi::OsString {
    std::env::join_paths(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .filter(|d| !d.join("AMDuProfCLI").exists()),
    )
    .expect("PATH")
}

/// `lotus ARGS` with [`path_without_uprof`] and `AMDUPROF_HOME=home`.
fn lotus_without_uprof(home: &Path, args: &[&str]) -> Output {
    lotus(
        args,
        &[
            ("PATH", path_without_uprof().as_os_str()),
            ("AMDUPROF_HOME", home.as_os_str()),
        ],
    )
}

#[test]
fn map_without_uprof_fails_saying_why() {
    if uprof_installed() {
        eprintln!("skipped: uProf is installed here");
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let home = tmp.path().join("no-uprof");
    let op = standin::root().join("fixtures/ops/Loader.py");
    let o = lotus_without_uprof(
        &home,
        &[
            "map",
            "--backend",
            "uprof",
            "--runs",
            "1",
            op.to_str().expect("path"),
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "lotus map should fail: {stderr}");
    assert!(stderr.contains("uprof"), "{stderr}");
    assert!(stderr.contains("`AMDuProfCLI` is not on PATH"), "{stderr}");
    assert!(stderr.contains("install AMD uProf"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn dry_run_without_uprof_prints_the_commands_with_a_note() {
    if uprof_installed() {
        eprintln!("skipped: uProf is installed here");
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let home = tmp.path().join("no-uprof");
    let op = standin::root().join("fixtures/ops/Loader.py");
    let o = lotus_without_uprof(
        &home,
        &[
            "map",
            "--backend",
            "uprof",
            "--dry-run",
            "--no-baseline",
            op.to_str().expect("path"),
        ],
    );
    let out = stdout(&o);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("AMDuProfCLI collect --config tbp --start-paused -o "),
        "{out}"
    );
    assert!(out.contains("AMDuProfCLI report -i "), "{out}");
    assert!(out.contains("/<session> --report-output "), "{out}");
    assert!(out.contains("AMDuProfCLI was not found"), "{out}");
    assert!(out.contains("LOTUS_BACKEND=uprof"), "{out}");
    assert!(!out.contains("LOTUS_CONTROL_FDS"), "{out}");
}

#[test]
fn an_amduprofcli_found_where_others_can_write_is_not_run() {
    use std::os::unix::fs::PermissionsExt;
    if uprof_installed() {
        eprintln!("skipped: uProf is installed here");
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let home = tmp.path().join("AMDuProf_5.1-701");
    let bin = home.join("bin");
    standin::install_cli(&bin);
    let backends = |home: &Path| {
        let o = lotus_without_uprof(home, &["backends", "--json"]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // Found in the install folder it is run (for its version).
    let out = backends(&home);
    assert!(out.contains("lotus test stand-in"), "{out}");
    // With its folder writable by all, it is not.
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = backends(&home);
    assert!(!out.contains("lotus test stand-in"), "{out}");
    assert!(
        out.contains("is not run") && out.contains(&bin.display().to_string()),
        "{out}"
    );
}

/// `--dry-run` shows the interval flag, the report's cutoff, and a window
/// sized by the interval uProf is given: at --frequency 4000, uProf's
/// timer stays at its 1 ms, so 100 samples need a 100 ms window (not the
/// 25 ms that 4000 Hz would give); at 100 Hz, 10 ms and a 1 s window.
#[test]
fn dry_run_shows_the_interval_the_cutoff_and_windows_sized_by_the_interval() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let home = tmp.path().join("no-uprof");
    let op = standin::root().join("fixtures/ops/Loader.py");
    for (hz, collect, window) in [
        (
            "4000",
            "AMDuProfCLI collect --config tbp --start-paused -o ",
            "--window-ms 100 ",
        ),
        (
            "100",
            "AMDuProfCLI collect -e event=timer,interval=10 --start-paused -o ",
            "--window-ms 1000 ",
        ),
    ] {
        let o = lotus_without_uprof(
            &home,
            &[
                "map",
                "--backend",
                "uprof",
                "--dry-run",
                "--no-baseline",
                "--frequency",
                hz,
                "--min-samples",
                "100",
                "--min-window-ms",
                "1",
                op.to_str().expect("path"),
            ],
        );
        let out = stdout(&o);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(out.contains(collect), "{hz} Hz: {out}");
        assert!(out.contains(window), "{hz} Hz: {out}");
        assert!(out.contains(" -f csv --cutoff 1000000"), "{out}");
    }
}

/// The study's scripts under uProf, without its Python binding or
/// itt-python installed: the harness's stand-ins open the windows, which
/// the control library turns into uProf's own calls; the harness times
/// the windows.
#[test]
fn study_scripts_reach_uprof_through_the_stand_ins() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let lib = standin::build_library(&tmp.path().join("lib5.so"), Flavor::good(Api::V5));
    let harness = map_harness_dir().join("lotus_harness.py");
    for (name, script) in [
        (
            "Amd.py",
            "import time, amdprofilecontrol as a\nfor i in range(3):\n    if i == 2:\n        assert a.resume(1) is True\n    time.sleep(0.01)\n    if i == 2:\n        assert a.pause(1) is True\nassert a.get_last_profile_error() == 0\n",
        ),
        (
            "Intel.py",
            "import time, itt\nd = itt.domain_create('x')\nitt.task_begin(d, 't')\nitt.resume()\ntime.sleep(0.01)\nitt.task_end(d)\nitt.detach()\n",
        ),
    ] {
        let log = tmp.path().join(format!("{name}.log"));
        let op = tmp.path().join(name);
        fs::write(&op, script).expect("script");
        let result = tmp.path().join(format!("{name}.json"));
        let mut cmd = python(
            &[
                harness.to_str().expect("path"),
                "--op-file",
                op.to_str().expect("path"),
                "--result",
                result.to_str().expect("path"),
            ],
            &log,
        );
        cmd.env("LOTUS_UPROF_CONTROL_LIB", &lib);
        let o = run(cmd);
        assert_ok(&o);
        assert_eq!(
            standin::calls(&log),
            ["amdProfileResumeImpl", "amdProfilePauseImpl"],
            "{name}"
        );
        let r: Value =
            serde_json::from_str(&fs::read_to_string(&result).expect("result")).expect("json");
        assert_eq!(r["windows"][0][1], 1, "{name}: {r}");
        assert!(r["window_ns"].as_u64().unwrap_or(0) >= 10_000_000, "{name}: {r}");
    }
}

/// The control library exports uProf's names too: named as uProf's
/// library, it is refused instead of calling itself.
#[test]
fn the_control_library_is_not_taken_for_uprofs() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let log = tmp.path().join("log");
    let mut cmd = python(&["-c", CALLS], &log);
    cmd.env("LOTUS_UPROF_CONTROL_LIB", control_lib());
    let o = run(cmd);
    assert_ok(&o);
    let out = stdout(&o);
    assert!(out.contains("is the lotus control library"), "{out}");
}
