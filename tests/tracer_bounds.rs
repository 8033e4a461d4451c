//! What a traced job's own code can make the Python tracer hold or spend
//! (issue 33): a dataset that makes a class per item (finer spans' op
//! names: O(1) claims, bounded tables that keep no class alive) and an
//! `--op` glob that fnmatch's regular expression backtracks on (Python
//! 3.8). Each check reads the job's own timers (thread CPU, ru_maxrss),
//! never wall time. The fixtures are under `fixtures/tracer_bounds/`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    common::fixture("tracer_bounds").join(name)
}

/// The JSON object a fixture prints as its last stdout line.
fn last_json(out: &Output, what: &str) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{what}: no JSON line\nstdout: {stdout}\nstderr: {stderr}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {e}: {line}"))
}

fn num(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// pyenv's Pythons here whose version starts with `prefix` (`3.8`), newest
/// last.
fn pyenv_pythons(prefix: &str) -> Vec<PathBuf> {
    let Some(home) = std::env::var_os("HOME") else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir(PathBuf::from(home).join(".pyenv/versions")) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = dir
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n == prefix || n.starts_with(&format!("{prefix}."))
        })
        .map(|e| e.path().join("bin/python3"))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found
}

/// A Python 3.12+ that imports torch (`$LOTUS_PYTHON312` or `.venv312`),
/// or `None` after saying why the test is skipped.
fn python_312_with_torch(test: &str) -> Option<PathBuf> {
    let py = std::env::var_os("LOTUS_PYTHON312")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::root().join(".venv312/bin/python"));
    let ok = Command::new(&py)
        .args([
            "-c",
            "import sys, torch; sys.exit(0 if sys.version_info >= (3, 12) else 3)",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "skipped: {test}: {} is no Python 3.12+ importing torch (set LOTUS_PYTHON312)",
            py.display()
        );
        return None;
    }
    Some(py)
}

/// The class-per-item job alone and under `lotus trace run` (finer spans
/// on, at lotus's defaults), on Python 3.12+ and on the torch Python
/// before it (3.11 here): traced, its last quarter's median CPU per
/// item is within twice its first quarter's (the names' claims walked
/// `#2, #3, ...`: 5-7 times at 4,000 items, more after), and its peak RSS
/// within 40 MiB of the job alone (every class was kept: 67 MiB more at
/// 12,000 items).
#[test]
fn a_class_per_item_neither_slows_the_job_down_nor_is_kept() {
    let test = "a_class_per_item_neither_slows_the_job_down_nor_is_kept";
    // sys.monitoring's finer spans on 3.12+, sys.setprofile's before
    // (the repository's .venv: 3.11).
    let mut pythons: Vec<PathBuf> = python_312_with_torch(test).into_iter().collect();
    if let Some(py) = common::torch::torch_python(test) {
        if !pythons.contains(&py) {
            pythons.push(py);
        }
    }
    for py in pythons {
        check_class_per_item(test, &py);
    }
}

fn check_class_per_item(test: &str, py: &Path) {
    let test = &format!("{test} ({})", py.display());
    let job = fixture("class_per_item.py");
    let items = "12000";
    let alone = Command::new(py)
        .arg(&job)
        .arg(items)
        .env_remove("LOTUS_TRACE_DIR")
        .output()
        .expect("run the job");
    let alone = last_json(&alone, "the job alone");
    let tmp = tempfile::tempdir().expect("tempdir");
    let traced = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "--out"])
        .arg(tmp.path().join("trace"))
        .arg("--")
        .arg(py)
        .arg(&job)
        .arg(items)
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("LOTUS_TRACE_OPS")
        .env_remove("LOTUS_TRACE_FINER")
        .output()
        .expect("run lotus");
    let traced = last_json(&traced, "the job traced");
    eprintln!("{test}: alone {alone}, traced {traced}");
    assert_eq!(traced["items"], alone["items"], "every item");
    let (first, last) = (num(&traced, "first_ns"), num(&traced, "last_ns"));
    assert!(
        last <= 2.0 * first,
        "traced, the last quarter's CPU per item is {:.1} times the first's ({last} ns against {first} ns): alone {alone}",
        last / first
    );
    let grown_kib = num(&traced, "maxrss_kib") - num(&alone, "maxrss_kib");
    assert!(
        grown_kib <= 40.0 * 1024.0,
        "traced, the job's peak RSS is {:.1} MiB over the job alone's: alone {alone}, traced {traced}",
        grown_kib / 1024.0
    );
}

/// The finer spans' tables and claim_name in one process, on every Python
/// here, 3.8 to 3.13 (sys.setprofile's finer spans before 3.12,
/// sys.monitoring's after; no torch needed: the fixture drives the
/// DataLoader hooks' `_finer.enter` / `leave`): per-item CPU flat, per-item classes and
/// objects not kept (at most the tracer's 256-entry caches of them alive,
/// out of 8,000), a claim as cheap at the 4,000th class of one name as at
/// the first, the names of one qualified name bounded (`#2` .. `#32`, then
/// `#more`, said once in the log), a method bound to each of many objects
/// one name, and classes of one metaclass told apart.
#[test]
fn finer_spans_tables_stay_bounded_on_every_python() {
    let test = "finer_spans_tables_stay_bounded_on_every_python";
    let mut pythons: Vec<PathBuf> = ["3.8", "3.9", "3.10", "3.11"]
        .into_iter()
        .filter_map(|minor| pyenv_pythons(minor).pop())
        .collect();
    if pythons.is_empty() {
        eprintln!(
            "{test}: no pyenv Python 3.8 to 3.11 here (~/.pyenv/versions): checked on the others only"
        );
    }
    pythons.push(common::any_python());
    pythons.extend(common::pythons_312_and_later(test));
    for py in pythons {
        let what = format!("{test} ({})", py.display());
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("trace");
        let out = Command::new(&py)
            .arg(fixture("finer_tables.py"))
            .arg(&dir)
            .arg("4000")
            .env("PYTHONPATH", common::harness_dir())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("LOTUS_TRACE_DIR")
            .env_remove("LOTUS_TRACE_FINER")
            .output()
            .expect("run the fixture");
        let v = last_json(&out, &what);
        eprintln!("{what}: {v}");
        let (first, last) = (num(&v, "first_ns"), num(&v, "last_ns"));
        assert!(last <= 2.0 * first, "{what}: CPU per item grew: {v}");
        assert!(
            num(&v, "alive") <= 512.0,
            "{what}: per-item objects kept: {v}"
        );
        let (c0, c1) = (num(&v, "claim_first_ns"), num(&v, "claim_last_ns"));
        assert!(
            c1 <= 3.0 * c0,
            "{what}: a claim's CPU grew with the names: {v}"
        );
        assert_eq!(
            v["same_names_head"],
            serde_json::json!(["Same", "tests.Same", "tests.Same#2"]),
            "{what}"
        );
        assert_eq!(v["same_name_last"], "tests.Same#more", "{what}");
        assert_eq!(v["same_name_again"], "tests.Same#more", "{what}");
        assert_eq!(num(&v, "distinct_same_names"), 34.0, "{what}: {v}");
        assert_eq!(v["tuple_names"], serde_json::json!(["Rotate"]), "{what}");
        assert_eq!(v["abc_keys_differ"], true, "{what}");
        assert_eq!(
            v["list_method_names"],
            serde_json::json!(["Items.copy"]),
            "{what}"
        );
        let log = read_logs_text(&dir);
        assert_eq!(
            log.matches("share the row tests.Same#more").count(),
            1,
            "{what}: the bound said once: {log}"
        );
    }
}

fn read_logs_text(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).expect("trace folder").flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            text.push_str(&String::from_utf8_lossy(
                &std::fs::read(entry.path()).expect("log"),
            ));
        }
    }
    text
}

/// The tracer's `--op` glob matcher on every Python here (3.8 to 3.13):
/// what `fnmatch.fnmatchcase` says on a table of patterns and names (case,
/// `/`, `.`, classes, a `[` left open) and on a generated set (seed
/// printed), and the hostile glob `*a*a*a*a*a*a*a*a*b` against a
/// 48-character function name, through the module hook, in under a second
/// of the thread's CPU (Python 3.8's fnmatch: 6.7 s here, minutes at 60).
#[test]
fn op_globs_match_as_fnmatch_does_with_bounded_work() {
    let test = "op_globs_match_as_fnmatch_does_with_bounded_work";
    let mut pythons = pyenv_pythons("3.8");
    if pythons.is_empty() {
        eprintln!(
            "{test}: no pyenv Python 3.8 here (~/.pyenv/versions/3.8*): checked on the others only"
        );
    }
    pythons.push(common::any_python());
    for minor in ["3.11", "3.12", "3.13"] {
        pythons.extend(pyenv_pythons(minor).pop());
    }
    for py in pythons {
        let what = format!("{test} ({})", py.display());
        let out = Command::new(&py)
            .arg(fixture("op_glob.py"))
            .env("PYTHONPATH", common::harness_dir())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("LOTUS_TRACE_OPS")
            .output()
            .expect("run the fixture");
        let v = last_json(&out, &what);
        eprintln!("{what}: {v}");
        assert!(num(&v, "hostile_cpu_s") < 1.0, "{what}: {v}");
        assert_eq!(v["hostile_wrapped_right"], true, "{what}: {v}");
        assert!(
            num(&v, "table") > 1000.0 && num(&v, "generated") > 1000.0,
            "{what}: {v}"
        );
    }
}

/// `lotus trace run --op 'longmod:*a*a*a*a*a*a*a*a*b'` on Python 3.8: the
/// job's import of a module with a 48-character function name takes under
/// a second of its thread's CPU (6.7 s with fnmatch), and the function the
/// glob names is wrapped.
#[test]
fn a_hostile_op_glob_does_not_stall_imports_on_python_38() {
    let test = "a_hostile_op_glob_does_not_stall_imports_on_python_38";
    let Some(py) = pyenv_pythons("3.8").pop() else {
        eprintln!("skipped: {test}: no pyenv Python 3.8 here (~/.pyenv/versions/3.8*)");
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let long = "a".repeat(48);
    std::fs::write(
        tmp.path().join("longmod.py"),
        format!("def {long}():\n    return 1\ndef {long}b():\n    return 2\n"),
    )
    .expect("module");
    std::fs::write(
        tmp.path().join("job.py"),
        format!(
            "import json, time\nt0 = time.thread_time()\nimport longmod\nprint(json.dumps({{\"import_cpu_s\": time.thread_time() - t0, \"wrapped\": getattr(longmod.{long}b, '__lotus_op__', False), \"plain\": not getattr(longmod.{long}, '__lotus_op__', False)}}))\n"
        ),
    )
    .expect("job");
    let out = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "--out"])
        .arg(tmp.path().join("trace"))
        .args(["--op", "longmod:*a*a*a*a*a*a*a*a*b", "--"])
        .arg(&py)
        .arg(tmp.path().join("job.py"))
        .env("PYTHONPATH", tmp.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .output()
        .expect("run lotus");
    let v = last_json(&out, test);
    eprintln!("{test}: {v}");
    assert!(num(&v, "import_cpu_s") < 1.0, "{test}: {v}");
    assert_eq!(v["wrapped"], true, "{test}: {v}");
    assert_eq!(v["plain"], true, "{test}: {v}");
}
