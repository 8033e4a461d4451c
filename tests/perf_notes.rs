//! Where samples are known to be missing, lotus says so with the figure
//! (issue 23), whichever command reads them: `lotus profile` and `lotus
//! map` (through the backends' generic `Collection`), and `lotus attribute
//! DIR` (from the trace folder's `.sampling`).
//!
//! The live cases need a module the perf backend cannot name: a shared
//! library loaded through `/proc/self/fd/N` after its file was deleted
//! (the kernel then names the mapping "PATH (deleted)"), in which the job
//! burns its own CPU time.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{lotus, lotus_env, python, s};
use lotus_samples::{write_sampling, Sample, SampleFiles, SampleSink, SamplesWriter, Symbol};

/// A function that burns `secs` of the process's own CPU time (read from
/// its CPU clock, never wall time).
const SPIN_C: &str = r#"
#include <time.h>
static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
double spin(double secs) {
    double end = cpu_s() + secs, x = 0;
    while (cpu_s() < end) {
        for (int i = 0; i < 1000; i++) x += i * 0.5;
    }
    return x;
}
"#;

/// Python that loads `$SPIN_LIB` from a copy whose file is gone before
/// the mapping is made: `lib` spins in a module lotus cannot name.
const LOAD_GONE: &str = r#"
import ctypes, os, shutil, tempfile
_d = tempfile.mkdtemp()
_copy = os.path.join(_d, "libspin_gone.so")
shutil.copy(os.environ["SPIN_LIB"], _copy)
_fd = os.open(_copy, os.O_RDONLY)
os.unlink(_copy)
os.rmdir(_d)
lib = ctypes.CDLL(f"/proc/self/fd/{_fd}")
lib.spin.argtypes = [ctypes.c_double]
lib.spin.restype = ctypes.c_double
"#;

/// The note's words for the deleted library's samples.
const UNNAMED: &str = "libspin_gone.so (deleted)] could not be named: ";

/// Builds `dir/libspin.so`, or `None` (the test is skipped, saying so)
/// where there is no C compiler.
fn build_spin(dir: &Path, test: &str) -> Option<PathBuf> {
    let src = dir.join("spin.c");
    fs::write(&src, SPIN_C).expect("write spin.c");
    let lib = dir.join("libspin.so");
    match Command::new("cc")
        .args(["-O1", "-fPIC", "-shared", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
    {
        Ok(o) if o.status.success() => Some(lib),
        Ok(o) => panic!("cc failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            eprintln!("skipped: {test}: no C compiler (cc: {e})");
            None
        }
    }
}

/// `lotus profile` of a program that spends most of its CPU time in a
/// module that cannot be named prints the note, with the figure, on
/// stderr. Before, the generic collection had no notes: nothing was said.
#[test]
fn lotus_profile_says_how_many_samples_could_not_be_named() {
    let test = "lotus_profile_says_how_many_samples_could_not_be_named";
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(lib) = build_spin(tmp.path(), test) else {
        return;
    };
    let prog = tmp.path().join("prog.py");
    fs::write(&prog, format!("{LOAD_GONE}\nlib.spin(0.3)\n")).expect("write prog");
    let out = tmp.path().join("p.json");
    let py = python();
    let o = lotus_env(
        &[
            "profile",
            "--backend",
            "perf",
            "--out",
            s(&out),
            "--",
            s(&py),
            s(&prog),
        ],
        &[("SPIN_LIB", lib.as_os_str())],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let note = stderr
        .lines()
        .find(|l| l.starts_with("lotus: note: ") && l.contains(UNNAMED))
        .unwrap_or_else(|| panic!("no note on the unnamed module in:\n{stderr}"));
    // "N samples (x%) in [..] could not be named: ... was deleted ...":
    // the figure is there, and most of the job's samples are in it (it
    // spun 0.3 s of its CPU there).
    let n: u64 = note["lotus: note: ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sample count in {note:?}"));
    assert!(n > 0, "{note}");
    assert!(note.contains("was deleted after it was mapped"), "{note}");
    assert!(note.contains("%) in ["), "{note}");
}

/// `lotus map` of an op that runs in a module that cannot be named warns
/// about it with the figure, and the mapping keeps the note in the op's
/// `window.notes` (an optional field: files without it still read).
/// Before, no note came through the map engine.
#[test]
fn lotus_map_warns_per_op_and_keeps_the_notes_in_the_mapping() {
    let test = "lotus_map_warns_per_op_and_keeps_the_notes_in_the_mapping";
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(lib) = build_spin(tmp.path(), test) else {
        return;
    };
    let op = tmp.path().join("Gone.py");
    fs::write(
        &op,
        format!("{LOAD_GONE}\n\ndef op(_x):\n    lib.spin(0.01)\n"),
    )
    .expect("write op");
    let out = tmp.path().join("m.json");
    let py = python();
    let o = lotus_env(
        &[
            "map",
            "--backend",
            "perf",
            "--runs",
            "2",
            "--no-baseline",
            "--python",
            s(&py),
            "--out",
            s(&out),
            s(&op),
        ],
        &[("SPIN_LIB", lib.as_os_str())],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("lotus: warning: Gone: ") && l.contains(UNNAMED))
        .unwrap_or_else(|| panic!("no warning on the unnamed module in:\n{stderr}"));
    assert!(warning.contains("samples ("), "{warning}");
    let m: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&out).expect("mapping")).expect("json");
    let notes: Vec<&str> = m["ops"][0]["window"]["notes"]
        .as_array()
        .unwrap_or_else(|| panic!("no window.notes in {}", m["ops"][0]["window"]))
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains(UNNAMED) && n.contains("samples (")),
        "{notes:#?}"
    );
    // Notes on counters this machine cannot count stay in `unsupported`,
    // not repeated as notes on the samples.
    assert!(
        !notes
            .iter()
            .any(|n| n.starts_with("cycles:") || n.contains(": cycles: ")),
        "{notes:#?}"
    );
    // The mapping reads back (and a mapping without notes still does).
    let o = lotus(&["show", s(&out)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A sampled trace folder: a worker (pid 10) running op `Blur` over
/// [1 ms, 2 ms) (monotonic), 500 samples 10 µs apart (5 ms of CPU), and a
/// `.sampling` with `note=` lines and `cpu_ns` (10 ms: half the CPU time
/// the job ran has no sample).
fn short_folder(dir: &Path, cpu_ns: u64) {
    fs::create_dir_all(dir).expect("mkdir");
    let off = 1_000_000_000u64;
    const MS: u64 = 1_000_000;
    let log = format!(
        "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n\
         SBlur,{},{MS},kind=op\n\
         # lotus-trace: clock wall_ns={} monotonic_ns={}\n",
        off + MS,
        off + 5 * MS,
        5 * MS
    );
    fs::write(dir.join("lotus_worker_pid_10"), log).expect("log");
    let mut w = SamplesWriter::create(dir, "lotus").expect("samples");
    w.symbols(&[
        (0, Symbol::new("blur_kernel", "/lib/libk.so")),
        (1, Symbol::new("loop", "/usr/bin/python")),
    ])
    .expect("symbols");
    let samples: Vec<Sample> = (0..500u64)
        .map(|i| {
            let t = i * 10_000;
            Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol: u32::from(!(MS..2 * MS).contains(&t)),
                kernel: false,
                counters: Default::default(),
            }
        })
        .collect();
    w.samples(&samples).expect("write samples");
    w.finish().expect("finish");
    write_sampling(
        &SampleFiles::of(dir, "lotus").sampling,
        &[
            ("backend", "perf".to_string()),
            ("status", "complete".into()),
            ("frequency_hz", "100000".into()),
            ("interval_ns", "10000".into()),
            ("clock", "monotonic".into()),
            ("samples", "500".into()),
            ("lost", "7".into()),
            ("cpu_ns", cpu_ns.to_string()),
            (
                "note",
                "7 samples were lost (ring buffer full); the counts are a lower bound".into(),
            ),
            ("note", "kernel mode is not sampled: test".into()),
        ],
    )
    .expect("sampling");
}

/// `lotus attribute DIR` shows the `.sampling`'s `note=` lines, and what
/// the samples cover of `cpu_ns=` (50%, under 95%), in the table and in
/// the JSON. Before, both were read past and never shown.
#[test]
fn lotus_attribute_shows_the_sampling_notes_and_the_coverage_shortfall() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    short_folder(&dir, 10_000_000);
    let o = lotus(&["attribute", s(&dir)]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains("7 samples were lost (ring buffer full)"),
        "{all}"
    );
    assert!(all.contains("kernel mode is not sampled: test"), "{all}");
    let cover = "the samples cover 0.005 s of the 0.010 s CPU the job ran (50%";
    assert!(all.contains(cover), "{all}");

    let o = lotus(&["attribute", s(&dir), "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap_or_else(|| panic!("no notes in {v}"))
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(notes.iter().any(|n| n.starts_with(cover)), "{notes:#?}");
    assert!(
        notes.iter().any(|n| n.starts_with("7 samples were lost")),
        "{notes:#?}"
    );
}

/// Samples that cover enough of `cpu_ns=` (here all of it) get no
/// coverage line: only a shortfall is said.
#[test]
fn lotus_attribute_says_nothing_of_coverage_when_the_samples_cover_the_cpu() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    short_folder(&dir, 5_000_000);
    let o = lotus(&["attribute", s(&dir), "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!text.contains("the samples cover"), "{text}");
    assert!(text.contains("7 samples were lost"), "{text}");
}
