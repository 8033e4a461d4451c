//! Call stacks end to end (`lotus trace run --sample --stacks fp|dwarf`, then
//! `lotus attribute DIR --format folded`): a C library built by the test
//! with frame pointers, whose `outer` calls `inner` in a loop, run inside
//! an op span of a traced Python job; the folded output shows the chain
//! under the op, and every row's lines add up to its samples.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;

use crate::common::{lotus_env, python, s};
use serde_json::Value;

const LIB: &str = r#"
#include <time.h>
static volatile unsigned long sink;
__attribute__((noinline)) void inner(void) {
    for (unsigned long i = 0; i < 2000000UL; i++) sink += i * i;
}
/* Runs `inner` until this thread has run `seconds` of CPU: the samples
   the test counts are of CPU this code ran, whatever the machine's load. */
__attribute__((noinline)) void outer(double seconds) {
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    do {
        inner();
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    } while ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9 < seconds);
}
"#;

const JOB: &str = r#"
import ctypes, sys
import lotus_trace
lib = ctypes.CDLL(sys.argv[1])
lib.outer.argtypes = [ctypes.c_double]
with lotus_trace.span("Spin"):
    lib.outer(0.4)
"#;

/// Builds the library (with frame pointers, leaf functions included: -O0)
/// and writes the job into `dir`.
fn job(dir: &Path) -> (String, String) {
    job_built(dir, &["-O0", "-fno-omit-frame-pointer"])
}

/// [`job`], the library built with `flags`.
fn job_built(dir: &Path, flags: &[&str]) -> (String, String) {
    let lib = dir.join("libspin.so");
    let src = dir.join("libspin.c");
    std::fs::write(&src, LIB).expect("write c");
    let out = Command::new("gcc")
        .args(flags)
        .args(["-fPIC", "-shared", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = dir.join("spin.py");
    std::fs::write(&script, JOB).expect("write job");
    (s(&script).to_string(), s(&lib).to_string())
}

fn ok(args: &[&str]) -> (String, String) {
    let o = lotus_env(args, &[]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "lotus {args:?}: {err}");
    (String::from_utf8(o.stdout).expect("utf-8"), err)
}

/// Traces the job sampled into `dir/out` with `--stacks stacks`.
pub(crate) fn trace(dir: &Path, stacks: &str) -> String {
    trace_job(dir, stacks, JOB)
}

/// Traces `job` (Python: it loads the library named by its first
/// argument) sampled into `dir/out` with `--stacks stacks`.
pub(crate) fn trace_job(dir: &Path, stacks: &str, job_text: &str) -> String {
    let (script, lib) = job(dir);
    std::fs::write(&script, job_text).expect("write job");
    trace_script(dir, stacks, &script, &lib)
}

/// Traces `script` with the library `lib` sampled into `dir/out` with
/// `--stacks stacks`.
fn trace_script(dir: &Path, stacks: &str, script: &str, lib: &str) -> String {
    let out = dir.join("out");
    let py = python();
    ok(&[
        "trace",
        "run",
        "--sample",
        "--counters",
        "none",
        "--stacks",
        stacks,
        "-o",
        s(&out),
        "--",
        s(&py),
        script,
        lib,
    ]);
    s(&out).to_string()
}

/// The folded lines of `attribute OUT`: (frames, count).
fn folded(out: &str) -> (Vec<(Vec<String>, u64)>, String) {
    let (text, err) = ok(&["attribute", out, "--format", "folded"]);
    (folded_lines(&text), err)
}

/// Folded lines read: (frames, count).
fn folded_lines(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .map(|l| {
            let (frames, n) = l.rsplit_once(' ').expect("frames count");
            (
                frames.split(';').map(str::to_string).collect(),
                n.parse().expect("count"),
            )
        })
        .collect()
}

/// Each row's samples, by its path with `;` for `/`.
fn row_samples(out: &str) -> BTreeMap<String, u64> {
    let (json, _) = ok(&["attribute", out, "--format", "json"]);
    let v: Value = serde_json::from_str(&json).expect("json");
    v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["samples"].as_u64() > Some(0))
        .map(|r| {
            (
                r["path"].as_str().expect("path").replace('/', ";"),
                r["samples"].as_u64().expect("n"),
            )
        })
        .collect()
}

/// Sums the lines under each row (its root frames: the longest row path
/// the line starts with).
fn sums(lines: &[(Vec<String>, u64)], rows: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut sums = BTreeMap::new();
    for (frames, n) in lines {
        let joined = frames.join(";");
        let row = rows
            .keys()
            .filter(|r| joined.starts_with(&format!("{r};")))
            .max_by_key(|r| r.len())
            .unwrap_or_else(|| panic!("a line under no row: {joined}"));
        *sums.entry(row.clone()).or_default() += n;
    }
    sums
}

#[test]
fn folded_stacks_show_the_call_chain_under_the_op_and_add_up_to_each_row() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = trace(tmp.path(), "fp");
    let (lines, _) = folded(&out);
    let spin: Vec<&(Vec<String>, u64)> = lines.iter().filter(|(f, _)| f[0] == "Spin").collect();
    let total: u64 = spin.iter().map(|(_, n)| n).sum();
    let chained: u64 = spin
        .iter()
        .filter(|(f, _)| f.windows(2).any(|w| w[0] == "outer" && w[1] == "inner"))
        .map(|(_, n)| n)
        .sum();
    // 0.4 s of the thread's CPU at 1 kHz.
    assert!(total >= 300, "{total} samples in Spin: {lines:?}");
    assert!(
        chained * 10 >= total * 9,
        "{chained} of {total} Spin samples under outer;inner: {spin:?}"
    );
    let rows = row_samples(&out);
    assert_eq!(sums(&lines, &rows), rows);

    // The same stacks as an interactive flame graph (inferno's SVG): the
    // op's alone with --op, every row without.
    let svg = Path::new(&out).join("spin.svg");
    let (_, err) = ok(&[
        "attribute",
        &out,
        "--format",
        "json",
        "--flamegraph",
        s(&svg),
        "--op",
        "Spin",
    ]);
    assert!(err.contains("wrote"), "{err}");
    let text = std::fs::read_to_string(&svg).expect("svg");
    assert!(
        text.contains("<svg") && text.trim_end().ends_with("</svg>"),
        "not an SVG"
    );
    for frame in ["Spin", "outer", "inner"] {
        assert!(
            text.contains(&format!(">{frame}<")) || text.contains(&format!("{frame} (")),
            "{frame} not drawn"
        );
    }
    assert!(
        !text.contains("outside any op"),
        "--op Spin drew other rows"
    );
    let all = Path::new(&out).join("all.svg");
    ok(&[
        "attribute",
        &out,
        "--format",
        "json",
        "--flamegraph",
        s(&all),
    ]);
    let text = std::fs::read_to_string(&all).expect("svg");
    assert!(
        text.contains("Spin") && text.contains("outside any op"),
        "every row"
    );
    // An op no row has: an error naming it and the rows there are.
    let o = lotus_env(
        &[
            "attribute",
            &out,
            "--flamegraph",
            s(&all),
            "--op",
            "NoSuchOp",
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--op NoSuchOp") && err.contains("Spin"),
        "{err}"
    );
    // --op alone is a usage error.
    let o = lotus_env(&["attribute", &out, "--op", "Spin"], &[]);
    assert_eq!(o.status.code(), Some(2));
}

/// `--stacks dwarf` on code without frame pointers (the library built
/// `-O2 -fomit-frame-pointer`, CPython as distributions build it): the
/// unwind tables give every caller, the library's `outer` above `inner`
/// and CPython's evaluation loop above them, where the frame-pointer
/// chain of the same job loses `outer`; every row's lines still add up
/// to its samples.
#[test]
fn dwarf_stacks_unwind_code_without_frame_pointers() {
    let under = |out: &str| {
        let (lines, _) = folded(out);
        let spin: Vec<(Vec<String>, u64)> = lines
            .iter()
            .filter(|(f, _)| f[0] == "Spin")
            .cloned()
            .collect();
        let total: u64 = spin.iter().map(|(_, n)| n).sum();
        let count = |pred: &dyn Fn(&[String]) -> bool| -> u64 {
            spin.iter().filter(|(f, _)| pred(f)).map(|(_, n)| n).sum()
        };
        let chained = count(&|f| f.windows(2).any(|w| w[0] == "outer" && w[1] == "inner"));
        let python = count(&|f| {
            let at = |name: &str| f.iter().position(|x| x == name);
            matches!((at("_PyEval_EvalFrameDefault"), at("outer")), (Some(a), Some(b)) if a < b)
        });
        (lines, spin, total, chained, python)
    };
    let flags = ["-O2", "-fomit-frame-pointer"];
    let tmp = tempfile::tempdir().expect("tmp");
    job_built(tmp.path(), &flags);
    let out = trace_built(tmp.path(), "dwarf", &flags);
    let (lines, spin, total, chained, python) = under(&out);
    assert!(total >= 300, "{total} samples in Spin: {lines:?}");
    assert!(
        chained * 10 >= total * 9,
        "{chained} of {total} Spin samples under outer;inner: {spin:?}"
    );
    assert!(
        python * 10 >= total * 9,
        "{python} of {total} Spin samples under CPython's _PyEval_EvalFrameDefault: {spin:?}"
    );
    let rows = row_samples(&out);
    assert_eq!(sums(&lines, &rows), rows);
    let sampling =
        std::fs::read_to_string(Path::new(&out).join("lotus.sampling")).expect("sampling");
    assert!(sampling.contains("stacks=dwarf"), "{sampling}");

    // The same job with frame pointers: `outer` is lost (what the tables
    // add), so the check above could fail.
    let tmp = tempfile::tempdir().expect("tmp");
    let out = trace_built(tmp.path(), "fp", &flags);
    let (_, spin, total, chained, _) = under(&out);
    assert!(
        chained * 2 < total,
        "{chained} of {total} Spin samples under outer;inner with frame pointers: {spin:?}"
    );
}

/// Removes the perf maps (`/tmp/perf-<pid>.map`) the traced processes of
/// the trace folder `.0` left, should lotus not have removed them (a failed run), when
/// dropped: only those that name the job's script `.1`, so that a map of
/// another test's process that got one of these pids since (pids wrap
/// around quickly on a busy machine) is left alone.
pub(crate) struct PerfMapsOf(pub(crate) String, pub(crate) String);
impl Drop for PerfMapsOf {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.0) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((_, pid)) = name.rsplit_once("_pid_") {
                if pid.parse::<u32>().is_ok() {
                    let map = format!("/tmp/perf-{pid}.map");
                    let ours = std::fs::read_to_string(&map).is_ok_and(|t| t.contains(&self.1));
                    if ours {
                        let _ = std::fs::remove_file(&map);
                    }
                }
            }
        }
    }
}

/// The job of the Python-frames test: an op that runs two Python
/// functions of its own in turn, one spinning in Python, one calling C
/// (zlib), each timed by its own thread-CPU timer, whose totals it writes
/// to the file its first argument names.
const PY_JOB: &str = r#"
import json, sys, time, zlib
import lotus_trace

def spin_python(seconds):
    t0 = time.thread_time()
    s = 0
    while time.thread_time() - t0 < seconds:
        for i in range(2000):
            s += i * i
    return s

DATA = bytes(range(256)) * 2048

def call_c(seconds):
    t0 = time.thread_time()
    n = 0
    while time.thread_time() - t0 < seconds:
        n += len(zlib.compress(DATA, 6))
    return n

own = {"spin_python": 0, "call_c": 0}
with lotus_trace.span("Work"):
    for _ in range(4):
        for f, s in ((spin_python, 0.1), (call_c, 0.06)):
            t = time.thread_time_ns()
            f(s)
            own[f.__name__] += time.thread_time_ns() - t
json.dump(own, open(sys.argv[1], "w"))
"#;

/// On every Python (`--stacks dwarf`, the default), each Python function
/// of the op is a `py::` frame under it, with the interpreter's callers
/// above it and the C it calls below: on 3.12+ named from CPython's perf
/// map, on 3.8 to 3.11 read from the interpreter's frames beside the
/// sampler; each function's share of the op's samples is within 5 points
/// of its share of the two functions' own thread-CPU timers.
#[test]
fn python_functions_are_frames_under_the_op_with_their_own_shares() {
    let test = "python_functions_are_frames_under_the_op_with_their_own_shares";
    let mut pythons = vec![python()];
    pythons.extend(common::pyenv_python("3.8", test));
    pythons.extend(common::pyenv_python("3.9", test));
    pythons.extend(common::pyenv_python("3.10", test));
    pythons.extend(common::pythons_312_and_later(test));
    for py in pythons {
        python_functions_under_the_op(&py);
    }
}

/// [`python_functions_are_frames_under_the_op_with_their_own_shares`] with
/// the Python `py`.
fn python_functions_under_the_op(py: &Path) {
    let tmp = tempfile::tempdir().expect("tmp");
    let script = tmp.path().join("pyjob.py");
    std::fs::write(&script, PY_JOB).expect("write job");
    let own = tmp.path().join("own.json");
    let out = tmp.path().join("out");
    ok(&[
        "trace",
        "run",
        "--sample",
        "--counters",
        "none",
        "-o",
        s(&out),
        "--",
        s(py),
        s(&script),
        s(&own),
    ]);
    let out = s(&out).to_string();
    let _maps = PerfMapsOf(out.clone(), s(&script).to_string());
    let timers: Value =
        serde_json::from_str(&std::fs::read_to_string(&own).expect("own")).expect("json");
    // Where the frames were read from the interpreter, what that cost is
    // said beside them.
    let sampling =
        std::fs::read_to_string(Path::new(&out).join("lotus.sampling")).expect("sampling");
    if sampling.contains("python_frames=interpreter") {
        let value = |k: &str| -> f64 {
            sampling
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {sampling}"))
        };
        assert!(value("python_frames_reads") >= 1.0, "{sampling}");
        assert!(value("python_frames_cpu_ms") > 0.0, "{sampling}");
        // The samples that ran Python and got no snapshot are counted;
        // few, the snapshots kept for as long as the sink holds samples.
        let (given, missed) = (
            value("python_frames_samples"),
            value("python_frames_missed"),
        );
        assert!(missed * 5.0 <= given + missed, "{sampling}");
        // Each frame read from the interpreter names its file and the
        // line its function begins on.
        let def = PY_JOB
            .lines()
            .position(|l| l.starts_with("def spin_python"))
            .expect("def")
            + 1;
        let symbols =
            std::fs::read_to_string(Path::new(&out).join("lotus.symbols")).expect("symbols");
        let module = symbols
            .lines()
            .find_map(|l| l.split_once("\tpy::spin_python\t").map(|(_, m)| m))
            .unwrap_or_else(|| panic!("no py::spin_python symbol: {symbols}"));
        assert!(
            module.ends_with(&format!("pyjob.py:{def}")),
            "py::spin_python's module {module}: its file and first line {def}"
        );
    }
    let (lines, _) = folded(&out);
    let work: Vec<&(Vec<String>, u64)> = lines.iter().filter(|(f, _)| f[0] == "Work").collect();
    let total: u64 = work.iter().map(|(_, n)| n).sum();
    let under = |name: &str| -> u64 {
        work.iter()
            .filter(|(f, _)| f.iter().any(|x| x == name))
            .map(|(_, n)| n)
            .sum()
    };
    let (spin, c) = (under("py::spin_python"), under("py::call_c"));
    assert!(total >= 400, "{total} samples in Work");
    assert!(
        (spin + c) * 10 >= total * 9,
        "{spin} + {c} of {total} Work samples under py::spin_python or py::call_c: {work:?}"
    );
    // zlib under call_c, the interpreter above both.
    assert!(
        work.iter().any(|(f, _)| {
            let at = |x: &str| f.iter().position(|y| y == x);
            matches!((at("py::call_c"), at("zlib_compress")), (Some(a), Some(b)) if a < b)
        }),
        "no zlib_compress under py::call_c: {work:?}"
    );
    assert!(
        work.iter().any(|(f, _)| {
            let at = |x: &str| f.iter().position(|y| y == x);
            matches!((at("py::<module>"), at("py::spin_python")), (Some(a), Some(b)) if a < b)
        }),
        "py::spin_python is not under the module's frame: {work:?}"
    );
    let t = |k: &str| timers[k].as_f64().expect("timer");
    let want = t("spin_python") / (t("spin_python") + t("call_c")) * 100.0;
    let got = spin as f64 / (spin + c) as f64 * 100.0;
    eprintln!(
        "{}: {} of {total} Work samples under the two functions; spin_python {got:.1}% of them, {want:.1}% of their timers",
        py.display(),
        spin + c
    );
    assert!(
        (got - want).abs() <= 5.0,
        "{}: spin_python: {got:.1}% of the two functions' samples, {want:.1}% of their timers",
        py.display()
    );
}

/// A perf map another user owns (the job gives its own map away before
/// its op, as another user's file put at that predictable path would be)
/// is not read from then on: the op's Python functions (compiled after it)
/// stay unnamed, the note names the file, on stderr and in
/// `lotus.sampling`, and the rest is analysed (the op's samples, its
/// native frames, every row's lines adding up). Frames of the start-up,
/// named while the map was still the job's, may keep their names.
#[test]
fn a_perf_map_of_another_user_is_refused_by_name_and_the_rest_analysed() {
    let test = "a_perf_map_of_another_user_is_refused_by_name_and_the_rest_analysed";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: {test}: needs root (to give the map to another user)");
        return;
    }
    let Some(py) = common::python312(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let script = tmp.path().join("pyjob.py");
    let job = PY_JOB.replace(
        "with lotus_trace.span(\"Work\"):",
        "import os\nos.chown(f'/tmp/perf-{os.getpid()}.map', 65534, 65534)\nwith lotus_trace.span(\"Work\"):",
    );
    assert_ne!(job, PY_JOB);
    std::fs::write(&script, job).expect("write job");
    let own = tmp.path().join("own.json");
    let out = tmp.path().join("out");
    let (_, err) = ok(&[
        "trace",
        "run",
        "--sample",
        "--counters",
        "none",
        "-o",
        s(&out),
        "--",
        s(&py),
        s(&script),
        s(&own),
    ]);
    let out = s(&out).to_string();
    let _maps = PerfMapsOf(out.clone(), s(&script).to_string());
    let said = |text: &str| {
        text.contains("JIT frames")
            && text.contains("/tmp/perf-")
            && text.contains("owned by uid 65534")
    };
    assert!(said(&err), "{err}");
    let sampling =
        std::fs::read_to_string(Path::new(&out).join("lotus.sampling")).expect("sampling");
    assert!(said(&sampling), "{sampling}");
    let (lines, _) = folded(&out);
    let work: u64 = lines
        .iter()
        .filter(|(f, _)| f[0] == "Work")
        .map(|(_, n)| n)
        .sum();
    assert!(work >= 400, "{work} samples in Work");
    assert!(
        !lines.iter().any(|(f, _)| f
            .iter()
            .any(|x| x == "py::spin_python" || x == "py::call_c")),
        "a py:: frame named from a refused map"
    );
    assert!(
        lines
            .iter()
            .any(|(f, _)| f[0] == "Work" && f.iter().any(|x| x == "zlib_compress")),
        "the native frames are still there"
    );
    let rows = row_samples(&out);
    assert_eq!(sums(&lines, &rows), rows);
}

/// [`trace_job`] of [`JOB`] with the library built with `flags`.
fn trace_built(dir: &Path, stacks: &str, flags: &[&str]) -> String {
    let (script, lib) = job_built(dir, flags);
    trace_script(dir, stacks, &script, &lib)
}

#[test]
fn without_stacks_each_sample_is_its_function_under_its_row() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = trace(tmp.path(), "none");
    assert!(!Path::new(&out).join("lotus.stacks").exists());
    let (lines, err) = folded(&out);
    assert!(err.contains("carry no call stacks"), "{err}");
    // Without stacks each Spin line is its row and the sample's own
    // function; the rows and notes are printed where this fails (it did
    // once on a loaded machine, not reproduced since).
    let rows = row_samples(&out);
    assert!(
        lines
            .iter()
            .all(|(f, _)| f.len() == 2 || !f[0].starts_with("Spin")),
        "{lines:?}\nrows: {rows:?}\n{err}"
    );
    assert!(
        lines.iter().any(|(f, _)| f == &["Spin", "inner"]),
        "{lines:?}\nrows: {rows:?}\n{err}"
    );
    assert_eq!(sums(&lines, &rows), rows, "{lines:?}\n{err}");
}

#[test]
fn a_damaged_stacks_file_is_named_and_the_rest_analysed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = trace(tmp.path(), "fp");
    let stacks = Path::new(&out).join("lotus.stacks");
    let text = std::fs::read_to_string(&stacks).expect("stacks");
    // Cut after its third line (half of the fourth kept): the stacks from
    // there on are gone, and those that named them too.
    let kept: Vec<&str> = text.lines().take(4).collect();
    let mut cut = kept[..3].join("\n") + "\n";
    cut += kept.get(3).map_or("", |l| &l[..l.len() / 2]);
    std::fs::write(&stacks, cut).expect("cut");
    let (lines, err) = folded(&out);
    assert!(
        err.contains("lotus.stacks") && err.contains("no line there"),
        "{err}"
    );
    let rows = row_samples(&out);
    assert_eq!(sums(&lines, &rows), rows);

    // A stack line whose frame names a function the symbols file has no
    // line for: drawn [unknown], said with both files, the rest as it was.
    // The first stack, under which the others grow.
    let mut table: Vec<String> = text.lines().map(str::to_string).collect();
    let mut fields: Vec<&str> = table[1].split('\t').collect();
    fields[2] = "99999999";
    table[1] = fields.join("\t");
    std::fs::write(&stacks, table.join("\n") + "\n").expect("bad frame");
    let (lines, err) = folded(&out);
    assert!(
        err.contains("lotus.stacks")
            && err.contains("lotus.symbols has no line for")
            && err.contains("id 99999999"),
        "{err}"
    );
    assert!(lines
        .iter()
        .any(|(f, _)| f.iter().any(|x| x == "[unknown]")));
    assert_eq!(sums(&lines, &rows), rows);
}

#[test]
fn folded_needs_a_sampled_trace_folder() {
    let err = common::lotus_usage_error(&[
        "attribute",
        "--mapping",
        "m.json",
        "--profile",
        "p.json",
        "--format",
        "folded",
    ]);
    assert!(err.contains("--format folded needs call stacks"), "{err}");
}

/// A received folder whose `lotus.stacks` is a fifo or a link out of the
/// folder: refused at once, by name (never opened, never waited on).
#[test]
fn a_stacks_file_that_is_a_fifo_or_a_link_out_is_refused_by_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = trace(tmp.path(), "fp");
    let stacks = Path::new(&out).join("lotus.stacks");
    for make in ["fifo", "link"] {
        std::fs::remove_file(&stacks).expect("rm");
        if make == "fifo" {
            let c = std::ffi::CString::new(stacks.to_str().expect("utf-8")).expect("c");
            // SAFETY: a valid C string; mkfifo has no other preconditions.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
        } else {
            std::os::unix::fs::symlink("/dev/zero", &stacks).expect("link");
        }
        let o = lotus_env(&["attribute", &out, "--format", "folded"], &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{make}: {err}");
        assert!(err.contains("lotus.stacks"), "{make}: {err}");
        assert!(!err.contains("panicked"), "{make}: {err}");
    }
}

/// `--by caller --function inner` as JSON.
fn callers_json(out: &str, extra: &[&str]) -> Value {
    let mut args = vec!["attribute", out, "--by", "caller", "--function", "inner"];
    args.extend(extra);
    args.extend(["--format", "json"]);
    let (json, _) = ok(&args);
    serde_json::from_str(&json).expect("json")
}

/// The callers of `inner` (only `outer` calls it) are `outer` with all,
/// or nearly all, of inner's samples in the op; at every level the
/// callers add up to the function's samples (to their callee's where
/// deeper); inner's samples there are those of the folded lines that hold
/// it; csv, md and the table say the same.
#[test]
fn the_callers_of_inner_are_outer_and_add_up_to_its_samples() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = trace(tmp.path(), "fp");
    let v = callers_json(&out, &[]);
    assert_eq!(v["schema"], "lotus.callers/1");
    let rows = v["rows"].as_array().expect("rows");
    let spin = rows
        .iter()
        .find(|r| r["row"] == "Spin")
        .unwrap_or_else(|| panic!("no Spin row: {v}"));
    let n = spin["samples"].as_u64().expect("samples");
    // The folded lines of Spin that hold inner.
    let (lines, _) = folded(&out);
    let in_folded: u64 = lines
        .iter()
        .filter(|(f, _)| f[0] == "Spin" && f.iter().any(|x| x == "inner"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(n, in_folded, "{v}");
    assert!(n >= 300, "{n} samples of inner in Spin");
    fn check(nodes: &Value, total: u64) {
        let nodes = nodes.as_array().expect("callers");
        if nodes.is_empty() {
            return;
        }
        let sum: u64 = nodes
            .iter()
            .map(|c| c["samples"].as_u64().expect("n"))
            .sum();
        assert_eq!(sum, total, "{nodes:?}");
        for c in nodes {
            check(&c["callers"], c["samples"].as_u64().expect("n"));
        }
    }
    check(&spin["callers"], n);
    let first = &spin["callers"][0];
    assert_eq!(first["frame"], "outer", "{spin}");
    let by_outer = first["samples"].as_u64().expect("n");
    assert!(by_outer * 10 >= n * 9, "{by_outer} of {n} under outer");
    assert!(first["module"]
        .as_str()
        .expect("module")
        .ends_with("libspin.so"));
    // --op keeps that op's row; an op whose stacks lack inner is named.
    let only = callers_json(&out, &["--op", "Spin"]);
    assert_eq!(only["rows"].as_array().expect("rows").len(), 1);
    let o = lotus_env(
        &[
            "attribute",
            &out,
            "--by",
            "caller",
            "--function",
            "inner",
            "--op",
            "NoSuchOp",
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--op NoSuchOp") && err.contains("Spin"),
        "{err}"
    );

    // CSV: one line per caller, the first level adding up to n.
    let (csv, _) = ok(&[
        "attribute",
        &out,
        "--by",
        "caller",
        "--function",
        "inner",
        "--format",
        "csv",
    ]);
    let mut r = csv::Reader::from_reader(csv.as_bytes());
    let first_level: u64 = r
        .records()
        .map(|l| l.expect("record"))
        .filter(|l| &l[0] == "Spin" && &l[4] == "1")
        .map(|l| l[7].parse::<u64>().expect("samples"))
        .sum();
    assert_eq!(first_level, n);
    // The table and Markdown name the op, the caller and its module.
    for format in ["table", "md"] {
        let (text, _) = ok(&[
            "attribute",
            &out,
            "--by",
            "caller",
            "--function",
            "inner",
            "--format",
            format,
        ]);
        for word in ["Spin", "outer", "libspin.so", "% of fn"] {
            assert!(text.contains(word), "{format}: {word}: {text}");
        }
    }
}

/// A function no stack holds: an error naming the functions whose name
/// contains it; a folder without stacks says so; --by caller without
/// --function, or --function without --by caller, is a usage error.
#[test]
fn callers_of_an_unknown_function_or_without_stacks_are_clear_errors() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = trace(tmp.path(), "fp");
    let o = lotus_env(
        &["attribute", &out, "--by", "caller", "--function", "inn"],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--function inn: no call stack")
            && err.contains("contains it: inner")
            && err.contains("--format folded"),
        "{err}"
    );
    common::lotus_usage_error(&["attribute", &out, "--by", "caller"]);
    common::lotus_usage_error(&[
        "attribute",
        &out,
        "--by",
        "caller",
        "--function",
        "inner",
        "--plot",
        "x.svg",
    ]);
    // --flamegraph beside it draws the same stacks.
    let svg = tmp.path().join("callers.svg");
    let (text, _) = ok(&[
        "attribute",
        &out,
        "--by",
        "caller",
        "--function",
        "inner",
        "--flamegraph",
        s(&svg),
    ]);
    assert!(text.contains("outer"), "{text}");
    assert!(std::fs::read_to_string(&svg)
        .expect("svg")
        .contains("inner"));
    common::lotus_usage_error(&["attribute", &out, "--function", "inner"]);

    let none = tempfile::tempdir().expect("tmp");
    let out = trace(none.path(), "none");
    let o = lotus_env(
        &["attribute", &out, "--by", "caller", "--function", "inner"],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("carry no call stacks") && err.contains("--stacks dwarf"),
        "{err}"
    );
}

/// A synthetic sampled folder with stacks: a worker (pid 10) running
/// each op of `ops` (name, samples) one after another, sampled every
/// 100 ns, every sample in `main;outer;inner`.
pub(crate) fn synthetic_ops_folder(dir: &Path, ops: &[(&str, u64)]) {
    use lotus_samples::{Sample, StackNode, Symbol};
    let off = 1_000_000u64;
    let mut log = format!("#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n");
    let (mut samples, mut ids) = (Vec::new(), Vec::new());
    let mut t = 1000u64;
    for (name, n) in ops {
        log += &format!("S{name},{},{},kind=op\n", t + off, n * 100);
        for _ in 0..*n {
            samples.push(Sample {
                time_ns: t + 50,
                pid: 10,
                tid: 10,
                symbol: 2,
                kernel: false,
                counters: Default::default(),
            });
            ids.push(3);
            t += 100;
        }
    }
    log += &format!(
        "# lotus-trace: clock wall_ns={} monotonic_ns={}\n",
        t + 1000 + off,
        t + 1000
    );
    std::fs::write(dir.join("lotus_worker_pid_10"), log).expect("log");
    let symbols = [
        (0, Symbol::new("main", "/usr/bin/python3.11")),
        (1, Symbol::new("outer", "/opt/lib/libspin.so")),
        (2, Symbol::new("inner", "/opt/lib/libspin.so")),
    ];
    let stacks = [
        StackNode::new(1, 0, 0),
        StackNode::new(2, 1, 1),
        StackNode::new(3, 2, 2),
    ];
    lotus_testkit::sampled::write_stacked_samples(dir, &symbols, &stacks, &samples, &ids);
}

/// A synthetic sampled folder: op `Decode` (pid 10) over [1000, 2000) ns,
/// sampled every 100 ns: `main;outer;inner` 6 times, `main;at::native::
/// (anonymous namespace)::copy_kernel<float>(at::TensorIterator&);inner`
/// 3 times, `inner` with no stack once; outside it `main;outer`.
fn synthetic_callers_folder(dir: &Path) {
    use lotus_samples::{StackNode, Symbol};
    let symbols = [
        (0, Symbol::new("main", "/usr/bin/python3.11")),
        (1, Symbol::new("outer", "/opt/lib/libspin.so")),
        (2, Symbol::new("inner", "/opt/lib/libspin.so")),
        (
            3,
            Symbol::new(
                "at::native::(anonymous namespace)::copy_kernel<float>(at::TensorIterator&)",
                "/opt/torch/lib/libtorch_cpu.so",
            ),
        ),
    ];
    let stacks = [
        StackNode::new(1, 0, 0),
        StackNode::new(2, 1, 1),
        StackNode::new(3, 2, 2),
        StackNode::new(4, 1, 3),
        StackNode::new(5, 4, 2),
    ];
    lotus_testkit::sampled::worker_folder(
        dir,
        &[("Decode", 1000, 1000, "kind=op")],
        &symbols,
        &stacks,
        |t| {
            let in_op = (1000..2000).contains(&t);
            let id = match t {
                1000 => 0,
                1100..=1300 => 5,
                _ if in_op => 3,
                _ => 2,
            };
            (if in_op { 2 } else { 1 }, false, id)
        },
        &[],
    );
}

/// The `--by caller` table of a fixed folder, 100 columns wide: its
/// layout as users see it (insta snapshot), and its Markdown.
#[test]
fn the_callers_table_reads_as_a_tree() {
    let tmp = tempfile::tempdir().expect("tmp");
    synthetic_callers_folder(tmp.path());
    let dir = s(tmp.path());
    let args = ["attribute", dir, "--by", "caller", "--function", "inner"];
    let table = lotus_env(&args, &[("COLUMNS", "100".as_ref())]);
    assert!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    let table = String::from_utf8(table.stdout).expect("utf-8");
    let (md, _) = ok(&[&args[..], &["--format", "md"]].concat());
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.bind(|| {
        insta::assert_snapshot!("callers_table", table);
        insta::assert_snapshot!("callers_md", md);
    });
}

/// `lotus map --stacks dwarf` of an op (the CKernels fixture: C kernels
/// called through ctypes): the mapping holds the op's call stacks, which
/// add up to its samples (every function kept: one run), reach the C
/// kernel through libffi and CPython's evaluation loop, and are written
/// collapsed under the op's name (`--folded`) and drawn (`--flamegraph`).
#[test]
fn map_with_stacks_holds_each_ops_call_stacks() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (json, folded_out, svg) = (
        tmp.path().join("m.json"),
        tmp.path().join("m.folded"),
        tmp.path().join("m.svg"),
    );
    let py = python();
    let op = common::fixture("ops/CKernels.py");
    let (_, err) = ok(&[
        "map",
        "--backend",
        "perf",
        "--stacks",
        "dwarf",
        "--runs",
        "1",
        "--no-baseline",
        "--min-samples",
        "1000",
        "--python",
        s(&py),
        "-o",
        s(&json),
        "--folded",
        s(&folded_out),
        "--flamegraph",
        s(&svg),
        s(&op),
    ]);
    assert!(err.contains("m.folded") && err.contains("m.svg"), "{err}");
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
    let op = &m["ops"][0];
    let stacks = op["stacks"].as_array().expect("stacks in the mapping");
    let total: u64 = stacks
        .iter()
        .map(|s| s["samples"].as_u64().expect("n"))
        .sum();
    assert_eq!(
        total as f64,
        op["samples"].as_f64().expect("samples"),
        "{op}"
    );
    let through = |s: &Value, names: &[&str]| {
        let frames: Vec<&str> = s["frames"]
            .as_array()
            .expect("frames")
            .iter()
            .map(|f| f.as_str().expect("frame"))
            .collect();
        let at: Vec<Option<usize>> = names
            .iter()
            .map(|n| frames.iter().position(|f| f.starts_with(n)))
            .collect();
        at.iter().all(Option::is_some) && at.windows(2).all(|w| w[0] < w[1])
    };
    let kernels: u64 = stacks
        .iter()
        .filter(|s| {
            through(
                s,
                &["_PyEval_EvalFrameDefault", "ffi_call", "lotus_fixture_"],
            )
        })
        .map(|s| s["samples"].as_u64().expect("n"))
        .sum();
    assert!(
        kernels * 2 >= total,
        "{kernels} of {total} samples reach a kernel through ffi_call: {stacks:?}"
    );
    let text = std::fs::read_to_string(&folded_out).expect("folded");
    let folded_total: u64 = text
        .lines()
        .map(|l| {
            assert!(l.starts_with("CKernels;"), "{l}");
            l.rsplit_once(' ')
                .expect("count")
                .1
                .parse::<u64>()
                .expect("n")
        })
        .sum();
    assert_eq!(folded_total, total);
    // The op's own Python function is a frame of its samples (read from
    // the interpreter on this 3.11; the harness turns no trampolines on),
    // above the C it calls.
    let in_op: u64 = stacks
        .iter()
        .filter(|s| through(s, &["py::op", "ffi_call"]))
        .map(|s| s["samples"].as_u64().expect("n"))
        .sum();
    assert!(
        in_op * 10 >= total * 8,
        "{in_op} of {total} samples have py::op above ffi_call: {stacks:?}"
    );
    let drawn = std::fs::read_to_string(&svg).expect("svg");
    assert!(
        drawn.contains("<svg") && drawn.contains("CKernels"),
        "not a flame graph"
    );

    // Without --stacks the mapping has none, and asking to draw them is
    // a usage error that says what to add.
    let o = lotus_env(
        &[
            "map",
            "--backend",
            "perf",
            "--folded",
            s(&folded_out),
            s(&op_file()),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("add --stacks dwarf"));
}

fn op_file() -> std::path::PathBuf {
    common::fixture("ops/CKernels.py")
}

/// `lotus profile --stacks dwarf` of a program without frame pointers in
/// its hot code: the folded stacks add up to the profile's samples and
/// show `outer;inner` under CPython's frames.
#[test]
fn profile_with_stacks_writes_the_programs_call_stacks() {
    let flags = ["-O2", "-fomit-frame-pointer"];
    let tmp = tempfile::tempdir().expect("tmp");
    let (script, lib) = job_built(tmp.path(), &flags);
    let plain = "import ctypes, sys\nlib = ctypes.CDLL(sys.argv[1])\nlib.outer.argtypes = [ctypes.c_double]\ndef run():\n    lib.outer(0.4)\nrun()\n";
    std::fs::write(&script, plain).expect("job");
    let (p, text) = profile_stacks(tmp.path(), &[s(&python()), &script, &lib]);
    let rows = p["rows"].as_array().expect("rows");
    let samples: f64 = rows
        .iter()
        .map(|r| r["value"].as_f64().unwrap_or(0.0))
        .sum();
    let (mut total, mut chained, mut in_run) = (0u64, 0u64, 0u64);
    for l in text.lines() {
        let (frames, n) = l.rsplit_once(' ').expect("count");
        let n: u64 = n.parse().expect("n");
        total += n;
        if frames.contains("_PyEval_EvalFrameDefault;") && frames.contains(";outer;inner") {
            chained += n;
        }
        // The script's function, read from the interpreter, above the C.
        if frames.contains(";py::run;") && frames.contains(";outer;inner") {
            in_run += n;
        }
    }
    assert_eq!(total as f64, samples, "folded against the profile's rows");
    assert!(total >= 300, "{total} samples");
    assert!(
        chained * 10 >= total * 8,
        "{chained} of {total} under outer;inner: {text}"
    );
    assert!(
        in_run * 10 >= total * 8,
        "{in_run} of {total} under py::run;...;outer;inner: {text}"
    );
}

/// The venv's Python and pyenv's 3.8 to 3.10 and 3.12+ (said by `test`'s
/// name where one is missing).
fn every_python(test: &str) -> Vec<std::path::PathBuf> {
    let mut pythons = vec![python()];
    for v in ["3.8", "3.9", "3.10"] {
        pythons.extend(common::pyenv_python(v, test));
    }
    pythons.extend(common::pythons_312_and_later(test));
    pythons
}

/// `dir/name`: a pure-Python `inner(n)` that spins `n` times, then
/// `caller` (Python source that calls it).
fn spin_file(dir: &Path, name: &str, caller: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    let inner =
        "def inner(n):\n    s = 0\n    for i in range(n):\n        s += i * i\n    return s\n\n\n";
    std::fs::write(&path, format!("{inner}{caller}")).expect("script");
    path
}

/// Of folded `text`: the samples with frame `outer` above frame `inner`,
/// and all its samples.
fn nested_samples(text: &str, outer: &str, inner: &str) -> (u64, u64) {
    let (mut nested, mut total) = (0u64, 0u64);
    for (frames, n) in folded_lines(text) {
        total += n;
        let at = |f: &str| frames.iter().position(|x| x == f);
        if let (Some(o), Some(i)) = (at(outer), at(inner)) {
            nested += u64::from(o < i) * n;
        }
    }
    (nested, total)
}

/// `lotus map --stacks dwarf` of a pure-Python op on every Python (3.8 to
/// 3.13 where installed; two runs, each forked from the op's fork server,
/// whose harness must run on each of them): the op's functions are `py::`
/// frames of its samples, nested as they called each other, in at least
/// 80% of them. Each call of the op is some 10 ms: the frames come from
/// snapshots of the interpreter some 20 ms apart, each given to the
/// samples nearest it, so a snapshot taken between two calls names the
/// harness's loop for the samples around it (with 1 ms calls, on a
/// loaded machine, a quarter of them).
#[test]
fn map_with_stacks_has_the_ops_python_frames_on_every_python() {
    let test = "map_with_stacks_has_the_ops_python_frames_on_every_python";
    let pythons = every_python(test);
    let tmp = tempfile::tempdir().expect("tmp");
    let op = spin_file(
        tmp.path(),
        "Spin.py",
        "def op(_data=None):\n    inner(200_000)\n",
    );
    let folded_out = tmp.path().join("m.folded");
    for py in pythons {
        ok(&[
            "map",
            "--backend",
            "perf",
            "--stacks",
            "dwarf",
            "--runs",
            "2",
            "--no-baseline",
            "--min-samples",
            "500",
            "--python",
            s(&py),
            "-o",
            s(&tmp.path().join("m.json")),
            "--folded",
            s(&folded_out),
            s(&op),
        ]);
        let text = std::fs::read_to_string(&folded_out).expect("folded");
        let (nested, total) = nested_samples(&text, "py::op", "py::inner");
        assert!(total >= 500, "{}: {total} samples", py.display());
        assert!(
            nested * 10 >= total * 8,
            "{}: {nested} of {total} samples under py::op;...;py::inner: {text}",
            py.display()
        );
    }
}

/// `lotus profile --backend perf --stacks dwarf -- CMD`, its profile
/// and folded stacks written into `dir`: (the profile, the folded text).
fn profile_stacks(dir: &Path, cmd: &[&str]) -> (Value, String) {
    let (json, folded_out) = (dir.join("p.json"), dir.join("p.folded"));
    let mut args = vec![
        "profile",
        "--backend",
        "perf",
        "--stacks",
        "dwarf",
        "-o",
        s(&json),
        "--folded",
        s(&folded_out),
        "--",
    ];
    args.extend_from_slice(cmd);
    ok(&args);
    let p = serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
    (p, std::fs::read_to_string(&folded_out).expect("folded"))
}

/// `lotus profile --stacks dwarf` of a pure-Python program on every
/// Python (3.8 to 3.13 where installed): its functions are `py::` frames,
/// read from the interpreter (no trampolines are turned on), nested as
/// they called each other, in at least 80% of its samples.
#[test]
fn profile_with_stacks_has_the_programs_python_frames_on_every_python() {
    let test = "profile_with_stacks_has_the_programs_python_frames_on_every_python";
    let pythons = every_python(test);
    let tmp = tempfile::tempdir().expect("tmp");
    let outer = "def outer():\n    for _ in range(10):\n        inner(400_000)\n\n\nouter()\n";
    let script = spin_file(tmp.path(), "spin.py", outer);
    for py in pythons {
        let (_, text) = profile_stacks(tmp.path(), &[s(&py), s(&script)]);
        let (nested, total) = nested_samples(&text, "py::outer", "py::inner");
        assert!(total >= 100, "{}: {total} samples", py.display());
        assert!(
            nested * 10 >= total * 8,
            "{}: {nested} of {total} samples under py::outer;...;py::inner: {text}",
            py.display()
        );
    }
}

/// A C function with a frame of 20 KiB of locals, as numpy's generalized
/// ufuncs (FFT, matmul) have, spinning in a leaf until its thread has run
/// `seconds` of CPU.
const BIG_FRAME_LIB: &str = r#"
#include <string.h>
#include <time.h>
static volatile unsigned long sink;
static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
__attribute__((noinline)) static void leaf(volatile char *buf) {
    for (unsigned long i = 0; i < 200000UL; i++) sink += buf[i % 20480] * i;
}
__attribute__((noinline)) void transform(double seconds) {
    volatile char buf[20480];
    memset((char *)buf, 1, sizeof buf);
    double t0 = cpu();
    do leaf(buf); while (cpu() - t0 < seconds);
}
"#;

/// The op of the deep-stack jobs, in a module of its own for `--op`: a
/// class whose `__call__` calls the big frame's C (ctypes) or, given
/// numpy, an STFT and a mel filter bank as an audio front end does.
const DEEP_OPS: &str = r#"
import ctypes, os

class Spectral:
    def __init__(self):
        self.lib = ctypes.CDLL(os.environ["DEEP_LIB"])
        self.lib.transform.argtypes = [ctypes.c_double]
    def __call__(self, seconds):
        return self.lib.transform(seconds)

def stft(y, n_fft=512, hop=160):
    import numpy as np
    y = np.pad(y, n_fft // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(y, n_fft)[::hop]
    return np.fft.rfft(frames * np.hanning(n_fft).astype(np.float32), axis=-1)

class MelFrontend:
    def __init__(self):
        import numpy as np
        f = np.linspace(0, 1, 257)
        c = np.linspace(0, 1, 82)
        self.mel = np.maximum(0, 1 - np.abs(f[None, :] - c[1:-1, None]) * 81).astype(np.float32)
    def __call__(self, y):
        import numpy as np
        s = stft(y)
        p = (s.real ** 2 + s.imag ** 2).astype(np.float32)
        return np.log10(np.maximum(self.mel @ p.T, 1e-10))
"#;

/// The ctypes job: the op called 40 times under 30 nested Python calls.
const DEEP_CTYPES_JOB: &str = r#"
from deep_ops import Spectral
op = Spectral()
def nest(k):
    return op(0.01) if k == 0 else nest(k - 1)
for _ in range(40):
    nest(30)
"#;

/// The audio job: the mel front end in a DataLoader worker (fork), under a
/// Compose of its own and 20 nested calls of the dataset's. BLAS and
/// OpenMP on one thread: the op's samples are of its own thread.
const DEEP_AUDIO_JOB: &str = r#"
import os
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from deep_ops import MelFrontend

class Compose:
    def __init__(self, ts):
        self.ts = ts
    def __call__(self, x):
        for t in self.ts:
            x = t(x)
        return x

class Audio(Dataset):
    def __init__(self):
        self.tf = Compose([MelFrontend()])
    def __len__(self):
        return 160
    def nest(self, k, y):
        return self.tf(y) if k == 0 else self.nest(k - 1, y)
    def __getitem__(self, i):
        y = np.random.default_rng(i).standard_normal(64000).astype(np.float32)
        return torch.from_numpy(self.nest(20, y))

if __name__ == "__main__":
    for _ in DataLoader(Audio(), batch_size=4, num_workers=1):
        pass
"#;

/// On Python 3.12+ (`--stacks dwarf`, the default), an op whose native
/// code keeps a large frame (20 KiB of locals, as numpy's generalized
/// ufuncs do) under a deep Python stack has its own `py::` frame in at
/// least 90% of its samples: the user stack copied with each sample
/// reaches past the native frames (it was 8 KiB, and the op's frame was in
/// none of them), and as root (the full 64 KiB copy) 90% reach the
/// thread's root. The same for a mel front end (numpy's FFT and matmul)
/// in a DataLoader worker, where the Python has numpy and torch.
#[test]
fn the_ops_own_python_frame_is_in_its_samples_under_deep_native_frames() {
    let test = "the_ops_own_python_frame_is_in_its_samples_under_deep_native_frames";
    let Some(py) = common::python312(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let lib_c = tmp.path().join("libdeep.c");
    std::fs::write(&lib_c, BIG_FRAME_LIB).expect("write c");
    let deep_lib = tmp.path().join("libdeep.so");
    let gcc = Command::new("gcc")
        .args(["-O2", "-fPIC", "-shared", "-o"])
        .arg(&deep_lib)
        .arg(&lib_c)
        .output()
        .expect("run gcc");
    assert!(
        gcc.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&gcc.stderr)
    );
    std::fs::write(tmp.path().join("deep_ops.py"), DEEP_OPS).expect("write ops");
    deep_op_frames(&py, tmp.path(), "ctypes", DEEP_CTYPES_JOB, "Spectral");
    let has_numpy_torch = Command::new(&py)
        .args(["-c", "import numpy, torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_numpy_torch {
        deep_op_frames(&py, tmp.path(), "audio", DEEP_AUDIO_JOB, "MelFrontend");
    } else {
        assert!(
            !common::torch::torch_required(),
            "{test}: LOTUS_REQUIRE_TORCH=1 but {} imports no numpy and torch",
            py.display()
        );
        // Not eprintln!: the test harness would swallow it.
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {test} (audio): {} imports no numpy and torch (the ctypes job ran)",
            py.display()
        );
    }
}

/// Traces `job` (named `name`, its op the class `op` of `deep_ops`) with
/// the Python `py` in `dir`, and checks its op's samples' stacks.
fn deep_op_frames(py: &Path, dir: &Path, name: &str, job: &str, op: &str) {
    let script = dir.join(format!("{name}.py"));
    std::fs::write(&script, job).expect("write job");
    let out = dir.join(format!("out-{name}"));
    let o = lotus_env(
        &[
            "trace",
            "run",
            "--sample",
            "--counters",
            "none",
            "--op",
            &format!("deep_ops:{op}.__call__"),
            "-o",
            s(&out),
            "--",
            s(py),
            s(&script),
        ],
        &[("DEEP_LIB", dir.join("libdeep.so").as_os_str())],
    );
    assert!(
        o.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = s(&out).to_string();
    let _maps = PerfMapsOf(out.clone(), s(&script).to_string());
    let rows = row_samples(&out);
    let row = rows
        .keys()
        .find(|r| {
            r.rsplit(';')
                .next()
                .is_some_and(|l| l.starts_with(&format!("{op}.")))
        })
        .unwrap_or_else(|| panic!("{name}: no {op} row: {rows:?}"))
        .clone();
    let (lines, _) = folded(&out);
    let frame = format!("py::{op}.__call__");
    let (mut total, mut own, mut rooted) = (0u64, 0u64, 0u64);
    for (frames, n) in &lines {
        let joined = frames.join(";");
        let Some(below) = joined.strip_prefix(&format!("{row};")) else {
            continue;
        };
        // A line of a row under the op's (none here) is not the op's.
        if rows
            .keys()
            .any(|r| r.len() > row.len() && joined.starts_with(&format!("{r};")))
        {
            continue;
        }
        total += n;
        let below: Vec<&str> = below.split(';').collect();
        if below.contains(&frame.as_str()) {
            own += n;
        }
        if matches!(
            below.first(),
            Some(&"_start") | Some(&"clone3") | Some(&"clone")
        ) {
            rooted += n;
        }
    }
    eprintln!(
        "{name}: {own} of {total} {row} samples with {frame}, {rooted} from the thread's root"
    );
    assert_eq!(
        total, rows[&row],
        "{name}: {row}: folded lines against its samples"
    );
    assert!(total >= 150, "{name}: {total} samples in {row}");
    assert!(
        own * 10 >= total * 9,
        "{name}: {own} of {total} {row} samples with {frame}"
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(
            rooted * 10 >= total * 9,
            "{name}: {rooted} of {total} {row} samples from the thread's root"
        );
    }
}

/// `lotus attribute DIR --format md`: a C++ function's name is shortened
/// in its cell by the tables' rule (it ran to hundreds of characters),
/// whole with `--wide`, and a `|` in it cannot end the cell.
#[test]
fn markdown_cells_shorten_cpp_names_unless_wide() {
    use lotus_samples::Symbol;
    let long = format!(
        "void at::native::{}::copy_kernel<float, std::allocator<float> >(at::TensorIterator&, bool, {})",
        "detail".repeat(20),
        "int".repeat(30)
    );
    let tmp = tempfile::tempdir().expect("tmp");
    lotus_testkit::sampled::worker_folder(
        tmp.path(),
        &[("Copy", 1000, 1000, "kind=op")],
        &[
            (1, Symbol::new(&long, "/lib/libtorch_cpu.so")),
            (2, Symbol::new("operator|(a, b)", "/lib/libx.so")),
        ],
        &[],
        |t| (if (1000..1500).contains(&t) { 1 } else { 2 }, false, 0),
        &[],
    );
    let md = common::lotus_ok(&["attribute", s(tmp.path()), "--format", "md"]);
    assert!(!md.contains(&long), "{md}");
    let row = md
        .lines()
        .find(|l| l.starts_with("| Copy |"))
        .expect("the op's row");
    assert!(row.contains("copy_kernel"), "{row}");
    assert!(row.len() < 400, "{row}");
    // The row's cells: as many as the header's, a `|` in a name escaped.
    let cells = |l: &str| l.replace("\\|", "").matches('|').count();
    let header = md
        .lines()
        .find(|l| l.starts_with("| row |"))
        .expect("header");
    for l in md.lines().filter(|l| l.starts_with("| ")) {
        assert_eq!(cells(l), cells(header), "{l}");
    }
    let wide = common::lotus_ok(&["attribute", s(tmp.path()), "--format", "md", "--wide"]);
    assert!(wide.contains(&long), "{wide}");
}

/// The README's example (a torchvision ImageFolder of JPEGs, two forked
/// workers, a small model) on the tests' Python (3.11: no perf
/// trampolines, its frames read from the interpreter): in `attribute
/// --format folded`, at least 90% of the samples of each op the tracer
/// made hold the job's own `main` (`py::main`, in the script; the workers
/// fork from it).
#[test]
fn the_readme_example_has_the_jobs_python_frames_in_each_op() {
    let test = "the_readme_example_has_the_jobs_python_frames_in_each_op";
    let Some(py) = crate::common::torch::torch_python(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let (data, out) = (tmp.path().join("data"), tmp.path().join("out"));
    let script = common::fixture("trace/torch_pipeline.py");
    ok(&[
        "trace",
        "run",
        "--sample",
        "-o",
        s(&out),
        "--",
        s(&py),
        s(&script),
        "--data",
        s(&data),
        "--dataset",
        "jpeg",
        "--workers",
        "2",
        "--batches",
        "24",
        "--image-size",
        "200",
        "500",
        "--model",
    ]);
    let out = s(&out).to_string();
    let (json, _) = ok(&["attribute", &out, "--format", "json"]);
    let v: Value = serde_json::from_str(&json).expect("json");
    let ops: Vec<String> = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["kind"] == "op" && r["depth"] == 0)
        .map(|r| r["name"].as_str().expect("name").to_string())
        .collect();
    assert!(
        ops.iter().any(|o| o == "ImageFolder") && ops.iter().any(|o| o == "Collation"),
        "{ops:?}"
    );
    let (lines, _) = folded(&out);
    for op in &ops {
        let mine: Vec<&(Vec<String>, u64)> = lines.iter().filter(|(f, _)| &f[0] == op).collect();
        let total: u64 = mine.iter().map(|(_, n)| n).sum();
        let with = |name: &str| -> u64 {
            mine.iter()
                .filter(|(f, _)| f.iter().any(|x| x == name))
                .map(|(_, n)| n)
                .sum()
        };
        if total < 20 {
            continue;
        }
        let main = with("py::main");
        eprintln!("{op}: {main} of {total} samples hold py::main");
        let without: Vec<String> = mine
            .iter()
            .filter(|(f, _)| !f.iter().any(|x| x == "py::main"))
            .take(12)
            .map(|(f, n)| format!("{n} {}", f.join(";")))
            .collect();
        assert!(
            main * 10 >= total * 9,
            "{op}: {main} of {total} samples hold py::main; sampling {:?}; some without:\n{}",
            common::sampled::sampling(Path::new(&out)),
            without.join("\n")
        );
    }
}
