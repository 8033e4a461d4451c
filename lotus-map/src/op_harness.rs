//! The op harness (documented where it is public: [`crate::harness`]).

// This module is the harness's whole contract (every result field, every
// exit code); a caller reads only part of it.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The harness script's source.
const HARNESS_PY: &str = lotus_tracer::HARNESS_PY;
/// The `lotus` Python module's source.
const LOTUS_PY: &str = lotus_tracer::LOTUS_PY;

/// Script mode: the one op name whose windows the harness opens (the
/// others' `lotus.resume` / `lotus.pause` do nothing).
pub const ENV_ONLY_OP: &str = "LOTUS_HARNESS_ONLY_OP";
/// The variable that names the control library for `lotus.py`.
pub const ENV_CONTROL_LIB: &str = "LOTUS_CONTROL_LIB";
/// The control library's file name.
pub const CONTROL_LIBRARY: &str = "liblotus_control.so";

/// Harness exit code: done.
pub const EXIT_OK: i32 = 0;
/// Harness exit code: the harness itself failed (a bug, or bad arguments
/// rejected after parsing).
pub const EXIT_HARNESS: i32 = 1;
/// Harness exit code: the op file cannot be read or has a syntax error
/// (also argparse's code for bad arguments).
pub const EXIT_BAD_FILE: i32 = 2;
/// Harness exit code: the op file raised (import, setup, warm-up, window,
/// script).
pub const EXIT_OP_RAISED: i32 = 3;
/// Harness exit code: the control library failed (resume or pause refused,
/// library not loadable).
pub const EXIT_CONTROL: i32 = 4;

/// The harness files written for one run; the folder is removed on drop.
#[derive(Debug)]
#[non_exhaustive]
pub struct HarnessFiles {
    /// The private folder (0700) holding `lotus_harness.py` and
    /// `lotus.py`.
    pub dir: lotus_sys::PrivateDir,
    /// `lotus_harness.py` in `dir`: the script to run with Python.
    pub harness: PathBuf,
}

/// The prefix of harness folders' names.
const FOLDER_PREFIX: &str = "lotus-harness-";

/// Writes the harness and the `lotus` module into a fresh private folder
/// (mode 0700, in a `TMPDIR` that passes the trust check, refused
/// otherwise: the job runs what is there). Folders left by a lotus that
/// was killed (SIGKILL cannot be caught) are removed first.
pub fn write_harness() -> std::io::Result<HarnessFiles> {
    let dir = lotus_sys::PrivateDir::new(FOLDER_PREFIX)?;
    let harness = dir.write(Path::new("lotus_harness.py"), HARNESS_PY.as_bytes())?;
    dir.write(Path::new("lotus.py"), LOTUS_PY.as_bytes())?;
    Ok(HarnessFiles { dir, harness })
}

/// The control library `$LOTUS_CONTROL_LIB` names, when it names a file:
/// the user's explicit choice (a library under development), used as
/// given like PATH; it wins over a carried copy.
pub fn named_control_library() -> Option<PathBuf> {
    std::env::var_os(ENV_CONTROL_LIB)
        .map(PathBuf::from)
        .filter(|path| path.is_file())
}

/// The control library for a run whose private folder is `private_dir`:
/// [`named_control_library`], else `carried` (the copy a binary carries)
/// written there by [`write_control_library`].
pub fn control_library_for_run(
    private_dir: &Path,
    carried: &[u8],
) -> Result<PathBuf, crate::MapError> {
    match named_control_library() {
        Some(path) => Ok(path),
        None => write_control_library(private_dir, carried),
    }
}

/// Writes a control library (`bytes`, e.g. the copy a binary carries) into
/// the private folder `dir` as [`CONTROL_LIBRARY`], created with
/// `O_CREAT|O_EXCL|O_NOFOLLOW` and mode 0500 so that nothing already there
/// is written through, and checks the result can be trusted (every folder
/// above it too): the profiled processes load it, as root when lotus runs
/// as root.
pub fn write_control_library(dir: &Path, bytes: &[u8]) -> Result<PathBuf, crate::MapError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = dir.join(CONTROL_LIBRARY);
    let write = || -> std::io::Result<()> {
        // Read and execute for the owner only: the profiled processes run
        // as this user.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o500)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        file.write_all(bytes)
    };
    write().map_err(|source| crate::MapError::ControlLibraryWrite {
        path: path.clone(),
        source,
    })?;
    lotus_sys::trust::check_file(&path).map_err(crate::MapError::ControlLibraryUntrusted)?;
    Ok(path)
}

/// The harness's command-line settings for one op run.
#[derive(Debug, Clone)]
pub struct HarnessArgs {
    /// The op file.
    pub op_file: PathBuf,
    /// Op calls before the window opens.
    pub warmup: u32,
    /// Least time the window stays open.
    pub window: Duration,
    /// Least op calls inside the window.
    pub min_iterations: u64,
    /// Where the harness writes its [`HarnessResult`].
    pub result: PathBuf,
    /// Measure an op that does nothing (the harness's floor).
    pub empty: bool,
    /// The op's name, instead of the file's `NAME` or stem.
    pub name: Option<String>,
    /// `torch.set_num_threads` for an op that imports torch (`None`:
    /// torch's own choice, from `OMP_NUM_THREADS`).
    pub threads: Option<u32>,
    /// The folder the op runs in (absolute), instead of the op file's
    /// folder (`lotus map --cwd`); the op's folder stays on `sys.path`.
    pub cwd: Option<PathBuf>,
    /// Fork server: import the op once and make this many runs, each in a
    /// child forked before the op's first call (run K writes its result
    /// to `<result>.K`); a script or program declines (`server: false`).
    pub runs: Option<u32>,
    /// Fork server: how long one run may take before it is stopped.
    pub run_timeout: Option<Duration>,
    /// Op mode: after the window, call the op with sampling stopped for
    /// this much CPU time, timing the calls (the reference for what
    /// sampling costs each call).
    pub unsampled: Option<Duration>,
}

impl HarnessArgs {
    /// The arguments that follow the harness script's path.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--op-file".into(),
            self.op_file.clone().into(),
            "--warmup".into(),
            self.warmup.to_string().into(),
            "--window-ms".into(),
            format!("{}", self.window.as_secs_f64() * 1000.0).into(),
            "--min-iterations".into(),
            self.min_iterations.to_string().into(),
            "--result".into(),
            self.result.clone().into(),
        ];
        if self.empty {
            args.push("--empty".into());
        }
        if let Some(name) = &self.name {
            args.push("--name".into());
            args.push(name.into());
        }
        if let Some(threads) = self.threads {
            args.push("--threads".into());
            args.push(threads.to_string().into());
        }
        if let Some(cwd) = &self.cwd {
            args.push("--cwd".into());
            args.push(cwd.into());
        }
        if let Some(runs) = self.runs {
            args.push("--runs".into());
            args.push(runs.to_string().into());
        }
        if let Some(limit) = self.run_timeout {
            args.push("--run-timeout".into());
            args.push(format!("{}", limit.as_secs_f64()).into());
        }
        if let Some(unsampled) = self.unsampled {
            args.push("--unsampled-ms".into());
            args.push(format!("{}", unsampled.as_secs_f64() * 1000.0).into());
        }
        args
    }
}

/// How the harness ran the op file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HarnessMode {
    /// The file defines `op`: the harness looped it in one window.
    Op,
    /// The file has no `op`: it ran as a script with its own windows.
    Script,
}

/// Where a harness run failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HarnessStage {
    /// Reading the op file.
    Read,
    /// Parsing it (a syntax error).
    Parse,
    /// Importing it (its top-level code raised).
    Import,
    /// Its `setup()` raised.
    Setup,
    /// An op call during warm-up raised.
    Warmup,
    /// An op call inside the window raised.
    Window,
    /// The script (script mode) raised or exited non-zero.
    Script,
    /// The control library failed.
    Control,
    /// The run was interrupted (SIGINT).
    Interrupted,
    /// A stage this version does not know.
    #[serde(other)]
    Other,
}

/// What the harness wrote to its result file.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct HarnessResult {
    /// The op's name: `--name`, the file's `NAME`, or its stem.
    pub name: String,
    /// How the file ran; absent when it could not be parsed.
    #[serde(default)]
    pub mode: Option<HarnessMode>,
    /// The Python process's id.
    pub pid: u32,
    /// The op file (absolute).
    #[serde(default)]
    pub op_file: Option<PathBuf>,
    /// Op calls inside the window (op mode).
    #[serde(default)]
    pub iterations: Option<u64>,
    /// Time between the window opening and closing, in ns (op mode); in
    /// script mode summed over the windows opened through the `lotus`
    /// module (not those ITT opens through the collector).
    #[serde(default)]
    pub window_ns: Option<u64>,
    /// Op calls before the window (op mode).
    #[serde(default)]
    pub warmup: Option<u32>,
    /// Time `setup()` took, in ns (op mode).
    #[serde(default)]
    pub setup_ns: Option<u64>,
    /// The failure: a message, or the Python traceback.
    #[serde(default)]
    pub error: Option<String>,
    /// Where it failed.
    #[serde(default)]
    pub stage: Option<HarnessStage>,
    /// Script mode: the op file is a native program the harness ran (its
    /// windows go to lotus through the control library, unseen by the
    /// harness).
    #[serde(default)]
    pub program: bool,
    /// Script mode: the names the script gave `lotus.resume` (`""` when
    /// it gave none), in the order first seen, with the windows each.
    #[serde(default)]
    pub windows: Vec<(String, u64)>,
    /// Fork server: `true` when it made the runs (see `runs_made`),
    /// `false` when the file is a script or program, which it leaves to
    /// one process per run; absent without `--runs`.
    #[serde(default)]
    pub server: Option<bool>,
    /// Fork server: the runs it started (the last may have failed).
    #[serde(default)]
    pub runs_made: Option<u32>,
    /// A fork server's run whose process exited with this status without
    /// writing its result.
    #[serde(default)]
    pub child_exit: Option<i32>,
    /// A fork server's run whose process was killed by this signal.
    #[serde(default)]
    pub child_signal: Option<i32>,
    /// A fork server's run still going at `--run-timeout` (it was stopped).
    #[serde(default)]
    pub child_timeout: bool,
    /// Op mode with `--unsampled-ms`: the calls timed with sampling
    /// stopped.
    #[serde(default)]
    pub unsampled: Option<UnsampledResult>,
    /// Why lotus could not stop sampling for those calls.
    #[serde(default)]
    pub unsampled_error: Option<String>,
}

/// The harness's calls with sampling stopped ([`HarnessResult::unsampled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct UnsampledResult {
    /// Calls made.
    pub calls: u64,
    /// Wall-clock time they took, in ns.
    pub wall_ns: u64,
    /// The process's CPU time meanwhile, in ns.
    pub cpu_ns: u64,
}

impl HarnessResult {
    /// Reads a result file; the error names the file.
    pub fn read(path: &Path) -> std::io::Result<HarnessResult> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            std::io::Error::new(e.kind(), format!("harness result {}: {e}", path.display()))
        })?;
        serde_json::from_str(&text).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("harness result {}: {e}", path.display()),
            )
        })
    }

    /// Mean time per op call inside the window, in ns (op mode).
    pub fn ns_per_iteration(&self) -> Option<f64> {
        match (self.window_ns, self.iterations) {
            (Some(ns), Some(n)) if n > 0 => Some(ns as f64 / n as f64),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_carry_every_setting() {
        let args = HarnessArgs {
            op_file: "ops/Crop.py".into(),
            warmup: 3,
            window: Duration::from_millis(1500),
            min_iterations: 10,
            result: "r.json".into(),
            empty: true,
            name: Some("Crop2".into()),
            threads: Some(1),
            cwd: Some("/repo".into()),
            runs: None,
            run_timeout: None,
            unsampled: Some(Duration::from_millis(25)),
        };
        let args: Vec<String> = args
            .to_args()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "--op-file",
                "ops/Crop.py",
                "--warmup",
                "3",
                "--window-ms",
                "1500",
                "--min-iterations",
                "10",
                "--result",
                "r.json",
                "--empty",
                "--name",
                "Crop2",
                "--threads",
                "1",
                "--cwd",
                "/repo",
                "--unsampled-ms",
                "25"
            ]
        );
    }

    #[test]
    fn results_parse_with_and_without_errors() {
        let ok: HarnessResult = serde_json::from_str(
            r#"{"name": "Crop", "mode": "op", "iterations": 10, "window_ns": 2000, "warmup": 3,
                "setup_ns": 5, "pid": 42, "op_file": "/ops/Crop.py", "extra": true}"#,
        )
        .expect("op result");
        assert_eq!(ok.mode, Some(HarnessMode::Op));
        assert_eq!(ok.ns_per_iteration(), Some(200.0));
        assert_eq!(ok.unsampled, None);
        let timed: HarnessResult = serde_json::from_str(
            r#"{"name": "Crop", "mode": "op", "pid": 42,
                "unsampled": {"calls": 7, "wall_ns": 900, "cpu_ns": 800}}"#,
        )
        .expect("op result with unsampled calls");
        assert_eq!(
            timed.unsampled,
            Some(UnsampledResult {
                calls: 7,
                wall_ns: 900,
                cpu_ns: 800
            })
        );
        let failed: HarnessResult = serde_json::from_str(
            r#"{"name": "Crop", "pid": 42, "error": "Traceback ...", "stage": "parse"}"#,
        )
        .expect("failed result");
        assert_eq!(failed.stage, Some(HarnessStage::Parse));
        assert_eq!(failed.mode, None);
        let unknown: HarnessResult = serde_json::from_str(
            r#"{"name": "Crop", "pid": 42, "error": "?", "stage": "teardown"}"#,
        )
        .expect("unknown stage");
        assert_eq!(unknown.stage, Some(HarnessStage::Other));
    }
}
