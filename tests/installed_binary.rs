//! The install story: a `lotus` binary copied alone into a fresh folder
//! (what `cargo install` or a copy to another machine gives: nothing
//! beside it, no build tree above it) still loads its control library
//! into the processes it profiles, because it carries the library inside
//! itself.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::mapping::{map_result, op};
use crate::common::{fixture, python};

/// A fresh folder holding a copy of this build's `lotus` and nothing else.
fn lone_lotus() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = dir.path().join("lotus");
    fs::copy(env!("CARGO_BIN_EXE_lotus"), &bin).expect("copy lotus");
    (dir, bin)
}

/// `bin` with `args`, with no control library named by the environment
/// (the copy must find its own) and no ITT collector inherited.
fn run(bin: &Path, args: &[&std::ffi::OsStr]) -> Output {
    output(
        Command::new(bin)
            .args(args)
            .env_remove("LOTUS_CONTROL_LIB")
            .env_remove("INTEL_LIBITTNOTIFY64")
            .env_remove("PYTHONPATH")
            // cargo test points it at target/<profile>/: an installed
            // lotus has no such help to find a library by its bare name.
            .env_remove("LD_LIBRARY_PATH")
            .stdin(Stdio::null()),
    )
}

/// `cmd`'s output, started again while the copied binary is busy.
/// ETXTBSY: another test thread forked while this one's copy was open for
/// writing, and its child holds the descriptor until it execs (bounded:
/// 100 tries 20 ms apart).
fn output(cmd: &mut Command) -> Output {
    const ETXTBSY: i32 = 26;
    let mut tries = 0;
    loop {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r.expect("run the copied lotus"),
        }
    }
}

#[test]
fn a_copied_lotus_alone_in_a_fresh_folder_maps_a_fixture_op() {
    let (dir, bin) = lone_lotus();
    let out = dir.path().join("mapping.json");
    let py = python();
    let flip = fixture("ops/RandomHorizontalFlip.py");
    let o = run(
        &bin,
        &[
            "map".as_ref(),
            "--backend".as_ref(),
            "perf".as_ref(),
            "--runs".as_ref(),
            "1".as_ref(),
            "--min-samples".as_ref(),
            "300".as_ref(),
            "--no-baseline".as_ref(),
            "--python".as_ref(),
            py.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
            flip.as_os_str(),
        ],
    );
    let (code, mapping, stderr) = map_result(&o, &out);
    assert_eq!(code, 0, "the copied lotus failed to map: {stderr}");
    let mapping = mapping.expect("mapping written");
    let functions: Vec<&str> = op(&mapping, "RandomHorizontalFlip")["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    assert!(
        functions.contains(&"ImagingFlipLeftRight"),
        "the flip's kernel is not in its mapping: {functions:?}\n{stderr}"
    );
    // The folder still holds only the binary and what the test wrote.
    let mut left: Vec<String> = fs::read_dir(dir.path())
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["lotus", "mapping.json"]);
}

/// A job whose library (here the `ittapi` package) begins and ends ITT
/// tasks: under `trace run --itt-tasks` lotus's own collector, the
/// control library, writes them into the trace.
const ITT_JOB: &str = r#"
import ittapi
domain = ittapi.domain("mylib")
for _ in range(3):
    with ittapi.task("Inner", domain=domain):
        sum(range(10000))
"#;

#[test]
fn a_copied_lotus_traces_itt_tasks_with_the_collector_it_carries() {
    let (dir, bin) = lone_lotus();
    let py = common::any_python();
    let job = dir.path().join("job.py");
    fs::write(&job, ITT_JOB).expect("write job");
    let trace = dir.path().join("trace");
    let o = run(
        &bin,
        &[
            "trace".as_ref(),
            "run".as_ref(),
            "--no-torch".as_ref(),
            "--itt-tasks".as_ref(),
            "--out".as_ref(),
            trace.as_os_str(),
            "--".as_ref(),
            py.as_os_str(),
            job.as_os_str(),
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("1 log(s) of ITT tasks"), "{stderr}");
    let itt_logs: Vec<String> = fs::read_dir(&trace)
        .expect("trace folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("lotus.itt_main_pid_"))
        .collect();
    assert_eq!(itt_logs.len(), 1, "{itt_logs:?}\n{stderr}");
    let text = fs::read_to_string(trace.join(&itt_logs[0])).expect("read log");
    assert_eq!(
        text.lines().filter(|l| l.contains("Inner")).count(),
        3,
        "{text}"
    );
}

/// The control library `lotus map --dry-run` would load (the plan's
/// `export LOTUS_CONTROL_LIB=...` line), with `env` set.
fn planned_library(bin: &Path, env: Option<&Path>) -> String {
    let mut cmd = Command::new(bin);
    cmd.args(["map", "--backend", "perf", "--dry-run"])
        .arg(fixture("ops/RandomHorizontalFlip.py"))
        .env_remove("LOTUS_CONTROL_LIB")
        .stdin(Stdio::null());
    if let Some(lib) = env {
        cmd.env("LOTUS_CONTROL_LIB", lib);
    }
    let o = output(&mut cmd);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("export LOTUS_CONTROL_LIB="))
        .unwrap_or_else(|| panic!("no control library in the plan:\n{stdout}"))
        .trim_matches('\'')
        .to_string()
}

#[test]
fn an_explicit_control_library_wins_over_the_carried_copy() {
    let (dir, bin) = lone_lotus();
    // Without LOTUS_CONTROL_LIB: the carried copy, in the run's private
    // harness folder (gone once lotus exits).
    let carried = PathBuf::from(planned_library(&bin, None));
    assert_eq!(
        carried.file_name(),
        Some(std::ffi::OsStr::new("liblotus_control.so"))
    );
    let folder = carried.parent().expect("folder");
    assert!(
        folder
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("lotus-harness-")),
        "{}",
        carried.display()
    );
    assert!(!folder.exists(), "{} left behind", folder.display());
    // A library the user names is the one used.
    let mine = dir.path().join("my_control.so");
    fs::copy(common::control_lib(), &mine).expect("copy the library");
    assert_eq!(planned_library(&bin, Some(&mine)), mine.to_string_lossy());
}
