//! Another local user must not get in: each test has an unprivileged user
//! (`nobody`) plant files in a shared folder the way an attacker on the same
//! machine would, then runs lotus (or a fixture) as root and checks that
//! nothing planted was loaded, executed or written through.
//!
//! They need root (to act as `nobody` and as root); elsewhere each prints
//! `skipped: <test>: <reason>` to stderr and passes. (A folder of one's own
//! made writable by all stands in for a shared one where no second user is
//! needed.)

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `nobody`'s ids.
const NOBODY: u32 = 65534;

fn skip(test: &str, reason: &str) {
    eprintln!("skipped: {test}: {reason}");
}

/// A sticky folder every user can write (a private `/tmp`), or why there
/// can be none here.
fn shared_folder(test: &str) -> Option<tempfile::TempDir> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(test, "not root: cannot act as another user");
        return None;
    }
    let dir = tempfile::Builder::new()
        .prefix("lotus-sec-")
        .tempdir_in(std::env::temp_dir())
        .expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let reach = as_nobody(Command::new("test").arg("-w").arg(dir.path()))
        .status()
        .is_ok_and(|s| s.success());
    if !reach {
        skip(
            test,
            &format!(
                "nobody cannot reach {} (is TMPDIR inside a private folder?)",
                dir.path().display()
            ),
        );
        return None;
    }
    Some(dir)
}

/// `cmd`, run as `nobody`.
fn as_nobody(cmd: &mut Command) -> &mut Command {
    cmd.uid(NOBODY).gid(NOBODY).env("HOME", "/nonexistent")
}

fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A shared library whose constructor creates `marker`: loading it runs
/// the planter's code. Built (and left) by `nobody` at `lib`.
fn plant_library(shared: &Path, lib: &Path, marker: &Path) {
    let source = shared.join("planted.c");
    let c = format!(
        "#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {{\n  FILE *f = fopen(\"{}\", \"w\"); if (f) fclose(f);\n}}\n",
        marker.display()
    );
    run_ok(
        as_nobody(Command::new("sh").args([
            "-c",
            "printf '%s' \"$1\" > \"$2\" && mkdir -p \"$(dirname \"$3\")\" && cc -shared -fPIC -o \"$3\" \"$2\"",
            "sh",
        ]))
        .arg(&c)
        .arg(&source)
        .arg(lib)
        .env("TMPDIR", shared),
        "nobody plants a library",
    );
    // Root itself may create the marker: it must be a path root alone can
    // write, so that its existence proves the library ran as root.
    assert!(lib.is_file(), "{} planted", lib.display());
}

/// A private folder (0700) for what only root may write.
fn private_marker(shared: &Path) -> PathBuf {
    let dir = shared.join("root-only");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir.join("planted-code-ran")
}

#[test]
fn ckernels_does_not_load_a_library_another_user_planted_in_its_cache() {
    let test = "ckernels_does_not_load_a_library_another_user_planted_in_its_cache";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    let python = common::python();
    let ops = common::fixture("ops");
    // The cache path CKernels used to trust: the source hash is public.
    let key = run_ok(
        Command::new(&python).args([
            "-c",
            "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest()[:16])",
        ])
        .arg(common::fixture("clib/lotus_fixture_kernels.c")),
        "hash the source",
    );
    let key = String::from_utf8_lossy(&key.stdout).trim().to_string();
    let planted = shared
        .path()
        .join("lotus-fixture-clib-0")
        .join(&key)
        .join("liblotus_fixture_kernels.so");
    let marker = private_marker(shared.path());
    plant_library(shared.path(), &planted, &marker);

    let out = run_ok(
        Command::new(&python)
            .args([
                "-c",
                "import sys; sys.path.insert(0, sys.argv[1]); import CKernels; print(CKernels.op(CKernels.setup()))",
            ])
            .arg(&ops)
            .env("TMPDIR", shared.path())
            .env_remove("LOTUS_FIXTURE_CLIB"),
        "CKernels as root",
    );
    assert!(
        !marker.exists(),
        "root loaded the library nobody planted at {}",
        planted.display()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not using the cache folder") && stderr.contains("owned by user 65534"),
        "{stderr}"
    );
    // Its own library ran: a dot product of two positive vectors.
    let dot: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the op's result");
    assert!(dot > 0.0);
}

#[test]
fn lotus_does_not_load_a_control_library_planted_above_or_beside_it() {
    let test = "lotus_does_not_load_a_control_library_planted_above_or_beside_it";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    // lotus unpacked by root into a folder of its own inside a shared one.
    let bin = shared.path().join("lotus-1.0");
    std::fs::create_dir(&bin).expect("mkdir");
    let lotus = bin.join("lotus");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_lotus"), &lotus).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_lotus"), &lotus).expect("copy lotus");
    }
    // nobody's library one level up, newer than anything.
    let planted = shared.path().join("liblotus_control.so");
    let marker = private_marker(shared.path());
    plant_library(shared.path(), &planted, &marker);
    run_ok(
        as_nobody(
            Command::new("touch")
                .args(["-d", "2100-01-01"])
                .arg(&planted),
        ),
        "nobody dates it in the future",
    );
    // And a lotus copied straight into the shared folder, beside it: the
    // binary loads only the copy it carries.
    let beside = shared.path().join("lotus");
    std::fs::copy(env!("CARGO_BIN_EXE_lotus"), &beside).expect("copy lotus");
    for lotus in [&lotus, &beside] {
        let out = Command::new(lotus)
            .args(["map", "--backend", "perf", "--dry-run"])
            .arg(common::fixture("ops/Loader.py"))
            .env_remove("LOTUS_CONTROL_LIB")
            .output()
            .expect("run lotus");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !stdout.contains(&planted.display().to_string()),
            "{} would load nobody's library:\n{stdout}",
            lotus.display()
        );
        assert!(
            stdout.contains("LOTUS_CONTROL_LIB=/"),
            "no control library in the plan:\n{stdout}"
        );
    }
    assert!(!marker.exists());
}

/// A root-only file (mode 0600 in a folder only root can write), and its
/// text.
fn victim(shared: &Path) -> (PathBuf, &'static str) {
    let dir = shared.join("root-files");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let file = dir.join("secret");
    let text = "root's own data\n";
    std::fs::write(&file, text).expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    (file, text)
}

/// `lotus trace run --out DIR -- python -c CODE ARGS...`.
fn trace_run(dir: &Path, code: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "--out"])
        .arg(dir)
        .arg("--")
        .arg(common::any_python())
        .args(["-c", code])
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH")
        .output()
        .expect("run lotus")
}

const TRACED: &str = "import lotus_trace\nlotus_trace.wrap(lambda: None, 'Op')()\n";

#[test]
fn trace_run_refuses_a_folder_another_user_can_write() {
    let test = "trace_run_refuses_a_folder_another_user_can_write";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    let (secret, text) = victim(shared.path());
    // nobody's folder, with a link at the main log name of each of the
    // next pids, to root's file.
    let out = shared.path().join("trace");
    let next: u64 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1000);
    run_ok(
        as_nobody(Command::new("sh").args([
            "-c",
            "mkdir -m 755 \"$1\" && i=$2; while [ $i -lt $3 ]; do ln -s \"$4\" \"$1/lotus_main_pid_$i\"; i=$((i+1)); done",
            "sh",
        ]))
        .arg(&out)
        .arg((next + 1).to_string())
        .arg((next + 2000).to_string())
        .arg(&secret),
        "nobody plants links",
    );
    let o = trace_run(&out, TRACED, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is not safe to write") && err.contains("owned by user 65534"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&secret).expect("secret"), text);

    // A folder of root's that every user may write, sticky or not.
    let open = shared.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    for mode in [0o1777, 0o777, 0o775] {
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let o = trace_run(&open, TRACED, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "mode {mode:o}: {err}");
        assert!(err.contains("can be written by"), "{err}");
    }
}

#[test]
fn the_tracer_never_writes_through_links_another_user_planted() {
    let test = "the_tracer_never_writes_through_links_another_user_planted";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    let (secret, text) = victim(shared.path());
    let out = shared.path().join("trace");
    run_ok(
        as_nobody(Command::new("mkdir").args(["-m", "755"]).arg(&out)),
        "nobody's folder",
    );
    // Root's job, tracing in code (no lotus to check the folder), says its
    // pid and waits while nobody plants links at both of its log names.
    let ready = shared.path().join("ready");
    let go = shared.path().join("go");
    let job = r#"import os, sys, time, lotus_trace
out, ready, go = sys.argv[1:4]
lotus_trace.enable(out, torch=False)
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
deadline = time.time() + 60
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.02)
lotus_trace.wrap(lambda: None, "Before")()
lotus_trace.flush()
lotus_trace.set_role("worker")
lotus_trace.wrap(lambda: None, "After")()
lotus_trace.flush()
"#;
    let mut child = Command::new(common::any_python())
        .args(["-c", job])
        .arg(&out)
        .arg(&ready)
        .arg(&go)
        .env("PYTHONPATH", common::harness_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .spawn()
        .expect("job");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ready.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the job never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&ready).expect("pid");
    run_ok(
        as_nobody(Command::new("sh").args([
            "-c",
            "ln -s \"$3\" \"$1/lotus_main_pid_$2\" && ln -s \"$3\" \"$1/lotus_worker_pid_$2\" && ln -s \"$3\" \"$1/lotus.1_worker_pid_$2\" && touch \"$4\"",
            "sh",
        ]))
        .arg(&out)
        .arg(&pid)
        .arg(&secret)
        .arg(&go),
        "nobody plants links",
    );
    let status = child.wait().expect("job");
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&secret).expect("secret"), text);
    // The log went to a free name, as root's own file.
    let log = std::fs::read_to_string(out.join(format!("lotus.2_worker_pid_{pid}")))
        .expect("the log under a free name");
    assert!(log.contains("SBefore,") && log.contains("SAfter,"), "{log}");
}

#[test]
fn output_files_never_go_through_another_users_link() {
    let test = "output_files_never_go_through_another_users_link";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    let (secret, text) = victim(shared.path());
    // In a shared folder, nobody's links where root's outputs will go: to
    // root's file, and to a device.
    let to_file = shared.path().join("trace.json");
    let to_device = shared.path().join("view.json");
    run_ok(
        as_nobody(Command::new("sh").args([
            "-c",
            "ln -s \"$1\" \"$2\" && ln -s /dev/null \"$3\"",
            "sh",
        ]))
        .arg(&secret)
        .arg(&to_file)
        .arg(&to_device),
        "nobody plants links",
    );
    for out in [&to_file, &to_device] {
        let o = Command::new(env!("CARGO_BIN_EXE_lotus"))
            .args(["trace", "view"])
            .arg(common::fixture("traces/original"))
            .arg("--out")
            .arg(out)
            .output()
            .expect("lotus");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("symbolic link") && err.contains("owned by user 65534"),
            "{err}"
        );
        assert!(out
            .symlink_metadata()
            .expect("link")
            .file_type()
            .is_symlink());
    }
    assert_eq!(std::fs::read_to_string(&secret).expect("secret"), text);
    // Root's own link is still followed.
    let mine = shared.path().join("mine.json");
    let real = shared.path().join("root-files/real.json");
    std::os::unix::fs::symlink(&real, &mine).expect("link");
    let o = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "view"])
        .arg(common::fixture("traces/original"))
        .arg("--out")
        .arg(&mine)
        .output()
        .expect("lotus");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(real.is_file());
}

#[test]
fn an_interpreter_another_user_controls_is_warned_about() {
    let test = "an_interpreter_another_user_controls_is_warned_about";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    // nobody's virtual environment, active in root's shell.
    let venv = shared.path().join("venv");
    run_ok(
        as_nobody(Command::new("sh").args([
            "-c",
            "mkdir -p \"$1/bin\" && printf '#!/bin/sh\\n' > \"$1/bin/python\" && chmod 755 \"$1/bin/python\"",
            "sh",
        ]))
        .arg(&venv),
        "nobody makes a venv",
    );
    let o = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["map", "--backend", "perf", "--dry-run"])
        .arg(common::fixture("ops/Loader.py"))
        .env("VIRTUAL_ENV", &venv)
        .env_remove("LOTUS_PYTHON")
        .output()
        .expect("lotus");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: the Python interpreter")
            && err.contains(&venv.join("bin/python").display().to_string())
            && err.contains("owned by user 65534"),
        "{err}"
    );
}

#[test]
fn an_op_in_a_folder_others_can_write_is_warned_about() {
    // Any user can check this one: the folder is ours, made writable by all.
    let dir = tempfile::tempdir().expect("tmp");
    let op = dir.path().join("Flip.py");
    std::fs::write(&op, "op = lambda x: x\n").expect("op");
    let dry_run = || {
        let o = Command::new(env!("CARGO_BIN_EXE_lotus"))
            .args(["map", "--backend", "perf", "--dry-run"])
            .arg(&op)
            .output()
            .expect("lotus");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = dry_run();
    assert!(!err.contains("warning: op file"), "{err}");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let err = dry_run();
    assert!(
        err.contains(&format!("warning: op file {}", op.display()))
            && err.contains("can be written by every user")
            && err.contains("sys.path"),
        "{err}"
    );
}

// ---- Where lotus writes (issue 23): one output writer, one private-folder
// maker.

/// Compiles the C program `source` into a folder only root can write, for
/// `nobody` to run (an attacker's tool).
fn attacker_tool(shared: &Path, name: &str, source: &str) -> PathBuf {
    let dir = shared.join("tools");
    if !dir.exists() {
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).expect("write");
    let exe = dir.join(name);
    run_ok(
        Command::new("cc").arg("-O1").arg("-o").arg(&exe).arg(&c),
        "cc the attacker's tool",
    );
    exe
}

/// `exchange A B STOP`: swaps A and B (renameat2 RENAME_EXCHANGE) in a loop
/// until STOP exists (at most 120 s).
const EXCHANGE_C: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 4) return 2;
    time_t end = time(0) + 120;
    for (unsigned long i = 0; time(0) < end; i++) {
        syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], 2 /* RENAME_EXCHANGE */);
        if (i % 1024 == 0 && access(argv[3], F_OK) == 0) return 0;
    }
    return 0;
}
"#;

/// `swap DIR PREFIX PLANTED STOP`: whenever a folder named PREFIX* appears
/// in DIR, moves it aside and puts PLANTED (a folder of nobody's) in its
/// place; until STOP exists (at most 120 s).
const SWAP_C: &str = r#"
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 5) return 2;
    time_t end = time(0) + 120;
    size_t n = strlen(argv[2]);
    char from[4096], aside[4096];
    while (time(0) < end && access(argv[4], F_OK) != 0) {
        DIR *d = opendir(argv[1]);
        if (!d) return 3;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, argv[2], n) != 0 || strstr(e->d_name, ".aside")) continue;
            snprintf(from, sizeof from, "%s/%s", argv[1], e->d_name);
            snprintf(aside, sizeof aside, "%s/%s.aside", argv[1], e->d_name);
            if (rename(from, aside) == 0) rename(argv[3], from);
        }
        closedir(d);
    }
    return 0;
}
"#;

/// Runs `cmd` with its output, failing the test if it takes past 120 s
/// (a FIFO with no reader used to hang lotus).
fn output_bounded(cmd: &mut Command) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    common::faults::wait_bounded(child, std::time::Duration::from_secs(120), "lotus-sec-")
}

/// `lotus trace view` of the fixture trace, written to `out`.
fn view_to(out: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "view"])
        .arg(common::fixture("traces/original"))
        .arg("--out")
        .arg(out);
    cmd
}

#[test]
fn out_survives_another_user_swapping_the_name_for_a_link() {
    let test = "out_survives_another_user_swapping_the_name_for_a_link";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    let (secret, text) = victim(shared.path());
    let exchange = attacker_tool(shared.path(), "exchange", EXCHANGE_C);
    // nobody's own folder, and root's sticky shared one: in each, nobody
    // swaps a file of theirs at the output's name with a link to root's
    // file while root writes the output there.
    let theirs = shared.path().join("theirs");
    run_ok(
        as_nobody(Command::new("mkdir").args(["-m", "755"]).arg(&theirs)),
        "nobody's folder",
    );
    let mut written = 0;
    for trial in 0..8 {
        let folder = if trial % 2 == 0 {
            &theirs
        } else {
            shared.path()
        };
        let out = folder.join(format!("view{trial}.json"));
        let link = folder.join(format!("alt{trial}"));
        let stop = shared.path().join(format!("stop{trial}"));
        run_ok(
            as_nobody(Command::new("sh").args([
                "-c",
                "echo theirs > \"$1\" && ln -s \"$2\" \"$3\"",
                "sh",
            ]))
            .arg(&out)
            .arg(&secret)
            .arg(&link),
            "nobody plants the pair",
        );
        let mut swapper = as_nobody(Command::new(&exchange).arg(&out).arg(&link).arg(&stop))
            .spawn()
            .expect("exchange");
        let o = output_bounded(&mut view_to(&out));
        std::fs::write(&stop, "").expect("stop");
        swapper.wait().expect("exchange");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            std::fs::read_to_string(&secret).expect("secret"),
            text,
            "trial {trial}: root's file was overwritten through the swapped link: {err}"
        );
        if o.status.success() {
            written += 1;
            // Only where nobody cannot replace root's entries.
            assert!(std::ptr::eq(folder, shared.path()), "{err}");
        } else {
            assert_eq!(o.status.code(), Some(1), "{err}");
            assert!(err.contains("owned by user 65534"), "{err}");
        }
    }
    eprintln!("{test}: {written} of 8 trials written (in the sticky folder), the rest refused");
}

#[test]
fn a_link_of_another_user_above_out_plot_dir_or_man_out_is_refused() {
    let test = "a_link_of_another_user_above_out_plot_dir_or_man_out_is_refused";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    let (secret, text) = victim(shared.path());
    let root_files = secret.parent().expect("folder").to_path_buf();
    // nobody's link, in the shared folder, to root's folder.
    let via = shared.path().join("via");
    run_ok(
        as_nobody(Command::new("ln").arg("-s").arg(&root_files).arg(&via)),
        "nobody plants a link",
    );
    let trace = common::fixture("traces/original");
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        vec![
            "trace".into(),
            "view".into(),
            trace.clone().into(),
            "--out".into(),
            via.join("secret").into(),
        ],
        vec![
            "report".into(),
            "--trace".into(),
            trace.clone().into(),
            "--out".into(),
            shared.path().join("page.html").into(),
            "--plot-dir".into(),
            via.join("plots").into(),
        ],
        vec!["man".into(), "--out".into(), via.join("man").into()],
    ];
    for args in cases {
        let o = output_bounded(Command::new(env!("CARGO_BIN_EXE_lotus")).args(&args));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("the symbolic link {}", via.display()))
                && err.contains("owned by user 65534"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(std::fs::read_to_string(&secret).expect("secret"), text);
    assert!(!root_files.join("plots").exists() && !root_files.join("man").exists());
}

/// `mkfifo PATH` as `nobody`.
fn nobody_fifo(path: &Path) {
    run_ok(
        as_nobody(Command::new("mkfifo").args(["-m", "666"]).arg(path)),
        "nobody plants a FIFO",
    );
}

#[test]
fn a_fifo_at_out_is_refused_or_fails_at_once_never_hangs() {
    let test = "a_fifo_at_out_is_refused_or_fails_at_once_never_hangs";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    // nobody's FIFO: nobody would read root's output.
    let theirs = shared.path().join("view.json");
    nobody_fifo(&theirs);
    let o = output_bounded(&mut view_to(&theirs));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the FIFO") && err.contains("owned by user 65534"),
        "{err}"
    );
    // Root's own FIFO with no reader: an error at once, not a hang.
    let mine = shared.path().join("root-files-fifo");
    run_ok(Command::new("mkfifo").arg(&mine), "mkfifo");
    let o = output_bounded(&mut view_to(&mine));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no process is reading"), "{err}");
}

#[test]
fn a_replaced_file_gets_the_umask_mode_not_another_users_setuid_mode() {
    let test = "a_replaced_file_gets_the_umask_mode_not_another_users_setuid_mode";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    // A report (any output but `trace view`'s, which was made 0644).
    let out = shared.path().join("page.html");
    run_ok(
        as_nobody(Command::new("sh").args(["-c", "touch \"$1\" && chmod 6777 \"$1\"", "sh"]))
            .arg(&out),
        "nobody pre-creates the output",
    );
    let o = output_bounded(
        Command::new("sh")
            .args(["-c", "umask 022 && exec \"$@\"", "sh"])
            .arg(env!("CARGO_BIN_EXE_lotus"))
            .args(["report", "--trace"])
            .arg(common::fixture("traces/original"))
            .arg("--out")
            .arg(&out),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let meta = std::fs::metadata(&out).expect("out");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.uid(), 0);
    assert_eq!(
        meta.mode() & 0o7777,
        0o644,
        "mode {:o}",
        meta.mode() & 0o7777
    );
}

/// nobody's folder `shared/<name>` with a `sitecustomize`, `lotus_trace`
/// package, harness and `lotus` module that each create `marker`.
fn plant_python(shared: &Path, name: &str, marker: &Path) -> PathBuf {
    let planted = shared.join(name);
    let code = format!("open({:?}, 'w').close()\n", marker.display().to_string());
    run_ok(
        as_nobody(Command::new("sh").args([
            "-c",
            "mkdir -p \"$1/lotus_trace/_boot\" && for f in lotus_trace/_boot/sitecustomize.py lotus_trace/__init__.py lotus_harness.py lotus.py; do printf '%s' \"$2\" > \"$1/$f\"; done",
            "sh",
        ]))
        .arg(&planted)
        .arg(&code),
        "nobody plants Python",
    );
    planted
}

#[test]
fn trace_run_and_map_refuse_a_tmpdir_others_can_write() {
    let test = "trace_run_and_map_refuse_a_tmpdir_others_can_write";
    let Some(shared) = shared_folder(test) else {
        return;
    };
    let marker = private_marker(shared.path());
    // root's TMPDIR that every user may write, not sticky.
    let tmp = shared.path().join("opentmp");
    std::fs::create_dir(&tmp).expect("mkdir");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let swap = attacker_tool(shared.path(), "swap", SWAP_C);
    let trace_run = {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
        cmd.args(["trace", "run", "--out"])
            .arg(shared.path().join("root-trace"))
            .arg("--")
            .arg(common::any_python())
            .args(["-c", "import time; time.sleep(0.5)"])
            .env_remove("PYTHONPATH");
        cmd
    };
    let map = {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
        cmd.args(["map", "--backend", "perf", "--out"])
            .arg(marker.with_file_name("map.json"))
            .arg(common::fixture("ops/Loader.py"))
            .env("LOTUS_CONTROL_LIB", common::control_lib())
            .env("LOTUS_PYTHON", common::any_python());
        cmd
    };
    for (what, mut cmd) in [("trace run", trace_run), ("map", map)] {
        // nobody swaps each folder lotus makes there for their own.
        let planted = plant_python(
            shared.path(),
            &format!("planted-{}", what.replace(' ', "-")),
            &marker,
        );
        let stop = shared.path().join("stop");
        let _ = std::fs::remove_file(&stop);
        let mut swapper = as_nobody(
            Command::new(&swap)
                .arg(&tmp)
                .arg("lotus-")
                .arg(&planted)
                .arg(&stop),
        )
        .spawn()
        .expect("swap");
        let o = output_bounded(cmd.env("TMPDIR", &tmp).env("PYTHONDONTWRITEBYTECODE", "1"));
        std::fs::write(&stop, "").expect("stop");
        swapper.wait().expect("swap");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !marker.exists(),
            "{what}: nobody's Python ran as root: {err}"
        );
        assert!(!o.status.success(), "{what}: {err}");
        assert!(
            err.contains("(TMPDIR) is not safe")
                && err.contains(&tmp.display().to_string())
                && err.contains("can be written by every user"),
            "{what}: {err}"
        );
    }
}

/// The mode bits of `path`.
fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).expect("meta").permissions().mode() & 0o7777
}

#[test]
fn under_umask_077_outputs_are_0600_and_private_folders_0700_the_tracers_0755() {
    // Any user can check this one.
    let dir = tempfile::tempdir().expect("tmp");
    let trace = dir.path().join("trace");
    let folders = dir.path().join("folders.txt");
    // The job says the mode of the tracer's folder (on its PYTHONPATH) and
    // of its status folder ($LOTUS_TRACE_STATUS).
    let job = "import os, sys\nimport lotus_trace\nlotus_trace.wrap(lambda: None, 'Op')()\np = os.environ['PYTHONPATH'].split(':')[1]\nq = os.environ['LOTUS_TRACE_STATUS']\nopen(sys.argv[1], 'w').write(oct(os.stat(p).st_mode & 0o7777) + ' ' + oct(os.stat(q).st_mode & 0o7777))\n";
    let o = output_bounded(
        Command::new("sh")
            .args(["-c", "umask 077 && exec \"$@\"", "sh"])
            .arg(env!("CARGO_BIN_EXE_lotus"))
            .args(["trace", "run", "--sample", "--out"])
            .arg(&trace)
            .arg("--")
            .arg(common::any_python())
            .args(["-c", job])
            .arg(&folders)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("PYTHONPATH"),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The tracer's folder is readable by all and writable by none but
    // lotus (job processes of another user import the tracer from it: see
    // `PrivateDir::readable_by_all`); its status folder is private.
    assert_eq!(
        std::fs::read_to_string(&folders).expect("job's report"),
        "0o755 0o700",
        "the tracer's folder and its status folder"
    );
    assert_eq!(mode_of(&trace.join("lotus.sampling")), 0o600);
    let view = dir.path().join("view.json");
    let o = output_bounded(
        Command::new("sh")
            .args(["-c", "umask 077 && exec \"$@\"", "sh"])
            .arg(env!("CARGO_BIN_EXE_lotus"))
            .args(["trace", "view"])
            .arg(&trace)
            .arg("--out")
            .arg(&view),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(mode_of(&view), 0o600);
}

#[test]
fn tracer_folders_of_a_killed_trace_run_are_removed_by_the_next() {
    // Any user can check this one.
    let tmp = tempfile::tempdir().expect("tmp");
    let trace = tmp.path().join("trace");
    let pidfile = tmp.path().join("job.pid");
    let job = "import os, sys, time\nopen(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\nos.rename(sys.argv[1] + '.tmp', sys.argv[1])\ntime.sleep(120)\n";
    let lotus = |job: &str, extra: &[&Path]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
        cmd.args(["trace", "run", "--out"])
            .arg(&trace)
            .arg("--")
            .arg(common::any_python())
            .args(["-c", job])
            .args(extra)
            .env("TMPDIR", tmp.path())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("PYTHONPATH");
        cmd
    };
    let tracer_folders = || -> Vec<PathBuf> {
        std::fs::read_dir(tmp.path())
            .expect("ls")
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("lotus-trace-"))
            })
            .collect()
    };
    let mut first = lotus(job, &[&pidfile])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("lotus");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !pidfile.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the job never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let job_pid: i32 = std::fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    // SAFETY: kill(2) with pids this test started.
    unsafe {
        libc::kill(first.id() as i32, libc::SIGKILL);
        libc::kill(job_pid, libc::SIGKILL);
    }
    first.wait().expect("wait");
    assert_eq!(tracer_folders().len(), 1, "the killed run's folder is left");
    let o = output_bounded(&mut lotus("pass", &[]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(tracer_folders(), Vec::<PathBuf>::new());
}

// --- perf maps (CPython 3.12+'s /tmp/perf-<pid>.map) ---------------------------

/// The pids the planter covers in the job's own pid namespace (lotus is 1,
/// its threads and the job's processes come next).
const PLANTED_PIDS: std::ops::RangeInclusive<u32> = 2..=150;

/// What `nobody` put at `/tmp/perf-<pid>.map`, by pid: a FIFO no one
/// reads (the job would block in `open` for ever), a FIFO `nobody` reads
/// (the job's map would be handed over), or a file of `nobody`'s that
/// anyone may write (the job would append its map to it).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Plant {
    Fifo,
    ReadFifo,
    File,
}

fn plant_of(pid: u32) -> Plant {
    [Plant::Fifo, Plant::ReadFifo, Plant::File][pid as usize % 3]
}

/// Removes the planted paths when dropped.
struct Planted(Vec<PathBuf>);
impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Another user who puts a FIFO or a file of theirs at the perf map path
/// of each process of a 3.12+ job (as one watching /proc for new pids
/// would) neither blocks it, nor reads its map, nor receives it in their
/// file: the tracer makes each map itself (`O_EXCL`) before turning the
/// trampolines on, finds the path taken, leaves the trampolines off in that
/// process and notes the path in its log; the job and lotus end. The job
/// runs in a pid namespace of its own, so that its pids (and only its
/// pids) are known in advance: the planted paths are those of small pids,
/// which no process of the machine's own namespace that runs Python has.
#[test]
fn perf_maps_another_user_planted_neither_block_nor_receive_the_jobs_map() {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let test = "perf_maps_another_user_planted_neither_block_nor_receive_the_jobs_map";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip(test, "not root: cannot act as another user");
    }
    let Some(py) = common::python312(test) else {
        return;
    };
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        return skip(
            test,
            "unshare --pid --mount-proc fails here: no pid namespace of its own for the job",
        );
    }
    let paths: Vec<PathBuf> = PLANTED_PIDS
        .map(|pid| PathBuf::from(format!("/tmp/perf-{pid}.map")))
        .collect();
    if let Some(p) = paths.iter().find(|p| std::fs::symlink_metadata(p).is_ok()) {
        return skip(test, &format!("{} is already there", p.display()));
    }
    let _planted = Planted(paths.clone());
    let plant = format!(
        "i={}; while [ $i -le {} ]; do p=/tmp/perf-$i.map; \
         if [ $((i % 3)) = 2 ]; then (umask 0; set -C; : > $p) || exit 1; else mkfifo -m 666 $p || exit 1; fi; \
         i=$((i + 1)); done",
        PLANTED_PIDS.start(),
        PLANTED_PIDS.end()
    );
    run_ok(
        as_nobody(Command::new("sh").args(["-c", &plant])),
        "nobody plants FIFOs and files",
    );
    // nobody's read ends, held while the job runs.
    let mut readers: Vec<(u32, std::fs::File)> = PLANTED_PIDS
        .filter(|&pid| plant_of(pid) == Plant::ReadFifo)
        .map(|pid| {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(format!("/tmp/perf-{pid}.map"))
                .expect("open the read end");
            (pid, f)
        })
        .collect();

    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("out");
    let job = tmp.path().join("job.py");
    std::fs::write(
        &job,
        "import os, sys, lotus_trace\n\
def spin():\n    return sum(range(20000))\n\
pids = [os.getpid()]\n\
for _ in range(4):\n    p = os.fork()\n    if p == 0:\n        lotus_trace.wrap(spin, 'Spin')()\n        lotus_trace.flush()\n        os._exit(0)\n    pids.append(p)\n    os.waitpid(p, 0)\n\
lotus_trace.wrap(spin, 'Spin')()\n\
open(sys.argv[1], 'w').write(' '.join(map(str, pids)))\n",
    )
    .expect("job");
    let pids_file = tmp.path().join("pids");
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(env!("CARGO_BIN_EXE_lotus"))
        .args([
            "trace",
            "run",
            "--sample",
            "-F",
            "200",
            "--counters",
            "none",
            "-o",
        ])
        .arg(&out)
        .arg("--")
        .arg(&py)
        .arg(&job)
        .arg(&pids_file)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("LOTUS_TRACE_PARENT")
        .env_remove("PYTHONPATH");
    // A job blocked in open() for ever: ended after 10 minutes (a busy
    // machine runs this job in seconds), and the test fails.
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("unshare lotus");
    let out_put = common::faults::wait_bounded(
        child,
        std::time::Duration::from_secs(600),
        &job.to_string_lossy(),
    );
    assert!(
        out_put.status.success(),
        "lotus trace run: {}\n{}",
        out_put.status,
        String::from_utf8_lossy(&out_put.stderr)
    );
    let pids: Vec<u32> = std::fs::read_to_string(&pids_file)
        .expect("the job's pids")
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect();
    assert_eq!(pids.len(), 5, "{pids:?}");
    let kinds: Vec<Plant> = pids.iter().map(|&p| plant_of(p)).collect();
    assert!(
        pids.iter().all(|p| PLANTED_PIDS.contains(p)),
        "the job's pids {pids:?} are not all planted ones"
    );
    for kind in [Plant::Fifo, Plant::ReadFifo, Plant::File] {
        assert!(
            kinds.contains(&kind),
            "no process of the job met a {kind:?}: {pids:?}"
        );
    }
    // Nothing handed over: the FIFOs nobody read got nothing, the files
    // stay empty and nobody's.
    for (pid, f) in &mut readers {
        let mut got = Vec::new();
        let _ = f.read_to_end(&mut got);
        assert!(
            got.is_empty(),
            "nobody read {} bytes of pid {pid}'s map",
            got.len()
        );
    }
    for pid in PLANTED_PIDS.filter(|&p| plant_of(p) == Plant::File) {
        let meta = std::fs::symlink_metadata(format!("/tmp/perf-{pid}.map")).expect("planted file");
        assert_eq!((meta.len(), meta.uid()), (0, NOBODY), "/tmp/perf-{pid}.map");
    }
    // Each process says why it has no Python frames, naming the path.
    let logs = common::trace_logs::read_logs(&out);
    for pid in &pids {
        let log = logs
            .iter()
            .find(|l| l.pid == *pid)
            .unwrap_or_else(|| panic!("no log of pid {pid}"));
        let path = format!("/tmp/perf-{pid}.map is already there");
        assert!(
            log.comments
                .iter()
                .any(|c| c.contains(&path) && c.contains("owned by uid 65534")),
            "pid {pid}: {:?}",
            log.comments
        );
    }
}
