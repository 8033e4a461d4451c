//! The pip install story: the `lotus-profiler` wheel (`pyproject.toml` at
//! the workspace root, maturin's `bin` bindings) built from this checkout
//! by the README's command (`scripts/wheel.sh`: a release build linked by
//! zig against glibc 2.17, tag manylinux2014), installed into a fresh venv
//! with pip, gives a `lotus` on the venv's PATH that traces a pipeline, and
//! the Python modules `lotus` and `lotus_trace`, importable and doing
//! nothing outside a lotus run, byte for byte the files the binary carries.
//! The same wheel installs into venvs of pyenv's Python 3.8 and 3.13 and
//! runs the README's quick start there (`trace run --sample`, `attribute`,
//! `report`), and neither the binary nor the control library it carries
//! needs a glibc symbol newer than 2.17.
//!
//! The script installs maturin and zig from PyPI into a private venv under
//! `target/wheel-tools/` (once; kept for the next run) and fails with a
//! clear message where it cannot. Needs no torch: the traced pipeline is
//! fixtures/trace/pipeline.py (multiprocessing workers).

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use crate::common::{any_python, fixture, pyenv_python, root};

/// The folder this test builds and installs into (the wheel and the test
/// venvs are made afresh at each run).
fn work_dir() -> PathBuf {
    root().join("target/wheel-test")
}

/// Held by a test while it builds: the two tests' release builds share
/// `target/release` and would otherwise wait on each other's cargo lock
/// (or, outside cargo's lock, on maturin's copy of the binary).
static BUILDING: Mutex<()> = Mutex::new(());

/// `cmd`'s output, failing the test with `what`, the command and its
/// output when it does not succeed.
fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {cmd:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The portable wheel, built once for the tests here by the README's
/// command (`scripts/wheel.sh`: maturin and zig from PyPI in a private
/// venv, `--compatibility manylinux2014`) into a fresh
/// `target/wheel-test/wheels`; its path.
fn wheel() -> PathBuf {
    static WHEEL: OnceLock<PathBuf> = OnceLock::new();
    WHEEL.get_or_init(build_wheel).clone()
}

fn build_wheel() -> PathBuf {
    let out_dir = work_dir().join("wheels");
    let _ = fs::remove_dir_all(&out_dir);
    let out = run_ok(
        Command::new("bash")
            .arg(root().join("scripts/wheel.sh"))
            .arg(&out_dir)
            .env("LOTUS_WHEEL_PYTHON", any_python())
            .current_dir(root()),
        "bash scripts/wheel.sh (the README's wheel command; it needs PyPI for maturin and ziglang once)",
    );
    let printed = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let wheels: Vec<PathBuf> = fs::read_dir(&out_dir)
        .expect("the wheel folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension() == Some(OsStr::new("whl")))
        .collect();
    assert_eq!(wheels, [printed], "one wheel, the one the script names");
    let name = wheels[0].file_name().expect("name").to_string_lossy();
    // The tag says which Linux it needs: glibc 2.17 on x86_64, any
    // CPython 3 (the wheel carries no extension module).
    assert_eq!(
        name,
        format!(
            "lotus_profiler-{}-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
            env!("CARGO_PKG_VERSION")
        ),
        "the wheel's name, version and tag"
    );
    wheels[0].clone()
}

/// The glibc symbol versions an ELF file `bytes` needs (`GLIBC_2.17`...),
/// from its version-needs section, as (major, minor).
fn glibc_versions(bytes: &[u8]) -> Vec<(u32, u32)> {
    use object::read::elf::{ElfFile64, FileHeader};
    let file = ElfFile64::<object::Endianness>::parse(bytes).expect("an ELF file");
    let endian = file.endian();
    let sections = file
        .elf_header()
        .sections(endian, bytes)
        .expect("section table");
    let Some((mut needs, link)) = sections.gnu_verneed(endian, bytes).expect("verneed") else {
        return Vec::new();
    };
    let strings = sections.strings(endian, bytes, link).expect("strings");
    let mut found = Vec::new();
    while let Some((_, mut aux)) = needs.next().expect("verneed entry") {
        while let Some(a) = aux.next().expect("vernaux entry") {
            let name = String::from_utf8_lossy(a.name(endian, strings).expect("name")).into_owned();
            if let Some((major, minor)) =
                name.strip_prefix("GLIBC_").and_then(|v| v.split_once('.'))
            {
                let minor = minor.split('.').next().unwrap_or(minor);
                if let (Ok(a), Ok(b)) = (major.parse(), minor.parse()) {
                    found.push((a, b));
                }
            }
        }
    }
    found
}

/// A fresh venv `target/wheel-test/<name>` (no system site-packages)
/// where `pip install <args>` ran; its folder.
fn install(python: &Path, name: &str, args: &[&OsStr]) -> PathBuf {
    let venv = work_dir().join(name);
    let _ = fs::remove_dir_all(&venv);
    run_ok(
        Command::new(python).arg("-m").arg("venv").arg(&venv),
        "python -m venv",
    );
    run_ok(
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet"])
            .args(args)
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS"),
        "pip install",
    );
    venv
}

/// The installed venv's `bin` first on PATH, nothing of lotus's in the
/// environment: what a user's shell with the venv activated has.
fn venv_command(venv: &Path, program: &str) -> Command {
    let bin = venv.join("bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut parts = vec![bin.clone()];
    parts.extend(std::env::split_paths(&path));
    let mut cmd = Command::new(bin.join(program));
    cmd.env("PATH", std::env::join_paths(parts).expect("PATH"))
        .env("VIRTUAL_ENV", venv)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTHONPATH")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("LOTUS_CONTROL_LIB")
        .env_remove("LOTUS_CONTROL_FDS")
        .env_remove("LD_LIBRARY_PATH");
    cmd
}

/// Outside a lotus run the installed modules import and do nothing, and
/// they are the files of lotus-tracer/python (the ones the binary
/// embeds). Prints each module file's path relative to site-packages.
const NO_OP: &str = r#"
import os, sys, sysconfig
import lotus_trace, lotus
site = sysconfig.get_paths()["purelib"]
assert lotus_trace.__file__.startswith(site), (lotus_trace.__file__, site)
assert lotus.__file__.startswith(site), (lotus.__file__, site)
def double(x):
    return 2 * x
assert lotus_trace.wrap(double)(21) == 42
with lotus_trace.span("Decode"):
    pass
assert not lotus_trace.enabled() and lotus_trace.trace_dir() is None
lotus.resume("Op"); lotus.pause()
assert not lotus.active()
assert os.listdir(".") == [], os.listdir(".")
for m in (lotus_trace, lotus):
    for root_dir, _, files in os.walk(os.path.dirname(m.__file__)):
        for f in files:
            if not f.endswith(".pyc"):  # pip compiles them on install
                print(os.path.relpath(os.path.join(root_dir, f), site))
assert not os.path.exists(os.path.join(site, "lotus_harness.py"))
"#;

/// Checks what an install into `venv` gave: `lotus` on the venv's PATH,
/// of this version; `lotus` and `lotus_trace` importable, doing nothing,
/// byte for byte the files the binary embeds, and nothing else installed
/// (not the op harness). Returns a scratch folder to work in.
fn check_installed(venv: &Path) -> tempfile::TempDir {
    // `lotus` is on the venv's PATH and is this version.
    let out = run_ok(
        venv_command(venv, "python")
            .args(["-c", "import shutil, sys; print(shutil.which('lotus'))"]),
        "shutil.which('lotus')",
    );
    assert_eq!(
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
        venv.join("bin/lotus")
    );
    let out = run_ok(
        venv_command(venv, "lotus").arg("--version"),
        "lotus --version",
    );
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.contains(env!("CARGO_PKG_VERSION")),
        "lotus --version: {version}"
    );

    // The modules: no-ops outside lotus, the same files as the source
    // folder (which is what the binary embeds: lotus_tracer's constants).
    let cwd = tempfile::tempdir().expect("temp dir");
    let out = run_ok(
        venv_command(venv, "python")
            .args(["-c", NO_OP])
            .current_dir(cwd.path()),
        "import lotus_trace, lotus outside a lotus run",
    );
    let mut installed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    installed.sort();
    let mut expected: Vec<String> = lotus_tracer::TRACER_FILES
        .iter()
        .map(|(p, _)| p.to_string())
        .chain(["lotus/__init__.py".to_string()])
        .collect();
    expected.sort();
    assert_eq!(installed, expected, "the installed Python files");
    let site = String::from_utf8_lossy(
        &run_ok(
            venv_command(venv, "python").args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ]),
            "site-packages",
        )
        .stdout,
    )
    .trim()
    .to_string();
    let embedded = lotus_tracer::TRACER_FILES
        .iter()
        .copied()
        .chain([("lotus/__init__.py", lotus_tracer::LOTUS_PY)]);
    for (rel, text) in embedded {
        let got = fs::read_to_string(Path::new(&site).join(rel)).expect("installed file");
        assert!(
            got == text,
            "{rel}: the installed file differs from the embedded one"
        );
    }
    cwd
}

#[test]
fn the_wheel_installs_a_working_lotus_and_no_op_modules_into_a_fresh_venv() {
    let python = any_python();
    fs::create_dir_all(work_dir()).expect("target/wheel-test");
    let venv = {
        let _building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
        let wheel = wheel();
        // --no-index: the wheel alone, nothing downloaded.
        install(&python, "venv", &["--no-index".as_ref(), wheel.as_os_str()])
    };
    let cwd = check_installed(&venv);

    // The installed lotus traces a pipeline (two forked workers) and reads
    // the trace back.
    let trace = cwd.path().join("trace");
    let out = run_ok(
        venv_command(&venv, "lotus")
            .args(["trace", "run", "--no-torch", "--out"])
            .arg(&trace)
            .arg("--")
            .arg(venv.join("bin/python"))
            .arg(fixture("trace/pipeline.py"))
            .args([
                "--workers",
                "2",
                "--batches",
                "4",
                "--batch-size",
                "2",
                "--sleep-ms",
                "1",
                "--spin-ms",
                "1",
            ]),
        "the installed lotus trace run",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("(1 main, 2 worker)"), "{stderr}");
    let out = run_ok(
        venv_command(&venv, "lotus")
            .args(["trace", "stats", "--json"])
            .arg(&trace),
        "the installed lotus trace stats",
    );
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    let count = |op: &str| {
        stats["ops"]
            .as_array()
            .expect("ops")
            .iter()
            .find(|o| o["name"] == op)
            .and_then(|o| o["count"].as_u64())
    };
    // 4 batches of 2 samples, each sample running Sleep and Spin once.
    assert_eq!(count("Spin"), Some(8), "{stats}");
    assert_eq!(count("Sleep"), Some(8), "{stats}");

    // The installed lotus_trace traces on its own too, switched on in the
    // code (`lotus_trace.enable(DIR)`, here the fixture's --enable), and
    // the installed lotus reads that trace.
    let enabled = cwd.path().join("enabled");
    run_ok(
        venv_command(&venv, "python")
            .arg(fixture("trace/pipeline.py"))
            .args(["--workers", "2", "--batches", "4", "--batch-size", "2"])
            .arg("--enable")
            .arg(&enabled),
        "the pipeline with lotus_trace.enable() from the installed module",
    );
    let out = run_ok(
        venv_command(&venv, "lotus")
            .args(["trace", "stats", "--json"])
            .arg(&enabled),
        "lotus trace stats of the enable() trace",
    );
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    let workers = stats["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| p["role"] == "worker" && p["events"].as_u64() > Some(0))
        .count();
    assert_eq!(workers, 2, "{stats}");
}

/// `pip install .` from the checkout (maturin as the build backend, which
/// pip's build isolation fetches from PyPI) gives the same install.
#[test]
fn pip_install_from_the_checkout_gives_lotus_and_the_modules() {
    let python = any_python();
    fs::create_dir_all(work_dir()).expect("target/wheel-test");
    let venv = {
        let _building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
        install(&python, "venv-pip", &[root().as_os_str()])
    };
    check_installed(&venv);
}

/// Every ELF image inside `bytes` past its own header: the libraries a
/// binary carries (`include_bytes!`), each parsed from its magic on.
fn embedded_elves(bytes: &[u8]) -> Vec<&[u8]> {
    const MAGIC: &[u8] = b"\x7fELF\x02\x01\x01";
    (1..bytes.len().saturating_sub(MAGIC.len()))
        .filter(|&i| &bytes[i..i + MAGIC.len()] == MAGIC)
        .map(|i| &bytes[i..])
        .filter(|b| object::read::elf::ElfFile64::<object::Endianness>::parse(*b).is_ok())
        .collect()
}

/// The wheel installs into venvs of another Python, 3.8 (the oldest
/// `requires-python` allows) and 3.13, and the README's quick start runs
/// there with the installed `lotus`; its binary and the control library
/// it carries (loaded into the job's processes) need glibc 2.17 at most,
/// as the wheel's tag says.
#[test]
fn the_portable_wheel_runs_the_quick_start_on_python_3_8_and_3_13() {
    let test = "the_portable_wheel_runs_the_quick_start_on_python_3_8_and_3_13";
    let pythons: Vec<(&str, PathBuf)> = ["3.8", "3.13"]
        .into_iter()
        .filter_map(|v| pyenv_python(v, test).map(|p| (v, p)))
        .collect();
    if pythons.is_empty() {
        return;
    }
    fs::create_dir_all(work_dir()).expect("target/wheel-test");
    let wheel = {
        let _building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
        wheel()
    };
    for (version, python) in pythons {
        let name = format!("venv-{version}");
        let venv = install(&python, &name, &["--no-index".as_ref(), wheel.as_os_str()]);
        let out = run_ok(
            venv_command(&venv, "python").args(["-c", "import sys; print(sys.version_info[:2])"]),
            "the venv's Python",
        );
        let (major, minor) = version.split_once('.').expect("x.y");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("({major}, {minor})"),
            "the venv runs Python {version}"
        );
        let cwd = check_installed(&venv);

        // The binary and the control library it carries: glibc 2.17 at most.
        let binary = fs::read(venv.join("bin/lotus")).expect("the installed lotus");
        let mut elves = vec![binary.as_slice()];
        let carried = embedded_elves(&binary);
        assert!(
            !carried.is_empty(),
            "the installed lotus carries no control library"
        );
        elves.extend(carried);
        for (i, elf) in elves.iter().enumerate() {
            let newest = glibc_versions(elf).into_iter().max();
            assert!(
                newest.is_some_and(|v| v <= (2, 17)),
                "ELF image {i} of the installed lotus (0: the binary) needs glibc {newest:?}: the \
                 manylinux2014 tag promises 2.17"
            );
        }

        // The README's quick start, on the repository's torch-free pipeline.
        let trace = cwd.path().join("trace");
        let out = run_ok(
            venv_command(&venv, "lotus")
                .args(["trace", "run", "--sample", "--out"])
                .arg(&trace)
                .arg("--")
                .arg("python")
                .arg(fixture("trace/pipeline.py"))
                .args([
                    "--workers",
                    "2",
                    "--batches",
                    "6",
                    "--batch-size",
                    "2",
                    "--spin-ms",
                    "5",
                ])
                .current_dir(cwd.path()),
            &format!("lotus trace run --sample on Python {version}"),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("(1 main, 2 worker)"),
            "Python {version}: {stderr}"
        );
        let out = run_ok(
            venv_command(&venv, "lotus")
                .args(["attribute", "--format", "json"])
                .arg(&trace),
            &format!("lotus attribute on Python {version}"),
        );
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("attribute JSON");
        let spin = rows["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|r| r["name"] == "Spin")
            .unwrap_or_else(|| panic!("Python {version}: no Spin row: {rows}"));
        // 6 batches of 2 samples, each spinning 5 ms of wall time: the
        // samples cover the CPU the spans ran (their own thread timers'),
        // however much of it a busy machine left them.
        let (samples, cpu_ns) = (spin["samples"].as_u64(), spin["cpu_ns"].as_u64());
        assert!(
            matches!((samples, cpu_ns), (Some(n), Some(c)) if c >= 2_000_000 && n * 2_000_000 >= c),
            "Python {version}: the Spin row's samples against its CPU: {spin}"
        );
        let report = cwd.path().join("report.html");
        run_ok(
            venv_command(&venv, "lotus")
                .args(["report", "--trace"])
                .arg(&trace)
                .arg("--out")
                .arg(&report),
            &format!("lotus report on Python {version}"),
        );
        let page = fs::read_to_string(&report).expect("report.html");
        assert!(
            page.contains("Spin"),
            "Python {version}: the report names no Spin op"
        );
    }
}
