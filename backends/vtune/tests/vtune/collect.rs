//! `VTune::collect` and `Collection::report` against a stand-in `vtune`
//! (tests/data/standin_vtune.sh, first on PATH) that accepts exactly the
//! documented command lines, runs the target with a stand-in ITT collector,
//! and writes a real VTune report taken from the fixtures.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lotus_backend_vtune::read_hotspots;
use lotus_backend_vtune::VTune;
use lotus_core::{CollectOptions, Error as CoreError, Profiler, Report, Target};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The stand-in tools, set up once per test binary: `vtune` first on PATH
/// and the stand-in collector built with the C compiler.
struct Tools {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    collector: PathBuf,
}

fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::copy(data("standin_vtune.sh"), bin.join("vtune")).unwrap();
        let collector = dir.path().join("libitt_standin.so");
        let out = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
            .args(["-shared", "-fPIC", "-o"])
            .arg(&collector)
            .arg(data("itt_standin_collector.c"))
            .output()
            .expect("a C compiler (cc) to build the stand-in ITT collector");
        assert!(
            out.status.success(),
            "building the stand-in collector failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![bin.clone()];
        dirs.extend(std::env::split_paths(&path));
        // Set once, before any test of this binary looks vtune up; nothing
        // else in it reads PATH concurrently through libc.
        std::env::set_var("PATH", std::env::join_paths(dirs).unwrap());
        Tools {
            _dir: dir,
            bin,
            collector,
        }
    })
}

fn fixture_report(op: &str, run: u32) -> PathBuf {
    root().join(format!("fixtures/reports/vtune/hotspots/{op}/{run}.csv"))
}

fn read_fixture(path: &Path) -> Report {
    let file = std::fs::File::open(path).unwrap();
    read_hotspots(&mut std::io::BufReader::new(file), "fixture").unwrap()
}

/// A target: `sh -c SCRIPT`, with the stand-in's environment.
fn target(script: &str, env: &[(&str, &Path)]) -> Target {
    let tools = tools();
    let mut t = Target::new("/bin/sh");
    t.args = vec!["-c".into(), script.into()];
    t.env.push(("LOTUS_BACKEND".into(), "vtune".into()));
    t.env.push((
        "VTUNE_STANDIN_COLLECTOR".into(),
        tools.collector.clone().into(),
    ));
    for (k, v) in env {
        t.env.push(((*k).into(), v.as_os_str().to_owned()));
    }
    t
}

/// What a profiled process does under VTune: resume, work, pause (the
/// stand-in collector's log is what the stand-in vtune checks).
const WINDOW: &str = r#"echo resume >> "$LOTUS_TEST_ITT_LOG"; echo pause >> "$LOTUS_TEST_ITT_LOG""#;

fn wait_exit(c: &mut dyn lotus_core::Collection) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = c.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "vtune did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn collect_then_report_reads_what_vtune_wrote() {
    let _ = tools();
    let work = tempfile::tempdir().unwrap();
    let calls = work.path().join("calls.log");
    let report = fixture_report("RandomResizedCrop", 3);
    let t = target(
        WINDOW,
        &[
            ("VTUNE_STANDIN_REPORT", &report),
            ("VTUNE_STANDIN_CALLS", &calls),
        ],
    );
    let vtune = VTune;
    assert!(!vtune.switches_windows());
    let mut c = vtune.collect(&t, &CollectOptions::default()).unwrap();
    // The windows are the target's business: these do nothing.
    c.resume().unwrap();
    c.pause().unwrap();
    assert!(wait_exit(c.as_mut()).success());
    let got = c.report().unwrap();
    assert_eq!(got, read_fixture(&report));
    assert!(!got.rows.is_empty());

    // Exactly the documented command lines, in order (the stand-in logs
    // each call).
    let calls = std::fs::read_to_string(&calls).unwrap();
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(lines.len(), 3, "{calls}");
    // What the stand-in collector saw: the window the target opened.
    assert_eq!(lines[2], "itt.log: | resume | pause");
    let collect: Vec<&str> = lines[0].split(" | ").collect();
    assert_eq!(
        collect[..4],
        ["-collect", "hotspots", "-start-paused", "-result-dir"]
    );
    let result_dir = PathBuf::from(collect[4]);
    assert_eq!(collect[5..], ["--", "/bin/sh", "-c", WINDOW]);
    let report_call: Vec<&str> = lines[1].split(" | ").collect();
    assert_eq!(
        report_call[..3],
        ["-report", "hotspots", "-result-dir"],
        "{calls}"
    );
    assert_eq!(report_call[3], collect[4]);
    assert_eq!(
        report_call[4..9],
        [
            "-format",
            "csv",
            "-csv-delimiter",
            "comma",
            "-report-output"
        ]
    );
    // The temporary folder is gone once the report is read.
    assert!(!result_dir.exists(), "{} was left", result_dir.display());
    assert!(result_dir.parent().is_some_and(|p| !p.exists()));
}

#[test]
fn collect_type_and_keep_raw() {
    let _ = tools();
    let work = tempfile::tempdir().unwrap();
    let keep = work.path().join("raw");
    let report = fixture_report("Loader", 1);
    let t = target(WINDOW, &[("VTUNE_STANDIN_REPORT", &report)]);
    let mut options = CollectOptions::default();
    options.collect_type = Some("uarch-exploration".into());
    options.keep_raw = Some(keep.clone());
    let mut c = VTune.collect(&t, &options).unwrap();
    wait_exit(c.as_mut());
    assert_eq!(c.report().unwrap(), read_fixture(&report));
    let kept: Vec<PathBuf> = std::fs::read_dir(&keep)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let folder = &kept[0];
    assert!(folder
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("vtune-"));
    let result = folder.join("result");
    assert_eq!(
        std::fs::read_to_string(result.join("type")).unwrap(),
        "uarch-exploration\n"
    );
    assert_eq!(
        std::fs::read_to_string(result.join("itt.log")).unwrap(),
        "resume\npause\n"
    );
    assert_eq!(
        std::fs::read(folder.join("hotspots.csv")).unwrap(),
        std::fs::read(&report).unwrap()
    );
    assert!(folder.join("collect.log").is_file());
}

#[test]
fn the_target_environment_reaches_the_target() {
    let _ = tools();
    let work = tempfile::tempdir().unwrap();
    let seen = work.path().join("seen");
    let report = fixture_report("Loader", 2);
    let t = target(
        &format!(
            r#"{WINDOW}; printf '%s\n' "$LOTUS_BACKEND" "$INTEL_LIBITTNOTIFY64" > '{}'"#,
            seen.display()
        ),
        &[("VTUNE_STANDIN_REPORT", &report)],
    );
    let mut c = VTune.collect(&t, &CollectOptions::default()).unwrap();
    wait_exit(c.as_mut());
    c.report().unwrap();
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        format!("vtune\n{}\n", tools().collector.display())
    );
}

#[test]
fn a_failing_collection_names_the_command_and_its_output() {
    let _ = tools();
    let report = fixture_report("Loader", 1);
    let t = target(
        "echo 'the op broke' >&2; exit 3",
        &[("VTUNE_STANDIN_REPORT", &report)],
    );
    let mut c = VTune.collect(&t, &CollectOptions::default()).unwrap();
    assert_eq!(wait_exit(c.as_mut()).code(), Some(3));
    let e = c.report().unwrap_err();
    assert!(matches!(e, CoreError::Other { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("-collect hotspots -start-paused -result-dir"),
        "{text}"
    );
    assert!(text.contains("the op broke"), "{text}");
    assert!(text.contains("exit status: 3"), "{text}");
}

#[test]
fn a_failing_report_names_the_command_and_its_output() {
    let _ = tools();
    let report = fixture_report("Loader", 1);
    // Never resumed: the stand-in, like VTune, has no data to report.
    let t = target("true", &[("VTUNE_STANDIN_REPORT", &report)]);
    let mut c = VTune.collect(&t, &CollectOptions::default()).unwrap();
    assert!(wait_exit(c.as_mut()).success());
    let text = c.report().unwrap_err().to_string();
    assert!(text.contains("-report hotspots -result-dir"), "{text}");
    assert!(text.contains("never resumed"), "{text}");
}

#[test]
fn a_malformed_report_is_a_report_error() {
    let _ = tools();
    let work = tempfile::tempdir().unwrap();
    let bad = work.path().join("bad.csv");
    std::fs::write(&bad, "Function,Module\nf,m\n").unwrap();
    let t = target(WINDOW, &[("VTUNE_STANDIN_REPORT", &bad)]);
    let mut c = VTune.collect(&t, &CollectOptions::default()).unwrap();
    wait_exit(c.as_mut());
    match c.report() {
        Err(e @ CoreError::Report { .. }) => {
            assert!(
                e.report_message().unwrap_or_default().contains("CPU time"),
                "{e}"
            )
        }
        other => panic!("expected a report error, got {other:?}"),
    }
}

#[test]
fn kill_stops_vtune_and_the_target() {
    let _ = tools();
    let work = tempfile::tempdir().unwrap();
    let pidfile = work.path().join("pid");
    let report = fixture_report("Loader", 1);
    let t = target(
        &format!("echo $$ > '{}'; exec sleep 60", pidfile.display()),
        &[("VTUNE_STANDIN_REPORT", &report)],
    );
    let mut c = VTune.collect(&t, &CollectOptions::default()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let target_pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the target did not start");
        std::thread::sleep(Duration::from_millis(10));
    };
    let started = Instant::now();
    c.kill().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(c.try_wait().unwrap().is_some());
    // The target (vtune's child, in its group) is gone too.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{target_pid}")).exists() {
        let state = std::fs::read_to_string(format!("/proc/{target_pid}/stat")).unwrap_or_default();
        if state.contains(") Z") {
            break; // a zombie: dead, waiting for its reaper
        }
        assert!(
            Instant::now() < deadline,
            "the target {target_pid} survived kill()"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = c.report().unwrap_err().to_string();
    assert!(text.contains("stopped before it finished"), "{text}");
}

#[test]
fn probe_finds_the_stand_in_and_its_version() {
    let _ = tools();
    let p = VTune.probe();
    assert!(p.available, "{p:?}");
    assert_eq!(
        p.version.as_deref(),
        Some("Intel(R) VTune(TM) Profiler 2025.0.0 (stand-in for lotus tests)")
    );
    let plan = VTune.plan(&target("true", &[]), &CollectOptions::default());
    let vtune = tools().bin.join("vtune");
    assert!(
        plan.commands[0].starts_with(&format!("{} -collect hotspots", vtune.display())),
        "{plan:?}"
    );
    assert!(!plan.notes.iter().any(|n| n.contains("not found")));
}

/// Runs one collection at `hz` and returns the `-collect` call's arguments.
fn collect_call_at(hz: u64) -> Vec<String> {
    let work = tempfile::tempdir().unwrap();
    let calls = work.path().join("calls.log");
    let report = fixture_report("RandomResizedCrop", 3);
    let t = target(
        WINDOW,
        &[
            ("VTUNE_STANDIN_REPORT", &report),
            ("VTUNE_STANDIN_CALLS", &calls),
        ],
    );
    let mut options = CollectOptions::default();
    options.frequency_hz = Some(hz);
    let mut c = VTune.collect(&t, &options).unwrap();
    assert!(wait_exit(c.as_mut()).success());
    assert_eq!(c.report().unwrap(), read_fixture(&report));
    let calls = std::fs::read_to_string(&calls).unwrap();
    calls
        .lines()
        .next()
        .unwrap()
        .split(" | ")
        .map(String::from)
        .collect()
}

#[test]
fn the_frequency_becomes_the_hotspots_interval_and_mode() {
    let _ = tools();
    for (hz, mode, interval, in_force) in [
        (100, "sw", "10", Duration::from_millis(10)),
        (1000, "sw", "1", Duration::from_millis(1)),
        (4000, "hw", "0.25", Duration::from_micros(250)),
    ] {
        let collect = collect_call_at(hz);
        assert_eq!(
            collect[..6],
            [
                "-collect",
                "hotspots",
                "-knob",
                &format!("sampling-mode={mode}"),
                "-knob",
                &format!("sampling-interval={interval}"),
            ],
            "{hz} Hz"
        );
        let mut options = CollectOptions::default();
        options.frequency_hz = Some(hz);
        assert_eq!(VTune.sample_interval(&options), Some(in_force));
        let plan = VTune.plan(&target(WINDOW, &[]), &options);
        assert!(
            plan.commands[0].contains(&format!(
                " -collect hotspots -knob sampling-mode={mode} -knob sampling-interval={interval} -start-paused "
            )),
            "{:?}",
            plan.commands
        );
    }
    // Other analyses keep their own settings.
    let mut options = CollectOptions::default();
    options.frequency_hz = Some(4000);
    options.collect_type = Some("uarch-exploration".into());
    assert_eq!(VTune.sample_interval(&options), None);
    let plan = VTune.plan(&target(WINDOW, &[]), &options);
    assert!(!plan.commands[0].contains("-knob"), "{:?}", plan.commands);
}

#[test]
fn the_stand_in_takes_the_knobs_as_vtune_documents_them() {
    let tools = tools();
    let work = tempfile::tempdir().unwrap();
    let run = |knobs: &[&str]| {
        Command::new(tools.bin.join("vtune"))
            .args(["-collect", "hotspots"])
            .args(knobs)
            .args(["-start-paused", "-result-dir"])
            .arg(work.path().join(format!("r{}", knobs.join("_"))))
            .args(["--", "/bin/true"])
            .env("VTUNE_STANDIN_COLLECTOR", &tools.collector)
            .output()
            .unwrap()
    };
    assert!(run(&["-knob", "sampling-interval=5"]).status.success());
    assert!(run(&[
        "-knob",
        "sampling-mode=hw",
        "-knob",
        "sampling-interval=0.05"
    ])
    .status
    .success());
    // User-mode sampling goes no finer than 1 ms.
    let out = run(&[
        "-knob",
        "sampling-mode=sw",
        "-knob",
        "sampling-interval=0.25",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("out of range"));
    assert!(!run(&["-knob", "sampling-interval=fast"]).status.success());
    assert!(!run(&["-knob", "sampling-mode=turbo"]).status.success());
}

/// A report command that never ends is stopped at the report limit
/// (`LOTUS_REPORT_TIMEOUT`, here 2 s), with whatever it started, and the
/// error names the command, the limit and the variable.
#[test]
fn a_report_that_never_ends_is_stopped_at_the_limit() {
    let _ = tools();
    let report = fixture_report("Loader", 1);
    let hang = Path::new("1");
    let t = target(
        WINDOW,
        &[
            ("VTUNE_STANDIN_REPORT", &report),
            ("VTUNE_STANDIN_REPORT_HANG", hang),
        ],
    );
    let work = tempfile::tempdir().unwrap();
    let keep = work.path().join("raw");
    let mut options = CollectOptions::default();
    options.keep_raw = Some(keep.clone());
    let mut c = VTune.collect(&t, &options).unwrap();
    wait_exit(c.as_mut());
    // Read by the report step of this process only; no other test of this
    // binary makes a report that could take 2 s.
    std::env::set_var("LOTUS_REPORT_TIMEOUT", "2");
    let started = Instant::now();
    let err = c.report();
    std::env::remove_var("LOTUS_REPORT_TIMEOUT");
    let took = started.elapsed();
    let text = err.unwrap_err().to_string();
    assert!(text.contains("did not finish in 2 s"), "{text}");
    assert!(text.contains("LOTUS_REPORT_TIMEOUT"), "{text}");
    assert!(text.contains("-report hotspots"), "{text}");
    assert!(
        text.contains("finalizing"),
        "the tool's output is quoted: {text}"
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");
    // The report's own child was stopped with it.
    let folder = std::fs::read_dir(&keep)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let child: i32 = std::fs::read_to_string(folder.join("result/report_hang_child"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Gone, or a zombie waiting for whoever reaps orphans here.
    let running = || {
        std::fs::read_to_string(format!("/proc/{child}/stat"))
            .map(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(false)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!running(), "the report's child {child} outlived it");
}
