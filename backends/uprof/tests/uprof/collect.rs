//! `UProf::collect` then `report()` against the stand-in `AMDuProfCLI`
//! (first on PATH) and a stand-in profile-control library: the exact
//! commands, the session folder, the report read from real uProf output,
//! clean-up, failures and kill.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lotus_backend_uprof::read_report;
use lotus_backend_uprof::UProf;
use lotus_core::{CollectOptions, Collection, Error as CoreError, Profiler, Report, Target};
use lotus_testkit::uprof_standin as standin;
use standin::{Api, Flavor};

/// Set up once per test process: the stand-in AMDuProfCLI first on PATH,
/// and the fixtures it reports from.
struct Setup {
    _dir: tempfile::TempDir,
    cli: PathBuf,
    /// A 5.x stand-in library.
    lib5: PathBuf,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let cli = standin::install_cli(&dir.path().join("bin"));
        let lib5 = standin::build_library(
            &dir.path().join("lib5/libAMDProfileController.so"),
            Flavor::good(Api::V5),
        );
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![dir.path().join("bin")];
        dirs.extend(std::env::split_paths(&path));
        // Before any test spawns anything: every test calls setup() first,
        // and the others wait for this to finish.
        std::env::set_var("PATH", std::env::join_paths(dirs).expect("PATH"));
        std::env::set_var("UPROF_STANDIN_FIXTURES", standin::fixtures());
        Setup {
            _dir: dir,
            cli,
            lib5,
        }
    })
}

/// A Python target running `script`, that looks like the harness running
/// op `op` (`--op-file <op>.py`, which the stand-in reads to pick the
/// fixture report).
fn target(script: &str, op: &str, lib: &Path, calls: &Path) -> Target {
    {
        let mut target = Target::new(standin::python());
        target.args = vec![
            "-c".into(),
            script.into(),
            "--op-file".into(),
            format!("/ops/{op}.py").into(),
        ];
        target.env = vec![
            ("LOTUS_BACKEND".into(), "uprof".into()),
            ("UPROF_STANDIN_CONTROL_LIB".into(), lib.into()),
            ("UPROF_STANDIN_CALLS".into(), calls.into()),
        ];
        target
    }
}

/// What a profiled op does: opens the window through the library the
/// stand-in named, runs, closes it.
const WINDOW: &str = "import ctypes, os, sys\n\
assert os.environ['LOTUS_BACKEND'] == 'uprof', os.environ.get('LOTUS_BACKEND')\n\
lib = ctypes.CDLL(os.environ['LOTUS_UPROF_CONTROL_LIB'])\n\
assert lib.amdProfileResumeImpl()\n\
sum(range(1000))\n\
assert lib.amdProfilePauseImpl()\n";

fn wait(c: &mut dyn Collection) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = c.try_wait().expect("try_wait") {
            return status;
        }
        assert!(Instant::now() < deadline, "the collection did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn fixture_report(op: &str) -> Report {
    let path = standin::fixtures().join(op).join("1.csv");
    let file = fs::File::open(&path).expect("fixture");
    read_report(
        &mut std::io::BufReader::new(file),
        &path.display().to_string(),
    )
    .expect("fixture reads")
}

/// The argument lists the stand-in AMDuProfCLI was called with (not
/// `--version`).
fn cli_calls(calls: &Path) -> Vec<Vec<String>> {
    standin::calls(calls)
        .iter()
        .map(|l| parse_json_strings(l))
        .filter(|a| a != &["--version"])
        .collect()
}

/// Parses a JSON list of plain strings (what the stand-in writes).
fn parse_json_strings(line: &str) -> Vec<String> {
    let inner = line
        .trim()
        .strip_prefix('[')
        .and_then(|l| l.strip_suffix(']'))
        .expect("a JSON list");
    let mut out = Vec::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut s = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => s.push('\n'),
                    Some(other) => s.push(other),
                    None => {}
                },
                c => s.push(c),
            }
        }
        out.push(s);
    }
    out
}

#[test]
fn collect_then_report_reads_the_session_report_and_cleans_up() {
    let s = setup();
    let tmp = tempfile::tempdir().expect("temp dir");
    let calls = tmp.path().join("calls");
    let uprof = UProf;
    assert!(!uprof.switches_windows());
    let t = target(WINDOW, "Loader", &s.lib5, &calls);
    let mut c = uprof
        .collect(&t, &CollectOptions::default())
        .expect("collect starts");
    c.resume().expect("resume is a no-op");
    c.pause().expect("pause is a no-op");
    let status = wait(c.as_mut());
    assert!(status.success(), "{status}");
    let report = c.report().expect("report");
    let expected = fixture_report("Loader");
    assert!(!expected.rows.is_empty());
    assert_eq!(report, expected);

    // Exactly the documented commands, in order.
    let cli = cli_calls(&calls);
    assert_eq!(cli.len(), 2, "{cli:?}");
    let collect = &cli[0];
    assert_eq!(
        collect[..5],
        ["collect", "--config", "tbp", "--start-paused", "-o"]
    );
    let raw = PathBuf::from(&collect[5]);
    let mut rest: Vec<OsString> = collect[6..].iter().map(OsString::from).collect();
    assert_eq!(rest.remove(0), t.program.as_os_str());
    assert_eq!(rest, t.args);
    let report_call = &cli[1];
    assert_eq!(report_call.len(), 9, "{report_call:?}");
    assert_eq!(report_call[0], "report");
    assert_eq!(report_call[1], "-i");
    let session = PathBuf::from(&report_call[2]);
    assert_eq!(session.parent(), Some(raw.as_path()));
    let name = session
        .file_name()
        .expect("name")
        .to_string_lossy()
        .to_string();
    let python_name = t
        .program
        .file_name()
        .expect("python name")
        .to_string_lossy()
        .to_string();
    assert!(
        name.starts_with(&format!("AMDuProf-{python_name}-TBP_")),
        "{name}"
    );
    assert_eq!(report_call[3], "--report-output");
    // Every function: a cutoff above any realistic count (the stand-in
    // cuts the report at 10 functions without one, as AMDuProfCLI does).
    assert_eq!(report_call[5..], ["-f", "csv", "--cutoff", "1000000"]);

    // Nothing left behind without --keep-raw.
    assert!(!raw.exists(), "{} was not removed", raw.display());
    assert!(!Path::new(&report_call[4]).exists());
}

#[test]
fn keep_raw_keeps_the_session_with_the_window_and_the_report() {
    let s = setup();
    let tmp = tempfile::tempdir().expect("temp dir");
    let keep = tmp.path().join("raw");
    let mut options = CollectOptions::default();
    options.keep_raw = Some(keep.clone());
    let t = target(WINDOW, "Normalize", &s.lib5, &tmp.path().join("calls"));
    let mut c = UProf.collect(&t, &options).expect("collect starts");
    assert!(wait(c.as_mut()).success());
    let report = c.report().expect("report");
    assert_eq!(report, fixture_report("Normalize"));

    let kept: Vec<PathBuf> = fs::read_dir(&keep)
        .expect("keep folder")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let raw = &kept[0];
    assert!(
        raw.file_name()
            .expect("name")
            .to_string_lossy()
            .starts_with("uprof-"),
        "{}",
        raw.display()
    );
    assert_eq!(
        fs::read(raw.join("report.csv")).expect("kept report"),
        fs::read(standin::fixtures().join("Normalize/1.csv")).expect("fixture")
    );
    let session = fs::read_dir(raw)
        .expect("raw")
        .map(|e| e.expect("entry").path())
        .find(|p| p.is_dir())
        .expect("a session folder");
    assert_eq!(
        standin::calls(&session.join("control.log")),
        ["amdProfileResumeImpl", "amdProfilePauseImpl"]
    );
    let seen = fs::read_to_string(session.join("target.json")).expect("target.json");
    assert!(seen.contains(r#""LOTUS_BACKEND": "uprof""#), "{seen}");

    // A second run gets its own folder.
    let t = target(WINDOW, "Normalize", &s.lib5, &tmp.path().join("calls"));
    let mut c = UProf.collect(&t, &options).expect("collect starts");
    assert!(wait(c.as_mut()).success());
    c.report().expect("report");
    assert_eq!(fs::read_dir(&keep).expect("keep").count(), 2);
}

#[test]
fn a_window_that_never_opened_fails_the_report_with_its_output() {
    let s = setup();
    let tmp = tempfile::tempdir().expect("temp dir");
    let t = target("pass", "Loader", &s.lib5, &tmp.path().join("calls"));
    let mut c = UProf
        .collect(&t, &CollectOptions::default())
        .expect("collect starts");
    assert!(wait(c.as_mut()).success());
    let err = c.report().expect_err("no samples");
    assert!(matches!(err, CoreError::Other { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(" report -i "), "{msg}");
    assert!(msg.contains("--report-output"), "{msg}");
    assert!(msg.contains("never resumed then paused"), "{msg}");
}

#[test]
fn a_failed_collect_names_the_command_and_its_output() {
    let s = setup();
    let tmp = tempfile::tempdir().expect("temp dir");
    let t = target(
        "import sys; sys.stderr.write('op exploded\\n'); sys.exit(3)",
        "Loader",
        &s.lib5,
        &tmp.path().join("calls"),
    );
    let mut c = UProf
        .collect(&t, &CollectOptions::default())
        .expect("collect starts");
    let status = wait(c.as_mut());
    assert_eq!(status.code(), Some(3));
    let msg = c.report().expect_err("collect failed").to_string();
    assert!(
        msg.contains("collect --config tbp --start-paused -o"),
        "{msg}"
    );
    assert!(msg.contains("failed"), "{msg}");
    assert!(msg.contains("op exploded"), "{msg}");
}

#[test]
fn a_missing_session_folder_is_named_with_what_is_there() {
    let s = setup();
    let tmp = tempfile::tempdir().expect("temp dir");
    // The target removes the session folder the stand-in made for it.
    let t = target(
        "import os, shutil; shutil.rmtree(os.path.dirname(os.environ['UPROF_STANDIN_LOG']))",
        "Loader",
        &s.lib5,
        &tmp.path().join("calls"),
    );
    let mut c = UProf
        .collect(&t, &CollectOptions::default())
        .expect("collect starts");
    assert!(wait(c.as_mut()).success());
    let msg = c.report().expect_err("no session").to_string();
    assert!(msg.contains("no session folder (AMDuProf-*)"), "{msg}");
    assert!(msg.contains("it is empty"), "{msg}");
    assert!(msg.contains("Generated data files path"), "{msg}");
}

fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // A zombie has exited.
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn kill_stops_amduprofcli_and_the_target() {
    let s = setup();
    let tmp = tempfile::tempdir().expect("temp dir");
    let pid_file = tmp.path().join("pid");
    let script = format!(
        "import os, time\nopen({:?}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n",
        pid_file.display().to_string()
    );
    let t = target(&script, "Loader", &s.lib5, &tmp.path().join("calls"));
    let mut c = UProf
        .collect(&t, &CollectOptions::default())
        .expect("collect starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid: i32 = loop {
        if let Some(pid) = fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the target did not start");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(c.try_wait().expect("try_wait").is_none());
    let cli_pid = c.pid() as i32;
    c.kill().expect("kill");
    assert!(c.try_wait().expect("try_wait").is_some());
    assert!(!alive(cli_pid));
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the target {pid} outlived the kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let msg = c.report().expect_err("killed").to_string();
    assert!(msg.contains("stopped before it finished"), "{msg}");
}

#[test]
fn the_plan_names_the_cli_found_and_every_flag() {
    let s = setup();
    let t = target(WINDOW, "Loader", &s.lib5, Path::new("/dev/null"));
    let plan = UProf.plan(&t, &CollectOptions::default());
    assert_eq!(plan.commands.len(), 2);
    let cli = s.cli.display().to_string();
    assert!(
        plan.commands[0].starts_with(&format!("{cli} collect --config tbp --start-paused -o ")),
        "{:?}",
        plan.commands
    );
    assert!(
        plan.commands[0].ends_with(&t.command_line()),
        "{:?}",
        plan.commands
    );
    assert!(
        plan.commands[1].starts_with(&format!("{cli} report -i ")),
        "{:?}",
        plan.commands
    );
    assert!(plan.commands[1].contains("/<session> --report-output "));
    assert!(plan.commands[1].ends_with(" -f csv --cutoff 1000000"));
    assert!(plan
        .env
        .contains(&("LOTUS_BACKEND".to_string(), "uprof".to_string())));
    assert!(
        !plan.notes.iter().any(|n| n.contains("not found")),
        "{:?}",
        plan.notes
    );
}

#[test]
fn the_probe_finds_the_stand_in_and_its_version() {
    let s = setup();
    let probe = UProf.probe();
    assert!(probe.available, "{probe:?}");
    assert_eq!(
        probe.version.as_deref(),
        Some("AMDuProfCLI Version 5.1.701.0 (lotus test stand-in)")
    );
    assert!(
        probe
            .notes
            .contains(&format!("AMDuProfCLI: {}", s.cli.display())),
        "{probe:?}"
    );
}

#[test]
fn the_frequency_becomes_the_timer_interval_the_session_records() {
    let s = setup();
    let tmp = tempfile::tempdir().expect("temp dir");
    let keep = tmp.path().join("raw");
    let calls = tmp.path().join("calls");
    let mut options = CollectOptions::default();
    options.keep_raw = Some(keep.clone());
    options.frequency_hz = Some(100);
    assert_eq!(
        UProf.sample_interval(&options),
        Some(std::time::Duration::from_millis(10))
    );
    let t = target(WINDOW, "Loader", &s.lib5, &calls);
    let plan = UProf.plan(&t, &options);
    assert!(
        plan.commands[0].contains(" collect -e event=timer,interval=10 --start-paused -o "),
        "{:?}",
        plan.commands
    );
    let mut c = UProf.collect(&t, &options).expect("collect starts");
    assert!(wait(c.as_mut()).success());
    assert_eq!(c.report().expect("report"), fixture_report("Loader"));
    let collect = &cli_calls(&calls)[0];
    assert_eq!(
        collect[..4],
        ["collect", "-e", "event=timer,interval=10", "--start-paused"]
    );
    // The stand-in took the interval as uProf does (a number of ms).
    let raw = fs::read_dir(&keep)
        .expect("keep")
        .next()
        .expect("a kept folder")
        .expect("entry")
        .path();
    let session = fs::read_dir(&raw)
        .expect("raw")
        .map(|e| e.expect("entry").path())
        .find(|p| p.is_dir())
        .expect("a session folder");
    assert_eq!(
        fs::read_to_string(session.join("interval.txt")).expect("interval"),
        "10.0"
    );
}
