//! Helpers for fault tests on real processes: a scratch folder with
//! lotus's TMPDIR inside it, names no other process has, and bounded waits
//! that clean up what a hung run left behind.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::processes_with;

/// A test folder, and the TMPDIR lotus gets inside it.
pub struct Scratch {
    dir: tempfile::TempDir,
    /// lotus's TMPDIR.
    pub tmp: PathBuf,
}

impl Scratch {
    /// A fresh folder with an empty `lotus-tmp/` in it.
    pub fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("tmp");
        let tmp = dir.path().join("lotus-tmp");
        fs::create_dir(&tmp).expect("mkdir");
        Scratch { dir, tmp }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes an op file; returns its path.
    pub fn op(&self, name: &str, body: &str) -> PathBuf {
        super::write_op(self.path(), name, body)
    }

    /// `lotus ARGS` with TMPDIR in the scratch folder and both outputs
    /// piped.
    pub fn lotus(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
        cmd.args(args)
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// `lotus ARGS` as [`Self::lotus`], started by `/bin/sh` after the
    /// shell command `setup` (e.g. `ulimit -n 16`).
    pub fn lotus_after(&self, setup: &str, args: &[&str]) -> Command {
        let mut sh = Command::new("/bin/sh");
        sh.arg("-c")
            .arg(format!("{setup} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_lotus"))
            .args(args)
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        sh
    }

    /// Nothing left in lotus's TMPDIR: no harness folder, result file,
    /// fifo or pipe.
    pub fn assert_tmp_empty(&self) {
        let left: Vec<_> = fs::read_dir(&self.tmp)
            .expect("list")
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
    }
}

/// A name no other process has in its command line.
pub fn marker(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("lotus_faults_{what}_{}_{nanos}", std::process::id())
}

fn describe(pids: &[u32]) -> Vec<String> {
    pids.iter()
        .map(|pid| {
            let c = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            format!("{pid}: {}", String::from_utf8_lossy(&c).replace('\0', " "))
        })
        .collect()
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid and a signal number.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Waits for `child` with its output; after `limit`, kills it and every
/// process with `needle` in its command line (they may hold its pipes,
/// which would keep the wait from ending), then fails the test saying what
/// was left.
pub fn wait_bounded(child: Child, limit: Duration, needle: &str) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            kill(pid, libc::SIGKILL);
            let strays = processes_with(needle);
            let described = describe(&strays);
            for p in strays {
                kill(p, libc::SIGKILL);
            }
            let out = rx.recv_timeout(Duration::from_secs(10));
            panic!(
                "lotus did not finish within {limit:?}; left running: {described:#?}; stderr: {}",
                out.ok()
                    .and_then(Result::ok)
                    .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default()
            );
        }
    }
}

/// Waits until no process has `needle` in its command line (a killed
/// process may take a moment to be reaped, longer on a busy machine);
/// after 60 s kills them and fails the test (a bound against waiting
/// forever, not a speed test).
pub fn assert_no_processes(needle: &str) {
    let start = Instant::now();
    loop {
        let left = processes_with(needle);
        if left.is_empty() {
            return;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let described = describe(&left);
            for p in left {
                kill(p, libc::SIGKILL);
            }
            panic!("stray processes: {described:#?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
